use super::*;
use mixer_adapter_api::host::decode_params;
use serde_json::json;

fn compile(v: serde_json::Value) -> Result<OtlpConfig, Vec<ParamError>> {
    decode_params::<OtlpParams>(&v)
        .map_err(|e| vec![e])?
        .compile()
}

fn paths(v: serde_json::Value) -> Vec<String> {
    compile(v)
        .expect_err("invalid")
        .into_iter()
        .map(|e| e.path)
        .collect()
}

#[test]
fn defaults() {
    let c = compile(json!({"endpoint": "http://127.0.0.1:4317"})).expect("valid");
    assert_eq!(c.timeout, DEFAULT_TIMEOUT);
    assert_eq!(c.max_export_batch_size, 512);
    assert_eq!(c.scheduled_delay, DEFAULT_SCHEDULED_DELAY);
    assert_eq!(
        c.retry,
        Some(RetryConfig {
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            max_elapsed_time: DEFAULT_MAX_ELAPSED_TIME,
        })
    );
    assert_eq!(
        c.resource,
        [(
            "service.name".to_string(),
            ResourceValue::String("mixer".into())
        )]
    );
    assert_eq!(c.temporality, Temporality::Cumulative);
    assert_eq!(c.export_budget(), Duration::from_secs(15));
}

#[test]
fn a_full_config() {
    let c = compile(json!({
            "endpoint": "http://collector:4317",
        "timeout": "2s",
        "headers": {"Authorization": "Bearer abc", "x-tenant": "t1"},
        "batch": {"maxExportBatchSize": 100, "scheduledDelay": "500ms"},
        "retry": {"initialBackoff": "10ms", "maxBackoff": "50ms", "maxElapsedTime": "1s"},
        "resource": {"service.name": "mesh", "replicas": 3, "canary": false, "ratio": 0.5},
        "metricTemporality": "DELTA",
        "metrics": [
            {"instanceName": "requestcount.instance.istio-system", "name": "istio.requests",
             "kind": "COUNTER", "unit": "{request}", "description": "Requests"},
            {"instanceName": "requestduration.istio-system", "name": "istio.request.duration",
             "kind": "HISTOGRAM", "unit": "s", "buckets": [0.01, 0.1, 1]},
        ]
    }))
    .expect("valid");
    assert_eq!(
        c.headers,
        [
            ("authorization".to_string(), "Bearer abc".to_string()),
            ("x-tenant".to_string(), "t1".to_string())
        ]
    );
    assert_eq!(c.max_export_batch_size, 100);
    assert_eq!(c.scheduled_delay, Duration::from_millis(500));
    assert_eq!(c.retry.unwrap().max_elapsed_time, Duration::from_secs(1));
    assert_eq!(c.resource.len(), 4);
    assert!(
        c.resource
            .contains(&("replicas".into(), ResourceValue::Int(3)))
    );
    assert!(
        c.resource
            .contains(&("service.name".into(), ResourceValue::String("mesh".into())))
    );
    assert_eq!(c.temporality, Temporality::Delta);
    assert_eq!(c.metrics[1].buckets, Some(vec![0.01, 0.1, 1.0]));
    assert_eq!(c.export_budget(), Duration::from_secs(3));
    let c =
        compile(json!({"endpoint": "http://c:4317", "retry": {"enabled": false}})).expect("valid");
    assert_eq!(c.retry, None);
    assert_eq!(c.export_budget(), DEFAULT_TIMEOUT);
}

#[test]
fn every_error_has_its_path() {
    let errs = paths(json!({
        "endpoint": "",
        "timeout": "soon",
        "headers": {"grpc-timeout": "1", "x-key-bin": "AA==", "bad key": "v", "x-ok": "caf\u{e9}"},
        "batch": {"maxExportBatchSize": 0, "scheduledDelay": "0s"},
        "retry": {"initialBackoff": "2s", "maxBackoff": "1s", "maxElapsedTime": "-1s"},
        "resource": {"": "x", "list": [1]},
        "metrics": [
            {"instanceName": "", "name": "1bad", "kind": "COUNTER"},
            {"instanceName": "a.ns", "name": "a"},
            {"instanceName": "a.instance.ns", "name": "A", "kind": "GAUGE", "buckets": [1]},
            {"instanceName": "h.ns", "name": "h", "kind": "HISTOGRAM", "buckets": [1, 1, 0.5],
             "unit": "\u{b5}s"},
            {"instanceName": "e.ns", "name": "e", "kind": "HISTOGRAM", "buckets": []},
        ]
    }));
    assert_eq!(
        errs,
        [
            "endpoint",
            "timeout",
            "headers.bad key",
            "headers.grpc-timeout",
            "headers.x-key-bin",
            "headers.x-ok",
            "batch.maxExportBatchSize",
            "batch.scheduledDelay",
            "retry.maxBackoff",
            "retry.maxElapsedTime",
            "resource.",
            "resource.list",
            "metrics[0].instanceName",
            "metrics[0].name",
            "metrics[1].kind",
            "metrics[2].instanceName",
            "metrics[2].name",
            "metrics[2].buckets",
            "metrics[3].unit",
            "metrics[3].buckets[1]",
            "metrics[3].buckets[2]",
            "metrics[4].buckets",
        ]
    );
}

#[test]
fn endpoints() {
    for bad in [
        "127.0.0.1:4317",
        "https://collector:4317",
        "grpc://collector:4317",
        "http://collector:4317/v1/traces",
        "http://",
        "not a uri",
    ] {
        assert_eq!(paths(json!({"endpoint": bad})), ["endpoint"], "{bad}");
    }
    let e = compile(json!({"endpoint": "https://c:4317"})).expect_err("tls");
    assert!(e[0].message.contains("TLS"), "{}", e[0]);
    for good in [
        "http://127.0.0.1:4317",
        "http://[::1]:4317/",
        "http://collector",
    ] {
        compile(json!({ "endpoint": good })).expect(good);
    }
}

#[test]
fn header_values_stay_out_of_messages() {
    let e = compile(json!({"endpoint": "http://c:1", "headers": {"authorization": "secret\n"}}))
        .expect_err("bad value");
    assert_eq!(e[0].path, "headers.authorization");
    assert!(!e[0].message.contains("secret"), "{}", e[0]);
}

#[test]
fn unknown_fields_and_kinds_are_rejected() {
    assert_eq!(
        paths(json!({"endpoint": "http://c:1", "insecure": true})),
        ["insecure"]
    );
    assert_eq!(
        paths(json!({"endpoint": "http://c:1", "batch": {"maxQueueSize": 10}})),
        ["batch.maxQueueSize"]
    );
    assert_eq!(
        paths(json!({"endpoint": "http://c:1", "retry": {"initialInterval": "1s"}})),
        ["retry.initialInterval"]
    );
    let e = compile(json!({"endpoint": "http://c:1",
        "metrics": [{"instanceName": "a.ns", "name": "a", "kind": "DISTRIBUTION"}]}))
    .expect_err("bad kind");
    assert_eq!(e[0].path, "metrics[0].kind");
    assert!(e[0].message.contains("HISTOGRAM"), "{}", e[0]);
    assert_eq!(
        paths(json!({"endpoint": "http://c:1", "timeout": 10})),
        ["timeout"]
    );
    assert_eq!(
        paths(json!({"endpoint": "http://c:1", "metricTemporality": "SOMETIMES"})),
        ["metricTemporality"]
    );
}

#[test]
fn names() {
    assert!(is_valid_instrument_name("istio.request.duration"));
    assert!(is_valid_instrument_name("a_b-c/d"));
    assert!(!is_valid_instrument_name("1a"));
    assert!(!is_valid_instrument_name(""));
    assert!(!is_valid_instrument_name("a b"));
    assert!(!is_valid_instrument_name(&"a".repeat(256)));
    assert_eq!(instance_key("rc.instance.istio-system"), "rc.istio-system");
    assert_eq!(instance_key("rc.istio-system"), "rc.istio-system");
}

/// An endpoint's password never appears in its errors, and the adapter declares what the
/// mixer hides in dumps: the endpoint's password and query keys, and every header value
/// (vendors' key headers have names no list of secret names knows).
#[test]
fn secrets_stay_out_of_errors_and_dumps() {
    let errors =
        compile(json!({"endpoint": "ftp://user:pw-secret@127.0.0.1:1"})).expect_err("invalid");
    assert!(
        errors[0].message.contains("ftp://user:***@127.0.0.1:1")
            && !errors[0].message.contains("pw-secret"),
        "{errors:?}"
    );
    let errors = compile(json!({"endpoint": "http://127.0.0.1:1?api_key=q-secret"}))
        .expect_err("a gRPC endpoint takes no query");
    assert!(
        errors[0].message.contains("api_key=***") && !errors[0].message.contains("q-secret"),
        "{errors:?}"
    );
    let params = json!({
        "endpoint": "http://user:pw-secret@127.0.0.1:4317",
        "headers": {"authorization": "Bearer t0ken", "x-api-key": "k3y", "x-honeycomb-team": "hc"},
    });
    let adapter: &dyn mixer_adapter_api::host::AnyAdapter = &crate::Otlp;
    let shown =
        mixer_adapter_api::secrets::Redactor::new(&params, adapter.secret_params()).params();
    assert_eq!(
        shown,
        json!({
            "endpoint": "http://user:***@127.0.0.1:4317",
            "headers": {"authorization": "***", "x-api-key": "***", "x-honeycomb-team": "***"},
        })
    );
}

#[test]
fn point_instances() {
    let c = compile(json!({
        "endpoint": "http://127.0.0.1:4317",
        "points": ["otlppoint.instance.istio-system", "other.istio-system"],
    }))
    .expect("valid");
    assert_eq!(c.points, ["otlppoint.istio-system", "other.istio-system"]);
    assert_eq!(
        paths(json!({
            "endpoint": "http://127.0.0.1:4317",
            "metrics": [{"instanceName": "a.istio-system", "name": "a", "kind": "GAUGE"}],
            "points": ["", "a.instance.istio-system", "b.istio-system", "b.instance.istio-system"],
        })),
        ["points[0]", "points[1]", "points[3]"]
    );
}
