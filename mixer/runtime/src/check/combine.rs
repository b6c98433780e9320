//! The check's combine stage: the handlers' answers into one verdict, as Istio 1.4's
//! dispatcher combines them. The first handler to answer sets the validity and later ones can
//! only shorten it (the defaults stand only when no handler was asked); the first denial
//! ends the check; an error applies the handler's fail policy.

use std::time::Duration;

use mixer_adapter_api::AdapterError;
use mixer_adapter_api::host::FailPolicy;
use mixer_model::{CheckResult, HandlerFailure, Variety, Verdict};

use super::Decided;
use crate::decision::Undecided;
use crate::metrics::RuntimeMetrics;
use crate::snapshot::BuiltHandler;

/// Whether to ask the next handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Ask the next one.
    Continue,
    /// A handler denied: the verdict is final.
    Stop,
}

/// The verdict so far.
pub(super) struct Combined {
    verdict: Verdict,
    answered: bool,
    cacheable: bool,
}

impl Combined {
    /// Starts from the evaluation's verdict (an allow with the default validity).
    pub(super) fn new(verdict: Verdict) -> Combined {
        Combined {
            verdict,
            answered: false,
            cacheable: true,
        }
    }

    /// Adds `built`'s answer, counting it in the handler's metrics. An error of a handler
    /// that fails closed leaves the check undecided.
    pub(super) fn add(
        &mut self,
        built: &BuiltHandler,
        answer: Result<CheckResult, AdapterError>,
        metrics: &RuntimeMetrics,
    ) -> Result<Next, Undecided> {
        self.cacheable &= built.cacheable;
        let verdict = &mut self.verdict;
        match answer {
            Ok(result) => {
                match &built.check_calls {
                    Some(calls) if result.status.is_ok() => calls.ok.inc(),
                    Some(calls) => calls.denied.inc(),
                    None => {}
                }
                if self.answered {
                    verdict.valid_duration = verdict.valid_duration.min(result.valid_duration);
                    verdict.valid_use_count = verdict.valid_use_count.min(result.valid_use_count);
                } else {
                    verdict.valid_duration = result.valid_duration;
                    verdict.valid_use_count = result.valid_use_count;
                    self.answered = true;
                }
                if result.status.is_ok() {
                    return Ok(Next::Continue);
                }
                verdict.status = result.status;
                verdict.denied_by = Some(built.name.clone());
                Ok(Next::Stop)
            }
            Err(error) => {
                metrics.handler_call(&built.name, "check", error.kind.label());
                match built.fail_policy_for(Variety::Check) {
                    // Failing open allows this request but the answer must not be reused.
                    FailPolicy::Open => {
                        verdict.valid_duration = Duration::ZERO;
                        verdict.valid_use_count = 0;
                        self.answered = true;
                        // The decision log says which handler failed and why.
                        verdict.failed_open.push(HandlerFailure {
                            handler: built.name.clone(),
                            error: error.to_string(),
                        });
                        Ok(Next::Continue)
                    }
                    FailPolicy::Closed => Err(Undecided::Handler {
                        handler: built.name.clone(),
                        error,
                    }),
                }
            }
        }
    }

    /// The verdict, and whether every handler consulted allows caching it.
    pub(super) fn finish(self) -> Decided {
        Decided {
            verdict: self.verdict,
            cacheable: self.cacheable,
        }
    }
}
