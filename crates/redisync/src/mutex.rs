//! The crate's one way to lock a std mutex.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks a std mutex, ignoring poison (the data stays consistent: every
/// critical section here is a few assignments).
pub(crate) fn lock_unpoisoned<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
