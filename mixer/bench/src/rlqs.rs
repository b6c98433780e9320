//! `mixer-bench rlqs`: the rate limit quota service (RLQS) beside Envoy's rate limit service
//! (RLS) on one mixer, in the same run.
//!
//! Each round drives, in turn:
//!
//! * RLS (the baseline): `ShouldRateLimit` calls at the load flags' concurrency, one per
//!   proxy request; the mixer's CPU per call.
//! * RLQS: `--proxies` streams, each reporting `--buckets` buckets (each bucket its own
//!   limit, every proxy reporting the same buckets, so each limit is split across all of
//!   them) every 110 ms (just past the service's 100 ms floor between answered reports);
//!   bucket usages answered per second, and per second of the mixer's CPU (a core).
//!
//! CPU per 1000 proxy requests admitted: under RLS each request is a call; under RLQS a proxy
//! admitting `--proxy-rps` requests a second of one bucket sends one usage of it per
//! `--interval`, so 1000 requests cost `1000 / (proxy_rps * interval)` bucket usages. The
//! ratio RLQS/RLS is computed from the two measured costs.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;

use crate::process::{Mixer, TempDir};
use crate::report::median;
use crate::{LoadArgs, Target};

/// `mixer-bench rlqs`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The mixer binary.
    #[arg(long)]
    mixer_bin: PathBuf,
    /// RLQS streams (simulated proxies).
    #[arg(long, default_value_t = 20)]
    proxies: usize,
    /// Buckets per report, each its own limit.
    #[arg(long, default_value_t = 100)]
    buckets: usize,
    /// Requests a second each proxy admits, for the CPU per 1000 admitted requests.
    #[arg(long, default_value_t = 100.0)]
    proxy_rps: f64,
    /// Envoy's reporting interval, for the same.
    #[arg(long, default_value = "1s", value_parser = crate::duration)]
    interval: Duration,
    /// Keep the demands in this Redis (`--shared-cache URL` for the mixer).
    #[arg(long)]
    shared_cache: Option<String>,
    /// Rounds, each driving RLS and RLQS in turn; the medians are printed last.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[command(flatten)]
    load: LoadArgs,
}

/// The gap between two reports of a stream: past the service's floor (100 ms), so that
/// every report is answered.
const REPORT_GAP: Duration = Duration::from_millis(110);

/// RLS's limit (`bench`, `tenant-0`, as `ratelimit-config` writes it) and RLQS's: a limit of
/// its own for every value of the bucket key `bucket`, high enough to be shared, never hit.
fn config() -> String {
    let mut text = crate::targets::ratelimit_config(1, None);
    text.push_str(
        "---\napiVersion: config.istio.io/v1alpha2\nkind: ratelimitconfig\nmetadata: {name: rlqs-bench, namespace: istio-system}\nspec:\n  domain: rlqs-bench\n  descriptors:\n  - key: bucket\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n",
    );
    text
}

/// Runs the rounds and prints each and the medians.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let dir = TempDir::new("mixer-bench-rlqs")?;
    std::fs::write(dir.0.join("limits.yaml"), config())?;
    let extra: Vec<String> = match &args.shared_cache {
        Some(url) => vec!["--shared-cache".into(), url.clone()],
        None => Vec::new(),
    };
    let mixer = Mixer::start(&args.mixer_bin, Some(&dir.0), &extra)?;
    let pid = mixer.pid();
    let (mut rls_costs, mut rlqs_costs, mut rlqs_rates) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=args.rounds.max(1) {
        let before = crate::observe::cpu_seconds(pid).unwrap_or(0.0);
        let rls = crate::drive(Target::RateLimit, mixer.grpc, &args.load, None).await?;
        let rls_cpu = crate::observe::cpu_seconds(pid).unwrap_or(0.0) - before;
        let per_call = rls_cpu / rls.calls.max(1) as f64;
        println!(
            "round {round}: {}  cpu {rls_cpu:.2}s = {:.0} calls per cpu-second",
            rls.line("RLS"),
            1.0 / per_call
        );
        let (usages, elapsed, cpu) = rlqs_run(&mixer, &args, pid).await?;
        let per_usage = cpu / usages.max(1) as f64;
        let offered = (args.proxies.max(1) * args.buckets.max(1)) as f64 / REPORT_GAP.as_secs_f64();
        println!(
            "round {round}: RLQS {} streams x {} buckets: {:.0} bucket usages answered/s of {offered:.0} offered, cpu {cpu:.2}s = {:.0} per cpu-second; shared state errors so far {}",
            args.proxies,
            args.buckets,
            usages as f64 / elapsed.as_secs_f64(),
            1.0 / per_usage,
            crate::observe::scrape(mixer.admin, "mixer_rlqs_shared_state_errors_total")
        );
        rls_costs.push(per_call);
        rlqs_costs.push(per_usage);
        rlqs_rates.push(usages as f64 / elapsed.as_secs_f64());
    }
    let (rls, rlqs) = (median(&mut rls_costs), median(&mut rlqs_costs));
    let usages_per_1000 = 1000.0 / (args.proxy_rps * args.interval.as_secs_f64()).max(1e-9);
    let (rls_1000, rlqs_1000) = (rls * 1000.0, rlqs * usages_per_1000);
    println!(
        "median of {} rounds: RLQS {:.0} bucket usages per cpu-second (goal >= 100000; {:.0}/s answered), RLS {:.0} calls per cpu-second",
        args.rounds.max(1),
        1.0 / rlqs,
        median(&mut rlqs_rates),
        1.0 / rls
    );
    println!(
        "cpu per 1000 proxy requests admitted: RLQS {:.4} cpu-ms ({usages_per_1000:.0} bucket usages at {} requests/s per proxy, a report every {:?}), RLS {:.2} cpu-ms (1000 calls): ratio RLQS/RLS {:.5}",
        rlqs_1000 * 1000.0,
        args.proxy_rps,
        args.interval,
        rls_1000 * 1000.0,
        rlqs_1000 / rls_1000
    );
    Ok(())
}

/// One RLQS run: bucket usages answered, the time taken, the mixer's CPU seconds.
async fn rlqs_run(mixer: &Mixer, args: &Args, pid: u32) -> anyhow::Result<(u64, Duration, f64)> {
    let answered = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Streams spread over connections, a hundred each (within HTTP/2's usual stream limit).
    let mut channels = Vec::new();
    for _ in 0..args.proxies.div_ceil(100).max(1) {
        channels.push(
            tonic::transport::Endpoint::from_shared(format!("http://{}", mixer.grpc))?
                .connect()
                .await
                .context("connecting to the mixer")?,
        );
    }
    let report = Arc::new(RateLimitQuotaUsageReports {
        domain: "rlqs-bench".into(),
        bucket_quota_usages: (0..args.buckets.max(1))
            .map(|b| BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: [("bucket".to_string(), format!("b{b}"))].into(),
                }),
                time_elapsed: Some(ProtoDuration {
                    seconds: 0,
                    nanos: REPORT_GAP.as_nanos() as i32,
                }),
                num_requests_allowed: 10,
                num_requests_denied: 0,
            })
            .collect(),
    });
    let stop = Instant::now() + args.load.warmup + args.load.duration;
    let streams = args.proxies.max(1);
    let mut tasks = Vec::new();
    for p in 0..streams {
        let mut client = RateLimitQuotaServiceClient::new(channels[p % channels.len()].clone());
        let (answered, measuring, report) = (answered.clone(), measuring.clone(), report.clone());
        tasks.push(tokio::spawn(async move {
            let (tx, rx) = tokio::sync::mpsc::channel::<RateLimitQuotaUsageReports>(4);
            let outbound = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|m| (m, rx))
            });
            let mut request = tonic::Request::new(outbound);
            if let Ok(id) = format!("bench-proxy-{p}").parse() {
                request.metadata_mut().insert("x-rlqs-proxy-id", id);
            }
            tx.send((*report).clone()).await.ok()?;
            let mut answers = client
                .stream_rate_limit_quotas(request)
                .await
                .ok()?
                .into_inner();
            let reader = tokio::spawn(async move {
                while let Ok(Some(answer)) = answers.message().await {
                    if measuring.load(Ordering::Relaxed) {
                        answered.fetch_add(answer.bucket_action.len() as u64, Ordering::Relaxed);
                    }
                }
            });
            // Streams start spread over the gap, so their reports do not all land at once.
            tokio::time::sleep(REPORT_GAP.mul_f64(p as f64 / streams as f64)).await;
            let mut tick = tokio::time::interval(REPORT_GAP);
            while Instant::now() < stop {
                tick.tick().await;
                if tx.send((*report).clone()).await.is_err() {
                    break;
                }
            }
            drop(tx);
            reader.abort();
            Some(())
        }));
    }
    tokio::time::sleep(args.load.warmup).await;
    let before = crate::observe::cpu_seconds(pid).unwrap_or(0.0);
    let started = Instant::now();
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(args.load.duration).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let cpu = crate::observe::cpu_seconds(pid).unwrap_or(0.0) - before;
    for t in tasks {
        let _ = t.await;
    }
    Ok((answered.load(Ordering::Relaxed), elapsed, cpu))
}
