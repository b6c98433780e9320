//! The report pipeline: evaluate the report rules, put each instance on its handler's queue
//! ([`crate::report_queue`]); the queue's task delivers them in batches.

use mixer_model::{Bag, InvalidCharge, QuotaInstance, Template, Variety, charge_amount};

use crate::decision::InstanceError;
use crate::evaluate::evaluate_for;
use crate::preprocess::preprocess;
use crate::snapshot::Snapshot;

/// What a report did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportOutcome {
    /// Instances put on their handlers' queues.
    pub queued: usize,
    /// Instances dropped because a queue was full (also counted in metrics).
    pub dropped: usize,
    /// Instances that could not be built, and so were not sent (also counted in metrics).
    pub instance_errors: Vec<InstanceError>,
}

/// Reports `bag` on `snapshot`: the report instances of matched rules go on their handlers'
/// queues. Neither the matched rules' names nor the reads are recorded: nothing answers with
/// them.
///
/// The attribute generators run first ([`crate::preprocess`]); one that fails or denies
/// leaves its bindings at their defaults (counted in `mixer_handler_calls_total`): the
/// record is never dropped for it.
pub async fn report(snapshot: &Snapshot, bag: &dyn Bag) -> ReportOutcome {
    if !snapshot.generates {
        return enqueue(snapshot, bag);
    }
    Box::pin(async {
        match preprocess(snapshot, bag, false).await {
            Some(pre) => enqueue(snapshot, &pre.over(bag)),
            None => enqueue(snapshot, bag),
        }
    })
    .await
}

/// Evaluates the report rules on `bag` and queues their instances.
fn enqueue(snapshot: &Snapshot, bag: &dyn Bag) -> ReportOutcome {
    let eval = evaluate_for(snapshot, bag, Variety::Report, false, false);
    let mut outcome = ReportOutcome {
        instance_errors: eval.instance_errors,
        ..ReportOutcome::default()
    };
    for d in eval.dispatches {
        let Some(queue) = snapshot
            .handlers
            .get(d.handler)
            .and_then(|h| h.queue.as_ref())
        else {
            continue;
        };
        // A charge is checked before it is queued: one that is not a valid amount is
        // dropped (counted), never sent as a refund or an overflow; nothing to charge is not
        // sent at all.
        if d.instance.template == Template::Quota {
            match charge_of(&d.instance) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(e) => {
                    queue.drop_invalid_charge(&d.instance, e);
                    outcome.dropped += 1;
                    continue;
                }
            }
        }
        if queue.push(d.instance) {
            outcome.queued += 1;
        } else {
            outcome.dropped += 1;
        }
    }
    outcome
}

/// The units a report's quota instance charges: its `charge` as an amount (nothing when the
/// field is unset).
pub(crate) fn charge_of(instance: &mixer_model::Instance) -> Result<i64, InvalidCharge> {
    match QuotaInstance::of(instance).and_then(|q| q.charge) {
        Some(value) => charge_amount(value),
        None => Ok(0),
    }
}

/// What [`charge_now`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Charged {
    /// Units charged (a repeat of a deduplication id seen before counts as charged: its
    /// handler answered it).
    pub units: i64,
    /// Charges that were not a valid amount, so not sent.
    pub invalid: usize,
    /// Charges a handler failed, with why.
    pub errors: Vec<String>,
}

/// Charges the usage of a report evaluation's quota dispatches at once, through each
/// handler's [`charge_many`](mixer_adapter_api::QuotaHandler::charge_many), without the
/// report queue: `mixer test` uses it so that a case's charge is counted before the next
/// case runs. Serving goes through the queue ([`report`]).
pub async fn charge_now(snapshot: &Snapshot, dispatches: &[crate::Dispatch]) -> Charged {
    let mut charged = Charged::default();
    for d in dispatches {
        if d.instance.template != Template::Quota {
            continue;
        }
        let amount = match charge_of(&d.instance) {
            Ok(0) => continue,
            Ok(amount) => amount,
            Err(_) => {
                charged.invalid += 1;
                continue;
            }
        };
        let Some(built) = snapshot.handlers.get(d.handler) else {
            continue;
        };
        let Some(quota) = built.handler.as_quota() else {
            continue;
        };
        let args = mixer_adapter_api::QuotaArgs {
            amount,
            deduplication_id: QuotaInstance::of(&d.instance)
                .and_then(|q| q.deduplication_id)
                .unwrap_or_default()
                .to_string(),
            ..Default::default()
        };
        for answer in quota.charge_many(&[(&d.instance, &args)]).await {
            match answer {
                Ok(_) => charged.units += amount,
                Err(e) => charged.errors.push(format!("{}: {e}", built.name)),
            }
        }
    }
    charged
}
