//! Streams of entries becoming report instances, empty streams, and streams without config.

use super::*;

use crate::samples::*;
use envoy_types::pb::envoy::config::core::v3::RequestMethod;
use envoy_types::pb::envoy::data::accesslog::v3::AccessLogType;
use envoy_types::pb::envoy::service::accesslog::v3::StreamAccessLogsMessage;
use tonic::Code;
use tonic::codegen::tokio_stream;

#[tokio::test]
async fn each_entry_of_a_stream_becomes_one_instance() {
    let mut h = start().await;
    let messages = vec![
        http_message(Some(identifier()), vec![full_http_entry(), grpc_entry()]),
        http_message(
            None,
            vec![
                simple_http_entry(RequestMethod::Get, "/a", 200, 5),
                simple_http_entry(RequestMethod::Delete, "/b", 404, 7),
            ],
        ),
        tcp_message(vec![
            tcp_entry(AccessLogType::TcpPeriodic, 1000, 100),
            tcp_entry(AccessLogType::TcpConnectionEnd, 1500, 400),
        ]),
    ];
    h.client
        .stream_access_logs(tokio_stream::iter(messages))
        .await
        .expect("the stream ends with an empty response");
    let got = wait_recorded(&h.records, 6).await;
    assert_eq!(got.len(), 6, "{got:#?}");

    let full = &got[0];
    assert_eq!(var(full, "method"), Some("POST"));
    assert_eq!(var(full, "path"), Some("/reviews/1?lang=en&debug"));
    assert_eq!(var(full, "code"), Some("503"));
    assert_eq!(var(full, "duration"), Some("12ms"));
    assert_eq!(var(full, "flags"), Some("UH,UF"));
    assert_eq!(var(full, "protocol"), Some("http"));
    assert_eq!(var(full, "user"), Some("amy"));
    assert_eq!(var(full, "source"), Some("10.0.0.1"));
    assert_eq!(var(full, "destination"), Some("127.0.0.1"));
    assert_eq!(var(full, "kind"), Some("inbound"));
    assert_eq!(var(full, "mtls"), Some("true"));
    assert_eq!(var(full, "log"), Some("istio-als"));
    assert_eq!(var(full, "cluster"), Some("inbound|9080||"));
    assert_eq!(
        var(full, "reporter"),
        Some("kubernetes://reviews-v1-abc.shop")
    );

    let grpc = &got[1];
    assert_eq!(var(grpc, "protocol"), Some("grpc"));
    assert_eq!(var(grpc, "flags"), Some("UAEX"));
    assert_eq!(var(grpc, "duration"), Some("1500ms"));
    assert_eq!(var(grpc, "kind"), Some("outbound"));
    assert_eq!(var(grpc, "mtls"), Some("false"));

    // The identifier came on the first message only; it still applies to the later ones.
    for later in &got[2..] {
        assert_eq!(var(later, "log"), Some("istio-als"), "{later:?}");
        assert_eq!(
            var(later, "reporter"),
            Some("kubernetes://reviews-v1-abc.shop")
        );
    }
    assert_eq!(
        (
            var(&got[2], "method"),
            var(&got[2], "path"),
            var(&got[2], "code")
        ),
        (Some("GET"), Some("/a"), Some("200"))
    );
    assert_eq!(var(&got[2], "flags"), Some("-"));
    assert_eq!(var(&got[2], "duration"), Some("5ms"));
    assert_eq!(
        (
            var(&got[3], "method"),
            var(&got[3], "path"),
            var(&got[3], "code")
        ),
        (Some("DELETE"), Some("/b"), Some("404"))
    );

    // TCP: running totals from Envoy, bytes since the previous entry of the connection.
    let (periodic, end) = (&got[4], &got[5]);
    assert_eq!(var(periodic, "protocol"), Some("tcp"));
    assert_eq!(var(periodic, "event"), Some("continue"));
    assert_eq!(var(periodic, "received"), Some("1000"));
    assert_eq!(var(periodic, "sent"), Some("100"));
    assert_eq!(var(end, "event"), Some("close"));
    assert_eq!(var(end, "received"), Some("500"));
    assert_eq!(var(end, "received_total"), Some("1500"));
    assert_eq!(var(end, "sent"), Some("300"));
    assert_eq!(var(end, "destination"), Some("10.0.0.2"));
    assert_eq!(var(end, "method"), Some(""));
}

#[tokio::test]
async fn an_empty_stream_and_empty_messages_are_fine() {
    let mut h = start().await;
    h.client
        .stream_access_logs(tokio_stream::iter(Vec::<StreamAccessLogsMessage>::new()))
        .await
        .expect("empty stream");
    h.client
        .stream_access_logs(tokio_stream::iter(vec![
            StreamAccessLogsMessage {
                identifier: Some(identifier()),
                log_entries: None,
            },
            http_message(None, vec![]),
        ]))
        .await
        .expect("messages without entries");
    assert!(wait_recorded(&h.records, 0).await.is_empty());
}

#[tokio::test]
async fn without_a_valid_config_the_stream_is_unavailable() {
    let mut h = start_with(false).await;
    let err = h
        .client
        .stream_access_logs(tokio_stream::iter(vec![http_message(
            Some(identifier()),
            vec![full_http_entry()],
        )]))
        .await
        .expect_err("no config");
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "no valid config is active");
}
