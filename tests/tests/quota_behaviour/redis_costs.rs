//! What redisquota sends to Redis: concurrent allocations batched into one script call with
//! the same answers as one call each, and an exhausted window answered from the local
//! over-limit cache (no Redis call) until it ends. Counted by Redis itself (`INFO
//! commandstats`) and by the adapter's own counters.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use mixer_adapter_api::Handler;
use mixer_adapter_api::host::AnyAdapter;
use mixer_adapter_redisquota::RedisQuota;
use mixer_model::{Code, QuotaResult};
use mixer_tests::redis::Redis;
use serde_json::{Value as Json, json};
use tokio::time::{Instant, sleep};

use crate::support::*;

fn build(redis: &Redis, quotas: Json, extra: Json) -> Arc<dyn Handler> {
    let mut params = json!({
        "redisServerUrl": format!("127.0.0.1:{}", redis.port),
        // Far above the 5 ms default: these tests count, on a machine busy with other tests.
        "callTimeout": "2s",
        "quotas": quotas,
    });
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    RedisQuota
        .compile_and_build(&params, &ctx())
        .expect("redisquota handler")
}

/// Script calls Redis ran (the first one of a fresh Redis is an `EVAL` after `NOSCRIPT`).
fn script_calls(redis: &Redis) -> u64 {
    redis.calls("evalsha") + redis.calls("eval")
}

/// Property: allocations sent at once (random users and amounts, fixed windows far longer
/// than the test) get exactly the answers a counter gives when they come one by one in the
/// order they were sent, and they reach Redis in far fewer script calls than allocations.
#[tokio::test]
async fn concurrent_allocations_are_batched_with_the_answers_of_one_call_each() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let redis = Redis::start();
    let h = build(
        &redis,
        json!([quota("rq", 10, "60s", "FIXED_WINDOW")]),
        json!({"localCacheSize": 1000}),
    );
    // Warm: the script is loaded and a connection made.
    granted(&alloc(&h, &user("warm"), 1).await, 1);
    let before = script_calls(&redis);
    let mut rng = Lcg(35);
    let mut sent = 0;
    // At most 30 futures: `join_all` then polls them in order (larger sets go through
    // `FuturesOrdered`, which may start them in another order than the model's).
    for round in 0..12 {
        let calls: Vec<(String, i64)> = (0..30)
            .map(|_| (format!("r{round}-u{}", rng.next(4)), 1 + rng.next(3) as i64))
            .collect();
        let instances: Vec<_> = calls.iter().map(|(u, _)| user(u)).collect();
        let answers: Vec<QuotaResult> = join_all(
            instances
                .iter()
                .zip(&calls)
                .map(|(i, (_, n))| alloc(&h, i, *n)),
        )
        .await;
        // The model: one counter per user, taken in order.
        let mut used: std::collections::HashMap<&str, i64> = Default::default();
        for ((u, n), answer) in calls.iter().zip(&answers) {
            let used = used.entry(u.as_str()).or_default();
            if *used + n <= 10 {
                *used += n;
                granted(answer, *n);
                assert_eq!(answer.limit.as_ref().map(|l| l.remaining), Some(10 - *used));
            } else {
                assert_eq!(answer.status.code, Code::ResourceExhausted, "{answer:?}");
            }
        }
        sent += calls.len() as u64;
    }
    let calls = script_calls(&redis) - before;
    assert!(
        calls * 10 <= sent,
        "{sent} allocations took {calls} script calls"
    );
    let carried = metric(&h, "mixer_redisquota_script_allocations_total");
    let answered_locally = metric(&h, "mixer_redisquota_over_limit_with_local_cache_total");
    assert_eq!(carried + answered_locally, sent + 1);
}

/// An exhausted fixed window is refused without Redis until it ends, then counted in Redis
/// again; a token bucket (it refills continuously) always asks Redis.
#[tokio::test]
async fn an_exhausted_window_is_refused_locally_until_it_ends() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let redis = Redis::start();
    let h = build(
        &redis,
        json!([
            quota("rq", 2, "1s", "FIXED_WINDOW"),
            quota("tb", 2, "60s", "TOKEN_BUCKET")
        ]),
        json!({"localCacheSize": 1000}),
    );
    let started = Instant::now();
    granted(&alloc(&h, &user("a"), 2).await, 2);
    let refused = alloc(&h, &user("a"), 1).await;
    assert_eq!(refused.status.code, Code::ResourceExhausted, "{refused:?}");
    let calls = script_calls(&redis);
    for _ in 0..20 {
        let r = alloc(&h, &user("a"), 1).await;
        assert_eq!(r.status.code, Code::ResourceExhausted, "{r:?}");
        let limit = left(&r, 0);
        assert!(limit.retry_after <= Duration::from_secs(1), "{limit:?}");
    }
    if started.elapsed() < Duration::from_millis(900) {
        assert_eq!(script_calls(&redis), calls, "refusals went to Redis");
        assert_eq!(
            metric(&h, "mixer_redisquota_over_limit_with_local_cache_total"),
            21,
            "the grant that took the last units already told the cache"
        );
    }
    // Another user of the same quota still counts in Redis.
    granted(&alloc(&h, &user("b"), 1).await, 1);
    // The window ends: granted again, from Redis.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let r = alloc(&h, &user("a"), 1).await;
        if r.status.code == Code::Ok {
            granted(&r, 1);
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {r:?}");
        sleep(Duration::from_millis(50)).await;
    }
    let tb = inst("tb.istio-system", &[("user", "a")]);
    granted(&alloc(&h, &tb, 2).await, 2);
    let calls = script_calls(&redis);
    for _ in 0..3 {
        let r = alloc(&h, &tb, 1).await;
        assert_eq!(r.status.code, Code::ResourceExhausted, "{r:?}");
    }
    assert_eq!(script_calls(&redis), calls + 3);
}

/// Without `localCacheSize` the cache is off: every refusal is Redis's (so that a Redis
/// outage gets the fail policy and a flushed Redis is believed at once).
#[tokio::test]
async fn without_a_local_cache_size_every_refusal_asks_redis() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let redis = Redis::start();
    let h = build(
        &redis,
        json!([quota("rq", 1, "60s", "FIXED_WINDOW")]),
        json!({}),
    );
    granted(&alloc(&h, &user("a"), 1).await, 1);
    let calls = script_calls(&redis);
    for _ in 0..3 {
        let r = alloc(&h, &user("a"), 1).await;
        assert_eq!(r.status.code, Code::ResourceExhausted, "{r:?}");
    }
    assert_eq!(script_calls(&redis), calls + 3);
    assert_eq!(
        metric(&h, "mixer_redisquota_over_limit_with_local_cache_total"),
        0
    );
}
