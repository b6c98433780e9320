//! End to end, OTLP metrics ingest: an application instrumented with the official
//! OpenTelemetry Python SDK exports a counter, an up-down counter, a gauge, a histogram and an
//! exponential histogram (and a delta counter and a delta histogram) with the official OTLP/gRPC exporter to a real
//! `mixer serve` running the `policies/otlp-metrics` bundle; a real Prometheus scrapes the
//! mixer's admin `/metrics` and PromQL returns what the SDK recorded, histograms with their
//! buckets; the stdio adapter's
//! lines carry the histogram buckets; the otlp adapter re-exports the points to an OTLP
//! receiver in their own temporality; a NaN point is answered in `partial_success`.
//!
//! Python: `MIXER_PYTHON` (default `/tmp/mixer-venv/bin/python`) with
//! `tests/python/otlp-requirements.txt` installed (`.ci/run` does). Under `CI=1` a missing
//! Python, package or Prometheus fails the test.

#[path = "support/python.rs"]
mod python;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, free_addr};

#[path = "support/prometheus.rs"]
mod prometheus_support;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::metrics::v1::AggregationTemporality;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use prometheus_support::{prometheus_binary, samples, start_prometheus};

/// The otlp adapter re-exporting every point to the test's receiver (`RECEIVER` is replaced).
const REEXPORT: &str = r#"
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: collector, namespace: istio-system}
spec:
  compiledAdapter: otlp
  params:
    endpoint: http://RECEIVER
    timeout: 5s
    points: [otlppoint.instance.istio-system]
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {name: otlppoint, namespace: istio-system}
spec:
  compiledTemplate: metric
  params:
    value: otel.metric.value | 0.0
    dimensions:
      point: otel.metric.point
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: otlp-relay, namespace: istio-system}
spec:
  match: (otel.metric.kind | "") != ""
  actions: [{handler: collector, instances: [otlppoint]}]
"#;

/// An OTLP metrics receiver keeping every request.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<ExportMetricsServiceRequest>>>);

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0
            .lock()
            .expect("not poisoned")
            .push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// (temporality, monotonic, integer values) of the sum `name` the collector received.
fn received_sum(collector: &Collector, name: &str) -> Option<(i32, bool, Vec<i64>)> {
    let requests = collector.0.lock().expect("not poisoned");
    let mut found: Option<(i32, bool, Vec<i64>)> = None;
    for metric in requests
        .iter()
        .flat_map(|r| &r.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .filter(|m| m.name == name)
    {
        if let Some(Data::Sum(sum)) = &metric.data {
            let entry =
                found.get_or_insert((sum.aggregation_temporality, sum.is_monotonic, vec![]));
            entry
                .2
                .extend(sum.data_points.iter().filter_map(|p| match p.value {
                    Some(Number::AsInt(i)) => Some(i),
                    _ => None,
                }));
        }
    }
    found
}

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
             opentelemetry.exporter.otlp.proto.grpc.metric_exporter, \
             opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc",
        "tests/python/otlp-requirements.txt",
    )
}

fn wait_for(prometheus: SocketAddr, q: &str, want: f64) {
    let start = Instant::now();
    let mut last = Vec::new();
    while start.elapsed() < Duration::from_secs(60) {
        last = samples(prometheus, q);
        if last == [want] {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("{q}: wanted [{want}], last answer {last:?}");
}

fn run_client(python: &Path, mode: &str, mixer: SocketAddr) -> Vec<serde_json::Value> {
    let script = workspace().join("tests/python/otlp_metrics_client.py");
    let output = Command::new(python)
        .arg(&script)
        .args([mode, &mixer.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .expect("run the Python client");
    assert!(output.status.success(), "client {mode} failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The stdio adapter's line for metric `name`, waiting for it.
fn stdio_line(
    lines: &Receiver<String>,
    seen: &mut Vec<serde_json::Value>,
    name: &str,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(line) = seen.iter().find(|l| l["metric"] == name) {
            return line.clone();
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                if let Ok(json) = serde_json::from_str::<serde_json::Value>(&line) {
                    seen.push(json);
                }
            }
            Err(_) => panic!("no stdio line for {name}; saw {seen:#?}"),
        }
    }
}

#[test]
fn the_python_sdk_exports_metrics_that_prometheus_scrapes() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let prometheus_bin = prometheus_binary();
    assert!(!prometheus_bin.is_empty());
    // The receiver the otlp adapter re-exports to, on a runtime of its own.
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let collector = Collector::default();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let receiver = listener.local_addr().expect("bound");
    runtime.spawn(
        tonic::transport::Server::builder()
            .add_service(MetricsServiceServer::new(collector.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );

    // The bundle as it is, beside the re-export.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("config dir");
    let bundle = workspace().join("policies/otlp-metrics/config");
    for file in ["prometheus.yaml", "stdio.yaml"] {
        std::fs::copy(bundle.join(file), config.join(file)).expect("copy the bundle");
    }
    std::fs::write(
        config.join("reexport.yaml"),
        REEXPORT.replace("RECEIVER", &receiver.to_string()),
    )
    .expect("write reexport.yaml");
    let (mixer, stdout) = Mixer::start_capturing_stdout(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--config", config.to_str().expect("utf-8")],
    );
    mixer.wait_ready(Duration::from_secs(20));

    // The official exporter's own verdict on each export: SUCCESS (a gRPC OK).
    let exports = run_client(&python, "export", mixer.grpc);
    assert_eq!(exports.len(), 4, "{exports:?}");
    for export in &exports {
        assert_eq!(export["exporter"], "SUCCESS", "{exports:?}");
    }
    // A NaN gauge beside a good counter: the counter is taken, the gauge refused, and the
    // answer says so (OTLP's ExportMetricsPartialSuccess).
    let reject = run_client(&python, "reject", mixer.grpc);
    assert_eq!(reject.len(), 1);
    assert_eq!(reject[0]["partial_success"], true, "{reject:?}");
    assert_eq!(reject[0]["rejected"], 1, "{reject:?}");
    let message = reject[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"shop.broken\"") && message.contains("NaN"),
        "{message}"
    );

    let listen = free_addr();
    let _prometheus = start_prometheus(dir.path(), listen, mixer.admin);
    wait_for(listen, r#"up{job="mixer"}"#, 1.0);
    // What the client recorded (tests/python/otlp_metrics_client.py), through the bundle's
    // rules: cumulative sums as their totals, the delta counter added up, the gauge's last
    // value, histograms' count and sum.
    let service = r#"service="shop""#;
    for (q, want) in [
        (
            format!(
                r#"otel_cumulative{{metric="shop.requests",unit="{{request}}",monotonic="true",attributes=~".*/cart.*",{service}}}"#
            ),
            3.0,
        ),
        (
            format!(
                r#"otel_cumulative{{metric="shop.requests",attributes=~".*/pay.*",{service}}}"#
            ),
            2.0,
        ),
        (
            format!(r#"otel_cumulative{{metric="shop.queue.depth",monotonic="false",{service}}}"#),
            3.0,
        ),
        (
            format!(
                r#"otel_gauge{{metric="shop.temperature",unit="Cel",attributes=~".*server.*",{service}}}"#
            ),
            21.5,
        ),
        (
            format!(
                r#"otel_histogram_count{{metric="shop.latency",kind="histogram",unit="ms",{service}}}"#
            ),
            3.0,
        ),
        (
            format!(r#"otel_histogram_sum{{metric="shop.latency",kind="histogram",{service}}}"#),
            555.0,
        ),
        (
            format!(
                r#"otel_histogram_count{{metric="shop.payload",kind="exponential_histogram",unit="By",{service}}}"#
            ),
            4.0,
        ),
        (
            format!(
                r#"otel_histogram_sum{{metric="shop.payload",kind="exponential_histogram",{service}}}"#
            ),
            1007.0,
        ),
        (
            format!(r#"otel_delta_total{{metric="shop.jobs",{service}}}"#),
            7.0,
        ),
        (
            format!(r#"otel_cumulative{{metric="shop.fine",{service}}}"#),
            1.0,
        ),
    ] {
        wait_for(listen, &q, want);
    }
    // The histograms' own buckets, as Prometheus histograms. shop.latency has the SDK's
    // default explicit bounds (0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000,
    // 7500, 10000: the OpenTelemetry metrics SDK spec's "Explicit Bucket Histogram
    // Aggregation"), and the client recorded 5, 50 and 500 ms.
    for (le, want) in [
        ("0", 0.0),
        ("5", 1.0),
        ("25", 1.0),
        ("50", 2.0),
        ("250", 2.0),
        ("500", 3.0),
        ("10000", 3.0),
        ("+Inf", 3.0),
    ] {
        wait_for(
            listen,
            &format!(r#"otel_histogram_bucket{{metric="shop.latency",le="{le}",{service}}}"#),
            want,
        );
    }
    // The delta histogram's two exports (10 and 20 ms, then 30 ms), added up bucket by bucket
    // over the same default bounds.
    let batch = format!(r#"metric="shop.batch",kind="histogram",unit="ms",{service}"#);
    let mut delta = vec![
        (format!("otel_delta_histogram_count{{{batch}}}"), 3.0),
        (format!("otel_delta_histogram_sum{{{batch}}}"), 60.0),
    ];
    for (le, want) in [
        ("5", 0.0),
        ("10", 1.0),
        ("25", 2.0),
        ("50", 3.0),
        ("+Inf", 3.0),
    ] {
        delta.push((
            format!(r#"otel_delta_histogram_bucket{{le="{le}",{batch}}}"#),
            want,
        ));
    }
    for (q, want) in delta {
        wait_for(listen, &q, want);
    }
    // The median of 5, 50 and 500 lies in the (25, 50] bucket, which holds one of the three;
    // PromQL interpolates linearly within it: 25 + 25 * (1.5 - 1) / 1.
    wait_for(
        listen,
        &format!(
            r#"histogram_quantile(0.5, otel_histogram_bucket{{metric="shop.latency",{service}}})"#
        ),
        37.5,
    );
    // shop.payload is an exponential histogram of 1, 2, 4 and 1000 bytes. In the spec's
    // "Base2 Exponential Bucket Histogram Aggregation" buckets are (base^i, base^(i+1)] with
    // base = 2^(2^-scale), so at every scale the SDK may pick for these (it starts at 20 and
    // lowers the scale until 160 buckets span them) 1, 2 and 4 are upper bounds; the zero
    // bucket's threshold is 0.
    for (le, want) in [
        ("0", 0.0),
        ("1", 1.0),
        ("2", 2.0),
        ("4", 3.0),
        ("+Inf", 4.0),
    ] {
        wait_for(
            listen,
            &format!(r#"otel_histogram_bucket{{metric="shop.payload",le="{le}",{service}}}"#),
            want,
        );
    }
    assert_eq!(
        samples(listen, r#"{metric="shop.broken"}"#),
        Vec::<f64>::new(),
        "the rejected point reached Prometheus"
    );

    // The stdio lines carry the buckets too, in the same form (the SDK's default bounds, as
    // above).
    let mut seen = Vec::new();
    let latency = stdio_line(&stdout, &mut seen, "shop.latency");
    assert_eq!(latency["kind"], "histogram");
    assert_eq!(latency["temporality"], "cumulative");
    assert_eq!(latency["count"], 3);
    let buckets = &latency["buckets"];
    for (le, count) in [
        ("0", "0"),
        ("5", "1"),
        ("25", "1"),
        ("50", "2"),
        ("250", "2"),
        ("500", "3"),
        ("10000", "3"),
        ("+Inf", "3"),
    ] {
        assert_eq!(buckets[le], count, "le {le}: {latency}");
    }
    let payload = stdio_line(&stdout, &mut seen, "shop.payload");
    assert_eq!(payload["kind"], "exponential_histogram");
    assert_eq!(payload["buckets"]["+Inf"], "4", "{payload}");
    let jobs = stdio_line(&stdout, &mut seen, "shop.jobs");
    assert_eq!(jobs["temporality"], "delta");
    assert_eq!(jobs["value"], 7);

    // The collector got the points as the SDK sent them: the counter cumulative, the delta
    // counter delta, the up-down counter not monotonic.
    let cumulative = AggregationTemporality::Cumulative as i32;
    let delta = AggregationTemporality::Delta as i32;
    let deadline = Instant::now() + Duration::from_secs(20);
    while received_sum(&collector, "shop.jobs").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut requests = received_sum(&collector, "shop.requests").expect("shop.requests");
    requests.2.sort_unstable();
    assert_eq!(requests, (cumulative, true, vec![2, 3]));
    assert_eq!(
        received_sum(&collector, "shop.queue.depth"),
        Some((cumulative, false, vec![3]))
    );
    assert_eq!(
        received_sum(&collector, "shop.jobs"),
        Some((delta, true, vec![7]))
    );
    let names: Vec<String> = collector
        .0
        .lock()
        .expect("not poisoned")
        .iter()
        .flat_map(|r| &r.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| m.name.clone())
        .collect();
    assert!(names.iter().any(|n| n == "shop.temperature"), "{names:?}");
    assert!(
        !names.iter().any(|n| n == "shop.broken"),
        "the rejected point was re-exported: {names:?}"
    );
    assert!(mixer.terminate().success());
}
