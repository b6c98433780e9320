//! Calls that reach a healthy adapter: check verdicts, quota grants, and report batches
//! with their retries.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mixer_adapter_api::{ErrorKind, Handler, QuotaArgs};
use mixer_model::{Code, FieldValue, Instance, Template, Value};

use crate::adapter::{State, serve};
use crate::fixtures::*;

#[tokio::test]
async fn check_allows_and_denies_with_the_adapters_validity() {
    let state = Arc::new(State::default());
    let (addr, _server) = serve(state.clone(), "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::json!({"list": ["good"]}));
    let check = h.as_check().expect("check");
    let ok = check.check(&listentry("good")).await.expect("answer");
    assert!(ok.status.is_ok());
    assert_eq!(ok.valid_duration, Duration::from_secs(5));
    assert_eq!(ok.valid_use_count, 7);
    let denied = check.check(&listentry("evil")).await.expect("answer");
    assert_eq!(denied.status.code, Code::PermissionDenied);
    assert_eq!(denied.status.message, "evil is not listed");
    // No sessions: every call carries the params as a Struct.
    let configs = state.configs.lock().unwrap().clone();
    assert!(
        configs
            .iter()
            .all(|c| c.type_url == mixer_oop::STRUCT_TYPE_URL)
    );
    assert_eq!(h.metrics().calls("check", "ok"), 2);
    let mut text = String::new();
    h.as_exposition().expect("metrics").render(&mut text);
    assert!(
        text.contains(
            "mixer_oop_calls_total{handler=\"h.istio-system\",call=\"check\",outcome=\"ok\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains("mixer_oop_circuit_state{handler=\"h.istio-system\"} 0"));
}

#[tokio::test]
async fn quota_is_granted_by_the_adapter() {
    let state = Arc::new(State::default());
    let (addr, _server) = serve(state, "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::Value::Null);
    let instance = Instance {
        name: "requestcount.instance.istio-system".into(),
        template: Template::Quota,
        fields: vec![(
            "dimensions",
            FieldValue::Map(vec![("source".into(), Value::string("a"))]),
        )],
    };
    let args = QuotaArgs {
        amount: 5,
        best_effort: true,
        deduplication_id: "q1".into(),
        limit_override: None,
    };
    let r = h
        .as_quota()
        .expect("quota")
        .allocate(&instance, &args)
        .await
        .expect("answer");
    assert_eq!(r.granted_amount, 3);
    assert_eq!(r.valid_duration, Duration::from_secs(1));
    assert!(r.status.is_ok());
}

#[tokio::test]
async fn report_batches_arrive_once_each_with_retries_under_one_dedup_id() {
    let state = Arc::new(State::default());
    state.fail_reports.store(2, Ordering::SeqCst);
    let (addr, _server) = serve(state.clone(), "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::Value::Null);
    let batch: Vec<Instance> = (0..3).map(metric).collect();
    h.as_report()
        .expect("report")
        .report(&batch)
        .await
        .expect("delivered after retries");
    h.as_report()
        .expect("report")
        .report(&[metric(9)])
        .await
        .expect("delivered");
    let seen = state.reports.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        4,
        "two failures, the retry that worked, the next batch"
    );
    assert!(seen[..3].iter().all(|(d, _)| *d == seen[0].0), "{seen:?}");
    assert_ne!(seen[3].0, seen[0].0, "a new batch has a new dedup id");
    let names: Vec<String> = seen[2].1.clone();
    assert_eq!(
        names,
        [
            "m0.instance.istio-system",
            "m1.instance.istio-system",
            "m2.instance.istio-system"
        ]
    );
    assert_eq!(h.metrics().calls("report", "unavailable"), 2);

    // Past the attempts, the error is the adapter's (and retryable).
    state.fail_reports.store(5, Ordering::SeqCst);
    let e = h
        .as_report()
        .unwrap()
        .report(&[metric(1)])
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.retryable);
}
