//! `mixer-bench`: drives the mixer's check protocols at a fixed concurrency or a fixed rate and
//! reports throughput and latency percentiles, beside a no-op ext_authz baseline measured in
//! the same run.
//!
//! ```text
//! mixer-bench compare --mixer-bin target/release/mixer --target ext-authz --no-cache
//! mixer-bench run --target forward-auth --addr 127.0.0.1:9092 --rate 5000
//! mixer-bench noop-server --addr 127.0.0.1:9191
//! mixer-bench report --mixer-bin target/release/mixer --config policies/telemetry/config
//! mixer-bench overload --mixer-bin target/release/mixer
//! ```
//!
//! `report` measures the report path: records/s and the mixer's CPU seconds per 1000 requests,
//! beside a mixer with no report rules.
//!
//! `overload` checks that reports cannot slow checks down. mixer-bench serves a slow out-of-process
//! `metric` adapter itself (1 s per batch by default) and starts the mixer with the check rules of
//! `configs/checks-10-rules.yaml` (or `--config`), a rule sending every report record to that
//! adapter, and a small report queue (1000 records, batches of 100). Phase A drives ext_authz
//! checks alone at a fixed rate (`--rate`, or half of the measured saturation); phase B drives the
//! same checks while Mixer v1 reporters send records as fast as the mixer answers (or at
//! `--report-rate`), far more than 10x the queue's capacity. It prints the percentiles of both
//! phases and their ratio B/A, the mixer's peak RSS (VmHWM) in each phase, and, once the queue has
//! drained, whether records sent − records the adapter received − records still queued equals the
//! mixer's `mixer_report_dropped_total`.

mod bags;
mod load;
mod noop;
mod overload;
mod pacer;
mod report;
mod slow;
mod targets;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use tonic::transport::{Channel, Endpoint};

use crate::load::{Report, Spec};
use crate::targets::{ExtAuthz, ForwardAuth, MixerV1};

#[derive(Parser)]
#[command(name = "mixer-bench", about = "Load generator for the mixer")]
struct Cli {
    /// This process's runtime threads (default: one per core). On a machine shared with the
    /// server, splitting the cores (`--threads 1` here, `--server-threads 1` for the server)
    /// keeps the two from preempting each other, which otherwise dominates tail latency.
    #[arg(long, global = true, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Target {
    /// envoy.service.auth.v3.Authorization/Check over gRPC.
    ExtAuthz,
    /// HTTP forward-auth (`/check`).
    ForwardAuth,
    /// istio.mixer.v1.Mixer/Check over gRPC.
    MixerV1,
    /// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit over gRPC (`--limits`).
    RateLimit,
}

#[derive(clap::Args, Clone)]
struct LoadArgs {
    /// Concurrent callers.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Measured time per run.
    #[arg(long, default_value = "5s", value_parser = duration)]
    duration: Duration,
    /// Unmeasured warm-up per run.
    #[arg(long, default_value = "1s", value_parser = duration)]
    warmup: Duration,
    /// Prepared requests, cycled through.
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// Distinct request ids/query strings among them (fewer means more repeats).
    #[arg(long, default_value_t = 1000)]
    distinct: usize,
    /// gRPC channels (HTTP/2 connections) shared by the callers.
    #[arg(long, default_value_t = 4)]
    channels: usize,
    /// For rate-limit: how many configured limits the requests spread over.
    #[arg(long, default_value_t = 1)]
    limits: usize,
}

#[derive(Subcommand)]
enum Cmd {
    /// Drive a running server.
    Run {
        #[arg(long, value_enum)]
        target: Target,
        /// Server address (gRPC address for ext-authz, HTTP address for forward-auth).
        #[arg(long)]
        addr: SocketAddr,
        /// Requests per second in total (open loop); without it, closed loop.
        #[arg(long)]
        rate: Option<f64>,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Serve an always-OK ext_authz service (the baseline).
    NoopServer {
        #[arg(long, default_value = "127.0.0.1:9191")]
        addr: SocketAddr,
    },
    /// Report mode: Mixer v1 Reports with several records per request against a mixer with
    /// the given telemetry config and, as the baseline, against one with no report rules;
    /// prints requests/s, records/s and the mixer's CPU seconds per 1000 requests.
    Report {
        /// The mixer binary.
        #[arg(long)]
        mixer_bin: PathBuf,
        /// The telemetry config (e.g. policies/telemetry/config).
        #[arg(long)]
        config: PathBuf,
        /// Records per request.
        #[arg(long, default_value_t = 3)]
        records: usize,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Overload mode: check latency alone (phase A) and while Mixer v1 reports overflow the
    /// report queue of a slow out-of-process adapter that mixer-bench serves (phase B); the
    /// mixer's peak RSS in each phase; sent − arrived − queued against the drop counter.
    Overload(overload::Args),
    /// Print a `ratelimitconfig` with `--limits` descriptors, for `compare --target rate-limit`.
    RatelimitConfig {
        /// Number of limits.
        #[arg(long, default_value_t = 1)]
        limits: usize,
        /// Use redisquota at this address (host:port) instead of memquota.
        #[arg(long)]
        redis: Option<String>,
    },
    /// Start the baseline and the mixer one after the other, drive both, print the ratio
    /// and the latency at half of the mixer's saturation throughput.
    Compare {
        /// The mixer binary.
        #[arg(long)]
        mixer_bin: PathBuf,
        /// Config for the mixer (default: its embedded config).
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "ext-authz")]
        target: Target,
        /// Turn the mixer's check cache off.
        #[arg(long)]
        no_cache: bool,
        /// Worker threads of the mixer and of the no-op server (default: one per core).
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        server_threads: Option<u16>,
        #[command(flatten)]
        load: LoadArgs,
    },
}

fn duration(text: &str) -> Result<Duration, String> {
    mixer_model::Duration::parse(text)
        .filter(|d| d.0 > 0)
        .map(|d| d.to_std())
        .ok_or_else(|| format!("{text:?} is not a duration such as 5s"))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = cli.threads {
        builder.worker_threads(usize::from(n));
    }
    let rt = builder.enable_all().build()?;
    match cli.command {
        Cmd::NoopServer { addr } => rt.block_on(noop::serve(addr)),
        Cmd::Run {
            target,
            addr,
            rate,
            load,
        } => {
            let report = rt.block_on(drive(target, addr, &load, rate))?;
            println!("{}", report.line(&format!("{target:?}")));
            Ok(())
        }
        Cmd::RatelimitConfig { limits, redis } => {
            print!("{}", targets::ratelimit_config(limits, redis.as_deref()));
            Ok(())
        }
        Cmd::Report {
            mixer_bin,
            config,
            records,
            load,
        } => rt.block_on(report_mode(&mixer_bin, &config, records, &load)),
        Cmd::Overload(args) => rt.block_on(overload::run(args)),
        Cmd::Compare {
            mixer_bin,
            config,
            target,
            no_cache,
            server_threads,
            load,
        } => rt.block_on(compare(
            &mixer_bin,
            config,
            target,
            no_cache,
            server_threads,
            &load,
        )),
    }
}

async fn channels(addr: SocketAddr, n: usize) -> anyhow::Result<Vec<Channel>> {
    let mut out = Vec::new();
    for _ in 0..n.max(1) {
        out.push(
            Endpoint::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .connect()
                .await?,
        );
    }
    Ok(out)
}

async fn drive(
    target: Target,
    addr: SocketAddr,
    load: &LoadArgs,
    rate: Option<f64>,
) -> anyhow::Result<Report> {
    let spec = Spec {
        concurrency: load.concurrency.max(1),
        duration: load.duration,
        warmup: load.warmup,
        rate,
    };
    let requests = bags::requests(load.requests.max(1), load.distinct);
    Ok(match target {
        Target::ExtAuthz => {
            let prepared = targets::ext_authz_requests(&requests);
            let chans = channels(addr, load.channels).await?;
            load::run(spec, |w| {
                ExtAuthz::new(chans[w % chans.len()].clone(), prepared.clone())
            })
            .await
        }
        Target::ForwardAuth => {
            let prepared = targets::forward_auth_requests(&requests, addr);
            load::run(spec, |_| ForwardAuth::new(addr, prepared.clone())).await
        }
        Target::MixerV1 => {
            let prepared = targets::mixer_v1_requests(&requests);
            let chans = channels(addr, load.channels).await?;
            load::run(spec, |w| {
                MixerV1::new(chans[w % chans.len()].clone(), prepared.clone())
            })
            .await
        }
        Target::RateLimit => {
            let prepared = targets::ratelimit_requests(load.requests.max(1), load.limits);
            let chans = channels(addr, load.channels).await?;
            load::run(spec, |w| {
                targets::RateLimit::new(chans[w % chans.len()].clone(), prepared.clone())
            })
            .await
        }
    })
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

fn wait_port(addr: SocketAddr) -> anyhow::Result<()> {
    let start = Instant::now();
    while TcpStream::connect(addr).is_err() {
        if start.elapsed() > Duration::from_secs(20) {
            bail!("{addr} did not start listening");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Drives the no-op ext_authz server (the baseline) in its own process.
async fn noop_run(
    load: &LoadArgs,
    rate: Option<f64>,
    threads: Option<u16>,
) -> anyhow::Result<Report> {
    let addr = free_addr()?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["noop-server", "--addr", &addr.to_string()]);
    if let Some(n) = threads {
        cmd.args(["--threads", &n.to_string()]);
    }
    let _server = Killed(
        cmd.stdout(Stdio::null())
            .spawn()
            .context("starting the no-op server")?,
    );
    wait_port(addr)?;
    drive(Target::ExtAuthz, addr, load, rate).await
}

async fn compare(
    mixer_bin: &std::path::Path,
    config: Option<PathBuf>,
    target: Target,
    no_cache: bool,
    server_threads: Option<u16>,
    load: &LoadArgs,
) -> anyhow::Result<()> {
    let baseline = noop_run(load, None, server_threads).await?;
    let (grpc, http, admin) = (free_addr()?, free_addr()?, free_addr()?);
    let mut cmd = Command::new(mixer_bin);
    cmd.arg("serve")
        .args([
            "--grpc-addr",
            &grpc.to_string(),
            "--http-addr",
            &http.to_string(),
            "--admin-addr",
            &admin.to_string(),
        ])
        .args(["--check-cache-size", if no_cache { "0" } else { "10000" }])
        .args(
            server_threads
                .map(|n| vec!["--worker-threads".to_string(), n.to_string()])
                .unwrap_or_default(),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(c) = &config {
        cmd.arg("--config").arg(c);
    }
    let mixer = Killed(cmd.spawn().context("starting the mixer")?);
    wait_port(admin)?;
    wait_port(grpc)?;
    let addr = match target {
        Target::ExtAuthz | Target::MixerV1 | Target::RateLimit => grpc,
        Target::ForwardAuth => http,
    };
    let saturated = drive(target, addr, load, None).await?;
    let half_rate = saturated.throughput() / 2.0;
    let half = drive(target, addr, load, Some(half_rate)).await?;
    drop(mixer);
    // The same rate against the baseline, so the mixer's tail latency can be read against
    // what this machine and load generator give a server that does nothing.
    let baseline_half = noop_run(load, Some(half_rate), server_threads).await?;
    println!("{}", baseline.line("no-op ext_authz (baseline)"));
    println!("{}", saturated.line(&format!("mixer {target:?} saturated")));
    println!("{}", half.line(&format!("mixer at {half_rate:.0} req/s")));
    println!(
        "{}",
        baseline_half.line(&format!("no-op at {half_rate:.0} req/s"))
    );
    println!(
        "ratio: mixer / baseline throughput = {:.2}  (cache {}, concurrency {}, {} distinct of {} requests)",
        saturated.throughput() / baseline.throughput().max(1e-9),
        if no_cache { "off" } else { "on" },
        load.concurrency,
        load.distinct,
        load.requests
    );
    println!(
        "ratio: mixer / baseline p99 at {half_rate:.0} req/s = {:.2}",
        half.micros(99.0) / baseline_half.micros(99.0).max(1e-9)
    );
    Ok(())
}

async fn report_run(
    mixer_bin: &std::path::Path,
    config: &std::path::Path,
    records: usize,
    load: &LoadArgs,
) -> anyhow::Result<(Report, f64, f64, f64)> {
    let (grpc, http, admin) = (free_addr()?, free_addr()?, free_addr()?);
    let child = Command::new(mixer_bin)
        .arg("serve")
        .args([
            "--grpc-addr",
            &grpc.to_string(),
            "--http-addr",
            &http.to_string(),
            "--admin-addr",
            &admin.to_string(),
        ])
        .arg("--config")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the mixer")?;
    let pid = child.id();
    let _mixer = Killed(child);
    report::wait_ready(admin)?;
    let requests = bags::requests(load.requests.max(1), load.distinct);
    let prepared = report::report_requests(&requests, records);
    let chans = channels(grpc, load.channels).await?;
    let spec = Spec {
        concurrency: load.concurrency.max(1),
        duration: load.duration,
        warmup: Duration::ZERO,
        rate: None,
    };
    let before = report::cpu_seconds(pid).unwrap_or(0.0);
    let result = load::run(spec, |w| {
        report::Reporter::new(chans[w % chans.len()].clone(), prepared.clone())
    })
    .await;
    // Let the queues drain before reading CPU and drops.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu = report::cpu_seconds(pid).unwrap_or(0.0) - before;
    let delivered = report::scrape(admin, "mixer_report_delivered_total");
    let dropped = report::scrape(admin, "mixer_report_dropped_total");
    Ok((result, cpu, delivered, dropped))
}

async fn report_mode(
    mixer_bin: &std::path::Path,
    config: &std::path::Path,
    records: usize,
    load: &LoadArgs,
) -> anyhow::Result<()> {
    if !report::exists(config) {
        bail!("{} does not exist", config.display());
    }
    let empty = std::env::temp_dir().join(format!("mixer-bench-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty)?;
    let (base, base_cpu, _, _) = report_run(mixer_bin, &empty, records, load).await?;
    let (run, cpu, delivered, dropped) = report_run(mixer_bin, config, records, load).await?;
    let _ = std::fs::remove_dir_all(&empty);
    let per_1000 = |cpu: f64, r: &Report| cpu / (r.calls.max(1) as f64 / 1000.0);
    println!(
        "{}  cpu {:.2}s = {:.4} cpu-s per 1000 requests",
        base.line("no report rules (baseline)"),
        base_cpu,
        per_1000(base_cpu, &base)
    );
    println!(
        "{}  cpu {:.2}s = {:.4} cpu-s per 1000 requests",
        run.line("telemetry config"),
        cpu,
        per_1000(cpu, &run)
    );
    println!(
        "records: {:.0}/s ingested ({} per request); instances delivered {delivered:.0}, dropped {dropped:.0}; cpu ratio telemetry/baseline per request {:.2}",
        run.throughput() * records as f64,
        records,
        per_1000(cpu, &run) / per_1000(base_cpu, &base).max(1e-9)
    );
    Ok(())
}
