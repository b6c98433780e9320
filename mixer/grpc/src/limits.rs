//! What a listener allows: how many connections at once, how long each phase of a connection
//! and of a stream may take, how large a request's header list may be; and the [`Event`]s a
//! listener reports when a limit refuses or closes something, for metrics.
//!
//! The gRPC [`crate::Server`] applies all of them; the mixer's HTTP listeners share the
//! [`Gate`], the events and [`header_list_size`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// The limits of one gRPC listener.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections open at once. A connection past it is reset as soon as it is accepted,
    /// so the listener never takes the process's last file descriptors.
    pub max_connections: usize,
    /// Time from accepting a connection to the end of its TLS handshake (if any) and of its
    /// HTTP/2 connection preface.
    pub handshake_timeout: Duration,
    /// Time a connection may stay without a stream open before it is closed (GOAWAY).
    pub idle_timeout: Duration,
    /// Time from a stream's headers to the end of its request body; on a path whose
    /// requests stream (see [`crate::Server::streaming_requests`]), to its first data.
    pub body_timeout: Duration,
    /// Streams one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// Largest request header list, counted as HTTP/2 counts it (name, value and 32 bytes
    /// per field); a larger one is answered RESOURCE_EXHAUSTED on its own stream.
    pub max_header_list_bytes: usize,
    /// Request bytes the listener holds at once across all its connections: every open
    /// stream's [`STREAM_OVERHEAD_BYTES`] plus the request body bytes read and not yet
    /// answered. A stream past it is answered RESOURCE_EXHAUSTED; so is a call whose body
    /// would take the total past it. The connection and stream caps alone let one listener
    /// hold 10,000 connections of 1,000 bodiless streams each (some 36 GB).
    pub max_request_bytes_in_flight: usize,
}

/// What an open stream is charged before any of its body: about what one holds (`h2`'s
/// stream state, the request's headers, the call's future), 3.7 KB measured for a
/// bodiless stream.
pub const STREAM_OVERHEAD_BYTES: usize = 4 << 10;

/// The default [`Limits::max_request_bytes_in_flight`]: 128 MiB, room for 32 requests of
/// the largest message (4 MiB) or 32,768 bodiless streams, while a busy mixer's checks
/// (some hundreds in flight, a few KB each) use a few MB of it.
pub const DEFAULT_MAX_REQUEST_BYTES_IN_FLIGHT: usize = 128 << 20;

impl Default for Limits {
    /// The mixer's defaults (see its README, "Operations: limits and timeouts").
    fn default() -> Limits {
        Limits {
            max_connections: 10_000,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(3600),
            body_timeout: Duration::from_secs(10),
            max_concurrent_streams: 1000,
            max_header_list_bytes: 16 << 10,
            max_request_bytes_in_flight: DEFAULT_MAX_REQUEST_BYTES_IN_FLIGHT,
        }
    }
}

/// The header list size a connection accepts from its HTTP/2 codec: many times the limit, so
/// that a header list over the limit is decoded and refused on its own stream rather than
/// torn down with the whole connection. The `h2` codec ends a connection (GOAWAY) whose
/// header block, still encoded, outgrows the size it announced; past this ceiling that is
/// the answer, and the only defence against a flood of headers.
pub fn codec_header_list_ceiling(limit: usize) -> u32 {
    u32::try_from(limit.saturating_mul(16).max(256 << 10)).unwrap_or(u32::MAX)
}

/// A request's header list size as HTTP/2 counts it (RFC 7540 §6.5.2): for every field, its
/// name's and its value's length and 32 bytes; pseudo-header fields included.
pub fn header_list_size<B>(request: &http::Request<B>) -> usize {
    const FIELD: usize = 32;
    let uri = request.uri();
    let pseudo = [
        (":method".len(), request.method().as_str().len()),
        (
            ":path".len(),
            uri.path_and_query().map_or(0, |p| p.as_str().len()),
        ),
        (":scheme".len(), uri.scheme_str().map_or(0, str::len)),
        (
            ":authority".len(),
            uri.authority().map_or(0, |a| a.as_str().len()),
        ),
    ];
    let pseudo: usize = pseudo
        .iter()
        .filter(|(_, value)| *value > 0)
        .map(|(name, value)| name + value + FIELD)
        .sum();
    let fields: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + FIELD)
        .sum();
    pseudo + fields
}

/// Something a listener's limits did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A connection was accepted within the limit.
    Opened,
    /// A connection accepted within the limit has ended.
    Closed,
    /// A connection was not served.
    Refused(Refusal),
    /// A connection was closed because a phase took too long.
    TimedOut(Timeout),
    /// A stream was answered with an error, the connection kept.
    StreamRefused(StreamRefusal),
    /// A call's deadline (its `grpc-timeout`) passed before it was answered: it got
    /// DEADLINE_EXCEEDED and its work was dropped.
    DeadlineExceeded,
}

/// Why a connection was not served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The listener had its most connections open: reset once accepted.
    ConnectionLimit,
    /// Accepting failed (no file descriptor left, most often); the listener retries after
    /// a pause.
    AcceptFailed,
    /// The TLS handshake failed: under mutual TLS, most often a client without a
    /// certificate or with one the client CA did not sign; otherwise no common protocol
    /// version, cipher or ALPN protocol, or a client that is not speaking TLS.
    TlsHandshake,
}

/// Which phase of a connection took too long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// TLS and the HTTP/2 preface.
    Handshake,
    /// An HTTP/1 request's headers.
    HeaderRead,
    /// No request in flight.
    Idle,
}

/// Why a stream was answered with an error before its method ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamRefusal {
    /// Its header list was larger than the limit.
    HeaderListTooLarge,
    /// Its request body did not arrive in time.
    BodyTimeout,
    /// The listener held its most request bytes in flight (see
    /// [`Limits::max_request_bytes_in_flight`]).
    RequestBudget,
}

impl Refusal {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::ConnectionLimit => "connection_limit",
            Refusal::AcceptFailed => "accept_failed",
            Refusal::TlsHandshake => "tls_handshake",
        }
    }
}

impl Timeout {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Timeout::Handshake => "handshake",
            Timeout::HeaderRead => "header_read",
            Timeout::Idle => "idle",
        }
    }
}

impl StreamRefusal {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            StreamRefusal::HeaderListTooLarge => "header_list_too_large",
            StreamRefusal::BodyTimeout => "body_timeout",
            StreamRefusal::RequestBudget => "request_budget",
        }
    }
}

/// Receives a listener's [`Event`]s (the mixer counts them in its metrics).
pub trait Events: Send + Sync + 'static {
    /// Called once per event, on the thread serving the connection: keep it cheap.
    fn event(&self, event: Event);
}

/// Events nobody counts.
pub struct NoEvents;

impl Events for NoEvents {
    fn event(&self, _: Event) {}
}

/// The request bytes a listener holds across its connections, under its
/// [`Limits::max_request_bytes_in_flight`].
pub struct RequestBudget {
    max: usize,
    used: AtomicUsize,
}

/// Bytes one stream holds of a [`RequestBudget`], given back when dropped.
pub struct Charge {
    budget: Arc<RequestBudget>,
    bytes: usize,
}

impl RequestBudget {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Arc<RequestBudget> {
        Arc::new(RequestBudget {
            max,
            used: AtomicUsize::new(0),
        })
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The most bytes it holds.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A charge of `bytes` (a new stream's overhead), or `None` when they do not fit.
    pub fn charge(self: &Arc<RequestBudget>, bytes: usize) -> Option<Charge> {
        self.take(bytes).then(|| Charge {
            budget: self.clone(),
            bytes,
        })
    }

    fn take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.max)
            })
            .is_ok()
    }
}

impl Charge {
    /// Adds `bytes` (body read) to the charge; `false`, and nothing added, when they do not
    /// fit.
    pub fn grow(&mut self, bytes: usize) -> bool {
        let fits = self.budget.take(bytes);
        if fits {
            self.bytes += bytes;
        }
        fits
    }

    /// The budget charged.
    pub fn budget(&self) -> &RequestBudget {
        &self.budget
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The status of a request refused for want of room in the budget.
pub fn over_budget(budget: &RequestBudget) -> tonic::Status {
    tonic::Status::resource_exhausted(format!(
        "the server holds its most request bytes in flight ({} of {}); retry later",
        budget.used(),
        budget.max()
    ))
}

/// Accepts connections up to a listener's limit.
pub struct Gate {
    max: usize,
    open: Arc<AtomicUsize>,
    events: Arc<dyn Events>,
}

/// One connection's place under its listener's limit, given back when dropped.
pub struct Permit {
    open: Arc<AtomicUsize>,
    events: Arc<dyn Events>,
}

impl Gate {
    /// A gate letting `max` connections in at once.
    pub fn new(max: usize, events: Arc<dyn Events>) -> Gate {
        Gate {
            max,
            open: Arc::default(),
            events,
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// The next connection within the limit. A connection past it is reset (RST, so the
    /// client learns at once and tries another replica) and counted; so is a failed accept,
    /// after which the gate waits a moment, since the cause (no file descriptor left) lasts.
    pub async fn accept(&self, listener: &TcpListener) -> (TcpStream, SocketAddr, Permit) {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(_) => {
                    self.events.event(Event::Refused(Refusal::AcceptFailed));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            };
            if self.open.fetch_add(1, Ordering::Relaxed) >= self.max {
                self.open.fetch_sub(1, Ordering::Relaxed);
                let _ = tcp.set_zero_linger();
                drop(tcp);
                self.events.event(Event::Refused(Refusal::ConnectionLimit));
                continue;
            }
            self.events.event(Event::Opened);
            let permit = Permit {
                open: self.open.clone(),
                events: self.events.clone(),
            };
            return (tcp, peer, permit);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        self.events.event(Event::Closed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_list_size_counts_as_http2_does() {
        let request = http::Request::builder()
            .method("POST")
            .uri("http://mixer:9091/a.B/C")
            .header("content-type", "application/grpc")
            .body(())
            .expect("request");
        let expected = (7 + 4 + 32) // :method POST
            + (5 + 6 + 32) // :path /a.B/C
            + (7 + 4 + 32) // :scheme http
            + (10 + 10 + 32) // :authority mixer:9091
            + (12 + 16 + 32); // content-type
        assert_eq!(header_list_size(&request), expected);
    }

    #[test]
    fn charges_fit_the_budget_and_are_given_back_when_dropped() {
        let budget = RequestBudget::new(10_000);
        let mut a = budget.charge(STREAM_OVERHEAD_BYTES).expect("fits");
        let b = budget.charge(STREAM_OVERHEAD_BYTES).expect("fits");
        assert!(budget.charge(STREAM_OVERHEAD_BYTES).is_none());
        assert!(a.grow(1_000));
        assert!(!a.grow(1_000), "past the budget");
        assert_eq!(budget.used(), 2 * STREAM_OVERHEAD_BYTES + 1_000);
        assert!(over_budget(&budget).message().contains("9192 of 10000"));
        drop(a);
        assert_eq!(budget.used(), STREAM_OVERHEAD_BYTES);
        drop(b);
        assert_eq!(budget.used(), 0);
        assert!(budget.charge(usize::MAX).is_none());
    }

    #[test]
    fn the_codec_ceiling_leaves_room_above_the_limit() {
        assert_eq!(codec_header_list_ceiling(16 << 10), 256 << 10);
        assert_eq!(codec_header_list_ceiling(60 << 10), 960 << 10);
        assert_eq!(codec_header_list_ceiling(usize::MAX), u32::MAX);
    }

    #[tokio::test]
    async fn connections_past_the_limit_are_reset_and_counted() {
        use std::sync::Mutex;
        use tokio::io::AsyncReadExt;

        #[derive(Default)]
        struct Seen(Mutex<Vec<Event>>);
        impl Events for Seen {
            fn event(&self, event: Event) {
                self.0.lock().expect("lock").push(event);
            }
        }
        let seen = Arc::new(Seen::default());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let gate = Gate::new(1, seen.clone());

        let _first = TcpStream::connect(addr).await.expect("connect");
        let (_served, _, permit) = gate.accept(&listener).await;
        assert_eq!(gate.open(), 1);
        let mut second = TcpStream::connect(addr).await.expect("connect");
        let mut third = TcpStream::connect(addr).await.expect("connect");
        // The gate refuses both while looking for a third connection within the limit.
        let accepting = tokio::time::timeout(Duration::from_millis(300), gate.accept(&listener));
        assert!(
            accepting.await.is_err(),
            "nothing was let in past the limit"
        );
        for refused in [&mut second, &mut third] {
            let mut byte = [0u8; 1];
            let read = refused.read(&mut byte).await;
            assert!(
                matches!(read, Err(ref e) if e.kind() == std::io::ErrorKind::ConnectionReset),
                "{read:?}"
            );
        }
        drop(permit);
        assert_eq!(gate.open(), 0);
        let refused = Event::Refused(Refusal::ConnectionLimit);
        assert_eq!(
            *seen.0.lock().expect("lock"),
            [Event::Opened, refused, refused, Event::Closed]
        );
    }
}
