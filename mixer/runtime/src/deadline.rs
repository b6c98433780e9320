//! The per-handler deadline: the dispatcher's bound on one check or quota call. A call
//! still unanswered at its deadline is dropped, which cancels it, and counts as the
//! handler's error (kind `Timeout`, retryable): its fail policy decides, as for any other
//! failure, so a handler that hangs cannot hold a request (and the proxy waiting on it) for
//! ever.
//!
//! Built-in handlers get [`RuntimeOptions::handler_timeout`](crate::RuntimeOptions); an
//! out-of-process handler none here, since its transport already ends each call at the
//! connection's timeout (sent to the adapter as `grpc-timeout`) and says so in its error.

use std::time::Duration;

use mixer_adapter_api::{AdapterError, ErrorKind};

/// Unless `--handler-timeout` says otherwise: ten seconds. A backstop for a handler that hangs,
/// not the bound a proxy sees: proxies give their calls far shorter deadlines (sent as
/// `grpc-timeout`, which the mixer's server honours, cancelling the handler calls), and
/// adapters bound their own backend calls (redisquota's `callTimeout`, at most 10 s, which
/// this must not cut short).
pub const DEFAULT_HANDLER_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `call` within `deadline` if there is one; past it the call is dropped and the
/// answer is a `Timeout` error.
pub(crate) async fn within<T>(
    deadline: Option<Duration>,
    call: impl Future<Output = Result<T, AdapterError>>,
) -> Result<T, AdapterError> {
    match deadline {
        // A call answered at its first poll (nearly every built-in one) never registers the
        // timer.
        Some(after) => tokio::time::timeout(after, call)
            .await
            .unwrap_or_else(|_| Err(timed_out(after))),
        None => call.await,
    }
}

/// The error of a call that did not answer within `after`.
pub(crate) fn timed_out(after: Duration) -> AdapterError {
    AdapterError::transient(
        ErrorKind::Timeout,
        format!("no answer within the handler deadline ({after:?})"),
    )
}
