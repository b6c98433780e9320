//! Envoy's rate limit service: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
//! the gRPC service Envoy's `ratelimit` filters (HTTP and network) call for global rate limits.
//!
//! Served by the mixer's gRPC server ([`crate::grpc::unary_methods`]): the request's limits
//! counted on the wire ([`check_encoded_limits`]), then [`RateLimit::decide`].
//!
//! ## From a `RateLimitRequest` to quota calls
//!
//! Each descriptor of the request is decided on its own, in order, with the request's bag
//! (pooled, as every check front end's) holding that descriptor's attributes alone:
//!
//! | attribute | type | taken from |
//! |---|---|---|
//! | `ratelimit.domain` | STRING | `domain` |
//! | `ratelimit.descriptor` | STRING_MAP | the descriptor's entries, `key -> value` (a key given twice keeps its first value) |
//! | `ratelimit.descriptor_keys` | STRING | the entry keys in order, joined with `.` (`remote_address.path`): the descriptor's shape, so a rule can require exactly that shape |
//! | `ratelimit.hits_addend` | INT64 | the descriptor's `hits_addend` if set, else the request's if not 0, else 1 |
//! | `context.time` | TIMESTAMP | the mixer's clock |
//!
//! and the bag goes, after the attribute generators, to
//! [`quota::plan_preprocessed`](mixer_runtime::quota::plan_preprocessed) asking for
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
//! Limits written in envoyproxy/ratelimit's format keep its semantics beyond counting (see
//! [`decide_on`]): a limit another limit of the same request `replaces` is neither applied nor
//! counted; an `unlimited` one is answered OK with `limit_remaining` at `u32::MAX` without a
//! handler; `quota_mode` descriptors over their limit refuse the request only when all of them
//! are (see [`response_of`]).
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
//! | a handler failed closed, or no valid config yet | gRPC error UNAVAILABLE, so that Envoy's `failure_mode_deny` decides |
//! | a quota instance cannot be built from a descriptor | gRPC error INTERNAL, as Istio 1.4 answers an instance it cannot build |
//! | empty `domain` or no descriptor | gRPC error INVALID_ARGUMENT (envoyproxy/ratelimit refuses them too) |
//! | a `limit` override with unit UNKNOWN | gRPC error INVALID_ARGUMENT |
//! | more descriptors than `--max-ratelimit-descriptors` (64), or a descriptor with more entries than `--max-descriptor-entries` (64) | gRPC error INVALID_ARGUMENT naming the limit and its flag, counted on the wire before the request is decoded ([`check_encoded_limits`]), so that such a request costs a pass over its bytes and nothing else |
//!
//! The limit is known when the handler reports it (memquota and redisquota do); `current_limit`
//! is left out when the window is not a whole second, minute, hour, day or week, since the
//! protocol cannot say it.

mod decision_record;
mod encode;
pub mod respond;

use std::cell::RefCell;
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use mixer_adapter_api::{LimitOverride, QuotaArgs};
use mixer_model::{AttrId, AttributeBag, HandlerFailure, StringMap, Timestamp, Value, Vocabulary};
use mixer_runtime::{
    DECISION_ID_HEADER, QuotaOutcome, QuotaPlan, RequestLimits, Runtime, Snapshot,
    with_current_decision,
};

use crate::bag_pool::{keep_spare, spare_bag};
use crate::protowire::{self, Reader, WireError};
use crate::request_scope::{RequestScope, log_undecided};
use respond::could_not_decide;

pub use respond::{descriptor_status, response, response_of, window_of};

/// `ratelimit.domain`: the request's domain.
pub const DOMAIN: &str = "ratelimit.domain";
/// `ratelimit.descriptor`: the descriptor's entries, key -> value.
pub const DESCRIPTOR: &str = "ratelimit.descriptor";
/// `ratelimit.descriptor_keys`: the descriptor's entry keys in order, joined with `.`.
pub const DESCRIPTOR_KEYS: &str = "ratelimit.descriptor_keys";
/// `ratelimit.hits_addend`: the units the descriptor asks for.
pub const HITS_ADDEND: &str = "ratelimit.hits_addend";

/// Envoy's rate limit service over a runtime.
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
        let (mut scope, outcomes, failed_open) = self.outcomes(request).await?;
        let mut response = response_of(&outcomes);
        decision_record::log_decision(&mut scope, request, &response, failed_open);
        // Envoy adds these to the client's response, allowed or limited: the id to quote.
        response.response_headers_to_add.push(HeaderValue {
            key: DECISION_ID_HEADER.to_string(),
            value: scope.decision_id().to_string(),
            raw_value: Vec::new(),
        });
        Ok(response)
    }

    /// [`RateLimit::decide`] answered as the gRPC frame of its response (what the gRPC server
    /// sends), written from the descriptors' outcomes without building the generated message,
    /// whose strings were allocated only to be encoded; the message is built only for the
    /// decision log, when a rule logs decisions.
    pub async fn decide_encoded(&self, request: &RateLimitRequest) -> Result<Bytes, tonic::Status> {
        let (mut scope, outcomes, failed_open) = self.outcomes(request).await?;
        let framed = encode::framed_response(&outcomes, scope.decision_id());
        if scope.logs_decisions() {
            let response = response_of(&outcomes);
            decision_record::log_decision(&mut scope, request, &response, failed_open);
        }
        Ok(framed)
    }

    /// The request's scope, each descriptor's quota outcome (in request order, `None` for one
    /// that asks for nothing) and the handlers that failed open.
    async fn outcomes(
        &self,
        request: &RateLimitRequest,
    ) -> Result<(RequestScope, Vec<Option<QuotaOutcome>>, Vec<HandlerFailure>), tonic::Status> {
        // One snapshot for the whole request, whatever reloads happen meanwhile.
        let mut scope = RequestScope::begin(&self.runtime).map_err(could_not_decide)?;
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
        check_limits(
            request.descriptors.len(),
            request.descriptors.iter().map(|d| d.entries.len()),
            self.runtime.limits(),
        )?;
        let id = scope.decision_id();
        let mut failed_open = Vec::new();
        let decide = async {
            let (snapshot, bag) = scope.parts_mut();
            let planned = plan_descriptors(snapshot, bag, request, Timestamp::now()).await?;
            counted(snapshot, planned, &mut failed_open).await
        };
        // Envoy sends no headers with a rate limit request: each is a trace of its own.
        let outcomes = with_current_decision(
            id,
            mixer_runtime::traces::request("ratelimit", None, decide),
        )
        .await?;
        Ok((scope, outcomes, failed_open))
    }
}

/// Decides `request` on `snapshot` (no readiness or argument checks: see
/// [`RateLimit::decide`]); `mixer test` runs its rate limit cases through this too.
///
/// First every descriptor's limits are looked up; then, as envoyproxy/ratelimit does, a
/// limit whose `rate_limit.name` another limit of the request `replaces` is dropped before
/// anything is counted; then the descriptors are counted.
pub async fn decide_on(
    snapshot: &Snapshot,
    request: &RateLimitRequest,
    now: Timestamp,
) -> Result<RateLimitResponse, tonic::Status> {
    // The bag is only read while planning, so it goes back to this thread's pool before the
    // handlers are awaited.
    let mut bag = spare_bag(snapshot.vocabulary());
    let planned = plan_descriptors(snapshot, &mut bag, request, now).await;
    keep_spare(bag);
    Ok(response_of(
        &counted(snapshot, planned?, &mut Vec::new()).await?,
    ))
}

/// Every descriptor's quota plan and arguments, in request order (`None` for one that asks for
/// nothing), each planned on `bag` holding that descriptor's attributes alone.
async fn plan_descriptors(
    snapshot: &Snapshot,
    bag: &mut AttributeBag,
    request: &RateLimitRequest,
    now: Timestamp,
) -> Result<Vec<Option<(QuotaPlan, QuotaArgs)>>, tonic::Status> {
    let mut planned = Vec::with_capacity(request.descriptors.len());
    for (i, descriptor) in request.descriptors.iter().enumerate() {
        planned.push(plan_descriptor(snapshot, bag, request, i, descriptor, now).await?);
    }
    Ok(planned)
}

/// Counts the planned descriptors of a request (see [`decide_on`]): every limit that is not
/// replaced, with each quota handler called once; each descriptor's outcome, in request
/// order. The handlers that failed and were granted past by their fail policy (open) are
/// added to `failed_open`, once each, for the decision log: the response itself cannot say
/// it.
async fn counted(
    snapshot: &Snapshot,
    planned: Vec<Option<(QuotaPlan, QuotaArgs)>>,
    failed_open: &mut Vec<HandlerFailure>,
) -> Result<Vec<Option<QuotaOutcome>>, tonic::Status> {
    let replaced: Vec<String> = planned
        .iter()
        .flatten()
        .flat_map(|(plan, _)| plan.rate_limits(snapshot))
        .flat_map(|b| b.replaces.iter().cloned())
        .collect();
    // Every descriptor at once: each quota handler is called once for the request
    // (redisquota: one script call, one round trip).
    let descriptors = planned.len();
    // The plans move to the allocation; their arguments stay here, borrowed by it.
    let mut asked = Vec::with_capacity(descriptors);
    let mut owned = Vec::with_capacity(descriptors);
    let mut args = Vec::with_capacity(descriptors);
    for (i, (plan, a)) in planned
        .into_iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i, p?)))
    {
        asked.push(i);
        owned.push(plan);
        args.push(a);
    }
    let plans: Vec<(QuotaPlan, &QuotaArgs)> = owned.into_iter().zip(&args).collect();
    let mut outcomes = vec![None; descriptors];
    for (i, outcome) in asked
        .into_iter()
        .zip(mixer_runtime::quota::allocate(snapshot, plans, &replaced).await)
    {
        match outcome {
            Ok(mut outcome) => {
                // One call answers every descriptor: its failure is in each outcome.
                for failure in outcome.failed_open.drain(..) {
                    if !failed_open.iter().any(|f| f.handler == failure.handler) {
                        failed_open.push(failure);
                    }
                }
                outcomes[i] = Some(outcome);
            }
            // A handler failed closed (storage down...). UNAVAILABLE, so that Envoy's
            // `failure_mode_deny` decides; never an OK response by accident.
            Err(e) => {
                log_undecided("ratelimit", &e);
                return Err(could_not_decide(e));
            }
        }
    }
    Ok(outcomes)
}

/// One descriptor's quota plan and arguments, planned on `bag`; `None` for one that asks for
/// nothing. The attribute generators run on each descriptor's bag first.
async fn plan_descriptor(
    snapshot: &Snapshot,
    bag: &mut AttributeBag,
    request: &RateLimitRequest,
    i: usize,
    descriptor: &RateLimitDescriptor,
    now: Timestamp,
) -> Result<Option<(QuotaPlan, QuotaArgs)>, tonic::Status> {
    if descriptor.is_negative_hits {
        // A refund: nothing to allocate, nothing to limit.
        return Ok(None);
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
    // The request's one bag, emptied of the previous descriptor's attributes, so that each
    // descriptor is decided on its own.
    bag.clear();
    fill_bag(bag, &request.domain, descriptor, hits, now);
    Ok(Some((
        // Nothing in a rate limit answer carries the reads, and no cache keeps it.
        mixer_runtime::quota::plan_preprocessed_without_reads(snapshot, &*bag, None).await,
        args,
    )))
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
    let ids = DescriptorIds::of(bag.vocabulary());
    // One entry (the common descriptor) is its own shape: no list to join.
    let keys = match descriptor.entries.as_slice() {
        [one] => Value::from(one.key.as_str()),
        entries => Value::from(
            entries
                .iter()
                .map(|e| e.key.as_str())
                .collect::<Vec<_>>()
                .join("."),
        ),
    };
    let entries = StringMap::from_pairs(
        descriptor
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str())),
    );
    put(bag, ids.domain, DOMAIN, Value::from(domain));
    put(bag, ids.descriptor, DESCRIPTOR, Value::from(entries));
    put(bag, ids.descriptor_keys, DESCRIPTOR_KEYS, keys);
    put(bag, ids.hits_addend, HITS_ADDEND, Value::Int64(hits));
    put(bag, ids.time, "context.time", Value::Timestamp(now));
}

/// Sets one of a descriptor's attributes as [`AttributeBag::set`] does, by its id when the
/// vocabulary declares it.
fn put(bag: &mut AttributeBag, id: Option<AttrId>, name: &str, value: Value) {
    // The attributes are in the standard vocabulary with these types, so setting cannot fail;
    // a vocabulary that redeclared them otherwise would only lose them.
    let _ = match id {
        Some(id) => bag.set_declared(id, name, value),
        None => bag.set(name, value),
    };
}

/// The ids of the attributes a descriptor fills in one vocabulary.
#[derive(Clone, Copy)]
struct DescriptorIds {
    domain: Option<AttrId>,
    descriptor: Option<AttrId>,
    descriptor_keys: Option<AttrId>,
    hits_addend: Option<AttrId>,
    time: Option<AttrId>,
}

thread_local! {
    /// The ids for the vocabulary last used on this thread (kept alive here, so that its
    /// address cannot be another vocabulary's): looking the five names up for every
    /// descriptor cost a quarter of filling its bag.
    static DESCRIPTOR_IDS: RefCell<Option<(Arc<Vocabulary>, DescriptorIds)>> =
        const { RefCell::new(None) };
}

impl DescriptorIds {
    fn of(vocabulary: &Arc<Vocabulary>) -> DescriptorIds {
        DESCRIPTOR_IDS.with_borrow_mut(|cached| match cached {
            Some((v, ids)) if Arc::ptr_eq(v, vocabulary) => *ids,
            _ => {
                let ids = DescriptorIds {
                    domain: vocabulary.lookup(DOMAIN),
                    descriptor: vocabulary.lookup(DESCRIPTOR),
                    descriptor_keys: vocabulary.lookup(DESCRIPTOR_KEYS),
                    hits_addend: vocabulary.lookup(HITS_ADDEND),
                    time: vocabulary.lookup("context.time"),
                };
                *cached = Some((Arc::clone(vocabulary), ids));
                ids
            }
        })
    }
}

/// Refuses a request with more descriptors, or a descriptor with more entries, than `limits`
/// allow: INVALID_ARGUMENT naming the limit and its flag.
pub fn check_limits(
    descriptors: usize,
    entries: impl IntoIterator<Item = usize>,
    limits: &RequestLimits,
) -> Result<(), tonic::Status> {
    let invalid = tonic::Status::invalid_argument;
    limits
        .ratelimit_descriptors
        .check(descriptors, "rate limit descriptors in the request")
        .map_err(invalid)?;
    for (i, n) in entries.into_iter().enumerate() {
        // The message names the descriptor: written only for one that is over.
        if n > limits.descriptor_entries.max {
            limits
                .descriptor_entries
                .check(n, &format!("entries in descriptors[{i}]"))
                .map_err(invalid)?;
        }
    }
    Ok(())
}

/// [`check_limits`] on an encoded `RateLimitRequest`, counting its descriptors and their
/// entries on the wire, without decoding them: a request over a limit costs one pass over its
/// bytes, not the allocation of every descriptor. A message that does not parse is left to
/// prost (`Ok`), which then says why.
pub fn check_encoded_limits(message: &[u8], limits: &RequestLimits) -> Result<(), tonic::Status> {
    let Ok((descriptors, entries)) = count_encoded(message) else {
        return Ok(());
    };
    check_limits(descriptors, entries, limits)
}

/// The descriptors (field 2 of `RateLimitRequest`) of an encoded request, and the entry
/// counts (field 1 of `RateLimitDescriptor`) up to the first descriptor with the most, as an
/// entry list for [`check_limits`] (zeros before it keep its index).
fn count_encoded(message: &[u8]) -> Result<(usize, Vec<usize>), WireError> {
    let mut descriptors = 0usize;
    let (mut most, mut most_at) = (0usize, 0usize);
    let mut r = Reader::new(message);
    while let Some((field, wire)) = r.key()? {
        if field == 2 && wire == protowire::LEN {
            let mut d = Reader::new(r.len(wire)?);
            let mut entries = 0usize;
            while let Some((field, wire)) = d.key()? {
                entries += usize::from(field == 1);
                d.skip(field, wire, 0)?;
            }
            if entries > most {
                (most, most_at) = (entries, descriptors);
            }
            descriptors += 1;
        } else {
            r.skip(field, wire, 0)?;
        }
    }
    let mut entries = vec![0; most_at];
    entries.push(most);
    Ok((descriptors, entries))
}
