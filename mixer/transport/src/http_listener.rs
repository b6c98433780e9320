//! The HTTP listeners (forward-auth and admin): an axum router served over hyper, HTTP/1.1
//! or HTTP/2, in plaintext or (forward-auth with `--tls-cert`) over TLS, within the
//! listener's limits.
//!
//! `axum::serve` has no connection cap, no idle or header-read timeout and no say over
//! hyper's HTTP/2 settings, so the listeners serve their connections here. hyper's own
//! header-read timeout is off: it also runs while a keep-alive connection waits for its next
//! request, which would close nginx's pooled upstream connections (kept 60 s by default)
//! after a few seconds. Each connection keeps its own clock instead (see [`Phase`]).

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::grpc::limits::{
    self, Event, Events, Gate, Permit, Refusal, StreamRefusal, Timeout, codec_header_list_ceiling,
};
use axum::Router;
use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
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
    /// Connections one peer address may hold at once; past it a new one is reset. 0: no
    /// such limit.
    pub max_connections_per_peer: usize,
    /// At `max_connections`, close the oldest connection with no request in flight to let
    /// the new one in, instead of resetting the new one.
    pub evict_idle_at_cap: bool,
}

/// What a listener's sharing among peers did, beside what [`Events`] counts.
#[derive(Clone)]
pub struct SharingCounters {
    /// New connections reset at `max_connections_per_peer`.
    pub peer_limit: prometheus::IntCounter,
    /// Idle connections closed at `max_connections` to let a new one in.
    pub evicted: prometheus::IntCounter,
}

/// Serves `app` on `listener` in plaintext until `shutdown`; then every connection finishes
/// the request it has (HTTP/1) or gets GOAWAY (HTTP/2), and this returns once all have
/// closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    counters: (Arc<dyn Events>, SharingCounters),
    shutdown: impl Future<Output = ()>,
) {
    serve_with_tls(listener, app, limits, counters, None, shutdown).await
}

/// [`serve`], over TLS when `tls` is given (its config offering ALPN `h2` and `http/1.1`).
/// The handshake timeout covers the TLS handshake; each request carries what it verified
/// about the client as a [`TlsPeer`](mixer_frontends::forward_auth::TlsPeer) extension.
pub async fn serve_with_tls(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    (events, sharing): (Arc<dyn Events>, SharingCounters),
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) {
    // The gate counts connections and failed accepts; the caps are the seats' to apply.
    let gate = Gate::new(usize::MAX, events.clone());
    let seats = Seats::new(&limits, sharing);
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
                let seat = match seats.admit(peer.ip()) {
                    Ok(seat) => seat,
                    Err(refusal) => {
                        // Reset, as the gate resets past its cap: the client learns at once.
                        let _ = tcp.set_zero_linger();
                        drop(tcp);
                        match refusal {
                            Admission::PeerLimit => seats.counters.peer_limit.inc(),
                            Admission::ConnectionLimit => {
                                shared.events.event(Event::Refused(Refusal::ConnectionLimit));
                            }
                        }
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let (app, shared, stopped) = (app.clone(), shared.clone(), stopped.clone());
                let seated = (seat, permit);
                match tls.clone() {
                    None => {
                        connections.spawn(connection(tcp, peer, None, seated, app, shared, stopped));
                    }
                    Some(acceptor) => {
                        connections.spawn(async move {
                            let handshake = shared.limits.handshake_timeout;
                            let clock = seated.0.clock.clone();
                            let accepted = tokio::select! {
                                accepted = tokio::time::timeout(handshake, acceptor.accept(tcp)) => accepted,
                                () = clock.evicted() => return,
                            };
                            let io = match accepted {
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
                            connection(io, peer, Some(verified), seated, app, shared, stopped).await
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
    /// Closed to make room at the listener's cap.
    evicted: bool,
}

impl Clock {
    fn new() -> Arc<Clock> {
        Arc::new(Clock {
            state: Mutex::new(State {
                phase: Phase::Opening,
                since: Instant::now(),
                in_flight: 0,
                protocol: Protocol::Unknown,
                evicted: false,
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

    /// Tells the connection to close if it has no request in flight (so that closing it
    /// loses no answer); whether it did.
    fn evict_if_idle(&self) -> bool {
        let mut state = self.state();
        if state.in_flight > 0 || state.evicted {
            return false;
        }
        state.evicted = true;
        drop(state);
        // Every wait of the connection's loop includes `changed`.
        self.changed.notify_one();
        true
    }

    fn is_evicted(&self) -> bool {
        self.state().evicted
    }

    /// Returns once the connection is told to close.
    async fn evicted(&self) {
        while !self.is_evicted() {
            self.changed.notified().await;
        }
    }

    fn request_started(self: &Arc<Clock>) -> InFlight {
        let mut state = self.state();
        state.in_flight += 1;
        state.phase = Phase::Busy;
        InFlight(self.clone())
    }
}

/// Why a new connection is not let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Admission {
    PeerLimit,
    ConnectionLimit,
}

/// The connections a listener has open, in the order they came, by peer address: what its
/// caps are applied to.
struct Seats {
    max: usize,
    max_per_peer: usize,
    evict_idle: bool,
    counters: SharingCounters,
    taken: Mutex<Taken>,
}

#[derive(Default)]
struct Taken {
    next: u64,
    /// By order of arrival, oldest first.
    open: BTreeMap<u64, (IpAddr, Arc<Clock>)>,
    per_peer: HashMap<IpAddr, usize>,
}

impl Taken {
    fn remove(&mut self, id: u64) -> Option<Arc<Clock>> {
        let (peer, clock) = self.open.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&peer);
            }
        }
        Some(clock)
    }
}

/// A connection's place among its listener's [`Seats`], given back when dropped.
struct Seat {
    id: u64,
    clock: Arc<Clock>,
    seats: Arc<Seats>,
}

impl Seats {
    fn new(limits: &HttpLimits, counters: SharingCounters) -> Arc<Seats> {
        Arc::new(Seats {
            max: limits.max_connections,
            max_per_peer: limits.max_connections_per_peer,
            evict_idle: limits.evict_idle_at_cap,
            counters,
            taken: Mutex::default(),
        })
    }

    /// A seat for a new connection from `peer`, or why it gets none. At the cap, with
    /// `evict_idle`, the oldest connection with no request in flight is told to close and
    /// gives its seat up at once: the new connection, most often a probe or a scrape about
    /// to send its request, is the one likely to be used.
    fn admit(self: &Arc<Seats>, peer: IpAddr) -> Result<Seat, Admission> {
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        if self.max_per_peer > 0
            && taken.per_peer.get(&peer).copied().unwrap_or(0) >= self.max_per_peer
        {
            return Err(Admission::PeerLimit);
        }
        if taken.open.len() >= self.max {
            // Told to close under the lock, so that a request cannot start in between.
            let oldest_idle = self
                .evict_idle
                .then(|| {
                    taken
                        .open
                        .iter()
                        .find(|(_, (_, clock))| clock.evict_if_idle())
                        .map(|(id, _)| *id)
                })
                .flatten()
                .ok_or(Admission::ConnectionLimit)?;
            taken.remove(oldest_idle);
            self.counters.evicted.inc();
        }
        let id = taken.next;
        taken.next += 1;
        let clock = Clock::new();
        taken.open.insert(id, (peer, clock.clone()));
        *taken.per_peer.entry(peer).or_default() += 1;
        drop(taken);
        Ok(Seat {
            id,
            clock,
            seats: self.clone(),
        })
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut taken = self.seats.taken.lock().unwrap_or_else(|e| e.into_inner());
        // Gone already if the connection was evicted.
        let _ = taken.remove(self.id);
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
    (seat, _permit): (Seat, Permit),
    app: Router,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    let clock = seat.clock.clone();
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
        if clock.is_evicted() {
            // Made room for a newer connection at the cap; nothing is in flight.
            return;
        }
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
            max_connections_per_peer: 0,
            evict_idle_at_cap: false,
        }
    }

    fn counters() -> SharingCounters {
        SharingCounters {
            peer_limit: prometheus::IntCounter::new("peer_limit", "test").expect("counter"),
            evicted: prometheus::IntCounter::new("evicted", "test").expect("counter"),
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn a_peer_past_its_share_is_refused_and_others_are_not() {
        let seats = Seats::new(
            &HttpLimits {
                max_connections_per_peer: 2,
                ..limits()
            },
            counters(),
        );
        let first = seats.admit(ip(2)).expect("first");
        let _second = seats.admit(ip(2)).expect("second");
        assert_eq!(seats.admit(ip(2)).err(), Some(Admission::PeerLimit));
        assert!(seats.admit(ip(1)).is_ok(), "another peer has its own share");
        drop(first);
        assert!(
            seats.admit(ip(2)).is_ok(),
            "a closed connection frees its place"
        );
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_gives_its_seat_up() {
        let counters = counters();
        let seats = Seats::new(
            &HttpLimits {
                max_connections: 3,
                evict_idle_at_cap: true,
                ..limits()
            },
            counters.clone(),
        );
        let busy = seats.admit(ip(2)).expect("busy");
        let _request = busy.clock.request_started();
        let idle = seats.admit(ip(2)).expect("idle");
        let newer = seats.admit(ip(2)).expect("newer");
        let probe = seats
            .admit(ip(1))
            .expect("a new connection at the cap gets in");
        assert!(
            !busy.clock.is_evicted(),
            "a request is in flight on the oldest"
        );
        assert!(idle.clock.is_evicted(), "the oldest idle one makes room");
        assert!(!newer.clock.is_evicted());
        assert_eq!(counters.evicted.get(), 1);
        let _next = seats.admit(ip(1)).expect("again");
        assert!(newer.clock.is_evicted());
        // Only connections with requests in flight (and the newest) left: refused.
        let _in_flight = probe.clock.request_started();
        let _next_request = _next.clock.request_started();
        assert_eq!(seats.admit(ip(1)).err(), Some(Admission::ConnectionLimit));
        // An evicted seat's drop does not free another's place twice.
        drop(idle);
        assert_eq!(seats.admit(ip(1)).err(), Some(Admission::ConnectionLimit));
    }

    #[test]
    fn without_eviction_the_cap_refuses_the_new_connection() {
        let seats = Seats::new(
            &HttpLimits {
                max_connections: 1,
                ..limits()
            },
            counters(),
        );
        let first = seats.admit(ip(2)).expect("first");
        assert_eq!(seats.admit(ip(1)).err(), Some(Admission::ConnectionLimit));
        assert!(!first.clock.is_evicted());
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
