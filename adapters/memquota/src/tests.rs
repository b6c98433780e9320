use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::host::AnyAdapter;
use mixer_adapter_api::{BuildContext, QuotaArgs, QuotaHandler};
use mixer_model::{Code, FieldValue, Instance, Template, Value};
use serde_json::json;

use crate::{MemQuota, MemQuotaHandler, MemQuotaParams};

fn build(params: serde_json::Value) -> Arc<MemQuotaHandler> {
    let params: MemQuotaParams = mixer_adapter_api::host::decode_params(&params).expect("decodes");
    MemQuota
        .build_handler(
            &params.compile().expect("valid params"),
            &BuildContext {
                handler_name: "h.ns".into(),
            },
        )
        .expect("built")
}

fn inst(user: &str) -> Instance {
    Instance {
        name: "rq.ns".into(),
        template: Template::Quota,
        fields: vec![(
            "dimensions",
            FieldValue::Map(vec![("user".into(), Value::from(user))]),
        )],
    }
}

fn args(amount: i64) -> QuotaArgs {
    QuotaArgs {
        amount,
        best_effort: false,
        deduplication_id: String::new(),
        limit_override: None,
    }
}

#[test]
fn validation_collects_errors() {
    let errs = MemQuota
        .compile(
            &json!({"quotas": [{"name": "a"}], "maxKeys": 0, "minDeduplicationDuration": "0s"}),
        )
        .expect_err("invalid");
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "quotas[0].maxAmount",
            "quotas[0].validDuration",
            "minDeduplicationDuration",
            "maxKeys"
        ]
    );
    let errs = MemQuota
        .compile(&json!({"quota": []}))
        .expect_err("unknown field");
    assert_eq!(errs[0].path, "quota");
    MemQuota
        .compile(&json!({"quotas": [{"name": "a", "maxAmount": 1, "validDuration": "1s"}]}))
        .expect("valid");
}

#[tokio::test(start_paused = true)]
async fn rolling_is_the_default_and_idle_counters_go() {
    let h = build(json!({"quotas": [{"name": "rq", "maxAmount": 2, "validDuration": "1s"}]}));
    assert_eq!(
        h.allocate(&inst("a"), &args(2))
            .await
            .unwrap()
            .granted_amount,
        2
    );
    tokio::time::advance(Duration::from_millis(500)).await;
    // Refused as Istio 1.4's memquota refuses (`memquota.go`, `alloc`): status OK, 0 granted,
    // valid for 0.
    let refused = h.allocate(&inst("a"), &args(1)).await.unwrap();
    assert_eq!(
        (
            refused.status.code,
            refused.granted_amount,
            refused.valid_duration
        ),
        (Code::Ok, 0, Duration::ZERO)
    );
    assert_eq!(h.tracked_keys(), 1);
    tokio::time::advance(Duration::from_millis(600)).await;
    h.sweep();
    assert_eq!(h.tracked_keys(), 0, "back to fresh after the window");
    assert_eq!(
        h.allocate(&inst("a"), &args(2))
            .await
            .unwrap()
            .granted_amount,
        2
    );
    let mut text = String::new();
    mixer_adapter_api::Exposition::render(&*h, &mut text);
    assert!(
        text.contains("mixer_memquota_denials_total{handler=\"h.ns\",quota=\"rq\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("mixer_memquota_evictions_total{handler=\"h.ns\",reason=\"idle\"} 1"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn key_cap_evicts_least_recently_used() {
    let h = build(
        json!({"maxKeys": 4, "quotas": [{"name": "rq", "maxAmount": 1, "validDuration": "1h",
        "rateLimitAlgorithm": "FIXED_WINDOW"}]}),
    );
    for i in 0..100 {
        h.allocate(&inst(&format!("u{i}")), &args(1)).await.unwrap();
        assert!(h.tracked_keys() <= 4);
    }
    // Nonpositive amounts are answered OK with nothing granted and charge nothing.
    let r = h.allocate(&inst("u99"), &args(0)).await.unwrap();
    assert!(r.status.is_ok());
    assert_eq!(r.granted_amount, 0);
}

#[tokio::test(start_paused = true)]
async fn peek_reads_a_counter_without_charging_it() {
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW", "TOKEN_BUCKET"] {
        let h = build(
            json!({"quotas": [{"name": "rq", "maxAmount": 5, "validDuration": "60s",
            "rateLimitAlgorithm": algorithm}]}),
        );
        assert!(QuotaHandler::can_peek(&*h));
        // A counter never charged is full, and reading it tracks nothing.
        let fresh = h.peek(&inst("a")).await.expect("peek");
        assert_eq!((fresh.max_amount, fresh.remaining), (5, 5), "{algorithm}");
        assert_eq!(h.tracked_keys(), 0, "{algorithm}");
        h.allocate(&inst("a"), &args(2)).await.expect("allocate");
        for _ in 0..3 {
            let seen = h.peek(&inst("a")).await.expect("peek");
            assert_eq!(seen.remaining, 3, "{algorithm}");
            assert_eq!(seen.window, Duration::from_secs(60));
            assert!(
                seen.reset_after > Duration::ZERO && seen.reset_after <= Duration::from_secs(60)
            );
        }
        // Another user's counter is another counter.
        assert_eq!(h.peek(&inst("b")).await.expect("peek").remaining, 5);
        // An instance no quota carries is an error, not a full counter.
        let mut unknown = inst("a");
        unknown.name = "other.ns".into();
        assert!(h.peek(&unknown).await.is_err());
    }
}

// The dispatcher asks `allocate_now` first: memquota answers there, each call as
// `allocate_many` would, counting on the same counters.
#[tokio::test(start_paused = true)]
async fn answers_at_once_as_it_answers_when_awaited() {
    let h = build(json!({"quotas": [{"name": "rq", "maxAmount": 3, "validDuration": "1s"}]}));
    let (a, b) = (inst("a"), inst("b"));
    let (two, one) = (args(2), args(1));
    let now = h
        .allocate_now(&[(&a, &two), (&b, &one), (&a, &two)])
        .expect("memory answers at once");
    let granted: Vec<i64> = now
        .iter()
        .map(|r| r.as_ref().expect("allocated").granted_amount)
        .collect();
    // `a` had 3: 2 granted, then 2 of the 1 left refused (0 granted).
    assert_eq!(granted, [2, 1, 0]);
    let awaited = h.allocate_many(&[(&a, &one), (&b, &two)]).await;
    let granted: Vec<i64> = awaited
        .iter()
        .map(|r| r.as_ref().expect("allocated").granted_amount)
        .collect();
    assert_eq!(granted, [1, 2], "the same counters, awaited");
    let left = h.allocate_now(&[(&a, &one)]).expect("at once");
    assert_eq!(left[0].as_ref().expect("allocated").granted_amount, 0);
}
