//! The host imports a plugin may call (`mixer:adapter/host`): structured logging, the
//! time, and counters and histograms exported on the mixer's `/metrics`.

use crate::bindings::mixer::adapter::host::{Host, Level};
use crate::call::CallState;
use crate::metrics::{MAX_LABEL, MAX_MESSAGE, cut};

impl Host for CallState {
    fn log(&mut self, level: Level, message: String, fields: Vec<(String, String)>) {
        let handler: &str = &self.ctx.handler;
        let message = cut(&message, MAX_MESSAGE);
        let fields: Vec<String> = fields
            .iter()
            .take(32)
            .map(|(k, v)| format!("{}={}", cut(k, MAX_LABEL), cut(v, MAX_LABEL)))
            .collect();
        let fields = fields.join(" ");
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
