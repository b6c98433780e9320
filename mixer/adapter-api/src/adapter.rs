//! The adapter lifecycle: info, validate params, build a handler.

use std::sync::Arc;

use mixer_model::Template;
use serde::de::DeserializeOwned;

use crate::error::{AdapterError, ParamError};
use crate::handler::Handler;

/// Handler params as they come from config: YAML turned into a JSON-like tree.
pub type Params = serde_json::Value;

/// How settled an adapter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stability {
    /// Will not change incompatibly.
    Stable,
    /// May change.
    Beta,
    /// Experimental.
    Alpha,
}

/// What an adapter declares about itself; checked when a config snapshot is built, never at
/// request time.
#[derive(Clone, Debug)]
pub struct AdapterInfo {
    /// The name used in `compiledAdapter:` (`denier`).
    pub name: &'static str,
    /// One line for people.
    pub description: &'static str,
    /// Templates its handlers accept. A built handler must answer the variety of each
    /// (`as_check`, `as_quota`, `as_report`), or the snapshot that builds it is refused.
    pub templates: &'static [Template],
    /// Whether check results may be kept in the mixer's second-level cache.
    pub cacheable: bool,
    /// How settled it is.
    pub stability: Stability,
}

/// What a handler is built with besides its params.
#[derive(Clone, Debug)]
pub struct BuildContext {
    /// The handler's fully qualified name (`denyall.istio-system`), for logs and metrics.
    pub handler_name: Arc<str>,
}

/// An adapter: a factory of handlers. Built-in, out-of-process and Wasm adapters all appear to
/// the runtime through this trait and the handler traits.
pub trait Adapter: Send + Sync {
    /// What it is and what it supports.
    fn info(&self) -> &AdapterInfo;

    /// Checks params without building anything; returns every problem found.
    fn validate(&self, params: &Params) -> Result<(), Vec<ParamError>>;

    /// Builds a handler from params that passed [`Adapter::validate`].
    fn build(&self, params: &Params, ctx: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError>;

    /// The params that hold secrets, beyond those every handler's params are searched for
    /// (keys such as `password` or `authorization`, URL passwords: see [`crate::secrets`]).
    /// Their values never appear in `/config_dump`, errors or logs, and each declared
    /// [`SecretKind::Value`](crate::secrets::SecretKind::Value) param may be given as
    /// `<name>File`, a file the config loader reads at every load.
    fn secret_params(&self) -> &'static [crate::secrets::SecretParam] {
        &[]
    }

    /// The params (dotted paths, `module`) that hold the path of a file the adapter reads.
    /// A relative one is resolved by the config loader against the directory of the config
    /// file that declares the handler, before [`Adapter::validate`] sees it, so that a
    /// config directory and the files it names can move together.
    fn path_params(&self) -> &'static [&'static str] {
        &[]
    }

    /// The templates a handler built from `params` accepts, when they depend on its params
    /// rather than on the adapter (a Wasm plugin declares its own when its module loads);
    /// rules sending it another template are config errors. `None`: those of
    /// [`AdapterInfo::templates`].
    fn templates_for(&self, _params: &Params) -> Option<Vec<Template>> {
        None
    }
}

/// Decodes params into an adapter's own config type, reporting the field path of the first
/// problem. Missing params (`null`) decode as an empty map so that defaults apply.
///
/// ```
/// #[derive(serde::Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct Config { size: u32 }
/// let err = mixer_adapter_api::decode_params::<Config>(&serde_json::json!({"size": "big"}))
///     .err().unwrap();
/// assert_eq!(err.path, "size");
/// ```
pub fn decode_params<T: DeserializeOwned>(params: &Params) -> Result<T, ParamError> {
    let empty = serde_json::Value::Object(serde_json::Map::new());
    let params = if params.is_null() { &empty } else { params };
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        ParamError::new(path, e.into_inner().to_string())
    })
}
