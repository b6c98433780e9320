//! The work one request can cause is bounded, for every protocol, through the real mixer and
//! clients generated from the upstream protos: a rate limit request with 200,000 descriptors
//! (2 MB) is refused with INVALID_ARGUMENT at once, costing the mixer a fraction of a CPU
//! second (the issue measured 19.8 CPU-seconds before any limit), while one-descriptor calls
//! go on being answered; each limit names itself and its flag, and each flag sets its limit.

use std::path::Path;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::data::accesslog::v3::HttpAccessLogEntry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::accesslog::v3::StreamAccessLogsMessage;
use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_client::AccessLogServiceClient;
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::{
    HttpAccessLogEntries, LogEntries,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code as RlsCode;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use mixer_frontends::mixer_v1::{GLOBAL_WORD_COUNT, encode};
use mixer_model::Value;
use mixer_proto::istio::mixer::v1 as pb;
use mixer_proto::istio::mixer::v1::mixer_client::MixerClient;
use mixer_tests::Mixer;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use tonic::Code;
use tonic::codegen::tokio_stream;

const CONFIG: &str = r#"
apiVersion: config.istio.io/v1alpha2
kind: ratelimitconfig
metadata: {name: limits, namespace: istio-system}
spec:
  domain: limits
  backend: {adapter: memquota}
  descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000000}
"#;

fn start(extra: &[&str]) -> (Mixer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("limits.yaml");
    std::fs::write(&path, CONFIG).expect("write config");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let mut args = vec!["--config", path.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    let mixer = Mixer::start(binary, &args);
    mixer.wait_ready(Duration::from_secs(10));
    (mixer, dir)
}

fn descriptors(n: usize, entries: usize) -> RateLimitRequest {
    let descriptor = RateLimitDescriptor {
        entries: (0..entries)
            .map(|_| Entry {
                key: "k".into(),
                value: "v".into(),
            })
            .collect(),
        ..Default::default()
    };
    RateLimitRequest {
        domain: "limits".into(),
        descriptors: vec![descriptor; n],
        hits_addend: 1,
    }
}

async fn rls(addr: std::net::SocketAddr) -> RateLimitServiceClient<tonic::transport::Channel> {
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
        .max_encoding_message_size(8 << 20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_thousand_descriptors_are_refused_at_once() {
    let (mixer, _dir) = tokio::task::spawn_blocking(|| start(&[]))
        .await
        .expect("join");
    let mut c = rls(mixer.grpc).await;
    let huge = descriptors(200_000, 1);
    let size = prost::Message::encoded_len(&huge);
    assert!(size > 1 << 20 && size < 4 << 20, "{size} bytes");

    // One-descriptor calls keep being answered while the huge ones come in.
    let normal = tokio::spawn({
        let mut c = c.clone();
        async move {
            let mut worst = Duration::ZERO;
            for _ in 0..50 {
                let started = Instant::now();
                let answer = c
                    .should_rate_limit(descriptors(1, 1))
                    .await
                    .expect("answer")
                    .into_inner();
                worst = worst.max(started.elapsed());
                assert_eq!(answer.overall_code, RlsCode::Ok as i32);
            }
            worst
        }
    });
    let cpu_before = mixer.cpu_time();
    let started = Instant::now();
    for _ in 0..5 {
        let err = c
            .should_rate_limit(huge.clone())
            .await
            .expect_err("over --max-ratelimit-descriptors");
        assert_eq!(err.code(), Code::InvalidArgument);
        assert_eq!(
            err.message(),
            "rate limit descriptors in the request: 200000 is over the limit of 64 (mixer serve --max-ratelimit-descriptors)"
        );
    }
    let took = started.elapsed();
    let cpu = mixer.cpu_time() - cpu_before;
    let worst_normal = normal.await.expect("normal calls");
    eprintln!(
        "5 requests of 200,000 descriptors: {took:?}, {cpu:?} of mixer CPU; slowest normal call {worst_normal:?}"
    );
    // Without the limit each such request cost seconds of CPU; with it, reading 2 MB.
    assert!(
        cpu < Duration::from_millis(1500),
        "the mixer spent {cpu:?} of CPU"
    );

    // A descriptor with too many entries, and exactly the limits.
    let err = c
        .should_rate_limit(descriptors(1, 65))
        .await
        .expect_err("over --max-descriptor-entries");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "entries in descriptors[0]: 65 is over the limit of 64 (mixer serve --max-descriptor-entries)"
    );
    let answer = c
        .should_rate_limit(descriptors(64, 64))
        .await
        .expect("at the limits")
        .into_inner();
    assert_eq!(answer.statuses.len(), 64);
    assert!(mixer.terminate().success());
}

fn check_with_quotas(n: usize) -> pb::CheckRequest {
    let path = Value::from("/x");
    pb::CheckRequest {
        attributes: Some(encode([("request.path", &path)], GLOBAL_WORD_COUNT)),
        global_word_count: GLOBAL_WORD_COUNT as u32,
        deduplication_id: String::new(),
        quotas: (0..n)
            .map(|i| {
                (
                    format!("q{i}"),
                    pb::check_request::QuotaParams {
                        amount: 1,
                        best_effort: false,
                    },
                )
            })
            .collect(),
    }
}

fn report(records: usize) -> pb::ReportRequest {
    let path = Value::from("/x");
    pb::ReportRequest {
        attributes: vec![encode([("request.path", &path)], GLOBAL_WORD_COUNT); records],
        repeated_attributes_semantics: 1,
        default_words: Vec::new(),
        global_word_count: GLOBAL_WORD_COUNT as u32,
    }
}

fn log_export(records: usize) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord::default(); records],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn span_export(spans: usize) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span::default(); spans],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn access_logs(entries: usize) -> StreamAccessLogsMessage {
    StreamAccessLogsMessage {
        identifier: None,
        log_entries: Some(LogEntries::HttpLogs(HttpAccessLogEntries {
            log_entry: vec![HttpAccessLogEntry::default(); entries],
        })),
    }
}

#[track_caller]
fn refused(err: tonic::Status, message: &str) {
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert_eq!(err.message(), message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_protocol_has_its_limit_and_each_flag_sets_one() {
    let flags = [
        "--max-ratelimit-descriptors",
        "2",
        "--max-descriptor-entries",
        "2",
        "--max-check-quotas",
        "3",
        "--max-report-records",
        "4",
        "--max-attributes",
        "5",
        "--max-export-records",
        "6",
        "--max-access-log-entries",
        "7",
    ];
    let (mixer, _dir) = tokio::task::spawn_blocking(move || start(&flags))
        .await
        .expect("join");
    let addr = format!("http://{}", mixer.grpc);
    let channel = tonic::transport::Channel::from_shared(addr)
        .expect("uri")
        .connect()
        .await
        .expect("connect");

    let mut c = RateLimitServiceClient::new(channel.clone());
    c.should_rate_limit(descriptors(2, 2))
        .await
        .expect("at the limits");
    refused(
        c.should_rate_limit(descriptors(3, 1)).await.expect_err("3"),
        "rate limit descriptors in the request: 3 is over the limit of 2 (mixer serve --max-ratelimit-descriptors)",
    );
    refused(
        c.should_rate_limit(descriptors(1, 3)).await.expect_err("3"),
        "entries in descriptors[0]: 3 is over the limit of 2 (mixer serve --max-descriptor-entries)",
    );

    let mut m = MixerClient::new(channel.clone());
    m.check(check_with_quotas(3)).await.expect("at the limit");
    refused(
        m.check(check_with_quotas(4)).await.expect_err("4 quotas"),
        "quotas in the check: 4 is over the limit of 3 (mixer serve --max-check-quotas)",
    );
    m.report(report(4)).await.expect("at the limit");
    refused(
        m.report(report(5)).await.expect_err("5 records"),
        "records in the report: 5 is over the limit of 4 (mixer serve --max-report-records)",
    );
    let six = Value::from("x");
    let mut many: Vec<(String, Value)> = (0..6)
        .map(|i| (format!("x-attribute-{i}"), six.clone()))
        .collect();
    many.truncate(6);
    let attributes = encode(many.iter().map(|(k, v)| (k.as_str(), v)), GLOBAL_WORD_COUNT);
    let mut check = check_with_quotas(0);
    check.attributes = Some(attributes.clone());
    refused(
        m.check(check).await.expect_err("6 attributes"),
        "attributes in the check: 6 is over the limit of 5 (mixer serve --max-attributes)",
    );
    let mut records = report(2);
    records.attributes[1] = attributes;
    refused(
        m.report(records).await.expect_err("6 attributes"),
        "attributes in record 1: 6 is over the limit of 5 (mixer serve --max-attributes)",
    );

    let mut logs = LogsServiceClient::new(channel.clone());
    logs.export(log_export(6)).await.expect("at the limit");
    refused(
        logs.export(log_export(7)).await.expect_err("7 records"),
        "log records in the export: 7 is over the limit of 6 (mixer serve --max-export-records)",
    );
    let mut traces = TraceServiceClient::new(channel.clone());
    traces.export(span_export(6)).await.expect("at the limit");
    refused(
        traces.export(span_export(7)).await.expect_err("7 spans"),
        "spans in the export: 7 is over the limit of 6 (mixer serve --max-export-records)",
    );

    let mut als = AccessLogServiceClient::new(channel);
    als.stream_access_logs(tokio_stream::iter(vec![access_logs(7)]))
        .await
        .expect("at the limit");
    refused(
        als.stream_access_logs(tokio_stream::iter(vec![access_logs(7), access_logs(8)]))
            .await
            .expect_err("8 entries"),
        "entries in message 1 of the stream: 8 is over the limit of 7 (mixer serve --max-access-log-entries)",
    );
    assert!(mixer.terminate().success());
}
