//! Quota dispatch: which instances answer a quota, grants combined, names matched as Istio
//! proxies send them.

mod common;

use common::*;
use mixer_adapter_api::QuotaArgs;
use mixer_model::{Code, Value};
use mixer_runtime::RuntimeOptions;

const CONFIG: &str = r#"
kind: handler
metadata: {name: grant, namespace: istio-system}
spec: {compiledAdapter: noop}
---
kind: handler
metadata: {name: refuse, namespace: istio-system}
spec: {compiledAdapter: denier, params: {status: {code: 8, message: "no more"}}}
---
kind: instance
metadata: {name: requestcount, namespace: istio-system}
spec:
  compiledTemplate: quota
  params:
    dimensions: {path: 'request.path | "/"'}
---
kind: instance
metadata: {name: blocked, namespace: istio-system}
spec: {compiledTemplate: quota}
---
kind: rule
metadata: {name: count, namespace: istio-system}
spec:
  actions: [{handler: grant, instances: [requestcount]}]
---
kind: rule
metadata: {name: block-admin, namespace: istio-system}
spec:
  match: request.path.startsWith("/admin")
  actions: [{handler: refuse, instances: [blocked]}]
"#;

fn args(amount: i64, best_effort: bool) -> QuotaArgs {
    QuotaArgs {
        amount,
        best_effort,
        deduplication_id: String::new(),
        limit_override: None,
    }
}

#[tokio::test]
async fn quotas_go_to_the_instances_they_name() {
    let snap = snapshot(CONFIG, &RuntimeOptions::default());
    let b = bag(&snap, &[("request.path", Value::from("/shop"))]);
    for name in [
        "requestcount.istio-system",
        "requestcount.quota.istio-system",
        "requestcount.instance.istio-system",
        "requestcount",
    ] {
        let out = allocate(&snap, &b, Some(name), &args(3, false))
            .await
            .expect("decided");
        assert_eq!(
            out.instances.iter().map(|i| i.as_ref()).collect::<Vec<_>>(),
            ["requestcount.instance.istio-system"],
            "{name}"
        );
        assert_eq!(out.result.granted_amount, 3);
        assert!(out.result.status.is_ok());
    }
    // A quota no rule produces is granted in full.
    let out = allocate(&snap, &b, Some("other.istio-system"), &args(5, false))
        .await
        .expect("decided");
    assert!(out.instances.is_empty());
    assert_eq!(out.result.granted_amount, 5);
}

#[tokio::test]
async fn the_smallest_grant_and_the_first_refusal_win() {
    let snap = snapshot(CONFIG, &RuntimeOptions::default());
    let b = bag(&snap, &[("request.path", Value::from("/admin/x"))]);
    let out = allocate(&snap, &b, None, &args(2, false))
        .await
        .expect("decided");
    assert_eq!(out.instances.len(), 2);
    assert_eq!(out.result.granted_amount, 0);
    assert_eq!(out.result.status.code, Code::ResourceExhausted);
    assert!(out.refused);
    // The refusal is prefixed with the handler's name, as Istio 1.4's dispatcher wrote it
    // (`mixer/pkg/runtime/dispatcher/session.go`, `waitForDispatched`).
    let refuse = snap
        .handlers
        .iter()
        .find(|h| h.adapter == "denier")
        .expect("built");
    assert_eq!(
        out.result.status.message,
        format!("{}:no more", refuse.name)
    );
    let path = snap.vocabulary().lookup("request.path").expect("declared");
    assert!(out.referenced.find(path, None).is_some());
}

const TWO_LIMITS: &str = r#"
kind: handler
metadata: {name: limits, namespace: istio-system}
spec:
  compiledAdapter: memquota
  params:
    quotas:
    - {name: per-path, maxAmount: 10, validDuration: 60s}
    - {name: per-user, maxAmount: 3, validDuration: 1s}
---
kind: instance
metadata: {name: per-path, namespace: istio-system}
spec:
  compiledTemplate: quota
  params: {dimensions: {path: request.path}}
---
kind: instance
metadata: {name: per-user, namespace: istio-system}
spec:
  compiledTemplate: quota
  params: {dimensions: {user: 'request.headers["user"]'}}
---
kind: rule
metadata: {name: both, namespace: istio-system}
spec:
  actions: [{handler: limits, instances: [per-path, per-user]}]
"#;

#[tokio::test(start_paused = true)]
async fn the_limit_reported_is_the_most_constraining_one() {
    let snap = snapshot(TWO_LIMITS, &RuntimeOptions::default());
    let req = |user: &str| {
        let headers = mixer_model::StringMap::from_pairs([("user", user)]);
        bag(
            &snap,
            &[
                ("request.path", Value::from("/a")),
                ("request.headers", Value::from(headers)),
            ],
        )
    };
    // per-path has 9 left, per-user 2: per-user says more.
    let out = allocate(&snap, &req("amy"), None, &args(1, false))
        .await
        .expect("decided");
    let limit = out.result.limit.expect("memquota reports its limit");
    assert_eq!((&*limit.name, limit.remaining), ("per-user", 2));
    // Another user: per-path has 8 left, the new user's counter 2; still per-user.
    let out = allocate(&snap, &req("bob"), None, &args(1, false))
        .await
        .expect("decided");
    assert_eq!(out.result.limit.map(|l| l.remaining), Some(2));
    // amy runs out: the refusing quota's limit is the one reported.
    let out = allocate(&snap, &req("amy"), None, &args(3, false))
        .await
        .expect("decided");
    // memquota refuses as Istio's did: OK with nothing granted; the outcome is a refusal.
    assert_eq!(out.result.status.code, Code::Ok);
    assert_eq!(out.result.granted_amount, 0);
    assert!(out.refused);
    let limit = out.result.limit.expect("reported");
    assert_eq!((&*limit.name, limit.max_amount), ("per-user", 3));
}

/// A quota refusal reaches the client (a 429's body, a Mixer v1 status): never with a secret
/// of the refusing handler's params (here a URL password in the denier's message).
#[tokio::test]
async fn a_refusal_carries_no_secret_of_its_handler() {
    let config = CONFIG.replace(
        "message: \"no more\"",
        "message: \"redis://:hunter2@cache:6379\"",
    );
    let snap = snapshot(&config, &RuntimeOptions::default());
    let b = bag(&snap, &[("request.path", Value::from("/admin/x"))]);
    let out = allocate(&snap, &b, None, &args(1, false))
        .await
        .expect("decided");
    assert!(out.refused);
    assert!(
        !out.result.status.message.contains("hunter2"),
        "{}",
        out.result.status.message
    );
    assert!(
        out.result
            .status
            .message
            .ends_with(":redis://:***@cache:6379"),
        "{}",
        out.result.status.message
    );
}

const ONE_PER_MINUTE: &str = r#"
kind: handler
metadata: {name: limits, namespace: istio-system}
spec:
  compiledAdapter: memquota
  params:
    quotas: [{name: requestcount.instance.istio-system, maxAmount: 1, validDuration: 60s}]
---
kind: instance
metadata: {name: requestcount, namespace: istio-system}
spec: {compiledTemplate: quota}
---
kind: rule
metadata: {name: count, namespace: istio-system}
spec:
  actions: [{handler: limits, instances: [requestcount]}]
"#;

/// Quota after check, the runtime's stage for ext_authz and forward-auth: an allowed check is
/// charged one unit, once per request id; over the limit it becomes a refusal saying when
/// units come back.
#[tokio::test(start_paused = true)]
async fn an_allowed_check_is_charged_once_per_request_and_refused_past_the_limit() {
    use mixer_runtime::{QuotaAfterCheck, Wants, check_with_quota};

    let snap = snapshot(ONE_PER_MINUTE, &RuntimeOptions::default());
    let request = |id: &str| bag(&snap, &[("request.id", Value::from(id))]);
    let first = check_with_quota(&snap, &request("a"), Wants::Verdict)
        .await
        .expect("decided");
    // Granted, with the limit it was counted against, for the front ends' rate limit headers.
    let QuotaAfterCheck::Granted { checked, limit } = &first else {
        panic!("the first request is granted: {first:?}");
    };
    assert!(checked.verdict.is_allowed());
    assert_eq!((limit.max_amount, limit.remaining), (1, 0));
    // The proxy retrying the same request is not charged again.
    let retried = check_with_quota(&snap, &request("a"), Wants::Verdict)
        .await
        .expect("decided");
    assert!(
        matches!(&retried, QuotaAfterCheck::Granted { checked, .. } if checked.verdict.is_allowed()),
        "{retried:?}"
    );
    let QuotaAfterCheck::Refused(refusal) = check_with_quota(&snap, &request("b"), Wants::Verdict)
        .await
        .expect("decided")
    else {
        panic!("the second request is over the limit");
    };
    assert_eq!(refusal.verdict.status.code, Code::ResourceExhausted);
    assert_eq!(
        refusal.verdict.status.message,
        "Quota is exhausted for: requestcount.instance.istio-system"
    );
    assert_eq!(refusal.limit, Some(1));
    assert!(
        (1..=60).contains(&refusal.retry_after_secs),
        "{}",
        refusal.retry_after_secs
    );
}

/// One rule with many quota instances (a Mixer v1 config with a quota per limit): a request
/// naming one quota builds only the instances answering it, as Istio's dispatcher did. An
/// instance of another quota that this request cannot build neither fails it nor is read.
#[tokio::test]
async fn only_the_instances_of_the_quota_asked_for_are_built() {
    const MANY: &str = r#"
kind: handler
metadata: {name: grant, namespace: istio-system}
spec: {compiledAdapter: noop}
---
kind: instance
metadata: {name: bypath, namespace: istio-system}
spec:
  compiledTemplate: quota
  params:
    dimensions: {path: 'request.path | "/"'}
---
kind: instance
metadata: {name: byuser, namespace: istio-system}
spec:
  compiledTemplate: quota
  params:
    dimensions: {user: source.user}
---
kind: rule
metadata: {name: count, namespace: istio-system}
spec:
  actions: [{handler: grant, instances: [bypath, byuser]}]
"#;
    let snap = snapshot(MANY, &RuntimeOptions::default());
    let user = snap.vocabulary().lookup("source.user").expect("declared");
    let path = snap.vocabulary().lookup("request.path").expect("declared");
    // No source.user: byuser cannot be built from this request.
    let b = bag(&snap, &[("request.path", Value::from("/shop"))]);
    let out = allocate(&snap, &b, Some("bypath"), &args(2, false))
        .await
        .expect("decided: byuser is not asked for");
    assert_eq!(
        out.instances.iter().map(|i| i.as_ref()).collect::<Vec<_>>(),
        ["bypath.instance.istio-system"]
    );
    assert_eq!(out.result.granted_amount, 2);
    assert!(out.referenced.find(path, None).is_some());
    assert_eq!(out.referenced.find(user, None), None, "byuser was built");
    // Asked for, it fails the request as in Istio.
    assert!(
        allocate(&snap, &b, Some("byuser"), &args(2, false))
            .await
            .is_err()
    );
    // Without a name (Envoy's rate limit service), every instance of the rule is built.
    assert!(allocate(&snap, &b, None, &args(2, false)).await.is_err());
}
