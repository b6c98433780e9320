//! The otlp adapter against a real OTLP/gRPC receiver on loopback: a tonic server with
//! opentelemetry-proto's collector services that records every request (and its metadata),
//! and can be told to fail the next calls with a given gRPC code.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mixer_adapter_api::{Adapter, BuildContext, ErrorKind, Handler};
use mixer_adapter_otlp::{Otlp, OtlpHandler};
use mixer_model::{FieldValue, Instance, Template, Timestamp, Value};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use serde_json::json;
use tonic::{Code, Request, Response, Status};

#[derive(Default)]
struct Received {
    traces: Vec<ExportTraceServiceRequest>,
    logs: Vec<ExportLogsServiceRequest>,
    metrics: Vec<ExportMetricsServiceRequest>,
    /// Metadata of every call, failed ones included.
    metadata: Vec<tonic::metadata::MetadataMap>,
}

#[derive(Clone)]
struct Receiver {
    received: Arc<Mutex<Received>>,
    /// Calls still to fail, with `fail_code`.
    fail: Arc<AtomicUsize>,
    fail_code: Code,
    calls: Arc<AtomicUsize>,
    /// How long each call takes before answering.
    delay: Duration,
}

impl Receiver {
    fn new(fail: usize, fail_code: Code) -> Receiver {
        Receiver {
            received: Arc::default(),
            fail: Arc::new(AtomicUsize::new(fail)),
            fail_code,
            calls: Arc::default(),
            delay: Duration::ZERO,
        }
    }

    /// What was received so far (and forgets it).
    fn take(&self) -> Received {
        std::mem::take(&mut *self.received.lock().unwrap())
    }

    fn call<T>(
        &self,
        request: Request<T>,
        keep: impl FnOnce(&mut Received, T),
    ) -> Result<(), Status> {
        let (metadata, _, message) = request.into_parts();
        let mut received = self.received.lock().unwrap();
        received.metadata.push(metadata);
        if self
            .fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Status::new(self.fail_code, "injected failure"));
        }
        keep(&mut received, message);
        Ok(())
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.call(request, |r, m| r.traces.push(m))?;
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for Receiver {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.call(request, |r, m| r.logs.push(m))?;
        Ok(Response::new(ExportLogsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Receiver {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.call(request, |r, m| r.metrics.push(m))?;
        Ok(Response::new(ExportMetricsServiceResponse::default()))
    }
}

async fn serve(receiver: Receiver) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .add_service(LogsServiceServer::new(receiver.clone()))
            .add_service(MetricsServiceServer::new(receiver))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    addr
}

fn build(params: serde_json::Value) -> Arc<OtlpHandler> {
    Otlp.validate(&params).expect("valid params");
    Otlp.build_handler(
        &params,
        &BuildContext {
            handler_name: "otlp.istio-system".into(),
        },
    )
    .expect("built")
}

/// Fast retries, so failure tests finish quickly.
fn params(addr: impl std::fmt::Display) -> serde_json::Value {
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

fn instance(name: &str, template: Template, fields: Vec<(&'static str, FieldValue)>) -> Instance {
    Instance {
        name: name.into(),
        template,
        fields,
    }
}

fn v(value: impl Into<Value>) -> FieldValue {
    FieldValue::Value(value.into())
}

fn ts(nanos: i64) -> FieldValue {
    FieldValue::Value(Value::Timestamp(Timestamp(nanos)))
}

fn map(entries: Vec<(&str, Value)>) -> FieldValue {
    FieldValue::Map(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
}

const T0: i64 = 1_570_000_000_123_456_789;

fn client_span() -> Instance {
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

fn server_span(span_id: &str) -> Instance {
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

fn log_entry(severity: &str, code: i64) -> Instance {
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

fn metric(name: &str, value: Value, code: i64) -> Instance {
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

fn attr(attrs: &[KeyValue], key: &str) -> Option<any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone())
        .and_then(|v: AnyValue| v.value)
}

fn s(text: &str) -> Option<any_value::Value> {
    Some(any_value::Value::StringValue(text.into()))
}

fn i(n: i64) -> Option<any_value::Value> {
    Some(any_value::Value::IntValue(n))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_logs_and_metrics_arrive_record_for_record() {
    let receiver = Receiver::new(0, Code::Ok);
    let addr = serve(receiver.clone()).await;
    let handler = build(params(addr));
    let report = handler.as_report().unwrap();

    report
        .report(&[
            client_span(),
            server_span("00000000000000ff"),
            log_entry("Info", 200),
            log_entry("Error", 503),
            metric("requestcount.istio-system", Value::Int64(1), 200),
            metric("requestcount.istio-system", Value::Int64(1), 200),
            metric("requestcount.istio-system", Value::Int64(1), 503),
            metric(
                "requestduration.istio-system",
                Value::Duration(mixer_model::Duration(50_000_000)),
                200,
            ),
            metric("connections.istio-system", Value::Double(7.0), 200),
            metric("connections.istio-system", Value::Double(3.0), 200),
            // Not configured: ignored.
            metric("other.istio-system", Value::Int64(1), 200),
            instance("nothing.istio-system", Template::ReportNothing, vec![]),
        ])
        .await
        .expect("exported");
    handler.flush_metrics().await.expect("metrics flushed");

    let received = receiver.take();
    // One export call per signal for the batch.
    assert_eq!(received.traces.len(), 1);
    assert_eq!(received.logs.len(), 1);
    assert_eq!(received.metrics.len(), 1);

    // Resource and headers.
    let rs = &received.traces[0].resource_spans[0];
    let resource = rs.resource.as_ref().unwrap();
    assert_eq!(attr(&resource.attributes, "service.name"), s("mixer"));
    assert_eq!(attr(&resource.attributes, "k8s.cluster.name"), s("test"));
    assert_eq!(attr(&resource.attributes, "replicas"), i(2));
    assert_eq!(received.metadata.len(), 3);
    for md in &received.metadata {
        assert_eq!(md.get("authorization").unwrap(), "Bearer t0ken");
        assert_eq!(md.get("x-tenant").unwrap(), "team-a");
    }

    // Spans.
    let scope_spans = &rs.scope_spans;
    assert_eq!(scope_spans.len(), 1);
    assert_eq!(
        scope_spans[0].scope.as_ref().unwrap().name,
        "tracespan.istio-system"
    );
    let spans = &scope_spans[0].spans;
    assert_eq!(spans.len(), 2);
    let client = spans.iter().find(|s| s.name == "GET /ratings").unwrap();
    assert_eq!(
        client.trace_id,
        [
            0x46, 0x3a, 0xc3, 0x5c, 0x9f, 0x64, 0x13, 0xad, 0x48, 0x48, 0x5a, 0x39, 0x53, 0xbb,
            0x61, 0x24
        ]
    );
    assert_eq!(
        client.span_id,
        [0xa2, 0xfb, 0x4a, 0x1d, 0x1a, 0x96, 0xd3, 0x12]
    );
    assert_eq!(client.parent_span_id, [0x00, 0x20, 0, 0, 0, 0, 0, 0x01]);
    assert_eq!(client.kind, 3, "CLIENT");
    assert_eq!(client.start_time_unix_nano, T0 as u64);
    assert_eq!(client.end_time_unix_nano, T0 as u64 + 19_000_000);
    assert_eq!(attr(&client.attributes, "http.method"), s("GET"));
    assert_eq!(attr(&client.attributes, "request.size"), i(128));
    assert_eq!(attr(&client.attributes, "source.ip"), s("10.1.2.3"));
    assert_eq!(
        attr(&client.attributes, "http.response.status_code"),
        i(503)
    );
    assert_eq!(client.status.as_ref().unwrap().code, 2, "ERROR");
    let server = spans.iter().find(|s| s.name == "/health").unwrap();
    let mut short_trace = [0u8; 16];
    short_trace[8..].copy_from_slice(&[0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
    assert_eq!(server.trace_id, short_trace);
    assert_eq!(server.span_id, [0, 0, 0, 0, 0, 0, 0, 0xff]);
    assert!(server.parent_span_id.is_empty(), "a root span");
    assert_eq!(server.kind, 2, "SERVER");
    assert_eq!(
        attr(&server.attributes, "http.response.status_code"),
        i(404)
    );
    assert_eq!(
        server.status.as_ref().map_or(0, |s| s.code),
        0,
        "a server's 404 is not an error"
    );

    // Logs.
    let rl = &received.logs[0].resource_logs[0];
    assert_eq!(
        attr(&rl.resource.as_ref().unwrap().attributes, "service.name"),
        s("mixer")
    );
    assert_eq!(rl.scope_logs.len(), 1);
    assert_eq!(
        rl.scope_logs[0].scope.as_ref().unwrap().name,
        "accesslog.istio-system"
    );
    let records = &rl.scope_logs[0].log_records;
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].time_unix_nano, T0 as u64);
    assert!(records[0].observed_time_unix_nano > 0);
    assert_eq!(records[0].severity_text, "Info");
    assert_eq!(records[0].severity_number, 9);
    assert_eq!(records[1].severity_text, "Error");
    assert_eq!(records[1].severity_number, 17);
    assert_eq!(attr(&records[0].attributes, "method"), s("GET"));
    assert_eq!(attr(&records[0].attributes, "responseCode"), i(200));
    assert_eq!(attr(&records[0].attributes, "latency"), s("19ms"));
    assert_eq!(
        attr(&records[1].attributes, "ok"),
        Some(any_value::Value::BoolValue(false))
    );

    // Metrics.
    let rm = &received.metrics[0].resource_metrics[0];
    assert_eq!(
        attr(
            &rm.resource.as_ref().unwrap().attributes,
            "k8s.cluster.name"
        ),
        s("test")
    );
    let metrics: Vec<_> = rm
        .scope_metrics
        .iter()
        .flat_map(|sm| {
            sm.metrics
                .iter()
                .map(move |m| (sm.scope.as_ref().unwrap().name.clone(), m))
        })
        .collect();
    assert_eq!(metrics.len(), 3, "{metrics:?}");
    let (scope, requests) = metrics
        .iter()
        .find(|(_, m)| m.name == "istio.requests")
        .unwrap();
    assert_eq!(scope, "requestcount.istio-system");
    assert_eq!(requests.unit, "{request}");
    assert_eq!(requests.description, "Requests");
    let Some(metric::Data::Sum(sum)) = &requests.data else {
        panic!("a sum: {requests:?}")
    };
    assert!(sum.is_monotonic);
    assert_eq!(sum.aggregation_temporality, 2, "CUMULATIVE");
    assert_eq!(sum.data_points.len(), 2);
    for p in &sum.data_points {
        let expected = match attr(&p.attributes, "response_code") {
            Some(any_value::Value::IntValue(200)) => 2.0,
            Some(any_value::Value::IntValue(503)) => 1.0,
            other => panic!("unexpected series {other:?}"),
        };
        assert_eq!(p.value, Some(number_data_point::Value::AsDouble(expected)));
        assert_eq!(attr(&p.attributes, "source_app"), s("web"));
    }
    let (_, duration) = metrics
        .iter()
        .find(|(_, m)| m.name == "istio.request.duration")
        .unwrap();
    let Some(metric::Data::Histogram(h)) = &duration.data else {
        panic!("a histogram: {duration:?}")
    };
    assert_eq!(h.data_points.len(), 1);
    let p = &h.data_points[0];
    assert_eq!(p.count, 1);
    assert_eq!(p.sum, Some(0.05));
    assert_eq!(p.explicit_bounds, [0.01, 0.1, 1.0]);
    assert_eq!(p.bucket_counts, [0, 1, 0, 0]);
    let (_, connections) = metrics
        .iter()
        .find(|(_, m)| m.name == "istio.connections")
        .unwrap();
    let Some(metric::Data::Gauge(g)) = &connections.data else {
        panic!("a gauge: {connections:?}")
    };
    assert_eq!(g.data_points.len(), 1);
    assert_eq!(
        g.data_points[0].value,
        Some(number_data_point::Value::AsDouble(3.0))
    );
    handler.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_instances_fail_the_batch_but_the_others_are_exported() {
    let receiver = Receiver::new(0, Code::Ok);
    let addr = serve(receiver.clone()).await;
    let handler = build(params(addr));
    let mut bad_id = server_span("00000000000000ff");
    bad_id.fields[1].1 = v("not-hex");
    let err = handler
        .as_report()
        .unwrap()
        .report(&[
            server_span("0000000000000001"),
            bad_id,
            server_span("0000000000000002"),
            metric("requestcount.istio-system", Value::Int64(-1), 200),
            log_entry("Warning", 200),
        ])
        .await
        .expect_err("two invalid instances");
    assert_eq!(err.kind, ErrorKind::InvalidInstance);
    assert!(!err.retryable);
    assert!(
        err.message.contains("span_id \"not-hex\""),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("counter cannot be incremented by -1"),
        "{}",
        err.message
    );
    let received = receiver.take();
    let spans = &received.traces[0].resource_spans[0].scope_spans[0].spans;
    let ids: Vec<u8> = spans.iter().map(|s| s.span_id[7]).collect();
    assert_eq!(ids, [1, 2]);
    assert_eq!(
        received.logs[0].resource_logs[0].scope_logs[0].log_records[0].severity_number,
        13
    );
    handler.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_twice_then_ok_is_delivered_after_retries() {
    let receiver = Receiver::new(2, Code::Unavailable);
    let addr = serve(receiver.clone()).await;
    let handler = build(params(addr));
    handler
        .as_report()
        .unwrap()
        .report(&[server_span("0000000000000001")])
        .await
        .expect("delivered after two retries");
    assert_eq!(receiver.calls.load(Ordering::SeqCst), 3);
    let received = receiver.take();
    assert_eq!(received.traces.len(), 1);
    assert_eq!(received.metadata.len(), 3, "headers on every attempt");
    handler.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_stays_unavailable_fails_the_batch_within_the_budget() {
    let receiver = Receiver::new(usize::MAX, Code::Unavailable);
    let addr = serve(receiver.clone()).await;
    let handler = build(params(addr));
    let started = Instant::now();
    let err = handler
        .as_report()
        .unwrap()
        .report(&[server_span("0000000000000001"), log_entry("Info", 200)])
        .await
        .expect_err("never delivered");
    let took = started.elapsed();
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err:?}");
    assert!(err.retryable);
    assert!(err.message.contains("not exported"), "{}", err.message);
    // maxElapsedTime 400ms, backoff 10ms doubling to 40ms: a handful of attempts per signal.
    let calls = receiver.calls.load(Ordering::SeqCst);
    assert!((4..=60).contains(&calls), "{calls} calls");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    handler.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_receiver_times_out_each_attempt() {
    let mut receiver = Receiver::new(0, Code::Ok);
    receiver.delay = Duration::from_secs(5);
    let addr = serve(receiver.clone()).await;
    let mut p = params(addr);
    p["timeout"] = json!("200ms");
    p["retry"] = json!({"initialBackoff": "10ms", "maxBackoff": "20ms", "maxElapsedTime": "300ms"});
    let handler = build(p);
    let started = Instant::now();
    let err = handler
        .as_report()
        .unwrap()
        .report(&[server_span("0000000000000001")])
        .await
        .expect_err("too slow");
    let took = started.elapsed();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert!(err.retryable);
    // At most maxElapsedTime plus one attempt's timeout (and some slack).
    assert!(took < Duration::from_millis(1_000), "took {took:?}");
    assert!(receiver.calls.load(Ordering::SeqCst) >= 2, "retried");
    handler.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_errors_are_not_retried() {
    let receiver = Receiver::new(usize::MAX, Code::InvalidArgument);
    let addr = serve(receiver.clone()).await;
    let handler = build(params(addr));
    let err = handler
        .as_report()
        .unwrap()
        .report(&[server_span("0000000000000001")])
        .await
        .expect_err("refused");
    assert!(!err.retryable, "{err:?}");
    assert_eq!(err.kind, ErrorKind::InvalidResponse);
    assert_eq!(receiver.calls.load(Ordering::SeqCst), 1);
    handler.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_fails_after_bounded_retries() {
    // A port nobody listens on.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let handler = build(params(addr));
    let report = handler.as_report().unwrap();
    let started = Instant::now();
    let err = report
        .report(&[server_span("0000000000000001"), log_entry("Info", 200)])
        .await
        .expect_err("nobody listens");
    let took = started.elapsed();
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err:?}");
    assert!(err.retryable);
    assert!(
        took >= Duration::from_millis(100),
        "retried for a while: {took:?}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");

    report
        .report(&[metric("requestcount.istio-system", Value::Int64(1), 200)])
        .await
        .expect("metrics are only recorded");
    let err = handler.flush_metrics().await.expect_err("nobody listens");
    assert!(err.retryable, "{err:?}");
    assert_eq!(handler.metric_export_failures(), 1);
    let started = Instant::now();
    handler.close().await;
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_batches_are_split_and_close_flushes_metrics() {
    let receiver = Receiver::new(0, Code::Ok);
    let addr = serve(receiver.clone()).await;
    let mut p = params(addr);
    p["batch"]["maxExportBatchSize"] = json!(2);
    let handler = build(p);
    let report = handler.as_report().unwrap();
    let spans: Vec<Instance> = (1..=5)
        .map(|n| server_span(&format!("{n:016x}")))
        .chain([metric("requestcount.istio-system", Value::from("4"), 200)])
        .collect();
    report.report(&spans).await.expect("exported");
    {
        let received = receiver.take();
        let sizes: Vec<usize> = received
            .traces
            .iter()
            .map(|t| t.resource_spans[0].scope_spans[0].spans.len())
            .collect();
        assert_eq!(sizes, [2, 2, 1]);
        assert!(
            received.metrics.is_empty(),
            "metrics wait for their interval"
        );
    }
    handler.close().await;
    {
        let received = receiver.take();
        assert_eq!(received.metrics.len(), 1, "close exports the metrics");
        let m = &received.metrics[0].resource_metrics[0].scope_metrics[0].metrics[0];
        let Some(metric::Data::Sum(sum)) = &m.data else {
            panic!("{m:?}")
        };
        assert_eq!(
            sum.data_points[0].value,
            Some(number_data_point::Value::AsDouble(4.0))
        );
    }
    let err = report
        .report(&[server_span("0000000000000001")])
        .await
        .expect_err("closed");
    assert!(!err.retryable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_metric_exports() {
    let receiver = Receiver::new(0, Code::Ok);
    let addr = serve(receiver.clone()).await;
    let mut p = params(addr);
    p["batch"]["scheduledDelay"] = json!("100ms");
    p["metricTemporality"] = json!("DELTA");
    let handler = build(p);
    handler
        .as_report()
        .unwrap()
        .report(&[metric("requestcount.istio-system", Value::Int64(3), 200)])
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if !receiver.received.lock().unwrap().metrics.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "no periodic export");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let received = receiver.take();
    let m = &received.metrics[0].resource_metrics[0].scope_metrics[0].metrics[0];
    let Some(metric::Data::Sum(sum)) = &m.data else {
        panic!("{m:?}")
    };
    assert_eq!(sum.aggregation_temporality, 1, "DELTA");
    handler.close().await;
}

#[test]
fn validation_errors_have_paths_and_build_refuses_bad_params() {
    assert_eq!(Otlp.info().name, "otlp");
    assert_eq!(
        Otlp.info().templates,
        [Template::Metric, Template::LogEntry, Template::TraceSpan]
    );
    let errors = Otlp
        .validate(&json!({
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
    let missing = Otlp.validate(&serde_json::Value::Null).unwrap_err();
    assert_eq!(missing[0].path, "endpoint");
    // No runtime here: the build refuses instead of panicking.
    let err = Otlp
        .build(
            &json!({"endpoint": "http://127.0.0.1:4317"}),
            &BuildContext {
                handler_name: "h".into(),
            },
        )
        .err()
        .expect("no tokio runtime");
    assert!(err.message.contains("tokio runtime"), "{}", err.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_without_metrics_and_one_dropped_without_close() {
    let receiver = Receiver::new(0, Code::Ok);
    let addr = serve(receiver.clone()).await;
    let handler = build(json!({"endpoint": format!("http://{addr}")}));
    handler
        .as_report()
        .unwrap()
        .report(&[
            log_entry("notice", 200),
            metric("requestcount.istio-system", Value::Int64(1), 200),
        ])
        .await
        .expect("exported");
    handler.flush_metrics().await.expect("nothing to flush");
    let received = receiver.take();
    assert_eq!(received.logs.len(), 1);
    assert!(received.metrics.is_empty());
    let record = &received.logs[0].resource_logs[0].scope_logs[0].log_records[0];
    assert_eq!(
        (record.severity_text.as_str(), record.severity_number),
        ("notice", 10)
    );
    handler.close().await;

    // Dropped without close: the meter provider shuts down on a thread of its own.
    let handler = build(params(addr));
    handler
        .as_report()
        .unwrap()
        .report(&[metric("requestcount.istio-system", Value::Int64(1), 200)])
        .await
        .unwrap();
    drop(handler);
    let deadline = Instant::now() + Duration::from_secs(5);
    while receiver.received.lock().unwrap().metrics.is_empty() {
        assert!(Instant::now() < deadline, "no export on drop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
