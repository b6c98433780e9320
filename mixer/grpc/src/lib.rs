//! gRPC over HTTP/2 with the `h2` crate, for the mixer's front ends and for adapters built
//! with the SDK.
//!
//! Why not tonic's server: every call went through hyper's dispatcher, tonic's router and
//! its streaming codec, even the unary ones that are all a check or an adapter call is. On a
//! 2-vCPU virtual machine that machinery cost an adapter 20-30 µs of CPU per call (about a
//! quarter of it) and 40 µs of latency at one caller. Here the [`Methods`] given by path are
//! served straight from their generated trait methods; every other path (health, streaming
//! methods, unknown ones) goes to a tonic [`Fallback`] service, so nothing is lost.
//!
//! ```no_run
//! # async fn run(routes: tonic::service::Routes) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! mixer_grpc::Server::new(mixer_grpc::Methods::new(), routes)
//!     .serve(listener, std::future::pending())
//!     .await
//! # }
//! ```

mod deadline;
mod fallback;
pub mod limits;
mod methods;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

pub use fallback::Fallback;
use limits::{
    Charge, Event, Events, Gate, Limits, NoEvents, Refusal, RequestBudget, StreamRefusal, Timeout,
};
pub use methods::{Guard, Methods, Unary, framed, unary};

/// A gRPC server: its methods, its fallback, TLS if any, its limits, and how long shutdown
/// waits.
pub struct Server<S> {
    methods: Methods,
    fallback: S,
    tls: Option<tokio_rustls::TlsAcceptor>,
    drain: Duration,
    limits: Limits,
    events: Arc<dyn Events>,
    streaming: HashSet<String>,
}

/// What every connection of a server shares.
struct Shared {
    limits: Limits,
    events: Arc<dyn Events>,
    /// Paths whose requests stream: the body timeout ends at their first data.
    streaming: HashSet<String>,
    /// Request bytes in flight across the listener's connections.
    budget: Arc<RequestBudget>,
}

impl<S: Fallback> Server<S> {
    /// Serves `methods` directly and every other path with `fallback`, in plaintext, with
    /// the default [`Limits`].
    pub fn new(methods: Methods, fallback: S) -> Server<S> {
        Server {
            methods,
            fallback,
            tls: None,
            drain: Duration::from_secs(10),
            limits: Limits::default(),
            events: Arc::new(NoEvents),
            streaming: HashSet::new(),
        }
    }

    /// Serves over TLS instead (the acceptor must offer ALPN `h2`).
    pub fn tls(mut self, acceptor: tokio_rustls::TlsAcceptor) -> Server<S> {
        self.tls = Some(acceptor);
        self
    }

    /// How long open connections may finish their calls once shutdown begins (10 s unless
    /// set).
    pub fn drain(mut self, drain: Duration) -> Server<S> {
        self.drain = drain;
        self
    }

    /// Connection and stream limits other than the defaults.
    pub fn limits(mut self, limits: Limits) -> Server<S> {
        self.limits = limits;
        self
    }

    /// Where the limits report what they refused or closed.
    pub fn events(mut self, events: Arc<dyn Events>) -> Server<S> {
        self.events = events;
        self
    }

    /// Paths (`/package.Service/Method`) of client-streaming methods, whose request bodies
    /// stay open as long as the client has messages to send (Envoy's access log stream): on
    /// them the body timeout bounds the wait for the first data only.
    pub fn streaming_requests<P: Into<String>>(
        mut self,
        paths: impl IntoIterator<Item = P>,
    ) -> Server<S> {
        self.streaming.extend(paths.into_iter().map(Into::into));
        self
    }

    /// Accepts connections on `listener` until `shutdown`, then asks every connection to
    /// finish (GOAWAY) and waits for their calls, at most the drain time.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> std::io::Result<()> {
        let (stop, stopped) = watch::channel(false);
        let mut connections = tokio::task::JoinSet::new();
        let shared = Arc::new(Shared {
            budget: RequestBudget::new(self.limits.max_request_bytes_in_flight),
            limits: self.limits,
            events: self.events,
            streaming: self.streaming,
        });
        let gate = Gate::new(shared.limits.max_connections, shared.events.clone());
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                (tcp, _, permit) = gate.accept(&listener) => {
                    // Without TCP_NODELAY an answer could wait for the peer's delayed ACK.
                    let _ = tcp.set_nodelay(true);
                    let (methods, fallback) = (self.methods.clone(), self.fallback.clone());
                    let (stopped, tls) = (stopped.clone(), self.tls.clone());
                    let shared = shared.clone();
                    connections.spawn(async move {
                        let _permit = permit;
                        let handshake = async {
                            let io: Box<dyn Io> = match tls {
                                None => Box::new(tcp),
                                // A failed handshake (no client certificate under mutual
                                // TLS, an unknown CA) ends only this connection.
                                Some(acceptor) => match acceptor.accept(tcp).await {
                                    Ok(tls) => Box::new(tls),
                                    Err(_) => {
                                        shared.events.event(Event::Refused(Refusal::TlsHandshake));
                                        return None;
                                    }
                                },
                            };
                            h2_builder(&shared.limits).handshake::<_, Bytes>(Unvectored(io)).await.ok()
                        };
                        let h2 = match tokio::time::timeout(shared.limits.handshake_timeout, handshake).await {
                            Ok(Some(h2)) => h2,
                            Ok(None) => return,
                            Err(_) => {
                                shared.events.event(Event::TimedOut(Timeout::Handshake));
                                return;
                            }
                        };
                        connection(h2, methods, fallback, stopped, shared).await;
                    });
                }
            }
            while connections.try_join_next().is_some() {}
        }
        let _ = stop.send(true);
        let _ = tokio::time::timeout(self.drain, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        Ok(())
    }
}

/// A connection's byte stream, plaintext or TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// A connection's byte stream that says it writes no vectors, whatever it is.
///
/// `h2` copies a DATA payload into its write buffer only below a threshold, 256 bytes on a
/// stream that writes vectors and 1 KiB on one that does not; a larger payload is chained
/// and must be written before any other frame is buffered. Most answers (an ext_authz
/// answer with its headers and metadata) are 256 bytes to 1 KiB, so on a TCP stream each
/// cost a write of its own even when many were ready together. Copying them is far cheaper
/// than a system call each.
struct Unvectored(Box<dyn Io>);

impl AsyncRead for Unvectored {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Unvectored {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}

fn h2_builder(limits: &Limits) -> h2::server::Builder {
    let mut builder = h2::server::Builder::new();
    // Large windows, as the mixer's adapter client has: a report batch is not held back by
    // WINDOW_UPDATEs. The codec takes header lists well past the limit, which is applied
    // per stream (see `refusal`).
    builder
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 20)
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_header_list_size(limits::codec_header_list_ceiling(
            limits.max_header_list_bytes,
        ));
    builder
}

/// The streams of one connection open now, and when the last one opened or closed, for the
/// idle timeout.
struct Streams {
    open: AtomicUsize,
    /// Milliseconds from `epoch` to the last stream's opening or closing.
    last: AtomicU64,
    epoch: Instant,
}

/// One open stream, counted in [`Streams`] until dropped, with its charge on the listener's
/// request budget.
struct StreamGuard {
    streams: Arc<Streams>,
    charge: Charge,
}

impl Streams {
    fn new() -> Arc<Streams> {
        Arc::new(Streams {
            open: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    fn opened(self: &Arc<Streams>, charge: Charge) -> StreamGuard {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.touch();
        StreamGuard {
            streams: self.clone(),
            charge,
        }
    }

    /// When the connection turns idle: `None` while a stream is open.
    fn idle_since(&self) -> Option<Instant> {
        (self.open.load(Ordering::Relaxed) == 0)
            .then(|| self.epoch + Duration::from_millis(self.last.load(Ordering::Relaxed)))
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.streams.open.fetch_sub(1, Ordering::Relaxed);
        self.streams.touch();
    }
}

async fn connection<S: Fallback>(
    mut h2: h2::server::Connection<Unvectored, Bytes>,
    methods: Methods,
    fallback: S,
    mut stopped: watch::Receiver<bool>,
    shared: Arc<Shared>,
) {
    let limits = &shared.limits;
    let mut closing = *stopped.borrow();
    if closing {
        h2.graceful_shutdown();
    }
    let streams = Streams::new();
    // Checked when it fires rather than reset on every stream: streams come and go far more
    // often than a connection turns idle. Once the connection is closing, it is the time
    // left to the peer to acknowledge the GOAWAY.
    let timer = tokio::time::sleep(limits.idle_timeout);
    tokio::pin!(timer);
    let mut idle_closed = false;
    // Direct calls run inside the connection's task rather than each in a task of its own:
    // nearly all finish at their first poll, and a spawned task cost an allocation, a trip
    // through the scheduler and a wake of this task to send the answer. Calls still wait on
    // their handlers concurrently; the connections of a server run on all its threads.
    //
    // The order of the branches matters (hence `biased`): every stream the last read brought
    // is accepted first, then every call that can finish runs, and only then is the
    // connection polled again, which writes all the answers those calls queued at once. Polled
    // in turn instead, the connection flushed after each call, one `writev` per answer, and
    // the kernel's side of those writes was as much CPU again as the calls themselves.
    // `stopped` comes first: under a steady load the other branches may never all be pending.
    let mut calls = FuturesUnordered::new();
    loop {
        tokio::select! {
            biased;
            changed = stopped.changed(), if !closing => {
                if changed.is_err() || *stopped.borrow() {
                    closing = true;
                    h2.graceful_shutdown();
                }
            }
            next = h2.accept() => match next {
                Some(Ok((request, mut respond))) => {
                    if let Some(answer) = refusal(&request, &shared) {
                        let _ = respond.send_response(answer, true);
                        continue;
                    }
                    // Refused before its body is read, while it holds no more than its
                    // headers: past the budget, streams must not pile up waiting.
                    let Some(charge) = shared.budget.charge(limits::STREAM_OVERHEAD_BYTES) else {
                        shared.events.event(Event::StreamRefused(StreamRefusal::RequestBudget));
                        let status = limits::over_budget(&shared.budget);
                        let _ = respond.send_response(status.into_http(), true);
                        continue;
                    };
                    let mut stream = streams.opened(charge);
                    let path = request.uri().path();
                    match methods.get(path) {
                        Some((method, guard)) => {
                            let shared = shared.clone();
                            calls.push(async move {
                                let charge = &mut stream.charge;
                                methods::call(method, guard, request, respond, &shared, charge)
                                    .await;
                                drop(stream);
                            });
                        }
                        None => {
                            let call = fallback::call(fallback.clone(), request, respond, shared.clone(), stream);
                            tokio::spawn(call);
                        }
                    }
                }
                Some(Err(_)) | None => break,
            },
            Some(()) = std::future::poll_fn(|cx| run_ready(&mut calls, cx)), if !calls.is_empty() => {}
            () = &mut timer => {
                if idle_closed {
                    // The peer never acknowledged the GOAWAY; nothing is in flight.
                    break;
                }
                match streams.idle_since() {
                    Some(since) if since + limits.idle_timeout <= Instant::now() => {
                        shared.events.event(Event::TimedOut(Timeout::Idle));
                        idle_closed = true;
                        closing = true;
                        h2.graceful_shutdown();
                        timer.as_mut().reset(Instant::now() + limits.handshake_timeout);
                    }
                    Some(since) => timer.as_mut().reset(since + limits.idle_timeout),
                    None => timer.as_mut().reset(Instant::now() + limits.idle_timeout),
                }
            }
        }
    }
    // The connection is gone (a broken connection; a graceful close waits for its calls).
    // Calls still running finish on their own, as their effects (a report queued) should.
    if !calls.is_empty() {
        tokio::spawn(async move { while calls.next().await.is_some() {} });
    }
}

/// Polls the calls until none can make progress: `Some(())` once at least one finished,
/// `None` when there are none, pending otherwise.
fn run_ready<F: Future<Output = ()>>(
    calls: &mut FuturesUnordered<F>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<Option<()>> {
    use std::task::Poll;
    let mut finished = false;
    loop {
        match calls.poll_next_unpin(cx) {
            Poll::Ready(Some(())) => finished = true,
            Poll::Ready(None) if !finished => return Poll::Ready(None),
            Poll::Pending if !finished => return Poll::Pending,
            Poll::Ready(None) | Poll::Pending => return Poll::Ready(Some(())),
        }
    }
}

/// The answer to a stream refused before any method sees it: a header list over the limit
/// (RESOURCE_EXHAUSTED, as gRPC core answers metadata over its limit), or a content type
/// that is not gRPC's (HTTP 415, as the gRPC over HTTP/2 protocol asks, so that an HTTP
/// client does not take the 200 of a gRPC error for success).
fn refusal<B>(request: &http::Request<B>, shared: &Shared) -> Option<http::Response<()>> {
    let size = limits::header_list_size(request);
    let max = shared.limits.max_header_list_bytes;
    if size > max {
        shared
            .events
            .event(Event::StreamRefused(StreamRefusal::HeaderListTooLarge));
        let status = tonic::Status::resource_exhausted(format!(
            "the request's header list is {size} bytes, more than the {max} this server accepts"
        ));
        return Some(status.into_http());
    }
    let content_type = request.headers().get(http::header::CONTENT_TYPE);
    if content_type.is_some_and(|c| is_grpc(c.as_bytes())) {
        return None;
    }
    // grpc-go answers the same way: 415, with an INTERNAL status for gRPC clients.
    let shown = content_type.map_or_else(
        || "none".to_string(),
        |c| format!("{:?}", String::from_utf8_lossy(c.as_bytes())),
    );
    let status = tonic::Status::internal(format!(
        "content-type {shown} is not gRPC's (application/grpc)"
    ));
    let mut answer = status.into_http();
    *answer.status_mut() = http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
    Some(answer)
}

/// `application/grpc`, alone or followed by `+format` or `;parameters` (the protocol's
/// Content-Type rule).
fn is_grpc(content_type: &[u8]) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    content_type.len() >= GRPC.len()
        && content_type[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(content_type.get(GRPC.len()), None | Some(b'+' | b';'))
}

#[cfg(test)]
mod tests;
