//! Per-handler metrics of remote calls, rendered in the Prometheus text format through
//! `Handler::as_exposition`:
//!
//! - `mixer_oop_calls_total{handler,call,outcome}`: calls by kind (`check`, `quota`,
//!   `report`, `create_session`, `close_session`) and outcome (`ok` or an error kind label;
//!   `session_lost` / `connection_lost` for a first attempt the adapter cannot have acted on,
//!   sent once more and counted again with the outcome of that);
//! - `mixer_oop_call_duration_seconds{handler,call}`: a histogram of call latency;
//! - `mixer_oop_report_retries_total{handler}`: report batches sent again;
//! - `mixer_oop_in_flight{handler}`: calls under way;
//! - `mixer_oop_circuit_state{handler}`: 0 closed, 1 open, 2 half open;
//! - `mixer_oop_circuit_opened_total{handler}`: times the circuit opened.
//!
//! Handlers built by one factory share a [`MetricsSet`]: the first of them rendered on a
//! page writes the families of all, so each family appears once, contiguous.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::breaker::CircuitBreaker;

const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

#[derive(Default)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The metrics of one remote handler.
pub struct HandlerMetrics {
    pub(crate) handler: Arc<str>,
    calls: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    latency: Mutex<BTreeMap<&'static str, Histogram>>,
    pub(crate) retries: AtomicU64,
    pub(crate) in_flight: AtomicI64,
    pub(crate) breaker: Arc<CircuitBreaker>,
    seq: u64,
}

impl HandlerMetrics {
    pub(crate) fn new(handler: Arc<str>, breaker: Arc<CircuitBreaker>, seq: u64) -> Self {
        HandlerMetrics {
            handler,
            calls: Mutex::default(),
            latency: Mutex::default(),
            retries: AtomicU64::new(0),
            in_flight: AtomicI64::new(0),
            breaker,
            seq,
        }
    }

    /// Counts one call and its latency.
    pub(crate) fn record(&self, call: &'static str, outcome: &'static str, took: Duration) {
        *self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((call, outcome))
            .or_default() += 1;
        let secs = took.as_secs_f64();
        let mut latency = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        let h = latency.entry(call).or_default();
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.buckets[i] += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }

    /// Calls counted with `call` and `outcome` so far.
    pub fn calls(&self, call: &str, outcome: &str) -> u64 {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|((c, o), _)| *c == call && *o == outcome)
            .map(|(_, n)| *n)
            .sum()
    }
}

/// The metrics of every live handler of one factory.
#[derive(Default)]
pub struct MetricsSet {
    handlers: Mutex<Vec<Weak<HandlerMetrics>>>,
    seq: AtomicU64,
}

impl MetricsSet {
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn add(&self, m: &Arc<HandlerMetrics>) {
        let mut handlers = self.handlers.lock().unwrap_or_else(|e| e.into_inner());
        handlers.retain(|w| w.strong_count() > 0);
        handlers.push(Arc::downgrade(m));
    }

    pub(crate) fn remove(&self, m: &HandlerMetrics) {
        let mut handlers = self.handlers.lock().unwrap_or_else(|e| e.into_inner());
        handlers.retain(|w| w.upgrade().is_some_and(|h| h.seq != m.seq));
    }

    /// Live handlers; of two with the same name (a reload replaced one), the newer.
    fn live(&self) -> Vec<Arc<HandlerMetrics>> {
        let handlers = self.handlers.lock().unwrap_or_else(|e| e.into_inner());
        let mut by_name: BTreeMap<Arc<str>, Arc<HandlerMetrics>> = BTreeMap::new();
        for h in handlers.iter().filter_map(Weak::upgrade) {
            match by_name.get(&h.handler) {
                Some(old) if old.seq > h.seq => {}
                _ => {
                    by_name.insert(h.handler.clone(), h);
                }
            }
        }
        by_name.into_values().collect()
    }
}

/// Name, type, help and value of a one-sample-per-handler family.
type SimpleFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&HandlerMetrics) -> String,
);

const MARKER: &str = "# TYPE mixer_oop_calls_total counter\n";

/// Appends the families of every handler in `set` to `out`, unless a handler of the same
/// page already did.
pub(crate) fn render(set: &MetricsSet, out: &mut String) {
    if out.contains(MARKER) {
        return;
    }
    let handlers = set.live();
    if handlers.is_empty() {
        return;
    }
    let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    out.push_str("# HELP mixer_oop_calls_total Calls to out-of-process adapters, by outcome.\n");
    out.push_str(MARKER);
    for h in &handlers {
        let calls = h.calls.lock().unwrap_or_else(|e| e.into_inner());
        for ((call, outcome), n) in calls.iter() {
            let _ = writeln!(
                out,
                "mixer_oop_calls_total{{handler=\"{}\",call=\"{call}\",outcome=\"{outcome}\"}} {n}",
                esc(&h.handler)
            );
        }
    }
    out.push_str(
        "# HELP mixer_oop_call_duration_seconds Latency of calls to out-of-process adapters.\n",
    );
    out.push_str("# TYPE mixer_oop_call_duration_seconds histogram\n");
    for h in &handlers {
        let latency = h.latency.lock().unwrap_or_else(|e| e.into_inner());
        let name = esc(&h.handler);
        for (call, hist) in latency.iter() {
            for (le, n) in BUCKETS.iter().zip(hist.buckets) {
                let _ = writeln!(
                    out,
                    "mixer_oop_call_duration_seconds_bucket{{handler=\"{name}\",call=\"{call}\",le=\"{le}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "mixer_oop_call_duration_seconds_bucket{{handler=\"{name}\",call=\"{call}\",le=\"+Inf\"}} {}",
                hist.count
            );
            let _ = writeln!(
                out,
                "mixer_oop_call_duration_seconds_sum{{handler=\"{name}\",call=\"{call}\"}} {}",
                hist.sum
            );
            let _ = writeln!(
                out,
                "mixer_oop_call_duration_seconds_count{{handler=\"{name}\",call=\"{call}\"}} {}",
                hist.count
            );
        }
    }
    let simple: [SimpleFamily; 4] = [
        (
            "mixer_oop_report_retries_total",
            "counter",
            "Report batches sent again after a transient failure.",
            |h| h.retries.load(Ordering::Relaxed).to_string(),
        ),
        ("mixer_oop_in_flight", "gauge", "Calls under way.", |h| {
            h.in_flight.load(Ordering::Relaxed).to_string()
        }),
        (
            "mixer_oop_circuit_state",
            "gauge",
            "Circuit breaker: 0 closed, 1 open, 2 half open.",
            |h| h.breaker.state().gauge().to_string(),
        ),
        (
            "mixer_oop_circuit_opened_total",
            "counter",
            "Times the circuit breaker opened.",
            |h| h.breaker.times_opened().to_string(),
        ),
    ];
    for (name, kind, help, value) in simple {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for h in &handlers {
            let _ = writeln!(
                out,
                "{name}{{handler=\"{}\"}} {}",
                esc(&h.handler),
                value(h)
            );
        }
    }
}
