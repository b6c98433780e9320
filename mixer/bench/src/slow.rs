//! A deliberately slow out-of-process `metric` adapter, served by mixer-bench itself for the
//! overload mode: it takes a fixed time per batch, so the mixer's report queue towards it
//! fills and overflows, and it counts every instance that reaches it, so the mixer's drop
//! counter can be checked against what was sent.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mixer_adapter_sdk::api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, ReportHandler, Stability,
};
use mixer_adapter_sdk::model::{Instance, Template};
use mixer_adapter_sdk::{Server, async_trait};
use tokio::sync::oneshot;

/// The adapter: its delay, and what its handlers have seen.
#[derive(Debug, Default)]
pub struct Slow {
    delay: Duration,
    counts: Arc<Counts>,
}

/// What the adapter's handlers have seen.
#[derive(Debug, Default)]
struct Counts {
    received: AtomicU64,
    batches: AtomicU64,
    in_progress: AtomicU64,
}

impl Slow {
    /// Instances received so far (counted when a batch arrives, before the delay).
    pub fn received(&self) -> u64 {
        self.counts.received.load(Ordering::SeqCst)
    }

    /// Batches received so far.
    pub fn batches(&self) -> u64 {
        self.counts.batches.load(Ordering::SeqCst)
    }

    /// Instances of batches received but not yet answered.
    pub fn in_progress(&self) -> u64 {
        self.counts.in_progress.load(Ordering::SeqCst)
    }
}

static INFO: AdapterInfo = AdapterInfo {
    name: "bench-slow",
    description: "takes a fixed time per metric batch and counts what it receives",
    templates: &[Template::Metric],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Slow {
    type Config = serde_json::Value;
    type Compiled = ();

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, _params: serde_json::Value) -> Result<(), Vec<ParamError>> {
        Ok(())
    }

    fn build(&self, _: &(), _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(SlowHandler {
            delay: self.delay,
            counts: self.counts.clone(),
        }))
    }
}

/// Takes `n` off the in-progress count when a call ends, also when the mixer gives up on the
/// call and the server drops its future mid-sleep (otherwise the count would never settle).
struct InProgress<'a>(&'a AtomicU64, u64);

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::SeqCst);
    }
}

/// Sleeps through each batch, counting it.
struct SlowHandler {
    delay: Duration,
    counts: Arc<Counts>,
}

impl Handler for SlowHandler {
    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }
}

#[async_trait]
impl ReportHandler for SlowHandler {
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        let n = instances.len() as u64;
        let counts = &self.counts;
        counts.received.fetch_add(n, Ordering::SeqCst);
        counts.batches.fetch_add(1, Ordering::SeqCst);
        counts.in_progress.fetch_add(n, Ordering::SeqCst);
        let _done = InProgress(&counts.in_progress, n);
        tokio::time::sleep(self.delay).await;
        Ok(())
    }
}

/// A running slow adapter; it stops when this is dropped.
pub struct Running {
    /// Its counters.
    pub adapter: Arc<Slow>,
    /// Where it listens.
    pub addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

/// Serves the slow adapter on a free loopback port, on the current tokio runtime.
pub async fn start(delay: Duration) -> anyhow::Result<Running> {
    let adapter = Arc::new(Slow {
        delay,
        ..Slow::default()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = Server::from_arc(adapter.clone());
    tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        if let Err(e) = server.serve_with_shutdown(listener, shutdown).await {
            eprintln!("slow adapter on {addr} stopped: {e}");
        }
    });
    Ok(Running {
        adapter,
        addr,
        _stop: stop,
    })
}

#[cfg(test)]
mod tests {
    use mixer_adapter_sdk::api::host::AnyAdapter;

    use super::*;

    fn batch(n: usize) -> Vec<Instance> {
        let metric = Instance {
            name: "requestcount.instance.istio-system".into(),
            template: Template::Metric,
            fields: vec![],
        };
        vec![metric; n]
    }

    fn handler(slow: &Slow) -> Arc<dyn Handler> {
        let ctx = BuildContext {
            handler_name: "slow.istio-system".into(),
        };
        slow.compile_and_build(&serde_json::Value::Null, &ctx)
            .expect("builds")
    }

    #[tokio::test(start_paused = true)]
    async fn counts_on_arrival_and_settles_after_the_delay() {
        let slow = Slow {
            delay: Duration::from_secs(1),
            ..Slow::default()
        };
        let handler = handler(&slow);
        let call = tokio::spawn(async move {
            let reports = handler.as_report().expect("reports");
            reports.report(&batch(3)).await
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!((slow.received(), slow.in_progress()), (3, 3));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(matches!(call.await, Ok(Ok(()))));
        assert_eq!(
            (slow.received(), slow.batches(), slow.in_progress()),
            (3, 1, 0)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_call_leaves_nothing_in_progress() {
        let slow = Slow {
            delay: Duration::from_secs(5),
            ..Slow::default()
        };
        let handler = handler(&slow);
        let reports = handler.as_report().expect("reports");
        let cut = tokio::time::timeout(Duration::from_millis(100), reports.report(&batch(2))).await;
        assert!(cut.is_err());
        assert_eq!((slow.received(), slow.in_progress()), (2, 0));
    }
}
