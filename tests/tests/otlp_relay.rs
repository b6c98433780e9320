//! The otlp adapter against a real OTLP receiver: a second mixer process's OTLP ingest.
//! Mixer A takes Mixer v1 reports and exports a span and a log record per request; mixer B
//! ingests them through its report rules and counts them with its prometheus adapter. What A
//! exports, B receives, record for record.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use mixer_model::{StringMap, Timestamp, Value};
use mixer_proto::istio::mixer::v1 as pb;
use mixer_proto::istio::mixer::v1::mixer_client::MixerClient;
use mixer_tests::Mixer;
use mixer_tests::poll::until;

const RECEIVER: &str = r#"
kind: handler
metadata: {name: count, namespace: istio-system}
spec:
  compiledAdapter: prometheus
  params:
    metrics:
    - name: otlp_records_total
      instance_name: received.instance.istio-system
      kind: COUNTER
      label_names: [signal]
---
kind: instance
metadata: {name: received, namespace: istio-system}
spec:
  compiledTemplate: metric
  params:
    value: "1"
    dimensions:
      signal: conditional((otel.span_id | "") != "", "span", "log")
---
kind: rule
metadata: {name: count-otlp, namespace: istio-system}
spec:
  actions: [{handler: count, instances: [received]}]
"#;

fn exporter(endpoint: SocketAddr) -> String {
    format!(
        r#"
kind: handler
metadata: {{name: otlp, namespace: istio-system}}
spec:
  compiledAdapter: otlp
  params:
    endpoint: http://{endpoint}
    timeout: 5s
    retry: {{initialBackoff: 50ms, maxBackoff: 500ms, maxElapsedTime: 5s}}
---
kind: instance
metadata: {{name: accesslog, namespace: istio-system}}
spec:
  compiledTemplate: logentry
  params:
    severity: '"Info"'
    timestamp: request.time
    variables:
      path: request.path | ""
---
kind: instance
metadata: {{name: span, namespace: istio-system}}
spec:
  compiledTemplate: tracespan
  params:
    traceId: request.headers["x-b3-traceid"]
    spanId: request.headers["x-b3-spanid"]
    spanName: request.path | "/"
    startTime: request.time
    endTime: response.time
---
kind: rule
metadata: {{name: export, namespace: istio-system}}
spec:
  actions: [{{handler: otlp, instances: [accesslog, span]}}]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_one_mixer_exports_the_other_receives() {
    const REQUESTS: usize = 40;
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver_config = dir.path().join("receiver.yaml");
    std::fs::write(&receiver_config, RECEIVER).expect("write");
    let receiver = Mixer::start(
        binary,
        &["--config", receiver_config.to_str().expect("utf-8")],
    );
    tokio::task::block_in_place(|| receiver.wait_ready(Duration::from_secs(10)));

    let exporter_config = dir.path().join("exporter.yaml");
    std::fs::write(&exporter_config, exporter(receiver.grpc)).expect("write");
    let sender = Mixer::start(
        binary,
        &["--config", exporter_config.to_str().expect("utf-8")],
    );
    tokio::task::block_in_place(|| sender.wait_ready(Duration::from_secs(10)));

    let mut client = MixerClient::connect(format!("http://{}", sender.grpc))
        .await
        .expect("connect");
    let words = mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT;
    let now = Timestamp::now();
    for i in 0..REQUESTS {
        let headers: Value = StringMap::from_pairs([
            ("x-b3-traceid".to_string(), format!("{:032x}", 0xabc000 + i)),
            ("x-b3-spanid".to_string(), format!("{:016x}", 0xdef000 + i)),
        ])
        .into();
        let path = Value::from(format!("/item/{i}"));
        let start = Value::Timestamp(now);
        let end = Value::Timestamp(Timestamp(now.0 + 5_000_000));
        let record = mixer_frontends::mixer_v1::encode(
            [
                ("request.headers", &headers),
                ("request.path", &path),
                ("request.time", &start),
                ("response.time", &end),
            ],
            words,
        );
        client
            .report(pb::ReportRequest {
                attributes: vec![record],
                global_word_count: words as u32,
                ..Default::default()
            })
            .await
            .expect("report");
    }

    let counted =
        |signal: &str| receiver.metric(&format!("istio_otlp_records_total{{signal=\"{signal}\"}}"));
    tokio::task::block_in_place(|| {
        until(
            Duration::from_secs(30),
            Duration::from_millis(100),
            || match (counted("span"), counted("log")) {
                (Some(spans), Some(logs))
                    if spans == REQUESTS as f64 && logs == REQUESTS as f64 =>
                {
                    Ok(())
                }
                (spans, logs) => Err(format!("receiver counted spans {spans:?} logs {logs:?}")),
            },
        );
        // Nothing more arrives than was sent.
        std::thread::sleep(Duration::from_millis(500));
    });
    assert_eq!(counted("span"), Some(REQUESTS as f64));
    assert_eq!(counted("log"), Some(REQUESTS as f64));
    assert_eq!(
        sender.metric(r#"mixer_report_delivered_total{handler="otlp.handler.istio-system"}"#),
        Some((2 * REQUESTS) as f64)
    );
    assert!(sender.terminate().success());
    assert!(receiver.terminate().success());
}
