//! Garbage and oversized exports are refused and the server keeps serving.

use super::*;
use common::RawCodec;

use crate::samples::*;
use opentelemetry_proto::tonic::common::v1::AnyValue;
use tonic::Code;
use tonic::transport::Channel;

#[tokio::test]
async fn garbage_and_oversized_exports_are_refused_and_the_server_keeps_serving() {
    let mut h = start().await;
    let channel = Channel::from_shared(format!("http://{}", h.addr))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    for path in [
        "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    ] {
        for garbage in [
            vec![0xff; 64],
            vec![0x0a, 0x80, 0x80, 0x80, 0x10],
            b"not a protobuf message at all".to_vec(),
        ] {
            grpc.ready().await.expect("ready");
            let err = grpc
                .unary(
                    tonic::Request::new(garbage),
                    tonic::codegen::http::uri::PathAndQuery::from_static(path),
                    RawCodec,
                )
                .await
                .expect_err("garbage is refused");
            assert_ne!(err.code(), Code::Ok);
        }
    }
    let mut big = http_log();
    big.body = Some(AnyValue {
        value: Some(s(&"x".repeat(5 * 1024 * 1024))),
    });
    let err = h
        .logs
        .export(logs_request(vec![big]))
        .await
        .expect_err("over the 4 MiB limit");
    // As gRPC core answers (and the module documentation says), not tonic's OUT_OF_RANGE.
    assert_eq!(err.code(), Code::ResourceExhausted, "{}", err.message());
    assert!(
        recorded(&h.records).is_empty(),
        "nothing of a refused export"
    );

    h.logs
        .export(logs_request(vec![http_log()]))
        .await
        .expect("still serving");
    h.traces
        .export(trace_request(vec![server_span()]))
        .await
        .expect("still serving");
    assert_eq!(wait_recorded(&h.records, 2).await.len(), 2);
}
