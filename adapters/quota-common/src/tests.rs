use std::sync::Arc;
use std::time::Duration;

use mixer_model::{FieldValue, Instance, Template, Value};
use serde_json::json;

use crate::*;

fn compile(v: serde_json::Value) -> Result<Quotas, Vec<mixer_adapter_api::ParamError>> {
    let params: Vec<QuotaParams> = serde_json::from_value(v).expect("shape");
    Quotas::compile(&params, Algorithm::FixedWindow)
}

fn instance(name: &str, dims: &[(&str, Value)]) -> Instance {
    Instance {
        name: name.into(),
        template: Template::Quota,
        fields: vec![(
            "dimensions",
            FieldValue::Map(
                dims.iter()
                    .map(|(k, v)| (Arc::from(*k), v.clone()))
                    .collect(),
            ),
        )],
    }
}

#[test]
fn every_error_has_its_path() {
    let errs = compile(json!([
        {"name": "", "maxAmount": -1, "validDuration": "soon"},
        {"name": "a", "validDuration": "0s", "rateLimitAlgorithm": "ROLLING_WINDOW",
         "bucketDuration": "1s"},
        {"name": "a", "maxAmount": 1, "validDuration": "1s", "rateLimitAlgorithm": 1,
         "bucketDuration": "1s",
         "overrides": [{"maxAmount": 1}, {"dimensions": {"x": [1]}, "maxAmount": -2}]},
        {"name": "b", "maxAmount": 1, "validDuration": "10s", "rateLimitAlgorithm": 1,
         "bucketDuration": "1ms"}
    ]))
    .expect_err("invalid");
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "quotas[0].name",
            "quotas[0].maxAmount",
            "quotas[0].validDuration",
            "quotas[1].maxAmount",
            "quotas[1].validDuration",
            "quotas[2].name",
            "quotas[2].validDuration",
            "quotas[2].overrides[0].dimensions",
            "quotas[2].overrides[1].dimensions.x",
            "quotas[2].overrides[1].maxAmount",
            "quotas[3].bucketDuration",
        ],
        "{errs:#?}"
    );
    assert!(errs[5].message.contains("duplicate"), "{}", errs[5]);
    assert!(
        errs[6].message.contains("longer than bucketDuration"),
        "{}",
        errs[6]
    );
    assert_eq!(compile(json!([])).expect_err("empty")[0].path, "quotas");
}

#[test]
fn defaults_and_inheritance() {
    let q = compile(json!([{
        "name": "rc", "maxAmount": 5, "validDuration": "60s", "rateLimitAlgorithm": "ROLLING_WINDOW",
        "shadowMode": true,
        "overrides": [{"dimensions": {"u": "a", "n": 3}, "maxAmount": 0, "validDuration": "2s",
                       "shadowMode": false}]
    }]))
    .expect("valid");
    let quota = &q.quotas[0];
    assert_eq!(quota.limit.bucket_duration, Duration::from_millis(100));
    assert_eq!(quota.limit.buckets(), 600);
    assert!(quota.limit.shadow);
    let o = &quota.overrides[0];
    assert_eq!(
        o.dimensions,
        [("n".into(), "3".into()), ("u".into(), "a".into())]
    );
    assert_eq!(o.limit.max_amount, 0);
    assert_eq!(o.limit.valid_duration, Duration::from_secs(2));
    assert_eq!(o.limit.algorithm, Algorithm::RollingWindow);
    assert!(!o.limit.shadow);
    assert_eq!(
        default_bucket(Duration::from_secs(3600)),
        Duration::from_secs(6)
    );
    assert_eq!(
        default_bucket(Duration::from_millis(50)),
        Duration::from_millis(50)
    );
}

#[test]
fn names_overrides_and_keys() {
    let q = compile(json!([
        {"name": "requestcount.quota.istio-system", "maxAmount": 1, "validDuration": "1s"},
        {"name": "short", "maxAmount": 2, "validDuration": "1s",
         "overrides": [
            {"dimensions": {"user": "vip"}, "maxAmount": 20},
            {"dimensions": {"user": "vip", "code": 7}, "maxAmount": 30},
            {"dimensions": {"code": 7}, "maxAmount": 40}
         ]},
        {"name": "exact.ns", "maxAmount": 3, "validDuration": "1s"}
    ]))
    .expect("valid");
    let find = |n: &str| q.find(n).map(|q| &*q.name);
    assert_eq!(
        find("requestcount.istio-system"),
        Some("requestcount.quota.istio-system")
    );
    assert_eq!(
        find("requestcount.quota.istio-system"),
        Some("requestcount.quota.istio-system")
    );
    assert_eq!(find("short.default"), Some("short"));
    assert_eq!(find("short"), Some("short"));
    assert_eq!(find("exact.ns"), Some("exact.ns"));
    assert_eq!(find("exact.other"), None);
    // Instances reach the adapter by Istio's full name, kind included, whichever spelling
    // the quota was given.
    assert_eq!(
        find("requestcount.instance.istio-system"),
        Some("requestcount.quota.istio-system")
    );
    assert_eq!(find("exact.instance.ns"), Some("exact.ns"));
    assert_eq!(find("exact.quota.other"), None);
    assert_eq!(find("short.instance.default"), Some("short"));
    // A quota named with the kind keeps its name, whichever comes first in the list.
    for pair in [["a.ns", "a.instance.ns"], ["a.instance.ns", "a.ns"]] {
        let both = compile(json!([
            {"name": pair[0], "maxAmount": 1, "validDuration": "1s"},
            {"name": pair[1], "maxAmount": 2, "validDuration": "1s"}
        ]))
        .expect("valid");
        let find = |n: &str| both.find(n).map(|q| &*q.name);
        assert_eq!(find("a.instance.ns"), Some("a.instance.ns"), "{pair:?}");
        assert_eq!(find("a.quota.ns"), Some("a.ns"), "{pair:?}");
        assert_eq!(find("a.ns"), Some("a.ns"), "{pair:?}");
        assert_eq!(find("a.rule.ns"), Some("a.ns"), "{pair:?}");
    }
    let err = q.select(&instance("nope.ns", &[])).expect_err("unknown");
    assert_eq!(err.kind, mixer_adapter_api::ErrorKind::InvalidInstance);
    assert!(!err.retryable);

    let max = |dims: &[(&str, Value)]| {
        q.select(&instance("short.ns", dims))
            .expect("s")
            .limit
            .max_amount
    };
    assert_eq!(max(&[("user", "vip".into())]), 20);
    assert_eq!(
        max(&[("user", "vip".into()), ("code", Value::Int64(7))]),
        20,
        "first match wins"
    );
    assert_eq!(
        max(&[("user", "joe".into()), ("code", Value::Int64(7))]),
        40,
        "int by its text"
    );
    assert_eq!(max(&[("user", "joe".into())]), 2);
    assert_eq!(max(&[]), 2);

    let a = counter_key(
        "q",
        &[("b".into(), "1".into()), ("a".into(), Value::Int64(1))],
    );
    let b = counter_key(
        "q",
        &[("a".into(), Value::Int64(1)), ("b".into(), "1".into())],
    );
    assert_eq!(a, b, "sorted");
    assert_eq!(a, "q|1:a=i1:1|1:b=s1:1");
    assert_ne!(
        counter_key("q", &[("a".into(), "x|1:b=s1:y".into())]),
        counter_key("q", &[("a".into(), "x".into()), ("b".into(), "y".into())])
    );
}

/// The counter key as it was first written, with `format!`: keys are stored (in Redis too),
/// so the key built piece by piece must be the same text for any dimensions.
fn counter_key_by_format(quota: &str, dims: &[(Arc<str>, Value)]) -> String {
    let mut sorted: Vec<&(Arc<str>, Value)> = dims.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut key = quota.to_string();
    for (k, v) in sorted {
        let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
        let tag = match v {
            Value::Int64(_) => 'i',
            Value::Bool(_) => 'b',
            _ => 's',
        };
        key.push_str(&format!("|{}:{k}={tag}{}:{text}", k.len(), text.len()));
    }
    key
}

use proptest::strategy::Strategy as _;

proptest::proptest! {
    #[test]
    fn counter_key_is_the_formatted_key(
        quota in "[a-z.]{0,12}",
        dims in proptest::collection::vec(
            ("[a-zé|:=]{0,6}", proptest::prop_oneof![
                "[a-z0-9|:=é]{0,12}".prop_map(Value::from),
                proptest::num::i64::ANY.prop_map(Value::Int64),
                proptest::bool::ANY.prop_map(Value::Bool),
            ]),
            0..6,
        ),
    ) {
        let dims: Vec<(Arc<str>, Value)> =
            dims.into_iter().map(|(k, v)| (Arc::from(k.as_str()), v)).collect();
        proptest::prop_assert_eq!(counter_key(&quota, &dims), counter_key_by_format(&quota, &dims));
    }
}
