//! Overload mode: do checks keep their latency while reports overload a slow adapter?
//!
//! mixer-bench serves a slow out-of-process `metric` adapter ([`crate::slow`]), starts the
//! mixer with the check rules plus a rule sending every report record to that adapter, and
//! small report queue bounds. Phase A drives ext_authz checks alone at a fixed rate; phase B
//! drives the same checks while Mixer v1 reporters push records as fast as the mixer takes
//! them, many times what the queue holds. It prints both phases' latency percentiles and
//! their ratio, the mixer's peak RSS in each phase, and whether every record is accounted
//! for: sent − arrived at the adapter − still queued = counted as dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::load::{self, Report, Spec};
use crate::observe;
use crate::process::{Mixer, TempDir};
use crate::{LoadArgs, Target, bags, report, slow};

/// The check rules used unless `--config` names others.
const CHECK_RULES: &str = include_str!("../configs/checks-10-rules.yaml");

/// The report handler's name as the mixer labels its metrics.
const HANDLER: &str = "slow.istio-system";

/// The mixer gives one report batch 10 s (its queue's call timeout), retries included.
const MIXER_BATCH_LIMIT: Duration = Duration::from_secs(10);

/// Flags of `mixer-bench overload`.
#[derive(clap::Args)]
pub struct Args {
    /// The mixer binary.
    #[arg(long)]
    mixer_bin: PathBuf,
    /// Check rules (a YAML file or a folder of them); default: configs/checks-10-rules.yaml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Check requests per second in both phases; default: half of the measured saturation.
    #[arg(long)]
    rate: Option<f64>,
    /// Time the slow adapter takes per batch (at most 4s).
    #[arg(long, default_value = "1s", value_parser = crate::duration)]
    adapter_delay: Duration,
    /// The mixer's --report-queue-records.
    #[arg(long, default_value_t = 1000)]
    queue_records: usize,
    /// The mixer's --report-queue-megabytes.
    #[arg(long, default_value_t = 1)]
    queue_megabytes: usize,
    /// The mixer's --report-batch-size.
    #[arg(long, default_value_t = 100)]
    batch_size: usize,
    /// Records per Report request.
    #[arg(long, default_value_t = 3)]
    records: usize,
    /// Concurrent reporters in phase B.
    #[arg(long, default_value_t = 4)]
    reporters: usize,
    /// Report requests per second in phase B, in total; default: full speed (each reporter
    /// sends as soon as its last answer came). A rate separates the effect of an overflowing
    /// queue from that of a CPU shared with as many reports as the mixer can take.
    #[arg(long)]
    report_rate: Option<f64>,
    /// Turn the mixer's check cache off.
    #[arg(long)]
    no_cache: bool,
    #[command(flatten)]
    load: LoadArgs,
}

/// The handler, instance and rule sending every report record to the adapter at `adapter`.
fn report_config(adapter: SocketAddr, timeout: Duration) -> String {
    format!(
        r#"# Written by mixer-bench overload: every report record goes to the slow adapter.
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: slow, namespace: istio-system}}
spec:
  adapter: slow-metrics
  connection: {{address: "{adapter}", timeout: {timeout}ms}}
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {{name: requestcount, namespace: istio-system}}
spec:
  compiledTemplate: metric
  params:
    value: "1"
    dimensions:
      method: request.method | "unknown"
      response_code: response.code | 200
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {{name: report-everything, namespace: istio-system}}
spec:
  actions: [{{handler: slow, instances: [requestcount]}}]
"#,
        timeout = timeout.as_millis()
    )
}

/// Writes the check rules (`checks` or the built-in ones) and the report config into `dir`.
fn write_config(dir: &Path, checks: Option<&Path>, report: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    match checks {
        None => std::fs::write(dir.join("checks.yaml"), CHECK_RULES)?,
        Some(p) if p.is_dir() => {
            for entry in std::fs::read_dir(p).with_context(|| format!("reading {}", p.display()))? {
                let path = entry?.path();
                let yaml = path.extension().is_some_and(|e| e == "yaml" || e == "yml");
                if let (true, Some(name)) = (yaml, path.file_name()) {
                    let to = dir.join(format!("checks-{}", name.to_string_lossy()));
                    std::fs::copy(&path, to)
                        .with_context(|| format!("copying {}", path.display()))?;
                }
            }
        }
        Some(p) => {
            std::fs::copy(p, dir.join("checks.yaml"))
                .with_context(|| format!("copying {}", p.display()))?;
        }
    }
    std::fs::write(dir.join("overload-report.yaml"), report)?;
    Ok(())
}

/// A field of /proc/PID/status in kB (`VmHWM`, `VmRSS`).
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status_kib(&status, field)
}

fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// Resets the peak RSS (VmHWM) of `pid` to its current RSS, so the next phase's peak is its
/// own rather than the largest since start; false when the kernel does not allow it.
fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or_else(|| "?".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
}

/// The mixer's report counters for the slow handler.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    dropped: f64,
    delivered: f64,
    queued: f64,
}

fn counters(admin: SocketAddr) -> Counters {
    let page = observe::metrics_page(admin);
    let label = format!("handler=\"{HANDLER}\"");
    Counters {
        dropped: observe::sum(&page, "mixer_report_dropped_total", &label),
        delivered: observe::sum(&page, "mixer_report_delivered_total", &label),
        queued: observe::sum(&page, "mixer_report_queued", &label),
    }
}

/// Phase B's reporters, on their own thread and runtime so that their tasks never queue
/// ahead of the check load's on the same tokio workers (the CPU is still shared).
fn spawn_reporters(
    grpc: SocketAddr,
    args: &Args,
    window: Duration,
) -> std::thread::JoinHandle<anyhow::Result<Report>> {
    let requests = bags::requests(args.load.requests.max(1), args.load.distinct);
    let prepared = report::report_requests(&requests, args.records);
    let (channels, concurrency, rate) =
        (args.load.channels, args.reporters.max(1), args.report_rate);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let chans = crate::channels(grpc, channels).await?;
            let spec = Spec {
                concurrency,
                duration: window,
                warmup: Duration::ZERO,
                rate,
            };
            Ok(load::run(spec, |w| {
                report::Reporter::on(chans[w % chans.len()].clone(), prepared.clone())
            })
            .await)
        })
    })
}

/// Waits until the slow handler's queue is empty and no batch is at the adapter, for as
/// long as draining a full queue can take; false if it did not settle by then.
async fn wait_drained(admin: SocketAddr, adapter: &slow::Slow, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut settled = 0;
    while Instant::now() < deadline {
        let idle = counters(admin).queued == 0.0 && adapter.in_progress() == 0;
        // Between taking a batch off the queue and the call reaching the adapter both read
        // zero: only a state that lasts over several polls counts as drained.
        settled = if idle { settled + 1 } else { 0 };
        if settled >= 4 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

/// Runs the overload benchmark and prints its results.
pub async fn run(args: Args) -> anyhow::Result<()> {
    if args.report_rate.is_some_and(|r| r.is_nan() || r <= 0.0) {
        bail!("--report-rate must be positive");
    }
    if [
        args.queue_records,
        args.queue_megabytes,
        args.batch_size,
        args.records,
    ]
    .contains(&0)
    {
        bail!("--queue-records, --queue-megabytes, --batch-size and --records must be at least 1");
    }
    // Each batch call needs room for the delay within the mixer's per-batch limit.
    let call_timeout = args
        .adapter_delay
        .saturating_mul(2)
        .saturating_add(Duration::from_secs(2));
    if call_timeout >= MIXER_BATCH_LIMIT {
        bail!("--adapter-delay must be at most 4s: the mixer gives one report batch 10 s");
    }
    let adapter = slow::start(args.adapter_delay).await?;
    let dir =
        TempDir(std::env::temp_dir().join(format!("mixer-bench-overload-{}", std::process::id())));
    write_config(
        &dir.0,
        args.config.as_deref(),
        &report_config(adapter.addr, call_timeout),
    )?;
    let flags: Vec<String> = [
        "--check-cache-size",
        if args.no_cache { "0" } else { "10000" },
        "--report-queue-records",
        &args.queue_records.to_string(),
        "--report-queue-megabytes",
        &args.queue_megabytes.to_string(),
        "--report-batch-size",
        &args.batch_size.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let mixer = Mixer::start(&args.mixer_bin, Some(&dir.0), &flags)
        .context("the mixer did not accept the overload config")?;
    let (grpc, admin, pid) = (mixer.grpc, mixer.admin, mixer.pid());

    let rate = match args.rate {
        Some(r) if r > 0.0 => r,
        Some(_) => bail!("--rate must be positive"),
        None => {
            let saturated = crate::drive(Target::ExtAuthz, grpc, &args.load, None).await?;
            println!("{}", saturated.line("checks saturated"));
            saturated.throughput() / 2.0
        }
    };

    reset_peak(pid);
    let a = crate::drive(Target::ExtAuthz, grpc, &args.load, Some(rate)).await?;
    let peak_a = status_kib(pid, "VmHWM");
    let before_b = counters(admin);
    let arrived_before_b = adapter.adapter.received();

    let peak_reset = reset_peak(pid);
    let window = args.load.warmup.saturating_add(args.load.duration);
    let reporters = spawn_reporters(grpc, &args, window);
    let b = crate::drive(Target::ExtAuthz, grpc, &args.load, Some(rate)).await?;
    let sent = tokio::task::spawn_blocking(move || reporters.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the reporter thread panicked"))??;
    let at_end = counters(admin);

    // A full queue drains in one adapter call per batch, plus the batch already at the
    // adapter; the margins cover batching waits and a loaded machine's scheduling.
    let calls = u32::try_from(args.queue_records.div_ceil(args.batch_size) + 1).unwrap_or(u32::MAX);
    let drain_limit = (args.adapter_delay + Duration::from_millis(500))
        .saturating_mul(calls)
        .saturating_add(Duration::from_secs(5));
    let drained = wait_drained(admin, &adapter.adapter, drain_limit).await;
    let after = counters(admin);
    // Phase B's peak covers the drain too: the overload episode lasts until the queue is empty.
    let peak_b = status_kib(pid, "VmHWM");
    let rss_after = status_kib(pid, "VmRSS");
    drop(mixer);

    let records_sent = sent.allowed.saturating_mul(args.records as u64);
    let arrived = adapter.adapter.received() - arrived_before_b;
    let in_flight = adapter.adapter.in_progress();
    let dropped = after.dropped - before_b.dropped;
    let unaccounted = records_sent as f64 - arrived as f64 - after.queued - dropped;

    println!("{}", a.line(&format!("A: checks at {rate:.0}/s")));
    println!("{}", b.line("B: same + reports"));
    let ratio = |p: f64| b.micros(p) / a.micros(p).max(1e-9);
    println!(
        "check latency B/A: p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}",
        ratio(50.0),
        ratio(90.0),
        ratio(99.0),
        ratio(99.9)
    );
    println!(
        "reports: {} requests ok, {} failed; {records_sent} records sent ({:.1}x the queue's {} records), {:.0} records/s; {} records per request, {} reporters at {}",
        sent.allowed,
        sent.errors,
        records_sent as f64 / args.queue_records as f64,
        args.queue_records,
        records_sent as f64 / sent.elapsed.as_secs_f64().max(1e-9),
        args.records,
        args.reporters.max(1),
        args.report_rate
            .map_or_else(|| "full speed".into(), |r| format!("{r:.0} requests/s")),
    );
    println!(
        "slow adapter ({:?} per batch of at most {}): {arrived} records arrived in {} batches ({arrived_before_b} during phase A); mixer: delivered {:.0}, dropped {dropped:.0}, queued {:.0} when load stopped",
        args.adapter_delay,
        args.batch_size,
        adapter.adapter.batches(),
        after.delivered - before_b.delivered,
        at_end.queued,
    );
    println!(
        "accounting after {}: sent {records_sent} - arrived {arrived} - still queued {:.0} = {:.0}; dropped {dropped:.0} ({} in flight at the adapter): {}",
        if drained {
            "the queue drained"
        } else {
            "the drain wait ran out"
        },
        after.queued,
        records_sent as f64 - arrived as f64 - after.queued,
        in_flight,
        if unaccounted == 0.0 && sent.errors == 0 {
            "holds"
        } else {
            "DOES NOT HOLD"
        }
    );
    println!(
        "mixer peak RSS (VmHWM): A {}, B {} (load and drain{}; {} over A); RSS after draining {}; queue bound {} records / {} MiB per handler",
        mib(peak_a),
        mib(peak_b),
        if peak_reset { "" } else { ", peak since start" },
        match (peak_a, peak_b) {
            (Some(a), Some(b)) => format!("{:+.1} MiB", (b as f64 - a as f64) / 1024.0),
            _ => "?".into(),
        },
        mib(rss_after),
        args.queue_records,
        args.queue_megabytes
    );
    if records_sent < (args.queue_records as u64).saturating_mul(10) {
        println!(
            "note: fewer than 10x the queue's capacity was sent; raise --duration or --reporters"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kib_fields_of_proc_status() {
        let status = "Name:\tmixer\nVmPeak:\t  900 kB\nVmHWM:\t   51234 kB\nVmRSS:\t   40000 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM"), Some(51234));
        assert_eq!(parse_status_kib(status, "VmRSS"), Some(40000));
        assert_eq!(parse_status_kib(status, "VmSwap"), None);
    }

    #[test]
    fn counts_only_the_named_family_and_handler() {
        let page = "# TYPE mixer_report_dropped_total counter\n\
            mixer_report_dropped_total{handler=\"slow.istio-system\",reason=\"queue_full\"} 40\n\
            mixer_report_dropped_total{handler=\"slow.istio-system\",reason=\"handler_error\"} 2\n\
            mixer_report_dropped_total{handler=\"other.istio-system\",reason=\"queue_full\"} 7\n\
            mixer_report_dropped_total_extra{handler=\"slow.istio-system\"} 100\n";
        let label = format!("handler=\"{HANDLER}\"");
        assert_eq!(
            observe::sum(page, "mixer_report_dropped_total", &label),
            42.0
        );
        assert_eq!(observe::sum(page, "mixer_report_dropped_total", ""), 49.0);
    }

    #[test]
    fn writes_checks_and_the_report_rule() {
        let dir = TempDir(
            std::env::temp_dir().join(format!("mixer-bench-overload-test-{}", std::process::id())),
        );
        let addr: SocketAddr = "127.0.0.1:7001".parse().unwrap();
        write_config(&dir.0, None, &report_config(addr, Duration::from_secs(4))).unwrap();
        let checks = std::fs::read_to_string(dir.0.join("checks.yaml")).unwrap();
        let reports = std::fs::read_to_string(dir.0.join("overload-report.yaml")).unwrap();
        assert!(checks.contains("kind: rule"));
        assert!(reports.contains("address: \"127.0.0.1:7001\", timeout: 4000ms"));
        assert!(reports.contains("handler: slow, instances: [requestcount]"));
    }
}
