//! Envoy's rate limit quota service (RLQS):
//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`, what
//! Envoy's `envoy.filters.http.rate_limit_quota` filter streams its bucket usage to.
//!
//! No call per request: each proxy counts requests in its own buckets, reports their usage
//! on one long-lived stream (every `reporting_interval`), and applies the assignments this
//! service sends back for as long as their time to live. The service splits each global
//! limit across the proxies that report its bucket by what each asked for
//! ([`fair_share`]). The demands are this process's ([`Rlqs::new`]), or every replica's in
//! Redis ([`Rlqs::shared`], [`shared_state`]: `serve --shared-cache`; without it,
//! [`Rlqs::with_handler_redis`], [`handler_redis`]: the Redis of the limit's redisquota
//! handler), where a Redis that fails leaves the limited buckets of a report without a new
//! assignment.
//!
//! ## From a bucket to a limit
//!
//! Each bucket of a report is looked up on its own, with a bag holding:
//!
//! | attribute | type | taken from |
//! |---|---|---|
//! | `rlqs.domain`, `ratelimit.domain` | STRING | the report's `domain` |
//! | `rlqs.bucket`, `ratelimit.descriptor` | STRING_MAP | the bucket id's `bucket` map |
//! | `rlqs.bucket_keys`, `ratelimit.descriptor_keys` | STRING | the bucket id's keys, sorted, joined with `.` |
//! | `rlqs.proxy` | STRING | the stream's `x-rlqs-proxy-id` metadata (Envoy's `grpc_service.initial_metadata`), else `stream-<n>` |
//! | `context.time` | TIMESTAMP | the mixer's clock |
//!
//! The `ratelimit.*` attributes make a bucket match the same quota rules as an Envoy rate
//! limit descriptor with those entries, so one `ratelimitconfig` limits a bucket `{name:
//! shared}` of domain `rlqs` and the descriptor `(name, shared)` of domain `rlqs` alike (a
//! nested descriptor must list its keys in sorted order to match a bucket with several
//! keys). Rules written for RLQS can test `rlqs.*` instead.
//!
//! The bag goes, after the attribute generators, to the quota rules; the quota handlers of
//! the instances selected are asked for nothing (amount 0: nothing is counted, and no
//! round trip is made) to learn the limit (`max_amount` per `window`). The smallest limit in
//! requests per second is the bucket's.
//!
//! ## Answers
//!
//! | the bucket | `BucketAction` |
//! |---|---|
//! | has a limit | `quota_assignment_action`: `requests_per_time_unit`, the proxy's fair share in the limit's unit (SECOND, MINUTE, HOUR, DAY; per SECOND for other windows), at least 1, with a time to live |
//! | has a limit of 0 (configured so) | `quota_assignment_action`: `blanket_rule: DENY_ALL`: the config says so |
//! | matches only `unlimited` limits | `quota_assignment_action`: `blanket_rule: ALLOW_ALL` |
//! | had an assignment on this stream and now matches no limit (removed by a reload) | `abandon_action` |
//! | matches no limit, no valid config yet, a handler failed | nothing: the proxy's own `no_assignment_behavior` (or `expired_assignment_behavior`, once an earlier assignment expires) decides. Never DENY_ALL, never a zero rate, and the stream stays open |
//!
//! A report that asks nothing of the service gets no message, except the stream's first
//! report, answered at once with an empty message when there is nothing to say (the
//! response's headers then go out: the mixer's gRPC server sends them with the first
//! message). The time to live is three
//! reporting intervals (the longest `time_elapsed` reported on the stream), between 2 s and
//! 180 s: a proxy keeps its share through a missed report, and a replica or Redis that goes
//! away leaves the proxies' own expired-assignment behaviour in charge soon after.
//!
//! ## Bounds
//!
//! * [`MAX_BUCKETS_PER_STREAM`] buckets are tracked per stream; further new buckets get no
//!   assignment (the proxy's `no_assignment_behavior` applies to them).
//! * A report's usages past [`MAX_BUCKETS_PER_STREAM`] are ignored.
//! * Reports closer than [`MIN_REPORT_GAP`] to the last one answered are skipped unless they
//!   name a bucket new to the stream: a stream that reports every microsecond costs little.
//! * Counts are taken as they come (`u64`) and added with saturation; a demand is clamped to
//!   [`fair_share::MAX_DEMAND_PER_SECOND`], `time_elapsed` to [0.05 s, 1 h].
//! * A message that does not decode ends that stream with INVALID_ARGUMENT; other streams are
//!   unaffected. An `x-rlqs-proxy-id` longer than [`MAX_PROXY_ID_BYTES`] is refused
//!   (INVALID_ARGUMENT) before anything is read.

pub mod fair_share;
pub mod handler_redis;
pub mod shared_state;

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::r#type::v3::RateLimitStrategy;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{
    BlanketRule, RequestsPerTimeUnit, Strategy,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    self, AbandonAction, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use futures_util::Stream;
use mixer_adapter_api::QuotaArgs;
use mixer_model::{AttributeBag, StringMap, Timestamp, Value};
use mixer_runtime::{Runtime, Snapshot};
use tonic::{Code, Request, Response, Status, Streaming};

use fair_share::{Demands, Reported};
use handler_redis::HandlerRedis;
use shared_state::{Asked, SharedDemands};

/// `rlqs.domain`: the report's domain.
pub const DOMAIN: &str = "rlqs.domain";
/// `rlqs.bucket`: the bucket id, key -> value.
pub const BUCKET: &str = "rlqs.bucket";
/// `rlqs.bucket_keys`: the bucket id's keys, sorted, joined with `.`.
pub const BUCKET_KEYS: &str = "rlqs.bucket_keys";
/// `rlqs.proxy`: the reporting proxy.
pub const PROXY: &str = "rlqs.proxy";

/// The metadata (request header) naming the reporting proxy, so that its share survives a
/// reconnection (to this replica or another).
pub const PROXY_ID_HEADER: &str = "x-rlqs-proxy-id";
/// The longest proxy id accepted.
pub const MAX_PROXY_ID_BYTES: usize = 256;
/// Buckets one stream may have tracked, and usages of one report looked at.
pub const MAX_BUCKETS_PER_STREAM: usize = 1000;
/// The shortest gap between two reports of a stream that are both answered (unless the
/// later names a new bucket).
pub const MIN_REPORT_GAP: Duration = Duration::from_millis(100);
/// Bounds of an assignment's time to live.
pub const TTL_BOUNDS: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(180));
/// Reporting intervals an assignment lasts.
const TTL_INTERVALS: u32 = 3;
/// Bounds of a reported `time_elapsed`.
const ELAPSED_BOUNDS: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(3600));

/// The service, ready to add to a tonic server.
pub fn service(runtime: Arc<Runtime>) -> RateLimitQuotaServiceServer<Rlqs> {
    RateLimitQuotaServiceServer::new(Rlqs::new(runtime))
}

/// The `RateLimitQuotaService` implementation: the demands of every stream of this process,
/// or of every replica's when they live in Redis.
#[derive(Clone)]
pub struct Rlqs {
    runtime: Arc<Runtime>,
    demands: Arc<Demands>,
    shared: Option<Arc<SharedDemands>>,
    /// Without `shared`: the tables in the Redis servers redisquota handlers name.
    handler_redis: Option<Arc<HandlerRedis>>,
    streams: Arc<AtomicU64>,
}

impl std::fmt::Debug for Rlqs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rlqs").finish_non_exhaustive()
    }
}

impl Rlqs {
    /// A service deciding with `runtime`'s active snapshot, its demands in memory.
    pub fn new(runtime: Arc<Runtime>) -> Rlqs {
        Rlqs {
            runtime,
            demands: Arc::new(Demands::new()),
            shared: None,
            handler_redis: None,
            streams: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A service whose demands live in Redis ([`shared_state`]): shares agree across the
    /// replicas that use the same table, and a proxy keeps its share when it reconnects to
    /// another replica.
    pub fn shared(runtime: Arc<Runtime>, shared: SharedDemands) -> Rlqs {
        Rlqs {
            shared: Some(Arc::new(shared)),
            ..Rlqs::new(runtime)
        }
    }

    /// A service whose demands for a limit live in the Redis of the limit's redisquota
    /// handler ([`handler_redis`]), and in this process for other limits.
    pub fn with_handler_redis(runtime: Arc<Runtime>, handler_redis: HandlerRedis) -> Rlqs {
        Rlqs {
            handler_redis: Some(Arc::new(handler_redis)),
            ..Rlqs::new(runtime)
        }
    }

    /// This service, ready to add to a tonic server.
    pub fn into_service(self) -> RateLimitQuotaServiceServer<Rlqs> {
        RateLimitQuotaServiceServer::new(self)
    }

    /// Opens a stream for `proxy` (or a name of its own when `None`): what it answers to each
    /// report is [`ReportStream::answer`].
    pub fn open(&self, proxy: Option<&str>) -> ReportStream {
        let serial = self.streams.fetch_add(1, Ordering::Relaxed) + 1;
        let proxy: Arc<str> = match proxy {
            Some(p) => p.into(),
            None => format!("stream-{serial}").into(),
        };
        ReportStream {
            runtime: self.runtime.clone(),
            demands: self.demands.clone(),
            shared: self.shared.clone(),
            handler_redis: self.handler_redis.clone(),
            serial,
            proxy,
            buckets: HashMap::new(),
            answered_at: None,
            interval: Duration::from_secs(1),
        }
    }
}

/// What a stream knows of one of its buckets.
#[derive(Clone, Debug, Default)]
struct BucketState {
    /// The limit key its last assignment was computed under, if it had one, and the table
    /// in Redis that holds its demand (`None`: this process's).
    assigned_under: Option<(Arc<str>, Option<Arc<SharedDemands>>)>,
}

/// A limit key and the Redis table its demands are in (`None`: this process's).
type Placed = (Arc<str>, Option<Arc<SharedDemands>>);

/// One proxy's stream: its buckets and when it last got an answer. Dropped when the stream
/// ends, giving its shares back.
pub struct ReportStream {
    runtime: Arc<Runtime>,
    demands: Arc<Demands>,
    /// The table in Redis every demand lives in (`--shared-cache`).
    shared: Option<Arc<SharedDemands>>,
    /// Without `shared`: the tables of the redisquota handlers' Redis servers.
    handler_redis: Option<Arc<HandlerRedis>>,
    serial: u64,
    proxy: Arc<str>,
    buckets: HashMap<String, BucketState>,
    answered_at: Option<Instant>,
    interval: Duration,
}

impl std::fmt::Debug for ReportStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReportStream")
            .field("proxy", &self.proxy)
            .field("buckets", &self.buckets.len())
            .finish_non_exhaustive()
    }
}

impl Drop for ReportStream {
    fn drop(&mut self) {
        let keys: Vec<Placed> = self
            .buckets
            .values()
            .filter_map(|b| b.assigned_under.clone())
            .collect();
        self.forget(&keys);
    }
}

/// A bucket id as one string: its entries sorted by key, so that the same map always names
/// the same bucket.
fn bucket_key(id: &BucketId) -> String {
    let mut entries: Vec<(&String, &String)> = id.bucket.iter().collect();
    entries.sort();
    let mut key = String::new();
    for (k, v) in entries {
        // Lengths first, so that no key or value can be mistaken for a separator.
        key.push_str(&format!("{}:{k}={}:{v};", k.len(), v.len()));
    }
    key
}

/// What a report's bucket will be answered.
enum Planned {
    /// This action.
    Action(bucket_action::BucketAction),
    /// An assignment of its share of a limit (in the limit's unit).
    Share {
        bucket: String,
        window: Duration,
        asked: Asked,
        table: Option<Arc<SharedDemands>>,
    },
}

/// What one bucket's lookup came to.
enum Lookup {
    /// A limit, in requests per second, its window, and its key.
    Limited {
        per_second: f64,
        window: Duration,
        key: Arc<str>,
        /// The Redis table its demands are in (`None`: this process's).
        table: Option<Arc<SharedDemands>>,
    },
    /// A limit of zero, as configured.
    Blocked,
    /// Only `unlimited` limits.
    Unlimited,
    /// No limit names it.
    Unknown,
    /// The lookup failed (a generator or handler failed closed): nothing is said.
    Undecided,
}

impl ReportStream {
    /// The proxy this stream reports for.
    pub fn proxy(&self) -> &str {
        &self.proxy
    }

    /// Answers one report: `None` when it asks nothing of the service (skipped as too soon,
    /// only unknown buckets, no valid config).
    pub async fn answer(
        &mut self,
        report: &RateLimitQuotaUsageReports,
        now: Instant,
    ) -> Option<RateLimitQuotaResponse> {
        let usages = &report.bucket_quota_usages
            [..report.bucket_quota_usages.len().min(MAX_BUCKETS_PER_STREAM)];
        let too_soon = self
            .answered_at
            .is_some_and(|at| now.saturating_duration_since(at) < MIN_REPORT_GAP);
        let since_last = self.answered_at.map(|at| now.saturating_duration_since(at));
        // A new bucket is answered at once (Envoy reports a bucket as soon as its first
        // request arrives), as long as the stream has room for it.
        let room = self.buckets.len() < MAX_BUCKETS_PER_STREAM;
        if too_soon
            && !(room
                && usages.iter().any(|u| {
                    u.bucket_id
                        .as_ref()
                        .is_some_and(|id| !self.buckets.contains_key(&bucket_key(id)))
                }))
        {
            return None;
        }
        let snapshot = match self.runtime.ready_snapshot() {
            Ok(s) => s,
            Err(_) => return None,
        };
        self.answered_at = Some(now);
        self.demands.prune_if_due(now);
        for usage in usages {
            if let Some(e) = usage.time_elapsed.as_ref().and_then(elapsed_of) {
                self.interval = self.interval.max(e);
            }
        }
        let ttl = (self.interval * TTL_INTERVALS).clamp(TTL_BOUNDS.0, TTL_BOUNDS.1);
        let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
        let mut seen = HashSet::new();
        // Each bucket's action, or the share it needs: the shares are decided together
        // below (one round trip when the demands live in Redis).
        let mut planned: Vec<(&BucketId, Planned)> = Vec::new();
        let mut abandoned = Vec::new();
        for usage in usages {
            let Some(id) = usage.bucket_id.as_ref().filter(|id| !id.bucket.is_empty()) else {
                continue;
            };
            let key = bucket_key(id);
            if !seen.insert(key.clone()) {
                continue;
            }
            if !self.buckets.contains_key(&key) && self.buckets.len() >= MAX_BUCKETS_PER_STREAM {
                continue;
            }
            let lookup = self
                .look_up(&snapshot, &mut bag, &report.domain, id, &key)
                .await;
            let state = self.buckets.entry(key.clone()).or_default();
            let plan = match lookup {
                Lookup::Limited {
                    per_second,
                    window,
                    key: limit_key,
                    table,
                } => {
                    let elapsed = usage
                        .time_elapsed
                        .as_ref()
                        .and_then(elapsed_of)
                        .or(since_last)
                        .unwrap_or(self.interval)
                        .clamp(ELAPSED_BOUNDS.0, ELAPSED_BOUNDS.1);
                    let asked = usage
                        .num_requests_allowed
                        .saturating_add(usage.num_requests_denied);
                    Planned::Share {
                        bucket: key,
                        window,
                        asked: Asked {
                            limit_key,
                            limit: per_second,
                            demand: fair_share::sane(asked as f64 / elapsed.as_secs_f64()),
                        },
                        table,
                    }
                }
                Lookup::Blocked => {
                    state.assigned_under = None;
                    Planned::Action(assignment(
                        Strategy::BlanketRule(BlanketRule::DenyAll as i32),
                        ttl,
                    ))
                }
                Lookup::Unlimited => {
                    state.assigned_under = None;
                    Planned::Action(assignment(
                        Strategy::BlanketRule(BlanketRule::AllowAll as i32),
                        ttl,
                    ))
                }
                Lookup::Unknown => match state.assigned_under.take() {
                    // The limit it had is gone (a reload removed it): the proxy drops the
                    // assignment and goes back to its own no-assignment behaviour.
                    Some(old) => {
                        abandoned.push(old);
                        Planned::Action(bucket_action::BucketAction::AbandonAction(
                            AbandonAction {},
                        ))
                    }
                    None => continue,
                },
                Lookup::Undecided => continue,
            };
            planned.push((id, plan));
        }
        self.forget(&abandoned);
        let asked: Vec<(Asked, Option<Arc<SharedDemands>>)> = planned
            .iter()
            .filter_map(|(_, p)| match p {
                Planned::Share { asked, table, .. } => Some((asked.clone(), table.clone())),
                Planned::Action(_) => None,
            })
            .collect();
        // Without a grant (its Redis failed), a limited bucket gets nothing new: the proxy's
        // assignment runs out into its own expired-assignment behaviour, never DENY_ALL.
        let mut grants = self.grants(&asked, ttl, now).await.into_iter();
        let mut actions = Vec::new();
        for (id, plan) in planned {
            let action = match plan {
                Planned::Action(action) => action,
                Planned::Share {
                    bucket,
                    window,
                    asked,
                    table,
                } => {
                    let Some(share) = grants.next().flatten() else {
                        continue;
                    };
                    if let Some(state) = self.buckets.get_mut(&bucket) {
                        state.assigned_under = Some((asked.limit_key, table));
                    }
                    assignment(per_unit(share, window), ttl)
                }
            };
            actions.push(BucketAction {
                bucket_id: Some(id.clone()),
                bucket_action: Some(action),
            });
        }
        (!actions.is_empty()).then_some(RateLimitQuotaResponse {
            bucket_action: actions,
        })
    }

    /// This proxy's grants, one per `asked`, each from the table its demand is in (one round
    /// trip per Redis table); `None` for those whose Redis failed.
    async fn grants(
        &self,
        asked: &[(Asked, Option<Arc<SharedDemands>>)],
        ttl: Duration,
        now: Instant,
    ) -> Vec<Option<f64>> {
        let mut grants = vec![None; asked.len()];
        let mut done = vec![false; asked.len()];
        for i in 0..asked.len() {
            if done[i] {
                continue;
            }
            let table = &asked[i].1;
            let same: Vec<usize> = (i..asked.len())
                .filter(|j| !done[*j] && same_table(&asked[*j].1, table))
                .collect();
            for j in &same {
                done[*j] = true;
            }
            match table {
                Some(table) => {
                    let batch: Vec<Asked> = same.iter().map(|j| asked[*j].0.clone()).collect();
                    let tag = table.stream_tag(self.serial);
                    if let Ok(got) = table.shares(&self.proxy, &tag, ttl, &batch).await {
                        for (j, g) in same.iter().zip(got) {
                            grants[*j] = Some(g);
                        }
                    }
                }
                None => {
                    for j in same {
                        let a = &asked[j].0;
                        grants[j] = Some(self.demands.share(
                            Reported {
                                limit_key: &a.limit_key,
                                limit: a.limit,
                                proxy: &self.proxy,
                                stream: self.serial,
                                demand: a.demand,
                                ttl,
                            },
                            now,
                        ));
                    }
                }
            }
        }
        grants
    }

    /// Gives back this stream's shares of `limit_keys`, each in the table it is in.
    fn forget(&self, limit_keys: &[Placed]) {
        let mut done = vec![false; limit_keys.len()];
        for i in 0..limit_keys.len() {
            if done[i] {
                continue;
            }
            let table = &limit_keys[i].1;
            let mut keys = Vec::new();
            for j in i..limit_keys.len() {
                if !done[j] && same_table(&limit_keys[j].1, table) {
                    done[j] = true;
                    keys.push(limit_keys[j].0.clone());
                }
            }
            match table {
                Some(table) => table.forget(&self.proxy, &table.stream_tag(self.serial), &keys),
                None => self.demands.forget(&self.proxy, self.serial, &keys),
            }
        }
    }

    /// The limit of one bucket (see the module documentation).
    async fn look_up(
        &self,
        snapshot: &Snapshot,
        bag: &mut AttributeBag,
        domain: &str,
        id: &BucketId,
        key: &str,
    ) -> Lookup {
        bag.clear();
        fill_bag(bag, domain, id, &self.proxy, Timestamp::now());
        // A lookup decides nothing: matching dry-run rules are not counted.
        let plan = mixer_runtime::quota::plan_preprocessed(snapshot, &*bag, None)
            .await
            .without_dry_runs();
        // `--shared-cache` wins; else the Redis of the limit's redisquota handler, if any.
        let table = match (&self.shared, &self.handler_redis) {
            (Some(shared), _) => Some(shared.clone()),
            (None, Some(handlers)) => handlers.for_plan(snapshot, &plan),
            (None, None) => None,
        };
        let args = QuotaArgs {
            amount: 0,
            best_effort: true,
            deduplication_id: String::new(),
            limit_override: None,
        };
        let outcome = mixer_runtime::quota::allocate(snapshot, vec![(plan, &args)], &[])
            .await
            .pop();
        let outcome = match outcome {
            Some(Ok(o)) => o,
            Some(Err(e)) => {
                tracing::debug!(bucket = %key, "rlqs: no assignment, the lookup failed: {e}");
                return Lookup::Undecided;
            }
            None => return Lookup::Undecided,
        };
        if outcome.unlimited {
            return Lookup::Unlimited;
        }
        if outcome.instances.is_empty() {
            return Lookup::Unknown;
        }
        let Some(limit) = outcome.result.limit else {
            // A handler that cannot say its limit (out of process): nothing to split.
            return Lookup::Undecided;
        };
        if limit.max_amount <= 0 {
            return Lookup::Blocked;
        }
        let window = limit.window.max(Duration::from_millis(1));
        Lookup::Limited {
            per_second: limit.max_amount as f64 / window.as_secs_f64(),
            window,
            key: format!("{}\n{domain}\n{key}", limit.name).into(),
            table,
        }
    }
}

/// Whether two demand tables are the same one (`None`: this process's).
fn same_table(a: &Option<Arc<SharedDemands>>, b: &Option<Arc<SharedDemands>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Fills `bag` with one bucket's attributes (see the module documentation).
pub fn fill_bag(bag: &mut AttributeBag, domain: &str, id: &BucketId, proxy: &str, now: Timestamp) {
    let mut keys: Vec<&str> = id.bucket.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let keys = keys.join(".");
    let entries = StringMap::from_pairs(id.bucket.iter());
    // The attributes are in the standard vocabulary with these types, so setting cannot fail;
    // a vocabulary that redeclared them otherwise would only lose them.
    let _ = bag.set(DOMAIN, Value::from(domain));
    let _ = bag.set(BUCKET, Value::from(entries.clone()));
    let _ = bag.set(BUCKET_KEYS, Value::from(keys.as_str()));
    let _ = bag.set(PROXY, Value::from(proxy));
    let _ = bag.set(crate::ratelimit::DOMAIN, Value::from(domain));
    let _ = bag.set(crate::ratelimit::DESCRIPTOR, Value::from(entries));
    let _ = bag.set(
        crate::ratelimit::DESCRIPTOR_KEYS,
        Value::from(keys.as_str()),
    );
    let _ = bag.set("context.time", Value::Timestamp(now));
}

/// A reported `time_elapsed`, when it is a positive span.
fn elapsed_of(d: &ProtoDuration) -> Option<Duration> {
    let seconds = u64::try_from(d.seconds).ok()?;
    let nanos = u32::try_from(d.nanos).ok().filter(|n| *n < 1_000_000_000)?;
    let elapsed = Duration::new(seconds.min(ELAPSED_BOUNDS.1.as_secs()), nanos);
    (!elapsed.is_zero()).then_some(elapsed)
}

/// `share` requests per second as `requests_per_time_unit` in the limit's own unit when it
/// has one, else per second; never below 1 (a zero rate would deny everything).
pub fn per_unit(share: f64, window: Duration) -> Strategy {
    let (unit, seconds) = match window.as_secs() {
        60 => (RateLimitUnit::Minute, 60.0),
        3600 => (RateLimitUnit::Hour, 3600.0),
        86_400 => (RateLimitUnit::Day, 86_400.0),
        _ => (RateLimitUnit::Second, 1.0),
    };
    let unit = if window.subsec_nanos() == 0 {
        (unit, seconds)
    } else {
        (RateLimitUnit::Second, 1.0)
    };
    let requests = (share * unit.1).floor();
    // `as` saturates a float too large for u64, and NaN becomes 0 (then 1).
    let requests = (requests as u64).max(1);
    Strategy::RequestsPerTimeUnit(RequestsPerTimeUnit {
        requests_per_time_unit: requests,
        time_unit: unit.0 as i32,
    })
}

/// An assignment of `strategy` for `ttl`.
fn assignment(strategy: Strategy, ttl: Duration) -> bucket_action::BucketAction {
    bucket_action::BucketAction::QuotaAssignmentAction(QuotaAssignmentAction {
        assignment_time_to_live: Some(ProtoDuration {
            seconds: i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(ttl.subsec_nanos()).unwrap_or(0),
        }),
        rate_limit_strategy: Some(RateLimitStrategy {
            strategy: Some(strategy),
        }),
    })
}

/// The stream of answers tonic sends back.
type Answers = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for Rlqs {
    type StreamRateLimitQuotasStream = Answers;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Answers>, Status> {
        let proxy = match request.metadata().get(PROXY_ID_HEADER) {
            None => None,
            Some(v) => Some(proxy_id(v.as_bytes())?),
        };
        let stream = self.open(proxy.as_deref());
        let reports = request.into_inner();
        let first = Some((stream, reports, false));
        let answers = futures_util::stream::unfold(first, |state| async move {
            let (mut stream, mut reports, answered) = state?;
            loop {
                match reports.message().await {
                    Ok(Some(report)) => {
                        let answer = stream.answer(&report, Instant::now()).await;
                        // The first report is always answered, if only with no action, so
                        // that the response's headers go out (a client such as tonic's waits
                        // for them before it reads anything).
                        let answer =
                            answer.or_else(|| (!answered).then(RateLimitQuotaResponse::default));
                        if let Some(answer) = answer {
                            return Some((Ok(answer), Some((stream, reports, true))));
                        }
                    }
                    Ok(None) => return None,
                    Err(status) => {
                        tracing::debug!(proxy = %stream.proxy(), "rlqs stream failed: {}", status.message());
                        return Some((Err(stream_error(status)), None));
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(answers)))
    }
}

/// The `x-rlqs-proxy-id` value, when it is a usable name.
fn proxy_id(value: &[u8]) -> Result<String, Status> {
    if value.is_empty() || value.len() > MAX_PROXY_ID_BYTES {
        return Err(Status::invalid_argument(format!(
            "{PROXY_ID_HEADER} must be 1 to {MAX_PROXY_ID_BYTES} bytes, not {}",
            value.len()
        )));
    }
    std::str::from_utf8(value)
        .map(str::to_owned)
        .map_err(|_| Status::invalid_argument(format!("{PROXY_ID_HEADER} must be UTF-8")))
}

/// A message that does not decode is the client's fault: INVALID_ARGUMENT (tonic says
/// INTERNAL).
fn stream_error(status: Status) -> Status {
    match status.code() {
        Code::Internal => Status::invalid_argument(format!(
            "a usage report does not decode: {}",
            status.message()
        )),
        _ => status,
    }
}

#[cfg(test)]
mod tests;
