//! What the built-in quota adapters (`memquota`, `redisquota`) share, so that both read the
//! same params and select the same counter for the same instance:
//!
//! - [`QuotaParams`] / [`OverrideParams`]: Istio 1.4's `quotas` entries (camelCase), plus
//!   `rateLimitAlgorithm: TOKEN_BUCKET` and `shadowMode`; [`Quotas::compile`] validates them,
//!   collecting every problem with its params path;
//! - [`Quotas::select`]: the quota by instance name, the first override whose dimensions all
//!   match, and the counter key ([`counter_key`]);
//! - [`finish`]: the [`QuotaResult`](mixer_model::QuotaResult) for a [`Decision`], shadow mode
//!   and each adapter's Istio answer to a refusal ([`Refusal`]) included; [`Metrics`]: counters in the Prometheus text format.
//!
//! ```
//! use mixer_adapter_quota_common::{Algorithm, QuotaParams, Quotas};
//! use mixer_model::{FieldValue, Instance, Template, Value};
//!
//! let params: Vec<QuotaParams> = serde_json::from_value(serde_json::json!([{
//!     "name": "requestcount",
//!     "maxAmount": 100,
//!     "validDuration": "1s",
//!     "overrides": [{"dimensions": {"user": "vip"}, "maxAmount": 1000}]
//! }])).unwrap();
//! let quotas = Quotas::compile(&params, Algorithm::FixedWindow).expect("valid");
//! let instance = Instance {
//!     name: "requestcount.istio-system".into(),
//!     template: Template::Quota,
//!     fields: vec![("dimensions", FieldValue::Map(vec![("user".into(), Value::from("vip"))]))],
//! };
//! let selected = quotas.select(&instance).expect("configured");
//! assert_eq!(selected.limit.max_amount, 1000);
//! assert_eq!(selected.key, "requestcount|4:user=s3:vip");
//! ```

mod config;
mod metrics;
mod outcome;
mod select;

pub use config::{
    Algorithm, DEFAULT_DEDUP, Limit, MAX_BUCKETS, MIN_DURATION, Override, OverrideParams, Quota,
    QuotaParams, Quotas, dedup_duration, default_bucket,
};
pub use metrics::{Metrics, QuotaMetrics, escape, render_one};
pub use outcome::{Decision, Refusal, finish, finish_with_minimum, min_remaining};
pub use select::{Selected, counter_key, counter_key_into, matches};

#[cfg(test)]
mod tests;
