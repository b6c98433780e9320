//! Report mode: drives Mixer v1 `Report` with several attribute-rich records per request and
//! measures the mixer's CPU time per 1000 requests (from /proc), beside the same load against
//! a mixer with no report rules, measured in the same run.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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
    let before = crate::observe::cpu_seconds(pid).unwrap_or(0.0);
    let result = load::run(spec, |w| {
        Reporter::on(chans[w % chans.len()].clone(), prepared.clone())
    })
    .await;
    // Let the queues drain before reading CPU and drops.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu = crate::observe::cpu_seconds(pid).unwrap_or(0.0) - before;
    let delivered = crate::observe::scrape(admin, "mixer_report_delivered_total");
    let dropped = crate::observe::scrape(admin, "mixer_report_dropped_total");
    Ok((result, cpu, delivered, dropped))
}

pub async fn report_mode(
    mixer_bin: &Path,
    config: &Path,
    records: usize,
    rounds: usize,
    load: &LoadArgs,
) -> anyhow::Result<()> {
    if !config.exists() {
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
