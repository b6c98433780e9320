//! redisquota's handler: selects quota, limit and key for each allocation of a request, runs
//! them all in one script call (one round trip), builds the results. Every call to Redis is
//! bounded by the handler's `callTimeout` and goes through its circuit breaker, so that an
//! outage answers with the fail policy within that budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::breaker::CircuitBreaker;
use mixer_adapter_api::log_gate::LogGate;
use mixer_adapter_api::{
    AdapterError, ErrorKind, Exposition, Handler, QuotaArgs, QuotaCall, QuotaHandler,
};
use mixer_adapter_quota_common::{
    Decision, Metrics, Refusal, Selected, finish_with_minimum, min_remaining, render_one,
};
use mixer_model::{Instance, QuotaResult};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, Script};

use crate::config::RedisQuotaConfig;
use crate::scripts;

/// Metric names start with this.
pub const METRIC_PREFIX: &str = "mixer_redisquota";
/// Every Redis key this adapter writes starts with this.
pub const KEY_PREFIX: &str = "mixer:quota:";
/// Istio 1.4's redisquota answer to an allocation it cannot grant
/// (`mixer/adapter/redisquota/redisquota.go`, `HandleQuota`).
pub const RESOURCE_EXHAUSTED: &str = "redisquota: Resource exhausted";
/// How long a (re)connection attempt may take. It runs in the background: calls waiting for
/// it are still bounded by `callTimeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Allocates quota from counters in Redis, shared by every mixer replica using that Redis.
pub struct RedisQuotaHandler {
    config: RedisQuotaConfig,
    client: Client,
    /// Made on first use (inside the runtime), and made again after a connection error: a
    /// manager whose connection broke keeps answering its failed reconnection until a call
    /// makes it try again, so after an outage each slot would fail one more call (the
    /// breaker's probe, a cool-down each) before Redis was used again.
    pool: Vec<std::sync::Mutex<Option<ConnectionManager>>>,
    next: AtomicUsize,
    /// For a Redis Cluster: its client, and the connection once made (in the background; it
    /// follows slot moves and node failures itself).
    cluster: Option<ClusterClient>,
    cluster_conn: Arc<std::sync::Mutex<Option<ClusterConnection>>>,
    connecting: Arc<std::sync::atomic::AtomicBool>,
    script: Script,
    breaker: CircuitBreaker,
    metrics: Metrics,
    errors: AtomicU64,
    /// Calls answered at once because the circuit was open.
    short_circuited: AtomicU64,
    /// Redis down fails every call: the warning goes out once per interval.
    warning: LogGate,
    name: Arc<str>,
}

impl std::fmt::Debug for RedisQuotaHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisQuotaHandler")
            .field("name", &self.name)
            .field(
                "url",
                &mixer_adapter_api::secrets::redact_url(&self.config.url),
            )
            .finish_non_exhaustive()
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The script's answers, five integers per allocation.
fn decisions(answer: &[i64]) -> Vec<Decision> {
    let micros = |us: i64| Duration::from_micros(u64::try_from(us).unwrap_or(0));
    answer
        .chunks_exact(5)
        .map(|a| Decision {
            granted: a[0],
            valid_duration: micros(a[1]),
            deduplicated: a[2] == 1,
            remaining: a[3],
            reset_after: micros(a[4]),
        })
        .collect()
}

/// One allocation's place in the script call.
struct Counted<'a> {
    /// Index into the request's calls.
    at: usize,
    sel: Selected<'a>,
    take: Take,
    /// The instance's `min_remaining` (checks only).
    min_remaining: i64,
}

/// A check's allocation or a report's charge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Take {
    Check,
    Charge,
}

impl Take {
    /// The script's argument for how the amount is taken.
    fn tag(self, args: &QuotaArgs) -> &'static str {
        match self {
            Take::Charge => "c",
            Take::Check if args.best_effort => "1",
            Take::Check => "0",
        }
    }
}

impl RedisQuotaHandler {
    /// A handler for validated params. Does not connect: the first allocation does.
    pub fn new(
        config: RedisQuotaConfig,
        name: Arc<str>,
    ) -> Result<RedisQuotaHandler, AdapterError> {
        let client = Client::open(config.connection.clone()).map_err(|e| {
            AdapterError::permanent(ErrorKind::Internal, format!("redis address: {e}"))
        })?;
        let metrics = Metrics::new(
            &name,
            config
                .quotas
                .quotas
                .iter()
                .map(|q| q.name.to_string())
                .collect(),
        );
        let cluster = match &config.cluster {
            None => None,
            Some(seeds) => Some(
                ClusterClient::builder(seeds.iter().cloned())
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(config.call_timeout.max(Duration::from_secs(1)))
                    .retries(1)
                    .build()
                    .map_err(|e| {
                        AdapterError::permanent(ErrorKind::Internal, format!("redis cluster: {e}"))
                    })?,
            ),
        };
        Ok(RedisQuotaHandler {
            cluster,
            cluster_conn: Arc::default(),
            connecting: Arc::default(),
            pool: (0..config.pool_size.max(1))
                .map(|_| std::sync::Mutex::new(None))
                .collect(),
            next: AtomicUsize::new(0),
            script: Script::new(&scripts::source()),
            breaker: CircuitBreaker::new(config.breaker),
            client,
            config,
            metrics,
            errors: AtomicU64::new(0),
            short_circuited: AtomicU64::new(0),
            warning: LogGate::new(Duration::from_secs(10)),
            name,
        })
    }

    /// The per-quota counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Redis calls that failed (unreachable, timed out, an error answer).
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// The circuit breaker in front of Redis.
    pub fn breaker(&self) -> &CircuitBreaker {
        &self.breaker
    }

    /// A connection of the pool.
    fn connection(&self) -> Result<ConnectionManager, AdapterError> {
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
            .set_response_timeout(Some(self.config.call_timeout.max(Duration::from_secs(1))))
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

    fn error(&self, kind: ErrorKind, message: String) -> AdapterError {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Some(held_back) = self.warning.due() {
            tracing::warn!(handler = %self.name, held_back, "{message}");
        }
        AdapterError::transient(kind, message)
    }

    /// Runs every counted allocation in one script call, within the call budget and through
    /// the breaker.
    async fn run(
        &self,
        counted: &[Counted<'_>],
        calls: &[QuotaCall<'_>],
    ) -> Result<Vec<Decision>, AdapterError> {
        let Some(admission) = self.breaker.admit() else {
            self.short_circuited.fetch_add(1, Ordering::Relaxed);
            return Err(AdapterError::transient(
                ErrorKind::CircuitOpen,
                "redis circuit open: recent calls failed; retrying Redis shortly",
            ));
        };
        let mut invocation = self.script.prepare_invoke();
        for c in counted {
            let (_, args) = calls[c.at];
            let (state_key, dedup_key, dedup_ms) = self.keys(&c.sel, args);
            invocation.key(state_key).key(dedup_key);
            invocation
                .arg(c.sel.limit.algorithm.tag())
                .arg(c.sel.limit.max_amount)
                .arg(micros(c.sel.limit.valid_duration))
                .arg(micros(c.sel.limit.bucket_duration).max(1))
                .arg(args.amount)
                .arg(c.take.tag(args))
                .arg(dedup_ms)
                .arg(c.min_remaining);
        }
        let budget = self.config.call_timeout;
        if self.cluster.is_some() {
            return self.run_on_cluster(admission, counted, calls).await;
        }
        let answer: Vec<i64> = match self.connection() {
            Err(e) => {
                admission.failure();
                return Err(e);
            }
            Ok(mut conn) => {
                match tokio::time::timeout(budget, invocation.invoke_async(&mut conn)).await {
                    Ok(Ok(v)) => v,
                    Ok(Err(e)) => {
                        admission.failure();
                        self.forget_connections(&e);
                        return Err(self.error(ErrorKind::Unavailable, format!("redis: {e}")));
                    }
                    Err(_) => {
                        admission.failure();
                        return Err(self.error(
                            ErrorKind::Timeout,
                            format!(
                                "redis did not answer within callTimeout {}",
                                mixer_model::Duration::from_std(budget)
                            ),
                        ));
                    }
                }
            }
        };
        if answer.len() != 5 * counted.len() {
            admission.failure();
            self.errors.fetch_add(1, Ordering::Relaxed);
            return Err(AdapterError::transient(
                ErrorKind::InvalidResponse,
                format!(
                    "redis script answered {} integers, expected 5 for each of {} allocations",
                    answer.len(),
                    counted.len()
                ),
            ));
        }
        admission.success();
        Ok(decisions(&answer))
    }

    /// [`Self::run`] on a Redis Cluster: a script call may only touch keys of one slot, so
    /// each allocation (its counter and deduplication record share a hash tag) is its own
    /// call, all sent at once and bounded together by the call budget.
    async fn run_on_cluster(
        &self,
        admission: mixer_adapter_api::breaker::Admission<'_>,
        counted: &[Counted<'_>],
        calls: &[QuotaCall<'_>],
    ) -> Result<Vec<Decision>, AdapterError> {
        let budget = self.config.call_timeout;
        // The first calls wait (within the budget) for the connection being made.
        let deadline = tokio::time::Instant::now() + budget;
        let conn = loop {
            if let Some(conn) = self.cluster_connection() {
                break conn;
            }
            if tokio::time::Instant::now() >= deadline {
                admission.failure();
                return Err(self.error(
                    ErrorKind::Unavailable,
                    "redis cluster: not connected yet".to_string(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let invocations: Vec<_> = counted
            .iter()
            .map(|c| {
                let (_, args) = calls[c.at];
                let (state_key, dedup_key, dedup_ms) = self.keys(&c.sel, args);
                let mut invocation = self.script.prepare_invoke();
                invocation
                    .key(state_key)
                    .key(dedup_key)
                    .arg(c.sel.limit.algorithm.tag())
                    .arg(c.sel.limit.max_amount)
                    .arg(micros(c.sel.limit.valid_duration))
                    .arg(micros(c.sel.limit.bucket_duration).max(1))
                    .arg(args.amount)
                    .arg(c.take.tag(args))
                    .arg(dedup_ms)
                    .arg(c.min_remaining);
                invocation
            })
            .collect();
        let all = futures_util::future::join_all(invocations.iter().map(|inv| {
            let mut conn = conn.clone();
            async move { inv.invoke_async::<Vec<i64>>(&mut conn).await }
        }));
        let answers = match tokio::time::timeout_at(deadline, all).await {
            Ok(answers) => answers,
            Err(_) => {
                admission.failure();
                return Err(self.error(
                    ErrorKind::Timeout,
                    format!(
                        "redis did not answer within callTimeout {}",
                        mixer_model::Duration::from_std(budget)
                    ),
                ));
            }
        };
        let mut answer = Vec::with_capacity(5 * counted.len());
        for a in answers {
            match a {
                Ok(a) if a.len() == 5 => answer.extend(a),
                Ok(a) => {
                    admission.failure();
                    self.errors.fetch_add(1, Ordering::Relaxed);
                    return Err(AdapterError::transient(
                        ErrorKind::InvalidResponse,
                        format!("redis script answered {} integers, expected 5", a.len()),
                    ));
                }
                Err(e) => {
                    admission.failure();
                    return Err(self.error(ErrorKind::Unavailable, format!("redis: {e}")));
                }
            }
        }
        admission.success();
        Ok(decisions(&answer))
    }

    /// The cluster connection, or `None` while it is being made (a connection attempt is
    /// started in the background if none is under way).
    fn cluster_connection(&self) -> Option<ClusterConnection> {
        if let Some(c) = self
            .cluster_conn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Some(c);
        }
        let client = self.cluster.clone()?;
        let rt = tokio::runtime::Handle::try_current().ok()?;
        if !self.connecting.swap(true, Ordering::AcqRel) {
            let slot = self.cluster_conn.clone();
            let connecting = self.connecting.clone();
            let name = self.name.clone();
            rt.spawn(async move {
                match client.get_async_connection().await {
                    Ok(conn) => *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn),
                    Err(e) => tracing::debug!(handler = %name, "redis cluster: {e}"),
                }
                connecting.store(false, Ordering::Release);
            });
        }
        None
    }

    /// The counter's key, the deduplication record's key and how long (ms) the record is
    /// kept (0: no deduplication id).
    fn keys(&self, sel: &Selected<'_>, args: &QuotaArgs) -> (String, String, u64) {
        let tag = sel.limit.algorithm.tag();
        let key = &sel.key;
        // `{tag:key}` is the hash tag: a counter and its deduplication records share a Redis
        // Cluster slot, so one script call can touch them all.
        let state_key = format!("{KEY_PREFIX}{{{tag}:{key}}}");
        if args.deduplication_id.is_empty() {
            return (state_key, format!("{KEY_PREFIX}dedup:{{{tag}:{key}}}:"), 0);
        }
        let dedup_key = format!(
            "{KEY_PREFIX}dedup:{{{tag}:{key}}}:{}",
            args.deduplication_id
        );
        let dedup_ms = u64::try_from(self.config.min_deduplication_duration.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        (state_key, dedup_key, dedup_ms)
    }

    fn result(
        &self,
        sel: &Selected<'_>,
        args: &QuotaArgs,
        min_remaining: i64,
        decision: Decision,
    ) -> QuotaResult {
        let refusal = Refusal::Exhausted(RESOURCE_EXHAUSTED);
        let result =
            finish_with_minimum(refusal, sel, args, min_remaining, decision, &self.metrics);
        if sel.limit.shadow && !result.status.message.is_empty() {
            tracing::debug!(handler = %self.name, key = %sel.key, "{}", result.status.message);
        }
        result
    }
}

impl Handler for RedisQuotaHandler {
    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        Some(self)
    }

    fn as_exposition(&self) -> Option<&dyn Exposition> {
        Some(self)
    }
}

#[async_trait]
impl QuotaHandler for RedisQuotaHandler {
    async fn allocate(
        &self,
        instance: &Instance,
        args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError> {
        let mut answers = self.allocate_many(&[(instance, args)]).await;
        answers.pop().unwrap_or_else(|| {
            Err(AdapterError::permanent(
                ErrorKind::Internal,
                "no answer for the allocation",
            ))
        })
    }

    /// Every allocation that counts goes into one script call: one round trip per request.
    async fn allocate_many(
        &self,
        calls: &[QuotaCall<'_>],
    ) -> Vec<Result<QuotaResult, AdapterError>> {
        self.count(calls, Take::Check).await
    }

    /// Every charge of a batch goes into one script call, as allocations do.
    async fn charge_many(&self, calls: &[QuotaCall<'_>]) -> Vec<Result<QuotaResult, AdapterError>> {
        self.count(calls, Take::Charge).await
    }
}

impl RedisQuotaHandler {
    /// Checks or charges every call in one script call.
    async fn count(
        &self,
        calls: &[QuotaCall<'_>],
        take: Take,
    ) -> Vec<Result<QuotaResult, AdapterError>> {
        let mut answers: Vec<Option<Result<QuotaResult, AdapterError>>> =
            Vec::with_capacity(calls.len());
        let mut counted = Vec::new();
        for (at, (instance, args)) in calls.iter().enumerate() {
            let min_remaining = match take {
                Take::Check => min_remaining(instance),
                Take::Charge => 0,
            };
            match self
                .config
                .quotas
                .select_with(instance, args.limit_override)
            {
                Err(e) => answers.push(Some(Err(e))),
                Ok(sel) if args.amount <= 0 && min_remaining == 0 => {
                    let nothing = Decision::nothing(sel.limit.max_amount);
                    answers.push(Some(Ok(self.result(&sel, args, 0, nothing))));
                }
                Ok(sel) => {
                    answers.push(None);
                    counted.push(Counted {
                        at,
                        sel,
                        take,
                        min_remaining,
                    });
                }
            }
        }
        if !counted.is_empty() {
            match self.run(&counted, calls).await {
                Ok(decisions) => {
                    for (c, decision) in counted.iter().zip(decisions) {
                        let (_, args) = calls[c.at];
                        answers[c.at] =
                            Some(Ok(self.result(&c.sel, args, c.min_remaining, decision)));
                    }
                }
                Err(e) => {
                    for c in &counted {
                        answers[c.at] = Some(Err(e.clone()));
                    }
                }
            }
        }
        answers
            .into_iter()
            .map(|a| {
                a.unwrap_or_else(|| Err(AdapterError::permanent(ErrorKind::Internal, "no answer")))
            })
            .collect()
    }
}

impl Exposition for RedisQuotaHandler {
    fn render(&self, out: &mut String) {
        self.metrics.render(METRIC_PREFIX, out);
        let handler = self.metrics.handler_label();
        render_one(
            out,
            "mixer_redisquota_errors_total",
            "counter",
            "Script calls that failed because Redis could not be reached, did not answer within callTimeout or answered an error.",
            &handler,
            self.errors(),
        );
        render_one(
            out,
            "mixer_redisquota_short_circuited_total",
            "counter",
            "Script calls answered at once, without Redis, because the circuit breaker was open.",
            &handler,
            self.short_circuited.load(Ordering::Relaxed),
        );
        let state = self.breaker.state().gauge();
        render_one(
            out,
            "mixer_redisquota_circuit_state",
            "gauge",
            "The circuit breaker in front of Redis: 0 closed, 1 open, 2 half open.",
            &handler,
            u64::try_from(state).unwrap_or(0),
        );
    }
}
