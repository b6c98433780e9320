//! The behaviours every quota adapter must have, each a body that `behaviour_suite!` runs
//! once per backend.

use std::time::Duration;

use mixer_adapter_api::{ErrorKind, LimitOverride, QuotaArgs};
use serde_json::json;
use tokio::time::sleep;

use crate::backends::Backend;
use crate::support::*;

pub async fn fixed_window_allows_max_then_resets(b: &dyn Backend) {
    let h = b.build(json!({"quotas": [quota("rq", 3, "1s", "FIXED_WINDOW")]}));
    let first = alloc(&h, &user("a"), 1).await;
    granted(&first, 1);
    assert!(
        first.valid_duration <= Duration::from_secs(1)
            && first.valid_duration > Duration::from_millis(800),
        "valid until the window ends: {first:?}"
    );
    granted(&alloc(&h, &user("a"), 1).await, 1);
    granted(&alloc(&h, &user("a"), 1).await, 1);
    let no = alloc(&h, &user("a"), 1).await;
    denied(b, &no);
    let wait = no.limit.as_ref().map(|l| l.retry_after);
    assert!(
        wait.is_some_and(|w| w <= Duration::from_secs(1) && w > Duration::from_millis(800)),
        "retry when the window ends: {no:?}"
    );
    sleep(Duration::from_millis(1100)).await;
    granted(&alloc(&h, &user("a"), 1).await, 1);
}

pub async fn rolling_window_counts_a_sliding_interval(b: &dyn Backend) {
    let mut q = quota("rq", 5, "1s", "ROLLING_WINDOW");
    q["bucketDuration"] = json!("200ms");
    let h = b.build(json!({"quotas": [q]}));
    granted(&alloc(&h, &user("a"), 3).await, 3);
    sleep(Duration::from_millis(600)).await;
    granted(&alloc(&h, &user("a"), 2).await, 2);
    denied(b, &alloc(&h, &user("a"), 1).await);
    // The first 3 have left the window, the last 2 have not: a fixed window would allow 5.
    sleep(Duration::from_millis(450)).await;
    granted(&alloc(&h, &user("a"), 3).await, 3);
    denied(b, &alloc(&h, &user("a"), 1).await);
}

pub async fn token_bucket_bursts_then_refills(b: &dyn Backend) {
    let h = b.build(json!({"quotas": [quota("rq", 10, "1s", "TOKEN_BUCKET")]}));
    granted(&alloc(&h, &user("a"), 10).await, 10);
    let no = alloc(&h, &user("a"), 1).await;
    denied(b, &no);
    let wait = no.limit.as_ref().map(|l| l.retry_after);
    assert!(
        wait.is_some_and(|w| w > Duration::ZERO && w <= Duration::from_millis(100)),
        "retry when one token is back: {no:?}"
    );
    // 10 per second: 300 ms bring 3 tokens.
    sleep(Duration::from_millis(300)).await;
    granted(&alloc(&h, &user("a"), 3).await, 3);
    denied(b, &alloc(&h, &user("a"), 1).await);
    sleep(Duration::from_millis(1200)).await;
    granted(&best(&h, &user("a"), 50).await, 10);
    denied(b, &best(&h, &user("a"), 5).await);
}

pub async fn overrides_select_by_dimensions(b: &dyn Backend) {
    let h = b.build(json!({"quotas": [
        {"name": "rq", "maxAmount": 2, "validDuration": "10s", "rateLimitAlgorithm": "FIXED_WINDOW",
         "overrides": [
            {"dimensions": {"user": "vip"}, "maxAmount": 5},
            {"dimensions": {"user": "blocked"}, "maxAmount": 0},
            {"dimensions": {"user": "joe", "path": "/a"}, "maxAmount": 3},
         ]},
        quota("other.quota.istio-system", 1, "10s", "FIXED_WINDOW"),
    ]}));
    granted(&alloc(&h, &user("vip"), 5).await, 5);
    denied(b, &alloc(&h, &user("vip"), 1).await);
    denied(b, &alloc(&h, &user("blocked"), 1).await);
    let joe_a = inst("rq.istio-system", &[("user", "joe"), ("path", "/a")]);
    let joe_b = inst("rq.istio-system", &[("user", "joe"), ("path", "/b")]);
    granted(&alloc(&h, &joe_a, 3).await, 3);
    denied(b, &alloc(&h, &joe_a, 1).await);
    granted(&alloc(&h, &joe_b, 2).await, 2);
    denied(b, &alloc(&h, &joe_b, 1).await);
    granted(&alloc(&h, &inst("rq.default", &[]), 2).await, 2);
    // Istio's `name.quota.namespace` config name matches the instance `name.namespace`.
    granted(&alloc(&h, &inst("other.istio-system", &[]), 1).await, 1);
    denied(b, &alloc(&h, &inst("other.istio-system", &[]), 1).await);
    let err = try_alloc(&h, &inst("unknown.istio-system", &[]), 1, false, "")
        .await
        .expect_err("no such quota");
    assert_eq!(err.kind, ErrorKind::InvalidInstance);
    assert!(!err.retryable);
}

pub async fn best_effort_grants_what_is_left(b: &dyn Backend) {
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW", "TOKEN_BUCKET"] {
        let h = b.build(json!({"quotas": [quota("rq", 5, "10s", algorithm)]}));
        granted(&alloc(&h, &user("a"), 3).await, 3);
        denied(b, &alloc(&h, &user("a"), 3).await);
        granted(&best(&h, &user("a"), 3).await, 2);
        denied(b, &best(&h, &user("a"), 1).await);
    }
}

pub async fn amounts_above_one(b: &dyn Backend) {
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW", "TOKEN_BUCKET"] {
        let h = b.build(json!({"quotas": [quota("rq", 10, "10s", algorithm)]}));
        denied(b, &alloc(&h, &user("a"), 11).await);
        granted(&alloc(&h, &user("a"), 4).await, 4);
        granted(&alloc(&h, &user("a"), 4).await, 4);
        denied(b, &alloc(&h, &user("a"), 4).await);
        granted(&alloc(&h, &user("a"), 2).await, 2);
        denied(b, &alloc(&h, &user("a"), 1).await);
        let zero = alloc(&h, &user("a"), 0).await;
        assert!(zero.status.is_ok() && zero.granted_amount == 0, "{zero:?}");
    }
}

pub async fn deduplication_ids(b: &dyn Backend) {
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW", "TOKEN_BUCKET"] {
        let h = b.build(json!({"minDeduplicationDuration": "10s",
            "quotas": [quota("rq", 2, "10s", algorithm)]}));
        let a = user("a");
        granted(&try_alloc(&h, &a, 1, false, "id-1").await.unwrap(), 1);
        let again = try_alloc(&h, &a, 1, false, "id-1").await.unwrap();
        granted(&again, 1);
        granted(&try_alloc(&h, &a, 1, false, "id-2").await.unwrap(), 1);
        denied(b, &try_alloc(&h, &a, 1, false, "id-3").await.unwrap());
        // The retry of id-1 is answered as the first time, and id-3's denial stays a denial.
        granted(&try_alloc(&h, &a, 1, false, "id-1").await.unwrap(), 1);
        denied(b, &try_alloc(&h, &a, 1, false, "id-3").await.unwrap());
        // Ids belong to a counter: the same id on another key is charged there.
        granted(
            &try_alloc(&h, &user("b"), 1, false, "id-1").await.unwrap(),
            1,
        );
        let text = exposition(&h);
        let line = format!(
            "{}_deduplicated_total{{handler=\"quotahandler.istio-system\",quota=\"rq\"}} 3",
            b.prefix()
        );
        assert!(text.contains(&line), "{algorithm}: {text}");
    }
}

pub async fn shadow_mode_never_denies_but_reports(b: &dyn Backend) {
    let mut q = quota("rq", 2, "10s", "FIXED_WINDOW");
    q["shadowMode"] = json!(true);
    q["overrides"] =
        json!([{"dimensions": {"user": "enforced"}, "maxAmount": 1, "shadowMode": false}]);
    let h = b.build(json!({"quotas": [q]}));
    for i in 0..5 {
        let r = alloc(&h, &user("a"), 1).await;
        granted(&r, 1);
        if i >= 2 {
            assert!(
                r.status
                    .message
                    .contains("would have answered granted 0 of 1"),
                "{r:?}"
            );
        } else {
            assert!(r.status.message.is_empty(), "{r:?}");
        }
    }
    let r = best(&h, &user("b"), 3).await;
    granted(&r, 3);
    assert!(r.status.message.contains("granted 2 of 3"), "{r:?}");
    granted(&alloc(&h, &user("enforced"), 1).await, 1);
    denied(b, &alloc(&h, &user("enforced"), 1).await);
    let text = exposition(&h);
    let labels = "{handler=\"quotahandler.istio-system\",quota=\"rq\"}";
    let p = b.prefix();
    assert!(
        text.contains(&format!("{p}_shadow_denials_total{labels} 4")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{p}_denials_total{labels} 1")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{p}_allocations_total{labels} 8")),
        "{text}"
    );
}

pub async fn keys_and_quotas_are_independent(b: &dyn Backend) {
    let h = b.build(json!({"quotas": [
        quota("rq", 2, "10s", "FIXED_WINDOW"),
        quota("other", 1, "10s", "TOKEN_BUCKET"),
    ]}));
    for u in ["a", "b", "c"] {
        granted(&alloc(&h, &user(u), 2).await, 2);
        denied(b, &alloc(&h, &user(u), 1).await);
    }
    // Dimension order does not matter; a different value does.
    let ab = inst("rq.ns", &[("x", "1"), ("y", "2")]);
    let ba = inst("rq.ns", &[("y", "2"), ("x", "1")]);
    granted(&alloc(&h, &ab, 1).await, 1);
    granted(&alloc(&h, &ba, 1).await, 1);
    denied(b, &alloc(&h, &ab, 1).await);
    // Another quota with the same dimensions has its own counter.
    let other = inst("other.istio-system", &[("user", "a")]);
    granted(&alloc(&h, &other, 1).await, 1);
    denied(b, &alloc(&h, &other, 1).await);
}

pub async fn remaining_and_reset_are_reported(b: &dyn Backend) {
    // Fixed window: the limit, what is left, and the window's end.
    let h = b.build(json!({"quotas": [quota("rq", 3, "10s", "FIXED_WINDOW")]}));
    let l = left(&alloc(&h, &user("a"), 1).await, 2);
    assert_eq!(
        (&*l.name, l.max_amount, l.window),
        ("rq", 3, Duration::from_secs(10))
    );
    assert!(
        l.reset_after <= Duration::from_secs(10) && l.reset_after > Duration::from_secs(9),
        "{l:?}"
    );
    left(&alloc(&h, &user("a"), 2).await, 0);
    let r = alloc(&h, &user("a"), 1).await;
    denied(b, &r);
    left(&r, 0);
    left(&alloc(&h, &user("b"), 1).await, 2);

    // Rolling window: until the oldest counted units leave the window.
    let h = b.build(json!({"quotas": [quota("rq", 3, "10s", "ROLLING_WINDOW")]}));
    let l = left(&alloc(&h, &user("a"), 2).await, 1);
    assert!(
        l.reset_after <= Duration::from_secs(10) && l.reset_after > Duration::from_secs(9),
        "{l:?}"
    );

    // Token bucket: the tokens left, and until the bucket is full again.
    let h = b.build(json!({"quotas": [quota("rq", 4, "4s", "TOKEN_BUCKET")]}));
    let l = left(&alloc(&h, &user("a"), 3).await, 1);
    assert!(
        l.reset_after <= Duration::from_secs(3) && l.reset_after > Duration::from_millis(2900),
        "{l:?}"
    );

    // An override by dimensions reports its own limit.
    let mut q = quota("rq", 3, "10s", "FIXED_WINDOW");
    q["overrides"] = json!([{"dimensions": {"user": "vip"}, "maxAmount": 10}]);
    let h = b.build(json!({"quotas": [q]}));
    let l = left(&alloc(&h, &user("vip"), 1).await, 9);
    assert_eq!(l.max_amount, 10);
}

pub async fn a_caller_limit_replaces_the_configured_one(b: &dyn Backend) {
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW", "TOKEN_BUCKET"] {
        let mut q = quota("rq", 100, "10s", algorithm);
        q["shadowMode"] = json!(true);
        let h = b.build(json!({"quotas": [q]}));
        let with = |amount| QuotaArgs {
            amount,
            limit_override: Some(LimitOverride {
                max_amount: 2,
                window: Duration::from_secs(60),
            }),
            ..QuotaArgs::default()
        };
        let quota = h.as_quota().expect("quota handler");
        let a = user("a");
        let r = quota.allocate(&a, &with(2)).await.expect("decided");
        granted(&r, 2);
        let l = left(&r, 0);
        assert_eq!(
            (l.max_amount, l.window),
            (2, Duration::from_secs(60)),
            "{algorithm}"
        );
        // The caller's limit is enforced even though the quota is in shadow mode.
        denied(b, &quota.allocate(&a, &with(1)).await.expect("decided"));
        // Without it, the configured limit applies, on a counter of its own.
        let r = alloc(&h, &a, 1).await;
        granted(&r, 1);
        left(&r, 99);
    }
}

/// A report's charge is counted whole, past the limit, once per deduplication id; a check
/// that asks for nothing with a minimum of 1 (as checks on a charged quota do) sees it.
pub async fn charges_count_past_the_limit_and_checks_see_them(b: &dyn Backend) {
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW", "TOKEN_BUCKET"] {
        let h = b.build(json!({"minDeduplicationDuration": "10s",
            "quotas": [quota("rq", 300, "10s", algorithm)]}));
        let look = with_minimum(user("a"), 1);
        granted(&alloc(&h, &look, 0).await, 0);
        granted(&charge(&h, &user("a"), 150, "r-1").await, 150);
        granted(&alloc(&h, &look, 0).await, 0);
        granted(&charge(&h, &user("a"), 150, "r-2").await, 150);
        // A retried record is answered as the first time, not counted again.
        granted(&charge(&h, &user("a"), 150, "r-1").await, 150);
        // Past the limit: a charge is never refused.
        granted(&charge(&h, &user("a"), 100, "r-3").await, 100);
        let refused = alloc(&h, &look, 0).await;
        assert_eq!(
            refused.status.code,
            mixer_model::Code::ResourceExhausted,
            "{algorithm}: {refused:?}"
        );
        assert!(
            refused.status.message.contains("fewer than 1 units left"),
            "{algorithm}: {refused:?}"
        );
        left(&refused, 0);
        denied(b, &alloc(&h, &user("a"), 1).await);
        // Another counter is untouched.
        granted(&alloc(&h, &with_minimum(user("b"), 1), 0).await, 0);
    }
}

/// A check with a minimum remaining is refused while fewer than that are left, before the
/// counter runs out.
pub async fn a_minimum_remaining_refuses_before_the_limit(b: &dyn Backend) {
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW", "TOKEN_BUCKET"] {
        let h = b.build(json!({"quotas": [quota("rq", 10, "10s", algorithm)]}));
        let i = with_minimum(user("a"), 5);
        for n in 0..6 {
            let r = alloc(&h, &i, 1).await;
            assert_eq!(r.granted_amount, 1, "{algorithm}: request {n}: {r:?}");
        }
        denied(b, &alloc(&h, &i, 1).await);
        // Without the minimum the same counter still has 4 to give.
        granted(&alloc(&h, &user("a"), 1).await, 1);
    }
}
