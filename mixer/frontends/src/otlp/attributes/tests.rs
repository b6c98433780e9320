use super::*;
use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};

fn s(v: &str) -> AnyValue {
    AnyValue {
        value: Some(Any::StringValue(v.into())),
    }
}

#[test]
fn values_render_as_text() {
    assert_eq!(plain_text(&Any::StringValue("a\"b".into())), "a\"b");
    assert_eq!(plain_text(&Any::IntValue(-3)), "-3");
    assert_eq!(plain_text(&Any::DoubleValue(1.5)), "1.5");
    assert_eq!(plain_text(&Any::BoolValue(true)), "true");
    assert_eq!(plain_text(&Any::BytesValue(vec![0, 171])), "00ab");
    let list = Any::ArrayValue(ArrayValue {
        values: vec![s("x"), AnyValue::default(), s("y\n")],
    });
    assert_eq!(plain_text(&list), r#"["x",null,"y\n"]"#);
    let map = Any::KvlistValue(KeyValueList {
        values: vec![KeyValue {
            key: "k".into(),
            value: Some(AnyValue {
                value: Some(Any::BytesValue(vec![1])),
            }),
            key_strindex: 0,
        }],
    });
    assert_eq!(plain_text(&map), r#"{"k":"01"}"#);
}

#[test]
fn severity_names() {
    assert_eq!(severity_name(0), None);
    assert_eq!(severity_name(9), Some("INFO"));
    assert_eq!(severity_name(24), Some("FATAL4"));
    assert_eq!(severity_name(25), None);
    assert_eq!(severity_name(-1), None);
}
