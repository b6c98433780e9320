//! Quota dispatch: from a bag and a quota request to the quota handlers of matched rules.

use std::time::Duration;

use mixer_adapter_api::{FailPolicy, QuotaArgs};
use mixer_model::{Bag, Code, Instance, QuotaResult, ReferencedAttributes, Status, Variety};

use crate::dispatch::{CheckError, DEFAULT_VALID_DURATION};
use crate::snapshot::Snapshot;

/// What a quota request came to.
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaOutcome {
    /// The combined answer: the smallest grant and the first refusal's status.
    pub result: QuotaResult,
    /// What the rule evaluation read.
    pub referenced: ReferencedAttributes,
    /// Names of the quota instances consulted (empty: no rule asked for this quota, and
    /// everything was granted).
    pub instances: Vec<String>,
}

/// Whether `result`'s limit says more about the request than the one `combined` holds: a
/// refusal's limit over a grant's, then the one with less remaining.
fn more_constraining(result: &QuotaResult, combined: &QuotaResult) -> bool {
    let Some(new) = &result.limit else {
        return false;
    };
    let Some(old) = &combined.limit else {
        return true;
    };
    let refused = !result.status.is_ok();
    let was_refused = !combined.status.is_ok();
    (refused, -new.remaining) > (was_refused, -old.remaining)
}

/// Whether `instance` answers the quota called `quota` in a request. Istio proxies name
/// quotas by instance, in either the current form (`name.namespace`) or the older
/// kind-qualified one (`name.quota.namespace`, `name.instance.namespace`); a bare name matches
/// too.
pub fn quota_name_matches(quota: &str, instance: &Instance) -> bool {
    let full = instance.name.as_ref();
    if quota == full {
        return true;
    }
    let (short, namespace) = full.split_once('.').unwrap_or((full, ""));
    if quota == short {
        return true;
    }
    let template = instance.template.name();
    [template, "instance"].iter().any(|kind| {
        quota.len() == short.len() + kind.len() + namespace.len() + 2
            && quota == format!("{short}.{kind}.{namespace}")
    })
}

impl Snapshot {
    /// Allocates quota: evaluates the quota rules against `bag` and asks the handler of each
    /// matching quota instance (only those answering `quota`, when given) for `args.amount`.
    /// With no matching instance everything is granted, as in Istio.
    pub async fn quota(
        &self,
        bag: &dyn Bag,
        quota: Option<&str>,
        args: &QuotaArgs,
    ) -> Result<QuotaOutcome, CheckError> {
        self.metrics.check_activity.mark(std::time::Instant::now());
        let eval = self.evaluate(bag, Variety::Quota);
        let mut outcome = QuotaOutcome {
            result: QuotaResult {
                status: Status::OK,
                valid_duration: DEFAULT_VALID_DURATION,
                granted_amount: args.amount,
                limit: None,
            },
            referenced: eval.referenced,
            instances: Vec::new(),
        };
        for dispatch in &eval.dispatches {
            if quota.is_some_and(|q| !quota_name_matches(q, &dispatch.instance)) {
                continue;
            }
            let Some(built) = self.handlers.get(dispatch.handler) else {
                continue;
            };
            let Some(handler) = built.handler.as_quota() else {
                continue;
            };
            outcome.instances.push(dispatch.instance.name.to_string());
            match handler.allocate(&dispatch.instance, args).await {
                Ok(result) => {
                    let label = if result.status.is_ok() {
                        "ok"
                    } else {
                        "denied"
                    };
                    self.metrics.handler_call(&built.name, "quota", label);
                    let combined = &mut outcome.result;
                    combined.granted_amount = combined.granted_amount.min(result.granted_amount);
                    combined.valid_duration = combined.valid_duration.min(result.valid_duration);
                    let refused = !result.status.is_ok();
                    if more_constraining(&result, combined) {
                        combined.limit = result.limit;
                    }
                    if combined.status.is_ok() && refused {
                        combined.status = result.status;
                    }
                }
                Err(error) => {
                    self.metrics
                        .handler_call(&built.name, "quota", error.kind.label());
                    match built.fail_policy_for(Variety::Quota) {
                        // Failing open grants the request, for no longer than this call.
                        FailPolicy::Open => outcome.result.valid_duration = Duration::ZERO,
                        FailPolicy::Closed => {
                            return Err(CheckError {
                                handler: built.name.clone(),
                                error,
                            });
                        }
                    }
                }
            }
        }
        if outcome.result.granted_amount < args.amount
            && outcome.result.status.is_ok()
            && !args.best_effort
        {
            outcome.result.status = Status::new(Code::ResourceExhausted, "quota exhausted");
        }
        Ok(outcome)
    }
}
