//! Unary methods served without tonic's layers: the one request message unframed and
//! decoded, the generated trait method called, the answer framed and queued whole (headers,
//! message, trailers) so that it leaves in one write.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tonic::Status;

use crate::limits::{Charge, Event, StreamRefusal};
use crate::{Shared, deadline};

pub(crate) type Answer = Pin<Box<dyn Future<Output = Result<Bytes, Status>> + Send>>;

/// A unary method served without tonic's layers: the request message's bytes in, the
/// answer message's bytes out.
pub type Unary = Arc<dyn Fn(Bytes) -> Answer + Send + Sync>;

/// Wraps a generated service method as a [`Unary`].
pub fn unary<S, Req, Resp, F, Fut>(service: S, method: F) -> Unary
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
pub fn framed(message: &impl prost::Message) -> Bytes {
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

/// Checks a call's headers before its method runs (a token, say); an error status is the
/// answer.
pub type Guard = Arc<dyn Fn(&http::HeaderMap) -> Result<(), Status> + Send + Sync>;

/// The unary methods served directly, by full path (`/package.Service/Method`).
#[derive(Clone, Default)]
pub struct Methods {
    methods: HashMap<String, Unary>,
    guard: Option<Guard>,
}

impl Methods {
    /// No methods: every call goes to the fallback.
    pub fn new() -> Methods {
        Methods::default()
    }

    /// Serves `path` with `method` (see [`unary`]).
    pub fn add(&mut self, path: impl Into<String>, method: Unary) {
        self.methods.insert(path.into(), method);
    }

    /// Runs `guard` on every call to these methods before the method.
    pub fn guard(mut self, guard: Guard) -> Methods {
        self.guard = Some(guard);
        self
    }

    /// The paths served.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.methods.keys().map(String::as_str)
    }

    pub(crate) fn get(&self, path: &str) -> Option<(Unary, Option<Guard>)> {
        self.methods
            .get(path)
            .map(|m| (m.clone(), self.guard.clone()))
    }
}

/// A call to one of the [`Methods`]: the guard, the one request message (within the body
/// timeout), the method, and the answer queued whole (headers, message, trailers) so it
/// leaves in one write. All of it runs within the client's deadline (`grpc-timeout`, see
/// [`crate::deadline`]): past it the method's future is dropped, cancelling what it waits
/// for, and the answer is DEADLINE_EXCEEDED.
pub(crate) async fn call(
    method: Unary,
    guard: Option<Guard>,
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    shared: &Shared,
    charge: &mut Charge,
) {
    let (parts, mut recv) = request.into_parts();
    let body_timeout = shared.limits.body_timeout;
    let answer = match (
        guard.map(|g| g(&parts.headers)),
        deadline::of(&parts.headers),
    ) {
        (Some(Err(status)), _) | (_, Err(status)) => Err(status),
        (_, Ok(timeout)) => {
            let answer = async {
                let read = request_message(&parts.headers, &mut recv, charge, &*shared.events);
                match tokio::time::timeout(body_timeout, read).await {
                    Ok(Ok(message)) => method(message).await,
                    Ok(Err(status)) => Err(status),
                    Err(_) => {
                        shared
                            .events
                            .event(Event::StreamRefused(StreamRefusal::BodyTimeout));
                        Err(body_timed_out(body_timeout))
                    }
                }
            };
            deadline::within(timeout, answer, &*shared.events).await
        }
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
        // A request still open is then reset (its receiving half dropped), which frees it.
        Err(status) => {
            let _ = respond.send_response(status.into_http::<()>(), true);
        }
    }
}

/// The status of a stream whose request body did not arrive within the body timeout.
pub(crate) fn body_timed_out(timeout: Duration) -> Status {
    Status::deadline_exceeded(format!(
        "the request body did not arrive within {timeout:?}"
    ))
}

/// The one message of a unary request, unframed; its bytes charged to the listener's
/// request budget until the call ends.
async fn request_message(
    headers: &http::HeaderMap,
    recv: &mut h2::RecvStream,
    charge: &mut Charge,
    events: &dyn crate::limits::Events,
) -> Result<Bytes, Status> {
    if let Some(encoding) = headers.get("grpc-encoding")
        && encoding != "identity"
    {
        return Err(Status::unimplemented(format!(
            "request compression {encoding:?} is not supported"
        )));
    }
    // A request of one DATA frame (nearly all of them) is used as it came; only a message
    // split over several frames is copied together.
    let mut first: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    let mut len = 0;
    while let Some(data) = recv.data().await {
        let data = data.map_err(|e| Status::cancelled(format!("the request broke off: {e}")))?;
        if !charge.grow(data.len()) {
            events.event(Event::StreamRefused(StreamRefusal::RequestBudget));
            return Err(crate::limits::over_budget(charge.budget()));
        }
        let _ = recv.flow_control().release_capacity(data.len());
        len += data.len();
        match (&mut joined, first.take()) {
            (Some(all), _) => all.extend_from_slice(&data),
            (None, None) => first = Some(data),
            (None, Some(earlier)) => {
                let mut all = BytesMut::with_capacity(earlier.len() + data.len());
                all.extend_from_slice(&earlier);
                all.extend_from_slice(&data);
                joined = Some(all);
            }
        }
        // The length its frame announces, once known, refuses a message too large before it
        // is all read; the bytes read so far bound what a frame that lies can make us hold.
        let read = joined.as_deref().or(first.as_deref()).unwrap_or_default();
        let announced = read
            .get(1..5)
            .map_or(0, |l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize);
        if announced.max(len.saturating_sub(5)) > MAX_MESSAGE {
            return Err(too_large(announced.max(len.saturating_sub(5))));
        }
    }
    unframe(match joined {
        Some(all) => all.freeze(),
        None => first.unwrap_or_default(),
    })
}

/// RESOURCE_EXHAUSTED, with gRPC core's and grpc-go's wording, as they answer a message
/// over their receive limit.
fn too_large(len: usize) -> Status {
    Status::resource_exhausted(format!(
        "received message larger than max ({len} vs. {MAX_MESSAGE})"
    ))
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
