//! An adapter with its config type hidden, and the compiled config it builds from: how the
//! config loader and the runtime hold and call adapters of every config type alike.

use std::any::Any;
use std::sync::Arc;

use mixer_model::Template;

use super::params::{Params, decode_params};
use crate::adapter::{Adapter, AdapterInfo, BuildContext};
use crate::error::{AdapterError, ErrorKind, ParamError};
use crate::handler::Handler;

/// A handler's params decoded and compiled by its adapter ([`Adapter::Compiled`], type
/// hidden), once, when config loads; what [`AnyAdapter::build_compiled`] builds from. Cheap
/// to clone.
#[derive(Clone)]
pub struct CompiledConfig {
    adapter: &'static str,
    config: Arc<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for CompiledConfig {
    // The config may hold secrets: only whose it is shows.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledConfig")
            .field("adapter", &self.adapter)
            .finish_non_exhaustive()
    }
}

impl CompiledConfig {
    /// The compiled form `config` of a handler of `adapter`, for an adapter that implements
    /// [`AnyAdapter`] itself (the out-of-process transport compiles from more than params);
    /// every [`Adapter`] gets its own from [`AnyAdapter::compile`].
    pub fn new<T: Send + Sync + 'static>(adapter: &'static str, config: T) -> CompiledConfig {
        CompiledConfig {
            adapter,
            config: Arc::new(config),
        }
    }

    /// The config, if it is a `T`.
    pub fn downcast_ref<T: 'static>(&self) -> Option<&T> {
        self.config.downcast_ref::<T>()
    }

    /// The name of the adapter that compiled it.
    pub fn adapter(&self) -> &'static str {
        self.adapter
    }
}

/// An [`Adapter`] with its config type hidden: what the mixer's adapter registry
/// (`mixer_config::AdapterRegistry`) keeps and the config loader and runtime call. Every
/// [`Adapter`] is one.
pub trait AnyAdapter: Send + Sync {
    /// What it is and what it supports.
    fn info(&self) -> &AdapterInfo;

    /// Decodes and compiles params: every problem, at its field path inside them.
    fn compile(&self, params: &Params) -> Result<CompiledConfig, Vec<ParamError>>;

    /// Builds a handler from a config this adapter compiled.
    fn build_compiled(
        &self,
        config: &CompiledConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError>;

    /// See [`Adapter::secret_params`].
    fn secret_params(&self) -> &'static [crate::secrets::SecretParam];

    /// See [`Adapter::path_params`].
    fn path_params(&self) -> &'static [&'static str];

    /// See [`Adapter::files_read`].
    fn files_read(&self, config: &CompiledConfig) -> Vec<std::path::PathBuf>;

    /// The templates a handler built from `config` accepts: its own (see
    /// [`Adapter::templates_for`]) or the adapter's.
    fn templates_of(&self, config: &CompiledConfig) -> Vec<Template>;

    /// The deadline a handler built from `config` puts on each of its own calls (an
    /// out-of-process handler ends each at its connection's timeout), if it bounds them
    /// itself; the dispatcher then sets none of its own. `None` (every [`Adapter`]): the
    /// mixer's handler timeout bounds its check and quota calls.
    fn own_call_timeout(&self, _config: &CompiledConfig) -> Option<std::time::Duration> {
        None
    }

    /// [`AnyAdapter::compile`] then [`AnyAdapter::build_compiled`], for tests and tools that
    /// start from params.
    fn compile_and_build(
        &self,
        params: &Params,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        let config = self.compile(params).map_err(AdapterError::invalid_config)?;
        self.build_compiled(&config, ctx)
    }
}

impl<A: Adapter> AnyAdapter for A {
    fn info(&self) -> &AdapterInfo {
        Adapter::info(self)
    }

    fn compile(&self, params: &Params) -> Result<CompiledConfig, Vec<ParamError>> {
        let config: A::Config = decode_params(params).map_err(|e| vec![e])?;
        Ok(CompiledConfig {
            adapter: Adapter::info(self).name,
            config: Arc::new(Adapter::compile(self, config)?),
        })
    }

    fn build_compiled(
        &self,
        config: &CompiledConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Adapter::build(self, typed::<A>(config, Adapter::info(self).name)?, ctx)
    }

    fn secret_params(&self) -> &'static [crate::secrets::SecretParam] {
        Adapter::secret_params(self)
    }

    fn path_params(&self) -> &'static [&'static str] {
        Adapter::path_params(self)
    }

    fn files_read(&self, config: &CompiledConfig) -> Vec<std::path::PathBuf> {
        typed::<A>(config, Adapter::info(self).name)
            .map(|c| Adapter::files_read(self, c))
            .unwrap_or_default()
    }

    fn templates_of(&self, config: &CompiledConfig) -> Vec<Template> {
        typed::<A>(config, Adapter::info(self).name)
            .ok()
            .and_then(|c| Adapter::templates_for(self, c))
            .unwrap_or_else(|| Adapter::info(self).templates.to_vec())
    }
}

fn typed<'c, A: Adapter>(
    config: &'c CompiledConfig,
    name: &str,
) -> Result<&'c A::Compiled, AdapterError> {
    config.config.downcast_ref::<A::Compiled>().ok_or_else(|| {
        AdapterError::permanent(
            ErrorKind::Internal,
            format!(
                "a config compiled by adapter {:?} was given to adapter {name:?}",
                config.adapter
            ),
        )
    })
}
