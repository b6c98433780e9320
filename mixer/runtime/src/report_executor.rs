//! Where report records are turned into instances: threads of their own, at a lower
//! scheduling priority than the threads that serve checks.
//!
//! A check is on a request's critical path; a report is not (the proxy has already answered,
//! and queues absorb bursts). When reports arrive faster than the cores can take, doing their
//! work on the threads that also serve checks makes every check wait behind it. Here the
//! serving threads only receive a report's message and hand the rest (attribute bags, rule
//! evaluation, queueing instances) to threads with a higher nice value, so the kernel runs
//! check work first whenever both are ready, and reports use what is left.
//!
//! Handing work to another thread and back costs two wake-ups, which on a small virtual
//! machine is as much CPU as the report itself. So the hand-off happens only while checks are
//! being served ([`CheckActivity`]): a mixer that only takes reports does their work where
//! they arrive.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// How much lower the report threads' priority is (a nice value: 10 gives a thread about a
/// tenth of the CPU share of a nice-0 thread it competes with).
pub const REPORT_NICE: i32 = 10;

/// A pool of low-priority threads running report work. Dropping it stops the threads once
/// the work they hold is done.
pub struct ReportExecutor {
    handle: tokio::runtime::Handle,
    _stop: oneshot::Sender<()>,
}

/// The executor stopped before the work finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the report threads have stopped")]
pub struct ExecutorStopped;

impl ReportExecutor {
    /// Starts `threads` threads (at least one) named `mixer-report`.
    pub fn start(threads: usize) -> io::Result<ReportExecutor> {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        // The runtime lives on a thread of its own, so that dropping the executor (which
        // may happen inside async code) never drops a tokio runtime there.
        std::thread::Builder::new()
            .name("mixer-report-owner".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(threads.max(1))
                    .thread_name("mixer-report")
                    .on_thread_start(lower_priority)
                    .enable_all()
                    .build();
                match runtime {
                    Ok(runtime) => {
                        let _ = handle_tx.send(Ok(runtime.handle().clone()));
                        runtime.block_on(async {
                            let _ = stopped.await;
                        });
                        runtime.shutdown_background();
                    }
                    Err(e) => {
                        let _ = handle_tx.send(Err(e));
                    }
                }
            })?;
        let handle = handle_rx
            .recv()
            .map_err(|_| io::Error::other("the report thread ended while starting"))??;
        Ok(ReportExecutor {
            handle,
            _stop: stop,
        })
    }

    /// Runs `work` on the report threads and returns its output. If the caller goes away
    /// (its RPC was cancelled), the work still completes: the records it holds were received.
    pub async fn run<F>(&self, work: F) -> Result<F::Output, ExecutorStopped>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(work).await.map_err(|_| ExecutorStopped)
    }
}

/// When a check or quota request was last served, coarsely: enough to tell whether report
/// work would compete with checks right now.
#[derive(Debug)]
pub struct CheckActivity {
    base: Instant,
    /// Microseconds since `base` at the last check (0: none yet).
    last: AtomicU64,
}

/// How recent a check must be for reports to yield to checks.
pub const CHECKS_RECENT: Duration = Duration::from_millis(100);

impl CheckActivity {
    /// No check served yet.
    pub fn new() -> CheckActivity {
        CheckActivity {
            base: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    /// Notes a check that started at `at`.
    pub fn mark(&self, at: Instant) {
        let now = self.micros(at).max(1);
        // Stored at most once a millisecond, so checks on many cores do not all write the
        // same cache line.
        let last = self.last.load(Ordering::Relaxed);
        if last == 0 || now.saturating_sub(last) >= 1_000 {
            self.last.store(now, Ordering::Relaxed);
        }
    }

    /// True if a check was served within [`CHECKS_RECENT`].
    pub fn recent(&self) -> bool {
        let last = self.last.load(Ordering::Relaxed);
        last != 0
            && self.micros(Instant::now()).saturating_sub(last)
                < u64::try_from(CHECKS_RECENT.as_micros()).unwrap_or(u64::MAX)
    }

    fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_micros()).unwrap_or(u64::MAX)
    }
}

impl Default for CheckActivity {
    fn default() -> Self {
        CheckActivity::new()
    }
}

fn lower_priority() {
    // On Linux a nice value is per thread, so this leaves the serving threads as they are.
    // Without permission to change it the threads still work, at the normal priority.
    if let Err(e) = rustix::process::setpriority_process(None, REPORT_NICE) {
        tracing::warn!("report threads keep the normal priority: setpriority failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_on_the_report_threads_at_the_lower_priority() {
        let executor = ReportExecutor::start(1).expect("threads start");
        let (name, nice) = executor
            .run(async {
                let name = std::thread::current().name().map(str::to_owned);
                (name, rustix::process::getpriority_process(None))
            })
            .await
            .expect("work completes");
        assert_eq!(name.as_deref(), Some("mixer-report"));
        let ours = rustix::process::getpriority_process(None).expect("own priority");
        assert_eq!(nice.expect("report thread priority"), ours + REPORT_NICE);
    }

    #[test]
    fn checks_are_recent_only_after_one_and_until_the_window_passes() {
        let activity = CheckActivity::new();
        assert!(!activity.recent(), "no check yet");
        activity.mark(Instant::now());
        assert!(activity.recent());
        // A check long ago, as the clock sees it now.
        let old = CheckActivity {
            base: Instant::now() - CHECKS_RECENT * 10,
            last: AtomicU64::new(1),
        };
        assert!(!old.recent());
        old.mark(Instant::now());
        assert!(old.recent());
    }

    #[tokio::test]
    async fn dropping_the_executor_stops_its_threads() {
        let executor = ReportExecutor::start(1).expect("threads start");
        let handle = executor.handle.clone();
        drop(executor);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            // A stopped runtime refuses new tasks: the JoinHandle fails at once.
            if handle.spawn(async {}).await.is_err() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "threads still running"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}
