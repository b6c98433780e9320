//! `redis-quota`: rate limits counted on Redis (redisquota) beside the same limits in memory
//! (memquota), in one invocation, with a redis-server of the run's own.
//!
//! For each case (1 and 50 limits, 1 and 10,000 keys, i.e. descriptor values counted each on
//! its own) it drives the RLS front end (`ShouldRateLimit`) closed loop against a mixer on
//! memquota and one on redisquota, and prints throughput, p50/p99, the CPU seconds the mixer
//! and Redis spent per 1000 decisions (`/proc/<pid>/stat`), and the Redis commands per
//! decision (`INFO commandstats`). Then the p99 of the Redis case at half of its saturation,
//! and the over-admission of one limit shared by three replicas: all three driven at once
//! until the limit is spent, the sum they admitted against the limit.

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

/// A `ratelimitconfig` with `limits` descriptor keys (`l0`, `l1`, ...), each counting every
/// value on its own, at `per_minute`; on redisquota at `redis` or on memquota.
fn config(limits: usize, per_minute: u64, redis: Option<(&SocketAddr, &str)>) -> String {
    let backend = match redis {
        Some((addr, extra)) => {
            let extra = if extra.trim().is_empty() {
                String::new()
            } else {
                format!(", {extra}")
            };
            format!(
                "  backend:\n    adapter: redisquota\n    params: {{redisServerUrl: \"{addr}\", callTimeout: 20ms{extra}}}\n"
            )
        }
        None => String::new(),
    };
    let mut out = format!(
        "apiVersion: config.istio.io/v1alpha2\nkind: ratelimitconfig\nmetadata: {{name: bench, namespace: istio-system}}\nspec:\n  domain: bench\n{backend}  descriptors:\n"
    );
    for j in 0..limits.max(1) {
        out.push_str(&format!(
            "  - key: l{j}\n    rate_limit: {{unit: minute, requests_per_unit: {per_minute}}}\n"
        ));
    }
    out
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
            "{label:<34} {:>8.0} req/s  p50 {:>7.1}us  p99 {:>7.1}us  cpu/1000: mixer {:.4}s redis {:.4}s  per decision: redis cmds {:.3}, script calls {:.3}  (denied {}, errors {})",
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

async fn measure(
    mixer: &Mixer,
    redis: &Redis,
    load: &LoadArgs,
    prepared: &std::sync::Arc<Vec<bytes::Bytes>>,
    rate: Option<f64>,
) -> anyhow::Result<Measured> {
    // Warm (connections, scripts), unmeasured; then measured with no warm-up of its own, so
    // that the CPU read around it is the measured calls'.
    let warm = LoadArgs {
        duration: load.warmup.max(Duration::from_millis(200)),
        warmup: Duration::ZERO,
        ..load.clone()
    };
    drive_prepared(mixer.grpc, &warm, prepared, rate).await?;
    let measured = LoadArgs {
        warmup: Duration::ZERO,
        ..load.clone()
    };
    let (m0, r0, c0) = (
        cpu_seconds(mixer.pid())?,
        cpu_seconds(redis.process.pid())?,
        redis.commands().await?,
    );
    let report = drive_prepared(mixer.grpc, &measured, prepared, rate).await?;
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

/// [`drive`] with the RLS requests of this scenario.
async fn drive_prepared(
    addr: SocketAddr,
    load: &LoadArgs,
    prepared: &std::sync::Arc<Vec<bytes::Bytes>>,
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
        path: mixer_frontends::grpc::SHOULD_RATE_LIMIT,
        requests: prepared.clone(),
        classify: crate::targets::ratelimit_outcome,
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
    println!(
        "redis-server at {}; mixer worker threads {}; concurrency {}; {} per run; redisquota params: {{callTimeout: 20ms{}}}",
        redis.addr,
        args.server_threads,
        args.load.concurrency,
        mixer_model::Duration::from_std(args.load.duration),
        if args.redis_params.is_empty() {
            String::new()
        } else {
            format!(", {}", args.redis_params)
        }
    );
    // Far more than a run sends: every decision counts and none is denied.
    let roomy = 1_000_000_000;
    let mut half_rate = None;
    for (limits, keys) in [(1, 1), (1, 10_000), (50, 50), (50, 10_000)] {
        let prepared = requests(limits, keys);
        // Both run for the whole case and are driven in turn, round after round, so that
        // what the shared machine does meanwhile lands on both.
        let mem = start_mixer(
            &args.mixer_bin,
            &dir.0,
            "mem",
            &config(limits, roomy, None),
            args.server_threads,
        )?;
        let red = start_mixer(
            &args.mixer_bin,
            &dir.0,
            "redis",
            &config(limits, roomy, Some((&redis.addr, &args.redis_params))),
            args.server_threads,
        )?;
        let (mut on_mem, mut on_redis) = (Vec::new(), Vec::new());
        for _ in 0..args.rounds.max(1) {
            on_mem.push(measure(&mem, &redis, &args.load, &prepared, None).await?);
            on_redis.push(measure(&red, &redis, &args.load, &prepared, None).await?);
        }
        drop(mem);
        println!("{limits} limit(s), {keys} key(s):");
        for (m, r) in on_mem.iter().zip(&on_redis) {
            println!("  {}", m.line("memquota"));
            println!("  {}", r.line("redisquota"));
        }
        let mut ratios: Vec<f64> = on_mem
            .iter()
            .zip(&on_redis)
            .map(|(m, r)| r.report.throughput() / m.report.throughput().max(1e-9))
            .collect();
        let mut vcpu: Vec<f64> = on_redis
            .iter()
            .map(|r| (r.mixer_cpu + r.redis_cpu) / (r.report.calls.max(1) as f64 / 1000.0))
            .collect();
        println!(
            "  median of {} rounds: redisquota / memquota throughput = {:.2}; mixer + redis vCPU per 1000 decisions/s = {:.4}",
            ratios.len(),
            crate::report::median(&mut ratios),
            crate::report::median(&mut vcpu)
        );
        let mut saturated: Vec<f64> = on_redis.iter().map(|r| r.report.throughput()).collect();
        let on_redis_rate = crate::report::median(&mut saturated);
        if limits == 1 && keys == 1 {
            let rate = on_redis_rate / 2.0;
            let at_half = measure(&red, &redis, &args.load, &prepared, Some(rate)).await?;
            half_rate = Some((rate, at_half));
        }
        drop(red);
        redis.flush().await?;
    }
    if let Some((rate, at_half)) = half_rate {
        println!(
            "{}",
            at_half.line(&format!("redisquota at {rate:.0} req/s (half)"))
        );
    }
    over_admission(&args, &dir.0, &redis).await
}

/// Three replicas on one Redis, one limit (one key) of `shared_limit` a minute, driven at
/// once until it is spent.
async fn over_admission(args: &Args, dir: &Path, redis: &Redis) -> anyhow::Result<()> {
    redis.flush().await?;
    let text = config(
        1,
        args.shared_limit,
        Some((&redis.addr, &args.redis_params)),
    );
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
    let prepared = requests(1, 1);
    let load = LoadArgs {
        warmup: Duration::ZERO,
        concurrency: (args.load.concurrency / 3).max(1),
        ..args.load.clone()
    };
    let runs = replicas.iter().map(|m| {
        let (addr, load, prepared) = (m.grpc, load.clone(), prepared.clone());
        async move { drive_prepared(addr, &load, &prepared, None).await }
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
        "three replicas, one limit of {} a minute: admitted {admitted} (over-admission {:.2}%), denied {denied}, errors {errors}",
        args.shared_limit,
        100.0 * over
    );
    Ok(())
}
