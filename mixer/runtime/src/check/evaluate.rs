//! The check's evaluation stage: the rules' answer before any handler is asked. A matched
//! rule's instance that cannot be built leaves the check undecided, and a rule whose match
//! fails under `matchErrorPolicy: deny` denies it outright; otherwise the verdict starts as
//! an allow with the default validity, and the instances to send go to the dispatch stage.

use mixer_config::MatchErrorPolicy;
use mixer_model::{Code, Status, Variety, Verdict};

use crate::decision::{DEFAULT_VALID_DURATION, DEFAULT_VALID_USE_COUNT, Undecided};
use crate::evaluate::{Dispatch, DryRunEval, evaluate_for};
use crate::snapshot::Snapshot;

/// What the rules say about a check.
pub(super) enum Plan {
    /// Decided without asking any handler (the matched dry-run rules still to ask).
    Decided(Verdict, Vec<DryRunEval>),
    /// The verdict so far, and the instances whose handlers decide the rest, in rule order.
    Ask {
        /// An allow with the default validity, the reads, matched rules and header operations.
        verdict: Verdict,
        /// The check instances of matched rules.
        dispatches: Vec<Dispatch>,
        /// The matched dry-run rules, asked after the enforced ones.
        dry_runs: Vec<DryRunEval>,
    },
}

/// Evaluates the check rules against `bag`; `record_reads: false` leaves the verdict's
/// `referenced` empty.
pub(super) fn plan(
    snapshot: &Snapshot,
    bag: &dyn mixer_model::Bag,
    record_reads: bool,
) -> Result<Plan, Undecided> {
    let eval = evaluate_for(snapshot, bag, Variety::Check, true, record_reads);
    if let Some(error) = eval.instance_errors.into_iter().next() {
        return Err(Undecided::Instance(error));
    }
    let mut verdict = Verdict {
        status: Status::OK,
        denied_by: None,
        valid_duration: DEFAULT_VALID_DURATION,
        valid_use_count: DEFAULT_VALID_USE_COUNT,
        referenced: eval.referenced,
        matched_rules: eval.matched_rules,
        request_header_ops: eval.request_header_ops,
        response_header_ops: eval.response_header_ops,
        dry_run: Vec::new(),
        failed_open: Vec::new(),
    };
    if let Some(failure) = eval
        .match_failures
        .iter()
        .find(|f| f.policy == MatchErrorPolicy::Deny)
    {
        verdict.status = Status::new(
            Code::PermissionDenied,
            format!(
                "rule {} could not be evaluated: {}",
                failure.rule, failure.message
            ),
        );
        return Ok(Plan::Decided(verdict, eval.dry_runs));
    }
    Ok(Plan::Ask {
        verdict,
        dispatches: eval.dispatches,
        dry_runs: eval.dry_runs,
    })
}
