//! Caps on the series prometheus handlers keep: one per handler (its `maxSeries`) and one
//! for the whole process, shared by every prometheus handler. Series are what a handler's
//! memory and a scrape's size grow with, and their label values come from requests: a
//! label fed by a user id or an OTLP attribute grows a handler without bound (Istio Mixer's
//! own out-of-memory crash, istio/istio#18167). A point that would make a series past
//! either cap is dropped, counted in `mixer_metric_series_overflow_total{handler,cap}` and
//! logged at most once per [`LOG_INTERVAL`]; series that exist keep updating.
//!
//! A histogram series counts as more than one when it holds many buckets (see [`units`]):
//! a pre-counted one's buckets come with its points (up to 1,001), so its size, and not only
//! the number of series, is the sender's to choose.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mixer_adapter_api::log_gate::LogGate;
use prometheus::{IntCounterVec, Opts};

/// Series one handler keeps unless its `maxSeries` says otherwise: room for a large mesh's
/// request metrics, and half the process's cap, so one handler whose labels run away still
/// leaves room to the others.
pub const DEFAULT_MAX_SERIES_PER_HANDLER: usize = 50_000;

/// Series all prometheus handlers of the process keep together unless set otherwise
/// ([`set_process_max_series`], `mixer serve --max-metric-series`). 100,000 series of the
/// `policies/otlp-metrics` bundle (five labels) left the whole process at 263 MB resident,
/// and a scrape of them is 13 MB of text.
pub const DEFAULT_MAX_SERIES_PER_PROCESS: usize = 100_000;

/// Buckets a histogram series holds per unit it counts as beyond its first: a series and
/// its labels take some 1.5 KB, a bucket 16 bytes, so 100 buckets hold about as much as one
/// more series.
pub const BUCKETS_PER_SERIES: usize = 100;

/// What a series with `buckets` histogram buckets counts as under the caps: 1, plus 1 per
/// [`BUCKETS_PER_SERIES`] buckets (Istio's usual 11-bucket histograms count as 1).
pub fn units(buckets: usize) -> usize {
    1 + buckets / BUCKETS_PER_SERIES
}

/// How often a cap's refusals are logged at most.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The name of the overflow counter.
pub const OVERFLOW_METRIC: &str = "mixer_metric_series_overflow_total";

/// The series of every handler of a process, and their cap.
pub(crate) struct ProcessSeries {
    max: AtomicUsize,
    count: AtomicUsize,
    overflow: LazyLock<IntCounterVec>,
}

impl ProcessSeries {
    pub(crate) const fn new(max: usize) -> ProcessSeries {
        ProcessSeries {
            max: AtomicUsize::new(max),
            count: AtomicUsize::new(0),
            overflow: LazyLock::new(overflow_counter),
        }
    }

    fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// Points dropped for `handler` at `cap` (`"handler"` or `"process"`).
    pub(crate) fn overflowed(&self, handler: &str, cap: &str) -> u64 {
        self.overflow.with_label_values(&[handler, cap]).get()
    }

    /// Appends the overflow counter to a `/metrics` page, unless another prometheus
    /// handler already did on this page (a family written twice makes the page invalid).
    /// While nothing overflowed the family has no series and nothing is written.
    pub(crate) fn render_overflow(&self, out: &mut String) {
        if out.contains(&format!("# TYPE {OVERFLOW_METRIC} ")) {
            return;
        }
        use prometheus::core::Collector;
        let families = self.overflow.collect();
        let mut text = String::new();
        if prometheus::TextEncoder::new()
            .encode_utf8(&families, &mut text)
            .is_ok()
        {
            out.push_str(&text);
        }
    }
}

/// The process's handlers (tests give handlers one of their own).
pub(crate) static PROCESS: ProcessSeries = ProcessSeries::new(DEFAULT_MAX_SERIES_PER_PROCESS);

fn overflow_counter() -> IntCounterVec {
    IntCounterVec::new(
        Opts::new(
            OVERFLOW_METRIC,
            "Points the prometheus adapter dropped because they would have made a new series \
             (or a histogram series of more buckets) past a cap: the handler's maxSeries (cap=\"handler\") or the process's \
             --max-metric-series (cap=\"process\").",
        ),
        &["handler", "cap"],
    )
    .expect("a valid metric")
}

/// Sets the cap on series across every prometheus handler of the process (at least 1).
/// Series already kept stay; new ones are refused while the total is at or above it.
pub fn set_process_max_series(max: usize) {
    PROCESS.max.store(max.max(1), Ordering::Relaxed);
}

/// The cap on series across every prometheus handler of the process.
pub fn process_max_series() -> usize {
    PROCESS.max()
}

/// Series kept now by every prometheus handler of the process.
pub fn process_series() -> usize {
    PROCESS.count.load(Ordering::Relaxed)
}

/// Points dropped for `handler` at `cap` (`"handler"` or `"process"`).
pub fn overflowed(handler: &str, cap: &str) -> u64 {
    PROCESS.overflowed(handler, cap)
}

/// Which cap refused a series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Full {
    Handler,
    Process,
}

impl Full {
    fn label(self) -> &'static str {
        match self {
            Full::Handler => "handler",
            Full::Process => "process",
        }
    }
}

/// One handler's series count under its cap and the process's. Its series are given back
/// to the process when it is dropped (a reload replaces it).
pub(crate) struct SeriesCap {
    handler: std::sync::Arc<str>,
    max: usize,
    count: AtomicUsize,
    process: &'static ProcessSeries,
}

impl SeriesCap {
    pub(crate) fn new(
        handler: std::sync::Arc<str>,
        max: usize,
        process: &'static ProcessSeries,
    ) -> SeriesCap {
        SeriesCap {
            handler,
            max,
            count: AtomicUsize::new(0),
            process,
        }
    }

    /// Takes room for `units` more (a new series, or a histogram series growing), or says
    /// which cap is full (the point is then counted and, at most once per interval, logged).
    pub(crate) fn admit(&self, units: usize) -> Result<(), Full> {
        let refused = if !take(&self.count, units, self.max) {
            Some(Full::Handler)
        } else if !take(&self.process.count, units, self.process.max()) {
            self.count.fetch_sub(units, Ordering::Relaxed);
            Some(Full::Process)
        } else {
            None
        };
        let Some(full) = refused else {
            return Ok(());
        };
        self.process
            .overflow
            .with_label_values(&[&self.handler, full.label()])
            .inc();
        static FULL: LogGate = LogGate::new(LOG_INTERVAL);
        if let Some(held_back) = FULL.due() {
            let (max, cap) = match full {
                Full::Handler => (self.max, "the handler's maxSeries"),
                Full::Process => (self.process.max(), "the process's --max-metric-series"),
            };
            tracing::warn!(
                handler = %self.handler,
                max,
                held_back,
                "prometheus series cap reached ({cap}): points of new label combinations (or \
                 growing a histogram past 100 more buckets) are dropped and counted in \
                 {OVERFLOW_METRIC}; existing series keep updating"
            );
        }
        Err(full)
    }

    /// Gives back `n` units (expired series, histograms that shrank).
    pub(crate) fn release(&self, n: usize) {
        if n > 0 {
            self.count.fetch_sub(n, Ordering::Relaxed);
            self.process.count.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// Units kept now.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// See [`ProcessSeries::render_overflow`].
    pub(crate) fn render_overflow(&self, out: &mut String) {
        self.process.render_overflow(out);
    }
}

impl Drop for SeriesCap {
    fn drop(&mut self) {
        self.process
            .count
            .fetch_sub(*self.count.get_mut(), Ordering::Relaxed);
    }
}

/// Adds `units` to `counter` unless that would take it past `max`.
fn take(counter: &AtomicUsize, units: usize, max: usize) -> bool {
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            n.checked_add(units).filter(|&total| total <= max)
        })
        .is_ok()
}
