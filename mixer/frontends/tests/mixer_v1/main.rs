//! The Mixer v1 front end over a real loopback socket, driven by the generated tonic client:
//! allowed and denied checks, referenced attributes, header operations, bad input, size
//! limits, both report encodings and quota allocation in Check.

mod bad_input;
mod check;
mod client_versions;
#[path = "../common/mod.rs"]
mod common;
mod decoding;
mod instance_errors;
mod properties;
mod quota;
mod report;

use common::Recorder;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mixer_adapter_api::host::Params;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, ErrorKind, Handler, ParamError,
    Stability,
};
use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};
use mixer_frontends::mixer_v1::{dictionary, encode};
use mixer_model::{CheckResult, Instance, StringMap, Template, Value};
use mixer_proto::istio::mixer::v1 as pb;
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics, RuntimeOptions};
use pb::mixer_client::MixerClient;
use pb::referenced_attributes::Condition;
use tonic::transport::Channel;

const CONFIG: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: 7, message: "no bob"}, validDuration: 3s, validUseCount: 5}
---
kind: handler
metadata: {name: allow, namespace: istio-system}
spec: {compiledAdapter: noop}
---
kind: handler
metadata: {name: broken, namespace: istio-system}
spec: {compiledAdapter: broken}
---
kind: handler
metadata: {name: recorder, namespace: istio-system}
spec: {compiledAdapter: recorder}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: instance
metadata: {name: record, namespace: istio-system}
spec:
  compiledTemplate: logentry
  params:
    variables:
      method: request.method | "none"
      user: request.headers["x-user"] | "nobody"
      size: request.size | 0
---
kind: rule
metadata: {name: deny-bob, namespace: istio-system}
spec:
  match: request.headers["x-user"] == "bob"
  actions: [{handler: deny, instances: [nothing]}]
---
kind: rule
metadata: {name: crash, namespace: istio-system}
spec:
  match: request.headers["x-user"] == "crash"
  actions: [{handler: broken, instances: [nothing]}]
---
kind: rule
metadata: {name: tag-get, namespace: istio-system}
spec:
  match: request.method == "GET"
  actions: [{handler: allow, instances: [nothing]}]
  requestHeaderOperations:
  - name: x-seen-by
    values: ['"mixer"']
  - name: x-user
    values: ['request.headers["x-user"] | "nobody"']
    operation: APPEND
  responseHeaderOperations:
  - name: server
    operation: REMOVE
---
kind: rule
metadata: {name: record-all, namespace: istio-system}
spec:
  actions: [{handler: recorder, instances: [record]}]
"#;

// ---- test adapters -------------------------------------------------------------------------

/// Never decides.
struct Broken;

static BROKEN: AdapterInfo = AdapterInfo {
    name: "broken",
    description: "always fails",
    templates: &[Template::CheckNothing],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Broken {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &BROKEN
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(BrokenHandler))
    }
}

struct BrokenHandler;

impl Handler for BrokenHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for BrokenHandler {
    async fn check(&self, _: &Instance) -> Result<CheckResult, AdapterError> {
        Err(AdapterError::transient(
            ErrorKind::Unavailable,
            "backend down",
        ))
    }
}

// ---- harness -------------------------------------------------------------------------------

struct Harness {
    client: MixerClient<Channel>,
    addr: SocketAddr,
    records: Arc<Mutex<Vec<Instance>>>,
}

fn runtime(records: Arc<Mutex<Vec<Instance>>>) -> Runtime {
    runtime_with(CONFIG, records)
}

fn runtime_with(config: &str, records: Arc<Mutex<Vec<Instance>>>) -> Runtime {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_denier::Denier));
    registry.register(Arc::new(mixer_adapter_noop::Noop));
    registry.register(Arc::new(Broken));
    registry.register(Arc::new(Recorder::new(records)));
    Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile {
            name: "test.yaml".into(),
            text: config.into(),
        }]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    )
}

async fn serve(runtime: Runtime) -> Harness {
    let runtime = Arc::new(runtime);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound");
    // The stack the mixer serves with: Check read in place, Report through the generated
    // message, tonic's routes behind them.
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
        client: MixerClient::new(channel),
        addr,
        records: Arc::new(Mutex::new(Vec::new())),
    }
}

async fn start() -> Harness {
    let records = Arc::new(Mutex::new(Vec::new()));
    let rt = runtime(records.clone());
    rt.reload().expect("test config loads");
    let mut h = serve(rt).await;
    h.records = records;
    h
}

fn headers(pairs: &[(&str, &str)]) -> Value {
    StringMap::from_pairs(pairs.iter().copied()).into()
}

fn check_request(attrs: &[(&str, Value)], global_word_count: usize) -> pb::CheckRequest {
    pb::CheckRequest {
        attributes: Some(encode(
            attrs.iter().map(|(n, v)| (*n, v)),
            global_word_count,
        )),
        global_word_count: global_word_count as u32,
        deduplication_id: "dedup-1".into(),
        quotas: Default::default(),
    }
}

/// (name, condition, map key) of each referenced attribute, decoded, sorted.
fn decoded_refs(r: &pb::ReferencedAttributes) -> Vec<(String, Condition, Option<String>)> {
    let mut out: Vec<_> = r
        .attribute_matches
        .iter()
        .map(|m| {
            let name = dictionary::lookup(m.name, &r.words).expect("name decodes");
            let key = (m.map_key != 0)
                .then(|| dictionary::lookup(m.map_key, &r.words).expect("key decodes"));
            (
                name.to_string(),
                Condition::try_from(m.condition).expect("known condition"),
                key.map(str::to_string),
            )
        })
        .collect();
    out.sort();
    out
}

fn exact(name: &str, key: Option<&str>) -> (String, Condition, Option<String>) {
    (name.to_string(), Condition::Exact, key.map(str::to_string))
}

fn absent(name: &str, key: Option<&str>) -> (String, Condition, Option<String>) {
    (
        name.to_string(),
        Condition::Absence,
        key.map(str::to_string),
    )
}

fn header_ops(
    ops: &[pb::HeaderOperation],
) -> Vec<(String, String, pb::header_operation::Operation)> {
    ops.iter()
        .map(|o| {
            (
                o.name.clone(),
                o.value.clone(),
                pb::header_operation::Operation::try_from(o.operation).expect("known op"),
            )
        })
        .collect()
}
