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
//! mixer-bench shared --mixer-bin target/release/mixer
//! mixer-bench rlqs --mixer-bin target/release/mixer
//! ```
//!
//! `shared` measures the check cache shared by the replicas (`--shared-cache`): adapter calls
//! and hit ratio of three replicas on a Zipf workload with per-replica caches and with the
//! shared tier, what a shared hit adds over an in-process hit (beside a bare Redis GET), and
//! the all-local-hit throughput with the shared tier on and off.
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
mod compare;
mod lean;
mod load;
mod noop;
mod observe;
mod oop;
mod overload;
mod pacer;
mod pin;
mod platform;
mod process;
mod redis_quota;
mod redis_server;
mod report;
mod rlqs;
mod shared;
mod slow;
mod targets;
mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::load::{Report, Spec};
use crate::targets::{ExtAuthz, ForwardAuth, MixerV1, Unary};
use mixer_frontends::grpc;

#[derive(Parser)]
#[command(name = "mixer-bench", about = "Load generator for the mixer")]
struct Cli {
    /// This process's runtime threads (default: one per core). On a machine shared with the
    /// server, splitting the cores (`--threads 1` here, `--server-threads 1` for the server)
    /// keeps the two from preempting each other, which otherwise dominates tail latency.
    #[arg(long, global = true, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Pins this process to the first CPU it may use and the servers it starts (the mixer,
    /// the no-op baseline, adapters) to the others, so the kernel cannot put the two on one
    /// CPU for a while; with `--threads 1` and `--server-threads 1` on a 2-core machine.
    #[arg(long, global = true)]
    pin: bool,
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
    #[arg(long, default_value = "1s", value_parser = duration_or_zero)]
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
    /// For mixer-v1: each Check asks for one unit of quota `q<i % quotas>` for
    /// `source.name` `u<i % quota-keys>`, with a deduplication id of its own, as
    /// `redis-quota` sends them (serve the config `redis-quota-config` prints); 0: Checks
    /// without quotas, on the attribute bags of `--requests`.
    #[arg(long, default_value_t = 0)]
    quotas: usize,
    /// For mixer-v1 with `--quotas`: the `source.name` values the quotas are counted for.
    #[arg(long, default_value_t = 1)]
    quota_keys: usize,
    /// The gRPC client that drives gRPC targets.
    #[arg(long, value_enum, default_value = "lean")]
    client: GrpcClient,
    /// A header every request carries, `name: value` (repeatable): a bearer token for a
    /// config with an identity rule (`authorization: Bearer ...`).
    #[arg(long = "header", value_parser = header)]
    headers: Vec<(String, String)>,
}

/// The gRPC client of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum GrpcClient {
    /// One thread, no async runtime, connections polled together (see `lean`): the cheapest
    /// per call, so the server gets most of a shared machine.
    Lean,
    /// A task per caller on tokio, over the `h2` crate, each paced by its own timer.
    H2,
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
        /// Baseline/telemetry pairs, alternating; the medians are printed last.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Overload mode: check latency alone (phase A) and while Mixer v1 reports overflow the
    /// report queue of a slow out-of-process adapter that mixer-bench serves (phase B); the
    /// mixer's peak RSS in each phase; sent − arrived − queued against the drop counter.
    Overload(overload::Args),
    /// Out-of-process hop: check latency and throughput through an out-of-process adapter
    /// against the built-in listchecker, beside one no-op gRPC round trip; report records/s
    /// delivered to a remote metric handler against the built-in no-op.
    Oop(oop::Args),
    /// What the machine gives any server: how late a sleeping thread wakes (the floor of a
    /// p99) and a plain TCP round trip between two processes (the floor of a remote hop).
    Platform {
        /// How long each measurement runs.
        #[arg(long, default_value = "3s", value_parser = duration)]
        duration: Duration,
    },
    /// Echo every connection's bytes back (the other end of `platform`'s round trip).
    #[command(hide = true)]
    EchoServer {
        #[arg(long)]
        addr: SocketAddr,
    },
    /// Shared check cache: three replicas, an out-of-process adapter and one redis-server;
    /// adapter calls and hit ratio on a Zipf workload with per-replica caches and with the
    /// shared tier, the latency a shared hit adds, and the hot path with it on and off.
    Shared(shared::Args),
    /// RLQS: bucket usage reports answered per second of the mixer's CPU, beside RLS calls
    /// on the same mixer, and the CPU per 1000 proxy requests admitted under each.
    Rlqs(rlqs::Args),
    /// Serve the out-of-process adapter of `shared` (listentry).
    #[command(hide = true)]
    SharedAdapter {
        #[arg(long)]
        addr: SocketAddr,
    },
    /// Serve the out-of-process adapter of `oop` (listentry and metric).
    #[command(hide = true)]
    OopAdapter {
        #[arg(long)]
        addr: SocketAddr,
    },
    /// Rate limits on Redis beside the same in memory: RLS throughput, p50/p99, CPU and Redis
    /// commands per decision for 1 and 50 limits, 1 and 10,000 keys; p99 at half of
    /// saturation; over-admission of one limit shared by three replicas.
    RedisQuota(redis_quota::Args),
    /// Print a `ratelimitconfig` with `--limits` descriptors, for `compare --target rate-limit`.
    RatelimitConfig {
        /// Number of limits.
        #[arg(long, default_value_t = 1)]
        limits: usize,
        /// Use redisquota at this address (host:port) instead of memquota.
        #[arg(long)]
        redis: Option<String>,
    },
    /// Print the config `redis-quota` serves (a `ratelimitconfig` with `--limits` keys and
    /// Mixer v1 quotas `q0`... on memquota, or on redisquota with `--redis`), for `run
    /// --target mixer-v1 --quotas`.
    RedisQuotaConfig {
        /// Number of limits (and Mixer v1 quotas).
        #[arg(long, default_value_t = 1)]
        limits: usize,
        /// Count on redisquota at this address (host:port) instead of memquota.
        #[arg(long)]
        redis: Option<SocketAddr>,
        /// redisquota's extra params, as YAML flow (`leaseSize: 100`).
        #[arg(long, default_value = "localCacheSize: 100000")]
        redis_params: String,
        /// Each limit's units per minute.
        #[arg(long, default_value_t = 1_000_000_000)]
        per_minute: u64,
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
        /// Rounds, each driving the no-op server and the mixer in turn; the ratios are of
        /// the medians.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[command(flatten)]
        load: LoadArgs,
    },
}

/// A duration that may be zero (`0s`), such as no warm-up.
fn duration_or_zero(text: &str) -> Result<Duration, String> {
    mixer_model::Duration::parse(text)
        .filter(|d| d.0 >= 0)
        .map(|d| d.to_std())
        .ok_or_else(|| format!("{text:?} is not a duration such as 1s or 0s"))
}

fn header(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?} is not a header such as \"authorization: Bearer ...\""))?;
    let name = name.trim().to_ascii_lowercase();
    if name.is_empty() {
        return Err(format!("{text:?} has no header name"));
    }
    Ok((name, value.trim().to_string()))
}

fn duration(text: &str) -> Result<Duration, String> {
    mixer_model::Duration::parse(text)
        .filter(|d| d.0 > 0)
        .map(|d| d.to_std())
        .ok_or_else(|| format!("{text:?} is not a duration such as 5s"))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.pin {
        // Before the runtime's threads start, so that they inherit the mask.
        println!("{}", pin::split()?);
    }
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
        Cmd::RedisQuotaConfig {
            limits,
            redis,
            redis_params,
            per_minute,
        } => {
            print!(
                "{}",
                redis_quota::config_text(limits, per_minute, redis.as_ref(), &redis_params)
            );
            Ok(())
        }
        Cmd::Report {
            mixer_bin,
            config,
            records,
            rounds,
            load,
        } => rt.block_on(report::report_mode(
            &mixer_bin, &config, records, rounds, &load,
        )),
        Cmd::Overload(args) => rt.block_on(overload::run(args)),
        Cmd::Oop(args) => rt.block_on(oop::run(args)),
        Cmd::OopAdapter { addr } => rt.block_on(oop::serve_adapter(addr)),
        Cmd::Shared(args) => rt.block_on(shared::run(args)),
        Cmd::RedisQuota(args) => rt.block_on(redis_quota::run(args)),
        Cmd::Rlqs(args) => rt.block_on(rlqs::run(args)),
        Cmd::SharedAdapter { addr } => rt.block_on(shared::serve_adapter(addr)),
        Cmd::EchoServer { addr } => platform::echo_server(addr),
        Cmd::Platform { duration } => {
            println!("{}", platform::stalls(duration).line());
            let trips = process::raw_round_trips(duration)?;
            println!("{}", platform::round_trip_line(&trips));
            Ok(())
        }
        Cmd::Compare {
            mixer_bin,
            config,
            target,
            no_cache,
            server_threads,
            rounds,
            load,
        } => {
            let comparison = compare::Comparison {
                mixer_bin: &mixer_bin,
                config,
                target,
                no_cache,
                server_threads,
                rounds,
            };
            rt.block_on(compare::compare(&comparison, &load))
        }
    }
}

/// `n` HTTP/2 connections to `addr`, with the generator's lean client (see [`wire`]), so
/// that its share of a 2-core machine stays small.
async fn channels(addr: SocketAddr, n: usize) -> anyhow::Result<Vec<wire::Wire>> {
    let mut out = Vec::new();
    for _ in 0..n.max(1) {
        out.push(wire::Wire::connect(addr).await?);
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
    let mut requests = bags::requests(load.requests.max(1), load.distinct);
    for r in &mut requests {
        r.headers.extend(load.headers.iter().cloned());
    }
    if load.client == GrpcClient::Lean
        && let Some(calls) = lean_calls(target, addr, load, &requests)
    {
        return tokio::task::spawn_blocking(move || lean::run(spec, &calls)).await?;
    }
    Ok(match target {
        Target::ExtAuthz => {
            let prepared = targets::ext_authz_requests(&requests);
            let chans = channels(addr, load.channels).await?;
            load::run(spec, |w| {
                let wire = chans[w % chans.len()].clone();
                ExtAuthz(Unary::new(wire, grpc::EXT_AUTHZ_CHECK, prepared.clone()))
            })
            .await
        }
        Target::ForwardAuth => {
            let prepared = targets::forward_auth_requests(&requests, addr);
            load::run(spec, |_| ForwardAuth::new(addr, prepared.clone())).await
        }
        Target::MixerV1 => {
            let prepared = mixer_v1_prepared(load, &requests);
            let chans = channels(addr, load.channels).await?;
            load::run(spec, |w| {
                let wire = chans[w % chans.len()].clone();
                MixerV1(Unary::new(wire, grpc::MIXER_CHECK, prepared.clone()))
            })
            .await
        }
        Target::RateLimit => {
            let prepared = targets::ratelimit_requests(load.requests.max(1), load.limits);
            let chans = channels(addr, load.channels).await?;
            load::run(spec, |w| {
                let wire = chans[w % chans.len()].clone();
                targets::RateLimit(Unary::new(wire, grpc::SHOULD_RATE_LIMIT, prepared.clone()))
            })
            .await
        }
    })
}

/// Mixer v1 Checks: with quotas (`--quotas`) as `redis-quota` sends them, else on `requests`.
fn mixer_v1_prepared(
    load: &LoadArgs,
    requests: &[bags::Request],
) -> std::sync::Arc<Vec<bytes::Bytes>> {
    if load.quotas > 0 {
        redis_quota::mixer_v1_requests(load.quotas, load.quota_keys, 0)
    } else {
        targets::mixer_v1_requests(requests)
    }
}

/// The lean driver's calls for a gRPC `target`; `None` for forward-auth (HTTP/1.1).
fn lean_calls(
    target: Target,
    addr: SocketAddr,
    load: &LoadArgs,
    requests: &[bags::Request],
) -> Option<lean::Calls> {
    let (path, requests, classify): (_, _, fn(&[u8]) -> targets::Outcome) = match target {
        Target::ExtAuthz => (
            grpc::EXT_AUTHZ_CHECK,
            targets::ext_authz_requests(requests),
            targets::ext_authz_outcome,
        ),
        Target::MixerV1 if load.quotas > 0 => (
            grpc::MIXER_CHECK,
            mixer_v1_prepared(load, requests),
            redis_quota::mixer_v1_quota_outcome,
        ),
        Target::MixerV1 => (
            grpc::MIXER_CHECK,
            mixer_v1_prepared(load, requests),
            targets::mixer_v1_outcome,
        ),
        Target::RateLimit => (
            grpc::SHOULD_RATE_LIMIT,
            targets::ratelimit_requests(load.requests.max(1), load.limits),
            targets::ratelimit_outcome,
        ),
        Target::ForwardAuth => return None,
    };
    Some(lean::Calls {
        addr,
        path,
        requests,
        classify,
        connections: load.channels,
    })
}
