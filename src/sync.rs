//! The one place that picks std or loom primitives.
//!
//! `SpinMutex` is `SplitLock`'s lock: it spins, then yields (loom's mutex under loom).
//!
//! Under `cfg(loom)` every atomic, mutex and cell the crate uses comes from loom, so the
//! loom models in `loom_tests/` check all of them; otherwise they come from std. No other
//! module imports `std::sync`, `std::cell::UnsafeCell`, `std::thread` or `hint::spin_loop`.
//!
//! [`AtomicF64`] is built here on the shim's `AtomicU64` (bits via `to_bits`/`from_bits`),
//! so loom model-checks float atomics too. [`spin_wait`] yields to loom's scheduler under
//! loom, and spins (then yields to the OS) otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Lock a mutex. A panic while a lock is held cannot leave our state half-changed (every
/// locked section validates before it writes), so a poisoned lock is taken as it is.
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A lock for short critical sections that spins (then yields) instead of parking: under
/// contention a parking mutex costs a system call and a wake-up per handoff, far more than
/// the few tens of nanoseconds that `SplitLock`'s sections hold it. Under loom it is loom's
/// mutex, so the models check the protocol that uses it.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct SpinMutex<T>(Mutex<T>);

#[cfg(loom)]
impl<T> SpinMutex<T> {
    pub(crate) fn new(value: T) -> SpinMutex<T> {
        SpinMutex(Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        lock(&self.0)
    }
}

/// A lock for short critical sections that spins (then yields) instead of parking (see
/// the loom build's doc).
#[cfg(not(loom))]
pub(crate) struct SpinMutex<T> {
    locked: std::sync::atomic::AtomicBool,
    value: std::cell::UnsafeCell<T>,
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
            locked: std::sync::atomic::AtomicBool::new(false),
            value: std::cell::UnsafeCell::new(value),
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
}

/// Holds a [`SpinMutex`]; unlocks when dropped.
#[cfg(not(loom))]
pub(crate) struct SpinGuard<'a, T> {
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

/// One step of a wait loop: `attempt` counts the steps taken so far.
#[inline]
pub(crate) fn spin_wait(attempt: u32) {
    #[cfg(loom)]
    {
        let _ = attempt;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        if attempt < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// An `f64` that can be shared between threads, stored as its bits in an `AtomicU64`.
///
/// Comparisons in [`AtomicF64::compare_exchange`] are on bits, as for any atomic: `-0.0`
/// and `0.0` differ, and a NaN equals itself (no NaN is ever stored by this crate).
#[derive(Debug)]
pub(crate) struct AtomicF64(AtomicU64);

impl AtomicF64 {
    pub(crate) fn new(value: f64) -> AtomicF64 {
        AtomicF64(AtomicU64::new(value.to_bits()))
    }

    #[inline]
    pub(crate) fn load(&self, order: Ordering) -> f64 {
        f64::from_bits(self.0.load(order))
    }

    #[inline]
    pub(crate) fn store(&self, value: f64, order: Ordering) {
        self.0.store(value.to_bits(), order)
    }

    /// Install `new` if the value is still `current` (bit for bit); the value seen either way.
    #[inline]
    pub(crate) fn compare_exchange(
        &self,
        current: f64,
        new: f64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<f64, f64> {
        self.0
            .compare_exchange(current.to_bits(), new.to_bits(), success, failure)
            .map(f64::from_bits)
            .map_err(f64::from_bits)
    }

    /// Raise the value to at least `value` (a CAS loop); returns the previous value.
    #[inline]
    pub(crate) fn fetch_max(&self, value: f64, order: Ordering) -> f64 {
        let mut current = self.load(Ordering::Relaxed);
        while current < value {
            match self.compare_exchange(current, value, order, Ordering::Relaxed) {
                Ok(previous) => return previous,
                Err(seen) => current = seen,
            }
        }
        current
    }
}

/// A cell whose accesses loom tracks: under loom a concurrent `with` and `with_mut` with no
/// happens-before between them fails the model. Outside loom it is `std`'s `UnsafeCell`.
#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// A cell whose accesses loom tracks (this is the std build: a plain `UnsafeCell` with
/// loom's closure API).
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> UnsafeCell<T> {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Pads and aligns a value to 128 bytes (two cache lines, as the adjacent-line prefetcher
/// pulls pairs) so that hot atomics written by different threads do not share a line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn atomic_f64_round_trips_and_raises() {
        let a = AtomicF64::new(1.5);
        assert_eq!(a.load(Ordering::SeqCst), 1.5);
        assert_eq!(a.fetch_max(0.5, Ordering::SeqCst), 1.5);
        assert_eq!(a.load(Ordering::SeqCst), 1.5);
        assert_eq!(a.fetch_max(4.0, Ordering::SeqCst), 1.5);
        assert_eq!(a.load(Ordering::SeqCst), 4.0);
        assert_eq!(
            a.compare_exchange(4.0, 2.0, Ordering::SeqCst, Ordering::SeqCst),
            Ok(4.0)
        );
        assert_eq!(
            a.compare_exchange(4.0, 3.0, Ordering::SeqCst, Ordering::SeqCst),
            Err(2.0)
        );
        a.store(-0.0, Ordering::SeqCst);
        assert!(a
            .compare_exchange(0.0, 1.0, Ordering::SeqCst, Ordering::SeqCst)
            .is_err());
    }
}
