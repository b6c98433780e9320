//! The Envoy access log front end over a real loopback socket, driven by the generated tonic
//! client: HTTP and TCP entries become report instances, the identifier of the first message
//! applies to the whole stream, bad input ends the stream cleanly.
//!
//! Golden files: `tests/golden/access_log/*.txt` hold the attribute bag of each sample entry.
//! Run with `UPDATE_GOLDEN=1` to rewrite them after an intended mapping change.

mod bad_input;
#[path = "../common/mod.rs"]
mod common;
mod golden;
mod samples;
mod stream;

use common::{Recorder, recorded, var, wait_recorded};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_client::AccessLogServiceClient;
use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};
use mixer_frontends::access_log;
use mixer_model::Instance;
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics, RuntimeOptions};
use tonic::transport::Channel;

const CONFIG: &str = r#"
kind: attributemanifest
metadata: {name: envoy, namespace: istio-system}
spec:
  attributes:
    envoy.log_name: {valueType: STRING}
    envoy.upstream_cluster: {valueType: STRING}
---
kind: handler
metadata: {name: recorder, namespace: istio-system}
spec: {compiledAdapter: recorder}
---
kind: instance
metadata: {name: entry, namespace: istio-system}
spec:
  compiledTemplate: logentry
  # Defaults for what an entry of one kind lacks (a TCP entry has no method), as Istio's
  # own access log instances have: an instance with a field that cannot be evaluated is
  # not sent at all.
  params:
    timestamp: request.time | timestamp("1970-01-01T00:00:00Z")
    variables:
      method: request.method | ""
      path: request.path | ""
      code: response.code | 0
      duration: response.duration | "0ms"
      flags: response.flags | ""
      protocol: context.protocol | ""
      reporter: context.reporter.uid | ""
      kind: context.reporter.kind | ""
      log: envoy.log_name | ""
      cluster: envoy.upstream_cluster | ""
      source: source.ip | ip("0.0.0.0")
      destination: destination.ip | ip("0.0.0.0")
      user: request.headers["x-user"] | ""
      event: connection.event | ""
      received: connection.received.bytes | 0
      received_total: connection.received.bytes_total | 0
      sent: connection.sent.bytes | 0
      mtls: connection.mtls | false
---
kind: rule
metadata: {name: record-all, namespace: istio-system}
spec:
  actions: [{handler: recorder, instances: [entry]}]
"#;

// ---- harness -------------------------------------------------------------------------------

struct Harness {
    client: AccessLogServiceClient<Channel>,
    addr: SocketAddr,
    records: Arc<Mutex<Vec<Instance>>>,
}

async fn start_with(ready: bool) -> Harness {
    let records = Arc::new(Mutex::new(Vec::new()));
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(Recorder::new(records.clone())));
    let runtime = Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile {
            name: "test.yaml".into(),
            text: CONFIG.into(),
        }]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    );
    if ready {
        runtime.reload().expect("test config loads");
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(access_log::service(Arc::new(runtime)))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    Harness {
        client: AccessLogServiceClient::new(channel),
        addr,
        records,
    }
}

async fn start() -> Harness {
    start_with(true).await
}
