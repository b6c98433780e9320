//! The guard every adapter call goes through: circuit breaker, concurrency limit, deadline,
//! and the metrics of each outcome.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mixer_adapter_api::{AdapterError, ErrorKind};
use prost_types::Any;
use tokio::time::Instant;

use super::RemoteHandler;
use super::session::SentSession;
use crate::metrics::HandlerMetrics;
use crate::transport::{self, AdapterChannel};

impl RemoteHandler {
    /// One call through the breaker, the concurrency limit and the deadline. `f` sends it
    /// with the channel, the `adapter_config` and the time left. It is sent once more, within
    /// the same deadline, when the adapter cannot have acted on it: the adapter answered
    /// NOT_FOUND for the session the call carried (it restarted; a new session is created
    /// first), or the request met a connection found broken before it was written (the
    /// adapter restarted and the old connection is dead). Any other failure, a quota
    /// allocation the adapter may have charged included, is final.
    pub(super) async fn call<T, F, Fut>(&self, call: &'static str, f: F) -> Result<T, AdapterError>
    where
        F: Fn(AdapterChannel, Any, Duration) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let started = Instant::now();
        let Some(admission) = self.breaker.admit() else {
            self.metrics.record(call, "circuit_open", started.elapsed());
            return Err(AdapterError::transient(
                ErrorKind::CircuitOpen,
                format!("adapter of handler {}: circuit open", self.name),
            ));
        };
        let Ok(_permit) = self.limit.try_acquire() else {
            drop(admission);
            self.metrics.record(call, "overloaded", started.elapsed());
            return Err(AdapterError::transient(
                ErrorKind::Overloaded,
                format!(
                    "adapter of handler {}: more than {} calls in flight",
                    self.name, self.options.max_concurrency
                ),
            ));
        };
        self.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
        let _in_flight = InFlight(&self.metrics);
        let deadline = started + self.timeout;
        if let Err(e) = self.transport.ready(&self.name, deadline).await {
            // The adapter was not asked: dropping the admission tells its breaker nothing.
            drop(admission);
            self.metrics.record(call, e.kind.label(), started.elapsed());
            return Err(e);
        }
        let attempts = async {
            let first = self.attempt(&f, deadline).await;
            let Err((status, sent)) = first else {
                return first.map_err(|(s, _)| s);
            };
            let Some(why) = lost(&status, sent) else {
                return Err(status);
            };
            // Counted as an outcome of its own: the call itself is counted once more below.
            self.metrics.record(call, why, started.elapsed());
            tracing::debug!(handler = %self.name, call, error = %status, "{why}; sending the call again");
            self.attempt(&f, deadline).await.map_err(|(s, _)| s)
        };
        let result = match tokio::time::timeout_at(deadline, attempts).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(status)) => Err(transport::call_error(&self.name, &status)),
            Err(_) => {
                // The next call gets a new connection: if the adapter's host vanished
                // without closing this one, every later call would wait on it in vain
                // until TCP gives up, minutes later. Calls already on it finish there.
                self.connection().reset();
                Err(AdapterError::transient(
                    ErrorKind::Timeout,
                    format!(
                        "adapter of handler {} did not answer within {:?}",
                        self.name, self.timeout
                    ),
                ))
            }
        };
        match &result {
            Ok(_) => admission.success(),
            Err(e) if counts_against_breaker(e.kind) => admission.failure(),
            Err(_) => admission.success(),
        }
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.kind.label(),
        };
        self.metrics.record(call, outcome, started.elapsed());
        if let Err(e) = &result {
            tracing::debug!(handler = %self.name, call, error = %e, "adapter call failed");
        }
        result
    }
}

impl RemoteHandler {
    /// One attempt: the session (created if needed), then the call. A failure forgets the
    /// session if the adapter seems to have lost it, and says which session was sent.
    async fn attempt<T, F, Fut>(
        &self,
        f: &F,
        deadline: Instant,
    ) -> Result<T, (tonic::Status, SentSession)>
    where
        F: Fn(AdapterChannel, Any, Duration) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let (config, sent) = self
            .adapter_config(remaining)
            .await
            .map_err(|s| (s, None))?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        match f(self.channel(), config, remaining).await {
            Ok(v) => Ok(v),
            Err(status) => {
                self.maybe_forget_session(&status, sent).await;
                Err((status, sent))
            }
        }
    }
}

/// Why a failed attempt can be sent again, as the outcome label that counts it: the adapter
/// did not know the session it carried, or the request never left on a live connection.
fn lost(status: &tonic::Status, sent: SentSession) -> Option<&'static str> {
    if status.code() == tonic::Code::NotFound && sent.is_some() {
        Some("session_lost")
    } else if transport::unsent(status) {
        Some("connection_lost")
    } else {
        None
    }
}

struct InFlight<'a>(&'a HandlerMetrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether an error says the adapter is unhealthy (as opposed to "alive, but refuses this").
fn counts_against_breaker(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Unavailable
            | ErrorKind::Timeout
            | ErrorKind::InvalidResponse
            | ErrorKind::Internal
            | ErrorKind::Overloaded
    )
}
