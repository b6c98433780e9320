//! The prometheus adapter's params, in Istio 1.4's shape (`adapter.prometheus.config.Params`),
//! and their validation into a [`PrometheusConfig`].

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use mixer_adapter_api::{DurationParam, ParamError};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// Istio's default namespace: metric names become `istio_<name>`.
pub const DEFAULT_NAMESPACE: &str = "istio";

/// The most bucket bounds one histogram may have (each series keeps one counter per bucket).
pub const MAX_BUCKETS: usize = 1_000;

/// `params` of a prometheus handler.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PrometheusParams {
    /// The metrics this handler exposes, one per metric instance it takes.
    #[serde(default)]
    pub metrics: Vec<MetricInfo>,
    /// When series that stop receiving updates are dropped; absent: never.
    #[serde(default, alias = "metrics_expiration_policy")]
    pub metrics_expiration_policy: Option<ExpirationPolicy>,
    /// Not in Istio: most series (label combinations, across the handler's metrics) the
    /// handler keeps; a point that would make one more is dropped and counted. Default
    /// [`crate::DEFAULT_MAX_SERIES_PER_HANDLER`].
    #[serde(default, alias = "max_series")]
    pub max_series: Option<u64>,
}

/// How one metric instance is represented in Prometheus (`Params.MetricInfo`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricInfo {
    /// Prefix of the metric name (default `istio`); made Prometheus-safe as Istio did.
    #[serde(default)]
    pub namespace: String,
    /// The metric's name without the namespace; default: the sanitized instance name.
    #[serde(default)]
    pub name: String,
    /// The fully qualified name of the metric instance feeding this metric
    /// (`requestcount.istio-system`, or Istio's `requestcount.instance.istio-system`).
    #[serde(default, alias = "instance_name")]
    pub instance_name: String,
    /// HELP text; default: the name.
    #[serde(default)]
    pub description: String,
    /// COUNTER, GAUGE or DISTRIBUTION; required.
    #[serde(default)]
    pub kind: Kind,
    /// Histogram buckets, for DISTRIBUTION only.
    #[serde(default)]
    pub buckets: Option<BucketsDefinition>,
    /// Label names, matched against the instance's `dimensions`.
    #[serde(default, alias = "label_names")]
    pub label_names: Vec<String>,
    /// Not in Istio: for DISTRIBUTION, the instance's value is a histogram counted already
    /// (a STRING_MAP of upper bound to the observations at or below it, `+Inf` included, as
    /// the OTLP front end's `otel.metric.buckets`) instead of one observation. CUMULATIVE
    /// points replace the series' buckets, DELTA points are added to them.
    #[serde(default)]
    pub precounted: Option<Precounted>,
    /// Not in Istio: with `precounted`, the dimension holding the observations' sum (a
    /// number, not a label); absent: the `_sum` series stays 0.
    #[serde(default, alias = "sum_dimension")]
    pub sum_dimension: String,
}

/// How a pre-counted histogram's points combine with what the series holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Precounted {
    /// Each point holds everything counted since the start: it replaces the series' state.
    Cumulative,
    /// Each point holds what was counted since the previous point: it is added.
    Delta,
}

/// What kind of metric this is (`Params.MetricInfo.Kind`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Not set: a validation error.
    #[default]
    Unspecified,
    /// Set to the instance's value.
    Gauge,
    /// Incremented by the instance's value.
    Counter,
    /// A histogram observing the instance's value.
    Distribution,
}

impl Kind {
    /// Every kind, in Istio's enum order (0..=3).
    pub const ALL: [Kind; 4] = [
        Kind::Unspecified,
        Kind::Gauge,
        Kind::Counter,
        Kind::Distribution,
    ];

    /// Istio's enum name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Unspecified => "UNSPECIFIED",
            Kind::Gauge => "GAUGE",
            Kind::Counter => "COUNTER",
            Kind::Distribution => "DISTRIBUTION",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Accepts the enum name (as protobuf JSON does) or its number.
impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Kind, D::Error> {
        struct V;
        const EXPECTED: &str = "COUNTER, GAUGE or DISTRIBUTION (or 1-3)";
        impl Visitor<'_> for V {
            type Value = Kind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Kind, E> {
                Kind::ALL
                    .into_iter()
                    .find(|k| k.name() == v)
                    .ok_or_else(|| E::custom(format!("unknown kind {v:?}, expected {EXPECTED}")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Kind, E> {
                usize::try_from(v)
                    .ok()
                    .and_then(|i| Kind::ALL.get(i).copied())
                    .ok_or_else(|| E::custom(format!("unknown kind {v}, expected {EXPECTED}")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Kind, E> {
                match u64::try_from(v) {
                    Ok(u) => self.visit_u64(u),
                    Err(_) => Err(E::custom(format!("unknown kind {v}, expected {EXPECTED}"))),
                }
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// Histogram buckets (`Params.MetricInfo.BucketsDefinition`, a oneof: set exactly one).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BucketsDefinition {
    /// Linear buckets.
    #[serde(default, alias = "linear_buckets")]
    pub linear_buckets: Option<LinearBuckets>,
    /// Exponential buckets.
    #[serde(default, alias = "exponential_buckets")]
    pub exponential_buckets: Option<ExponentialBuckets>,
    /// Explicit bounds.
    #[serde(default, alias = "explicit_buckets")]
    pub explicit_buckets: Option<ExplicitBuckets>,
}

/// `numFiniteBuckets + 1` upper bounds `offset + width * i`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LinearBuckets {
    /// Must be greater than 0.
    #[serde(default, alias = "num_finite_buckets")]
    pub num_finite_buckets: i64,
    /// Must be greater than 0.
    #[serde(default)]
    pub width: f64,
    /// The first upper bound.
    #[serde(default)]
    pub offset: f64,
}

/// `numFiniteBuckets + 1` upper bounds `scale * growthFactor ^ i`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExponentialBuckets {
    /// Must be greater than 0.
    #[serde(default, alias = "num_finite_buckets")]
    pub num_finite_buckets: i64,
    /// Must be greater than 1.
    #[serde(default, alias = "growth_factor")]
    pub growth_factor: f64,
    /// Must be greater than 0.
    #[serde(default)]
    pub scale: f64,
}

/// Explicit upper bounds.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExplicitBuckets {
    /// Strictly increasing, finite, at least one.
    #[serde(default)]
    pub bounds: Vec<f64>,
}

/// When series are dropped (`Params.MetricsExpirationPolicy`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExpirationPolicy {
    /// A series not updated for this long is removed (`10m`); required, above zero.
    #[serde(default, alias = "metrics_expiry_duration")]
    pub metrics_expiry_duration: Option<DurationParam>,
    /// How often series are checked; default: half of `metricsExpiryDuration`.
    #[serde(default, alias = "expiry_check_interval_duration")]
    pub expiry_check_interval_duration: Option<DurationParam>,
}

/// One validated metric.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricSpec {
    /// The instance name as configured.
    pub instance_name: String,
    /// The exposed name, `<namespace>_<name>`.
    pub full_name: String,
    /// HELP text.
    pub help: String,
    /// Counter, gauge or histogram (never `Unspecified`).
    pub kind: Kind,
    /// Label names as configured (looked up in `dimensions`) and as exposed (sanitized).
    pub labels: Vec<Label>,
    /// Upper bounds, for histograms observing one value at a time.
    pub buckets: Vec<f64>,
    /// Set for histograms whose instance value is counted already.
    pub precounted: Option<Precounted>,
    /// The dimension holding a pre-counted histogram's sum.
    pub sum_dimension: Option<String>,
}

/// One label of a metric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// The name as configured: the dimension looked up first.
    pub configured: String,
    /// The Prometheus-safe name, also looked up in the dimensions when `configured` is absent.
    pub exposed: String,
}

/// Validated params, ready to build a handler.
#[derive(Clone, Debug, PartialEq)]
pub struct PrometheusConfig {
    /// The metrics, in config order.
    pub metrics: Vec<MetricSpec>,
    /// Series expiry, if configured.
    pub expiry: Option<Expiry>,
    /// Most series the handler keeps.
    pub max_series: usize,
}

/// A validated expiration policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expiry {
    /// Series idle for this long are dropped.
    pub ttl: Duration,
    /// At most this often.
    pub check_interval: Duration,
}

/// Istio's `safeName`: a leading `/` is dropped, `/`, `.` and spaces become `_`, `-` is removed.
pub fn safe_name(name: &str) -> String {
    let name = name.strip_prefix('/').unwrap_or(name);
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '/' | '.' | ' ' => out.push('_'),
            '-' => {}
            c => out.push(c),
        }
    }
    out
}

/// Prometheus' metric name syntax: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn is_valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Prometheus' label name syntax: `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__` (reserved).
pub fn is_valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

/// The key an instance name is matched by: Istio 1.4 configs name instances
/// `name.instance.namespace` (or `name.metric.namespace`), while instances reach handlers as
/// `name.namespace`; the generic kind in the middle is dropped.
pub fn instance_key(name: &str) -> String {
    let parts: Vec<&str> = name.splitn(3, '.').collect();
    match parts.as_slice() {
        [n, "instance" | "metric", ns] if !ns.is_empty() => format!("{n}.{ns}"),
        _ => name.to_string(),
    }
}

mod compile;

#[cfg(test)]
mod tests;
