//! The preprocess phase: attribute generators run before the check, quota and report rules,
//! their bindings override what the proxy sent, the check cache keys on their inputs, and
//! their fail policy, deadline and denials apply. The generator is the test adapter `pods`
//! (see `common`): `kubernetes://<workload>-<rest>.<ns>` names a pod's workload.

mod common;

use std::time::Duration;

use common::*;
use mixer_adapter_api::QuotaArgs;
use mixer_model::{Code, Value};
use mixer_runtime::{RuntimeOptions, Snapshot, Undecided, Wants};

/// A generator bound to `source.workload.name` and `source.labels`, and a check rule that
/// lets only the reviews workload through; `policy` adds to the generator's handler spec (no
/// fail policy: the variety's default, closed).
fn config(policy: &str) -> String {
    format!(
        r#"
kind: handler
metadata: {{name: pods, namespace: istio-system}}
spec: {{compiledAdapter: pods{policy}}}
---
kind: instance
metadata: {{name: attributes, namespace: istio-system}}
spec:
  compiledTemplate: kubernetes
  params:
    source_uid: source.uid | ""
  attributeBindings:
    source.workload.name: $out.source_workload_name | "unknown"
    source.labels: $out.source_labels | emptyStringMap()
---
kind: rule
metadata: {{name: kubeattrgenrulerule, namespace: istio-system}}
spec:
  actions: [{{handler: pods, instances: [attributes]}}]
---
kind: handler
metadata: {{name: deny, namespace: istio-system}}
spec: {{compiledAdapter: denier, params: {{status: {{code: 7, message: "not reviews"}}}}}}
---
kind: instance
metadata: {{name: nothing, namespace: istio-system}}
spec: {{compiledTemplate: checknothing}}
---
kind: rule
metadata: {{name: only-reviews, namespace: istio-system}}
spec:
  match: source.workload.name != "reviews"
  actions: [{{handler: deny, instances: [nothing]}}]
---
kind: handler
metadata: {{name: workloads, namespace: istio-system}}
spec: {{compiledAdapter: workloads}}
---
kind: instance
metadata: {{name: requests, namespace: istio-system}}
spec:
  compiledTemplate: metric
  params:
    value: "1"
    dimensions: {{workload: source.workload.name | "none"}}
---
kind: rule
metadata: {{name: count, namespace: istio-system}}
spec:
  actions: [{{handler: workloads, instances: [requests]}}]
---
kind: handler
metadata: {{name: limits, namespace: istio-system}}
spec:
  compiledAdapter: memquota
  params:
    quotas:
    - {{name: per-app, maxAmount: 1, validDuration: 60s}}
---
kind: instance
metadata: {{name: per-app, namespace: istio-system}}
spec:
  compiledTemplate: quota
  params: {{dimensions: {{app: 'source.labels["app"] | "none"'}}}}
---
kind: rule
metadata: {{name: limit-reviews, namespace: istio-system}}
spec:
  match: source.workload.name == "reviews"
  actions: [{{handler: limits, instances: [per-app]}}]
"#
    )
}

fn closed() -> Snapshot {
    snapshot(&config(""), &RuntimeOptions::default())
}

fn uid(snap: &Snapshot, uid: &str) -> mixer_model::AttributeBag {
    bag(snap, &[("source.uid", Value::from(uid))])
}

#[tokio::test]
async fn a_check_rule_decides_on_a_derived_attribute_the_proxy_cannot_override() {
    let snap = closed();
    let allowed = decide(&snap, &uid(&snap, "kubernetes://reviews-v1-a1.default"))
        .await
        .expect("decided");
    assert!(allowed.is_allowed(), "{allowed:?}");
    // The proxy claims reviews; the generator says ratings, and is believed.
    let b = bag(
        &snap,
        &[
            (
                "source.uid",
                Value::from("kubernetes://ratings-v1-a1.default"),
            ),
            ("source.workload.name", Value::from("reviews")),
        ],
    );
    let denied = decide(&snap, &b).await.expect("decided");
    assert_eq!(denied.status.code, Code::PermissionDenied);
    assert_eq!(
        denied.denied_by.as_deref(),
        Some("deny.handler.istio-system")
    );
    // Referenced: the input, never the derived attribute (Mixer v1 answers these).
    let vocabulary = snap.vocabulary();
    let source_uid = vocabulary.lookup("source.uid").expect("declared");
    let workload = vocabulary.lookup("source.workload.name").expect("declared");
    assert!(denied.referenced.find(source_uid, None).is_some());
    assert!(denied.referenced.iter().all(|r| r.attr != workload));
}

#[tokio::test]
async fn the_cache_keys_on_the_generators_inputs() {
    let snap = closed();
    let first = "kubernetes://reviews-v1-cache.default";
    let b = uid(&snap, first);
    let checked = mixer_runtime::check(&snap, &b, Wants::Reads)
        .await
        .expect("decided");
    assert!(!checked.cache_hit && checked.verdict.is_allowed());
    // Another request with the same input (and another derived-attribute claim) hits.
    let again = bag(
        &snap,
        &[
            ("source.uid", Value::from(first)),
            ("source.workload.name", Value::from("ratings")),
        ],
    );
    let checked = mixer_runtime::check(&snap, &again, Wants::Verdict)
        .await
        .expect("decided");
    assert!(checked.cache_hit && checked.verdict.is_allowed());
    assert_eq!(generated(first), 1);
    // Another input misses, and is decided on its own derived value.
    let other = "kubernetes://ratings-v1-cache.default";
    let checked = mixer_runtime::check(&snap, &uid(&snap, other), Wants::Reads)
        .await
        .expect("decided");
    assert!(!checked.cache_hit && !checked.verdict.is_allowed());
    assert_eq!(generated(other), 1);
}

#[tokio::test]
async fn a_verdict_lives_no_longer_than_the_generators_outputs() {
    let snap = closed();
    let verdict = decide(&snap, &uid(&snap, "kubernetes://reviews-short-a.default"))
        .await
        .expect("decided");
    assert!(verdict.is_allowed());
    assert_eq!(verdict.valid_duration, Duration::from_secs(5));
    let verdict = decide(&snap, &uid(&snap, "kubernetes://reviews-long-a.default"))
        .await
        .expect("decided");
    assert_eq!(
        verdict.valid_duration,
        mixer_runtime::DEFAULT_VALID_DURATION
    );
}

#[tokio::test]
async fn a_generators_denial_is_the_verdict() {
    let snap = closed();
    let verdict = decide(&snap, &uid(&snap, "bad-token"))
        .await
        .expect("decided");
    assert_eq!(verdict.status.code, Code::Unauthenticated);
    assert_eq!(verdict.status.message, "invalid token");
    assert_eq!(
        verdict.denied_by.as_deref(),
        Some("pods.handler.istio-system")
    );
    let header = &verdict.response_header_ops[0];
    assert_eq!(
        (header.name.as_str(), header.value.as_str()),
        ("www-authenticate", "Bearer error=\"invalid_token\"")
    );
}

#[tokio::test]
async fn a_failing_generator_fails_closed_by_default_and_open_to_the_defaults() {
    let snap = closed();
    match decide(&snap, &uid(&snap, "error")).await {
        Err(Undecided::Handler { handler, .. }) => {
            assert_eq!(&*handler, "pods.handler.istio-system")
        }
        other => panic!("undecided expected, got {other:?}"),
    }
    let open = snapshot(&config(", failPolicy: OPEN"), &RuntimeOptions::default());
    // Open: the bindings' defaults ("unknown"), which the check rule denies; not cached.
    let checked = mixer_runtime::check(&open, &uid(&open, "error"), Wants::Reads)
        .await
        .expect("decided");
    assert_eq!(checked.verdict.status.code, Code::PermissionDenied);
    let checked = mixer_runtime::check(&open, &uid(&open, "error"), Wants::Reads)
        .await
        .expect("decided");
    assert!(!checked.cache_hit);
}

#[tokio::test(start_paused = true)]
async fn a_generator_past_its_deadline_fails_as_its_policy_says() {
    let options = RuntimeOptions {
        handler_timeout: Duration::from_millis(50),
        ..RuntimeOptions::default()
    };
    let snap = snapshot(&config(""), &options);
    assert!(matches!(
        decide(&snap, &uid(&snap, "stall")).await,
        Err(Undecided::Handler { .. })
    ));
    let open = snapshot(&config(", failPolicy: OPEN"), &options);
    let verdict = decide(&open, &uid(&open, "stall")).await.expect("decided");
    assert_eq!(verdict.status.code, Code::PermissionDenied);
}

#[tokio::test]
async fn a_report_rule_reads_derived_attributes_and_a_failing_generator_keeps_the_record() {
    let snap = closed();
    for source in ["kubernetes://productpage-v1-rep.default", "error"] {
        let outcome = mixer_runtime::report(&snap, &uid(&snap, source)).await;
        assert_eq!(outcome.queued, 1, "{source}");
    }
    snap.close_report_queues(TEN_S).await;
    let reported = REPORTED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        reported.contains(&"productpage".to_string()),
        "{reported:?}"
    );
    // The generator failed (closed): the record still goes, with the binding's default.
    assert!(reported.contains(&"unknown".to_string()), "{reported:?}");
}

#[tokio::test]
async fn a_quota_rule_matches_on_a_derived_attribute() {
    let snap = closed();
    let args = QuotaArgs {
        amount: 1,
        best_effort: false,
        deduplication_id: String::new(),
        limit_override: None,
    };
    let reviews = uid(&snap, "kubernetes://reviews-v1-quota.default");
    let first = allocate(&snap, &reviews, None, &args)
        .await
        .expect("decided");
    assert!(!first.refused && first.instances.len() == 1, "{first:?}");
    let second = allocate(&snap, &reviews, None, &args)
        .await
        .expect("decided");
    assert!(second.refused, "{second:?}");
    // Another workload: the rule does not match, whatever the proxy claims.
    let claims = bag(
        &snap,
        &[
            (
                "source.uid",
                Value::from("kubernetes://ratings-v1-quota.default"),
            ),
            ("source.workload.name", Value::from("reviews")),
        ],
    );
    let other = allocate(&snap, &claims, None, &args)
        .await
        .expect("decided");
    assert!(!other.refused && other.instances.is_empty(), "{other:?}");
    let source_uid = snap.vocabulary().lookup("source.uid").expect("declared");
    assert!(other.referenced.find(source_uid, None).is_some());
    // A generator failing closed fails the allocation.
    assert!(matches!(
        allocate(&snap, &uid(&snap, "error"), None, &args).await,
        Err(Undecided::Handler { .. })
    ));
}

#[tokio::test]
async fn a_check_and_its_quota_share_one_call_of_each_generator() {
    let snap = closed();
    let source = "kubernetes://reviews-v1-once.default";
    let b = uid(&snap, source);
    let first = mixer_runtime::check_with_quota(&snap, &b, Wants::Verdict)
        .await
        .expect("decided");
    assert!(
        matches!(&first, mixer_runtime::QuotaAfterCheck::Granted { checked, .. } if checked.verdict.is_allowed()),
        "{first:?}"
    );
    assert_eq!(generated(source), 1);
    // The check is a cache hit now, but the quota rule still needs the derived workload: one
    // call more, and its one unit is spent.
    let second = mixer_runtime::check_with_quota(&snap, &b, Wants::Verdict)
        .await
        .expect("decided");
    assert!(
        matches!(&second, mixer_runtime::QuotaAfterCheck::Refused(r) if r.cache_hit),
        "{second:?}"
    );
    assert_eq!(generated(source), 2);
    // Mixer v1's path: prepared once, then the check and its quotas.
    let other = "kubernetes://reviews-v2-once.default";
    let b = uid(&snap, other);
    let prepared = mixer_runtime::Prepared::new(&snap, &b).await;
    let checked = mixer_runtime::check_prepared(&snap, &b, Wants::Reads, &prepared)
        .await
        .expect("decided");
    assert!(checked.verdict.is_allowed() && !checked.cache_hit);
    let args = QuotaArgs {
        amount: 1,
        best_effort: false,
        deduplication_id: String::new(),
        limit_override: None,
    };
    let ask = mixer_runtime::QuotaAsk {
        bag: &b,
        quota: None,
        args: &args,
    };
    let outcome = mixer_runtime::quota::ask_prepared(&snap, &[ask], &prepared)
        .await
        .pop()
        .expect("one answer")
        .expect("decided");
    assert_eq!(outcome.instances.len(), 1, "{outcome:?}");
    assert_eq!(generated(other), 1);
}

#[tokio::test]
async fn generator_calls_are_counted_by_handler_and_result() {
    let metrics = mixer_runtime::RuntimeMetrics::unregistered();
    let snap = snapshot_metered(&config(""), &metrics);
    for source in [
        "kubernetes://reviews-v1-count.default",
        "bad-token",
        "error",
    ] {
        let _ = decide(&snap, &uid(&snap, source)).await;
    }
    let calls = |result: &str| {
        metrics
            .handler_calls
            .with_label_values(&["pods.handler.istio-system", "attributes", result])
            .get()
    };
    assert_eq!(
        (calls("ok"), calls("denied"), calls("unavailable")),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn a_binding_with_no_value_leaves_the_attribute_absent_not_the_proxys() {
    let yaml = r#"
kind: handler
metadata: {name: pods, namespace: istio-system}
spec: {compiledAdapter: pods}
---
kind: instance
metadata: {name: attributes, namespace: istio-system}
spec:
  compiledTemplate: kubernetes
  params: {source_uid: source.uid | ""}
  attributeBindings: {source.workload.name: $out.source_workload_name}
---
kind: rule
metadata: {name: gen, namespace: istio-system}
spec:
  actions: [{handler: pods, instances: [attributes]}]
---
kind: handler
metadata: {name: deny, namespace: istio-system}
spec: {compiledAdapter: denier, params: {status: {code: 7, message: "not reviews"}}}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: only-reviews, namespace: istio-system}
spec:
  match: (source.workload.name | "none") != "reviews"
  actions: [{handler: deny, instances: [nothing]}]
"#;
    let snap = snapshot(yaml, &RuntimeOptions::default());
    // The generator knows no pod by this uid (no outputs); the proxy claims reviews.
    let b = bag(
        &snap,
        &[
            ("source.uid", Value::from("unknown-pod")),
            ("source.workload.name", Value::from("reviews")),
        ],
    );
    let verdict = decide(&snap, &b).await.expect("decided");
    assert_eq!(verdict.status.code, Code::PermissionDenied, "{verdict:?}");
}
