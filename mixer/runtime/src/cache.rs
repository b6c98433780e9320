//! The second-level check cache.

use std::sync::Arc;

use mixer_model::{Bag, Verdict};

use crate::dispatch::CheckError;
use crate::snapshot::Snapshot;

/// A decided check: the verdict and whether it came from the cache.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The verdict.
    pub verdict: Arc<Verdict>,
    /// True when no handler was consulted because a cached verdict applied.
    pub cache_hit: bool,
}

impl Snapshot {
    /// Decides a check through the snapshot's check cache. Front ends call this.
    pub async fn check_cached(&self, bag: &dyn Bag) -> Result<Checked, CheckError> {
        let verdict = self.check(bag).await?;
        Ok(Checked {
            verdict: Arc::new(verdict),
            cache_hit: false,
        })
    }
}
