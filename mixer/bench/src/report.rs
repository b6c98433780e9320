//! Report mode: drives Mixer v1 `Report` with several attribute-rich records per request and
//! measures the mixer's CPU time per 1000 requests (from /proc), beside the same load against
//! a mixer with no report rules, measured in the same run.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use mixer_model::{StringMap, Timestamp, Value};
use mixer_proto::istio::mixer::v1 as pb;

use crate::bags::{self, Request};
use crate::load::{self, Report, Spec};
use crate::process::{Mixer, TempDir};
use crate::targets::{Client, Outcome};
use crate::{LoadArgs, channels};

/// One `ReportRequest` per simulated request, with `records` records (a proxy reports each
/// request from both sides, and batches).
pub fn report_requests(requests: &[Request], records: usize) -> Arc<Vec<bytes::Bytes>> {
    let words = mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT;
    let now = Timestamp::now();
    let built = requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let attrs = (0..records.max(1))
                .map(|k| {
                    let values: Vec<(&str, Value)> = vec![
                        (
                            "request.headers",
                            StringMap::from_pairs(
                                r.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                            )
                            .into(),
                        ),
                        ("request.method", Value::from(r.method)),
                        ("request.path", Value::from(r.path.as_str())),
                        ("request.host", Value::from(r.host.as_str())),
                        ("request.useragent", Value::from("curl/8.5.0")),
                        ("request.size", Value::Int64(120 + (i % 7) as i64)),
                        ("request.time", Value::Timestamp(now)),
                        (
                            "response.code",
                            Value::Int64(if i % 10 == 0 { 503 } else { 200 }),
                        ),
                        ("response.size", Value::Int64(2048 + (i % 13) as i64)),
                        (
                            "response.duration",
                            Value::Duration(mixer_model::Duration(
                                ((i % 50) as i64 + 1) * 1_000_000,
                            )),
                        ),
                        ("source.ip", Value::from(r.source_ip.as_str())),
                        ("source.principal", Value::from(r.source_principal.as_str())),
                        (
                            "source.workload.name",
                            Value::from(format!("web-v{}", i % 3)),
                        ),
                        ("source.workload.namespace", Value::from("default")),
                        ("destination.service.host", Value::from(r.host.as_str())),
                        (
                            "destination.workload.name",
                            Value::from(format!("api-v{}", i % 2)),
                        ),
                        ("destination.workload.namespace", Value::from("default")),
                        ("context.protocol", Value::from("http")),
                        (
                            "context.reporter.kind",
                            Value::from(if k % 2 == 0 { "inbound" } else { "outbound" }),
                        ),
                        ("connection.mtls", Value::Bool(true)),
                    ];
                    mixer_frontends::mixer_v1::encode(values.iter().map(|(k, v)| (*k, v)), words)
                })
                .collect();
            pb::ReportRequest {
                attributes: attrs,
                repeated_attributes_semantics:
                    pb::report_request::RepeatedAttributesSemantics::IndependentEncoding as i32,
                default_words: vec![],
                global_word_count: words as u32,
            }
        })
        .collect::<Vec<pb::ReportRequest>>();
    crate::wire::frame_all(&built)
}

/// A Mixer v1 Report client.
pub struct Reporter(crate::targets::Unary);

impl Reporter {
    /// Reports `requests` (from [`report_requests`]) over `wire`.
    pub fn on(wire: crate::wire::Wire, requests: Arc<Vec<bytes::Bytes>>) -> Reporter {
        Reporter(crate::targets::Unary::new(
            wire,
            mixer_frontends::grpc::MIXER_REPORT,
            requests,
        ))
    }
}

impl Client for Reporter {
    async fn call(&mut self, i: usize) -> Outcome {
        match self.0.call::<pb::ReportResponse>(i).await {
            Ok(_) => Outcome::Allowed,
            Err(_) => Outcome::Error,
        }
    }
}

/// CPU seconds (user + system) a process has used, from /proc.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// A counter's value from a Prometheus text page.
pub fn scrape(admin: SocketAddr, series: &str) -> f64 {
    sum(&metrics_page(admin), series, "")
}

/// The admin `/metrics` page, empty when the mixer does not answer.
pub fn metrics_page(admin: SocketAddr) -> String {
    let Ok(mut stream) = std::net::TcpStream::connect(admin) else {
        return String::new();
    };
    use std::io::{Read, Write};
    let _ = write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    );
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body
}

/// The sum of every sample of `series` on `page` whose line contains `filter` (a label such
/// as `handler="x"`; empty for all of them).
pub fn sum(page: &str, series: &str, filter: &str) -> f64 {
    // Sample lines are `name{labels} value`; a longer name sharing the prefix is another family.
    page.lines()
        .filter(|l| {
            l.strip_prefix(series)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next())
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

/// Waits until `admin`'s /readyz answers 200.
pub fn wait_ready(admin: SocketAddr) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let start = Instant::now();
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(admin) {
            let _ = write!(
                s,
                "GET /readyz HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
            );
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                return Ok(());
            }
        }
        if start.elapsed() > Duration::from_secs(20) {
            anyhow::bail!("mixer at {admin} not ready");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `path` exists, for a clear error.
pub fn exists(path: &Path) -> bool {
    path.exists()
}
async fn report_run(
    mixer_bin: &Path,
    config: &Path,
    records: usize,
    load: &LoadArgs,
) -> anyhow::Result<(Report, f64, f64, f64)> {
    let mixer = Mixer::start(mixer_bin, Some(config), &[])?;
    let (grpc, admin, pid) = (mixer.grpc, mixer.admin, mixer.pid());
    let requests = bags::requests(load.requests.max(1), load.distinct);
    let prepared = report_requests(&requests, records);
    let chans = channels(grpc, load.channels).await?;
    let spec = Spec {
        concurrency: load.concurrency.max(1),
        duration: load.duration,
        warmup: Duration::ZERO,
        rate: None,
    };
    let before = cpu_seconds(pid).unwrap_or(0.0);
    let result = load::run(spec, |w| {
        Reporter::on(chans[w % chans.len()].clone(), prepared.clone())
    })
    .await;
    // Let the queues drain before reading CPU and drops.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu = cpu_seconds(pid).unwrap_or(0.0) - before;
    let delivered = scrape(admin, "mixer_report_delivered_total");
    let dropped = scrape(admin, "mixer_report_dropped_total");
    Ok((result, cpu, delivered, dropped))
}

pub async fn report_mode(
    mixer_bin: &Path,
    config: &Path,
    records: usize,
    rounds: usize,
    load: &LoadArgs,
) -> anyhow::Result<()> {
    if !exists(config) {
        bail!("{} does not exist", config.display());
    }
    let empty = TempDir::new("mixer-bench-empty")?;
    let per_1000 = |cpu: f64, r: &Report| cpu / (r.calls.max(1) as f64 / 1000.0);
    // Baseline and telemetry alternate, so a slow minute on a shared machine lands on both;
    // the medians are the figures.
    let (mut base_costs, mut costs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds.max(1) {
        let (base, base_cpu, _, _) = report_run(mixer_bin, &empty.0, records, load).await?;
        let (run, cpu, delivered, dropped) = report_run(mixer_bin, config, records, load).await?;
        let (base_cost, cost) = (per_1000(base_cpu, &base), per_1000(cpu, &run));
        println!("round {round}");
        println!(
            "{}  cpu {base_cpu:.2}s = {base_cost:.4} cpu-s per 1000 requests",
            base.line("no report rules (baseline)")
        );
        println!(
            "{}  cpu {cpu:.2}s = {cost:.4} cpu-s per 1000 requests",
            run.line("telemetry config")
        );
        println!(
            "records: {:.0}/s ingested ({records} per request); instances delivered {delivered:.0}, dropped {dropped:.0}; cpu ratio telemetry/baseline per request {:.2}",
            run.throughput() * records as f64,
            cost / base_cost.max(1e-9)
        );
        base_costs.push(base_cost);
        costs.push(cost);
        ratios.push(cost / base_cost.max(1e-9));
    }
    println!(
        "median of {} rounds: telemetry {:.4} cpu-s per 1000 requests, baseline {:.4}, ratio {:.2}",
        costs.len(),
        median(&mut costs),
        median(&mut base_costs),
        median(&mut ratios)
    );
    Ok(())
}

/// The median of `values` (sorted in place); 0 for none.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod median_tests {
    use super::median;

    #[test]
    fn the_middle_value_or_the_mean_of_the_two_middle_ones() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }
}
