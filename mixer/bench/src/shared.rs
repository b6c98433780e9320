//! `shared`: what the check cache shared by the replicas (`mixer serve --shared-cache`) buys
//! and what it costs, with three real replicas, one real redis-server and an out-of-process
//! adapter (mixer-bench's own `shared-adapter`, built on the adapter SDK) as the backend.
//!
//! 1. Zipf: each replica gets its own stream of ext_authz checks (one connection each, as a
//!    Kubernetes Service spreads connections), keys drawn from a Zipf distribution (`--zipf`
//!    over `--keys`), at `--rate` per replica, from cold caches: adapter calls per second and
//!    the hit ratio, with per-replica caches and then with the shared tier.
//! 2. Hit latency: replica A evaluates fresh keys (and stores them in Redis); replica B is
//!    then sent each once (an in-process miss answered by Redis: a shared hit), then each
//!    again (an in-process hit), one caller at `--latency-rate`; the difference of the two at
//!    p50 and p99 is what a shared hit adds. A bare Redis GET from this process, paced the
//!    same, is measured in each round beside it: the floor of any Redis round trip here.
//! 3. Hot path: a mixer with `--shared-cache` and one without, both on a workload that hits
//!    the in-process cache every time, driven closed loop in turn, round after round: the
//!    ratio of the median throughputs says whether the shared tier slows the hot path.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use mixer_adapter_sdk::api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, Handler, ParamError, Stability,
};
use mixer_adapter_sdk::model::{
    CheckResult, Code, Instance, ListEntryInstance, Status, Template, Value,
};
use mixer_adapter_sdk::{Server, async_trait};
use mixer_frontends::grpc;

use crate::bags::Request;
use crate::lean;
use crate::load::{Report, Spec};
use crate::observe;
use crate::process::{Mixer, TempDir, bench_server};
use crate::redis_server::RedisServer as Redis;
use crate::report::median;
use crate::targets;

/// The `shared` subcommand's flags.
#[derive(clap::Args)]
pub struct Args {
    /// The mixer binary.
    #[arg(long)]
    mixer_bin: PathBuf,
    /// The redis-server binary, started on a free loopback port for the run.
    #[arg(long, default_value = "redis-server")]
    redis_server: PathBuf,
    /// Distinct keys the Zipf streams draw from.
    #[arg(long, default_value_t = 10_000)]
    keys: usize,
    /// The Zipf exponent s (key k, from 1, is drawn with weight 1/k^s).
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    /// Checks per second sent to each replica in the Zipf runs (open loop).
    #[arg(long, default_value_t = 500.0)]
    rate: f64,
    /// Length of each Zipf run.
    #[arg(long, default_value = "10s", value_parser = crate::duration)]
    zipf_duration: Duration,
    /// Checks per second of the hit-latency runs (one caller).
    #[arg(long, default_value_t = 1000.0)]
    latency_rate: f64,
    /// Checks per hit-latency run, each of a key of its own.
    #[arg(long, default_value_t = 3000)]
    latency_checks: usize,
    /// Rounds of the hit-latency and hot-path comparisons, the two sides alternating.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Keys of the hot-path workload (all hits once warm).
    #[arg(long, default_value_t = 1000)]
    hot_keys: usize,
    /// Concurrent callers of the hot-path runs.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Length of each hot-path run (after a one-second warm-up).
    #[arg(long, default_value = "5s", value_parser = crate::duration)]
    duration: Duration,
    /// The replicas' `--shared-cache-timeout` (the mixer's default: 5ms).
    #[arg(long, default_value = "5ms")]
    shared_cache_timeout: String,
    /// Worker threads of each mixer and of the adapter.
    #[arg(long, default_value_t = 1)]
    server_threads: u16,
}

/// The backend: allows the keys whose number is even; an answer is valid a minute with
/// Istio's default use count, so that any cache may keep it for the whole run.
pub struct Keys;

static KEYS: AdapterInfo = AdapterInfo {
    name: "bench-keys",
    description: "allows the keys whose number is even",
    templates: &[Template::ListEntry],
    cacheable: true,
    stability: Stability::Alpha,
};

impl Adapter for Keys {
    type Config = serde_json::Value;
    type Compiled = ();

    fn info(&self) -> &AdapterInfo {
        &KEYS
    }

    fn compile(&self, _params: serde_json::Value) -> Result<(), Vec<ParamError>> {
        Ok(())
    }

    fn build(&self, _: &(), _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(KeysHandler))
    }
}

/// Decides keys.
struct KeysHandler;

impl Handler for KeysHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for KeysHandler {
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        let value = ListEntryInstance::of(instance)
            .and_then(|i| i.value)
            .and_then(Value::as_str)
            .unwrap_or_default();
        let even = value
            .rsplit('-')
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n % 2 == 0);
        let mut answer = CheckResult::ok(Duration::from_secs(60), 10_000);
        if !even {
            answer.status = Status::new(Code::PermissionDenied, format!("{value} is not allowed"));
        }
        Ok(answer)
    }
}

/// Serves [`Keys`] until the process ends.
pub async fn serve_adapter(addr: SocketAddr) -> anyhow::Result<()> {
    Server::new(Keys)
        .serve(addr)
        .await
        .context("serving the adapter")
}

/// One rule: the `x-user` header's value, decided by the adapter at `adapter`.
fn config(adapter: SocketAddr) -> String {
    format!(
        r#"# Written by mixer-bench shared.
kind: handler
metadata: {{name: keys, namespace: istio-system}}
spec:
  adapter: bench-keys
  connection: {{address: "{adapter}", timeout: 1s}}
---
kind: instance
metadata: {{name: key, namespace: istio-system}}
spec:
  compiledTemplate: listentry
  params: {{value: 'request.headers["x-user"] | ""'}}
---
kind: rule
metadata: {{name: keys, namespace: istio-system}}
spec:
  actions: [{{handler: keys, instances: [key]}}]
"#
    )
}

/// A small deterministic generator (SplitMix64), so that a run's streams can be replayed.
struct SplitMix(u64);

impl SplitMix {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` key numbers in `0..keys`, number k drawn with weight 1/(k+1)^s.
fn zipf_stream(keys: usize, s: f64, n: usize, seed: u64) -> Vec<usize> {
    let keys = keys.max(1);
    let mut cdf = Vec::with_capacity(keys);
    let mut total = 0.0;
    for k in 0..keys {
        total += 1.0 / ((k + 1) as f64).powf(s);
        cdf.push(total);
    }
    let mut rng = SplitMix(seed);
    (0..n)
        .map(|_| {
            let u = rng.next_f64() * total;
            cdf.partition_point(|&c| c < u).min(keys - 1)
        })
        .collect()
}

/// An ext_authz check naming `key` in `x-user`, the rest as a sidecar would send it.
fn request(key: &str) -> Request {
    let host = "api.default.svc.cluster.local".to_string();
    Request {
        method: "GET",
        path: "/api/v1/orders".into(),
        host: host.clone(),
        source_ip: "10.1.2.3".into(),
        source_principal: "spiffe://cluster.local/ns/default/sa/web".into(),
        headers: vec![
            (":authority".into(), host),
            ("x-user".into(), key.into()),
            ("user-agent".into(), "curl/8.5.0".into()),
        ],
    }
}

fn framed(keys: impl IntoIterator<Item = String>) -> Arc<Vec<Bytes>> {
    let requests: Vec<Request> = keys.into_iter().map(|k| request(&k)).collect();
    targets::ext_authz_requests(&requests)
}

/// Drives `requests` (cycled) against `addr` with the lean client, off the runtime.
async fn drive(addr: SocketAddr, requests: Arc<Vec<Bytes>>, spec: Spec) -> anyhow::Result<Report> {
    let calls = lean::Calls {
        addr,
        path: grpc::EXT_AUTHZ_CHECK,
        requests,
        classify: targets::ext_authz_outcome,
        connections: 1,
    };
    tokio::task::spawn_blocking(move || lean::run(spec, &calls)).await?
}

/// Each of `requests` once, at `rate` per second from one caller.
fn once_each(count: usize, rate: f64) -> Spec {
    Spec {
        concurrency: 1,
        duration: Duration::from_secs_f64(count as f64 / rate.max(1.0)),
        warmup: Duration::ZERO,
        rate: Some(rate),
    }
}

/// Three replicas of one config and flags.
struct Fleet(Vec<Mixer>);

impl Fleet {
    fn start(args: &Args, config: &Path, extra: &[String]) -> anyhow::Result<Fleet> {
        let mut flags = vec![
            "--worker-threads".to_string(),
            args.server_threads.to_string(),
        ];
        flags.extend_from_slice(extra);
        let mut replicas = Vec::new();
        for _ in 0..3 {
            replicas.push(Mixer::start(&args.mixer_bin, Some(config), &flags)?);
        }
        Ok(Fleet(replicas))
    }

    /// The sum over the replicas of `series` (lines holding `filter`).
    fn sum(&self, series: &str, filter: &str) -> f64 {
        self.0
            .iter()
            .map(|m| observe::sum(&observe::metrics_page(m.admin), series, filter))
            .sum()
    }

    fn adapter_calls(&self) -> f64 {
        self.sum("mixer_handler_calls_total", "variety=\"check\"")
    }
}

/// The figures of one Zipf run over a fleet.
struct ZipfRun {
    checks: u64,
    errors: u64,
    adapter_calls: f64,
    shared_hits: f64,
    shared_errors: f64,
    seconds: f64,
}

impl ZipfRun {
    fn line(&self, label: &str) -> String {
        let hit = 1.0 - self.adapter_calls / (self.checks as f64).max(1.0);
        format!(
            "{label:<22} {:>7.0} checks/s  adapter {:>7.1} calls/s ({:.0} calls)  hit ratio {:.4} (shared tier {:.4})  errors {}  shared-tier errors {:.0}",
            self.checks as f64 / self.seconds,
            self.adapter_calls / self.seconds,
            self.adapter_calls,
            hit,
            self.shared_hits / (self.checks as f64).max(1.0),
            self.errors,
            self.shared_errors
        )
    }
}

async fn zipf_run(args: &Args, fleet: &Fleet) -> anyhow::Result<ZipfRun> {
    let n = (args.rate * args.zipf_duration.as_secs_f64()).ceil() as usize + 1;
    let calls_before = fleet.adapter_calls();
    let hits_before = fleet.sum("mixer_check_cache_shared_hits_total", "");
    let errors_before = fleet.sum("mixer_check_cache_shared_errors_total", "");
    let spec = Spec {
        concurrency: 4,
        duration: args.zipf_duration,
        warmup: Duration::ZERO,
        rate: Some(args.rate),
    };
    // Each replica its own stream: independent clients whose popular keys coincide.
    let runs = fleet.0.iter().enumerate().map(|(i, m)| {
        let keys = zipf_stream(args.keys, args.zipf, n, 0x5eed + i as u64);
        let requests = framed(keys.into_iter().map(|k| format!("key-{k}")));
        drive(m.grpc, requests, spec)
    });
    let reports = futures_join_all(runs).await?;
    Ok(ZipfRun {
        checks: reports.iter().map(|r| r.calls).sum(),
        errors: reports.iter().map(|r| r.errors).sum(),
        adapter_calls: fleet.adapter_calls() - calls_before,
        shared_hits: fleet.sum("mixer_check_cache_shared_hits_total", "") - hits_before,
        shared_errors: fleet.sum("mixer_check_cache_shared_errors_total", "") - errors_before,
        seconds: args.zipf_duration.as_secs_f64(),
    })
}

/// Awaits every future, in order; the first error wins.
async fn futures_join_all<T>(
    futures: impl Iterator<Item = impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static>,
) -> anyhow::Result<Vec<T>>
where
    T: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await??);
    }
    Ok(out)
}

/// Bare GETs of one key from this process, `count` of them at `rate`: the round trip any
/// Redis call pays here.
async fn redis_gets(
    url: &str,
    count: usize,
    rate: f64,
) -> anyhow::Result<hdrhistogram::Histogram<u64>> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    // About the size of an encoded verdict.
    let value = vec![b'v'; 64];
    redis::cmd("SET")
        .arg("mixer-bench:get")
        .arg(&value)
        .exec_async(&mut conn)
        .await?;
    let mut histogram = hdrhistogram::Histogram::<u64>::new_with_bounds(1_000, 60_000_000_000, 3)?;
    let interval = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let start = tokio::time::Instant::now();
    for i in 0..count {
        tokio::time::sleep_until(start + interval.mul_f64(i as f64)).await;
        let sent = Instant::now();
        let _: Vec<u8> = redis::cmd("GET")
            .arg("mixer-bench:get")
            .query_async(&mut conn)
            .await?;
        histogram.record(
            u64::try_from(sent.elapsed().as_nanos())
                .unwrap_or(u64::MAX)
                .max(1_000),
        )?;
    }
    Ok(histogram)
}

fn micros(h: &hdrhistogram::Histogram<u64>, percentile: f64) -> f64 {
    h.value_at_percentile(percentile) as f64 / 1000.0
}

/// Runs the three parts and prints their figures.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let threads = vec!["--threads".to_string(), args.server_threads.to_string()];
    let (_adapter, adapter_addr) = bench_server(&["shared-adapter"], &threads)?;
    let dir = TempDir::new("mixer-bench-shared")?;
    let config_file = dir.0.join("config.yaml");
    std::fs::write(&config_file, config(adapter_addr))?;
    let redis = Redis::start(&args.redis_server, &dir.0)?;
    let shared_flags = vec![
        "--shared-cache".to_string(),
        redis.url(),
        // Keeps what replica B learns for the whole latency round (the default caps it at 2 s).
        "--shared-cache-local-life".to_string(),
        "1m".to_string(),
        "--shared-cache-timeout".to_string(),
        args.shared_cache_timeout.clone(),
    ];
    println!(
        "three replicas, {} worker thread(s) each; adapter out of process; redis-server at {}",
        args.server_threads, redis.addr
    );

    // 1. Zipf, from cold caches each time.
    let per_replica = {
        let fleet = Fleet::start(&args, &config_file, &[])?;
        zipf_run(&args, &fleet).await?
    };
    let fleet = Fleet::start(&args, &config_file, &shared_flags)?;
    let shared = zipf_run(&args, &fleet).await?;
    println!(
        "zipf s={} over {} keys, {:.0} checks/s per replica for {:?}:",
        args.zipf, args.keys, args.rate, args.zipf_duration
    );
    println!("{}", per_replica.line("  per-replica caches"));
    println!("{}", shared.line("  shared tier"));
    println!(
        "  adapter calls: {:.2}x fewer with the shared tier",
        per_replica.adapter_calls / shared.adapter_calls.max(1.0)
    );

    // 2. What a shared hit adds over an in-process hit, beside a bare Redis GET.
    let (a, b) = (&fleet.0[0], &fleet.0[1]);
    let n = args.latency_checks.max(1);
    let (mut shared_p50, mut shared_p99, mut local_p50, mut local_p99) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut added_p50, mut added_p99, mut get_p50, mut get_p99) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 1..=args.rounds.max(1) {
        let keys = framed((0..n).map(|i| format!("round{round}-{i}")));
        // A few callers: a fill is a miss everywhere, slower than a hit, and must not fall
        // behind its schedule.
        let fill_spec = Spec {
            concurrency: 4,
            ..once_each(n, args.latency_rate * 2.0)
        };
        let fill = drive(a.grpc, keys.clone(), fill_spec).await?;
        let page = observe::metrics_page(b.admin);
        let hits_before = observe::sum(&page, "mixer_check_cache_shared_hits_total", "");
        let misses_before = observe::sum(&page, "mixer_check_cache_shared_misses_total", "");
        let from_redis = drive(b.grpc, keys.clone(), once_each(n, args.latency_rate)).await?;
        let page = observe::metrics_page(b.admin);
        let hits = observe::sum(&page, "mixer_check_cache_shared_hits_total", "") - hits_before;
        let in_process = drive(b.grpc, keys, once_each(n, args.latency_rate)).await?;
        let page = observe::metrics_page(b.admin);
        let asked = observe::sum(&page, "mixer_check_cache_shared_hits_total", "")
            + observe::sum(&page, "mixer_check_cache_shared_misses_total", "")
            - hits_before
            - misses_before
            - hits;
        let gets = redis_gets(&redis.url(), n, args.latency_rate).await?;
        println!("{}", fill.line(&format!("{round}: fill on replica A")));
        println!("{}", from_redis.line(&format!("{round}: shared hits on B")));
        println!(
            "{}",
            in_process.line(&format!("{round}: in-process hits on B"))
        );
        println!(
            "{round}: bare redis GET                    p50 {:>8.1}us  p99 {:>8.1}us  ({} GETs); B's shared hits {hits:.0} of {n}, lookups while hitting in process {asked:.0}",
            micros(&gets, 50.0),
            micros(&gets, 99.0),
            gets.len()
        );
        shared_p50.push(from_redis.micros(50.0));
        shared_p99.push(from_redis.micros(99.0));
        local_p50.push(in_process.micros(50.0));
        local_p99.push(in_process.micros(99.0));
        added_p50.push(from_redis.micros(50.0) - in_process.micros(50.0));
        added_p99.push(from_redis.micros(99.0) - in_process.micros(99.0));
        get_p50.push(micros(&gets, 50.0));
        get_p99.push(micros(&gets, 99.0));
    }
    println!(
        "a shared hit adds {:.0} us at p50 and {:.0} us at p99 over an in-process hit (medians of {} rounds: shared p50 {:.0} p99 {:.0}, in-process p50 {:.0} p99 {:.0}); a bare redis GET: p50 {:.0} us, p99 {:.0} us",
        median(&mut added_p50),
        median(&mut added_p99),
        added_p50.len(),
        median(&mut shared_p50),
        median(&mut shared_p99),
        median(&mut local_p50),
        median(&mut local_p99),
        median(&mut get_p50),
        median(&mut get_p99)
    );
    drop(fleet);

    // 3. The hot path: every check an in-process hit, with and without the shared tier.
    let flags = |shared: bool| {
        let mut f = vec![
            "--worker-threads".to_string(),
            args.server_threads.to_string(),
        ];
        if shared {
            f.extend(shared_flags.iter().cloned());
        }
        f
    };
    let with = Mixer::start(&args.mixer_bin, Some(&config_file), &flags(true))?;
    let without = Mixer::start(&args.mixer_bin, Some(&config_file), &flags(false))?;
    let hot = framed((0..args.hot_keys.max(1)).map(|i| format!("hot-{i}")));
    let spec = Spec {
        concurrency: args.concurrency.max(1),
        duration: args.duration,
        warmup: Duration::from_secs(1),
        rate: None,
    };
    // Every hot key evaluated once on each, so that the rounds are in-process hits only.
    let n_hot = args.hot_keys.max(1);
    for mixer in [&with, &without] {
        let prime = Spec {
            concurrency: 4,
            ..once_each(n_hot, 2000.0)
        };
        drive(mixer.grpc, hot.clone(), prime).await?;
    }
    let (mut on, mut off, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=args.rounds.max(1) {
        let lookups_before = observe::scrape(with.admin, "mixer_check_cache_shared_misses_total")
            + observe::scrape(with.admin, "mixer_check_cache_shared_hits_total");
        let r_on = drive(with.grpc, hot.clone(), spec).await?;
        let lookups = observe::scrape(with.admin, "mixer_check_cache_shared_misses_total")
            + observe::scrape(with.admin, "mixer_check_cache_shared_hits_total")
            - lookups_before;
        let r_off = drive(without.grpc, hot.clone(), spec).await?;
        println!(
            "{}  (shared-tier lookups {lookups:.0})",
            r_on.line(&format!("{round}: hot, --shared-cache"))
        );
        println!("{}", r_off.line(&format!("{round}: hot, no shared cache")));
        on.push(r_on.throughput());
        off.push(r_off.throughput());
        ratios.push(r_on.throughput() / r_off.throughput().max(1e-9));
    }
    let (m_on, m_off) = (median(&mut on), median(&mut off));
    println!(
        "all-local-hit throughput: {m_on:.0} req/s with --shared-cache, {m_off:.0} without: ratio {:.3} (of the medians; per round {})",
        m_on / m_off.max(1e-9),
        ratios
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_zipf_stream_favours_small_keys_and_stays_in_range() {
        let stream = zipf_stream(10_000, 1.1, 100_000, 1);
        assert!(stream.iter().all(|&k| k < 10_000));
        let first = stream.iter().filter(|&&k| k == 0).count();
        let tenth = stream.iter().filter(|&&k| k == 9).count();
        // Weights 1 and 1/10^1.1 (about 12.6 times fewer); H(10000, 1.1) is about 6.6, so key
        // 0 takes about 15% of the draws.
        assert!((13_000..17_000).contains(&first), "{first}");
        let ratio = first as f64 / tenth as f64;
        assert!((10.0..16.0).contains(&ratio), "{ratio}");
        assert_eq!(stream, zipf_stream(10_000, 1.1, 100_000, 1), "replayable");
    }

    #[tokio::test]
    async fn the_adapter_allows_even_keys_for_a_minute() {
        use mixer_adapter_sdk::api::host::AnyAdapter;
        use mixer_adapter_sdk::model::FieldValue;
        let ctx = BuildContext {
            handler_name: "keys.istio-system".into(),
        };
        let handler = Keys
            .compile_and_build(&serde_json::json!({}), &ctx)
            .expect("builds");
        let instance = |v: &str| Instance {
            name: "key".into(),
            template: Template::ListEntry,
            fields: vec![("value", FieldValue::Value(Value::from(v)))],
        };
        let check = handler.as_check().expect("checks");
        let even = check.check(&instance("key-42")).await.expect("answer");
        let odd = check.check(&instance("key-7")).await.expect("answer");
        assert!(even.status.is_ok());
        assert!(!odd.status.is_ok());
        assert_eq!(even.valid_duration, Duration::from_secs(60));
        assert_eq!(even.valid_use_count, 10_000);
    }

    #[test]
    fn the_config_names_the_remote_adapter() {
        let text = config("127.0.0.1:7001".parse().expect("address"));
        assert!(text.contains("address: \"127.0.0.1:7001\""));
        assert!(text.contains("request.headers[\"x-user\"]"));
    }
}
