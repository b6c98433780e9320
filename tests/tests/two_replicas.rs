//! The mixer as a fleet: two `mixer serve` processes sharing one real Redis (redisquota),
//! behind a real nginx acting as an HTTP/2 gRPC load balancer (`grpc_pass` to an upstream of
//! both), called by clients generated from Envoy's definitions (envoy-types) with ext_authz
//! and rate limit calls.
//!
//! - a rate limit is counted exactly once across both replicas;
//! - one replica killed (SIGKILL) mid-run: calls keep succeeding through the other, and only
//!   calls in flight when it died may fail;
//! - the replica restarted on its address rejoins: nginx sends it calls again.

#[path = "support/authz.rs"]
mod authz;

#[path = "support/tenant_limits.rs"]
mod tenant_limits;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use mixer_tests::nginx::{self, Nginx};
use mixer_tests::redis::redis_installed;
use mixer_tests::{free_addr, http_request};
use tonic::transport::Channel;

use authz::authz_request;
use mixer_tests::redis::Redis;
use tenant_limits::{tenant_limits, tenant_request};

/// Rate limits of domain `fleet` counted in the shared Redis, and the default config's
/// ext_authz rules (deny on `x-mixer-deny: true`, `x-mixer-user` for the upstream). The
/// Redis call budget is far above its 5 ms default: a slow moment on a busy machine would
/// otherwise fail a call open and spoil the exact count.
fn config(redis_port: u16, per_day: u32) -> String {
    let params = format!(
        r#"redisServerUrl: "127.0.0.1:{redis_port}", connectionPoolSize: 4, callTimeout: 2s"#
    );
    tenant_limits("fleet", &params, "day", per_day)
}

/// One replica: `mixer serve` on fixed addresses, so that it can be killed and restarted
/// where nginx's upstream expects it.
struct Replica {
    child: Option<Child>,
    config: PathBuf,
    grpc: SocketAddr,
    http: SocketAddr,
    admin: SocketAddr,
}

impl Replica {
    fn start(config: &Path) -> Replica {
        let mut replica = Replica {
            child: None,
            config: config.to_path_buf(),
            grpc: free_addr(),
            http: free_addr(),
            admin: free_addr(),
        };
        replica.restart();
        replica
    }

    fn restart(&mut self) {
        let child = Command::new(env!("CARGO_BIN_EXE_mixer-under-test"))
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .args(["--grpc-addr", &self.grpc.to_string()])
            .args(["--http-addr", &self.http.to_string()])
            .args(["--admin-addr", &self.admin.to_string()])
            .args(["--worker-threads", "1"])
            .stdout(Stdio::null())
            .spawn()
            .expect("start the mixer");
        self.child = Some(child);
        let start = Instant::now();
        while !matches!(
            http_request(self.admin, "GET", "/readyz", &[]),
            Ok((200, _, _))
        ) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "replica {} not ready",
                self.grpc
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Calls this replica answered, as its metrics count them: checks decided
    /// (`mixer_checks_total`, ext_authz) and quota handler calls
    /// (`mixer_handler_calls_total{variety="quota"}`, rate limits).
    fn served(&self) -> f64 {
        let Ok((_, _, body)) = http_request(self.admin, "GET", "/metrics", &[]) else {
            return 0.0;
        };
        body.lines()
            .filter(|l| {
                l.starts_with("mixer_checks_total{")
                    || (l.starts_with("mixer_handler_calls_total{")
                        && l.contains(r#"variety="quota""#))
            })
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// nginx as the gRPC load balancer: HTTP/2 without TLS in, `grpc_pass` round robin over the
/// replicas out. A replica that refuses a connection is passed over for 1 s
/// (`max_fails=1 fail_timeout=1s`) and the call is tried on the next one
/// (`grpc_next_upstream error`: only before the call was sent, so no call is made twice).
fn start_nginx(nginx: &Path, dir: &Path, listen: SocketAddr, replicas: &[SocketAddr]) -> Nginx {
    let servers: String = replicas
        .iter()
        .map(|r| format!("        server {r} max_fails=1 fail_timeout=1s;\n"))
        .collect();
    let http = format!(
        r#"
    upstream mixers {{
{servers}        keepalive 16;
        keepalive_requests 1000000;
    }}
    server {{
        listen {listen} http2;
        # nginx ends a client connection after 1000 requests by default (GOAWAY), which
        # would fail calls for a reason other than the one tested.
        keepalive_requests 1000000;
        location / {{
            grpc_pass grpc://mixers;
            grpc_next_upstream error timeout;
            grpc_connect_timeout 1s;
        }}
    }}"#
    );
    Nginx::start(nginx, dir, &http, &[listen])
}

/// The test's fleet: Redis, two replicas, nginx in front, one HTTP/2 channel to nginx.
struct Fleet {
    _dir: tempfile::TempDir,
    _redis: Redis,
    replicas: Vec<Replica>,
    _nginx: Nginx,
    channel: Channel,
}

async fn fleet(per_day: u32) -> Option<Fleet> {
    let nginx = nginx::binary()?;
    if !redis_installed() {
        return None;
    }
    let fleet = tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().expect("tempdir");
        let redis = Redis::start();
        let config = dir.path().join("config");
        std::fs::create_dir_all(&config).expect("mkdir");
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/default/config/default.yaml"),
            config.join("default.yaml"),
        )
        .expect("copy the default config");
        std::fs::write(
            config.join("limits.yaml"),
            self::config(redis.port, per_day),
        )
        .expect("write");
        let replicas = vec![Replica::start(&config), Replica::start(&config)];
        let listen = free_addr();
        let grpc: Vec<SocketAddr> = replicas.iter().map(|r| r.grpc).collect();
        let nginx = start_nginx(&nginx, dir.path(), listen, &grpc);
        (dir, redis, replicas, nginx, listen)
    })
    .await
    .expect("join");
    let (dir, redis, replicas, nginx, listen) = fleet;
    let channel = Channel::from_shared(format!("http://{listen}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect to nginx");
    Some(Fleet {
        _dir: dir,
        _redis: redis,
        replicas,
        _nginx: nginx,
        channel,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_is_counted_exactly_across_two_replicas_behind_nginx() {
    const LIMIT: u32 = 200;
    const SENT: usize = 600;
    const CONCURRENCY: usize = 8;
    let Some(fleet) = fleet(LIMIT).await else {
        return;
    };
    let calls_before: Vec<f64> = fleet.replicas.iter().map(Replica::served).collect();

    let ok = Arc::new(AtomicUsize::new(0));
    let over = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for worker in 0..CONCURRENCY {
        let mut client = RateLimitServiceClient::new(fleet.channel.clone());
        let (ok, over) = (ok.clone(), over.clone());
        tasks.push(tokio::spawn(async move {
            for _ in (worker..SENT).step_by(CONCURRENCY) {
                let answer = client
                    .should_rate_limit(tenant_request("fleet", &["acme"]))
                    .await
                    .expect("a rate limit answer through nginx")
                    .into_inner();
                match Code::try_from(answer.overall_code) {
                    Ok(Code::Ok) => ok.fetch_add(1, Ordering::SeqCst),
                    Ok(Code::OverLimit) => over.fetch_add(1, Ordering::SeqCst),
                    other => panic!("unexpected answer {other:?}: {answer:?}"),
                };
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker");
    }
    assert_eq!(
        ok.load(Ordering::SeqCst),
        LIMIT as usize,
        "exactly the limit is allowed across both replicas"
    );
    assert_eq!(over.load(Ordering::SeqCst), SENT - LIMIT as usize);

    // nginx spread the calls: each replica answered a share of them.
    for (replica, before) in fleet.replicas.iter().zip(calls_before) {
        let served = replica.served() - before;
        assert!(
            served >= (SENT / 10) as f64,
            "replica {} answered only {served} of {SENT} calls",
            replica.grpc
        );
    }

    // ext_authz through the same balancer: the mixer's answers, whichever replica gives them.
    let mut authz = AuthorizationClient::new(fleet.channel.clone());
    for _ in 0..10 {
        let allowed = authz
            .check(authz_request(&[("x-user", "bob")]))
            .await
            .expect("check")
            .into_inner();
        assert_eq!(allowed.status.map(|s| s.code), Some(0));
        let denied = authz
            .check(authz_request(&[("x-mixer-deny", "true")]))
            .await
            .expect("check")
            .into_inner();
        assert_eq!(denied.status.map(|s| s.code), Some(7), "PERMISSION_DENIED");
    }
}

/// What the callers saw while a replica was killed.
#[derive(Default)]
struct Outcomes {
    ok: AtomicUsize,
    /// Calls that failed, by whether they started before the killed replica was gone.
    failed_started_before_kill: AtomicUsize,
    failed_started_after_kill: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_costs_only_its_calls_in_flight_and_rejoins_when_restarted() {
    const CONCURRENCY: usize = 4;
    let Some(mut fleet) = fleet(1_000_000).await else {
        return;
    };
    // 0: both up; 1: the kill under way; 2: the killed replica reaped (its sockets closed).
    let phase = Arc::new(AtomicU8::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let outcomes = Arc::new(Outcomes::default());
    let mut tasks = Vec::new();
    for worker in 0..CONCURRENCY {
        let channel = fleet.channel.clone();
        let (phase, stop, outcomes) = (phase.clone(), stop.clone(), outcomes.clone());
        tasks.push(tokio::spawn(async move {
            let mut ratelimit = RateLimitServiceClient::new(channel.clone());
            let mut authz = AuthorizationClient::new(channel);
            let mut n = 0u64;
            let t0 = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let started_after_kill = phase.load(Ordering::SeqCst) == 2;
                // Half ext_authz, half rate limit calls.
                let result = if (n + worker as u64).is_multiple_of(2) {
                    authz
                        .check(authz_request(&[("x-user", "bob")]))
                        .await
                        .map(|r| r.into_inner().status.map(|s| s.code) == Some(0))
                } else {
                    ratelimit
                        .should_rate_limit(tenant_request("fleet", &["steady"]))
                        .await
                        .map(|r| r.into_inner().overall_code == Code::Ok as i32)
                };
                match result {
                    Ok(true) => {
                        outcomes.ok.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(false) => panic!("a call was answered, but not allowed"),
                    Err(status) => {
                        eprintln!(
                            "call failed (started after the kill: {started_after_kill}, at {:?}): {status}",
                            t0.elapsed()
                        );
                        if started_after_kill {
                            outcomes
                                .failed_started_after_kill
                                .fetch_add(1, Ordering::SeqCst);
                        } else {
                            outcomes
                                .failed_started_before_kill
                                .fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            }
        }));
    }

    tokio::time::sleep(Duration::from_secs(2)).await;
    let ok_before_kill = outcomes.ok.load(Ordering::SeqCst);
    assert!(
        ok_before_kill > 50,
        "calls flow before the kill: {ok_before_kill}"
    );
    // SIGKILL: no drain, connections reset with calls on them.
    let survivor_before = fleet.replicas[1].served();
    phase.store(1, Ordering::SeqCst);
    fleet.replicas[0].kill();
    phase.store(2, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ok_after_kill = outcomes.ok.load(Ordering::SeqCst) - ok_before_kill;
    assert!(
        ok_after_kill > 50,
        "calls keep succeeding through the other replica: {ok_after_kill} in 3 s"
    );
    assert!(
        fleet.replicas[1].served() - survivor_before >= ok_after_kill as f64 * 0.9,
        "the survivor answered the calls made after the kill"
    );

    // Restarted where nginx expects it, it gets calls again once nginx's fail_timeout (1 s)
    // has passed.
    let mut dead = fleet.replicas.remove(0);
    tokio::task::spawn_blocking(move || {
        dead.restart();
        dead
    })
    .await
    .map(|replica| fleet.replicas.insert(0, replica))
    .expect("restart");
    let rejoined = &fleet.replicas[0];
    let start = Instant::now();
    let first = rejoined.served();
    while rejoined.served() - first < 20.0 {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the restarted replica got no calls from nginx"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await.expect("worker");
    }

    // Only calls in flight on the killed replica may fail: at most one per caller, each
    // caller having one call at a time. Calls started after the kill go elsewhere.
    let before = outcomes.failed_started_before_kill.load(Ordering::SeqCst);
    let after = outcomes.failed_started_after_kill.load(Ordering::SeqCst);
    assert!(
        before <= CONCURRENCY,
        "{before} calls failed that were started before the kill; at most {CONCURRENCY} were in flight"
    );
    assert_eq!(after, 0, "calls started after the kill failed");
}
