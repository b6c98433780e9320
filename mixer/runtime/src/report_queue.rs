//! Report queues: one bounded queue per report handler, drained in batches by its own task.
//!
//! A report never waits for a handler: its instances are put on the handler's queue and the
//! request is answered. Each queue is bounded in records and in bytes; when full, the overflow
//! policy drops the newest (default) or the oldest record, and every drop is counted by handler
//! and reason. Below capacity nothing is lost. A slow or failing handler only fills its own
//! queue. Closing a queue delivers what it holds, within a deadline.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mixer_adapter_api::{Handler, QuotaArgs, QuotaCall, QuotaHandler};
use mixer_model::{
    FieldValue, Instance, InvalidCharge, QuotaInstance, Template, Value, charge_amount,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::metrics::RuntimeMetrics;

/// What to drop when a queue is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Refuse the record being added.
    DropNewest,
    /// Make room by dropping the oldest queued record.
    DropOldest,
}

/// Queue and batching settings, the same for every report handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueOptions {
    /// Most records queued per handler.
    pub max_records: usize,
    /// Most bytes (estimated) queued per handler.
    pub max_bytes: usize,
    /// Most records per handler call.
    pub batch_size: usize,
    /// Longest a record waits for its batch to fill.
    pub batch_timeout: Duration,
    /// Longest one handler call may take before its batch counts as failed.
    pub call_timeout: Duration,
    /// What to drop when full.
    pub overflow: Overflow,
    /// How long a record may wait to be delivered while its handler keeps failing with a
    /// retryable error (down, timing out, circuit open): the batch is retried with backoff
    /// (and the queue keeps taking records up to its bounds) until its records are this old;
    /// then they are dropped, oldest first, as `max_age`.
    pub max_age: Duration,
    /// Wait before the first retry of a failed batch; doubled after each, up to
    /// [`MAX_RETRY_BACKOFF`].
    pub retry_backoff: Duration,
}

/// Longest wait between two retries of a batch.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(1);

impl Default for QueueOptions {
    fn default() -> QueueOptions {
        QueueOptions {
            max_records: 10_000,
            max_bytes: 32 << 20,
            batch_size: 500,
            batch_timeout: Duration::from_millis(200),
            call_timeout: Duration::from_secs(10),
            overflow: Overflow::DropNewest,
            max_age: Duration::from_secs(30),
            retry_backoff: Duration::from_millis(100),
        }
    }
}

#[derive(Default)]
struct State {
    /// Records with their size and when they were queued.
    items: VecDeque<(Instance, usize, tokio::time::Instant)>,
    bytes: usize,
    closed: bool,
}

/// One handler's queue.
pub(crate) struct ReportQueue {
    name: Arc<str>,
    handler: Arc<dyn Handler>,
    options: QueueOptions,
    metrics: RuntimeMetrics,
    /// This queue's `mixer_report_queued` series, set on every push.
    queued: prometheus::IntGauge,
    state: Mutex<State>,
    notify: Notify,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Set once the worker is spawned, so a push does not take the worker lock every time.
    worker_started: std::sync::atomic::AtomicBool,
    /// The runtime the snapshot was built on, where the worker runs. Records may be pushed
    /// from the low-priority report threads; the delivery task, and whatever connections a
    /// handler opens from it, must not end up there.
    home: Option<tokio::runtime::Handle>,
    /// Records of the batch being delivered right now.
    in_flight: std::sync::atomic::AtomicUsize,
}

impl ReportQueue {
    pub(crate) fn new(
        name: Arc<str>,
        handler: Arc<dyn Handler>,
        options: QueueOptions,
        metrics: &RuntimeMetrics,
    ) -> Arc<ReportQueue> {
        Arc::new(ReportQueue {
            queued: metrics.report_queued.with_label_values(&[name.as_ref()]),
            name,
            handler,
            options,
            metrics: metrics.clone(),
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            worker: Mutex::new(None),
            worker_started: std::sync::atomic::AtomicBool::new(false),
            home: tokio::runtime::Handle::try_current().ok(),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    fn drop_records(&self, reason: &str, n: usize) {
        self.metrics
            .report_dropped
            .with_label_values(&[self.name.as_ref(), reason])
            .inc_by(n as u64);
    }

    /// Queues one record; false when it (or another) was dropped to stay within bounds.
    pub(crate) fn push(self: &Arc<Self>, instance: Instance) -> bool {
        self.ensure_worker();
        let size = approx_bytes(&instance);
        let mut dropped = 0usize;
        let wake;
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.closed {
                drop(state);
                self.drop_records("shutting_down", 1);
                return false;
            }
            let full = |s: &State| {
                s.items.len() >= self.options.max_records || s.bytes + size > self.options.max_bytes
            };
            let mut push = true;
            match self.options.overflow {
                Overflow::DropNewest => {
                    if full(&state) {
                        push = false;
                        dropped = 1;
                    }
                }
                Overflow::DropOldest => {
                    while full(&state) {
                        let Some((_, old, _)) = state.items.pop_front() else {
                            break;
                        };
                        state.bytes -= old;
                        dropped += 1;
                    }
                }
            }
            let before = state.items.len();
            if push {
                state.bytes += size;
                state
                    .items
                    .push_back((instance, size, tokio::time::Instant::now()));
            }
            // The worker waits either for a first record or for a full batch (or its timeout):
            // waking it for every record would cost a task wake-up per record for nothing.
            let after = state.items.len();
            wake = (before == 0 && after > 0)
                || (before < self.options.batch_size && after >= self.options.batch_size);
            self.queued.set(state.items.len() as i64);
        }
        if dropped > 0 {
            self.drop_records("queue_full", dropped);
        }
        if wake {
            self.notify.notify_one();
        }
        dropped == 0
    }

    fn ensure_worker(self: &Arc<Self>) {
        if self
            .worker_started
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return;
        }
        let mut worker = self.worker.lock().unwrap_or_else(|e| e.into_inner());
        if worker.is_some() {
            return;
        }
        if let Some(rt) = self
            .home
            .clone()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
        {
            *worker = Some(rt.spawn(self.clone().run()));
            self.worker_started
                .store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// Takes the next batch: waits for a first record, then up to `batch_timeout` for the
    /// batch to fill. `None` once closed and empty.
    async fn next_batch(&self) -> Option<Vec<(Instance, tokio::time::Instant)>> {
        loop {
            let notified = self.notify.notified();
            {
                let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if !state.items.is_empty() {
                    break;
                }
                if state.closed {
                    return None;
                }
            }
            notified.await;
        }
        let deadline = tokio::time::Instant::now() + self.options.batch_timeout;
        loop {
            let notified = self.notify.notified();
            {
                let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if state.items.len() >= self.options.batch_size || state.closed {
                    break;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let n = state.items.len().min(self.options.batch_size);
        let mut taken = 0;
        let batch: Vec<(Instance, tokio::time::Instant)> = state
            .items
            .drain(..n)
            .map(|(i, size, queued)| {
                taken += size;
                (i, queued)
            })
            .collect();
        state.bytes -= taken;
        self.queued.set(state.items.len() as i64);
        Some(batch)
    }

    async fn run(self: Arc<Self>) {
        while let Some(mut batch) = self.next_batch().await {
            if batch.iter().any(|(i, _)| i.template == Template::Quota) {
                let (charges, rest) = batch
                    .into_iter()
                    .partition(|(i, _)| i.template == Template::Quota);
                batch = rest;
                match self.handler.as_quota() {
                    Some(quota) => self.deliver_charges(quota, charges).await,
                    None => self.drop_records("not_a_quota_handler", charges.len()),
                }
            }
            if batch.is_empty() {
                continue;
            }
            let Some(report) = self.handler.as_report() else {
                self.drop_records("not_a_report_handler", batch.len());
                continue;
            };
            self.deliver(report, batch).await;
        }
    }

    /// Counts a report's charge that is not a valid amount as dropped (`invalid_charge`).
    pub(crate) fn drop_invalid_charge(&self, instance: &Instance, why: InvalidCharge) {
        self.drop_records("invalid_charge", 1);
        // A proxy sending a bad usage header does so on every response: a line per 10 s.
        static INVALID: mixer_adapter_api::log_gate::LogGate =
            mixer_adapter_api::log_gate::LogGate::new(Duration::from_secs(10));
        if let Some(held_back) = INVALID.due() {
            tracing::warn!(handler = %self.name, instance = %instance.name, held_back, "charge dropped: {why}; counted in mixer_report_dropped_total{{reason=\"invalid_charge\"}}");
        }
    }

    /// Charges a batch of report quota instances ([`QuotaHandler::charge_many`]): charges
    /// that fail with a retryable error (Redis down) are tried again with backoff until they
    /// are `max_age` old, then dropped as `max_age`; each charge's deduplication id (when its
    /// instance has one) keeps a retry from counting twice.
    async fn deliver_charges(
        &self,
        quota: &dyn QuotaHandler,
        mut batch: Vec<(Instance, tokio::time::Instant)>,
    ) {
        let mut backoff = self.options.retry_backoff;
        loop {
            self.in_flight
                .store(batch.len(), std::sync::atomic::Ordering::SeqCst);
            let args: Vec<QuotaArgs> = batch.iter().map(|(i, _)| charge_args(i)).collect();
            let calls: Vec<QuotaCall<'_>> =
                batch.iter().zip(&args).map(|((i, _), a)| (i, a)).collect();
            let results =
                tokio::time::timeout(self.options.call_timeout, quota.charge_many(&calls)).await;
            drop(calls);
            let mut retry = vec![false; batch.len()];
            let (mut delivered, mut failed) = (0usize, 0usize);
            let mut label = "ok";
            match results {
                Err(_) => {
                    label = "timeout";
                    retry.iter_mut().for_each(|r| *r = true);
                }
                Ok(results) => {
                    for (at, result) in results.iter().enumerate().take(batch.len()) {
                        match result {
                            Ok(_) => delivered += 1,
                            Err(e) => {
                                label = e.kind.label();
                                if e.retryable {
                                    retry[at] = true;
                                } else {
                                    failed += 1;
                                }
                            }
                        }
                    }
                }
            }
            self.metrics.handler_call(&self.name, "charge", label);
            if delivered > 0 {
                self.metrics
                    .report_delivered
                    .with_label_values(&[self.name.as_ref()])
                    .inc_by(delivered as u64);
            }
            if failed > 0 {
                self.drop_records("handler_error", failed);
            }
            let mut keep = retry.into_iter();
            batch.retain(|_| keep.next().unwrap_or(false));
            if batch.is_empty() {
                self.in_flight.store(0, std::sync::atomic::Ordering::SeqCst);
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2).min(MAX_RETRY_BACKOFF);
            let now = tokio::time::Instant::now();
            let before = batch.len();
            batch.retain(|(_, queued)| now.duration_since(*queued) < self.options.max_age);
            let old = before - batch.len();
            if old > 0 {
                self.drop_records("max_age", old);
                tracing::warn!(
                    handler = %self.name,
                    dropped = old,
                    "charges dropped: the quota handler failed for longer than the report age limit"
                );
            }
            if batch.is_empty() {
                self.in_flight.store(0, std::sync::atomic::Ordering::SeqCst);
                return;
            }
        }
    }

    /// Delivers one batch, retrying it with backoff while the handler fails with a retryable
    /// error, until its records reach `max_age` (an adapter restarting for a few seconds
    /// loses nothing; records keep queueing meanwhile, within the queue's bounds).
    async fn deliver(
        &self,
        report: &dyn mixer_adapter_api::ReportHandler,
        batch: Vec<(Instance, tokio::time::Instant)>,
    ) {
        let mut backoff = self.options.retry_backoff;
        // The records move into the handler's slice, their queue times beside them: a copy
        // of each record per batch cost as much as a decision-log record's JSON line (#36).
        let (mut instances, mut queued): (Vec<Instance>, Vec<tokio::time::Instant>) =
            batch.into_iter().unzip();
        loop {
            self.in_flight
                .store(instances.len(), std::sync::atomic::Ordering::SeqCst);
            let result =
                tokio::time::timeout(self.options.call_timeout, report.report(&instances)).await;
            let (label, retryable) = match &result {
                Ok(Ok(())) => ("ok", false),
                Ok(Err(e)) => (e.kind.label(), e.retryable),
                Err(_) => ("timeout", true),
            };
            self.metrics.handler_call(&self.name, "report", label);
            if result.as_ref().is_ok_and(Result::is_ok) {
                self.in_flight.store(0, std::sync::atomic::Ordering::SeqCst);
                self.metrics
                    .report_delivered
                    .with_label_values(&[self.name.as_ref()])
                    .inc_by(instances.len() as u64);
                return;
            }
            if !retryable {
                self.in_flight.store(0, std::sync::atomic::Ordering::SeqCst);
                self.drop_records("handler_error", instances.len());
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2).min(MAX_RETRY_BACKOFF);
            // The batch holds the oldest records: those past the age limit go first.
            let now = tokio::time::Instant::now();
            let old = queued
                .iter()
                .take_while(|queued| now.duration_since(**queued) >= self.options.max_age)
                .count();
            if old > 0 {
                queued.drain(..old);
                instances.drain(..old);
                self.in_flight
                    .store(instances.len(), std::sync::atomic::Ordering::SeqCst);
                self.drop_records("max_age", old);
                tracing::warn!(
                    handler = %self.name,
                    dropped = old,
                    "report records dropped: the handler failed for longer than the report age limit"
                );
            }
            if instances.is_empty() {
                return;
            }
        }
    }

    /// Stops taking records and delivers what is queued, waiting at most `deadline`; what
    /// is left then is counted as dropped.
    pub(crate) async fn close(&self, deadline: Duration) {
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.closed = true;
        }
        self.notify.notify_one();
        let worker = self.worker.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut cut = 0;
        if let Some(mut worker) = worker
            && tokio::time::timeout(deadline, &mut worker).await.is_err()
        {
            worker.abort();
            let _ = worker.await;
            cut = self.in_flight.swap(0, std::sync::atomic::Ordering::SeqCst);
            if cut > 0 {
                self.drop_records("shutdown_deadline", cut);
            }
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let left = state.items.len();
        state.items.clear();
        state.bytes = 0;
        drop(state);
        if left > 0 {
            self.drop_records("shutdown_deadline", left);
        }
        let lost = cut + left;
        if lost > 0 {
            tracing::warn!(
                handler = %self.name,
                dropped = lost,
                "{lost} report records were not delivered before the shutdown deadline"
            );
        }
    }
}

/// What a report's quota instance charges: its amount (checked when it was queued) and its
/// deduplication id.
fn charge_args(instance: &Instance) -> QuotaArgs {
    QuotaArgs {
        amount: charge_of(instance).unwrap_or(0),
        deduplication_id: QuotaInstance::of(instance)
            .and_then(|q| q.deduplication_id)
            .unwrap_or_default()
            .to_string(),
        ..QuotaArgs::default()
    }
}

/// A rough size of an instance in memory, for the byte bound.
fn approx_bytes(instance: &Instance) -> usize {
    fn value(v: &Value) -> usize {
        match v {
            Value::String(s) | Value::EmailAddress(s) | Value::Uri(s) | Value::DnsName(s) => {
                32 + s.len()
            }
            Value::Bytes(b) => 32 + b.len(),
            Value::StringMap(m) => {
                32 + m.iter().map(|(k, v)| 48 + k.len() + v.len()).sum::<usize>()
            }
            _ => 32,
        }
    }
    64 + instance.name.len()
        + instance
            .fields
            .iter()
            .map(|(_, f)| match f {
                FieldValue::Value(v) => 16 + value(v),
                FieldValue::Map(entries) => {
                    16 + entries
                        .iter()
                        .map(|(k, v)| 16 + k.len() + value(v))
                        .sum::<usize>()
                }
                FieldValue::Decision(record) => 16 + record.approx_bytes(),
            })
            .sum::<usize>()
}

/// The units a report's quota instance charges: its `charge` as an amount (nothing when the
/// field is unset).
pub(crate) fn charge_of(instance: &mixer_model::Instance) -> Result<i64, InvalidCharge> {
    match QuotaInstance::of(instance).and_then(|q| q.charge) {
        Some(value) => charge_amount(value),
        None => Ok(0),
    }
}
