//! The second-level check cache.
//!
//! A verdict depends only on the attributes its evaluation read: the same values for those
//! reads give the same evaluation path, the same instances and the same handler calls. The
//! cache therefore keys a verdict by exactly those reads (Mixer's referenced attributes):
//! present values, absent names, map keys. An attribute the decision did not read does not
//! split the cache; one it did read does.
//!
//! The set of reads is only known after evaluating, so the cache keeps the distinct read sets
//! ("shapes") it has seen; a lookup builds the key of the request under each shape. A config
//! has few shapes (one per distinct path through its rules).
//!
//! Entries honour the verdict's valid duration and use count (the minimum over the handlers
//! consulted), the cache is bounded in entries, each snapshot has its own (so a config change
//! starts empty), and concurrent misses for identical requests share one evaluation.
//!
//! With a shared tier ([`crate::SharedTier`], `--shared-cache`) a miss here asks it before
//! evaluating. A verdict found there is kept here for no longer than its life there (capped),
//! with only the uses leased from it; a verdict evaluated here is offered to it, and one
//! whose use count is a limit is then counted there only, so that the limit holds across
//! every replica.
//!
//! This module is the storage: entries by shape and key, the shapes seen, the misses in
//! flight. The check pipeline's cache stage ([`crate::check`]) decides what goes in and out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use mixer_model::{AttrId, Bag, Value, Verdict};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::decision::Undecided;
use crate::metrics::RuntimeMetrics;
use crate::shared_tier::SharedTierRef;

/// Cache settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheOptions {
    /// Most verdicts kept; 0 turns the cache off.
    pub max_entries: u64,
    /// Most distinct read sets tracked; verdicts of further shapes are not cached.
    pub max_shapes: usize,
}

impl Default for CacheOptions {
    fn default() -> CacheOptions {
        CacheOptions {
            max_entries: 10_000,
            max_shapes: 256,
        }
    }
}

type Read = (AttrId, Option<Arc<str>>);

struct Entry {
    verdict: Arc<Verdict>,
    expires: Instant,
    uses_left: AtomicI64,
    /// The shared entry its uses were leased from, to give back those left at expiry.
    lease: Option<Arc<[u8]>>,
}

/// How a coalesced miss was decided.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Filled {
    /// Evaluated here.
    Evaluated,
    /// Found in the shared tier.
    Shared,
}

pub(crate) type Inflight = Arc<OnceCell<Result<(Arc<Verdict>, Filled), Undecided>>>;

/// One snapshot's verdict cache.
pub(crate) struct VerdictCache {
    entries: moka::sync::Cache<Vec<u8>, Arc<Entry>>,
    shapes: RwLock<Vec<Arc<[Read]>>>,
    pub(crate) inflight: Mutex<HashMap<Vec<u8>, Inflight>>,
    max_shapes: usize,
    metrics: RuntimeMetrics,
    pub(crate) shared: Option<SharedTierRef>,
}

impl VerdictCache {
    pub(crate) fn new(
        options: CacheOptions,
        metrics: &RuntimeMetrics,
        shared: Option<SharedTierRef>,
    ) -> Option<VerdictCache> {
        if options.max_entries == 0 {
            return None;
        }
        let evictions = metrics.cache_evictions.clone();
        let entries = moka::sync::Cache::builder()
            .max_capacity(options.max_entries)
            .eviction_listener(move |_k, _v, cause| {
                if cause == moka::notification::RemovalCause::Size {
                    evictions.inc();
                }
            })
            .build();
        Some(VerdictCache {
            entries,
            shapes: RwLock::new(Vec::new()),
            inflight: Mutex::new(HashMap::new()),
            max_shapes: options.max_shapes,
            metrics: metrics.clone(),
            shared,
        })
    }

    pub(crate) fn lookup(&self, bag: &dyn Bag) -> Option<Arc<Verdict>> {
        // Looked up under the read lock: copying the shape list would allocate on every check.
        let shapes = self.shapes.read().ok()?;
        let now = Instant::now();
        let mut key = Vec::with_capacity(128);
        for (i, shape) in shapes.iter().enumerate() {
            key.clear();
            key.extend_from_slice(&(i as u32).to_le_bytes());
            encode_reads(bag, shape, &mut key);
            let Some(entry) = self.entries.get(&key) else {
                continue;
            };
            if now < entry.expires && entry.uses_left.fetch_sub(1, Ordering::Relaxed) > 0 {
                return Some(entry.verdict.clone());
            }
            // Uses leased from the shared tier and not served go back there; swapped out
            // so that two lookups seeing the expiry at once cannot both give them back.
            if let (Some(lease), Some(shared)) = (&entry.lease, &self.shared) {
                let left = entry.uses_left.swap(0, Ordering::Relaxed);
                if left > 0 {
                    shared.0.give_back(lease.clone(), left);
                }
            }
            self.entries.invalidate(&key);
        }
        None
    }

    /// Keeps `verdict` for its own validity.
    pub(crate) fn insert(&self, bag: &dyn Bag, verdict: &Arc<Verdict>) {
        self.insert_for(
            bag,
            verdict,
            verdict.valid_duration,
            i64::from(verdict.valid_use_count),
            None,
        );
    }

    /// Keeps `verdict` for `life` and `uses`, leased from the shared entry `lease` if any.
    pub(crate) fn insert_for(
        &self,
        bag: &dyn Bag,
        verdict: &Arc<Verdict>,
        life: std::time::Duration,
        uses: i64,
        lease: Option<Arc<[u8]>>,
    ) {
        let reads: Vec<Read> = verdict
            .referenced
            .iter()
            .map(|r| (r.attr, r.map_key.clone()))
            .collect();
        let shape_id = {
            let Ok(mut shapes) = self.shapes.write() else {
                return;
            };
            match shapes.iter().position(|s| s.as_ref() == reads.as_slice()) {
                Some(i) => i,
                None if shapes.len() < self.max_shapes => {
                    shapes.push(reads.into());
                    shapes.len() - 1
                }
                None => return,
            }
        };
        let Some(shape) = self
            .shapes
            .read()
            .ok()
            .and_then(|s| s.get(shape_id).cloned())
        else {
            return;
        };
        let mut key = Vec::with_capacity(128);
        key.extend_from_slice(&(shape_id as u32).to_le_bytes());
        encode_reads(bag, &shape, &mut key);
        self.entries.insert(
            key,
            Arc::new(Entry {
                verdict: verdict.clone(),
                expires: Instant::now() + life,
                uses_left: AtomicI64::new(uses),
                lease,
            }),
        );
        self.metrics
            .cache_entries
            .set(i64::try_from(self.entries.entry_count()).unwrap_or(i64::MAX));
    }

    pub(crate) fn invalidate_all(&self) {
        self.entries.invalidate_all();
    }

    pub(crate) fn len(&self) -> u64 {
        self.entries.run_pending_tasks();
        self.entries.entry_count()
    }
}

fn encode_reads(bag: &dyn Bag, reads: &[Read], out: &mut Vec<u8>) {
    for (attr, key) in reads {
        match (bag.get(*attr), key) {
            (None, _) => out.push(0),
            (Some(Value::StringMap(map)), Some(k)) => match map.get(k) {
                Some(v) => {
                    out.push(1);
                    encode_str(v, out);
                }
                None => out.push(2),
            },
            (Some(v), _) => {
                out.push(3);
                encode_value(v, out);
            }
        }
    }
}

pub(crate) fn encode_bag(bag: &dyn Bag, attrs: usize, out: &mut Vec<u8>) {
    for i in 0..attrs {
        let id = AttrId(i as u32);
        if let Some(v) = bag.get(id) {
            out.extend_from_slice(&id.0.to_le_bytes());
            encode_value(v, out);
        }
    }
}

fn encode_str(s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// An unambiguous byte encoding of a value: a type tag, then fixed-size or length-prefixed
/// data. The in-process cache keys on it, and the shared tier hashes it into its Redis keys.
pub fn encode_value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::String(s) => {
            out.push(1);
            encode_str(s, out);
        }
        Value::Int64(i) => {
            out.push(2);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Double(d) => {
            out.push(3);
            out.extend_from_slice(&d.to_bits().to_le_bytes());
        }
        Value::Bool(b) => out.extend_from_slice(&[4, u8::from(*b)]),
        Value::Timestamp(t) => {
            out.push(5);
            out.extend_from_slice(&t.0.to_le_bytes());
        }
        Value::Duration(d) => {
            out.push(6);
            out.extend_from_slice(&d.0.to_le_bytes());
        }
        Value::Bytes(b) => {
            out.push(7);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        Value::IpAddress(std::net::IpAddr::V4(ip)) => {
            out.push(8);
            out.extend_from_slice(&ip.octets());
        }
        Value::IpAddress(std::net::IpAddr::V6(ip)) => {
            out.push(9);
            out.extend_from_slice(&ip.octets());
        }
        Value::EmailAddress(s) => {
            out.push(10);
            encode_str(s, out);
        }
        Value::Uri(s) => {
            out.push(11);
            encode_str(s, out);
        }
        Value::DnsName(s) => {
            out.push(12);
            encode_str(s, out);
        }
        Value::StringMap(m) => {
            out.push(13);
            out.extend_from_slice(&(m.len() as u32).to_le_bytes());
            for (k, v) in m.iter() {
                encode_str(k, out);
                encode_str(v, out);
            }
        }
    }
}
