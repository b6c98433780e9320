//! What the decision log records of a rate limit answer: the request's verdict and, per
//! descriptor, its entries, its code and the limit that applied, so that an operator can tell
//! which descriptor and which limit refused a request (envoyproxy/ratelimit logs the same
//! per descriptor at debug level).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use mixer_model::{Code as ModelCode, HandlerFailure, Status, Verdict};
use mixer_runtime::{DecisionOutcome, DescriptorDecision};

use crate::request_scope::RequestScope;

/// Logs a rate limit decision (when a rule logs decisions): OK, or RESOURCE_EXHAUSTED when a
/// descriptor is over its limit, with every descriptor's verdict and the quota handlers that
/// failed open (`failed_open`), as a check's record names them.
pub(super) fn log_decision(
    scope: &mut RequestScope,
    request: &RateLimitRequest,
    response: &RateLimitResponse,
    failed_open: Vec<HandlerFailure>,
) {
    if !scope.logs_decisions() {
        return;
    }
    let over = response.overall_code == Code::OverLimit as i32;
    let verdict = Verdict {
        status: if over {
            Status::new(ModelCode::ResourceExhausted, "over the rate limit")
        } else {
            Status::OK
        },
        failed_open,
        ..Verdict::default()
    };
    let descriptors = descriptor_decisions(request, response);
    scope.log_decision(
        "ratelimit",
        DecisionOutcome::RateLimit {
            verdict: &verdict,
            descriptors: &descriptors,
        },
    );
}

/// Each descriptor of `request` with its status in `response` (statuses are in request
/// order, one per descriptor).
pub(super) fn descriptor_decisions(
    request: &RateLimitRequest,
    response: &RateLimitResponse,
) -> Vec<DescriptorDecision> {
    request
        .descriptors
        .iter()
        .zip(&response.statuses)
        .map(|(descriptor, status)| DescriptorDecision {
            entries: entries(descriptor),
            code: code_name(status),
            limit: status.current_limit.as_ref().map(|l| {
                let unit = Unit::try_from(l.unit).map_or("UNKNOWN", |u| u.as_str_name());
                if l.name.is_empty() {
                    format!("{}/{unit}", l.requests_per_unit)
                } else {
                    format!("{}: {}/{unit}", l.name, l.requests_per_unit)
                }
            }),
            remaining: status.limit_remaining,
        })
        .collect()
}

fn entries(descriptor: &RateLimitDescriptor) -> String {
    let mut out = String::new();
    for (i, e) in descriptor.entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&e.key);
        out.push('=');
        out.push_str(&e.value);
    }
    out
}

fn code_name(status: &DescriptorStatus) -> &'static str {
    Code::try_from(status.code).map_or("UNKNOWN", |c| c.as_str_name())
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit;

    use super::*;

    fn descriptor(pairs: &[(&str, &str)]) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: pairs
                .iter()
                .map(|(k, v)| Entry {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            ..RateLimitDescriptor::default()
        }
    }

    #[test]
    fn each_descriptor_keeps_its_entries_code_and_limit() {
        let request = RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![
                descriptor(&[("remote_address", "10.0.0.1")]),
                descriptor(&[("path", "/api"), ("user", "bob")]),
            ],
            ..RateLimitRequest::default()
        };
        let response = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::Ok as i32,
                    ..DescriptorStatus::default()
                },
                DescriptorStatus {
                    code: Code::OverLimit as i32,
                    current_limit: Some(RateLimit {
                        name: "per-user".into(),
                        requests_per_unit: 3,
                        unit: Unit::Minute as i32,
                    }),
                    limit_remaining: 0,
                    ..DescriptorStatus::default()
                },
            ],
            ..RateLimitResponse::default()
        };
        let decided = descriptor_decisions(&request, &response);
        assert_eq!(
            decided,
            [
                DescriptorDecision {
                    entries: "remote_address=10.0.0.1".into(),
                    code: "OK",
                    limit: None,
                    remaining: 0,
                },
                DescriptorDecision {
                    entries: "path=/api,user=bob".into(),
                    code: "OVER_LIMIT",
                    limit: Some("per-user: 3/MINUTE".into()),
                    remaining: 0,
                },
            ]
        );
    }
}
