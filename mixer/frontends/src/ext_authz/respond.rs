//! Verdict -> `CheckResponse`, and "could not decide" -> gRPC error.

use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{
    CheckResponse, DeniedHttpResponse, OkHttpResponse,
};
use envoy_types::pb::envoy::r#type::v3::{HttpStatus, StatusCode as HttpStatusCode};
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value as PbValue, value::Kind};
use envoy_types::pb::google::rpc;
use mixer_model::{Code, HeaderOp, HeaderOperation, Verdict};
use mixer_runtime::{CacheTier, Checked, DecisionId};

use crate::request_scope::{NoDecision, grpc_status};

/// Keys of the `dynamic_metadata` struct every answer carries. Envoy files it under the
/// filter's namespace (`envoy.filters.http.ext_authz`), where access logs (`%DYNAMIC_METADATA%`)
/// and later filters can read it.
pub mod metadata_keys {
    /// Names of the rules whose match was true (a list of strings).
    pub const MATCHED_RULES: &str = "matched_rules";
    /// Whether the verdict came from the check cache (a bool).
    pub const CACHE_HIT: &str = "cache_hit";
    /// `shared` when the cache shared by the replicas (`--shared-cache`) answered; absent
    /// otherwise (`cache_hit` then tells this replica's cache from none), so that the
    /// answers of the one cache most checks use carry no more bytes.
    pub const CACHE_TIER: &str = "cache_tier";
    /// The verdict's status code name (`OK`, `PERMISSION_DENIED`...).
    pub const STATUS: &str = "status";
    /// The full name of the handler that denied (`deny.handler.istio-system`); only on a
    /// denial a handler gave.
    pub const DENIED_BY: &str = "denied_by";
    /// What each matched dry-run rule would have decided: a struct of rule full name to
    /// `allow`, `deny` or `error`; only when a dry-run rule matched.
    pub const DRY_RUN: &str = "dry_run";
    /// The decision's id (32 hex digits), as the decision log records it.
    pub const DECISION_ID: &str = "decision_id";
}

/// The answer for a decided check: allowed (`OkResponse`) or denied (`DeniedResponse`).
pub fn check_response(checked: &Checked) -> CheckResponse {
    check_response_with_id(checked, None)
}

/// [`check_response`] with the decision's id in the dynamic metadata.
pub fn check_response_with_id(checked: &Checked, decision_id: Option<DecisionId>) -> CheckResponse {
    let verdict = &checked.verdict;
    let http_response = if verdict.is_allowed() {
        HttpResponse::OkResponse(ok_response(verdict))
    } else {
        HttpResponse::DeniedResponse(denied_response(verdict))
    };
    CheckResponse {
        status: Some(rpc::Status {
            code: verdict.status.code as i32,
            message: verdict.status.message.clone(),
            details: Vec::new(),
        }),
        dynamic_metadata: Some(decision_metadata(checked, decision_id)),
        http_response: Some(http_response),
    }
}

/// The gRPC error for a check the mixer could not decide ([`grpc_status`]): UNAVAILABLE when
/// no valid config is active or a handler failed closed, INTERNAL when an instance could not
/// be built from the request (Istio's answer).
///
/// Never a denial: Envoy counts an error answer as a failed call and applies its own
/// `failure_mode_allow` setting (let through, or `status_on_error`, 403 by default), which
/// is the operator's choice to make, not ours.
pub(crate) fn could_not_decide(no_decision: impl Into<NoDecision>) -> tonic::Status {
    grpc_status(no_decision)
}

/// The HTTP status Envoy sends for a denial: 401 for UNAUTHENTICATED, 429 for
/// RESOURCE_EXHAUSTED, 403 for every other code.
pub fn http_status(code: Code) -> HttpStatusCode {
    match code {
        Code::Ok => HttpStatusCode::Ok,
        Code::Unauthenticated => HttpStatusCode::Unauthorized,
        Code::ResourceExhausted => HttpStatusCode::TooManyRequests,
        _ => HttpStatusCode::Forbidden,
    }
}

fn ok_response(verdict: &Verdict) -> OkHttpResponse {
    let mut ok = OkHttpResponse::default();
    for op in &verdict.request_header_ops {
        match op.op {
            HeaderOp::Remove => {
                if usable(op, true) {
                    ok.headers_to_remove.push(op.name.clone());
                }
            }
            HeaderOp::Replace | HeaderOp::Append => {
                if usable(op, false) {
                    ok.headers.push(header_option(op));
                }
            }
        }
    }
    ok.response_headers_to_add = response_headers(&verdict.response_header_ops);
    ok
}

fn denied_response(verdict: &Verdict) -> DeniedHttpResponse {
    let body = if verdict.status.message.is_empty() {
        verdict.status.code.name().to_string()
    } else {
        verdict.status.message.clone()
    };
    DeniedHttpResponse {
        status: Some(HttpStatus {
            code: http_status(verdict.status.code) as i32,
        }),
        headers: response_headers(&verdict.response_header_ops),
        body,
    }
}

/// Response header operations. ext_authz can add or overwrite response headers but has no way
/// to remove one, so REMOVE operations on responses are dropped here.
fn response_headers(ops: &[HeaderOperation]) -> Vec<HeaderValueOption> {
    ops.iter()
        .filter(|op| op.op != HeaderOp::Remove && usable(op, false))
        .map(header_option)
        .collect()
}

/// Envoy rejects (or, with `validate_mutations`, fails the whole request on) a header whose
/// name is empty or whose value carries CR, LF or NUL; values can come from request data, so
/// such an operation is skipped rather than sent.
pub(super) fn usable(op: &HeaderOperation, name_only: bool) -> bool {
    let bad = |s: &str| s.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0));
    let ok = !op.name.is_empty() && !bad(&op.name) && (name_only || !bad(&op.value));
    if !ok {
        tracing::debug!(header = %op.name, "ext_authz: header operation skipped (invalid bytes)");
    }
    ok
}

/// One header operation on the wire. Both the deprecated `append` flag and `append_action`
/// are set, and agree: Envoy before `append_action` reads only `append` (which defaults to
/// false, i.e. overwrite, in ext_authz answers), and current Envoy honours `append` when it is
/// present. REPLACE overwrites (or adds); APPEND adds a value next to existing ones.
#[allow(deprecated)]
fn header_option(op: &HeaderOperation) -> HeaderValueOption {
    let append = op.op == HeaderOp::Append;
    let action = if append {
        HeaderAppendAction::AppendIfExistsOrAdd
    } else {
        HeaderAppendAction::OverwriteIfExistsOrAdd
    };
    HeaderValueOption {
        header: Some(HeaderValue {
            key: op.name.clone(),
            value: op.value.clone(),
            raw_value: Vec::new(),
        }),
        append: Some(envoy_types::pb::google::protobuf::BoolValue { value: append }),
        append_action: action as i32,
        keep_empty_value: false,
    }
}

fn decision_metadata(checked: &Checked, decision_id: Option<DecisionId>) -> Struct {
    let (verdict, cache_hit) = (&*checked.verdict, checked.cache_hit);
    let rules = verdict
        .matched_rules
        .iter()
        .map(|r| PbValue {
            kind: Some(Kind::StringValue(r.to_string())),
        })
        .collect();
    let mut s = Struct::default();
    s.fields.insert(
        metadata_keys::MATCHED_RULES.to_string(),
        PbValue {
            kind: Some(Kind::ListValue(ListValue { values: rules })),
        },
    );
    s.fields.insert(
        metadata_keys::CACHE_HIT.to_string(),
        PbValue {
            kind: Some(Kind::BoolValue(cache_hit)),
        },
    );
    if checked.tier == CacheTier::Shared {
        s.fields.insert(
            metadata_keys::CACHE_TIER.to_string(),
            PbValue {
                kind: Some(Kind::StringValue(CacheTier::Shared.label().to_string())),
            },
        );
    }
    s.fields.insert(
        metadata_keys::STATUS.to_string(),
        PbValue {
            kind: Some(Kind::StringValue(verdict.status.code.name().to_string())),
        },
    );
    if let Some(handler) = &verdict.denied_by {
        s.fields.insert(
            metadata_keys::DENIED_BY.to_string(),
            PbValue {
                kind: Some(Kind::StringValue(handler.to_string())),
            },
        );
    }
    if !verdict.dry_run.is_empty() {
        let mut runs = Struct::default();
        for d in &verdict.dry_run {
            runs.fields.insert(
                d.rule.to_string(),
                PbValue {
                    kind: Some(Kind::StringValue(d.would_be.label().to_string())),
                },
            );
        }
        s.fields.insert(
            metadata_keys::DRY_RUN.to_string(),
            PbValue {
                kind: Some(Kind::StructValue(runs)),
            },
        );
    }
    if let Some(id) = decision_id {
        s.fields.insert(
            metadata_keys::DECISION_ID.to_string(),
            PbValue {
                kind: Some(Kind::StringValue(id.to_string())),
            },
        );
    }
    s
}
