//! `compare`: the mixer's check throughput and tail latency as ratios of a no-op ext_authz
//! server's, measured in the same run.
//!
//! Both servers run for the whole comparison and are driven in turn, round after round, so
//! that whatever the shared machine does during the run lands on both; the ratios are of the
//! medians over the rounds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::load::Report;
use crate::process::{Mixer, bench_server};
use crate::report::median;
use crate::{LoadArgs, Target, drive};

/// Drives the no-op ext_authz server (the baseline) in its own process.
pub async fn noop_run(
    load: &LoadArgs,
    rate: Option<f64>,
    threads: Option<u16>,
) -> anyhow::Result<Report> {
    let (_server, addr) = bench_server(&["noop-server"], &thread_flags(threads))?;
    drive(Target::ExtAuthz, addr, load, rate).await
}

fn thread_flags(threads: Option<u16>) -> Vec<String> {
    threads
        .map(|n| vec!["--threads".to_string(), n.to_string()])
        .unwrap_or_default()
}

/// What to compare.
pub struct Comparison<'a> {
    pub mixer_bin: &'a Path,
    pub config: Option<PathBuf>,
    pub target: Target,
    pub no_cache: bool,
    pub server_threads: Option<u16>,
    pub rounds: usize,
}

pub async fn compare(c: &Comparison<'_>, load: &LoadArgs) -> anyhow::Result<()> {
    // First, while the machine is idle: how often it stalls a thread that does nothing.
    let stalls = crate::platform::stalls(Duration::from_secs(3));
    let (_noop, noop) = bench_server(&["noop-server"], &thread_flags(c.server_threads))?;
    let mut flags = vec![
        "--check-cache-size".to_string(),
        if c.no_cache { "0" } else { "10000" }.to_string(),
    ];
    if let Some(n) = c.server_threads {
        flags.extend(["--worker-threads".to_string(), n.to_string()]);
    }
    let mixer = Mixer::start(c.mixer_bin, c.config.as_deref(), &flags)?;
    let addr = match c.target {
        Target::ExtAuthz | Target::MixerV1 | Target::RateLimit => mixer.grpc,
        Target::ForwardAuth => mixer.http,
    };
    let target = c.target;
    let rounds = c.rounds.max(1);

    let (mut baseline, mut saturated) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        baseline.push(drive(Target::ExtAuthz, noop, load, None).await?);
        saturated.push(drive(target, addr, load, None).await?);
    }
    let mixer_rate = median(&mut rates(&saturated));
    let noop_rate = median(&mut rates(&baseline));
    // The same rates against the baseline, so the mixer's tail latency can be read against
    // what this machine and load generator give a server that does nothing. Half of
    // saturation is the target's rate; a quarter shows the curve below it.
    let mut latency = Vec::new();
    for fraction in [0.25, 0.5] {
        let rate = mixer_rate * fraction;
        let (mut at_rate, mut baseline_at_rate) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            at_rate.push(drive(target, addr, load, Some(rate)).await?);
            baseline_at_rate.push(drive(Target::ExtAuthz, noop, load, Some(rate)).await?);
        }
        latency.push((rate, at_rate, baseline_at_rate));
    }
    // The no-op at half of its own saturation: what the target asks of the mixer, asked of a
    // server that does nothing. When it misses too, the machine sets the tail.
    let own_half = noop_rate * 0.5;
    let mut noop_own_half = Vec::new();
    for _ in 0..rounds {
        noop_own_half.push(drive(Target::ExtAuthz, noop, load, Some(own_half)).await?);
    }
    drop(mixer);

    println!("{}", stalls.line());
    for round in 0..rounds {
        println!("round {}", round + 1);
        println!("  {}", baseline[round].line("no-op ext_authz (baseline)"));
        println!(
            "  {}",
            saturated[round].line(&format!("mixer {target:?} saturated"))
        );
        for (rate, at_rate, baseline_at_rate) in &latency {
            println!(
                "  {}",
                at_rate[round].line(&format!("mixer at {rate:.0} req/s"))
            );
            println!(
                "  {}",
                baseline_at_rate[round].line(&format!("no-op at {rate:.0} req/s"))
            );
        }
        println!(
            "  {}",
            noop_own_half[round].line(&format!("no-op at {own_half:.0} req/s"))
        );
    }
    println!("median of {rounds} rounds: no-op {noop_rate:.0} req/s, mixer {mixer_rate:.0} req/s");
    println!(
        "ratio: mixer / baseline throughput = {:.2}  (cache {}, concurrency {}, {} distinct of {} requests; rounds: {})",
        mixer_rate / noop_rate.max(1e-9),
        if c.no_cache { "off" } else { "on" },
        load.concurrency,
        load.distinct,
        load.requests,
        saturated
            .iter()
            .zip(&baseline)
            .map(|(m, n)| format!("{:.2}", m.throughput() / n.throughput().max(1e-9)))
            .collect::<Vec<_>>()
            .join(" ")
    );
    for (rate, at_rate, baseline_at_rate) in &latency {
        let (mixer_p99, noop_p99) = (
            median(&mut p99s(at_rate)),
            median(&mut p99s(baseline_at_rate)),
        );
        println!(
            "p99 at {rate:.0} req/s ({:.0}% of the mixer's saturation): mixer {mixer_p99:.0} us, no-op {noop_p99:.0} us, ratio {:.2}",
            100.0 * rate / mixer_rate.max(1e-9),
            mixer_p99 / noop_p99.max(1e-9)
        );
    }
    println!(
        "p99 of the no-op at half of its own saturation ({own_half:.0} req/s): {:.0} us",
        median(&mut p99s(&noop_own_half))
    );
    Ok(())
}

fn rates(reports: &[Report]) -> Vec<f64> {
    reports.iter().map(Report::throughput).collect()
}

fn p99s(reports: &[Report]) -> Vec<f64> {
    reports.iter().map(|r| r.micros(99.0)).collect()
}
