//! The server's limits against a real HTTP/2 client (the `h2` crate's) over loopback.

use std::sync::Mutex;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::limits::Refusal;

const ECHO: &str = "/test.Echo/Call";
const HEALTH: &str = "/grpc.health.v1.Health/Check";

#[derive(Default)]
struct Seen(Mutex<Vec<Event>>);

impl Events for Seen {
    fn event(&self, event: Event) {
        self.0.lock().expect("lock").push(event);
    }
}

impl Seen {
    fn count(&self, event: Event) -> usize {
        self.0
            .lock()
            .expect("lock")
            .iter()
            .filter(|e| **e == event)
            .count()
    }
}

/// A server with one direct method (it answers an empty message) and tonic's health service
/// behind it, with `limits`; its address and the events it reported.
async fn start(limits: Limits) -> (std::net::SocketAddr, Arc<Seen>) {
    let mut methods = Methods::new();
    methods.add(
        ECHO,
        Arc::new(|_message: Bytes| -> methods::Answer {
            Box::pin(async { Ok(framed(&prost_types::Duration::default())) })
        }),
    );
    let (_reporter, health) = tonic_health::server::health_reporter();
    let mut routes = tonic::service::RoutesBuilder::default();
    routes.add_service(health);
    let seen = Arc::new(Seen::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = Server::new(methods, routes.routes())
        .limits(limits)
        .events(seen.clone());
    tokio::spawn(server.serve(listener, std::future::pending()));
    (addr, seen)
}

async fn client(addr: std::net::SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (send, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    send
}

fn request(path: &str) -> http::request::Builder {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://mixer{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
}

/// An empty gRPC message, framed.
fn empty_message() -> Bytes {
    Bytes::from_static(&[0, 0, 0, 0, 0])
}

/// Sends `request` with `body` (none: the request stays open) and returns the HTTP status and
/// the gRPC status and message, from the headers (trailers-only) or the trailers.
async fn call(
    send: &mut h2::client::SendRequest<Bytes>,
    request: http::Request<()>,
    body: Option<Bytes>,
) -> (u16, String, String) {
    let mut send = send.clone().ready().await.expect("ready");
    let (response, mut stream) = send.send_request(request, false).expect("send the request");
    if let Some(body) = body {
        stream.send_data(body, true).expect("send the body");
    }
    let response = response.await.expect("an answer");
    let http_status = response.status().as_u16();
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
    (
        http_status,
        field("grpc-status"),
        percent_decoded(&field("grpc-message")),
    )
}

/// grpc-message as the protocol encodes it: UTF-8, percent-encoded.
fn percent_decoded(text: &str) -> String {
    let mut bytes = Vec::new();
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        match (b, tail.get(..2)) {
            (b'%', Some(hex)) => {
                let hex = std::str::from_utf8(hex).expect("ASCII");
                bytes.push(u8::from_str_radix(hex, 16).expect("hex"));
                rest = &tail[2..];
            }
            _ => {
                bytes.push(b);
                rest = tail;
            }
        }
    }
    String::from_utf8(bytes).expect("UTF-8")
}

fn limits() -> Limits {
    Limits {
        body_timeout: Duration::from_millis(300),
        ..Limits::default()
    }
}

#[tokio::test]
async fn a_header_list_over_the_limit_is_refused_on_its_stream_alone() {
    let (addr, seen) = start(limits()).await;
    let mut send = client(addr).await;
    // 100 KB in one header: past the codec's own limit in the version before this one, which
    // ended the whole connection with GOAWAY.
    let huge = "x".repeat(100 << 10);
    let (http_status, code, message) = call(
        &mut send,
        request(ECHO)
            .header("x-huge", huge.as_str())
            .body(())
            .expect("request"),
        Some(empty_message()),
    )
    .await;
    assert_eq!((http_status, code.as_str()), (200, "8"), "{message}");
    assert!(message.contains("header list"), "{message}");
    // The same connection goes on serving.
    let (_, code, message) = call(
        &mut send,
        request(ECHO).body(()).expect("request"),
        Some(empty_message()),
    )
    .await;
    assert_eq!(code, "0", "{message}");
    assert_eq!(
        seen.count(Event::StreamRefused(StreamRefusal::HeaderListTooLarge)),
        1
    );
}

#[tokio::test]
async fn a_content_type_other_than_grpc_gets_415() {
    let (addr, _) = start(limits()).await;
    let mut send = client(addr).await;
    for path in [ECHO, HEALTH] {
        let (http_status, code, message) = call(
            &mut send,
            http::Request::builder()
                .method("POST")
                .uri(format!("http://mixer{path}"))
                .header("content-type", "application/json")
                .body(())
                .expect("request"),
            Some(empty_message()),
        )
        .await;
        assert_eq!(
            (http_status, code.as_str()),
            (415, "13"),
            "{path}: {message}"
        );
        assert!(message.contains("application/json"), "{message}");
    }
    for content_type in ["application/grpc+proto", "application/grpc;charset=utf-8"] {
        let (http_status, code, _) = call(
            &mut send,
            request(ECHO)
                .header("content-type", content_type)
                .body(())
                .expect("request"),
            Some(empty_message()),
        )
        .await;
        assert_eq!((http_status, code.as_str()), (200, "0"), "{content_type}");
    }
    assert!(!is_grpc(b"application/grpcfoo"));
    assert!(is_grpc(b"Application/GRPC"));
}

#[tokio::test]
async fn a_body_that_never_arrives_ends_at_the_body_timeout() {
    let (addr, seen) = start(limits()).await;
    let mut send = client(addr).await;
    for path in [ECHO, HEALTH] {
        let started = Instant::now();
        let (_, code, message) =
            call(&mut send, request(path).body(()).expect("request"), None).await;
        assert_eq!(code, "4", "{path}: {message}");
        assert!(message.contains("did not arrive within 300ms"), "{message}");
        assert!(started.elapsed() >= Duration::from_millis(300));
    }
    let timed_out = Event::StreamRefused(StreamRefusal::BodyTimeout);
    assert_eq!(seen.count(timed_out), 2);
    // A body in time is answered as usual.
    let (_, code, _) = call(
        &mut send,
        request(HEALTH).body(()).expect("request"),
        Some(empty_message()),
    )
    .await;
    assert_eq!(code, "0");
}

#[tokio::test]
async fn a_message_announced_too_large_is_resource_exhausted() {
    let (addr, _) = start(limits()).await;
    let send = client(addr).await;
    // The frame announces 5 MiB and only its first bytes follow: refused without waiting
    // for the rest, directly and by tonic behind the direct methods alike.
    let mut body = vec![0u8];
    body.extend_from_slice(&(5u32 << 20).to_be_bytes());
    body.extend_from_slice(&[0; 100]);
    let body = Bytes::from(body);
    for (path, says) in [
        (ECHO, "larger than max (5242880 vs. 4194304)"),
        (HEALTH, "found 5242880 bytes"),
    ] {
        let mut stream = send.clone().ready().await.expect("ready");
        let (response, mut body_stream) = stream
            .send_request(request(path).body(()).expect("request"), false)
            .expect("send");
        body_stream
            .send_data(body.clone(), false)
            .expect("send data");
        let response = response.await.expect("an answer");
        let field = |name| {
            response
                .headers()
                .get(name)
                .map(|v| percent_decoded(v.to_str().expect("ASCII")))
                .unwrap_or_default()
        };
        let message = field("grpc-message");
        assert_eq!(field("grpc-status"), "8", "{path}: {message}");
        assert!(message.contains(says), "{path}: {message}");
    }
}

#[tokio::test]
async fn an_unknown_method_is_named() {
    let (addr, _) = start(limits()).await;
    let mut send = client(addr).await;
    for path in ["/grpc.health.v1.Health/Nope", "/no.Such/Service"] {
        let (_, code, message) = call(
            &mut send,
            request(path).body(()).expect("request"),
            Some(empty_message()),
        )
        .await;
        assert_eq!(code, "12", "{path}");
        assert_eq!(message, format!("unknown method {path}"));
    }
}

#[tokio::test]
async fn an_idle_connection_is_closed_and_a_busy_one_kept() {
    let idle_timeout = Duration::from_millis(300);
    let (addr, seen) = start(Limits {
        idle_timeout,
        body_timeout: Duration::from_secs(2),
        ..Limits::default()
    })
    .await;
    // Busy: one request waiting for its body past the idle timeout keeps the connection.
    let busy = client(addr).await;
    let (response, mut body) = busy
        .clone()
        .ready()
        .await
        .expect("ready")
        .send_request(request(ECHO).body(()).expect("request"), false)
        .expect("send");
    let mut idle = client(addr).await;
    let (_, code, _) = call(
        &mut idle,
        request(ECHO).body(()).expect("request"),
        Some(empty_message()),
    )
    .await;
    assert_eq!(code, "0");
    tokio::time::sleep(idle_timeout * 3).await;
    assert!(
        idle.clone().ready().await.is_err(),
        "the idle connection was closed"
    );
    body.send_data(empty_message(), true).expect("still open");
    let response = response.await.expect("answered");
    assert_eq!(response.status(), 200);
    assert_eq!(seen.count(Event::TimedOut(Timeout::Idle)), 1);
}

#[tokio::test]
async fn a_connection_without_a_preface_ends_at_the_handshake_timeout() {
    let (addr, seen) = start(Limits {
        handshake_timeout: Duration::from_millis(200),
        ..Limits::default()
    })
    .await;
    let mut silent = TcpStream::connect(addr).await.expect("connect");
    let mut half = TcpStream::connect(addr).await.expect("connect");
    half.write_all(b"PRI * HTTP/2.0\r\n").await.expect("write");
    for tcp in [&mut silent, &mut half] {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut rest));
        // The server's SETTINGS may come first; then the connection ends.
        assert!(read.await.is_ok(), "closed after the handshake timeout");
    }
    assert_eq!(seen.count(Event::TimedOut(Timeout::Handshake)), 2);
    assert_eq!(seen.count(Event::Refused(Refusal::ConnectionLimit)), 0);
}

#[tokio::test]
async fn a_tls_client_that_never_says_hello_ends_at_the_handshake_timeout() {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .expect("config");
    config.alpn_protocols = vec![b"h2".to_vec()];
    let seen = Arc::new(Seen::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = Server::new(
        Methods::new(),
        tonic::service::RoutesBuilder::default().routes(),
    )
    .tls(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    .limits(Limits {
        handshake_timeout: Duration::from_millis(200),
        ..Limits::default()
    })
    .events(seen.clone());
    tokio::spawn(server.serve(listener, std::future::pending()));

    let mut silent = TcpStream::connect(addr).await.expect("connect");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut rest));
    assert!(read.await.is_ok(), "closed after the handshake timeout");
    assert!(
        rest.is_empty(),
        "nothing was said to a client that said nothing"
    );
    assert_eq!(seen.count(Event::TimedOut(Timeout::Handshake)), 1);

    // Plaintext HTTP/2 on the TLS port: the handshake fails at once, and is counted apart
    // from the timeout.
    let mut plaintext = TcpStream::connect(addr).await.expect("connect");
    plaintext
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .expect("write");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), plaintext.read_to_end(&mut rest));
    assert!(read.await.is_ok(), "closed");
    // Counted once the handshake's error is back, a moment after the socket closed.
    for _ in 0..200 {
        if seen.count(Event::Refused(Refusal::TlsHandshake)) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen.count(Event::Refused(Refusal::TlsHandshake)), 1);
    assert_eq!(seen.count(Event::TimedOut(Timeout::Handshake)), 1);
}

/// Turns its flag on when dropped: a method's future that records being cancelled.
struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_call_past_its_grpc_timeout_is_deadline_exceeded_and_its_method_cancelled() {
    const SLOW: &str = "/test.Slow/Call";
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = dropped.clone();
    let mut methods = Methods::new();
    methods.add(
        SLOW,
        Arc::new(move |_message: Bytes| -> methods::Answer {
            let guard = DropFlag(flag.clone());
            Box::pin(async move {
                let _guard = guard;
                // Slower than any deadline here: an answer only a cancelled call never gives.
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(framed(&prost_types::Duration::default()))
            })
        }),
    );
    let (_reporter, health) = tonic_health::server::health_reporter();
    let mut routes = tonic::service::RoutesBuilder::default();
    routes.add_service(health);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Seen::default());
    let server = Server::new(methods, routes.routes()).events(seen.clone());
    tokio::spawn(server.serve(listener, std::future::pending()));
    let mut send = client(addr).await;

    let started = std::time::Instant::now();
    let (http_status, code, message) = call(
        &mut send,
        request(SLOW)
            .header("grpc-timeout", "20m")
            .body(())
            .expect("request"),
        Some(empty_message()),
    )
    .await;
    let took = started.elapsed();
    assert_eq!((http_status, code.as_str()), (200, "4"), "{message}");
    assert!(message.contains("grpc-timeout 20ms"), "{message}");
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    assert!(
        dropped.load(std::sync::atomic::Ordering::SeqCst),
        "the method's future was dropped"
    );

    // A stream the fallback answers (health's Watch never ends by itself): its first message
    // goes out, then the deadline ends it with DEADLINE_EXCEEDED in the trailers.
    let (_, code, message) = call(
        &mut send,
        request("/grpc.health.v1.Health/Watch")
            .header("grpc-timeout", "20m")
            .body(())
            .expect("request"),
        Some(empty_message()),
    )
    .await;
    assert_eq!(code, "4", "{message}");

    // Within its deadline a call is answered as ever.
    let (_, code, message) = call(
        &mut send,
        request(HEALTH)
            .header("grpc-timeout", "5S")
            .body(())
            .expect("request"),
        Some(empty_message()),
    )
    .await;
    assert_eq!(code, "0", "{message}");
    assert_eq!(seen.count(Event::DeadlineExceeded), 2);
}

#[tokio::test]
async fn a_malformed_grpc_timeout_is_refused_on_both_paths() {
    let (addr, _) = start(limits()).await;
    let mut send = client(addr).await;
    for path in [ECHO, HEALTH] {
        let (http_status, code, message) = call(
            &mut send,
            request(path)
                .header("grpc-timeout", "20 ms")
                .body(())
                .expect("request"),
            Some(empty_message()),
        )
        .await;
        assert_eq!(
            (http_status, code.as_str()),
            (200, "13"),
            "{path}: {message}"
        );
        assert!(message.contains("malformed grpc-timeout"), "{message}");
    }
}

#[tokio::test]
async fn streams_past_the_request_budget_are_resource_exhausted_across_connections() {
    use crate::limits::STREAM_OVERHEAD_BYTES;
    // Room for 6 bodiless streams, not 7; or 6 with 1 KB of body.
    let (addr, seen) = start(Limits {
        max_request_bytes_in_flight: 6 * STREAM_OVERHEAD_BYTES + 1024,
        body_timeout: Duration::from_secs(10),
        ..Limits::default()
    })
    .await;
    // Three bodiless streams on each of two connections fill the budget; the streams stay
    // open (their bodies never come) and hold their share.
    let mut held = Vec::new();
    for _ in 0..2 {
        let send = client(addr).await;
        for path in [ECHO, HEALTH, ECHO] {
            let mut ready = send.clone().ready().await.expect("ready");
            let (response, body) = ready
                .send_request(request(path).body(()).expect("request"), false)
                .expect("send");
            held.push((response, body));
        }
    }
    // The server sees the streams in order; a call on a third connection waits behind them.
    let mut third = client(addr).await;
    let budget = Event::StreamRefused(StreamRefusal::RequestBudget);
    let deadline = Instant::now() + Duration::from_secs(5);
    let (http_status, code, message) = loop {
        let answer = call(
            &mut third,
            request(ECHO).body(()).expect("request"),
            Some(empty_message()),
        )
        .await;
        if answer.1 == "8" || Instant::now() > deadline {
            break answer;
        }
        // Answered before the six were all seen: they are still being accepted.
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((http_status, code.as_str()), (200, "8"), "{message}");
    assert!(
        message.contains("most request bytes in flight") && message.contains("of 25600"),
        "{message}"
    );
    assert!(seen.count(budget) >= 1);
    // One held stream ends (its body arrives and it is answered): its room is given back.
    let (response, mut body) = held.pop().expect("a held stream");
    body.send_data(empty_message(), true)
        .expect("send the body");
    let response = response.await.expect("an answer");
    assert_eq!(response.status(), 200);
    drop(response);
    let deadline = Instant::now() + Duration::from_secs(5);
    let code = loop {
        let (_, code, _) = call(
            &mut third,
            request(ECHO).body(()).expect("request"),
            Some(empty_message()),
        )
        .await;
        if code == "0" || Instant::now() > deadline {
            break code;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(code, "0", "a stream fits again");
    // A body that would take the total past the budget is refused too: 5 streams held and
    // this one's overhead leave no room for 8 KB.
    let mut body = vec![0u8];
    body.extend_from_slice(&(8u32 << 10).to_be_bytes());
    body.extend_from_slice(&[0; 8 << 10]);
    let (_, code, message) = call(
        &mut third,
        request(ECHO).body(()).expect("request"),
        Some(Bytes::from(body)),
    )
    .await;
    assert_eq!(code, "8", "{message}");
    assert!(
        message.contains("most request bytes in flight"),
        "{message}"
    );
    drop(held);
}

/// A connection's byte stream that counts the writes that carried bytes.
struct CountedWrites {
    inner: tokio::io::DuplexStream,
    writes: Arc<AtomicUsize>,
}

impl AsyncRead for CountedWrites {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedWrites {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let written = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(written, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        written
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &**b);
        self.poll_write(cx, first)
    }

    /// As a TCP stream does.
    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Calls whose requests arrived together are answered together: the connection runs every
/// call that can finish before it writes, so their answers share a write instead of taking
/// one each (a `writev` per answer cost the kernel as much again as the calls themselves),
/// answers of a few hundred bytes included, on a stream that writes vectors as TCP does.
#[tokio::test]
async fn answers_to_calls_that_arrived_together_share_a_write() {
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let writes = Arc::new(AtomicUsize::new(0));
    let server_io = Unvectored(Box::new(CountedWrites {
        inner: server_io,
        writes: writes.clone(),
    }));
    let mut methods = Methods::new();
    methods.add(
        ECHO,
        Arc::new(|_message: Bytes| -> methods::Answer {
            // 600 bytes: past h2's 256-byte threshold for chaining a payload on such a stream.
            let answer = prost_types::Any {
                type_url: "x".repeat(600),
                value: Vec::new(),
            };
            Box::pin(async move { Ok(framed(&answer)) })
        }),
    );
    let (_reporter, health) = tonic_health::server::health_reporter();
    let mut routes = tonic::service::RoutesBuilder::default();
    routes.add_service(health);
    let shared = Arc::new(Shared {
        budget: RequestBudget::new(limits().max_request_bytes_in_flight),
        limits: limits(),
        events: Arc::new(NoEvents),
        streaming: HashSet::new(),
    });
    let (_stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        let h2 = h2_builder(&shared.limits)
            .handshake::<_, Bytes>(server_io)
            .await
            .expect("handshake");
        connection(h2, methods, routes.routes(), stopped, shared).await;
    });
    let (send, client_connection) = h2::client::handshake(client_io).await.expect("handshake");
    tokio::spawn(client_connection);
    let mut send = send.ready().await.expect("ready");
    // One call first, so that the settings and their acknowledgements are written.
    let (_, status, _) = call(
        &mut send,
        request(ECHO).body(()).expect("request"),
        Some(empty_message()),
    )
    .await;
    assert_eq!(status, "0");
    let before = writes.load(Ordering::Relaxed);
    // This test runs on one thread: the requests are all queued before either connection
    // task runs, so the client sends them together.
    const CALLS: usize = 16;
    let mut answers = Vec::new();
    for _ in 0..CALLS {
        let (answer, mut stream) = send
            .send_request(request(ECHO).body(()).expect("request"), false)
            .expect("send the request");
        stream
            .send_data(empty_message(), true)
            .expect("send the body");
        answers.push(answer);
    }
    for answer in answers {
        let mut body = answer.await.expect("an answer").into_body();
        while let Some(data) = body.data().await {
            data.expect("data");
        }
        let trailers = body.trailers().await.expect("trailers").expect("trailers");
        assert_eq!(
            trailers.get("grpc-status").map(|v| v.as_bytes()),
            Some(&b"0"[..])
        );
    }
    let answer_writes = writes.load(Ordering::Relaxed) - before;
    assert!(
        answer_writes <= 2,
        "{CALLS} answers took {answer_writes} writes"
    );
}
