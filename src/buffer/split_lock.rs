//! `SplitLock`: the paper's algorithm 3. A global tree lock and a last-level lock, lazy
//! writing, and the slot protocol of `slots.rs` for the data.
//!
//! Fields and who touches them:
//! - `tree` (the global tree lock) guards the sequential sum tree: every descent, every
//!   leaf write and the propagation to the internal levels;
//! - `leaves` (the last-level lock) guards the leaf values that priority retrieval reads.
//!   A leaf write takes both locks, always the tree lock first, and releases the
//!   last-level lock before it propagates (algorithm 3, lines 2-7), so `priority(i)` takes
//!   only the last-level lock and runs in parallel with the propagation;
//! - slot states and columns: `slots.rs`. Data is copied with no tree lock held.
//!
//! Both locks are `SpinMutex`es: every section is a few leaf writes or one batch descent,
//! tens of nanoseconds to a few microseconds, and a parking mutex paid a system call per
//! contended handoff (benches/concurrent.rs: 0.84x GlobalLock in the mixed workload with
//! std's mutex, 1.1x to 1.3x with the spinning one).
//!
//! Linearization points: an insert at the publication of its slot; an update entry at its
//! leaf write (under both locks); a sampled item at the descent that chose it (under the
//! tree lock), its slot's state read in the same critical section, and the copy made only
//! if the slot is still in that state.
//!
//! Why an update needs no per-slot read reference here: it checks the slot's state word
//! under the tree lock, and a writer must take that lock to zero the leaf (lazy writing
//! step 1), so a key found current stays current until the update leaves the lock; an
//! overwrite that already began (WRITER set) makes the key stale.
//!
//! Invariants (loom_tests/split_lock.rs): consistent tree with both sibling updates present;
//! no torn or in-flight or zero-priority sample; FIFO per slot; stale keys dropped; the
//! running maximum is the largest value written.

use super::shared::{Candidate, SharedTree, SlotBuffer, UPDATE_CHUNK};
use super::slots::Slots;
use super::{Config, DefaultPriority, Key, UpdateReport};
use crate::error::{Error, Result};
use crate::spin::SpinMutex;
use crate::tree::{Consistency, SumTree, PREFETCH_AHEAD};

/// The sequential tree under the global tree lock, and its leaves under the last-level lock.
#[derive(Debug)]
pub struct SplitTree {
    tree: SpinMutex<SumTree>,
    leaves: SpinMutex<Vec<f64>>,
}

impl SharedTree for SplitTree {
    fn new(config: &Config) -> Result<Self> {
        let tree = match config.default_priority() {
            DefaultPriority::RunningMax => SumTree::new(config.capacity(), config.fanout())?,
            DefaultPriority::LiveMax => SumTree::with_max(config.capacity(), config.fanout())?,
        };
        let mut leaves = Vec::new();
        leaves
            .try_reserve_exact(config.capacity())
            .map_err(|_| Error::Allocation {
                bytes: config.capacity().saturating_mul(8),
            })?;
        leaves.resize(config.capacity(), 0.0);
        Ok(SplitTree {
            tree: SpinMutex::new(tree),
            leaves: SpinMutex::new(leaves),
        })
    }

    fn get(&self, slot: usize) -> f64 {
        self.leaves.lock()[slot]
    }

    fn total(&self) -> f64 {
        self.tree.lock().total()
    }

    fn max_leaf(&self) -> Option<f64> {
        self.tree.lock().max_leaf()
    }

    fn set_owned(&self, entries: &[(usize, f64)]) {
        // One acquisition of each lock for the whole batch; the last-level lock is released
        // before the propagation (algorithm 3), which goes level by level for the batch.
        let mut tree = self.tree.lock();
        {
            let mut leaves = self.leaves.lock();
            for &(slot, stored) in entries {
                leaves[slot] = stored;
            }
        }
        tree.set_many_unchecked(entries.iter().copied());
    }

    fn update(&self, slots: &Slots, keys: &[Key], stored: &[f64]) -> (UpdateReport, f64) {
        debug_assert!(keys.len() <= UPDATE_CHUNK);
        let mut report = UpdateReport::default();
        let mut max_applied = 0.0f64;
        let mut applied = [(0usize, 0.0f64); UPDATE_CHUNK];
        let mut n = 0;
        let mut tree = self.tree.lock();
        {
            let mut leaves = self.leaves.lock();
            for (j, (key, &value)) in keys.iter().zip(stored).enumerate() {
                if let Some(ahead) = keys.get(j + PREFETCH_AHEAD) {
                    slots.prefetch(ahead.index);
                    crate::tree::prefetch_line(leaves[..].as_ptr().wrapping_add(ahead.index));
                }
                let state = slots.state(key.index);
                if slots.holds(*key, state) {
                    leaves[key.index] = value;
                    applied[n] = (key.index, value);
                    n += 1;
                    max_applied = max_applied.max(value);
                    report.applied += 1;
                } else {
                    report.stale += 1;
                }
            }
        }
        // Algorithm 3: the last-level lock is released before the propagation.
        tree.set_many_unchecked(applied[..n].iter().copied());
        (report, max_applied)
    }

    fn candidates(
        &self,
        slots: &Slots,
        targets: &mut [f64],
        draw: &mut dyn FnMut(f64, &mut [f64]),
        indices: &mut Vec<usize>,
        out: &mut Vec<Candidate>,
    ) -> Result<(f64, f64)> {
        indices.clear();
        indices.resize(targets.len(), 0);
        let tree = self.tree.lock();
        let total = tree.total();
        let Some(min_positive) = tree.min_positive() else {
            return Err(Error::ZeroTotalPriority);
        };
        draw(total, targets);
        tree.find_prefix_batch_unchecked(targets, indices);
        for (j, &index) in indices.iter().enumerate() {
            if let Some(&ahead) = indices.get(j + PREFETCH_AHEAD) {
                slots.prefetch(ahead);
            }
            out.push(Candidate {
                index,
                priority: tree.get_unchecked(index),
                state: slots.state(index),
            });
        }
        Ok((total, min_positive))
    }

    fn candidate(&self, slots: &Slots, x: f64) -> Option<Candidate> {
        let tree = self.tree.lock();
        let index = tree.find_prefix(x)?;
        Some(Candidate {
            index,
            priority: tree.get_unchecked(index),
            state: slots.state(index),
        })
    }

    fn consistency(&self) -> Consistency {
        self.tree.lock().check()
    }

    fn memory_bytes(&self) -> usize {
        self.tree.lock().memory_bytes() + self.leaves.lock().capacity() * 8
    }

    fn rebuild(&self) {
        // The leaves under the last-level lock are the same values as the tree's leaves
        // (both written under the tree lock), so the tree alone is re-summed.
        self.tree.lock().rebuild();
    }
}

/// The paper's split-lock buffer (global tree lock + last-level lock, lazy writing); see
/// [`ConcurrentBuffer`](super::ConcurrentBuffer) for the API and semantics.
///
/// ```
/// use kary_replay::{ConcurrentBuffer, Config, DType, Schema, SplitLockBuffer};
/// let buffer = SplitLockBuffer::new(Config::builder(4, Schema::new().column("x", DType::F64, 1)).alpha(1.0).build()?)?;
/// let key = buffer.insert(&[(&[1.5f64][..]).into()], Some(3.0))?;
/// assert_eq!(buffer.priority(key.index)?, 3.0);
/// # Ok::<(), kary_replay::Error>(())
/// ```
pub type SplitLockBuffer = SlotBuffer<SplitTree>;
