//! `SplitLock`: the paper's algorithm 3. A global tree lock and a last-level lock, lazy
//! writing, and the slot protocol of `slots/` for the data; and, beyond the paper, writers
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
//! - slot states and columns: `slots/`. Data is copied with no tree lock held.
//!
//! Lock order: tree, then posted, then leaves.
//!
//! Posted writes. An inserting writer's install takes the tree lock only
//! if it is free at that instant (a single insert's retire never does: "Short retires are
//! always posted", below); when another thread holds it, the writer appends its entries to
//! `posted` and goes on. Whoever takes the tree lock applies every posted entry first, in
//! the order posted (`lock`), so anything that reads the tree through its lock (a descent,
//! the total, an update's check) sees every write posted before it took the lock. Without
//! this a learner that holds the lock for a 256-item descent and then a 256-item update
//! halved its actor's rate (0.43 of its solo rate beside it; the fairness bench rows); the
//! posting actor never waits for the learner. When `posted` is full a writer waits for the
//! tree lock as before, so nothing is dropped. A retire still posted when its writer's
//! install comes becomes the install where it waits (`install_in_place`: only the owner of
//! a slot posts writes for it, so retires of the writer's slots at the positions its post
//! returned are its own): whoever applies it makes one leaf write and one propagation per
//! item instead of two, and the list fills half as fast. Samplers and updates lose
//! nothing by it: they were already refused the slot (its WRITER flag) while the retire
//! waited unapplied, and the install is in place before the writer publishes.
//!
//! Short retires are always posted. A writer of fewer than [`APPLY_AT`] items (a single
//! insert) posts its retire even when the tree lock is free (only a full list makes it take
//! the lock), so its install nearly always takes the retire's place: one leaf write and one
//! propagation per item where there were two, and no tree lock taken between them. The
//! writes then wait for the next holder of the tree lock, except that a writer whose
//! install leaves `APPLY_AT` or more writes posted applies them itself if the lock is
//! free, in one tree operation (consecutive slots share their ancestors, written once).
//! A larger batch (a staged writer's flush) writes its retire directly when the lock is
//! free: posting those too makes two staged writers share the list on every flush, each
//! applying the other's retire, which undoes its coalescing (docs/performance.md,
//! "Measurements behind design choices", has the figures behind this and `APPLY_AT`).
//! Nothing reads a posted write as missing: `lock` applies the list before anything reads
//! the tree, and `get` folds it into the leaf.
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
//! Leaves that do not change. Lazy writing's retire (`SharedTree::retire_owned`) zeroes a
//! slot's leaf only if the leaf does not hold the priority the install will set, bit for
//! bit (in a full buffer, an insert at the default priority whose evicted item still had
//! it): a kept leaf and the install that writes it again change nothing, so neither
//! propagates. The writer cannot decide this itself (`SharedTree::keeps_leaves` is false
//! here: an update that checked the key before the writer's WRITER flag may write the leaf
//! after any read the writer makes outside the tree lock), so the retire decides it when
//! it is made, under the tree lock, against the leaf as every earlier write left it (a
//! posted retire when it is applied, in the order posted: `LeafWrite::apply`). Why that
//! is sound:
//! - the install is always made, after the retire and, through the tree lock, after every
//!   update that found the evicted key current (an update that takes the lock later sees
//!   the WRITER flag or the new epoch and drops the key), so the slot ends with the new
//!   priority whatever the retire decided;
//! - a sampler that lands on the kept leaf while the slot is in flight is refused by its
//!   state word and draws again, as for any slot in flight (rejection sampling); one that
//!   reads the published state reads the priority after applying the posted install, which
//!   is the same value;
//! - a write that unwinds zeroes the leaf (`RetiredLeaves` in `slot_buffer/insert.rs`).
//!
//! Loom model (k) `stale_update_of_a_kept_leaf` runs it. One thread, 36-byte items,
//! N = 2^20, inserts at the default priority into a full buffer (benches/concurrent.rs,
//! `concurrent_actors_36B/SplitLock/1`): 135 -> 48 ns.
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

use super::protocol::{Candidate, Drawn, Fill, RawUpdate, SharedTree, UPDATE_CHUNK};
use super::slots::Slots;
use super::{Config, Key, UpdateReport};
use crate::error::{Error, Result};
use crate::mem::PREFETCH_AHEAD;
use crate::spin::{SpinGuard, SpinMutex};
use crate::sync::CachePadded;
use crate::tree::{Consistency, SumTree, SET_MANY_MAX};

/// Entries that writers may post while the tree lock is held (a full list makes a writer
/// wait for the lock): four batch writers' chunks.
const POSTED: usize = 4 * crate::tree::SET_MANY_MAX;

/// Writes below which a writer posts its retire even when the tree lock is free, and
/// posted writes at which a writer whose install took the place of its retire applies the
/// list itself when the lock is free (module doc, "Short retires are always posted"):
/// single inserts are applied 16 at a time; a staged writer's flush (32 items by default)
/// writes directly, as before. Under loom 2, so that the models' few inserts take both
/// paths (an install left posted, a writer that applies the list).
#[cfg(not(loom))]
const APPLY_AT: usize = 16;
#[cfg(loom)]
const APPLY_AT: usize = 2;

/// Leaf writes posted by writers that found the tree lock held, in the order posted (room
/// for [`POSTED`] reserved at construction: posting never allocates).
type Posted = Vec<LeafWrite>;

/// A writer's leaf write: an install (`set_owned`) or lazy writing's retire
/// (`retire_owned`), which zeroes the leaf unless it holds the priority the install will
/// set (module doc, "Leaves that do not change").
#[derive(Debug, Clone, Copy)]
struct LeafWrite {
    slot: usize,
    value: f64,
    retire: bool,
}

impl LeafWrite {
    /// The leaf's value after this write, given its value before.
    fn apply(self, leaf: f64) -> f64 {
        if self.retire && leaf.to_bits() != self.value.to_bits() {
            0.0
        } else {
            self.value
        }
    }
}

/// The sequential tree under the global tree lock, its leaves under the last-level lock,
/// and the writes posted for the next holder of the tree lock (see the module doc).
#[derive(Debug)]
pub struct SplitTree {
    // Each lock on a line of its own, with what it guards: the actors' posting and the
    // learner's descents touch different locks.
    tree: CachePadded<SpinMutex<SumTree>>,
    posted: CachePadded<SpinMutex<Posted>>,
    leaves: CachePadded<SpinMutex<Vec<f64>>>,
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

    /// The tree lock if it is free at this instant, with every posted write applied.
    fn try_lock(&self) -> Option<SpinGuard<'_, SumTree>> {
        let mut tree = self.tree.try_lock()?;
        self.apply_posted(&mut tree);
        Some(tree)
    }

    /// Apply the posted writes (the caller holds the tree lock): the leaves under the
    /// last-level lock, then the tree in one operation, in the order posted (a slot posted
    /// twice ends with its later value). `posted` stays locked throughout, so priority
    /// retrieval finds each entry in one place or the other (loom model (m)
    /// `retrieval_vs_posted_apply`, with the broken twin that empties the list first).
    fn apply_posted(&self, tree: &mut SumTree) {
        let mut posted = self.posted.lock();
        if posted.is_empty() {
            return;
        }
        if !self.faults.posted_kept_until_leaves_written() {
            // The broken twin (loom only): the list emptied and released first.
            let writes = posted.clone();
            posted.clear();
            drop(posted);
            self.write::<SET_MANY_MAX>(tree, &writes);
            return;
        }
        self.write::<SET_MANY_MAX>(tree, &posted);
        posted.clear();
    }

    /// Make `writes` in order under the tree lock (the caller holds it), up to `C` at a
    /// time: each retire decided against the leaf as the writes before it left it, the
    /// leaves written under the last-level lock, which is released before the propagation
    /// (algorithm 3). A leaf left unchanged costs the propagation nothing. `C` sizes the
    /// stack array: 1 for a single insert, which should not clear room for a batch.
    fn write<const C: usize>(&self, tree: &mut SumTree, writes: &[LeafWrite]) {
        for chunk in writes.chunks(C) {
            let mut entries = [(0usize, 0.0f64); C];
            {
                let mut leaves = self.leaves.lock();
                for (entry, w) in entries.iter_mut().zip(chunk) {
                    let value = w.apply(leaves[w.slot]);
                    leaves[w.slot] = value;
                    *entry = (w.slot, value);
                }
            }
            tree.set_many_unchecked(entries[..chunk.len()].iter().copied());
        }
    }

    /// A writer's leaf writes for slots it owns (`retire`: lazy writing's first step, else
    /// the install), in one tree operation if the tree lock is free; otherwise posted for
    /// its holder or the next one (module doc), unless there is no room (then the writer
    /// waits for the lock). Returns where in the posted list the writes went, if posted.
    fn write_owned(&self, entries: &[(usize, f64)], retire: bool) -> Option<usize> {
        if let [(slot, value)] = *entries {
            self.write_owned_as::<1>(&[LeafWrite {
                slot,
                value,
                retire,
            }])
        } else {
            let mut writes = [LeafWrite {
                slot: 0,
                value: 0.0,
                retire,
            }; SET_MANY_MAX];
            for (w, &(slot, value)) in writes.iter_mut().zip(entries) {
                (w.slot, w.value) = (slot, value);
            }
            self.write_owned_as::<SET_MANY_MAX>(&writes[..entries.len()])
        }
    }

    fn write_owned_as<const C: usize>(&self, writes: &[LeafWrite]) -> Option<usize> {
        debug_assert!(writes.len() <= C);
        // A short retire is posted even when the tree lock is free, so that its install can
        // take its place (module doc, "Short retires are always posted"). Otherwise one
        // acquisition of each lock for the whole batch; the last-level lock is released
        // before the propagation (algorithm 3), which goes level by level for the batch.
        let retire = writes.first().is_some_and(|w| w.retire);
        if !retire || writes.len() >= APPLY_AT {
            if let Some(mut tree) = self.try_lock() {
                self.write::<C>(&mut tree, writes);
                return None;
            }
        }
        {
            let mut posted = self.posted.lock();
            if posted.len() + writes.len() <= POSTED {
                let at = posted.len();
                posted.extend_from_slice(writes);
                return Some(at);
            }
        }
        let mut tree = self.lock();
        self.write::<C>(&mut tree, writes);
        None
    }

    /// Turn the retire of `entries` posted at `at` into their install, if it still waits
    /// there unapplied (module doc, "Posted writes"); if it did, how many writes the posted
    /// list holds.
    fn install_in_place(&self, entries: &[(usize, f64)], at: usize) -> Option<usize> {
        let mut posted = self.posted.lock();
        let len = posted.len();
        let writes = posted.get_mut(at..at + entries.len())?;
        // Only the owner of a slot posts writes for it, and these slots are still ours: if
        // the entries there are retires of these slots, they are our retire (after a clear,
        // the positions hold other slots' writes, or nothing).
        let ours = writes
            .iter()
            .zip(entries)
            .all(|(w, &(slot, value))| w.retire && w.slot == slot && w.value == value);
        if ours && self.faults.install_replaces_posted_retire() {
            for w in writes {
                w.retire = false;
            }
        }
        ours.then_some(len)
    }
}

impl SharedTree for SplitTree {
    fn new(config: &Config, region: &mut crate::region::Region) -> Result<Self> {
        // Its locks could not be shared by processes (no owner-death story): heap only.
        debug_assert!(region.is_heap(), "the split-lock tree lives on the heap");
        // The maxima, when LiveMax's default priorities or the max-heap selector need them.
        let tree = SumTree::build(config.capacity(), config.fanout(), config.keeps_maxima())?;
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
                bytes: POSTED * std::mem::size_of::<LeafWrite>(),
            })?;
        Ok(SplitTree {
            tree: CachePadded::new(SpinMutex::new(tree)),
            posted: CachePadded::new(SpinMutex::new(posted)),
            leaves: CachePadded::new(SpinMutex::new(leaves)),
            faults: crate::faults::Faults::none(),
        })
    }

    fn get(&self, slot: usize) -> f64 {
        // The posted writes are newer than the leaf: the leaf as they will leave it.
        let posted = self.posted.lock();
        let leaf = self.leaves.lock()[slot];
        posted
            .iter()
            .filter(|w| w.slot == slot)
            .fold(leaf, |leaf, w| w.apply(leaf))
    }

    fn get_candidates(&self, candidates: &mut [Candidate]) {
        // As `get`, for every candidate under one acquisition of the two locks.
        let posted = self.posted.lock();
        let leaves = self.leaves.lock();
        for c in candidates.iter_mut() {
            c.priority = leaves[c.index];
        }
        for w in posted.iter() {
            for c in candidates.iter_mut().filter(|c| c.index == w.slot) {
                c.priority = w.apply(c.priority);
            }
        }
    }

    fn copy_leaves(&self, out: &mut Vec<f64>, _capacity: usize) {
        // As `get`, for every leaf under one acquisition of the two locks.
        let posted = self.posted.lock();
        out.extend_from_slice(&self.leaves.lock());
        for w in posted.iter() {
            out[w.slot] = w.apply(out[w.slot]);
        }
    }

    fn total(&self) -> f64 {
        self.lock().total()
    }

    fn total_and_min(&self) -> (f64, Option<f64>) {
        let tree = self.lock();
        (tree.total(), tree.min_positive())
    }

    fn max_leaf(&self) -> Option<f64> {
        self.lock().max_leaf()
    }

    fn rank(&self, extreme: crate::tree::Extreme, m: usize, out: &mut Vec<usize>) {
        self.lock().rank(extreme, m, out)
    }

    fn set_owned(&self, entries: &[(usize, f64)]) {
        self.write_owned(entries, false);
    }

    /// Where the retire's writes wait in the posted list, if they were posted.
    type Retired = Option<usize>;

    fn retire_owned(&self, entries: &[(usize, f64)]) -> Option<usize> {
        if entries.is_empty() {
            return None;
        }
        // Decided under the tree lock, when the write is made (module doc, "Leaves that do
        // not change").
        self.write_owned(entries, true)
    }

    fn install_owned(&self, entries: &[(usize, f64)], retired: Option<usize>) {
        // A retire that still waits among the posted writes becomes the install where it
        // is: one leaf write and one propagation for whoever applies it, where there
        // were two of each.
        if let Some(posted) = retired.and_then(|at| self.install_in_place(entries, at)) {
            // Posted writes are applied by the next holder of the tree lock; a writer with
            // enough of them waiting applies them itself if the lock is free, in one tree
            // operation (consecutive slots share their ancestors), so that a thread that
            // only inserts keeps the list short and the priority reads cheap.
            if posted >= APPLY_AT {
                drop(self.try_lock());
            }
            return;
        }
        self.write_owned(entries, false);
    }

    fn update(
        &self,
        slots: &Slots,
        keys: &[Key],
        stored: &[f64],
        raw: RawUpdate<'_>,
    ) -> (UpdateReport, f64) {
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
                    crate::mem::prefetch_line(leaves[..].as_ptr().wrapping_add(ahead.index));
                }
                // Held while the raw priority is written: its writer, which writes the raw
                // priority of the slot's next item with no lock of ours, owns the slot only
                // after. (The leaf needs no hold: the writer's install follows this write
                // under the tree lock, whenever its check was made.)
                if let Some(_reading) = slots.try_read_key(*key) {
                    leaves[key.index] = value;
                    // Under the last-level lock, as the leaf: updaters write both in turn.
                    if let Some(store) = raw.store {
                        store.set(key.index, raw.raw[j]);
                    }
                    applied[n] = (key.index, value);
                    n += 1;
                    max_applied = max_applied.max(raw.raw[j]);
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
        fill: &mut Fill<'_>,
        drawn: &mut Drawn,
    ) -> Result<(f64, f64)> {
        let mut tree = self.lock();
        let total = tree.total();
        let Some(min_positive) = tree.min_positive() else {
            return Err(Error::ZeroTotalPriority);
        };
        fill(total, &mut drawn.targets);
        tree.find_prefix_batch_unchecked(&drawn.targets, &mut drawn.indices);
        // States first, then the posted writes, then the priorities (module doc).
        drawn.collect(slots, |index| Candidate {
            index,
            priority: 0.0,
            state: slots.state(index),
        });
        if self.faults.sampler_applies_posted_writes() {
            self.apply_posted(&mut tree);
        }
        for c in drawn.candidates.iter_mut() {
            c.priority = tree.get_unchecked(c.index);
        }
        Ok((total, min_positive))
    }

    fn prefix_before(&self, slot: usize) -> f64 {
        self.lock().prefix_before(slot)
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
            + self.posted.lock().capacity() * std::mem::size_of::<LeafWrite>()
    }

    fn restore_leaves(&mut self, leaves: &[f64]) {
        self.leaves.lock().copy_from_slice(leaves);
        let mut tree = self.tree.lock();
        tree.set_many_unchecked(leaves.iter().copied().enumerate());
        tree.rebuild();
    }

    fn reset_leaves(&self, leaves: &[f64]) {
        // Both locks, in the updates' order: the tree (its posted writes applied), then the
        // last level.
        let mut tree = self.lock();
        self.leaves.lock().copy_from_slice(leaves);
        tree.set_many_unchecked(leaves.iter().copied().enumerate());
        tree.rebuild();
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

super::slot_buffer::slot_buffer_type!(
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
    SplitLockBuffer,
    SplitTree
);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{SharedTree, APPLY_AT};
    use crate::{ConcurrentBuffer, Config, DType, Schema, SplitLockBuffer};

    /// A SplitLock buffer of capacity 4 holding priorities 2, 3, 4, 5 (alpha 1).
    fn four_items() -> SplitLockBuffer {
        let schema = Schema::new().column("x", DType::U8, 1);
        let buffer =
            SplitLockBuffer::new(Config::builder(4, schema).alpha(1.0).build().unwrap()).unwrap();
        let rows: Vec<u8> = (0..4).collect();
        buffer
            .insert_batch(&[(&rows[..]).into()], Some(&[2.0, 3.0, 4.0, 5.0]))
            .unwrap();
        // Fewer than APPLY_AT writes: the four installs wait posted until the tree lock is
        // taken.
        assert_eq!(buffer.0.tree.posted.lock().len(), 4);
        assert_eq!(buffer.total_priority(), 14.0);
        assert!(buffer.0.tree.posted.lock().is_empty());
        buffer
    }

    /// The posted writes as (slot, value, retire).
    fn posted_writes(buffer: &SplitLockBuffer) -> Vec<(usize, f64, bool)> {
        let posted = buffer.0.tree.posted.lock();
        posted.iter().map(|w| (w.slot, w.value, w.retire)).collect()
    }

    /// Retires posted while the tree lock is held are decided when applied, in the order
    /// posted: a leaf that holds its new priority (as the writes before the retire left it)
    /// stays, any other is zeroed; priority retrieval reports what the posted writes will
    /// leave; the applied tree is exact and propagated nothing for the kept leaf.
    #[test]
    fn posted_retires_keep_only_leaves_that_hold_their_new_priority() {
        let buffer = four_items();
        let held = buffer.0.tree.tree.lock();
        // Slot 0 holds 2: kept. Slot 1 holds 3, not 6: zeroed.
        buffer.0.tree.retire_owned(&[(0, 2.0), (1, 6.0)]);
        // Slot 2: an install of 7 posted first, then a retire for 7: kept at 7. Slot 3: an
        // install of 7, then a retire for 8: zeroed.
        buffer.0.tree.set_owned(&[(2, 7.0), (3, 7.0)]);
        buffer.0.tree.retire_owned(&[(2, 7.0), (3, 8.0)]);
        assert_eq!(buffer.0.tree.posted.lock().len(), 6, "all posted");
        let reported: Vec<f64> = (0..4).map(|i| buffer.priority(i).unwrap()).collect();
        assert_eq!(reported, [2.0, 0.0, 7.0, 0.0]);
        drop(held);
        assert_eq!(buffer.total_priority(), 9.0);
        assert!(
            buffer.0.tree.posted.lock().is_empty(),
            "applied by the lock"
        );
        assert!(buffer.consistency().exact);
        let applied: Vec<f64> = (0..4).map(|i| buffer.priority(i).unwrap()).collect();
        assert_eq!(applied, reported);
        // The same decisions with the lock free: a retire is posted all the same, for its
        // install to take its place.
        buffer.0.tree.retire_owned(&[(0, 2.0), (2, 1.0)]);
        assert_eq!(posted_writes(&buffer), [(0, 2.0, true), (2, 1.0, true)]);
        assert_eq!(buffer.priority(0).unwrap(), 2.0);
        assert_eq!(buffer.priority(2).unwrap(), 0.0);
        assert_eq!(buffer.total_priority(), 2.0);
        assert!(
            buffer.0.tree.posted.lock().is_empty(),
            "applied by the lock"
        );
        assert_eq!(buffer.priority(2).unwrap(), 0.0);
        assert!(buffer.consistency().exact);
    }

    /// A retire of APPLY_AT items or more (a staged writer's flush) is written directly
    /// when the tree lock is free; a shorter one is posted all the same, for its install to
    /// take its place. Either way a batch insert leaves the tree exact.
    #[test]
    fn only_short_retires_are_posted_with_the_lock_free() {
        let buffer = four_items();
        let long: Vec<(usize, f64)> = (0..APPLY_AT).map(|i| (i % 4, 9.0)).collect();
        assert_eq!(buffer.0.tree.retire_owned(&long), None, "written directly");
        assert!(posted_writes(&buffer).is_empty());
        assert_eq!(buffer.total_priority(), 0.0, "every leaf zeroed");
        let short = &long[..APPLY_AT - 1];
        assert_eq!(buffer.0.tree.retire_owned(short), Some(0), "posted");
        assert_eq!(posted_writes(&buffer).len(), APPLY_AT - 1);
        assert_eq!(buffer.total_priority(), 0.0);
        assert!(posted_writes(&buffer).is_empty(), "applied by the lock");
        // Batch inserts of both kinds through the buffer.
        let schema = Schema::new().column("x", DType::U8, 1);
        let buffer =
            SplitLockBuffer::new(Config::builder(64, schema).alpha(1.0).build().unwrap()).unwrap();
        let rows: Vec<u8> = (0..APPLY_AT as u8).collect();
        buffer.insert_batch(&[(&rows[..]).into()], None).unwrap();
        assert!(posted_writes(&buffer).is_empty(), "written directly");
        buffer
            .insert_batch(&[(&rows[..APPLY_AT - 1]).into()], None)
            .unwrap();
        assert_eq!(posted_writes(&buffer).len(), APPLY_AT - 1, "posted");
        assert_eq!(buffer.total_priority(), (2 * APPLY_AT - 1) as f64);
        assert!(posted_writes(&buffer).is_empty());
        assert!(buffer.consistency().exact);
    }

    /// With the tree lock free, each single insert's install takes the place of its posted
    /// retire, and the insert that brings the list to APPLY_AT writes applies it all in one
    /// tree operation; every read in between sees the posted values.
    #[test]
    fn single_inserts_are_applied_by_their_writer_every_apply_at() {
        let schema = Schema::new().column("x", DType::U8, 1);
        let buffer =
            SplitLockBuffer::new(Config::builder(64, schema).alpha(1.0).build().unwrap()).unwrap();
        let mut expected = 0.0;
        for i in 0..APPLY_AT + 4 {
            let p = 1.0 + i as f64;
            let key = buffer.insert(&[(&[i as u8][..]).into()], Some(p)).unwrap();
            expected += p;
            let waiting = posted_writes(&buffer);
            if i + 1 == APPLY_AT {
                assert!(waiting.is_empty(), "applied by the {APPLY_AT}th insert");
            } else {
                let first = if i < APPLY_AT { 0 } else { APPLY_AT };
                let installs: Vec<_> = (first..=i).map(|j| (j, 1.0 + j as f64, false)).collect();
                assert_eq!(waiting, installs, "each install in its retire's place");
            }
            assert_eq!(buffer.priority(key.index).unwrap(), p);
        }
        assert_eq!(posted_writes(&buffer).len(), 4);
        assert_eq!(buffer.total_priority(), expected);
        assert!(buffer.0.tree.posted.lock().is_empty());
        assert!(buffer.consistency().exact);
    }

    /// An install whose retire still waits among the posted writes becomes that retire,
    /// in place (one write where there were two); one whose retire was applied meanwhile,
    /// or whose positions now hold other writes, is made as usual.
    #[test]
    fn an_install_takes_the_place_of_its_posted_retire() {
        let buffer = four_items();
        let held = buffer.0.tree.tree.lock();
        let retire = buffer.0.tree.retire_owned(&[(0, 6.0), (1, 7.0)]);
        assert_eq!(retire, Some(0));
        assert_eq!(buffer.priority(0).unwrap(), 0.0, "retired");
        buffer.0.tree.install_owned(&[(0, 6.0), (1, 7.0)], retire);
        let posted = posted_writes(&buffer);
        assert_eq!(
            posted,
            [(0, 6.0, false), (1, 7.0, false)],
            "installed in place"
        );
        assert_eq!(buffer.priority(1).unwrap(), 7.0);
        // Slot 2's retire is applied before its install comes, and slot 3's retire then
        // takes its position: the install is posted after it.
        let retire = buffer.0.tree.retire_owned(&[(2, 8.0)]);
        drop(held);
        assert_eq!(buffer.total_priority(), 18.0, "applied: 6 + 7 + 0 + 5");
        let held = buffer.0.tree.tree.lock();
        buffer.0.tree.retire_owned(&[(3, 9.0)]);
        buffer.0.tree.install_owned(&[(2, 8.0)], retire);
        let posted = posted_writes(&buffer);
        assert_eq!(posted, [(3, 9.0, true), (2, 8.0, false)]);
        drop(held);
        assert_eq!(buffer.total_priority(), 21.0, "6 + 7 + 8 + 0");
        assert!(buffer.consistency().exact);
    }
}
