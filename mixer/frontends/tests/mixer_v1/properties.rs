//! Property tests of the attribute encoding: decoding never panics, strings round-trip,
//! leaving attributes out changes nothing else.

use super::*;
use mixer_frontends::mixer_v1::{GLOBAL_WORD_COUNT, decode_into, decode_keeping};
use mixer_model::{AttributeBag, Vocabulary};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

fn index() -> impl Strategy<Value = i32> {
    prop_oneof![-8i32..230, any::<i32>()]
}

fn compressed() -> impl Strategy<Value = pb::CompressedAttributes> {
    (
        vec(".{0,8}", 0..6),
        btree_map(index(), index(), 0..6),
        btree_map(index(), any::<i64>(), 0..4),
        btree_map(index(), any::<f64>(), 0..3),
        btree_map(index(), any::<bool>(), 0..3),
        btree_map(index(), (any::<i64>(), any::<i32>()), 0..3),
        btree_map(index(), (any::<i64>(), any::<i32>()), 0..3),
        btree_map(index(), vec(any::<u8>(), 0..20), 0..3),
        btree_map(index(), btree_map(index(), index(), 0..5), 0..3),
    )
        .prop_map(
            |(words, strings, int64s, doubles, bools, ts, ds, bytes, maps)| {
                pb::CompressedAttributes {
                    words,
                    strings,
                    int64s,
                    doubles,
                    bools,
                    timestamps: ts
                        .into_iter()
                        .map(|(k, (seconds, nanos))| (k, prost_types::Timestamp { seconds, nanos }))
                        .collect(),
                    durations: ds
                        .into_iter()
                        .map(|(k, (seconds, nanos))| (k, prost_types::Duration { seconds, nanos }))
                        .collect(),
                    bytes,
                    string_maps: maps
                        .into_iter()
                        .map(|(k, entries)| (k, pb::StringMap { entries }))
                        .collect(),
                }
            },
        )
}

proptest! {
    #[test]
    fn decoding_arbitrary_attributes_never_panics(a in compressed()) {
        let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
        let _ = decode_into(&a, &a.words, &mut bag);
        // Decoding on top of what a previous record left (delta encoding) is fine too.
        let _ = decode_into(&a, &[], &mut bag);
    }

    #[test]
    fn leaving_attributes_out_refuses_the_same_messages_and_keeps_the_rest(
        a in compressed(),
        parity in 0u32..2,
    ) {
        let vocabulary = Arc::new(Vocabulary::istio());
        let keep = |id: Option<mixer_model::AttrId>| id.is_some_and(|id| id.0 % 2 == parity);
        let mut full = AttributeBag::new(vocabulary.clone());
        let mut part = AttributeBag::new(vocabulary);
        let expected = decode_into(&a, &a.words, &mut full);
        prop_assert_eq!(decode_keeping(&a, &a.words, &mut part, keep), expected.clone());
        if expected.is_ok() {
            let kept: Vec<_> = full
                .iter()
                .filter(|(n, _)| keep(part.vocabulary().lookup(n)))
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            let got: Vec<_> = part.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
            prop_assert_eq!(got, kept);
        }
    }

    #[test]
    fn strings_round_trip(pairs in vec(("[a-z.]{1,12}", ".{0,12}"), 0..12), count in 0usize..=GLOBAL_WORD_COUNT) {
        let mut pairs = pairs;
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|a, b| a.0 == b.0);
        // Only undeclared names: declared ones would be converted to their type.
        let vocabulary = Arc::new(Vocabulary::istio());
        pairs.retain(|(n, _)| vocabulary.lookup(n).is_none());
        let values: Vec<(String, Value)> = pairs.into_iter().map(|(n, v)| (n, Value::from(v))).collect();
        let wire = encode(values.iter().map(|(n, v)| (n.as_str(), v)), count);
        let mut bag = AttributeBag::new(vocabulary);
        decode_into(&wire, &wire.words, &mut bag).expect("decodes");
        for (n, v) in &values {
            prop_assert_eq!(bag.get_by_name(n), Some(v));
        }
    }
}

/// Found by the `mixer_v1_check` fuzz target: the earliest timestamp, sent as seconds
/// -9223372036 and nanos -854775808, decoded; encoded back in protobuf's form (nanos not
/// negative), it was refused as out of range.
#[test]
fn the_earliest_timestamp_and_durations_round_trip() {
    let vocabulary = Arc::new(Vocabulary::istio());
    let values = [
        (
            "request.time",
            Value::Timestamp(mixer_model::Timestamp(i64::MIN)),
        ),
        (
            "response.duration",
            Value::Duration(mixer_model::Duration(i64::MIN)),
        ),
        (
            "request.duration",
            Value::Duration(mixer_model::Duration(i64::MAX)),
        ),
    ];
    let wire = encode(values.iter().map(|(n, v)| (*n, v)), GLOBAL_WORD_COUNT);
    let mut bag = AttributeBag::new(vocabulary);
    decode_into(&wire, &wire.words, &mut bag).expect("decodes");
    for (n, v) in &values {
        assert_eq!(bag.get_by_name(n), Some(v), "{n}");
    }
}
