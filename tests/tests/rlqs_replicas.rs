//! The rate limit quota service (RLQS) on two mixer replicas sharing one real Redis
//! (`serve --shared-cache`), serving `policies/rlqs` (300 requests a second for the bucket
//! `{name: shared}` of domain `rlqs`), with three simulated proxies (`support/rlqs_proxy.rs`;
//! no Envoy binary is installed here) under uneven load: one wants five times what each
//! other wants. The proxies are spread over both replicas, so shares that add up to the
//! limit show that the replicas compute them from the same demands.
//!
//! One test, one Redis and two mixers, in phases: steady state, a demand that drops, a
//! replica killed, Redis stopped and back. A second, without `--shared-cache`: the limit's
//! quota handler is a redisquota one, and its Redis holds the demands.

use std::path::Path;
use std::time::{Duration, Instant};

use mixer_tests::Mixer;
use mixer_tests::redis::{Redis, redis_installed};

#[path = "support/rlqs_proxy.rs"]
mod rlqs_proxy;
use rlqs_proxy::{Proxy, run_intervals};

fn start_replica(redis: &Redis) -> Mixer {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/rlqs/config");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let mixer = Mixer::start(
        binary,
        &[
            "--config",
            config.to_str().expect("utf-8"),
            "--shared-cache",
            &url,
        ],
    );
    mixer.wait_ready(Duration::from_secs(20));
    mixer
}

/// Each proxy's live `shared` rate, `None` for one without.
fn rates(proxies: &[Proxy]) -> Vec<Option<u64>> {
    proxies.iter().map(|p| p.rate("shared")).collect()
}

/// Each proxy's live `shared` rate; every one must hold one.
fn held(proxies: &[Proxy]) -> Vec<u64> {
    rates(proxies)
        .into_iter()
        .map(|r| r.expect("every proxy holds a live assignment"))
        .collect()
}

/// Steady state under uneven load: the assignments add up to 300 +/- 5% and each proxy
/// gets at least its fair share (100: the light ones ask for 100, the heavy one for 500).
fn assert_steady(proxies: &[Proxy], phase: &str) {
    let shares = held(proxies);
    let sum: u64 = shares.iter().sum();
    assert!(
        (285..=315).contains(&sum),
        "{phase}: the assignments add up to {sum}: {shares:?}"
    );
    assert!(
        shares.iter().all(|s| *s >= 95),
        "{phase}: each gets its fair share: {shares:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_limit_through_redis() {
    if !redis_installed() {
        return;
    }
    let mut redis = Redis::start();
    let a = start_replica(&redis);
    let b = start_replica(&redis);
    let mut proxies = vec![
        Proxy::connect(a.grpc, "heavy", &[("shared", 500)]).await,
        Proxy::connect(b.grpc, "light-1", &[("shared", 100)]).await,
        Proxy::connect(a.grpc, "light-2", &[("shared", 100)]).await,
    ];

    // Steady state after a few intervals, with the proxies on both replicas.
    run_intervals(&mut proxies, 4).await;
    assert_steady(&proxies, "steady");

    // The light proxies' demand drops: within 2 intervals the heavy one holds most of it.
    for p in &mut proxies[1..] {
        p.wants[0].1 = 1;
    }
    run_intervals(&mut proxies, 2).await;
    let shares = held(&proxies);
    assert!(shares[0] >= 230, "the heavy proxy got {shares:?}");
    assert!(shares.iter().sum::<u64>() <= 315, "{shares:?}");
    for p in &mut proxies[1..] {
        p.wants[0].1 = 100;
    }
    run_intervals(&mut proxies, 3).await;
    assert_steady(&proxies, "back to steady");

    // Replica `a` is killed: its proxies' streams end, they reconnect to `b`, and keep
    // their shares (their demands are in Redis, not in the replica that went away).
    let before = held(&proxies);
    drop(a);
    let start = Instant::now();
    while !(proxies[0].ended() && proxies[2].ended()) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the killed replica's streams did not end"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxies[0].reconnect(b.grpc).await;
    proxies[2].reconnect(b.grpc).await;
    run_intervals(&mut proxies, 1).await;
    let after = held(&proxies);
    for (was, is) in before.iter().zip(&after) {
        assert!(
            was.abs_diff(*is) * 10 <= *was,
            "shares kept within 10% across the takeover: {before:?} then {after:?}"
        );
    }
    assert_steady(&proxies, "after the takeover");

    // Redis stopped: no new assignments; the ones held run out (their time to live, at
    // least 2 s) into the proxies' own expired-assignment behaviour (allow all here), never
    // DENY_ALL, and the streams stay open. The errors are counted.
    redis.kill();
    let start = Instant::now();
    while rates(&proxies).iter().any(Option::is_some) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "assignments outlived their time to live: {:?}",
            rates(&proxies)
        );
        run_intervals(&mut proxies, 1).await;
    }
    let errors = b
        .metric("mixer_rlqs_shared_state_errors_total")
        .expect("the errors are exported");
    assert!(errors >= 1.0, "{errors}");

    // Redis back (empty): the assignments come back and settle at the limit again.
    redis.restart();
    let start = Instant::now();
    while rates(&proxies).iter().any(Option::is_none) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no assignments after Redis came back: {:?}",
            rates(&proxies)
        );
        run_intervals(&mut proxies, 1).await;
    }
    run_intervals(&mut proxies, 3).await;
    assert_steady(&proxies, "after Redis came back");
    for p in &proxies {
        let r = p.received.lock().expect("lock");
        assert!(!r.deny_all_seen && !r.zero_rate_seen, "{}: {r:?}", p.id);
        assert!(r.ended.is_none(), "{}: {r:?}", p.id);
    }
    drop(proxies);
    b.terminate();
}

/// One limit of 300 requests a second for the bucket `{name: shared}` of domain `rlqs`,
/// counted by a redisquota handler in the Redis at `port`.
fn redisquota_config(port: u16) -> String {
    format!(
        r#"
kind: handler
metadata: {{name: rlqs-redis, namespace: istio-system}}
spec:
  compiledAdapter: redisquota
  params:
    redisServerUrl: "127.0.0.1:{port}"
    quotas:
    - name: rlqs-redis.instance.istio-system
      maxAmount: 300
      validDuration: 1s
---
kind: instance
metadata: {{name: rlqs-redis, namespace: istio-system}}
spec:
  compiledTemplate: quota
  params:
    dimensions:
      name: rlqs.bucket["name"]
---
kind: rule
metadata: {{name: rlqs-redis, namespace: istio-system}}
spec:
  match: (rlqs.domain | "") == "rlqs" && (rlqs.bucket["name"] | "") == "shared"
  actions:
  - handler: rlqs-redis
    instances: [rlqs-redis]
"#
    )
}

/// Without `--shared-cache`, two replicas whose limit is counted by a redisquota handler keep
/// the RLQS demands in that handler's Redis: the shares of proxies on different replicas add
/// up to the limit, not to the limit on each replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisquota_handlers_redis_holds_the_demands() {
    if !redis_installed() {
        return;
    }
    let redis = Redis::start();
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("rlqs.yaml"), redisquota_config(redis.port)).expect("config");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let config = dir.path().to_str().expect("utf-8");
    let replicas: Vec<Mixer> = (0..2)
        .map(|_| {
            let mixer = Mixer::start(binary, &["--config", config]);
            mixer.wait_ready(Duration::from_secs(20));
            mixer
        })
        .collect();
    let mut proxies = vec![
        Proxy::connect(replicas[0].grpc, "one", &[("shared", 300)]).await,
        Proxy::connect(replicas[1].grpc, "two", &[("shared", 300)]).await,
    ];
    run_intervals(&mut proxies, 4).await;
    let shares = held(&proxies);
    let sum: u64 = shares.iter().sum();
    assert!(
        (285..=315).contains(&sum),
        "the replicas' assignments add up to {sum}: {shares:?}"
    );
    assert!(shares.iter().all(|s| *s >= 95), "{shares:?}");
    drop(proxies);
    for mixer in replicas {
        mixer.terminate();
    }
}
