//! `SpinMutex`: `SplitLock`'s lock, for critical sections of tens of nanoseconds. It spins,
//! then yields (`spin_wait`), instead of parking: under contention a parking mutex costs a
//! system call and a wake-up per handoff. Under loom it is loom's mutex, so the models check
//! the protocol that uses it. Its primitives come from the sync shim.

#[cfg(not(loom))]
use crate::sync::{spin_wait, AtomicBool, Ordering, UnsafeCell};
#[cfg(loom)]
use crate::sync::{Mutex, MutexGuard};

/// A lock for short critical sections that spins (then yields) instead of parking: under
/// contention a parking mutex costs a system call and a wake-up per handoff, far more than
/// the few tens of nanoseconds that `SplitLock`'s sections hold it. Under loom it is loom's
/// mutex, so the models check the protocol that uses it.
#[cfg(loom)]
#[derive(Debug)]
pub struct SpinMutex<T>(Mutex<T>);

/// Holds a [`SpinMutex`] (loom's guard under loom).
#[cfg(loom)]
pub type SpinGuard<'a, T> = MutexGuard<'a, T>;

#[cfg(loom)]
impl<T> SpinMutex<T> {
    pub(crate) fn new(value: T) -> SpinMutex<T> {
        SpinMutex(Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        crate::sync::lock(&self.0)
    }

    pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

/// A lock for short critical sections that spins (then yields) instead of parking (see
/// the loom build's doc).
#[cfg(not(loom))]
pub struct SpinMutex<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands `value` to one thread at a time, so sharing the lock shares `T`
// only as `Mutex<T>` does.
#[cfg(not(loom))]
unsafe impl<T: Send> Send for SpinMutex<T> {}
// SAFETY: as for `Send`.
#[cfg(not(loom))]
unsafe impl<T: Send> Sync for SpinMutex<T> {}

#[cfg(not(loom))]
impl<T> std::fmt::Debug for SpinMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinMutex").finish_non_exhaustive()
    }
}

#[cfg(not(loom))]
impl<T> SpinMutex<T> {
    pub(crate) fn new(value: T) -> SpinMutex<T> {
        SpinMutex {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        let mut attempt = 0;
        // ORDERING: Acquire pairs with the Release store in `SpinGuard::drop`: the previous
        // holder's writes are visible to us.
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // ORDERING: Relaxed: only a hint to retry the CAS; the CAS orders.
            while self.locked.load(Ordering::Relaxed) {
                spin_wait(attempt);
                attempt = attempt.saturating_add(1);
            }
        }
        SpinGuard { lock: self }
    }

    /// The lock if it is free now; `None` (at once) if another thread holds it.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        // A load first: a failed compare-and-swap would take the line from the holder,
        // who then pays to take it back (on the lock's release, and on any read of the
        // value beside the flag).
        // ORDERING: Relaxed: only a hint; the CAS orders.
        if self.locked.load(Ordering::Relaxed) {
            return None;
        }
        // ORDERING: Acquire, as in `lock`.
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            // `then`, not `then_some`: a guard built on failure would unlock on drop.
            .then(|| SpinGuard { lock: self })
    }
}

/// Holds a [`SpinMutex`]; unlocks when dropped.
#[cfg(not(loom))]
pub struct SpinGuard<'a, T> {
    lock: &'a SpinMutex<T>,
}

#[cfg(not(loom))]
impl<T> std::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the lock, so no other
        // reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

#[cfg(not(loom))]
impl<T> std::ops::DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only use of the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

#[cfg(not(loom))]
impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // ORDERING: Release pairs with the Acquire CAS in `lock`.
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::SpinMutex;

    #[test]
    fn a_failed_try_lock_leaves_the_holder_holding() {
        let m = SpinMutex::new(1);
        let held = m.lock();
        assert!(m.try_lock().is_none());
        // The failed attempt must not have released the holder's lock.
        assert!(m.try_lock().is_none());
        drop(held);
        let mut again = m.try_lock().expect("free once dropped");
        *again += 1;
        drop(again);
        assert_eq!(*m.lock(), 2);
    }
}
