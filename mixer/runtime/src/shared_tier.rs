//! The hook for a check cache shared by every replica (`mixer serve --shared-cache`), under
//! the in-process one.
//!
//! The runtime knows only this trait: the store behind it (Redis, in `mixer-shared-cache`)
//! is wired in by the server, so the runtime does not depend on a Redis client. The tier is
//! asked only after the in-process cache missed, and only verdicts the in-process cache
//! would keep are offered to it. It may never change a decision: a tier that fails, is too
//! slow or is switched off by its breaker answers "not found" (and "not stored"), and the
//! check is evaluated as without it.

use std::sync::Arc;
use std::time::Duration;

use mixer_model::{Bag, Verdict, Vocabulary};

/// A verdict found in the shared tier, with what the in-process tier may do with it.
#[derive(Clone, Debug)]
pub struct SharedHit {
    /// The verdict, its `referenced` resolved against the caller's vocabulary.
    pub verdict: Verdict,
    /// Longest the in-process tier may keep it: its remaining life in the shared tier,
    /// capped by the tier's own limit (`--shared-cache-local-life`).
    pub local_life: Duration,
    /// Uses taken from the shared entry for this replica, this request's included (at least
    /// 1). For a verdict without a use limit, its own use count.
    pub uses: i64,
    /// The shared entry the uses were leased from, to give back those not served
    /// ([`SharedTier::give_back`]); `None` for a verdict without a use limit.
    pub lease: Option<Arc<[u8]>>,
}

/// A cache tier shared by the replicas running the same config generation.
#[async_trait::async_trait]
pub trait SharedTier: Send + Sync + 'static {
    /// The verdict stored for `bag` under `generation`, taking uses from its count; `None`
    /// when there is none or the tier could not answer in time.
    async fn lookup(
        &self,
        generation: &str,
        vocabulary: &Vocabulary,
        bag: &dyn Bag,
    ) -> Option<SharedHit>;

    /// Stores a verdict just evaluated for `bag` (its `referenced` says what it depends on);
    /// true when the tier holds it now, so that its uses are counted there.
    async fn store(
        &self,
        generation: &str,
        vocabulary: &Vocabulary,
        bag: &dyn Bag,
        verdict: &Verdict,
    ) -> bool;

    /// Gives `uses` leased with [`SharedHit::lease`] and not served back to the shared
    /// entry (if it still exists). Does not wait.
    fn give_back(&self, lease: Arc<[u8]>, uses: i64);
}

/// A shared tier handle for [`crate::RuntimeOptions`].
#[derive(Clone)]
pub struct SharedTierRef(pub Arc<dyn SharedTier>);

impl std::fmt::Debug for SharedTierRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedTier")
    }
}

/// Whether a verdict's use count is a limit the shared tier must count across replicas:
/// below [`crate::DEFAULT_VALID_USE_COUNT`], the count a verdict carries when no handler
/// limited it (Istio's default). Verdicts at or above it are not counted in the shared tier:
/// each replica's in-process tier serves them up to their count, for their valid duration.
pub fn use_limited(verdict: &Verdict) -> bool {
    verdict.valid_use_count < crate::DEFAULT_VALID_USE_COUNT
}
