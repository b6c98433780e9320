//! What handlers answer and what the mixer decides.

use std::sync::Arc;
use std::time::Duration;

use crate::referenced::ReferencedAttributes;
use crate::status::Status;

/// A check handler's answer for one instance (Istio's `CheckResult`).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckResult {
    /// OK allows; any other code denies.
    pub status: Status,
    /// How long the answer may be reused.
    pub valid_duration: Duration,
    /// How many times the answer may be reused.
    pub valid_use_count: i32,
}

impl CheckResult {
    /// An OK answer valid for `valid_duration` and `valid_use_count` uses.
    pub fn ok(valid_duration: Duration, valid_use_count: i32) -> CheckResult {
        CheckResult {
            status: Status::OK,
            valid_duration,
            valid_use_count,
        }
    }
}

/// A quota handler's answer (Istio's `QuotaResult`, plus where the counter stands).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct QuotaResult {
    /// OK when granted (possibly less than asked with best effort).
    pub status: Status,
    /// How long the grant holds.
    pub valid_duration: Duration,
    /// How much was granted.
    pub granted_amount: i64,
    /// The limit that applied and what is left of it after this call, when the handler knows
    /// (the built-in quota adapters do; Istio's out-of-process protocol cannot say it). The
    /// rate limit front end answers `current_limit`, `limit_remaining` and the
    /// `X-RateLimit-*` headers from it.
    pub limit: Option<QuotaLimit>,
}

/// The limit a quota allocation was counted against, and the counter's state after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaLimit {
    /// The quota's name as configured in the handler.
    pub name: Arc<str>,
    /// Units per window (fixed and rolling window) or the bucket's capacity (token bucket).
    pub max_amount: i64,
    /// The window, or the time to refill an empty token bucket.
    pub window: Duration,
    /// Units that could still be granted now.
    pub remaining: i64,
    /// Until the counter is back to the full limit (fixed window: the window's end; rolling
    /// window: until the oldest counted units leave the window; token bucket: until the bucket
    /// is full).
    pub reset_after: Duration,
    /// A refusal: how long until the amount asked could be granted (fixed window: the
    /// window's end; rolling window: until the oldest counted units leave it; token bucket:
    /// until enough tokens are back). Zero for a grant. A refusal's own `valid_duration` is 0,
    /// as Istio's quota adapters answer, so that no proxy caches it; this is where the wait
    /// is said (the rate limit front end's `duration_until_reset`).
    pub retry_after: Duration,
}

/// How a rule changes a header on the way through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeaderOp {
    /// Set, replacing any value.
    Replace,
    /// Add a value, keeping existing ones.
    Append,
    /// Delete the header.
    Remove,
}

/// One header operation with its value already evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderOperation {
    /// Header name.
    pub name: String,
    /// Value (empty for remove).
    pub value: String,
    /// What to do.
    pub op: HeaderOp,
}

/// The mixer's answer to a check: the combined status of every handler consulted, how long
/// and how often it may be reused, and exactly which attributes it depended on.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Verdict {
    /// OK allows; otherwise the first denial's status, as its handler gave it.
    pub status: Status,
    /// The full name of the handler that denied (`name.kind.namespace`); `None` when allowed
    /// or when no handler denied (a rule whose match could not be evaluated).
    pub denied_by: Option<Arc<str>>,
    /// The minimum valid duration across the handlers consulted.
    pub valid_duration: Duration,
    /// The minimum use count across the handlers consulted.
    pub valid_use_count: i32,
    /// What the decision read (matches, instance fields, header values).
    pub referenced: ReferencedAttributes,
    /// Names of the rules whose match was true, in evaluation order.
    pub matched_rules: Vec<Arc<str>>,
    /// Header operations for the request on its way upstream.
    pub request_header_ops: Vec<HeaderOperation>,
    /// Header operations for the response to the client.
    pub response_header_ops: Vec<HeaderOperation>,
    /// What each matched dry-run (not enforced) rule would have decided, in evaluation
    /// order; none of it changed `status`. Empty unless a dry-run rule matched.
    pub dry_run: Vec<DryRunOutcome>,
    /// The handlers that failed and whose fail policy (open) let the check go on without
    /// their answer, in the order asked. A verdict holding one is never reused (its valid
    /// duration and use count are zero), so it is never cached or shared.
    pub failed_open: Vec<HandlerFailure>,
}

/// A handler that failed while a check was decided.
#[derive(Clone, Debug, PartialEq)]
pub struct HandlerFailure {
    /// The handler's full name.
    pub handler: Arc<str>,
    /// Its error, as the adapter or the deadline worded it (secrets already hidden).
    pub error: String,
}

/// What a dry-run rule would have decided had it been enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WouldBe {
    /// Its handlers allowed (or granted the quota).
    Allow,
    /// A handler denied (or refused the quota), or its match failed under
    /// `matchErrorPolicy: DENY`.
    Deny,
    /// A handler failed, or an instance could not be built: the rule could not decide.
    Error,
}

impl WouldBe {
    /// The `verdict` label of `mixer_rule_dry_run_total`.
    pub fn label(self) -> &'static str {
        match self {
            WouldBe::Allow => "allow",
            WouldBe::Deny => "deny",
            WouldBe::Error => "error",
        }
    }
}

/// One dry-run rule's would-be verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct DryRunOutcome {
    /// The rule's full name.
    pub rule: Arc<str>,
    /// What it would have decided.
    pub would_be: WouldBe,
    /// The status it would have answered with (the denying handler's, prefixed with its name
    /// as Istio words a denial; or the error).
    pub status: Status,
}

impl Verdict {
    /// True when the request may go through.
    pub fn is_allowed(&self) -> bool {
        self.status.is_ok()
    }

    /// The status message as Istio 1.4's dispatcher words a denial: the denying handler's
    /// full name, a colon, its message (`deny.handler.istio-system:not allowed`).
    pub fn istio_message(&self) -> std::borrow::Cow<'_, str> {
        match &self.denied_by {
            Some(handler) => format!("{handler}:{}", self.status.message).into(),
            None => self.status.message.as_str().into(),
        }
    }
}
