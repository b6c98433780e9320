//! Istio's Mixer v1 API (`istio.mixer.v1.Mixer`, gRPC): what Istio 1.0–1.4 sidecars and
//! gateways call with the Mixer filter. Check decides a request; Report takes telemetry.
//!
//! Both are served by the mixer's gRPC server ([`crate::grpc::unary_methods`]): Check from its
//! encoded message ([`MixerV1::check_encoded`]), Report through the generated message
//! ([`MixerV1::report`]).
//!
//! ## What is decoded from where
//!
//! | wire | becomes |
//! |---|---|
//! | `CheckRequest.attributes` (`CompressedAttributes`) | the bag, one attribute per entry of the typed maps |
//! | name and string indices `i >= 0` | global word `i` ([`dictionary::GLOBAL_WORDS`], Istio's list) |
//! | indices `i < 0` | word `-(i + 1)` of the message's `words` |
//! | `strings` | `STRING` values, converted to the declared type (DNS name, e-mail, URI, IP given as text) |
//! | `int64s`, `doubles`, `bools` | `INT64`, `DOUBLE` (an integer for a `DOUBLE` attribute is widened), `BOOL` |
//! | `timestamps`, `durations` | `TIMESTAMP`, `DURATION` (nanoseconds; out of range is an error) |
//! | `bytes` | `BYTES`; for a declared `IP_ADDRESS` attribute, 4 or 16 octets become the address |
//! | `string_maps` | `STRING_MAP`; keys and values are word indices too |
//! | `global_word_count` | checked against ours; limits which global indices the response uses |
//! | `quotas` (name -> amount, best effort) | one quota allocation each, through the active snapshot's quota rules, after an allowed precondition (see below) |
//! | `deduplication_id` | the allocations' deduplication id, followed by the quota's name (as Istio did) |
//! | `ReportRequest.attributes[i]` | one bag per record, reported through the active snapshot; attributes no rule or instance reads are checked but left out |
//! | `ReportRequest.default_words` | the message dictionary of every record without `words` |
//!
//! The response's `precondition` carries the verdict's status (code and message), validity
//! (`valid_duration`, `valid_use_count`), the referenced attributes (see
//! [`respond::referenced_attributes`]) and the matched rules' header operations as a
//! `route_directive`.
//!
//! ## Quota
//!
//! As Istio 1.4's `grpcServer.Check`: quotas are allocated only when the precondition is
//! allowed (a denied check answers no quota result), in name order, for the quota instances
//! that answer each name (`name.namespace`, `name.quota.namespace` or `name`); all of a
//! check's quotas go to [`quota::ask`](mixer_runtime::quota::ask)
//! together, so each handler is called once per check (Istio called it once per quota). A
//! quota no rule produces is granted in full for the default validity. `quotas[name]` carries
//! the grant, its validity, its status and the attributes the quota rules read, encoded like
//! the precondition's. A refusal is answered as Istio 1.4's adapters answer it: memquota
//! grants 0 with status OK, redisquota RESOURCE_EXHAUSTED `redisquota: Resource exhausted`,
//! both valid for 0 (no proxy caches a refusal), and a non-OK status's message is prefixed
//! with the handler's name (`handler.redisquota.istio-system:redisquota: Resource
//! exhausted`), as Istio's dispatcher wrote it. A quota handler failing closed makes the
//! whole check UNAVAILABLE (Istio put the error into the precondition status instead; a gRPC
//! error lets the proxy's fail policy decide, as for a check handler).
//!
//! ## Protocol quirks
//!
//! * **Dictionary versions.** A client announcing more global words than we know gets
//!   INTERNAL "inconsistent global dictionary versions used" (Istio's answer, on Check and
//!   Report). Fewer is fine: an older client knows a prefix. Incoming global indices are looked
//!   up in our whole list; outgoing ones (referenced attributes) stay below the client's count,
//!   other words go into the response's own `words`.
//! * **Bad input** — an index no dictionary has, the same attribute twice, a value that does
//!   not fit its declared type — is INVALID_ARGUMENT naming the index or attribute. Istio
//!   dropped such values quietly on Check; refusing is easier to debug and cannot allow a
//!   request on half its attributes.
//! * **Could not decide.** A handler failing closed (`Undecided`) is answered UNAVAILABLE with
//!   the error, never a denial, so the proxy's own fail-open/fail-closed setting
//!   (`transport.network_fail_policy` in the mixer filter config) decides. Without a valid config
//!   the answer is UNAVAILABLE "no valid config is active" too.
//! * **Message size.** A request message is capped at 4 MiB, tonic's default (grpc-go's
//!   too, which Istio's server used). A bigger one is refused by the gRPC stack before it
//!   reaches us, with RESOURCE_EXHAUSTED (as grpc-go said; the proxy treats it as a failed
//!   call), and the server keeps serving.
//! * **Limits.** A Check asking for more quotas than `--max-check-quotas` (64), a Report with
//!   more records than `--max-report-records` (10,000), and an attribute set (a Check's, or
//!   any record of a Report) with more attributes than `--max-attributes` (1,024, each string
//!   map entry counted as one) are refused with INVALID_ARGUMENT naming the limit and its
//!   flag, before any rule is evaluated or any record reported. A Check read in place counts
//!   its quota entries on the wire, before prost would build them.
//! * **Reading in place.** Check reads its request where it lies ([`decode_check_in_place`])
//!   unless it asks for quota or holds something only prost should judge (a group, a
//!   malformed field); those go through the generated message. A property test holds the two
//!   to the same result on concatenated, overwritten and truncated messages.
//! * **Report encodings.** `DELTA_ENCODING` (Istio 1.0 proxies): each record is applied on top
//!   of the previous one. `INDEPENDENT_ENCODING` (1.1 and later): each record stands alone.
//!   Records are reported in order; a record that does not decode stops the request with
//!   INVALID_ARGUMENT after the records before it went out. Handlers that fail make the answer
//!   UNKNOWN (Istio's), after every record was tried; the proxy only logs it.

pub mod decode;
pub mod dictionary;
mod encode;
pub mod respond;
mod wire;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use mixer_adapter_api::QuotaArgs;
use mixer_model::AttributeBag;
use mixer_proto::istio::mixer::v1 as pb;
use mixer_runtime::{Prepared, QuotaAsk, RequestLimits, Runtime, Snapshot, Wants};
use pb::report_request::RepeatedAttributesSemantics;
use prost::Message;
use tonic::Status;

use crate::request_scope::{RequestScope, log_undecided};
use respond::could_not_decide;

pub use decode::{DecodeError, decode_into, decode_keeping, encode};
pub use dictionary::{GLOBAL_WORD_COUNT, GLOBAL_WORDS};
pub use encode::framed_check_response;
pub use respond::{check_response, quota_result};

/// The Mixer v1 service over a runtime.
#[derive(Clone)]
pub struct MixerV1 {
    runtime: Arc<Runtime>,
}

impl std::fmt::Debug for MixerV1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MixerV1").finish_non_exhaustive()
    }
}

impl MixerV1 {
    /// The service implementation, for callers that wrap it themselves.
    pub fn new(runtime: Arc<Runtime>) -> MixerV1 {
        MixerV1 { runtime }
    }

    /// The active snapshot, once a valid config is active.
    fn ready(&self) -> Result<Arc<Snapshot>, Status> {
        self.runtime.ready_snapshot().map_err(could_not_decide)
    }

    /// Answers one encoded `CheckRequest` (the gRPC method's message) with the gRPC frame of
    /// its `CheckResponse`. The request is read where it lies ([`wire`]) unless it asks for
    /// quota or is one that reader leaves to prost; either way the answer is the same.
    pub fn check_encoded(
        &self,
        message: Bytes,
    ) -> impl Future<Output = Result<Bytes, Status>> + Send + 'static {
        // Only a request left to prost needs the service (and the message) after this call.
        let path = match wire::CheckView::decode(&message) {
            Ok(view) if view.quotas == 0 => Path::InPlace(self.filled(&view)),
            // Too many quotas to be worth building the generated message for.
            Ok(view) => match check_quota_count(view.quotas, self.runtime.limits()) {
                Ok(()) => Path::Prost(self.clone(), message),
                Err(status) => Path::InPlace(Err(status)),
            },
            _ => Path::Prost(self.clone(), message),
        };
        async move {
            match path {
                Path::InPlace(filled) => {
                    let (mut scope, client_words) = filled?;
                    let checked = checked(&mut scope, &Prepared::default()).await?;
                    let (snapshot, bag) = scope.parts();
                    let vocabulary = snapshot.vocabulary();
                    Ok(framed_check_response(
                        &checked.verdict,
                        vocabulary,
                        bag,
                        client_words,
                    ))
                }
                Path::Prost(this, message) => {
                    let request = pb::CheckRequest::decode(message).map_err(|e| {
                        Status::internal(format!("the request message does not decode: {e}"))
                    })?;
                    let response = this.check_decoded(request).await?;
                    Ok(mixer_grpc::framed(&response))
                }
            }
        }
    }

    /// The request's scope with its bag filled from a request read in place (checked in the
    /// order the decoded path checks: readiness, dictionary version, attributes).
    fn filled(&self, view: &wire::CheckView<'_>) -> Result<(RequestScope, usize), Status> {
        let mut scope = RequestScope::begin(&self.runtime).map_err(could_not_decide)?;
        let client_words = check_word_count(view.global_word_count)?;
        if let Some(attributes) = &view.attributes {
            check_attribute_count(attributes, self.runtime.limits(), "the check")?;
        }
        fill_from_view(view, scope.bag_mut()).map_err(invalid)?;
        Ok((scope, client_words))
    }

    /// Check for a decoded request.
    async fn check_decoded(&self, request: pb::CheckRequest) -> Result<pb::CheckResponse, Status> {
        let mut scope = RequestScope::begin(&self.runtime).map_err(could_not_decide)?;
        let client_words = check_word_count(request.global_word_count)?;
        let limits = self.runtime.limits();
        if let Some(attributes) = &request.attributes {
            check_attribute_count(attributes, limits, "the check")?;
        }
        check_quota_count(request.quotas.len(), limits)?;
        if let Some(attributes) = &request.attributes {
            decode_into(attributes, &attributes.words, scope.bag_mut()).map_err(invalid)?;
        }
        let quotas = Some((&request.quotas, request.deduplication_id.as_str()));
        respond(&mut scope, client_words, quotas).await
    }
}

/// Reads the attributes of an encoded `CheckRequest` into `bag` where they lie, as the Check
/// method does, and gives its `global_word_count`. `None` when that reader leaves the message
/// to prost: it asks for quota, or holds what the reader does not take on itself (a group, a
/// malformed field), which prost then decodes or refuses. What it reads, it reads as
/// [`decode_into`] reads prost's decoding of the message.
pub fn decode_check_in_place(
    message: &[u8],
    bag: &mut AttributeBag,
) -> Option<Result<u32, DecodeError>> {
    let view = wire::CheckView::decode(message)
        .ok()
        .filter(|v| v.quotas == 0)?;
    Some(fill_from_view(&view, bag).map(|()| view.global_word_count))
}

fn fill_from_view(view: &wire::CheckView<'_>, bag: &mut AttributeBag) -> Result<(), DecodeError> {
    match &view.attributes {
        Some(attributes) => decode::decode_from(attributes, &attributes.words, bag, |_| true),
        None => Ok(()),
    }
}

/// How [`MixerV1::check_encoded`] goes on with a request: read in place (the request's scope,
/// its bag filled, and the client's word count), or left to prost.
enum Path {
    InPlace(Result<(RequestScope, usize), Status>),
    Prost(MixerV1, Bytes),
}

/// The quotas a Check asks for, and its deduplication id.
type Quotas<'a> = Option<(&'a HashMap<String, pb::check_request::QuotaParams>, &'a str)>;

/// Decides the scope's check (and allocates `quotas` when it is allowed).
async fn respond(
    scope: &mut RequestScope,
    client_words: usize,
    quotas: Quotas<'_>,
) -> Result<pb::CheckResponse, Status> {
    // A check with quotas runs the attribute generators once, for both: the quota rules see
    // what the check saw. Without quotas a cache hit calls none.
    let prepared = match quotas {
        Some((q, _)) if !q.is_empty() => {
            let (snapshot, bag) = scope.parts();
            Prepared::new(snapshot, bag).await
        }
        _ => Prepared::default(),
    };
    let checked = checked(scope, &prepared).await?;
    let (snapshot, bag) = scope.parts();
    let mut response = check_response(&checked.verdict, snapshot.vocabulary(), bag, client_words);
    // Istio allocated quota only for an allowed precondition
    // (`if status.IsOK(resp.Precondition.Status) && len(req.Quotas) > 0`).
    let Some((quotas, deduplication_id)) = quotas.filter(|(q, _)| !q.is_empty()) else {
        return Ok(response);
    };
    if !checked.verdict.is_allowed() {
        return Ok(response);
    }
    let mut names: Vec<&String> = quotas.keys().collect();
    names.sort();
    let args: Vec<QuotaArgs> = names
        .iter()
        .map(|name| {
            let params = &quotas[*name];
            QuotaArgs {
                amount: params.amount,
                best_effort: params.best_effort,
                // Istio's: one id per quota of the request.
                // No id from the proxy means no deduplication, not one shared id.
                deduplication_id: if deduplication_id.is_empty() {
                    String::new()
                } else {
                    format!("{deduplication_id}{name}")
                },
                limit_override: None,
            }
        })
        .collect();
    let asks: Vec<QuotaAsk<'_>> = names
        .iter()
        .zip(&args)
        .map(|(name, args)| QuotaAsk {
            bag,
            quota: Some(name.as_str()),
            args,
        })
        .collect();
    // All quotas at once: each quota handler is called once for the check (redisquota: one
    // script call, one round trip), instead of once per quota as Istio did.
    let outcomes = mixer_runtime::quota::ask_prepared(snapshot, &asks, &prepared).await;
    for (name, outcome) in names.into_iter().zip(outcomes) {
        match outcome {
            Ok(outcome) => {
                response.quotas.insert(
                    name.clone(),
                    quota_result(&outcome, snapshot.vocabulary(), bag, client_words),
                );
            }
            // A quota handler failed closed, or the quota's instance cannot be built: as for
            // a check.
            Err(e) => {
                log_undecided("mixer-v1", &e);
                return Err(could_not_decide(e));
            }
        }
    }
    Ok(response)
}

/// The verdict on the scope's bag, with the attributes it read (Mixer v1 answers with them).
async fn checked(
    scope: &mut RequestScope,
    prepared: &Prepared,
) -> Result<mixer_runtime::Checked, Status> {
    scope
        .check_prepared(Wants::Reads, "mixer-v1", prepared)
        .await
        .map_err(could_not_decide)
}

/// INVALID_ARGUMENT when a Check asks for more quotas than `--max-check-quotas`.
fn check_quota_count(quotas: usize, limits: &RequestLimits) -> Result<(), Status> {
    limits
        .check_quotas
        .check(quotas, "quotas in the check")
        .map_err(Status::invalid_argument)
}

/// INVALID_ARGUMENT when an attribute set holds more than `--max-attributes`.
fn check_attribute_count(
    attributes: &impl decode::Compressed,
    limits: &RequestLimits,
    what: &str,
) -> Result<(), Status> {
    limits
        .attributes
        .check(
            attributes.attribute_count(),
            &format!("attributes in {what}"),
        )
        .map_err(Status::invalid_argument)
}

/// Istio's answer to a client whose dictionary is newer than ours.
fn check_word_count(client: u32) -> Result<usize, Status> {
    let client = client as usize;
    if client > GLOBAL_WORD_COUNT {
        return Err(Status::internal(format!(
            "inconsistent global dictionary versions used: mixer knows {GLOBAL_WORD_COUNT} words, caller knows {client}"
        )));
    }
    Ok(client)
}

fn invalid(e: DecodeError) -> Status {
    Status::invalid_argument(e.to_string())
}

impl MixerV1 {
    /// Report: every record of `request` reported through the active snapshot (see the
    /// module documentation).
    pub async fn report(&self, request: pb::ReportRequest) -> Result<pb::ReportResponse, Status> {
        let snapshot = self.ready()?;
        check_word_count(request.global_word_count)?;
        if request.attributes.is_empty() {
            return Ok(pb::ReportResponse {});
        }
        let limits = self.runtime.limits();
        limits
            .report_records
            .check(request.attributes.len(), "records in the report")
            .map_err(Status::invalid_argument)?;
        // Every record is counted before any is reported, so that a refused report reports
        // nothing.
        for (i, record) in request.attributes.iter().enumerate() {
            check_attribute_count(record, limits, &format!("record {i}"))?;
        }
        let delta =
            match RepeatedAttributesSemantics::try_from(request.repeated_attributes_semantics) {
                Ok(RepeatedAttributesSemantics::DeltaEncoding) => true,
                Ok(RepeatedAttributesSemantics::IndependentEncoding) => false,
                Err(_) => {
                    return Err(Status::invalid_argument(format!(
                        "unknown repeated_attributes_semantics {}",
                        request.repeated_attributes_semantics
                    )));
                }
            };
        self.runtime
            .run_report(async move { report_records(&snapshot, &request, delta).await })
            .await
            .map_err(|e| Status::unavailable(e.to_string()))??;
        Ok(pb::ReportResponse {})
    }
}

/// Decodes the records of a Report and puts their instances on the report queues.
///
/// An instance that cannot be built is not sent; the other instances of its record and the
/// other records are, and the Report fails UNKNOWN naming what failed, as Istio 1.4 answers
/// (`mixer/pkg/api/grpcServer.go`, `codes.Unknown`). Proxies do not retry reports.
async fn report_records(
    snapshot: &Snapshot,
    request: &pb::ReportRequest,
    delta: bool,
) -> Result<(), Status> {
    let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
    let mut failed = Vec::new();
    for (i, record) in request.attributes.iter().enumerate() {
        if !delta {
            bag.clear();
        }
        // A record without its own dictionary uses the request's default words.
        let words = if record.words.is_empty() {
            &request.default_words
        } else {
            &record.words
        };
        // Only the attributes the rules can read are built; the rest are checked.
        decode_keeping(record, words, &mut bag, |id| {
            id.is_some_and(|id| snapshot.reads_attribute(id))
        })
        .map_err(|e| Status::invalid_argument(format!("record {i}: {e}")))?;
        // Instances go onto their handlers' bounded queues; a record that does not fit is
        // counted in mixer_report_dropped_total, and the proxy is not made to wait.
        let outcome = mixer_runtime::report(snapshot, &bag).await;
        failed.extend(
            outcome
                .instance_errors
                .into_iter()
                .map(|e| format!("record {i}: {e}")),
        );
    }
    match failed.as_slice() {
        [] => Ok(()),
        [one] => Err(Status::unknown(one.clone())),
        [first, rest @ ..] => Err(Status::unknown(format!(
            "{} instances could not be built; {first} (and {} more)",
            rest.len() + 1,
            rest.len()
        ))),
    }
}
