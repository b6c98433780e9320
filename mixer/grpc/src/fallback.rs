//! Paths that are not [`crate::Methods`]: handed to a tonic service (health with its
//! streaming Watch, client-streaming methods, unknown paths), its answer forwarded frame by
//! frame.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame};
use tonic::body::Body as TonicBody;
use tower_service::Service;

/// A request's body as the generated services read it: the stream's data frames (window
/// given back as they are read), then its trailers.
struct RequestBody {
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

/// The tonic service (routes, usually) that serves every path not among the methods.
pub trait Fallback:
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

impl<S> Fallback for S where
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

pub(crate) async fn call<S: Fallback>(
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
    let mut body = Pin::new(&mut body);
    let first = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await;
    // An answer without a body is trailers-only (an error status in its headers, as tonic
    // answers an unknown method): it must end with its HEADERS frame. Strict clients (gRPC
    // core) take headers that do not end the stream for initial metadata and then want
    // trailers, and reject an empty DATA frame ending the stream instead.
    let head = http::Response::from_parts(parts, ());
    let Some(first) = first else {
        let _ = respond.send_response(head, true);
        return;
    };
    let Ok(mut send) = respond.send_response(head, false) else {
        return;
    };
    let mut next = Some(first);
    loop {
        let frame = match next.take() {
            Some(frame) => Some(frame),
            None => std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await,
        };
        match frame {
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
