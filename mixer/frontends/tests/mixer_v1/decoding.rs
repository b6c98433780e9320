//! Decoding the compressed attribute encoding without the network.

use super::*;
use mixer_frontends::mixer_v1::{GLOBAL_WORD_COUNT, decode_into};
use mixer_model::{AttributeBag, Vocabulary};

#[test]
fn values_of_every_type_round_trip_through_the_encoding() {
    let vocabulary = Arc::new(Vocabulary::istio());
    let values: Vec<(&str, Value)> = vec![
        ("request.method", Value::from("GET")),
        (
            "request.path",
            Value::from("/a path that is not a global word"),
        ),
        ("request.size", Value::Int64(-5)),
        ("x.double", Value::Double(2.5)),
        ("x.bool", Value::Bool(true)),
        (
            "request.time",
            Value::Timestamp(mixer_model::Timestamp(1_483_228_800_000_000_123)),
        ),
        (
            "response.duration",
            Value::Duration(mixer_model::Duration(-1_500_000_000)),
        ),
        ("x.bytes", Value::Bytes(vec![0, 1, 2].into())),
        (
            "source.ip",
            Value::IpAddress("10.1.2.3".parse().expect("ip")),
        ),
        (
            "destination.ip",
            Value::IpAddress("2001:db8::1".parse().expect("ip")),
        ),
        (
            "request.headers",
            headers(&[("x-user", "amy"), (":method", "GET")]),
        ),
    ];
    for count in [0, 16, GLOBAL_WORD_COUNT] {
        let wire = encode(values.iter().map(|(n, v)| (*n, v)), count);
        let mut bag = AttributeBag::new(vocabulary.clone());
        decode_into(&wire, &wire.words, &mut bag).expect("decodes");
        for (name, value) in &values {
            assert_eq!(
                bag.get_by_name(name),
                Some(value),
                "{name} with count {count}"
            );
        }
        assert_eq!(bag.len(), values.len());
    }
}
