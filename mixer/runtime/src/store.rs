//! The active snapshot and how it is replaced.
//!
//! A reload reads the config, validates all of it, builds a new snapshot (reusing unchanged
//! handlers) and swaps it in atomically. Anything wrong on the way leaves the running
//! snapshot in place and is reported: in the log, in [`Runtime::last_error`] (shown by the
//! admin endpoints) and in `mixer_config_reload_failures_total`.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use mixer_adapter_api::AdapterRegistry;
use mixer_config::{ConfigError, ConfigOptions, SourceFile};

use crate::metrics::RuntimeMetrics;
use crate::report_executor::{ExecutorStopped, ReportExecutor};
use crate::snapshot::{BuiltHandler, RuntimeOptions, Snapshot};

/// Where config comes from.
#[derive(Clone, Debug)]
pub enum ConfigOrigin {
    /// Files given in memory (the embedded default config, tests).
    Embedded(Vec<SourceFile>),
    /// A YAML file or a directory of them, read at every reload.
    Path(PathBuf),
}

/// Why a reload did not take effect.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("config rejected, previous snapshot kept:\n  {}", .messages.join("\n  "))]
pub struct ReloadError {
    /// One line per problem.
    pub messages: Vec<String>,
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
    reloading: Mutex<()>,
    report_executor: Option<ReportExecutor>,
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
            reloading: Mutex::new(()),
            report_executor,
        }
    }

    /// Runs report work (decoding records, [`Snapshot::report`]) on the low-priority report
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

    /// True once a valid config is active.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Why the last reload failed, if it did (cleared by a successful one).
    pub fn last_error(&self) -> Option<ReloadError> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// Where config comes from.
    pub fn origin(&self) -> &ConfigOrigin {
        &self.origin
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
        let result = self.try_reload();
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
        result
    }

    fn try_reload(&self) -> Result<u64, ReloadError> {
        let sources = match &self.origin {
            ConfigOrigin::Embedded(files) => files.clone(),
            ConfigOrigin::Path(path) => {
                mixer_config::read_sources(path).map_err(|e| ReloadError {
                    messages: vec![format!("{}: {e}", path.display())],
                })?
            }
        };
        let validated = mixer_config::validate(&sources, &self.registry, &self.config_options)
            .map_err(|errors| ReloadError {
                messages: errors.iter().map(ConfigError::to_string).collect(),
            })?;
        for w in &validated.warnings {
            tracing::warn!("config warning: {w}");
        }
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
        .map_err(|errors| ReloadError {
            messages: errors.iter().map(ToString::to_string).collect(),
        })?;
        let snapshot = built.snapshot;
        self.metrics
            .snapshot_id
            .set(i64::try_from(id).unwrap_or(i64::MAX));
        self.metrics.handlers.set(snapshot.handlers.len() as i64);
        self.metrics.rules.set(snapshot.config.rules.len() as i64);
        self.metrics.cache_entries.set(0);
        self.current.store(Arc::new(snapshot));
        self.ready.store(true, Ordering::Release);
        drop(previous);
        retire(built.retired);
        Ok(id)
    }
}

/// Closes handlers the new snapshot no longer uses: their report queues are delivered first,
/// then the handler is closed once requests still running on the old snapshot have let go of
/// it (or after a minute at most).
fn retire(handlers: Vec<BuiltHandler>) {
    if handlers.is_empty() {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        for built in handlers {
            if let Some(queue) = &built.queue {
                queue.close(Duration::from_secs(10)).await;
            }
            let handler = built.handler;
            drop(built.queue);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while Arc::strong_count(&handler) > 1 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            handler.close().await;
        }
    });
}
