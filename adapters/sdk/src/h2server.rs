//! Serving gRPC straight over the `h2` crate.
//!
//! Why not tonic's server: it runs every call through hyper's dispatcher and the response
//! body through a pipe of its own, which on a small virtual machine costs a few tens of
//! microseconds per call, and an adapter call is on the path of every check that reaches it.
//! Here a call's request body is handed to the generated service as it arrives and its whole
//! answer (headers, message, trailers) is queued on the stream before the connection task
//! writes, so it leaves in one write.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use http_body::{Body, Frame};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::Status;
use tonic::body::Body as TonicBody;
use tower_service::Service;

/// A request's body as the generated services read it: the stream's data frames (window
/// given back as they are read), then its trailers.
pub(crate) struct RequestBody {
    recv: h2::RecvStream,
    data_done: bool,
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        if !self.data_done {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => self.data_done = true,
            }
        }
        match ready!(self.recv.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.data_done && self.recv.is_end_stream()
    }
}

/// What serves one call: the routes behind the token check.
pub(crate) trait Calls:
    Service<
        http::Request<TonicBody>,
        Response = http::Response<TonicBody>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S> Calls for S where
    S: Service<
            http::Request<TonicBody>,
            Response = http::Response<TonicBody>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

type Answer = Pin<Box<dyn Future<Output = Result<Bytes, Status>> + Send>>;

/// A unary method served without tonic's layers: the request message's bytes in, the
/// answer message's bytes out.
pub(crate) type Unary = Arc<dyn Fn(Bytes) -> Answer + Send + Sync>;

/// Wraps a generated service method as a [`Unary`].
pub(crate) fn unary<S, Req, Resp, F, Fut>(service: S, method: F) -> Unary
where
    S: Clone + Send + Sync + 'static,
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + 'static,
    F: Fn(S, tonic::Request<Req>) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = Result<tonic::Response<Resp>, Status>> + Send + 'static,
{
    Arc::new(move |message: Bytes| -> Answer {
        let request = match Req::decode(message) {
            Ok(r) => r,
            Err(e) => {
                let status = Status::internal(format!("the request message does not decode: {e}"));
                return Box::pin(std::future::ready(Err(status)));
            }
        };
        let answer = method(service.clone(), tonic::Request::new(request));
        Box::pin(async move { Ok(framed(answer.await?.get_ref())) })
    })
}

/// A message as gRPC frames it: uncompressed flag, big-endian length, the message.
fn framed(message: &impl prost::Message) -> Bytes {
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    // The buffer was sized for the message, so encoding cannot run out of room.
    let _ = message.encode(&mut buf);
    buf.freeze()
}

/// The same cap on a request message as tonic's servers have by default.
const MAX_MESSAGE: usize = 4 << 20;

/// The unary methods served directly (full path, `/package.Service/Method`), and the token
/// every call but health must carry.
#[derive(Clone, Default)]
pub(crate) struct Direct {
    pub(crate) methods: HashMap<String, Unary>,
    pub(crate) token: Option<Arc<crate::token::RequiredToken>>,
}

/// How long connections may finish their calls once shutdown begins.
const DRAIN: Duration = Duration::from_secs(10);

/// Accepts connections on `listener` until `shutdown`, then lets the open ones finish their
/// calls (at most [`DRAIN`]).
pub(crate) async fn serve<S: Calls>(
    listener: TcpListener,
    direct: Direct,
    calls: S,
    tls: Option<tokio_rustls::TlsAcceptor>,
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
                    // A connection that died in the backlog, or no file descriptors left
                    // for a moment: neither should end the server.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                };
                // Without TCP_NODELAY an answer could wait for the mixer's delayed ACK.
                let _ = tcp.set_nodelay(true);
                let (calls, stopped, tls) = (calls.clone(), stopped.clone(), tls.clone());
                let direct = direct.clone();
                connections.spawn(async move {
                    let io: Box<dyn Io> = match tls {
                        None => Box::new(tcp),
                        Some(acceptor) => match acceptor.accept(tcp).await {
                            Ok(io) => Box::new(io),
                            // A failed handshake (no client certificate under mutual TLS,
                            // an unknown CA) ends only this connection.
                            Err(_) => return,
                        },
                    };
                    connection(io, direct, calls, stopped).await;
                });
            }
        }
        while connections.try_join_next().is_some() {}
    }
    let _ = stop.send(true);
    let _ = tokio::time::timeout(DRAIN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    Ok(())
}

/// A connection's byte stream, plaintext or TLS.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

async fn connection<S: Calls>(
    io: Box<dyn Io>,
    direct: Direct,
    calls: S,
    mut stopped: watch::Receiver<bool>,
) {
    let mut builder = h2::server::Builder::new();
    // The same windows as the mixer's client: a report batch is sent without waiting for
    // WINDOW_UPDATEs.
    builder
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 20)
        .max_concurrent_streams(1024);
    let Ok(mut h2) = builder.handshake::<_, Bytes>(io).await else {
        return;
    };
    let mut closing = *stopped.borrow();
    if closing {
        h2.graceful_shutdown();
    }
    loop {
        tokio::select! {
            next = h2.accept() => match next {
                Some(Ok((request, respond))) => {
                    match direct.methods.get(request.uri().path()) {
                        Some(method) => {
                            let call = direct_call(method.clone(), direct.token.clone(), request, respond);
                            tokio::spawn(call);
                        }
                        None => {
                            tokio::spawn(call(calls.clone(), request, respond));
                        }
                    }
                }
                Some(Err(_)) | None => return,
            },
            changed = stopped.changed(), if !closing => {
                if changed.is_err() || *stopped.borrow() {
                    closing = true;
                    h2.graceful_shutdown();
                }
            }
        }
    }
}

async fn call<S: Calls>(
    mut calls: S,
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let request = request.map(|recv| {
        TonicBody::new(RequestBody {
            recv,
            data_done: false,
        })
    });
    let Ok(()) = std::future::poll_fn(|cx| calls.poll_ready(cx)).await;
    let Ok(response) = calls.call(request).await;
    let (parts, mut body) = response.into_parts();
    let Ok(mut send) = respond.send_response(http::Response::from_parts(parts, ()), false) else {
        return;
    };
    let mut body = Pin::new(&mut body);
    loop {
        match std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            None => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    if send.send_data(data, false).is_err() {
                        return;
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        let _ = send.send_trailers(trailers);
                    }
                    return;
                }
            },
            Some(Err(_)) => {
                send.send_reset(h2::Reason::INTERNAL_ERROR);
                return;
            }
        }
    }
}

/// A call to a [`Direct`] method: the token, the one request message, the method, and the
/// answer queued whole (headers, message, trailers) so it leaves in one write.
async fn direct_call(
    method: Unary,
    token: Option<Arc<crate::token::RequiredToken>>,
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let (parts, mut recv) = request.into_parts();
    let answer = match token {
        Some(required) if !required.accepts(&parts.headers) => Err(crate::token::refused()),
        _ => match request_message(&parts.headers, &mut recv).await {
            Ok(message) => method(message).await,
            Err(status) => Err(status),
        },
    };
    match answer {
        Ok(message) => {
            let head = http::Response::builder()
                .header(http::header::CONTENT_TYPE, "application/grpc")
                .body(())
                .unwrap_or_default();
            let Ok(mut send) = respond.send_response(head, false) else {
                return;
            };
            if send.send_data(message, false).is_ok() {
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                let _ = send.send_trailers(trailers);
            }
        }
        // Trailers-only: the status in the one HEADERS frame, as gRPC defines for errors.
        Err(status) => {
            let _ = respond.send_response(status.into_http::<()>(), true);
        }
    }
}

/// The one message of a unary request, unframed.
async fn request_message(
    headers: &http::HeaderMap,
    recv: &mut h2::RecvStream,
) -> Result<Bytes, Status> {
    if let Some(encoding) = headers.get("grpc-encoding")
        && encoding != "identity"
    {
        return Err(Status::unimplemented(format!(
            "request compression {encoding:?} is not supported"
        )));
    }
    let mut body = BytesMut::new();
    while let Some(data) = recv.data().await {
        let data = data.map_err(|e| Status::cancelled(format!("the request broke off: {e}")))?;
        let _ = recv.flow_control().release_capacity(data.len());
        if body.len() + data.len() > MAX_MESSAGE + 5 {
            return Err(Status::out_of_range(format!(
                "the request message is larger than {MAX_MESSAGE} bytes"
            )));
        }
        body.extend_from_slice(&data);
    }
    unframe(body.freeze())
}

/// The message inside a unary request's body: exactly one uncompressed gRPC frame.
fn unframe(body: Bytes) -> Result<Bytes, Status> {
    let Some((&[compressed, a, b, c, d], message)) = body.split_first_chunk::<5>() else {
        return Err(Status::internal("the request carries no message"));
    };
    if compressed != 0 {
        return Err(Status::unimplemented(
            "compressed request messages are not supported",
        ));
    }
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if message.len() != len {
        return Err(Status::internal(format!(
            "the request carries {} bytes after a message header announcing {len}",
            message.len()
        )));
    }
    Ok(body.slice(5..))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tonic::Code;

    fn frame(flag: u8, len: u32, message: &[u8]) -> Bytes {
        let mut b = vec![flag];
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(message);
        Bytes::from(b)
    }

    #[test]
    fn a_framed_message_comes_back_whole() {
        let message = prost_types::Duration {
            seconds: 7,
            nanos: 9,
        };
        let body = framed(&message);
        assert_eq!(&body[..5], &[0, 0, 0, 0, 4]);
        let inner = unframe(body).expect("one frame");
        assert_eq!(
            <prost_types::Duration as prost::Message>::decode(inner).expect("decodes"),
            message
        );
    }

    #[test]
    fn bad_frames_get_a_status_that_says_why() {
        let cases = [
            (Bytes::new(), Code::Internal, "no message"),
            (Bytes::from_static(&[0, 0, 0]), Code::Internal, "no message"),
            (frame(1, 2, b"ab"), Code::Unimplemented, "compressed"),
            (frame(0, 10, b"ab"), Code::Internal, "announcing 10"),
            (frame(0, 1, b"ab"), Code::Internal, "carries 2 bytes"),
        ];
        for (body, code, says) in cases {
            let status = unframe(body.clone()).expect_err("refused");
            assert_eq!(status.code(), code, "{body:?}");
            assert!(status.message().contains(says), "{body:?}: {status:?}");
        }
        assert_eq!(
            unframe(frame(0, 0, b"")).expect("an empty message"),
            Bytes::new()
        );
    }

    proptest! {
        #[test]
        fn any_body_is_unframed_or_refused_without_panicking(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let body = Bytes::from(body);
            if let Ok(message) = unframe(body.clone()) {
                prop_assert_eq!(body[0], 0);
                prop_assert_eq!(message.len() + 5, body.len());
            }
        }

        #[test]
        fn framing_then_unframing_is_the_identity(value in any::<i64>(), nanos in any::<i32>()) {
            let message = prost_types::Duration { seconds: value, nanos };
            let inner = unframe(framed(&message)).expect("one frame");
            prop_assert_eq!(<prost_types::Duration as prost::Message>::decode(inner).expect("decodes"), message);
        }
    }
}
