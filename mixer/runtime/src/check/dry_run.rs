//! The check's dry-run stage: after the enforced handlers have decided, the handlers of every
//! matched dry-run rule are asked, each rule combined on its own as Istio combines a check
//! (the first denial decides it), and what each would have answered is kept on the verdict.
//! Nothing here changes the verdict's status, validity or header operations.
//!
//! Every dry-run rule is asked even when an enforced rule denied: what a rule would do to
//! the traffic it sees is what a rollout needs to know. A handler error is the rule's
//! would-be `error`, whatever the handler's fail policy.

use mixer_model::{Code, DryRunOutcome, Status, WouldBe};

use super::dispatch;
use crate::evaluate::DryRunEval;
use crate::snapshot::Snapshot;

/// Asks the handlers of each matched dry-run rule; their would-be verdicts in rule order.
pub(super) async fn ask(snapshot: &Snapshot, runs: &[DryRunEval]) -> Vec<DryRunOutcome> {
    let mut outcomes = Vec::with_capacity(runs.len());
    for run in runs {
        let (would_be, status) = match &run.decided {
            Some(decided) => decided.clone(),
            None => decide(snapshot, run).await,
        };
        outcomes.push(DryRunOutcome {
            rule: run.rule.clone(),
            would_be,
            status,
        });
    }
    outcomes
}

/// One rule's would-be verdict: allow unless a handler denies (first denial) or fails.
async fn decide(snapshot: &Snapshot, run: &DryRunEval) -> (WouldBe, Status) {
    for d in &run.dispatches {
        let Some(built) = snapshot.handlers.get(d.handler) else {
            return (
                WouldBe::Error,
                Status::new(Code::Internal, "a rule routes to a handler not built"),
            );
        };
        match dispatch::ask(built, &d.instance).await {
            Ok(result) => {
                match &built.check_calls {
                    Some(calls) if result.status.is_ok() => calls.ok.inc(),
                    Some(calls) => calls.denied.inc(),
                    None => {}
                }
                if !result.status.is_ok() {
                    let message = format!("{}:{}", built.name, result.status.message);
                    return (WouldBe::Deny, Status::new(result.status.code, message));
                }
            }
            Err(error) => {
                snapshot
                    .metrics
                    .handler_call(&built.name, "check", error.kind.label());
                let message = format!("handler {} could not decide: {error}", built.name);
                return (WouldBe::Error, Status::new(Code::Unavailable, message));
            }
        }
    }
    (WouldBe::Allow, Status::OK)
}
