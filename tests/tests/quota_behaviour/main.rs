//! Quota behaviour, one set of test bodies run against every quota adapter (as Limitador runs
//! one body against every storage): memquota on tokio's paused clock, redisquota against a
//! real `redis-server` started by each test on a free loopback port (real time, so windows
//! are short and assertions about time leave a margin).
//!
//! Needs `redis-server` on PATH (Debian's `redis-server` package).

mod backends;
mod behaviours;
mod redis_costs;
mod redis_leases;
mod support;

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::{ErrorKind, Handler};
use mixer_adapter_memquota::{MemQuota, MemQuotaParams};
use serde_json::json;
use tokio::time::{Instant, sleep};

use backends::{Backend, Mem, RedisServer};
use support::*;

macro_rules! behaviour_suite {
    ($($name:ident),* $(,)?) => {
        mod memquota {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    super::behaviours::$name(&super::backends::Mem).await;
                }
            )*
        }
        mod redisquota {
            $(
                #[tokio::test]
                async fn $name() {
                    let redis = super::RedisServer::start();
                    super::behaviours::$name(&redis).await;
                }
            )*
        }
    };
}

behaviour_suite!(
    fixed_window_allows_max_then_resets,
    rolling_window_counts_a_sliding_interval,
    token_bucket_bursts_then_refills,
    overrides_select_by_dimensions,
    best_effort_grants_what_is_left,
    amounts_above_one,
    deduplication_ids,
    shadow_mode_never_denies_but_reports,
    keys_and_quotas_are_independent,
    remaining_and_reset_are_reported,
    a_caller_limit_replaces_the_configured_one,
    charges_count_past_the_limit_and_checks_see_them,
    a_minimum_remaining_refuses_before_the_limit,
    peek_reads_without_charging,
);

// ---------------------------------------------------------------------------------------------
// One adapter only

#[tokio::test(start_paused = true)]
async fn memquota_memory_stays_bounded() {
    let params = json!({"maxKeys": 1000, "quotas": [quota("rq", 5, "1h", "ROLLING_WINDOW")]});
    let params: MemQuotaParams = mixer_adapter_api::host::decode_params(&params).expect("decodes");
    let h = MemQuota
        .build_handler(&params.compile().expect("valid params"), &ctx())
        .expect("handler");
    let handler: Arc<dyn Handler> = h.clone();
    for i in 0..100_000 {
        let r = try_alloc(
            &handler,
            &user(&format!("user-{i}")),
            1,
            false,
            &format!("req-{i}"),
        )
        .await
        .expect("decided");
        granted(&r, 1);
    }
    assert!(h.tracked_keys() <= 1000, "{} keys", h.tracked_keys());
    assert!(h.remembered_ids() <= 1000, "{} ids", h.remembered_ids());
    // The most recent keys are still counted.
    granted(&alloc(&handler, &user("user-99999"), 4).await, 4);
    denied(&Mem, &alloc(&handler, &user("user-99999"), 1).await);
    let text = exposition(&handler);
    let gauge = text
        .lines()
        .find_map(|l| l.strip_prefix("mixer_memquota_keys{handler=\"quotahandler.istio-system\"} "))
        .and_then(|v| v.parse::<usize>().ok())
        .expect("keys gauge");
    assert!(gauge <= 1000 && gauge == h.tracked_keys(), "{text}");
    assert!(
        text.contains("mixer_memquota_evictions_total{handler=\"quotahandler.istio-system\",reason=\"cap\"} 99"),
        "{text}"
    );
    // Once their windows are over, counters are dropped.
    sleep(Duration::from_secs(3601)).await;
    h.sweep();
    assert_eq!(h.tracked_keys(), 0);
    assert_eq!(h.remembered_ids(), 0);
}

#[tokio::test]
async fn redisquota_fails_unavailable_while_redis_is_down_and_recovers() {
    let mut redis = RedisServer::start();
    let h = redis.build(json!({"quotas": [quota("rq", 100, "10s", "FIXED_WINDOW")]}));
    granted(&alloc(&h, &user("a"), 1).await, 1);

    redis.stop();
    let started = Instant::now();
    let err = try_alloc(&h, &user("a"), 1, false, "")
        .await
        .expect_err("redis is down");
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err:?}");
    assert!(err.retryable, "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let err = try_alloc(&h, &user("a"), 1, false, "")
        .await
        .expect_err("still down");
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err:?}");
    assert!(
        exposition(&h)
            .contains("mixer_redisquota_errors_total{handler=\"quotahandler.istio-system\"} 2"),
        "{}",
        exposition(&h)
    );

    // Same port, empty server (no scripts loaded: the NOSCRIPT path reloads them).
    redis.spawn();
    let restarted = Instant::now();
    loop {
        match try_alloc(&h, &user("a"), 1, false, "").await {
            Ok(r) => {
                granted(&r, 1);
                break;
            }
            Err(e) => {
                assert_eq!(e.kind, ErrorKind::Unavailable, "{e:?}");
                assert!(
                    restarted.elapsed() < Duration::from_secs(3),
                    "no recovery after restart: {e:?}"
                );
                sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert!(restarted.elapsed() < Duration::from_secs(3));
}
