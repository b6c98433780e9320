//! The apikey handler: the current key set behind an atomic pointer, a task that reads the
//! files again every reload interval, and the lookup.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, AttributeHandler, Denial, ErrorKind, Generated, Handler};
use mixer_model::{ApiKeyInstance, Code, HeaderOp, HeaderOperation, Instance, Status};
use tokio::task::AbortHandle;

use crate::config::ApiKeyConfig;
use crate::key_set::{KeyDigest, KeyFileError, KeySet, MAX_KEY_BYTES};
use crate::key_source::KeySource;

/// The keys in use and the content they were built from.
struct Loaded {
    keys: Arc<KeySet>,
    fingerprint: [u8; 32],
}

struct Shared {
    config: ApiKeyConfig,
    name: Arc<str>,
    current: ArcSwap<Loaded>,
    /// When the handler started: the base of `next_reload_nanos`.
    started: Instant,
    /// When the files will next be read, in nanoseconds after `started`: an answer holds
    /// until then, so that a cached verdict never outlives a revocation's reload.
    next_reload_nanos: AtomicU64,
    /// Reloads that installed a new key set.
    installed: AtomicU64,
    /// Reloads that failed (and kept the keys in use).
    failed: AtomicU64,
}

/// What one reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reload {
    /// The files changed and their keys are now in use.
    Installed {
        /// How many keys.
        keys: usize,
    },
    /// The files are as they were.
    Unchanged,
    /// The files could not be read or parsed; the keys in use stay. Why (never a key).
    Kept(String),
}

/// Answers `apikey` instances with the name and labels of the key they carry.
pub struct ApiKeyHandler {
    shared: Arc<Shared>,
    reloader: Mutex<Option<AbortHandle>>,
}

impl std::fmt::Debug for ApiKeyHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeyHandler")
            .field("name", &self.shared.name)
            .field("source", &self.shared.config.source)
            .finish_non_exhaustive()
    }
}

impl ApiKeyHandler {
    /// A handler with the keys `config` was compiled with. When `config` reloads and a
    /// tokio runtime is current, a task reads the files again every reload interval.
    pub fn start(config: ApiKeyConfig, name: Arc<str>) -> Arc<ApiKeyHandler> {
        let loaded = Loaded {
            keys: config.initial.keys.clone(),
            fingerprint: config.initial.fingerprint,
        };
        let shared = Arc::new(Shared {
            name,
            current: ArcSwap::from_pointee(loaded),
            started: Instant::now(),
            next_reload_nanos: AtomicU64::new(0),
            installed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            config,
        });
        shared.schedule_next();
        tracing::info!(
            handler = %shared.name,
            keys = shared.config.initial.keys.len(),
            from = %shared.config.source.path().display(),
            "API keys loaded"
        );
        let handler = Arc::new(ApiKeyHandler {
            shared: shared.clone(),
            reloader: Mutex::new(None),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let task = runtime.spawn(reload_loop(shared));
            *handler.reloader.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.abort_handle());
        } else {
            // Built outside a runtime (a tool inspecting config): the keys stay as compiled.
            tracing::debug!(handler = %handler.shared.name, "no runtime: keys are not reloaded");
        }
        handler
    }

    /// Reads the files now; what the reload loop does every interval.
    pub async fn reload(&self) -> Reload {
        self.shared.reload().await
    }

    /// How many keys are in use.
    pub fn key_count(&self) -> usize {
        self.shared.current.load().keys.len()
    }

    /// Reloads that installed new keys, and reloads that failed, since the start.
    pub fn reload_counts(&self) -> (u64, u64) {
        (
            self.shared.installed.load(Ordering::Relaxed),
            self.shared.failed.load(Ordering::Relaxed),
        )
    }

    /// Stops the reload task; the keys in use stay.
    pub fn stop(&self) {
        if let Some(task) = self
            .reloader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }

    /// The answer for a presented key (`None`: the instance carried none).
    pub fn answer(&self, key: Option<&str>) -> Generated {
        let shared = &self.shared;
        let key = key.filter(|k| !k.is_empty());
        let Some(key) = key else {
            return if shared.config.require_key {
                self.denied("no API key in the request")
            } else {
                // No credential is not a bad credential: the bindings keep their defaults
                // and the rules decide (a rule requiring a principal denies).
                Generated::default()
            };
        };
        if key.len() > MAX_KEY_BYTES {
            return self.denied(&format!("API key longer than {MAX_KEY_BYTES} bytes"));
        }
        let digest = KeyDigest::of(key.as_bytes());
        let loaded = shared.current.load();
        match loaded.keys.holder(&digest) {
            Some(holder) => Generated {
                outputs: vec![
                    ("principal", holder.principal.clone()),
                    ("claims", holder.claims.clone()),
                ],
                valid_duration: Some(shared.until_next_reload()),
                denial: None,
            },
            None => self.denied("unknown API key"),
        }
    }

    fn denied(&self, reason: &str) -> Generated {
        let shared = &self.shared;
        let response_headers = shared
            .config
            .challenge
            .as_ref()
            .map(|challenge| HeaderOperation {
                name: "www-authenticate".into(),
                value: challenge.clone(),
                op: HeaderOp::Replace,
            })
            .into_iter()
            .collect();
        Generated {
            outputs: Vec::new(),
            // A key added to the files is accepted once they are read again.
            valid_duration: Some(shared.until_next_reload()),
            denial: Some(Denial {
                status: Status::new(Code::Unauthenticated, reason),
                response_headers,
            }),
        }
    }
}

impl Drop for ApiKeyHandler {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn schedule_next(&self) {
        let at = self.started.elapsed() + self.config.reload_interval;
        let nanos = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
        self.next_reload_nanos.store(nanos, Ordering::Relaxed);
    }

    /// How long the keys in use are sure to stay: until the next reload (a reload running
    /// late counts as due now).
    fn until_next_reload(&self) -> Duration {
        let next = Duration::from_nanos(self.next_reload_nanos.load(Ordering::Relaxed));
        next.saturating_sub(self.started.elapsed())
    }

    async fn reload(self: &Arc<Self>) -> Reload {
        let source: KeySource = self.config.source.clone();
        let previous = self.current.load().fingerprint;
        // Reading and hashing thousands of keys is blocking work: off the request threads.
        let read = tokio::task::spawn_blocking(move || -> Result<_, KeyFileError> {
            let read = source.read()?;
            if read.fingerprint == previous {
                return Ok(None);
            }
            Ok(Some((read.parse()?, read.fingerprint)))
        })
        .await;
        let outcome = match read {
            Err(join) => Reload::Kept(format!("reading the key files failed: {join}")),
            Ok(Err(e)) => Reload::Kept(e.to_string()),
            Ok(Ok(None)) => Reload::Unchanged,
            Ok(Ok(Some((keys, fingerprint)))) => {
                let count = keys.len();
                self.current.store(Arc::new(Loaded {
                    keys: Arc::new(keys),
                    fingerprint,
                }));
                Reload::Installed { keys: count }
            }
        };
        match &outcome {
            Reload::Installed { keys } => {
                self.installed.fetch_add(1, Ordering::Relaxed);
                tracing::info!(handler = %self.name, keys, "API keys reloaded");
            }
            Reload::Unchanged => {}
            Reload::Kept(why) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let keys = self.current.load().keys.len();
                tracing::warn!(
                    handler = %self.name,
                    error = %why,
                    keys,
                    "API key files not reloaded; the keys in use stay"
                );
            }
        }
        outcome
    }
}

/// Reads the files every reload interval, until aborted.
async fn reload_loop(shared: Arc<Shared>) {
    let every = shared.config.reload_interval;
    loop {
        tokio::time::sleep(every).await;
        shared.reload().await;
        shared.schedule_next();
    }
}

#[async_trait]
impl Handler for ApiKeyHandler {
    fn as_attributes(&self) -> Option<&dyn AttributeHandler> {
        Some(self)
    }

    async fn close(&self) {
        self.stop();
    }
}

#[async_trait]
impl AttributeHandler for ApiKeyHandler {
    async fn generate(&self, instance: &Instance) -> Result<Generated, AdapterError> {
        let Some(view) = ApiKeyInstance::of(instance) else {
            return Err(AdapterError::permanent(
                ErrorKind::InvalidInstance,
                format!(
                    "{}: instance {} is of template {}, not apikey",
                    self.shared.name,
                    instance.name,
                    instance.template.name()
                ),
            ));
        };
        Ok(self.answer(view.key))
    }
}
