//! The prometheus handler: a private registry of counter, gauge and histogram vectors fed by
//! metric instances, rendered in the text exposition format.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, ErrorKind, Exposition, Handler, ReportHandler};
use mixer_model::{Instance, Template, Value};
use prometheus::{CounterVec, GaugeVec, HistogramOpts, HistogramVec, Opts, Registry, TextEncoder};
use tokio::time::Instant;

use crate::config::{Expiry, Kind, MetricSpec, PrometheusConfig, instance_key};

/// The label value used when an instance has no dimension for a configured label.
pub const MISSING_LABEL_VALUE: &str = "unknown";

enum Collector {
    Counter(CounterVec),
    Gauge(GaugeVec),
    Histogram(HistogramVec),
}

impl Collector {
    fn remove(&self, values: &[&str]) {
        // A series already gone is fine.
        let _ = match self {
            Collector::Counter(v) => v.remove_label_values(values),
            Collector::Gauge(v) => v.remove_label_values(values),
            Collector::Histogram(v) => v.remove_label_values(values),
        };
    }
}

struct Metric {
    spec: MetricSpec,
    collector: Collector,
    /// When each series was last updated; only kept with an expiration policy.
    seen: Mutex<HashMap<Vec<String>, Instant>>,
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
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves only timestamps behind: keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl PrometheusHandler {
    /// Builds the registry and the collectors of a validated config.
    pub fn new(
        config: PrometheusConfig,
        name: Arc<str>,
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
            metrics.push(Metric {
                spec,
                collector,
                seen: Mutex::new(HashMap::new()),
            });
        }
        let expiry = config.expiry.map(|policy| ExpiryState {
            policy,
            next_check: Mutex::new(Instant::now() + policy.check_interval),
        });
        Ok(PrometheusHandler {
            name,
            registry,
            metrics,
            by_instance,
            expiry,
        })
    }

    /// Number of live series (label combinations) across this handler's metrics; only counted
    /// with an expiration policy (0 otherwise).
    pub fn tracked_series(&self) -> usize {
        self.metrics.iter().map(|m| lock(&m.seen).len()).sum()
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
        let mut dropped = 0usize;
        for metric in &self.metrics {
            let mut seen = lock(&metric.seen);
            seen.retain(|labels, last| {
                if now.saturating_duration_since(*last) < ttl {
                    return true;
                }
                let values: Vec<&str> = labels.iter().map(String::as_str).collect();
                metric.collector.remove(&values);
                dropped += 1;
                false
            });
        }
        if dropped > 0 {
            tracing::debug!(handler = %self.name, dropped, "expired idle prometheus series");
        }
    }

    fn label_values(metric: &Metric, instance: &Instance) -> Vec<String> {
        let dims = instance.map("dimensions").unwrap_or(&[]);
        metric
            .spec
            .labels
            .iter()
            .map(|label| {
                dims.iter()
                    .find(|(k, _)| **k == *label.configured)
                    .or_else(|| dims.iter().find(|(k, _)| **k == *label.exposed))
                    .map(|(_, v)| label_value(v))
                    .unwrap_or_else(|| MISSING_LABEL_VALUE.to_string())
            })
            .collect()
    }

    fn record(&self, metric: &Metric, instance: &Instance) -> Result<(), String> {
        let value = match instance.value("value") {
            Some(v) => numeric_value(v)?,
            None => return Err("the instance has no value".into()),
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
        let labels = Self::label_values(metric, instance);
        let values: Vec<&str> = labels.iter().map(String::as_str).collect();
        let update = || match &metric.collector {
            Collector::Counter(v) => v.with_label_values(&values).inc_by(value),
            Collector::Gauge(v) => v.with_label_values(&values).set(value),
            Collector::Histogram(v) => v.with_label_values(&values).observe(value),
        };
        if self.expiry.is_some() {
            // Under the lock, so that a sweep cannot remove the series between the two steps.
            let mut seen = lock(&metric.seen);
            update();
            match seen.get_mut(&labels) {
                Some(last) => *last = Instant::now(),
                None => {
                    seen.insert(labels, Instant::now());
                }
            }
        } else {
            update();
        }
        Ok(())
    }
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

/// The instance's value as a number: INT64 and DOUBLE as they are, DURATION in seconds (as
/// Istio), BOOL as 1 or 0, STRING parsed as a number; anything else is an error.
pub fn numeric_value(v: &Value) -> Result<f64, String> {
    match v {
        Value::Int64(i) => Ok(*i as f64),
        Value::Double(d) => Ok(*d),
        Value::Duration(d) => Ok(d.0 as f64 / 1e9),
        Value::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| format!("{s:?} is not a number")),
        other => Err(format!(
            "a {} value cannot be a metric value",
            other.value_type()
        )),
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
        let mut errors = Vec::new();
        for instance in instances {
            if instance.template != Template::Metric {
                continue;
            }
            // Instances meant for metrics this handler does not define are ignored.
            let Some(&index) = self.by_instance.get(instance_key(&instance.name).as_str()) else {
                continue;
            };
            let metric = &self.metrics[index];
            if let Err(e) = self.record(metric, instance) {
                errors.push(format!(
                    "could not record {} for metric {}: {e}",
                    instance.name, metric.spec.full_name
                ));
            }
        }
        self.expire();
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
