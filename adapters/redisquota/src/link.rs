//! The link to one Redis (not a cluster): a pool of multiplexed connections, the circuit
//! breaker in front of them, and the batcher.
//!
//! Batching: the allocations of every request go into a queue; while up to `pool size`
//! script calls are in flight, what arrives meanwhile waits and goes out together in the
//! next call, so Redis runs one script per batch instead of one per decision (at low load
//! a batch is one request: nothing waits for company). A batch is one script call, atomic,
//! that counts its allocations one after the other in arrival order, exactly as if each
//! request had sent its own call: batching changes the cost, never the answer. A request
//! that gave up (its call budget ran out) before its batch was sent is left out of it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mixer_adapter_api::breaker::CircuitBreaker;
use mixer_adapter_api::log_gate::LogGate;
use mixer_adapter_api::{AdapterError, ErrorKind};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Script};
use tokio::sync::oneshot;

/// Most allocations in one script call: bounds how long one script holds Redis (a few
/// hundred µs) and the size of one request to it.
pub const MAX_BATCH: usize = 256;

/// How long a (re)connection attempt may take. It runs in the background: calls waiting for
/// it are still bounded by `callTimeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// One allocation's keys and arguments, as the script takes them (see [`crate::scripts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The counter.
    pub state_key: String,
    /// The deduplication record.
    pub dedup_key: String,
    /// `fw`, `rw` or `tb`.
    pub algorithm: &'static str,
    /// maxAmount.
    pub max_amount: i64,
    /// validDuration, µs.
    pub valid_us: u64,
    /// bucketDuration, µs (at least 1).
    pub bucket_us: u64,
    /// Units asked for or charged.
    pub amount: i64,
    /// `0` a check, `1` a check with best effort, `c` a charge.
    pub take: &'static str,
    /// How long the deduplication record is kept, ms (0: no deduplication id).
    pub dedup_ms: u64,
    /// The minimum remaining a check needs (0: none).
    pub min_remaining: i64,
}

/// Five integers per allocation (see [`crate::scripts`]).
pub const ANSWER_LEN: usize = 5;

struct Job {
    allocations: Vec<Allocation>,
    reply: oneshot::Sender<Result<Vec<i64>, AdapterError>>,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Drainers running (each has at most one script call in flight).
    in_flight: usize,
}

/// See the module documentation.
pub struct Link {
    client: Client,
    /// Made on first use (inside the runtime), and made again after a connection error: a
    /// manager whose connection broke keeps answering its failed reconnection until a call
    /// makes it try again, so after an outage each slot would fail one more call (the
    /// breaker's probe, a cool-down each) before Redis was used again.
    pool: Vec<Mutex<Option<ConnectionManager>>>,
    next: AtomicUsize,
    script: Script,
    pub(crate) breaker: CircuitBreaker,
    call_timeout: Duration,
    queue: Mutex<Queue>,
    errors: AtomicU64,
    /// Allocations answered at once because the circuit was open.
    short_circuited: AtomicU64,
    /// Script calls sent, and the allocations they carried.
    script_calls: AtomicU64,
    batched: AtomicU64,
    /// Redis down fails every call: the warning goes out once per interval.
    warning: LogGate,
    name: Arc<str>,
}

impl Link {
    /// A link that connects on first use.
    pub fn new(
        client: Client,
        pool_size: usize,
        script: Script,
        breaker: CircuitBreaker,
        call_timeout: Duration,
        name: Arc<str>,
    ) -> Link {
        Link {
            client,
            pool: (0..pool_size.max(1)).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            script,
            breaker,
            call_timeout,
            queue: Mutex::default(),
            errors: AtomicU64::new(0),
            short_circuited: AtomicU64::new(0),
            script_calls: AtomicU64::new(0),
            batched: AtomicU64::new(0),
            warning: LogGate::new(Duration::from_secs(10)),
            name,
        }
    }

    /// Redis calls that failed (unreachable, timed out, an error answer).
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Allocations failed at once because the circuit was open.
    pub fn short_circuited(&self) -> u64 {
        self.short_circuited.load(Ordering::Relaxed)
    }

    /// Script calls sent to Redis (allocations and charges).
    pub fn script_calls(&self) -> u64 {
        self.script_calls.load(Ordering::Relaxed)
    }

    /// Allocations those calls carried.
    pub fn batched(&self) -> u64 {
        self.batched.load(Ordering::Relaxed)
    }

    /// Counts an allocation failed at once because the circuit was open.
    pub fn count_short_circuit(&self) {
        self.short_circuited.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an error without logging it.
    pub fn count_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an error and logs it (at most once per interval).
    pub fn error(&self, kind: ErrorKind, message: String) -> AdapterError {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Some(held_back) = self.warning.due() {
            tracing::warn!(handler = %self.name, held_back, "{message}");
        }
        AdapterError::transient(kind, message)
    }

    /// A connection of the pool.
    pub fn connection(&self) -> Result<ConnectionManager, AdapterError> {
        let at = self.next.fetch_add(1, Ordering::Relaxed) % self.pool.len();
        let mut slot = self.pool[at].lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = &*slot {
            return Ok(c.clone());
        }
        // No retries with backoff inside a connection attempt: a refused connection fails the
        // call at once (the breaker then spaces out further attempts), rather than making
        // every call wait out the backoff.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(self.call_timeout.max(Duration::from_secs(1))))
            .set_number_of_retries(0);
        let manager = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| self.error(ErrorKind::Unavailable, format!("redis connection: {e}")))?;
        *slot = Some(manager.clone());
        Ok(manager)
    }

    /// Drops every connection of the pool after `e`, if `e` says a connection is broken
    /// (Redis went away: the others are broken too, even those no call has tried since):
    /// each slot's next call connects afresh, so the first call after Redis is back (the
    /// breaker's probe) reaches it, whichever slot it takes, and so do the calls after it.
    fn forget_connections(&self, e: &redis::RedisError) {
        if e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error()
        {
            for slot in &self.pool {
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
        }
    }

    fn timeout_error(&self) -> AdapterError {
        self.error(
            ErrorKind::Timeout,
            format!(
                "redis did not answer within callTimeout {}",
                mixer_model::Duration::from_std(self.call_timeout)
            ),
        )
    }

    /// Counts `allocations` (five integers each in the answer), in the next batch, within
    /// the call budget.
    pub async fn run(
        self: &Arc<Self>,
        allocations: Vec<Allocation>,
    ) -> Result<Vec<i64>, AdapterError> {
        let (reply, answer) = oneshot::channel();
        let start_drainer = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.jobs.push_back(Job { allocations, reply });
            let start = q.in_flight < self.pool.len();
            if start {
                q.in_flight += 1;
            }
            start
        };
        if start_drainer {
            // A task of its own, so that a request that goes away (its client hung up) never
            // strands the requests batched with it.
            tokio::spawn(Arc::clone(self).drain());
        }
        match tokio::time::timeout(self.call_timeout, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(AdapterError::transient(
                ErrorKind::Unavailable,
                "redis: the batch call was dropped (shutting down)",
            )),
            Err(_) => Err(self.timeout_error()),
        }
    }

    /// Sends batches until the queue is empty.
    async fn drain(self: Arc<Self>) {
        loop {
            let batch = match self.next_batch() {
                Some(batch) => batch,
                None => return,
            };
            let all: Vec<&Allocation> = batch.iter().flat_map(|j| &j.allocations).collect();
            match self.call(&all).await {
                Ok(answer) => {
                    let mut rest = answer.as_slice();
                    for job in batch {
                        let (mine, after) = rest.split_at(ANSWER_LEN * job.allocations.len());
                        rest = after;
                        let _ = job.reply.send(Ok(mine.to_vec()));
                    }
                }
                Err(e) => {
                    if e.kind == ErrorKind::CircuitOpen {
                        self.short_circuited
                            .fetch_add(batch.len() as u64, Ordering::Relaxed);
                    }
                    for job in batch {
                        let _ = job.reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// The queued jobs whose requests still wait, up to [`MAX_BATCH`] allocations (a larger
    /// job goes alone); `None` (and this drainer ends) when nothing waits.
    fn next_batch(&self) -> Option<Vec<Job>> {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut batch: Vec<Job> = Vec::new();
        let mut n = 0;
        while let Some(job) = q.jobs.pop_front() {
            if job.reply.is_closed() {
                continue;
            }
            if !batch.is_empty() && n + job.allocations.len() > MAX_BATCH {
                q.jobs.push_front(job);
                break;
            }
            n += job.allocations.len();
            batch.push(job);
        }
        if batch.is_empty() {
            q.in_flight -= 1;
            return None;
        }
        Some(batch)
    }

    /// One call of `invocation` outside the allocation batches (a batch of lease takes and
    /// give-backs), within
    /// the call budget and through the breaker; its answer must be `expected` integers.
    pub async fn invoke(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
        expected: usize,
    ) -> Result<Vec<i64>, AdapterError> {
        let answer = self.guarded_call(invocation, expected, 0).await;
        if let Err(e) = &answer
            && e.kind == ErrorKind::CircuitOpen
        {
            self.count_short_circuit();
        }
        answer
    }

    /// The budget of one call.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// Connections in the pool: the lease batcher keeps at most this many calls in flight,
    /// as the allocation batcher does.
    pub fn pool_size(&self) -> usize {
        self.pool.len()
    }

    /// One script call for `all`, within the call budget and through the breaker.
    async fn call(&self, all: &[&Allocation]) -> Result<Vec<i64>, AdapterError> {
        let mut invocation = self.script.prepare_invoke();
        for a in all {
            invocation
                .key(&a.state_key)
                .key(&a.dedup_key)
                .arg(a.algorithm)
                .arg(a.max_amount)
                .arg(a.valid_us)
                .arg(a.bucket_us)
                .arg(a.amount)
                .arg(a.take)
                .arg(a.dedup_ms)
                .arg(a.min_remaining);
        }
        self.guarded_call(&invocation, ANSWER_LEN * all.len(), all.len())
            .await
    }

    /// Runs `invocation` on a connection of the pool through the breaker, within the call
    /// budget, expecting `expected` integers: the one place where a call's outcome (an
    /// unreachable Redis, a timeout, an error or malformed answer) reaches the breaker, the
    /// error count and the pool, whichever script it runs. A call sent with `carried`
    /// allocations (0: a lease call) counts in the batching counters. Short circuits are
    /// counted by the caller, per allocation.
    async fn guarded_call(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
        expected: usize,
        carried: usize,
    ) -> Result<Vec<i64>, AdapterError> {
        let Some(admission) = self.breaker.admit() else {
            return Err(AdapterError::transient(
                ErrorKind::CircuitOpen,
                "redis circuit open: recent calls failed; retrying Redis shortly",
            ));
        };
        if carried > 0 {
            self.script_calls.fetch_add(1, Ordering::Relaxed);
            self.batched.fetch_add(carried as u64, Ordering::Relaxed);
        }
        let mut conn = match self.connection() {
            Ok(conn) => conn,
            Err(e) => {
                admission.failure();
                return Err(e);
            }
        };
        let answer: Vec<i64> =
            match tokio::time::timeout(self.call_timeout, invocation.invoke_async(&mut conn)).await
            {
                Ok(Ok(v)) => v,
                Ok(Err(e)) => {
                    admission.failure();
                    self.forget_connections(&e);
                    return Err(self.error(ErrorKind::Unavailable, format!("redis: {e}")));
                }
                Err(_) => {
                    admission.failure();
                    return Err(self.timeout_error());
                }
            };
        if answer.len() != expected {
            admission.failure();
            self.errors.fetch_add(1, Ordering::Relaxed);
            return Err(AdapterError::transient(
                ErrorKind::InvalidResponse,
                format!(
                    "redis script answered {} integers, expected {expected}",
                    answer.len()
                ),
            ));
        }
        admission.success();
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mixer_adapter_api::breaker::BreakerOptions;

    fn link() -> Link {
        let client = Client::open("redis://127.0.0.1:1").expect("address");
        Link::new(
            client,
            2,
            Script::new("return {}"),
            CircuitBreaker::new(BreakerOptions::default()),
            Duration::from_millis(5),
            "h".into(),
        )
    }

    fn job(n: usize) -> (Job, oneshot::Receiver<Result<Vec<i64>, AdapterError>>) {
        let a = Allocation {
            state_key: "k".into(),
            dedup_key: "d".into(),
            algorithm: "fw",
            max_amount: 1,
            valid_us: 1,
            bucket_us: 1,
            amount: 1,
            take: "0",
            dedup_ms: 0,
            min_remaining: 0,
        };
        let (reply, rx) = oneshot::channel();
        (
            Job {
                allocations: vec![a; n],
                reply,
            },
            rx,
        )
    }

    /// Batches keep arrival order, leave out requests that gave up, stop at [`MAX_BATCH`]
    /// (a larger request goes alone), and the drainer ends when nothing waits.
    #[test]
    fn batches_keep_order_skip_the_abandoned_and_stay_bounded() {
        let link = link();
        let mut waiting = Vec::new();
        {
            let mut q = link.queue.lock().expect("lock");
            q.in_flight = 1;
            for n in [1, 3, 2, MAX_BATCH - 3, 1, MAX_BATCH + 1] {
                let (j, rx) = job(n);
                q.jobs.push_back(j);
                waiting.push(rx);
            }
        }
        // The request with 3 allocations gave up.
        drop(waiting.remove(1));
        let sizes = |b: Vec<Job>| b.iter().map(|j| j.allocations.len()).collect::<Vec<_>>();
        assert_eq!(
            sizes(link.next_batch().expect("a batch")),
            [1, 2, MAX_BATCH - 3]
        );
        assert_eq!(sizes(link.next_batch().expect("a batch")), [1]);
        assert_eq!(sizes(link.next_batch().expect("a batch")), [MAX_BATCH + 1]);
        assert!(link.next_batch().is_none());
        assert_eq!(link.queue.lock().expect("lock").in_flight, 0);
    }
}
