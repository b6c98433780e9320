//! Readiness over the process's life: gRPC health follows the config, and turns to
//! NOT_SERVING the moment SIGTERM arrives, before the drain; and the flags for shutdown and
//! config checks.
//!
//! Shutdown runs in two steps. First the mixer says it is not ready (gRPC health answers
//! NOT_SERVING, `/readyz` 503 "draining") while its listeners still accept connections and
//! answer every call, for `--shutdown-delay`: load balancers that probe health, and
//! Kubernetes removing the pod from its Service's endpoints, take a moment to stop sending,
//! and calls that still arrive then are answered rather than refused. Then the drain: no new
//! connections, GOAWAY on HTTP/2, calls in flight finish within `--drain-timeout`.

use std::sync::Arc;
use std::time::Duration;

use mixer_runtime::Runtime;
use tokio::sync::watch;

/// Flags of `mixer serve` for config checks and shutdown.
#[derive(clap::Args, Clone, Debug)]
pub struct LifecycleArgs {
    /// How often the config files are read and compared with the active content, besides
    /// reacting to file events (which miss some writes, such as through mmap, or on network
    /// filesystems); 0s: events only. `--no-watch` turns off both.
    #[arg(long, default_value = "5s", value_parser = crate::parse_duration)]
    pub config_check_interval: Duration,
    /// After SIGTERM, how long readiness says NOT_SERVING while every call is still answered,
    /// before the drain starts (time for load balancers and Service endpoints to stop
    /// sending). A second SIGTERM starts the drain at once.
    #[arg(long, default_value = "0s", value_parser = crate::parse_duration)]
    pub shutdown_delay: Duration,
}

/// How often gRPC health looks at the runtime's readiness (a config turning valid).
const HEALTH_POLL: Duration = Duration::from_millis(500);

/// Keeps `reporter`'s overall status ("") equal to the runtime's readiness, until
/// `draining` turns true: then sets NOT_SERVING and ends. Await the handle after setting
/// `draining` to know NOT_SERVING is what probes get.
pub fn report_health(
    reporter: tonic_health::server::HealthReporter,
    runtime: Arc<Runtime>,
    mut draining: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            // Looked at before every update, so an update never overwrites NOT_SERVING.
            if *draining.borrow_and_update() {
                reporter
                    .set_service_status("", tonic_health::ServingStatus::NotServing)
                    .await;
                return;
            }
            let status = if runtime.is_ready() {
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            };
            reporter.set_service_status("", status).await;
            tokio::select! {
                () = tokio::time::sleep(HEALTH_POLL) => {}
                changed = draining.changed() => {
                    if changed.is_err() {
                        // The server is gone: nothing will ask any more.
                        return;
                    }
                }
            }
        }
    })
}

/// SIGTERM and SIGINT (Ctrl-C), listened for from before the listeners serve: a signal that
/// arrives right after readiness then starts a graceful shutdown instead of killing the
/// process (the default action of a signal nobody listens for).
pub struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Starts listening. A signal that cannot be listened for is logged and never arrives.
    pub fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listen = |kind: SignalKind, name: &str| {
                signal(kind)
                    .inspect_err(|e| tracing::warn!("not listening for {name}: {e}"))
                    .ok()
            };
            Signals {
                term: listen(SignalKind::terminate(), "SIGTERM"),
                int: listen(SignalKind::interrupt(), "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// The next SIGTERM or SIGINT.
    pub async fn recv(&mut self) {
        #[cfg(unix)]
        {
            async fn next(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                () = next(&mut self.term) => {}
                () = next(&mut self.int) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
