//! The `apikey` adapter (crate `adapters/apikey`): an attribute generator that answers an
//! `apikey` instance's `key` with the name of the key's holder (`principal`) and the key's
//! labels (`claims`), from keys kept in a file or in a folder of files (a Kubernetes Secret
//! mounted as a volume).
//!
//! Keys are stored as SHA-256 digests only: a key written in plain in a file is hashed when
//! the file is read and not kept. The files are read again every `reloadInterval` (default
//! 5s): a key removed from them is refused from the next read on, with no config reload, and
//! every answer holds (for the check cache) only until that read. A file that cannot be read
//! or parsed leaves the keys in use as they were, and the reason is logged.
//!
//! | case | answer |
//! |---|---|
//! | a known key | outputs `principal` (its name) and `claims` (its labels) |
//! | no key (absent or empty) | no outputs, the bindings' defaults apply; with `requireKey: true` a denial |
//! | an unknown key, or one longer than 4096 bytes | a denial: UNAUTHENTICATED (401), `unknown API key` |
//!
//! ```
//! use mixer_adapter_api::BuildContext;
//! use mixer_adapter_api::host::AnyAdapter;
//! use mixer_adapter_apikey::ApiKey;
//! use mixer_model::{Code, FieldValue, Instance, Template, Value};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let file = dir.path().join("keys.yaml");
//! std::fs::write(&file, "keys:\n- name: alice\n  key: fake-key-1\n  labels: {tier: gold}\n")
//!     .unwrap();
//! let config = ApiKey.compile(&serde_json::json!({"file": file})).expect("valid params");
//! let ctx = BuildContext { handler_name: "apikeys.istio-system".into() };
//! let handler = ApiKey.build_compiled(&config, &ctx).expect("built");
//! let with_key = |key: &str| Instance {
//!     name: "apikey.instance.istio-system".into(),
//!     template: Template::ApiKey,
//!     fields: vec![("key", FieldValue::Value(Value::from(key)))],
//! };
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! rt.block_on(async {
//!     let generator = handler.as_attributes().expect("an attribute generator");
//!     let known = generator.generate(&with_key("fake-key-1")).await.expect("answered");
//!     assert_eq!(known.outputs[0], ("principal", Value::from("alice")));
//!     let unknown = generator.generate(&with_key("fake-key-2")).await.expect("answered");
//!     assert_eq!(unknown.denial.expect("denied").status.code, Code::Unauthenticated);
//! });
//! ```

mod config;
mod handler;
mod key_set;
mod key_source;

use std::sync::Arc;

use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, Stability,
};
use mixer_model::Template;

pub use config::{
    ApiKeyConfig, ApiKeyParams, DEFAULT_RELOAD_INTERVAL, InitialKeys, MAX_RELOAD_INTERVAL,
    MIN_RELOAD_INTERVAL,
};
pub use handler::{ApiKeyHandler, Reload};
pub use key_set::{Holder, KeyDigest, KeyFileError, KeySet, MAX_FILE_BYTES, MAX_KEY_BYTES};
pub use key_source::{KeySource, ReadFiles};

static INFO: AdapterInfo = AdapterInfo {
    name: "apikey",
    description: "Names the holder of an API key and its labels, from keys in files",
    templates: &[Template::ApiKey],
    // Answers say how long they hold (until the next read of the files).
    cacheable: true,
    stability: Stability::Alpha,
};

/// The apikey adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct ApiKey;

impl ApiKey {
    /// Builds the concrete handler (what [`Adapter::build`] returns, unerased), for callers
    /// that want [`ApiKeyHandler::reload`].
    pub fn build_handler(&self, config: &ApiKeyConfig, ctx: &BuildContext) -> Arc<ApiKeyHandler> {
        ApiKeyHandler::start(config.clone(), ctx.handler_name.clone())
    }
}

impl Adapter for ApiKey {
    type Config = ApiKeyParams;
    type Compiled = ApiKeyConfig;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: ApiKeyParams) -> Result<ApiKeyConfig, Vec<ParamError>> {
        params.compile()
    }

    fn build(
        &self,
        config: &ApiKeyConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(self.build_handler(config, ctx))
    }

    fn path_params(&self) -> &'static [&'static str] {
        // A bundle's key file sits beside its config.
        &["file", "directory"]
    }

    // No `files_read`: a change to the keys is not a config reload (which would rebuild every
    // handler and drop the check cache); the handler reads its files itself.
}

#[cfg(test)]
mod tests;
