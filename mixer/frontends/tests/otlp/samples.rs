//! Sample log records, spans and export requests the tests send or map.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

pub(crate) fn kv(key: &str, value: Any) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        key_strindex: 0,
    }
}

pub(crate) fn s(v: &str) -> Any {
    Any::StringValue(v.into())
}

pub(crate) fn resource() -> Option<Resource> {
    Some(Resource {
        attributes: vec![
            kv("service.name", s("checkout")),
            kv("k8s.namespace.name", s("shop")),
            kv("deployment.environment", s("prod")),
            kv("http.route", s("/from-resource")),
        ],
        ..Default::default()
    })
}

pub(crate) fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: "io.opentelemetry.http".into(),
        version: "1.2.0".into(),
        attributes: vec![kv("deployment.environment", s("staging-from-scope"))],
        dropped_attributes_count: 0,
    })
}

/// An HTTP server access log: current semantic-convention keys.
pub(crate) fn http_log() -> LogRecord {
    LogRecord {
        time_unix_nano: 1_700_000_000_123_000_000,
        observed_time_unix_nano: 1_700_000_000_200_000_000,
        severity_number: 9,
        severity_text: String::new(),
        body: Some(AnyValue {
            value: Some(s("GET /cart 200")),
        }),
        attributes: vec![
            kv("http.request.method", s("GET")),
            kv("url.path", s("/cart")),
            kv("url.query", s("id=7&x")),
            kv("url.scheme", s("https")),
            kv("server.address", s("shop.example.com")),
            kv("server.port", Any::IntValue(443)),
            kv("client.address", s("10.1.2.3")),
            kv("client.port", Any::IntValue(51234)),
            kv("http.response.status_code", Any::IntValue(200)),
            kv("http.route", s("/cart")),
            kv("user_agent.original", s("curl/8.5.0")),
            kv(
                "http.request.header.x-user",
                Any::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(s("amy")),
                    }],
                }),
            ),
            kv("http.request.body.size", Any::IntValue(0)),
            kv("http.response.body.size", Any::IntValue(512)),
            kv("enduser.id", s("amy")),
            kv("retry", Any::BoolValue(false)),
            kv("ratio", Any::DoubleValue(0.25)),
        ],
        trace_id: vec![0x4b; 16],
        span_id: vec![0, 0, 0, 0, 0, 0, 0, 7],
        event_name: "http.access".into(),
        ..Default::default()
    }
}

/// A structured application log with deprecated HTTP keys and a map body.
pub(crate) fn structured_log() -> LogRecord {
    LogRecord {
        time_unix_nano: 0,
        observed_time_unix_nano: 1_700_000_001_000_000_000,
        severity_number: 17,
        severity_text: "oops".into(),
        body: Some(AnyValue {
            value: Some(Any::KvlistValue(KeyValueList {
                values: vec![
                    kv("msg", s("payment failed")),
                    kv("attempt", Any::IntValue(3)),
                ],
            })),
        }),
        attributes: vec![
            kv("http.method", s("POST")),
            kv("http.target", s("/pay?retry=1")),
            kv("http.status_code", s("502")),
            kv("http.client_ip", s("not-an-ip")),
            kv("blob", Any::BytesValue(vec![0xde, 0xad])),
        ],
        ..Default::default()
    }
}

pub(crate) fn server_span() -> Span {
    Span {
        trace_id: (1..=16).collect(),
        span_id: vec![0xaa, 0xbb, 0xcc, 0xdd, 0, 1, 2, 3],
        parent_span_id: vec![0x10; 8],
        name: "GET /cart".into(),
        kind: SpanKind::Server as i32,
        start_time_unix_nano: 1_700_000_000_000_000_000,
        end_time_unix_nano: 1_700_000_000_045_500_000,
        attributes: vec![
            kv("http.request.method", s("GET")),
            kv("url.path", s("/cart")),
            kv("http.response.status_code", Any::IntValue(404)),
            kv("http.route", s("/cart")),
            kv("server.address", s("shop.example.com")),
            kv("client.address", s("2001:db8::1")),
        ],
        status: Some(Status {
            message: "not found".into(),
            code: StatusCode::Error as i32,
        }),
        ..Default::default()
    }
}

pub(crate) fn grpc_client_span() -> Span {
    Span {
        trace_id: (1..=16).collect(),
        span_id: vec![0x22; 8],
        parent_span_id: vec![0xaa, 0xbb, 0xcc, 0xdd, 0, 1, 2, 3],
        name: "payments.Payments/Charge".into(),
        kind: SpanKind::Client as i32,
        start_time_unix_nano: 1_700_000_000_010_000_000,
        end_time_unix_nano: 1_700_000_000_030_000_000,
        attributes: vec![
            kv("rpc.system", s("grpc")),
            kv("rpc.service", s("payments.Payments")),
            kv("rpc.method", s("Charge")),
            kv("rpc.grpc.status_code", Any::IntValue(14)),
            kv("server.address", s("payments")),
            kv("server.port", Any::IntValue(50051)),
        ],
        ..Default::default()
    }
}

pub(crate) fn logs_request(records: Vec<LogRecord>) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: resource(),
            scope_logs: vec![ScopeLogs {
                scope: scope(),
                log_records: records,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

pub(crate) fn trace_request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: resource(),
            scope_spans: vec![ScopeSpans {
                scope: scope(),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}
