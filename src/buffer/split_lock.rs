//! `SplitLock`: the paper's algorithm 3. A global tree lock and a last-level lock, lazy
//! writing, and the slot protocol of `slots.rs` for the data; and, beyond the paper, writers
//! that do not wait for the tree lock.
//!
//! Fields and who touches them:
//! - `tree` (the global tree lock) guards the sequential sum tree: every descent, every
//!   leaf write and the propagation to the internal levels;
//! - `leaves` (the last-level lock) guards the leaf values that priority retrieval reads.
//!   A leaf write takes both locks, always the tree lock first, and releases the
//!   last-level lock before it propagates (algorithm 3, lines 2-7), so `priority(i)` takes
//!   only the last-level lock and runs in parallel with the propagation;
//! - `posted`: leaf writes of inserting writers that found the tree lock held (below);
//! - slot states and columns: `slots.rs`. Data is copied with no tree lock held.
//!
//! Lock order: tree, then posted, then leaves.
//!
//! Posted writes (issue 11, item 7). An inserting writer's two tree operations (lazy
//! writing's retire, then the install) take the tree lock only if it is free at that
//! instant; when another thread holds it, the writer appends its entries to `posted` and
//! goes on. Whoever takes the tree lock applies every posted entry first, in the order
//! posted (`lock`), so anything that reads the tree through its lock (a descent, the
//! total, an update's check) sees every write posted before it took the lock. Without
//! this a learner that holds the lock for a 256-item descent and then a 256-item update
//! halved its actor's rate (0.43 of its solo rate beside it; `tests/fairness.rs`); the
//! posting actor never waits for the learner. When `posted` is full a writer waits for the
//! tree lock as before, so nothing is dropped.
//!
//! What posting changes for a sampler: while it holds the tree lock, a whole insert (begin
//! write, post the retire, copy, post the install, publish) can run, so the slot state it
//! reads for a chosen leaf may be newer than the leaf it descended through. So a sampler
//! reads its candidates' states, then applies the posted writes, then reads their
//! priorities: a state read shows only publications whose installs were posted before it,
//! and so were applied before the priority is read; a later writer of that slot changes the
//! state, and the sampler's read reference (taken for the state read) is refused. A
//! priority that the applied writes set to 0 makes the sampler draw again. (Loom model
//! `sampled_priority_matches_key`, with the broken twin that reads the priorities first.)
//! Priority retrieval reads `posted` before the leaves.
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
//! under the tree lock, and a writer zeroes the leaf (lazy writing step 1) only through the
//! tree lock, directly or by posting after it set its WRITER flag, to be applied by a later
//! holder of the lock; so a key found current keeps its leaf until the update leaves the
//! lock, and a posted retire or install is applied after the update's write. An overwrite
//! that already began (WRITER set) makes the key stale.
//!
//! Invariants (loom_tests/split_lock.rs): consistent tree with both sibling updates present;
//! no torn or in-flight or zero-priority sample; a sampled priority is its key's; FIFO per
//! slot; stale keys dropped; the running maximum is the largest value written.

use super::shared::{Candidate, SharedTree, SlotBuffer, UPDATE_CHUNK};
use super::slots::Slots;
use super::{Config, DefaultPriority, Key, UpdateReport};
use crate::error::{Error, Result};
use crate::spin::{SpinGuard, SpinMutex};
use crate::tree::{Consistency, SumTree, PREFETCH_AHEAD};

/// Entries that writers may post while the tree lock is held (a full list makes a writer
/// wait for the lock): four batch writers' chunks.
const POSTED: usize = 4 * crate::tree::SET_MANY_MAX;

/// Leaf writes posted by writers that found the tree lock held, in the order posted (room
/// for [`POSTED`] reserved at construction: posting never allocates).
type Posted = Vec<(usize, f64)>;

/// The sequential tree under the global tree lock, its leaves under the last-level lock,
/// and the writes posted for the next holder of the tree lock (see the module doc).
#[derive(Debug)]
pub struct SplitTree {
    tree: SpinMutex<SumTree>,
    posted: SpinMutex<Posted>,
    leaves: SpinMutex<Vec<f64>>,
    /// The protocol's answers (a zero-sized type outside loom: `faults.rs`).
    faults: crate::faults::Faults,
}

impl SplitTree {
    /// The tree lock, with every posted write applied.
    fn lock(&self) -> SpinGuard<'_, SumTree> {
        let mut tree = self.tree.lock();
        self.apply_posted(&mut tree);
        tree
    }

    /// Apply the posted writes (the caller holds the tree lock): the leaves under the
    /// last-level lock, then the tree in one operation, in the order posted (a slot posted
    /// twice ends with its later value). `posted` stays locked throughout, so priority
    /// retrieval finds each entry in one place or the other.
    fn apply_posted(&self, tree: &mut SumTree) {
        let mut posted = self.posted.lock();
        if !posted.is_empty() {
            self.write(tree, &posted);
            posted.clear();
        }
    }

    /// Write `entries` under the tree lock (the caller holds it), the last-level lock
    /// released before the propagation (algorithm 3).
    fn write(&self, tree: &mut SumTree, entries: &[(usize, f64)]) {
        {
            let mut leaves = self.leaves.lock();
            for &(slot, stored) in entries {
                leaves[slot] = stored;
            }
        }
        tree.set_many_unchecked(entries.iter().copied());
    }
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
        let mut posted = Vec::new();
        posted
            .try_reserve_exact(POSTED)
            .map_err(|_| Error::Allocation {
                bytes: POSTED * std::mem::size_of::<(usize, f64)>(),
            })?;
        Ok(SplitTree {
            tree: SpinMutex::new(tree),
            posted: SpinMutex::new(posted),
            leaves: SpinMutex::new(leaves),
            faults: crate::faults::Faults::none(),
        })
    }

    fn get(&self, slot: usize) -> f64 {
        // A posted write is newer than the leaf: the latest one for the slot wins.
        let posted = self.posted.lock();
        let latest = posted.iter().rev().find(|&&(s, _)| s == slot);
        match latest {
            Some(&(_, stored)) => stored,
            None => self.leaves.lock()[slot],
        }
    }

    fn total(&self) -> f64 {
        self.lock().total()
    }

    fn max_leaf(&self) -> Option<f64> {
        self.lock().max_leaf()
    }

    fn set_owned(&self, entries: &[(usize, f64)]) {
        // One acquisition of each lock for the whole batch; the last-level lock is released
        // before the propagation (algorithm 3), which goes level by level for the batch.
        if let Some(mut tree) = self.tree.try_lock() {
            self.apply_posted(&mut tree);
            self.write(&mut tree, entries);
            return;
        }
        // The lock is held: post the entries for its holder or the next one (module doc),
        // unless there is no room (then wait for the lock).
        {
            let mut posted = self.posted.lock();
            if posted.len() + entries.len() <= POSTED {
                posted.extend_from_slice(entries);
                return;
            }
        }
        let mut tree = self.lock();
        self.write(&mut tree, entries);
    }

    fn update(&self, slots: &Slots, keys: &[Key], stored: &[f64]) -> (UpdateReport, f64) {
        debug_assert!(keys.len() <= UPDATE_CHUNK);
        let mut report = UpdateReport::default();
        let mut max_applied = 0.0f64;
        let mut applied = [(0usize, 0.0f64); UPDATE_CHUNK];
        let mut n = 0;
        let mut tree = self.lock();
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
        let mut tree = self.lock();
        let total = tree.total();
        let Some(min_positive) = tree.min_positive() else {
            return Err(Error::ZeroTotalPriority);
        };
        draw(total, targets);
        tree.find_prefix_batch_unchecked(targets, indices);
        // States first, then the posted writes, then the priorities (module doc).
        for (j, &index) in indices.iter().enumerate() {
            if let Some(&ahead) = indices.get(j + PREFETCH_AHEAD) {
                slots.prefetch(ahead);
            }
            out.push(Candidate {
                index,
                priority: 0.0,
                state: slots.state(index),
            });
        }
        if self.faults.sampler_applies_posted_writes() {
            self.apply_posted(&mut tree);
        }
        for c in out.iter_mut() {
            c.priority = tree.get_unchecked(c.index);
        }
        Ok((total, min_positive))
    }

    fn candidate(&self, slots: &Slots, x: f64) -> Option<Candidate> {
        let mut tree = self.lock();
        let index = tree.find_prefix(x)?;
        let state = slots.state(index);
        if self.faults.sampler_applies_posted_writes() {
            self.apply_posted(&mut tree);
        }
        Some(Candidate {
            index,
            priority: tree.get_unchecked(index),
            state,
        })
    }

    fn consistency(&self) -> Consistency {
        self.lock().check()
    }

    fn memory_bytes(&self) -> usize {
        self.tree.lock().memory_bytes()
            + self.leaves.lock().capacity() * 8
            + self.posted.lock().capacity() * std::mem::size_of::<(usize, f64)>()
    }

    fn rebuild(&self) {
        // The leaves under the last-level lock are the same values as the tree's leaves
        // (both written under the tree lock, the posted ones applied by `lock`), so the tree
        // alone is re-summed.
        self.lock().rebuild();
    }

    #[cfg(loom)]
    fn inject_faults(&mut self, faults: &crate::faults::Faults) {
        self.faults = *faults;
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
