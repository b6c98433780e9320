//! The host imports a plugin may call (`mixer:adapter/host`): structured logging, the
//! time, and counters and histograms exported on the mixer's `/metrics`.

use crate::bindings::mixer::adapter::host::{Host, Level};
use crate::call::{CallState, LOG_BYTES_PER_CALL, LOG_LINES_PER_CALL};
use crate::metrics::{MAX_LABEL, MAX_MESSAGE, cut};

impl CallState {
    /// Whether a line of `bytes` fits the call's budget and the handler's rate; a line that
    /// does not is counted as dropped.
    fn may_log(&mut self, bytes: usize) -> bool {
        let fits_call = self.log.lines < LOG_LINES_PER_CALL
            && self.log.bytes.saturating_add(bytes) <= LOG_BYTES_PER_CALL;
        // The handler's bucket is only asked while the call has budget left, so a call
        // spinning on `log` does not drain the rate of the handler's other calls.
        let admitted = fits_call
            && self
                .ctx
                .log_rate
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(std::time::Instant::now());
        if admitted {
            self.log.lines += 1;
            self.log.bytes = self.log.bytes.saturating_add(bytes);
        } else {
            self.ctx.metrics.log_dropped(&self.ctx.handler);
        }
        admitted
    }
}

impl Host for CallState {
    fn log(&mut self, level: Level, message: String, fields: Vec<(String, String)>) {
        let message = cut(&message, MAX_MESSAGE);
        let fields: Vec<String> = fields
            .iter()
            .take(32)
            .map(|(k, v)| format!("{}={}", cut(k, MAX_LABEL), cut(v, MAX_LABEL)))
            .collect();
        let fields = fields.join(" ");
        if !self.may_log(message.len() + fields.len()) {
            return;
        }
        let handler: &str = &self.ctx.handler;
        match level {
            Level::Debug => {
                tracing::debug!(target: "mixer_wasm::plugin", handler, %fields, "{message}")
            }
            Level::Info => {
                tracing::info!(target: "mixer_wasm::plugin", handler, %fields, "{message}")
            }
            Level::Warn => {
                tracing::warn!(target: "mixer_wasm::plugin", handler, %fields, "{message}")
            }
            Level::Error => {
                tracing::error!(target: "mixer_wasm::plugin", handler, %fields, "{message}")
            }
        }
    }

    fn now(&mut self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }

    fn counter_add(&mut self, name: String, key: String, delta: u64) {
        self.ctx
            .metrics
            .count(&self.ctx.handler, &name, &key, delta);
    }

    fn histogram_observe(&mut self, name: String, value: f64) {
        self.ctx.metrics.observe(&self.ctx.handler, &name, value);
    }
}

/// The previous world's host interface: the same calls, its own `level` type.
impl crate::bindings::v0_1::mixer::adapter::host::Host for CallState {
    fn log(
        &mut self,
        level: crate::bindings::v0_1::mixer::adapter::host::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) {
        use crate::bindings::v0_1::mixer::adapter::host::Level as Previous;
        let level = match level {
            Previous::Debug => Level::Debug,
            Previous::Info => Level::Info,
            Previous::Warn => Level::Warn,
            Previous::Error => Level::Error,
        };
        Host::log(self, level, message, fields);
    }

    fn now(&mut self) -> i64 {
        Host::now(self)
    }

    fn counter_add(&mut self, name: String, key: String, delta: u64) {
        Host::counter_add(self, name, key, delta);
    }

    fn histogram_observe(&mut self, name: String, value: f64) {
        Host::histogram_observe(self, name, value);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::call::{CallContext, LOG_LINES_BURST, LogBudget, MemoryCap};
    use crate::metrics::WasmMetrics;

    fn call(ctx: &Arc<CallContext>) -> CallState {
        CallState {
            cap: MemoryCap {
                max_bytes: 0,
                refused: false,
            },
            ctx: ctx.clone(),
            log: LogBudget::default(),
        }
    }

    fn context() -> Arc<CallContext> {
        Arc::new(CallContext::new(
            Arc::from("h"),
            Arc::new(WasmMetrics::new()),
        ))
    }

    #[test]
    fn a_call_writes_at_most_its_lines() {
        let ctx = context();
        let mut state = call(&ctx);
        let written = (0..100).filter(|_| state.may_log(10)).count();
        assert_eq!(written, LOG_LINES_PER_CALL as usize);
        assert_eq!(ctx.metrics.log_lines_dropped("h"), 100 - written as u64);
    }

    #[test]
    fn a_call_writes_at_most_its_bytes() {
        let ctx = context();
        let mut state = call(&ctx);
        let line = LOG_BYTES_PER_CALL / 3;
        let written = (0..10).filter(|_| state.may_log(line)).count();
        assert_eq!(written, 3);
        assert_eq!(ctx.metrics.log_lines_dropped("h"), 7);
    }

    #[test]
    fn the_handlers_calls_share_its_rate() {
        let ctx = context();
        // Calls within the same instant: the burst, then nothing until it refills.
        let written: usize = (0..100)
            .map(|_| {
                let mut state = call(&ctx);
                (0..LOG_LINES_PER_CALL)
                    .filter(|_| state.may_log(10))
                    .count()
            })
            .sum();
        assert!(written <= LOG_LINES_BURST as usize + 1, "{written}");
        assert!(written >= LOG_LINES_BURST as usize, "{written}");
    }
}
