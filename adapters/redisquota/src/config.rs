//! redisquota's params: Istio 1.4's `adapter.redisquota.config.Params` plus
//! `minDeduplicationDuration` (Istio kept deduplication records for the window), the call
//! budget and circuit breaker (`callTimeout`, `breakerFailureThreshold`, `breakerCoolDown`)
//! and, in each quota, `rateLimitAlgorithm: TOKEN_BUCKET`, `shadowMode` and override
//! `validDuration`.

use std::time::Duration;

use mixer_adapter_api::breaker::BreakerOptions;
use mixer_adapter_api::secrets::{SecretParam, redact_url};
use mixer_adapter_api::{DurationParam, ParamError};
use mixer_adapter_quota_common::{Algorithm, QuotaParams, Quotas, dedup_duration};
use redis::IntoConnectionInfo;

use crate::lease::DEFAULT_LEASE_IDLE_TIMEOUT;
use crate::over_limit::DEFAULT_LOCAL_CACHE_SIZE;
use serde::Deserialize;

/// Connections (each multiplexed) when `connectionPoolSize` is absent or 0.
pub const DEFAULT_POOL_SIZE: usize = 2;
/// Most connections accepted.
pub const MAX_POOL_SIZE: i64 = 64;
/// How long one call to Redis may take when `callTimeout` is absent: well under Envoy's
/// default rate limit timeout (20 ms), so that the fail policy reaches the proxy before the
/// proxy gives up. A Redis on the same network answers in well under a millisecond.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_millis(5);
/// Most `callTimeout` accepted: a check waits for it.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Consecutive failed calls that open the circuit when `breakerFailureThreshold` is absent.
pub const DEFAULT_BREAKER_FAILURE_THRESHOLD: u32 = 5;
/// How long the circuit stays open when `breakerCoolDown` is absent.
pub const DEFAULT_BREAKER_COOL_DOWN: Duration = Duration::from_millis(500);

/// Most keys the local over-limit cache may be given (an entry is about 100 bytes).
pub const MAX_LOCAL_CACHE_SIZE: usize = 10_000_000;

/// Largest `leaseSize` accepted (a block is counted in one Lua number).
pub const MAX_LEASE_SIZE: i64 = 1_000_000_000;

/// `params` of a redisquota handler.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RedisQuotaParams {
    /// The known quotas.
    #[serde(default)]
    pub quotas: Vec<QuotaParams>,
    /// `host:port` as Istio had it, a `redis://[:password@]host:port[/db]` URL, or
    /// `redis+cluster://host:port,host:port` for a Redis Cluster (its seed nodes).
    #[serde(default)]
    pub redis_server_url: String,
    /// The Redis password (`AUTH`), instead of one in the URL; or `passwordFile`, a file
    /// holding it, read at every config load. Either replaces the URL's password.
    #[serde(default)]
    pub password: Option<String>,
    /// Connections to Redis (default 2, at most 64); each is multiplexed and reconnects by
    /// itself, allocations are spread over them in turn.
    #[serde(default)]
    pub connection_pool_size: Option<i64>,
    /// How long a deduplication id is remembered in Redis (default `1s`, > 0).
    #[serde(default)]
    pub min_deduplication_duration: Option<DurationParam>,
    /// Longest one call to Redis may take, connecting included (default `5ms`); past it the
    /// allocation fails (retryable) and the fail policy applies.
    #[serde(default)]
    pub call_timeout: Option<DurationParam>,
    /// Consecutive failed calls that open the circuit breaker (default 5; 0 turns it off).
    /// While open, allocations fail at once without calling Redis.
    #[serde(default)]
    pub breaker_failure_threshold: Option<i64>,
    /// How long the circuit stays open before one probe call is let through (default
    /// `500ms`); the probe's success closes it.
    #[serde(default)]
    pub breaker_cool_down: Option<DurationParam>,
    /// Keys held by the local over-limit cache (default 0: off): a fixed or rolling window
    /// counter Redis said is exhausted is refused locally until its window (or oldest
    /// bucket) ends, without a Redis call. Exact while Redis keeps its counters; during an
    /// outage cached keys stay refused instead of getting the fail policy.
    #[serde(default)]
    pub local_cache_size: Option<i64>,
    /// Units a replica takes from a counter in one call and grants locally (default 0:
    /// off; FIXED_WINDOW quotas only, not on a Redis Cluster). Never over-admits; a replica
    /// may deny while others hold unused units (see `lease.rs`).
    #[serde(default)]
    pub lease_size: Option<i64>,
    /// How long a lease may sit unused before its units are given back (default `1s`).
    #[serde(default)]
    pub lease_idle_timeout: Option<DurationParam>,
}

/// Validated params.
#[derive(Clone, Debug)]
pub struct RedisQuotaConfig {
    /// The quotas.
    pub quotas: Quotas,
    /// The URL for the redis client (`redis://host:port`), as written: it may hold a
    /// password, so show [`mixer_adapter_api::secrets::redact_url`] of it.
    pub url: String,
    /// Where the client connects, with the password of `password` if one was given (for a
    /// cluster, its first seed node).
    pub connection: redis::ConnectionInfo,
    /// The seed nodes of a Redis Cluster (`redis+cluster://`), each with that password;
    /// `None` for one Redis.
    pub cluster: Option<Vec<redis::ConnectionInfo>>,
    /// Connections.
    pub pool_size: usize,
    /// Deduplication memory.
    pub min_deduplication_duration: Duration,
    /// The budget of one call to Redis.
    pub call_timeout: Duration,
    /// The circuit breaker.
    pub breaker: BreakerOptions,
    /// Keys of the local over-limit cache (0: off).
    pub local_cache_size: usize,
    /// Units of a lease (0: off).
    pub lease_size: i64,
    /// How long an unused lease is kept.
    pub lease_idle_timeout: Duration,
}

/// The params holding secrets: the URL's password and `password` (also as `passwordFile`).
pub const SECRET_PARAMS: &[SecretParam] = &[
    SecretParam::url("redisServerUrl"),
    SecretParam::value("password"),
];

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
        let mut connection = None;
        let mut cluster = None;
        // A cluster is named by its seeds; each is parsed (and given the password) alone.
        let seeds: Vec<String> = match url.strip_prefix("redis+cluster://") {
            Some(rest) => rest
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| format!("redis://{s}"))
                .collect(),
            None => vec![url.clone()],
        };
        if self.redis_server_url.trim().is_empty() || seeds.is_empty() {
            errors.push(ParamError::new(
                "redisServerUrl",
                "redisServerUrl should not be empty (host:port)",
            ));
        } else {
            let mut infos = Vec::new();
            for seed in &seeds {
                match seed.as_str().into_connection_info() {
                    Ok(info) => infos.push(match &self.password {
                        Some(pw) => {
                            let redis = info.redis_settings().clone().set_password(pw);
                            info.set_redis_settings(redis)
                        }
                        None => info,
                    }),
                    Err(e) => errors.push(ParamError::new(
                        "redisServerUrl",
                        // The text may hold a password: never quote it whole.
                        format!("invalid redis address {:?}: {e}", redact_url(seed)),
                    )),
                }
            }
            if infos.len() == seeds.len() {
                connection = infos.first().cloned();
                if url.starts_with("redis+cluster://") {
                    cluster = Some(infos);
                }
            }
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
        let call_timeout = match &self.call_timeout {
            None => DEFAULT_CALL_TIMEOUT,
            Some(param) => {
                match ParamError::collect(param.non_negative("callTimeout"), &mut errors) {
                    Some(d) if !d.is_zero() && d <= MAX_CALL_TIMEOUT => d,
                    None => DEFAULT_CALL_TIMEOUT,
                    Some(_) => {
                        errors.push(ParamError::new(
                            "callTimeout",
                            format!(
                                "callTimeout {:?} must be above 0 and at most 10s",
                                param.text()
                            ),
                        ));
                        DEFAULT_CALL_TIMEOUT
                    }
                }
            }
        };
        let failure_threshold = match self.breaker_failure_threshold {
            None => DEFAULT_BREAKER_FAILURE_THRESHOLD,
            Some(n) => u32::try_from(n).unwrap_or_else(|_| {
                errors.push(ParamError::new(
                    "breakerFailureThreshold",
                    format!("breakerFailureThreshold of {n} is invalid, must be 0 (off) or more"),
                ));
                DEFAULT_BREAKER_FAILURE_THRESHOLD
            }),
        };
        let cool_down = self
            .breaker_cool_down
            .as_ref()
            .and_then(|d| ParamError::collect(d.positive("breakerCoolDown"), &mut errors))
            .unwrap_or(DEFAULT_BREAKER_COOL_DOWN);
        let local_cache_size = match self.local_cache_size {
            None => DEFAULT_LOCAL_CACHE_SIZE,
            Some(n) => match usize::try_from(n) {
                Ok(n) if n <= MAX_LOCAL_CACHE_SIZE => n,
                _ => {
                    errors.push(ParamError::new(
                        "localCacheSize",
                        format!(
                            "localCacheSize of {n} is invalid, must be 0 (off) to {MAX_LOCAL_CACHE_SIZE}"
                        ),
                    ));
                    DEFAULT_LOCAL_CACHE_SIZE
                }
            },
        };
        let lease_size = match self.lease_size {
            None => 0,
            Some(n) if (0..=MAX_LEASE_SIZE).contains(&n) => n,
            Some(n) => {
                errors.push(ParamError::new(
                    "leaseSize",
                    format!("leaseSize of {n} is invalid, must be 0 (off) to {MAX_LEASE_SIZE}"),
                ));
                0
            }
        };
        if lease_size > 0 {
            // A fixed window's units all come back at one instant, when the counter expires,
            // so a block has one end Redis and the replica agree on. A rolling window's
            // units leave bucket by bucket and a token bucket refills continuously: a block
            // held by a replica would outlive the units it was counted as.
            for (i, quota) in self.quotas.iter().enumerate() {
                let algorithm = quota.rate_limit_algorithm.unwrap_or(Algorithm::FixedWindow);
                if algorithm != Algorithm::FixedWindow {
                    errors.push(ParamError::new(
                        "leaseSize",
                        format!(
                            "leaseSize needs FIXED_WINDOW quotas, but quotas[{i}] ({:?}) has rateLimitAlgorithm {}: set leaseSize 0 or make it FIXED_WINDOW",
                            quota.name,
                            algorithm.name()
                        ),
                    ));
                }
            }
            if self.redis_server_url.trim().starts_with("redis+cluster://") {
                errors.push(ParamError::new(
                    "leaseSize",
                    "leaseSize is not supported on a Redis Cluster (redis+cluster://): set leaseSize 0",
                ));
            }
        }
        let lease_idle_timeout = self
            .lease_idle_timeout
            .as_ref()
            .and_then(|d| ParamError::collect(d.positive("leaseIdleTimeout"), &mut errors))
            .unwrap_or(DEFAULT_LEASE_IDLE_TIMEOUT);
        match quotas {
            Some(quotas) if errors.is_empty() => Ok(RedisQuotaConfig {
                lease_size,
                lease_idle_timeout,
                local_cache_size,
                quotas,
                url,
                connection: connection.ok_or_else(Vec::new)?,
                cluster,
                pool_size,
                min_deduplication_duration: dedup,
                call_timeout,
                breaker: BreakerOptions {
                    failure_threshold,
                    cool_down,
                },
            }),
            _ => Err(errors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mixer_adapter_api::host::decode_params;
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
        assert_eq!(c.call_timeout, DEFAULT_CALL_TIMEOUT);
        assert_eq!(
            c.breaker,
            BreakerOptions {
                failure_threshold: 5,
                cool_down: Duration::from_millis(500)
            }
        );
        let c = compile(
            json!({"redisServerUrl": "redis:6379", "quotas": q, "callTimeout": "3ms",
            "breakerFailureThreshold": 0, "breakerCoolDown": "2s"}),
        )
        .expect("valid");
        assert_eq!(c.call_timeout, Duration::from_millis(3));
        assert_eq!(
            (c.breaker.failure_threshold, c.breaker.cool_down),
            (0, Duration::from_secs(2))
        );
        let errs = compile(
            json!({"redisServerUrl": "redis:6379", "quotas": q, "callTimeout": "0s",
            "breakerFailureThreshold": -1, "breakerCoolDown": "soon"}),
        )
        .expect_err("invalid");
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["callTimeout", "breakerFailureThreshold", "breakerCoolDown"]
        );
        let c = compile(
            json!({"redisServerUrl": "redis://:pw@h:1/2", "connectionPoolSize": 10,
            "minDeduplicationDuration": "5s", "quotas": q}),
        )
        .expect("valid");
        assert_eq!((c.pool_size, c.url.as_str()), (10, "redis://:pw@h:1/2"));
        assert_eq!(c.connection.redis_settings().password(), Some("pw"));
        assert_eq!(c.connection.redis_settings().db(), 2);
        let c = compile(
            json!({"redisServerUrl": "redis://u:pw@h:1", "password": "other", "quotas": q}),
        )
        .expect("valid");
        assert_eq!(c.connection.redis_settings().password(), Some("other"));
        assert_eq!(c.connection.redis_settings().username(), Some("u"));
        // An address the client cannot parse: the error names it without its password.
        let errs = compile(json!({"redisServerUrl": "redis://:hunter2@h:port", "quotas": q}))
            .expect_err("invalid");
        assert!(
            errs[0].message.contains("redis://:***@h:port") && !errs[0].message.contains("hunter2"),
            "{errs:?}"
        );
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

    /// What the mixer hides of these params in dumps and errors, by this adapter's
    /// declaration.
    #[test]
    fn the_url_password_and_password_are_declared_secret() {
        use mixer_adapter_api::Adapter;
        let params = json!({"redisServerUrl": "redis://u:url-pw@h:1/2", "password": "pw-2",
            "quotas": [{"name": "rq", "maxAmount": 1, "validDuration": "1s"}]});
        let redactor =
            mixer_adapter_api::secrets::Redactor::new(&params, crate::RedisQuota.secret_params());
        let shown = redactor.params();
        assert_eq!(shown["redisServerUrl"], "redis://u:***@h:1/2");
        assert_eq!(shown["password"], "***");
        assert_eq!(shown["quotas"], params["quotas"]);
        assert_eq!(redactor.scrub("url-pw and pw-2"), "*** and ***");
    }

    #[test]
    fn the_local_cache_is_off_unless_sized() {
        let q = json!([{"name": "rq", "maxAmount": 1, "validDuration": "1s"}]);
        let c = compile(json!({"redisServerUrl": "h:1", "quotas": q})).expect("valid");
        assert_eq!(c.local_cache_size, 0);
        let c = compile(json!({"redisServerUrl": "h:1", "quotas": q, "localCacheSize": 500}))
            .expect("valid");
        assert_eq!(c.local_cache_size, 500);
        for bad in [json!(-1), json!(10_000_001)] {
            let errs =
                compile(json!({"redisServerUrl": "h:1", "quotas": q, "localCacheSize": bad}))
                    .expect_err("invalid");
            assert_eq!(errs[0].path, "localCacheSize", "{errs:?}");
        }
    }

    /// Leases are off unless sized, and refused (at `leaseSize`, naming the quota) where a
    /// block could outlive the units it was counted as, or on a cluster.
    #[test]
    fn leases_are_off_unless_sized_and_for_fixed_windows_only() {
        let fw = json!({"name": "a", "maxAmount": 1, "validDuration": "1s"});
        let c = compile(json!({"redisServerUrl": "h:1", "quotas": [fw]})).expect("valid");
        assert_eq!(
            (c.lease_size, c.lease_idle_timeout),
            (0, DEFAULT_LEASE_IDLE_TIMEOUT)
        );
        let c = compile(
            json!({"redisServerUrl": "h:1", "quotas": [fw], "leaseSize": 50,
            "leaseIdleTimeout": "200ms"}),
        )
        .expect("valid");
        assert_eq!(
            (c.lease_size, c.lease_idle_timeout),
            (50, Duration::from_millis(200))
        );
        let rw = json!({"name": "b", "maxAmount": 1, "validDuration": "1s",
            "bucketDuration": "100ms", "rateLimitAlgorithm": "ROLLING_WINDOW"});
        let tb = json!({"name": "c", "maxAmount": 1, "validDuration": "1s",
            "rateLimitAlgorithm": "TOKEN_BUCKET"});
        let errs =
            compile(json!({"redisServerUrl": "h:1", "quotas": [fw, rw, tb], "leaseSize": 5}))
                .expect_err("invalid");
        let shown: Vec<(&str, &str)> = errs
            .iter()
            .map(|e| (e.path.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(shown.len(), 2, "{shown:?}");
        assert_eq!(shown[0].0, "leaseSize");
        assert!(
            shown[0].1.contains("quotas[1]") && shown[0].1.contains("ROLLING_WINDOW"),
            "{shown:?}"
        );
        assert!(
            shown[1].1.contains("quotas[2]") && shown[1].1.contains("TOKEN_BUCKET"),
            "{shown:?}"
        );
        // Without leases the same quotas are fine.
        assert!(compile(json!({"redisServerUrl": "h:1", "quotas": [fw, rw, tb]})).is_ok());
        for (extra, path) in [
            (json!({"leaseSize": -1}), "leaseSize"),
            (json!({"leaseSize": MAX_LEASE_SIZE + 1}), "leaseSize"),
            (json!({"leaseIdleTimeout": "0s"}), "leaseIdleTimeout"),
            (
                json!({"leaseSize": 5, "redisServerUrl": "redis+cluster://a:1"}),
                "leaseSize",
            ),
        ] {
            let mut params = json!({"redisServerUrl": "h:1", "quotas": [fw]});
            for (k, v) in extra.as_object().expect("object") {
                params[k] = v.clone();
            }
            let errs = compile(params).expect_err("invalid");
            assert_eq!(errs[0].path, path, "{errs:?}");
        }
    }

    #[test]
    fn a_cluster_is_named_by_its_seeds() {
        let q = json!([{"name": "rq", "maxAmount": 1, "validDuration": "1s"}]);
        let c = compile(
            json!({"redisServerUrl": "redis+cluster://a:1, b:2", "password": "pw", "quotas": q}),
        )
        .expect("valid");
        let seeds = c.cluster.expect("a cluster");
        assert_eq!(seeds.len(), 2);
        assert!(
            seeds
                .iter()
                .all(|s| s.redis_settings().password() == Some("pw"))
        );
        assert!(
            compile(json!({"redisServerUrl": "127.0.0.1:1", "quotas": q}))
                .expect("valid")
                .cluster
                .is_none()
        );
        assert!(compile(json!({"redisServerUrl": "redis+cluster://", "quotas": q})).is_err());
    }
}
