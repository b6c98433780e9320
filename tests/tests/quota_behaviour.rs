//! Quota behaviour, one set of test bodies run against every quota adapter (as Limitador runs
//! one body against every storage): memquota on tokio's paused clock, redisquota against a
//! real `redis-server` started by each test on a free loopback port (real time, so windows
//! are short and assertions about time leave a margin).
//!
//! Needs `redis-server` on PATH (Debian's `redis-server` package).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::{
    Adapter, AdapterError, BuildContext, ErrorKind, Handler, LimitOverride, QuotaArgs,
};
use mixer_adapter_memquota::MemQuota;
use mixer_adapter_redisquota::RedisQuota;
use mixer_model::{Code, FieldValue, Instance, QuotaLimit, QuotaResult, Template, Value};
use serde_json::{Value as Json, json};
use tokio::time::{Instant, sleep};

// ---------------------------------------------------------------------------------------------
// Backends

/// Builds handlers of one adapter from the `quotas`-level params of a test.
trait Backend {
    /// The handler for `params` (the backend adds what it needs, e.g. `redisServerUrl`).
    fn build(&self, params: Json) -> Arc<dyn Handler>;
    /// Metric name prefix.
    fn prefix(&self) -> &'static str;
}

struct Mem;

impl Backend for Mem {
    fn build(&self, params: Json) -> Arc<dyn Handler> {
        MemQuota.validate(&params).expect("valid memquota params");
        MemQuota.build(&params, &ctx()).expect("memquota handler")
    }
    fn prefix(&self) -> &'static str {
        "mixer_memquota"
    }
}

/// A `redis-server` of our own, killed when dropped.
struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl RedisServer {
    fn start() -> RedisServer {
        let mut server = RedisServer {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let dir: PathBuf = self.dir.path().into();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", dir.to_str().expect("utf-8 temp dir")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Backend for RedisServer {
    fn build(&self, mut params: Json) -> Arc<dyn Handler> {
        params["redisServerUrl"] = json!(self.url());
        RedisQuota
            .validate(&params)
            .expect("valid redisquota params");
        RedisQuota
            .build(&params, &ctx())
            .expect("redisquota handler")
    }
    fn prefix(&self) -> &'static str {
        "mixer_redisquota"
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn ctx() -> BuildContext {
    BuildContext {
        handler_name: "quotahandler.istio-system".into(),
    }
}

fn inst(name: &str, dims: &[(&str, &str)]) -> Instance {
    Instance {
        name: name.into(),
        template: Template::Quota,
        fields: vec![(
            "dimensions",
            FieldValue::Map(
                dims.iter()
                    .map(|(k, v)| (Arc::from(*k), Value::from(*v)))
                    .collect(),
            ),
        )],
    }
}

fn user(u: &str) -> Instance {
    inst("rq.istio-system", &[("user", u)])
}

async fn try_alloc(
    h: &Arc<dyn Handler>,
    i: &Instance,
    amount: i64,
    best_effort: bool,
    id: &str,
) -> Result<QuotaResult, AdapterError> {
    let args = QuotaArgs {
        amount,
        best_effort,
        deduplication_id: id.into(),
        limit_override: None,
    };
    h.as_quota()
        .expect("quota handler")
        .allocate(i, &args)
        .await
}

async fn alloc(h: &Arc<dyn Handler>, i: &Instance, amount: i64) -> QuotaResult {
    try_alloc(h, i, amount, false, "").await.expect("decided")
}

async fn best(h: &Arc<dyn Handler>, i: &Instance, amount: i64) -> QuotaResult {
    try_alloc(h, i, amount, true, "").await.expect("decided")
}

#[track_caller]
fn granted(r: &QuotaResult, amount: i64) {
    assert_eq!(r.status.code, Code::Ok, "{r:?}");
    assert_eq!(r.granted_amount, amount, "{r:?}");
}

#[track_caller]
fn denied(r: &QuotaResult) {
    assert_eq!(r.status.code, Code::ResourceExhausted, "{r:?}");
    assert_eq!(r.granted_amount, 0, "{r:?}");
    assert!(r.status.message.contains("exhausted"), "{r:?}");
}

fn exposition(h: &Arc<dyn Handler>) -> String {
    let mut out = String::new();
    h.as_exposition().expect("exposition").render(&mut out);
    out
}

fn quota(name: &str, max: i64, valid: &str, algorithm: &str) -> Json {
    json!({"name": name, "maxAmount": max, "validDuration": valid, "rateLimitAlgorithm": algorithm})
}

// ---------------------------------------------------------------------------------------------
// The behaviours

async fn fixed_window_allows_max_then_resets(b: &dyn Backend) {
    let h = b.build(json!({"quotas": [quota("rq", 3, "1s", "FIXED_WINDOW")]}));
    let first = alloc(&h, &user("a"), 1).await;
    granted(&first, 1);
    assert!(
        first.valid_duration <= Duration::from_secs(1)
            && first.valid_duration > Duration::from_millis(800),
        "valid until the window ends: {first:?}"
    );
    granted(&alloc(&h, &user("a"), 1).await, 1);
    granted(&alloc(&h, &user("a"), 1).await, 1);
    let no = alloc(&h, &user("a"), 1).await;
    denied(&no);
    assert!(no.valid_duration <= Duration::from_secs(1), "{no:?}");
    sleep(Duration::from_millis(1100)).await;
    granted(&alloc(&h, &user("a"), 1).await, 1);
}

async fn rolling_window_counts_a_sliding_interval(b: &dyn Backend) {
    let mut q = quota("rq", 5, "1s", "ROLLING_WINDOW");
    q["bucketDuration"] = json!("200ms");
    let h = b.build(json!({"quotas": [q]}));
    granted(&alloc(&h, &user("a"), 3).await, 3);
    sleep(Duration::from_millis(600)).await;
    granted(&alloc(&h, &user("a"), 2).await, 2);
    denied(&alloc(&h, &user("a"), 1).await);
    // The first 3 have left the window, the last 2 have not: a fixed window would allow 5.
    sleep(Duration::from_millis(450)).await;
    granted(&alloc(&h, &user("a"), 3).await, 3);
    denied(&alloc(&h, &user("a"), 1).await);
}

async fn token_bucket_bursts_then_refills(b: &dyn Backend) {
    let h = b.build(json!({"quotas": [quota("rq", 10, "1s", "TOKEN_BUCKET")]}));
    granted(&alloc(&h, &user("a"), 10).await, 10);
    let no = alloc(&h, &user("a"), 1).await;
    denied(&no);
    assert!(
        no.valid_duration > Duration::ZERO && no.valid_duration <= Duration::from_millis(100),
        "retry when one token is back: {no:?}"
    );
    // 10 per second: 300 ms bring 3 tokens.
    sleep(Duration::from_millis(300)).await;
    granted(&alloc(&h, &user("a"), 3).await, 3);
    denied(&alloc(&h, &user("a"), 1).await);
    sleep(Duration::from_millis(1200)).await;
    granted(&best(&h, &user("a"), 50).await, 10);
    denied(&best(&h, &user("a"), 5).await);
}

async fn overrides_select_by_dimensions(b: &dyn Backend) {
    let h = b.build(json!({"quotas": [
        {"name": "rq", "maxAmount": 2, "validDuration": "10s", "rateLimitAlgorithm": "FIXED_WINDOW",
         "overrides": [
            {"dimensions": {"user": "vip"}, "maxAmount": 5},
            {"dimensions": {"user": "blocked"}, "maxAmount": 0},
            {"dimensions": {"user": "joe", "path": "/a"}, "maxAmount": 3},
         ]},
        quota("other.quota.istio-system", 1, "10s", "FIXED_WINDOW"),
    ]}));
    granted(&alloc(&h, &user("vip"), 5).await, 5);
    denied(&alloc(&h, &user("vip"), 1).await);
    denied(&alloc(&h, &user("blocked"), 1).await);
    let joe_a = inst("rq.istio-system", &[("user", "joe"), ("path", "/a")]);
    let joe_b = inst("rq.istio-system", &[("user", "joe"), ("path", "/b")]);
    granted(&alloc(&h, &joe_a, 3).await, 3);
    denied(&alloc(&h, &joe_a, 1).await);
    granted(&alloc(&h, &joe_b, 2).await, 2);
    denied(&alloc(&h, &joe_b, 1).await);
    granted(&alloc(&h, &inst("rq.default", &[]), 2).await, 2);
    // Istio's `name.quota.namespace` config name matches the instance `name.namespace`.
    granted(&alloc(&h, &inst("other.istio-system", &[]), 1).await, 1);
    denied(&alloc(&h, &inst("other.istio-system", &[]), 1).await);
    let err = try_alloc(&h, &inst("unknown.istio-system", &[]), 1, false, "")
        .await
        .expect_err("no such quota");
    assert_eq!(err.kind, ErrorKind::InvalidInstance);
    assert!(!err.retryable);
}

async fn best_effort_grants_what_is_left(b: &dyn Backend) {
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW", "TOKEN_BUCKET"] {
        let h = b.build(json!({"quotas": [quota("rq", 5, "10s", algorithm)]}));
        granted(&alloc(&h, &user("a"), 3).await, 3);
        denied(&alloc(&h, &user("a"), 3).await);
        granted(&best(&h, &user("a"), 3).await, 2);
        denied(&best(&h, &user("a"), 1).await);
    }
}

async fn amounts_above_one(b: &dyn Backend) {
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW", "TOKEN_BUCKET"] {
        let h = b.build(json!({"quotas": [quota("rq", 10, "10s", algorithm)]}));
        denied(&alloc(&h, &user("a"), 11).await);
        granted(&alloc(&h, &user("a"), 4).await, 4);
        granted(&alloc(&h, &user("a"), 4).await, 4);
        denied(&alloc(&h, &user("a"), 4).await);
        granted(&alloc(&h, &user("a"), 2).await, 2);
        denied(&alloc(&h, &user("a"), 1).await);
        let zero = alloc(&h, &user("a"), 0).await;
        assert!(zero.status.is_ok() && zero.granted_amount == 0, "{zero:?}");
    }
}

async fn deduplication_ids(b: &dyn Backend) {
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW", "TOKEN_BUCKET"] {
        let h = b.build(json!({"minDeduplicationDuration": "10s",
            "quotas": [quota("rq", 2, "10s", algorithm)]}));
        let a = user("a");
        granted(&try_alloc(&h, &a, 1, false, "id-1").await.unwrap(), 1);
        let again = try_alloc(&h, &a, 1, false, "id-1").await.unwrap();
        granted(&again, 1);
        granted(&try_alloc(&h, &a, 1, false, "id-2").await.unwrap(), 1);
        denied(&try_alloc(&h, &a, 1, false, "id-3").await.unwrap());
        // The retry of id-1 is answered as the first time, and id-3's denial stays a denial.
        granted(&try_alloc(&h, &a, 1, false, "id-1").await.unwrap(), 1);
        denied(&try_alloc(&h, &a, 1, false, "id-3").await.unwrap());
        // Ids belong to a counter: the same id on another key is charged there.
        granted(
            &try_alloc(&h, &user("b"), 1, false, "id-1").await.unwrap(),
            1,
        );
        let text = exposition(&h);
        let line = format!(
            "{}_deduplicated_total{{handler=\"quotahandler.istio-system\",quota=\"rq\"}} 3",
            b.prefix()
        );
        assert!(text.contains(&line), "{algorithm}: {text}");
    }
}

async fn shadow_mode_never_denies_but_reports(b: &dyn Backend) {
    let mut q = quota("rq", 2, "10s", "FIXED_WINDOW");
    q["shadowMode"] = json!(true);
    q["overrides"] =
        json!([{"dimensions": {"user": "enforced"}, "maxAmount": 1, "shadowMode": false}]);
    let h = b.build(json!({"quotas": [q]}));
    for i in 0..5 {
        let r = alloc(&h, &user("a"), 1).await;
        granted(&r, 1);
        if i >= 2 {
            assert!(
                r.status
                    .message
                    .contains("would have answered RESOURCE_EXHAUSTED"),
                "{r:?}"
            );
        } else {
            assert!(r.status.message.is_empty(), "{r:?}");
        }
    }
    let r = best(&h, &user("b"), 3).await;
    granted(&r, 3);
    assert!(r.status.message.contains("granted 2 of 3"), "{r:?}");
    granted(&alloc(&h, &user("enforced"), 1).await, 1);
    denied(&alloc(&h, &user("enforced"), 1).await);
    let text = exposition(&h);
    let labels = "{handler=\"quotahandler.istio-system\",quota=\"rq\"}";
    let p = b.prefix();
    assert!(
        text.contains(&format!("{p}_shadow_denials_total{labels} 4")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{p}_denials_total{labels} 1")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{p}_allocations_total{labels} 8")),
        "{text}"
    );
}

async fn keys_and_quotas_are_independent(b: &dyn Backend) {
    let h = b.build(json!({"quotas": [
        quota("rq", 2, "10s", "FIXED_WINDOW"),
        quota("other", 1, "10s", "TOKEN_BUCKET"),
    ]}));
    for u in ["a", "b", "c"] {
        granted(&alloc(&h, &user(u), 2).await, 2);
        denied(&alloc(&h, &user(u), 1).await);
    }
    // Dimension order does not matter; a different value does.
    let ab = inst("rq.ns", &[("x", "1"), ("y", "2")]);
    let ba = inst("rq.ns", &[("y", "2"), ("x", "1")]);
    granted(&alloc(&h, &ab, 1).await, 1);
    granted(&alloc(&h, &ba, 1).await, 1);
    denied(&alloc(&h, &ab, 1).await);
    // Another quota with the same dimensions has its own counter.
    let other = inst("other.istio-system", &[("user", "a")]);
    granted(&alloc(&h, &other, 1).await, 1);
    denied(&alloc(&h, &other, 1).await);
}

#[track_caller]
fn left(r: &QuotaResult, remaining: i64) -> QuotaLimit {
    let limit = r.limit.clone().expect("the limit is reported");
    assert_eq!(limit.remaining, remaining, "{r:?}");
    limit
}

async fn remaining_and_reset_are_reported(b: &dyn Backend) {
    // Fixed window: the limit, what is left, and the window's end.
    let h = b.build(json!({"quotas": [quota("rq", 3, "10s", "FIXED_WINDOW")]}));
    let l = left(&alloc(&h, &user("a"), 1).await, 2);
    assert_eq!(
        (&*l.name, l.max_amount, l.window),
        ("rq", 3, Duration::from_secs(10))
    );
    assert!(
        l.reset_after <= Duration::from_secs(10) && l.reset_after > Duration::from_secs(9),
        "{l:?}"
    );
    left(&alloc(&h, &user("a"), 2).await, 0);
    let r = alloc(&h, &user("a"), 1).await;
    denied(&r);
    left(&r, 0);
    left(&alloc(&h, &user("b"), 1).await, 2);

    // Rolling window: until the oldest counted units leave the window.
    let h = b.build(json!({"quotas": [quota("rq", 3, "10s", "ROLLING_WINDOW")]}));
    let l = left(&alloc(&h, &user("a"), 2).await, 1);
    assert!(
        l.reset_after <= Duration::from_secs(10) && l.reset_after > Duration::from_secs(9),
        "{l:?}"
    );

    // Token bucket: the tokens left, and until the bucket is full again.
    let h = b.build(json!({"quotas": [quota("rq", 4, "4s", "TOKEN_BUCKET")]}));
    let l = left(&alloc(&h, &user("a"), 3).await, 1);
    assert!(
        l.reset_after <= Duration::from_secs(3) && l.reset_after > Duration::from_millis(2900),
        "{l:?}"
    );

    // An override by dimensions reports its own limit.
    let mut q = quota("rq", 3, "10s", "FIXED_WINDOW");
    q["overrides"] = json!([{"dimensions": {"user": "vip"}, "maxAmount": 10}]);
    let h = b.build(json!({"quotas": [q]}));
    let l = left(&alloc(&h, &user("vip"), 1).await, 9);
    assert_eq!(l.max_amount, 10);
}

async fn a_caller_limit_replaces_the_configured_one(b: &dyn Backend) {
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW", "TOKEN_BUCKET"] {
        let mut q = quota("rq", 100, "10s", algorithm);
        q["shadowMode"] = json!(true);
        let h = b.build(json!({"quotas": [q]}));
        let with = |amount| QuotaArgs {
            amount,
            limit_override: Some(LimitOverride {
                max_amount: 2,
                window: Duration::from_secs(60),
            }),
            ..QuotaArgs::default()
        };
        let quota = h.as_quota().expect("quota handler");
        let a = user("a");
        let r = quota.allocate(&a, &with(2)).await.expect("decided");
        granted(&r, 2);
        let l = left(&r, 0);
        assert_eq!(
            (l.max_amount, l.window),
            (2, Duration::from_secs(60)),
            "{algorithm}"
        );
        // The caller's limit is enforced even though the quota is in shadow mode.
        denied(&quota.allocate(&a, &with(1)).await.expect("decided"));
        // Without it, the configured limit applies, on a counter of its own.
        let r = alloc(&h, &a, 1).await;
        granted(&r, 1);
        left(&r, 99);
    }
}

macro_rules! behaviour_suite {
    ($($name:ident),* $(,)?) => {
        mod memquota {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    super::$name(&super::Mem).await;
                }
            )*
        }
        mod redisquota {
            $(
                #[tokio::test]
                async fn $name() {
                    let redis = super::RedisServer::start();
                    super::$name(&redis).await;
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
);

// ---------------------------------------------------------------------------------------------
// One adapter only

#[tokio::test(start_paused = true)]
async fn memquota_memory_stays_bounded() {
    let params = json!({"maxKeys": 1000, "quotas": [quota("rq", 5, "1h", "ROLLING_WINDOW")]});
    let h = MemQuota.build_handler(&params, &ctx()).expect("handler");
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
    denied(&alloc(&handler, &user("user-99999"), 1).await);
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
