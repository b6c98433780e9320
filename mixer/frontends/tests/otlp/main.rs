//! The OTLP front end over a real loopback socket, driven by the generated tonic clients: log
//! records and spans become report instances, a full queue is answered with
//! `partial_success`, bad input is refused cleanly.
//!
//! Golden files: `tests/golden/otlp/*.txt` hold the attribute bag of each sample record.
//! Run with `UPDATE_GOLDEN=1` to rewrite them after an intended mapping change.

mod bad_input;
#[path = "../common/mod.rs"]
mod common;
mod exports;
mod golden;
mod metrics;
mod samples;

use common::{Recorder, recorded, var, wait_recorded};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};
use mixer_model::Instance;
use mixer_runtime::{ConfigOrigin, QueueOptions, Runtime, RuntimeMetrics, RuntimeOptions};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
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
    # Defaults for what a record of one kind lacks (a log has no span name): an instance
    # with a field that cannot be evaluated is not sent at all, as in Istio.
    variables:
      method: request.method | ""
      path: request.path | ""
      code: response.code | 0
      host: request.host | ""
      source: source.ip | ip("0.0.0.0")
      time: request.time | timestamp("1970-01-01T00:00:00Z")
      duration: response.duration | "0ms"
      service: otel.resource["service.name"] | ""
      route: otel.attributes["http.route"] | ""
      env: otel.attributes["deployment.environment"] | ""
      severity: otel.severity | ""
      body: otel.body | ""
      trace: otel.trace_id | ""
      span: otel.span_id | ""
      parent: otel.parent_span_id | ""
      name: otel.span_name | ""
      kind: otel.span_kind | ""
      reporter: context.reporter.kind | ""
---
kind: rule
metadata: {name: record-all, namespace: istio-system}
spec:
  actions: [{handler: recorder, instances: [entry]}]
"#;

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
    // The mixer's own server: the methods are served from `grpc::unary_methods`, as in
    // `mixer serve`.
    let server = mixer_grpc::Server::new(
        mixer_frontends::grpc::unary_methods(&runtime),
        mixer_frontends::grpc::routes(&runtime).routes(),
    );
    tokio::spawn(server.serve(listener, std::future::pending()));
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
