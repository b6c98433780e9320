//! Rate limiting across replicas: two mixer processes sharing one real Redis enforce one
//! limit; Redis going away applies the fail policy (quota fails open), and limiting comes back
//! by itself when Redis does.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use mixer_tests::{Mixer, free_addr, http_request};
use tonic::transport::Channel;

struct Redis {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl Redis {
    fn start(port: u16, dir: &Path) -> Redis {
        let mut redis = Redis {
            child: None,
            port,
            dir: dir.to_path_buf(),
        };
        redis.restart();
        redis
    }

    fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (.ci/run installs it)");
        self.child = Some(child);
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

fn config(redis_port: u16, per_day: u32) -> String {
    format!(
        r#"
apiVersion: config.istio.io/v1alpha2
kind: ratelimitconfig
metadata: {{name: shared, namespace: istio-system}}
spec:
  domain: shared
  backend:
    adapter: redisquota
    params: {{redisServerUrl: "127.0.0.1:{redis_port}", connectionPoolSize: 4}}
  descriptors:
  - key: tenant
    rate_limit: {{unit: day, requests_per_unit: {per_day}}}
"#
    )
}

fn wait_ready(admin: SocketAddr) {
    let start = Instant::now();
    while !matches!(http_request(admin, "GET", "/readyz", &[]), Ok((200, _, _))) {
        assert!(start.elapsed() < Duration::from_secs(10), "mixer not ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn request(tenant: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "shared".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "tenant".into(),
                value: tenant.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    }
}

async fn client(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
}

fn start_mixers(dir: &Path, redis_port: u16, per_day: u32, n: usize) -> Vec<Mixer> {
    let path = dir.join("limits.yaml");
    std::fs::write(&path, config(redis_port, per_day)).expect("write");
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
    let redis_port = free_addr().port();
    let _redis = Redis::start(redis_port, dir.path());
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
                        .should_rate_limit(request(&tenant))
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
            .should_rate_limit(request(&fresh))
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
    let redis_port = free_addr().port();
    let mut redis = Redis::start(redis_port, dir.path());
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
                    .should_rate_limit(request(&tenant))
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

    redis.stop();
    // Quota fails open by default: every request is allowed while Redis is gone.
    let during = codes(&mut c, "steady".into(), 10).await;
    assert!(during.iter().all(|&x| x == Code::Ok as i32), "{during:?}");
    let (_, _, metrics) = http_request(mixer.admin, "GET", "/metrics", &[]).expect("metrics");
    assert!(metrics.contains("mixer_handler_calls_total{handler=\"shared.istio-system\",result=\"unavailable\",variety=\"quota\"}"), "outage not visible in metrics");

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
