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
        let out = snap
            .quota(&b, Some(name), &args(3, false))
            .await
            .expect("decided");
        assert_eq!(out.instances, ["requestcount.istio-system"], "{name}");
        assert_eq!(out.result.granted_amount, 3);
        assert!(out.result.status.is_ok());
    }
    // A quota no rule produces is granted in full.
    let out = snap
        .quota(&b, Some("other.istio-system"), &args(5, false))
        .await
        .expect("decided");
    assert!(out.instances.is_empty());
    assert_eq!(out.result.granted_amount, 5);
}

#[tokio::test]
async fn the_smallest_grant_and_the_first_refusal_win() {
    let snap = snapshot(CONFIG, &RuntimeOptions::default());
    let b = bag(&snap, &[("request.path", Value::from("/admin/x"))]);
    let out = snap
        .quota(&b, None, &args(2, false))
        .await
        .expect("decided");
    assert_eq!(out.instances.len(), 2);
    assert_eq!(out.result.granted_amount, 0);
    assert_eq!(out.result.status.code, Code::ResourceExhausted);
    let path = snap.vocabulary().lookup("request.path").expect("declared");
    assert!(out.referenced.find(path, None).is_some());
}
