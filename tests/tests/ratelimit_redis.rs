//! Rate limiting through the real mixer process: several descriptors and `hits_addend` against
//! each quota backend; two mixer processes sharing one real Redis enforce one limit; Redis
//! going away applies the fail policy (quota fails open), and limiting comes back by itself
//! when Redis does.

#[path = "support/tenant_limits.rs"]
mod tenant_limits;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tenant_limits::{tenant_limits, tenant_request};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::UInt64Value;
use mixer_tests::redis::Redis;
use mixer_tests::{Mixer, http_request};
use tonic::transport::Channel;

fn wait_ready(admin: SocketAddr) {
    let start = Instant::now();
    while !matches!(http_request(admin, "GET", "/readyz", &[]), Ok((200, _, _))) {
        assert!(start.elapsed() < Duration::from_secs(10), "mixer not ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn client(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
}

fn start_mixers(dir: &Path, redis_port: u16, per_day: u32, n: usize) -> Vec<Mixer> {
    let path = dir.join("limits.yaml");
    // The call budget is far above its 5 ms default: these tests count what is limited, on a
    // machine busy with other tests, where a slow moment would fail a call open.
    let params = format!(
        r#"redisServerUrl: "127.0.0.1:{redis_port}", connectionPoolSize: 4, callTimeout: 2s"#
    );
    std::fs::write(&path, tenant_limits("shared", &params, "day", per_day)).expect("write");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let mixers: Vec<Mixer> = (0..n)
        .map(|_| Mixer::start(binary, &["--config", path.to_str().expect("utf-8")]))
        .collect();
    for m in &mixers {
        wait_ready(m.admin);
    }
    mixers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_mixers_sharing_one_redis_enforce_one_limit() {
    const LIMIT: u32 = 300;
    const SENT: usize = 900;
    let dir = tempfile::tempdir().expect("tempdir");
    let redis = Redis::start();
    let redis_port = redis.port;
    let mixers = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || start_mixers(&dir, redis_port, LIMIT, 2)
    })
    .await
    .expect("join");
    let tenant = format!("t-{}", std::process::id());
    let mut tasks = Vec::new();
    for (i, m) in mixers.iter().enumerate() {
        for _ in 0..3 {
            let addr = m.grpc;
            let tenant = tenant.clone();
            tasks.push(tokio::spawn(async move {
                let mut c = client(addr).await;
                let mut ok = 0usize;
                for _ in 0..SENT / 6 {
                    let answer = c
                        .should_rate_limit(tenant_request("shared", &[&tenant]))
                        .await
                        .expect("answer")
                        .into_inner();
                    if answer.overall_code == Code::Ok as i32 {
                        ok += 1;
                    }
                }
                (i, ok)
            }));
        }
    }
    let mut allowed = 0;
    let mut per_mixer = [0usize; 2];
    for t in tasks {
        let (i, ok) = t.await.expect("task");
        allowed += ok;
        per_mixer[i] += ok;
    }
    let limit = LIMIT as usize;
    assert!(
        allowed.abs_diff(limit) * 100 <= limit,
        "allowed {allowed} of {SENT}, limit {limit} (per mixer {per_mixer:?})"
    );
    assert!(
        per_mixer[0] > 0 && per_mixer[1] > 0,
        "both mixers took part: {per_mixer:?}"
    );

    // Both replicas count on the same counter, so what is left goes down by one per request
    // whichever replica answers, in the status and in the header Envoy passes to the client.
    let fresh = format!("{tenant}-remaining");
    let mut clients = [client(mixers[0].grpc).await, client(mixers[1].grpc).await];
    for n in 1..=4u32 {
        let answer = clients[n as usize % 2]
            .should_rate_limit(tenant_request("shared", &[&fresh]))
            .await
            .expect("answer")
            .into_inner();
        let status = &answer.statuses[0];
        assert_eq!(status.limit_remaining, LIMIT - n, "{answer:?}");
        assert_eq!(
            status.current_limit.as_ref().map(|l| l.requests_per_unit),
            Some(LIMIT)
        );
        let remaining = answer
            .response_headers_to_add
            .iter()
            .find(|h| h.key == "X-RateLimit-Remaining")
            .map(|h| h.value.clone());
        assert_eq!(remaining, Some((LIMIT - n).to_string()), "{answer:?}");
    }
    for m in mixers {
        assert!(m.terminate().success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_fails_open_and_limiting_returns_with_redis() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut redis = Redis::start();
    let redis_port = redis.port;
    let mixer = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || {
            start_mixers(&dir, redis_port, 5, 1)
                .pop()
                .expect("one mixer")
        }
    })
    .await
    .expect("join");
    let mut c = client(mixer.grpc).await;
    let codes = |c: &mut RateLimitServiceClient<Channel>, tenant: String, n: usize| {
        let mut c = c.clone();
        async move {
            let mut out = Vec::new();
            for _ in 0..n {
                let started = Instant::now();
                let answer = c
                    .should_rate_limit(tenant_request("shared", &[&tenant]))
                    .await
                    .expect("an answer, not an error")
                    .into_inner();
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "a request hung during the outage"
                );
                out.push(answer.overall_code);
            }
            out
        }
    };
    let before = codes(&mut c, "steady".into(), 8).await;
    assert_eq!(
        before
            .iter()
            .filter(|&&x| x == Code::OverLimit as i32)
            .count(),
        3,
        "{before:?}"
    );

    redis.kill();
    // Quota fails open by default: every request is allowed while Redis is gone.
    let during = codes(&mut c, "steady".into(), 10).await;
    assert!(during.iter().all(|&x| x == Code::Ok as i32), "{during:?}");
    let (_, _, metrics) = http_request(mixer.admin, "GET", "/metrics", &[]).expect("metrics");
    assert!(metrics.contains("mixer_handler_calls_total{handler=\"shared.ratelimitconfig.istio-system\",result=\"unavailable\",variety=\"quota\"}"), "outage not visible in metrics");

    redis.restart();
    let back = Instant::now();
    // Redis came back empty: the next 5 are allowed and the 6th is limited again.
    loop {
        let answers = codes(&mut c, format!("after-{}", back.elapsed().as_millis()), 6).await;
        if answers.last() == Some(&(Code::OverLimit as i32)) {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(3),
            "limiting did not come back: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(back.elapsed() < Duration::from_secs(3));
    assert!(mixer.terminate().success());
}

/// envoyproxy/ratelimit-format limits on `backend` (a `backend:` block's content).
fn descriptors_config(backend: &str) -> String {
    format!(
        r#"
apiVersion: config.istio.io/v1alpha2
kind: ratelimitconfig
metadata: {{name: multi, namespace: istio-system}}
spec:
  domain: multi
  backend: {backend}
  descriptors:
  - key: tenant
    rate_limit: {{unit: minute, requests_per_unit: 5}}
  - key: path
    rate_limit: {{unit: hour, requests_per_unit: 10}}
    descriptors:
    - key: method
      value: POST
      rate_limit: {{unit: hour, requests_per_unit: 2}}
"#
    )
}

fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        hits_addend: hits.map(|value| UInt64Value { value }),
        ..Default::default()
    }
}

/// (code, limit_remaining, requests_per_unit) of each descriptor, then the headers.
type Seen = (Vec<(i32, u32, u32)>, Vec<(String, String)>);

async fn ask(
    c: &mut RateLimitServiceClient<Channel>,
    d: Vec<RateLimitDescriptor>,
    hits: u32,
) -> Seen {
    let r = c
        .should_rate_limit(RateLimitRequest {
            domain: "multi".into(),
            descriptors: d,
            hits_addend: hits,
        })
        .await
        .expect("answer")
        .into_inner();
    assert_eq!(
        r.statuses.iter().any(|s| s.code == Code::OverLimit as i32),
        r.overall_code == Code::OverLimit as i32,
        "{r:?}"
    );
    let statuses = r
        .statuses
        .iter()
        .map(|s| {
            (
                s.code,
                s.limit_remaining,
                s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit),
            )
        })
        .collect();
    let headers = r
        .response_headers_to_add
        .iter()
        .filter(|h| h.key != "X-RateLimit-Reset" && h.key != "x-mixer-decision-id")
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    (statuses, headers)
}

fn limit_headers(limit: u32, remaining: u32) -> Vec<(String, String)> {
    vec![
        ("X-RateLimit-Limit".into(), limit.to_string()),
        ("X-RateLimit-Remaining".into(), remaining.to_string()),
    ]
}

async fn several_descriptors_and_hits_addend(backend: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("limits.yaml");
    std::fs::write(&path, descriptors_config(backend)).expect("write");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let mixer = Mixer::start(binary, &["--config", path.to_str().expect("utf-8")]);
    wait_ready(mixer.admin);
    let mut c = client(mixer.grpc).await;
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    let tenant = format!("t-{}", std::process::id());
    let both = |hits: Option<u64>| {
        vec![
            descriptor(&[("tenant", &tenant)], hits),
            descriptor(&[("path", "/x"), ("method", "POST")], None),
        ]
    };

    // The request's hits_addend (2) applies to each descriptor: tenant 5 -> 3, POST 2 -> 0.
    let seen = ask(&mut c, both(None), 2).await;
    assert_eq!(
        seen,
        (vec![(ok, 3, 5), (ok, 0, 2)], limit_headers(2, 0)),
        "{backend}"
    );
    // One more: the tenant still has room, POST is over, so the request is.
    let seen = ask(&mut c, both(None), 1).await;
    assert_eq!(
        seen,
        (vec![(ok, 2, 5), (over, 0, 2)], limit_headers(2, 0)),
        "{backend}"
    );
    // A descriptor's own hits_addend wins over the request's: 3 do not fit in the 2 left.
    let seen = ask(&mut c, both(Some(3)), 1).await;
    assert_eq!(seen.0[0], (over, 0, 5), "{backend}");
    // ...and nothing was charged for it: 2 still fit.
    let seen = ask(&mut c, vec![descriptor(&[("tenant", &tenant)], Some(2))], 0).await;
    assert_eq!(seen, (vec![(ok, 0, 5)], limit_headers(5, 0)), "{backend}");
    // The path alone has its own limit. As in envoyproxy/ratelimit, a limit applies only to
    // a descriptor whose every entry matched: GET is not configured under path, so the
    // two-entry descriptor has no limit, like one whose key no limit names.
    let seen = ask(
        &mut c,
        vec![
            descriptor(&[("path", "/x")], None),
            descriptor(&[("path", "/x"), ("method", "GET")], None),
            descriptor(&[("unlimited", "x")], None),
        ],
        0,
    )
    .await;
    assert_eq!(
        seen,
        (
            vec![(ok, 9, 10), (ok, 0, 0), (ok, 0, 0)],
            limit_headers(10, 9)
        ),
        "{backend}"
    );
    assert!(mixer.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_descriptors_and_hits_addend_in_memory() {
    several_descriptors_and_hits_addend("{adapter: memquota}").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_descriptors_and_hits_addend_in_redis() {
    let redis = Redis::start();
    let port = redis.port;
    let backend = format!(
        "{{adapter: redisquota, params: {{redisServerUrl: \"127.0.0.1:{port}\", callTimeout: 2s}}}}"
    );
    several_descriptors_and_hits_addend(&backend).await;
}
