//! From what an algorithm decided to the [`QuotaResult`], shadow mode included.

use std::time::Duration;

use mixer_adapter_api::QuotaArgs;
use mixer_model::{Code, QuotaLimit, QuotaResult, Status};

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

/// Turns a decision into the result and counts it. Not granted (0 of a positive amount) is
/// `RESOURCE_EXHAUSTED` (as Istio's redisquota; Istio's memquota answered OK with 0 granted
/// and left the denial to the proxy). In shadow mode a limited answer becomes OK with the full
/// amount, and the status message says what would have happened (the adapters log it).
pub fn finish(
    adapter: &str,
    sel: &Selected<'_>,
    args: &QuotaArgs,
    decision: Decision,
    metrics: &Metrics,
) -> QuotaResult {
    let m = metrics.quota(sel.quota.index);
    let limit = Some(QuotaLimit {
        name: sel.quota.name.clone(),
        max_amount: sel.limit.max_amount,
        window: sel.limit.valid_duration,
        remaining: decision.remaining.clamp(0, sel.limit.max_amount.max(0)),
        reset_after: decision.reset_after,
    });
    m.count_allocation(decision.deduplicated);
    let limited = decision.granted < args.amount;
    let denied = decision.granted <= 0 && args.amount > 0;
    if limited && sel.limit.shadow {
        m.count_shadow();
        let would = if denied {
            "RESOURCE_EXHAUSTED".to_string()
        } else {
            format!("granted {} of {}", decision.granted, args.amount)
        };
        return QuotaResult {
            status: Status::new(
                Code::Ok,
                format!(
                    "shadow mode: quota {} would have answered {would}",
                    sel.quota.name
                ),
            ),
            valid_duration: decision.valid_duration,
            granted_amount: args.amount,
            limit,
        };
    }
    if denied {
        m.count_denial();
        return QuotaResult {
            status: Status::new(
                Code::ResourceExhausted,
                format!(
                    "{adapter}: quota {} exhausted ({} per {})",
                    sel.quota.name,
                    sel.limit.max_amount,
                    mixer_model::Duration::from_std(sel.limit.valid_duration)
                ),
            ),
            valid_duration: decision.valid_duration,
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
