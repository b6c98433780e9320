//! redisquota's handler: selects quota, limit and key for each allocation of a request, runs
//! them all in one script call (one round trip), builds the results. Every call to Redis is
//! bounded by the handler's `callTimeout` and goes through its circuit breaker, so that an
//! outage answers with the fail policy within that budget.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mixer_adapter_api::breaker::CircuitBreaker;
use mixer_adapter_api::{
    AdapterError, ErrorKind, Exposition, Handler, QuotaArgs, QuotaCall, QuotaHandler,
};
use mixer_adapter_quota_common::{
    Decision, Metrics, Refusal, Selected, finish_with_minimum, min_remaining, render_one,
};
use mixer_model::{Instance, QuotaLimit, QuotaResult};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, Script};

use crate::config::RedisQuotaConfig;
use crate::lease::{Ask, Leases};
use crate::link::{Allocation, Link};
use crate::over_limit::OverLimitCache;
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
    /// One Redis: its connections, breaker and batcher (for a cluster: the breaker only).
    link: Arc<Link>,
    /// For a Redis Cluster: its client, and the connection once made (in the background; it
    /// follows slot moves and node failures itself).
    cluster: Option<ClusterClient>,
    cluster_conn: Arc<std::sync::Mutex<Option<ClusterConnection>>>,
    connecting: Arc<std::sync::atomic::AtomicBool>,
    /// The allocation script, for a cluster's one-allocation calls.
    script: Script,
    /// [`scripts::PEEK`], for `/quota`.
    peek_script: Script,
    metrics: Metrics,
    /// Keys known to have nothing left until a time: their checks are answered here.
    over_limit: OverLimitCache,
    /// Blocks of counters held by this replica (`leaseSize`); `None` when off.
    leases: Option<Leases>,
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
        let script = Script::new(&scripts::source());
        let link = Arc::new(Link::new(
            client,
            config.pool_size,
            script.clone(),
            CircuitBreaker::new(config.breaker),
            config.call_timeout,
            name.clone(),
        ));
        // Leases are refused on a cluster when params compile; a cluster never gets them.
        let leases = (config.lease_size > 0 && cluster.is_none()).then(|| {
            Leases::new(
                config.lease_size,
                config.lease_idle_timeout,
                config.min_deduplication_duration,
                link.clone(),
            )
        });
        Ok(RedisQuotaHandler {
            cluster,
            cluster_conn: Arc::default(),
            connecting: Arc::default(),
            leases,
            link,
            script,
            peek_script: Script::new(scripts::PEEK),
            over_limit: OverLimitCache::new(config.local_cache_size),
            config,
            metrics,
            name,
        })
    }

    /// The per-quota counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Redis calls that failed (unreachable, timed out, an error answer).
    pub fn errors(&self) -> u64 {
        self.link.errors()
    }

    /// The circuit breaker in front of Redis.
    pub fn breaker(&self) -> &CircuitBreaker {
        &self.link.breaker
    }

    /// Script calls sent to one Redis, and the allocations and charges they carried: their
    /// ratio is the batching (not counted for a cluster).
    pub fn script_calls(&self) -> (u64, u64) {
        (self.link.script_calls(), self.link.batched())
    }

    /// Script calls that took or gave back lease blocks, and the units given back unused
    /// (both 0 without `leaseSize`).
    pub fn lease_calls(&self) -> (u64, u64) {
        self.leases
            .as_ref()
            .map_or((0, 0), |l| (l.calls(), l.returned()))
    }

    /// Deduplication ids the leases remember now (0 without `leaseSize`).
    pub fn remembered_ids(&self) -> usize {
        self.leases.as_ref().map_or(0, Leases::remembered_ids)
    }

    /// Checks answered from the local over-limit cache, without Redis.
    pub fn local_cache_hits(&self) -> u64 {
        self.over_limit.hits()
    }

    fn error(&self, kind: ErrorKind, message: String) -> AdapterError {
        self.link.error(kind, message)
    }

    /// Runs every counted allocation in one script call (batched with those of concurrent
    /// requests), within the call budget and through the breaker.
    async fn run(
        &self,
        counted: &[Counted<'_>],
        calls: &[QuotaCall<'_>],
    ) -> Result<Vec<Decision>, AdapterError> {
        if self.cluster.is_some() {
            let Some(admission) = self.link.breaker.admit() else {
                self.link.count_short_circuit();
                return Err(AdapterError::transient(
                    ErrorKind::CircuitOpen,
                    "redis circuit open: recent calls failed; retrying Redis shortly",
                ));
            };
            return self.run_on_cluster(admission, counted, calls).await;
        }
        let allocations = counted
            .iter()
            .map(|c| self.allocation(c, calls[c.at].1))
            .collect();
        let answer = self.link.run(allocations).await?;
        Ok(decisions(&answer))
    }

    /// The script's keys and arguments for one allocation.
    fn allocation(&self, c: &Counted<'_>, args: &QuotaArgs) -> Allocation {
        let (state_key, dedup_key, dedup_ms) = self.keys(&c.sel, args);
        Allocation {
            state_key,
            dedup_key,
            algorithm: c.sel.limit.algorithm.tag(),
            max_amount: c.sel.limit.max_amount,
            valid_us: micros(c.sel.limit.valid_duration),
            bucket_us: micros(c.sel.limit.bucket_duration).max(1),
            amount: args.amount,
            take: c.take.tag(args),
            dedup_ms,
            min_remaining: c.min_remaining,
        }
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
                    self.link.count_error();
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
        let state_key = Self::state_key(sel);
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

    /// The Redis key of `sel`'s counter. `{tag:key}` is the hash tag: a counter and its
    /// deduplication records share a Redis Cluster slot, so one script call can touch them
    /// all. Pushed rather than formatted: a lease answers most decisions without Redis, and
    /// this key is what finds the counter's lease.
    fn state_key(sel: &Selected<'_>) -> String {
        let (tag, key) = (sel.limit.algorithm.tag(), &sel.key);
        let mut state_key = String::with_capacity(KEY_PREFIX.len() + tag.len() + key.len() + 3);
        state_key.push_str(KEY_PREFIX);
        state_key.push('{');
        state_key.push_str(tag);
        state_key.push(':');
        state_key.push_str(key);
        state_key.push('}');
        state_key
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

#[async_trait]
impl Handler for RedisQuotaHandler {
    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        Some(self)
    }

    fn as_exposition(&self) -> Option<&dyn Exposition> {
        Some(self)
    }

    /// Gives the leased units back, so that the handler replacing this one (reload) or the
    /// other replicas (shutdown) can grant them within the window.
    async fn close(&self) {
        if let Some(leases) = &self.leases {
            leases.give_back_all().await;
        }
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

    /// One allocation served from the lease's block, when that needs no Redis call (see
    /// [`Leases::allocate_now`]); anything else (a take, several allocations, no leases) is
    /// awaited through [`Self::allocate_many`], which answers the same.
    fn allocate_now(
        &self,
        calls: &[QuotaCall<'_>],
    ) -> Option<Vec<Result<QuotaResult, AdapterError>>> {
        let (leases, [(instance, args)]) = (self.leases.as_ref()?, calls) else {
            return None;
        };
        let min_remaining = min_remaining(instance);
        let sel = match self
            .config
            .quotas
            .select_with(instance, args.limit_override)
        {
            Ok(sel) => sel,
            Err(e) => return Some(vec![Err(e)]),
        };
        if args.amount <= 0 || !self.leasable(&sel, Take::Check, min_remaining) {
            return None;
        }
        let key = Self::state_key(&sel);
        let ask = Ask {
            key: &key,
            max_amount: sel.limit.max_amount,
            valid: sel.limit.valid_duration,
            amount: args.amount,
            best_effort: args.best_effort,
            deduplication_id: &args.deduplication_id,
        };
        let decision = leases.allocate_now(&ask)?;
        Some(vec![Ok(self.result(&sel, args, 0, decision))])
    }

    /// Every charge of a batch goes into one script call, as allocations do.
    async fn charge_many(&self, calls: &[QuotaCall<'_>]) -> Vec<Result<QuotaResult, AdapterError>> {
        self.count(calls, Take::Charge).await
    }

    fn can_peek(&self) -> bool {
        true
    }

    async fn peek(&self, instance: &Instance) -> Result<QuotaLimit, AdapterError> {
        let sel = self.config.quotas.select(instance)?;
        let (remaining, reset_after) = self.read_counter(&sel).await?;
        Ok(QuotaLimit {
            name: sel.quota.name.clone(),
            max_amount: sel.limit.max_amount,
            window: sel.limit.valid_duration,
            remaining: remaining.clamp(0, sel.limit.max_amount.max(0)),
            reset_after,
            retry_after: Duration::ZERO,
        })
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
        let mut leased = Vec::new();
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
                Ok(sel) if self.leasable(&sel, take, min_remaining) => {
                    answers.push(None);
                    leased.push((at, sel));
                }
                Ok(sel) => {
                    if take == Take::Check && args.deduplication_id.is_empty() {
                        let key = self.keys(&sel, args).0;
                        if let Some(left) = self.over_limit.lookup(&key, &sel.limit, Instant::now())
                        {
                            let refused = Decision {
                                granted: 0,
                                valid_duration: left,
                                deduplicated: false,
                                remaining: 0,
                                reset_after: left,
                            };
                            answers.push(Some(Ok(self.result(&sel, args, min_remaining, refused))));
                            continue;
                        }
                    }
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
            // Before the call: Redis's window ends no earlier than this plus what it answers.
            let sent = Instant::now();
            match self.run(&counted, calls).await {
                Ok(decisions) => {
                    for (c, decision) in counted.iter().zip(decisions) {
                        let (_, args) = calls[c.at];
                        if decision.remaining <= 0 && !decision.deduplicated {
                            let key = self.keys(&c.sel, args).0;
                            let until = sent + decision.reset_after;
                            self.over_limit
                                .insert(&key, &c.sel.limit, until, Instant::now());
                        }
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
        if let Some(leases) = &self.leases
            && !leased.is_empty()
        {
            let keys: Vec<String> = leased.iter().map(|(_, sel)| Self::state_key(sel)).collect();
            let decided =
                futures_util::future::join_all(leased.iter().zip(&keys).map(|((at, sel), key)| {
                    let args = calls[*at].1;
                    let ask = Ask {
                        key,
                        max_amount: sel.limit.max_amount,
                        valid: sel.limit.valid_duration,
                        amount: args.amount,
                        best_effort: args.best_effort,
                        deduplication_id: &args.deduplication_id,
                    };
                    async move { leases.allocate(&ask).await }
                }))
                .await;
            for ((at, sel), decision) in leased.iter().zip(decided) {
                answers[*at] = Some(decision.map(|d| self.result(sel, calls[*at].1, 0, d)));
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

impl RedisQuotaHandler {
    /// Whether an allocation is served from a lease: a check of a fixed window without a
    /// minimum remaining (which needs what Redis has left, not what this replica holds). A
    /// deduplication id is remembered by the lease (see [`crate::lease`]).
    fn leasable(&self, sel: &Selected<'_>, take: Take, min_remaining: i64) -> bool {
        self.leases.is_some()
            && take == Take::Check
            && min_remaining == 0
            && sel.limit.algorithm == mixer_adapter_quota_common::Algorithm::FixedWindow
    }

    /// Runs the read-only [`scripts::PEEK`] for one counter, within the call budget (not
    /// through the breaker: a read for an operator neither opens nor closes it).
    async fn read_counter(&self, sel: &Selected<'_>) -> Result<(i64, Duration), AdapterError> {
        let (state_key, _, _) = self.keys(sel, &QuotaArgs::default());
        let mut invocation = self.peek_script.prepare_invoke();
        invocation
            .key(state_key)
            .arg(sel.limit.algorithm.tag())
            .arg(sel.limit.max_amount)
            .arg(micros(sel.limit.valid_duration))
            .arg(micros(sel.limit.bucket_duration).max(1));
        let budget = self.config.call_timeout;
        let answer = if self.cluster.is_some() {
            let deadline = tokio::time::Instant::now() + budget;
            let mut conn = loop {
                if let Some(conn) = self.cluster_connection() {
                    break conn;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(AdapterError::transient(
                        ErrorKind::Unavailable,
                        "redis cluster: not connected yet",
                    ));
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            };
            tokio::time::timeout_at(deadline, invocation.invoke_async::<Vec<i64>>(&mut conn)).await
        } else {
            let mut conn = self.link.connection()?;
            tokio::time::timeout(budget, invocation.invoke_async::<Vec<i64>>(&mut conn)).await
        };
        match answer {
            Ok(Ok(a)) if a.len() == 2 => Ok((
                a[0],
                Duration::from_micros(u64::try_from(a[1]).unwrap_or(0)),
            )),
            Ok(Ok(a)) => Err(AdapterError::transient(
                ErrorKind::InvalidResponse,
                format!(
                    "redis peek script answered {} integers, expected 2",
                    a.len()
                ),
            )),
            Ok(Err(e)) => Err(AdapterError::transient(
                ErrorKind::Unavailable,
                format!("redis: {e}"),
            )),
            Err(_) => Err(AdapterError::transient(
                ErrorKind::Timeout,
                format!(
                    "redis did not answer within callTimeout {}",
                    mixer_model::Duration::from_std(budget)
                ),
            )),
        }
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
            self.link.short_circuited(),
        );
        render_one(
            out,
            "mixer_redisquota_over_limit_with_local_cache_total",
            "counter",
            "Checks refused from the local over-limit cache, without Redis (envoyproxy/ratelimit's over_limit_with_local_cache).",
            &handler,
            self.over_limit.hits(),
        );
        let (calls, carried) = self.script_calls();
        render_one(
            out,
            "mixer_redisquota_script_calls_total",
            "counter",
            "Script calls sent to Redis; concurrent allocations are batched into one.",
            &handler,
            calls,
        );
        render_one(
            out,
            "mixer_redisquota_script_allocations_total",
            "counter",
            "Allocations and charges carried by those script calls.",
            &handler,
            carried,
        );
        let (lease_calls, returned) = self.lease_calls();
        render_one(
            out,
            "mixer_redisquota_lease_calls_total",
            "counter",
            "Script calls that took a block of a counter for this replica (leaseSize) or gave one back.",
            &handler,
            lease_calls,
        );
        render_one(
            out,
            "mixer_redisquota_lease_units_returned_total",
            "counter",
            "Leased units given back to Redis unused (idle leases, handler closed).",
            &handler,
            returned,
        );
        render_one(
            out,
            "mixer_redisquota_lease_remembered_ids",
            "gauge",
            "Deduplication ids whose answers the leases keep for retries (minDeduplicationDuration).",
            &handler,
            self.remembered_ids() as u64,
        );
        let state = self.link.breaker.state().gauge();
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
