//! Locking the handler's series tables.

use std::sync::{Mutex, MutexGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves only timestamps behind: keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
