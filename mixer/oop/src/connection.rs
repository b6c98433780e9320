//! The HTTP/2 connection to an adapter, as the service tonic's generated clients call.
//!
//! tonic's own `Channel` is not used because of what it does to a unary call: the call goes
//! through a buffer task, and hyper then sends it in three writes (the HEADERS frame; the
//! message, once the body pipe that hyper spawned as a task of its own has been given send
//! capacity; an empty end-of-stream DATA frame). The adapter may wake up for each write.
//! Here the headers and the whole message are queued on the stream before the connection
//! task runs, so they leave in one write; `mixer-bench oop` measured the remote hop about
//! 40 µs shorter on loopback.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use http::uri::{Authority, Scheme};
use http_body::{Body, Frame};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// HTTP/2 windows as hyper's client sets them: a large report batch is not held back by
/// window updates.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;

/// How to open a connection: where to, within how long, and with which TLS settings.
#[derive(Clone)]
pub(crate) struct Connector {
    pub(crate) scheme: Scheme,
    pub(crate) authority: Authority,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) connect_timeout: Duration,
    pub(crate) tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.authority)
    }
}

/// Why a call did not get an answer from the adapter: it could not connect, or the
/// connection or stream broke. Callers treat it as the adapter being unavailable.
#[derive(Debug)]
pub struct TransportError {
    what: &'static str,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
    unsent: bool,
}

impl TransportError {
    fn new(
        what: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        TransportError {
            what,
            source: Some(source.into()),
            unsent: false,
        }
    }

    /// The same error, known not to have reached the adapter.
    fn unsent(mut self) -> Self {
        self.unsent = true;
        self
    }

    /// Whether the adapter cannot have acted on the request: it went to a connection that
    /// turned out to be broken before the request was written, or the adapter refused its
    /// stream unprocessed (`REFUSED_STREAM`). Such a call can be sent again on a new
    /// connection without being applied twice. A failure to connect is not one of them:
    /// connecting again at once would fail the same way.
    pub fn unsent_on_a_broken_connection(&self) -> bool {
        self.unsent
    }
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.what)
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// One HTTP/2 connection for tonic's generated clients, opened on the first call and again
/// after it breaks. Clones share it.
#[derive(Clone)]
pub struct AdapterConnection {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AdapterConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AdapterConnection")
            .field(&self.shared.connector)
            .finish()
    }
}

struct Shared {
    connector: Connector,
    /// Held while connecting, so that concurrent first calls open one connection.
    live: tokio::sync::Mutex<Option<Live>>,
}

#[derive(Clone)]
struct Live {
    send: SendRequest<Bytes>,
    /// Set by the connection's task when the connection ends.
    closed: Arc<AtomicBool>,
}

impl AdapterConnection {
    /// A connection that opens on first use.
    pub(crate) fn lazy(connector: Connector) -> AdapterConnection {
        AdapterConnection {
            shared: Arc::new(Shared {
                connector,
                live: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// A plaintext connection to `addr`, opened on the first call within `connect_timeout`.
    /// The load generator calls through it too, so that its own client costs no more than
    /// the mixer's.
    pub fn plaintext(addr: SocketAddr, connect_timeout: Duration) -> AdapterConnection {
        AdapterConnection::lazy(Connector::plaintext(addr, connect_timeout))
    }

    /// [`AdapterConnection::plaintext`], opened now.
    pub async fn open_plaintext(
        addr: SocketAddr,
        connect_timeout: Duration,
    ) -> Result<AdapterConnection, TransportError> {
        AdapterConnection::open(Connector::plaintext(addr, connect_timeout)).await
    }

    /// A connection opened now.
    pub(crate) async fn open(connector: Connector) -> Result<AdapterConnection, TransportError> {
        let connection = AdapterConnection::lazy(connector);
        connection.live().await?;
        Ok(connection)
    }

    /// Stops handing out the current connection: the next call opens another, while calls
    /// already on this one finish there (h2 closes it once they have). Skipped while another
    /// call is connecting, which gives a fresh connection anyway.
    pub(crate) fn reset(&self) {
        if let Ok(live) = self.shared.live.try_lock()
            && let Some(l) = live.as_ref()
        {
            l.closed.store(true, Ordering::Release);
        }
    }

    /// A live connection, opened if there is none.
    async fn live(&self) -> Result<Live, TransportError> {
        let mut live = self.shared.live.lock().await;
        if let Some(l) = live.as_ref().filter(|l| !l.closed.load(Ordering::Acquire)) {
            return Ok(l.clone());
        }
        *live = None;
        let opened = self.shared.connector.open().await?;
        *live = Some(opened.clone());
        Ok(opened)
    }

    async fn call<B>(
        self,
        request: http::Request<B>,
    ) -> Result<http::Response<ResponseBody>, TransportError>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let live = self.live().await?;
        // A connection found broken is not used again: the next call opens another. Nothing
        // of this request has been written when `broke` is called.
        let broke = |e| {
            live.closed.store(true, Ordering::Release);
            TransportError::new("the adapter connection broke", e).unsent()
        };
        let mut send = live.send.clone().ready().await.map_err(broke)?;
        let (mut head, body) = request.into_parts();
        // tonic's clients give the path alone; HTTP/2 wants the scheme and authority too.
        let mut uri = http::uri::Parts::default();
        uri.scheme = Some(self.shared.connector.scheme.clone());
        uri.authority = Some(self.shared.connector.authority.clone());
        uri.path_and_query = head.uri.path_and_query().cloned();
        head.uri =
            http::Uri::from_parts(uri).map_err(|e| TransportError::new("bad request path", e))?;
        let (response, mut stream) = send
            .send_request(http::Request::from_parts(head, ()), false)
            .map_err(broke)?;
        // A unary call's body is ready at once: everything is queued before the connection
        // task writes. h2 buffers data that has no send capacity yet.
        let mut body = std::pin::pin!(body);
        // Once a frame of the body is queued the connection task may write it: a later
        // failure can no longer promise that nothing reached the adapter.
        let mut queued = false;
        loop {
            let frame = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await;
            let (sent, done) = match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let end = body.is_end_stream();
                        (stream.send_data(data, end), end)
                    }
                    Err(frame) => match frame.into_trailers() {
                        Ok(trailers) => (stream.send_trailers(trailers), true),
                        Err(_) => continue,
                    },
                },
                Some(Err(e)) => {
                    stream.send_reset(h2::Reason::CANCEL);
                    return Err(TransportError::new("the request body failed", e));
                }
                None => (stream.send_data(Bytes::new(), true), true),
            };
            sent.map_err(|e| {
                if queued {
                    live.closed.store(true, Ordering::Release);
                    TransportError::new("the adapter connection broke", e)
                } else {
                    broke(e)
                }
            })?;
            queued = true;
            if done {
                break;
            }
        }
        let response = response.await.map_err(|e| {
            // REFUSED_STREAM promises the adapter did not process the stream (RFC 9113
            // 8.7); a GOAWAY does not, since its error also reaches streams it let through.
            let refused = e.is_remote() && e.reason() == Some(h2::Reason::REFUSED_STREAM);
            let error = TransportError::new("the adapter did not answer", e);
            if refused { error.unsent() } else { error }
        })?;
        Ok(response.map(|recv| ResponseBody {
            recv,
            data_done: false,
        }))
    }
}

impl Connector {
    fn plaintext(addr: SocketAddr, connect_timeout: Duration) -> Connector {
        // A socket address's text is always a valid authority.
        let authority = Authority::try_from(addr.to_string())
            .unwrap_or_else(|_| Authority::from_static("localhost"));
        Connector {
            scheme: Scheme::HTTP,
            authority,
            host: addr.ip().to_string(),
            port: addr.port(),
            connect_timeout,
            tls: None,
        }
    }

    async fn open(&self) -> Result<Live, TransportError> {
        let connect = TcpStream::connect((self.host.as_str(), self.port));
        let tcp = tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| TransportError::new("connecting to the adapter timed out", Elapsed))?
            .map_err(|e| TransportError::new("cannot connect to the adapter", e))?;
        // Calls are small and latency bound: no Nagle delay.
        tcp.set_nodelay(true)
            .map_err(|e| TransportError::new("cannot connect to the adapter", e))?;
        match &self.tls {
            None => handshake(tcp).await,
            Some((tls, name)) => {
                let tls =
                    tokio::time::timeout(self.connect_timeout, tls.connect(name.clone(), tcp))
                        .await
                        .map_err(|_| TransportError::new("the TLS handshake timed out", Elapsed))?
                        .map_err(|e| TransportError::new("the TLS handshake failed", e))?;
                handshake(tls).await
            }
        }
    }
}

async fn handshake<T>(io: T) -> Result<Live, TransportError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| TransportError::new("the HTTP/2 handshake failed", e))?;
    let closed = Arc::new(AtomicBool::new(false));
    let flag = closed.clone();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "adapter connection ended");
        }
        flag.store(true, Ordering::Release);
    });
    Ok(Live { send, closed })
}

#[derive(Debug)]
struct Elapsed;

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// The response's body: its data frames (flow-control capacity given back as they are read),
/// then its trailers, where gRPC puts the call's status.
pub struct ResponseBody {
    recv: h2::RecvStream,
    data_done: bool,
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = TransportError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, TransportError>>> {
        let broke = |e| TransportError::new("the adapter's answer broke off", e);
        if !self.data_done {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    // Released at once: the decoder holds the bytes, not the window.
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(broke(e)))),
                None => self.data_done = true,
            }
        }
        match ready!(self.recv.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(broke(e)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.data_done && self.recv.is_end_stream()
    }
}

impl<B> tower_service::Service<http::Request<B>> for AdapterConnection
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<ResponseBody>;
    type Error = TransportError;
    type Future =
        Pin<Box<dyn Future<Output = Result<http::Response<ResponseBody>, TransportError>> + Send>>;

    /// Always ready: a call waits for its connection (and a free stream) inside its future,
    /// under its deadline.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        Box::pin(self.clone().call(request))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use http_body_util::Full;
    use tower_service::Service;

    use super::*;

    /// A peer that accepts connections and never answers nor closes: an adapter whose host
    /// vanished. Counts the connections opened to it.
    async fn black_hole() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(socket);
            }
        });
        (addr, accepted)
    }

    async fn call_times_out(connection: &mut AdapterConnection) {
        let request = http::Request::post("/pkg.Service/Method")
            .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
            .expect("request");
        let answer =
            tokio::time::timeout(Duration::from_millis(100), connection.call(request)).await;
        assert!(answer.is_err(), "a black hole never answers");
    }

    async fn accepted_soon(accepted: &AtomicUsize, n: usize) {
        for _ in 0..100 {
            if accepted.load(Ordering::SeqCst) >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), n);
    }

    #[tokio::test]
    async fn calls_share_one_connection_until_it_is_reset() {
        let (addr, accepted) = black_hole().await;
        let mut connection = AdapterConnection::plaintext(addr, Duration::from_secs(1));
        call_times_out(&mut connection).await;
        call_times_out(&mut connection).await;
        accepted_soon(&accepted, 1).await;

        connection.reset();
        call_times_out(&mut connection).await;
        accepted_soon(&accepted, 2).await;
    }

    /// An HTTP/2 peer that refuses each request's stream unprocessed (`refuse`), or drops
    /// the connection once it has received the first request.
    async fn h2_peer(refuse: bool) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let Ok(mut connection) = h2::server::handshake(socket).await else {
                return;
            };
            while let Some(Ok((_, mut respond))) = connection.accept().await {
                if !refuse {
                    // The request reached the adapter, which went away before answering.
                    return;
                }
                respond.send_reset(h2::Reason::REFUSED_STREAM);
            }
        });
        addr
    }

    async fn failed_call(addr: SocketAddr) -> TransportError {
        let connection = AdapterConnection::open_plaintext(addr, Duration::from_secs(1))
            .await
            .expect("connected");
        let request = http::Request::post("/pkg.Service/Method")
            .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
            .expect("request");
        let answer = tokio::time::timeout(Duration::from_secs(5), connection.call(request))
            .await
            .expect("the peer ends the call");
        answer.err().expect("no answer")
    }

    #[tokio::test]
    async fn a_stream_the_adapter_refused_unprocessed_can_be_sent_again() {
        let error = failed_call(h2_peer(true).await).await;
        assert!(error.unsent_on_a_broken_connection(), "{error:?}");
    }

    #[tokio::test]
    async fn a_request_the_adapter_received_is_never_called_unsent() {
        let error = failed_call(h2_peer(false).await).await;
        assert!(!error.unsent_on_a_broken_connection(), "{error:?}");
    }

    #[tokio::test]
    async fn an_address_nothing_listens_on_is_a_transport_error() {
        let (addr, _) = black_hole().await;
        // A port just freed: nothing listens there now.
        let free = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("address")
        };
        assert_ne!(free, addr);
        let error = AdapterConnection::open_plaintext(free, Duration::from_secs(1))
            .await
            .expect_err("refused");
        assert_eq!(error.to_string(), "cannot connect to the adapter");
        // Connecting again at once would fail the same way: not a call to send again.
        assert!(!error.unsent_on_a_broken_connection());
        let cause = std::error::Error::source(&error).expect("the cause");
        assert!(cause.to_string().contains("refused"), "{cause}");
    }
}
