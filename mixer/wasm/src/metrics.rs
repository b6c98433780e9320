//! The host's metrics and the plugin-facing imports that feed them, rendered through
//! `Handler::as_exposition` on the mixer's `/metrics`:
//!
//! - `mixer_wasm_plugin_faults_total{handler,kind}`: calls stopped by a trap, the deadline,
//!   the memory cap, the fuel, or no instance to be had;
//! - `mixer_wasm_plugin_log_lines_dropped_total{handler}`: plugin log lines not written, over
//!   the per-call or the per-handler cap;
//! - `mixer_wasm_plugin_counter_total{handler,name,key}`: what plugins count (`counter-add`);
//! - `mixer_wasm_plugin_histogram{handler,name}`: what plugins measure (`histogram-observe`);
//! - `mixer_wasm_host_pool_instances` and `mixer_wasm_host_epoch_tick_seconds`: how the
//!   engine was set up (`mixer serve --wasm-instances`, `--wasm-epoch-tick`); the pool is 0
//!   when instances are allocated on demand.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry,
};

use crate::fault::FaultKind;

/// Series a handler's plugin may create through the host imports; beyond it new names or
/// keys are dropped (and logged), so that a plugin counting by request id cannot exhaust
/// the mixer's memory or Prometheus.
const MAX_SERIES_PER_HANDLER: usize = 1000;
/// Longest name, key or log message a plugin may pass; longer ones are cut.
pub(crate) const MAX_LABEL: usize = 128;
pub(crate) const MAX_MESSAGE: usize = 4096;

/// Metrics of every Wasm handler of a host, in one registry so each family is written once.
pub struct WasmMetrics {
    registry: Registry,
    faults: IntCounterVec,
    log_dropped: IntCounterVec,
    counters: IntCounterVec,
    histograms: HistogramVec,
    pool_instances: IntGauge,
    epoch_tick: Gauge,
    /// Series made through the host imports, and how many per handler.
    series: Mutex<(std::collections::HashSet<String>, HashMap<String, usize>)>,
}

impl WasmMetrics {
    pub(crate) fn new() -> WasmMetrics {
        let registry = Registry::new();
        let faults = IntCounterVec::new(
            Opts::new(
                "mixer_wasm_plugin_faults_total",
                "Wasm plugin calls stopped by a trap, the deadline, the memory cap, the fuel or no instance.",
            ),
            &["handler", "kind"],
        )
        .expect("valid metric");
        let log_dropped = IntCounterVec::new(
            Opts::new(
                "mixer_wasm_plugin_log_lines_dropped_total",
                "Wasm plugin log lines not written: over the per-call or the per-handler cap.",
            ),
            &["handler"],
        )
        .expect("valid metric");
        let counters = IntCounterVec::new(
            Opts::new(
                "mixer_wasm_plugin_counter_total",
                "Counters bumped by Wasm plugins (counter-add).",
            ),
            &["handler", "name", "key"],
        )
        .expect("valid metric");
        let histograms = HistogramVec::new(
            HistogramOpts::new(
                "mixer_wasm_plugin_histogram",
                "Values recorded by Wasm plugins (histogram-observe).",
            ),
            &["handler", "name"],
        )
        .expect("valid metric");
        let pool_instances = IntGauge::new(
            "mixer_wasm_host_pool_instances",
            "Wasm instances the pooling allocator holds slots for (0: allocated on demand).",
        )
        .expect("valid metric");
        let epoch_tick = Gauge::new(
            "mixer_wasm_host_epoch_tick_seconds",
            "How often the Wasm engine's epoch advances: the granularity of plugin deadlines.",
        )
        .expect("valid metric");
        for c in [
            Box::new(faults.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(log_dropped.clone()),
            Box::new(counters.clone()),
            Box::new(histograms.clone()),
            Box::new(pool_instances.clone()),
            Box::new(epoch_tick.clone()),
        ] {
            registry.register(c).expect("distinct metric names");
        }
        WasmMetrics {
            registry,
            faults,
            log_dropped,
            counters,
            histograms,
            pool_instances,
            epoch_tick,
            series: Mutex::default(),
        }
    }

    /// Records how the engine was set up.
    pub(crate) fn host(&self, pool_instances: Option<u32>, epoch_tick: std::time::Duration) {
        self.pool_instances
            .set(i64::from(pool_instances.unwrap_or(0)));
        self.epoch_tick.set(epoch_tick.as_secs_f64());
    }

    /// Counts a fault.
    pub(crate) fn fault(&self, handler: &str, kind: FaultKind) {
        self.faults
            .with_label_values(&[handler, kind.label()])
            .inc();
    }

    /// Counts a plugin log line not written.
    pub(crate) fn log_dropped(&self, handler: &str) {
        self.log_dropped.with_label_values(&[handler]).inc();
    }

    /// Log lines of `handler`'s plugin not written.
    pub fn log_lines_dropped(&self, handler: &str) -> u64 {
        self.log_dropped.with_label_values(&[handler]).get()
    }

    /// Faults of `kind` counted for `handler`.
    pub fn faults(&self, handler: &str, kind: &str) -> u64 {
        self.faults.with_label_values(&[handler, kind]).get()
    }

    /// A plugin counter's value.
    pub fn counter(&self, handler: &str, name: &str, key: &str) -> u64 {
        self.counters.with_label_values(&[handler, name, key]).get()
    }

    /// Appends every family in the text format, unless a handler of the same host already
    /// wrote them on this page (the admin endpoint asks each handler in turn, and a family
    /// written twice makes the page invalid). The host's gauges always have a sample, so
    /// their TYPE line marks the page as written; a counter family is left out while it has
    /// no series.
    /// Adds `delta` to a plugin's counter `name{key}`, if its series is admitted.
    pub(crate) fn count(&self, handler: &str, name: &str, key: &str, delta: u64) {
        let (name, key) = (cut(name, MAX_LABEL), cut(key, MAX_LABEL));
        if self.admit(handler, format!("{handler}\0c\0{name}\0{key}")) {
            self.counters
                .with_label_values(&[handler, name, key])
                .inc_by(delta);
        }
    }

    /// Observes `value` in a plugin's histogram `name`, if finite and admitted.
    pub(crate) fn observe(&self, handler: &str, name: &str, value: f64) {
        let name = cut(name, MAX_LABEL);
        if value.is_finite() && self.admit(handler, format!("{handler}\0h\0{name}")) {
            self.histograms
                .with_label_values(&[handler, name])
                .observe(value);
        }
    }

    pub(crate) fn render(&self, out: &mut String) {
        if out.contains("# TYPE mixer_wasm_host_pool_instances ") {
            return;
        }
        let mut body = Vec::new();
        if prometheus::TextEncoder::new()
            .encode(&self.registry.gather(), &mut body)
            .is_ok()
        {
            out.push_str(&String::from_utf8_lossy(&body));
        }
    }

    /// Whether `handler` may have one more series named `series`.
    fn admit(&self, handler: &str, series: String) -> bool {
        static FULL: mixer_adapter_api::log_gate::LogGate =
            mixer_adapter_api::log_gate::LogGate::new(std::time::Duration::from_secs(10));
        let mut guard = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let (seen, per_handler) = &mut *guard;
        if seen.contains(&series) {
            return true;
        }
        let of_handler = per_handler.entry(handler.to_string()).or_default();
        if *of_handler >= MAX_SERIES_PER_HANDLER {
            if let Some(held_back) = FULL.due() {
                tracing::warn!(
                    handler,
                    held_back,
                    "a Wasm plugin made too many metric series; new ones are dropped"
                );
            }
            return false;
        }
        *of_handler += 1;
        seen.insert(series);
        true
    }
}

pub(crate) fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
