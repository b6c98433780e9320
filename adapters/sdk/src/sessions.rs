//! What every registered service shares: the adapter, the handler configs the mixer stored
//! with `CreateSession`, and the report batches already handled.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tonic::Status;

use crate::config::Config;
use crate::convert::{self, AdapterConfig};
use crate::traits::Adapter;

/// Handler configs the mixer stored with `CreateSession`, by session id.
#[derive(Default)]
pub(crate) struct Sessions {
    next: AtomicU64,
    configs: Mutex<HashMap<String, Arc<Config>>>,
}

impl Sessions {
    pub(crate) fn create(&self, config: Config) -> String {
        let id = format!("session-{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        self.lock().insert(id.clone(), Arc::new(config));
        id
    }

    pub(crate) fn get(&self, id: &str) -> Option<Arc<Config>> {
        self.lock().get(id).cloned()
    }

    pub(crate) fn close(&self, id: &str) -> bool {
        self.lock().remove(id).is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Config>>> {
        // A panic while holding the lock cannot leave the map half-updated: recover it.
        self.configs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The `dedup_id`s of the last report batches handled, so a batch the mixer retries (same
/// id) after a lost answer is not recorded twice.
#[derive(Default)]
pub(crate) struct Handled {
    ids: Mutex<(HashSet<String>, VecDeque<String>)>,
}

impl Handled {
    const REMEMBERED: usize = 4096;

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashSet<String>, VecDeque<String>)> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn seen(&self, id: &str) -> bool {
        !id.is_empty() && self.lock().0.contains(id)
    }

    pub(crate) fn done(&self, id: String) {
        if id.is_empty() {
            return;
        }
        let mut ids = self.lock();
        if ids.0.insert(id.clone()) {
            ids.1.push_back(id);
            if ids.1.len() > Self::REMEMBERED
                && let Some(old) = ids.1.pop_front()
            {
                ids.0.remove(&old);
            }
        }
    }
}

/// The adapter and the session store, shared by every registered service.
pub(crate) struct Shared<A> {
    pub(crate) adapter: Arc<A>,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) handled: Arc<Handled>,
    /// The template packages served (`listentry`, `metric`...), set when serving starts.
    pub(crate) templates: Arc<OnceLock<Vec<String>>>,
    pub(crate) no_params: Arc<Config>,
}

impl<A> Clone for Shared<A> {
    fn clone(&self) -> Self {
        Shared {
            adapter: self.adapter.clone(),
            sessions: self.sessions.clone(),
            handled: self.handled.clone(),
            templates: self.templates.clone(),
            no_params: self.no_params.clone(),
        }
    }
}

impl<A: Adapter> Shared<A> {
    /// The config a request-time call carries: its params, or the session's.
    /// The config for a report batch, or `None` when the batch was already handled (the mixer
    /// retried it with the same dedup id) and must not be recorded twice.
    pub(crate) fn report_config(
        &self,
        dedup_id: &str,
        any: Option<&prost_types::Any>,
    ) -> Result<Option<Arc<Config>>, Status> {
        if self.handled.seen(dedup_id) {
            return Ok(None);
        }
        self.config(any).map(Some)
    }

    pub(crate) fn config(&self, any: Option<&prost_types::Any>) -> Result<Arc<Config>, Status> {
        match convert::adapter_config(any).map_err(Status::invalid_argument)? {
            AdapterConfig::None => Ok(self.no_params.clone()),
            AdapterConfig::Params(params) => Ok(Arc::new(Config::from_json(params))),
            AdapterConfig::Message(message) => Ok(Arc::new(Config::from_message(message))),
            AdapterConfig::Session(id) => self
                .sessions
                .get(&id)
                .ok_or_else(|| Status::not_found(format!("unknown session {id:?}"))),
        }
    }

    /// The params of a Validate or CreateSession request, checked by the adapter, after
    /// checking that every instance's template (from its inferred type, `.../PACKAGE.Type`)
    /// is one this server serves.
    pub(crate) fn validated(
        &self,
        any: Option<&prost_types::Any>,
        inferred_types: &HashMap<String, prost_types::Any>,
    ) -> Result<Config, String> {
        if let Some(served) = self.templates.get() {
            let mut instances: Vec<_> = inferred_types.iter().collect();
            instances.sort_by_key(|(name, _)| *name);
            for (instance, ty) in instances {
                let name = ty.type_url.rsplit('/').next().unwrap_or_default();
                if let Some(template) = name.strip_suffix(".Type")
                    && !served.iter().any(|t| t == template)
                {
                    return Err(format!(
                        "instance {instance}: template {template} is not served by this \
                         adapter (it serves: {})",
                        served.join(", ")
                    ));
                }
            }
        }
        let config = match convert::adapter_config(any)? {
            AdapterConfig::None => Config::default(),
            AdapterConfig::Params(params) => Config::from_json(params),
            AdapterConfig::Message(message) => Config::from_message(message),
            AdapterConfig::Session(_) => {
                return Err("adapter_config: expected the handler's params, got a session".into());
            }
        };
        self.adapter.validate(&config)?;
        Ok(config)
    }
}
