//! `compare`: the mixer's check throughput and tail latency as ratios of a no-op ext_authz
//! server's, measured in the same run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::load::Report;
use crate::process::{Mixer, bench_server};
use crate::{LoadArgs, Target, drive};

/// Drives the no-op ext_authz server (the baseline) in its own process.
pub async fn noop_run(
    load: &LoadArgs,
    rate: Option<f64>,
    threads: Option<u16>,
) -> anyhow::Result<Report> {
    let threads: Vec<String> = threads
        .map(|n| vec!["--threads".to_string(), n.to_string()])
        .unwrap_or_default();
    let (_server, addr) = bench_server(&["noop-server"], &threads)?;
    drive(Target::ExtAuthz, addr, load, rate).await
}

pub async fn compare(
    mixer_bin: &Path,
    config: Option<PathBuf>,
    target: Target,
    no_cache: bool,
    server_threads: Option<u16>,
    load: &LoadArgs,
) -> anyhow::Result<()> {
    // First, while the machine is idle: how often it stalls a thread that does nothing.
    let stalls = crate::platform::stalls(Duration::from_secs(3));
    let baseline = noop_run(load, None, server_threads).await?;
    let mut flags = vec![
        "--check-cache-size".to_string(),
        if no_cache { "0" } else { "10000" }.to_string(),
    ];
    if let Some(n) = server_threads {
        flags.extend(["--worker-threads".to_string(), n.to_string()]);
    }
    let mixer = Mixer::start(mixer_bin, config.as_deref(), &flags)?;
    let addr = match target {
        Target::ExtAuthz | Target::MixerV1 | Target::RateLimit => mixer.grpc,
        Target::ForwardAuth => mixer.http,
    };
    let saturated = drive(target, addr, load, None).await?;
    let half_rate = saturated.throughput() / 2.0;
    let half = drive(target, addr, load, Some(half_rate)).await?;
    drop(mixer);
    // The same rate against the baseline, so the mixer's tail latency can be read against
    // what this machine and load generator give a server that does nothing.
    let baseline_half = noop_run(load, Some(half_rate), server_threads).await?;
    println!("{}", stalls.line());
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
