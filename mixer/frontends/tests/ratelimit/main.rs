//! Rate limit front end, end to end: a real tonic server on loopback, Envoy's own client
//! (`RateLimitServiceClient` from `envoy-types`), a runtime built from an embedded config with a
//! small counting quota adapter defined here.

mod attributes;
#[path = "../common/mod.rs"]
mod common;
mod counting;
mod edge_cases;
mod envoy_config;
mod limits;

use common::QuotaDown;
use counting::{Call, Calls, Counting};
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code as RlCode, DescriptorStatus,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};
use mixer_frontends::ratelimit;
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics, RuntimeOptions};
use tonic::transport::Channel;

// ---- config --------------------------------------------------------------------------------

const CONFIG: &str = r#"
kind: handler
metadata: {name: limits, namespace: istio-system}
spec:
  compiledAdapter: memquota
  params:
    quotas:
    - {name: per-user.instance.istio-system, maxAmount: 2, validDuration: 60s}
    - {name: per-path, maxAmount: 5, validDuration: 1s}
    - {name: odd-window, maxAmount: 5, validDuration: 7s}
---
kind: handler
metadata: {name: storage-down, namespace: istio-system}
spec: {compiledAdapter: failing, failPolicy: CLOSED}
---
kind: handler
metadata: {name: storage-down-open, namespace: istio-system}
spec: {compiledAdapter: failing, failPolicy: OPEN}
---
kind: handler
metadata: {name: blocked, namespace: istio-system}
spec: {compiledAdapter: denier, params: {status: {code: RESOURCE_EXHAUSTED, message: blocked}}}
---
kind: instance
metadata: {name: per-user, namespace: istio-system}
spec:
  compiledTemplate: quota
  params:
    dimensions: {user: 'ratelimit.descriptor["user"]'}
---
kind: instance
metadata: {name: per-path, namespace: istio-system}
spec:
  compiledTemplate: quota
  params:
    dimensions: {path: 'ratelimit.descriptor["path"]', method: 'ratelimit.descriptor["method"] | "any"'}
---
kind: instance
metadata: {name: odd-window, namespace: istio-system}
spec: {compiledTemplate: quota}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: quota}
---
kind: rule
metadata: {name: users, namespace: istio-system}
spec:
  match: ratelimit.domain == "edge" && ratelimit.descriptor_keys == "user" && ratelimit.descriptor["user"] != "vip"
  actions: [{handler: limits, instances: [per-user]}]
---
kind: rule
metadata: {name: vip-blocked, namespace: istio-system}
spec:
  match: ratelimit.domain == "edge" && ratelimit.descriptor["user"] == "vip"
  actions: [{handler: blocked, instances: [nothing]}]
---
kind: rule
metadata: {name: paths, namespace: istio-system}
spec:
  match: ratelimit.domain == "edge" && ratelimit.descriptor_keys.startsWith("path")
  actions: [{handler: limits, instances: [per-path]}]
---
kind: rule
metadata: {name: odd, namespace: istio-system}
spec:
  match: ratelimit.domain == "odd"
  actions: [{handler: limits, instances: [odd-window]}]
---
kind: rule
metadata: {name: down, namespace: istio-system}
spec:
  match: ratelimit.domain == "broken"
  actions: [{handler: storage-down, instances: [nothing]}]
---
kind: rule
metadata: {name: down-open, namespace: istio-system}
spec:
  match: ratelimit.domain == "broken-open"
  actions: [{handler: storage-down-open, instances: [nothing]}]
"#;

// ---- harness -------------------------------------------------------------------------------

struct Harness {
    client: RateLimitServiceClient<Channel>,
    calls: Calls,
}

fn runtime(calls: Calls) -> Runtime {
    runtime_with(calls, CONFIG)
}

fn runtime_with(calls: Calls, config: &str) -> Runtime {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_denier::Denier));
    registry.register(Arc::new(mixer_adapter_noop::Noop));
    registry.register(Arc::new(Counting(calls)));
    registry.register(Arc::new(QuotaDown::new("failing", "redis is down")));
    Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile::new("test.yaml", config)]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    )
}

async fn serve(runtime: Runtime, calls: Calls) -> Harness {
    let runtime = Arc::new(runtime);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound");
    // The mixer's own server: the method is served from `grpc::unary_methods`, as in
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
        client: RateLimitServiceClient::new(channel),
        calls,
    }
}

async fn start() -> Harness {
    let calls: Calls = Arc::default();
    let rt = runtime(calls.clone());
    rt.reload().expect("test config loads");
    serve(rt, calls).await
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend: hits,
    }
}

impl Harness {
    async fn ask(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.client
            .should_rate_limit(request)
            .await
            .expect("decided")
            .into_inner()
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("not poisoned").clone()
    }
}

fn codes(r: &RateLimitResponse) -> Vec<RlCode> {
    r.statuses
        .iter()
        .map(|s| RlCode::try_from(s.code).expect("known code"))
        .collect()
}

/// The rate limit headers of an answer (without the decision id every answer carries).
fn headers(r: &RateLimitResponse) -> Vec<(String, String)> {
    r.response_headers_to_add
        .iter()
        .filter(|h| h.key != mixer_runtime::DECISION_ID_HEADER)
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

fn limit(s: &DescriptorStatus) -> Option<(String, u32, Unit)> {
    s.current_limit.as_ref().map(|l| {
        (
            l.name.clone(),
            l.requests_per_unit,
            Unit::try_from(l.unit).expect("known unit"),
        )
    })
}
