//! The HTTP listeners (forward-auth and admin): an axum router served over hyper, HTTP/1.1
//! or HTTP/2, in plaintext or (forward-auth with `--tls-cert`) over TLS, within the
//! listener's limits.
//!
//! `axum::serve` has no connection cap, no idle or header-read timeout and no say over
//! hyper's HTTP/2 settings, so the listeners serve their connections here. hyper's own
//! header-read timeout is off: it also runs while a keep-alive connection waits for its next
//! request, which would close nginx's pooled upstream connections (kept 60 s by default)
//! after a few seconds. Each connection keeps its own clock instead (see [`Phase`]).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use mixer_grpc::limits::{
    self, Event, Events, Gate, Permit, Refusal, StreamRefusal, Timeout, codec_header_list_ceiling,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tower_service::Service;

/// The limits of one HTTP listener.
#[derive(Clone, Debug)]
pub struct HttpLimits {
    /// Connections open at once; past it a new one is reset.
    pub max_connections: usize,
    /// Time for an HTTP/2 connection's preface.
    pub handshake_timeout: Duration,
    /// Time for an HTTP/1 request's headers: from the connection's opening for its first
    /// request, from the first byte for the next ones.
    pub header_read_timeout: Duration,
    /// Time a connection may wait with no request in flight.
    pub idle_timeout: Duration,
    /// Streams an HTTP/2 connection may have open at once.
    pub max_concurrent_streams: u32,
    /// Largest request header list (as HTTP/2 counts it); larger ones get 431.
    pub max_header_list_bytes: usize,
}

/// Serves `app` on `listener` in plaintext until `shutdown`; then every connection finishes
/// the request it has (HTTP/1) or gets GOAWAY (HTTP/2), and this returns once all have
/// closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    events: Arc<dyn Events>,
    shutdown: impl Future<Output = ()>,
) {
    serve_with_tls(listener, app, limits, events, None, shutdown).await
}

/// [`serve`], over TLS when `tls` is given (its config offering ALPN `h2` and `http/1.1`).
/// The handshake timeout covers the TLS handshake; each request carries what it verified
/// about the client as a [`TlsPeer`](mixer_frontends::forward_auth::TlsPeer) extension.
pub async fn serve_with_tls(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    events: Arc<dyn Events>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) {
    let gate = Gate::new(limits.max_connections, events.clone());
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .header_read_timeout(None)
        // hyper answers 431 itself when a header block outgrows its buffer.
        .max_buf_size((limits.max_header_list_bytes + (8 << 10)).max(8 << 10));
    builder
        .http2()
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_header_list_size(codec_header_list_ceiling(limits.max_header_list_bytes));
    let shared = Arc::new(Shared {
        builder,
        limits,
        events,
    });
    let (stop, stopped) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            (tcp, peer, permit) = gate.accept(&listener) => {
                let _ = tcp.set_nodelay(true);
                let (app, shared, stopped) = (app.clone(), shared.clone(), stopped.clone());
                match tls.clone() {
                    None => {
                        connections.spawn(connection(tcp, peer, None, permit, app, shared, stopped));
                    }
                    Some(acceptor) => {
                        connections.spawn(async move {
                            let handshake = shared.limits.handshake_timeout;
                            let io = match tokio::time::timeout(handshake, acceptor.accept(tcp)).await {
                                Ok(Ok(io)) => io,
                                // Refused (no client certificate under mutual TLS, an unknown
                                // CA, no common protocol): this connection alone ends.
                                Ok(Err(_)) => {
                                    shared.events.event(Event::Refused(Refusal::TlsHandshake));
                                    return;
                                }
                                Err(_) => {
                                    shared.events.event(Event::TimedOut(Timeout::Handshake));
                                    return;
                                }
                            };
                            let verified = crate::tls::peer(io.get_ref().1);
                            connection(io, peer, Some(verified), permit, app, shared, stopped).await
                        });
                    }
                }
            }
        }
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = stop.send(true);
    while connections.join_next().await.is_some() {}
}

struct Shared {
    builder: auto::Builder<TokioExecutor>,
    limits: HttpLimits,
    events: Arc<dyn Events>,
}

/// Where a connection is, for its timeouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Accepted; its first request (HTTP/1) or its preface (HTTP/2) has not all arrived.
    Opening,
    /// No request in flight, none arriving.
    Waiting,
    /// The first bytes of the next HTTP/1 request have arrived, not yet its headers.
    Reading,
    /// Requests in flight.
    Busy,
}

/// What a connection's byte stream has shown of its protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Unknown,
    Http1,
    /// Some of HTTP/2's preface, `seen` bytes of it.
    Preface(usize),
    Http2,
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

struct Clock {
    state: Mutex<State>,
    changed: Notify,
}

struct State {
    phase: Phase,
    since: Instant,
    in_flight: usize,
    protocol: Protocol,
}

impl Clock {
    fn new() -> Arc<Clock> {
        Arc::new(Clock {
            state: Mutex::new(State {
                phase: Phase::Opening,
                since: Instant::now(),
                in_flight: 0,
                protocol: Protocol::Unknown,
            }),
            changed: Notify::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When the current phase runs out, and which timeout that is.
    fn deadline(&self, limits: &HttpLimits) -> Option<(Instant, Timeout)> {
        let state = self.state();
        let (after, timeout) = match (state.phase, state.protocol) {
            (Phase::Busy, _) => return None,
            (Phase::Opening, Protocol::Preface(_) | Protocol::Http2) => {
                (limits.handshake_timeout, Timeout::Handshake)
            }
            (Phase::Opening | Phase::Reading, _) => {
                (limits.header_read_timeout, Timeout::HeaderRead)
            }
            (Phase::Waiting, _) => (limits.idle_timeout, Timeout::Idle),
        };
        Some((state.since + after, timeout))
    }

    /// Bytes arrived.
    fn read(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut state = self.state();
        if let Protocol::Unknown | Protocol::Preface(_) = state.protocol {
            let seen = match state.protocol {
                Protocol::Preface(seen) => seen,
                _ => 0,
            };
            let expected = &PREFACE[seen..];
            let n = bytes.len().min(expected.len());
            state.protocol = if bytes[..n] != expected[..n] {
                Protocol::Http1
            } else if seen + n == PREFACE.len() {
                // The preface is all there: the connection waits for its first stream.
                state.phase = Phase::Waiting;
                state.since = Instant::now();
                Protocol::Http2
            } else {
                Protocol::Preface(seen + n)
            };
        }
        if state.protocol == Protocol::Http1 && state.phase == Phase::Waiting {
            state.phase = Phase::Reading;
            state.since = Instant::now();
            drop(state);
            // The header-read deadline is sooner than the idle one being waited for.
            self.changed.notify_one();
        }
    }

    fn request_started(self: &Arc<Clock>) -> InFlight {
        let mut state = self.state();
        state.in_flight += 1;
        state.phase = Phase::Busy;
        InFlight(self.clone())
    }
}

/// One request in flight on a connection.
struct InFlight(Arc<Clock>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.in_flight -= 1;
        if state.in_flight == 0 {
            state.phase = Phase::Waiting;
            state.since = Instant::now();
            drop(state);
            self.0.changed.notify_one();
        }
    }
}

/// A connection's byte stream (the socket, or TLS over it), telling its clock what it reads.
struct Watched<T> {
    tcp: T,
    clock: Arc<Clock>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            self.clock.read(&buf.filled()[before..]);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

async fn connection<T: AsyncRead + AsyncWrite + Send + Unpin + 'static>(
    tcp: T,
    peer: SocketAddr,
    verified: Option<mixer_frontends::forward_auth::TlsPeer>,
    _permit: Permit,
    app: Router,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    let clock = Clock::new();
    let io = TokioIo::new(Watched {
        tcp,
        clock: clock.clone(),
    });
    let max_header_list = shared.limits.max_header_list_bytes;
    let events = shared.events.clone();
    let service_clock = clock.clone();
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let in_flight = service_clock.request_started();
        // The forward-auth front end reads the peer's address from here, as from
        // `into_make_service_with_connect_info`.
        request.extensions_mut().insert(ConnectInfo(peer));
        if let Some(verified) = &verified {
            request.extensions_mut().insert(verified.clone());
        }
        let size = limits::header_list_size(&request);
        // A Router is always ready (axum's documentation), so it is called without
        // `poll_ready`.
        let answer = (size <= max_header_list).then(|| app.clone().call(request));
        let events = events.clone();
        async move {
            let _in_flight = in_flight;
            match answer {
                Some(answer) => answer.await,
                None => {
                    events.event(Event::StreamRefused(StreamRefusal::HeaderListTooLarge));
                    Ok::<_, Infallible>(header_list_too_large(size, max_header_list))
                }
            }
        }
    });
    let conn = shared.builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut closing = *stopped.borrow();
    if closing {
        conn.as_mut().graceful_shutdown();
    }
    // After an idle close has begun: when to stop waiting for the peer.
    let mut idle_close_until: Option<Instant> = None;
    loop {
        let deadline = match idle_close_until {
            Some(until) => Some((until, Timeout::Idle)),
            None => clock.deadline(&shared.limits),
        };
        let timer = async {
            match deadline {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = conn.as_mut() => return,
            () = timer => {
                let timeout = deadline.map_or(Timeout::Idle, |(_, t)| t);
                match (timeout, idle_close_until) {
                    (Timeout::Idle, None) => {
                        shared.events.event(Event::TimedOut(Timeout::Idle));
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                        idle_close_until =
                            Some(Instant::now() + shared.limits.handshake_timeout);
                    }
                    (Timeout::Idle, Some(_)) => return,
                    // A request (or a preface) that does not arrive: the connection is
                    // dropped, as nginx drops it after client_header_timeout.
                    (timeout, _) => {
                        shared.events.event(Event::TimedOut(timeout));
                        return;
                    }
                }
            }
            () = clock.changed.notified() => {}
            changed = stopped.changed(), if !closing => {
                if changed.is_err() || *stopped.borrow() {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

fn header_list_too_large(size: usize, max: usize) -> Response<Body> {
    let mut answer = Response::new(Body::from(format!(
        "the request's header list is {size} bytes, more than the {max} this server accepts\n"
    )));
    *answer.status_mut() = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> HttpLimits {
        HttpLimits {
            max_connections: 10,
            handshake_timeout: Duration::from_secs(1),
            header_read_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(3),
            max_concurrent_streams: 10,
            max_header_list_bytes: 1000,
        }
    }

    fn after(clock: &Clock) -> Option<(Duration, Timeout)> {
        let since = clock.state().since;
        clock
            .deadline(&limits())
            .map(|(at, timeout)| (at - since, timeout))
    }

    #[tokio::test]
    async fn an_http1_connection_is_timed_by_its_phase() {
        let clock = Clock::new();
        let header_read = Some((Duration::from_secs(2), Timeout::HeaderRead));
        assert_eq!(after(&clock), header_read);
        clock.read(b"GET / HT");
        assert_eq!(after(&clock), header_read);
        let request = clock.request_started();
        assert_eq!(after(&clock), None);
        drop(request);
        assert_eq!(after(&clock), Some((Duration::from_secs(3), Timeout::Idle)));
        clock.read(b"G");
        assert_eq!(clock.state().phase, Phase::Reading);
        assert_eq!(after(&clock), header_read);
    }

    #[tokio::test]
    async fn an_http2_connection_is_idle_after_its_preface() {
        let clock = Clock::new();
        clock.read(&PREFACE[..10]);
        assert_eq!(
            after(&clock),
            Some((Duration::from_secs(1), Timeout::Handshake))
        );
        clock.read(&PREFACE[10..]);
        assert_eq!(clock.state().protocol, Protocol::Http2);
        assert_eq!(after(&clock), Some((Duration::from_secs(3), Timeout::Idle)));
        // Frames between streams (PING, SETTINGS) do not start a header read.
        clock.read(b"\0\0\0\x06\0\0\0\0\0");
        assert_eq!(after(&clock), Some((Duration::from_secs(3), Timeout::Idle)));
        let (one, two) = (clock.request_started(), clock.request_started());
        drop(one);
        assert_eq!(after(&clock), None, "a stream is still open");
        drop(two);
        assert_eq!(after(&clock), Some((Duration::from_secs(3), Timeout::Idle)));
    }
}
