//! The adapter's info and params validation, without a receiver.

use mixer_adapter_api::BuildContext;
use mixer_adapter_api::host::AnyAdapter;
use mixer_adapter_otlp::Otlp;
use mixer_model::Template;
use serde_json::json;

#[test]
fn validation_errors_have_paths_and_build_refuses_bad_params() {
    assert_eq!(Otlp.info().name, "otlp");
    assert_eq!(
        Otlp.info().templates,
        [Template::Metric, Template::LogEntry, Template::TraceSpan]
    );
    let errors = Otlp
        .compile(&json!({
            "endpoint": "http://c:4317",
            "headers": {"grpc-status": "0"},
            "retry": {"maxElapsedTime": "forever"},
            "metrics": [{"instanceName": "a.ns", "name": "a b", "kind": "COUNTER"}],
        }))
        .unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "headers.grpc-status",
            "retry.maxElapsedTime",
            "metrics[0].name"
        ]
    );
    let missing = Otlp.compile(&serde_json::Value::Null).unwrap_err();
    assert_eq!(missing[0].path, "endpoint");
    // No runtime here: the build refuses instead of panicking.
    let err = Otlp
        .compile_and_build(
            &json!({"endpoint": "http://127.0.0.1:4317"}),
            &BuildContext {
                handler_name: "h".into(),
            },
        )
        .err()
        .expect("no tokio runtime");
    assert!(err.message.contains("tokio runtime"), "{}", err.message);
}
