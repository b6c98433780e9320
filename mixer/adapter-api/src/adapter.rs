//! The adapter lifecycle: info, compile params, build a handler.

use std::sync::Arc;

use mixer_model::Template;
use serde::de::DeserializeOwned;

use crate::error::{AdapterError, ParamError};
use crate::handler::Handler;

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
///
/// A handler's params go through two steps, both when config loads (so `mixer validate` finds
/// every params error `serve` would): they are decoded into the adapter's own
/// [`Adapter::Config`] (a serde type: a wrong field or type is an error at its field path),
/// then [`Adapter::compile`] checks what decoding cannot and turns them into the
/// [`Adapter::Compiled`] form handlers are built from. [`Adapter::build`] gets that form, so
/// nothing is parsed or checked twice.
pub trait Adapter: Send + Sync + 'static {
    /// The handler params, decoded (`#[serde(deny_unknown_fields)]` catches misspelt keys).
    type Config: DeserializeOwned;

    /// What [`Adapter::compile`] makes of a config: checked, and in the shape handlers use
    /// (parsed durations, compiled patterns, a loaded module). An adapter with nothing to
    /// convert uses its [`Adapter::Config`].
    type Compiled: Send + Sync + 'static;

    /// What it is and what it supports.
    fn info(&self) -> &AdapterInfo;

    /// Checks what decoding cannot (ranges, combinations, files that must exist) and converts;
    /// returns every problem found, at its field path.
    fn compile(&self, config: Self::Config) -> Result<Self::Compiled, Vec<ParamError>>;

    /// Builds a handler from a config [`Adapter::compile`] accepted.
    fn build(
        &self,
        compiled: &Self::Compiled,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError>;

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
    /// file that declares the handler, before the params are decoded, so that a config
    /// directory and the files it names can move together.
    fn path_params(&self) -> &'static [&'static str] {
        &[]
    }

    /// The files a handler built from `compiled` reads when it is built (a Wasm module, a
    /// list read from a local file), beyond the config's own: their content is part of what
    /// the handler decides, so the config loader digests them into the config's hash (which
    /// replicas sharing cached verdicts must agree on), rebuilds the handler when one of them
    /// changes, and watches them as it watches the config.
    fn files_read(&self, _compiled: &Self::Compiled) -> Vec<std::path::PathBuf> {
        Vec::new()
    }

    /// The templates a handler built from `compiled` accepts, when they depend on its config
    /// rather than on the adapter (a Wasm plugin declares its own when its module loads);
    /// rules sending it another template are config errors. `None`: those of
    /// [`AdapterInfo::templates`].
    fn templates_for(&self, _compiled: &Self::Compiled) -> Option<Vec<Template>> {
        None
    }
}
