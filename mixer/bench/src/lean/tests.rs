//! The lean driver against the no-op server, on the mixer's own HTTP/2 stack.

use std::collections::HashMap;

use envoy_types::ext_authz::v3::pb::CheckRequest;
use envoy_types::pb::envoy::service::auth::v3::AttributeContext;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request};

use super::*;
use crate::targets::ext_authz_outcome;

/// A no-op server on a port of its own, for as long as the returned runtime lives.
fn noop_server() -> (tokio::runtime::Runtime, SocketAddr) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    rt.spawn(crate::noop::serve_on(listener));
    (rt, addr)
}

fn check_with_header_of(bytes: usize) -> Bytes {
    let http = HttpRequest {
        method: "GET".into(),
        path: "/".into(),
        headers: HashMap::from([("x-big".to_string(), "b".repeat(bytes))]),
        ..Default::default()
    };
    let request = CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(Request {
                http: Some(http),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    mixer_grpc::framed(&request)
}

fn spec(concurrency: usize, rate: Option<f64>) -> Spec {
    Spec {
        concurrency,
        duration: Duration::from_millis(600),
        warmup: Duration::ZERO,
        rate,
    }
}

fn calls(addr: SocketAddr, requests: Vec<Bytes>, connections: usize) -> Calls {
    Calls {
        addr,
        path: mixer_frontends::grpc::EXT_AUTHZ_CHECK,
        requests: Arc::new(requests),
        classify: ext_authz_outcome,
        connections,
    }
}

#[test]
fn messages_larger_than_the_servers_windows_are_sent_as_they_open() {
    let (_rt, addr) = noop_server();
    // The server's windows are 1 MiB: three messages of 1.5 MiB in flight need its window
    // updates, and each goes out in frames of at most 16 KiB.
    let big = check_with_header_of(1_500_000);
    let report = run(spec(3, None), &calls(addr, vec![big], 1)).expect("runs");
    assert!(report.allowed >= 3, "{}", report.line("big"));
    assert_eq!(report.errors, 0, "{}", report.line("big"));
}

#[test]
fn more_callers_than_the_server_allows_streams_wait_for_free_ones() {
    let (_rt, addr) = noop_server();
    // The server allows 1024 concurrent streams on a connection; 1500 callers share one.
    let report = run(
        spec(1500, None),
        &calls(addr, vec![check_with_header_of(10)], 1),
    )
    .expect("runs");
    assert!(report.allowed > 1500, "{}", report.line("many"));
    assert_eq!(report.errors, 0, "{}", report.line("many"));
}

#[test]
fn an_open_loop_sends_at_its_rate_and_reports_its_own_lag() {
    let (_rt, addr) = noop_server();
    let report = run(
        spec(8, Some(1000.0)),
        &calls(addr, vec![check_with_header_of(10)], 2),
    )
    .expect("runs");
    // 600 ms at 1000/s: 600 calls due, each answered.
    assert_eq!(report.calls, 600, "{}", report.line("paced"));
    assert_eq!(report.errors, 0, "{}", report.line("paced"));
    // Calls that waited for a free caller have no lag of the loop's own; on a quiet machine
    // that is none of them, and even a busy test machine leaves most.
    assert!(
        report.lag.len() >= 300,
        "lags of {} calls",
        report.lag.len()
    );
}

#[test]
fn a_server_that_is_not_there_is_an_error_not_a_hang() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let err = run(
        spec(1, None),
        &calls(addr, vec![check_with_header_of(1)], 1),
    )
    .expect_err("nothing listens");
    assert!(err.to_string().contains("connecting"), "{err:#}");
}
