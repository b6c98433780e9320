use std::sync::Arc;
use std::time::Duration;

use mixer_model::{
    AttributeBag, Code, HeaderOp, HeaderOperation, Presence, ReferencedAttributes, Status,
    StringMap, Value, Verdict, Vocabulary,
};
use proptest::prelude::*;

use crate::codec::{self, Read};
use crate::{Target, parse_target};

fn vocabulary() -> Arc<Vocabulary> {
    Arc::new(Vocabulary::istio())
}

fn bag(vocab: &Arc<Vocabulary>, user: Option<&str>, path: &str) -> AttributeBag {
    let mut bag = AttributeBag::new(vocab.clone());
    let mut headers = vec![(":path", path.to_string())];
    if let Some(u) = user {
        headers.push(("x-user", u.to_string()));
    }
    bag.set(
        "request.headers",
        Value::StringMap(StringMap::from_pairs(headers).into()),
    )
    .expect("declared");
    bag.set("source.namespace", Value::String("default".into()))
        .expect("declared");
    bag
}

fn shape() -> Vec<Read> {
    vec![
        ("request.headers".into(), Some("x-user".into())),
        ("source.namespace".into(), None),
        ("destination.service.host".into(), None),
    ]
}

fn key(vocab: &Arc<Vocabulary>, bag: &AttributeBag, shape: &[Read]) -> [u8; 32] {
    let bytes = codec::encode_shape(shape);
    codec::entry_key(shape, &bytes, vocab, bag).expect("known attributes")
}

#[test]
fn only_the_reads_split_entries() {
    let v = vocabulary();
    // A header the shape does not read does not split; the one it reads does.
    assert_eq!(
        key(&v, &bag(&v, Some("a"), "/x"), &shape()),
        key(&v, &bag(&v, Some("a"), "/y"), &shape())
    );
    assert_ne!(
        key(&v, &bag(&v, Some("a"), "/x"), &shape()),
        key(&v, &bag(&v, Some("b"), "/x"), &shape())
    );
    // An absent map key is its own value, not the empty string.
    assert_ne!(
        key(&v, &bag(&v, None, "/x"), &shape()),
        key(&v, &bag(&v, Some(""), "/x"), &shape())
    );
    // The same values under another shape are another entry.
    let mut other = shape();
    other.pop();
    assert_ne!(
        key(&v, &bag(&v, Some("a"), "/x"), &shape()),
        key(&v, &bag(&v, Some("a"), "/x"), &other)
    );
}

#[test]
fn a_shape_naming_an_unknown_attribute_has_no_key() {
    let v = vocabulary();
    let shape = vec![("no.such.attribute".to_string(), None)];
    let bytes = codec::encode_shape(&shape);
    assert!(codec::entry_key(&shape, &bytes, &v, &bag(&v, None, "/")).is_none());
}

#[test]
fn verdicts_round_trip() {
    let v = vocabulary();
    let mut referenced = ReferencedAttributes::new();
    referenced.record_key(
        v.lookup("request.headers").expect("declared"),
        Arc::from("x-user"),
        Presence::Absent,
    );
    referenced.record(
        v.lookup("source.namespace").expect("declared"),
        Presence::Exact,
    );
    let verdict = Verdict {
        status: Status::new(Code::PermissionDenied, "not on the list"),
        denied_by: Some(Arc::from("users.listchecker.istio-system")),
        valid_duration: Duration::from_millis(1500),
        valid_use_count: 10,
        referenced,
        matched_rules: vec![Arc::from("r1"), Arc::from("r2")],
        request_header_ops: vec![HeaderOperation {
            name: "x-a".into(),
            value: "1".into(),
            op: HeaderOp::Append,
        }],
        response_header_ops: vec![HeaderOperation {
            name: "x-b".into(),
            value: String::new(),
            op: HeaderOp::Remove,
        }],
        dry_run: vec![mixer_model::DryRunOutcome {
            rule: Arc::from("audit.rule.istio-system"),
            would_be: mixer_model::WouldBe::Deny,
            status: Status::new(Code::PermissionDenied, "deny.handler.istio-system:no"),
        }],
        failed_open: Vec::new(),
    };
    let bytes = codec::encode_verdict(&verdict, &v);
    let without = Verdict {
        dry_run: Vec::new(),
        ..verdict.clone()
    };
    assert_eq!(
        codec::decode_verdict(&codec::encode_verdict(&without, &v), &v),
        Some(without)
    );
    assert_eq!(codec::decode_verdict(&bytes, &v), Some(verdict));
    // Cut short or with bytes after: refused, never half read.
    assert_eq!(codec::decode_verdict(&bytes[..bytes.len() - 1], &v), None);
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(codec::decode_verdict(&longer, &v), None);
}

#[test]
fn targets_parse() {
    assert_eq!(
        parse_target("redis://127.0.0.1:6379/2"),
        Ok(Target::Single("redis://127.0.0.1:6379/2".into()))
    );
    assert_eq!(
        parse_target("redis+cluster://a:1, b:2"),
        Ok(Target::Cluster(vec![
            "redis://a:1".into(),
            "redis://b:2".into()
        ]))
    );
    assert_eq!(
        parse_target("rediss+cluster://a:1,b:2#insecure"),
        Ok(Target::Cluster(vec![
            "rediss://a:1#insecure".into(),
            "rediss://b:2#insecure".into()
        ]))
    );
    let err = parse_target("memcached://a:1").unwrap_err();
    assert!(err.contains("redis://HOST:PORT"), "{err}");
    assert!(parse_target("redis+cluster://").is_err());
}

proptest! {
    #[test]
    fn shapes_round_trip(shape in prop::collection::vec(("[a-z.]{0,12}", prop::option::of(".{0,8}")), 0..6)) {
        let bytes = codec::encode_shape(&shape);
        prop_assert_eq!(codec::decode_shape(&bytes), Some(shape));
    }

    /// Two bags give the same key under a shape exactly when every read gives the same
    /// answer.
    #[test]
    fn keys_equal_exactly_when_the_reads_do(
        a in prop::option::of("[ab]{0,2}"), b in prop::option::of("[ab]{0,2}"),
        pa in "[xy]", pb in "[xy]",
    ) {
        let v = vocabulary();
        let ka = key(&v, &bag(&v, a.as_deref(), &pa), &shape());
        let kb = key(&v, &bag(&v, b.as_deref(), &pb), &shape());
        prop_assert_eq!(ka == kb, a == b);
    }
}
