//! Dry-run rules (annotation `istio.io/dry-run: "true"`): evaluated and their handlers asked,
//! their would-be verdicts kept on the verdict and counted, never the answer.

mod common;

use common::*;
use mixer_adapter_api::QuotaArgs;
use mixer_model::{Code, Value, WouldBe};
use mixer_runtime::RuntimeMetrics;

const CONFIG: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: 7, message: "no bob"}}
---
kind: handler
metadata: {name: broken, namespace: istio-system}
spec: {compiledAdapter: broken}
---
kind: handler
metadata: {name: counter, namespace: istio-system}
spec:
  compiledAdapter: memquota
  params:
    quotas: [{name: audited.instance.istio-system, maxAmount: 1, validDuration: 60s}]
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: instance
metadata: {name: audited, namespace: istio-system}
spec: {compiledTemplate: quota}
---
kind: rule
metadata:
  name: audit-bob
  namespace: istio-system
  annotations: {istio.io/dry-run: "true"}
spec:
  match: (request.headers["x-user"] | "") == "bob"
  actions: [{handler: deny, instances: [nothing]}]
  responseHeaderOperations: [{name: x-audited, values: ['"yes"']}]
---
kind: rule
metadata:
  name: audit-broken
  namespace: istio-system
  annotations: {istio.io/dry-run: "true"}
spec:
  match: request.method == "DELETE"
  actions: [{handler: broken, instances: [nothing]}]
---
kind: rule
metadata:
  name: audit-strict
  namespace: istio-system
  annotations: {istio.io/dry-run: "true"}
spec:
  match: request.headers["x-tenant"] == "a"
  matchErrorPolicy: DENY
  actions: [{handler: deny, instances: [nothing]}]
---
kind: rule
metadata:
  name: audit-quota
  namespace: istio-system
  annotations: {istio.io/dry-run: "true"}
spec:
  actions: [{handler: counter, instances: [audited]}]
"#;

fn dry_run_total(metrics: &RuntimeMetrics, rule: &str, verdict: &str) -> u64 {
    metrics
        .rule_dry_run
        .with_label_values(&[rule, verdict])
        .get()
}

#[tokio::test]
async fn a_dry_run_denial_is_recorded_and_counted_never_answered() {
    let metrics = RuntimeMetrics::unregistered();
    let snap = snapshot_metered(CONFIG, &metrics);
    let bob = bag(
        &snap,
        &[
            (
                "request.headers",
                map(&[("x-user", "bob"), ("x-tenant", "b")]),
            ),
            ("request.method", Value::from("GET")),
        ],
    );
    let v = decide(&snap, &bob).await.expect("decided");
    assert!(v.is_allowed(), "{v:?}");
    assert!(v.matched_rules.is_empty(), "{:?}", v.matched_rules);
    // Its header operations would change the answer: not applied.
    assert!(v.response_header_ops.is_empty());
    assert_eq!(v.dry_run.len(), 1, "{:?}", v.dry_run);
    assert_eq!(&*v.dry_run[0].rule, "audit-bob.rule.istio-system");
    assert_eq!(v.dry_run[0].would_be, WouldBe::Deny);
    assert_eq!(v.dry_run[0].status.code, Code::PermissionDenied);
    assert_eq!(
        v.dry_run[0].status.message,
        "deny.handler.istio-system:no bob"
    );
    // What it read keys the cache: the verdict served to bob again carries it, and the
    // counter counts the decision served from the cache too.
    let again = mixer_runtime::check(&snap, &bob, mixer_runtime::Wants::Verdict)
        .await
        .expect("decided");
    assert!(again.cache_hit);
    assert_eq!(again.verdict.dry_run, v.dry_run);
    assert_eq!(
        dry_run_total(&metrics, "audit-bob.rule.istio-system", "deny"),
        2
    );
    let amy = bag(
        &snap,
        &[
            (
                "request.headers",
                map(&[("x-user", "amy"), ("x-tenant", "b")]),
            ),
            ("request.method", Value::from("GET")),
        ],
    );
    let v = decide(&snap, &amy).await.expect("decided");
    assert!(v.is_allowed() && v.dry_run.is_empty(), "{v:?}");
}

#[tokio::test]
async fn failures_of_a_dry_run_rule_are_its_own() {
    let metrics = RuntimeMetrics::unregistered();
    let snap = snapshot_metered(CONFIG, &metrics);
    // The broken handler fails closed, and the strict rule's match fails under DENY: both
    // would decide the request if enforced, neither does.
    let b = bag(&snap, &[("request.method", Value::from("DELETE"))]);
    let v = decide(&snap, &b).await.expect("decided, not undecided");
    assert!(v.is_allowed(), "{v:?}");
    let got: Vec<(&str, WouldBe)> = v
        .dry_run
        .iter()
        .map(|d| (d.rule.as_ref(), d.would_be))
        .collect();
    assert_eq!(
        got,
        [
            ("audit-broken.rule.istio-system", WouldBe::Error),
            ("audit-strict.rule.istio-system", WouldBe::Deny),
        ]
    );
    assert!(
        v.dry_run[1]
            .status
            .message
            .starts_with("rule audit-strict.rule.istio-system could not be evaluated: "),
        "{:?}",
        v.dry_run[1].status
    );
    assert_eq!(
        dry_run_total(&metrics, "audit-broken.rule.istio-system", "error"),
        1
    );
}

#[tokio::test]
async fn a_dry_run_quota_is_charged_and_never_refuses() {
    let metrics = RuntimeMetrics::unregistered();
    let snap = snapshot_metered(CONFIG, &metrics);
    let b = bag(&snap, &[]);
    let args = QuotaArgs {
        amount: 1,
        best_effort: false,
        deduplication_id: String::new(),
        limit_override: None,
    };
    let first = allocate(&snap, &b, None, &args).await.expect("allocated");
    assert!(!first.refused);
    assert_eq!(first.dry_run[0].would_be, WouldBe::Allow);
    // Over its limit of 1: the rule would refuse, the request is granted whole.
    let second = allocate(&snap, &b, None, &args).await.expect("allocated");
    assert!(!second.refused, "{second:?}");
    assert_eq!(second.result.granted_amount, 1);
    assert!(second.instances.is_empty());
    assert_eq!(second.dry_run.len(), 1);
    assert_eq!(&*second.dry_run[0].rule, "audit-quota.rule.istio-system");
    assert_eq!(second.dry_run[0].would_be, WouldBe::Deny);
    assert_eq!(second.dry_run[0].status.code, Code::ResourceExhausted);
    assert_eq!(
        dry_run_total(&metrics, "audit-quota.rule.istio-system", "allow"),
        1
    );
    assert_eq!(
        dry_run_total(&metrics, "audit-quota.rule.istio-system", "deny"),
        1
    );
    // Charged after a check (forward-auth, ext_authz): allowed, with the would-be refusal
    // on its verdict.
    let checked = mixer_runtime::check_with_quota(&snap, &b, mixer_runtime::Wants::Verdict)
        .await
        .expect("decided");
    let mixer_runtime::QuotaAfterCheck::Checked(checked) = checked else {
        panic!("a dry-run quota refused: {checked:?}");
    };
    assert!(checked.verdict.is_allowed());
    let quota_runs: Vec<WouldBe> = checked
        .verdict
        .dry_run
        .iter()
        .filter(|d| &*d.rule == "audit-quota.rule.istio-system")
        .map(|d| d.would_be)
        .collect();
    assert_eq!(quota_runs, [WouldBe::Deny]);
}
