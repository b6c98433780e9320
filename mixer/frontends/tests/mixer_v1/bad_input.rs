//! Malformed and oversized check requests are refused and the server keeps serving.

use super::*;
use common::RawCodec;
use mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT;
use tonic::Code;

/// A plain check after bad input still gets an OK precondition.
async fn assert_still_serving(h: &mut Harness) {
    let ok = h
        .client
        .check(check_request(
            &[("request.method", Value::from("GET"))],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect("still serving");
    assert_eq!(
        ok.into_inner()
            .precondition
            .expect("p")
            .status
            .expect("s")
            .code,
        0
    );
}

async fn expect_invalid(h: &mut Harness, attributes: pb::CompressedAttributes, needle: &str) {
    let err = h
        .client
        .check(pb::CheckRequest {
            attributes: Some(attributes),
            global_word_count: GLOBAL_WORD_COUNT as u32,
            ..Default::default()
        })
        .await
        .expect_err("invalid");
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert!(
        err.message().contains(needle),
        "{:?} lacks {needle:?}",
        err.message()
    );
}

#[tokio::test]
async fn bad_indices_and_values_are_invalid_argument() {
    let mut h = start().await;
    let mut a = pb::CompressedAttributes::default();
    a.strings.insert(5000, 19);
    expect_invalid(&mut h, a, "word index 5000").await;

    let mut a = pb::CompressedAttributes {
        words: vec!["x".into()],
        ..Default::default()
    };
    a.strings.insert(19, -2);
    expect_invalid(&mut h, a, "word index -2 (value of request.method)").await;

    let mut a = pb::CompressedAttributes::default();
    a.string_maps.insert(
        15,
        pb::StringMap {
            entries: [(-7, 90)].into_iter().collect(),
        },
    );
    expect_invalid(&mut h, a, "word index -7 (key in request.headers)").await;

    let mut a = pb::CompressedAttributes::default();
    a.strings.insert(23, 90); // request.size = "GET"
    expect_invalid(&mut h, a, "request.size").await;

    let mut a = pb::CompressedAttributes::default();
    a.bytes.insert(0, vec![1, 2, 3]); // source.ip with 3 octets
    expect_invalid(&mut h, a, "source.ip").await;

    let mut a = pb::CompressedAttributes {
        words: vec!["request.method".into()],
        ..Default::default()
    };
    a.strings.insert(19, 90);
    a.int64s.insert(-1, 3); // request.method again, through the message dictionary
    expect_invalid(&mut h, a, "\"request.method\" is given twice").await;

    let mut a = pb::CompressedAttributes::default();
    a.timestamps.insert(
        24,
        prost_types::Timestamp {
            seconds: i64::MAX,
            nanos: 0,
        },
    );
    expect_invalid(&mut h, a, "request.time").await;

    // The server is still fine.
    assert_still_serving(&mut h).await;
}

#[tokio::test]
async fn malformed_protobuf_is_refused_and_the_server_keeps_serving() {
    let mut h = start().await;
    let channel = Channel::from_shared(format!("http://{}", h.addr))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    for garbage in [
        vec![0xff; 64],                     // invalid tag and varint
        vec![0x0a, 0x80, 0x80, 0x80, 0x10], // field 1 with a length far past the end
        b"not a protobuf message at all".to_vec(),
    ] {
        grpc.ready().await.expect("ready");
        let err = grpc
            .unary::<Vec<u8>, Vec<u8>, _>(
                tonic::Request::new(garbage),
                tonic::codegen::http::uri::PathAndQuery::from_static("/istio.mixer.v1.Mixer/Check"),
                RawCodec,
            )
            .await
            .expect_err("garbage is refused");
        assert_ne!(err.code(), Code::Ok);
    }
    assert_still_serving(&mut h).await;
}

#[tokio::test]
async fn a_string_map_with_ten_thousand_entries_is_refused_naming_the_limit() {
    let mut h = start().await;
    let pairs = (0..10_000).map(|i| (format!("x-header-{i}"), format!("value-{i}")));
    let map = StringMap::from_pairs(pairs);
    let err = h
        .client
        .check(check_request(
            &[("request.headers", Value::from(map))],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect_err("over --max-attributes");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "attributes in the check: 10000 is over the limit of 1024 (mixer serve --max-attributes)"
    );
    assert_still_serving(&mut h).await;
}

#[tokio::test]
async fn a_string_map_with_a_thousand_entries_is_handled() {
    let mut h = start().await;
    let mut pairs: Vec<(String, String)> = (0..1_000)
        .map(|i| (format!("x-header-{i}"), format!("value-{i}")))
        .collect();
    pairs.push(("x-user".into(), "bob".into()));
    let map = StringMap::from_pairs(pairs);
    let p = h
        .client
        .check(check_request(
            &[("request.headers", Value::from(map))],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect("check")
        .into_inner()
        .precondition
        .expect("precondition");
    let status = p.status.expect("status");
    assert_eq!(
        status.code,
        Code::PermissionDenied as i32,
        "bob is found among them"
    );
    // Only the key the rules read is referenced, not the other 1,000.
    assert_eq!(
        decoded_refs(&p.referenced_attributes.expect("refs")),
        vec![
            exact("request.headers", Some("x-user")),
            absent("request.method", None),
        ]
    );
}

#[tokio::test]
async fn a_ten_megabyte_attribute_is_over_the_limit_and_the_server_keeps_serving() {
    let mut h = start().await;
    let mut a = pb::CompressedAttributes {
        words: vec!["big.blob".into()],
        ..Default::default()
    };
    a.bytes.insert(-1, vec![7u8; 10 * 1024 * 1024]);
    let err = h
        .client
        .check(pb::CheckRequest {
            attributes: Some(a),
            global_word_count: GLOBAL_WORD_COUNT as u32,
            ..Default::default()
        })
        .await
        .expect_err("over the 4 MiB limit");
    // RESOURCE_EXHAUSTED, as grpc-go (Istio's server) and gRPC core say it.
    assert_eq!(err.code(), Code::ResourceExhausted, "{}", err.message());
    assert!(
        err.message()
            .contains("larger than max (10485790 vs. 4194304)"),
        "{}",
        err.message()
    );
    assert_still_serving(&mut h).await;
}
