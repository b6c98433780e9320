//! A report batch as it crosses into a plugin: the instances, written in the layout of
//! `report-batch` in `proto/wit/adapter.wit` (mixer-wasm-batch).

use std::net::IpAddr;

use mixer_model::{FieldValue, Instance, Template, Value};
use mixer_wasm_batch::{Writer, case};

use crate::bindings as wit;
use crate::convert;

/// The index of `t`'s case in the WIT's `template` enum: the generated enum's
/// discriminant, which follows the WIT's order.
fn template(t: Template) -> u32 {
    convert::template(t) as u32
}

/// Packs `instances`, in order.
pub(crate) fn pack<'a>(instances: impl IntoIterator<Item = &'a Instance>) -> wit::ReportBatch {
    let mut w = Writer::default();
    for i in instances {
        let at = w.instance(&i.name, template(i.template), i.fields.len());
        for (name, v) in &i.fields {
            let field = w.field(name);
            match v.entries() {
                None => {
                    if let FieldValue::Value(v) = v {
                        value(&mut w, v);
                    }
                }
                Some(map) => {
                    w.map(map.len());
                    for (k, v) in map {
                        w.key(k);
                        value(&mut w, v);
                    }
                }
            }
            w.end(field);
        }
        w.end(at);
    }
    let packed = w.finish();
    wit::ReportBatch {
        text: packed.text,
        bytes: packed.bytes,
        words: packed.words,
    }
}

// Reinterpreting signed nanoseconds as the layout's unsigned words is its intent.
fn value<'a>(w: &mut Writer<'a>, v: &'a Value) {
    match v {
        Value::String(s) => w.text(case::STRING, s),
        Value::Int64(n) => w.wide(case::INT64, *n as u64),
        Value::Double(d) => w.wide(case::DOUBLE, d.to_bits()),
        Value::Bool(b) => w.boolean(*b),
        Value::Timestamp(t) => w.wide(case::TIMESTAMP, t.0 as u64),
        Value::Duration(d) => w.wide(case::DURATION, d.0 as u64),
        Value::Bytes(b) => w.bytes(case::BYTES, b),
        Value::IpAddress(IpAddr::V4(a)) => w.bytes(case::IP_ADDRESS, &a.octets()),
        Value::IpAddress(IpAddr::V6(a)) => w.bytes(case::IP_ADDRESS, &a.octets()),
        Value::EmailAddress(s) => w.text(case::EMAIL_ADDRESS, s),
        Value::Uri(s) => w.text(case::URI, s),
        Value::DnsName(s) => w.text(case::DNS_NAME, s),
        Value::StringMap(m) => w.string_map(m.iter()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mixer_model::{StringMap, Template};

    use super::*;

    fn metric(destination: &str) -> Instance {
        Instance {
            name: Arc::from("requestcount.istio-system"),
            template: Template::Metric,
            fields: vec![
                ("value", FieldValue::Value(Value::Int64(1))),
                (
                    "dimensions",
                    FieldValue::Map(vec![(Arc::from("destination"), Value::from(destination))]),
                ),
            ],
        }
    }

    /// The cases of a WIT `variant` or `enum`, in order, from the file the plugins build
    /// against.
    fn cases(kind: &str, name: &str) -> Vec<String> {
        let wit = include_str!("../../../proto/wit/adapter.wit");
        let head = format!("{kind} {name} {{");
        let body = &wit[wit.find(&head).expect("declared") + head.len()..];
        body[..body.find('}').expect("closed")]
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//"))
            .map(|l| {
                let l = l.trim_start_matches('%').trim_end_matches(',');
                l.split('(').next().unwrap_or(l).to_string()
            })
            .collect()
    }

    #[test]
    fn case_numbers_are_the_wits_order() {
        let values = [
            ("string", Value::from("")),
            ("int64", Value::Int64(0)),
            ("double", Value::Double(0.0)),
            ("boolean", Value::Bool(false)),
            ("timestamp", Value::Timestamp(mixer_model::Timestamp(0))),
            ("duration", Value::Duration(mixer_model::Duration(0))),
            ("bytes", Value::Bytes(Arc::from(&[][..]))),
            ("ip-address", Value::IpAddress([0, 0, 0, 0].into())),
            ("email-address", Value::EmailAddress(Arc::from(""))),
            ("uri", Value::Uri(Arc::from(""))),
            ("dns-name", Value::DnsName(Arc::from(""))),
            (
                "string-map",
                Value::StringMap(Arc::new(StringMap::default())),
            ),
        ];
        let wit = cases("variant", "value");
        assert_eq!(wit.len(), values.len(), "{wit:?}");
        assert_eq!(case::MAP as usize, wit.len());
        for (name, v) in &values {
            let at = wit.iter().position(|c| c == name).expect(name);
            let mut w = Writer::default();
            value(&mut w, v);
            assert_eq!(w.finish().words[1] as usize, at, "{name}");
        }
        let wit = cases("enum", "template");
        for t in Template::ALL {
            let at = wit
                .iter()
                .position(|c| *c == t.name())
                .unwrap_or_else(|| panic!("{}", t.name()));
            assert_eq!(template(t) as usize, at, "{t:?}");
        }
    }

    #[test]
    fn the_words_follow_the_wits_layout() {
        let batch = pack([&metric("reviews")]);
        let text = std::str::from_utf8(&batch.text).unwrap();
        let s = |w: &[u32]| &text[w[0] as usize..(w[0] + w[1]) as usize];
        let w = &batch.words;
        assert_eq!(w[0], 1, "one instance");
        assert_eq!(w[1] as usize, w.len() - 1, "its size");
        assert_eq!(s(&w[2..]), "requestcount.istio-system");
        assert_eq!(w[4], 4, "metric");
        assert_eq!(w[5], 2, "two fields");
        // value: size, name, int64 1
        assert_eq!(&w[6..7], &[6]);
        assert_eq!(s(&w[7..]), "value");
        assert_eq!(&w[9..12], &[1, 1, 0]);
        // dimensions: size, name, map of one entry: key, string value
        assert_eq!(w[12] as usize, w.len() - 12);
        assert_eq!(s(&w[13..]), "dimensions");
        assert_eq!(&w[15..17], &[case::MAP, 1]);
        assert_eq!(s(&w[17..]), "destination");
        assert_eq!(w[19], 0, "string");
        assert_eq!(s(&w[20..]), "reviews");
        assert_eq!(w.len(), 22);
    }

    #[test]
    fn each_shared_string_crosses_once() {
        let instances: Vec<Instance> = vec![metric("reviews"); 500];
        let batch = pack(&instances);
        // The clones share every Arc: the instance's name, two field names, a key and a
        // value, once each.
        let once = "requestcount.istio-systemvaluedimensionsdestinationreviews";
        assert_eq!(std::str::from_utf8(&batch.text).unwrap(), once);
        assert_eq!(batch.words[0], 500);
        assert_eq!(batch.words.len(), 1 + 500 * 21);
    }

    #[test]
    fn an_empty_batch_is_a_count_of_zero() {
        let batch = pack([]);
        assert_eq!(batch.words, vec![0]);
        assert!(batch.text.is_empty() && batch.bytes.is_empty());
    }
}
