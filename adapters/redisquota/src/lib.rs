//! The `redisquota` adapter (Istio 1.4's `redisquota`, crate `adapters/redisquota`): rate
//! limits counted in Redis, so every mixer replica using the same Redis shares them. See
//! README.md beside this crate for the params table and behaviour.
//!
//! - The allocations of one request (an Envoy rate limit request's descriptors, a Mixer v1
//!   Check's quotas) are one atomic round trip: one `EVALSHA` of a Lua script that runs each
//!   with its algorithm (`FIXED_WINDOW`, the default as in Istio; `ROLLING_WINDOW`;
//!   `TOKEN_BUCKET`), loaded once per Redis; on `NOSCRIPT` (Redis restarted or flushed) it is
//!   loaded again and the call retried once.
//! - Concurrent requests' allocations are batched into one script call while calls are in
//!   flight (exact: counted in arrival order, atomically); with `localCacheSize`, a window
//!   Redis said is exhausted is refused locally until it ends (see `link.rs`, `over_limit.rs`).
//! - With `leaseSize`, a replica takes blocks of a fixed window's units and grants from them
//!   locally, giving back what it did not use; never over-admits (see `lease.rs`).
//! - Time is Redis's (`TIME` inside the script), so replicas with skewed clocks agree.
//! - Deduplication ids are kept in Redis (a hash per id, expiring after
//!   `minDeduplicationDuration`), so a retry that lands on another replica is not charged again.
//! - Redis down, hung or failing: the allocation fails with a retryable error within
//!   `callTimeout` (default 5 ms), so the runtime applies the handler's fail policy before
//!   Envoy's own 20 ms timeout; after `breakerFailureThreshold` failures in a row (5) the
//!   circuit opens and allocations fail at once, without Redis, for `breakerCoolDown`
//!   (500 ms); then one probe call goes through and its success closes the circuit.
//!   Connections come back by themselves.
//!
//! ```
//! use mixer_adapter_api::host::AnyAdapter;
//! use mixer_adapter_redisquota::RedisQuota;
//!
//! let params = serde_json::json!({
//!     "redisServerUrl": "redis-release-master:6379",
//!     "connectionPoolSize": 10,
//!     "quotas": [{
//!         "name": "requestcountquota.instance.istio-system",
//!         "maxAmount": 500,
//!         "validDuration": "1s",
//!         "bucketDuration": "500ms",
//!         "rateLimitAlgorithm": "ROLLING_WINDOW",
//!         "overrides": [{"dimensions": {"destination": "reviews"}, "maxAmount": 1}],
//!     }],
//! });
//! RedisQuota.compile(&params).expect("valid params");
//! let errors = RedisQuota.compile(&serde_json::json!({"quotas": []})).unwrap_err();
//! assert_eq!(errors[0].path, "quotas");
//! assert_eq!(errors[1].path, "redisServerUrl");
//! ```

mod config;
mod handler;
mod lease;
mod link;
mod over_limit;
mod scripts;

use std::sync::Arc;

use mixer_adapter_api::secrets::SecretParam;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, Stability,
};
use mixer_model::Template;

pub use config::{
    DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_FAILURE_THRESHOLD, DEFAULT_CALL_TIMEOUT,
    DEFAULT_POOL_SIZE, MAX_LEASE_SIZE, RedisQuotaConfig, RedisQuotaParams, redis_url,
};
pub use handler::{KEY_PREFIX, METRIC_PREFIX, RESOURCE_EXHAUSTED, RedisQuotaHandler};
pub use lease::{DEFAULT_LEASE_IDLE_TIMEOUT, SCRIPT as LEASE_SCRIPT};
pub use link::MAX_BATCH;
pub use over_limit::DEFAULT_LOCAL_CACHE_SIZE;
pub use scripts::source as script_source;

static INFO: AdapterInfo = AdapterInfo {
    name: "redisquota",
    description: "Redis-based quotas.",
    templates: &[Template::Quota],
    cacheable: false,
    stability: Stability::Beta,
};

/// The redisquota adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct RedisQuota;

impl RedisQuota {
    /// Builds the concrete handler (what [`Adapter::build`] returns, unerased).
    pub fn build_handler(
        &self,
        config: &RedisQuotaConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<RedisQuotaHandler>, AdapterError> {
        Ok(Arc::new(RedisQuotaHandler::new(
            config.clone(),
            ctx.handler_name.clone(),
        )?))
    }
}

impl Adapter for RedisQuota {
    type Config = RedisQuotaParams;
    type Compiled = RedisQuotaConfig;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: RedisQuotaParams) -> Result<RedisQuotaConfig, Vec<ParamError>> {
        params.compile()
    }

    fn build(
        &self,
        config: &RedisQuotaConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(self.build_handler(config, ctx)?)
    }

    fn secret_params(&self) -> &'static [SecretParam] {
        config::SECRET_PARAMS
    }
}
