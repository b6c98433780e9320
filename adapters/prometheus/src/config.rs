//! The prometheus adapter's params, in Istio 1.4's shape (`adapter.prometheus.config.Params`),
//! and their validation into a [`PrometheusConfig`].

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use mixer_adapter_api::ParamError;
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
    pub metrics_expiry_duration: Option<String>,
    /// How often series are checked; default: half of `metricsExpiryDuration`.
    #[serde(default, alias = "expiry_check_interval_duration")]
    pub expiry_check_interval_duration: Option<String>,
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
    /// Upper bounds, for histograms.
    pub buckets: Vec<f64>,
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

fn duration(path: &str, text: &str, errors: &mut Vec<ParamError>) -> Option<i64> {
    match mixer_model::Duration::parse(text.trim()) {
        Some(d) => Some(d.0),
        None => {
            errors.push(ParamError::new(
                path,
                format!("{text:?} is not a duration such as \"10m\" or \"1m30s\""),
            ));
            None
        }
    }
}

fn buckets(path: &str, def: &Option<BucketsDefinition>, errors: &mut Vec<ParamError>) -> Vec<f64> {
    let Some(def) = def else {
        // Istio used the client library's default buckets when none were given.
        return prometheus::DEFAULT_BUCKETS.to_vec();
    };
    let set = [
        def.linear_buckets.is_some(),
        def.exponential_buckets.is_some(),
        def.explicit_buckets.is_some(),
    ]
    .into_iter()
    .filter(|s| *s)
    .count();
    if set > 1 {
        errors.push(ParamError::new(
            path,
            "set only one of linearBuckets, exponentialBuckets and explicitBuckets",
        ));
        return Vec::new();
    }
    let before = errors.len();
    let count = |field: String, n: i64, errors: &mut Vec<ParamError>| -> usize {
        match usize::try_from(n) {
            Ok(n) if n > 0 && n < MAX_BUCKETS => n,
            _ => {
                errors.push(ParamError::new(
                    field,
                    format!(
                        "numFiniteBuckets must be between 1 and {}, it is {n}",
                        MAX_BUCKETS - 1
                    ),
                ));
                0
            }
        }
    };
    let bounds: Vec<f64> = if let Some(l) = &def.linear_buckets {
        let p = format!("{path}.linearBuckets");
        let n = count(
            format!("{p}.numFiniteBuckets"),
            l.num_finite_buckets,
            errors,
        );
        if !(l.width > 0.0 && l.width.is_finite()) {
            errors.push(ParamError::new(
                format!("{p}.width"),
                format!("width must be greater than 0, it is {}", l.width),
            ));
        }
        if !l.offset.is_finite() {
            errors.push(ParamError::new(
                format!("{p}.offset"),
                "offset must be a finite number",
            ));
        }
        (0..=n).map(|i| l.offset + l.width * i as f64).collect()
    } else if let Some(e) = &def.exponential_buckets {
        let p = format!("{path}.exponentialBuckets");
        let n = count(
            format!("{p}.numFiniteBuckets"),
            e.num_finite_buckets,
            errors,
        );
        if !(e.growth_factor > 1.0 && e.growth_factor.is_finite()) {
            errors.push(ParamError::new(
                format!("{p}.growthFactor"),
                format!(
                    "growthFactor must be greater than 1, it is {}",
                    e.growth_factor
                ),
            ));
        }
        if !(e.scale > 0.0 && e.scale.is_finite()) {
            errors.push(ParamError::new(
                format!("{p}.scale"),
                format!("scale must be greater than 0, it is {}", e.scale),
            ));
        }
        let mut bound = e.scale;
        let mut out = Vec::with_capacity(n + 1);
        for _ in 0..=n {
            out.push(bound);
            bound *= e.growth_factor;
        }
        out
    } else if let Some(x) = &def.explicit_buckets {
        let p = format!("{path}.explicitBuckets.bounds");
        if x.bounds.is_empty() {
            errors.push(ParamError::new(&p, "at least one bound is required"));
        } else if x.bounds.len() > MAX_BUCKETS {
            errors.push(ParamError::new(
                &p,
                format!(
                    "at most {MAX_BUCKETS} bounds are allowed, there are {}",
                    x.bounds.len()
                ),
            ));
        }
        for (i, b) in x.bounds.iter().enumerate() {
            if !b.is_finite() {
                errors.push(ParamError::new(
                    format!("{p}[{i}]"),
                    "bounds must be finite numbers",
                ));
            } else if i > 0 && x.bounds[i - 1] >= *b {
                errors.push(ParamError::new(
                    format!("{p}[{i}]"),
                    format!(
                        "bounds must be strictly increasing: {} follows {}",
                        b,
                        x.bounds[i - 1]
                    ),
                ));
            }
        }
        x.bounds.clone()
    } else {
        errors.push(ParamError::new(
            path,
            "set one of linearBuckets, exponentialBuckets and explicitBuckets",
        ));
        Vec::new()
    };
    if errors.len() == before && bounds.windows(2).any(|w| w[0] >= w[1] || !w[1].is_finite()) {
        // Large growth factors overflow; tiny widths lose precision.
        errors.push(ParamError::new(
            path,
            "the bucket bounds are not finite and strictly increasing",
        ));
    }
    bounds
}

impl PrometheusParams {
    /// Checks everything, collecting every problem with its path.
    pub fn compile(&self) -> Result<PrometheusConfig, Vec<ParamError>> {
        let mut errors = Vec::new();
        let mut metrics = Vec::with_capacity(self.metrics.len());
        let mut by_name: HashMap<String, usize> = HashMap::new();
        let mut by_instance: HashMap<String, usize> = HashMap::new();
        for (i, m) in self.metrics.iter().enumerate() {
            let path = format!("metrics[{i}]");
            let instance_name = m.instance_name.trim().to_string();
            if instance_name.is_empty() {
                errors.push(ParamError::new(
                    format!("{path}.instanceName"),
                    "instanceName is required: the fully qualified name of a metric instance",
                ));
            } else if let Some(first) = by_instance.insert(instance_key(&instance_name), i) {
                errors.push(ParamError::new(
                    format!("{path}.instanceName"),
                    format!("instance {instance_name:?} is already used by metrics[{first}]"),
                ));
                by_instance.insert(instance_key(&instance_name), first);
            }
            if m.kind == Kind::Unspecified {
                errors.push(ParamError::new(
                    format!("{path}.kind"),
                    "kind is required: COUNTER, GAUGE or DISTRIBUTION",
                ));
            }
            let namespace = if m.namespace.is_empty() {
                DEFAULT_NAMESPACE.to_string()
            } else {
                safe_name(&m.namespace)
            };
            if !namespace.is_empty() && !is_valid_metric_name(&namespace) {
                errors.push(ParamError::new(
                    format!("{path}.namespace"),
                    format!("{namespace:?} is not a valid Prometheus metric name prefix"),
                ));
            }
            let raw_name = if m.name.is_empty() {
                instance_name.as_str()
            } else {
                m.name.as_str()
            };
            let name = safe_name(raw_name);
            let full_name = if namespace.is_empty() {
                name.clone()
            } else {
                format!("{namespace}_{name}")
            };
            let name_field = if m.name.is_empty() {
                "instanceName"
            } else {
                "name"
            };
            if !raw_name.is_empty() && !is_valid_metric_name(&full_name) {
                errors.push(ParamError::new(
                    format!("{path}.{name_field}"),
                    format!("{full_name:?} is not a valid Prometheus metric name"),
                ));
            } else if !raw_name.is_empty() {
                if let Some(first) = by_name.get(&full_name) {
                    errors.push(ParamError::new(
                        format!("{path}.{name_field}"),
                        format!("metric name {full_name:?} is already used by metrics[{first}]"),
                    ));
                } else {
                    by_name.insert(full_name.clone(), i);
                }
            }
            let mut labels: Vec<Label> = Vec::with_capacity(m.label_names.len());
            for (j, l) in m.label_names.iter().enumerate() {
                let lpath = format!("{path}.labelNames[{j}]");
                let exposed = safe_name(l);
                if !is_valid_label_name(&exposed) {
                    errors.push(ParamError::new(
                        lpath,
                        format!(
                            "{l:?} is not a valid Prometheus label name \
                             ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)"
                        ),
                    ));
                } else if m.kind == Kind::Distribution && exposed == "le" {
                    errors.push(ParamError::new(
                        lpath,
                        "\"le\" is reserved for histogram buckets",
                    ));
                } else if let Some(k) = labels.iter().position(|x| x.exposed == exposed) {
                    errors.push(ParamError::new(
                        lpath,
                        format!("label {exposed:?} is already used by labelNames[{k}]"),
                    ));
                } else {
                    labels.push(Label {
                        configured: l.clone(),
                        exposed,
                    });
                }
            }
            let buckets = if m.kind == Kind::Distribution {
                buckets(&format!("{path}.buckets"), &m.buckets, &mut errors)
            } else {
                // Ignored for other kinds, as Istio did.
                Vec::new()
            };
            let help = if m.description.trim().is_empty() {
                raw_name.to_string()
            } else {
                m.description.clone()
            };
            metrics.push(MetricSpec {
                instance_name,
                full_name,
                help,
                kind: m.kind,
                labels,
                buckets,
            });
        }

        let expiry = self.metrics_expiration_policy.as_ref().and_then(|p| {
            let base = "metricsExpirationPolicy";
            let ttl = match &p.metrics_expiry_duration {
                None => {
                    errors.push(ParamError::new(
                        format!("{base}.metricsExpiryDuration"),
                        "metricsExpiryDuration is required in an expiration policy",
                    ));
                    None
                }
                Some(t) => duration(&format!("{base}.metricsExpiryDuration"), t, &mut errors),
            };
            if let Some(t) = ttl
                && t <= 0
            {
                errors.push(ParamError::new(
                    format!("{base}.metricsExpiryDuration"),
                    format!(
                        "metricsExpiryDuration {} is invalid, must be > 0",
                        mixer_model::Duration(t)
                    ),
                ));
            }
            let interval = match &p.expiry_check_interval_duration {
                None => Some(0),
                Some(t) => duration(
                    &format!("{base}.expiryCheckIntervalDuration"),
                    t,
                    &mut errors,
                ),
            };
            if let Some(i) = interval
                && i < 0
            {
                errors.push(ParamError::new(
                    format!("{base}.expiryCheckIntervalDuration"),
                    format!(
                        "expiryCheckIntervalDuration {} is invalid, must be >= 0",
                        mixer_model::Duration(i)
                    ),
                ));
            }
            let (ttl, interval) = (ttl?, interval?);
            if ttl <= 0 || interval < 0 {
                return None;
            }
            let interval = if interval == 0 { ttl / 2 } else { interval };
            Some(Expiry {
                ttl: mixer_model::Duration(ttl).to_std(),
                check_interval: mixer_model::Duration(interval.max(1)).to_std(),
            })
        });

        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(PrometheusConfig { metrics, expiry })
    }

    /// Every problem with these params.
    pub fn validate(&self) -> Result<(), Vec<ParamError>> {
        self.compile().map(|_| ())
    }
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

#[cfg(test)]
mod tests;
