//! The conformance kit of the adapter API (`mixer_adapter_api::testkit`) over every adapter
//! built into the mixer, each with a real backend where it has one: a real Redis for
//! redisquota, a real mixer's OTLP ingest for the OTLP exporter, and a closed port for each
//! backend's outage.

#[path = "support/redis.rs"]
mod redis;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::testkit::{Case, Unreachable, assert_conforms};
use mixer_model::{FieldValue, Instance, Template, Timestamp, Value};
use mixer_tests::Mixer;
use serde_json::json;

fn instance(name: &str, template: Template, fields: Vec<(&'static str, FieldValue)>) -> Instance {
    Instance {
        name: name.into(),
        template,
        fields,
    }
}

fn value(v: impl Into<Value>) -> FieldValue {
    FieldValue::Value(v.into())
}

fn map(entries: &[(&str, &str)]) -> FieldValue {
    FieldValue::Map(
        entries
            .iter()
            .map(|(k, v)| (Arc::from(*k), Value::from(*v)))
            .collect(),
    )
}

fn now() -> Value {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    Value::Timestamp(Timestamp(nanos))
}

/// One valid instance of each template, named as the cases' params expect.
fn of(template: Template) -> Instance {
    match template {
        Template::Authorization => instance(
            "auth.instance.default",
            template,
            vec![
                ("subject", map(&[("user", "alice")])),
                ("action", map(&[("method", "GET")])),
            ],
        ),
        Template::CheckNothing => instance("nothing.instance.default", template, vec![]),
        Template::ListEntry => instance(
            "entry.instance.default",
            template,
            vec![("value", value("a"))],
        ),
        Template::Quota => instance(
            "requestcount.instance.default",
            template,
            vec![("dimensions", map(&[("source", "reviews")]))],
        ),
        Template::Metric => instance(
            "requestcount.instance.default",
            template,
            vec![
                ("value", value(1_i64)),
                ("dimensions", map(&[("source", "reviews")])),
            ],
        ),
        Template::LogEntry => instance(
            "accesslog.instance.default",
            template,
            vec![
                ("variables", map(&[("source", "reviews")])),
                ("timestamp", FieldValue::Value(now())),
                ("severity", value("info")),
            ],
        ),
        Template::TraceSpan => instance(
            "span.instance.default",
            template,
            vec![
                ("trace_id", value("0123456789abcdef0123456789abcdef")),
                ("span_id", value("0123456789abcdef")),
                ("span_name", value("GET /")),
                ("start_time", FieldValue::Value(now())),
                ("end_time", FieldValue::Value(now())),
            ],
        ),
        Template::ReportNothing => instance("nothing.instance.default", template, vec![]),
    }
}

fn case(name: &str, params: serde_json::Value, unreachable: Option<Unreachable>) -> Case {
    let registry = mixer_server::adapters::builtin();
    let adapter = registry
        .get(name)
        .unwrap_or_else(|| panic!("no built-in adapter {name}"))
        .clone();
    let instances = adapter.info().templates.iter().map(|t| of(*t)).collect();
    Case {
        adapter,
        params,
        unreachable,
        instances,
    }
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    mixer_tests::free_addr().port()
}

fn quotas() -> serde_json::Value {
    json!([{"name": "requestcount.instance.default", "maxAmount": 10, "validDuration": "1s"}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_built_in_adapter_conforms() {
    let redis = redis::Redis::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("stdio.log");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let receiver = tokio::task::spawn_blocking(move || {
        let m = Mixer::start(binary, &[]);
        m.wait_ready(Duration::from_secs(10));
        m
    })
    .await
    .expect("join");
    let cases = [
        case("denier", json!({}), None),
        case("noop", json!({}), None),
        case("listchecker", json!({"overrides": ["a"]}), None),
        case(
            "prometheus",
            json!({"metrics": [{"name": "requests_total", "kind": "COUNTER",
                "instanceName": "requestcount.instance.default", "labelNames": ["source"]}]}),
            None,
        ),
        case(
            "stdio",
            json!({"logStream": "FILE", "outputPath": log}),
            None,
        ),
        case("memquota", json!({"quotas": quotas()}), None),
        case(
            "redisquota",
            json!({"redisServerUrl": format!("127.0.0.1:{}", redis.port), "quotas": quotas()}),
            Some(Unreachable {
                params: json!({"redisServerUrl": format!("127.0.0.1:{}", closed_port()),
                    "quotas": quotas()}),
                immediate: &[Template::Quota],
            }),
        ),
        case(
            "otlp",
            json!({"endpoint": format!("http://{}", receiver.grpc), "retry": {"enabled": false}}),
            // Metrics are aggregated and exported on an interval; logs and spans at once.
            Some(Unreachable {
                params: json!({"endpoint": format!("http://127.0.0.1:{}", closed_port()),
                    "retry": {"enabled": false}}),
                immediate: &[Template::LogEntry, Template::TraceSpan],
            }),
        ),
    ];
    let registry = mixer_server::adapters::builtin();
    let mut covered: Vec<&str> = cases.iter().map(|c| c.adapter.info().name).collect();
    let mut registered: Vec<&str> = registry.names().collect();
    covered.sort_unstable();
    registered.sort_unstable();
    assert_eq!(
        covered, registered,
        "every built-in adapter has a case here"
    );
    for c in &cases {
        assert_conforms(c).await;
    }
    assert!(receiver.terminate().success());
}
