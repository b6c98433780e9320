//! Property tests of the attribute encoding: decoding never panics, strings round-trip,
//! leaving attributes out changes nothing else.

use super::*;
use mixer_frontends::mixer_v1::{
    GLOBAL_WORD_COUNT, check_response, decode_check_in_place, decode_into, decode_keeping,
    framed_check_response,
};
use mixer_model::{AttributeBag, Vocabulary};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use prost::Message;

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

fn check_request() -> impl Strategy<Value = pb::CheckRequest> {
    (
        proptest::option::weighted(0.9, compressed()),
        prop_oneof![Just(GLOBAL_WORD_COUNT as u32), any::<u32>()],
        ".{0,6}",
        proptest::collection::hash_map(".{0,4}", (any::<i64>(), any::<bool>()), 0..2),
    )
        .prop_map(
            |(attributes, global_word_count, deduplication_id, quotas)| pb::CheckRequest {
                attributes,
                global_word_count,
                deduplication_id,
                quotas: quotas
                    .into_iter()
                    .map(|(name, (amount, best_effort))| {
                        let params = pb::check_request::QuotaParams {
                            amount,
                            best_effort,
                        };
                        (name, params)
                    })
                    .collect(),
            },
        )
}

fn contents(bag: &AttributeBag) -> Vec<(String, Value)> {
    bag.iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect()
}

proptest! {
    /// The Check method reads requests in place; whatever it reads must come out as prost's
    /// decoding of the same bytes does. Requests are concatenated (protobuf merges them: maps
    /// accumulate, the last entry of a key wins), bytes overwritten and messages cut short.
    #[test]
    fn reading_a_check_in_place_agrees_with_prost(
        requests in vec(check_request(), 1..3),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        cut in proptest::option::weighted(0.2, any::<prop::sample::Index>()),
    ) {
        let mut message: Vec<u8> = requests.iter().flat_map(Message::encode_to_vec).collect();
        for (at, byte) in &edits {
            if !message.is_empty() {
                let i = at.index(message.len());
                message[i] = *byte;
            }
        }
        if let Some(cut) = &cut {
            message.truncate(cut.index(message.len() + 1));
        }
        let vocabulary = Arc::new(Vocabulary::istio());
        let mut in_place = AttributeBag::new(vocabulary.clone());
        let Some(read) = decode_check_in_place(&message, &mut in_place) else {
            // Only what prost should decide is left to it: a well-formed request without
            // quota is always read in place.
            let canonical = edits.is_empty() && cut.is_none() && requests.len() == 1;
            prop_assert!(!canonical || !requests[0].quotas.is_empty(), "left to prost");
            return Ok(());
        };
        let decoded = pb::CheckRequest::decode(message.as_slice());
        prop_assert!(decoded.is_ok(), "read in place, refused by prost: {:?}", decoded);
        let decoded = decoded.unwrap();
        prop_assert!(decoded.quotas.is_empty());
        let mut by_prost = AttributeBag::new(vocabulary);
        let expected = match &decoded.attributes {
            Some(a) => decode_into(a, &a.words, &mut by_prost),
            None => Ok(()),
        }
        .map(|()| decoded.global_word_count);
        prop_assert_eq!(read, expected);
        prop_assert_eq!(contents(&in_place), contents(&by_prost));
    }
}

/// Found by the `mixer_v1_check` fuzz target: a key of 35 bits (field 872396645, a field
/// number that fits in 32 bits) was read in place, though prost refuses any key past 32 bits.
#[test]
fn a_key_past_32_bits_is_left_to_prost() {
    let message = [0xaa, 0xf6, 0xf6, 0xff, 0x19, 0x00];
    assert!(pb::CheckRequest::decode(&message[..]).is_err());
    let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
    assert_eq!(decode_check_in_place(&message, &mut bag), None);
}

fn header_ops() -> impl Strategy<Value = Vec<mixer_model::HeaderOperation>> {
    use mixer_model::{HeaderOp, HeaderOperation};
    vec(
        (
            "[a-z-]{0,8}",
            ".{0,8}",
            prop_oneof![
                Just(HeaderOp::Replace),
                Just(HeaderOp::Append),
                Just(HeaderOp::Remove)
            ],
        )
            .prop_map(|(name, value, op)| HeaderOperation { name, value, op }),
        0..3,
    )
}

proptest! {
    /// The Check method writes its response straight to the frame: the bytes must be those
    /// prost writes for `check_response`, whatever the verdict read and said.
    #[test]
    fn the_check_response_written_directly_is_prosts(
        code in 0i32..17,
        message in ".{0,12}",
        denied_by in proptest::option::of("[a-z.-]{1,20}"),
        valid_nanos in 0u64..200_000_000_000,
        valid_use_count in any::<i32>(),
        reads in vec((0usize..40, proptest::option::of("[a-z-]{0,6}|:method|GET"), any::<bool>()), 0..8),
        headers in vec(("[a-z-]{0,6}|x-user", ".{0,6}"), 0..4),
        request_ops in header_ops(),
        response_ops in header_ops(),
        client_words in 0usize..=GLOBAL_WORD_COUNT,
    ) {
        use mixer_model::{Code, Presence, ReferencedAttributes, Status, StringMap, Verdict};
        let vocabulary = Arc::new(Vocabulary::istio());
        let mut bag = AttributeBag::new(vocabulary.clone());
        bag.set(
            "request.headers",
            StringMap::from_pairs(headers.iter().map(|(k, v)| (k.as_str(), v.as_str()))).into(),
        )
        .expect("a string map");
        bag.set("request.method", Value::from("GET")).expect("a string");
        let mut referenced = ReferencedAttributes::new();
        let headers_id = vocabulary.lookup("request.headers").expect("declared");
        for (i, key, present) in reads {
            let presence = if present { Presence::Exact } else { Presence::Absent };
            // Every read of request.headers without a key is a whole-map read.
            let attr = if i < 8 { headers_id } else { mixer_model::AttrId(i as u32) };
            match key {
                Some(k) => referenced.record_key(attr, k.into(), presence),
                None => referenced.record(attr, presence),
            }
        }
        referenced.normalize();
        let verdict = Verdict {
            status: Status::new(Code::from_i32(code), message),
            denied_by: denied_by.map(Into::into),
            valid_duration: std::time::Duration::from_nanos(valid_nanos),
            valid_use_count,
            referenced,
            request_header_ops: request_ops,
            response_header_ops: response_ops,
            ..Verdict::default()
        };
        let direct = framed_check_response(&verdict, &vocabulary, &bag, client_words);
        let by_prost =
            mixer_grpc::framed(&check_response(&verdict, &vocabulary, &bag, client_words));
        prop_assert_eq!(direct, by_prost);
    }
}
