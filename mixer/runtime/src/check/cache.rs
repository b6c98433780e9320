//! The check's cache stage: the in-process tier first ([`crate::verdicts`]), then on a
//! miss the shared tier (`--shared-cache`), then the rest of the pipeline. Identical
//! requests missing at the same time share one lookup and one evaluation.
//!
//! A verdict found in the shared tier is kept here for no longer than its life there
//! (capped), with only the uses leased from it; a verdict evaluated here is offered to it,
//! and one whose use count is a limit is then counted there only, so that the limit holds
//! across every replica.

use std::sync::Arc;

use mixer_model::{Bag, Verdict, Vocabulary};

use super::{Checked, Decided};
use crate::decision::Undecided;
use crate::decision_log::CacheTier;
use crate::metrics::RuntimeMetrics;
use crate::shared_tier::use_limited;
use crate::verdicts::{Filled, VerdictCache, encode_bag};

/// What decides a check no tier holds a verdict for: the evaluate, dispatch and combine
/// stages (`record_reads` says whether to record what the decision read).
pub(super) trait Decide: Sync {
    /// Decides the request's check.
    fn decide(&self, record_reads: bool)
    -> impl Future<Output = Result<Decided, Undecided>> + Send;
}

/// The tiers a snapshot's checks go through.
pub(super) struct Tiers<'s> {
    /// The snapshot's in-process tier (with the shared tier's handle, if any).
    pub(super) verdicts: &'s VerdictCache,
    /// What replicas must have in common to share verdicts; `None` shares nothing.
    pub(super) generation: Option<&'s str>,
    /// The vocabulary of the snapshot's bags.
    pub(super) vocabulary: &'s Arc<Vocabulary>,
    /// Hit and miss counters.
    pub(super) metrics: &'s RuntimeMetrics,
}

impl Tiers<'_> {
    /// Decides `bag`'s check from a tier when one holds a verdict that applies, else with
    /// `pipeline`.
    pub(super) async fn check(
        &self,
        bag: &dyn Bag,
        record_reads: bool,
        pipeline: &impl Decide,
    ) -> Result<Checked, Undecided> {
        let found =
            crate::traces::child_sync(crate::traces::CACHE_LOOKUP, || self.verdicts.lookup(bag));
        if let Some(verdict) = found {
            self.metrics.cache_hits.inc();
            return Ok(hit(verdict, CacheTier::InProcess));
        }
        self.metrics.cache_misses.inc();
        let mut whole = Vec::with_capacity(512);
        encode_bag(bag, self.vocabulary.len(), &mut whole);
        let cell = {
            let mut inflight = self
                .verdicts
                .inflight
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            inflight.entry(whole.clone()).or_default().clone()
        };
        let mut filled_here = false;
        let result = cell
            .get_or_init(|| {
                filled_here = true;
                self.fill(bag, pipeline)
            })
            .await
            .clone();
        if let Ok(mut inflight) = self.verdicts.inflight.lock() {
            inflight.remove(&whole);
        }
        match result? {
            // A shared verdict with a use limit serves only the uses leased: a request that
            // waited on another's lookup takes its own use, here or evaluated.
            (verdict, Filled::Shared) if !filled_here && use_limited(&verdict) => {
                match self.verdicts.lookup(bag) {
                    Some(verdict) => {
                        self.metrics.cache_hits.inc();
                        Ok(hit(verdict, CacheTier::InProcess))
                    }
                    None => Ok(Checked {
                        verdict: Arc::new(pipeline.decide(record_reads).await?.verdict),
                        cache_hit: false,
                        tier: CacheTier::None,
                    }),
                }
            }
            (verdict, Filled::Shared) => Ok(hit(verdict, CacheTier::Shared)),
            (verdict, Filled::Evaluated) => Ok(Checked {
                verdict,
                cache_hit: false,
                tier: CacheTier::None,
            }),
        }
    }

    /// Decides a miss of the in-process tier: from the shared tier when it has the verdict,
    /// else with `pipeline` (and then offers the verdict to both tiers).
    async fn fill(
        &self,
        bag: &dyn Bag,
        pipeline: &impl Decide,
    ) -> Result<(Arc<Verdict>, Filled), Undecided> {
        let shared = self.verdicts.shared.as_ref().zip(self.generation);
        if let Some((tier, generation)) = shared
            && let Some(found) = tier.0.lookup(generation, self.vocabulary, bag).await
        {
            let verdict = Arc::new(found.verdict);
            // This request takes one of the uses leased.
            self.verdicts
                .insert_for(bag, &verdict, found.local_life, found.uses - 1, found.lease);
            return Ok((verdict, Filled::Shared));
        }
        // The cache keys the verdict by its reads: always recorded here.
        let Decided { verdict, cacheable } = pipeline.decide(true).await?;
        let verdict = Arc::new(verdict);
        if cacheable && verdict.valid_use_count > 0 && !verdict.valid_duration.is_zero() {
            let stored = match shared {
                Some((tier, generation)) => {
                    tier.0
                        .store(generation, self.vocabulary, bag, &verdict)
                        .await
                }
                None => false,
            };
            // A use limit held by the shared tier is counted there only: uses kept here too
            // would be served beside those the other replicas take.
            if !(stored && use_limited(&verdict)) {
                self.verdicts.insert(bag, &verdict);
            }
        }
        Ok((verdict, Filled::Evaluated))
    }
}

/// A verdict `tier` served without consulting a handler.
fn hit(verdict: Arc<Verdict>, tier: CacheTier) -> Checked {
    Checked {
        verdict,
        cache_hit: true,
        tier,
    }
}
