//! End to end, the prometheus adapter's series cap: an application instrumented with the
//! official OpenTelemetry Python SDK exports, with the official OTLP/gRPC exporter, a counter
//! whose points each carry a user id of their own (unbounded label cardinality, Istio
//! Mixer's out-of-memory crash, istio/istio#18167) to a real `mixer serve` running the
//! `policies/otlp-metrics` bundle with `--max-metric-series` set low. `/metrics` then holds
//! no more series than the cap, counts every dropped point in
//! `mixer_metric_series_overflow_total`, and the process stays small.
//!
//! Python: `MIXER_PYTHON` (default `/tmp/mixer-venv/bin/python`) with
//! `tests/python/otlp-requirements.txt` installed (`.ci/run` does). Under `CI=1` a missing
//! Python or package fails the test.

#[path = "support/python.rs"]
mod python;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, http_request};

/// The process's cap, set by the flag.
const CAP: usize = 1_000;
/// Distinct user ids sent: well past the cap, few enough to keep CI quick. By hand, with
/// `MIXER_SERIES_POINTS=1000000` and `MIXER_SERIES_CAP=100000`, the figures.
const POINTS: usize = 5_000;
/// The bound on the process's memory with 200,000 distinct label values.
const MAX_RSS_KB: u64 = 400 << 10;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The Python with the OpenTelemetry SDK and exporter; `None` (after saying why) outside CI.
fn python_or_skip() -> Option<PathBuf> {
    python::python_importing(
        "opentelemetry.sdk.metrics, \
             opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
        "tests/python/otlp-requirements.txt",
    )
}

/// `VmRSS` of process `pid`, in kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

/// The sum of the samples on `page` whose line starts with `prefix`, and how many there are.
fn samples(page: &str, prefix: &str) -> (usize, f64) {
    page.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .fold((0, 0.0), |(n, sum), v| (n + 1, sum + v))
}

fn number(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn distinct_label_values_stop_at_the_series_cap_and_are_counted() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let (cap, points) = (
        number("MIXER_SERIES_CAP", CAP),
        number("MIXER_SERIES_POINTS", POINTS),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("config dir");
    // The bundle's handler, with room for every point: the process's cap is the one hit.
    let bundle =
        std::fs::read_to_string(workspace().join("policies/otlp-metrics/config/prometheus.yaml"))
            .expect("read the bundle");
    let policy = "    metricsExpirationPolicy: {metricsExpiryDuration: 10m}\n";
    assert!(bundle.contains(policy), "the bundle's handler changed");
    let roomy = format!("{policy}    maxSeries: {points}\n");
    std::fs::write(
        config.join("prometheus.yaml"),
        bundle.replace(policy, &roomy),
    )
    .expect("write the config");
    let cap_flag = cap.to_string();
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &[
            "--config",
            config.to_str().expect("utf-8"),
            "--max-metric-series",
            &cap_flag,
        ],
    );
    mixer.wait_ready(Duration::from_secs(20));

    let output = Command::new(&python)
        .arg(workspace().join("tests/python/otlp_metrics_client.py"))
        .args(["distinct", &mixer.grpc.to_string(), &points.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .expect("run the Python client");
    assert!(output.status.success(), "the client failed");
    let answer: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the client's JSON line");
    // The mixer takes every export: the cap drops points, it does not fail the exports.
    assert_eq!(answer["exporter"], "SUCCESS", "{answer}");

    // Reports are recorded in the background: wait until every point is either a series or
    // counted as dropped.
    let overflow = "mixer_metric_series_overflow_total{cap=\"process\",handler=\"otelprom";
    let series = "otel_cumulative{";
    let deadline = Instant::now() + Duration::from_secs(60);
    let page = loop {
        let (status, _, page) = http_request(mixer.admin, "GET", "/metrics", &[]).expect("scrape");
        assert_eq!(status, 200);
        let (kept, _) = samples(&page, series);
        let (_, dropped) = samples(&page, overflow);
        if kept + dropped as usize >= points || Instant::now() > deadline {
            break page;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let (kept, values) = samples(&page, series);
    let (_, dropped) = samples(&page, overflow);
    assert_eq!(kept, cap, "series on /metrics");
    // Each kept series holds its one login.
    assert_eq!(values as usize, cap);
    assert_eq!(dropped as usize, points - cap, "points counted as dropped");
    assert_eq!(
        page.matches("# TYPE mixer_metric_series_overflow_total ")
            .count(),
        1
    );
    let rss = rss_kb(mixer.pid());
    eprintln!(
        "{points} distinct user ids, cap {cap}: {kept} series, {dropped} dropped, \
         VmRSS {rss} kB, /metrics {} bytes",
        page.len()
    );
    assert!(rss < MAX_RSS_KB, "VmRSS {rss} kB");
    assert!(mixer.terminate().success());
}
