//! `mixer serve --shared-cache`: three real mixer processes sharing one real redis-server,
//! checks sent round robin over them through forward-auth (`/check`), decided by an
//! out-of-process adapter (built on the adapter SDK, served by this test process over gRPC)
//! that counts every call it answers.
//!
//! - 10 distinct requests, each sent to every replica: 10 adapter calls with the shared
//!   cache, 30 without; the decisions are the same with no cache, per-replica caches and the
//!   shared one (differential), over the remote adapter and over the built-in listchecker;
//! - a verdict with a use count of 10 is served exactly 10 times from the caches in all;
//! - after a config change no entry of the old config is served;
//! - Redis killed: same decisions, errors counted, each check within a bounded time; Redis
//!   back: the shared tier is used again by itself;
//! - shapes (which attributes a decision read) are kept in process: a replica learns one
//!   another replica wrote within `--shared-cache-shapes-refresh`, and a miss costs no read
//!   of the shape set in between;
//! - the same sharing and use count on a three-node Redis Cluster;
//! - the same sharing over TLS (`rediss://`) with a redis-server serving TLS only, its
//!   certificate checked against a CA file (`--shared-cache-ca`) or not at all (`#insecure`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mixer_adapter_sdk::api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, Handler, ParamError, Stability,
};
use mixer_adapter_sdk::model::{
    CheckResult, Code, Instance, ListEntryInstance, Status, Template, Value,
};
use mixer_adapter_sdk::{Server, async_trait};
use mixer_tests::redis::Redis;
use mixer_tests::redis::redis_installed;
use mixer_tests::{Mixer, http_request};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// The out-of-process adapter: a `listentry` handler allowing the values in
/// `params.allowed`, its answers valid a minute for `params.uses` uses; it counts the calls
/// its handlers answer, per value.
#[derive(Default)]
struct Counting {
    calls: Arc<Mutex<HashMap<String, u64>>>,
}

static COUNTING: AdapterInfo = AdapterInfo {
    name: "counting",
    description: "allows params.allowed and counts the calls",
    templates: &[Template::ListEntry],
    cacheable: true,
    stability: Stability::Alpha,
};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CountingConfig {
    allowed: Vec<String>,
    #[serde(default = "default_uses")]
    uses: i32,
}

fn default_uses() -> i32 {
    1000
}

impl Adapter for Counting {
    type Config = CountingConfig;
    type Compiled = CountingConfig;

    fn info(&self) -> &AdapterInfo {
        &COUNTING
    }

    fn compile(&self, config: CountingConfig) -> Result<CountingConfig, Vec<ParamError>> {
        Ok(config)
    }

    fn build(
        &self,
        config: &CountingConfig,
        _: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(CountingHandler {
            allowed: config.allowed.clone(),
            uses: config.uses,
            calls: self.calls.clone(),
        }))
    }
}

struct CountingHandler {
    allowed: Vec<String>,
    uses: i32,
    calls: Arc<Mutex<HashMap<String, u64>>>,
}

impl Handler for CountingHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for CountingHandler {
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        let value = ListEntryInstance::of(instance)
            .and_then(|i| i.value)
            .and_then(Value::as_str)
            .unwrap_or_default();
        *self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(value.to_owned())
            .or_default() += 1;
        let mut answer = CheckResult::ok(Duration::from_secs(60), self.uses);
        if !self.allowed.iter().any(|a| a == value) {
            answer.status = Status::new(Code::PermissionDenied, format!("{value} is not allowed"));
        }
        Ok(answer)
    }
}

/// [`Counting`] served over gRPC on a loopback port, on a runtime of its own: a process the
/// mixers reach only through the adapter protocol, as they would a remote adapter.
struct RemoteAdapter {
    addr: SocketAddr,
    counting: Arc<Counting>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl RemoteAdapter {
    fn start() -> RemoteAdapter {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind the adapter");
        let addr = listener.local_addr().expect("adapter address");
        let counting = Arc::new(Counting::default());
        let server = Server::from_arc(counting.clone());
        runtime.spawn(async move {
            let _ = server
                .serve_with_shutdown(listener, std::future::pending())
                .await;
        });
        RemoteAdapter {
            addr,
            counting,
            runtime: Some(runtime),
        }
    }

    /// Calls answered, over every value.
    fn calls(&self) -> u64 {
        self.counts().values().sum()
    }

    fn counts(&self) -> HashMap<String, u64> {
        self.counting
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for RemoteAdapter {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// What decides the checks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// A [`RemoteAdapter`] of the fleet's own.
    Remote,
    /// The built-in listchecker.
    Listchecker,
}

/// `allowed` users allowed, the others denied, by `backend` (at `remote` for a remote one);
/// verdicts valid a minute for `uses` uses. A request naming no user (`x-user`) is decided
/// on its group (`x-group`): a second shape, which reads both headers.
fn config(backend: Backend, remote: Option<SocketAddr>, allowed: &[&str], uses: u32) -> String {
    let handler = match (backend, remote) {
        (Backend::Remote, Some(addr)) => format!(
            "adapter: counting\n  connection: {{address: '{addr}', timeout: 2s}}\n  params: {{allowed: {allowed:?}, uses: {uses}}}"
        ),
        _ => format!(
            "compiledAdapter: listchecker\n  params: {{overrides: {allowed:?}, blacklist: false, cachingInterval: 60s, cachingUseCount: {uses}}}"
        ),
    };
    format!(
        r#"
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: users, namespace: istio-system}}
spec:
  {handler}
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {{name: user, namespace: istio-system}}
spec:
  compiledTemplate: listentry
  params: {{value: 'request.headers["x-user"] | request.headers["x-group"] | "nobody"'}}
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
    backend: Backend,
    adapter: Option<RemoteAdapter>,
    _dir: tempfile::TempDir,
    config: PathBuf,
}

impl Fleet {
    /// Three replicas on one config file allowing `allowed` with `uses` uses, decided by a
    /// remote adapter of their own, with `extra` flags.
    fn start(allowed: &[&str], uses: u32, extra: &[&str]) -> Fleet {
        Fleet::start_with(Backend::Remote, allowed, uses, extra)
    }

    /// [`Fleet::start`] with the checks decided by `backend`.
    fn start_with(backend: Backend, allowed: &[&str], uses: u32, extra: &[&str]) -> Fleet {
        let adapter = (backend == Backend::Remote).then(RemoteAdapter::start);
        let dir = tempfile::tempdir().expect("temp dir");
        let config_file = dir.path().join("config.yaml");
        let text = config(backend, adapter.as_ref().map(|a| a.addr), allowed, uses);
        std::fs::write(&config_file, text).expect("write config");
        let path = config_file.to_str().expect("utf-8 path").to_string();
        let mut args = vec!["--config", path.as_str(), "--worker-threads", "1"];
        args.extend_from_slice(extra);
        let replicas: Vec<Mixer> = (0..3).map(|_| Mixer::start(binary(), &args)).collect();
        for r in &replicas {
            r.wait_ready(Duration::from_secs(20));
        }
        Fleet {
            replicas,
            backend,
            adapter,
            _dir: dir,
            config: config_file,
        }
    }

    /// Rewrites the config file: `allowed` and `uses` on the same backend.
    fn rewrite(&self, allowed: &[&str], uses: u32) {
        let text = config(
            self.backend,
            self.adapter.as_ref().map(|a| a.addr),
            allowed,
            uses,
        );
        std::fs::write(&self.config, text).expect("rewrite config");
    }

    /// The status forward-auth answers for `user` on replica `i`.
    fn check(&self, i: usize, user: &str) -> u16 {
        self.check_with(i, &[("x-user", user)])
    }

    /// The status forward-auth answers for `headers` on replica `i`.
    fn check_with(&self, i: usize, headers: &[(&str, &str)]) -> u16 {
        let r = &self.replicas[i % self.replicas.len()];
        let (status, _, _) =
            http_request(r.http, "GET", "/check", headers).expect("forward-auth answers");
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

    /// Check handler calls, as the replicas count them (`mixer_handler_calls_total`).
    fn handler_calls(&self) -> f64 {
        self.sum_where("mixer_handler_calls_total{", "variety=\"check\"")
    }

    /// Calls that reached the backend: as the remote adapter counted them, or as the
    /// replicas counted their listchecker calls.
    fn adapter_calls(&self) -> f64 {
        match &self.adapter {
            // Exact below 2^53.
            Some(a) => a.calls() as f64,
            None => self.handler_calls(),
        }
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

/// The shared cache's flags on `redis`, with a budget raised so that a slow moment on a busy
/// machine does not make a lookup miss.
fn shared_flags(url: &str) -> Vec<&str> {
    vec!["--shared-cache", url, "--shared-cache-timeout", "1s"]
}

/// The statuses of [`Fleet::round_robin`] when `u0`..`u4` are allowed.
fn expected_statuses() -> Vec<u16> {
    (0..30)
        .map(|i| if i % 10 < 5 { 200 } else { 403 })
        .collect()
}

#[test]
fn a_remote_adapter_is_called_once_per_distinct_request_across_the_replicas() {
    if !redis_installed() {
        return;
    }
    let redis = Redis::start();
    let url = shared(&redis);
    let with_shared = Fleet::start(ALLOWED, 10_000, &shared_flags(&url));
    let per_replica = Fleet::start(ALLOWED, 10_000, &[]);
    let uncached = Fleet::start(ALLOWED, 10_000, &["--check-cache-size", "0"]);

    let shared_statuses = with_shared.round_robin();
    let local_statuses = per_replica.round_robin();
    let uncached_statuses = uncached.round_robin();
    assert_eq!(uncached_statuses, expected_statuses());
    assert_eq!(
        local_statuses, uncached_statuses,
        "per-replica caches changed a decision"
    );
    assert_eq!(
        shared_statuses, uncached_statuses,
        "the shared cache changed a decision"
    );

    // The adapter's own count, per request: 3 without the shared tier, 1 with it.
    let once: HashMap<String, u64> = (0..10).map(|u| (format!("u{u}"), 1)).collect();
    let thrice: HashMap<String, u64> = (0..10).map(|u| (format!("u{u}"), 3)).collect();
    let adapter = |f: &Fleet| f.adapter.as_ref().expect("remote").counts();
    assert_eq!(
        adapter(&uncached),
        thrice,
        "no cache: every check is a call"
    );
    assert_eq!(adapter(&per_replica), thrice, "each replica asks once");
    assert_eq!(
        adapter(&with_shared),
        once,
        "one adapter call per distinct request across the three replicas"
    );
    // The replicas count the calls they made alike.
    assert_eq!(with_shared.handler_calls(), 10.0);
    assert_eq!(per_replica.handler_calls(), 30.0);
    assert_eq!(with_shared.sum("mixer_check_cache_shared_hits_total"), 20.0);
    assert_eq!(
        with_shared.sum("mixer_check_cache_shared_errors_total"),
        0.0
    );
}

#[test]
fn the_built_in_listchecker_decides_alike_with_every_cache() {
    if !redis_installed() {
        return;
    }
    let redis = Redis::start();
    let url = shared(&redis);
    let fleet = |extra: &[&str]| Fleet::start_with(Backend::Listchecker, ALLOWED, 10_000, extra);
    let with_shared = fleet(&shared_flags(&url));
    let per_replica = fleet(&[]);
    let uncached = fleet(&["--check-cache-size", "0"]);
    assert_eq!(uncached.round_robin(), expected_statuses());
    assert_eq!(per_replica.round_robin(), expected_statuses());
    assert_eq!(with_shared.round_robin(), expected_statuses());
    assert_eq!(uncached.adapter_calls(), 30.0);
    assert_eq!(per_replica.adapter_calls(), 30.0);
    assert_eq!(with_shared.adapter_calls(), 10.0);
}

#[test]
fn a_use_count_holds_across_replicas() {
    if !redis_installed() {
        return;
    }
    let redis = Redis::start();
    let url = shared(&redis);
    let fleet = Fleet::start(ALLOWED, 10, &shared_flags(&url));
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
    let fleet = Fleet::start(ALLOWED, 10_000, &shared_flags(&url));
    assert_eq!(fleet.round_robin()[0], 200);
    let calls = fleet.adapter_calls();
    // u0 is denied now: a verdict of the old config served would allow it.
    fleet.rewrite(&["u1"], 10_000);
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
    let fleet = Fleet::start(ALLOWED, 1, &["--shared-cache", &url]);
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
    let cluster = mixer_tests::redis_cluster::RedisCluster::start();
    let url = cluster.url();
    let flags = [
        "--shared-cache",
        url.as_str(),
        "--shared-cache-timeout",
        "1s",
    ];
    let fleet = Fleet::start(ALLOWED, 10_000, &flags);
    fleet.connected();
    let calls = fleet.adapter_calls();
    let expected = expected_statuses();
    assert_eq!(fleet.round_robin(), expected);
    assert_eq!(fleet.adapter_calls() - calls, 10.0);
    let per_node = cluster.keys_per_node();
    assert!(
        per_node.iter().filter(|&&n| n > 0).count() >= 2,
        "entries did not spread over the nodes: {per_node:?}"
    );

    let limited = Fleet::start(ALLOWED, 10, &flags);
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

/// A certificate authority made for one test, and a certificate it signed for `localhost`
/// and 127.0.0.1 with its key, all in PEM.
fn tls_files(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA");
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
    params
        .subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &ca).expect("sign");
    let files = (
        dir.join(format!("{name}-ca.crt")),
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&files.0, ca.as_ref().pem()).expect("write CA");
    std::fs::write(&files.1, cert.pem()).expect("write cert");
    std::fs::write(&files.2, key.serialize_pem()).expect("write key");
    files
}

/// A redis-server serving TLS only (no plain port) with `cert` and `key`; killed when dropped.
struct TlsRedis {
    child: std::process::Child,
    port: u16,
}

impl TlsRedis {
    fn start(dir: &Path, cert: &Path, key: &Path) -> TlsRedis {
        let port = mixer_tests::free_addr().port();
        let child = Command::new("redis-server")
            .args(["--port", "0", "--tls-port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--tls-cert-file")
            .arg(cert)
            .arg("--tls-key-file")
            .arg(key)
            .args(["--tls-auth-clients", "no"])
            .arg("--dir")
            .arg(dir)
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
        TlsRedis { child, port }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn replicas_share_verdicts_over_tls() {
    if !redis_installed() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (ca, cert, key) = tls_files(dir.path(), "redis");
    let (other_ca, _, _) = tls_files(dir.path(), "other");
    let server = TlsRedis::start(dir.path(), &cert, &key);
    let port = server.port;
    let ca = ca.to_str().expect("utf-8 path");
    let other_ca = other_ca.to_str().expect("utf-8 path");

    // The server's certificate chains to the CA file given: shared.
    let url = format!("rediss://127.0.0.1:{port}");
    let mut flags = shared_flags(&url);
    flags.extend(["--shared-cache-ca", ca]);
    let checked = Fleet::start(ALLOWED, 10_000, &flags);
    assert_eq!(checked.round_robin(), expected_statuses());
    assert_eq!(checked.sum("mixer_check_cache_shared_errors_total"), 0.0);
    assert_eq!(
        checked.adapter_calls(),
        10.0,
        "one call per distinct request over TLS, the certificate checked"
    );

    // Another CA: the handshake fails, nothing is shared, no decision changes.
    let mut flags = shared_flags(&url);
    flags.extend(["--shared-cache-ca", other_ca]);
    let refused = Fleet::start(ALLOWED, 10_000, &flags);
    assert_eq!(refused.round_robin(), expected_statuses());
    assert!(refused.sum("mixer_check_cache_shared_errors_total") > 0.0);
    assert_eq!(refused.sum("mixer_check_cache_shared_hits_total"), 0.0);
    assert_eq!(
        refused.adapter_calls(),
        30.0,
        "a certificate of an unknown CA was trusted"
    );

    // Not checked at all (`#insecure`): shared too.
    let url = format!("rediss://127.0.0.1:{port}/#insecure");
    let insecure = Fleet::start(ALLOWED, 10_000, &shared_flags(&url));
    assert_eq!(insecure.round_robin(), expected_statuses());
    assert_eq!(insecure.sum("mixer_check_cache_shared_errors_total"), 0.0);
    assert_eq!(insecure.adapter_calls(), 10.0);
}

#[test]
fn a_ca_file_needs_a_checked_tls_address() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ca, _, _) = tls_files(dir.path(), "redis");
    let ca = ca.to_str().expect("utf-8 path");
    for (url, why) in [
        ("redis://127.0.0.1:1", "not a TLS address"),
        (
            "rediss://127.0.0.1:1/#insecure",
            "skips the certificate check",
        ),
    ] {
        let out = Command::new(binary())
            .args(["serve", "--shared-cache", url, "--shared-cache-ca", ca])
            .output()
            .expect("run mixer");
        assert!(!out.status.success(), "{url} with a CA file was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{url}: {err}");
    }
}

#[test]
fn shapes_are_kept_in_process_and_shared_within_the_refresh() {
    if !redis_installed() {
        return;
    }
    let redis = Redis::start();
    let url = shared(&redis);
    let group = |g: &'static str| [("x-group", g)];

    // The set is read by a replica's first lookup, then not for an hour.
    let mut flags = shared_flags(&url);
    flags.extend(["--shared-cache-shapes-refresh", "1h"]);
    let fleet = Fleet::start(ALLOWED, 10_000, &flags);
    // Replica 0 learns both shapes (by user; by group, reading both headers) and writes them.
    assert_eq!(fleet.check(0, "u0"), 200);
    assert_eq!(fleet.check_with(0, &group("g1")), 403);
    // Replica 1 reads the set on its first lookup and finds replica 0's entry.
    assert_eq!(fleet.check_with(1, &group("g1")), 403);
    let counts = fleet.adapter.as_ref().expect("remote").counts();
    assert_eq!(counts.get("g1"), Some(&1), "{counts:?}");
    let (reads, scripts) = (redis.calls("smembers"), redis.calls("evalsha"));
    // 20 misses on replica 1: none reads the set; each runs one take per known shape (2)
    // and one store, and nothing else.
    for u in 10..30 {
        assert_eq!(fleet.check(1, &format!("u{u}")), 403);
    }
    assert_eq!(
        redis.calls("smembers") - reads,
        0,
        "a miss read the shape set"
    );
    assert_eq!(redis.calls("evalsha") - scripts, 20 * 3);
    assert_eq!(
        fleet.sum("mixer_check_cache_shared_shape_reads_total"),
        2.0,
        "one read per replica that looked up"
    );

    // Refreshed every 300 ms: a shape another replica wrote is found once that has passed.
    let mut flags = shared_flags(&url);
    flags.extend(["--shared-cache-shapes-refresh", "300ms"]);
    let quick = Fleet::start(ALLOWED, 10_000, &flags);
    assert_eq!(quick.check(0, "u0"), 200);
    assert_eq!(quick.check(1, "u1"), 200);
    // Replica 1 read the set before replica 0 wrote the group shape.
    assert_eq!(quick.check_with(0, &group("g2")), 403);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(quick.check_with(1, &group("g2")), 403);
    let counts = quick.adapter.as_ref().expect("remote").counts();
    assert_eq!(
        counts.get("g2"),
        Some(&1),
        "replica 1 did not learn the shape within the refresh: {counts:?}"
    );
}

/// The `config_hash:` line of a replica's `/readyz`.
fn config_hash(mixer: &Mixer) -> String {
    let (_, _, body) = http_request(mixer.admin, "GET", "/readyz", &[]).expect("readyz");
    body.lines()
        .find_map(|l| l.strip_prefix("config_hash: "))
        .unwrap_or_else(|| panic!("no config_hash in /readyz: {body}"))
        .to_string()
}

/// Two replicas load the same file, a listchecker blocking `${BLOCKED}`, under different
/// environments (bob blocked on one, carol on the other). They resolve to different configs,
/// so they must not share verdicts: a verdict allowing carol, stored by the replica that
/// blocks bob, would otherwise let carol through the replica that blocks her.
#[test]
fn replicas_whose_environment_differs_share_no_verdict() {
    if !redis_installed() {
        return;
    }
    let redis = Redis::start();
    let url = shared(&redis);
    let dir = tempfile::tempdir().expect("temp dir");
    let config_file = dir.path().join("config.yaml");
    let text = config(Backend::Listchecker, None, &["${BLOCKED}"], 10_000)
        .replace("blacklist: false", "blacklist: true");
    std::fs::write(&config_file, text).expect("write config");
    let path = config_file.to_str().expect("utf-8 path");
    let mut args = vec!["--config", path, "--worker-threads", "1"];
    args.extend(shared_flags(&url));
    let blocks = |user: &str, log: &str| {
        let mixer = Mixer::start_with_env_and_log(
            binary(),
            &args,
            &[("BLOCKED", user)],
            &dir.path().join(log),
        );
        mixer.wait_ready(Duration::from_secs(20));
        mixer
    };
    let (blocks_bob, blocks_carol) = (blocks("bob", "bob.log"), blocks("carol", "carol.log"));
    assert_ne!(
        config_hash(&blocks_bob),
        config_hash(&blocks_carol),
        "the same files under different environments show the same config hash"
    );
    let check = |mixer: &Mixer, user: &str| {
        http_request(mixer.http, "GET", "/check", &[("x-user", user)])
            .expect("forward-auth answers")
            .0
    };
    // Each replica stores what it decided for carol in the shared tier, the one that allows
    // her first; the other must decide her itself.
    assert_eq!(check(&blocks_bob, "carol"), 200);
    let stores = |m: &Mixer| {
        m.metric("mixer_check_cache_shared_stores_total")
            .unwrap_or(0.0)
    };
    let start = Instant::now();
    while stores(&blocks_bob) < 1.0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the replica blocking bob never stored a verdict in Redis"
        );
        std::thread::sleep(Duration::from_millis(50));
        check(&blocks_bob, "carol");
    }
    assert_eq!(
        check(&blocks_carol, "carol"),
        403,
        "carol was let through by a verdict of a replica on another environment"
    );
    assert_eq!(check(&blocks_carol, "bob"), 200);
    assert_eq!(check(&blocks_bob, "bob"), 403);
}

/// `redis-cli -p PORT ARGS...`: its output.
fn redis_cli(redis: &Redis, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &redis.port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli is installed with redis-server");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The verdict entries in Redis (not the shape sets).
fn entry_keys(redis: &Redis) -> Vec<String> {
    let mut keys: Vec<String> = redis_cli(redis, &["--scan", "--pattern", "mixer:cache:{*"])
        .lines()
        .map(str::to_string)
        .collect();
    keys.sort();
    keys
}

/// Someone who can write to the shared Redis copies the entry that allows u0 over the one
/// that denies u5. Without a key the forged allow is served to a replica that never decided
/// u5 (the shared Redis is inside the trust boundary); with `--shared-cache-key-file` every
/// entry is sealed to its key and the forgery is refused, counted, and decided afresh.
#[test]
fn an_entry_copied_over_another_key_is_served_only_without_a_key() {
    if !redis_installed() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let key_file = dir.path().join("shared-cache.keys");
    std::fs::write(
        &key_file,
        "# rotated 2026-12\n0123456789abcdef0123456789abcdef\n",
    )
    .expect("write keys");
    let key_file = key_file.to_str().expect("utf-8 path");
    for sealed in [false, true] {
        let redis = Redis::start();
        let url = shared(&redis);
        let mut flags = shared_flags(&url);
        if sealed {
            flags.extend(["--shared-cache-key-file", key_file]);
        }
        let fleet = Fleet::start_with(Backend::Listchecker, ALLOWED, 10_000, &flags);
        let stored = |n: usize| {
            let start = Instant::now();
            while entry_keys(&redis).len() < n {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "replica 0 never stored its verdict"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        assert_eq!(fleet.check(0, "u0"), 200);
        stored(1);
        let allow = entry_keys(&redis).remove(0);
        assert_eq!(fleet.check(0, "u5"), 403);
        stored(2);
        let deny = entry_keys(&redis)
            .into_iter()
            .find(|k| *k != allow)
            .expect("the deny entry");
        redis_cli(&redis, &["COPY", &allow, &deny, "REPLACE"]);
        let forged = fleet.check(1, "u5");
        let refused = fleet.sum("mixer_check_cache_shared_errors_total{reason=\"seal\"}");
        if sealed {
            assert_eq!(forged, 403, "a forged entry was served with sealing on");
            assert_eq!(refused, 1.0, "the forged entry was not counted");
        } else {
            assert_eq!(
                forged, 200,
                "without a key the copied entry is served: the premise of sealing"
            );
        }
    }
}
