//! `redis-quota`: rate limits counted on Redis (redisquota) beside the same limits in memory
//! (memquota), in one invocation, with a redis-server of the run's own.
//!
//! For each case (1 and 50 limits, 1 and 10,000 keys, i.e. values counted each on their own)
//! it drives, closed loop, the RLS front end (`ShouldRateLimit`) and the Mixer v1 front end
//! (`Check` with one quota) against a mixer on memquota, one on redisquota and, with
//! `--lease-size`, one on redisquota with leases (`leaseSize`), and prints throughput,
//! p50/p99, the CPU seconds the mixer and Redis spent per 1000 decisions (`/proc/<pid>/stat`),
//! and the Redis commands per decision (`INFO commandstats`). Then the p99 of each Redis
//! mode (with and without leases) of the first case at half of its saturation, and the over-admission of one limit shared by three replicas,
//! per protocol and Redis mode: all three driven at once until the limit is spent, the sum
//! they admitted against the limit.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::LoadArgs;
use crate::load::Report;
use crate::process::{Mixer, TempDir};
use crate::redis_server::RedisServer as Redis;

/// `mixer-bench redis-quota` flags.
#[derive(clap::Args)]
pub struct Args {
    /// The mixer binary.
    #[arg(long)]
    pub mixer_bin: PathBuf,
    /// The redis-server binary, started on a free loopback port for the run.
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Worker threads of each mixer.
    #[arg(long, default_value_t = 1)]
    pub server_threads: u16,
    /// memquota/redisquota pairs per case, alternating; the ratios are of the medians.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// The limit shared by three replicas in the over-admission run (per minute).
    #[arg(long, default_value_t = 20_000)]
    pub shared_limit: u64,
    /// redisquota's extra params for every run, as YAML flow (`localCacheSize: 0` for none).
    #[arg(long, default_value = "localCacheSize: 100000")]
    pub redis_params: String,
    /// `leaseSize` of the lease rows (redisquota with leases, beside the others); 0 leaves
    /// them out.
    #[arg(long, default_value_t = 100)]
    pub lease_size: u64,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// CPU seconds (user + system) a process has used, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces; the fields after its `)` are fixed.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("unreadable /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0);
    // USER_HZ is 100 on Linux.
    Ok(ticks as f64 / 100.0)
}

/// Where a mixer counts: in memory, or on the run's Redis with extra redisquota params.
#[derive(Clone, Copy)]
enum Backend<'a> {
    Mem,
    Redis(&'a SocketAddr, &'a str),
}

impl Backend<'_> {
    fn label(self, lease_size: u64) -> String {
        match self {
            Backend::Mem => "memquota".to_string(),
            Backend::Redis(_, extra) if extra.contains("leaseSize") => {
                format!("redisquota leaseSize {lease_size}")
            }
            Backend::Redis(..) => "redisquota".to_string(),
        }
    }
}

/// [`config`] for `mixer-bench redis-quota-config`: on memquota, or on redisquota at
/// `redis` with `extra` params.
pub fn config_text(
    limits: usize,
    per_minute: u64,
    redis: Option<&SocketAddr>,
    extra: &str,
) -> String {
    let backend = match redis {
        Some(addr) => Backend::Redis(addr, extra),
        None => Backend::Mem,
    };
    config(limits, per_minute, backend)
}

/// Joins redisquota's extra params (YAML flow, without braces), leaving empty ones out.
fn join_params(params: &[&str]) -> String {
    params
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One mixer's config for both protocols: a `ratelimitconfig` with `limits` descriptor keys
/// (`l0`, `l1`, ...), each counting every value on its own, and Mixer v1 quotas `q0`, `q1`,
/// ... (dimension `user`: `source.name`), each at `per_minute` in a fixed window of a minute.
/// The Mixer v1 quota rule matches only requests without an RLS domain: a rule without a
/// match applies to rate limit requests too, and would charge every RLS decision twice.
fn config(limits: usize, per_minute: u64, backend: Backend<'_>) -> String {
    let (rls_backend, adapter, redis_params) = match backend {
        Backend::Redis(addr, extra) => {
            let params = join_params(&[
                &format!("redisServerUrl: \"{addr}\", callTimeout: 20ms"),
                extra,
            ]);
            (
                format!("  backend:\n    adapter: redisquota\n    params: {{{params}}}\n"),
                "redisquota",
                format!("{params}, "),
            )
        }
        Backend::Mem => (String::new(), "memquota", String::new()),
    };
    let mut out = format!(
        "apiVersion: config.istio.io/v1alpha2\nkind: ratelimitconfig\nmetadata: {{name: bench, namespace: istio-system}}\nspec:\n  domain: bench\n{rls_backend}  descriptors:\n"
    );
    for j in 0..limits.max(1) {
        out.push_str(&format!(
            "  - key: l{j}\n    rate_limit: {{unit: minute, requests_per_unit: {per_minute}}}\n"
        ));
    }
    let quotas: Vec<String> = (0..limits.max(1))
        .map(|j| {
            format!(
                "{{name: q{j}.quota.istio-system, maxAmount: {per_minute}, validDuration: 60s, rateLimitAlgorithm: FIXED_WINDOW}}"
            )
        })
        .collect();
    out.push_str(&format!(
        "---\napiVersion: config.istio.io/v1alpha2\nkind: {adapter}\nmetadata: {{name: handler, namespace: istio-system}}\nspec: {{{redis_params}quotas: [{}]}}\n",
        quotas.join(", ")
    ));
    let mut instances = Vec::new();
    for j in 0..limits.max(1) {
        out.push_str(&format!(
            "---\napiVersion: config.istio.io/v1alpha2\nkind: quota\nmetadata: {{name: q{j}, namespace: istio-system}}\nspec:\n  dimensions:\n    user: source.name | \"none\"\n"
        ));
        instances.push(format!("q{j}.quota"));
    }
    out.push_str(&format!(
        "---\napiVersion: config.istio.io/v1alpha2\nkind: rule\nmetadata: {{name: quota, namespace: istio-system}}\nspec:\n  match: (ratelimit.domain | \"\") == \"\"\n  actions:\n  - handler: handler.{adapter}\n    instances: [{}]\n",
        instances.join(", ")
    ));
    out
}

/// The front end a run drives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// Envoy's rate limit service, `ShouldRateLimit`.
    Rls,
    /// Mixer v1 `Check` with one quota.
    MixerV1,
}

impl Protocol {
    const ALL: [Protocol; 2] = [Protocol::Rls, Protocol::MixerV1];

    fn label(self) -> &'static str {
        match self {
            Protocol::Rls => "RLS",
            Protocol::MixerV1 => "Mixer v1",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Protocol::Rls => mixer_frontends::grpc::SHOULD_RATE_LIMIT,
            Protocol::MixerV1 => mixer_frontends::grpc::MIXER_CHECK,
        }
    }

    fn classify(self) -> fn(&[u8]) -> crate::targets::Outcome {
        match self {
            Protocol::Rls => crate::targets::ratelimit_outcome,
            Protocol::MixerV1 => mixer_v1_quota_outcome,
        }
    }

    /// The requests of one run (`run` tells runs apart: see [`mixer_v1_requests`]).
    fn requests(self, limits: usize, keys: usize, run: u64) -> std::sync::Arc<Vec<bytes::Bytes>> {
        match self {
            Protocol::Rls => requests(limits, keys),
            Protocol::MixerV1 => mixer_v1_requests(limits, keys, run),
        }
    }
}

/// Requests spread over `limits` descriptor keys and `keys` values.
fn requests(limits: usize, keys: usize) -> std::sync::Arc<Vec<bytes::Bytes>> {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    let n = keys.max(limits).max(1000);
    let built: Vec<_> = (0..n)
        .map(|i| RateLimitRequest {
            domain: "bench".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: format!("l{}", i % limits.max(1)),
                    value: format!("u{}", i % keys.max(1)),
                }],
                ..Default::default()
            }],
            hits_addend: 1,
        })
        .collect();
    crate::wire::frame_all(&built)
}

/// Mixer v1 Checks in one run: cycled through, the same id comes back only after
/// this many requests, which at any rate one mixer reaches is later than
/// `minDeduplicationDuration` (1 s by default), so every Check is counted.
const MIXER_V1_IDS: usize = 1 << 17;

/// Mixer v1 Checks, each asking one unit of quota `q<i % limits>` for `source.name`
/// `u<i % keys>`, as the RLS requests spread theirs, each with its own deduplication id as
/// Istio's proxies send them (a base per client, here per run, and a counter): the adapters
/// then do the work of the real Istio case (remember every id for its retries). Runs, and
/// the replicas of the over-admission run, get different bases, so that no Check is taken
/// for the retry of another.
pub fn mixer_v1_requests(
    limits: usize,
    keys: usize,
    run: u64,
) -> std::sync::Arc<Vec<bytes::Bytes>> {
    use mixer_model::Value;
    use mixer_proto::istio::mixer::v1 as pb;
    let words = mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT;
    let n = keys.max(limits).max(MIXER_V1_IDS);
    let base = format!("{:08x}{run:08x}", std::process::id());
    let built: Vec<_> = (0..n)
        .map(|i| {
            let user = Value::from(format!("u{}", i % keys.max(1)));
            pb::CheckRequest {
                attributes: Some(mixer_frontends::mixer_v1::encode(
                    [("source.name", &user)],
                    words,
                )),
                global_word_count: words as u32,
                deduplication_id: format!("{base}-{i}"),
                quotas: [(
                    format!("q{}", i % limits.max(1)),
                    pb::check_request::QuotaParams {
                        amount: 1,
                        best_effort: false,
                    },
                )]
                .into(),
            }
        })
        .collect();
    crate::wire::frame_all(&built)
}

/// A Mixer v1 `CheckResponse` with quotas: allowed if the precondition holds and every quota
/// granted something.
pub fn mixer_v1_quota_outcome(message: &[u8]) -> crate::targets::Outcome {
    use crate::targets::Outcome;
    use mixer_proto::istio::mixer::v1 as pb;
    use prost::Message;
    let Ok(response) = pb::CheckResponse::decode(message) else {
        return Outcome::Error;
    };
    let precondition_ok = response
        .precondition
        .and_then(|p| p.status)
        .is_none_or(|s| s.code == 0);
    if precondition_ok && response.quotas.values().all(|q| q.granted_amount > 0) {
        Outcome::Allowed
    } else {
        Outcome::Denied
    }
}

/// One measured run and what it cost.
struct Measured {
    report: Report,
    mixer_cpu: f64,
    redis_cpu: f64,
    commands: u64,
    scripts: u64,
}

impl Measured {
    fn line(&self, label: &str) -> String {
        let k = self.report.calls.max(1) as f64 / 1000.0;
        format!(
            "{label:<44} {:>8.0} req/s  p50 {:>7.1}us  p99 {:>7.1}us  cpu/1000: mixer {:.4}s redis {:.4}s  per decision: redis cmds {:.3}, script calls {:.3}  (denied {}, errors {})",
            self.report.throughput(),
            self.report.micros(50.0),
            self.report.micros(99.0),
            self.mixer_cpu / k,
            self.redis_cpu / k,
            self.commands as f64 / self.report.calls.max(1) as f64,
            self.scripts as f64 / self.report.calls.max(1) as f64,
            self.report.denied,
            self.report.errors,
        )
    }
}

/// What a run drives: a front end and the spread of its requests (prepared for each run).
#[derive(Clone)]
struct Drive {
    protocol: Protocol,
    limits: usize,
    keys: usize,
}

/// Runs driven so far in this process: tells their deduplication ids apart.
static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

async fn measure(
    mixer: &Mixer,
    redis: &Redis,
    load: &LoadArgs,
    drive: &Drive,
    rate: Option<f64>,
) -> anyhow::Result<Measured> {
    // Warm (connections, scripts), unmeasured; then measured with no warm-up of its own, so
    // that the CPU read around it is the measured calls'.
    let warm = LoadArgs {
        duration: load.warmup.max(Duration::from_millis(200)),
        warmup: Duration::ZERO,
        ..load.clone()
    };
    drive_prepared(mixer.grpc, &warm, drive, rate).await?;
    let measured = LoadArgs {
        warmup: Duration::ZERO,
        ..load.clone()
    };
    let (m0, r0, c0) = (
        cpu_seconds(mixer.pid())?,
        cpu_seconds(redis.process.pid())?,
        redis.commands().await?,
    );
    let report = drive_prepared(mixer.grpc, &measured, drive, rate).await?;
    let (m1, r1, c1) = (
        cpu_seconds(mixer.pid())?,
        cpu_seconds(redis.process.pid())?,
        redis.commands().await?,
    );
    Ok(Measured {
        report,
        mixer_cpu: m1 - m0,
        redis_cpu: r1 - r0,
        // The two INFO reads are left out by `commands`.
        commands: c1.0.saturating_sub(c0.0),
        scripts: c1.1.saturating_sub(c0.1),
    })
}

/// Drives `drive`'s requests at `addr` with the lean client, off the runtime.
async fn drive_prepared(
    addr: SocketAddr,
    load: &LoadArgs,
    drive: &Drive,
    rate: Option<f64>,
) -> anyhow::Result<Report> {
    let spec = crate::load::Spec {
        concurrency: load.concurrency.max(1),
        duration: load.duration,
        warmup: load.warmup,
        rate,
    };
    let calls = crate::lean::Calls {
        addr,
        path: drive.protocol.path(),
        requests: drive.protocol.requests(
            drive.limits,
            drive.keys,
            RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        ),
        classify: drive.protocol.classify(),
        connections: load.channels,
    };
    tokio::task::spawn_blocking(move || crate::lean::run(spec, &calls)).await?
}

fn start_mixer(
    bin: &Path,
    dir: &Path,
    name: &str,
    text: &str,
    threads: u16,
) -> anyhow::Result<Mixer> {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text)?;
    Mixer::start(
        bin,
        Some(&path),
        &["--worker-threads".to_string(), threads.to_string()],
    )
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let dir = TempDir::new("mixer-bench-redis-quota")?;
    let redis = Redis::start(&args.redis_server, &dir.0)?;
    let lease_params = join_params(&[
        &args.redis_params,
        &format!("leaseSize: {}", args.lease_size),
    ]);
    let mut backends = vec![
        Backend::Mem,
        Backend::Redis(&redis.addr, &args.redis_params),
    ];
    if args.lease_size > 0 {
        backends.push(Backend::Redis(&redis.addr, &lease_params));
    }
    println!(
        "redis-server at {}; mixer worker threads {}; concurrency {}; {} per run; redisquota params: {{{}}}; lease rows: {}",
        redis.addr,
        args.server_threads,
        args.load.concurrency,
        mixer_model::Duration::from_std(args.load.duration),
        join_params(&["callTimeout: 20ms", &args.redis_params]),
        if args.lease_size > 0 {
            format!("leaseSize {}", args.lease_size)
        } else {
            "none".to_string()
        }
    );
    // Far more than a run sends: every decision counts and none is denied.
    let roomy = 1_000_000_000;
    let mut half_rate = Vec::new();
    for (limits, keys) in [(1, 1), (1, 10_000), (50, 50), (50, 10_000)] {
        // Every backend's mixer runs for the whole case and all are driven in turn, round
        // after round, so that what the shared machine does meanwhile lands on each.
        let mixers: Vec<Mixer> = backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                start_mixer(
                    &args.mixer_bin,
                    &dir.0,
                    &format!("backend-{i}"),
                    &config(limits, roomy, *b),
                    args.server_threads,
                )
            })
            .collect::<anyhow::Result<_>>()?;
        println!("{limits} limit(s), {keys} key(s):");
        for protocol in Protocol::ALL {
            let drive = Drive {
                protocol,
                limits,
                keys,
            };
            let mut runs: Vec<Vec<Measured>> = backends.iter().map(|_| Vec::new()).collect();
            for _ in 0..args.rounds.max(1) {
                for (mixer, runs) in mixers.iter().zip(runs.iter_mut()) {
                    runs.push(measure(mixer, &redis, &args.load, &drive, None).await?);
                }
            }
            for round in 0..runs[0].len() {
                for (backend, runs) in backends.iter().zip(&runs) {
                    let label = format!("{} {}", protocol.label(), backend.label(args.lease_size));
                    println!("  {}", runs[round].line(&label));
                }
            }
            for (backend, on_redis) in backends.iter().zip(&runs).skip(1) {
                let mut ratios: Vec<f64> = runs[0]
                    .iter()
                    .zip(on_redis)
                    .map(|(m, r)| r.report.throughput() / m.report.throughput().max(1e-9))
                    .collect();
                let mut vcpu: Vec<f64> = on_redis
                    .iter()
                    .map(|r| (r.mixer_cpu + r.redis_cpu) / (r.report.calls.max(1) as f64 / 1000.0))
                    .collect();
                println!(
                    "  {} median of {} rounds: {} / memquota throughput = {:.2}; mixer + redis vCPU per 1000 decisions/s = {:.4}",
                    protocol.label(),
                    ratios.len(),
                    backend.label(args.lease_size),
                    crate::report::median(&mut ratios),
                    crate::report::median(&mut vcpu)
                );
            }
            if limits == 1 && keys == 1 {
                // Each Redis mode at half of its own saturation (open loop): #35's p99 goal.
                for (i, backend) in backends.iter().enumerate().skip(1) {
                    let mut saturated: Vec<f64> =
                        runs[i].iter().map(|r| r.report.throughput()).collect();
                    let rate = crate::report::median(&mut saturated) / 2.0;
                    let at_half =
                        measure(&mixers[i], &redis, &args.load, &drive, Some(rate)).await?;
                    half_rate.push((protocol, backend.label(args.lease_size), rate, at_half));
                }
            }
            redis.flush().await?;
        }
        drop(mixers);
        redis.flush().await?;
    }
    for (protocol, backend, rate, at_half) in half_rate {
        println!(
            "{}",
            at_half.line(&format!(
                "{} {backend} at {rate:.0} req/s (half)",
                protocol.label()
            ))
        );
    }
    for backend in &backends[1..] {
        for protocol in Protocol::ALL {
            over_admission(&args, &dir.0, &redis, *backend, protocol).await?;
        }
    }
    Ok(())
}

/// Three replicas on one Redis, one limit (one key) of `shared_limit` a minute, driven at
/// once over `protocol` until it is spent.
async fn over_admission(
    args: &Args,
    dir: &Path,
    redis: &Redis,
    backend: Backend<'_>,
    protocol: Protocol,
) -> anyhow::Result<()> {
    redis.flush().await?;
    let text = config(1, args.shared_limit, backend);
    let replicas: Vec<Mixer> = (0..3)
        .map(|i| {
            start_mixer(
                &args.mixer_bin,
                dir,
                &format!("replica-{i}"),
                &text,
                args.server_threads,
            )
        })
        .collect::<anyhow::Result<_>>()?;
    let drive = Drive {
        protocol,
        limits: 1,
        keys: 1,
    };
    let load = LoadArgs {
        warmup: Duration::ZERO,
        concurrency: (args.load.concurrency / 3).max(1),
        ..args.load.clone()
    };
    let runs = replicas.iter().map(|m| {
        let (addr, load, drive) = (m.grpc, load.clone(), drive.clone());
        async move { drive_prepared(addr, &load, &drive, None).await }
    });
    let mut reports = Vec::new();
    for handle in runs.map(tokio::spawn).collect::<Vec<_>>() {
        reports.push(handle.await?);
    }
    let mut admitted = 0;
    let mut denied = 0;
    let mut errors = 0;
    for r in reports {
        let r = r?;
        admitted += r.allowed;
        denied += r.denied;
        errors += r.errors;
    }
    let over = admitted as f64 / args.shared_limit as f64 - 1.0;
    println!(
        "three replicas, {} {}, one limit of {} a minute: admitted {admitted} (over-admission {:.2}%), denied {denied}, errors {errors}",
        protocol.label(),
        backend.label(args.lease_size),
        args.shared_limit,
        100.0 * over
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::Outcome;
    use mixer_proto::istio::mixer::v1 as pb;
    use prost::Message;

    /// A Mixer v1 quota refusal is a denial (the precondition still holds), so the
    /// over-admission run counts what was admitted, not what was answered.
    #[test]
    fn a_mixer_v1_quota_refusal_is_a_denial() {
        let answer = |granted: i64| {
            pb::CheckResponse {
                precondition: Some(Default::default()),
                quotas: [(
                    "q0".to_string(),
                    pb::check_response::QuotaResult {
                        granted_amount: granted,
                        ..Default::default()
                    },
                )]
                .into(),
            }
            .encode_to_vec()
        };
        assert!(matches!(
            mixer_v1_quota_outcome(&answer(1)),
            Outcome::Allowed
        ));
        assert!(matches!(
            mixer_v1_quota_outcome(&answer(0)),
            Outcome::Denied
        ));
        assert!(matches!(mixer_v1_quota_outcome(b"\xff"), Outcome::Error));
    }

    /// Mixer v1 Checks carry deduplication ids as Istio's proxies send them: none repeats
    /// within a run's cycle, and two runs (or replicas) never share one.
    #[test]
    fn mixer_v1_checks_carry_their_own_deduplication_ids() {
        let ids = |run| -> Vec<String> {
            mixer_v1_requests(1, 1, run)
                .iter()
                .map(|framed| {
                    pb::CheckRequest::decode(&framed[5..])
                        .expect("a CheckRequest")
                        .deduplication_id
                })
                .collect()
        };
        let (first, second) = (ids(0), ids(1));
        assert_eq!(first.len(), MIXER_V1_IDS);
        let mut seen: std::collections::HashSet<&String> = first.iter().collect();
        assert_eq!(seen.len(), first.len(), "an id repeats within a run");
        assert!(first.iter().all(|id| !id.is_empty()));
        seen.extend(second.iter());
        assert_eq!(seen.len(), 2 * MIXER_V1_IDS, "two runs share ids");
    }

    /// Every backend serves both protocols from one config: the Redis params (leases
    /// included) reach both the `ratelimitconfig` backend and the Mixer v1 handler.
    #[test]
    fn one_config_serves_rls_and_mixer_v1_with_the_same_params() {
        let addr: SocketAddr = "127.0.0.1:6379".parse().expect("addr");
        let text = config(
            2,
            10,
            Backend::Redis(&addr, "localCacheSize: 5, leaseSize: 7"),
        );
        assert_eq!(text.matches("leaseSize: 7").count(), 2, "{text}");
        assert!(
            text.contains("kind: redisquota") && text.contains("key: l1"),
            "{text}"
        );
        assert!(text.contains("name: q1.quota.istio-system"), "{text}");
        let mem = config(1, 10, Backend::Mem);
        assert!(
            mem.contains("kind: memquota") && !mem.contains("redisServerUrl"),
            "{mem}"
        );
        assert_eq!(
            Backend::Redis(&addr, "leaseSize: 7").label(7),
            "redisquota leaseSize 7"
        );
        assert_eq!(join_params(&["a: 1", " ", "b: 2"]), "a: 1, b: 2");
    }
}
