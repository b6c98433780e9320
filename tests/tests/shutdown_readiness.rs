//! SIGTERM through the real binary: readiness turns NOT_SERVING at once (gRPC health on the
//! gRPC and admin listeners, `/readyz`), calls are still answered for `--shutdown-delay`, a
//! second SIGTERM starts the drain, and a call in flight finishes before the process exits.

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::process::Command;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::data::accesslog::v3::HttpAccessLogEntry;
use envoy_types::pb::envoy::service::accesslog::v3::StreamAccessLogsMessage;
use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_client::AccessLogServiceClient;
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::{
    HttpAccessLogEntries, Identifier, LogEntries,
};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use mixer_tests::{Mixer, http_request};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

#[path = "support/authz.rs"]
mod authz;
use authz::authz_request;

/// The overall status ("") as a kubelet gRPC probe asks it: a new connection each time.
async fn probe(addr: SocketAddr) -> Result<ServingStatus, String> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let mut client = HealthClient::new(channel);
    let answer = client
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map_err(|e| e.to_string())?;
    Ok(answer.into_inner().status())
}

/// A client-streaming body fed from a channel, to hold a call open across the signals.
struct Feed(tokio::sync::mpsc::UnboundedReceiver<StreamAccessLogsMessage>);

impl tonic::codegen::tokio_stream::Stream for Feed {
    type Item = StreamAccessLogsMessage;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

fn entries(first: bool) -> StreamAccessLogsMessage {
    StreamAccessLogsMessage {
        identifier: first.then(|| Identifier {
            node: Some(Node {
                id: "sidecar~10.0.0.7~cart.shop~shop.svc.cluster.local".into(),
                ..Default::default()
            }),
            log_name: "als".into(),
        }),
        log_entries: Some(LogEntries::HttpLogs(HttpAccessLogEntries {
            log_entry: vec![HttpAccessLogEntry::default()],
        })),
    }
}

fn sigterm(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_turns_health_not_serving_before_the_drain_and_calls_still_succeed() {
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--shutdown-delay", "30s", "--drain-timeout", "20s"],
    );
    let (grpc, admin) = (mixer.grpc, mixer.admin);
    let mixer = tokio::task::spawn_blocking(move || {
        mixer.wait_ready(Duration::from_secs(10));
        mixer
    })
    .await
    .expect("join");
    // gRPC health follows readiness within its poll.
    let start = Instant::now();
    while probe(grpc).await != Ok(ServingStatus::Serving) {
        assert!(start.elapsed() < Duration::from_secs(5), "never SERVING");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(probe(admin).await, Ok(ServingStatus::Serving));

    // A call in flight across both signals: an access log stream with one message sent.
    let (feed, rx) = tokio::sync::mpsc::unbounded_channel();
    feed.send(entries(true)).expect("feed");
    let mut als = AccessLogServiceClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect");
    let in_flight = tokio::spawn(async move { als.stream_access_logs(Feed(rx)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!in_flight.is_finished(), "the stream ended early");

    sigterm(mixer.pid());
    let signalled = Instant::now();
    let not_serving = loop {
        match probe(grpc).await {
            Ok(ServingStatus::NotServing) => break signalled.elapsed(),
            Ok(ServingStatus::Serving) => {}
            other => panic!("health after SIGTERM: {other:?}"),
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(2),
            "still SERVING after SIGTERM"
        );
    };
    eprintln!("gRPC health NOT_SERVING {not_serving:?} after SIGTERM");
    // Under a loaded CI machine a probe itself takes a few milliseconds; the switch is
    // made before anything else on SIGTERM.
    assert!(
        not_serving < Duration::from_millis(300),
        "NOT_SERVING only after {not_serving:?}"
    );
    assert_eq!(probe(admin).await, Ok(ServingStatus::NotServing));
    let (status, _, body) = tokio::task::spawn_blocking(move || {
        http_request(admin, "GET", "/readyz", &[]).expect("readyz")
    })
    .await
    .expect("join");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("draining"), "{body}");

    // Not ready, yet new calls on new connections are answered during the delay.
    let mut authz = AuthorizationClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect during the shutdown delay");
    let answer = authz
        .check(authz_request(&[("x-user", "bob")]))
        .await
        .expect("check during the shutdown delay")
        .into_inner();
    assert_eq!(answer.status.map(|s| s.code), Some(0));

    // A second SIGTERM starts the drain at once; the call in flight still finishes, and
    // the process waits for it.
    let exited = tokio::task::spawn_blocking(move || {
        let status = mixer.terminate();
        (status, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!exited.is_finished(), "exited with a call in flight");
    feed.send(entries(false)).expect("feed");
    drop(feed);
    let finished = in_flight.await.expect("join");
    let finished_at = Instant::now();
    assert!(finished.is_ok(), "the call in flight failed: {finished:?}");
    let (status, exit_at) = exited.await.expect("join");
    assert!(status.success(), "exit status {status:?}");
    assert!(exit_at >= finished_at - Duration::from_millis(50));
    assert!(
        signalled.elapsed() < Duration::from_secs(15),
        "the second SIGTERM did not cut the 30 s delay short"
    );
}

#[test]
fn the_shutdown_delay_ends_by_itself_then_the_drain_runs() {
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--shutdown-delay", "1500ms"],
    );
    mixer.wait_ready(Duration::from_secs(10));
    sigterm(mixer.pid());
    let signalled = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    // Not ready, and still answering forward-auth on a new connection.
    let (status, _, body) = http_request(mixer.admin, "GET", "/readyz", &[]).expect("readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("draining"), "{body}");
    let (status, _, _) = http_request(mixer.http, "GET", "/check", &[("x-user", "bob")])
        .expect("a check during the shutdown delay");
    assert_eq!(status, 200);
    // The process ends on its own once the delay is over and nothing is in flight.
    let (status, waited) = mixer.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}");
    let exited = signalled.elapsed();
    assert!(waited > Duration::ZERO);
    assert!(
        exited >= Duration::from_millis(1500),
        "exited {exited:?} after SIGTERM, before the delay ended"
    );
    eprintln!("exited {exited:?} after SIGTERM with a 1.5 s shutdown delay");
}
