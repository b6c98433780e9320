//! The `quotas` params shared by memquota and redisquota (Istio 1.4's `Params.Quota` and
//! `Params.Override`, plus `rateLimitAlgorithm: TOKEN_BUCKET` and `shadowMode`), and their
//! validation into [`Quotas`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::{DurationParam, ParamError};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// Most buckets one rolling window may have (`validDuration / bucketDuration`); bounds the
/// memory (memquota) or hash fields (redisquota) one counter can use.
pub const MAX_BUCKETS: u64 = 1000;

/// Shortest `validDuration` / `bucketDuration` accepted.
pub const MIN_DURATION: Duration = Duration::from_millis(1);

/// Istio's default `minDeduplicationDuration`.
pub const DEFAULT_DEDUP: Duration = Duration::from_secs(1);

/// How a quota counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// A window of `validDuration` that starts with the first allocation for a key and ends
    /// `validDuration` later; the next allocation after it starts a new window. Up to
    /// `maxAmount` per window (so up to twice that across a boundary). Istio's redisquota default.
    #[default]
    FixedWindow,
    /// The last `validDuration`, counted in buckets of `bucketDuration`: a unit counts from
    /// its grant until the end of the bucket `validDuration` later, so for at most
    /// `validDuration` and at least `validDuration - bucketDuration`.
    RollingWindow,
    /// A bucket of capacity `maxAmount` (the burst), full at first, refilled continuously
    /// (fractionally) at `maxAmount` per `validDuration`; an allocation takes `amount` tokens.
    TokenBucket,
}

impl Algorithm {
    /// Every algorithm, in enum order (0..=2; 0 and 1 are Istio's numbers).
    pub const ALL: [Algorithm; 3] = [
        Algorithm::FixedWindow,
        Algorithm::RollingWindow,
        Algorithm::TokenBucket,
    ];

    /// The config name (`ROLLING_WINDOW`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "FIXED_WINDOW",
            Algorithm::RollingWindow => "ROLLING_WINDOW",
            Algorithm::TokenBucket => "TOKEN_BUCKET",
        }
    }

    /// A short tag for storage keys (`fw`, `rw`, `tb`).
    pub fn tag(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fw",
            Algorithm::RollingWindow => "rw",
            Algorithm::TokenBucket => "tb",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Accepts the enum name (as protobuf JSON does) or its number.
impl<'de> Deserialize<'de> for Algorithm {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Algorithm, D::Error> {
        struct V;
        const EXPECTED: &str = "FIXED_WINDOW, ROLLING_WINDOW or TOKEN_BUCKET (or 0-2)";
        impl Visitor<'_> for V {
            type Value = Algorithm;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Algorithm, E> {
                Algorithm::ALL
                    .into_iter()
                    .find(|a| a.name() == v)
                    .ok_or_else(|| {
                        E::custom(format!(
                            "unknown rateLimitAlgorithm {v:?}, expected {EXPECTED}"
                        ))
                    })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Algorithm, E> {
                usize::try_from(v)
                    .ok()
                    .and_then(|i| Algorithm::ALL.get(i).copied())
                    .ok_or_else(|| {
                        E::custom(format!(
                            "unknown rateLimitAlgorithm {v}, expected {EXPECTED}"
                        ))
                    })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Algorithm, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!(
                        "unknown rateLimitAlgorithm {v}, expected {EXPECTED}"
                    ))),
                }
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// One entry of `quotas`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QuotaParams {
    /// The quota instance's name: the full name (`requestcount.istio-system`), Istio's
    /// `requestcount.quota.istio-system` form, or the short name (`requestcount`) for an
    /// instance of that name in any namespace.
    #[serde(default)]
    pub name: String,
    /// The limit (required, `>= 0`).
    #[serde(default)]
    pub max_amount: Option<i64>,
    /// The window (required, `> 0`): a duration such as `1s`.
    #[serde(default)]
    pub valid_duration: Option<DurationParam>,
    /// Rolling window granularity (default `max(100ms, validDuration / 600)`, capped at
    /// `validDuration`); ignored by the other algorithms.
    #[serde(default)]
    pub bucket_duration: Option<DurationParam>,
    /// How to count (the adapter's default when absent).
    #[serde(default)]
    pub rate_limit_algorithm: Option<Algorithm>,
    /// Count and report, but always grant.
    #[serde(default)]
    pub shadow_mode: bool,
    /// Limits for particular dimension values; the first that matches applies.
    #[serde(default)]
    pub overrides: Vec<OverrideParams>,
}

/// One entry of a quota's `overrides`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OverrideParams {
    /// Dimension values that must all be equal (as text) to the instance's.
    #[serde(default)]
    pub dimensions: BTreeMap<String, serde_json::Value>,
    /// The limit for matching instances (required, `>= 0`).
    #[serde(default)]
    pub max_amount: Option<i64>,
    /// The window for matching instances (default: the quota's).
    #[serde(default)]
    pub valid_duration: Option<DurationParam>,
    /// Shadow mode for matching instances (default: the quota's).
    #[serde(default)]
    pub shadow_mode: Option<bool>,
}

/// A validated limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Units per window (fixed and rolling) or bucket capacity (token bucket).
    pub max_amount: i64,
    /// Window, or the time to refill the whole token bucket.
    pub valid_duration: Duration,
    /// Rolling window bucket.
    pub bucket_duration: Duration,
    /// How to count.
    pub algorithm: Algorithm,
    /// Grant always; report what would have happened.
    pub shadow: bool,
}

impl Limit {
    /// Buckets in a rolling window: `ceil(validDuration / bucketDuration)`.
    pub fn buckets(&self) -> u64 {
        let b = self.bucket_duration.as_nanos().max(1);
        self.valid_duration.as_nanos().div_ceil(b) as u64
    }
}

/// A validated override.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Override {
    /// Dimension name and the text its value must have, sorted by name.
    pub dimensions: Vec<(String, String)>,
    /// The limit that applies when they match.
    pub limit: Limit,
}

/// A validated quota.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Its name as configured.
    pub name: Arc<str>,
    /// Position in `quotas` (index into per-quota metrics).
    pub index: usize,
    /// The quota's own limit.
    pub limit: Limit,
    /// In config order.
    pub overrides: Vec<Override>,
}

/// The validated `quotas` of a handler.
#[derive(Clone, Debug, Default)]
pub struct Quotas {
    /// In config order.
    pub quotas: Vec<Quota>,
    /// Full names (and Istio's `name.quota.namespace` rewritten to `name.namespace`).
    pub(crate) by_full_name: NameIndex,
    /// Names without a dot, matching an instance of that name in any namespace.
    pub(crate) by_short_name: NameIndex,
}

/// Quota names to their index. Looked up by the name of an instance on every allocation;
/// both sides come from config, never from a request, so a fast hasher (foldhash, randomly
/// seeded) does instead of SipHash, which cost more than the rest of the lookup.
pub(crate) type NameIndex = HashMap<String, usize, foldhash::fast::RandomState>;

/// `minDeduplicationDuration`: default 1s, must be > 0.
pub fn dedup_duration(param: &Option<DurationParam>, errors: &mut Vec<ParamError>) -> Duration {
    let Some(param) = param else {
        return DEFAULT_DEDUP;
    };
    match ParamError::collect(param.non_negative("minDeduplicationDuration"), errors) {
        Some(d) if d.is_zero() => {
            errors.push(ParamError::new(
                "minDeduplicationDuration",
                "deduplication window of 0s is invalid, must be > 0",
            ));
            DEFAULT_DEDUP
        }
        Some(d) => d,
        None => DEFAULT_DEDUP,
    }
}

fn show(d: Duration) -> String {
    mixer_model::Duration::from_std(d).to_string()
}

/// The default bucket: `max(100ms, validDuration / 600)`, at most `validDuration`.
pub fn default_bucket(valid: Duration) -> Duration {
    (valid / 600).max(Duration::from_millis(100)).min(valid)
}

fn dimension_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

impl Quotas {
    /// Validates `quotas` (at params path `quotas`), collecting every problem with its path.
    /// `default_algorithm` applies where `rateLimitAlgorithm` is absent.
    pub fn compile(
        params: &[QuotaParams],
        default_algorithm: Algorithm,
    ) -> Result<Quotas, Vec<ParamError>> {
        let mut errors = Vec::new();
        if params.is_empty() {
            errors.push(ParamError::new("quotas", "quotas should not be empty"));
        }
        let mut out = Quotas::default();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, q) in params.iter().enumerate() {
            let path = format!("quotas[{i}]");
            let name = q.name.trim();
            if name.is_empty() {
                errors.push(ParamError::new(
                    format!("{path}.name"),
                    "quota name should not be empty",
                ));
            } else if let Some(first) = seen.insert(name, i) {
                errors.push(ParamError::new(
                    format!("{path}.name"),
                    format!("duplicate quota name {name:?} (also quotas[{first}])"),
                ));
            }
            let max_amount = check_max(&format!("{path}.maxAmount"), q.max_amount, &mut errors);
            let valid = match &q.valid_duration {
                None => {
                    errors.push(ParamError::new(
                        format!("{path}.validDuration"),
                        "validDuration is required and must be > 0",
                    ));
                    None
                }
                Some(t) => positive(&format!("{path}.validDuration"), t, &mut errors),
            };
            let algorithm = q.rate_limit_algorithm.unwrap_or(default_algorithm);
            let bucket = match (&q.bucket_duration, valid) {
                (Some(t), _) => positive(&format!("{path}.bucketDuration"), t, &mut errors),
                (None, Some(v)) => Some(default_bucket(v)),
                (None, None) => None,
            };
            if algorithm == Algorithm::RollingWindow
                && let (Some(v), Some(b)) = (valid, bucket)
                && q.bucket_duration.is_some()
            {
                if v <= b {
                    errors.push(ParamError::new(
                        format!("{path}.validDuration"),
                        format!(
                            "validDuration {} should be longer than bucketDuration {} for ROLLING_WINDOW",
                            show(v),
                            show(b)
                        ),
                    ));
                } else if v.as_nanos().div_ceil(b.as_nanos()) > u128::from(MAX_BUCKETS) {
                    errors.push(ParamError::new(
                        format!("{path}.bucketDuration"),
                        format!(
                            "validDuration {} / bucketDuration {} makes more than {MAX_BUCKETS} buckets",
                            show(v),
                            show(b)
                        ),
                    ));
                }
            }
            let base = Limit {
                max_amount: max_amount.unwrap_or(0),
                valid_duration: valid.unwrap_or(Duration::from_secs(1)),
                bucket_duration: bucket.unwrap_or(Duration::from_millis(100)),
                algorithm,
                shadow: q.shadow_mode,
            };
            let mut overrides = Vec::new();
            for (j, o) in q.overrides.iter().enumerate() {
                let opath = format!("{path}.overrides[{j}]");
                if o.dimensions.is_empty() {
                    errors.push(ParamError::new(
                        format!("{opath}.dimensions"),
                        "override dimensions should not be empty",
                    ));
                }
                let mut dims = Vec::new();
                for (k, v) in &o.dimensions {
                    match dimension_text(v) {
                        Some(text) => dims.push((k.clone(), text)),
                        None => errors.push(ParamError::new(
                            format!("{opath}.dimensions.{k}"),
                            "a dimension value must be a string, number or boolean",
                        )),
                    }
                }
                let max = check_max(&format!("{opath}.maxAmount"), o.max_amount, &mut errors);
                let mut limit = base.clone();
                limit.max_amount = max.unwrap_or(0);
                limit.shadow = o.shadow_mode.unwrap_or(q.shadow_mode);
                if let Some(t) = &o.valid_duration
                    && let Some(v) = positive(&format!("{opath}.validDuration"), t, &mut errors)
                {
                    limit.valid_duration = v;
                    if q.bucket_duration.is_none() {
                        limit.bucket_duration = default_bucket(v);
                    } else if algorithm == Algorithm::RollingWindow
                        && (v <= limit.bucket_duration
                            || v.as_nanos().div_ceil(limit.bucket_duration.as_nanos())
                                > u128::from(MAX_BUCKETS))
                    {
                        errors.push(ParamError::new(
                            format!("{opath}.validDuration"),
                            format!(
                                "validDuration {} must be longer than bucketDuration {} and at most {MAX_BUCKETS} buckets",
                                show(v),
                                show(limit.bucket_duration)
                            ),
                        ));
                    }
                }
                overrides.push(Override {
                    dimensions: dims,
                    limit,
                });
            }
            out.quotas.push(Quota {
                name: Arc::from(name),
                index: i,
                limit: base,
                overrides,
            });
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        for q in &out.quotas {
            if q.name.contains('.') {
                out.by_full_name.insert(q.name.to_string(), q.index);
                // Istio 1.4 named instances `name.kind.namespace` (`requestcount.quota.istio-system`).
                let parts: Vec<&str> = q.name.split('.').collect();
                if parts.len() == 3 && matches!(parts[1], "quota" | "instance") {
                    out.by_full_name
                        .entry(format!("{}.{}", parts[0], parts[2]))
                        .or_insert(q.index);
                }
                // And the other way: `name.namespace` under the full names instances reach
                // the handler by, so that `find` answers them with one lookup instead of
                // building the name without its kind per allocation (a `ratelimitconfig`'s
                // quotas are named so). A quota with that full name keeps it.
                if let [name, namespace] = parts[..] {
                    for kind in ["instance", "quota"] {
                        out.by_full_name
                            .entry(format!("{name}.{kind}.{namespace}"))
                            .or_insert(q.index);
                    }
                }
            } else {
                out.by_short_name.insert(q.name.to_string(), q.index);
            }
        }
        Ok(out)
    }
}

fn check_max(path: &str, v: Option<i64>, errors: &mut Vec<ParamError>) -> Option<i64> {
    match v {
        None => {
            errors.push(ParamError::new(path, "maxAmount is required (>= 0)"));
            None
        }
        Some(n) if n < 0 => {
            errors.push(ParamError::new(
                path,
                format!("maxAmount must be >= 0, it is {n}"),
            ));
            None
        }
        Some(n) => Some(n),
    }
}

fn positive(path: &str, param: &DurationParam, errors: &mut Vec<ParamError>) -> Option<Duration> {
    let d = ParamError::collect(param.non_negative(path), errors)?;
    if d < MIN_DURATION {
        errors.push(ParamError::new(
            path,
            format!("must be at least {}, it is {}", show(MIN_DURATION), show(d)),
        ));
        return None;
    }
    Some(d)
}
