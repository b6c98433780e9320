//! `mixer serve --shared-cache`: three real mixer processes sharing one real redis-server,
//! checks sent round robin over them through forward-auth (`/check`), decided by a
//! listchecker whose calls each replica counts in `mixer_handler_calls_total`.
//!
//! - 10 distinct requests, each sent to every replica: 10 adapter calls with the shared
//!   cache, 30 without; the decisions are the same with no cache, per-replica caches and the
//!   shared one (differential);
//! - a verdict with a use count of 10 is served exactly 10 times from the caches in all;
//! - after a config change no entry of the old config is served;
//! - Redis killed: same decisions, errors counted, each check within a bounded time; Redis
//!   back: the shared tier is used again by itself;
//! - the same sharing and use count on a three-node Redis Cluster;
//! - the same sharing over TLS (`rediss://`) with a redis-server serving TLS only.

#[path = "support/redis.rs"]
mod redis;
#[path = "support/redis_cluster.rs"]
mod redis_cluster;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, http_request};
use redis::Redis;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

fn redis_installed() -> bool {
    let ok = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let why = "redis-server is not installed: apt-get install -y redis-server (.ci/run does)";
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
    }
    ok
}

/// Users `u0`..`u4` allowed, the others denied; verdicts valid a minute for `uses` uses.
fn config(allowed: &[&str], uses: u32) -> String {
    format!(
        r#"
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: users, namespace: istio-system}}
spec:
  compiledAdapter: listchecker
  params: {{overrides: {allowed:?}, blacklist: false, cachingInterval: 60s, cachingUseCount: {uses}}}
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {{name: user, namespace: istio-system}}
spec:
  compiledTemplate: listentry
  params: {{value: 'request.headers["x-user"] | "nobody"'}}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {{name: users, namespace: istio-system}}
spec:
  actions: [{{handler: users.handler, instances: [user.instance]}}]
"#
    )
}

const ALLOWED: &[&str] = &["u0", "u1", "u2", "u3", "u4"];

struct Fleet {
    replicas: Vec<Mixer>,
    _dir: tempfile::TempDir,
    config: PathBuf,
}

impl Fleet {
    /// Three replicas on one config file, with `extra` flags.
    fn start(config_text: &str, extra: &[&str]) -> Fleet {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, config_text).expect("write config");
        let path = config.to_str().expect("utf-8 path").to_string();
        let mut args = vec!["--config", path.as_str(), "--worker-threads", "1"];
        args.extend_from_slice(extra);
        let replicas: Vec<Mixer> = (0..3).map(|_| Mixer::start(binary(), &args)).collect();
        for r in &replicas {
            r.wait_ready(Duration::from_secs(20));
        }
        Fleet {
            replicas,
            _dir: dir,
            config,
        }
    }

    /// The status forward-auth answers for `user` on replica `i`.
    fn check(&self, i: usize, user: &str) -> u16 {
        let r = &self.replicas[i % self.replicas.len()];
        let (status, _, _) = http_request(r.http, "GET", "/check", &[("x-user", user)])
            .expect("forward-auth answers");
        status
    }

    /// Sum over the replicas of the lines of `/metrics` that start with `prefix`.
    fn sum(&self, prefix: &str) -> f64 {
        self.sum_where(prefix, "")
    }

    /// [`Fleet::sum`] of the lines that also hold `part`.
    fn sum_where(&self, prefix: &str, part: &str) -> f64 {
        self.replicas
            .iter()
            .map(|r| {
                let (_, _, body) = http_request(r.admin, "GET", "/metrics", &[]).expect("metrics");
                body.lines()
                    .filter(|l| l.starts_with(prefix) && l.contains(part))
                    .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
                    .sum::<f64>()
            })
            .sum()
    }

    /// Listchecker calls made by all replicas.
    fn adapter_calls(&self) -> f64 {
        self.sum_where("mixer_handler_calls_total{", "variety=\"check\"")
    }

    /// Waits until every replica's shared tier answered a lookup: a cluster connection is
    /// made in the background, and checks before it are decided without the tier.
    fn connected(&self) {
        for (i, r) in self.replicas.iter().enumerate() {
            let start = Instant::now();
            let answered = || {
                r.metric("mixer_check_cache_shared_misses_total")
                    .unwrap_or(0.0)
                    + r.metric("mixer_check_cache_shared_hits_total")
                        .unwrap_or(0.0)
            };
            let mut n = 0;
            while answered() < 1.0 {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "replica {i} never reached Redis"
                );
                n += 1;
                self.check(i, &format!("warm-up-{i}-{n}"));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Each of 10 users sent to every replica, replicas in turn: the statuses in order.
    fn round_robin(&self) -> Vec<u16> {
        let mut statuses = Vec::new();
        for round in 0..3 {
            for u in 0..10 {
                statuses.push(self.check(u + round, &format!("u{u}")));
            }
        }
        statuses
    }
}

fn shared(redis: &Redis) -> String {
    format!("redis://127.0.0.1:{}", redis.port)
}

#[test]
fn replicas_share_verdicts_and_decide_as_without_the_shared_cache() {
    if !redis_installed() {
        return;
    }
    let redis = Redis::start();
    let url = shared(&redis);
    // A slow moment on a busy machine must not make a lookup miss: the budget is raised.
    let with_shared = Fleet::start(
        &config(ALLOWED, 10_000),
        &["--shared-cache", &url, "--shared-cache-timeout", "1s"],
    );
    let per_replica = Fleet::start(&config(ALLOWED, 10_000), &[]);
    let uncached = Fleet::start(&config(ALLOWED, 10_000), &["--check-cache-size", "0"]);

    let shared_statuses = with_shared.round_robin();
    let local_statuses = per_replica.round_robin();
    let uncached_statuses = uncached.round_robin();
    let expected: Vec<u16> = (0..30)
        .map(|i| if i % 10 < 5 { 200 } else { 403 })
        .collect();
    assert_eq!(uncached_statuses, expected);
    assert_eq!(
        local_statuses, expected,
        "per-replica caches changed a decision"
    );
    assert_eq!(
        shared_statuses, expected,
        "the shared cache changed a decision"
    );

    assert_eq!(
        per_replica.adapter_calls(),
        30.0,
        "each replica asks once per request"
    );
    assert_eq!(
        with_shared.adapter_calls(),
        10.0,
        "one adapter call per distinct request across the three replicas"
    );
    assert_eq!(with_shared.sum("mixer_check_cache_shared_hits_total"), 20.0);
    assert_eq!(
        with_shared.sum("mixer_check_cache_shared_errors_total"),
        0.0
    );
}

#[test]
fn a_use_count_holds_across_replicas() {
    if !redis_installed() {
        return;
    }
    let redis = Redis::start();
    let url = shared(&redis);
    let fleet = Fleet::start(
        &config(ALLOWED, 10),
        &["--shared-cache", &url, "--shared-cache-timeout", "1s"],
    );
    // The first check is evaluated; its verdict then serves exactly 10 more, whichever
    // replica they reach.
    for i in 0..11 {
        assert_eq!(fleet.check(i, "u1"), 200);
        assert_eq!(
            fleet.adapter_calls(),
            1.0,
            "check {i} asked the adapter again"
        );
    }
    assert_eq!(fleet.check(11, "u1"), 200);
    assert_eq!(
        fleet.adapter_calls(),
        2.0,
        "the 11th use was served from a cache"
    );
    assert_eq!(
        fleet.sum("mixer_check_cache_shared_uses_leased_total"),
        10.0
    );
    assert_eq!(fleet.sum("mixer_check_cache_shared_hits_total"), 10.0);
}

#[test]
fn a_config_change_shares_nothing_with_the_old_config() {
    if !redis_installed() {
        return;
    }
    let redis = Redis::start();
    let url = shared(&redis);
    let fleet = Fleet::start(
        &config(ALLOWED, 10_000),
        &["--shared-cache", &url, "--shared-cache-timeout", "1s"],
    );
    assert_eq!(fleet.round_robin()[0], 200);
    let calls = fleet.adapter_calls();
    // u0 is denied now: a verdict of the old config served would allow it.
    std::fs::write(&fleet.config, config(&["u1"], 10_000)).expect("rewrite config");
    let start = Instant::now();
    while fleet.sum("mixer_config_reloads_total{result=\"success\"}") < 6.0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "replicas did not reload"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in 0..3 {
        assert_eq!(
            fleet.check(i, "u0"),
            403,
            "replica {i} served the old config's verdict"
        );
        assert_eq!(fleet.check(i, "u1"), 200);
    }
    // Two new requests: one call each across the three replicas.
    assert_eq!(fleet.adapter_calls(), calls + 2.0);
}

#[test]
fn redis_down_changes_no_decision_and_the_tier_comes_back() {
    if !redis_installed() {
        return;
    }
    let mut redis = Redis::start();
    let url = shared(&redis);
    // Verdicts valid for one use: every check reaches the shared tier.
    let fleet = Fleet::start(&config(ALLOWED, 1), &["--shared-cache", &url]);
    let before = fleet.round_robin();
    redis.kill();
    let start = Instant::now();
    let during = fleet.round_robin();
    let took = start.elapsed();
    assert_eq!(during, before, "decisions changed with Redis down");
    assert!(
        took < Duration::from_secs(10),
        "30 checks with Redis down took {took:?}"
    );
    assert!(fleet.sum("mixer_check_cache_shared_errors_total") > 0.0);
    redis.restart();
    let stores = fleet.sum("mixer_check_cache_shared_stores_total");
    let start = Instant::now();
    loop {
        assert_eq!(fleet.round_robin(), before);
        if fleet.sum("mixer_check_cache_shared_stores_total") > stores {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the shared tier did not come back after Redis restarted"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn shared_cache_without_the_in_process_cache_is_refused() {
    let out = Command::new(binary())
        .args([
            "serve",
            "--shared-cache",
            "redis://127.0.0.1:1",
            "--check-cache-size",
            "0",
        ])
        .output()
        .expect("run mixer");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--check-cache-size 0"), "{err}");
    let out = Command::new(binary())
        .args(["serve", "--shared-cache", "memcached://127.0.0.1:1"])
        .output()
        .expect("run mixer");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("redis://HOST:PORT"), "{err}");
}

#[test]
fn replicas_share_verdicts_on_a_redis_cluster() {
    if !redis_installed() {
        return;
    }
    let cluster = redis_cluster::RedisCluster::start();
    let url = cluster.url();
    let flags = [
        "--shared-cache",
        url.as_str(),
        "--shared-cache-timeout",
        "1s",
    ];
    let fleet = Fleet::start(&config(ALLOWED, 10_000), &flags);
    fleet.connected();
    let calls = fleet.adapter_calls();
    let expected: Vec<u16> = (0..30)
        .map(|i| if i % 10 < 5 { 200 } else { 403 })
        .collect();
    assert_eq!(fleet.round_robin(), expected);
    assert_eq!(fleet.adapter_calls() - calls, 10.0);
    let per_node = cluster.keys_per_node();
    assert!(
        per_node.iter().filter(|&&n| n > 0).count() >= 2,
        "entries did not spread over the nodes: {per_node:?}"
    );

    let limited = Fleet::start(&config(ALLOWED, 10), &flags);
    limited.connected();
    let calls = limited.adapter_calls();
    for i in 0..11 {
        assert_eq!(limited.check(i, "u2"), 200);
    }
    assert_eq!(
        limited.adapter_calls() - calls,
        1.0,
        "uses beyond the first evaluation"
    );
    assert_eq!(limited.check(11, "u2"), 200);
    assert_eq!(
        limited.adapter_calls() - calls,
        2.0,
        "the 11th use was served"
    );
}

#[test]
fn replicas_share_verdicts_over_tls() {
    if !redis_installed() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("self-signed");
    let (cert_file, key_file) = (dir.path().join("redis.crt"), dir.path().join("redis.key"));
    std::fs::write(&cert_file, cert.pem()).expect("write cert");
    std::fs::write(&key_file, key.serialize_pem()).expect("write key");
    let port = mixer_tests::free_addr().port();
    let mut server = Command::new("redis-server")
        .args(["--port", "0", "--tls-port", &port.to_string()])
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--tls-cert-file")
        .arg(&cert_file)
        .arg("--tls-key-file")
        .arg(&key_file)
        .args(["--tls-auth-clients", "no"])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server");
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "redis (TLS) did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The certificate is the test's own, self-signed: `#insecure` skips its check.
    let url = format!("rediss://127.0.0.1:{port}/#insecure");
    let fleet = Fleet::start(
        &config(ALLOWED, 10_000),
        &["--shared-cache", &url, "--shared-cache-timeout", "1s"],
    );
    let statuses = fleet.round_robin();
    let _ = server.kill();
    let _ = server.wait();
    let expected: Vec<u16> = (0..30)
        .map(|i| if i % 10 < 5 { 200 } else { 403 })
        .collect();
    assert_eq!(statuses, expected);
    assert_eq!(fleet.sum("mixer_check_cache_shared_errors_total"), 0.0);
    assert_eq!(
        fleet.adapter_calls(),
        10.0,
        "one call per distinct request over TLS"
    );
}
