//! redisquota's leases (`leaseSize`): replicas sharing one counter in a real Redis take
//! blocks of it, never admit more than the limit together, and give back what they did not
//! use (idle, or when the handler closes); Redis errors still reach the fail policy.

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::host::AnyAdapter;
use mixer_adapter_api::{ErrorKind, Handler};
use mixer_adapter_redisquota::RedisQuota;
use mixer_model::{Code, QuotaResult};
use mixer_tests::redis::Redis;
use serde_json::{Value as Json, json};
use tokio::time::{Instant, sleep};

use crate::support::*;

fn build(redis: &Redis, max: i64, extra: Json) -> Arc<dyn Handler> {
    let mut params = json!({
        "redisServerUrl": format!("127.0.0.1:{}", redis.port),
        // Far above the 5 ms default: these tests count, on a machine busy with other tests.
        "callTimeout": "2s",
        "quotas": [quota("rq", max, "60s", "FIXED_WINDOW")],
    });
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    RedisQuota
        .compile_and_build(&params, &ctx())
        .expect("redisquota handler")
}

/// What Redis has left of `u`'s counter (read, not charged).
async fn left_in_redis(h: &Arc<dyn Handler>, u: &str) -> i64 {
    h.as_quota()
        .expect("quota handler")
        .peek(&user(u))
        .await
        .expect("peek")
        .remaining
}

fn admitted(r: &QuotaResult) -> i64 {
    if r.status.code == Code::Ok {
        r.granted_amount
    } else {
        0
    }
}

/// The sequential model of two replicas leasing from one counter: Redis's `used`, and what
/// each replica holds. A replica grants from its block; when short it takes
/// `max(leaseSize, short)` (at most what is left, and nothing if that does not cover the
/// shortfall; best effort: anything), as `adapters/redisquota/src/lease.rs` says.
struct Model {
    max: i64,
    size: i64,
    used: i64,
    held: [i64; 2],
}

impl Model {
    fn allocate(&mut self, replica: usize, amount: i64, best_effort: bool) -> i64 {
        let held = &mut self.held[replica];
        if *held < amount {
            let need = if best_effort {
                i64::from(*held == 0)
            } else {
                amount - *held
            };
            let want = self.size.max(amount - *held);
            let mut take = want.min(self.max - self.used);
            if take < need {
                take = 0;
            }
            self.used += take;
            *held += take;
        }
        let granted = if *held >= amount {
            amount
        } else if best_effort {
            *held
        } else {
            0
        };
        *held -= granted;
        granted
    }
}

/// Property: two replicas (handlers) leasing one counter answer exactly as the sequential
/// model, one allocation at a time in a random order, with random amounts and best effort;
/// together they never admit more than the limit; once both are spent they admitted exactly
/// the limit; and after both close, Redis counts exactly what they admitted (every unused
/// unit given back). Far fewer script calls than allocations reach Redis.
#[tokio::test]
async fn two_replicas_leasing_one_counter_admit_exactly_the_limit() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let redis = Redis::start();
    // The random steps spend about a third of the limit: the rest is spent one by one after.
    let (max, size) = (2000, 16);
    let lease = json!({"leaseSize": size, "leaseIdleTimeout": "60s"});
    let replicas = [build(&redis, max, lease.clone()), build(&redis, max, lease)];
    let mut model = Model {
        max,
        size,
        used: 0,
        held: [0, 0],
    };
    let mut rng = Lcg(35);
    let mut total = 0;
    let mut allocations = 0;
    for step in 0..300 {
        let replica = rng.next(2) as usize;
        let amount = 1 + rng.next(4) as i64;
        let best_effort = rng.next(4) == 0;
        let r = if best_effort {
            best(&replicas[replica], &user("a"), amount).await
        } else {
            alloc(&replicas[replica], &user("a"), amount).await
        };
        allocations += 1;
        let expected = model.allocate(replica, amount, best_effort);
        assert_eq!(
            admitted(&r),
            expected,
            "step {step}: replica {replica}, {amount} (best effort {best_effort}): {r:?}"
        );
        total += expected;
        assert!(total <= max, "step {step}: {total} admitted of {max}");
        assert_eq!(
            left_in_redis(&replicas[0], "a").await,
            max - model.used,
            "step {step}"
        );
    }
    // Spend the rest one unit at a time on both: then exactly the limit was admitted.
    for _ in 0..2 * max {
        let a = admitted(&alloc(&replicas[0], &user("a"), 1).await);
        let b = admitted(&alloc(&replicas[1], &user("a"), 1).await);
        allocations += 2;
        total += a + b;
        if a + b == 0 {
            break;
        }
    }
    assert_eq!(total, max, "two replicas admitted {total} of {max}");
    let calls = metric(&replicas[0], "mixer_redisquota_lease_calls_total")
        + metric(&replicas[1], "mixer_redisquota_lease_calls_total");
    assert!(
        calls * 3 <= allocations,
        "{allocations} allocations took {calls} lease calls"
    );

    // A fresh counter: some units taken and held, then both replicas close.
    let (mut admitted_b, mut held) = (0, 0);
    for (i, h) in replicas.iter().enumerate() {
        let r = alloc(h, &user("b"), 3 + i as i64).await;
        granted(&r, 3 + i as i64);
        admitted_b += 3 + i as i64;
        held += size - (3 + i as i64);
    }
    assert_eq!(left_in_redis(&replicas[0], "b").await, max - 2 * size);
    for h in &replicas {
        h.close().await;
    }
    assert_eq!(left_in_redis(&replicas[0], "b").await, max - admitted_b);
    let returned = metric(&replicas[0], "mixer_redisquota_lease_units_returned_total")
        + metric(&replicas[1], "mixer_redisquota_lease_units_returned_total");
    assert_eq!(returned as i64, held);
}

/// Concurrent requests on one replica wait for one block instead of each taking one, so a
/// replica never holds more than `leaseSize` of a counter: the other replica can still
/// take the rest. A counter whose requests waited for a take is hot until it goes idle:
/// once half of its block is granted, the replica takes the next block (up to `leaseSize`
/// held) in the background, so that its requests do not all wait a Redis round trip when
/// the block runs out.
#[tokio::test]
async fn concurrent_requests_share_one_block_and_refill_it_ahead() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let redis = Redis::start();
    let lease = json!({"leaseSize": 10, "leaseIdleTimeout": "60s"});
    let (h1, h2) = (build(&redis, 30, lease.clone()), build(&redis, 30, lease));
    let a = user("a");
    let answers = futures_util::future::join_all((0..10).map(|_| alloc(&h1, &a, 1))).await;
    assert_eq!(answers.iter().map(admitted).sum::<i64>(), 10);
    // The first block (10), granted to the ten; at 5 granted with 5 waiting, the 5 taken
    // ahead, which h1 then holds: never more than leaseSize.
    let deadline = Instant::now() + Duration::from_secs(3);
    while left_in_redis(&h1, "a").await != 15 {
        assert!(Instant::now() < deadline, "no block taken ahead");
        sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metric(&h1, "mixer_redisquota_lease_calls_total"), 2);
    // The counter stays hot until it goes idle (on one thread nothing waits for its lock
    // between takes, so waiters only show at a take): one request at a time now, once
    // half of the block is granted again its next 6 are taken ahead.
    for _ in 0..5 {
        granted(&alloc(&h1, &a, 1).await, 1);
    }
    while left_in_redis(&h1, "a").await != 9 {
        assert!(
            Instant::now() < deadline,
            "no block taken ahead of a hot counter"
        );
        sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metric(&h1, "mixer_redisquota_lease_calls_total"), 3);
    granted(&alloc(&h2, &user("a"), 9).await, 9);
    let calls = metric(&h2, "mixer_redisquota_lease_calls_total");
    for _ in 0..5 {
        let refused = alloc(&h2, &user("a"), 1).await;
        assert_eq!(refused.status.code, Code::ResourceExhausted, "{refused:?}");
    }
    // Redis said what was left at the last take: the refusals did not ask again.
    assert_eq!(metric(&h2, "mixer_redisquota_lease_calls_total"), calls);
}

/// A lease's block answers at once (`allocate_now`, no future, no timer) exactly as the
/// awaited path answers: two replicas on two Redis keys, one driven as the dispatcher
/// drives it (at once when the block can answer, else awaited), the other awaited only,
/// give the same answers to the same random allocations (retries of deduplication ids
/// among them) until the limit is spent; and the first replica answered most at once.
#[tokio::test]
async fn a_lease_answers_at_once_as_it_answers_when_awaited() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let redis = Redis::start();
    let lease = json!({"leaseSize": 8, "leaseIdleTimeout": "60s",
        "minDeduplicationDuration": "60s"});
    let (now, awaited) = (build(&redis, 300, lease.clone()), build(&redis, 300, lease));
    let (a, b) = (user("a"), user("b"));
    let mut rng = Lcg(36);
    let mut at_once = 0;
    for step in 0..200 {
        let amount = 1 + rng.next(3) as i64;
        let best_effort = rng.next(5) == 0;
        // Every fourth a retry of an earlier id; a few without any.
        let id = match rng.next(8) {
            0 => String::new(),
            1 | 2 => format!("id-{}", rng.next(step + 1)),
            _ => format!("id-{step}"),
        };
        let args = quota_args(amount, best_effort, &id);
        let quota = now.as_quota().expect("quota handler");
        let x = match quota.allocate_now(&[(&a, &args)]) {
            Some(mut answers) => {
                at_once += 1;
                answers.pop().expect("one answer")
            }
            None => quota.allocate(&a, &args).await,
        };
        let y = try_alloc_awaited(&awaited, &b, amount, best_effort, &id).await;
        let (x, y) = (x.expect("decided"), y.expect("decided"));
        assert_eq!(
            (x.status.code, x.granted_amount),
            (y.status.code, y.granted_amount),
            "step {step}: {amount} (best effort {best_effort}, id {id:?})"
        );
    }
    assert!(at_once > 100, "answered at once {at_once} of 200 times");
}

/// A lease unused for `leaseIdleTimeout` is given back, and another replica then grants
/// those units within the same window.
#[tokio::test]
async fn an_idle_lease_is_given_back() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let redis = Redis::start();
    let lease = json!({"leaseSize": 10, "leaseIdleTimeout": "100ms"});
    let (h1, h2) = (build(&redis, 10, lease.clone()), build(&redis, 10, lease));
    granted(&alloc(&h1, &user("a"), 1).await, 1);
    // h1 holds the other 9.
    let refused = alloc(&h2, &user("a"), 1).await;
    assert_eq!(refused.status.code, Code::ResourceExhausted, "{refused:?}");
    // h2 believes Redis's "nothing left" for at most leaseIdleTimeout: then it asks again.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let r = alloc(&h2, &user("a"), 9).await;
        if r.status.code == Code::Ok {
            granted(&r, 9);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the idle lease was not given back: {r:?}"
        );
        sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        metric(&h1, "mixer_redisquota_lease_units_returned_total"),
        9
    );
    assert_eq!(left_in_redis(&h2, "a").await, 0);
}

/// Redis down: an allocation needing a block fails with a retryable error (the handler's
/// fail policy answers), as without leases.
#[tokio::test]
async fn redis_errors_reach_the_fail_policy() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let mut redis = Redis::start();
    let h = build(&redis, 100, json!({"leaseSize": 5, "callTimeout": "200ms"}));
    granted(&alloc(&h, &user("a"), 5).await, 5);
    redis.kill();
    let err = try_alloc(&h, &user("a"), 1, false, "")
        .await
        .expect_err("redis is down");
    assert!(err.retryable, "{err:?}");
    assert!(
        matches!(err.kind, ErrorKind::Unavailable | ErrorKind::Timeout),
        "{err:?}"
    );
}

/// A block is granted from at once only within its window: once the window Redis gave it
/// ends, the units left in it are never granted, and with Redis down the check fails (the
/// fail policy answers) rather than being allowed from the stale block.
#[tokio::test]
async fn a_stale_block_is_never_granted_at_once() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let mut redis = Redis::start();
    let h = build(
        &redis,
        100,
        json!({"leaseSize": 10, "callTimeout": "200ms",
            "quotas": [quota("rq", 100, "300ms", "FIXED_WINDOW")]}),
    );
    let a = user("a");
    granted(&alloc(&h, &a, 1).await, 1);
    redis.kill();
    // Within the window the units held (counted in Redis when taken) are granted at once.
    let args = quota_args(1, false, "");
    let quota = h.as_quota().expect("quota handler");
    let held = quota
        .allocate_now(&[(&a, &args)])
        .expect("answered from the block");
    granted(held[0].as_ref().expect("decided"), 1);
    sleep(Duration::from_millis(400)).await;
    assert!(
        quota.allocate_now(&[(&a, &args)]).is_none(),
        "a block past its window answered at once"
    );
    let err = try_alloc(&h, &a, 1, false, "")
        .await
        .expect_err("the window ended and redis is down");
    assert!(err.retryable, "{err:?}");
}

/// `leaseSize` with a rolling window is refused by `mixer validate`, naming the file, the
/// handler and the field (Istio 1.4's own redisquota example, with leases asked for).
#[test]
fn leases_on_a_rolling_window_are_refused_with_the_file_and_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("redisquota.yaml");
    std::fs::write(
        &path,
        r#"apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: redishandler, namespace: istio-system}
spec:
  compiledAdapter: redisquota
  params:
    redisServerUrl: redis-release-master:6379
    leaseSize: 100
    quotas:
    - name: requestcountquota.instance.istio-system
      maxAmount: 500
      validDuration: 1s
      bucketDuration: 500ms
      rateLimitAlgorithm: ROLLING_WINDOW
"#,
    )
    .expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mixer-under-test"))
        .arg("validate")
        .arg(&path)
        .output()
        .expect("run mixer validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("redisquota.yaml: handler redishandler: spec.params.leaseSize: leaseSize needs FIXED_WINDOW quotas, but quotas[0]"),
        "{text}"
    );
    assert!(text.contains("ROLLING_WINDOW"), "{text}");
}

/// Checks with deduplication ids (Istio's proxies send one with every Mixer v1 check) are
/// served from the lease: a retried id gets its first answer again and is not charged, and
/// Redis sees lease takes only, no allocation script call. A retry landing on another
/// replica is charged there (the id is remembered where it was answered): that can only
/// deny more. An id is forgotten after `minDeduplicationDuration`.
#[tokio::test]
async fn deduplication_ids_are_served_from_the_lease() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let redis = Redis::start();
    let lease = json!({"leaseSize": 5, "leaseIdleTimeout": "60s",
        "minDeduplicationDuration": "60s"});
    let (h1, h2) = (build(&redis, 10, lease.clone()), build(&redis, 10, lease));
    let a = user("a");
    for i in 0..10 {
        let id = format!("id-{i}");
        granted(
            &try_alloc(&h1, &a, 1, false, &id).await.expect("decided"),
            1,
        );
        // The retry: the same answer, not charged (else the tenth id would be refused).
        let again = try_alloc(&h1, &a, 1, false, &id).await.expect("decided");
        granted(&again, 1);
    }
    let refused = try_alloc(&h1, &a, 1, false, "id-10")
        .await
        .expect("decided");
    assert_eq!(refused.status.code, Code::ResourceExhausted, "{refused:?}");
    // A refusal is remembered as a refusal, and a grant as a grant.
    let again = try_alloc(&h1, &a, 1, false, "id-10")
        .await
        .expect("decided");
    assert_eq!(again.status.code, Code::ResourceExhausted, "{again:?}");
    granted(
        &try_alloc(&h1, &a, 1, false, "id-3").await.expect("decided"),
        1,
    );
    let text = exposition(&h1);
    assert!(
        text.contains(
            "mixer_redisquota_deduplicated_total{handler=\"quotahandler.istio-system\",quota=\"rq\"} 12"
        ),
        "{text}"
    );
    assert_eq!(metric(&h1, "mixer_redisquota_lease_remembered_ids"), 11);
    // Two blocks of 5; no allocation went to Redis's allocation script.
    assert_eq!(metric(&h1, "mixer_redisquota_lease_calls_total"), 2);
    assert_eq!(metric(&h1, "mixer_redisquota_script_calls_total"), 0);
    // Redis ran the two takes only: the first EVALSHA of a fresh Redis is refused
    // (NOSCRIPT) and sent again as EVAL.
    assert_eq!(redis.calls("evalsha") + redis.calls("eval"), 3);
    assert_eq!(left_in_redis(&h1, "a").await, 0);
    // On another replica the id is new: charged there, and refused, as nothing is left.
    let elsewhere = try_alloc(&h2, &a, 1, false, "id-0").await.expect("decided");
    assert_eq!(
        elsewhere.status.code,
        Code::ResourceExhausted,
        "{elsewhere:?}"
    );

    // Forgotten after minDeduplicationDuration: the same id is charged again.
    let short = json!({"leaseSize": 5, "leaseIdleTimeout": "60s",
        "minDeduplicationDuration": "100ms"});
    let h3 = build(&redis, 10, short);
    let b = user("b");
    left(
        &try_alloc(&h3, &b, 1, false, "x").await.expect("decided"),
        9,
    );
    left(
        &try_alloc(&h3, &b, 1, false, "x").await.expect("decided"),
        9,
    );
    sleep(Duration::from_millis(150)).await;
    left(
        &try_alloc(&h3, &b, 1, false, "x").await.expect("decided"),
        8,
    );
    assert_eq!(metric(&h3, "mixer_redisquota_lease_remembered_ids"), 1);
}

/// Many cold keys at once, each needing a block of its own (10,000 users whose requests come
/// back slower than `leaseIdleTimeout`): their takes reach Redis together, a few script
/// calls for all of them, and each key still takes exactly its block; the idle leases are
/// then given back together, every unused unit back in Redis.
#[tokio::test]
async fn takes_and_give_backs_of_many_keys_are_batched() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let redis = Redis::start();
    let lease = json!({"leaseSize": 10, "leaseIdleTimeout": "200ms"});
    let h = build(&redis, 100, lease);
    let users: Vec<_> = (0..200).map(|i| user(&format!("k{i}"))).collect();
    let scripts = || redis.calls("evalsha") + redis.calls("eval");
    let before = scripts();
    let answers = futures_util::future::join_all(users.iter().map(|u| alloc(&h, u, 1))).await;
    for a in &answers {
        granted(a, 1);
    }
    let takes = metric(&h, "mixer_redisquota_lease_calls_total");
    assert!(
        (1..=4).contains(&takes),
        "200 cold keys took {takes} script calls"
    );
    // Redis ran just those (on a fresh Redis a call's first EVALSHA is refused, NOSCRIPT,
    // and sent again as EVAL).
    let ran = scripts() - before;
    assert!(ran <= 2 * takes, "{takes} calls, {ran} scripts");
    for i in 0..200 {
        assert_eq!(left_in_redis(&h, &format!("k{i}")).await, 90, "k{i}");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&h, "mixer_redisquota_lease_units_returned_total") < 200 * 9 {
        assert!(Instant::now() < deadline, "idle leases not given back");
        sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        metric(&h, "mixer_redisquota_lease_units_returned_total"),
        200 * 9
    );
    let backs = metric(&h, "mixer_redisquota_lease_calls_total") - takes;
    assert!(
        (1..=4).contains(&backs),
        "200 give-backs took {backs} script calls"
    );
    for i in 0..200 {
        assert_eq!(left_in_redis(&h, &format!("k{i}")).await, 99, "k{i}");
    }
}
