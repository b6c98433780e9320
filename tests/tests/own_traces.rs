//! The mixer's own traces (`--tracing-otlp-endpoint`), received by a real OTLP/gRPC trace
//! server built in the test from opentelemetry-proto's generated service: each request's
//! span continues the proxy's W3C `traceparent` (forward-auth: its headers; ext_authz: the
//! `CheckRequest`'s HTTP headers), with child spans for the cache lookup, the rule evaluation
//! and the adapter call; sampling is parent-based (at ratio 0 only the proxy's sampled
//! traces are kept). An out-of-process adapter's calls carry the context on in their gRPC
//! metadata.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use mixer_proto::checknothing;
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
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

/// The `traceparent` each check call to the adapter carried in its gRPC metadata.
#[derive(Clone, Default)]
struct TracedAdapter(Arc<Mutex<Vec<Option<String>>>>);

#[tonic::async_trait]
impl checknothing::handle_check_nothing_service_server::HandleCheckNothingService
    for TracedAdapter
{
    async fn handle_check_nothing(
        &self,
        request: tonic::Request<checknothing::HandleCheckNothingRequest>,
    ) -> Result<tonic::Response<model::CheckResult>, tonic::Status> {
        let traceparent = request
            .metadata()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        self.0.lock().expect("calls").push(traceparent);
        Ok(tonic::Response::new(model::CheckResult::default()))
    }
}

#[tonic::async_trait]
impl model::infrastructure_backend_server::InfrastructureBackend for TracedAdapter {
    async fn validate(
        &self,
        _: tonic::Request<model::ValidateRequest>,
    ) -> Result<tonic::Response<model::ValidateResponse>, tonic::Status> {
        Ok(tonic::Response::new(model::ValidateResponse::default()))
    }

    async fn create_session(
        &self,
        _: tonic::Request<model::CreateSessionRequest>,
    ) -> Result<tonic::Response<model::CreateSessionResponse>, tonic::Status> {
        Ok(tonic::Response::new(model::CreateSessionResponse::default()))
    }

    async fn close_session(
        &self,
        _: tonic::Request<model::CloseSessionRequest>,
    ) -> Result<tonic::Response<model::CloseSessionResponse>, tonic::Status> {
        Ok(tonic::Response::new(model::CloseSessionResponse::default()))
    }
}

/// An out-of-process adapter's call carries the trace context of the mixer's `adapter call`
/// span: the proxy's trace id, the mixer's span as parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_process_adapters_get_the_trace_context_in_their_metadata() {
    let receiver = Receiver::default();
    let listen = free_addr();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve(listen),
    );
    let adapter = TracedAdapter::default();
    let adapter_addr = free_addr();
    let routes = tonic::service::Routes::new(
        checknothing::handle_check_nothing_service_server::HandleCheckNothingServiceServer::new(
            adapter.clone(),
        ),
    )
    .add_service(
        model::infrastructure_backend_server::InfrastructureBackendServer::new(adapter.clone()),
    );
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_routes(routes)
            .serve(adapter_addr),
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            r#"
kind: handler
metadata: {{name: traced, namespace: istio-system}}
spec:
  adapter: myadapter
  connection: {{address: '{adapter_addr}', timeout: 2s}}
---
kind: instance
metadata: {{name: nothing, namespace: istio-system}}
spec: {{compiledTemplate: checknothing}}
---
kind: rule
metadata: {{name: ask, namespace: istio-system}}
spec:
  actions: [{{handler: traced, instances: [nothing]}}]
"#
        ),
    )
    .expect("write config");
    let endpoint = format!("http://{listen}");
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &[
            "--config",
            config.to_str().expect("utf-8"),
            "--tracing-otlp-endpoint",
            &endpoint,
        ],
    );
    let http = mixer.http;
    let admin = mixer.admin;
    let status = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok((200, _, _)) = http_request(admin, "GET", "/readyz", &[]) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let traceparent = format!("00-{FORWARD_AUTH_TRACE}-{FORWARD_AUTH_PARENT}-01");
        http_request(http, "GET", "/check", &[("traceparent", &traceparent)])
            .expect("forward-auth")
            .0
    });
    assert_eq!(status.await.expect("join"), 200);
    assert!(mixer.terminate().success());

    let calls = adapter.0.lock().expect("calls").clone();
    let [Some(traceparent)] = &calls[..] else {
        panic!("one check call with a traceparent: {calls:?}");
    };
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[1], FORWARD_AUTH_TRACE, "the proxy's trace");
    assert_ne!(
        parts[2], FORWARD_AUTH_PARENT,
        "the mixer's own span is the parent"
    );
    assert_eq!(parts[3], "01", "sampled");
    // That span is the mixer's adapter call, as exported.
    let start = Instant::now();
    loop {
        let spans = receiver.0.lock().expect("spans").clone();
        if let Some(call) = spans.iter().find(|s| s.name == "adapter call") {
            assert_eq!(hex(&call.span_id), parts[2]);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no adapter call span: {spans:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
