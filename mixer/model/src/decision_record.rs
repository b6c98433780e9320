//! A decision-log record, typed: what the `variables` of a decision-log instance hold.
//!
//! The decision log makes one record per decision, and most go to one handler that writes
//! them as lines (stdio). Made as a generic map, a record cost a shared name and a [`Value`]
//! per field, each put, walked, matched and dropped again: about a third of its price (#36).
//! Typed, a writer reads it field by field, and every other reader (Wasm and out-of-process
//! adapters, OTLP, `mixer test`) gets the same entries as before, made on the first read
//! ([`DecisionRecord::entries`]).

use std::fmt;
use std::sync::{Arc, LazyLock, OnceLock};

use crate::string_map::StringMap;
use crate::value::{Duration, Value};

/// The fields a record can have, in the order of their names: the entries a record reads as
/// are sorted by name, as a line that sorts its fields writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DecisionField {
    /// The attribute values the decision read, masked.
    Attributes,
    /// Which cache tier answered.
    Cache,
    /// The status code's name.
    Code,
    /// The config's hash, as `/readyz` reports it.
    ConfigHash,
    /// The decision's id, as the proxy was answered.
    DecisionId,
    /// A rate limit decision's deciding descriptor.
    Descriptor,
    /// A rate limit decision's descriptors and their codes.
    Descriptors,
    /// What each matched dry-run rule would have decided.
    DryRun,
    /// Why no decision was made.
    Error,
    /// The fail policy applied.
    FailPolicy,
    /// The front end that made the decision.
    FrontEnd,
    /// The deciding rule's handler.
    Handler,
    /// The handlers that failed, with their errors.
    HandlerErrors,
    /// How long the decision took.
    Latency,
    /// The limit that applied to the deciding descriptor.
    Limit,
    /// Requests left under that limit.
    LimitRemaining,
    /// The rules that matched.
    MatchedRules,
    /// The status message.
    Message,
    /// The request's own id (`x-request-id`).
    RequestId,
    /// The deciding rule.
    Rule,
    /// The verdict.
    Verdict,
}

/// How many fields a record can have.
const FIELD_COUNT: usize = 21;

/// [`DecisionField`]'s names, in its order.
const FIELD_NAMES: [&str; FIELD_COUNT] = [
    "attributes",
    "cache",
    "code",
    "config_hash",
    "decision_id",
    "descriptor",
    "descriptors",
    "dry_run",
    "error",
    "fail_policy",
    "front_end",
    "handler",
    "handler_errors",
    "latency",
    "limit",
    "limit_remaining",
    "matched_rules",
    "message",
    "request_id",
    "rule",
    "verdict",
];

impl DecisionField {
    /// Every field, in order.
    pub const ALL: [DecisionField; FIELD_COUNT] = [
        DecisionField::Attributes,
        DecisionField::Cache,
        DecisionField::Code,
        DecisionField::ConfigHash,
        DecisionField::DecisionId,
        DecisionField::Descriptor,
        DecisionField::Descriptors,
        DecisionField::DryRun,
        DecisionField::Error,
        DecisionField::FailPolicy,
        DecisionField::FrontEnd,
        DecisionField::Handler,
        DecisionField::HandlerErrors,
        DecisionField::Latency,
        DecisionField::Limit,
        DecisionField::LimitRemaining,
        DecisionField::MatchedRules,
        DecisionField::Message,
        DecisionField::RequestId,
        DecisionField::Rule,
        DecisionField::Verdict,
    ];

    /// The field's name in the record's entries (`config_hash`).
    #[inline]
    pub fn name(self) -> &'static str {
        FIELD_NAMES[self as usize]
    }

    /// [`DecisionField::name`] as one string every record's entries share.
    fn shared_name(self) -> Arc<str> {
        static NAMES: LazyLock<[Arc<str>; FIELD_COUNT]> =
            LazyLock::new(|| FIELD_NAMES.map(Arc::from));
        NAMES[self as usize].clone()
    }
}

/// The value of one field of a record.
#[derive(Clone, Debug, PartialEq)]
pub enum DecisionValue {
    /// Text: mostly strings the config shares between records (rule names, the config
    /// hash), so that a writer may know them by address.
    Text(Arc<str>),
    /// A word of the mixer's own (a verdict, a cache tier, a code's name, a front end).
    Word(&'static str),
    /// An id of 128 bits, written as 32 lowercase hex digits: `high`'s, then `low`'s.
    Id {
        /// The first 64 bits.
        high: u64,
        /// The last 64 bits.
        low: u64,
    },
    /// A whole number.
    Int(i64),
    /// A span of time.
    Duration(Duration),
    /// Names and their texts.
    Map(Arc<StringMap>),
}

impl DecisionValue {
    /// The value as the record's entries hold it: ids as their text.
    pub fn to_value(&self) -> Value {
        match self {
            DecisionValue::Text(text) => Value::String(text.clone()),
            DecisionValue::Word(word) => Value::string(*word),
            DecisionValue::Id { high, low } => {
                let digits = id_digits(*high, *low);
                // Hex digits: always UTF-8.
                Value::string(std::str::from_utf8(&digits).unwrap_or_default())
            }
            DecisionValue::Int(n) => Value::Int64(*n),
            DecisionValue::Duration(d) => Value::Duration(*d),
            DecisionValue::Map(map) => Value::StringMap(map.clone()),
        }
    }
}

/// The 32 lowercase hex digits of an id ([`DecisionValue::Id`]).
pub fn id_digits(high: u64, low: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[..16].copy_from_slice(&hex_digits(high));
    out[16..].copy_from_slice(&hex_digits(low));
    out
}

/// The 16 lowercase hex digits of `value`, most significant first: a byte's two digits at
/// once from a table, rather than a digit at a time through `{:016x}` (an id is written for
/// every decision).
#[inline]
pub fn hex_digits(value: u64) -> [u8; 16] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    const PAIRS: [[u8; 2]; 256] = {
        let mut pairs = [[0u8; 2]; 256];
        let mut i = 0;
        while i < 256 {
            pairs[i] = [DIGITS[i >> 4], DIGITS[i & 0xf]];
            i += 1;
        }
        pairs
    };
    let mut out = [0u8; 16];
    for (pair, byte) in out.chunks_exact_mut(2).zip(value.to_be_bytes()) {
        pair.copy_from_slice(&PAIRS[usize::from(byte)]);
    }
    out
}

/// One decision's record: a value for each of the fields it has.
///
/// Its small methods are `#[inline]`: a record is set and read field by field from other
/// crates, and the calls cost more than the work in them (#36).
///
/// ```
/// use std::sync::Arc;
/// use mixer_model::{DecisionField, DecisionRecord, DecisionValue, Value};
///
/// let mut record = DecisionRecord::default();
/// record.set(DecisionField::Verdict, DecisionValue::Text(Arc::from("allow")));
/// record.set(DecisionField::Cache, DecisionValue::Text(Arc::from("none")));
/// let names: Vec<&str> = record.fields().map(|(field, _)| field.name()).collect();
/// assert_eq!(names, ["cache", "verdict"]);
/// assert_eq!(record.entries()[1], (Arc::from("verdict"), Value::from("allow")));
/// ```
#[derive(Default)]
pub struct DecisionRecord {
    /// By [`DecisionField`].
    slots: [Option<DecisionValue>; FIELD_COUNT],
    /// The fields as generic entries, made on the first read.
    entries: OnceLock<Vec<(Arc<str>, Value)>>,
    /// The bytes of text the fields hold ([`DecisionRecord::approx_bytes`]), kept as they
    /// are set: a pass over every field per record cost more than the record's queueing
    /// (#36).
    held: usize,
}

/// The bytes of text `value` holds, as if none were shared.
#[inline]
fn held(value: &DecisionValue) -> usize {
    match value {
        DecisionValue::Text(text) => text.len(),
        DecisionValue::Word(_) => 0,
        DecisionValue::Map(map) => map.iter().map(|(k, v)| 48 + k.len() + v.len()).sum(),
        DecisionValue::Id { .. } | DecisionValue::Int(_) | DecisionValue::Duration(_) => 0,
    }
}

impl DecisionRecord {
    /// Sets `field` to `value` (a field set twice keeps the last).
    #[inline]
    pub fn set(&mut self, field: DecisionField, value: DecisionValue) {
        self.held += held(&value);
        if let Some(old) = self.slots[field as usize].replace(value) {
            self.held -= held(&old);
        }
        // `&mut`: no entries are lent out, but entries made before would now be stale.
        if self.entries.get().is_some() {
            self.entries = OnceLock::new();
        }
    }

    /// The value of `field`, if the record has it.
    #[inline]
    pub fn get(&self, field: DecisionField) -> Option<&DecisionValue> {
        self.slots[field as usize].as_ref()
    }

    /// The fields the record has, in name order.
    #[inline]
    pub fn fields(&self) -> impl Iterator<Item = (DecisionField, &DecisionValue)> {
        DecisionField::ALL
            .iter()
            .zip(&self.slots)
            .filter_map(|(field, slot)| slot.as_ref().map(|value| (*field, value)))
    }

    /// The record as a logentry's variables: each field's name and value, in name order.
    pub fn entries(&self) -> &[(Arc<str>, Value)] {
        self.entries.get_or_init(|| {
            self.fields()
                .map(|(field, value)| (field.shared_name(), value.to_value()))
                .collect()
        })
    }

    /// A rough size in memory, for the report queue's byte bound: the record, and the text
    /// it holds as if none of it were shared.
    #[inline]
    pub fn approx_bytes(&self) -> usize {
        std::mem::size_of::<DecisionRecord>() + self.held
    }
}

impl Clone for DecisionRecord {
    fn clone(&self) -> DecisionRecord {
        DecisionRecord {
            slots: self.slots.clone(),
            entries: OnceLock::new(),
            held: self.held,
        }
    }
}

// Two records are equal when their fields are: whether their entries were made yet is not
// part of what they hold.
impl PartialEq for DecisionRecord {
    fn eq(&self, other: &DecisionRecord) -> bool {
        self.slots == other.slots
    }
}

impl fmt::Debug for DecisionRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.fields().map(|(field, value)| (field.name(), value)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_in_the_order_of_the_fields() {
        let mut sorted = FIELD_NAMES;
        sorted.sort_unstable();
        assert_eq!(sorted, FIELD_NAMES);
        for (i, field) in DecisionField::ALL.iter().enumerate() {
            assert_eq!(*field as usize, i);
        }
    }

    #[test]
    fn entries_hold_every_field_set_in_name_order() {
        let mut record = DecisionRecord::default();
        record.set(
            DecisionField::Verdict,
            DecisionValue::Text(Arc::from("deny")),
        );
        record.set(
            DecisionField::DecisionId,
            DecisionValue::Id {
                high: 0x0123_4567_89ab_cdef,
                low: 42,
            },
        );
        record.set(DecisionField::LimitRemaining, DecisionValue::Int(7));
        record.set(
            DecisionField::Latency,
            DecisionValue::Duration(Duration(1500)),
        );
        let map = StringMap::from_pairs([("request.path", "/a")]);
        record.set(
            DecisionField::Attributes,
            DecisionValue::Map(Arc::new(map.clone())),
        );
        let expected: Vec<(Arc<str>, Value)> = vec![
            (Arc::from("attributes"), Value::from(map)),
            (
                Arc::from("decision_id"),
                Value::from("0123456789abcdef000000000000002a"),
            ),
            (Arc::from("latency"), Value::Duration(Duration(1500))),
            (Arc::from("limit_remaining"), Value::Int64(7)),
            (Arc::from("verdict"), Value::from("deny")),
        ];
        assert_eq!(record.entries(), expected.as_slice());
        // A copy is equal, and reads the same.
        let copy = record.clone();
        assert_eq!(copy, record);
        assert_eq!(copy.entries(), expected.as_slice());
    }

    #[test]
    fn a_field_set_again_replaces_its_value_and_the_entries() {
        let mut record = DecisionRecord::default();
        record.set(DecisionField::Code, DecisionValue::Text(Arc::from("OK")));
        assert_eq!(record.entries().len(), 1);
        record.set(
            DecisionField::Code,
            DecisionValue::Text(Arc::from("INTERNAL")),
        );
        assert_eq!(
            record.entries(),
            [(Arc::from("code"), Value::from("INTERNAL"))].as_slice()
        );
    }

    #[test]
    fn the_size_counts_the_text_of_the_fields_set() {
        let empty = DecisionRecord::default().approx_bytes();
        let mut record = DecisionRecord::default();
        record.set(DecisionField::Rule, DecisionValue::Text(Arc::from("abcd")));
        record.set(DecisionField::Latency, DecisionValue::Duration(Duration(1)));
        let map = StringMap::from_pairs([("k", "vv")]);
        record.set(DecisionField::Attributes, DecisionValue::Map(Arc::new(map)));
        assert_eq!(record.approx_bytes(), empty + 4 + 48 + 3);
        // A field set again counts once, with its new value.
        record.set(DecisionField::Rule, DecisionValue::Text(Arc::from("ab")));
        assert_eq!(record.approx_bytes(), empty + 2 + 48 + 3);
        assert_eq!(record.clone().approx_bytes(), record.approx_bytes());
    }

    #[test]
    fn ids_read_as_their_hex_digits() {
        for (high, low) in [(0, 0), (u64::MAX, 1), (0xdead_beef, 0xfeed_0000_0000_0001)] {
            let digits = id_digits(high, low);
            assert_eq!(
                std::str::from_utf8(&digits).ok(),
                Some(format!("{high:016x}{low:016x}").as_str())
            );
        }
    }
}
