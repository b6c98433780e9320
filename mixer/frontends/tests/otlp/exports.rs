//! Log and trace exports becoming report instances, a full queue, and exports without config.

use super::*;
use std::time::Duration;

use crate::samples::*;
use mixer_runtime::QueueOptions;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::trace::v1::Span;
use tonic::Code;

#[tokio::test]
async fn log_records_become_instances() {
    let mut h = start().await;
    let response = h
        .logs
        .export(logs_request(vec![http_log(), structured_log()]))
        .await
        .expect("export")
        .into_inner();
    assert_eq!(response.partial_success, None);
    let got = wait_recorded(&h.records, 2).await;
    assert_eq!(got.len(), 2, "{got:#?}");

    let http = &got[0];
    assert_eq!(var(http, "method"), Some("GET"));
    assert_eq!(var(http, "path"), Some("/cart?id=7&x"));
    assert_eq!(var(http, "code"), Some("200"));
    assert_eq!(var(http, "host"), Some("shop.example.com"));
    assert_eq!(var(http, "source"), Some("10.1.2.3"));
    assert_eq!(var(http, "time"), Some("2023-11-14T22:13:20.123Z"));
    assert_eq!(var(http, "service"), Some("checkout"));
    // The record's attribute wins over the resource's, the scope's over the resource's.
    assert_eq!(var(http, "route"), Some("/cart"));
    assert_eq!(var(http, "env"), Some("staging-from-scope"));
    assert_eq!(var(http, "severity"), Some("INFO"));
    assert_eq!(var(http, "body"), Some("GET /cart 200"));
    assert_eq!(var(http, "trace"), Some("4b".repeat(16).as_str()));
    assert_eq!(var(http, "span"), Some("0000000000000007"));
    assert_eq!(var(http, "parent"), Some(""));

    let structured = &got[1];
    assert_eq!(var(structured, "method"), Some("POST"));
    assert_eq!(var(structured, "path"), Some("/pay?retry=1"));
    assert_eq!(var(structured, "code"), Some("502"));
    // Not an IP address: left out of the bag, so the instance takes the default.
    assert_eq!(var(structured, "source"), Some("0.0.0.0"));
    assert_eq!(var(structured, "severity"), Some("oops"));
    assert_eq!(
        var(structured, "body"),
        Some(r#"{"msg":"payment failed","attempt":3}"#)
    );
    assert_eq!(var(structured, "time"), Some("2023-11-14T22:13:21Z"));
    assert_eq!(var(structured, "route"), Some("/from-resource"));
    assert_eq!(var(structured, "trace"), Some(""));
}

#[tokio::test]
async fn spans_become_instances() {
    let mut h = start().await;
    let response = h
        .traces
        .export(trace_request(vec![server_span(), grpc_client_span()]))
        .await
        .expect("export")
        .into_inner();
    assert_eq!(response.partial_success, None);
    let got = wait_recorded(&h.records, 2).await;
    assert_eq!(got.len(), 2, "{got:#?}");

    let server = &got[0];
    assert_eq!(var(server, "name"), Some("GET /cart"));
    assert_eq!(var(server, "kind"), Some("server"));
    assert_eq!(var(server, "reporter"), Some("inbound"));
    assert_eq!(
        var(server, "trace"),
        Some("0102030405060708090a0b0c0d0e0f10")
    );
    assert_eq!(var(server, "span"), Some("aabbccdd00010203"));
    assert_eq!(var(server, "parent"), Some("1010101010101010"));
    assert_eq!(var(server, "method"), Some("GET"));
    assert_eq!(var(server, "code"), Some("404"));
    assert_eq!(var(server, "duration"), Some("45500us"));
    assert_eq!(var(server, "source"), Some("2001:db8::1"));
    assert_eq!(var(server, "time"), Some("2023-11-14T22:13:20Z"));
    assert_eq!(var(server, "service"), Some("checkout"));

    let client = &got[1];
    assert_eq!(var(client, "kind"), Some("client"));
    assert_eq!(var(client, "reporter"), Some("outbound"));
    assert_eq!(var(client, "parent"), Some("aabbccdd00010203"));
    assert_eq!(var(client, "duration"), Some("20ms"));
    assert_eq!(var(client, "method"), Some(""));
}

#[tokio::test]
async fn empty_exports_succeed() {
    let mut h = start().await;
    let logs = h
        .logs
        .export(ExportLogsServiceRequest::default())
        .await
        .expect("empty logs")
        .into_inner();
    assert_eq!(logs.partial_success, None);
    let traces = h
        .traces
        .export(ExportTraceServiceRequest::default())
        .await
        .expect("empty traces")
        .into_inner();
    assert_eq!(traces.partial_success, None);
    // A record with nothing in it is still one (nearly empty) instance.
    h.logs
        .export(ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![LogRecord::default()],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        })
        .await
        .expect("empty record");
    assert_eq!(wait_recorded(&h.records, 1).await.len(), 1);
}

#[tokio::test]
async fn a_full_queue_is_answered_with_partial_success() {
    let mut h = start_with(Setup {
        delay: Duration::from_millis(500),
        queue: QueueOptions {
            max_records: 1,
            ..QueueOptions::default()
        },
        ..Setup::default()
    })
    .await;
    let records: Vec<LogRecord> = (0..5).map(|_| http_log()).collect();
    let response = h
        .logs
        .export(logs_request(records))
        .await
        .expect("a partial success is a success")
        .into_inner();
    let partial = response.partial_success.expect("partial_success is set");
    assert!(
        (3..=4).contains(&partial.rejected_log_records),
        "{partial:?}"
    );
    assert!(
        partial.error_message.contains("queue was full"),
        "{}",
        partial.error_message
    );

    let spans: Vec<Span> = (0..5).map(|_| server_span()).collect();
    let response = h
        .traces
        .export(trace_request(spans))
        .await
        .expect("a partial success is a success")
        .into_inner();
    let partial = response.partial_success.expect("partial_success is set");
    assert!((3..=5).contains(&partial.rejected_spans), "{partial:?}");
    assert!(
        partial.error_message.contains("of 5 spans"),
        "{}",
        partial.error_message
    );
    // What was accepted is delivered.
    let got = wait_recorded(&h.records, 1).await;
    assert!(!got.is_empty());
}

#[tokio::test]
async fn without_a_valid_config_exports_are_unavailable() {
    let mut h = start_with(Setup {
        ready: false,
        ..Setup::default()
    })
    .await;
    let err = h
        .logs
        .export(logs_request(vec![http_log()]))
        .await
        .expect_err("no config");
    assert_eq!(err.code(), Code::Unavailable);
    let err = h
        .traces
        .export(trace_request(vec![server_span()]))
        .await
        .expect_err("no config");
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "no valid config is active");
}
