//! The mixer's runtime: config snapshots with handlers built and rules indexed, the
//! dispatcher that turns an attribute bag into a verdict, and hot reload.
//!
//! ```text
//! config (validated) ──build──> Snapshot ──ArcSwap──> Runtime::snapshot()
//! bag ──> Snapshot::evaluate ──> matched rules, instances ──> handlers ──> Verdict
//! ```
//!
//! A request takes [`Runtime::snapshot`] once and finishes on it; a reload builds a whole new
//! snapshot and swaps it in, so a request never sees half a config.

mod cache;
mod content;
mod deadline;
mod dispatch;
mod index;
mod limits;
mod metrics;
mod quota;
mod reads;
mod remote;
mod report_executor;
mod report_queue;
mod shared_exprs;
mod shared_tier;
mod snapshot;
mod store;
mod watch;

pub use cache::{CacheOptions, Checked, encode_value};
pub use content::{CheckOutcome, ConfigContent, DiskState, FileHash};
pub use deadline::DEFAULT_HANDLER_TIMEOUT;
pub use dispatch::{
    CheckError, DEFAULT_VALID_DURATION, DEFAULT_VALID_USE_COUNT, Dispatch, Evaluation,
    InstanceError, MatchFailure, ReportOutcome,
};
pub use index::RuleIndex;
pub use limits::{
    DEFAULT_ACCESS_LOG_ENTRIES, DEFAULT_ATTRIBUTES, DEFAULT_CHECK_QUOTAS,
    DEFAULT_DESCRIPTOR_ENTRIES, DEFAULT_EXPORT_RECORDS, DEFAULT_RATELIMIT_DESCRIPTORS,
    DEFAULT_REPORT_RECORDS, Limit, RequestLimits,
};
pub use metrics::{CheckCalls, CheckResults, RuntimeMetrics};
pub use quota::{QuotaAsk, QuotaOutcome, QuotaPlan, quota_name_matches};
pub use report_executor::{
    CHECKS_RECENT, CheckActivity, ExecutorStopped, REPORT_NICE, ReportExecutor,
};
pub use report_queue::{Overflow, QueueOptions};
pub use shared_tier::{SharedHit, SharedTier, SharedTierRef, use_limited};
pub use snapshot::{BuildError, Built, BuiltHandler, RuntimeOptions, Snapshot};
pub use store::{ConfigOrigin, ReloadError, Runtime};
pub use watch::{WatchGuard, WatchOptions, watch, watch_with};
