//! The one place that picks std or loom primitives.
//!
//! Under `cfg(loom)` every atomic, mutex and cell the crate uses comes from loom, so the
//! loom models in `loom_tests/` check all of them; otherwise they come from std. The
//! protocols take their atomics, cells, mutexes and spin waits from here only; elsewhere
//! `std::sync` is named for `TryLockError` (in `spin.rs`, an error type, no primitive) and
//! in unit tests that run on plain threads outside loom.
//!
//! [`AtomicF64`] is built here on the shim's `AtomicU64` (bits via `to_bits`/`from_bits`),
//! so loom model-checks float atomics too. [`spin_wait`] yields to loom's scheduler under
//! loom, and spins (then yields to the OS) otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

/// Lock a mutex. A panic while a lock is held cannot leave our state half-changed (every
/// locked section validates before it writes), so a poisoned lock is taken as it is.
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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

    /// Replace the value with `value`; returns the previous one.
    #[inline]
    pub(crate) fn swap(&self, value: f64, order: Ordering) -> f64 {
        f64::from_bits(self.0.swap(value.to_bits(), order))
    }

    /// Read the value with a read-modify-write that changes nothing (an add of 0 to its
    /// bits): it reads the latest value in the modification order, and it continues a
    /// release sequence, which a load does not.
    #[inline]
    pub(crate) fn read_modify(&self, order: Ordering) -> f64 {
        f64::from_bits(self.0.fetch_add(0, order))
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

    /// The raw pointer (std build only: code that loom never sees, such as the spin lock).
    #[inline]
    pub(crate) fn get(&self) -> *mut T {
        self.0.get()
    }
}

/// Pads and aligns a value to the cache-line size that the target's prefetcher works with
/// (crossbeam's per-architecture choice: 128 bytes on x86-64, where the adjacent-line
/// prefetcher pulls pairs), so that hot atomics written by different threads do not share a
/// line. It holds no atomic itself, so it is the same under loom.
pub(crate) use crossbeam_utils::CachePadded;

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
