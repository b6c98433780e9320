//! The example plugins built from Rust with the SDK (adapters/examples/wasm, built by
//! `adapters/examples/wasm/build.sh` into target/wasm-guests/, or `$MIXER_WASM_GUESTS`).
//! Without them the tests fail under CI=1 and say how to build them otherwise.

use std::path::PathBuf;
use std::sync::Arc;

use mixer_adapter_api::BuildContext;
use mixer_adapter_api::host::AnyAdapter;
use mixer_model::{Code, FieldValue, Instance, Template, Value};
use mixer_wasm::WasmAdapter;
use serde_json::json;

fn guest(name: &str) -> Option<String> {
    let dir = std::env::var_os("MIXER_WASM_GUESTS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/wasm-guests"),
        PathBuf::from,
    );
    let path = dir.join(format!("{name}.wasm"));
    if path.exists() {
        return Some(path.display().to_string());
    }
    let how = "build them with adapters/examples/wasm/build.sh";
    if std::env::var_os("CI").is_some() {
        panic!("{} is missing under CI=1: {how}", path.display());
    }
    eprintln!("skipped: {} is missing ({how})", path.display());
    None
}

fn authz(header: Option<&str>) -> Instance {
    let mut props = Vec::new();
    if let Some(v) = header {
        props.push((Arc::from("x-plugin-deny"), Value::String(Arc::from(v))));
    }
    Instance {
        name: Arc::from("request.istio-system"),
        template: Template::Authorization,
        fields: vec![("action.properties", FieldValue::Map(props))],
    }
}

#[tokio::test]
async fn deny_header_denies_on_its_header_only() {
    let Some(module) = guest("deny-header") else {
        return;
    };
    let a = WasmAdapter::default();
    let params = json!({"module": module, "config": {"header": "x-plugin-deny"}});
    a.compile(&params).expect("valid");
    assert_eq!(
        Some(a.templates_of(&a.compile(&params).expect("compiles"))),
        Some(vec![Template::Authorization])
    );
    let h = a
        .compile_and_build(
            &params,
            &BuildContext {
                handler_name: Arc::from("deny.istio-system"),
            },
        )
        .expect("builds");
    let check = h.as_check().expect("checks");
    let r = check.check(&authz(Some("true"))).await.unwrap();
    assert_eq!(r.status.code, Code::PermissionDenied);
    assert_eq!(r.status.message, "denied by plugin");
    for other in [None, Some("false"), Some("")] {
        let r = check.check(&authz(other)).await.unwrap();
        assert_eq!(r.status.code, Code::Ok, "{other:?}");
    }
}

#[test]
fn deny_header_validates_its_config() {
    let Some(module) = guest("deny-header") else {
        return;
    };
    let a = WasmAdapter::default();
    let e = a
        .compile(&json!({"module": module, "config": {"header": " "}}))
        .unwrap_err();
    assert_eq!(e[0].to_string(), "config.header: must not be empty");
    let e = a
        .compile(&json!({"module": module, "config": {"headr": "x"}}))
        .unwrap_err();
    assert_eq!(e[0].path, "config");
    assert!(e[0].message.contains("unknown field `headr`"), "{e:?}");
}

#[tokio::test]
async fn count_by_bumps_host_counters() {
    let Some(module) = guest("count-by") else {
        return;
    };
    let a = WasmAdapter::default();
    let params = json!({"module": module, "config": {"dimension": "destination"}});
    a.compile(&params).expect("valid");
    let h = a
        .compile_and_build(
            &params,
            &BuildContext {
                handler_name: Arc::from("count.istio-system"),
            },
        )
        .expect("builds");
    let metric = |dest: &str, value: i64| Instance {
        name: Arc::from("requests.istio-system"),
        template: Template::Metric,
        fields: vec![
            ("value", FieldValue::Value(Value::Int64(value))),
            (
                "dimensions",
                FieldValue::Map(vec![(
                    Arc::from("destination"),
                    Value::String(Arc::from(dest)),
                )]),
            ),
        ],
    };
    let mut batch: Vec<Instance> = (0..300).map(|_| metric("reviews", 1)).collect();
    batch.push(metric("ratings", 7));
    h.as_report()
        .expect("reports")
        .report(&batch)
        .await
        .expect("report");
    let m = a.host().unwrap().metrics();
    assert_eq!(m.counter("count.istio-system", "requests", "reviews"), 300);
    assert_eq!(m.counter("count.istio-system", "requests", "ratings"), 7);
    let mut page = String::new();
    h.as_exposition().unwrap().render(&mut page);
    assert!(
        page.contains(
            r#"mixer_wasm_plugin_counter_total{handler="count.istio-system",key="ratings",name="requests"} 7"#
        ),
        "{page}"
    );
}

/// The Python example (adapters/examples/wasm/python-deny, built by componentize-py): the
/// same answers as the Rust deny-header, through an interpreter inside the component. Its
/// load is timed: an 18 MB component is most of the cost of a config that names it.
#[tokio::test]
async fn python_deny_decides_as_the_rust_one_does() {
    let Some(module) = guest("python-deny") else {
        return;
    };
    let a = WasmAdapter::default();
    // A Python call runs the interpreter: more than the 1 ms a Rust plugin gets, above all
    // in a debug build.
    let params = json!({
        "module": module,
        "config": {"header": "x-plugin-deny"},
        "limits": {"checkDeadline": "2s", "memoryMib": 64},
    });
    let started = std::time::Instant::now();
    a.compile(&params).expect("valid");
    eprintln!(
        "python-deny: compiled and validated in {:?}",
        started.elapsed()
    );
    let e = a
        .compile(&json!({"module": module, "config": {"header": " "}}))
        .unwrap_err();
    assert_eq!(e[0].to_string(), "config.header: must not be empty");
    let h = a
        .compile_and_build(
            &params,
            &BuildContext {
                handler_name: Arc::from("python-deny.istio-system"),
            },
        )
        .expect("builds");
    let check = h.as_check().expect("checks");
    let r = check.check(&authz(Some("true"))).await.unwrap();
    assert_eq!(r.status.code, Code::PermissionDenied);
    assert_eq!(r.status.message, "denied by plugin");
    for other in [None, Some("false"), Some("")] {
        let r = check.check(&authz(other)).await.unwrap();
        assert_eq!(r.status.code, Code::Ok, "{other:?}");
    }
    let started = std::time::Instant::now();
    check.check(&authz(Some("false"))).await.unwrap();
    eprintln!(
        "python-deny: one check (fresh instance) in {:?}",
        started.elapsed()
    );
}

fn api_key(key: Option<&str>) -> Instance {
    Instance {
        name: Arc::from("key.istio-system"),
        template: Template::ApiKey,
        fields: key
            .map(|k| ("key", FieldValue::Value(Value::from(k))))
            .into_iter()
            .collect(),
    }
}

#[tokio::test]
async fn key_labels_generates_a_keys_owner_and_labels_and_denies_other_keys() {
    let Some(module) = guest("key-labels") else {
        return;
    };
    let a = WasmAdapter::default();
    // A debug build of the host on a busy CI machine can miss the default 1 ms deadline of
    // a request-path call; the deadline is not what this test is about.
    let params = json!({"module": module, "limits": {"checkDeadline": "2s"},
        "config": {"valid_ms": 1500, "keys": {
        "k-123": {"principal": "team-a", "labels": {"tier": "gold"}}}}});
    assert_eq!(
        a.templates_of(&a.compile(&params).expect("compiles")),
        vec![Template::ApiKey]
    );
    let h = a
        .compile_and_build(
            &params,
            &BuildContext {
                handler_name: Arc::from("keys.istio-system"),
            },
        )
        .expect("builds");
    assert!(h.as_check().is_none() && h.as_report().is_none());
    let generator = h.as_attributes().expect("generates");
    let known = generator.generate(&api_key(Some("k-123"))).await.unwrap();
    assert_eq!(known.denial, None);
    assert_eq!(
        known.valid_duration,
        Some(std::time::Duration::from_millis(1500))
    );
    assert_eq!(known.outputs[0], ("principal", Value::from("team-a")));
    let Value::StringMap(labels) = &known.outputs[1].1 else {
        panic!("claims is a string map: {known:?}");
    };
    assert_eq!(
        (known.outputs[1].0, labels.get("tier")),
        ("claims", Some("gold"))
    );
    for (key, why) in [(Some("k-999"), "unknown API key"), (None, "no API key")] {
        let denied = generator.generate(&api_key(key)).await.unwrap();
        let denial = denied.denial.expect("denied");
        assert_eq!(
            (denial.status.code, denial.status.message.as_str()),
            (Code::Unauthenticated, why)
        );
    }
    let wrong = generator
        .generate(&authz(None))
        .await
        .expect_err("not its template");
    assert!(
        wrong
            .message
            .contains("does not take template authorization"),
        "{wrong}"
    );
    let bad = a.compile(&json!({"module": module, "config": {"keys": {}}}));
    let errors = bad.expect_err("no key");
    assert!(
        errors
            .iter()
            .any(|e| e.message.contains("name at least one key")),
        "{errors:?}"
    );
}
