//! Verdict → `CheckResponse`, quota outcome → `QuotaResult`, and "could not decide" → gRPC
//! error.

use std::collections::HashSet;

use mixer_model::{
    AttrId, AttributeBag, Bag, HeaderOp, HeaderOperation, Presence, ReferencedAttributes, Verdict,
    Vocabulary,
};
use mixer_proto::google::rpc;
use mixer_proto::istio::mixer::v1 as pb;
use mixer_runtime::QuotaOutcome;
use pb::referenced_attributes::{AttributeMatch, Condition};

use super::dictionary::WordEncoder;
use crate::request_scope::{NoDecision, grpc_status};

/// The response to an allowed or denied check (the mixer decided).
///
/// `global_word_count` is the count the client announced: referenced names and keys use a
/// global index only below it, as Istio's server does, so an older client can read them.
pub fn check_response(
    verdict: &Verdict,
    vocabulary: &Vocabulary,
    bag: &AttributeBag,
    global_word_count: usize,
) -> pb::CheckResponse {
    pb::CheckResponse {
        precondition: Some(pb::check_response::PreconditionResult {
            status: Some(rpc::Status {
                code: verdict.status.code as i32,
                message: verdict.istio_message().into_owned(),
                details: Vec::new(),
            }),
            valid_duration: Some(duration(verdict.valid_duration)),
            valid_use_count: verdict.valid_use_count,
            referenced_attributes: Some(referenced_attributes(
                verdict,
                vocabulary,
                bag,
                global_word_count,
            )),
            route_directive: route_directive(verdict),
        }),
        // Filled by the caller, one per quota asked for (see [`quota_result`]).
        quotas: Default::default(),
    }
}

/// One quota's result: the grant, its validity and status, and what the quota rules read
/// (encoded as for the precondition, see [`encode_referenced`]).
pub fn quota_result(
    outcome: &QuotaOutcome,
    vocabulary: &Vocabulary,
    bag: &AttributeBag,
    global_word_count: usize,
) -> pb::check_response::QuotaResult {
    pb::check_response::QuotaResult {
        valid_duration: Some(duration(outcome.result.valid_duration)),
        granted_amount: outcome.result.granted_amount,
        status: Some(rpc::Status {
            code: outcome.result.status.code as i32,
            message: outcome.result.status.message.clone(),
            details: Vec::new(),
        }),
        referenced_attributes: Some(encode_referenced(
            &outcome.referenced,
            vocabulary,
            bag,
            global_word_count,
        )),
    }
}

pub(crate) fn duration(d: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

/// What the verdict read, in the wire encoding the proxy's check cache keys on.
///
/// Protocol quirks, kept as Istio has them:
/// * `map_key` 0 means "no key" (the whole attribute), although 0 is also global word 0
///   (`source.ip`); proxies only read `map_key` for attributes that are string maps in the
///   request, and never for a whole-map read.
/// * A read of a whole string map that is present cannot be said on the wire (Istio never
///   recorded one). It is sent as an EXACT match on every key of the map as the request has
///   it, the closest the protocol allows: a request with different values for those keys
///   misses the proxy's cache.
/// * REGEX is never produced.
pub fn referenced_attributes(
    verdict: &Verdict,
    vocabulary: &Vocabulary,
    bag: &AttributeBag,
    global_word_count: usize,
) -> pb::ReferencedAttributes {
    encode_referenced(&verdict.referenced, vocabulary, bag, global_word_count)
}

/// [`referenced_attributes`] for any set of reads (a verdict's, a quota's).
pub fn encode_referenced(
    referenced: &ReferencedAttributes,
    vocabulary: &Vocabulary,
    bag: &AttributeBag,
    global_word_count: usize,
) -> pb::ReferencedAttributes {
    let (words, attribute_matches) =
        referenced_matches(referenced, vocabulary, bag, global_word_count);
    pb::ReferencedAttributes {
        words: words.into_iter().map(String::from).collect(),
        attribute_matches,
    }
}

/// The message dictionary and the matches of [`encode_referenced`], the words borrowed.
pub(crate) fn referenced_matches<'a>(
    referenced: &'a ReferencedAttributes,
    vocabulary: &'a Vocabulary,
    bag: &'a AttributeBag,
    global_word_count: usize,
) -> (Vec<&'a str>, Vec<AttributeMatch>) {
    let mut words = WordEncoder::new(global_word_count);
    let mut matches = Vec::with_capacity(referenced.len());
    let mut emitted: HashSet<(AttrId, Option<&str>), foldhash::fast::RandomState> =
        HashSet::default();
    let mut push =
        |words: &mut WordEncoder<'a>, attr: AttrId, key: Option<&'a str>, presence: Presence| {
            if !emitted.insert((attr, key)) {
                return;
            }
            let name = words.index(vocabulary.name(attr));
            let map_key = key.map_or(0, |k| words.index(k));
            matches.push(AttributeMatch {
                name,
                condition: match presence {
                    Presence::Exact => Condition::Exact,
                    Presence::Absent => Condition::Absence,
                } as i32,
                regex: String::new(),
                map_key,
            });
        };
    for r in referenced.iter() {
        match (&r.map_key, r.presence, bag.get(r.attr)) {
            (None, Presence::Exact, Some(mixer_model::Value::StringMap(m))) => {
                for (k, _) in m.iter() {
                    push(&mut words, r.attr, Some(k), Presence::Exact);
                }
            }
            _ => push(&mut words, r.attr, r.map_key.as_deref(), r.presence),
        }
    }
    (words.into_words(), matches)
}

/// Header operations of the matched rules; `None` when there are none (as Istio leaves it).
/// The proxy applies them only when the check is allowed. No direct response is produced.
pub fn route_directive(verdict: &Verdict) -> Option<pb::RouteDirective> {
    if verdict.request_header_ops.is_empty() && verdict.response_header_ops.is_empty() {
        return None;
    }
    Some(pb::RouteDirective {
        request_header_operations: verdict.request_header_ops.iter().map(header_op).collect(),
        response_header_operations: verdict.response_header_ops.iter().map(header_op).collect(),
        direct_response_code: 0,
        direct_response_body: String::new(),
    })
}

fn header_op(op: &HeaderOperation) -> pb::HeaderOperation {
    use pb::header_operation::Operation;
    pb::HeaderOperation {
        name: op.name.clone(),
        value: op.value.clone(),
        operation: match op.op {
            HeaderOp::Replace => Operation::Replace,
            HeaderOp::Append => Operation::Append,
            HeaderOp::Remove => Operation::Remove,
        } as i32,
    }
}

/// Could not decide ([`grpc_status`]): UNAVAILABLE (no valid config is active, or a handler
/// failed closed), so the proxy's fail-open/closed setting applies; INTERNAL for an instance
/// that cannot be built, as Istio 1.4 answers it (`mixer/pkg/api/grpcServer.go`), which the
/// proxy's network fail policy handles alike.
pub(crate) fn could_not_decide(no_decision: impl Into<NoDecision>) -> tonic::Status {
    grpc_status(no_decision)
}
