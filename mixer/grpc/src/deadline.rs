//! The client's deadline: the `grpc-timeout` request header. A call still unanswered when
//! it passes is answered DEADLINE_EXCEEDED and its method's future is dropped, which
//! cancels whatever the method was waiting for (handler calls, a backend's answer): nobody
//! is left to read that answer.

use std::time::Duration;

use tonic::Status;

use crate::limits::{Event, Events};

/// The timeout a request's `grpc-timeout` header gives, `None` without one.
///
/// The format is the protocol's ("gRPC over HTTP2", `doc/PROTOCOL-HTTP2.md` in grpc/grpc):
/// `TimeoutValue TimeoutUnit`, a positive integer of at most 8 ASCII digits followed by one
/// of `H` (hours), `M` (minutes), `S` (seconds), `m` (milliseconds), `u` (microseconds), `n`
/// (nanoseconds). A malformed value is refused with INTERNAL "malformed grpc-timeout", as
/// grpc-go's server answers (`internal/transport/http2_server.go`), rather than ignored as
/// tonic's server does: a client that asked for a deadline should learn it was not
/// understood.
pub(crate) fn of(headers: &http::HeaderMap) -> Result<Option<Duration>, Status> {
    let Some(value) = headers.get("grpc-timeout") else {
        return Ok(None);
    };
    parse(value.as_bytes()).map(Some).ok_or_else(|| {
        Status::internal(format!(
            "malformed grpc-timeout {:?}: want at most 8 digits and a unit (H, M, S, m, u, n)",
            String::from_utf8_lossy(value.as_bytes())
        ))
    })
}

/// `TimeoutValue TimeoutUnit`; `None` for anything else.
fn parse(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // At most 8 digits: no overflow below, even in hours.
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The answer to a call whose deadline passed first.
pub(crate) fn exceeded(timeout: Duration) -> Status {
    Status::deadline_exceeded(format!(
        "the call's deadline (grpc-timeout {timeout:?}) passed before it was answered"
    ))
}

/// Runs `call` within `timeout` if there is one; past it the call is dropped (cancelled),
/// `events` hears of it and the answer is [`exceeded`].
pub(crate) async fn within<T>(
    timeout: Option<Duration>,
    call: impl Future<Output = Result<T, Status>>,
    events: &dyn Events,
) -> Result<T, Status> {
    match timeout {
        // A call answered at its first poll never registers the timer.
        Some(after) => tokio::time::timeout(after, call).await.unwrap_or_else(|_| {
            events.event(Event::DeadlineExceeded);
            Err(exceeded(after))
        }),
        None => call.await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_unit_of_the_protocol_is_read() {
        let cases = [
            ("20m", Duration::from_millis(20)),
            ("1H", Duration::from_secs(3600)),
            ("2M", Duration::from_secs(120)),
            ("3S", Duration::from_secs(3)),
            ("30000000u", Duration::from_secs(30)),
            ("7n", Duration::from_nanos(7)),
            ("99999999H", Duration::from_secs(99_999_999 * 3600)),
            ("0m", Duration::ZERO),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text.as_bytes()), Some(expected), "{text}");
        }
    }

    #[test]
    fn malformed_values_are_refused_with_internal() {
        for text in [
            "",
            "m",
            "20",
            "20x",
            "123456789m",
            "-1m",
            "1.5S",
            " 20m",
            "20 m",
        ] {
            assert_eq!(parse(text.as_bytes()), None, "{text:?}");
        }
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-timeout", http::HeaderValue::from_static("soon"));
        let status = of(&headers).expect_err("refused");
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(
            status.message().contains("malformed grpc-timeout"),
            "{status:?}"
        );
        assert_eq!(of(&http::HeaderMap::new()).expect("no header"), None);
    }

    proptest! {
        #[test]
        fn any_value_parses_or_is_refused_without_panicking(value in proptest::collection::vec(any::<u8>(), 0..12)) {
            let _ = parse(&value);
        }
    }
}
