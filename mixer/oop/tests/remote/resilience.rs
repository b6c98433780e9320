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
