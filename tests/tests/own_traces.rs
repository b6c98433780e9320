//! The mixer's own traces (`--tracing-otlp-endpoint`), received by a real OTLP/gRPC trace
//! server built in the test from opentelemetry-proto's generated service: each request's
//! span continues the proxy's W3C `traceparent` (forward-auth: its headers; ext_authz: the
//! `CheckRequest`'s HTTP headers), with child spans for the cache lookup, the rule evaluation
//! and the adapter call; sampling is parent-based (at ratio 0 only the proxy's sampled
//! traces are kept).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use mixer_tests::{Mixer, free_addr, http_request};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

#[path = "support/authz.rs"]
mod authz;
use authz::authz_request;

/// Every span exported to it, in arrival order.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans = request
            .into_inner()
            .resource_spans
            .into_iter()
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans);
        self.0.lock().expect("spans").extend(spans);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const FORWARD_AUTH_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const FORWARD_AUTH_PARENT: &str = "00f067aa0ba902b7";
const EXT_AUTHZ_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const EXT_AUTHZ_PARENT: &str = "b7ad6b7169203331";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_spans_continue_the_proxys_trace_with_child_spans() {
    let receiver = Receiver::default();
    let listen = free_addr();
    let server = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(receiver.clone()))
        .serve(listen);
    tokio::spawn(server);

    let endpoint = format!("http://{listen}");
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &[
            "--tracing-otlp-endpoint",
            &endpoint,
            "--tracing-sample-ratio",
            "0",
        ],
    );
    let ready = tokio::task::spawn_blocking({
        let admin = mixer.admin;
        move || {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if let Ok((200, _, _)) = http_request(admin, "GET", "/readyz", &[]) {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        }
    });
    assert!(ready.await.expect("join"), "not ready");

    // Forward-auth, denied by the default config's denier (an adapter call), in the
    // proxy's sampled trace; then a request with no trace context, which ratio 0 drops.
    let http = mixer.http;
    let answers = tokio::task::spawn_blocking(move || {
        let traceparent = format!("00-{FORWARD_AUTH_TRACE}-{FORWARD_AUTH_PARENT}-01");
        let denied = http_request(
            http,
            "GET",
            "/check",
            &[("x-mixer-deny", "true"), ("traceparent", &traceparent)],
        )
        .expect("forward-auth");
        let untraced =
            http_request(http, "GET", "/check", &[("x-user", "nobody")]).expect("forward-auth");
        (denied.0, untraced.0)
    });
    assert_eq!(answers.await.expect("join"), (403, 200));
    let traceparent = format!("00-{EXT_AUTHZ_TRACE}-{EXT_AUTHZ_PARENT}-01");
    let mut authz = AuthorizationClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect");
    let allowed = authz
        .check(authz_request(&[
            ("x-user", "bob"),
            ("traceparent", &traceparent),
        ]))
        .await
        .expect("check")
        .into_inner();
    assert_eq!(allowed.status.map(|s| s.code), Some(0));

    // The batch is flushed at shutdown.
    assert!(mixer.terminate().success());
    let start = Instant::now();
    while receiver.0.lock().expect("spans").len() < 5 && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let spans = receiver.0.lock().expect("spans").clone();
    let named = |name: &str, trace: &str| -> Vec<&Span> {
        spans
            .iter()
            .filter(|s| s.name == name && hex(&s.trace_id) == trace)
            .collect()
    };
    let summary: Vec<(String, String)> = spans
        .iter()
        .map(|s| (s.name.clone(), hex(&s.trace_id)))
        .collect();

    // Only the proxy's sampled traces were kept.
    assert!(
        spans.iter().all(|s| {
            let trace = hex(&s.trace_id);
            trace == FORWARD_AUTH_TRACE || trace == EXT_AUTHZ_TRACE
        }),
        "{summary:?}"
    );

    let [request] = named("forward-auth", FORWARD_AUTH_TRACE)[..] else {
        panic!("one forward-auth span: {summary:?}");
    };
    assert_eq!(hex(&request.parent_span_id), FORWARD_AUTH_PARENT);
    assert_eq!(request.kind, SpanKind::Server as i32);
    for child in ["cache lookup", "rule evaluation", "adapter call"] {
        let [span] = named(child, FORWARD_AUTH_TRACE)[..] else {
            panic!("one {child:?} span: {summary:?}");
        };
        assert_eq!(
            span.parent_span_id, request.span_id,
            "{child} under the request"
        );
    }
    let [call] = named("adapter call", FORWARD_AUTH_TRACE)[..] else {
        unreachable!()
    };
    let handler = call
        .attributes
        .iter()
        .find(|a| a.key == "mixer.handler")
        .and_then(|a| a.value.as_ref())
        .map(|v| format!("{v:?}"));
    assert!(
        handler.is_some_and(|h| h.contains("deny-by-header")),
        "{:?}",
        call.attributes
    );

    let [request] = named("ext_authz", EXT_AUTHZ_TRACE)[..] else {
        panic!("one ext_authz span: {summary:?}");
    };
    assert_eq!(hex(&request.parent_span_id), EXT_AUTHZ_PARENT);
    let [evaluation] = named("rule evaluation", EXT_AUTHZ_TRACE)[..] else {
        panic!("one rule evaluation span: {summary:?}");
    };
    assert_eq!(evaluation.parent_span_id, request.span_id);
}
