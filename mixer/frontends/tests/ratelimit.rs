//! Rate limit front end, end to end: a real tonic server on loopback, Envoy's own client
//! (`RateLimitServiceClient` from `envoy-types`), a runtime built from an embedded config with a
//! small counting quota adapter defined here.

mod common;

use common::QuotaDown;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code as RlCode, DescriptorStatus,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::UInt64Value;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, AdapterRegistry, BuildContext, ErrorKind, Handler,
    ParamError, Params, QuotaArgs, QuotaHandler, Stability,
};
use mixer_config::{ConfigOptions, SourceFile};
use mixer_frontends::ratelimit;
use mixer_model::{Code, Instance, QuotaLimit, QuotaResult, Status, Template, Value};
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics, RuntimeOptions};
use tonic::transport::Channel;

// ---- test adapters -------------------------------------------------------------------------

/// One allocation the counting adapter saw: (instance name, dimensions as text, amount).
type Call = (String, Vec<(String, String)>, i64);
/// Every allocation it saw.
type Calls = Arc<Mutex<Vec<Call>>>;

/// A quota adapter named like memquota, with its params' shape (`quotas: [{name, maxAmount,
/// validDuration}]`): counts per instance and dimensions, never resets (tests are short), and
/// reports the limit and what is left as memquota does. A caller's limit override replaces
/// the configured amount and window.
struct Counting(Calls);

static COUNTING: AdapterInfo = AdapterInfo {
    name: "memquota",
    description: "counts quota per instance and dimensions",
    templates: &[Template::Quota],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Counting {
    fn info(&self) -> &AdapterInfo {
        &COUNTING
    }
    fn validate(&self, _: &Params) -> Result<(), Vec<ParamError>> {
        Ok(())
    }
    fn build(&self, params: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        let mut limits = HashMap::new();
        for q in params
            .get("quotas")
            .and_then(|q| q.as_array())
            .into_iter()
            .flatten()
        {
            let name = q["name"].as_str().unwrap_or_default().to_string();
            let max = q["maxAmount"].as_i64().unwrap_or(0);
            let window = q["validDuration"]
                .as_str()
                .and_then(mixer_model::Duration::parse)
                .map_or(Duration::from_secs(1), |d| d.to_std());
            limits.insert(name, (max, window));
        }
        Ok(Arc::new(CountingHandler {
            limits,
            used: Mutex::new(HashMap::new()),
            calls: self.0.clone(),
        }))
    }
}

struct CountingHandler {
    limits: HashMap<String, (i64, Duration)>,
    used: Mutex<HashMap<String, i64>>,
    calls: Calls,
}

impl Handler for CountingHandler {
    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        Some(self)
    }
}

#[async_trait]
impl QuotaHandler for CountingHandler {
    async fn allocate(
        &self,
        instance: &Instance,
        args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError> {
        let dims: Vec<(String, String)> = instance
            .map("dimensions")
            .unwrap_or(&[])
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.calls.lock().expect("not poisoned").push((
            instance.name.to_string(),
            dims.clone(),
            args.amount,
        ));
        let short = instance.name.split('.').next().unwrap_or_default();
        let (name, &(mut max, mut window)) = self
            .limits
            .get_key_value(instance.name.as_ref())
            .or_else(|| self.limits.get_key_value(short))
            .ok_or_else(|| {
                AdapterError::permanent(ErrorKind::InvalidInstance, "no quota configured")
            })?;
        if let Some(o) = args.limit_override {
            (max, window) = (o.max_amount, o.window);
        }
        let key = format!("{}{dims:?}{window:?}", instance.name);
        let mut used = self.used.lock().expect("not poisoned");
        let count = used.entry(key).or_insert(0);
        let over = *count + args.amount > max;
        if !over {
            *count += args.amount;
        }
        let limit = Some(QuotaLimit {
            name: name.as_str().into(),
            max_amount: max,
            window,
            remaining: max - *count,
            reset_after: window,
        });
        if over {
            return Ok(QuotaResult {
                status: Status::new(Code::ResourceExhausted, "over the limit"),
                valid_duration: window,
                granted_amount: 0,
                limit,
            });
        }
        Ok(QuotaResult {
            status: Status::OK,
            valid_duration: window,
            granted_amount: args.amount,
            limit,
        })
    }
}

// ---- config --------------------------------------------------------------------------------

const CONFIG: &str = r#"
kind: handler
metadata: {name: limits, namespace: istio-system}
spec:
  compiledAdapter: memquota
  params:
    quotas:
    - {name: per-user.istio-system, maxAmount: 2, validDuration: 60s}
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
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ratelimit::service(runtime))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
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

fn headers(r: &RateLimitResponse) -> Vec<(String, String)> {
    r.response_headers_to_add
        .iter()
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

// ---- tests ---------------------------------------------------------------------------------

#[tokio::test]
async fn one_descriptor_over_its_limit_makes_the_answer_over_limit() {
    let mut h = start().await;
    let both = || {
        request(
            "edge",
            vec![
                descriptor(&[("user", "amy")]),
                descriptor(&[("path", "/shop")]),
                descriptor(&[("unconfigured", "x")]),
            ],
            0,
        )
    };
    // amy may make 2 requests a minute; /shop 5 a second.
    for _ in 0..2 {
        let r = h.ask(both()).await;
        assert_eq!(r.overall_code, RlCode::Ok as i32);
        assert_eq!(codes(&r), [RlCode::Ok, RlCode::Ok, RlCode::Ok]);
    }
    let r = h.ask(both()).await;
    assert_eq!(r.overall_code, RlCode::OverLimit as i32);
    assert_eq!(codes(&r), [RlCode::OverLimit, RlCode::Ok, RlCode::Ok]);

    // Per-descriptor details: the limit when known, the time to reset when a handler answered.
    assert_eq!(
        limit(&r.statuses[0]),
        Some(("per-user".to_string(), 2, Unit::Minute))
    );
    assert_eq!(
        limit(&r.statuses[1]),
        Some(("per-path".to_string(), 5, Unit::Second))
    );
    assert_eq!(limit(&r.statuses[2]), None, "no rule, no limit");
    assert_eq!(
        r.statuses[0].duration_until_reset.map(|d| d.seconds),
        Some(60)
    );
    assert_eq!(r.statuses[2].duration_until_reset, None);
    assert_eq!(r.statuses[0].limit_remaining, 0, "over the limit");
    assert_eq!(
        r.statuses[1].limit_remaining, 2,
        "/shop: 5 a second, 3 used"
    );

    // Headers come from the descriptor over its limit.
    assert_eq!(
        headers(&r),
        [
            ("X-RateLimit-Limit".to_string(), "2".to_string()),
            ("X-RateLimit-Remaining".to_string(), "0".to_string()),
            ("X-RateLimit-Reset".to_string(), "60".to_string()),
        ]
    );

    // Another user has a counter of their own.
    let r = h
        .ask(request("edge", vec![descriptor(&[("user", "bob")])], 0))
        .await;
    assert_eq!(r.overall_code, RlCode::Ok as i32);
    assert_eq!(r.statuses[0].limit_remaining, 1);
    assert_eq!(
        headers(&r),
        [
            ("X-RateLimit-Limit".to_string(), "2".to_string()),
            ("X-RateLimit-Remaining".to_string(), "1".to_string()),
            ("X-RateLimit-Reset".to_string(), "60".to_string()),
        ]
    );

    // Allowed everywhere: the headers of the descriptor with the fewest requests left.
    let r = h
        .ask(request(
            "edge",
            vec![
                descriptor(&[("path", "/cart")]),
                descriptor(&[("user", "cy")]),
            ],
            0,
        ))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok, RlCode::Ok]);
    assert_eq!(
        [r.statuses[0].limit_remaining, r.statuses[1].limit_remaining],
        [4, 1]
    );
    assert_eq!(
        headers(&r),
        [
            ("X-RateLimit-Limit".to_string(), "2".to_string()),
            ("X-RateLimit-Remaining".to_string(), "1".to_string()),
            ("X-RateLimit-Reset".to_string(), "60".to_string()),
        ]
    );
}

#[tokio::test]
async fn a_descriptor_limit_override_replaces_the_configured_limit() {
    let mut h = start().await;
    let limited = |per_unit: u32, unit: RateLimitUnit| {
        let mut d = descriptor(&[("path", "/api")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: per_unit,
            unit: unit as i32,
        });
        request("edge", vec![d], 0)
    };
    // /api is configured at 5 a second; Envoy says 2 an hour.
    for left in [1, 0] {
        let r = h.ask(limited(2, RateLimitUnit::Hour)).await;
        assert_eq!(codes(&r), [RlCode::Ok]);
        assert_eq!(r.statuses[0].limit_remaining, left);
        assert_eq!(
            limit(&r.statuses[0]),
            Some(("per-path".to_string(), 2, Unit::Hour))
        );
    }
    let r = h.ask(limited(2, RateLimitUnit::Hour)).await;
    assert_eq!(codes(&r), [RlCode::OverLimit]);
    // Without the override the configured limit (and its own counter) applies.
    let r = h
        .ask(request("edge", vec![descriptor(&[("path", "/api")])], 0))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    assert_eq!(
        limit(&r.statuses[0]),
        Some(("per-path".to_string(), 5, Unit::Second))
    );
    // A unit with no length is refused, not guessed.
    let err = h
        .client
        .should_rate_limit(limited(2, RateLimitUnit::Unknown))
        .await
        .expect_err("unknown unit");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message()
            .contains("descriptors[0].limit.unit 0 (UNKNOWN)"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn hits_addend_comes_from_the_descriptor_then_the_request_then_one() {
    let mut h = start().await;
    // The request asks for 3 per descriptor: 3 of /a's 5 fit, the next 3 do not.
    let r = h
        .ask(request("edge", vec![descriptor(&[("path", "/a")])], 3))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    let r = h
        .ask(request("edge", vec![descriptor(&[("path", "/a")])], 3))
        .await;
    assert_eq!(codes(&r), [RlCode::OverLimit]);
    // The descriptor's own hits_addend wins over the request's: 2 more fit exactly.
    let mut d = descriptor(&[("path", "/a")]);
    d.hits_addend = Some(UInt64Value { value: 2 });
    let r = h.ask(request("edge", vec![d], 3)).await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    // Unset everywhere: 1.
    let r = h
        .ask(request("edge", vec![descriptor(&[("path", "/b")])], 0))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    let amounts: Vec<i64> = h.calls().iter().map(|c| c.2).collect();
    assert_eq!(amounts, [3, 3, 2, 1]);
}

#[tokio::test]
async fn domain_and_descriptor_attributes_reach_rules_and_instances() {
    let mut h = start().await;
    let r = h
        .ask(request(
            "edge",
            vec![
                descriptor(&[("path", "/x"), ("method", "GET")]),
                descriptor(&[("user", "vip")]),
                descriptor(&[("user", "amy"), ("extra", "1")]),
            ],
            0,
        ))
        .await;
    // The vip rule denies through the denier; the two-entry user descriptor has another shape
    // than the users rule requires, so no rule applies to it.
    assert_eq!(codes(&r), [RlCode::Ok, RlCode::OverLimit, RlCode::Ok]);
    assert_eq!(
        h.calls(),
        [(
            "per-path.istio-system".to_string(),
            vec![
                ("path".to_string(), "/x".to_string()),
                ("method".to_string(), "GET".to_string())
            ],
            1
        )]
    );
    // The same descriptor in another domain matches nothing.
    let r = h
        .ask(request("other", vec![descriptor(&[("user", "vip")])], 0))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    assert!(headers(&r).is_empty());
}

#[tokio::test]
async fn a_limit_the_protocol_cannot_say_is_left_out() {
    let mut h = start().await;
    let r = h
        .ask(request("odd", vec![descriptor(&[("k", "v")])], 0))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    assert_eq!(limit(&r.statuses[0]), None, "7s is no unit");
    assert_eq!(
        r.statuses[0].duration_until_reset.map(|d| d.seconds),
        Some(7)
    );
}

#[tokio::test]
async fn a_handler_that_cannot_decide_is_unavailable() {
    let mut h = start().await;
    let err = h
        .client
        .should_rate_limit(request("broken", vec![descriptor(&[("user", "amy")])], 0))
        .await
        .expect_err("could not decide");
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert!(err.message().contains("redis is down"), "{}", err.message());

    // Failing open grants, for no longer than this call.
    let r = h
        .ask(request(
            "broken-open",
            vec![descriptor(&[("user", "amy")])],
            0,
        ))
        .await;
    assert_eq!(r.overall_code, RlCode::Ok as i32);
    assert_eq!(
        r.statuses[0]
            .duration_until_reset
            .map(|d| (d.seconds, d.nanos)),
        Some((0, 0))
    );
}

#[tokio::test]
async fn no_config_empty_domain_and_no_descriptors_are_errors() {
    let calls: Calls = Arc::default();
    let mut h = serve(runtime(calls.clone()), calls).await; // never reloaded
    let err = h
        .client
        .should_rate_limit(request("edge", vec![descriptor(&[("user", "amy")])], 0))
        .await
        .expect_err("not ready");
    assert_eq!(err.code(), tonic::Code::Unavailable);

    let mut h = start().await;
    let err = h
        .client
        .should_rate_limit(request("", vec![descriptor(&[("user", "amy")])], 0))
        .await
        .expect_err("no domain");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = h
        .client
        .should_rate_limit(request("edge", vec![], 0))
        .await
        .expect_err("no descriptors");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn negative_hits_are_not_charged() {
    let mut h = start().await;
    let mut d = descriptor(&[("user", "amy")]);
    d.is_negative_hits = true;
    let r = h.ask(request("edge", vec![d], 5)).await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    assert!(h.calls().is_empty());
}

#[test]
fn the_bag_carries_the_descriptor() {
    let vocabulary = Arc::new(mixer_model::Vocabulary::istio());
    let mut bag = mixer_model::AttributeBag::new(vocabulary);
    let d = descriptor(&[
        ("remote_address", "10.0.0.1"),
        ("path", "/a"),
        ("path", "/b"),
    ]);
    let r = request("edge", vec![d.clone()], 0);
    ratelimit::fill_bag(
        &mut bag,
        "edge",
        &d,
        ratelimit::hits_addend(&r, &d),
        mixer_model::Timestamp(0),
    );
    assert_eq!(
        bag.get_by_name(ratelimit::DESCRIPTOR_KEYS),
        Some(&Value::from("remote_address.path.path"))
    );
    let map = bag
        .get_by_name(ratelimit::DESCRIPTOR)
        .and_then(Value::as_map)
        .expect("map");
    assert_eq!(map.get("path").map(|v| v.as_ref()), Some("/a"));
    assert_eq!(
        bag.get_by_name(ratelimit::HITS_ADDEND),
        Some(&Value::Int64(1))
    );
    assert_eq!(
        bag.get_by_name(ratelimit::DOMAIN),
        Some(&Value::from("edge"))
    );
}

// ---- envoyproxy/ratelimit's config format ----------------------------------------------------

/// envoyproxy/ratelimit's README examples 2 and 3, with the default (memquota) backend.
const RATELIMIT_CONFIG: &str = r#"
kind: ratelimitconfig
metadata: {name: edge, namespace: istio-system}
spec:
  domain: edge
  descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: message_type
    value: marketing
    descriptors:
    - key: to_number
      rate_limit: {unit: day, requests_per_unit: 1}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: internal
    rate_limit: {unlimited: true}
"#;

#[tokio::test]
async fn envoyproxy_ratelimit_config_is_served() {
    let calls: Calls = Arc::default();
    let rt = runtime_with(calls.clone(), RATELIMIT_CONFIG);
    rt.reload().expect("ratelimit config loads");
    let snapshot = rt.snapshot();
    assert_eq!(snapshot.config.rules.len(), 4);
    assert_eq!(
        snapshot.indexed_rules(),
        4,
        "every rule is found by literal lookup"
    );
    drop(snapshot);
    let mut h = serve(rt, calls).await;

    // The value-specific entry wins over the key-only one: 50.0.0.5 gets 0 requests.
    let r = h
        .ask(request(
            "edge",
            vec![descriptor(&[("remote_address", "50.0.0.5")])],
            0,
        ))
        .await;
    assert_eq!(codes(&r), [RlCode::OverLimit]);
    assert_eq!(
        limit(&r.statuses[0]),
        Some(("edge-remote_address-50_0_0_5".to_string(), 0, Unit::Second))
    );
    // Any other address: 3 a minute, each address counted apart.
    for _ in 0..3 {
        let r = h
            .ask(request(
                "edge",
                vec![descriptor(&[("remote_address", "10.0.0.1")])],
                0,
            ))
            .await;
        assert_eq!(codes(&r), [RlCode::Ok]);
    }
    let r = h
        .ask(request(
            "edge",
            vec![
                descriptor(&[("remote_address", "10.0.0.1")]),
                descriptor(&[("remote_address", "10.0.0.2")]),
            ],
            0,
        ))
        .await;
    assert_eq!(codes(&r), [RlCode::OverLimit, RlCode::Ok]);
    assert_eq!(
        headers(&r)[0],
        ("X-RateLimit-Limit".to_string(), "3".to_string())
    );

    // Example 2: one marketing message a day to a number, two of any kind.
    let marketing = || descriptor(&[("message_type", "marketing"), ("to_number", "2061111111")]);
    let any = || descriptor(&[("to_number", "2061111111")]);
    let r = h.ask(request("edge", vec![marketing(), any()], 0)).await;
    assert_eq!(codes(&r), [RlCode::Ok, RlCode::Ok]);
    let r = h.ask(request("edge", vec![marketing(), any()], 0)).await;
    assert_eq!(codes(&r), [RlCode::OverLimit, RlCode::Ok]);
    let r = h.ask(request("edge", vec![any()], 0)).await;
    assert_eq!(codes(&r), [RlCode::OverLimit]);
    // Another shape (or an unlimited key, or another domain) has no limit.
    let r = h
        .ask(request(
            "edge",
            vec![
                descriptor(&[("message_type", "marketing")]),
                descriptor(&[("internal", "x")]),
                descriptor(&[("to_number", "1"), ("remote_address", "50.0.0.5")]),
            ],
            0,
        ))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok, RlCode::Ok, RlCode::Ok]);
    let r = h
        .ask(request(
            "other",
            vec![descriptor(&[("remote_address", "50.0.0.5")])],
            0,
        ))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok]);

    // The instances carried the descriptor entries as dimensions.
    let calls = h.calls();
    assert!(calls.contains(&(
        "edge-message_type-marketing-to_number.istio-system".to_string(),
        vec![
            ("message_type".to_string(), "marketing".to_string()),
            ("to_number".to_string(), "2061111111".to_string()),
        ],
        1
    )));
}
