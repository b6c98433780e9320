//! redisquota during a Redis outage, through the real mixer and Envoy's rate limit protocol:
//! with Redis killed (connections refused) and with Redis stopped (SIGSTOP: connections
//! accepted, nothing answered), every call gets the handler's fail policy (quota fails open:
//! OK) within the call budget: over 200 calls, the p99 is less than 10 ms above that of the
//! same calls without any handler, well inside Envoy's 20 ms default rate limit timeout
//! (the two interleaved, so that a busy machine slows both alike); when Redis is back, the
//! circuit closes and limiting returns.
//! And a request with several descriptors costs one script call.

#[path = "support/tenant_limits.rs"]
mod tenant_limits;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use mixer_tests::redis::Redis;
use mixer_tests::{Mixer, http_request};
use tenant_limits::{tenant_limits, tenant_request};
use tonic::transport::Channel;

/// redisquota with its default call budget (5 ms) and breaker (5 failures, 500 ms), 5
/// requests per tenant and minute.
fn config(redis_port: u16) -> String {
    config_with(redis_port, "")
}

/// [`config`] with more `params` (`, key: value` each).
fn config_with(redis_port: u16, params: &str) -> String {
    tenant_limits(
        "outage",
        &format!(r#"redisServerUrl: "127.0.0.1:{redis_port}"{params}"#),
        "minute",
        5,
    )
}

fn request(tenants: &[&str]) -> RateLimitRequest {
    tenant_request("outage", tenants)
}

fn start(dir: &Path, redis_port: u16) -> Mixer {
    start_with(dir, &config(redis_port))
}

fn start_with(dir: &Path, config: &str) -> Mixer {
    let path = dir.join("outage.yaml");
    std::fs::write(&path, config).expect("write config");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let mixer = Mixer::start(binary, &["--config", path.to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(10));
    mixer
}

async fn client(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
}

fn p99(mut latencies: Vec<Duration>) -> Duration {
    latencies.sort();
    latencies[latencies.len() * 99 / 100 - 1]
}

/// 200 calls during the outage, each answered OK (the fail policy), and the p99 of their
/// latency beside the p99 of 200 calls interleaved with them whose descriptor no rule selects
/// (the same path without any handler): what the outage adds, measured in the same run, so
/// that a busy machine slows both alike.
async fn during_outage(
    c: &mut RateLimitServiceClient<Channel>,
    what: &str,
) -> (Duration, Duration) {
    let (mut outage, mut baseline) = (Vec::with_capacity(200), Vec::with_capacity(200));
    for i in 0..200 {
        let started = Instant::now();
        let answer = c
            .should_rate_limit(request(&[&format!("{what}-{i}")]))
            .await
            .expect("an answer, not an error")
            .into_inner();
        outage.push(started.elapsed());
        assert_eq!(answer.overall_code, Code::Ok as i32, "{what}: fails open");
        let mut unlimited = request(&[]);
        unlimited.descriptors.push(RateLimitDescriptor {
            entries: vec![Entry {
                key: "unlimited".into(),
                value: "x".into(),
            }],
            ..Default::default()
        });
        let started = Instant::now();
        c.should_rate_limit(unlimited).await.expect("answer");
        baseline.push(started.elapsed());
    }
    let (outage, baseline) = (p99(outage), p99(baseline));
    eprintln!("{what}: p99 {outage:?}, without a handler {baseline:?}");
    (outage, baseline)
}

/// Waits until a fresh tenant is limited again after its 5 requests: Redis is counting.
async fn limiting_returns(c: &mut RateLimitServiceClient<Channel>, what: &str) -> Duration {
    let started = Instant::now();
    for round in 0.. {
        let tenant = format!("{what}-back-{round}");
        let mut codes = Vec::new();
        for _ in 0..6 {
            let answer = c
                .should_rate_limit(request(&[&tenant]))
                .await
                .expect("answer")
                .into_inner();
            codes.push(answer.overall_code);
        }
        if codes[5] == Code::OverLimit as i32 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what}: limiting did not come back: {codes:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!()
}

fn metric(admin: SocketAddr, line_start: &str) -> Option<f64> {
    let (_, _, text) = http_request(admin, "GET", "/metrics", &[]).expect("metrics");
    let found = text
        .lines()
        .find_map(|l| l.strip_prefix(line_start))
        .and_then(|v| v.trim().parse().ok());
    if found.is_none() {
        eprintln!("no `{line_start}` in /metrics:\n{text}");
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_answers_the_fail_policy_within_the_budget_and_the_circuit_closes_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut redis = Redis::start();
    let port = redis.port;
    let mixer = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || start(&dir, port)
    })
    .await
    .expect("join");
    let mut c = client(mixer.grpc).await;
    limiting_returns(&mut c, "before").await;
    let circuit =
        "mixer_redisquota_circuit_state{handler=\"outage.ratelimitconfig.istio-system\"} ";

    // Killed: connections refused.
    redis.kill();
    let (p99, baseline) = during_outage(&mut c, "killed").await;
    assert!(
        p99 < baseline + Duration::from_millis(10),
        "killed: p99 {p99:?}, {baseline:?} without a handler"
    );
    assert_eq!(
        metric(mixer.admin, circuit),
        Some(1.0),
        "the circuit opened"
    );
    redis.restart();
    let back = limiting_returns(&mut c, "killed").await;
    eprintln!("killed: limiting back {back:?} after the restart");
    assert_eq!(
        metric(mixer.admin, circuit),
        Some(0.0),
        "the circuit closed"
    );

    // Stopped: connections accepted, nothing answered; each call would wait forever.
    redis.pause();
    let (p99, baseline) = during_outage(&mut c, "stopped").await;
    assert!(
        p99 < baseline + Duration::from_millis(10),
        "stopped: p99 {p99:?}, {baseline:?} without a handler"
    );
    assert_eq!(
        metric(mixer.admin, circuit),
        Some(1.0),
        "the circuit opened"
    );
    redis.resume();
    let back = limiting_returns(&mut c, "stopped").await;
    eprintln!("stopped: limiting back {back:?} after SIGCONT");
    assert_eq!(
        metric(mixer.admin, circuit),
        Some(0.0),
        "the circuit closed"
    );
    let short =
        "mixer_redisquota_short_circuited_total{handler=\"outage.ratelimitconfig.istio-system\"} ";
    assert!(
        metric(mixer.admin, short).is_some_and(|n| n > 300.0),
        "most outage calls never reached Redis"
    );
    assert!(mixer.terminate().success());
}

/// Issue #32: after Redis restarted, each connection of the pool that had seen it go failed
/// one more call (the breaker's probe, a cool-down each) before the circuit closed: with 8
/// connections, limiting came back about 4 s after Redis. Now the first probe after Redis is
/// back connects afresh and closes the circuit: within the cool-down (500 ms) and the few
/// calls that find a tenant limited again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_redis_restarts_the_first_probe_closes_the_circuit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut redis = Redis::start();
    let config = config_with(redis.port, ", connectionPoolSize: 8");
    let mixer = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || start_with(&dir, &config)
    })
    .await
    .expect("join");
    let mut c = client(mixer.grpc).await;
    // Every connection of the pool made and in use.
    for i in 0..16 {
        c.should_rate_limit(request(&[&format!("warm-{i}")]))
            .await
            .expect("answer");
    }
    limiting_returns(&mut c, "before").await;
    redis.kill();
    // Long enough for the circuit to open and a probe or two to fail.
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_millis(1200) {
        let answer = c
            .should_rate_limit(request(&["outage"]))
            .await
            .expect("an answer, not an error")
            .into_inner();
        assert_eq!(answer.overall_code, Code::Ok as i32, "fails open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    redis.restart();
    let back = limiting_returns(&mut c, "restarted").await;
    eprintln!("limiting back {back:?} after the restart");
    assert!(
        back < Duration::from_millis(1500),
        "limiting came back {back:?} after Redis did"
    );
    let circuit =
        "mixer_redisquota_circuit_state{handler=\"outage.ratelimitconfig.istio-system\"} ";
    assert_eq!(
        metric(mixer.admin, circuit),
        Some(0.0),
        "the circuit closed"
    );
    assert!(mixer.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_ten_descriptors_costs_one_script_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let redis = Redis::start();
    let port = redis.port;
    let mixer = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || {
            // A generous budget: this test counts calls, not time.
            let path = dir.join("outage.yaml");
            let text = config(port).replace(
                &format!("redisServerUrl: \"127.0.0.1:{port}\""),
                &format!("redisServerUrl: \"127.0.0.1:{port}\", callTimeout: 2s"),
            );
            std::fs::write(&path, text).expect("write config");
            let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
            let mixer = Mixer::start(binary, &["--config", path.to_str().expect("utf-8")]);
            mixer.wait_ready(Duration::from_secs(10));
            mixer
        }
    })
    .await
    .expect("join");
    let mut c = client(mixer.grpc).await;
    let tenants: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
    let tenants: Vec<&str> = tenants.iter().map(String::as_str).collect();
    // The first call loads the script (NOSCRIPT, SCRIPT LOAD, EVALSHA again).
    c.should_rate_limit(request(&tenants))
        .await
        .expect("answer");
    let before = redis.calls("evalsha");
    for n in 1..=6 {
        let answer = c
            .should_rate_limit(request(&tenants))
            .await
            .expect("answer")
            .into_inner();
        assert_eq!(answer.statuses.len(), 10);
        // Each descriptor was counted: 5 per minute, so the 5th call after the first is over.
        let over = answer
            .statuses
            .iter()
            .all(|s| s.code == Code::OverLimit as i32);
        assert_eq!(over, n >= 5, "call {n}: {answer:?}");
    }
    assert_eq!(
        redis.calls("evalsha") - before,
        6,
        "one script call per request of 10 descriptors"
    );
    assert!(mixer.terminate().success());
}
