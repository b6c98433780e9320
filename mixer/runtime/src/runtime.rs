//! The active snapshot and how it is replaced.
//!
//! A reload reads the config, validates all of it, builds a new snapshot (reusing unchanged
//! handlers) and swaps it in atomically. Anything wrong on the way leaves the running
//! snapshot in place and is reported: in the log, in [`Runtime::last_error`] (shown by the
//! admin endpoints) and in `mixer_config_reload_failures_total`.
//!
//! With `--invalid-config skip` ([`InvalidConfig::Skip`](mixer_config::InvalidConfig)) a
//! config with invalid documents is served without them and what depends on them; each
//! dropped document is logged, counted in `mixer_config_dropped_documents{name,reason}` and
//! listed in the snapshot's [`Config::dropped`](mixer_config::Config::dropped). A config
//! whose every rule was dropped is still refused, so the running snapshot stays.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use mixer_config::{AdapterRegistry, ConfigError, ConfigOptions, SourceFile};

use crate::content::{CheckOutcome, ConfigContent, DiskState, Settle};
use crate::metrics::RuntimeMetrics;
use crate::report_executor::{ExecutorStopped, ReportExecutor};
use crate::snapshot::{RuntimeOptions, Snapshot};

/// Where config comes from.
#[derive(Clone, Debug)]
pub enum ConfigOrigin {
    /// Files given in memory (the embedded default config, tests).
    Embedded(Vec<SourceFile>),
    /// A YAML file or a directory of them, read at every reload.
    Path(PathBuf),
}

/// No valid config is active yet: the mixer cannot answer a request at all. Each front end
/// answers it in its own protocol (gRPC UNAVAILABLE, HTTP 503), with this one wording.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no valid config is active")]
pub struct NotReady;

/// Why a reload did not take effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReloadError {
    /// Each problem with its file, document and field path, as `mixer validate` names them
    /// (a file that could not be read, or a handler that could not be built, has no field).
    pub errors: Vec<ConfigError>,
}

impl std::fmt::Display for ReloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "config rejected, previous snapshot kept:\n  {}",
            self.messages().join("\n  ")
        )
    }
}

impl std::error::Error for ReloadError {}

impl ReloadError {
    /// One line per problem.
    pub fn messages(&self) -> Vec<String> {
        self.errors.iter().map(ToString::to_string).collect()
    }

    fn whole_file(file: impl Into<String>, message: impl Into<String>) -> ReloadError {
        ReloadError {
            errors: vec![ConfigError {
                file: file.into(),
                document: None,
                field: String::new(),
                message: message.into(),
            }],
        }
    }
}

/// The running mixer's config state: the active snapshot and what it takes to replace it.
pub struct Runtime {
    current: ArcSwap<Snapshot>,
    ready: AtomicBool,
    next_id: AtomicU64,
    origin: ConfigOrigin,
    registry: AdapterRegistry,
    config_options: ConfigOptions,
    options: RuntimeOptions,
    metrics: RuntimeMetrics,
    last_error: Mutex<Option<ReloadError>>,
    content: Mutex<ContentState>,
    /// The files of the active snapshot, to tell a file caught empty from one never filled.
    active_sources: Mutex<Vec<SourceFile>>,
    reloading: Mutex<()>,
    report_executor: Option<ReportExecutor>,
    last_removal: Mutex<Option<String>>,
}

/// The content the active snapshot was built from, and what was read at the last attempt.
#[derive(Default)]
struct ContentState {
    active: Option<ConfigContent>,
    tried: Option<Tried>,
    /// The tried content validated but its handlers could not be built: that may depend on
    /// more than the config's text (a file a handler reads, such as a certificate or a
    /// `<param>File` secret, not there yet), so every look tries it again.
    build_failed: bool,
}

/// What the last reload attempt read.
#[derive(Clone, PartialEq, Eq)]
enum Tried {
    Content(String),
    Unreadable(String),
}

impl Runtime {
    /// A runtime with an empty snapshot; not ready until the first successful [`Runtime::reload`].
    pub fn new(
        origin: ConfigOrigin,
        registry: AdapterRegistry,
        config_options: ConfigOptions,
        options: RuntimeOptions,
        metrics: RuntimeMetrics,
    ) -> Runtime {
        let report_executor = match options.report_threads {
            0 => None,
            n => ReportExecutor::start(n)
                .inspect_err(|e| {
                    tracing::warn!("reports run on the serving threads: no report threads: {e}");
                })
                .ok(),
        };
        Runtime {
            current: ArcSwap::from_pointee(Snapshot::empty(&metrics)),
            ready: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            origin,
            registry,
            config_options,
            options,
            metrics,
            last_error: Mutex::new(None),
            content: Mutex::new(ContentState::default()),
            active_sources: Mutex::new(Vec::new()),
            reloading: Mutex::new(()),
            report_executor,
            last_removal: Mutex::new(None),
        }
    }

    /// Runs report work (decoding records, [`crate::report`]) on the low-priority report
    /// threads when there are any and checks were served within [`crate::CHECKS_RECENT`];
    /// otherwise here.
    pub async fn run_report<F>(&self, work: F) -> Result<F::Output, ExecutorStopped>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.report_executor {
            Some(executor) if self.metrics.check_activity.recent() => executor.run(work).await,
            _ => Ok(work.await),
        }
    }

    /// The active snapshot. Hold it for the whole request.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The active snapshot once a valid config is active: what a request starts with.
    pub fn ready_snapshot(&self) -> Result<Arc<Snapshot>, NotReady> {
        if self.is_ready() {
            Ok(self.snapshot())
        } else {
            Err(NotReady)
        }
    }

    /// True once a valid config is active.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Why the last reload failed, if it did (cleared by a successful one).
    pub fn last_error(&self) -> Option<ReloadError> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// The content the active snapshot was built from (`None` before the first load).
    pub fn active_content(&self) -> Option<ConfigContent> {
        self.content_state().active.clone()
    }

    /// The files the active config's handlers read (modules, lists, secret files): the
    /// watcher watches them beside the config.
    pub fn input_paths(&self) -> Vec<PathBuf> {
        self.content_state()
            .active
            .as_ref()
            .map(|c| c.inputs.iter().map(|i| i.path.clone()).collect())
            .unwrap_or_default()
    }

    /// Reads the config now and compares it with the active content, for `/readyz`: a
    /// snapshot is only called current when the files on disk hold what it was built from.
    pub fn disk_state(&self) -> DiskState {
        match self.read() {
            Err(e) => DiskState::Unreadable {
                error: e.messages().join("; "),
            },
            Ok(sources) => {
                let disk = self.disk_key(&sources);
                let state = self.content_state();
                if state.active.as_ref().is_some_and(|a| a.files_hash == disk) {
                    DiskState::Current
                } else if state.tried == Some(Tried::Content(disk.clone())) {
                    DiskState::Stale { disk_hash: disk }
                } else {
                    DiskState::Pending { disk_hash: disk }
                }
            }
        }
    }

    /// Reads the config and reloads only if its content differs from what was last tried:
    /// a watcher calls this on every burst of file events and periodically, so a swap that
    /// leaves the content as it was (a ConfigMap update touching another key, a git-sync
    /// of a commit that changed nothing here) rebuilds nothing, and an invalid content is
    /// not retried (and logged) over and over. A content whose handlers failed to build is
    /// tried again at every look, as what failed may lie outside the config's text.
    pub fn reload_if_changed(&self) -> CheckOutcome {
        self.reload_if_settled(Settle::NONE)
    }

    /// [`Runtime::reload_if_changed`], loading a changed content only once it has settled:
    /// two reads `settle.between_reads` apart must agree, and a content that removes rules
    /// or handlers must stay unchanged for `settle.before_removal`. A writer part way
    /// through a file (a rule not written yet looks removed) gives
    /// [`CheckOutcome::Unsettled`]: nothing is loaded or recorded, and the caller looks
    /// again later. A removal that settles is logged and kept for `/readyz`
    /// ([`Runtime::last_removal`]).
    pub fn reload_if_settled(&self, settle: Settle) -> CheckOutcome {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let read = self.read();
        let tried = self.tried_of(&read);
        {
            let mut state = self.content_state();
            if state.tried.as_ref() == Some(&tried) && !state.build_failed {
                return CheckOutcome::Unchanged;
            }
            if let (Tried::Content(hash), Some(active)) = (&tried, &state.active)
                && *hash == active.files_hash
            {
                // Back to the active content after a rejected one: nothing is stale now.
                state.tried = Some(tried);
                state.build_failed = false;
                drop(state);
                self.metrics.config_stale.set(0);
                if let Ok(mut e) = self.last_error.lock() {
                    *e = None;
                }
                return CheckOutcome::Unchanged;
            }
        }
        let read = if settle.between_reads.is_zero() {
            read
        } else {
            std::thread::sleep(settle.between_reads);
            let again = self.read();
            if self.tried_of(&again) != tried {
                return CheckOutcome::Unsettled;
            }
            again
        };
        match self.finish(read, settle) {
            Attempt::Activated(id) => CheckOutcome::Reloaded(id),
            Attempt::Rejected(_) => CheckOutcome::Rejected,
            Attempt::Unsettled => CheckOutcome::Unsettled,
        }
    }

    /// What a read is, as the last content tried is recorded.
    fn tried_of(&self, read: &Result<Vec<SourceFile>, ReloadError>) -> Tried {
        match read {
            Ok(sources) => Tried::Content(self.disk_key(sources)),
            Err(e) => Tried::Unreadable(e.messages().join("; ")),
        }
    }

    /// What the last reload that removed rules or handlers removed, and when: `/readyz`
    /// shows it, as a removal is what a file caught part way through its write looks like.
    pub fn last_removal(&self) -> Option<String> {
        self.last_removal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What is on disk now, compared through the active content's files (see
    /// [`ConfigContent::disk_key`]); before any content is active, the files hash.
    fn disk_key(&self, sources: &[SourceFile]) -> String {
        let active = self.content_state().active.clone();
        match active {
            Some(active) => active.disk_key(sources),
            None => crate::content::files_hash(sources).0,
        }
    }

    fn content_state(&self) -> std::sync::MutexGuard<'_, ContentState> {
        self.content.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where config comes from.
    pub fn origin(&self) -> &ConfigOrigin {
        &self.origin
    }

    /// What one request may ask of the front ends (`RuntimeOptions::limits`).
    pub fn limits(&self) -> &crate::RequestLimits {
        &self.options.limits
    }

    /// The runtime's metrics.
    pub fn metrics(&self) -> &RuntimeMetrics {
        &self.metrics
    }

    /// Shuts down within `deadline`: delivers the active snapshot's queued reports (what is
    /// still queued at the deadline is counted in `mixer_report_dropped_total` with reason
    /// `shutdown_deadline`), then closes its handlers so exporters flush what they batch and
    /// out-of-process sessions close. Handlers that do not close in time are left as they are.
    pub async fn shutdown(&self, deadline: Duration) {
        let end = tokio::time::Instant::now() + deadline;
        let snapshot = self.snapshot();
        snapshot.close_report_queues(deadline).await;
        let mut closing = tokio::task::JoinSet::new();
        for built in &snapshot.handlers {
            built.lease.mark_closed();
            let handler = built.handler.clone();
            closing.spawn(async move { handler.close().await });
        }
        if tokio::time::timeout_at(end, async { while closing.join_next().await.is_some() {} })
            .await
            .is_err()
        {
            tracing::warn!("shutdown deadline passed with handlers still closing");
        }
    }

    /// Reads, validates and builds the config, then swaps it in. Returns the new snapshot id.
    pub fn reload(&self) -> Result<u64, ReloadError> {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        match self.finish(self.read(), Settle::NONE) {
            Attempt::Activated(id) => Ok(id),
            Attempt::Rejected(e) => Err(e),
            // Not waited for with `Settle::NONE`; worded for completeness.
            Attempt::Unsettled => Err(ReloadError::whole_file(
                "config",
                "the files changed while they were loaded; try again",
            )),
        }
    }

    /// Loads what `read` gave (under the reload lock), counts and logs the result, then
    /// records it as tried: last, so that `/readyz` calls the files `stale` only once the
    /// failure it reports beside is there.
    fn finish(&self, read: Result<Vec<SourceFile>, ReloadError>, settle: Settle) -> Attempt {
        self.content_state().build_failed = false;
        let tried = self.tried_of(&read);
        let result = match read {
            Ok(sources) => match self.try_reload(&sources, &tried, settle) {
                Attempt::Activated(id) => Ok(id),
                Attempt::Rejected(e) => Err(e),
                Attempt::Unsettled => return Attempt::Unsettled,
            },
            Err(e) => Err(e),
        };
        self.metrics
            .config_stale
            .set(i64::from(result.is_err() && self.is_ready()));
        let label = if result.is_ok() { "success" } else { "failure" };
        self.metrics.reloads.with_label_values(&[label]).inc();
        match &result {
            Ok(id) => {
                tracing::info!(snapshot = id, "config snapshot activated");
                if let Ok(mut e) = self.last_error.lock() {
                    *e = None;
                }
            }
            Err(e) => {
                self.metrics.reload_failures.inc();
                tracing::error!("{e}");
                if let Ok(mut last) = self.last_error.lock() {
                    *last = Some(e.clone());
                }
            }
        }
        self.content_state().tried = Some(tried);
        match result {
            Ok(id) => Attempt::Activated(id),
            Err(e) => Attempt::Rejected(e),
        }
    }

    /// What replicas must share to share cached verdicts: the config's content as it
    /// resolved (its config hash: the files, environment variables expanded, secrets,
    /// modules and lists read) and the command-line choices that change what it decides
    /// (default namespace, expression syntax, what a failing match does, the handler
    /// timeout). A reload changes it, so the
    /// entries of the previous config are never looked up again (they expire in the shared
    /// tier by themselves); replicas on different configs during a rollout share nothing.
    fn generation(&self, content: &ConfigContent) -> String {
        use sha2::{Digest, Sha256};
        let c = &self.config_options;
        let choices = format!(
            "{}\n{}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
            content.hash,
            content.secrets_digest,
            c.default_namespace,
            c.default_syntax,
            c.ratelimit_backend,
            self.options.match_error_policy,
            self.options.handler_timeout,
        );
        Sha256::digest(choices.as_bytes()).iter().take(12).fold(
            String::with_capacity(24),
            |mut s, b| {
                use std::fmt::Write as _;
                let _ = write!(s, "{b:02x}");
                s
            },
        )
    }

    fn read(&self) -> Result<Vec<SourceFile>, ReloadError> {
        match &self.origin {
            ConfigOrigin::Embedded(files) => Ok(files.clone()),
            ConfigOrigin::Path(path) => mixer_config::read_sources(path)
                .map_err(|e| ReloadError::whole_file(path.display().to_string(), e.to_string())),
        }
    }

    fn try_reload(&self, sources: &[SourceFile], tried: &Tried, settle: Settle) -> Attempt {
        match self.load(sources, tried, settle) {
            Ok(Some(id)) => Attempt::Activated(id),
            Ok(None) => Attempt::Unsettled,
            Err(e) => Attempt::Rejected(e),
        }
    }

    /// Validates, builds and activates `sources`; `Ok(None)` when they remove rules or
    /// handlers and changed on disk within `settle.before_removal`.
    fn load(
        &self,
        sources: &[SourceFile],
        tried: &Tried,
        settle: Settle,
    ) -> Result<Option<u64>, ReloadError> {
        if !self.config_options.allow_empty_files {
            let active = self
                .active_sources
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let emptied = mixer_config::emptied_files(&active, sources);
            if !emptied.is_empty() {
                return Err(ReloadError {
                    errors: emptied
                        .iter()
                        .map(|name| ConfigError {
                            file: name.to_string(),
                            document: None,
                            field: String::new(),
                            message: "empty, but its documents are in the running config: refused, as the file may be caught part way through a write (mixer serve --allow-empty-config accepts it)".into(),
                        })
                        .collect(),
                });
            }
        }
        let validated = mixer_config::validate(sources, &self.registry, &self.config_options)
            .map_err(|errors| ReloadError { errors })?;
        for w in &validated.warnings {
            tracing::warn!("config warning: {w}");
        }
        let content = ConfigContent::of(sources, &validated.config);
        let removed = if self.is_ready() {
            removed(&self.current.load().config, &validated.config)
        } else {
            String::new()
        };
        if !removed.is_empty() {
            let rest = settle.before_removal.saturating_sub(settle.between_reads);
            if !rest.is_zero() {
                std::thread::sleep(rest);
                if self.tried_of(&self.read()) != *tried {
                    tracing::info!(
                        "config: a change that removes {removed} changed again within {:?}; waiting for it to settle",
                        settle.before_removal
                    );
                    return Ok(None);
                }
            }
        }
        let dropped = validated.config.dropped.clone();
        let previous = self.current.load_full();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let built = Snapshot::build(
            id,
            validated.config,
            &self.registry,
            self.is_ready().then_some(previous.as_ref()),
            &self.options,
            &self.metrics,
        )
        .map_err(|errors| {
            self.content_state().build_failed = true;
            ReloadError {
                errors: errors
                    .into_iter()
                    .map(|e| ConfigError {
                        file: e.file,
                        document: Some(format!("handler {}", e.handler)),
                        field: String::new(),
                        message: e.message,
                    })
                    .collect(),
            }
        })?;
        let mut snapshot = built.snapshot;
        snapshot.generation = Some(self.generation(&content).into());
        snapshot.config_hash = Some(content.hash.as_str().into());
        self.metrics
            .snapshot_id
            .set(i64::try_from(id).unwrap_or(i64::MAX));
        self.metrics.handlers.set(snapshot.handlers.len() as i64);
        self.metrics.rules.set(snapshot.config.rules.len() as i64);
        // Only what the active snapshot lacks: a reload that fixes a document clears it.
        self.metrics.dropped_documents.reset();
        for d in &dropped {
            tracing::error!("config: dropped {d}");
            self.metrics
                .dropped_documents
                .with_label_values(&[d.name.as_str(), d.reason_label()])
                .set(1);
        }
        self.metrics.cache_entries.set(0);
        self.metrics.config_info.reset();
        self.metrics
            .config_info
            .with_label_values(&[content.hash.as_str(), content.files_hash.as_str()])
            .set(1);
        self.current.store(Arc::new(snapshot));
        self.content_state().active = Some(content);
        self.ready.store(true, Ordering::Release);
        *self
            .active_sources
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = sources.to_vec();
        if !removed.is_empty() {
            tracing::warn!("config snapshot {id} removes {removed}");
            *self.last_removal.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(format!("snapshot {id} removed {removed}"));
        }
        // The previous snapshot's handlers that this one does not reuse close when the last
        // request still holding it lets go (`snapshot::Lease`).
        drop(previous);
        Ok(Some(id))
    }
}

/// What one load attempt came to.
enum Attempt {
    Activated(u64),
    Rejected(ReloadError),
    /// The content changed while it was being settled: nothing recorded.
    Unsettled,
}

/// The rules and handlers of `active` that `next` does not have, as `rules a, b and
/// handlers c`; empty when none.
fn removed(active: &mixer_config::Config, next: &mixer_config::Config) -> String {
    let rules: Vec<&str> = active
        .rules
        .iter()
        .filter(|r| next.rule(&r.name).is_none())
        .map(|r| &*r.name)
        .collect();
    let handlers: Vec<&str> = active
        .handlers
        .iter()
        .filter(|h| next.handler(&h.name).is_none())
        .map(|h| &*h.name)
        .collect();
    match (rules.is_empty(), handlers.is_empty()) {
        (true, true) => String::new(),
        (false, true) => format!("rules {}", rules.join(", ")),
        (true, false) => format!("handlers {}", handlers.join(", ")),
        (false, false) => format!(
            "rules {} and handlers {}",
            rules.join(", "),
            handlers.join(", ")
        ),
    }
}
