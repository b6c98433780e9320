//! Settings of the out-of-process client, the same for every remote handler of a mixer.

use std::time::Duration;

use crate::breaker::BreakerOptions;

/// How remote handlers call their adapters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OopOptions {
    /// Deadline of one call when the handler's `connection.timeout` does not say: one
    /// second (a check waits for it, so it must stay well under the proxy's own timeout).
    pub default_timeout: Duration,
    /// Deadline of `InfrastructureBackend.Validate` at config load (connecting included).
    pub validate_timeout: Duration,
    /// Calls in flight per handler; more fail at once with `Overloaded`.
    pub max_concurrency: usize,
    /// The circuit breaker.
    pub breaker: BreakerOptions,
    /// Attempts per report batch (first try included); checks and quota get one.
    pub report_attempts: u32,
    /// Wait before the first retry of a report batch; doubled for each further one.
    pub report_backoff: Duration,
    /// Ask for a session (`CreateSession`) and send its id instead of the params.
    pub sessions: bool,
    /// Ask the adapter, whenever config loads, which templates it serves (gRPC server
    /// reflection) and to validate its params (`InfrastructureBackend.Validate`); off, only
    /// an `adapter` document says what it serves.
    pub validate: bool,
}

impl Default for OopOptions {
    fn default() -> OopOptions {
        OopOptions {
            default_timeout: Duration::from_secs(1),
            validate_timeout: Duration::from_secs(2),
            max_concurrency: 256,
            breaker: BreakerOptions::default(),
            report_attempts: 3,
            report_backoff: Duration::from_millis(100),
            sessions: true,
            validate: true,
        }
    }
}
