//! ext_authz front end, end to end: a real tonic server on loopback, Envoy's own client
//! types (from `envoy-types`), a runtime built from an embedded config.
//!
//! Golden files: `tests/golden/ext_authz/*.txt` hold the attribute bag of each sample request.
//! Run with `UPDATE_GOLDEN=1` to rewrite them after an intended mapping change.

#[path = "../common/mod.rs"]
mod common;
mod deadline;
mod decisions;
mod encode;
mod golden;
mod hostile_input;
mod quota;
mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest, CheckResponse};
use envoy_types::pb::google::protobuf::Timestamp as PbTimestamp;
use mixer_adapter_api::host::Params;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, ErrorKind, Handler, ParamError,
    Stability,
};
use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};
use mixer_frontends::{ext_authz, grpc};
use mixer_model::{CheckResult, Instance, Template};
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics, RuntimeOptions};
use tonic::transport::Channel;

const CONFIG: &str = r#"
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: forbid, namespace: istio-system}
spec:
  compiledAdapter: denier
  params:
    status: {code: PERMISSION_DENIED, message: denied by policy}
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: bad-identity, namespace: istio-system}
spec:
  compiledAdapter: denier
  params:
    status: {code: UNAUTHENTICATED, message: workload identity not accepted}
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: exhausted, namespace: istio-system}
spec:
  compiledAdapter: denier
  params:
    status: {code: RESOURCE_EXHAUSTED, message: slow down}
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: broken, namespace: istio-system}
spec:
  compiledAdapter: failing
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {name: request, namespace: istio-system}
spec:
  compiledTemplate: checknothing
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: deny-on-header, namespace: istio-system}
spec:
  match: (request.headers["x-mixer-deny"] | "") == "true"
  actions:
  - handler: forbid
    instances: [request]
  responseHeaderOperations:
  - name: x-denied-by
    values: ['"deny-on-header"']
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata:
  name: deny-admin
  namespace: istio-system
  annotations: {policy.istio.io/lang: CEL}
spec:
  match: request.url_path.startsWith("/admin")
  actions:
  - handler: forbid
    instances: [request]
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: deny-bad-principal, namespace: istio-system}
spec:
  match: (source.principal | "") == "spiffe://cluster.local/ns/x/sa/bad"
  actions:
  - handler: bad-identity
    instances: [request]
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: deny-source-ip, namespace: istio-system}
spec:
  match: source.ip == ip("10.9.9.9")
  actions:
  - handler: forbid
    instances: [request]
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: deny-blocked-tier, namespace: istio-system}
spec:
  match: (context.extensions["tier"] | "") == "blocked"
  actions:
  - handler: forbid
    instances: [request]
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata:
  name: rate-limited
  namespace: istio-system
  annotations: {policy.istio.io/lang: CEL}
spec:
  match: request.url_path.startsWith("/limited")
  actions:
  - handler: exhausted
    instances: [request]
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: fail-closed, namespace: istio-system}
spec:
  match: (request.headers["x-fail"] | "") == "1"
  actions:
  - handler: broken
    instances: [request]
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: tag-user, namespace: istio-system}
spec:
  requestHeaderOperations:
  - name: x-mixer-user
    values: ['request.headers["x-user"] | "anonymous"']
  - name: x-mixer-trace
    values: ['"mixer"']
    operation: APPEND
  - name: authorization
    operation: REMOVE
  responseHeaderOperations:
  - name: x-mixer-checked
    values: ['"yes"']
"#;

// ---------------------------------------------------------------- a handler that cannot decide

struct Failing;

static FAILING_INFO: AdapterInfo = AdapterInfo {
    name: "failing",
    description: "every check fails: the backend is down",
    templates: &[Template::CheckNothing],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Failing {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &FAILING_INFO
    }

    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }

    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(FailingHandler))
    }
}

struct FailingHandler;

impl Handler for FailingHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for FailingHandler {
    async fn check(&self, _: &Instance) -> Result<CheckResult, AdapterError> {
        Err(AdapterError::transient(
            ErrorKind::Unavailable,
            "policy backend unreachable",
        ))
    }
}

// ---------------------------------------------------------------- harness

fn runtime() -> Arc<Runtime> {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_denier::Denier));
    registry.register(Arc::new(mixer_adapter_noop::Noop));
    registry.register(Arc::new(Failing));
    Arc::new(Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile::new("ext_authz_test.yaml", CONFIG)]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    ))
}

fn ready_runtime() -> Arc<Runtime> {
    let runtime = runtime();
    if let Err(e) = runtime.reload() {
        panic!("test config rejected: {e}");
    }
    runtime
}

/// Serves the ext_authz service on 127.0.0.1:0 and returns a connected client.
async fn serve(runtime: Arc<Runtime>) -> (AuthorizationClient<Channel>, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    // The stack the mixer serves with: Check straight from its encoded message, tonic's
    // routes behind it.
    let server = mixer_grpc::Server::new(
        grpc::unary_methods(&runtime),
        grpc::routes(&runtime).routes(),
    );
    tokio::spawn(server.serve(listener, std::future::pending()));
    (connect(addr).await, addr)
}

async fn connect(addr: SocketAddr) -> AuthorizationClient<Channel> {
    AuthorizationClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the test server")
}

fn socket(ip: &str, port: u32) -> Option<Address> {
    Some(Address {
        address: Some(AddressKind::SocketAddress(SocketAddress {
            address: ip.to_string(),
            port_specifier: Some(PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    })
}

fn strings(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A typical request as Envoy's HTTP filter sends it.
fn http_check(method: &str, path: &str, headers: &[(&str, &str)]) -> CheckRequest {
    let mut all = strings(&[
        (":authority", "shop.example.com"),
        (":method", method),
        (":path", path),
        (":scheme", "https"),
    ]);
    all.extend(strings(headers));
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: socket("10.0.0.1", 51000),
                ..Default::default()
            }),
            destination: Some(Peer {
                address: socket("10.0.0.2", 8080),
                ..Default::default()
            }),
            request: Some(Request {
                time: Some(PbTimestamp {
                    seconds: 1_700_000_000,
                    nanos: 0,
                }),
                http: Some(HttpRequest {
                    id: "req-1".into(),
                    method: method.into(),
                    headers: all,
                    path: path.into(),
                    host: "shop.example.com".into(),
                    scheme: "https".into(),
                    size: 0,
                    protocol: "HTTP/1.1".into(),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
    }
}

fn with_source(mut request: CheckRequest, ip: &str, principal: &str) -> CheckRequest {
    if let Some(source) = request.attributes.as_mut().and_then(|a| a.source.as_mut()) {
        source.address = socket(ip, 51000);
        source.principal = principal.to_string();
    }
    request
}

async fn check(client: &mut AuthorizationClient<Channel>, request: CheckRequest) -> CheckResponse {
    match client.check(request).await {
        Ok(response) => response.into_inner(),
        Err(status) => panic!("check failed: {status:?}"),
    }
}

fn status_code(response: &CheckResponse) -> i32 {
    response.status.as_ref().map_or(-1, |s| s.code)
}
