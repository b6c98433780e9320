//! From what an algorithm decided to the [`QuotaResult`], shadow mode included.

use std::time::Duration;

use mixer_adapter_api::QuotaArgs;
use mixer_model::{Code, Instance, QuotaInstance, QuotaLimit, QuotaResult, Status};

use crate::metrics::Metrics;
use crate::select::Selected;

/// What a counter decided for one allocation (before shadow mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Units granted: `amount`, or with best effort what was left (possibly 0); 0 when denied.
    pub granted: i64,
    /// Fixed window: until the window ends. Rolling window: `validDuration` when granted, until
    /// the oldest counted bucket leaves the window when denied. Token bucket: the time to
    /// refill what was granted, or until enough tokens are back when denied.
    pub valid_duration: Duration,
    /// The answer was a repeat of an earlier one with the same deduplication id.
    pub deduplicated: bool,
    /// Units that could still be granted after this allocation.
    pub remaining: i64,
    /// Until the counter is back to the full limit (see [`QuotaLimit::reset_after`]).
    pub reset_after: Duration,
}

impl Decision {
    /// The decision for an allocation of nothing (0 or negative amounts): nothing granted,
    /// nothing counted; `max_amount` is what is left as far as this call knows.
    pub fn nothing(max_amount: i64) -> Decision {
        Decision {
            granted: 0,
            valid_duration: Duration::ZERO,
            deduplicated: false,
            remaining: max_amount.max(0),
            reset_after: Duration::ZERO,
        }
    }
}

/// How an adapter answers an allocation it cannot grant at all, as Istio 1.4's adapter of
/// the same name answers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Status OK with 0 granted (Istio's memquota, `memquota.go` `alloc`: `status.OK`, amount
    /// 0, no expiration); the proxy denies a request granted less than it asked.
    GrantNothing,
    /// `RESOURCE_EXHAUSTED` with this message (Istio's redisquota, `redisquota.go`
    /// `HandleQuota`: `status.WithResourceExhausted("redisquota: Resource exhausted")`).
    Exhausted(&'static str),
}

/// Turns a decision into the result and counts it. Not granted (0 of a positive amount) is
/// answered as `refusal` says, with a valid duration of 0 (both Istio adapters answer a
/// refusal valid for 0, so that no proxy caches it) and the wait until units come back in
/// [`QuotaLimit::retry_after`]. In shadow mode a limited answer becomes OK with the full
/// amount, and the status message says what would have happened (the adapters log it).
pub fn finish(
    refusal: Refusal,
    sel: &Selected<'_>,
    args: &QuotaArgs,
    decision: Decision,
    metrics: &Metrics,
) -> QuotaResult {
    finish_with_minimum(refusal, sel, args, 0, decision, metrics)
}

/// [`finish`] for a check that asked for at least `min_remaining` units left (the instance's
/// `min_remaining`, see [`min_remaining`]). A check that asks for nothing (amount 0, as checks
/// on a charged quota do) and found fewer left is refused with `RESOURCE_EXHAUSTED`: "granted
/// 0 of 0" would not refuse anything.
pub fn finish_with_minimum(
    refusal: Refusal,
    sel: &Selected<'_>,
    args: &QuotaArgs,
    min_remaining: i64,
    decision: Decision,
    metrics: &Metrics,
) -> QuotaResult {
    let m = metrics.quota(sel.quota.index);
    let below_minimum = args.amount <= 0 && min_remaining > 0 && decision.remaining < min_remaining;
    let limited = decision.granted < args.amount || below_minimum;
    let denied = (decision.granted <= 0 && args.amount > 0) || below_minimum;
    let limit = Some(QuotaLimit {
        name: sel.quota.name.clone(),
        max_amount: sel.limit.max_amount,
        window: sel.limit.valid_duration,
        remaining: decision.remaining.clamp(0, sel.limit.max_amount.max(0)),
        reset_after: decision.reset_after,
        retry_after: if denied {
            decision.valid_duration
        } else {
            Duration::ZERO
        },
    });
    m.count_allocation(decision.deduplicated);
    if limited && sel.limit.shadow {
        m.count_shadow();
        return QuotaResult {
            status: Status::new(
                Code::Ok,
                format!(
                    "shadow mode: quota {} would have answered granted {} of {}",
                    sel.quota.name,
                    decision.granted.max(0),
                    args.amount
                ),
            ),
            valid_duration: decision.valid_duration,
            granted_amount: args.amount,
            limit,
        };
    }
    if denied {
        m.count_denial();
        let status = match refusal {
            _ if below_minimum => Status::new(
                Code::ResourceExhausted,
                format!(
                    "quota {}: fewer than {min_remaining} units left",
                    sel.quota.name
                ),
            ),
            Refusal::GrantNothing => Status::OK,
            Refusal::Exhausted(message) => Status::new(Code::ResourceExhausted, message),
        };
        return QuotaResult {
            status,
            valid_duration: Duration::ZERO,
            granted_amount: 0,
            limit,
        };
    }
    QuotaResult {
        status: Status::OK,
        valid_duration: decision.valid_duration,
        granted_amount: decision.granted.max(0),
        limit,
    }
}

/// The instance's `min_remaining` (0 when unset or negative): a check is refused while fewer
/// units than this are left.
pub fn min_remaining(instance: &Instance) -> i64 {
    QuotaInstance::of(instance)
        .and_then(|q| q.min_remaining)
        .unwrap_or(0)
        .max(0)
}
