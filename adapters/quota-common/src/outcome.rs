//! From what an algorithm decided to the [`QuotaResult`], shadow mode included.

use std::time::Duration;

use mixer_adapter_api::QuotaArgs;
use mixer_model::{Code, QuotaResult, Status};

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
        };
    }
    QuotaResult {
        status: Status::OK,
        valid_duration: decision.valid_duration,
        granted_amount: decision.granted.max(0),
    }
}
