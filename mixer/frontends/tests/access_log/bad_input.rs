//! Garbage and oversized messages end the stream cleanly and the server keeps serving.

use super::*;
use common::RawCodec;
use std::net::SocketAddr;

use crate::samples::*;
use envoy_types::pb::envoy::config::core::v3::RequestMethod;
use prost::Message;
use tonic::Code;
use tonic::codegen::tokio_stream;
use tonic::transport::Channel;

async fn raw_stream(addr: SocketAddr, messages: Vec<Vec<u8>>) -> Result<(), tonic::Status> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    grpc.client_streaming(
        tonic::Request::new(tokio_stream::iter(messages)),
        tonic::codegen::http::uri::PathAndQuery::from_static(
            "/envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs",
        ),
        RawCodec,
    )
    .await
    .map(|_| ())
}

#[tokio::test]
async fn garbage_ends_the_stream_with_invalid_argument_after_the_good_entries() {
    let mut h = start().await;
    let good = http_message(
        Some(identifier()),
        vec![simple_http_entry(RequestMethod::Get, "/ok", 200, 1)],
    )
    .encode_to_vec();
    for garbage in [
        vec![0xff; 64],                     // invalid tag and varint
        vec![0x12, 0x80, 0x80, 0x80, 0x10], // http_logs with a length far past the end
        b"not a protobuf message at all".to_vec(),
    ] {
        let before = recorded(&h.records).len();
        let err = raw_stream(h.addr, vec![good.clone(), garbage, good.clone()])
            .await
            .expect_err("garbage is refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
        assert!(err.message().contains("malformed"), "{}", err.message());
        // The entry before the garbage was reported; the one after it was not read.
        let got = wait_recorded(&h.records, before + 1).await;
        assert_eq!(got.len(), before + 1);
        assert_eq!(var(&got[before], "path"), Some("/ok"));
    }
    // The server keeps serving.
    h.client
        .stream_access_logs(tokio_stream::iter(vec![http_message(
            None,
            vec![simple_http_entry(RequestMethod::Put, "/after", 201, 1)],
        )]))
        .await
        .expect("still serving");
    let got = wait_recorded(&h.records, 4).await;
    assert_eq!(var(&got[3], "path"), Some("/after"));
}

#[tokio::test]
async fn an_oversized_message_is_refused_and_the_server_keeps_serving() {
    let mut h = start().await;
    let mut entry = simple_http_entry(RequestMethod::Get, "/big", 200, 1);
    if let Some(request) = entry.request.as_mut() {
        request
            .request_headers
            .insert("x-big".into(), "x".repeat(5 * 1024 * 1024));
    }
    let err = h
        .client
        .stream_access_logs(tokio_stream::iter(vec![http_message(None, vec![entry])]))
        .await
        .expect_err("over tonic's 4 MiB limit");
    assert_eq!(err.code(), Code::OutOfRange, "{}", err.message());
    h.client
        .stream_access_logs(tokio_stream::iter(vec![http_message(
            None,
            vec![simple_http_entry(RequestMethod::Get, "/small", 200, 1)],
        )]))
        .await
        .expect("still serving");
    let got = wait_recorded(&h.records, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(var(&got[0], "path"), Some("/small"));
}
