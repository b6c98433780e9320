//! The otlp adapter's params and their validation into an [`OtlpConfig`].
//!
//! Istio 1.4 had no OTLP adapter; these params are new. They follow the OpenTelemetry
//! Collector's exporter settings where one exists (`endpoint`, `timeout`, `headers`,
//! `retry`), in camelCase like every other handler's params.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use mixer_adapter_api::{DurationParam, ParamError};
use serde::Deserialize;

/// Default per-attempt deadline of one export call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default most records (spans or log records) sent in one export call.
pub const DEFAULT_MAX_EXPORT_BATCH_SIZE: usize = 512;
/// Default interval between two metric exports.
pub const DEFAULT_SCHEDULED_DELAY: Duration = Duration::from_secs(10);
/// Default delay before the first retry.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Default longest delay between two retries.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Default time budget of all retries of one export.
pub const DEFAULT_MAX_ELAPSED_TIME: Duration = Duration::from_secs(5);
/// The `service.name` resource attribute when `resource` does not set one.
pub const DEFAULT_SERVICE_NAME: &str = "mixer";
/// Most explicit bucket bounds of one histogram.
pub const MAX_BUCKETS: usize = 1_000;
/// Largest accepted `maxExportBatchSize`.
pub const MAX_EXPORT_BATCH_SIZE: usize = 100_000;

/// `params` of an otlp handler.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OtlpParams {
    /// The collector's gRPC address, `http://host:port` (required).
    #[serde(default)]
    pub endpoint: String,
    /// Deadline of one export attempt (Go duration, default `10s`).
    #[serde(default)]
    pub timeout: Option<DurationParam>,
    /// gRPC metadata sent with every export (`authorization`, `x-tenant`...).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Export batching.
    #[serde(default)]
    pub batch: BatchParams,
    /// Retries of failed exports.
    #[serde(default)]
    pub retry: RetryParams,
    /// Resource attributes (strings, numbers or booleans); `service.name` defaults to `mixer`.
    #[serde(default)]
    pub resource: BTreeMap<String, serde_json::Value>,
    /// `CUMULATIVE` (default) or `DELTA`.
    #[serde(default)]
    pub metric_temporality: Option<Temporality>,
    /// The metrics this handler exports, one per metric instance it takes.
    #[serde(default)]
    pub metrics: Vec<MetricParams>,
    /// Fully qualified names of `metric` instances that carry an ingested OTLP data point
    /// (a `point` dimension set to `otel.metric.point`): each is re-exported as the point it
    /// was, in its own temporality, rather than recorded into an instrument.
    #[serde(default)]
    pub points: Vec<String>,
}

/// `batch` params.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BatchParams {
    /// Most spans (or log records) per export call; larger report batches are split
    /// (default 512).
    #[serde(default)]
    pub max_export_batch_size: Option<i64>,
    /// How often aggregated metrics are exported (Go duration, default `10s`).
    #[serde(default)]
    pub scheduled_delay: Option<DurationParam>,
}

/// `retry` params.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RetryParams {
    /// Retry transient failures (default `true`).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Delay before the first retry (default `100ms`); doubled after each retry.
    #[serde(default)]
    pub initial_backoff: Option<DurationParam>,
    /// Longest delay between retries (default `1s`).
    #[serde(default)]
    pub max_backoff: Option<DurationParam>,
    /// No retry starts after this much time since the first attempt (default `5s`).
    #[serde(default)]
    pub max_elapsed_time: Option<DurationParam>,
}

/// One metric (`metrics[]`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricParams {
    /// The fully qualified name of the metric instance feeding it (required).
    #[serde(default)]
    pub instance_name: String,
    /// The OpenTelemetry instrument name, such as `istio.requests` (required).
    #[serde(default)]
    pub name: String,
    /// `COUNTER`, `GAUGE` or `HISTOGRAM` (required).
    #[serde(default)]
    pub kind: Option<Kind>,
    /// UCUM unit, such as `s` or `By` (optional).
    #[serde(default)]
    pub unit: String,
    /// Description (optional).
    #[serde(default)]
    pub description: String,
    /// Explicit bucket bounds of a HISTOGRAM; absent: the SDK's default bounds.
    #[serde(default)]
    pub buckets: Option<Vec<f64>>,
}

/// An instrument kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Kind {
    /// A monotonic sum: each instance adds its value (which must not be negative).
    Counter,
    /// The last value of each attribute set.
    Gauge,
    /// A distribution over explicit buckets.
    Histogram,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Counter => "COUNTER",
            Kind::Gauge => "GAUGE",
            Kind::Histogram => "HISTOGRAM",
        })
    }
}

/// How sums and histograms are aggregated between exports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Temporality {
    /// Totals since the handler started (what Prometheus-style backends want).
    #[default]
    Cumulative,
    /// Changes since the previous export.
    Delta,
}

/// Validated retry settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryConfig {
    /// Delay before the first retry.
    pub initial_backoff: Duration,
    /// Longest delay between retries.
    pub max_backoff: Duration,
    /// Time budget of all attempts of one export.
    pub max_elapsed_time: Duration,
}

/// A resource attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum ResourceValue {
    /// Text.
    String(String),
    /// An integer.
    Int(i64),
    /// A float.
    Double(f64),
    /// A boolean.
    Bool(bool),
}

/// One validated metric.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricSpec {
    /// The instance name as configured.
    pub instance_name: String,
    /// The instrument name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// Its unit (may be empty).
    pub unit: String,
    /// Its description (may be empty).
    pub description: String,
    /// Explicit bucket bounds (histograms only); `None`: the SDK's defaults.
    pub buckets: Option<Vec<f64>>,
}

/// Validated params, ready to build a handler.
#[derive(Clone, Debug, PartialEq)]
pub struct OtlpConfig {
    /// `http://host:port`.
    pub endpoint: String,
    /// Deadline of one export attempt.
    pub timeout: Duration,
    /// gRPC metadata, lower-case keys, in key order.
    pub headers: Vec<(String, String)>,
    /// Most records per export call.
    pub max_export_batch_size: usize,
    /// Metric export interval.
    pub scheduled_delay: Duration,
    /// `None` when retries are disabled.
    pub retry: Option<RetryConfig>,
    /// Resource attributes, `service.name` included.
    pub resource: Vec<(String, ResourceValue)>,
    /// Metric temporality.
    pub temporality: Temporality,
    /// The metrics, in config order.
    pub metrics: Vec<MetricSpec>,
    /// Instance keys (see [`instance_key`]) of the instances re-exported as OTLP points.
    pub points: Vec<String>,
}

impl OtlpConfig {
    /// The longest one export may take, all attempts and backoffs included: the retry budget
    /// plus one attempt that started just before the budget ran out.
    pub fn export_budget(&self) -> Duration {
        let retries = self.retry.map_or(Duration::ZERO, |r| r.max_elapsed_time);
        retries + self.timeout
    }
}

/// The key an instance name is matched by: Istio 1.4 configs name instances
/// `name.instance.namespace` (or `name.metric.namespace`) while instances reach handlers as
/// `name.namespace`; the generic kind in the middle is dropped (as the prometheus adapter does).
pub fn instance_key(name: &str) -> String {
    let parts: Vec<&str> = name.splitn(3, '.').collect();
    match parts.as_slice() {
        [n, "instance" | "metric", ns] if !ns.is_empty() => format!("{n}.{ns}"),
        _ => name.to_string(),
    }
}

/// OpenTelemetry's instrument name syntax: `[A-Za-z][A-Za-z0-9_./-]{0,254}`.
pub fn is_valid_instrument_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 255
        && matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
}

mod compile;

#[cfg(test)]
mod tests;
