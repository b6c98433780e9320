//! The prometheus handler: a private registry of counter, gauge and histogram vectors fed by
//! metric instances, rendered in the text exposition format.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, ErrorKind, Exposition, Handler, ReportHandler};
use mixer_model::{Instance, MetricInstance, Value};
use prometheus::{
    Counter, CounterVec, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, Opts, Registry,
    TextEncoder,
};
use tokio::time::Instant;

use crate::config::{Expiry, Kind, MetricSpec, PrometheusConfig, instance_key};
use crate::lock::lock;
use crate::precounted::{Point, PrecountedSeries, PrecountedVec};
use crate::series_cap::{ProcessSeries, SeriesCap, units};

/// The label value used when an instance has no dimension for a configured label.
pub const MISSING_LABEL_VALUE: &str = "unknown";

enum Collector {
    Counter(CounterVec),
    Gauge(GaugeVec),
    Histogram(HistogramVec),
    Precounted(PrecountedVec),
}

impl Collector {
    /// The series for `values`, created if new.
    fn series(&self, values: &[&str]) -> Series {
        match self {
            Collector::Counter(v) => Series::Counter(v.with_label_values(values)),
            Collector::Gauge(v) => Series::Gauge(v.with_label_values(values)),
            Collector::Histogram(v) => Series::Histogram(v.with_label_values(values)),
            Collector::Precounted(v) => Series::Precounted(v.series(values)),
        }
    }

    fn remove(&self, values: &[&str]) {
        // A series already gone is fine.
        let _ = match self {
            Collector::Counter(v) => v.remove_label_values(values),
            Collector::Gauge(v) => v.remove_label_values(values),
            Collector::Histogram(v) => v.remove_label_values(values),
            Collector::Precounted(v) => {
                v.remove(values);
                Ok(())
            }
        };
    }
}

/// One series' handle, so that recording does not go through the vector's label lookup.
enum Series {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
    Precounted(PrecountedSeries),
}

struct Live {
    series: Series,
    /// The label values, to remove the series from the vector when it expires.
    labels: Vec<String>,
    /// When it was last updated.
    last: Instant,
    /// What it counts as under the caps (see [`units`]).
    units: usize,
}

/// Series by [`series_key`]: recording a known series costs one hash of the label text and no
/// allocation. Seeded hashing, since label values come from requests.
type SeriesMap = HashMap<Box<str>, Live, foldhash::fast::RandomState>;

struct Metric {
    spec: MetricSpec,
    collector: Collector,
    series: Mutex<SeriesMap>,
    /// What each of its series counts as under the caps (pre-counted histograms: each by
    /// the buckets it holds).
    units: usize,
}

thread_local! {
    /// The key being built for the current record, reused across records.
    static KEY: RefCell<String> = const { RefCell::new(String::new()) };
}

struct ExpiryState {
    policy: Expiry,
    next_check: Mutex<Instant>,
}

/// A built prometheus handler. Each handler has its own registry; [`Exposition::render`]
/// writes its metric families for the mixer's admin `/metrics`.
pub struct PrometheusHandler {
    name: Arc<str>,
    registry: Registry,
    metrics: Vec<Metric>,
    /// Instance key (see [`instance_key`]) to index in `metrics`.
    by_instance: HashMap<String, usize>,
    expiry: Option<ExpiryState>,
    /// Its series under its `maxSeries` and the process's cap.
    cap: SeriesCap,
}

impl PrometheusHandler {
    /// Builds the registry and the collectors of a validated config.
    pub fn new(
        config: PrometheusConfig,
        name: Arc<str>,
    ) -> Result<PrometheusHandler, AdapterError> {
        Self::with_process(config, name, &crate::series_cap::PROCESS)
    }

    /// [`PrometheusHandler::new`], its series counted in `process` (tests give each handler
    /// a process cap of its own).
    pub(crate) fn with_process(
        config: PrometheusConfig,
        name: Arc<str>,
        process: &'static ProcessSeries,
    ) -> Result<PrometheusHandler, AdapterError> {
        let registry = Registry::new();
        let mut metrics = Vec::with_capacity(config.metrics.len());
        let mut by_instance = HashMap::new();
        let internal = |e: prometheus::Error, spec: &MetricSpec| {
            AdapterError::permanent(
                ErrorKind::Internal,
                format!("could not register metric {}: {e}", spec.full_name),
            )
        };
        for spec in config.metrics {
            let labels: Vec<&str> = spec.labels.iter().map(|l| l.exposed.as_str()).collect();
            let opts = Opts::new(spec.full_name.clone(), spec.help.clone());
            let collector = match spec.kind {
                Kind::Counter => {
                    let v = CounterVec::new(opts, &labels).map_err(|e| internal(e, &spec))?;
                    registry
                        .register(Box::new(v.clone()))
                        .map_err(|e| internal(e, &spec))?;
                    Collector::Counter(v)
                }
                Kind::Gauge => {
                    let v = GaugeVec::new(opts, &labels).map_err(|e| internal(e, &spec))?;
                    registry
                        .register(Box::new(v.clone()))
                        .map_err(|e| internal(e, &spec))?;
                    Collector::Gauge(v)
                }
                Kind::Distribution if spec.precounted.is_some() => {
                    let temporality = spec.precounted.unwrap_or(crate::Precounted::Cumulative);
                    let v = PrecountedVec::new(&spec.full_name, &spec.help, &labels, temporality)
                        .map_err(|e| internal(e, &spec))?;
                    registry
                        .register(Box::new(v.clone()))
                        .map_err(|e| internal(e, &spec))?;
                    Collector::Precounted(v)
                }
                Kind::Distribution => {
                    let hopts = HistogramOpts::from(opts).buckets(spec.buckets.clone());
                    let v = HistogramVec::new(hopts, &labels).map_err(|e| internal(e, &spec))?;
                    registry
                        .register(Box::new(v.clone()))
                        .map_err(|e| internal(e, &spec))?;
                    Collector::Histogram(v)
                }
                Kind::Unspecified => {
                    return Err(AdapterError::permanent(
                        ErrorKind::Internal,
                        format!("metric {} has no kind", spec.full_name),
                    ));
                }
            };
            by_instance.insert(instance_key(&spec.instance_name), metrics.len());
            let units = match spec.kind {
                Kind::Distribution => units(spec.buckets.len()),
                _ => 1,
            };
            metrics.push(Metric {
                spec,
                collector,
                series: Mutex::new(SeriesMap::default()),
                units,
            });
        }
        let expiry = config.expiry.map(|policy| ExpiryState {
            policy,
            next_check: Mutex::new(Instant::now() + policy.check_interval),
        });
        let cap = SeriesCap::new(name.clone(), config.max_series, process);
        Ok(PrometheusHandler {
            name,
            registry,
            metrics,
            by_instance,
            expiry,
            cap,
        })
    }

    /// Number of live series (label combinations) across this handler's metrics.
    pub fn tracked_series(&self) -> usize {
        self.metrics.iter().map(|m| lock(&m.series).len()).sum()
    }

    /// What the handler's series count as under its cap: [`Self::tracked_series`], plus one
    /// per 100 buckets of each histogram series (see [`crate::BUCKETS_PER_SERIES`]).
    pub fn counted_series(&self) -> usize {
        self.cap.count()
    }

    /// Drops series idle for longer than the expiry duration, if the check interval has passed
    /// since the last sweep. Called on every report batch and every render.
    pub fn expire(&self) {
        let Some(expiry) = &self.expiry else { return };
        let now = Instant::now();
        {
            let mut next = lock(&expiry.next_check);
            if now < *next {
                return;
            }
            *next = now + expiry.policy.check_interval;
        }
        let ttl = expiry.policy.ttl;
        let (mut dropped, mut released) = (0usize, 0usize);
        for metric in &self.metrics {
            let mut series = lock(&metric.series);
            series.retain(|_, live| {
                if now.saturating_duration_since(live.last) < ttl {
                    return true;
                }
                let values: Vec<&str> = live.labels.iter().map(String::as_str).collect();
                metric.collector.remove(&values);
                dropped += 1;
                released += live.units;
                false
            });
        }
        self.cap.release(released);
        if dropped > 0 {
            tracing::debug!(handler = %self.name, dropped, "expired idle prometheus series");
        }
    }

    /// The dimension that fills each label of `metric`, in label order (None: missing). An
    /// iterator, not a list: every record looks its labels up once per metric, and only a
    /// new series needs them twice.
    fn dimensions<'i>(
        metric: &'i Metric,
        instance: &MetricInstance<'i>,
    ) -> impl Iterator<Item = Option<&'i Value>> + 'i {
        let dims = instance.dimensions.as_slice();
        metric
            .spec
            .labels
            .iter()
            .enumerate()
            .map(move |(i, label)| {
                // Dimensions usually come in the order the labels are configured.
                if let Some((k, v)) = dims.get(i)
                    && **k == *label.configured
                {
                    return Some(v);
                }
                dims.iter()
                    .find(|(k, _)| **k == *label.configured)
                    .or_else(|| dims.iter().find(|(k, _)| **k == *label.exposed))
                    .map(|(_, v)| v)
            })
    }

    /// Records one instance; `now` is the batch's time (expiry is counted in minutes, so one
    /// clock read per batch is close enough).
    fn record(
        &self,
        metric: &Metric,
        instance: &MetricInstance<'_>,
        now: Instant,
    ) -> Result<(), String> {
        let Some(value) = instance.value else {
            return Err("the instance has no value".into());
        };
        let mut point = None;
        let value = if metric.spec.precounted.is_some() {
            let sum = match &metric.spec.sum_dimension {
                Some(name) => match instance.dimensions.get(name) {
                    Some(v) => v
                        .to_metric_number()
                        .map_err(|e| format!("sum {name:?}: {e}"))?,
                    // As a missing label is "unknown": the instance did not say.
                    None => 0.0,
                },
                None => 0.0,
            };
            point = Some(Point::parse(value, sum)?);
            0.0
        } else {
            value.to_metric_number()?
        };
        match metric.spec.kind {
            Kind::Counter if !(value >= 0.0 && value.is_finite()) => {
                return Err(format!("a counter cannot be incremented by {value}"));
            }
            Kind::Distribution if value.is_nan() => {
                return Err("a histogram cannot observe NaN".into());
            }
            _ => {}
        }
        KEY.with_borrow_mut(|key| {
            series_key(Self::dimensions(metric, instance), key);
            // The sweep removes series under this lock too, so a series cannot be removed from
            // the vector between finding it here and updating it.
            let mut series = lock(&metric.series);
            let live = match series.get_mut(key.as_str()) {
                Some(live) => live,
                None => {
                    let new_units = match &point {
                        Some(point) => units(point.buckets.len()),
                        None => metric.units,
                    };
                    // Past a cap the point is dropped (and counted): not an error of the
                    // instance, which the next scrape of an existing series would not show.
                    if self.cap.admit(new_units).is_err() {
                        return;
                    }
                    let labels: Vec<String> =
                        Self::dimensions(metric, instance).map(label_text).collect();
                    let values: Vec<&str> = labels.iter().map(String::as_str).collect();
                    let handle = metric.collector.series(&values);
                    series.entry(key.as_str().into()).or_insert(Live {
                        series: handle,
                        labels,
                        last: now,
                        units: new_units,
                    })
                }
            };
            live.last = now;
            match &live.series {
                Series::Counter(c) => c.inc_by(value),
                Series::Gauge(g) => g.set(value),
                Series::Histogram(h) => h.observe(value),
                Series::Precounted(p) => {
                    if let Some(point) = point.take() {
                        // A series whose buckets would grow takes the room first (at most
                        // what it may need), and gives back what it did not use.
                        let most = units(p.buckets_after(&point));
                        if most > live.units {
                            if self.cap.admit(most - live.units).is_err() {
                                return;
                            }
                            live.units = most;
                        }
                        let held = units(p.record(point));
                        if held < live.units {
                            self.cap.release(live.units - held);
                            live.units = held;
                        }
                    }
                }
            }
        });
        Ok(())
    }
}

/// Writes the label values of a record into `key`, each prefixed by its length so that no two
/// different value lists make the same key.
fn series_key<'v>(dims: impl Iterator<Item = Option<&'v Value>>, key: &mut String) {
    key.clear();
    for d in dims {
        let start = key.len();
        // Every record builds one key per metric: the common values skip `fmt`.
        match d {
            Some(Value::String(s)) => key.push_str(s),
            Some(Value::Int64(i)) => key.push_str(itoa::Buffer::new().format(*i)),
            Some(v @ Value::IpAddress(_)) => key.push_str(&label_value(v)),
            Some(v) => {
                let _ = write!(key, "{v}");
            }
            None => key.push_str(MISSING_LABEL_VALUE),
        }
        let len = key.len() - start;
        key.push('\u{0}');
        key.push_str(itoa::Buffer::new().format(len));
        key.push(';');
    }
}

fn label_text(d: Option<&Value>) -> String {
    d.map_or_else(|| MISSING_LABEL_VALUE.to_string(), label_value)
}

/// A dimension value as a label value (Istio's `adapter.Stringify`).
fn label_value(v: &Value) -> String {
    match v {
        Value::IpAddress(std::net::IpAddr::V6(ip)) => match ip.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => ip.to_string(),
        },
        other => other.to_string(),
    }
}

impl Handler for PrometheusHandler {
    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }

    fn as_exposition(&self) -> Option<&dyn Exposition> {
        Some(self)
    }
}

#[async_trait]
impl ReportHandler for PrometheusHandler {
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        // Before recording: series that expired give their room under the caps back.
        self.expire();
        let now = Instant::now();
        let mut errors = Vec::new();
        for instance in instances {
            let Some(instance) = MetricInstance::of(instance) else {
                continue;
            };
            // Instances meant for metrics this handler does not define are ignored.
            // Most instances are named `name.namespace` already: no key to build.
            let index = self
                .by_instance
                .get(instance.name)
                .or_else(|| self.by_instance.get(instance_key(instance.name).as_str()));
            let Some(&index) = index else {
                continue;
            };
            let metric = &self.metrics[index];
            if let Err(e) = self.record(metric, &instance, now) {
                errors.push(format!(
                    "could not record {} for metric {}: {e}",
                    instance.name, metric.spec.full_name
                ));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(AdapterError::permanent(
                ErrorKind::InvalidInstance,
                errors.join("; "),
            ))
        }
    }
}

impl Exposition for PrometheusHandler {
    fn render(&self, out: &mut String) {
        self.expire();
        self.cap.render_overflow(out);
        let families = self.registry.gather();
        let mut text = String::new();
        match TextEncoder::new().encode_utf8(&families, &mut text) {
            Ok(()) => out.push_str(&text),
            Err(e) => {
                tracing::warn!(handler = %self.name, error = %e, "could not render prometheus metrics");
            }
        }
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;

    fn key(values: &[Option<Value>]) -> String {
        let dims: Vec<Option<&Value>> = values.iter().map(Option::as_ref).collect();
        let mut key = String::new();
        series_key(dims.into_iter(), &mut key);
        key
    }

    #[test]
    fn different_label_values_make_different_keys() {
        let s = |t: &str| Some(Value::from(t));
        let lists = [
            vec![s("a"), s("b")],
            vec![s("ab"), s("")],
            vec![s(""), s("ab")],
            vec![s("a\u{0}1;"), s("b")],
            vec![s("a"), s("\u{0}1;b")],
            vec![s("unknown"), s("b")],
            vec![None, s("b")],
            vec![Some(Value::Int64(200)), s("b")],
            vec![s("200"), s("b")],
        ];
        let keys: Vec<String> = lists.iter().map(|l| key(l)).collect();
        for (i, a) in keys.iter().enumerate() {
            for (j, b) in keys.iter().enumerate().skip(i + 1) {
                // A missing label and "unknown" are the same series, as are 200 and "200":
                // their label text is the same.
                let same_text = matches!((i, j), (5, 6) | (7, 8));
                assert_eq!(a == b, same_text, "{:?} vs {:?}", lists[i], lists[j]);
            }
        }
    }
}
