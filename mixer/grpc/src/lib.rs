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

mod fallback;
mod methods;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use fallback::Fallback;
pub use methods::{Guard, Methods, Unary, framed, unary};

/// A gRPC server: its methods, its fallback, TLS if any, and how long shutdown waits.
pub struct Server<S> {
    methods: Methods,
    fallback: S,
    tls: Option<tokio_rustls::TlsAcceptor>,
    drain: Duration,
}

impl<S: Fallback> Server<S> {
    /// Serves `methods` directly and every other path with `fallback`, in plaintext.
    pub fn new(methods: Methods, fallback: S) -> Server<S> {
        Server {
            methods,
            fallback,
            tls: None,
            drain: Duration::from_secs(10),
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

    /// Accepts connections on `listener` until `shutdown`, then asks every connection to
    /// finish (GOAWAY) and waits for their calls, at most the drain time.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> std::io::Result<()> {
        let (stop, stopped) = watch::channel(false);
        let mut connections = tokio::task::JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (tcp, _) = match accepted {
                        Ok(a) => a,
                        // A connection that died in the backlog, or no file descriptors
                        // left for a moment: neither should end the server.
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            continue;
                        }
                    };
                    // Without TCP_NODELAY an answer could wait for the peer's delayed ACK.
                    let _ = tcp.set_nodelay(true);
                    let (methods, fallback) = (self.methods.clone(), self.fallback.clone());
                    let (stopped, tls) = (stopped.clone(), self.tls.clone());
                    connections.spawn(async move {
                        let io: Box<dyn Io> = match tls {
                            None => Box::new(tcp),
                            Some(acceptor) => match acceptor.accept(tcp).await {
                                Ok(io) => Box::new(io),
                                // A failed handshake (no client certificate under mutual
                                // TLS, an unknown CA) ends only this connection.
                                Err(_) => return,
                            },
                        };
                        connection(io, methods, fallback, stopped).await;
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

async fn connection<S: Fallback>(
    io: Box<dyn Io>,
    methods: Methods,
    fallback: S,
    mut stopped: watch::Receiver<bool>,
) {
    let mut builder = h2::server::Builder::new();
    // Large windows, as the mixer's adapter client has: a report batch is not held back by
    // WINDOW_UPDATEs. Header lists are capped as hyper caps them.
    builder
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 20)
        .max_concurrent_streams(1024)
        .max_header_list_size(16 << 10);
    let Ok(mut h2) = builder.handshake::<_, Bytes>(io).await else {
        return;
    };
    let mut closing = *stopped.borrow();
    if closing {
        h2.graceful_shutdown();
    }
    // Direct calls run inside the connection's task rather than each in a task of its own:
    // nearly all finish at their first poll, and a spawned task cost an allocation, a trip
    // through the scheduler and a wake of this task to send the answer. Calls still wait on
    // their handlers concurrently; the connections of a server run on all its threads.
    let mut calls = FuturesUnordered::new();
    loop {
        tokio::select! {
            next = h2.accept() => match next {
                Some(Ok((request, respond))) => match methods.get(request.uri().path()) {
                    Some((method, guard)) => {
                        calls.push(methods::call(method, guard, request, respond));
                    }
                    None => {
                        tokio::spawn(fallback::call(fallback.clone(), request, respond));
                    }
                },
                Some(Err(_)) | None => break,
            },
            Some(()) = calls.next(), if !calls.is_empty() => {}
            changed = stopped.changed(), if !closing => {
                if changed.is_err() || *stopped.borrow() {
                    closing = true;
                    h2.graceful_shutdown();
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
