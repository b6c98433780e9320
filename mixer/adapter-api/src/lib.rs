//! The adapter API: what every adapter implements, whether it is built in, out of process
//! (gRPC) or a Wasm plugin. The dispatcher sees only these traits.
//!
//! An adapter goes through a fixed lifecycle:
//! 1. [`Adapter::info`] declares its name, the templates it supports and whether its check
//!    results may be cached;
//! 2. when config loads, a handler's `params` are decoded into the adapter's own
//!    [`Adapter::Config`] and compiled by [`Adapter::compile`] into its
//!    [`Adapter::Compiled`] form, so a bad config is rejected (by `mixer validate` too)
//!    before it replaces a good one; the result is kept as a
//!    [`CompiledConfig`](host::CompiledConfig);
//! 3. [`Adapter::build`] turns that form into a [`Handler`], which offers one or more of
//!    [`CheckHandler`], [`QuotaHandler`] and [`ReportHandler`];
//! 4. [`Handler::close`] runs when no config snapshot uses the handler any more.
//!
//! An adapter whose params hold secrets declares them ([`Adapter::secret_params`]); see
//! [`secrets`] for what is hidden without a declaration.
//!
//! A handler answers with data ([`CheckResult`](mixer_model::CheckResult) for a denial too);
//! an [`AdapterError`] means it could not decide, and the handler's
//! [`FailPolicy`](host::FailPolicy) applies.
//!
//! The crate root holds what an adapter implements or returns, and nothing else. The mixer's
//! side of the boundary (adapters with their config type hidden, params as config gives them,
//! fail policies) is in [`host`]. Helpers an adapter may use are modules of their own:
//! [`breaker`] (a circuit breaker for a backend), [`secrets`] (what is hidden of params),
//! [`log_gate`] (one log line per interval while a backend fails), and `testkit` (feature
//! `testkit`: the conformance kit adapters' tests run).
//!
//! A complete adapter that allows everything:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use async_trait::async_trait;
//! use mixer_adapter_api::*;
//! use mixer_adapter_api::host::AnyAdapter;
//! use mixer_model::{CheckResult, Instance, Template};
//!
//! struct AllowAll;
//! static INFO: AdapterInfo = AdapterInfo {
//!     name: "allowall",
//!     description: "allows every request",
//!     templates: &[Template::CheckNothing],
//!     cacheable: true,
//!     stability: Stability::Alpha,
//! };
//!
//! /// Its params: how long an answer may be cached.
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields, rename_all = "camelCase")]
//! struct AllowAllConfig {
//!     #[serde(default)]
//!     valid_seconds: Option<u64>,
//! }
//!
//! impl Adapter for AllowAll {
//!     type Config = AllowAllConfig;
//!     /// How long an answer may be cached.
//!     type Compiled = Duration;
//!     fn info(&self) -> &AdapterInfo { &INFO }
//!     fn compile(&self, config: AllowAllConfig) -> Result<Duration, Vec<ParamError>> {
//!         match config.valid_seconds {
//!             Some(0) => Err(vec![ParamError::new("validSeconds", "must be above 0")]),
//!             seconds => Ok(Duration::from_secs(seconds.unwrap_or(60))),
//!         }
//!     }
//!     fn build(&self, valid: &Duration, _: &BuildContext)
//!         -> Result<Arc<dyn Handler>, AdapterError> {
//!         Ok(Arc::new(AllowAllHandler(*valid)))
//!     }
//! }
//!
//! struct AllowAllHandler(Duration);
//! impl Handler for AllowAllHandler {
//!     fn as_check(&self) -> Option<&dyn CheckHandler> { Some(self) }
//! }
//! #[async_trait]
//! impl CheckHandler for AllowAllHandler {
//!     async fn check(&self, _: &Instance) -> Result<CheckResult, AdapterError> {
//!         Ok(CheckResult::ok(self.0, 1000))
//!     }
//! }
//!
//! // The mixer sees the adapter with its config type hidden.
//! let adapter: &dyn AnyAdapter = &AllowAll;
//! let errors = adapter.compile(&serde_json::json!({"validSeconds": 0})).unwrap_err();
//! assert_eq!(errors[0].to_string(), "validSeconds: must be above 0");
//! let errors = adapter.compile(&serde_json::json!({"validSecs": 5})).unwrap_err();
//! assert_eq!(errors[0].path, "validSecs");
//! let config = adapter.compile(&serde_json::json!({"validSeconds": 5})).expect("valid");
//! let ctx = BuildContext { handler_name: "allowall.istio-system".into() };
//! assert!(adapter.build_compiled(&config, &ctx).expect("built").as_check().is_some());
//! ```

mod adapter;
pub mod breaker;
mod duration;
mod error;
mod handler;
pub mod host;
pub mod log_gate;
pub mod secrets;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use adapter::{Adapter, AdapterInfo, BuildContext, Stability};
pub use duration::DurationParam;
pub use error::{AdapterError, ErrorKind, ParamError};
pub use handler::{
    AttributeHandler, CheckHandler, Denial, Exposition, Generated, Handler, LimitOverride,
    QuotaArgs, QuotaCall, QuotaHandler, ReportHandler,
};
