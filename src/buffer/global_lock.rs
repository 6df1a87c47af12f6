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
    ConcurrentBuffer, Config, Descent, Draw, Key, ReplayBuffer, Rows, SampleBatch, Stats,
    UpdateReport,
};
use std::ops::DerefMut;
use std::path::Path;

use crate::checkpoint::{Checkpoint, Load, LoadOptions, Loaded, SaveOptions};
use crate::error::Result;
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

    fn around(buffer: ReplayBuffer) -> Self {
        GlobalLock {
            config: buffer.config().clone(),
            inner: L::new(buffer),
        }
    }
}

/// Saves under the lock: every other thread waits for the files to be written.
impl<L: LockKind> Checkpoint for GlobalLock<L> {
    fn save_with(&self, dir: &Path, options: &SaveOptions) -> Result<()> {
        self.lock().save_with(dir, options)
    }
}

impl<L: LockKind> crate::checkpoint::sealed::TreeState for GlobalLock<L> {
    #[allow(private_interfaces)]
    fn tree_state(&self) -> Result<crate::checkpoint::State> {
        Ok(crate::checkpoint::State::of(self.lock().snapshot()))
    }
    #[allow(private_interfaces)]
    fn from_tree_state(config: Config, state: &crate::checkpoint::State) -> Result<Self> {
        ReplayBuffer::from_state(config, state).map(Self::around)
    }
}

impl<L: LockKind> crate::checkpoint::TreeState for GlobalLock<L> {}

impl<L: LockKind> Load for GlobalLock<L> {
    fn load_with<P: AsRef<Path>>(dir: P, options: &LoadOptions) -> Result<Loaded<Self>> {
        let loaded = ReplayBuffer::load_with(dir, options)?;
        Ok(Loaded {
            buffer: Self::around(loaded.buffer),
            user: loaded.user,
        })
    }
}

impl<L: LockKind> ConcurrentBuffer for GlobalLock<L> {
    fn new(config: Config) -> Result<Self> {
        ReplayBuffer::new(config).map(Self::around)
    }

    fn config(&self) -> &Config {
        &self.config
    }

    fn insert(&self, columns: &[ColumnSlice<'_>], priority: Option<f64>) -> Result<Key> {
        self.lock().insert(columns, priority)
    }

    fn insert_batch(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
    ) -> Result<Vec<Key>> {
        self.lock().insert_batch(columns, priorities)
    }

    fn insert_batch_into(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
    ) -> Result<()> {
        self.lock().insert_batch_into(columns, priorities, keys)
    }

    fn sample_with(
        &self,
        draw: Draw<'_>,
        rows: Rows<'_, '_>,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<Descent> {
        self.lock().sample_with(draw, rows, rng, out)
    }

    fn stats(&self) -> Stats {
        self.lock().stats()
    }

    fn update_priorities(&self, keys: &[Key], priorities: &[f64]) -> Result<UpdateReport> {
        self.lock().update_priorities(keys, priorities)
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
