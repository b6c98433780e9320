//! The check cache: keyed by exactly what a decision read, honouring validity and use counts,
//! bounded, coalescing identical misses.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use mixer_adapter_api::host::Params;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, Handler, ParamError, Stability,
};
use mixer_config::AdapterRegistry;
use mixer_model::{CheckResult, Instance, Template, Value};
use mixer_runtime::{CacheOptions, RuntimeMetrics, RuntimeOptions, Snapshot};

const CONFIG: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: 7, message: "no bob"}, validDuration: 3s, validUseCount: 3}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: deny-bob, namespace: istio-system}
spec:
  match: (request.headers["x-user"] | "") == "bob"
  actions: [{handler: deny, instances: [nothing]}]
---
kind: rule
metadata: {name: deny-admin, namespace: istio-system}
spec:
  match: request.method == "DELETE"
  actions: [{handler: deny, instances: [nothing]}]
"#;

async fn hit(snap: &Snapshot, attrs: &[(&str, Value)]) -> (bool, bool) {
    let b = bag(snap, attrs);
    let checked = mixer_runtime::check(snap, &b, mixer_runtime::Wants::Reads)
        .await
        .expect("decided");
    (checked.cache_hit, checked.verdict.is_allowed())
}

#[tokio::test(start_paused = true)]
async fn unread_attributes_share_an_entry_and_read_ones_split_it() {
    let snap = snapshot(CONFIG, &RuntimeOptions::default());
    let get = Value::from("GET");
    let amy = map(&[("x-user", "amy")]);
    assert_eq!(
        hit(
            &snap,
            &[
                ("request.headers", amy.clone()),
                ("request.method", get.clone()),
                ("request.path", "/a".into())
            ]
        )
        .await,
        (false, true)
    );
    // request.path was not read: same entry.
    assert_eq!(
        hit(
            &snap,
            &[
                ("request.headers", amy),
                ("request.method", get.clone()),
                ("request.path", "/b".into())
            ]
        )
        .await,
        (true, true)
    );
    // Another header key was not read either.
    let amy_more = map(&[("x-user", "amy"), ("x-trace", "123")]);
    assert_eq!(
        hit(
            &snap,
            &[
                ("request.headers", amy_more),
                ("request.method", get.clone())
            ]
        )
        .await,
        (true, true)
    );
    // The value of a read key splits the cache.
    let bob = map(&[("x-user", "bob")]);
    assert_eq!(
        hit(
            &snap,
            &[
                ("request.headers", bob.clone()),
                ("request.method", get.clone())
            ]
        )
        .await,
        (false, false)
    );
    assert_eq!(
        hit(
            &snap,
            &[("request.headers", bob), ("request.method", get.clone())]
        )
        .await,
        (true, false)
    );
    // A read attribute's value splits it too.
    let amy = map(&[("x-user", "amy")]);
    assert_eq!(
        hit(
            &snap,
            &[
                ("request.headers", amy),
                ("request.method", "DELETE".into())
            ]
        )
        .await,
        (false, false)
    );
    // Absent and present are different keys.
    assert_eq!(
        hit(&snap, &[("request.method", get.clone())]).await,
        (false, true)
    );
    assert_eq!(hit(&snap, &[("request.method", get)]).await, (true, true));
}

#[tokio::test(start_paused = true)]
async fn entries_expire_after_their_valid_duration_and_use_count() {
    let snap = snapshot(CONFIG, &RuntimeOptions::default());
    let bob = [
        ("request.headers", map(&[("x-user", "bob")])),
        ("request.method", Value::from("GET")),
    ];
    assert_eq!(hit(&snap, &bob).await, (false, false));
    assert_eq!(hit(&snap, &bob).await, (true, false));
    tokio::time::advance(Duration::from_secs(4)).await;
    assert_eq!(
        hit(&snap, &bob).await,
        (false, false),
        "expired entry served"
    );
    // validUseCount 3: three uses, then a fresh evaluation.
    assert_eq!(hit(&snap, &bob).await, (true, false));
    assert_eq!(hit(&snap, &bob).await, (true, false));
    assert_eq!(hit(&snap, &bob).await, (true, false));
    assert_eq!(hit(&snap, &bob).await, (false, false), "use count exceeded");
}

#[tokio::test]
async fn fail_open_answers_are_not_cached() {
    let config = r#"
kind: handler
metadata: {name: open, namespace: istio-system}
spec: {compiledAdapter: broken, failPolicy: OPEN}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: r, namespace: istio-system}
spec:
  actions: [{handler: open, instances: [nothing]}]
"#;
    let snap = snapshot(config, &RuntimeOptions::default());
    assert_eq!(hit(&snap, &[]).await, (false, true));
    assert_eq!(hit(&snap, &[]).await, (false, true));
    assert_eq!(snap.cached_verdicts(), 0);
}

/// Options with a cache of at most `entries` verdicts (0: off).
fn at_most(entries: u64) -> RuntimeOptions {
    RuntimeOptions {
        cache: CacheOptions {
            max_entries: entries,
            ..CacheOptions::default()
        },
        ..RuntimeOptions::default()
    }
}

#[tokio::test]
async fn the_cache_is_bounded_and_can_be_turned_off() {
    let snap = snapshot(CONFIG, &at_most(10));
    for i in 0..200 {
        let user = format!("user-{i}");
        hit(
            &snap,
            &[
                ("request.headers", map(&[("x-user", &user)])),
                ("request.method", Value::from("GET")),
            ],
        )
        .await;
    }
    assert!(
        snap.cached_verdicts() <= 10,
        "{} entries",
        snap.cached_verdicts()
    );

    let snap = snapshot(CONFIG, &at_most(0));
    assert_eq!(hit(&snap, &[]).await, (false, true));
    assert_eq!(hit(&snap, &[]).await, (false, true));
}

/// ext_authz and forward-auth answer without the attributes a decision read: with the cache
/// off nothing records them, with it on they still key the cache. The decision is the same.
#[tokio::test]
async fn a_check_answered_without_its_reads_records_them_only_for_the_cache() {
    let attrs = [
        ("request.headers", map(&[("x-user", "bob")])),
        ("request.method", Value::from("GET")),
    ];
    let snap = snapshot(CONFIG, &at_most(0));
    let b = bag(&snap, &attrs);
    let full = mixer_runtime::check(&snap, &b, mixer_runtime::Wants::Reads)
        .await
        .expect("decided")
        .verdict;
    let lean = mixer_runtime::check(&snap, &b, mixer_runtime::Wants::Verdict)
        .await
        .expect("decided")
        .verdict;
    assert!(!full.referenced.is_empty());
    assert!(lean.referenced.is_empty(), "{:?}", lean.referenced);
    assert_eq!(lean.status, full.status);
    assert_eq!(lean.matched_rules, full.matched_rules);
    assert!(!lean.is_allowed());

    let snap = snapshot(CONFIG, &RuntimeOptions::default());
    let b = bag(&snap, &attrs);
    let first = mixer_runtime::check(&snap, &b, mixer_runtime::Wants::Verdict)
        .await
        .expect("decided");
    assert!(!first.cache_hit && !first.verdict.referenced.is_empty());
    // Another user is a read attribute that differs: a miss, not bob's denial.
    let amy = bag(
        &snap,
        &[
            ("request.headers", map(&[("x-user", "amy")])),
            ("request.method", Value::from("GET")),
        ],
    );
    let other = mixer_runtime::check(&snap, &amy, mixer_runtime::Wants::Verdict)
        .await
        .expect("decided");
    assert!(!other.cache_hit && other.verdict.is_allowed());
    assert!(
        mixer_runtime::check(&snap, &b, mixer_runtime::Wants::Verdict)
            .await
            .expect("decided")
            .cache_hit
    );
}

/// A check handler that counts its calls and takes a while.
struct Slow(Arc<AtomicUsize>);

static SLOW: AdapterInfo = AdapterInfo {
    name: "slow",
    description: "counts calls",
    templates: &[Template::CheckNothing],
    cacheable: true,
    stability: Stability::Alpha,
};

impl Adapter for Slow {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &SLOW
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(SlowHandler(self.0.clone())))
    }
}

struct SlowHandler(Arc<AtomicUsize>);

impl Handler for SlowHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for SlowHandler {
    async fn check(&self, _: &Instance) -> Result<CheckResult, AdapterError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(CheckResult::ok(Duration::from_secs(60), 100))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_identical_misses_share_one_evaluation() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(Slow(calls.clone())));
    let text = r#"
kind: handler
metadata: {name: slow, namespace: istio-system}
spec: {compiledAdapter: slow}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: r, namespace: istio-system}
spec:
  match: request.method == "GET"
  actions: [{handler: slow, instances: [nothing]}]
"#;
    let snap = Arc::new(snapshot_in(&registry, text));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let snap = snap.clone();
        tasks.push(tokio::spawn(async move {
            let b = bag(&snap, &[("request.method", Value::from("GET"))]);
            mixer_runtime::check(&snap, &b, mixer_runtime::Wants::Reads)
                .await
                .expect("decided")
                .verdict
                .is_allowed()
        }));
    }
    for t in tasks {
        assert!(t.await.expect("task"));
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "identical misses were not coalesced"
    );
}

/// The one check entry counts and times every check the same way, whether the cache answered
/// it, the handlers did, or neither could.
#[tokio::test]
async fn hits_misses_and_undecided_checks_are_all_counted_and_timed() {
    let metrics = RuntimeMetrics::unregistered();
    let snap = snapshot_metered(CONFIG, &metrics);
    let bob = [("request.headers", map(&[("x-user", "bob")]))];
    assert_eq!(hit(&snap, &bob).await, (false, false), "evaluated, denied");
    assert_eq!(
        hit(&snap, &bob).await,
        (true, false),
        "from the cache, denied"
    );
    assert_eq!(hit(&snap, &[]).await, (false, true), "evaluated, allowed");
    assert_eq!(metrics.check_results.denied.get(), 2);
    assert_eq!(metrics.check_results.allowed.get(), 1);
    assert_eq!(metrics.cache_hits.get(), 1);
    assert_eq!(metrics.check_duration.get_sample_count(), 3);

    // Without a cache, a check its handler cannot decide is counted and timed too.
    let off = RuntimeOptions {
        cache: CacheOptions {
            max_entries: 0,
            ..CacheOptions::default()
        },
        ..RuntimeOptions::default()
    };
    let metrics = RuntimeMetrics::unregistered();
    let failing = build(FAILS_CLOSED, &off, None, &metrics).snapshot;
    let undecided =
        mixer_runtime::check(&failing, &bag(&failing, &[]), mixer_runtime::Wants::Verdict).await;
    assert!(
        matches!(undecided, Err(mixer_runtime::Undecided::Handler { .. })),
        "{undecided:?}"
    );
    assert_eq!(metrics.check_results.error.get(), 1);
    assert_eq!(metrics.check_duration.get_sample_count(), 1);
}

const FAILS_CLOSED: &str = r#"
kind: handler
metadata: {name: closed, namespace: istio-system}
spec: {compiledAdapter: broken}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: to-closed, namespace: istio-system}
spec:
  actions: [{handler: closed, instances: [nothing]}]
"#;
