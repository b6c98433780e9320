//! Quota after check: the stage that charges quota once a check allows, for the check
//! protocols that have no quota field of their own (HTTP forward-auth, Envoy ext_authz).
//!
//! nginx `auth_request`, Caddy `forward_auth` and Traefik `forwardAuth` have no other hook for
//! a central rate limit, and an Envoy without a rate limit filter has only ext_authz. So once
//! a check is allowed, every quota instance whose rule matches the request is charged one unit,
//! as Envoy's rate limit filter charges one hit per request, deduplicated by the request id
//! when the proxy sends one (`request.id`: `X-Request-Id`, or Envoy's request id), so a
//! proxy retrying the same check is not charged twice.
//!
//! Over the limit the check becomes a [`QuotaRefusal`]: a denial with RESOURCE_EXHAUSTED
//! (which the HTTP front ends answer with 429) and when units come back, which each front end
//! words in its protocol's headers. A quota handler that fails keeps its fail policy: open
//! lets the request through (and the failure is counted), closed leaves the check
//! [`Undecided`].

use std::time::Duration;

use mixer_adapter_api::QuotaArgs;
use mixer_model::{Bag, Code, QuotaLimit, Status, Value, Variety, Verdict};

use super::{Checked, Wants, check_prepared};
use crate::decision::Undecided;
use crate::decision_log::CacheTier;
use crate::preprocess::Prepared;
use crate::quota::{QuotaAsk, QuotaOutcome, ask_prepared};
use crate::snapshot::Snapshot;

/// Header operations a front end may add to a refusal (`Retry-After` and the three rate limit
/// headers), reserved when the refusal is built so that adding them does not grow the vector.
const PROTOCOL_HEADERS: usize = 4;

/// What a check that also charges quota came to.
// Returned by value once per check and matched at once: boxing the refusal would cost an
// allocation per refusal to save a few bytes of stack.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum QuotaAfterCheck {
    /// The check's own answer: a denial, or an allowance that no quota rule matched (or
    /// whose handlers named no limit).
    Checked(Checked),
    /// Allowed, and the quotas it was charged granted it.
    Granted {
        /// The check's answer.
        checked: Checked,
        /// The most constraining limit a handler counted the grant against, for the rate
        /// limit headers of the protocols that send them on allowed requests.
        limit: QuotaLimit,
    },
    /// Allowed by the check, refused by a quota it was charged.
    Refused(QuotaRefusal),
}

/// A check refused for an exhausted quota.
#[derive(Clone, Debug)]
pub struct QuotaRefusal {
    /// RESOURCE_EXHAUSTED with the handler's message (or the Istio proxy's own words when it
    /// gave none), the allowing verdict's rules and response header operations, and never to
    /// be reused: the next request may find units again. Its header operations have room for
    /// the protocol's own.
    pub verdict: Verdict,
    /// Whether the check it follows came from the cache.
    pub cache_hit: bool,
    /// Which cache tier answered the check it follows.
    pub tier: CacheTier,
    /// Whole seconds (rounded up) until units come back: the limit's `retry_after`, or for a
    /// handler that names no limit, the refusal's valid duration.
    pub retry_after_secs: u64,
    /// The limit's maximum amount, when the handler says it.
    pub limit: Option<i64>,
}

/// Decides `bag`'s check ([`check`]) and, when it allows, charges one unit to every quota
/// instance a matching quota rule selects. Undecided when the check is, or when a quota
/// handler that fails closed fails.
pub async fn check_with_quota(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    wants: Wants,
) -> Result<QuotaAfterCheck, Undecided> {
    // With quota rules to charge, the generators run once, ahead of the check: the quota
    // rules then see what the check saw. Without, a cache hit calls none. Boxed: few
    // configs run them, and held inline they made every check's future (moved whole by
    // each caller) larger by their size (#36).
    let prepared = if snapshot.generates && snapshot.has_rules(Variety::Quota) {
        Box::pin(Prepared::new(snapshot, bag)).await
    } else {
        Prepared::default()
    };
    let checked = check_prepared(snapshot, bag, wants, &prepared).await?;
    if !checked.verdict.is_allowed() || !snapshot.has_rules(Variety::Quota) {
        return Ok(QuotaAfterCheck::Checked(checked));
    }
    charge(snapshot, bag, checked, &prepared).await
}

/// `checked`, or the refusal it becomes when a quota its request is charged is exhausted.
async fn charge(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    checked: Checked,
    prepared: &Prepared,
) -> Result<QuotaAfterCheck, Undecided> {
    if !checked.verdict.is_allowed() || !snapshot.has_rules(Variety::Quota) {
        return Ok(QuotaAfterCheck::Checked(checked));
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
    let quota = QuotaAsk {
        bag,
        quota: None,
        args: &args,
    };
    let Some(outcome) = ask_prepared(snapshot, &[quota], prepared).await.pop() else {
        return Ok(QuotaAfterCheck::Checked(checked));
    };
    let outcome = outcome?;
    if outcome.instances.is_empty() || !outcome.refused {
        let checked = with_dry_runs(checked, &outcome);
        return Ok(match outcome.result.limit {
            Some(limit) if !outcome.instances.is_empty() => {
                QuotaAfterCheck::Granted { checked, limit }
            }
            _ => QuotaAfterCheck::Checked(checked),
        });
    }
    Ok(QuotaAfterCheck::Refused(refusal(&checked, &outcome)))
}

/// `checked` with the would-be answers of the dry-run quota rules its request was charged
/// (already counted where they were allocated) and the quota handlers that failed open.
fn with_dry_runs(checked: Checked, outcome: &QuotaOutcome) -> Checked {
    if outcome.dry_run.is_empty() && outcome.failed_open.is_empty() {
        return checked;
    }
    let mut verdict = Verdict::clone(&checked.verdict);
    verdict.dry_run.extend(outcome.dry_run.iter().cloned());
    verdict
        .failed_open
        .extend(outcome.failed_open.iter().cloned());
    Checked {
        verdict: std::sync::Arc::new(verdict),
        cache_hit: checked.cache_hit,
        tier: checked.tier,
    }
}

/// The refusal an allowed check becomes when `outcome` refused its quota.
fn refusal(allowed: &Checked, outcome: &QuotaOutcome) -> QuotaRefusal {
    let message = if outcome.result.status.is_ok() || outcome.result.status.message.is_empty() {
        format!("Quota is exhausted for: {}", outcome.instances.join(", "))
    } else {
        outcome.result.status.message.clone()
    };
    let kept = &allowed.verdict.response_header_ops;
    let mut response_header_ops = Vec::with_capacity(kept.len() + PROTOCOL_HEADERS);
    response_header_ops.extend_from_slice(kept);
    let retry_after = outcome
        .result
        .limit
        .as_ref()
        .map(|l| l.retry_after)
        .filter(|d| !d.is_zero())
        .unwrap_or(outcome.result.valid_duration);
    QuotaRefusal {
        verdict: Verdict {
            status: Status::new(Code::ResourceExhausted, message),
            valid_duration: Duration::ZERO,
            valid_use_count: 0,
            matched_rules: allowed.verdict.matched_rules.clone(),
            response_header_ops,
            dry_run: allowed
                .verdict
                .dry_run
                .iter()
                .chain(&outcome.dry_run)
                .cloned()
                .collect(),
            failed_open: allowed
                .verdict
                .failed_open
                .iter()
                .chain(&outcome.failed_open)
                .cloned()
                .collect(),
            ..Verdict::default()
        },
        cache_hit: allowed.cache_hit,
        tier: allowed.tier,
        retry_after_secs: retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0),
        limit: outcome.result.limit.as_ref().map(|l| l.max_amount.max(0)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use mixer_model::{HeaderOp, HeaderOperation, QuotaResult, ReferencedAttributes};

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
            instances: smallvec::smallvec![Arc::from("requestcount.instance.istio-system")],
            unlimited: false,
            quota_mode: false,
            dry_run: Vec::new(),
            failed_open: Vec::new(),
        }
    }

    fn allowed(header_ops: Vec<HeaderOperation>) -> Checked {
        Checked {
            verdict: Arc::new(Verdict {
                response_header_ops: header_ops,
                ..Verdict::default()
            }),
            cache_hit: true,
            tier: CacheTier::InProcess,
        }
    }

    #[test]
    fn a_refusal_is_resource_exhausted_with_when_units_come_back() {
        let kept = HeaderOperation {
            name: "x-kept".to_string(),
            value: "1".to_string(),
            op: HeaderOp::Replace,
        };
        let r = refusal(
            &allowed(vec![kept.clone()]),
            &outcome(Status::OK, 0, Duration::from_millis(41_200)),
        );
        assert_eq!(r.verdict.status.code, Code::ResourceExhausted);
        assert_eq!(
            r.verdict.status.message,
            "Quota is exhausted for: requestcount.instance.istio-system"
        );
        assert_eq!(r.verdict.valid_duration, Duration::ZERO);
        assert_eq!(r.verdict.valid_use_count, 0);
        assert_eq!(r.verdict.response_header_ops, [kept]);
        // The front end's headers fit without growing the vector.
        let ops = &r.verdict.response_header_ops;
        assert!(ops.capacity() - ops.len() >= PROTOCOL_HEADERS);
        assert_eq!((r.retry_after_secs, r.limit), (42, Some(3)));
        assert!(r.cache_hit);
        let named = refusal(
            &allowed(Vec::new()),
            &outcome(
                Status::new(Code::ResourceExhausted, "redisquota: Resource exhausted"),
                0,
                Duration::from_secs(1),
            ),
        );
        assert_eq!(
            named.verdict.status.message,
            "redisquota: Resource exhausted"
        );
        assert_eq!(named.retry_after_secs, 1);
    }

    #[test]
    fn without_a_limit_units_come_back_after_the_refusals_valid_duration() {
        let mut o = outcome(Status::OK, 0, Duration::ZERO);
        o.result.limit = None;
        o.result.valid_duration = Duration::from_millis(1_500);
        let r = refusal(&allowed(Vec::new()), &o);
        assert_eq!((r.retry_after_secs, r.limit), (2, None));
    }
}
