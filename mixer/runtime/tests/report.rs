//! Report queues: lossless below capacity, counted drops above it, batching, isolation between
//! handlers, retries of a failing handler within the age limit, and delivery on shutdown.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::{bag, snapshot_in_with};
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, ReportHandler, Stability,
};
use mixer_config::AdapterRegistry;
use mixer_model::{Instance, Template, Value};
use mixer_runtime::{Overflow, QueueOptions, RuntimeMetrics, RuntimeOptions, Snapshot};

/// Records batches; `delay` makes every call slow.
#[derive(Default)]
struct Sink {
    batches: Mutex<Vec<usize>>,
    records: AtomicUsize,
}

struct Recorder(Arc<Sink>);

static RECORDER: AdapterInfo = AdapterInfo {
    name: "recorder",
    description: "records report batches",
    templates: &[Template::LogEntry],
    cacheable: false,
    stability: Stability::Alpha,
};

#[derive(serde::Deserialize)]
struct RecorderParams {
    #[serde(default)]
    delay_ms: u64,
    /// Every call fails (retryable, as an adapter that is down) for this long after build.
    #[serde(default)]
    fail_for_ms: u64,
}

impl Adapter for Recorder {
    type Config = RecorderParams;
    type Compiled = RecorderParams;

    fn info(&self) -> &AdapterInfo {
        &RECORDER
    }
    fn compile(&self, params: RecorderParams) -> Result<RecorderParams, Vec<ParamError>> {
        Ok(params)
    }
    fn build(
        &self,
        p: &RecorderParams,
        _: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(RecorderHandler {
            sink: self.0.clone(),
            delay: Duration::from_millis(p.delay_ms),
            down_until: tokio::time::Instant::now() + Duration::from_millis(p.fail_for_ms),
        }))
    }
}

struct RecorderHandler {
    sink: Arc<Sink>,
    delay: Duration,
    down_until: tokio::time::Instant,
}

impl Handler for RecorderHandler {
    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }
}

#[async_trait]
impl ReportHandler for RecorderHandler {
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        if tokio::time::Instant::now() < self.down_until {
            return Err(AdapterError::transient(
                mixer_adapter_api::ErrorKind::Unavailable,
                "down",
            ));
        }
        self.sink
            .batches
            .lock()
            .expect("lock")
            .push(instances.len());
        self.sink
            .records
            .fetch_add(instances.len(), Ordering::SeqCst);
        Ok(())
    }
}

const CONFIG: &str = r#"
kind: handler
metadata: {name: fast, namespace: istio-system}
spec: {compiledAdapter: recorder}
---
kind: handler
metadata: {name: slow, namespace: istio-system}
spec: {compiledAdapter: recorder, params: {delay_ms: 5000}}
---
kind: instance
metadata: {name: log, namespace: istio-system}
spec:
  compiledTemplate: logentry
  params:
    variables: {path: 'request.path | "/"'}
---
kind: rule
metadata: {name: to-fast, namespace: istio-system}
spec:
  match: context.protocol == "fast" || context.protocol == "both"
  actions: [{handler: fast, instances: [log]}]
---
kind: rule
metadata: {name: to-slow, namespace: istio-system}
spec:
  match: context.protocol == "slow" || context.protocol == "both"
  actions: [{handler: slow, instances: [log]}]
"#;

fn build(queues: QueueOptions) -> (Snapshot, Arc<Sink>, RuntimeMetrics) {
    build_config(CONFIG, queues)
}

fn build_config(config: &str, queues: QueueOptions) -> (Snapshot, Arc<Sink>, RuntimeMetrics) {
    let sink = Arc::new(Sink::default());
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(Recorder(sink.clone())));
    let metrics = RuntimeMetrics::unregistered();
    let options = RuntimeOptions {
        reports: queues,
        ..RuntimeOptions::default()
    };
    let snap = snapshot_in_with(&registry, config, &options, &metrics);
    (snap, sink, metrics)
}

fn dropped(metrics: &RuntimeMetrics, handler: &str, reason: &str) -> u64 {
    metrics
        .report_dropped
        .with_label_values(&[handler, reason])
        .get()
}

#[tokio::test(start_paused = true)]
async fn below_capacity_every_record_arrives_in_batches() {
    let (snap, sink, metrics) = build(QueueOptions {
        batch_size: 100,
        ..QueueOptions::default()
    });
    let b = bag(&snap, &[("context.protocol", Value::from("fast"))]);
    for _ in 0..1_050 {
        let outcome = mixer_runtime::report(&snap, &b).await;
        assert_eq!((outcome.queued, outcome.dropped), (1, 0));
    }
    // The last, partial batch goes when its timeout passes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    snap.close_report_queues(Duration::from_secs(1)).await;
    assert_eq!(sink.records.load(Ordering::SeqCst), 1_050);
    let batches = sink.batches.lock().expect("lock").clone();
    assert!(batches.iter().all(|&n| n <= 100), "{batches:?}");
    assert!(batches.len() >= 11, "{batches:?}");
    assert_eq!(
        metrics
            .report_delivered
            .with_label_values(&["fast.handler.istio-system"])
            .get(),
        1_050
    );
    assert_eq!(
        dropped(&metrics, "fast.handler.istio-system", "queue_full"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_drops_are_counted_and_other_handlers_are_unaffected() {
    let queues = QueueOptions {
        max_records: 100,
        batch_size: 10,
        ..QueueOptions::default()
    };
    let (snap, sink, metrics) = build(queues);
    let slow = bag(&snap, &[("context.protocol", Value::from("slow"))]);
    // Ten times the queue's capacity at a handler that takes 5 s per batch.
    let mut dropped_here = 0;
    for _ in 0..1_000 {
        dropped_here += mixer_runtime::report(&snap, &slow).await.dropped;
    }
    assert!(
        dropped_here >= 1_000 - 100 - 10,
        "only {dropped_here} dropped"
    );
    assert_eq!(
        dropped(&metrics, "slow.handler.istio-system", "queue_full") as usize,
        dropped_here
    );
    assert!(
        metrics
            .report_queued
            .with_label_values(&["slow.handler.istio-system"])
            .get()
            <= 100
    );

    // The fast handler's queue is separate: all its records arrive promptly.
    let fast = bag(&snap, &[("context.protocol", Value::from("fast"))]);
    for _ in 0..50 {
        assert_eq!(mixer_runtime::report(&snap, &fast).await.dropped, 0);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while sink.records.load(Ordering::SeqCst) < 50 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "fast handler starved by the slow one"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        sink.records.load(Ordering::SeqCst),
        50,
        "slow records cannot have arrived yet"
    );

    // Shutdown gives the slow handler a bounded time; what is left is counted, not lost silently.
    snap.close_report_queues(Duration::from_millis(100)).await;
    let delivered = metrics
        .report_delivered
        .with_label_values(&["slow.handler.istio-system"])
        .get() as usize;
    let total_dropped: u64 = ["queue_full", "shutdown_deadline"]
        .iter()
        .map(|r| dropped(&metrics, "slow.handler.istio-system", r))
        .sum();
    assert_eq!(
        delivered + total_dropped as usize,
        1_000,
        "every record is delivered or counted"
    );
}

#[tokio::test(start_paused = true)]
async fn drop_oldest_keeps_the_newest_records() {
    let queues = QueueOptions {
        max_records: 5,
        batch_size: 100,
        batch_timeout: Duration::from_secs(60),
        overflow: Overflow::DropOldest,
        ..QueueOptions::default()
    };
    let (snap, sink, metrics) = build(queues);
    for i in 0..20 {
        let b = bag(
            &snap,
            &[
                ("context.protocol", Value::from("fast")),
                ("request.path", Value::from(format!("/{i}"))),
            ],
        );
        mixer_runtime::report(&snap, &b).await;
    }
    assert_eq!(
        dropped(&metrics, "fast.handler.istio-system", "queue_full"),
        15
    );
    snap.close_report_queues(Duration::from_secs(1)).await;
    assert_eq!(sink.records.load(Ordering::SeqCst), 5);
}

/// A handler that fails for `fail_for_ms` after it is built (an adapter restarting).
fn failing(fail_for_ms: u64) -> String {
    CONFIG.replace(
        "spec: {compiledAdapter: recorder}\n",
        &format!("spec: {{compiledAdapter: recorder, params: {{fail_for_ms: {fail_for_ms}}}}}\n"),
    )
}

async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_handler_down_for_seconds_loses_nothing_within_the_age_limit() {
    let (snap, sink, metrics) = build_config(
        &failing(4_000),
        QueueOptions {
            batch_size: 10,
            ..QueueOptions::default()
        },
    );
    let b = bag(&snap, &[("context.protocol", Value::from("fast"))]);
    for _ in 0..100 {
        assert_eq!(mixer_runtime::report(&snap, &b).await.dropped, 0);
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    wait_until(Duration::from_secs(10), || {
        sink.records.load(Ordering::SeqCst) == 100
    })
    .await;
    for reason in ["handler_error", "max_age", "queue_full"] {
        assert_eq!(
            dropped(&metrics, "fast.handler.istio-system", reason),
            0,
            "{reason}"
        );
    }
    // Retried with backoff, not in a busy loop: 4 s down at 100 ms doubling up to 1 s.
    let failed = metrics
        .handler_calls
        .with_label_values(&["fast.handler.istio-system", "report", "unavailable"])
        .get();
    assert!((4..=10).contains(&failed), "{failed} failed calls");
}

#[tokio::test(start_paused = true)]
async fn past_the_age_limit_the_oldest_records_are_dropped_and_counted() {
    let (snap, sink, metrics) = build_config(
        &failing(3_000),
        QueueOptions {
            batch_size: 100,
            batch_timeout: Duration::from_millis(10),
            max_age: Duration::from_secs(2),
            ..QueueOptions::default()
        },
    );
    let b = bag(&snap, &[("context.protocol", Value::from("fast"))]);
    for _ in 0..10 {
        mixer_runtime::report(&snap, &b).await;
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for _ in 0..7 {
        mixer_runtime::report(&snap, &b).await;
    }
    wait_until(Duration::from_secs(10), || {
        sink.records.load(Ordering::SeqCst) == 7
    })
    .await;
    assert_eq!(
        dropped(&metrics, "fast.handler.istio-system", "max_age"),
        10
    );
    assert_eq!(
        dropped(&metrics, "fast.handler.istio-system", "handler_error"),
        0
    );
}
