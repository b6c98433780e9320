//! Quota on the check protocols that have no quota field of their own: HTTP forward-auth and
//! Envoy ext_authz.
//!
//! nginx `auth_request`, Caddy `forward_auth` and Traefik `forwardAuth` have no other hook for
//! a central rate limit, and an Envoy without a rate limit filter has only ext_authz. So once
//! a check is allowed, every quota instance whose rule matches the request is charged one unit,
//! as Envoy's rate limit filter charges one hit per request, deduplicated by the request id
//! when the proxy sends one (`request.id`: `X-Request-Id`, or Envoy's request id), so a
//! proxy retrying the same check is not charged twice.
//!
//! Over the limit the check becomes a denial with RESOURCE_EXHAUSTED, which both front ends
//! answer with HTTP 429, carrying `Retry-After` and the `X-RateLimit-Limit`,
//! `X-RateLimit-Remaining` and `X-RateLimit-Reset` headers the rate limit service answers
//! with. A quota handler that fails keeps its fail policy: open lets the request through
//! (and the failure is counted), closed makes the check undecided.

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::QuotaArgs;
use mixer_model::{Bag, Code, HeaderOp, HeaderOperation, Status, Value, Variety, Verdict};
use mixer_runtime::{Checked, QuotaAsk, QuotaOutcome, Snapshot, Undecided};

use crate::ratelimit::respond::{LIMIT_HEADER, REMAINING_HEADER, RESET_HEADER};

/// `checked`, or the refusal it becomes when a quota its request is charged is exhausted. A
/// quota left undecided is logged as a check would be, naming `protocol`.
pub(crate) async fn charged(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    checked: Checked,
    protocol: &'static str,
) -> Result<Checked, Undecided> {
    if !checked.verdict.is_allowed() || !snapshot.has_rules(Variety::Quota) {
        return Ok(checked);
    }
    let request_id = snapshot
        .vocabulary()
        .lookup("request.id")
        .and_then(|id| bag.get(id))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let args = QuotaArgs {
        amount: 1,
        best_effort: false,
        deduplication_id: request_id,
        limit_override: None,
    };
    let ask = QuotaAsk {
        bag,
        quota: None,
        args: &args,
    };
    let Some(outcome) = mixer_runtime::quota::ask(snapshot, &[ask]).await.pop() else {
        return Ok(checked);
    };
    let outcome = outcome.inspect_err(|e| crate::request_scope::log_undecided(protocol, e))?;
    if outcome.instances.is_empty() || !outcome.refused {
        return Ok(checked);
    }
    Ok(Checked {
        verdict: Arc::new(refusal(&checked.verdict, &outcome)),
        cache_hit: checked.cache_hit,
    })
}

/// The denial for an exhausted quota: RESOURCE_EXHAUSTED with the handler's message (or the
/// Istio proxy's own words when it gave none), and the rate limit headers.
fn refusal(allowed: &Verdict, outcome: &QuotaOutcome) -> Verdict {
    let message = if outcome.result.status.is_ok() || outcome.result.status.message.is_empty() {
        format!("Quota is exhausted for: {}", outcome.instances.join(", "))
    } else {
        outcome.result.status.message.clone()
    };
    let mut response_header_ops = allowed.response_header_ops.clone();
    response_header_ops.extend(rate_limit_headers(outcome));
    Verdict {
        status: Status::new(Code::ResourceExhausted, message),
        // The refusal must not be reused: the next request may find units again.
        valid_duration: Duration::ZERO,
        valid_use_count: 0,
        matched_rules: allowed.matched_rules.clone(),
        response_header_ops,
        ..Verdict::default()
    }
}

/// `Retry-After` and `X-RateLimit-*` for a refusal: the limit when the handler says it, 0
/// left, and the seconds (rounded up) until units come back (the limit's `retry_after`; a
/// handler that names no limit may say it in the refusal's valid duration).
fn rate_limit_headers(outcome: &QuotaOutcome) -> Vec<HeaderOperation> {
    let seconds = {
        let d = outcome
            .result
            .limit
            .as_ref()
            .map(|l| l.retry_after)
            .filter(|d| !d.is_zero())
            .unwrap_or(outcome.result.valid_duration);
        d.as_secs() + u64::from(d.subsec_nanos() > 0)
    };
    // Lower case: HTTP/2 (Envoy's side of ext_authz) allows no other.
    let header = |name: &str, value: String| HeaderOperation {
        name: name.to_ascii_lowercase(),
        value,
        op: HeaderOp::Replace,
    };
    let mut out = vec![header("retry-after", seconds.to_string())];
    if let Some(limit) = &outcome.result.limit {
        out.push(header(LIMIT_HEADER, limit.max_amount.max(0).to_string()));
    }
    out.push(header(REMAINING_HEADER, "0".to_string()));
    out.push(header(RESET_HEADER, seconds.to_string()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mixer_model::{QuotaLimit, QuotaResult, ReferencedAttributes};

    fn outcome(status: Status, granted: i64, retry_after: Duration) -> QuotaOutcome {
        QuotaOutcome {
            refused: !status.is_ok() || granted < 1,
            result: QuotaResult {
                status,
                valid_duration: Duration::ZERO,
                granted_amount: granted,
                limit: Some(QuotaLimit {
                    name: Arc::from("requestcount.instance.istio-system"),
                    max_amount: 3,
                    window: Duration::from_secs(60),
                    remaining: 0,
                    reset_after: Duration::from_secs(60),
                    retry_after,
                }),
            },
            referenced: ReferencedAttributes::new(),
            instances: vec!["requestcount.instance.istio-system".to_string()],
            unlimited: false,
            quota_mode: false,
        }
    }

    #[test]
    fn a_refusal_is_429_material_with_the_rate_limit_headers() {
        let v = refusal(
            &Verdict::default(),
            &outcome(Status::OK, 0, Duration::from_millis(41_200)),
        );
        assert_eq!(v.status.code, Code::ResourceExhausted);
        assert_eq!(
            v.status.message,
            "Quota is exhausted for: requestcount.instance.istio-system"
        );
        assert_eq!(v.valid_use_count, 0);
        let headers: Vec<(&str, &str)> = v
            .response_header_ops
            .iter()
            .map(|h| (h.name.as_str(), h.value.as_str()))
            .collect();
        assert_eq!(
            headers,
            [
                ("retry-after", "42"),
                ("x-ratelimit-limit", "3"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "42")
            ]
        );
        let named = refusal(
            &Verdict::default(),
            &outcome(
                Status::new(Code::ResourceExhausted, "redisquota: Resource exhausted"),
                0,
                Duration::from_secs(1),
            ),
        );
        assert_eq!(named.status.message, "redisquota: Resource exhausted");
    }
}
