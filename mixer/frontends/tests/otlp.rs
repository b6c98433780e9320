//! The OTLP front end over a real loopback socket, driven by the generated tonic clients: log
//! records and spans become report instances, a full queue is answered with
//! `partial_success`, bad input is refused cleanly.
//!
//! Golden files: `tests/golden/otlp/*.txt` hold the attribute bag of each sample record.
//! Run with `UPDATE_GOLDEN=1` to rewrite them after an intended mapping change.

mod common;

use common::{RawCodec, Recorder};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mixer_adapter_api::AdapterRegistry;
use mixer_config::{ConfigOptions, SourceFile};
use mixer_frontends::otlp::{self, Origin};
use mixer_model::{AttributeBag, Instance, Timestamp, Vocabulary};
use mixer_runtime::{ConfigOrigin, QueueOptions, Runtime, RuntimeMetrics, RuntimeOptions};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use tonic::Code;
use tonic::transport::Channel;

const CONFIG: &str = r#"
kind: handler
metadata: {name: recorder, namespace: istio-system}
spec: {compiledAdapter: recorder}
---
kind: instance
metadata: {name: entry, namespace: istio-system}
spec:
  compiledTemplate: logentry
  params:
    variables:
      method: request.method
      path: request.path
      code: response.code
      host: request.host
      source: source.ip
      time: request.time
      duration: response.duration
      service: otel.resource["service.name"]
      route: otel.attributes["http.route"]
      env: otel.attributes["deployment.environment"]
      severity: otel.severity
      body: otel.body
      trace: otel.trace_id
      span: otel.span_id
      parent: otel.parent_span_id
      name: otel.span_name
      kind: otel.span_kind
      reporter: context.reporter.kind
---
kind: rule
metadata: {name: record-all, namespace: istio-system}
spec:
  actions: [{handler: recorder, instances: [entry]}]
"#;

// ---- recording adapter ---------------------------------------------------------------------

// ---- harness -------------------------------------------------------------------------------

struct Harness {
    logs: LogsServiceClient<Channel>,
    traces: TraceServiceClient<Channel>,
    addr: SocketAddr,
    records: Arc<Mutex<Vec<Instance>>>,
}

struct Setup {
    ready: bool,
    delay: Duration,
    queue: QueueOptions,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            ready: true,
            delay: Duration::ZERO,
            queue: QueueOptions::default(),
        }
    }
}

async fn start_with(setup: Setup) -> Harness {
    let records = Arc::new(Mutex::new(Vec::new()));
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(Recorder::slow(records.clone(), setup.delay)));
    let runtime = Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile {
            name: "test.yaml".into(),
            text: CONFIG.into(),
        }]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions {
            reports: setup.queue,
            ..RuntimeOptions::default()
        },
        RuntimeMetrics::unregistered(),
    );
    if setup.ready {
        runtime.reload().expect("test config loads");
    }
    let runtime = Arc::new(runtime);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(otlp::logs_service(runtime.clone()))
            .add_service(otlp::trace_service(runtime))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    Harness {
        logs: LogsServiceClient::new(channel.clone()),
        traces: TraceServiceClient::new(channel),
        addr,
        records,
    }
}

async fn start() -> Harness {
    start_with(Setup::default()).await
}

type Vars = BTreeMap<String, String>;

fn recorded(records: &Mutex<Vec<Instance>>) -> Vec<Vars> {
    records
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|i| {
            i.map("variables")
                .expect("variables")
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// Instances arrive from the handler's queue after the export was answered: wait (a bounded
/// time) until `n` have arrived, then a little longer to catch any extra one.
async fn wait_recorded(records: &Mutex<Vec<Instance>>, n: usize) -> Vec<Vars> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while records.lock().expect("not poisoned").len() < n && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    recorded(records)
}

fn var<'a>(vars: &'a Vars, name: &str) -> Option<&'a str> {
    vars.get(name).map(String::as_str)
}

// ---- sample data ---------------------------------------------------------------------------

fn kv(key: &str, value: Any) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        key_strindex: 0,
    }
}

fn s(v: &str) -> Any {
    Any::StringValue(v.into())
}

fn resource() -> Option<Resource> {
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

fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: "io.opentelemetry.http".into(),
        version: "1.2.0".into(),
        attributes: vec![kv("deployment.environment", s("staging-from-scope"))],
        dropped_attributes_count: 0,
    })
}

/// An HTTP server access log: current semantic-convention keys.
fn http_log() -> LogRecord {
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
fn structured_log() -> LogRecord {
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

fn server_span() -> Span {
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

fn grpc_client_span() -> Span {
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

fn logs_request(records: Vec<LogRecord>) -> ExportLogsServiceRequest {
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

fn trace_request(spans: Vec<Span>) -> ExportTraceServiceRequest {
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

// ---- exports -------------------------------------------------------------------------------

#[tokio::test]
async fn log_records_become_instances() {
    let mut h = start().await;
    let response = h
        .logs
        .export(logs_request(vec![http_log(), structured_log()]))
        .await
        .expect("export")
        .into_inner();
    assert_eq!(response.partial_success, None);
    let got = wait_recorded(&h.records, 2).await;
    assert_eq!(got.len(), 2, "{got:#?}");

    let http = &got[0];
    assert_eq!(var(http, "method"), Some("GET"));
    assert_eq!(var(http, "path"), Some("/cart?id=7&x"));
    assert_eq!(var(http, "code"), Some("200"));
    assert_eq!(var(http, "host"), Some("shop.example.com"));
    assert_eq!(var(http, "source"), Some("10.1.2.3"));
    assert_eq!(var(http, "time"), Some("2023-11-14T22:13:20.123Z"));
    assert_eq!(var(http, "service"), Some("checkout"));
    // The record's attribute wins over the resource's, the scope's over the resource's.
    assert_eq!(var(http, "route"), Some("/cart"));
    assert_eq!(var(http, "env"), Some("staging-from-scope"));
    assert_eq!(var(http, "severity"), Some("INFO"));
    assert_eq!(var(http, "body"), Some("GET /cart 200"));
    assert_eq!(var(http, "trace"), Some("4b".repeat(16).as_str()));
    assert_eq!(var(http, "span"), Some("0000000000000007"));
    assert_eq!(var(http, "parent"), None);

    let structured = &got[1];
    assert_eq!(var(structured, "method"), Some("POST"));
    assert_eq!(var(structured, "path"), Some("/pay?retry=1"));
    assert_eq!(var(structured, "code"), Some("502"));
    assert_eq!(var(structured, "source"), None, "not an IP address");
    assert_eq!(var(structured, "severity"), Some("oops"));
    assert_eq!(
        var(structured, "body"),
        Some(r#"{"msg":"payment failed","attempt":3}"#)
    );
    assert_eq!(var(structured, "time"), Some("2023-11-14T22:13:21Z"));
    assert_eq!(var(structured, "route"), Some("/from-resource"));
    assert_eq!(var(structured, "trace"), None);
}

#[tokio::test]
async fn spans_become_instances() {
    let mut h = start().await;
    let response = h
        .traces
        .export(trace_request(vec![server_span(), grpc_client_span()]))
        .await
        .expect("export")
        .into_inner();
    assert_eq!(response.partial_success, None);
    let got = wait_recorded(&h.records, 2).await;
    assert_eq!(got.len(), 2, "{got:#?}");

    let server = &got[0];
    assert_eq!(var(server, "name"), Some("GET /cart"));
    assert_eq!(var(server, "kind"), Some("server"));
    assert_eq!(var(server, "reporter"), Some("inbound"));
    assert_eq!(
        var(server, "trace"),
        Some("0102030405060708090a0b0c0d0e0f10")
    );
    assert_eq!(var(server, "span"), Some("aabbccdd00010203"));
    assert_eq!(var(server, "parent"), Some("1010101010101010"));
    assert_eq!(var(server, "method"), Some("GET"));
    assert_eq!(var(server, "code"), Some("404"));
    assert_eq!(var(server, "duration"), Some("45500us"));
    assert_eq!(var(server, "source"), Some("2001:db8::1"));
    assert_eq!(var(server, "time"), Some("2023-11-14T22:13:20Z"));
    assert_eq!(var(server, "service"), Some("checkout"));

    let client = &got[1];
    assert_eq!(var(client, "kind"), Some("client"));
    assert_eq!(var(client, "reporter"), Some("outbound"));
    assert_eq!(var(client, "parent"), Some("aabbccdd00010203"));
    assert_eq!(var(client, "duration"), Some("20ms"));
    assert_eq!(var(client, "method"), None);
}

#[tokio::test]
async fn empty_exports_succeed() {
    let mut h = start().await;
    let logs = h
        .logs
        .export(ExportLogsServiceRequest::default())
        .await
        .expect("empty logs")
        .into_inner();
    assert_eq!(logs.partial_success, None);
    let traces = h
        .traces
        .export(ExportTraceServiceRequest::default())
        .await
        .expect("empty traces")
        .into_inner();
    assert_eq!(traces.partial_success, None);
    // A record with nothing in it is still one (nearly empty) instance.
    h.logs
        .export(ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![LogRecord::default()],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        })
        .await
        .expect("empty record");
    assert_eq!(wait_recorded(&h.records, 1).await.len(), 1);
}

#[tokio::test]
async fn a_full_queue_is_answered_with_partial_success() {
    let mut h = start_with(Setup {
        delay: Duration::from_millis(500),
        queue: QueueOptions {
            max_records: 1,
            ..QueueOptions::default()
        },
        ..Setup::default()
    })
    .await;
    let records: Vec<LogRecord> = (0..5).map(|_| http_log()).collect();
    let response = h
        .logs
        .export(logs_request(records))
        .await
        .expect("a partial success is a success")
        .into_inner();
    let partial = response.partial_success.expect("partial_success is set");
    assert!(
        (3..=4).contains(&partial.rejected_log_records),
        "{partial:?}"
    );
    assert!(
        partial.error_message.contains("queue was full"),
        "{}",
        partial.error_message
    );

    let spans: Vec<Span> = (0..5).map(|_| server_span()).collect();
    let response = h
        .traces
        .export(trace_request(spans))
        .await
        .expect("a partial success is a success")
        .into_inner();
    let partial = response.partial_success.expect("partial_success is set");
    assert!((3..=5).contains(&partial.rejected_spans), "{partial:?}");
    assert!(
        partial.error_message.contains("of 5 spans"),
        "{}",
        partial.error_message
    );
    // What was accepted is delivered.
    let got = wait_recorded(&h.records, 1).await;
    assert!(!got.is_empty());
}

#[tokio::test]
async fn without_a_valid_config_exports_are_unavailable() {
    let mut h = start_with(Setup {
        ready: false,
        ..Setup::default()
    })
    .await;
    let err = h
        .logs
        .export(logs_request(vec![http_log()]))
        .await
        .expect_err("no config");
    assert_eq!(err.code(), Code::Unavailable);
    let err = h
        .traces
        .export(trace_request(vec![server_span()]))
        .await
        .expect_err("no config");
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "no valid config");
}

// ---- bad input -----------------------------------------------------------------------------

#[tokio::test]
async fn garbage_and_oversized_exports_are_refused_and_the_server_keeps_serving() {
    let mut h = start().await;
    let channel = Channel::from_shared(format!("http://{}", h.addr))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    for path in [
        "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    ] {
        for garbage in [
            vec![0xff; 64],
            vec![0x0a, 0x80, 0x80, 0x80, 0x10],
            b"not a protobuf message at all".to_vec(),
        ] {
            grpc.ready().await.expect("ready");
            let err = grpc
                .unary(
                    tonic::Request::new(garbage),
                    tonic::codegen::http::uri::PathAndQuery::from_static(path),
                    RawCodec,
                )
                .await
                .expect_err("garbage is refused");
            assert_ne!(err.code(), Code::Ok);
        }
    }
    let mut big = http_log();
    big.body = Some(AnyValue {
        value: Some(s(&"x".repeat(5 * 1024 * 1024))),
    });
    let err = h
        .logs
        .export(logs_request(vec![big]))
        .await
        .expect_err("over tonic's 4 MiB limit");
    assert_eq!(err.code(), Code::OutOfRange, "{}", err.message());
    assert!(
        recorded(&h.records).is_empty(),
        "nothing of a refused export"
    );

    h.logs
        .export(logs_request(vec![http_log()]))
        .await
        .expect("still serving");
    h.traces
        .export(trace_request(vec![server_span()]))
        .await
        .expect("still serving");
    assert_eq!(wait_recorded(&h.records, 2).await.len(), 2);
}

// ---- golden attribute bags -----------------------------------------------------------------

const NOW: Timestamp = Timestamp(1_700_000_100_000_000_000);

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/otlp")
}

fn render(bag: &AttributeBag) -> String {
    let mut lines: Vec<String> = bag
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    lines.sort();
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

fn assert_golden(name: &str, actual: &str) {
    let path = golden_dir().join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden_dir()).expect("golden dir");
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "{} differs (UPDATE_GOLDEN=1 rewrites it)",
        path.display()
    );
}

fn log_bag(record: &LogRecord, with_origin: bool) -> String {
    let (resource, scope) = if with_origin {
        (resource(), scope())
    } else {
        (None, None)
    };
    let origin = Origin::new(resource.as_ref(), scope.as_ref());
    let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
    otlp::fill_log(&mut bag, &origin, record, NOW);
    render(&bag)
}

fn span_bag(span: &Span) -> String {
    let (resource, scope) = (resource(), scope());
    let origin = Origin::new(resource.as_ref(), scope.as_ref());
    let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
    otlp::fill_span(&mut bag, &origin, span, NOW);
    render(&bag)
}

#[test]
fn golden_http_log() {
    assert_golden("http_log", &log_bag(&http_log(), true));
}

#[test]
fn golden_structured_log() {
    assert_golden("structured_log", &log_bag(&structured_log(), true));
}

#[test]
fn golden_empty_log() {
    assert_golden("empty_log", &log_bag(&LogRecord::default(), false));
}

#[test]
fn golden_server_span() {
    assert_golden("server_span", &span_bag(&server_span()));
}

#[test]
fn golden_grpc_client_span() {
    assert_golden("grpc_client_span", &span_bag(&grpc_client_span()));
}
