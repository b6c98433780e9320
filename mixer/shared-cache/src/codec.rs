//! How the shared tier names and stores a verdict.
//!
//! A **shape** is the list of reads a decision made (attribute names, with the map key for a
//! read of one entry), as text, so that replicas agree on it whatever their attribute ids.
//! An **entry key** is the SHA-256 of the shape and, for each read, whether it was there and
//! its typed value, so two requests share an entry only when every read gives the same
//! answer (absent names and absent map keys included). A **verdict** is stored as a small
//! length-prefixed binary record, its reads by name.
//!
//! Every length is a u32 prefix and every value carries a type tag, so no two different
//! inputs encode alike.

use std::sync::Arc;
use std::time::Duration;

use mixer_model::{
    Bag, Code, DryRunOutcome, HeaderOp, HeaderOperation, Presence, Reference, ReferencedAttributes,
    Status, Value, Verdict, Vocabulary, WouldBe,
};
use sha2::{Digest, Sha256};

/// One read of a shape: attribute name and map key.
pub type Read = (String, Option<String>);

/// The reads of a verdict, by name, in the order recorded.
pub fn shape_of(verdict: &Verdict, vocabulary: &Vocabulary) -> Vec<Read> {
    verdict
        .referenced
        .iter()
        .map(|r| {
            (
                vocabulary.name(r.attr).to_string(),
                r.map_key.as_deref().map(str::to_string),
            )
        })
        .collect()
}

/// A shape as the bytes stored in the generation's shape set.
pub fn encode_shape(shape: &[Read]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&(shape.len() as u32).to_le_bytes());
    for (name, key) in shape {
        put_str(name, &mut out);
        match key {
            None => out.push(0),
            Some(k) => {
                out.push(1);
                put_str(k, &mut out);
            }
        }
    }
    out
}

/// The shape of [`encode_shape`]; `None` for bytes it did not write.
pub fn decode_shape(bytes: &[u8]) -> Option<Vec<Read>> {
    let mut r = Reader(bytes);
    let n = r.u32()?;
    let mut shape = Vec::with_capacity(n.min(1024) as usize);
    for _ in 0..n {
        let name = r.str()?.to_string();
        let key = match r.u8()? {
            0 => None,
            1 => Some(r.str()?.to_string()),
            _ => return None,
        };
        shape.push((name, key));
    }
    r.0.is_empty().then_some(shape)
}

/// The entry key of `bag` under `shape` (its encoded form `shape_bytes`): SHA-256 of both;
/// `None` when the shape reads an attribute this vocabulary does not have (it cannot be this
/// config's).
pub fn entry_key(
    shape: &[Read],
    shape_bytes: &[u8],
    vocabulary: &Vocabulary,
    bag: &dyn Bag,
) -> Option<[u8; 32]> {
    let mut out = Vec::with_capacity(256);
    put_bytes(shape_bytes, &mut out);
    for (name, key) in shape {
        let id = vocabulary.lookup(name)?;
        match (bag.get(id), key) {
            (None, _) => out.push(0),
            (Some(Value::StringMap(map)), Some(k)) => match map.get(k) {
                Some(v) => {
                    out.push(1);
                    put_str(v, &mut out);
                }
                None => out.push(2),
            },
            // A map key read of a value that is not a map: recorded as the whole value.
            (Some(v), _) => {
                out.push(3);
                mixer_runtime::encode_value(v, &mut out);
            }
        }
    }
    Some(Sha256::digest(&out).into())
}

/// The verdict as stored.
pub fn encode_verdict(verdict: &Verdict, vocabulary: &Vocabulary) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.push(1); // format
    out.extend_from_slice(&(verdict.status.code as i32).to_le_bytes());
    put_str(&verdict.status.message, &mut out);
    match &verdict.denied_by {
        None => out.push(0),
        Some(h) => {
            out.push(1);
            put_str(h, &mut out);
        }
    }
    let micros = u64::try_from(verdict.valid_duration.as_micros()).unwrap_or(u64::MAX);
    out.extend_from_slice(&micros.to_le_bytes());
    out.extend_from_slice(&verdict.valid_use_count.to_le_bytes());
    let refs: Vec<&Reference> = verdict.referenced.iter().collect();
    out.extend_from_slice(&(refs.len() as u32).to_le_bytes());
    for r in refs {
        put_str(vocabulary.name(r.attr), &mut out);
        match &r.map_key {
            None => out.push(0),
            Some(k) => {
                out.push(1);
                put_str(k, &mut out);
            }
        }
        out.push(u8::from(r.presence == Presence::Absent));
    }
    out.extend_from_slice(&(verdict.matched_rules.len() as u32).to_le_bytes());
    for rule in &verdict.matched_rules {
        put_str(rule, &mut out);
    }
    for ops in [&verdict.request_header_ops, &verdict.response_header_ops] {
        out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
        for op in ops {
            out.push(match op.op {
                HeaderOp::Replace => 0,
                HeaderOp::Append => 1,
                HeaderOp::Remove => 2,
            });
            put_str(&op.name, &mut out);
            put_str(&op.value, &mut out);
        }
    }
    // Dry-run outcomes go last and only when there are any, so a verdict without them is
    // stored as before; a replica that predates them reads such a record as not its own
    // (a miss), never as a verdict without them.
    if !verdict.dry_run.is_empty() {
        out.extend_from_slice(&(verdict.dry_run.len() as u32).to_le_bytes());
        for d in &verdict.dry_run {
            put_str(&d.rule, &mut out);
            out.push(match d.would_be {
                WouldBe::Allow => 0,
                WouldBe::Deny => 1,
                WouldBe::Error => 2,
            });
            out.extend_from_slice(&(d.status.code as i32).to_le_bytes());
            put_str(&d.status.message, &mut out);
        }
    }
    out
}

/// The verdict of [`encode_verdict`], its reads resolved in `vocabulary`; `None` for bytes
/// it did not write or a read this vocabulary does not have.
pub fn decode_verdict(bytes: &[u8], vocabulary: &Vocabulary) -> Option<Verdict> {
    let mut r = Reader(bytes);
    if r.u8()? != 1 {
        return None;
    }
    let code = Code::from_i32(r.i32()?);
    let message = r.str()?.to_string();
    let denied_by = match r.u8()? {
        0 => None,
        1 => Some(Arc::from(r.str()?)),
        _ => return None,
    };
    let valid_duration = Duration::from_micros(r.u64()?);
    let valid_use_count = r.i32()?;
    let mut referenced = ReferencedAttributes::new();
    for _ in 0..r.u32()? {
        let attr = vocabulary.lookup(r.str()?)?;
        let key = match r.u8()? {
            0 => None,
            1 => Some(Arc::<str>::from(r.str()?)),
            _ => return None,
        };
        let presence = match r.u8()? {
            0 => Presence::Exact,
            1 => Presence::Absent,
            _ => return None,
        };
        match key {
            None => referenced.record(attr, presence),
            Some(k) => referenced.record_key(attr, k, presence),
        }
    }
    let mut matched_rules = Vec::new();
    for _ in 0..r.u32()? {
        matched_rules.push(Arc::from(r.str()?));
    }
    let mut header_ops = [Vec::new(), Vec::new()];
    for ops in &mut header_ops {
        for _ in 0..r.u32()? {
            let op = match r.u8()? {
                0 => HeaderOp::Replace,
                1 => HeaderOp::Append,
                2 => HeaderOp::Remove,
                _ => return None,
            };
            let name = r.str()?.to_string();
            let value = r.str()?.to_string();
            ops.push(HeaderOperation { name, value, op });
        }
    }
    let mut dry_run = Vec::new();
    if !r.0.is_empty() {
        // Written only when there are some: a count of 0 is not a record of ours.
        let n = r.u32()?;
        if n == 0 {
            return None;
        }
        for _ in 0..n {
            let rule = Arc::from(r.str()?);
            let would_be = match r.u8()? {
                0 => WouldBe::Allow,
                1 => WouldBe::Deny,
                2 => WouldBe::Error,
                _ => return None,
            };
            let code = Code::from_i32(r.i32()?);
            let message = r.str()?.to_string();
            dry_run.push(DryRunOutcome {
                rule,
                would_be,
                status: Status { code, message },
            });
        }
    }
    if !r.0.is_empty() {
        return None;
    }
    let [request_header_ops, response_header_ops] = header_ops;
    Some(Verdict {
        status: Status { code, message },
        denied_by,
        valid_duration,
        valid_use_count,
        referenced,
        matched_rules,
        request_header_ops,
        response_header_ops,
        dry_run,
        // A verdict with a failure is never stored (see `Verdict::failed_open`).
        failed_open: Vec::new(),
    })
}

fn put_str(s: &str, out: &mut Vec<u8>) {
    put_bytes(s.as_bytes(), out);
}

fn put_bytes(b: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)?.try_into().ok().map(u32::from_le_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take(4)?.try_into().ok().map(i32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)?.try_into().ok().map(u64::from_le_bytes)
    }
    fn str(&mut self) -> Option<&'a str> {
        let n = self.u32()? as usize;
        std::str::from_utf8(self.take(n)?).ok()
    }
}
