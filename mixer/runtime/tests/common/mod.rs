//! Shared helpers for the runtime tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::host::Params;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, ErrorKind, Handler, ParamError,
    Stability,
};
use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};
use mixer_model::{AttributeBag, CheckResult, Instance, StringMap, Template, Value};
use mixer_runtime::{RuntimeMetrics, RuntimeOptions, Snapshot};

/// An adapter whose handlers always fail to decide.
pub struct Broken;

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

/// An adapter that declares a check template but whose handler answers nothing: a build
/// must refuse it rather than let checks routed to it through unasked.
pub struct Hollow;

static HOLLOW: AdapterInfo = AdapterInfo {
    name: "hollow",
    description: "declares checknothing, answers nothing",
    templates: &[Template::CheckNothing],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Hollow {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &HOLLOW
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(HollowHandler))
    }
}

struct HollowHandler;

impl Handler for HollowHandler {}

/// An adapter whose handlers never answer a check or a quota call: each call's future
/// counts itself in [`STALLED_CANCELLED`] when dropped.
pub struct Stalled;

/// Calls to a [`Stalled`] handler dropped (cancelled) before they answered.
pub static STALLED_CANCELLED: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

static STALLED: AdapterInfo = AdapterInfo {
    name: "stalled",
    description: "never answers",
    templates: &[Template::CheckNothing, Template::Quota],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Stalled {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &STALLED
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(StalledHandler))
    }
}

struct StalledHandler;

/// Counts a call in [`STALLED_CANCELLED`] when dropped unanswered.
struct Cancelled;

impl Drop for Cancelled {
    fn drop(&mut self) {
        STALLED_CANCELLED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Never answers; ends only by being dropped.
async fn stall<T>() -> T {
    let _cancelled = Cancelled;
    std::future::pending().await
}

impl Handler for StalledHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
    fn as_quota(&self) -> Option<&dyn mixer_adapter_api::QuotaHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for StalledHandler {
    async fn check(&self, _: &Instance) -> Result<CheckResult, AdapterError> {
        stall().await
    }
}

#[async_trait]
impl mixer_adapter_api::QuotaHandler for StalledHandler {
    async fn allocate(
        &self,
        _: &Instance,
        _: &mixer_adapter_api::QuotaArgs,
    ) -> Result<mixer_model::QuotaResult, AdapterError> {
        stall().await
    }
}

/// denier + noop + memquota + broken + hollow + stalled + closing + pods.
pub fn registry() -> AdapterRegistry {
    let mut r = AdapterRegistry::new();
    r.register(Arc::new(Pods));
    r.register(Arc::new(Workloads));
    r.register(Arc::new(mixer_adapter_denier::Denier));
    r.register(Arc::new(mixer_adapter_memquota::MemQuota));
    r.register(Arc::new(mixer_adapter_noop::Noop));
    r.register(Arc::new(Broken));
    r.register(Arc::new(Hollow));
    r.register(Arc::new(Stalled));
    r.register(Arc::new(Closing));
    r
}

/// Builds a snapshot from YAML text.
pub fn snapshot(yaml: &str, options: &RuntimeOptions) -> Snapshot {
    snapshot_after(yaml, options, None).snapshot
}

/// Builds a snapshot from YAML text over a previous one.
pub fn snapshot_after(
    yaml: &str,
    options: &RuntimeOptions,
    previous: Option<&Snapshot>,
) -> mixer_runtime::Built {
    build(yaml, options, previous, &RuntimeMetrics::unregistered())
}

/// Builds a snapshot from YAML text that counts into `metrics`.
pub fn snapshot_metered(yaml: &str, metrics: &RuntimeMetrics) -> Snapshot {
    build(yaml, &RuntimeOptions::default(), None, metrics).snapshot
}

/// Builds a snapshot from YAML text with `options`, counting into `metrics`.
pub fn build(
    yaml: &str,
    options: &RuntimeOptions,
    previous: Option<&Snapshot>,
    metrics: &RuntimeMetrics,
) -> mixer_runtime::Built {
    try_build_in(&registry(), yaml, options, previous, metrics)
        .unwrap_or_else(|e| panic!("build failed: {e:?}"))
}

/// Builds a snapshot from YAML text with the adapters of `registry` (a test's own adapters
/// beside or instead of [`registry`]'s), with default options.
pub fn snapshot_in(registry: &AdapterRegistry, yaml: &str) -> Snapshot {
    snapshot_in_with(
        registry,
        yaml,
        &RuntimeOptions::default(),
        &RuntimeMetrics::unregistered(),
    )
}

/// [`snapshot_in`] with `options`, counting into `metrics`.
pub fn snapshot_in_with(
    registry: &AdapterRegistry,
    yaml: &str,
    options: &RuntimeOptions,
    metrics: &RuntimeMetrics,
) -> Snapshot {
    try_build_in(registry, yaml, options, None, metrics)
        .unwrap_or_else(|e| panic!("build failed: {e:?}"))
        .snapshot
}

/// Validates YAML text against `registry` (an invalid test config panics: the tests here
/// are about building and deciding, not validation) and builds a snapshot from it; the
/// handler build errors when the build fails.
pub fn try_build_in(
    registry: &AdapterRegistry,
    yaml: &str,
    options: &RuntimeOptions,
    previous: Option<&Snapshot>,
    metrics: &RuntimeMetrics,
) -> Result<mixer_runtime::Built, Vec<mixer_runtime::BuildError>> {
    let sources = [SourceFile::new("test.yaml", yaml)];
    let validated = mixer_config::validate(&sources, registry, &ConfigOptions::default())
        .unwrap_or_else(|e| panic!("invalid test config: {e:?}"));
    Snapshot::build(
        previous.map_or(1, |p| p.id + 1),
        validated.config,
        registry,
        previous,
        options,
        metrics,
    )
}

/// A bag from (name, value) pairs; maps given as `StringMap`.
pub fn bag(snapshot: &Snapshot, attrs: &[(&str, Value)]) -> AttributeBag {
    let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
    for (name, value) in attrs {
        bag.set(name, value.clone()).expect("attribute fits");
    }
    bag
}

/// A STRING_MAP value.
pub fn map(pairs: &[(&str, &str)]) -> Value {
    StringMap::from_pairs(pairs.iter().copied()).into()
}

/// Ten seconds.
pub const TEN_S: Duration = Duration::from_secs(10);

/// Names of the `closing` handlers closed so far, in order.
pub static CLOSED: std::sync::Mutex<Vec<Arc<str>>> = std::sync::Mutex::new(Vec::new());

/// How many times the `closing` handler `name` has been closed.
pub fn closes(name: &str) -> usize {
    CLOSED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|n| n.as_ref() == name)
        .count()
}

/// An adapter whose handlers allow every check and note in [`CLOSED`] when they are closed.
pub struct Closing;

static CLOSING: AdapterInfo = AdapterInfo {
    name: "closing",
    description: "notes when its handlers close",
    templates: &[Template::CheckNothing],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Closing {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &CLOSING
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, ctx: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(ClosingHandler(ctx.handler_name.clone())))
    }
}

struct ClosingHandler(Arc<str>);

#[async_trait]
impl Handler for ClosingHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
    async fn close(&self) {
        CLOSED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.0.clone());
    }
}

#[async_trait]
impl CheckHandler for ClosingHandler {
    async fn check(&self, _: &Instance) -> Result<CheckResult, AdapterError> {
        Ok(CheckResult::ok(Duration::from_secs(1), 1))
    }
}

/// Decides a check through the runtime's one entry, answering with the reads (as Mixer v1).
pub async fn decide(
    snapshot: &Snapshot,
    bag: &dyn mixer_model::Bag,
) -> Result<std::sync::Arc<mixer_model::Verdict>, mixer_runtime::Undecided> {
    mixer_runtime::check(snapshot, bag, mixer_runtime::Wants::Reads)
        .await
        .map(|checked| checked.verdict)
}

/// Allocates the quota `name` (every quota when `None`) for one request.
pub async fn allocate(
    snapshot: &Snapshot,
    bag: &dyn mixer_model::Bag,
    name: Option<&str>,
    args: &mixer_adapter_api::QuotaArgs,
) -> Result<mixer_runtime::QuotaOutcome, mixer_runtime::Undecided> {
    let ask = mixer_runtime::QuotaAsk {
        bag,
        quota: name,
        args,
    };
    mixer_runtime::quota::ask(snapshot, &[ask])
        .await
        .pop()
        .expect("one answer per ask")
}

/// A test attribute generator for the `kubernetes` template, a stand-in for kubernetesenv.
/// By `source_uid`: `kubernetes://<workload>-<rest>.<namespace>` names the pod's workload and
/// namespace (labels `app: <workload>`); `error` fails; `stall` never answers;
/// `bad-token` is denied UNAUTHENTICATED with a `WWW-Authenticate` header; a uid containing
/// `short` is valid for 5 s. Every call is noted in [`GENERATED`].
pub struct Pods;

/// The `source_uid` of every call to a [`Pods`] handler, in order.
pub static GENERATED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// How many times a [`Pods`] handler was asked about `source_uid`.
pub fn generated(source_uid: &str) -> usize {
    GENERATED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|u| *u == source_uid)
        .count()
}

static PODS: AdapterInfo = AdapterInfo {
    name: "pods",
    description: "maps a source uid to its workload",
    templates: &[Template::Kubernetes],
    cacheable: true,
    stability: Stability::Alpha,
};

impl Adapter for Pods {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &PODS
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(PodsHandler))
    }
}

struct PodsHandler;

impl Handler for PodsHandler {
    fn as_attributes(&self) -> Option<&dyn mixer_adapter_api::AttributeHandler> {
        Some(self)
    }
}

#[async_trait]
impl mixer_adapter_api::AttributeHandler for PodsHandler {
    async fn generate(
        &self,
        instance: &Instance,
    ) -> Result<mixer_adapter_api::Generated, AdapterError> {
        use mixer_adapter_api::{Denial, Generated};
        let view = mixer_model::KubernetesInstance::of(instance).expect("a kubernetes instance");
        let uid = view.source_uid.unwrap_or("").to_string();
        GENERATED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(uid.clone());
        match uid.as_str() {
            "error" => Err(AdapterError::transient(
                ErrorKind::Unavailable,
                "pod cache down",
            )),
            "stall" => stall().await,
            "bad-token" => Ok(Generated::denied(Denial {
                status: mixer_model::Status::new(
                    mixer_model::Code::Unauthenticated,
                    "invalid token",
                ),
                response_headers: vec![mixer_model::HeaderOperation {
                    name: "www-authenticate".into(),
                    value: "Bearer error=\"invalid_token\"".into(),
                    op: mixer_model::HeaderOp::Replace,
                }],
            })),
            _ => {
                let Some(pod) = uid.strip_prefix("kubernetes://") else {
                    return Ok(Generated::default());
                };
                let (name, namespace) = pod.split_once('.').unwrap_or((pod, "default"));
                let workload = name.split('-').next().unwrap_or(name);
                Ok(Generated {
                    outputs: vec![
                        ("source_pod_uid", Value::from(uid.as_str())),
                        ("source_workload_name", Value::from(workload)),
                        ("source_namespace", Value::from(namespace)),
                        ("source_labels", map(&[("app", workload)])),
                    ],
                    valid_duration: uid.contains("short").then_some(Duration::from_secs(5)),
                    denial: None,
                })
            }
        }
    }
}

/// A test report adapter for `metric`: notes each instance's `workload` dimension in
/// [`REPORTED`].
pub struct Workloads;

/// The `workload` dimension of every metric a [`Workloads`] handler got, in order.
pub static REPORTED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

static WORKLOADS: AdapterInfo = AdapterInfo {
    name: "workloads",
    description: "notes the workload dimension of metrics",
    templates: &[Template::Metric],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Workloads {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &WORKLOADS
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(WorkloadsHandler))
    }
}

struct WorkloadsHandler;

impl Handler for WorkloadsHandler {
    fn as_report(&self) -> Option<&dyn mixer_adapter_api::ReportHandler> {
        Some(self)
    }
}

#[async_trait]
impl mixer_adapter_api::ReportHandler for WorkloadsHandler {
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        let mut reported = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
        for instance in instances {
            if let Some(mixer_model::FieldValue::Map(dims)) = instance.field("dimensions")
                && let Some((_, v)) = dims.iter().find(|(k, _)| &**k == "workload")
            {
                reported.push(v.to_string());
            }
        }
        Ok(())
    }
}
