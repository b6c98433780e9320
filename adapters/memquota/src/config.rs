//! memquota's params: Istio 1.4's `adapter.memquota.config.Params` plus `maxKeys` (and, in
//! each quota, `bucketDuration`, `rateLimitAlgorithm` and `shadowMode`).

use std::time::Duration;

use mixer_adapter_api::{DurationParam, ParamError};
use mixer_adapter_quota_common::{Algorithm, QuotaParams, Quotas, dedup_duration};
use serde::Deserialize;

/// Default cap on counters (and, separately, on remembered deduplication ids).
pub const DEFAULT_MAX_KEYS: u64 = 100_000;

/// `params` of a memquota handler.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MemQuotaParams {
    /// The known quotas.
    #[serde(default)]
    pub quotas: Vec<QuotaParams>,
    /// How long a deduplication id is remembered (default `1s`, > 0).
    #[serde(default)]
    pub min_deduplication_duration: Option<DurationParam>,
    /// Most counters kept at once (default 100000); beyond it the least recently used is
    /// dropped. The same cap applies to remembered deduplication ids.
    #[serde(default)]
    pub max_keys: Option<u64>,
}

/// Validated params.
#[derive(Clone, Debug)]
pub struct MemQuotaConfig {
    /// The quotas.
    pub quotas: Quotas,
    /// Deduplication memory.
    pub min_deduplication_duration: Duration,
    /// Counter cap.
    pub max_keys: u64,
}

impl MemQuotaParams {
    /// Validates, collecting every problem with its path. The default algorithm is
    /// `ROLLING_WINDOW`, what Istio's memquota did (in 100 ms ticks).
    pub fn compile(&self) -> Result<MemQuotaConfig, Vec<ParamError>> {
        let mut errors = Vec::new();
        let quotas = Quotas::compile(&self.quotas, Algorithm::RollingWindow);
        let quotas = match quotas {
            Ok(q) => Some(q),
            Err(e) => {
                errors.extend(e);
                None
            }
        };
        let dedup = dedup_duration(&self.min_deduplication_duration, &mut errors);
        let max_keys = self.max_keys.unwrap_or(DEFAULT_MAX_KEYS);
        if max_keys == 0 {
            errors.push(ParamError::new("maxKeys", "maxKeys must be > 0"));
        }
        match quotas {
            Some(quotas) if errors.is_empty() => Ok(MemQuotaConfig {
                quotas,
                min_deduplication_duration: dedup,
                max_keys,
            }),
            _ => Err(errors),
        }
    }
}
