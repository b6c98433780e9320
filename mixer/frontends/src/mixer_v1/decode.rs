//! `CompressedAttributes` → attribute bag (server side), and the reverse for clients, tests
//! and load generators.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;

use mixer_model::{
    AttrId, AttributeBag, Duration, StringMap, Timestamp, Value, ValueType, Vocabulary,
};
use mixer_proto::istio::mixer::v1 as pb;

use super::dictionary::{WordEncoder, global_ids, lookup};

/// Why a `CompressedAttributes` message cannot become a bag. Answered with INVALID_ARGUMENT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// A word index names no word.
    BadIndex {
        /// The index.
        index: i32,
        /// What it was used for (`attribute name`, `value of source.name`, ...).
        role: String,
        /// Words in the message dictionary.
        message_words: usize,
    },
    /// The same attribute appears twice (in two of the typed maps).
    Duplicate(String),
    /// A value that does not fit the attribute's declared type, or cannot be represented.
    BadValue {
        /// The attribute.
        name: String,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::BadIndex { index, role, .. } if *index >= 0 => write!(
                f,
                "word index {index} ({role}) is beyond the global dictionary ({} words)",
                super::dictionary::GLOBAL_WORD_COUNT
            ),
            DecodeError::BadIndex {
                index,
                role,
                message_words,
            } => write!(
                f,
                "word index {index} ({role}) is beyond the message dictionary ({message_words} words)"
            ),
            DecodeError::Duplicate(name) => write!(f, "attribute {name:?} is given twice"),
            DecodeError::BadValue { name, reason } => {
                write!(f, "attribute {name:?}: {reason}")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

struct Decoder<'a, W> {
    words: &'a [W],
    vocabulary: Arc<Vocabulary>,
    /// The vocabulary's id of each global word.
    global_ids: Rc<[Option<AttrId>]>,
    /// Declared attributes given so far, a bit per id: every name is checked against it.
    seen: Vec<u64>,
    /// Undeclared names given so far; a fast seeded hash, since names come from the request.
    seen_undeclared: HashSet<&'a str, foldhash::fast::RandomState>,
}

impl<'a, W: AsRef<str>> Decoder<'a, W> {
    fn new(words: &'a [W], vocabulary: &Arc<Vocabulary>) -> Decoder<'a, W> {
        Decoder {
            words,
            vocabulary: vocabulary.clone(),
            global_ids: global_ids(vocabulary),
            seen: vec![0; vocabulary.len().div_ceil(64)],
            seen_undeclared: HashSet::default(),
        }
    }

    fn word(&self, index: i32, role: impl FnOnce() -> String) -> Result<&'a str, DecodeError> {
        lookup(index, self.words).ok_or_else(|| DecodeError::BadIndex {
            index,
            role: role(),
            message_words: self.words.len(),
        })
    }

    /// The name at `index` and its id when declared; an error when given before.
    fn name(&mut self, index: i32) -> Result<(&'a str, Option<AttrId>), DecodeError> {
        let name = self.word(index, || "attribute name".to_string())?;
        let id = match usize::try_from(index) {
            Ok(global) => self.global_ids.get(global).copied().flatten(),
            Err(_) => self.vocabulary.lookup(name),
        };
        let again = match id {
            Some(id) => {
                let (word, bit) = (id.index() / 64, 1u64 << (id.index() % 64));
                match self.seen.get_mut(word) {
                    Some(w) => std::mem::replace(w, *w | bit) & bit != 0,
                    None => false,
                }
            }
            None => !self.seen_undeclared.insert(name),
        };
        if again {
            return Err(DecodeError::Duplicate(name.to_string()));
        }
        Ok((name, id))
    }
}

/// Decodes `attributes` into `bag`, on top of what the bag holds (a delta when the bag is not
/// empty). `message_words` is the dictionary negative indices refer to: the message's own
/// `words`, or a report's `default_words` when the record has none.
///
/// Every index is checked (global words: our whole list, as Istio's server looks them up;
/// message words: `message_words`); names and values go in with [`AttributeBag::set`], which
/// converts strings to the declared type. Bytes for an `IP_ADDRESS` attribute (4 or 16 octets,
/// as Envoy sends addresses) become the address. The first problem found is returned; the bag
/// may then hold part of the message.
pub fn decode_into(
    attributes: &pb::CompressedAttributes,
    message_words: &[String],
    bag: &mut AttributeBag,
) -> Result<(), DecodeError> {
    decode_keeping(attributes, message_words, bag, |_| true)
}

/// [`decode_into`], keeping in the bag only the attributes `keep` says yes to (by id; `None`
/// for an undeclared one). The others are checked all the same (indices, duplicates, types), so a message is refused
/// exactly when [`decode_into`] refuses it; their values are just not built.
pub fn decode_keeping(
    attributes: &pb::CompressedAttributes,
    message_words: &[String],
    bag: &mut AttributeBag,
    keep: impl Fn(Option<AttrId>) -> bool,
) -> Result<(), DecodeError> {
    decode_from(attributes, message_words, bag, keep)
}

/// The typed maps of a `CompressedAttributes`, each in key order with one entry per key: the
/// generated message, or one read where it lies ([`super::wire`]).
pub(crate) trait Compressed {
    fn strings(&self) -> impl Iterator<Item = (i32, i32)>;
    fn int64s(&self) -> impl Iterator<Item = (i32, i64)>;
    fn doubles(&self) -> impl Iterator<Item = (i32, f64)>;
    fn bools(&self) -> impl Iterator<Item = (i32, bool)>;
    /// Seconds and nanoseconds.
    fn timestamps(&self) -> impl Iterator<Item = (i32, (i64, i32))>;
    /// Seconds and nanoseconds.
    fn durations(&self) -> impl Iterator<Item = (i32, (i64, i32))>;
    fn bytes(&self) -> impl Iterator<Item = (i32, &[u8])>;
    fn string_maps(&self)
    -> impl Iterator<Item = (i32, impl ExactSizeIterator<Item = (i32, i32)>)>;

    /// How many attributes the message holds, each entry of a string map counted as one:
    /// what `--max-attributes` bounds.
    fn attribute_count(&self) -> usize {
        self.strings().count()
            + self.int64s().count()
            + self.doubles().count()
            + self.bools().count()
            + self.timestamps().count()
            + self.durations().count()
            + self.bytes().count()
            + self.string_maps().map(|(_, m)| m.len()).sum::<usize>()
    }
}

impl Compressed for pb::CompressedAttributes {
    fn strings(&self) -> impl Iterator<Item = (i32, i32)> {
        self.strings.iter().map(|(&k, &v)| (k, v))
    }
    fn int64s(&self) -> impl Iterator<Item = (i32, i64)> {
        self.int64s.iter().map(|(&k, &v)| (k, v))
    }
    fn doubles(&self) -> impl Iterator<Item = (i32, f64)> {
        self.doubles.iter().map(|(&k, &v)| (k, v))
    }
    fn bools(&self) -> impl Iterator<Item = (i32, bool)> {
        self.bools.iter().map(|(&k, &v)| (k, v))
    }
    fn timestamps(&self) -> impl Iterator<Item = (i32, (i64, i32))> {
        self.timestamps
            .iter()
            .map(|(&k, t)| (k, (t.seconds, t.nanos)))
    }
    fn durations(&self) -> impl Iterator<Item = (i32, (i64, i32))> {
        self.durations
            .iter()
            .map(|(&k, d)| (k, (d.seconds, d.nanos)))
    }
    fn bytes(&self) -> impl Iterator<Item = (i32, &[u8])> {
        self.bytes.iter().map(|(&k, v)| (k, v.as_slice()))
    }
    fn string_maps(
        &self,
    ) -> impl Iterator<Item = (i32, impl ExactSizeIterator<Item = (i32, i32)>)> {
        self.string_maps
            .iter()
            .map(|(&k, m)| (k, m.entries.iter().map(|(&mk, &mv)| (mk, mv))))
    }
}

/// [`decode_keeping`] for any [`Compressed`] and message dictionary.
pub(crate) fn decode_from<W: AsRef<str>>(
    attributes: &impl Compressed,
    message_words: &[W],
    bag: &mut AttributeBag,
    keep: impl Fn(Option<AttrId>) -> bool,
) -> Result<(), DecodeError> {
    let mut d = Decoder::new(message_words, bag.vocabulary());
    // Where an attribute goes: into the bag, or only checked (declared, not wanted), or
    // nowhere (undeclared, not wanted: no expression can name it).
    let target = |id: Option<AttrId>| match (id, keep(id)) {
        (id, true) => Target::Keep(id),
        (Some(id), false) => Target::Check(id),
        (None, false) => Target::Skip,
    };
    for (k, v) in attributes.strings() {
        let (name, id) = d.name(k)?;
        let value = d.word(v, || format!("value of {name}"))?;
        let to = target(id);
        put(bag, name, to, ValueType::String, Some(value), || {
            Value::from(value)
        })?;
    }
    for (k, v) in attributes.int64s() {
        let (name, id) = d.name(k)?;
        let to = target(id);
        put(bag, name, to, ValueType::Int64, None, || Value::Int64(v))?;
    }
    for (k, v) in attributes.doubles() {
        let (name, id) = d.name(k)?;
        let to = target(id);
        put(bag, name, to, ValueType::Double, None, || Value::Double(v))?;
    }
    for (k, v) in attributes.bools() {
        let (name, id) = d.name(k)?;
        let to = target(id);
        put(bag, name, to, ValueType::Bool, None, || Value::Bool(v))?;
    }
    for (k, (seconds, nanos)) in attributes.timestamps() {
        let (name, id) = d.name(k)?;
        let t = Timestamp::from_parts(seconds, nanos).ok_or_else(|| DecodeError::BadValue {
            name: name.to_string(),
            reason: format!("timestamp {seconds}s {nanos}ns is out of range"),
        })?;
        let to = target(id);
        put(bag, name, to, ValueType::Timestamp, None, || {
            Value::Timestamp(t)
        })?;
    }
    for (k, (seconds, nanos)) in attributes.durations() {
        let (name, id) = d.name(k)?;
        let duration =
            Duration::from_parts(seconds, nanos).ok_or_else(|| DecodeError::BadValue {
                name: name.to_string(),
                reason: format!("duration {seconds}s {nanos}ns is out of range"),
            })?;
        let to = target(id);
        put(bag, name, to, ValueType::Duration, None, || {
            Value::Duration(duration)
        })?;
    }
    for (k, v) in attributes.bytes() {
        let (name, id) = d.name(k)?;
        let to = target(id);
        let declared = match to {
            Target::Keep(Some(id)) | Target::Check(id) => bag.vocabulary().value_type(id),
            _ => None,
        };
        if declared == Some(ValueType::IpAddress) {
            let ip = ip_from_octets(name, v)?;
            put(bag, name, to, ValueType::IpAddress, None, || {
                Value::IpAddress(ip)
            })?;
        } else {
            put(bag, name, to, ValueType::Bytes, None, || {
                Value::Bytes(v.into())
            })?;
        }
    }
    for (k, entries) in attributes.string_maps() {
        let (name, id) = d.name(k)?;
        let to = target(id);
        if matches!(to, Target::Keep(_)) {
            let mut pairs = Vec::with_capacity(entries.len());
            for (mk, mv) in entries {
                let key = d.word(mk, || format!("key in {name}"))?;
                let value = d.word(mv, || format!("value of {name}[{key:?}]"))?;
                pairs.push((key, value));
            }
            let map = StringMap::from_pairs(pairs);
            put(bag, name, to, ValueType::StringMap, None, || map.into())?;
        } else {
            for (mk, mv) in entries {
                let key = d.word(mk, || format!("key in {name}"))?;
                d.word(mv, || format!("value of {name}[{key:?}]"))?;
            }
            put(bag, name, to, ValueType::StringMap, None, || {
                StringMap::new().into()
            })?;
        }
    }
    Ok(())
}

/// What [`decode_keeping`] does with one attribute.
#[derive(Clone, Copy)]
enum Target {
    /// Into the bag (`None`: undeclared).
    Keep(Option<AttrId>),
    /// Declared but not wanted: checked only.
    Check(AttrId),
    /// Undeclared and not wanted.
    Skip,
}

/// Sets a value built only now, or checks a value of type `got` (`text`: a string's) without
/// building it.
fn put(
    bag: &mut AttributeBag,
    name: &str,
    to: Target,
    got: ValueType,
    text: Option<&str>,
    value: impl FnOnce() -> Value,
) -> Result<(), DecodeError> {
    match to {
        Target::Keep(Some(id)) => bag.set_declared(id, name, value()),
        Target::Keep(None) => bag.set(name, value()),
        Target::Check(id) => bag.check_declared(id, name, got, text),
        Target::Skip => Ok(()),
    }
    .map_err(|e| DecodeError::BadValue {
        name: name.to_string(),
        reason: e.to_string(),
    })
}

/// Envoy sends addresses as raw octets: 4 or 16 of them.
fn ip_from_octets(name: &str, octets: &[u8]) -> Result<IpAddr, DecodeError> {
    let ip = match octets.len() {
        4 => <[u8; 4]>::try_from(octets).map(IpAddr::from).ok(),
        16 => <[u8; 16]>::try_from(octets).map(IpAddr::from).ok(),
        _ => None,
    };
    ip.ok_or_else(|| DecodeError::BadValue {
        name: name.to_string(),
        reason: format!("an IP address needs 4 or 16 bytes, got {}", octets.len()),
    })
}

/// Encodes attributes the way a proxy does: names and string values by global index when the
/// word is among the first `global_word_count` global words, otherwise in the message's own
/// dictionary. IP addresses travel as octets (4 for IPv4, 16 for IPv6), e-mail addresses,
/// URIs and DNS names as strings. For tests, tools and load generators.
pub fn encode<'a>(
    attributes: impl IntoIterator<Item = (&'a str, &'a Value)>,
    global_word_count: usize,
) -> pb::CompressedAttributes {
    let mut words = WordEncoder::new(global_word_count);
    let mut out = pb::CompressedAttributes::default();
    for (name, value) in attributes {
        let k = words.index(name);
        match value {
            Value::String(s) | Value::EmailAddress(s) | Value::Uri(s) | Value::DnsName(s) => {
                let v = words.index(s);
                out.strings.insert(k, v);
            }
            Value::Int64(i) => {
                out.int64s.insert(k, *i);
            }
            Value::Double(x) => {
                out.doubles.insert(k, *x);
            }
            Value::Bool(b) => {
                out.bools.insert(k, *b);
            }
            Value::Timestamp(t) => {
                out.timestamps.insert(
                    k,
                    prost_types::Timestamp {
                        seconds: t.0.div_euclid(1_000_000_000),
                        nanos: t.0.rem_euclid(1_000_000_000) as i32,
                    },
                );
            }
            Value::Duration(d) => {
                out.durations.insert(
                    k,
                    prost_types::Duration {
                        seconds: d.0 / 1_000_000_000,
                        nanos: (d.0 % 1_000_000_000) as i32,
                    },
                );
            }
            Value::Bytes(b) => {
                out.bytes.insert(k, b.to_vec());
            }
            Value::IpAddress(ip) => {
                let octets = match ip {
                    IpAddr::V4(v4) => v4.octets().to_vec(),
                    IpAddr::V6(v6) => v6.octets().to_vec(),
                };
                out.bytes.insert(k, octets);
            }
            Value::StringMap(m) => {
                let entries = m
                    .iter()
                    .map(|(mk, mv)| (words.index(mk), words.index(mv)))
                    .collect();
                out.string_maps.insert(k, pb::StringMap { entries });
            }
        }
    }
    out.words = words.into_words().into_iter().map(String::from).collect();
    out
}
