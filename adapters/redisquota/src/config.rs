//! redisquota's params: Istio 1.4's `adapter.redisquota.config.Params` plus
//! `minDeduplicationDuration` (Istio kept deduplication records for the window) and, in each
//! quota, `rateLimitAlgorithm: TOKEN_BUCKET`, `shadowMode` and override `validDuration`.

use std::time::Duration;

use mixer_adapter_api::ParamError;
use mixer_adapter_quota_common::{Algorithm, QuotaParams, Quotas, dedup_duration};
use serde::Deserialize;

/// Connections (each multiplexed) when `connectionPoolSize` is absent or 0.
pub const DEFAULT_POOL_SIZE: usize = 2;
/// Most connections accepted.
pub const MAX_POOL_SIZE: i64 = 64;

/// `params` of a redisquota handler.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RedisQuotaParams {
    /// The known quotas.
    #[serde(default)]
    pub quotas: Vec<QuotaParams>,
    /// `host:port` as Istio had it, or a `redis://[:password@]host:port[/db]` URL.
    #[serde(default)]
    pub redis_server_url: String,
    /// Connections to Redis (default 2, at most 64); each is multiplexed and reconnects by
    /// itself, allocations are spread over them in turn.
    #[serde(default)]
    pub connection_pool_size: Option<i64>,
    /// How long a deduplication id is remembered in Redis (default `1s`, > 0).
    #[serde(default)]
    pub min_deduplication_duration: Option<String>,
}

/// Validated params.
#[derive(Clone, Debug)]
pub struct RedisQuotaConfig {
    /// The quotas.
    pub quotas: Quotas,
    /// The URL for the redis client (`redis://host:port`).
    pub url: String,
    /// Connections.
    pub pool_size: usize,
    /// Deduplication memory.
    pub min_deduplication_duration: Duration,
}

/// `host:port` becomes `redis://host:port`; URLs stay as they are.
pub fn redis_url(text: &str) -> String {
    let text = text.trim();
    if text.contains("://") {
        text.to_string()
    } else {
        format!("redis://{text}")
    }
}

impl RedisQuotaParams {
    /// Validates, collecting every problem with its path. The default algorithm is
    /// `FIXED_WINDOW`, as Istio's. Redis is not contacted: a handler builds while Redis is
    /// down and its allocations fail (retryable UNAVAILABLE) until Redis answers.
    pub fn compile(&self) -> Result<RedisQuotaConfig, Vec<ParamError>> {
        let mut errors = Vec::new();
        let quotas = match Quotas::compile(&self.quotas, Algorithm::FixedWindow) {
            Ok(q) => Some(q),
            Err(e) => {
                errors.extend(e);
                None
            }
        };
        let url = redis_url(&self.redis_server_url);
        if self.redis_server_url.trim().is_empty() {
            errors.push(ParamError::new(
                "redisServerUrl",
                "redisServerUrl should not be empty (host:port)",
            ));
        } else if let Err(e) = redis::Client::open(url.as_str()) {
            errors.push(ParamError::new(
                "redisServerUrl",
                format!("invalid redis address {:?}: {e}", self.redis_server_url),
            ));
        }
        let pool_size = match self.connection_pool_size {
            None | Some(0) => DEFAULT_POOL_SIZE,
            Some(n) if !(0..=MAX_POOL_SIZE).contains(&n) => {
                errors.push(ParamError::new(
                    "connectionPoolSize",
                    format!("connectionPoolSize of {n} is invalid, must be 0-{MAX_POOL_SIZE}"),
                ));
                DEFAULT_POOL_SIZE
            }
            Some(n) => n as usize,
        };
        let dedup = dedup_duration(&self.min_deduplication_duration, &mut errors);
        match quotas {
            Some(quotas) if errors.is_empty() => Ok(RedisQuotaConfig {
                quotas,
                url,
                pool_size,
                min_deduplication_duration: dedup,
            }),
            _ => Err(errors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mixer_adapter_api::decode_params;
    use serde_json::json;

    fn compile(v: serde_json::Value) -> Result<RedisQuotaConfig, Vec<ParamError>> {
        decode_params::<RedisQuotaParams>(&v)
            .map_err(|e| vec![e])?
            .compile()
    }

    #[test]
    fn istio_params_and_errors() {
        let q = json!([{"name": "rq", "maxAmount": 1, "validDuration": "1s"}]);
        let c = compile(json!({"redisServerUrl": "redis:6379", "quotas": q})).expect("valid");
        assert_eq!(c.url, "redis://redis:6379");
        assert_eq!(c.pool_size, DEFAULT_POOL_SIZE);
        assert_eq!(c.min_deduplication_duration, Duration::from_secs(1));
        assert_eq!(c.quotas.quotas[0].limit.algorithm, Algorithm::FixedWindow);
        let c = compile(
            json!({"redisServerUrl": "redis://:pw@h:1/2", "connectionPoolSize": 10,
            "minDeduplicationDuration": "5s", "quotas": q}),
        )
        .expect("valid");
        assert_eq!((c.pool_size, c.url.as_str()), (10, "redis://:pw@h:1/2"));
        let errs = compile(
            json!({"connectionPoolSize": -1, "minDeduplicationDuration": "x",
            "quotas": [{"name": "rq", "maxAmount": 1, "validDuration": "1s",
                        "rateLimitAlgorithm": "LEAKY"}]}),
        )
        .expect_err("invalid");
        assert_eq!(errs[0].path, "quotas[0].rateLimitAlgorithm");
        let errs = compile(
            json!({"connectionPoolSize": -1, "minDeduplicationDuration": "x",
            "redisServerUrl": "http://h:1", "quotas": q}),
        )
        .expect_err("invalid");
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "redisServerUrl",
                "connectionPoolSize",
                "minDeduplicationDuration"
            ]
        );
    }
}
