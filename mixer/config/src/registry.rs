//! The set of adapters a mixer binary knows, by name. It lives with config validation, the
//! first to look names up in it, rather than in the adapter API: adapters never see it.

use std::collections::BTreeMap;
use std::sync::Arc;

use mixer_adapter_api::host::AnyAdapter;
use mixer_remote::RemoteAdapters;

/// Adapters by name. The server fills it at start-up; config validation looks names up here.
/// Handlers with a `connection` go to the [`RemoteAdapters`] set with
/// [`AdapterRegistry::set_remote`] instead.
#[derive(Clone, Default)]
pub struct AdapterRegistry {
    adapters: BTreeMap<&'static str, Arc<dyn AnyAdapter>>,
    remote: Option<Arc<dyn RemoteAdapters>>,
}

impl AdapterRegistry {
    /// An empty registry.
    pub fn new() -> AdapterRegistry {
        AdapterRegistry::default()
    }

    /// Adds an adapter under its declared name, replacing one of the same name.
    pub fn register(&mut self, adapter: Arc<dyn AnyAdapter>) {
        self.adapters.insert(adapter.info().name, adapter);
    }

    /// The adapter called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn AnyAdapter>> {
        self.adapters.get(name)
    }

    /// Installs the builder of out-of-process handlers (replacing any previous one).
    pub fn set_remote(&mut self, remote: Arc<dyn RemoteAdapters>) {
        self.remote = Some(remote);
    }

    /// The builder of out-of-process handlers, if this mixer has one.
    pub fn remote(&self) -> Option<&Arc<dyn RemoteAdapters>> {
        self.remote.as_ref()
    }

    /// Registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.adapters.keys().copied()
    }
}

impl std::fmt::Debug for AdapterRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.adapters.keys()).finish()
    }
}
