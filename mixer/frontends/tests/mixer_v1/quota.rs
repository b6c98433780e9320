//! Quota allocation in Check, with a recording quota adapter.

use super::*;
use common::QuotaDown;
use mixer_adapter_api::{QuotaArgs, QuotaHandler};
use mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT;
use mixer_model::QuotaResult;
use std::time::Duration;
use tonic::Code;

const QUOTA_CONFIG: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: 7, message: "no bob"}}
---
kind: handler
metadata: {name: counter, namespace: istio-system}
spec: {compiledAdapter: quotarecorder}
---
kind: handler
metadata: {name: exhausted, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: RESOURCE_EXHAUSTED, message: "no more"}, validDuration: 7s}
---
kind: handler
metadata: {name: storage, namespace: istio-system}
spec: {compiledAdapter: quotabroken, failPolicy: CLOSED}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: instance
metadata: {name: requestcount, namespace: istio-system}
spec:
  compiledTemplate: quota
  params:
    dimensions: {user: 'request.headers["x-user"] | "nobody"'}
---
kind: instance
metadata: {name: blocked, namespace: istio-system}
spec: {compiledTemplate: quota}
---
kind: instance
metadata: {name: fragile, namespace: istio-system}
spec: {compiledTemplate: quota}
---
kind: rule
metadata: {name: deny-bob, namespace: istio-system}
spec:
  match: request.headers["x-user"] == "bob"
  actions: [{handler: deny, instances: [nothing]}]
---
kind: rule
metadata: {name: count, namespace: istio-system}
spec:
  actions: [{handler: counter, instances: [requestcount]}]
---
kind: rule
metadata: {name: block-admin, namespace: istio-system}
spec:
  match: request.path == "/admin"
  actions: [{handler: exhausted, instances: [blocked]}]
---
kind: rule
metadata: {name: fragile, namespace: istio-system}
spec:
  match: request.path == "/fragile"
  actions: [{handler: storage, instances: [fragile]}]
"#;

/// (instance, amount, best effort, deduplication id) of each allocation.
type Allocations = Arc<Mutex<Vec<(String, i64, bool, String)>>>;

/// Grants everything asked, for 10s, and records the calls.
struct QuotaRecorder(Allocations);

static QUOTA_RECORDER: AdapterInfo = AdapterInfo {
    name: "quotarecorder",
    description: "grants and records quota",
    templates: &[Template::Quota],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for QuotaRecorder {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &QUOTA_RECORDER
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(QuotaRecorderHandler(self.0.clone())))
    }
}

struct QuotaRecorderHandler(Allocations);

impl Handler for QuotaRecorderHandler {
    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        Some(self)
    }
}

#[async_trait]
impl QuotaHandler for QuotaRecorderHandler {
    async fn allocate(
        &self,
        instance: &Instance,
        args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError> {
        self.0.lock().expect("not poisoned").push((
            instance.name.to_string(),
            args.amount,
            args.best_effort,
            args.deduplication_id.clone(),
        ));
        Ok(QuotaResult {
            status: mixer_model::Status::OK,
            valid_duration: Duration::from_secs(10),
            granted_amount: args.amount,
            limit: None,
        })
    }
}

/// The runtime's name for the handler of `adapter` (Istio's dispatcher prefixes a refusal
/// with it, whatever form the names take).
static EXHAUSTED_HANDLER: std::sync::OnceLock<String> = std::sync::OnceLock::new();

async fn start_quota() -> (Harness, Allocations) {
    let allocations: Allocations = Arc::default();
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_denier::Denier));
    registry.register(Arc::new(QuotaRecorder(allocations.clone())));
    registry.register(Arc::new(QuotaDown::new("quotabroken", "quota store down")));
    let rt = Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile::new("quota.yaml", QUOTA_CONFIG)]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    );
    rt.reload().expect("quota config loads");
    let exhausted = rt
        .snapshot()
        .handlers
        .iter()
        .find(|h| h.name.starts_with("exhausted."))
        .map(|h| h.name.to_string())
        .expect("the exhausted handler is built");
    let _ = EXHAUSTED_HANDLER.set(exhausted);
    (serve(rt).await, allocations)
}

fn with_quotas(mut request: pb::CheckRequest, quotas: &[(&str, i64, bool)]) -> pb::CheckRequest {
    for (name, amount, best_effort) in quotas {
        request.quotas.insert(
            name.to_string(),
            pb::check_request::QuotaParams {
                amount: *amount,
                best_effort: *best_effort,
            },
        );
    }
    request
}

#[tokio::test]
async fn quotas_are_allocated_after_an_allowed_check() {
    let (mut h, allocations) = start_quota().await;
    let request = with_quotas(
        check_request(
            &[
                ("request.path", Value::from("/shop")),
                ("request.headers", headers(&[("x-user", "amy")])),
            ],
            GLOBAL_WORD_COUNT,
        ),
        &[
            ("requestcount", 3, false),
            ("requestcount.quota.istio-system", 1, true),
            ("unconfigured", 5, false),
        ],
    );
    let response = h.client.check(request).await.expect("check").into_inner();
    let p = response.precondition.expect("precondition");
    assert_eq!(p.status.expect("status").code, 0);
    assert_eq!(response.quotas.len(), 3);

    let q = &response.quotas["requestcount"];
    assert_eq!(q.granted_amount, 3);
    assert_eq!(q.status.as_ref().map(|s| s.code), Some(0));
    assert_eq!(
        q.valid_duration,
        Some(prost_types::Duration {
            seconds: 10,
            nanos: 0
        })
    );
    // What the quota rules read, encoded as for the precondition: the matches of the quota
    // rules' candidates and the instance's dimension.
    assert_eq!(
        decoded_refs(q.referenced_attributes.as_ref().expect("refs")),
        [
            exact("request.headers", Some("x-user")),
            exact("request.path", None),
        ]
    );
    assert_eq!(
        response.quotas["requestcount.quota.istio-system"].granted_amount,
        1
    );

    // A quota no rule produces is granted in full for the default validity.
    let q = &response.quotas["unconfigured"];
    assert_eq!(q.granted_amount, 5);
    assert_eq!(q.valid_duration.map(|d| d.seconds), Some(60));

    // Istio's deduplication ids: the request's, followed by the quota's name.
    let calls = allocations.lock().expect("not poisoned").clone();
    assert_eq!(
        calls,
        [
            (
                "requestcount.instance.istio-system".to_string(),
                3,
                false,
                "dedup-1requestcount".to_string()
            ),
            (
                "requestcount.instance.istio-system".to_string(),
                1,
                true,
                "dedup-1requestcount.quota.istio-system".to_string()
            ),
        ]
    );
}

#[tokio::test]
async fn a_denied_precondition_allocates_no_quota() {
    let (mut h, allocations) = start_quota().await;
    let request = with_quotas(
        check_request(
            &[("request.headers", headers(&[("x-user", "bob")]))],
            GLOBAL_WORD_COUNT,
        ),
        &[("requestcount", 1, false)],
    );
    let response = h.client.check(request).await.expect("check").into_inner();
    let p = response.precondition.expect("precondition");
    assert_eq!(p.status.expect("status").code, 7);
    assert!(response.quotas.is_empty());
    assert!(allocations.lock().expect("not poisoned").is_empty());
}

#[tokio::test]
async fn a_refused_quota_answers_resource_exhausted() {
    let (mut h, _) = start_quota().await;
    let request = with_quotas(
        check_request(
            &[("request.path", Value::from("/admin"))],
            GLOBAL_WORD_COUNT,
        ),
        &[("blocked", 2, false), ("requestcount", 1, false)],
    );
    let response = h.client.check(request).await.expect("check").into_inner();
    assert_eq!(
        response.precondition.and_then(|p| p.status).map(|s| s.code),
        Some(0)
    );
    let q = &response.quotas["blocked"];
    assert_eq!(q.granted_amount, 0);
    let status = q.status.as_ref().expect("status");
    assert_eq!(status.code, mixer_model::Code::ResourceExhausted as i32);
    // Prefixed with the handler's name and ":", as Istio 1.4's dispatcher did
    // (`mixer/pkg/runtime/dispatcher/session.go`: `state.destination.HandlerName + ":" +
    // st.Message`).
    let handler = EXHAUSTED_HANDLER.get().expect("set at start");
    assert_eq!(status.message, format!("{handler}:no more"));
    assert_eq!(q.valid_duration.map(|d| d.seconds), Some(7));
    // The other quota is unaffected.
    assert_eq!(response.quotas["requestcount"].granted_amount, 1);
}

#[tokio::test]
async fn a_quota_handler_that_cannot_decide_makes_the_check_unavailable() {
    let (mut h, _) = start_quota().await;
    let request = with_quotas(
        check_request(
            &[("request.path", Value::from("/fragile"))],
            GLOBAL_WORD_COUNT,
        ),
        &[("fragile", 1, false)],
    );
    let err = h.client.check(request).await.expect_err("could not decide");
    assert_eq!(err.code(), Code::Unavailable);
    assert!(
        err.message().contains("quota store down"),
        "{}",
        err.message()
    );
}
