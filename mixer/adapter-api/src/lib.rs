//! The adapter API: what every adapter implements, whether it is built in, out of process
//! (gRPC) or a Wasm plugin. The dispatcher sees only these traits.
//!
//! An adapter goes through a fixed lifecycle:
//! 1. [`Adapter::info`] declares its name, the templates it supports and whether its check
//!    results may be cached;
//! 2. [`Adapter::validate`] checks a handler's `params` when config loads, so a bad config is
//!    rejected before it replaces a good one;
//! 3. [`Adapter::build`] turns valid params into a [`Handler`], which offers one or more of
//!    [`CheckHandler`], [`QuotaHandler`] and [`ReportHandler`];
//! 4. [`Handler::close`] runs when no config snapshot uses the handler any more.
//!
//! An adapter whose params hold secrets declares them ([`Adapter::secret_params`]); see
//! [`secrets`] for what is hidden without a declaration.
//!
//! A handler answers with data ([`CheckResult`](mixer_model::CheckResult) for a denial too);
//! an [`AdapterError`] means it could not decide, and the handler's [`FailPolicy`] applies.
//!
//! A complete adapter that allows everything:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use async_trait::async_trait;
//! use mixer_adapter_api::*;
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
//! impl Adapter for AllowAll {
//!     fn info(&self) -> &AdapterInfo { &INFO }
//!     fn validate(&self, _params: &Params) -> Result<(), Vec<ParamError>> { Ok(()) }
//!     fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
//!         Ok(Arc::new(AllowAllHandler))
//!     }
//! }
//!
//! struct AllowAllHandler;
//! impl Handler for AllowAllHandler {
//!     fn as_check(&self) -> Option<&dyn CheckHandler> { Some(self) }
//! }
//! #[async_trait]
//! impl CheckHandler for AllowAllHandler {
//!     async fn check(&self, _: &Instance) -> Result<CheckResult, AdapterError> {
//!         Ok(CheckResult::ok(Duration::from_secs(60), 1000))
//!     }
//! }
//!
//! let mut registry = AdapterRegistry::new();
//! registry.register(Arc::new(AllowAll));
//! assert!(registry.get("allowall").is_some());
//! ```

mod adapter;
pub mod breaker;
mod error;
mod handler;
mod log_gate;
mod registry;
mod remote;
pub mod secrets;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use adapter::{Adapter, AdapterInfo, BuildContext, Params, Stability, decode_params};
pub use error::{AdapterError, ErrorKind, ParamError};
pub use handler::{
    CheckHandler, Exposition, Handler, LimitOverride, QuotaArgs, QuotaCall, QuotaHandler,
    ReportHandler,
};
pub use log_gate::LogGate;
pub use registry::AdapterRegistry;
pub use remote::{
    AccessToken, Authentication, InferredField, MutualTls, OAuthClient, ParamsDescriptor, PemFile,
    RemoteAdapters, RemoteConnection, RemoteHandlerSpec, RemoteInstance, Tls, TokenHeader,
    TokenSource,
};

/// What the mixer does for a request when a handler cannot decide (down, slow, garbage).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailPolicy {
    /// Let the request through.
    Open,
    /// Deny the request (UNAVAILABLE).
    Closed,
}

impl FailPolicy {
    /// Envoy's defaults: checks fail closed (ext_authz), quota fails open (rate limit).
    pub fn default_for(variety: mixer_model::Variety) -> FailPolicy {
        match variety {
            mixer_model::Variety::Quota | mixer_model::Variety::Report => FailPolicy::Open,
            mixer_model::Variety::Check => FailPolicy::Closed,
        }
    }
}
