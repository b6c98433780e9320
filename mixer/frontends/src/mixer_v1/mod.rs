//! Istio's Mixer v1 API (`istio.mixer.v1.Mixer`, gRPC): what Istio 1.0–1.4 sidecars and
//! gateways call with the Mixer filter. Check decides a request; Report takes telemetry.
//!
//! ```no_run
//! # async fn serve(runtime: std::sync::Arc<mixer_runtime::Runtime>) -> Result<(), Box<dyn std::error::Error>> {
//! tonic::transport::Server::builder()
//!     .add_service(mixer_frontends::mixer_v1::service(runtime))
//!     .serve("0.0.0.0:9091".parse()?)
//!     .await?;
//! # Ok(()) }
//! ```
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
//! allowed (a denied check answers no quota result), one quota at a time (in name order),
//! each with [`Snapshot::quota`](mixer_runtime::Snapshot::quota) for the quota instances that
//! answer its name (`name.namespace`, `name.quota.namespace` or `name`). A quota no rule
//! produces is granted in full for the default validity. `quotas[name]` carries the grant, its
//! validity, its status (RESOURCE_EXHAUSTED when refused) and the attributes the quota rules read,
//! encoded like the precondition's. A quota handler failing closed makes the whole check
//! UNAVAILABLE (Istio put the error into the precondition status instead; a gRPC error lets the
//! proxy's fail policy decide, as for a check handler).
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
//! * **Could not decide.** A handler failing closed (`CheckError`) is answered UNAVAILABLE with
//!   the error, never a denial, so the proxy's own fail-open/fail-closed setting
//!   (`transport.network_fail_policy` in the mixer filter config) decides. Without a valid config
//!   the answer is UNAVAILABLE "no valid config" too.
//! * **Message size.** A request message is capped at 4 MiB, tonic's default (grpc-go's
//!   too, which Istio's server used). A bigger one is refused by the gRPC stack before it
//!   reaches us, with OUT_OF_RANGE (grpc-go said RESOURCE_EXHAUSTED; the proxy treats both as
//!   a failed call), and the server keeps serving.
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
use mixer_runtime::{Runtime, Snapshot};
use pb::mixer_server::{Mixer, MixerServer};
use pb::report_request::RepeatedAttributesSemantics;
use prost::Message;
use tonic::{Request, Response, Status};

use crate::spare::{keep_spare, spare_bag};

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

/// The gRPC service to add to a tonic server: `istio.mixer.v1.Mixer` (Check and Report).
pub fn service(runtime: Arc<Runtime>) -> MixerServer<MixerV1> {
    MixerServer::new(MixerV1::new(runtime))
}

impl MixerV1 {
    /// The service implementation, for callers that wrap it themselves.
    pub fn new(runtime: Arc<Runtime>) -> MixerV1 {
        MixerV1 { runtime }
    }

    fn ready(&self) -> Result<(), Status> {
        if self.runtime.is_ready() {
            Ok(())
        } else {
            Err(Status::unavailable("no valid config"))
        }
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
            Ok(view) if !view.has_quotas => Path::InPlace(self.filled(&view)),
            _ => Path::Prost(self.clone(), message),
        };
        async move {
            match path {
                Path::InPlace(filled) => {
                    let (snapshot, bag, client_words) = filled?;
                    let checked = checked(&snapshot, &bag).await;
                    let framed = checked.map(|checked| {
                        let vocabulary = snapshot.vocabulary();
                        framed_check_response(&checked.verdict, vocabulary, &bag, client_words)
                    });
                    keep_spare(bag);
                    framed
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

    /// The active snapshot and a bag filled from a request read in place (checked in the
    /// order the decoded path checks: readiness, dictionary version, attributes).
    fn filled(
        &self,
        view: &wire::CheckView<'_>,
    ) -> Result<(Arc<Snapshot>, AttributeBag, usize), Status> {
        self.ready()?;
        let client_words = check_word_count(view.global_word_count)?;
        let snapshot = self.runtime.snapshot();
        let mut bag = spare_bag(snapshot.vocabulary());
        if let Err(e) = fill_from_view(view, &mut bag) {
            keep_spare(bag);
            return Err(invalid(e));
        }
        Ok((snapshot, bag, client_words))
    }

    /// Check for a decoded request.
    async fn check_decoded(&self, request: pb::CheckRequest) -> Result<pb::CheckResponse, Status> {
        self.ready()?;
        let client_words = check_word_count(request.global_word_count)?;
        let snapshot = self.runtime.snapshot();
        let mut bag = spare_bag(snapshot.vocabulary());
        if let Some(attributes) = &request.attributes
            && let Err(e) = decode_into(attributes, &attributes.words, &mut bag)
        {
            keep_spare(bag);
            return Err(invalid(e));
        }
        let quotas = Some((&request.quotas, request.deduplication_id.as_str()));
        decided(&snapshot, bag, client_words, quotas).await
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
        .filter(|v| !v.has_quotas)?;
    Some(fill_from_view(&view, bag).map(|()| view.global_word_count))
}

fn fill_from_view(view: &wire::CheckView<'_>, bag: &mut AttributeBag) -> Result<(), DecodeError> {
    match &view.attributes {
        Some(attributes) => decode::decode_from(attributes, &attributes.words, bag, |_| true),
        None => Ok(()),
    }
}

/// How [`MixerV1::check_encoded`] goes on with a request: read in place (the snapshot, the
/// filled bag and the client's word count), or left to prost.
enum Path {
    InPlace(Result<(Arc<Snapshot>, AttributeBag, usize), Status>),
    Prost(MixerV1, Bytes),
}

/// The quotas a Check asks for, and its deduplication id.
type Quotas<'a> = Option<(&'a HashMap<String, pb::check_request::QuotaParams>, &'a str)>;

/// Decides a check on `bag` (and allocates `quotas` when it is allowed).
async fn decided(
    snapshot: &Snapshot,
    bag: AttributeBag,
    client_words: usize,
    quotas: Quotas<'_>,
) -> Result<pb::CheckResponse, Status> {
    let response = respond(snapshot, &bag, client_words, quotas).await;
    keep_spare(bag);
    response
}

async fn respond(
    snapshot: &Snapshot,
    bag: &AttributeBag,
    client_words: usize,
    quotas: Quotas<'_>,
) -> Result<pb::CheckResponse, Status> {
    let checked = checked(snapshot, bag).await?;
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
    for name in names {
        let params = &quotas[name];
        let args = QuotaArgs {
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
        };
        match snapshot.quota(bag, Some(name), &args).await {
            Ok(outcome) => {
                response.quotas.insert(
                    name.clone(),
                    quota_result(&outcome, snapshot.vocabulary(), bag, client_words),
                );
            }
            // A quota handler failed closed: as for a check handler, UNAVAILABLE.
            Err(e) => return Err(Status::unavailable(e.to_string())),
        }
    }
    Ok(response)
}

/// The verdict on `bag`, through the check cache.
async fn checked(
    snapshot: &Snapshot,
    bag: &AttributeBag,
) -> Result<mixer_runtime::Checked, Status> {
    match snapshot.check_cached(bag).await {
        Ok(checked) => Ok(checked),
        // Could not decide: UNAVAILABLE, so the proxy's fail-open/closed setting applies.
        Err(e) => Err(Status::unavailable(e.to_string())),
    }
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

#[tonic::async_trait]
impl Mixer for MixerV1 {
    async fn check(
        &self,
        request: Request<pb::CheckRequest>,
    ) -> Result<Response<pb::CheckResponse>, Status> {
        self.check_decoded(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn report(
        &self,
        request: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportResponse>, Status> {
        self.ready()?;
        let request = request.into_inner();
        check_word_count(request.global_word_count)?;
        if request.attributes.is_empty() {
            return Ok(Response::new(pb::ReportResponse {}));
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
        let snapshot = self.runtime.snapshot();
        self.runtime
            .run_report(async move { report_records(&snapshot, &request, delta).await })
            .await
            .map_err(|e| Status::unavailable(e.to_string()))??;
        Ok(Response::new(pb::ReportResponse {}))
    }
}

/// Decodes the records of a Report and puts their instances on the report queues.
async fn report_records(
    snapshot: &Snapshot,
    request: &pb::ReportRequest,
    delta: bool,
) -> Result<(), Status> {
    let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
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
        snapshot.report(&bag).await;
    }
    Ok(())
}
