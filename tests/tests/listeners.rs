//! The listeners' limits on the real binary: idle, header-read and handshake timeouts close
//! connections; connections past a listener's cap (or past what the open-file limit allows)
//! are refused while the admin listener still answers probes; a gRPC stream whose body never
//! comes is answered and freed at the body timeout; a header list over the limit is refused
//! on its own stream while the other streams of its HTTP/2 connection are answered. Clients:
//! plain sockets for HTTP/1 and the `h2` crate for HTTP/2.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mixer_tests::{Mixer, http_request};
use prost::Message;

#[path = "support/authz.rs"]
mod authz;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

const CHECK: &str = "/envoy.service.auth.v3.Authorization/Check";

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

fn grpc_request(path: &str) -> http::request::Builder {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://mixer{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
}

/// Sends `request` with `body` (`None` leaves the request open) and returns the HTTP status
/// and the gRPC status (from the headers of a trailers-only answer, or the trailers).
async fn exchange(
    send: &h2::client::SendRequest<Bytes>,
    request: http::Request<()>,
    body: Option<Bytes>,
) -> Result<(u16, Option<String>), h2::Error> {
    let mut send = send.clone().ready().await?;
    let (response, mut stream) = send.send_request(request, false)?;
    if let Some(body) = body {
        // A server may answer on the headers alone (415, 431) and end the stream before the
        // body goes out; sending then fails with InactiveStreamId, and the answer is still
        // there to read. A real failure of the connection shows in the answer.
        let _sent = stream.send_data(body, true);
    }
    let response = response.await?;
    let status = response.status().as_u16();
    let mut grpc_status = response
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap_or_default().to_string());
    let mut body = response.into_body();
    while let Some(data) = body.data().await {
        data?;
    }
    if let Some(trailers) = body.trailers().await? {
        grpc_status = trailers
            .get("grpc-status")
            .map(|v| v.to_str().unwrap_or_default().to_string())
            .or(grpc_status);
    }
    Ok((status, grpc_status))
}

/// Whether the server closes `tcp` within `limit` (EOF or reset).
fn closed_within(tcp: &mut TcpStream, limit: Duration) -> bool {
    tcp.set_read_timeout(Some(limit)).expect("timeout");
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    while start.elapsed() < limit {
        match tcp.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(e) => panic!("read: {e}"),
        }
    }
    false
}

/// A keep-alive HTTP/1.1 request on `tcp`, its answer read whole (by Content-Length).
fn keep_alive_check(tcp: &mut TcpStream) -> u16 {
    tcp.write_all(b"GET /check HTTP/1.1\r\nHost: mixer\r\nx-user: bob\r\n\r\n")
        .expect("write");
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut raw = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = tcp.read(&mut buf).expect("read");
        assert!(n > 0, "closed before the answer");
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().expect("length"))
                })
                .unwrap_or(0);
            if body.len() >= length {
                return head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .expect("status");
            }
        }
    }
}

/// gRPC `grpc.health.v1.Health/Check` on `addr` over HTTP/2: the serving status.
async fn grpc_health(addr: SocketAddr) -> Result<Bytes, String> {
    let send = h2_client(addr).await;
    let mut ready = send.ready().await.map_err(|e| e.to_string())?;
    let (response, mut stream) = ready
        .send_request(
            grpc_request("/grpc.health.v1.Health/Check")
                .body(())
                .expect("request"),
            false,
        )
        .map_err(|e| e.to_string())?;
    stream
        .send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .map_err(|e| e.to_string())?;
    let response = response.await.map_err(|e| e.to_string())?;
    let mut body = response.into_body();
    let mut message = Vec::new();
    while let Some(data) = body.data().await {
        message.extend_from_slice(&data.map_err(|e| e.to_string())?);
    }
    Ok(Bytes::from(message))
}

/// HealthCheckResponse{status: SERVING}, framed.
const SERVING: &[u8] = &[0, 0, 0, 0, 2, 0x08, 0x01];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_silent_connections_are_closed_after_their_timeouts() {
    let mixer = Mixer::start(
        binary(),
        &[
            "--http-idle-timeout",
            "1s",
            "--grpc-idle-timeout",
            "1s",
            "--header-read-timeout",
            "1s",
            "--handshake-timeout",
            "1s",
        ],
    );
    mixer.wait_ready(Duration::from_secs(10));

    // HTTP/1.1, kept alive after an answer: closed at the idle timeout.
    let mut idle = TcpStream::connect(mixer.http).expect("connect");
    assert_eq!(keep_alive_check(&mut idle), 200);
    // Connected, nothing sent: closed at the header-read timeout.
    let mut silent = TcpStream::connect(mixer.http).expect("connect");
    // Half a request line: the same.
    let mut slow = TcpStream::connect(mixer.http).expect("connect");
    slow.write_all(b"GET /check HT").expect("write");
    // gRPC: a connection that never sends its preface, and one idle after a call.
    let mut no_preface = TcpStream::connect(mixer.grpc).expect("connect");
    let grpc = h2_client(mixer.grpc).await;
    let answered = exchange(
        &grpc,
        grpc_request(CHECK).body(()).expect("request"),
        Some(check_body()),
    )
    .await
    .expect("answered");
    assert_eq!(answered, (200, Some("0".into())));

    let started = Instant::now();
    for (name, tcp) in [
        ("idle HTTP/1.1", &mut idle),
        ("silent", &mut silent),
        ("slow", &mut slow),
        ("no preface", &mut no_preface),
    ] {
        assert!(
            closed_within(tcp, Duration::from_secs(5)),
            "{name} was not closed"
        );
    }
    assert!(started.elapsed() >= Duration::from_millis(900));
    // The gRPC connection got GOAWAY and ended.
    let deadline = Instant::now() + Duration::from_secs(5);
    while grpc.clone().ready().await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "the idle gRPC connection was kept"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let metric = |series: &str| mixer.metric(series).unwrap_or_default();
    assert_eq!(
        metric(r#"mixer_connections_timed_out_total{listener="http",timeout="idle"}"#),
        1.0
    );
    assert_eq!(
        metric(r#"mixer_connections_timed_out_total{listener="http",timeout="header_read"}"#),
        2.0
    );
    assert_eq!(
        metric(r#"mixer_connections_timed_out_total{listener="grpc",timeout="handshake"}"#),
        1.0
    );
    assert_eq!(
        metric(r#"mixer_connections_timed_out_total{listener="grpc",timeout="idle"}"#),
        1.0
    );
    assert_eq!(metric(r#"mixer_connections_open{listener="grpc"}"#), 0.0);
    assert!(mixer.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_refused_while_admin_answers() {
    let mixer = Mixer::start(
        binary(),
        &["--grpc-max-connections", "5", "--http-max-connections", "5"],
    );
    mixer.wait_ready(Duration::from_secs(10));
    let mut held = Vec::new();
    for addr in [mixer.grpc, mixer.http] {
        for _ in 0..5 {
            held.push(TcpStream::connect(addr).expect("connect"));
        }
    }
    // Let the server take them all before the next ones.
    let deadline = Instant::now() + Duration::from_secs(5);
    while mixer.metric(r#"mixer_connections_open{listener="http"}"#) != Some(5.0)
        || mixer.metric(r#"mixer_connections_open{listener="grpc"}"#) != Some(5.0)
    {
        assert!(Instant::now() < deadline, "connections not taken");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (name, addr) in [("grpc", mixer.grpc), ("http", mixer.http)] {
        let mut over = TcpStream::connect(addr).expect("the kernel accepts");
        assert!(
            closed_within(&mut over, Duration::from_secs(2)),
            "{name}: the connection past the cap was served"
        );
        let refused = format!(
            r#"mixer_connections_refused_total{{listener="{name}",reason="connection_limit"}}"#
        );
        // The refusal is counted after the reset is sent: give the count a moment.
        let deadline = Instant::now() + Duration::from_secs(2);
        while mixer.metric(&refused) != Some(1.0) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(mixer.metric(&refused), Some(1.0), "{name}");
    }
    // The admin listener has its own share: readiness, and gRPC health over HTTP/2.
    let (status, _, _) = http_request(mixer.admin, "GET", "/readyz", &[]).expect("readyz");
    assert_eq!(status, 200);
    assert_eq!(grpc_health(mixer.admin).await.as_deref(), Ok(SERVING));
    // A place freed is taken again.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut again = TcpStream::connect(mixer.http).expect("connect");
    assert_eq!(keep_alive_check(&mut again), 200);
    assert!(mixer.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_open_file_limit_probes_are_still_answered() {
    // 700 descriptors: the default caps do not fit, so the gRPC and forward-auth listeners
    // share 700 - 256 kept - 100 for admin. Without that, a flood of connections to one
    // port took the last descriptor and every port failed, probes included.
    let mixer = Mixer::start_with_fd_limit(binary(), 700, &[]);
    mixer.wait_ready(Duration::from_secs(10));
    let mut flood = Vec::new();
    for addr in [mixer.grpc, mixer.http] {
        for _ in 0..400 {
            if let Ok(tcp) = TcpStream::connect(addr) {
                flood.push(tcp);
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, _, _) = http_request(mixer.admin, "GET", "/readyz", &[]).expect("readyz");
    assert_eq!(status, 200);
    assert_eq!(grpc_health(mixer.admin).await.as_deref(), Ok(SERVING));
    let open = |l: &str| {
        mixer
            .metric(&format!(r#"mixer_connections_open{{listener="{l}"}}"#))
            .expect("open")
    };
    assert_eq!(open("grpc") + open("http"), (700 - 256 - 100) as f64);
    let refused = mixer
        .metric(r#"mixer_connections_refused_total{listener="grpc",reason="connection_limit"}"#)
        .expect("refused");
    assert!(refused >= 200.0, "{refused}");
    drop(flood);
    assert!(mixer.terminate().success());
}

/// Resident memory of `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_whose_body_never_comes_are_answered_and_freed() {
    let mixer = Mixer::start(binary(), &["--body-read-timeout", "2s"]);
    mixer.wait_ready(Duration::from_secs(10));
    const CONNECTIONS: usize = 20;
    const STREAMS: usize = 500;
    let mut connections = Vec::new();
    for _ in 0..CONNECTIONS {
        connections.push(h2_client(mixer.grpc).await);
    }
    let before = rss(mixer.pid());
    let mut held = Vec::new();
    // Twice over the same connections: what the first round's streams held is reused by the
    // second's rather than added to it (the allocator keeps freed pages, so resident memory
    // does not drop back by itself).
    for round in 1..=2 {
        let mut pending = Vec::new();
        for send in &connections {
            for _ in 0..STREAMS {
                let mut ready = send.clone().ready().await.expect("ready");
                // Headers only: the body is never sent.
                let (response, body) = ready
                    .send_request(grpc_request(CHECK).body(()).expect("request"), false)
                    .expect("send");
                pending.push((response, body));
            }
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
        held.push(rss(mixer.pid()));
        let started = Instant::now();
        for (response, mut body) in pending {
            let response = response.await.expect("answered");
            let status = response.headers().get("grpc-status").cloned();
            assert_eq!(status.as_ref().map(|s| s.as_bytes()), Some(&b"4"[..]));
            // The server let go of the stream: reset, since the client never ended it.
            let reset = std::future::poll_fn(|cx| body.poll_reset(cx)).await;
            assert!(reset.is_ok(), "{reset:?}");
        }
        assert!(started.elapsed() < Duration::from_secs(10));
        let timed_out = mixer
            .metric(r#"mixer_streams_refused_total{listener="grpc",reason="body_timeout"}"#)
            .expect("counted");
        assert_eq!(timed_out, (round * CONNECTIONS * STREAMS) as f64);
    }
    eprintln!("RSS: {before} before, {held:?} while held");
    let first = held[0] - before;
    assert!(first > 4 << 20, "the streams held {first} bytes");
    assert!(
        held[1] < held[0] + first / 4,
        "the second round added to the first: {held:?}, {before} before"
    );
    assert!(mixer.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_header_list_is_refused_on_its_stream_alone() {
    let mixer = Mixer::start(binary(), &[]);
    mixer.wait_ready(Duration::from_secs(10));
    let huge = "x".repeat(100 << 10);

    // gRPC: RESOURCE_EXHAUSTED for that stream; a check on the same connection answered.
    let grpc = h2_client(mixer.grpc).await;
    let refused = exchange(
        &grpc,
        grpc_request(CHECK)
            .header("x-huge", huge.as_str())
            .body(())
            .expect("request"),
        Some(check_body()),
    )
    .await
    .expect("the stream is answered, the connection kept");
    assert_eq!(refused, (200, Some("8".into())));
    let answered = exchange(
        &grpc,
        grpc_request(CHECK).body(()).expect("request"),
        Some(check_body()),
    )
    .await
    .expect("answered");
    assert_eq!(answered, (200, Some("0".into())));

    // Forward-auth over HTTP/2 (prior knowledge): 431 for that stream; a check beside it.
    let http = h2_client(mixer.http).await;
    let get = |huge: Option<&str>| {
        let mut request = http::Request::builder()
            .method("GET")
            .uri("http://mixer/check")
            .header("x-user", "bob");
        if let Some(huge) = huge {
            request = request.header("x-huge", huge);
        }
        request.body(()).expect("request")
    };
    let refused = exchange(&http, get(Some(&huge)), Some(Bytes::new()))
        .await
        .expect("answered");
    assert_eq!(refused.0, 431);
    let answered = exchange(&http, get(None), Some(Bytes::new()))
        .await
        .expect("answered");
    assert_eq!(answered.0, 200);

    // HTTP/1: 431 too.
    for size in [62 << 10, 100 << 10] {
        let huge = "x".repeat(size);
        let (status, _, _) =
            http_request(mixer.http, "GET", "/check", &[("x-huge", &huge)]).expect("answered");
        assert_eq!(status, 431, "{size}");
    }

    for (listener, refused) in [("grpc", 1.0), ("http", 3.0)] {
        let series = format!(
            r#"mixer_streams_refused_total{{listener="{listener}",reason="header_list_too_large"}}"#
        );
        assert_eq!(mixer.metric(&series), Some(refused), "{listener}");
    }
    assert!(mixer.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_path_with_another_content_type_gets_415() {
    let mixer = Mixer::start(binary(), &[]);
    mixer.wait_ready(Duration::from_secs(10));
    let grpc = h2_client(mixer.grpc).await;
    for path in [CHECK, "/grpc.health.v1.Health/Check"] {
        let request = http::Request::builder()
            .method("POST")
            .uri(format!("http://mixer{path}"))
            .header("content-type", "text/plain")
            .body(())
            .expect("request");
        let answer = exchange(&grpc, request, Some(check_body()))
            .await
            .expect("answered");
        // grpc-go answers the same: 415, and INTERNAL for a gRPC client.
        assert_eq!(answer, (415, Some("13".into())), "{path}");
    }
    assert!(mixer.terminate().success());
}
