//! The report pipeline: evaluate the report rules, put each instance on its handler's queue
//! ([`crate::report_queue`]); the queue's task delivers them in batches.

use mixer_model::{Bag, Variety};

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
        if queue.push(d.instance) {
            outcome.queued += 1;
        } else {
            outcome.dropped += 1;
        }
    }
    outcome
}
