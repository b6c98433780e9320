//! An adapter that hangs or is down: deadlines, the concurrency limit, and the circuit
//! breaker.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mixer_adapter_api::{ErrorKind, Handler};
use mixer_oop::{BreakerOptions, OopOptions};

use crate::adapter::{State, serve};
use crate::fixtures::*;

#[tokio::test]
async fn a_hung_adapter_times_out_within_the_deadline() {
    let state = Arc::new(State::default());
    state.hang.store(true, Ordering::SeqCst);
    let (addr, _server) = serve(state, "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::Value::Null);
    let started = std::time::Instant::now();
    let e = h
        .as_check()
        .unwrap()
        .check(&listentry("good"))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(took >= Duration::from_millis(290), "{took:?}");
    assert!(took < Duration::from_millis(800), "{took:?}");
}

#[tokio::test]
async fn calls_over_the_concurrency_limit_are_overloaded_at_once() {
    let state = Arc::new(State::default());
    state.hang.store(true, Ordering::SeqCst);
    let (addr, _server) = serve(state.clone(), "127.0.0.1:0".parse().unwrap()).await;
    let h = build(
        OopOptions {
            max_concurrency: 2,
            default_timeout: Duration::from_secs(2),
            ..options()
        },
        addr,
        serde_json::Value::Null,
    );
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let h = h.clone();
            tokio::spawn(async move { h.as_check().unwrap().check(&listentry("good")).await })
        })
        .collect();
    while state.in_flight.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = std::time::Instant::now();
    let e = h
        .as_check()
        .unwrap()
        .check(&listentry("good"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Overloaded, "{e}");
    assert!(started.elapsed() < Duration::from_millis(100));
    for b in busy {
        b.abort();
    }
}

#[tokio::test]
async fn the_circuit_opens_on_a_down_adapter_and_closes_when_it_is_back() {
    // A port with nothing behind it (for now).
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let h = build(
        OopOptions {
            breaker: BreakerOptions {
                failure_threshold: 3,
                cool_down: Duration::from_millis(200),
            },
            ..options()
        },
        addr,
        serde_json::Value::Null,
    );
    let check = h.as_check().unwrap();
    for _ in 0..3 {
        let e = check.check(&listentry("good")).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    }
    let e = check.check(&listentry("good")).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::CircuitOpen, "open: {e}");
    assert_eq!(e.kind.label(), "circuit_open");
    assert!(e.message.contains("circuit open"));

    let state = Arc::new(State::default());
    let (_, _server) = serve(state, addr).await;
    // Still open until the cool-down is over.
    assert_eq!(
        check.check(&listentry("good")).await.unwrap_err().kind,
        ErrorKind::CircuitOpen
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    let ok = check
        .check(&listentry("good"))
        .await
        .expect("probe reaches the adapter");
    assert!(ok.status.is_ok());
    assert_eq!(h.metrics().calls("check", "ok"), 1);
    let mut text = String::new();
    h.as_exposition().unwrap().render(&mut text);
    assert!(text.contains("mixer_oop_circuit_opened_total{handler=\"h.istio-system\"} 1"));
}

/// A raw HTTP/2 adapter that refuses the first Handle stream unprocessed (REFUSED_STREAM,
/// as a server going away does) and answers the others with an empty gRPC `CheckResult`;
/// it has no sessions (CreateSession is UNIMPLEMENTED). Counts the Handle streams it saw.
async fn refuses_the_first_stream() -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let handled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = handled.clone();
    tokio::spawn(async move {
        let Ok((socket, _)) = listener.accept().await else {
            return;
        };
        let Ok(mut connection) = h2::server::handshake(socket).await else {
            return;
        };
        while let Some(Ok((request, mut respond))) = connection.accept().await {
            let grpc = |status: &str| {
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", status.parse().expect("header"));
                trailers
            };
            let head = http::Response::builder()
                .header("content-type", "application/grpc")
                .body(())
                .expect("response");
            if request.uri().path().ends_with("/CreateSession") {
                let Ok(mut stream) = respond.send_response(head, false) else {
                    continue;
                };
                let _ = stream.send_trailers(grpc("12"));
            } else if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                respond.send_reset(h2::Reason::REFUSED_STREAM);
            } else if let Ok(mut stream) = respond.send_response(head, false) {
                // An empty CheckResult: the 5-byte gRPC frame header of a 0-byte message.
                let _ = stream.send_data(bytes::Bytes::from_static(&[0; 5]), false);
                let _ = stream.send_trailers(grpc("0"));
            }
        }
    });
    (addr, handled)
}

#[tokio::test]
async fn a_call_the_adapter_refused_unprocessed_goes_once_more_on_the_same_deadline() {
    let (addr, handled) = refuses_the_first_stream().await;
    let h = build(options(), addr, serde_json::Value::Null);
    let answer = h
        .as_check()
        .expect("check")
        .check(&listentry("anyone"))
        .await
        .expect("decided by the second attempt");
    assert!(answer.status.is_ok());
    assert_eq!(handled.load(Ordering::SeqCst), 2);
    assert_eq!(h.metrics().calls("check", "connection_lost"), 1);
    assert_eq!(h.metrics().calls("check", "ok"), 1);
}
