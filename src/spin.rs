//! `SpinMutex`: `SplitLock`'s lock, for critical sections of tens of nanoseconds. It spins,
//! then yields (`spin_wait`), instead of parking: under contention a parking mutex costs a
//! system call and a wake-up per handoff. Under loom it is loom's mutex, so the models check
//! the protocol that uses it. Its primitives come from the sync shim.
//!
//! `FairMutex`: `GlobalLock`'s lock, time-fair between threads whose sections differ by
//! orders of magnitude (see its doc).

#[cfg(not(loom))]
use crate::sync::{spin_wait, AtomicBool, AtomicU64, Ordering, UnsafeCell};
#[cfg(loom)]
use crate::sync::{Mutex, MutexGuard};

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
        crate::sync::lock(&self.0)
    }
}

/// A lock for short critical sections that spins (then yields) instead of parking (see
/// the loom build's doc).
#[cfg(not(loom))]
pub(crate) struct SpinMutex<T> {
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

/// `GlobalLock`'s lock: time-fair for threads whose critical sections differ by orders of
/// magnitude (an actor's 50 ns insert, a learner's 30 µs batch).
///
/// std's mutex lets the thread that just released it take it straight back, so a learner
/// looping on batches starved an actor (issue 11, item 7: 5.6 k of 855 k inserts/s). A FIFO
/// ticket lock would not help: strict alternation gives the actor one insert per learner
/// batch. Here any thread may take the free lock (barging keeps short sections cheap) until
/// some waiter has waited longer than [`FAIR_SLICE`]; that waiter then becomes the *heir*,
/// and only it may take the lock next. So each side runs for slices of about
/// `FAIR_SLICE` in turn, and no waiter waits much longer than a slice plus one section.
/// Waiters spin, then yield (`spin_wait`). Under loom it is loom's mutex (the buffer's
/// protocol, not the lock's fairness, is what the models check).
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct FairMutex<T>(Mutex<T>);

#[cfg(loom)]
impl<T> FairMutex<T> {
    pub(crate) fn new(value: T) -> FairMutex<T> {
        FairMutex(Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        crate::sync::lock(&self.0)
    }
}

/// How long a waiter lets others barge before it claims the next turn.
#[cfg(not(loom))]
pub(crate) const FAIR_SLICE: std::time::Duration = std::time::Duration::from_micros(100);

/// A time-fair lock (see the loom build's doc).
#[cfg(not(loom))]
pub(crate) struct FairMutex<T> {
    locked: AtomicBool,
    /// 0, or the ticket of the one waiter allowed to take the lock next.
    heir: AtomicU64,
    next_ticket: AtomicU64,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands `value` to one thread at a time, so sharing the lock shares `T`
// only as `Mutex<T>` does.
#[cfg(not(loom))]
unsafe impl<T: Send> Send for FairMutex<T> {}
// SAFETY: as for `Send`.
#[cfg(not(loom))]
unsafe impl<T: Send> Sync for FairMutex<T> {}

#[cfg(not(loom))]
impl<T> std::fmt::Debug for FairMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairMutex").finish_non_exhaustive()
    }
}

#[cfg(not(loom))]
impl<T> FairMutex<T> {
    pub(crate) fn new(value: T) -> FairMutex<T> {
        FairMutex {
            locked: AtomicBool::new(false),
            heir: AtomicU64::new(0),
            next_ticket: AtomicU64::new(1),
            value: UnsafeCell::new(value),
        }
    }

    pub(crate) fn lock(&self) -> FairGuard<'_, T> {
        // Our ticket once we have claimed (or tried to claim) the turn; 0 before.
        let mut ticket = 0u64;
        let mut since: Option<std::time::Instant> = None;
        let mut attempt = 0u32;
        loop {
            // ORDERING: Acquire pairs with the Release stores of `heir`: a waiter that sees
            // the turn released also sees everything before it (only a hint: the CAS on
            // `locked` is what orders the protected data).
            let heir = self.heir.load(Ordering::Acquire);
            if heir == 0 || heir == ticket {
                // ORDERING: Acquire pairs with the Release store in `FairGuard::drop`.
                if self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    if heir != 0 {
                        // Our turn is used: others may barge again.
                        // ORDERING: Release, see the load above.
                        self.heir.store(0, Ordering::Release);
                    }
                    return FairGuard { lock: self };
                }
            }
            // Waiting: after a slice, claim the next turn (one heir at a time).
            if ticket == 0 || self.heir.load(Ordering::Relaxed) != ticket {
                let start = *since.get_or_insert_with(std::time::Instant::now);
                if attempt % 16 == 15 && start.elapsed() >= FAIR_SLICE {
                    if ticket == 0 {
                        // ORDERING: Relaxed: a unique number, nothing else.
                        ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
                    }
                    // ORDERING: AcqRel: a hint like the loads above; the CAS makes one
                    // waiter the heir.
                    let _ =
                        self.heir
                            .compare_exchange(0, ticket, Ordering::AcqRel, Ordering::Relaxed);
                }
            }
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
    }
}

/// Holds a [`FairMutex`]; unlocks when dropped.
#[cfg(not(loom))]
pub(crate) struct FairGuard<'a, T> {
    lock: &'a FairMutex<T>,
}

#[cfg(not(loom))]
impl<T> std::ops::Deref for FairGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the lock, so no other
        // reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

#[cfg(not(loom))]
impl<T> std::ops::DerefMut for FairGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only use of the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

#[cfg(not(loom))]
impl<T> Drop for FairGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // ORDERING: Release pairs with the Acquire CAS in `lock`.
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::FairMutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// Mutual exclusion (a non-atomic read-modify-write under the lock loses nothing), and
    /// time-fairness: a thread with 1-item sections keeps going beside a thread whose
    /// sections are 2000 times longer and that never pauses.
    #[test]
    fn fair_mutex_excludes_and_shares_time() {
        let lock = FairMutex::new(0u64);
        let stop = AtomicBool::new(false);
        // Miri interprets: fewer operations there, the same checks.
        let (n_short, n_long) = if cfg!(miri) {
            (200, 20)
        } else {
            (20_000, 2000)
        };
        let short_ops = AtomicU64::new(0);
        let long_sections = AtomicU64::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let mut g = lock.lock();
                    for _ in 0..n_long {
                        *g = std::hint::black_box(*g + 1);
                    }
                    long_sections.fetch_add(1, Ordering::Relaxed);
                }
            });
            s.spawn(|| {
                let mut n = 0;
                while n < n_short {
                    *lock.lock() += 1;
                    n += 1;
                }
                short_ops.store(n, Ordering::Relaxed);
                stop.store(true, Ordering::Relaxed);
            });
        });
        assert_eq!(short_ops.load(Ordering::Relaxed), n_short);
        let want = n_long * long_sections.load(Ordering::Relaxed) + n_short;
        assert_eq!(*lock.lock(), want, "an increment under the lock was lost");
    }
}
