//! Failed exports: retries within the budget, timeouts per attempt, permanent errors, and an
//! endpoint nobody listens on.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mixer_adapter_api::{ErrorKind, Handler};
use mixer_model::Value;
use serde_json::json;
use tonic::Code;

use crate::fixtures::*;
use crate::receiver::{Receiver, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_twice_then_ok_is_delivered_after_retries() {
    let receiver = Receiver::new(2, Code::Unavailable);
    let addr = serve(receiver.clone()).await;
    let handler = build(params(addr));
    handler
        .as_report()
        .unwrap()
        .report(&[server_span("0000000000000001")])
        .await
        .expect("delivered after two retries");
    assert_eq!(receiver.calls.load(Ordering::SeqCst), 3);
    let received = receiver.take();
    assert_eq!(received.traces.len(), 1);
    assert_eq!(received.metadata.len(), 3, "headers on every attempt");
    handler.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_stays_unavailable_fails_the_batch_within_the_budget() {
    let receiver = Receiver::new(usize::MAX, Code::Unavailable);
    let addr = serve(receiver.clone()).await;
    let handler = build(params(addr));
    let started = Instant::now();
    let err = handler
        .as_report()
        .unwrap()
        .report(&[server_span("0000000000000001"), log_entry("Info", 200)])
        .await
        .expect_err("never delivered");
    let took = started.elapsed();
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err:?}");
    assert!(err.retryable);
    assert!(err.message.contains("not exported"), "{}", err.message);
    // maxElapsedTime 400ms, backoff 10ms doubling to 40ms: a handful of attempts per signal.
    let calls = receiver.calls.load(Ordering::SeqCst);
    assert!((4..=60).contains(&calls), "{calls} calls");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    handler.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_receiver_times_out_each_attempt() {
    let mut receiver = Receiver::new(0, Code::Ok);
    receiver.delay = Duration::from_secs(5);
    let addr = serve(receiver.clone()).await;
    let mut p = params(addr);
    p["timeout"] = json!("200ms");
    p["retry"] = json!({"initialBackoff": "10ms", "maxBackoff": "20ms", "maxElapsedTime": "300ms"});
    let handler = build(p);
    let started = Instant::now();
    let err = handler
        .as_report()
        .unwrap()
        .report(&[server_span("0000000000000001")])
        .await
        .expect_err("too slow");
    let took = started.elapsed();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert!(err.retryable);
    // At most maxElapsedTime plus one attempt's timeout (and some slack).
    assert!(took < Duration::from_millis(1_000), "took {took:?}");
    assert!(receiver.calls.load(Ordering::SeqCst) >= 2, "retried");
    handler.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_errors_are_not_retried() {
    let receiver = Receiver::new(usize::MAX, Code::InvalidArgument);
    let addr = serve(receiver.clone()).await;
    let handler = build(params(addr));
    let err = handler
        .as_report()
        .unwrap()
        .report(&[server_span("0000000000000001")])
        .await
        .expect_err("refused");
    assert!(!err.retryable, "{err:?}");
    assert_eq!(err.kind, ErrorKind::InvalidResponse);
    assert_eq!(receiver.calls.load(Ordering::SeqCst), 1);
    handler.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_fails_after_bounded_retries() {
    // A port nobody listens on.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let handler = build(params(addr));
    let report = handler.as_report().unwrap();
    let started = Instant::now();
    let err = report
        .report(&[server_span("0000000000000001"), log_entry("Info", 200)])
        .await
        .expect_err("nobody listens");
    let took = started.elapsed();
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err:?}");
    assert!(err.retryable);
    assert!(
        took >= Duration::from_millis(100),
        "retried for a while: {took:?}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");

    report
        .report(&[metric("requestcount.istio-system", Value::Int64(1), 200)])
        .await
        .expect("metrics are only recorded");
    let err = handler.flush_metrics().await.expect_err("nobody listens");
    assert!(err.retryable, "{err:?}");
    assert_eq!(handler.metric_export_failures(), 1);
    let started = Instant::now();
    handler.close().await;
    assert!(started.elapsed() < Duration::from_secs(4));
}
