//! A pool of one spare attribute bag per thread, for the check front ends.

use std::cell::Cell;
use std::sync::Arc;

use mixer_model::{AttributeBag, Vocabulary};

thread_local! {
    /// An emptied bag to fill for the next check on this thread. A bag has a slot for every
    /// attribute of the vocabulary (kilobytes to allocate and zero), and a check needs only a
    /// few dozen of them filled; reusing one saves that per check.
    static SPARE_BAG: Cell<Option<AttributeBag>> = const { Cell::new(None) };
}

/// Empties `bag` and keeps it as this thread's spare.
pub(crate) fn keep_spare(mut bag: AttributeBag) {
    bag.clear();
    SPARE_BAG.set(Some(bag));
}

/// The thread's spare bag if it was built for `vocabulary`, else a new one.
pub(crate) fn spare_bag(vocabulary: &Arc<Vocabulary>) -> AttributeBag {
    SPARE_BAG
        .take()
        .filter(|bag| Arc::ptr_eq(bag.vocabulary(), vocabulary))
        .unwrap_or_else(|| AttributeBag::new(vocabulary.clone()))
}
