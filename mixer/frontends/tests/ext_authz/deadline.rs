//! The client's deadline on the mixer's own gRPC stack: a Check whose `grpc-timeout` is
//! shorter than its handler's answer is answered DEADLINE_EXCEEDED and the handler's call is
//! cancelled (its future dropped), not left running for an answer nobody reads.
//!
//! The client is the `h2` crate's, not tonic's: tonic's channel ends a call at its own
//! `grpc-timeout` too (CANCELLED), which would hide what the server answered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mixer_adapter_api::host::Params;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, Handler, ParamError, Stability,
};
use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};
use mixer_frontends::grpc;
use mixer_model::{CheckResult, Instance, Template};
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics, RuntimeOptions};

use super::http_check;

const CONFIG: &str = r#"
kind: handler
metadata: {name: slow, namespace: istio-system}
spec: {compiledAdapter: slow}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: ask-slow, namespace: istio-system}
spec:
  actions: [{handler: slow, instances: [nothing]}]
"#;

/// A check adapter that answers after `ANSWER_AFTER`; `cancelled` turns true when a call's
/// future is dropped before it answered.
struct Slow {
    cancelled: Arc<AtomicBool>,
}

/// Far longer than the call's deadline; the handler deadline is raised above it below, so
/// that only the client's deadline can end the call.
const ANSWER_AFTER: Duration = Duration::from_secs(5);

static SLOW_INFO: AdapterInfo = AdapterInfo {
    name: "slow",
    description: "answers every check after five seconds",
    templates: &[Template::CheckNothing],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Slow {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &SLOW_INFO
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(SlowHandler {
            cancelled: self.cancelled.clone(),
        }))
    }
}

struct SlowHandler {
    cancelled: Arc<AtomicBool>,
}

impl Handler for SlowHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
}

/// Records a call dropped before its answer.
struct Unanswered(Option<Arc<AtomicBool>>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(flag) = self.0.take() {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl CheckHandler for SlowHandler {
    async fn check(&self, _: &Instance) -> Result<CheckResult, AdapterError> {
        let mut unanswered = Unanswered(Some(self.cancelled.clone()));
        tokio::time::sleep(ANSWER_AFTER).await;
        unanswered.0 = None;
        Ok(CheckResult::ok(Duration::from_secs(1), 1))
    }
}

#[tokio::test]
async fn a_check_past_its_grpc_timeout_is_deadline_exceeded_and_its_handler_call_cancelled() {
    let cancelled = Arc::new(AtomicBool::new(false));
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(Slow {
        cancelled: cancelled.clone(),
    }));
    let runtime = Arc::new(Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile::new("deadline_test.yaml", CONFIG)]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions {
            handler_timeout: Duration::from_secs(60),
            ..RuntimeOptions::default()
        },
        RuntimeMetrics::unregistered(),
    ));
    runtime.reload().expect("test config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let server = mixer_grpc::Server::new(
        grpc::unary_methods(&runtime),
        tonic::service::RoutesBuilder::default().routes(),
    );
    tokio::spawn(server.serve(listener, std::future::pending()));

    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    let mut send = send.ready().await.expect("ready");
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{}", grpc::EXT_AUTHZ_CHECK))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        // 20 milliseconds, as Envoy writes a deadline.
        .header("grpc-timeout", "20m")
        .body(())
        .expect("request");
    let started = Instant::now();
    let (response, mut body) = send.send_request(request, false).expect("send");
    let message = mixer_grpc::framed(&http_check("GET", "/", &[]));
    body.send_data(message, true).expect("send the message");
    let response = response.await.expect("an answer");
    let took = started.elapsed();

    // Trailers-only: the status is in the one HEADERS frame.
    let field = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().expect("ASCII").to_string())
    };
    assert_eq!(field("grpc-status").as_deref(), Some("4"), "{response:?}");
    assert!(
        took < ANSWER_AFTER,
        "answered after {took:?}, not at the deadline"
    );
    // The handler's future was dropped when the deadline passed, not left to run on.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !cancelled.load(Ordering::SeqCst) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the handler's check call was cancelled"
    );
}
