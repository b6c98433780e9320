//! The check pipeline: the one way a check is decided.
//!
//! ```text
//! bag ──> cache ──hit──────────────────────────────────────────────> Checked
//!           │ miss (coalesced; the shared tier asked first)
//!           └──> [preprocess] ──> evaluate ──> dispatch (each handler within its deadline)
//!                                              ──> combine ──> Checked
//! ```
//!
//! The preprocess phase ([`crate::preprocess`]) runs only when a rule sends an attribute
//! generator: the check is then decided on the request's bag with the generated attributes
//! laid over it, and its verdict keyed on the generators' inputs. The cache looks verdicts up
//! on the request's own bag, which is why.
//! Each stage owns its types, in its own module: [`cache`] (the in-process tier over
//! [`crate::verdicts`], then the shared one), [`evaluate`] (which rules match, which
//! instances they send), [`dispatch`] (one handler call, bounded by its deadline) and
//! [`combine`] (the handlers' answers into one verdict, as Istio 1.4 combines them). Every
//! check, cached or not, is counted and timed in the same place ([`check`]). For the check
//! protocols without a quota field of their own, [`quota_after`] charges quota once a check
//! allows ([`check_with_quota`]).

mod cache;
mod combine;
mod dispatch;
mod dry_run;
mod evaluate;
mod quota_after;

use std::sync::Arc;

use mixer_adapter_api::{AdapterError, ErrorKind};
use mixer_model::{Bag, Verdict};

pub use quota_after::{QuotaAfterCheck, QuotaRefusal, check_with_quota};

use crate::decision::Undecided;
use crate::decision_log::CacheTier;
use crate::preprocess::{Prepared, Preprocessed, Refusal, preprocess};
use crate::snapshot::Snapshot;

/// A decided check: the verdict and whether it came from the cache.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The verdict.
    pub verdict: Arc<Verdict>,
    /// True when no handler was consulted because a cached verdict applied.
    pub cache_hit: bool,
    /// Which tier answered: [`CacheTier::None`] exactly when `cache_hit` is false. The
    /// decision log says it, so that a shared verdict can be told from one of this replica.
    pub tier: CacheTier,
}

/// What the caller answers with, besides the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wants {
    /// The verdict alone (ext_authz, forward-auth). With the cache off the attributes the
    /// decision read are then not recorded at all, and the verdict's `referenced` is empty;
    /// with it on they are, as the cache's key.
    Verdict,
    /// The verdict and the attributes it read (`referenced`), which Mixer v1 answers with.
    Reads,
}

/// Decides a check on `snapshot`: from its check cache when a verdict applies, otherwise by
/// evaluating the rules and asking the check handlers of those that match. Counted in
/// `mixer_check_results_total` and timed in `mixer_check_duration_seconds`, hit or miss.
pub async fn check(snapshot: &Snapshot, bag: &dyn Bag, wants: Wants) -> Result<Checked, Undecided> {
    check_prepared(snapshot, bag, wants, &Prepared::default()).await
}

/// [`check`] of a request whose attribute generators already ran ([`Prepared::new`]): a
/// cache miss is decided on their outputs instead of calling them again.
pub async fn check_prepared(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    wants: Wants,
    prepared: &Prepared,
) -> Result<Checked, Undecided> {
    let pre = prepared.pre.as_ref();
    let started = std::time::Instant::now();
    let metrics = &snapshot.metrics;
    metrics.check_activity.mark(started);
    // The decision log writes what the decision read: recorded for it only when it is on.
    let record_reads = wants == Wants::Reads || snapshot.logs_decisions();
    let checked = match &snapshot.cache {
        Some(verdicts) => {
            let tier = cache::Tiers {
                verdicts,
                generation: snapshot.generation.as_deref(),
                vocabulary: snapshot.vocabulary(),
                metrics,
            };
            tier.check(bag, record_reads, &Pipeline { snapshot, bag, pre })
                .await
        }
        None => decide(snapshot, bag, record_reads, pre)
            .await
            .map(|decided| Checked {
                verdict: Arc::new(decided.verdict),
                cache_hit: false,
                tier: CacheTier::None,
            }),
    };
    if let Ok(c) = &checked {
        metrics.count_dry_runs(&c.verdict.dry_run);
    }
    match &checked {
        Ok(c) if c.verdict.is_allowed() => metrics.check_results.allowed.inc(),
        Ok(_) => metrics.check_results.denied.inc(),
        Err(_) => metrics.check_results.error.inc(),
    }
    metrics
        .check_duration
        .observe(started.elapsed().as_secs_f64());
    checked
}

/// A verdict decided by asking the handlers.
struct Decided {
    verdict: Verdict,
    /// Whether every handler consulted allows its answer to be cached.
    cacheable: bool,
}

/// The stages after the cache, for one request.
struct Pipeline<'r> {
    snapshot: &'r Snapshot,
    bag: &'r dyn Bag,
    /// The request's generated attributes, when they were prepared ahead of the check.
    pre: Option<&'r Preprocessed>,
}

impl cache::Decide for Pipeline<'_> {
    fn decide(
        &self,
        record_reads: bool,
    ) -> impl Future<Output = Result<Decided, Undecided>> + Send {
        decide(self.snapshot, self.bag, record_reads, self.pre)
    }
}

/// Decides without the cache: preprocess (when a rule sends an attribute generator), then
/// evaluate, dispatch and combine until a handler denies.
async fn decide(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    record_reads: bool,
    prepared: Option<&Preprocessed>,
) -> Result<Decided, Undecided> {
    // The benchmarked path, with no generator: one test, and a future no larger than before.
    if prepared.is_none() && !snapshot.generates {
        return decide_on(snapshot, bag, record_reads).await;
    }
    Box::pin(decide_generated(snapshot, bag, record_reads, prepared)).await
}

/// [`decide`] when attribute generators run: on `prepared` if they already did, else now.
async fn decide_generated(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    record_reads: bool,
    prepared: Option<&Preprocessed>,
) -> Result<Decided, Undecided> {
    if let Some(pre) = prepared {
        return decide_preprocessed(snapshot, bag, pre, record_reads).await;
    }
    match preprocess(snapshot, bag, record_reads).await {
        None => decide_on(snapshot, bag, record_reads).await,
        Some(pre) => decide_preprocessed(snapshot, bag, &pre, record_reads).await,
    }
}

/// Decides on the request's bag with the generators' attributes laid over it. The verdict
/// reads what the generators read, never the attributes they bound, and lives no longer than
/// their outputs do.
async fn decide_preprocessed(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    pre: &Preprocessed,
    record_reads: bool,
) -> Result<Decided, Undecided> {
    if let Some(failure) = &pre.failure {
        return Err(failure.clone());
    }
    let mut decided = match &pre.refusal {
        Some(refusal) => Decided {
            verdict: refused(refusal),
            cacheable: true,
        },
        None => decide_on(snapshot, &pre.over(bag), record_reads).await?,
    };
    let verdict = &mut decided.verdict;
    pre.to_request_reads(&mut verdict.referenced);
    if let Some(valid) = pre.valid_duration {
        verdict.valid_duration = verdict.valid_duration.min(valid);
    }
    decided.cacheable &= pre.cacheable;
    Ok(decided)
}

/// The verdict of a check a generator refused.
fn refused(refusal: &Refusal) -> Verdict {
    Verdict {
        status: refusal.denial.status.clone(),
        denied_by: refusal.by.clone(),
        valid_duration: crate::decision::DEFAULT_VALID_DURATION,
        valid_use_count: crate::decision::DEFAULT_VALID_USE_COUNT,
        referenced: mixer_model::ReferencedAttributes::new(),
        matched_rules: Vec::new(),
        request_header_ops: Vec::new(),
        response_header_ops: refusal.denial.response_headers.clone(),
        dry_run: Vec::new(),
        failed_open: Vec::new(),
    }
}

/// Decides on `bag` as it is: evaluate, then dispatch and combine until a handler denies.
async fn decide_on(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    record_reads: bool,
) -> Result<Decided, Undecided> {
    let plan = crate::traces::child_sync(crate::traces::RULE_EVALUATION, || {
        evaluate::plan(snapshot, bag, record_reads)
    });
    let (verdict, dispatches, dry_runs) = match plan? {
        evaluate::Plan::Decided(mut verdict, dry_runs) => {
            if !dry_runs.is_empty() {
                // Boxed, here and below: only a config with dry-run rules waits on it, and
                // held inline it made every check's future (moved whole by each caller)
                // larger by its size (#36).
                verdict.dry_run = Box::pin(dry_run::ask(snapshot, &dry_runs)).await;
            }
            return Ok(Decided {
                verdict,
                cacheable: true,
            });
        }
        evaluate::Plan::Ask {
            verdict,
            dispatches,
            dry_runs,
        } => (verdict, dispatches, dry_runs),
    };
    let mut combined = combine::Combined::new(verdict);
    for d in &dispatches {
        // The snapshot routes only to handlers it built, so this does not fail; if it did,
        // skipping the handler would allow a request nobody was asked about.
        let Some(built) = snapshot.handlers.get(d.handler) else {
            return Err(Undecided::Handler {
                handler: format!("#{}", d.handler).into(),
                error: AdapterError::permanent(
                    ErrorKind::Internal,
                    "a rule routes to a handler this config snapshot does not hold",
                ),
            });
        };
        let answer = dispatch::ask(built, &d.instance).await;
        if combined.add(built, answer, &snapshot.metrics)? == combine::Next::Stop {
            break;
        }
    }
    let mut decided = combined.finish();
    if !dry_runs.is_empty() {
        decided.verdict.dry_run = Box::pin(dry_run::ask(snapshot, &dry_runs)).await;
    }
    Ok(decided)
}
