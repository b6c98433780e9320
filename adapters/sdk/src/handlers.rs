//! The handlers the adapter builds: one per session (`CreateSession` builds it,
//! `CloseSession` closes it), and, for calls that carry their params, one per distinct params
//! in a small bounded cache. A handler is closed once, after the calls that hold it end.

use std::collections::HashMap;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use mixer_adapter_api::host::{AnyAdapter, CompiledConfig};
use mixer_adapter_api::{BuildContext, Handler};
use mixer_model::Template;
use moka::notification::RemovalCause;
use moka::policy::EvictionPolicy;
use prost_types::Any;
use tokio::sync::{OwnedRwLockReadGuard, RwLock};
use tonic::Status;

use crate::convert;
use crate::params::{Carried, ParamsReader, carried};

/// How many handlers built from params carried by calls are kept. A mixer sends params with
/// every call only for handlers whose `adapter` document says `session_based: false` (or when
/// a session could not be created), so a few distinct params is the usual case.
const INLINE_HANDLERS: u64 = 32;

/// How many sessions are kept: one per handler config per mixer replica is the usual case.
/// The bound is for sessions nobody closes: the mixer's client forgets its session without
/// closing it when a call answers UNAVAILABLE (it takes that for an adapter that restarted),
/// and opens another.
const SESSIONS: u64 = 1024;

/// A built handler and its calls in flight.
pub(crate) struct Built {
    handler: Arc<dyn Handler>,
    /// Each call holds a read lock while it runs; closing takes the write lock, so it waits
    /// for the calls in flight, and marks the handler closed for the calls that come later.
    closed: Arc<RwLock<bool>>,
}

impl Built {
    fn new(handler: Arc<dyn Handler>) -> Arc<Built> {
        Arc::new(Built {
            handler,
            closed: Arc::default(),
        })
    }

    /// The handler for one call; `None` once it is closed.
    async fn enter(&self) -> Option<InUse> {
        let guard = self.closed.clone().read_owned().await;
        (!*guard).then(|| InUse {
            handler: self.handler.clone(),
            _guard: guard,
        })
    }

    /// Closes the handler once the calls holding it are done; later calls do not get it.
    async fn close(&self) {
        let mut closed = self.closed.write().await;
        if !*closed {
            *closed = true;
            self.handler.close().await;
        }
    }
}

/// A handler held by a call: it is not closed until this is dropped.
pub(crate) struct InUse {
    handler: Arc<dyn Handler>,
    _guard: OwnedRwLockReadGuard<bool>,
}

impl Deref for InUse {
    type Target = dyn Handler;

    fn deref(&self) -> &(dyn Handler + 'static) {
        &*self.handler
    }
}

/// The key of a handler built from carried params: the params' type and bytes, exactly as
/// they came.
type ParamsKey = (String, Vec<u8>);

/// The adapter and every handler it has built.
pub(crate) struct Handlers {
    adapter: Arc<dyn AnyAdapter>,
    params: ParamsReader,
    /// By session id. Past [`SESSIONS`], the least recently used is closed once the calls
    /// holding it end; a mixer that still had it is told NOT_FOUND on its next call (which
    /// fails, and its handler's fail policy applies) and opens a new session.
    sessions: moka::sync::Cache<String, Arc<Built>>,
    /// On eviction (the least recently used, past [`INLINE_HANDLERS`]) a handler is closed
    /// once the calls holding it end; a call that comes with those params later builds a new
    /// one.
    inline: moka::sync::Cache<ParamsKey, Arc<Built>>,
    /// Session ids differ from those of an earlier run of the adapter, so a mixer still
    /// holding an old id is told it is unknown instead of reaching another handler.
    run: u64,
    next: AtomicU64,
}

impl Handlers {
    pub(crate) fn new(adapter: Arc<dyn AnyAdapter>, params: ParamsReader) -> Handlers {
        Handlers {
            adapter,
            params,
            sessions: closing_cache(SESSIONS),
            inline: closing_cache(INLINE_HANDLERS),
            run: run_id(),
            next: AtomicU64::new(0),
        }
    }

    pub(crate) fn adapter(&self) -> &dyn AnyAdapter {
        &*self.adapter
    }

    /// The templates the adapter declares.
    fn declared(&self) -> Vec<Template> {
        self.adapter.info().templates.to_vec()
    }

    /// Validate: the instances are of templates the adapter serves, and the params compile.
    pub(crate) fn validate(
        &self,
        params: Option<&Any>,
        inferred_types: &HashMap<String, Any>,
    ) -> Result<CompiledConfig, String> {
        served(inferred_types, &self.declared())?;
        let Carried::Params(params) = carried(params)? else {
            return Err("adapter_config: expected the handler's params, got a session".into());
        };
        let config = self.compile(params)?;
        // A Wasm plugin's templates come with its module: the compiled params say which.
        served(inferred_types, &self.adapter.templates_of(&config))?;
        Ok(config)
    }

    fn compile(&self, params: Option<&Any>) -> Result<CompiledConfig, String> {
        let json = self.params.json(params)?;
        self.adapter.compile(&json).map_err(|errors| {
            let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
            said.join("; ")
        })
    }

    fn build(&self, config: &CompiledConfig, name: String) -> Result<Arc<Built>, Status> {
        let ctx = BuildContext {
            handler_name: name.into(),
        };
        let handler = self
            .adapter
            .build_compiled(config, &ctx)
            .map_err(|e| convert::error_status(&e))?;
        Ok(Built::new(handler))
    }

    fn next_id(&self, what: &str) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{}-{what}-{:x}-{n}", self.adapter.info().name, self.run)
    }

    /// CreateSession: validates, builds the handler and keeps it under a new session id,
    /// which is also the handler's name.
    pub(crate) fn create_session(
        &self,
        params: Option<&Any>,
        inferred_types: &HashMap<String, Any>,
    ) -> Result<String, Status> {
        let config = self
            .validate(params, inferred_types)
            .map_err(Status::invalid_argument)?;
        let id = self.next_id("session");
        let built = self.build(&config, id.clone())?;
        self.sessions.insert(id.clone(), built);
        Ok(id)
    }

    /// CloseSession: forgets the session and closes its handler once its calls end; false
    /// for an unknown id.
    pub(crate) async fn close_session(&self, id: &str) -> bool {
        let Some(built) = self.sessions.remove(id) else {
            return false;
        };
        // On a task of its own: a mixer that gives up waiting (its deadline) drops this call,
        // and the handler must still be closed.
        let _ = tokio::spawn(async move { built.close().await }).await;
        true
    }

    /// The handler a call's `adapter_config` names: its session's, or one built from the
    /// params it carries.
    pub(crate) async fn handler(&self, adapter_config: Option<&Any>) -> Result<InUse, Status> {
        match carried(adapter_config).map_err(Status::invalid_argument)? {
            Carried::Session(id) => {
                let built = self.sessions.get(&id);
                // NOT_FOUND tells the mixer's client to create a new session.
                let unknown = || Status::not_found(format!("unknown session {id:?}"));
                built.ok_or_else(unknown)?.enter().await.ok_or_else(unknown)
            }
            Carried::Params(params) => {
                let key = params.map_or_else(ParamsKey::default, |p| {
                    (p.type_url.clone(), p.value.clone())
                });
                // A handler evicted and closed between the lookup and the call is built anew.
                for _ in 0..3 {
                    let built = self
                        .inline
                        .try_get_with(key.clone(), || {
                            let config = self.compile(params).map_err(Status::invalid_argument)?;
                            self.build(&config, self.next_id("params"))
                        })
                        .map_err(|e| (*e).clone())?;
                    if let Some(handler) = built.enter().await {
                        return Ok(handler);
                    }
                }
                Err(Status::unavailable(
                    "the handler built from these params keeps being closed: too many distinct params",
                ))
            }
        }
    }

    /// Closes every handler, once its calls end (the server has stopped).
    pub(crate) async fn close_all(&self) {
        let sessions = self.sessions.iter().map(|(_, b)| b);
        let built: Vec<Arc<Built>> = sessions.chain(self.inline.iter().map(|(_, b)| b)).collect();
        self.sessions.invalidate_all();
        self.inline.invalidate_all();
        for built in built {
            built.close().await;
        }
    }
}

/// A cache of at most `capacity` handlers that closes those it evicts (least recently used
/// first), on a task of their own once the calls holding them end. Those removed otherwise
/// are closed by whoever removes them.
fn closing_cache<K>(capacity: u64) -> moka::sync::Cache<K, Arc<Built>>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    moka::sync::Cache::builder()
        .max_capacity(capacity)
        .eviction_policy(EvictionPolicy::lru())
        .eviction_listener(|_, built: Arc<Built>, cause: RemovalCause| {
            // Calls run on the runtime, and so does the cache upkeep that evicts.
            if cause.was_evicted()
                && let Ok(runtime) = tokio::runtime::Handle::try_current()
            {
                runtime.spawn(async move { built.close().await });
            }
        })
        .build()
}

/// Refuses an instance (from its inferred type, `.../PACKAGE.Type`) of a template outside
/// `served`, so that a handler the adapter cannot serve fails at config load, not at
/// request time.
fn served(inferred_types: &HashMap<String, Any>, served: &[Template]) -> Result<(), String> {
    let mut instances: Vec<_> = inferred_types.iter().collect();
    instances.sort_by_key(|(name, _)| *name);
    for (instance, ty) in instances {
        let name = ty.type_url.rsplit('/').next().unwrap_or_default();
        let Some(package) = name.strip_suffix(".Type") else {
            continue;
        };
        if !Template::from_name(package).is_some_and(|t| served.contains(&t)) {
            let names: Vec<&str> = served.iter().map(|t| t.name()).collect();
            return Err(format!(
                "instance {instance}: template {package} is not served by this adapter \
                 (it serves: {})",
                names.join(", ")
            ));
        }
    }
    Ok(())
}

/// A number that differs from run to run of the adapter: std's per-process random hash keys.
fn run_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

#[cfg(test)]
mod tests;
