//! The set of adapters a mixer binary knows, by name. It lives with config validation, the
//! first to look names up in it, rather than in the adapter API: adapters never see it.

use std::collections::BTreeMap;
use std::sync::Arc;

use mixer_adapter_api::host::AnyAdapter;
use mixer_remote::RemoteAdapter;

use crate::model::HandlerConfig;

/// Adapters by name. The server fills it at start-up; config validation looks names up here.
/// Handlers with a `connection` have the out-of-process transport as their adapter, whatever
/// name they give ([`AdapterRegistry::register_remote`]): it compiles them with their
/// connection once rules are resolved, and builds them like any other.
#[derive(Clone, Default)]
pub struct AdapterRegistry {
    adapters: BTreeMap<&'static str, Arc<dyn AnyAdapter>>,
    remote: Option<Arc<dyn RemoteAdapter>>,
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

    /// Registers the adapter of handlers with a `connection` (replacing any previous one).
    pub fn register_remote(&mut self, remote: Arc<dyn RemoteAdapter>) {
        self.remote = Some(remote);
    }

    /// The adapter of handlers with a `connection`, if this mixer has one.
    pub fn remote(&self) -> Option<&Arc<dyn RemoteAdapter>> {
        self.remote.as_ref()
    }

    /// The adapter that compiles and builds `handler`: the out-of-process transport for one
    /// with a `connection`, else the adapter it names.
    pub fn adapter_for(&self, handler: &HandlerConfig) -> Option<&dyn AnyAdapter> {
        if handler.connection.is_some() {
            self.remote.as_deref().map(|r| r as &dyn AnyAdapter)
        } else {
            self.adapters.get(handler.adapter.as_str()).map(|a| &**a)
        }
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
