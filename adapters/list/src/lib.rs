//! The `listchecker` adapter (Istio 1.4's `list` adapter, crate `adapters/list`): checks a
//! `listentry` instance's `value` against a whitelist or blacklist of strings,
//! case-insensitive strings, IP addresses/CIDR ranges or regular expressions.
//!
//! The list is the configured `overrides` plus, when `providerUrl` is set, the entries fetched
//! from it (one per line, `#` comments and blank lines ignored). The provider is polled every
//! `refreshInterval`; when it keeps failing, the last good list is used until `ttl` after the
//! last success, and checks then fail with UNAVAILABLE so the handler's fail policy applies.
//! See README.md beside this crate for the table of params and behaviour.
//!
//! A whitelist of networks, with no provider:
//!
//! ```
//! use mixer_adapter_api::BuildContext;
//! use mixer_adapter_api::host::AnyAdapter;
//! use mixer_adapter_list::ListChecker;
//! use mixer_model::{Code, FieldValue, Instance, Template, Value};
//!
//! let params = serde_json::json!({
//!     "entryType": "IP_ADDRESSES",
//!     "overrides": ["10.0.0.0/8", "2001:db8::/32"],
//! });
//! let config = ListChecker.compile(&params).expect("valid params");
//! let handler = ListChecker
//!     .build_compiled(&config, &BuildContext { handler_name: "internal.istio-system".into() })
//!     .expect("built");
//! let entry = |ip: &str| Instance {
//!     name: "sourceip.istio-system".into(),
//!     template: Template::ListEntry,
//!     fields: vec![("value", FieldValue::Value(Value::from(ip)))],
//! };
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! rt.block_on(async {
//!     let check = handler.as_check().expect("a check handler");
//!     let allowed = check.check(&entry("10.1.2.3")).await.expect("decided");
//!     assert!(allowed.status.is_ok());
//!     let denied = check.check(&entry("192.168.0.1")).await.expect("decided");
//!     assert_eq!(denied.status.code, Code::PermissionDenied);
//!     assert_eq!(denied.status.message, "192.168.0.1 is not whitelisted");
//! });
//! ```

mod config;
mod entry_type;
mod fetch;
mod handler;
mod list;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, Stability,
};
use mixer_model::Template;

pub use config::{HttpUrl, ListConfig, ListParams, Provider, parse_provider_url};
pub use entry_type::EntryType;
pub use handler::ListHandler;
pub use list::{IpRanges, List, Lookup, parse_cidr};

static INFO: AdapterInfo = AdapterInfo {
    name: "listchecker",
    description: "Checks whether an entry is present in a list",
    templates: &[Template::ListEntry],
    cacheable: true,
    stability: Stability::Beta,
};

/// The listchecker adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct ListChecker;

impl ListChecker {
    /// Builds the concrete handler (what [`Adapter::build`] returns, unerased), for callers
    /// that want [`ListHandler::ready`] or [`ListHandler::generation`].
    pub fn build_handler(
        &self,
        config: &ListConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<ListHandler>, AdapterError> {
        ListHandler::start(config.clone(), ctx.handler_name.clone())
    }
}

/// The params holding secrets (see [`Adapter::secret_params`]).
const SECRET_PARAMS: &[mixer_adapter_api::secrets::SecretParam] =
    &[mixer_adapter_api::secrets::SecretParam::url("providerUrl")];

impl Adapter for ListChecker {
    type Config = ListParams;
    type Compiled = ListConfig;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: ListParams) -> Result<ListConfig, Vec<ParamError>> {
        params.compile()
    }

    fn build(
        &self,
        config: &ListConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(self.build_handler(config, ctx)?)
    }

    fn files_read(&self, config: &ListConfig) -> Vec<std::path::PathBuf> {
        // A local list is part of the config: a change to it is a reload, so replicas that
        // share cached verdicts never disagree on it for longer than a reload takes.
        match &config.provider {
            Some(config::Provider::File(path)) => vec![path.clone()],
            _ => Vec::new(),
        }
    }

    fn secret_params(&self) -> &'static [mixer_adapter_api::secrets::SecretParam] {
        // A provider URL may carry a password.
        SECRET_PARAMS
    }
}
