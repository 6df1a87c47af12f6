//! `GlobalLock`: one mutex around the sequential buffer. The baseline.
//!
//! The mutex is a `FairMutex` (src/spin.rs): a learner looping on batches would otherwise
//! take std's mutex straight back after each release and starve an actor (issue 11, item
//! 7); with it each side runs for slices of about 100 µs in turn.
//!
//! Protocol: every operation, the copy of item data included, runs inside the one lock, so
//! the operations are linearized in lock order and no slot is ever read while it is
//! written (the mutex is the per-slot protocol of this variant). Nothing runs in parallel:
//! the other variants are measured against this one (benches/concurrent.rs).

use crate::rng::RandomSource;

use super::{ConcurrentBuffer, Config, Key, ReplayBuffer, SampleBatch, SampleMode, UpdateReport};
use crate::error::Result;
use crate::spin::FairMutex;
use crate::storage::{ColumnSlice, ColumnSliceMut};
use crate::tree::Consistency;

/// A [`ReplayBuffer`] behind one mutex; see [`ConcurrentBuffer`].
///
/// ```
/// use kary_replay::{ConcurrentBuffer, Config, DType, GlobalLockBuffer, Schema};
/// let buffer = GlobalLockBuffer::new(Config::builder(8, Schema::new().column("x", DType::U8, 1)).build()?)?;
/// let key = buffer.insert(&[(&[7u8][..]).into()], Some(2.0))?;
/// assert_eq!(buffer.key(0)?, Some(key));
/// # Ok::<(), kary_replay::Error>(())
/// ```
#[derive(Debug)]
pub struct GlobalLockBuffer {
    config: Config,
    inner: FairMutex<ReplayBuffer>,
}

impl GlobalLockBuffer {
    /// Run `f` on the sequential buffer under the lock (for checks that need a consistent
    /// view of everything, such as tests at quiescence).
    pub fn with_locked<T>(&self, f: impl FnOnce(&mut ReplayBuffer) -> T) -> T {
        f(&mut self.inner.lock())
    }
}

impl ConcurrentBuffer for GlobalLockBuffer {
    fn new(config: Config) -> Result<Self> {
        Ok(GlobalLockBuffer {
            inner: FairMutex::new(ReplayBuffer::new(config.clone())?),
            config,
        })
    }

    fn config(&self) -> &Config {
        &self.config
    }

    fn insert(&self, columns: &[ColumnSlice<'_>], priority: Option<f64>) -> Result<Key> {
        self.inner.lock().insert(columns, priority)
    }

    fn insert_batch(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
    ) -> Result<Vec<Key>> {
        self.inner.lock().insert_batch(columns, priorities)
    }

    fn sample_into(
        &self,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<()> {
        self.inner.lock().sample_into(batch, beta, mode, rng, out)
    }

    fn sample_columns_into(
        &self,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        columns: &mut [ColumnSliceMut<'_>],
    ) -> Result<()> {
        self.inner
            .lock()
            .sample_columns_into(batch, beta, mode, rng, out, columns)
    }

    fn sample_indices_into(
        &self,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<()> {
        self.inner
            .lock()
            .sample_indices_into(batch, beta, mode, rng, out)
    }

    fn update_priorities(&self, keys: &[Key], priorities: &[f64]) -> Result<UpdateReport> {
        self.inner.lock().update_priorities(keys, priorities)
    }

    fn priority(&self, index: usize) -> Result<f64> {
        self.inner.lock().priority(index)
    }

    fn key(&self, index: usize) -> Result<Option<Key>> {
        self.inner.lock().key(index)
    }

    fn len(&self) -> usize {
        self.inner.lock().len()
    }

    fn inserted(&self) -> u64 {
        self.inner.lock().inserted()
    }

    fn total_priority(&self) -> f64 {
        self.inner.lock().total_priority()
    }

    fn consistency(&self) -> Consistency {
        self.inner.lock().tree().check()
    }

    fn memory_bytes(&self) -> usize {
        self.inner.lock().memory_bytes()
    }

    fn clear(&self) {
        self.inner.lock().clear();
    }

    fn rebuild(&self) {
        self.inner.lock().rebuild();
    }
}
