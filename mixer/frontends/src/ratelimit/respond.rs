//! Quota outcomes -> `RateLimitResponse`, and "could not decide" -> gRPC error.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use std::sync::Arc;

use mixer_model::{HeaderOp, HeaderOperation};
use mixer_runtime::{Checked, QuotaAfterCheck, QuotaOutcome, QuotaRefusal};

use crate::request_scope::{NoDecision, grpc_status};

/// The limit header (the requests per unit of the most constraining descriptor). The names are
/// the draft IETF ones envoyproxy/ratelimit emitted (its later versions default to the same
/// names without `X-`).
pub const LIMIT_HEADER: &str = "X-RateLimit-Limit";
/// The remaining header: requests left in the current window (0 over the limit).
pub const REMAINING_HEADER: &str = "X-RateLimit-Remaining";
/// The reset header: whole seconds until the grant (or refusal) expires.
pub const RESET_HEADER: &str = "X-RateLimit-Reset";

/// The limit header of the IETF draft (draft-ietf-httpapi-ratelimit-headers, up to its -06
/// revision), which HTTP clients read; forward-auth sends these beside the `X-` ones.
pub const DRAFT_LIMIT_HEADER: &str = "RateLimit-Limit";
/// The draft's remaining header.
pub const DRAFT_REMAINING_HEADER: &str = "RateLimit-Remaining";
/// The draft's reset header: whole seconds, as the draft's delta-seconds.
pub const DRAFT_RESET_HEADER: &str = "RateLimit-Reset";

/// The protocol's unit for a window, when the window is exactly one of them.
fn unit_of(window: Duration) -> Option<Unit> {
    if window.subsec_nanos() != 0 {
        return None;
    }
    Some(match window.as_secs() {
        1 => Unit::Second,
        60 => Unit::Minute,
        3600 => Unit::Hour,
        86_400 => Unit::Day,
        604_800 => Unit::Week,
        _ => return None,
    })
}

/// The protocol's window for a unit; None for `UNKNOWN` (which Envoy never sends with a
/// limit).
pub fn window_of(unit: Unit) -> Option<Duration> {
    Some(Duration::from_secs(match unit {
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3600,
        Unit::Day => 86_400,
        Unit::Month => 30 * 86_400,
        Unit::Year => 365 * 86_400,
        Unit::Week => 604_800,
        Unit::Unknown => return None,
    }))
}

/// One descriptor's status from its quota outcome: OVER_LIMIT when any handler refused (a
/// non-OK status such as redisquota's RESOURCE_EXHAUSTED, or less granted than asked, as
/// memquota refuses with status OK; see [`QuotaOutcome::refused`]), OK otherwise. The limit,
/// what is left of it and the time to reset come from the handler that constrained the
/// descriptor most (see [`QuotaLimit`](mixer_model::QuotaLimit)); a handler that does not say
/// them (the denier, an out-of-process adapter) leaves `current_limit` unset and
/// `limit_remaining` 0.
pub fn descriptor_status(outcome: &QuotaOutcome) -> DescriptorStatus {
    Said::of_outcome(outcome).status()
}

/// The status of a descriptor that no handler was asked about.
pub fn granted_without_rule() -> DescriptorStatus {
    Said::GRANTED_WITHOUT_RULE.status()
}

/// The status of a descriptor whose limit is envoyproxy/ratelimit's `unlimited`: OK with
/// `limit_remaining` at its largest, as that service answers.
pub fn unlimited() -> DescriptorStatus {
    Said::UNLIMITED.status()
}

/// What one descriptor's `DescriptorStatus` says, with the limit's name borrowed from the
/// outcome: the generated message is built from it ([`Said::status`]) and the encoded answer
/// written from it ([`super::encode`]) without copying a string.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Said<'a> {
    /// OK or OVER_LIMIT.
    pub(crate) code: Code,
    /// `current_limit`: the limit's short name, requests per unit and unit, when known.
    pub(crate) limit: Option<(&'a str, u32, Unit)>,
    /// `limit_remaining`.
    pub(crate) remaining: u32,
    /// `duration_until_reset`.
    pub(crate) reset: Option<Duration>,
}

impl<'a> Said<'a> {
    const GRANTED_WITHOUT_RULE: Said<'static> = Said {
        code: Code::Ok,
        limit: None,
        remaining: 0,
        reset: None,
    };

    const UNLIMITED: Said<'static> = Said {
        code: Code::Ok,
        limit: None,
        remaining: u32::MAX,
        reset: None,
    };

    /// A descriptor's answer from its outcome (`None`: it asked for nothing), as
    /// [`response_of`] answers it.
    pub(crate) fn of(outcome: &'a Option<QuotaOutcome>) -> Said<'a> {
        match outcome {
            None => Said::GRANTED_WITHOUT_RULE,
            Some(o) if o.unlimited => Said::UNLIMITED,
            Some(o) => Said::of_outcome(o),
        }
    }

    /// See [`descriptor_status`].
    fn of_outcome(outcome: &'a QuotaOutcome) -> Said<'a> {
        let over = outcome.refused;
        let limit = outcome.result.limit.as_ref();
        let reset = match limit {
            // Refused: until units come back. Granted: until the counter is full again.
            Some(l) if over => Some(l.retry_after),
            Some(l) => Some(l.reset_after),
            // A handler that says no limit: the grant's validity is all there is to go by.
            None => (!outcome.instances.is_empty()).then_some(outcome.result.valid_duration),
        };
        Said {
            code: if over { Code::OverLimit } else { Code::Ok },
            limit: limit.and_then(|l| {
                Some((
                    l.name.split_once('.').map_or(&*l.name, |(short, _)| short),
                    u32::try_from(l.max_amount.max(0)).unwrap_or(u32::MAX),
                    unit_of(l.window)?,
                ))
            }),
            remaining: limit.map_or(0, |l| {
                let left = if over { 0 } else { l.remaining };
                u32::try_from(left.max(0)).unwrap_or(u32::MAX)
            }),
            reset,
        }
    }

    /// The generated message.
    pub(crate) fn status(&self) -> DescriptorStatus {
        DescriptorStatus {
            code: self.code as i32,
            current_limit: self
                .limit
                .map(|(name, requests_per_unit, unit)| PbRateLimit {
                    name: name.to_string(),
                    requests_per_unit,
                    unit: unit as i32,
                }),
            limit_remaining: self.remaining,
            duration_until_reset: self.reset.map(pb_duration),
            quota: None,
        }
    }
}

/// Whether a request whose descriptors were answered `said` (from `outcomes`, in the same
/// order) is over the limit, as envoyproxy/ratelimit decides (see [`response_of`]).
pub(crate) fn over_limit(said: &[Said<'_>], outcomes: &[Option<QuotaOutcome>]) -> bool {
    let over = |s: &Said<'_>| s.code == Code::OverLimit;
    let quota_mode = |o: &Option<QuotaOutcome>| o.as_ref().is_some_and(|o| o.quota_mode);
    let limited = said
        .iter()
        .zip(outcomes)
        .any(|(s, o)| over(s) && !quota_mode(o));
    let mut quotas = said.iter().zip(outcomes).filter(|(_, o)| quota_mode(o));
    // Every quota-mode descriptor over its limit, and at least one of them.
    let quotas_spent = quotas.clone().next().is_some() && quotas.all(|(s, _)| over(s));
    limited || quotas_spent
}

/// The `X-RateLimit-*` header values (limit, remaining, reset seconds when known) of the most
/// constraining descriptor with a known limit, from each descriptor's over-the-limit, limit
/// (requests per unit), remaining and `duration_until_reset`: see [`headers`].
pub(crate) fn header_values(
    statuses: impl Iterator<
        Item = (
            bool,
            Option<u32>,
            u32,
            Option<envoy_types::pb::google::protobuf::Duration>,
        ),
    >,
) -> Option<(u32, u32, Option<u64>)> {
    let (_, limit, remaining, reset) = statuses
        .filter(|(_, limit, _, _)| limit.is_some())
        .min_by_key(|(over, limit, remaining, _)| (!over, *remaining, *limit))?;
    Some((
        limit?,
        remaining,
        // Whole seconds, rounded up.
        reset.map(|d| u64::try_from(d.seconds.saturating_add(i64::from(d.nanos > 0))).unwrap_or(0)),
    ))
}

/// The response for the outcomes of a request's descriptors, in request order (`None`: the
/// descriptor asked for nothing).
///
/// As envoyproxy/ratelimit decides: the request is over the limit when a descriptor that is not
/// in `quota_mode` is, or when every `quota_mode` descriptor is (a quota-mode descriptor over its
/// limit alone lets the request through; its status still says OVER_LIMIT).
pub fn response_of(outcomes: &[Option<QuotaOutcome>]) -> RateLimitResponse {
    let said: Vec<Said<'_>> = outcomes.iter().map(Said::of).collect();
    let mut r = response(said.iter().map(Said::status).collect());
    r.overall_code = if over_limit(&said, outcomes) {
        Code::OverLimit
    } else {
        Code::Ok
    } as i32;
    r
}

/// The response for decided descriptors (in request order).
///
/// `overall_code` is always set explicitly: Envoy treats `UNKNOWN` (0, the protobuf default)
/// as "not limited" whatever its `failure_mode_deny` says, so a response must never leave it
/// unset by accident.
pub fn response(statuses: Vec<DescriptorStatus>) -> RateLimitResponse {
    let over = statuses.iter().any(|s| s.code == Code::OverLimit as i32);
    let overall_code = if over { Code::OverLimit } else { Code::Ok } as i32;
    let response_headers_to_add = headers(&statuses);
    RateLimitResponse {
        overall_code,
        statuses,
        response_headers_to_add,
        ..RateLimitResponse::default()
    }
}

/// The `X-RateLimit-*` headers of the most constraining descriptor with a known limit: one over
/// its limit first, then the one with the fewest requests left, then the smallest limit. None
/// when no limit is known.
fn headers(statuses: &[DescriptorStatus]) -> Vec<HeaderValue> {
    let Some((limit, remaining, reset)) = header_values(statuses.iter().map(|s| {
        (
            s.code == Code::OverLimit as i32,
            s.current_limit.as_ref().map(|l| l.requests_per_unit),
            s.limit_remaining,
            s.duration_until_reset,
        )
    })) else {
        return Vec::new();
    };
    // Numbers written with `itoa` rather than `Display`: the formatting machinery cost more
    // than the digits, on every counted decision.
    let mut digits = itoa::Buffer::new();
    let mut header = |key: &str, value: u64| HeaderValue {
        key: key.to_string(),
        value: digits.format(value).to_string(),
        raw_value: Vec::new(),
    };
    // Room for the decision id the service adds after these, so that it does not regrow.
    let mut out = Vec::with_capacity(4);
    out.push(header(LIMIT_HEADER, u64::from(limit)));
    out.push(header(REMAINING_HEADER, u64::from(remaining)));
    if let Some(seconds) = reset {
        out.push(header(RESET_HEADER, seconds));
    }
    out
}

/// A check that also charged quota, as ext_authz and forward-auth answer it: the check as it
/// came, or a quota refusal (RESOURCE_EXHAUSTED, which both answer with HTTP 429) carrying
/// `Retry-After` and the headers this protocol's service answers with: the limit when the
/// handler says it, 0 remaining, and the seconds until units come back as the reset.
pub(crate) fn with_rate_limit_headers(outcome: QuotaAfterCheck) -> Checked {
    match outcome {
        QuotaAfterCheck::Checked(checked) | QuotaAfterCheck::Granted { checked, .. } => checked,
        QuotaAfterCheck::Refused(refusal) => refused(refusal),
    }
}

/// [`with_rate_limit_headers`], and the IETF draft's `RateLimit-*` headers (lower case, names
/// and values) for the answer: on a refusal the limit when known, 0 remaining and the seconds
/// until units come back, as the `X-` headers say it; on a grant counted against a known
/// limit, the limit, what is left of it and the seconds until the counter is full again (the
/// rate limit service's `duration_until_reset` of a grant). None for a check no quota counted.
pub(crate) fn with_draft_rate_limit_headers(
    outcome: QuotaAfterCheck,
) -> (Checked, Vec<(&'static str, String)>) {
    let draft = |limit: Option<i64>, remaining: i64, reset: u64| {
        let mut out = Vec::with_capacity(3);
        if let Some(limit) = limit {
            out.push(("ratelimit-limit", limit.max(0).to_string()));
        }
        out.push(("ratelimit-remaining", remaining.max(0).to_string()));
        out.push(("ratelimit-reset", reset.to_string()));
        out
    };
    match outcome {
        QuotaAfterCheck::Checked(checked) => (checked, Vec::new()),
        QuotaAfterCheck::Granted { checked, limit } => {
            let reset = whole_seconds(limit.reset_after);
            (
                checked,
                draft(Some(limit.max_amount), limit.remaining, reset),
            )
        }
        QuotaAfterCheck::Refused(refusal) => {
            let headers = draft(refusal.limit, 0, refusal.retry_after_secs);
            (refused(refusal), headers)
        }
    }
}

/// Whole seconds, rounded up, as the reset headers count.
fn whole_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn refused(refusal: QuotaRefusal) -> Checked {
    let QuotaRefusal {
        mut verdict,
        cache_hit,
        tier,
        retry_after_secs,
        limit,
    } = refusal;
    // Lower case: HTTP/2 (Envoy's side of ext_authz) allows no other.
    let header = |name: &str, value: String| HeaderOperation {
        name: name.to_ascii_lowercase(),
        value,
        op: HeaderOp::Replace,
    };
    let ops = &mut verdict.response_header_ops;
    ops.push(header("retry-after", retry_after_secs.to_string()));
    if let Some(limit) = limit {
        ops.push(header(LIMIT_HEADER, limit.to_string()));
    }
    ops.push(header(REMAINING_HEADER, "0".to_string()));
    ops.push(header(RESET_HEADER, retry_after_secs.to_string()));
    Checked {
        verdict: Arc::new(verdict),
        cache_hit,
        tier,
    }
}

pub(crate) fn pb_duration(d: Duration) -> envoy_types::pb::google::protobuf::Duration {
    envoy_types::pb::google::protobuf::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The gRPC error for a request the mixer could not decide ([`grpc_status`]): no valid config
/// is active, or a quota handler failed closed (its storage is down, it timed out...).
///
/// UNAVAILABLE, as Limitador answers storage errors: Envoy counts an error as a failed call and
/// applies its `failure_mode_deny` (allow by default, or 500 when set), the operator's choice.
/// Never UNKNOWN and never an OK response. A quota instance that cannot be built from a
/// descriptor is INTERNAL, as Istio answers an instance it cannot build; Envoy's failure mode
/// applies all the same.
pub(crate) fn could_not_decide(no_decision: impl Into<NoDecision>) -> tonic::Status {
    grpc_status(no_decision)
}

#[cfg(test)]
mod tests {
    use mixer_model::{Code, Status, Verdict};

    use super::*;

    fn refusal(limit: Option<i64>) -> QuotaAfterCheck {
        QuotaAfterCheck::Refused(QuotaRefusal {
            verdict: Verdict {
                status: Status::new(Code::ResourceExhausted, "Quota is exhausted for: q"),
                response_header_ops: vec![HeaderOperation {
                    name: "x-kept".to_string(),
                    value: "1".to_string(),
                    op: HeaderOp::Append,
                }],
                ..Verdict::default()
            },
            cache_hit: true,
            tier: mixer_runtime::CacheTier::InProcess,
            retry_after_secs: 42,
            limit,
        })
    }

    fn headers(checked: &Checked) -> Vec<(&str, &str)> {
        checked
            .verdict
            .response_header_ops
            .iter()
            .map(|h| (h.name.as_str(), h.value.as_str()))
            .collect()
    }

    #[test]
    fn a_quota_refusal_carries_retry_after_and_the_rate_limit_headers() {
        let checked = with_rate_limit_headers(refusal(Some(3)));
        assert_eq!(checked.verdict.status.code, Code::ResourceExhausted);
        assert!(checked.cache_hit);
        assert_eq!(
            headers(&checked),
            [
                ("x-kept", "1"),
                ("retry-after", "42"),
                ("x-ratelimit-limit", "3"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "42")
            ]
        );
        // A handler that names no limit: no limit header, the rest as before.
        let checked = with_rate_limit_headers(refusal(None));
        assert_eq!(
            headers(&checked),
            [
                ("x-kept", "1"),
                ("retry-after", "42"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "42")
            ]
        );
    }

    #[test]
    fn forward_auth_adds_the_drafts_headers_to_refusals_and_grants() {
        let (checked, draft) = with_draft_rate_limit_headers(refusal(Some(3)));
        assert_eq!(checked.verdict.status.code, Code::ResourceExhausted);
        // The X- headers stay as ext_authz sends them.
        assert!(headers(&checked).contains(&("x-ratelimit-remaining", "0")));
        assert_eq!(
            draft,
            [
                ("ratelimit-limit", "3".to_string()),
                ("ratelimit-remaining", "0".to_string()),
                ("ratelimit-reset", "42".to_string())
            ]
        );
        let limit = mixer_model::QuotaLimit {
            name: Arc::from("q.instance.istio-system"),
            max_amount: 300,
            window: Duration::from_secs(60),
            remaining: 150,
            reset_after: Duration::from_millis(59_100),
            retry_after: Duration::ZERO,
        };
        let verdict = Arc::new(Verdict::default());
        let (checked, draft) = with_draft_rate_limit_headers(QuotaAfterCheck::Granted {
            checked: Checked {
                verdict: verdict.clone(),
                cache_hit: false,
                tier: mixer_runtime::CacheTier::None,
            },
            limit,
        });
        assert!(Arc::ptr_eq(&checked.verdict, &verdict));
        assert_eq!(
            draft,
            [
                ("ratelimit-limit", "300".to_string()),
                ("ratelimit-remaining", "150".to_string()),
                ("ratelimit-reset", "60".to_string())
            ]
        );
        let (_, draft) = with_draft_rate_limit_headers(QuotaAfterCheck::Checked(Checked {
            verdict,
            cache_hit: false,
            tier: mixer_runtime::CacheTier::None,
        }));
        assert!(draft.is_empty());
    }

    #[test]
    fn a_check_that_was_not_refused_is_answered_as_it_came() {
        let verdict = Arc::new(Verdict::default());
        let checked = with_rate_limit_headers(QuotaAfterCheck::Checked(Checked {
            verdict: verdict.clone(),
            cache_hit: false,
            tier: mixer_runtime::CacheTier::None,
        }));
        assert!(Arc::ptr_eq(&checked.verdict, &verdict));
    }
}
