//! Envoy's rate limit service: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
//! the gRPC service Envoy's `ratelimit` filters (HTTP and network) call for global rate limits.
//!
//! Wire it into a tonic server:
//!
//! ```no_run
//! # async fn run(runtime: std::sync::Arc<mixer_runtime::Runtime>) -> Result<(), Box<dyn std::error::Error>> {
//! tonic::transport::Server::builder()
//!     .add_service(mixer_frontends::ratelimit::service(runtime))
//!     .serve("127.0.0.1:9091".parse()?)
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! ## From a `RateLimitRequest` to quota calls
//!
//! Each descriptor of the request is decided on its own, in order, with a bag of its own:
//!
//! | attribute | type | taken from |
//! |---|---|---|
//! | `ratelimit.domain` | STRING | `domain` |
//! | `ratelimit.descriptor` | STRING_MAP | the descriptor's entries, `key -> value` (a key given twice keeps its first value) |
//! | `ratelimit.descriptor_keys` | STRING | the entry keys in order, joined with `.` (`remote_address.path`): the descriptor's shape, so a rule can require exactly that shape |
//! | `ratelimit.hits_addend` | INT64 | the descriptor's `hits_addend` if set, else the request's if not 0, else 1 |
//! | `context.time` | TIMESTAMP | the mixer's clock |
//!
//! and the bag goes to [`Snapshot::quota`](mixer_runtime::Snapshot::quota) asking for
//! `ratelimit.hits_addend` units (not best effort, no deduplication id), with the descriptor's
//! `limit` (requests per unit) as a [`LimitOverride`] when Envoy sent one. Every quota rule whose
//! match holds is applied; a descriptor no rule matches is granted (as envoyproxy/ratelimit
//! answers OK for a descriptor without a limit). Config written in envoyproxy/ratelimit's own
//! format (`kind: ratelimitconfig`, see `mixer-config`) becomes such rules: literal tests on
//! `ratelimit.domain`, `ratelimit.descriptor_keys` and `ratelimit.descriptor["key"]`, which the
//! rule index looks up instead of evaluating every rule.
//!
//! A descriptor's `limit` override replaces the limit of the quotas its rules select (memquota
//! and redisquota count it on a counter of its own, with the quota's algorithm and no shadow
//! mode, as envoyproxy/ratelimit does). Unlike envoyproxy/ratelimit, a descriptor that no rule
//! selects stays unlimited even with an override: rules decide which descriptors are counted
//! and where.
//!
//! Not supported: `is_negative_hits` (nothing can be handed back; such a descriptor is answered
//! OK without calling any handler).
//!
//! ## Answers
//!
//! | mixer outcome | `RateLimitResponse` |
//! |---|---|
//! | every descriptor granted | `overall_code` OK |
//! | some descriptor refused (any non-OK quota status) | `overall_code` OVER_LIMIT |
//! | each descriptor | one `DescriptorStatus`, in request order: `code` OK / OVER_LIMIT; `current_limit` (name, requests per unit, unit), `limit_remaining` and `duration_until_reset` as the most constraining quota handler counted them (see [`descriptor_status`]) |
//! | headers | `response_headers_to_add`: `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (whole seconds, rounded up), from the most constraining descriptor with a known limit |
//! | a handler failed closed, or no valid config yet | gRPC error UNAVAILABLE (see [`respond::could_not_decide`]) |
//! | empty `domain` or no descriptor | gRPC error INVALID_ARGUMENT (envoyproxy/ratelimit refuses them too) |
//! | a `limit` override with unit UNKNOWN | gRPC error INVALID_ARGUMENT |
//!
//! The limit is known when the handler reports it (memquota and redisquota do); `current_limit`
//! is left out when the window is not a whole second, minute, hour, day or week, since the
//! protocol cannot say it.

pub mod respond;

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use futures_util::future::try_join_all;
use mixer_adapter_api::{LimitOverride, Occasional, QuotaArgs};
use mixer_model::{AttributeBag, StringMap, Timestamp, Value};
use mixer_runtime::{Runtime, Snapshot};

pub use respond::{could_not_decide, descriptor_status, not_ready, response, window_of};

/// `ratelimit.domain`: the request's domain.
pub const DOMAIN: &str = "ratelimit.domain";
/// `ratelimit.descriptor`: the descriptor's entries, key -> value.
pub const DESCRIPTOR: &str = "ratelimit.descriptor";
/// `ratelimit.descriptor_keys`: the descriptor's entry keys in order, joined with `.`.
pub const DESCRIPTOR_KEYS: &str = "ratelimit.descriptor_keys";
/// `ratelimit.hits_addend`: the units the descriptor asks for.
pub const HITS_ADDEND: &str = "ratelimit.hits_addend";

/// The rate limit service: ready to add to a tonic server.
pub fn service(runtime: Arc<Runtime>) -> RateLimitServiceServer<RateLimit> {
    RateLimitServiceServer::new(RateLimit::new(runtime))
}

/// The `RateLimitService` implementation; [`service`] wraps it in its tonic server type.
#[derive(Clone)]
pub struct RateLimit {
    runtime: Arc<Runtime>,
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit").finish_non_exhaustive()
    }
}

impl RateLimit {
    /// A service deciding with `runtime`'s active snapshot.
    pub fn new(runtime: Arc<Runtime>) -> RateLimit {
        RateLimit { runtime }
    }

    /// Decides one request: the whole path from `RateLimitRequest` to `RateLimitResponse`,
    /// without the transport.
    pub async fn decide(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        if !self.runtime.is_ready() {
            return Err(not_ready());
        }
        if request.domain.is_empty() {
            return Err(tonic::Status::invalid_argument(
                "rate limit domain must not be empty",
            ));
        }
        if request.descriptors.is_empty() {
            return Err(tonic::Status::invalid_argument(
                "rate limit descriptor list must not be empty",
            ));
        }
        // One snapshot for the whole request, whatever reloads happen meanwhile.
        let snapshot = self.runtime.snapshot();
        let now = Timestamp::now();
        let one = |(i, d)| decide_descriptor(&snapshot, request, i, d, now);
        let statuses = if request.descriptors.len() == 1 {
            vec![one((0, &request.descriptors[0])).await?]
        } else {
            // Concurrently: redisquota's multiplexed connections then pipeline the descriptors'
            // scripts, so a request costs about one round trip however many it carries.
            try_join_all(request.descriptors.iter().enumerate().map(one)).await?
        };
        Ok(response(statuses))
    }
}

/// Decides one descriptor (the `i`th of `request`) with a bag of its own.
async fn decide_descriptor(
    snapshot: &Snapshot,
    request: &RateLimitRequest,
    i: usize,
    descriptor: &RateLimitDescriptor,
    now: Timestamp,
) -> Result<DescriptorStatus, tonic::Status> {
    if descriptor.is_negative_hits {
        // A refund: nothing to allocate, nothing to limit.
        return Ok(respond::granted_without_rule());
    }
    let hits = hits_addend(request, descriptor);
    let args = QuotaArgs {
        amount: hits,
        best_effort: false,
        deduplication_id: String::new(),
        limit_override: limit_override(descriptor).map_err(|unit| {
            let name = Unit::try_from(unit).map_or("not defined", |u| u.as_str_name());
            tonic::Status::invalid_argument(format!(
                "descriptors[{i}].limit.unit {unit} ({name}) has no length; use SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"
            ))
        })?,
    };
    let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
    fill_bag(&mut bag, &request.domain, descriptor, hits, now);
    match snapshot.quota(&bag, None, &args).await {
        Ok(outcome) => Ok(descriptor_status(&outcome)),
        // A handler failed closed (storage down...). UNAVAILABLE, so that Envoy's
        // `failure_mode_deny` decides; never an OK response by accident.
        Err(e) => {
            // Storage that is down fails every call: a line per interval, not per call.
            static FAILED: Occasional = Occasional::new(Duration::from_secs(10));
            if let Some(held_back) = FAILED.due() {
                tracing::warn!(held_back, "ratelimit: {e}");
            }
            Err(could_not_decide(&e))
        }
    }
}

/// The units a descriptor asks for: its own `hits_addend` when set, else the request's when
/// not 0, else 1 (Envoy's defaults). Saturates at `i64::MAX`.
pub fn hits_addend(request: &RateLimitRequest, descriptor: &RateLimitDescriptor) -> i64 {
    match &descriptor.hits_addend {
        Some(h) => i64::try_from(h.value).unwrap_or(i64::MAX),
        None if request.hits_addend > 0 => i64::from(request.hits_addend),
        None => 1,
    }
}

/// The descriptor's `limit` override, if any; `Err` with the unit's number when the unit has no
/// length (UNKNOWN, or a number this protocol version does not define).
pub fn limit_override(descriptor: &RateLimitDescriptor) -> Result<Option<LimitOverride>, i32> {
    let Some(limit) = &descriptor.limit else {
        return Ok(None);
    };
    // `envoy.type.v3.RateLimitUnit` numbers its units as the response's `Unit` does.
    let window = Unit::try_from(limit.unit)
        .ok()
        .and_then(window_of)
        .ok_or(limit.unit)?;
    Ok(Some(LimitOverride {
        max_amount: i64::from(limit.requests_per_unit),
        window,
    }))
}

/// Fills `bag` with one descriptor's attributes (see the module documentation).
pub fn fill_bag(
    bag: &mut AttributeBag,
    domain: &str,
    descriptor: &RateLimitDescriptor,
    hits: i64,
    now: Timestamp,
) {
    let keys: Vec<&str> = descriptor.entries.iter().map(|e| e.key.as_str()).collect();
    let entries = StringMap::from_pairs(
        descriptor
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str())),
    );
    // The attributes are in the standard vocabulary with these types, so setting cannot fail;
    // a vocabulary that redeclared them otherwise would only lose them.
    let _ = bag.set(DOMAIN, Value::from(domain));
    let _ = bag.set(DESCRIPTOR, Value::from(entries));
    let _ = bag.set(DESCRIPTOR_KEYS, Value::from(keys.join(".")));
    let _ = bag.set(HITS_ADDEND, Value::Int64(hits));
    let _ = bag.set("context.time", Value::Timestamp(now));
}

#[tonic::async_trait]
impl RateLimitService for RateLimit {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        self.decide(request.get_ref())
            .await
            .map(tonic::Response::new)
    }
}
