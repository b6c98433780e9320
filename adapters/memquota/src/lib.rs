//! The `memquota` adapter (Istio 1.4's `memquota`, crate `adapters/memquota`): rate limits
//! counted in this mixer replica's memory. Each replica counts on its own: with N replicas
//! behind a load balancer a client gets up to N times the limit. Use `redisquota` to share
//! counters. See README.md beside this crate for the params table and behaviour.
//!
//! - Quotas are selected by the instance's name, overrides by its dimensions, counters by the
//!   quota name and every dimension value (see `mixer_adapter_quota_common`).
//! - Algorithms: `ROLLING_WINDOW` (the default, as Istio's memquota), `FIXED_WINDOW`,
//!   `TOKEN_BUCKET`. `shadowMode` counts and reports but always grants.
//! - Memory is bounded: counters whose state is back to fresh are dropped a few at a time on
//!   each allocation (and all at once by [`MemQuotaHandler::sweep`]); beyond `maxKeys`
//!   counters the least recently used is dropped. Deduplication ids are forgotten after
//!   `minDeduplicationDuration` and are capped by `maxKeys` too.
//! - Time is `tokio::time::Instant`, so tests run on tokio's paused clock.
//!
//! ```
//! use mixer_adapter_api::host::AnyAdapter;
//! use mixer_adapter_api::{BuildContext, QuotaArgs};
//! use mixer_adapter_memquota::MemQuota;
//! use mixer_model::{Code, FieldValue, Instance, Template, Value};
//!
//! let params = serde_json::json!({
//!     "quotas": [{
//!         "name": "requestcount",
//!         "maxAmount": 2,
//!         "validDuration": "1s",
//!         "rateLimitAlgorithm": "FIXED_WINDOW",
//!     }],
//! });
//! MemQuota.compile(&params).expect("valid params");
//! let handler = MemQuota
//!     .compile_and_build(&params, &BuildContext { handler_name: "quotahandler.istio-system".into() })
//!     .expect("built");
//! let instance = Instance {
//!     name: "requestcount.istio-system".into(),
//!     template: Template::Quota,
//!     fields: vec![("dimensions", FieldValue::Map(vec![("user".into(), Value::from("bob"))]))],
//! };
//! let args = |id: &str| QuotaArgs { amount: 1, deduplication_id: id.into(), ..QuotaArgs::default() };
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! rt.block_on(async {
//!     let quota = handler.as_quota().expect("a quota handler");
//!     assert_eq!(quota.allocate(&instance, &args("a")).await.unwrap().granted_amount, 1);
//!     assert_eq!(quota.allocate(&instance, &args("b")).await.unwrap().granted_amount, 1);
//!     // Refused as Istio's memquota refuses: status OK, nothing granted, valid for 0.
//!     let denied = quota.allocate(&instance, &args("c")).await.unwrap();
//!     assert_eq!((denied.status.code, denied.granted_amount), (Code::Ok, 0));
//!     assert!(denied.valid_duration.is_zero());
//!     // A retry of "a" is answered as the first time, without charging again.
//!     assert_eq!(quota.allocate(&instance, &args("a")).await.unwrap().granted_amount, 1);
//! });
//! ```

mod config;
mod handler;
mod store;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, Stability,
};
use mixer_model::Template;

pub use config::{DEFAULT_MAX_KEYS, MemQuotaConfig, MemQuotaParams};
pub use handler::{METRIC_PREFIX, MemQuotaHandler};

static INFO: AdapterInfo = AdapterInfo {
    name: "memquota",
    description: "Volatile memory-based quota tracking",
    templates: &[Template::Quota],
    cacheable: false,
    stability: Stability::Beta,
};

/// The memquota adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemQuota;

impl MemQuota {
    /// Builds the concrete handler (what [`Adapter::build`] returns, unerased), for callers
    /// that want [`MemQuotaHandler::tracked_keys`] or [`MemQuotaHandler::sweep`].
    pub fn build_handler(
        &self,
        config: &MemQuotaConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<MemQuotaHandler>, AdapterError> {
        Ok(Arc::new(MemQuotaHandler::new(
            config.clone(),
            ctx.handler_name.clone(),
        )))
    }
}

impl Adapter for MemQuota {
    type Config = MemQuotaParams;
    type Compiled = MemQuotaConfig;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: MemQuotaParams) -> Result<MemQuotaConfig, Vec<ParamError>> {
        params.compile()
    }

    fn build(
        &self,
        config: &MemQuotaConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(self.build_handler(config, ctx)?)
    }
}
