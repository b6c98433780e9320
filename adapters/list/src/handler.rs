//! The listchecker's handler: the current list behind an atomic pointer, a background task that
//! refreshes it, and the check itself.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, CheckHandler, ErrorKind, Handler};
use mixer_model::{CheckResult, Code, Instance, ListEntryInstance, Status, Value};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::config::{ListConfig, Provider};
use crate::fetch;
use crate::list::{List, Lookup};

/// Longest a single fetch may take.
const MAX_FETCH_TIME: Duration = Duration::from_secs(30);

/// The list in use and when it was last confirmed by the provider.
struct Loaded {
    list: Arc<List>,
    /// Last successful fetch (also when the body was unchanged).
    confirmed_at: Instant,
    /// Fingerprint of the body it was built from, to skip rebuilding an unchanged list.
    body_hash: u64,
}

struct Shared {
    config: ListConfig,
    name: Arc<str>,
    current: ArcSwapOption<Loaded>,
    last_error: Mutex<Option<String>>,
    /// Counts installed lists (not unchanged re-fetches); lets callers wait for a new list.
    generation: watch::Sender<u64>,
}

/// Answers `listentry` checks against the configured list.
pub struct ListHandler {
    shared: Arc<Shared>,
    refresher: Mutex<Option<AbortHandle>>,
}

impl std::fmt::Debug for ListHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListHandler")
            .field("name", &self.shared.name)
            .field("provider", &self.shared.config.provider)
            .finish_non_exhaustive()
    }
}

impl ListHandler {
    /// Builds the handler. Without a provider the list (the overrides) is ready at once; with
    /// one, a refresh task is spawned on the current tokio runtime (an error when there is
    /// none) and checks fail with UNAVAILABLE until its first fetch succeeds, as Istio's did.
    pub fn start(config: ListConfig, name: Arc<str>) -> Result<Arc<ListHandler>, AdapterError> {
        let (generation, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            config,
            name,
            current: ArcSwapOption::empty(),
            last_error: Mutex::new(None),
            generation,
        });
        let handler = Arc::new(ListHandler {
            shared: shared.clone(),
            refresher: Mutex::new(None),
        });
        let Some(provider) = shared.config.provider.clone() else {
            let list = List::build(shared.config.entry_type, "", &shared.config.overrides)
                .map_err(|e| AdapterError::permanent(ErrorKind::Internal, e))?;
            shared.install(list, 0);
            return Ok(handler);
        };
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            AdapterError::permanent(
                ErrorKind::Internal,
                "listchecker needs a tokio runtime to poll its providerUrl",
            )
        })?;
        let task = runtime.spawn(refresh_loop(shared, provider));
        *handler.refresher.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.abort_handle());
        Ok(handler)
    }

    /// How many lists have been installed so far (0 until the first fetch succeeds).
    pub fn generation(&self) -> u64 {
        *self.shared.generation.borrow()
    }

    /// Waits until more than `seen` lists have been installed; returns the new count.
    pub async fn wait_for_generation(&self, seen: u64) -> u64 {
        let mut rx = self.shared.generation.subscribe();
        // The sender lives in `self.shared`, so this cannot fail while `self` is borrowed.
        let _ = rx.wait_for(|g| *g > seen).await;
        *rx.borrow()
    }

    /// Waits for the first list (returns at once without a provider).
    pub async fn ready(&self) {
        self.wait_for_generation(0).await;
    }

    /// Stops the refresh task; the last list stays in use (until its ttl runs out).
    pub fn stop(&self) {
        if let Some(task) = self
            .refresher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }

    /// The list to check against, or why there is none.
    fn list(&self) -> Result<Arc<List>, AdapterError> {
        let shared = &self.shared;
        let last_error = || {
            shared
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        };
        let Some(loaded) = shared.current.load_full() else {
            let why = last_error().unwrap_or_else(|| "first fetch still in progress".into());
            return Err(AdapterError::transient(
                ErrorKind::Unavailable,
                format!("{}: no list available yet: {why}", shared.name),
            ));
        };
        if shared.config.provider.is_some() {
            let age = Instant::now().saturating_duration_since(loaded.confirmed_at);
            if age >= shared.config.ttl {
                let why = last_error().unwrap_or_else(|| "no refresh".into());
                return Err(AdapterError::transient(
                    ErrorKind::Unavailable,
                    format!(
                        "{}: list expired ({}s since the last successful fetch, ttl {}s): {why}",
                        shared.name,
                        age.as_secs(),
                        shared.config.ttl.as_secs()
                    ),
                ));
            }
        }
        Ok(loaded.list.clone())
    }

    fn result(&self, code: Code, message: String) -> CheckResult {
        CheckResult {
            status: Status::new(code, message),
            valid_duration: self.shared.config.caching_interval,
            valid_use_count: self.shared.config.caching_use_count,
        }
    }
}

impl Drop for ListHandler {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn install(&self, list: List, body_hash: u64) {
        tracing::info!(handler = %self.name, entries = list.len(), "installing updated list");
        self.current.store(Some(Arc::new(Loaded {
            list: Arc::new(list),
            confirmed_at: Instant::now(),
            body_hash,
        })));
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.generation.send_modify(|g| *g += 1);
    }

    fn fail(&self, message: String) {
        tracing::warn!(handler = %self.name, error = %message, "could not refresh list");
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(message);
    }

    async fn refresh(&self, provider: &Provider) {
        let timeout = self.config.refresh_interval.min(MAX_FETCH_TIME);
        let body = match tokio::time::timeout(timeout, fetch::fetch(provider)).await {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => return self.fail(format!("could not fetch list from {provider}: {e}")),
            Err(_) => {
                return self.fail(format!(
                    "could not fetch list from {provider}: no answer within {}s",
                    timeout.as_secs()
                ));
            }
        };
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            body.hash(&mut h);
            h.finish()
        };
        if let Some(current) = self.current.load_full()
            && current.body_hash == hash
        {
            tracing::debug!(handler = %self.name, "fetched list is unchanged");
            self.current.store(Some(Arc::new(Loaded {
                list: current.list.clone(),
                confirmed_at: Instant::now(),
                body_hash: hash,
            })));
            *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
            return;
        }
        match List::build(self.config.entry_type, &body, &self.config.overrides) {
            Ok(list) => self.install(list, hash),
            Err(e) => self.fail(format!("could not parse data from {provider}: {e}")),
        }
    }
}

/// Fetches at once, then every refresh interval, until aborted.
async fn refresh_loop(shared: Arc<Shared>, provider: Provider) {
    let mut ticker = tokio::time::interval(shared.config.refresh_interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        shared.refresh(&provider).await;
    }
}

/// The instance's `value` as something to look up, or Istio's message for what it is not.
fn lookup_value(value: Option<&Value>) -> Result<Lookup<'_>, String> {
    match value {
        Some(Value::IpAddress(ip)) => Ok(Lookup::Ip(*ip)),
        Some(Value::Bytes(b)) if b.len() == 4 || b.len() == 16 => {
            let ip = match <[u8; 4]>::try_from(&b[..]) {
                Ok(v4) => IpAddr::from(v4),
                Err(_) => IpAddr::from(<[u8; 16]>::try_from(&b[..]).unwrap_or_default()),
            };
            Ok(Lookup::Ip(ip))
        }
        Some(v) => match v.as_str() {
            Some(s) => Ok(Lookup::Text(s)),
            None => Err(format!("{v} is not a valid string or IP address")),
        },
        None => Err("<nil> is not a valid string or IP address".into()),
    }
}

#[async_trait]
impl Handler for ListHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }

    async fn close(&self) {
        self.stop();
    }
}

#[async_trait]
impl CheckHandler for ListHandler {
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        let list = self.list()?;
        let value = match lookup_value(ListEntryInstance::of(instance).and_then(|l| l.value)) {
            Ok(v) => v,
            Err(message) => return Ok(self.result(Code::InvalidArgument, message)),
        };
        let found = match list.contains(value) {
            Ok(found) => found,
            Err(message) => return Ok(self.result(Code::InvalidArgument, message)),
        };
        let blacklist = self.shared.config.blacklist;
        Ok(match (blacklist, found) {
            (true, true) => self.result(Code::PermissionDenied, format!("{value} is blacklisted")),
            (false, false) => self.result(
                Code::PermissionDenied,
                format!("{value} is not whitelisted"),
            ),
            _ => self.result(Code::Ok, String::new()),
        })
    }
}
