//! The gRPC listener's budget of request bytes in flight, on the real binary: HTTP/2 clients
//! (the `h2` crate) open many bodiless streams over several connections; past the budget
//! (`--grpc-max-request-bytes-in-flight`, 4 KiB charged per open stream) new streams are
//! answered RESOURCE_EXHAUSTED at once, whichever connection they come on, and counted in
//! `mixer_streams_refused_total{reason="request_budget"}`; once the held streams end, calls
//! are served again.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mixer_tests::Mixer;
use prost::Message;

#[path = "support/authz.rs"]
mod authz;

const CHECK: &str = "/envoy.service.auth.v3.Authorization/Check";
/// What the listener charges an open stream (`mixer_grpc::limits::STREAM_OVERHEAD_BYTES`).
const STREAM_OVERHEAD: usize = 4 << 10;
/// Streams the budget of this test has room for.
const ROOM: usize = 256;
const CONNECTIONS: usize = 4;
const STREAMS: usize = 100;

/// An ext_authz Check that the default config allows, framed as gRPC sends it.
fn check_body() -> Bytes {
    let message = authz::authz_request(&[("x-user", "bob")]).encode_to_vec();
    let mut body = vec![0];
    body.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
    body.extend_from_slice(&message);
    Bytes::from(body)
}

async fn h2_client(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    send
}

fn check_request() -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://mixer{CHECK}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request")
}

/// The gRPC status and message of an answer's headers (trailers-only) or trailers.
async fn grpc_status(response: h2::client::ResponseFuture) -> (String, String) {
    let response = response.await.expect("an answer");
    let mut fields = response.headers().clone();
    let mut body = response.into_body();
    if !body.is_end_stream() {
        while let Some(data) = body.data().await {
            data.expect("data");
        }
        if let Some(trailers) = body.trailers().await.expect("trailers") {
            fields.extend(trailers);
        }
    }
    let field = |name: &str| {
        fields
            .get(name)
            .map(|v| v.to_str().expect("ASCII").to_string())
            .unwrap_or_default()
    };
    (field("grpc-status"), field("grpc-message"))
}

/// A Check with its body, on a connection of its own.
async fn check(addr: SocketAddr) -> (String, String) {
    let send = h2_client(addr).await;
    let mut ready = send.ready().await.expect("ready");
    let (response, mut body) = ready.send_request(check_request(), false).expect("send");
    // Refused on its headers, the stream may be gone before its body goes out.
    let _sent = body.send_data(check_body(), true);
    grpc_status(response).await
}

fn refused(mixer: &Mixer) -> f64 {
    mixer
        .metric(r#"mixer_streams_refused_total{listener="grpc",reason="request_budget"}"#)
        .expect("counted")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_request_budget_are_refused_across_connections() {
    let budget = (ROOM * STREAM_OVERHEAD).to_string();
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &[
            "--body-read-timeout",
            "3s",
            "--grpc-max-request-bytes-in-flight",
            &budget,
        ],
    );
    mixer.wait_ready(Duration::from_secs(10));
    assert_eq!(check(mixer.grpc).await.0, "0", "served within the budget");

    let mut held = Vec::new();
    let mut connections = Vec::new();
    for _ in 0..CONNECTIONS {
        let send = h2_client(mixer.grpc).await;
        for _ in 0..STREAMS {
            let mut ready = send.clone().ready().await.expect("ready");
            // Headers only: the body never comes, and the stream holds its share until the
            // body timeout.
            let (response, body) = ready.send_request(check_request(), false).expect("send");
            held.push((response, body));
        }
        connections.push(send);
    }
    let over = (CONNECTIONS * STREAMS - ROOM) as f64;
    let deadline = Instant::now() + Duration::from_secs(2);
    while refused(&mixer) < over && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(refused(&mixer), over);
    // Full: a whole call on a new connection is refused too, and says why.
    let (code, message) = check(mixer.grpc).await;
    assert_eq!(code, "8", "{message}");
    assert!(
        message.contains("request%20bytes%20in%20flight"),
        "{message}"
    );

    // The held streams: those within the budget end at the body timeout (DEADLINE_EXCEEDED),
    // the others were refused at once.
    let mut codes = std::collections::BTreeMap::new();
    for (response, _body) in held {
        *codes.entry(grpc_status(response).await.0).or_insert(0) += 1;
    }
    assert_eq!(
        codes,
        [
            ("4".to_string(), ROOM),
            ("8".to_string(), CONNECTIONS * STREAMS - ROOM)
        ]
        .into()
    );
    // Their room is given back.
    assert_eq!(check(mixer.grpc).await.0, "0", "served again");
    drop(connections);
    assert!(mixer.terminate().success());
}
