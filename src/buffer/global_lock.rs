//! `GlobalLock`: one lock around the sequential buffer. The baseline.
//!
//! Protocol: every operation, the copy of item data included, runs inside the one lock, so
//! the operations are linearized in lock order and no slot is ever read while it is
//! written (the lock is the per-slot protocol of this variant). Nothing runs in parallel:
//! the other variants are measured against this one (benches/concurrent.rs), with either
//! kind of lock: a parking mutex ([`GlobalLockBuffer`]) or `SplitLock`'s spinning lock
//! ([`GlobalSpinLockBuffer`]).

use crate::rng::RandomSource;

use super::{
    check_request, ConcurrentBuffer, Config, Descent, Draw, Key, ReplayBuffer, Rows, SampleBatch,
    Stats, UpdateReport,
};
use std::ops::DerefMut;
use std::path::Path;
use std::time::Instant;

use crate::checkpoint::{Checkpoint, Load, LoadOptions, Loaded, Plan, SaveOptions, Snapshot};
use crate::error::Result;
use crate::rate::{rate_limiter_from, Admission, RateLimiter, Wait};
use crate::spin::SpinMutex;
use crate::storage::ColumnSlice;
use crate::sync::{lock, Mutex};
use crate::tree::Consistency;

/// The lock a [`GlobalLock`] holds around its buffer: [`Parking`] or [`Spinning`]. Sealed.
pub trait LockKind: sealed::Sealed + Send + Sync + std::fmt::Debug + 'static {
    /// The lock, holding the buffer.
    #[doc(hidden)]
    type Lock: Send + Sync + std::fmt::Debug;
    /// The guard that gives the buffer while the lock is held.
    #[doc(hidden)]
    type Guard<'a>: DerefMut<Target = ReplayBuffer>;
    /// A lock around `buffer`.
    #[doc(hidden)]
    fn new(buffer: ReplayBuffer) -> Self::Lock;
    /// Take the lock.
    #[doc(hidden)]
    fn lock(lock: &Self::Lock) -> Self::Guard<'_>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Parking {}
    impl Sealed for super::Spinning {}
}

/// A parking mutex (the standard library's; loom's under loom): a waiter sleeps in the
/// kernel.
#[derive(Debug)]
pub enum Parking {}

/// `SplitLock`'s lock: a waiter spins, then yields, and never parks.
#[derive(Debug)]
pub enum Spinning {}

impl LockKind for Parking {
    type Lock = Mutex<ReplayBuffer>;
    type Guard<'a> = crate::sync::MutexGuard<'a, ReplayBuffer>;
    fn new(buffer: ReplayBuffer) -> Self::Lock {
        Mutex::new(buffer)
    }
    fn lock(inner: &Self::Lock) -> Self::Guard<'_> {
        lock(inner)
    }
}

impl LockKind for Spinning {
    type Lock = SpinMutex<ReplayBuffer>;
    type Guard<'a> = crate::spin::SpinGuard<'a, ReplayBuffer>;
    fn new(buffer: ReplayBuffer) -> Self::Lock {
        SpinMutex::new(buffer)
    }
    fn lock(inner: &Self::Lock) -> Self::Guard<'_> {
        inner.lock()
    }
}

/// A [`ReplayBuffer`] behind one lock of kind `L`; see [`ConcurrentBuffer`]. Named through
/// [`GlobalLockBuffer`] and [`GlobalSpinLockBuffer`].
#[derive(Debug)]
pub struct GlobalLock<L: LockKind> {
    config: Config,
    inner: L::Lock,
    /// The configuration's rate limiter, held outside the lock: a call is admitted before
    /// it takes the lock, so that a waiting call never holds it.
    rate: Option<RateLimiter>,
}

/// A [`ReplayBuffer`] behind one mutex: the baseline the concurrent buffers are measured
/// against.
///
/// ```
/// use kary_replay::{ConcurrentBuffer, Config, DType, GlobalLockBuffer, Schema};
/// let buffer = GlobalLockBuffer::new(Config::builder(8, Schema::new().column("x", DType::U8, 1)).build()?)?;
/// let key = buffer.insert(&[(&[7u8][..]).into()], Some(2.0))?;
/// assert_eq!(buffer.key(0)?, Some(key));
/// # Ok::<(), kary_replay::Error>(())
/// ```
pub type GlobalLockBuffer = GlobalLock<Parking>;

/// A [`ReplayBuffer`] behind `SplitLock`'s spinning lock: the baseline that tells the
/// split of the locks from the kind of lock.
///
/// ```
/// use kary_replay::{ConcurrentBuffer, Config, DType, GlobalSpinLockBuffer, Schema};
/// let buffer = GlobalSpinLockBuffer::new(Config::builder(8, Schema::new().column("x", DType::U8, 1)).build()?)?;
/// buffer.insert(&[(&[7u8][..]).into()], Some(2.0))?;
/// assert_eq!(buffer.len(), 1);
/// # Ok::<(), kary_replay::Error>(())
/// ```
pub type GlobalSpinLockBuffer = GlobalLock<Spinning>;

impl<L: LockKind> GlobalLock<L> {
    /// Run `f` on the sequential buffer under the lock (for checks that need a consistent
    /// view of everything, such as tests at quiescence).
    pub fn with_locked<T>(&self, f: impl FnOnce(&mut ReplayBuffer) -> T) -> T {
        f(&mut self.lock())
    }

    fn lock(&self) -> L::Guard<'_> {
        L::lock(&self.inner)
    }

    /// `buffer` (made with `config`, whose limit it does not enforce) behind the lock, with
    /// `config`'s rate limiter continuing from `counts` (inserts, samples) when given.
    fn limited(config: Config, buffer: ReplayBuffer, counts: Option<(u64, u64)>) -> Result<Self> {
        let rate = rate_limiter_from(config.rate_limit(), counts)?;
        Ok(GlobalLock {
            config: config.with_key_tag(buffer.config().key_tag()),
            inner: L::new(buffer),
            rate,
        })
    }
}

/// Saves under the lock: every other thread waits for the files to be written.
impl<L: LockKind> Checkpoint for GlobalLock<L> {
    fn save_with(&self, dir: &Path, options: &SaveOptions) -> Result<()> {
        let inner = self.lock();
        crate::checkpoint::write(&self.with_rate(inner.snapshot()), dir, options)
    }
}

impl<L: LockKind> GlobalLock<L> {
    /// The inner buffer's snapshot with this buffer's configuration (its rate limit) and
    /// the limiter's counts.
    fn with_rate<'a>(&'a self, snapshot: Snapshot<'a>) -> Snapshot<'a> {
        Snapshot {
            config: &self.config,
            rate_counts: self.rate.as_ref().map(|r| {
                let s = r.stats();
                (s.inserts, s.samples)
            }),
            ..snapshot
        }
    }
}

impl<L: LockKind> crate::checkpoint::sealed::TreeState for GlobalLock<L> {
    #[allow(private_interfaces)]
    fn tree_state(&self) -> Result<crate::checkpoint::State> {
        Ok(crate::checkpoint::State::of(
            self.with_rate(self.lock().snapshot()),
        ))
    }
    #[allow(private_interfaces)]
    fn from_tree_state(config: Config, state: &crate::checkpoint::State) -> Result<Self> {
        let buffer = ReplayBuffer::from_state(config.clone(), state)?;
        Self::limited(config, buffer, state.rate_counts)
    }
}

impl<L: LockKind> crate::checkpoint::TreeState for GlobalLock<L> {}

impl<L: LockKind> Load for GlobalLock<L> {
    fn load_with<P: AsRef<Path>>(dir: P, options: &LoadOptions) -> Result<Loaded<Self>> {
        let plan = Plan::open(dir.as_ref(), options)?;
        let (buffer, state) = ReplayBuffer::load_plan(&plan)?;
        Ok(Loaded {
            buffer: Self::limited(plan.config.clone(), buffer, state.rate_counts)?,
            user: state.user,
        })
    }
}

impl<L: LockKind> ConcurrentBuffer for GlobalLock<L> {
    fn new(config: Config) -> Result<Self> {
        let buffer = ReplayBuffer::under_limiter(config.clone())?;
        Self::limited(config, buffer, None)
    }

    fn config(&self) -> &Config {
        &self.config
    }

    fn insert_waiting(
        &self,
        columns: &[ColumnSlice<'_>],
        priority: Option<f64>,
        wait: Wait,
    ) -> Result<Key> {
        if self.rate.is_some() {
            let items = self.config.schema().count_items(columns)?;
            self.config.check_insert(items, priority)?;
        }
        let admission = Admission::insert(self.rate.as_ref(), 1, wait)?;
        admission.settle(self.lock().insert(columns, priority))
    }

    fn insert_batch_waiting(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
        wait: Wait,
    ) -> Result<()> {
        let mut items = 0;
        if self.rate.is_some() {
            items = self.config.schema().count_items(columns)?;
            self.config.check_batch_priorities(items, priorities)?;
        }
        let admission = Admission::insert(self.rate.as_ref(), items, wait)?;
        admission.settle(self.lock().insert_batch_into(columns, priorities, keys))
    }

    fn sample_waiting(
        &self,
        draw: Draw<'_>,
        rows: Rows<'_, '_>,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        wait: Wait,
    ) -> Result<Descent> {
        let started = self.rate.is_some().then(Instant::now);
        if self.rate.is_some() {
            // The checks that need no lock, before the admission; with a limit, `Empty` is
            // a wait for the first inserts, after it.
            check_request(&draw, &rows, 1, &self.config)?;
        }
        let admission = Admission::sample(self.rate.as_ref(), draw.len(), wait)?;
        admission.until_filled(wait, started, || self.lock().len() > 0)?;
        admission.settle(self.lock().sample_with(draw, rows, rng, out))
    }

    fn rate_limiter(&self) -> Option<&RateLimiter> {
        self.rate.as_ref()
    }

    fn stats(&self) -> Stats {
        self.lock().stats()
    }

    fn update_priorities(&self, keys: &[Key], priorities: &[f64]) -> Result<UpdateReport> {
        self.lock().update_priorities(keys, priorities)
    }

    fn priorities_of(&self, keys: &[Key], out: &mut Vec<f64>) -> Result<usize> {
        self.lock().priorities_of(keys, out)
    }

    fn delete(&self, keys: &[Key]) -> Result<UpdateReport> {
        self.lock().delete(keys)
    }

    fn retire_before(&self, version: i64) -> Result<u64> {
        self.lock().retire_before(version)
    }

    fn version_floor(&self) -> Option<i64> {
        self.lock().version_floor()
    }

    fn alpha(&self) -> f64 {
        ReplayBuffer::alpha(&self.lock())
    }

    fn set_alpha(&self, alpha: f64) -> Result<()> {
        ReplayBuffer::set_alpha(&mut self.lock(), alpha)
    }

    fn raw_priorities_of(&self, keys: &[Key], out: &mut Vec<f64>) -> Result<usize> {
        ReplayBuffer::raw_priorities_of(&self.lock(), keys, out)
    }

    fn write_back(
        &self,
        keys: &[Key],
        columns: &[(usize, ColumnSlice<'_>)],
    ) -> Result<UpdateReport> {
        self.lock().write_back(keys, columns)
    }

    fn priority(&self, index: usize) -> Result<f64> {
        self.lock().priority(index)
    }

    fn key(&self, index: usize) -> Result<Option<Key>> {
        self.lock().key(index)
    }

    fn len(&self) -> usize {
        self.lock().len()
    }

    fn inserted(&self) -> u64 {
        self.lock().inserted()
    }

    fn total_priority(&self) -> f64 {
        self.lock().total_priority()
    }

    fn consistency(&self) -> Consistency {
        self.lock().tree().check()
    }

    fn memory_bytes(&self) -> usize {
        self.lock().memory_bytes()
    }

    fn clear(&self) {
        self.lock().clear();
    }

    fn rebuild(&self) {
        self.lock().rebuild();
    }
}
