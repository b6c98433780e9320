//! One call's store data: who is calling (for the host imports' logs and metrics), the
//! memory cap that bounds it, and what it may still write to the log.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::ResourceLimiter;

use crate::metrics::WasmMetrics;

/// Who is calling, for the host imports' logs and metrics.
pub(crate) struct CallContext {
    pub(crate) handler: Arc<str>,
    pub(crate) metrics: Arc<WasmMetrics>,
    /// The handler's log lines, shared by all its calls.
    pub(crate) log_rate: Mutex<LogRate>,
}

impl CallContext {
    pub(crate) fn new(handler: Arc<str>, metrics: Arc<WasmMetrics>) -> CallContext {
        CallContext {
            handler,
            metrics,
            log_rate: Mutex::new(LogRate::new(Instant::now())),
        }
    }
}

/// Log lines one call may write: a plugin calling `log` in a loop until its deadline wrote
/// 41 MB in one check (issue #32) before these caps.
pub(crate) const LOG_LINES_PER_CALL: u32 = 16;
/// Log bytes (messages and fields) one call may write.
pub(crate) const LOG_BYTES_PER_CALL: usize = 16 << 10;
/// Log lines a handler may write per second, across all its calls, in the long run.
pub(crate) const LOG_LINES_PER_SECOND: f64 = 20.0;
/// Log lines a handler may write at once after being quiet.
pub(crate) const LOG_LINES_BURST: f64 = 100.0;

/// A token bucket of log lines: [`LOG_LINES_BURST`] deep, refilled at
/// [`LOG_LINES_PER_SECOND`].
pub(crate) struct LogRate {
    tokens: f64,
    refilled: Instant,
}

impl LogRate {
    pub(crate) fn new(now: Instant) -> LogRate {
        LogRate {
            tokens: LOG_LINES_BURST,
            refilled: now,
        }
    }

    /// Whether one more line may be written at `now` (and if so, it is taken).
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * LOG_LINES_PER_SECOND).min(LOG_LINES_BURST);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What one call has written to the log so far.
#[derive(Default)]
pub(crate) struct LogBudget {
    pub(crate) lines: u32,
    pub(crate) bytes: usize,
}

/// The data of one call's store.
pub(crate) struct CallState {
    pub(crate) cap: MemoryCap,
    pub(crate) ctx: Arc<CallContext>,
    pub(crate) log: LogBudget,
}

/// The memory cap, remembering whether it refused a growth so that the trap that follows
/// (Rust aborts on a failed allocation) is counted as what it is.
pub(crate) struct MemoryCap {
    pub(crate) max_bytes: usize,
    pub(crate) refused: bool,
}

/// Table elements an instance may have; generous for any wit-bindgen component.
const MAX_TABLE_ELEMENTS: usize = 100_000;

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.refused = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_log_rate_allows_a_burst_then_its_rate() {
        let start = Instant::now();
        let mut rate = LogRate::new(start);
        let burst = (0..1000).filter(|_| rate.take(start)).count();
        assert_eq!(burst, LOG_LINES_BURST as usize);
        // One second later: one second's worth, no more.
        let later = start + Duration::from_secs(1);
        let refilled = (0..1000).filter(|_| rate.take(later)).count();
        assert_eq!(refilled, LOG_LINES_PER_SECOND as usize);
    }
}
