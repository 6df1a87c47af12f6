//! `GlobalLock`: one mutex around the sequential buffer. The baseline.
//!
//! Protocol: every operation, the copy of item data included, runs inside the one lock, so
//! the operations are linearized in lock order and no slot is ever read while it is
//! written (the mutex is the per-slot protocol of this variant). Nothing runs in parallel:
//! the other variants are measured against this one (benches/concurrent.rs).

use crate::rng::RandomSource;

use super::{
    ConcurrentBuffer, Config, Key, ReplayBuffer, SampleBatch, SampleMode, Stats, UpdateReport,
};
use std::path::Path;

use crate::checkpoint::{Checkpoint, Load, LoadOptions, Loaded, SaveOptions};
use crate::error::Result;
use crate::storage::{ColumnSlice, ColumnSliceMut};
use crate::sync::{lock, Mutex};
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
    inner: Mutex<ReplayBuffer>,
}

impl GlobalLockBuffer {
    /// Run `f` on the sequential buffer under the lock (for checks that need a consistent
    /// view of everything, such as tests at quiescence).
    pub fn with_locked<T>(&self, f: impl FnOnce(&mut ReplayBuffer) -> T) -> T {
        f(&mut lock(&self.inner))
    }
}

/// Saves under the lock: every other thread waits for the files to be written.
impl Checkpoint for GlobalLockBuffer {
    fn save_with(&self, dir: &Path, options: &SaveOptions) -> Result<()> {
        lock(&self.inner).save_with(dir, options)
    }
}

impl crate::checkpoint::sealed::TreeState for GlobalLockBuffer {
    #[allow(private_interfaces)]
    fn tree_state(&self) -> Result<crate::checkpoint::State> {
        Ok(crate::checkpoint::State::of(lock(&self.inner).snapshot()))
    }
    #[allow(private_interfaces)]
    fn from_tree_state(config: Config, state: &crate::checkpoint::State) -> Result<Self> {
        Ok(GlobalLockBuffer {
            inner: Mutex::new(ReplayBuffer::from_state(config.clone(), state)?),
            config,
        })
    }
}

impl crate::checkpoint::TreeState for GlobalLockBuffer {}

impl Load for GlobalLockBuffer {
    fn load_with<P: AsRef<Path>>(dir: P, options: &LoadOptions) -> Result<Loaded<Self>> {
        let loaded = ReplayBuffer::load_with(dir, options)?;
        Ok(Loaded {
            buffer: GlobalLockBuffer {
                config: loaded.buffer.config().clone(),
                inner: Mutex::new(loaded.buffer),
            },
            user: loaded.user,
        })
    }
}

impl ConcurrentBuffer for GlobalLockBuffer {
    fn new(config: Config) -> Result<Self> {
        Ok(GlobalLockBuffer {
            inner: Mutex::new(ReplayBuffer::new(config.clone())?),
            config,
        })
    }

    fn config(&self) -> &Config {
        &self.config
    }

    fn insert(&self, columns: &[ColumnSlice<'_>], priority: Option<f64>) -> Result<Key> {
        lock(&self.inner).insert(columns, priority)
    }

    fn insert_batch(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
    ) -> Result<Vec<Key>> {
        lock(&self.inner).insert_batch(columns, priorities)
    }

    fn insert_batch_into(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
    ) -> Result<()> {
        lock(&self.inner).insert_batch_into(columns, priorities, keys)
    }

    fn sample_into(
        &self,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<()> {
        lock(&self.inner).sample_into(batch, beta, mode, rng, out)
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
        lock(&self.inner).sample_columns_into(batch, beta, mode, rng, out, columns)
    }

    fn sample_indices_into(
        &self,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<()> {
        lock(&self.inner).sample_indices_into(batch, beta, mode, rng, out)
    }

    fn sample_at_into(
        &self,
        fractions: &[f64],
        _rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<Stats> {
        lock(&self.inner).sample_at_into(fractions, out)
    }

    fn sample_at_columns_into(
        &self,
        fractions: &[f64],
        _rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        columns: &mut [ColumnSliceMut<'_>],
    ) -> Result<Stats> {
        lock(&self.inner).sample_at_columns_into(fractions, out, columns)
    }

    fn stats(&self) -> Stats {
        lock(&self.inner).stats()
    }

    fn update_priorities(&self, keys: &[Key], priorities: &[f64]) -> Result<UpdateReport> {
        lock(&self.inner).update_priorities(keys, priorities)
    }

    fn priority(&self, index: usize) -> Result<f64> {
        lock(&self.inner).priority(index)
    }

    fn key(&self, index: usize) -> Result<Option<Key>> {
        lock(&self.inner).key(index)
    }

    fn len(&self) -> usize {
        lock(&self.inner).len()
    }

    fn inserted(&self) -> u64 {
        lock(&self.inner).inserted()
    }

    fn total_priority(&self) -> f64 {
        lock(&self.inner).total_priority()
    }

    fn consistency(&self) -> Consistency {
        lock(&self.inner).tree().check()
    }

    fn memory_bytes(&self) -> usize {
        lock(&self.inner).memory_bytes()
    }

    fn clear(&self) {
        lock(&self.inner).clear();
    }

    fn rebuild(&self) {
        lock(&self.inner).rebuild();
    }
}
