//! Paths that are not [`crate::Methods`]: handed to a tonic service (health with its
//! streaming Watch, client-streaming methods, unknown paths), its answer forwarded frame by
//! frame.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use tonic::body::Body as TonicBody;
use tower_service::Service;

use crate::limits::{Event, Events, StreamRefusal};
use crate::{Shared, StreamGuard, deadline};

/// A request's body as the generated services read it: the stream's data frames (window
/// given back as they are read), then its trailers; an error once the body timeout passes.
struct RequestBody {
    recv: h2::RecvStream,
    data_done: bool,
    timeout: Option<BodyTimeout>,
}

/// The body timeout of one fallback request.
struct BodyTimeout {
    deadline: Pin<Box<tokio::time::Sleep>>,
    after: Duration,
    /// A streaming request: the first data ends the timeout.
    first_data_only: bool,
    events: Arc<dyn Events>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Body for RequestBody {
    type Data = Bytes;
    // Boxed so that tonic reads a timeout's `Status` as the answer, and an h2 error as it
    // always did.
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(timeout) = &mut self.timeout
            && timeout.deadline.as_mut().poll(cx).is_ready()
        {
            let status = crate::methods::body_timed_out(timeout.after);
            timeout
                .events
                .event(Event::StreamRefused(StreamRefusal::BodyTimeout));
            self.timeout = None;
            return Poll::Ready(Some(Err(Box::new(status))));
        }
        if !self.data_done {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    if self.timeout.as_ref().is_some_and(|t| t.first_data_only) {
                        self.timeout = None;
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(Box::new(e)))),
                None => self.data_done = true,
            }
        }
        let trailers = ready!(self.recv.poll_trailers(cx));
        self.timeout = None;
        match trailers {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(Box::new(e)))),
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

/// Serves one request with the fallback, within the body timeout (to its first data only
/// when the path's requests stream) and the client's deadline (`grpc-timeout`: past it the
/// service's future or answer is dropped and the call ends DEADLINE_EXCEEDED); `stream`
/// counts it open until the answer is sent.
pub(crate) async fn call<S: Fallback>(
    mut calls: S,
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    shared: Arc<Shared>,
    stream: StreamGuard,
) {
    let _stream = stream;
    let path = request.uri().path().to_string();
    let timeout = match deadline::of(request.headers()) {
        Ok(timeout) => timeout,
        Err(status) => {
            let _ = respond.send_response(status.into_http(), true);
            return;
        }
    };
    let ends = timeout.map(|t| (tokio::time::Instant::now() + t, t));
    let exceeded = || {
        shared.events.event(Event::DeadlineExceeded);
        ends.map(|(_, t)| deadline::exceeded(t))
    };
    let after = shared.limits.body_timeout;
    let timeout = BodyTimeout {
        deadline: Box::pin(tokio::time::sleep(after)),
        after,
        first_data_only: shared.streaming.contains(&path),
        events: shared.events.clone(),
    };
    let request = request.map(|recv| {
        TonicBody::new(RequestBody {
            recv,
            data_done: false,
            timeout: Some(timeout),
        })
    });
    let Ok(()) = std::future::poll_fn(|cx| calls.poll_ready(cx)).await;
    let head_and_first = async {
        let Ok(response) = calls.call(request).await;
        let (parts, mut body) = response.into_parts();
        let first = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        (parts, body, first)
    };
    let Some((parts, mut body, first)) = before(ends, head_and_first).await else {
        if let Some(status) = exceeded() {
            let _ = respond.send_response(status.into_http(), true);
        }
        return;
    };
    let mut body = Pin::new(&mut body);
    // An answer without a body is trailers-only (an error status in its headers, as tonic
    // answers an unknown method): it must end with its HEADERS frame. Strict clients (gRPC
    // core) take headers that do not end the stream for initial metadata and then want
    // trailers, and reject an empty DATA frame ending the stream instead.
    let mut head = http::Response::from_parts(parts, ());
    too_large_is_resource_exhausted(head.headers_mut());
    let Some(first) = first else {
        let _ = respond.send_response(named_unimplemented(head, &path), true);
        return;
    };
    let Ok(mut send) = respond.send_response(head, false) else {
        return;
    };
    let mut next = Some(first);
    loop {
        let frame = match next.take() {
            Some(frame) => Some(frame),
            None => {
                let frame = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx));
                match before(ends, frame).await {
                    Some(frame) => frame,
                    // Answering already: the status goes in the trailers.
                    None => {
                        let mut trailers = http::HeaderMap::new();
                        if let Some(status) = exceeded()
                            && status.add_header(&mut trailers).is_ok()
                        {
                            let _ = send.send_trailers(trailers);
                        }
                        return;
                    }
                }
            }
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
                    if let Ok(mut trailers) = frame.into_trailers() {
                        too_large_is_resource_exhausted(&mut trailers);
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

/// `work`'s output, or `None` when `ends` (the deadline and the timeout it came from) passes
/// first.
async fn before<T>(
    ends: Option<(tokio::time::Instant, Duration)>,
    work: impl Future<Output = T>,
) -> Option<T> {
    match ends {
        Some((at, _)) => tokio::time::timeout_at(at, work).await.ok(),
        None => Some(work.await),
    }
}

/// tonic answers a path no service has, or a method its service lacks, with UNIMPLEMENTED
/// and no message; say which method was asked for, as grpc-go does.
fn named_unimplemented(head: http::Response<()>, path: &str) -> http::Response<()> {
    let unimplemented = head
        .headers()
        .get("grpc-status")
        .is_some_and(|s| s.as_bytes() == b"12");
    if !unimplemented || head.headers().contains_key("grpc-message") {
        return head;
    }
    tonic::Status::unimplemented(format!("unknown method {path}")).into_http()
}

/// tonic refuses a request message over its size limit with OUT_OF_RANGE; gRPC core and
/// grpc-go answer RESOURCE_EXHAUSTED, as the direct methods do, and clients (OTLP exporters)
/// decide on retries by that code.
fn too_large_is_resource_exhausted(fields: &mut http::HeaderMap) {
    const TONIC_TOO_LARGE: &str = "Error,%20decoded%20message%20length%20too%20large";
    let out_of_range = fields
        .get("grpc-status")
        .is_some_and(|s| s.as_bytes() == b"11");
    let too_large = fields
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .is_some_and(|m| m.starts_with(TONIC_TOO_LARGE));
    if out_of_range && too_large {
        fields.insert("grpc-status", http::HeaderValue::from_static("8"));
    }
}
