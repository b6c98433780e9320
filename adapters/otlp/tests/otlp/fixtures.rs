//! What every test builds: the handler and its params, the instances it is given, and
//! accessors for the attributes of what the receiver got.

use std::sync::Arc;

use mixer_adapter_api::BuildContext;
use mixer_adapter_otlp::{Otlp, OtlpHandler, OtlpParams};
use mixer_model::{FieldValue, Instance, Template, Timestamp, Value};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use serde_json::json;

pub fn build(params: serde_json::Value) -> Arc<OtlpHandler> {
    let params: OtlpParams = mixer_adapter_api::host::decode_params(&params).expect("decodes");
    Otlp.build_handler(
        &params.compile().expect("valid params"),
        &BuildContext {
            handler_name: "otlp.istio-system".into(),
        },
    )
    .expect("built")
}

/// Fast retries, so failure tests finish quickly.
pub fn params(addr: impl std::fmt::Display) -> serde_json::Value {
    json!({
        "endpoint": format!("http://{addr}"),
        "timeout": "2s",
        "headers": {"Authorization": "Bearer t0ken", "x-tenant": "team-a"},
        "batch": {"scheduledDelay": "1h"},
        "retry": {"initialBackoff": "10ms", "maxBackoff": "40ms", "maxElapsedTime": "400ms"},
        "resource": {"k8s.cluster.name": "test", "replicas": 2},
        "metrics": [
            {"instanceName": "requestcount.instance.istio-system", "name": "istio.requests",
             "kind": "COUNTER", "unit": "{request}", "description": "Requests"},
            {"instanceName": "requestduration.istio-system", "name": "istio.request.duration",
             "kind": "HISTOGRAM", "unit": "s", "buckets": [0.01, 0.1, 1]},
            {"instanceName": "connections.istio-system", "name": "istio.connections",
             "kind": "GAUGE"},
        ]
    })
}

pub fn instance(
    name: &str,
    template: Template,
    fields: Vec<(&'static str, FieldValue)>,
) -> Instance {
    Instance {
        name: name.into(),
        template,
        fields,
    }
}

pub fn v(value: impl Into<Value>) -> FieldValue {
    FieldValue::Value(value.into())
}

pub fn ts(nanos: i64) -> FieldValue {
    FieldValue::Value(Value::Timestamp(Timestamp(nanos)))
}

pub fn map(entries: Vec<(&str, Value)>) -> FieldValue {
    FieldValue::Map(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
}

pub const T0: i64 = 1_570_000_000_123_456_789;

pub fn client_span() -> Instance {
    instance(
        "tracespan.istio-system",
        Template::TraceSpan,
        vec![
            ("trace_id", v("463ac35c9f6413ad48485a3953bb6124")),
            ("span_id", v("a2fb4a1d1a96d312")),
            ("parent_span_id", v("0020000000000001")),
            ("span_name", v("GET /ratings")),
            ("start_time", ts(T0)),
            ("end_time", ts(T0 + 19_000_000)),
            (
                "span_tags",
                map(vec![
                    ("http.method", Value::from("GET")),
                    ("request.size", Value::Int64(128)),
                    ("source.ip", Value::IpAddress("10.1.2.3".parse().unwrap())),
                ]),
            ),
            ("http_status_code", v(503i64)),
            ("client_span", v(true)),
        ],
    )
}

pub fn server_span(span_id: &str) -> Instance {
    instance(
        "tracespan.istio-system",
        Template::TraceSpan,
        vec![
            ("trace_id", v("00f067aa0ba902b7")),
            ("span_id", v(span_id)),
            ("parent_span_id", v("")),
            ("span_name", v("/health")),
            ("start_time", ts(T0)),
            ("end_time", ts(T0 + 1_000)),
            ("http_status_code", v(404i64)),
            ("client_span", v(false)),
        ],
    )
}

pub fn log_entry(severity: &str, code: i64) -> Instance {
    instance(
        "accesslog.istio-system",
        Template::LogEntry,
        vec![
            (
                "variables",
                map(vec![
                    ("method", Value::from("GET")),
                    ("responseCode", Value::Int64(code)),
                    (
                        "latency",
                        Value::Duration(mixer_model::Duration(19_000_000)),
                    ),
                    ("ok", Value::Bool(code < 500)),
                ]),
            ),
            ("timestamp", ts(T0)),
            ("severity", v(severity)),
        ],
    )
}

pub fn metric(name: &str, value: Value, code: i64) -> Instance {
    instance(
        name,
        Template::Metric,
        vec![
            ("value", FieldValue::Value(value)),
            (
                "dimensions",
                map(vec![
                    ("response_code", Value::Int64(code)),
                    ("source_app", Value::from("web")),
                ]),
            ),
        ],
    )
}

pub fn attr(attrs: &[KeyValue], key: &str) -> Option<any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone())
        .and_then(|v: AnyValue| v.value)
}

pub fn s(text: &str) -> Option<any_value::Value> {
    Some(any_value::Value::StringValue(text.into()))
}

pub fn i(n: i64) -> Option<any_value::Value> {
    Some(any_value::Value::IntValue(n))
}
