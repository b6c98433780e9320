//! End to end with a real Prometheus: Mixer v1 reports and an Envoy access log stream reach the
//! mixer, the prometheus adapter turns
//! them into a counter and a histogram on the admin `/metrics`, Prometheus scrapes it, and
//! PromQL through Prometheus's HTTP API returns the counts that were sent.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::{Node, RequestMethod};
use envoy_types::pb::envoy::data::accesslog::v3::{
    AccessLogCommon, HttpAccessLogEntry, HttpRequestProperties, HttpResponseProperties,
};
use envoy_types::pb::envoy::service::accesslog::v3::StreamAccessLogsMessage;
use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_client::AccessLogServiceClient;
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::{
    HttpAccessLogEntries, Identifier, LogEntries,
};
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value};
use mixer_model::Value;
use mixer_proto::istio::mixer::v1 as pb;
use mixer_proto::istio::mixer::v1::mixer_client::MixerClient;
use mixer_tests::poll::until;
use mixer_tests::{Mixer, free_addr};

#[path = "support/prometheus.rs"]
mod prometheus_support;
use prometheus_support::{samples, start_prometheus};

const CONFIG: &str = r#"
kind: handler
metadata: {name: prom, namespace: istio-system}
spec:
  compiledAdapter: prometheus
  params:
    metrics:
    - name: requests_total
      instance_name: requestcount.instance.istio-system
      kind: COUNTER
      label_names: [method, response_code]
    - name: request_duration_seconds
      instance_name: requestduration.instance.istio-system
      kind: DISTRIBUTION
      label_names: [method]
      buckets: {explicit_buckets: {bounds: [0.1, 1]}}
---
kind: instance
metadata: {name: requestcount, namespace: istio-system}
spec:
  compiledTemplate: metric
  params:
    value: "1"
    dimensions:
      method: request.method | "unknown"
      response_code: response.code | 200
---
kind: instance
metadata: {name: requestduration, namespace: istio-system}
spec:
  compiledTemplate: metric
  params:
    value: response.duration | "0ms"
    dimensions:
      method: request.method | "unknown"
---
kind: rule
metadata: {name: promhttp, namespace: istio-system}
spec:
  match: context.protocol == "http"
  actions:
  - handler: prom
    instances: [requestcount, requestduration]
"#;

/// The first sample of a PromQL query, if it returns one.
fn query(prometheus: SocketAddr, q: &str) -> Option<f64> {
    samples(prometheus, q).first().copied()
}

fn wait_for(prometheus: SocketAddr, q: &str, want: f64) {
    until(
        Duration::from_secs(60),
        Duration::from_millis(250),
        || match query(prometheus, q) {
            Some(got) if got == want => Ok(()),
            last => Err(format!("{q}: wanted {want}, last answer {last:?}")),
        },
    );
}

fn record(method: &str, code: i64, millis: i64) -> pb::CompressedAttributes {
    let method = Value::from(method);
    let code = Value::Int64(code);
    let duration = Value::Duration(mixer_model::Duration(millis * 1_000_000));
    let protocol = Value::from("http");
    mixer_frontends::mixer_v1::encode(
        [
            ("request.method", &method),
            ("response.code", &code),
            ("response.duration", &duration),
            ("context.protocol", &protocol),
        ],
        mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_what_reports_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("mixer.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--config", config.to_str().expect("utf-8")],
    );
    tokio::task::block_in_place(|| mixer.wait_ready(Duration::from_secs(10)));

    // Ten GET requests: 5 fast (50 ms), 3 slower (500 ms), 2 slow (2 s); and 4 POSTs that failed.
    let mut records = Vec::new();
    records.extend((0..5).map(|_| record("GET", 200, 50)));
    records.extend((0..3).map(|_| record("GET", 200, 500)));
    records.extend((0..2).map(|_| record("GET", 200, 2000)));
    records.extend((0..4).map(|_| record("POST", 503, 10)));
    let mut client = MixerClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect");
    for chunk in records.chunks(3) {
        client
            .report(pb::ReportRequest {
                attributes: chunk.to_vec(),
                repeated_attributes_semantics:
                    pb::report_request::RepeatedAttributesSemantics::IndependentEncoding as i32,
                default_words: vec![],
                global_word_count: mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT as u32,
            })
            .await
            .expect("report");
    }

    // Three PUTs that Envoy logged, over ALS (identifier on the first message only).
    let put = |millis: i32| HttpAccessLogEntry {
        common_properties: Some(AccessLogCommon {
            time_to_last_downstream_tx_byte: Some(PbDuration {
                seconds: 0,
                nanos: millis * 1_000_000,
            }),
            ..Default::default()
        }),
        request: Some(HttpRequestProperties {
            request_method: RequestMethod::Put as i32,
            path: "/cart".into(),
            ..Default::default()
        }),
        response: Some(HttpResponseProperties {
            response_code: Some(UInt32Value { value: 201 }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let messages = vec![
        StreamAccessLogsMessage {
            identifier: Some(Identifier {
                node: Some(Node {
                    id: "sidecar~10.0.0.7~cart.shop~shop.svc.cluster.local".into(),
                    ..Default::default()
                }),
                log_name: "als".into(),
            }),
            log_entries: Some(LogEntries::HttpLogs(HttpAccessLogEntries {
                log_entry: vec![put(20), put(30)],
            })),
        },
        StreamAccessLogsMessage {
            identifier: None,
            log_entries: Some(LogEntries::HttpLogs(HttpAccessLogEntries {
                log_entry: vec![put(700)],
            })),
        },
    ];
    let mut als = AccessLogServiceClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect");
    als.stream_access_logs(tokio_stream_iter(messages))
        .await
        .expect("access log stream");

    let listen = free_addr();
    let _prometheus = start_prometheus(dir.path(), listen, mixer.admin);
    tokio::task::spawn_blocking(move || {
        wait_for(listen, r#"up{job="mixer"}"#, 1.0);
        wait_for(
            listen,
            r#"istio_requests_total{method="GET",response_code="200"}"#,
            10.0,
        );
        wait_for(
            listen,
            r#"istio_requests_total{method="POST",response_code="503"}"#,
            4.0,
        );
        wait_for(
            listen,
            r#"istio_request_duration_seconds_bucket{method="GET",le="0.1"}"#,
            5.0,
        );
        wait_for(
            listen,
            r#"istio_request_duration_seconds_bucket{method="GET",le="1"}"#,
            8.0,
        );
        wait_for(
            listen,
            r#"istio_request_duration_seconds_bucket{method="GET",le="+Inf"}"#,
            10.0,
        );
        wait_for(
            listen,
            r#"istio_request_duration_seconds_count{method="POST"}"#,
            4.0,
        );
        wait_for(
            listen,
            r#"istio_requests_total{method="PUT",response_code="201"}"#,
            3.0,
        );
        wait_for(
            listen,
            r#"istio_request_duration_seconds_bucket{method="PUT",le="0.1"}"#,
            2.0,
        );
        wait_for(
            listen,
            r#"istio_request_duration_seconds_bucket{method="PUT",le="1"}"#,
            3.0,
        );
        wait_for(
            listen,
            r#"mixer_report_delivered_total{handler="prom.handler.istio-system"}"#,
            34.0,
        );
    })
    .await
    .expect("prometheus saw the counts");
    assert!(mixer.terminate().success());
}

fn tokio_stream_iter<T: Send + 'static>(
    items: Vec<T>,
) -> impl tonic::IntoStreamingRequest<Message = T> {
    tonic::codegen::tokio_stream::iter(items)
}
