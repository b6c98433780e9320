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
//! `ratelimit.hits_addend` units (not best effort, no deduplication id). Every quota rule whose
//! match holds is applied; a descriptor no rule matches is granted (as envoyproxy/ratelimit
//! answers OK for a descriptor without a limit). Config written in envoyproxy/ratelimit's own
//! format (`kind: ratelimitconfig`, see `mixer-config`) becomes such rules: literal tests on
//! `ratelimit.domain`, `ratelimit.descriptor_keys` and `ratelimit.descriptor["key"]`, which the
//! rule index looks up instead of evaluating every rule.
//!
//! Not supported: a descriptor's `limit` override (the configured limit applies) and
//! `is_negative_hits` (nothing can be handed back; such a descriptor is answered OK without
//! calling any handler).
//!
//! ## Answers
//!
//! | mixer outcome | `RateLimitResponse` |
//! |---|---|
//! | every descriptor granted | `overall_code` OK |
//! | some descriptor refused (any non-OK quota status) | `overall_code` OVER_LIMIT |
//! | each descriptor | one `DescriptorStatus`, in request order: `code` OK / OVER_LIMIT; `current_limit` when the limit is known (see [`respond::Limits`]); `limit_remaining` 0 (see below); `duration_until_reset` = the grant's `valid_duration` when a handler answered |
//! | headers | `response_headers_to_add`: `X-RateLimit-Limit`, `X-RateLimit-Remaining` (only when known: 0 when over the limit), `X-RateLimit-Reset` (seconds), from the most constraining descriptor with a known limit |
//! | a handler failed closed, or no valid config yet | gRPC error UNAVAILABLE (see [`respond::could_not_decide`]) |
//! | empty `domain` or no descriptor | gRPC error INVALID_ARGUMENT (envoyproxy/ratelimit refuses them too) |
//!
//! What the quota handlers answer today (`QuotaResult`: status, valid duration, granted amount)
//! does not say how much of the limit is left, so `limit_remaining` is 0 and the
//! `X-RateLimit-Remaining` header is only sent for a descriptor over its limit.

pub mod respond;

use std::sync::{Arc, Mutex};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use mixer_adapter_api::QuotaArgs;
use mixer_model::{AttributeBag, StringMap, Timestamp, Value};
use mixer_runtime::{Runtime, Snapshot};

pub use respond::{Limits, could_not_decide, descriptor_status, not_ready, response};

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

/// The limits of the snapshot with this id.
type LimitsOf = (u64, Arc<Limits>);

/// The `RateLimitService` implementation; [`service`] wraps it in its tonic server type.
#[derive(Clone)]
pub struct RateLimit {
    runtime: Arc<Runtime>,
    /// The limits known for the active snapshot, rebuilt when the snapshot changes.
    limits: Arc<Mutex<Option<LimitsOf>>>,
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit").finish_non_exhaustive()
    }
}

impl RateLimit {
    /// A service deciding with `runtime`'s active snapshot.
    pub fn new(runtime: Arc<Runtime>) -> RateLimit {
        RateLimit {
            runtime,
            limits: Arc::new(Mutex::new(None)),
        }
    }

    fn limits(&self, snapshot: &Snapshot) -> Arc<Limits> {
        let mut cached = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        match &*cached {
            Some((id, limits)) if *id == snapshot.id => limits.clone(),
            _ => {
                let limits = Arc::new(Limits::of(snapshot));
                *cached = Some((snapshot.id, limits.clone()));
                limits
            }
        }
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
        let limits = self.limits(&snapshot);
        let now = Timestamp::now();
        let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
        let mut statuses = Vec::with_capacity(request.descriptors.len());
        for descriptor in &request.descriptors {
            if descriptor.is_negative_hits {
                // A refund: nothing to allocate, nothing to limit.
                statuses.push(respond::granted_without_rule());
                continue;
            }
            let hits = hits_addend(request, descriptor);
            bag.clear();
            fill_bag(&mut bag, &request.domain, descriptor, hits, now);
            let args = QuotaArgs {
                amount: hits,
                best_effort: false,
                deduplication_id: String::new(),
            };
            match snapshot.quota(&bag, None, &args).await {
                Ok(outcome) => statuses.push(descriptor_status(&outcome, &limits)),
                // A handler failed closed (storage down...). UNAVAILABLE, so that Envoy's
                // `failure_mode_deny` decides; never an OK response by accident.
                Err(e) => {
                    tracing::warn!("ratelimit: {e}");
                    return Err(could_not_decide(&e));
                }
            }
        }
        Ok(response(statuses))
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
