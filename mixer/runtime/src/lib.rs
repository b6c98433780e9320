//! The mixer's runtime: config snapshots with handlers built and rules indexed, the
//! dispatcher that turns an attribute bag into a verdict, and hot reload.
//!
//! ```text
//! config (validated) ──build──> Snapshot ──ArcSwap──> Runtime::snapshot()
//! bag ──> check(snapshot, bag)  ──> cache ──> preprocess ──> evaluate ──> dispatch ──> combine ──> Checked
//!     (check_with_quota: an allowed Checked ──> quota::ask ──> Checked or QuotaRefusal)
//! bag ──> quota::ask / plan + allocate ──> evaluate ──> quota handlers ──> QuotaOutcome
//! bag ──> report(snapshot, bag) ──> evaluate ──> report queues ──> ReportOutcome
//! ```
//!
//! A [`Snapshot`] is data: the config, its built handlers, its rule sets and its check cache.
//! One entry per variety works on it: [`check`], [`quota`] and [`report`]; all three start
//! with the same rule evaluation ([`evaluate`]), after the preprocess phase when a rule sends
//! an attribute generator (its outputs bound to attributes over the request's bag). A request takes [`Runtime::snapshot`] once
//! (or [`Runtime::ready_snapshot`]) and finishes on it; a reload builds a whole new snapshot
//! and swaps it in, so a request never sees half a config.

mod build_error;
mod check;
mod content;
mod deadline;
mod decision;
mod decision_id;
mod decision_log;
mod evaluate;
mod index;
mod limits;
mod metrics;
mod preprocess;
pub mod quota;
mod quota_name;
pub mod ratelimit_stats;
mod reads;
mod report;
mod report_executor;
mod report_queue;
mod rules;
mod runtime;
mod sampling;
mod shared_exprs;
mod shared_tier;
mod snapshot;
pub mod traces;
mod verdicts;
mod watch;

pub use build_error::BuildError;
pub use check::{
    Checked, QuotaAfterCheck, QuotaRefusal, Wants, check, check_prepared, check_with_quota,
};
pub use content::{CheckOutcome, ConfigContent, DiskState, FileHash, Settle};
pub use deadline::DEFAULT_HANDLER_TIMEOUT;
pub use decision::{DEFAULT_VALID_DURATION, DEFAULT_VALID_USE_COUNT, InstanceError, Undecided};
pub use decision_id::{DECISION_ID_HEADER, DecisionId, with_current as with_current_decision};
pub use decision_log::{CacheTier, Decision, DecisionOutcome, DescriptorDecision};
pub use evaluate::{Dispatch, DryRunEval, Evaluation, MatchFailure, evaluate};
pub use index::RuleIndex;
pub use limits::{
    DEFAULT_ACCESS_LOG_ENTRIES, DEFAULT_ATTRIBUTES, DEFAULT_CHECK_QUOTAS,
    DEFAULT_DESCRIPTOR_ENTRIES, DEFAULT_EXPORT_RECORDS, DEFAULT_RATELIMIT_DESCRIPTORS,
    DEFAULT_REPORT_RECORDS, Limit, RequestLimits,
};
pub use metrics::{CheckCalls, CheckResults, RuntimeMetrics};
pub use preprocess::{Prepared, evaluate_preprocessed};
pub use quota::{QuotaAsk, QuotaOutcome, QuotaPlan};
pub use quota_name::quota_name_matches;
pub use report::{Charged, ReportOutcome, charge_now, report};
pub use report_executor::{
    CHECKS_RECENT, CheckActivity, ExecutorStopped, REPORT_NICE, ReportExecutor,
};
pub use report_queue::{Overflow, QueueOptions};
pub use runtime::{ConfigOrigin, NotReady, ReloadError, Runtime};
pub use shared_tier::{SharedHit, SharedTier, SharedTierRef, use_limited};
pub use snapshot::{Built, BuiltHandler, RuntimeOptions, Snapshot};
pub use verdicts::{CacheOptions, encode_value};
pub use watch::{WatchGuard, WatchOptions, watch, watch_with};
