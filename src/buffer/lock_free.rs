//! `LockFree`: no lock on the tree. Atomic nodes recomputed from their children and
//! installed with compare-and-swap up to the root (`tree/atomic.rs`), an atomic maximum
//! priority, an atomic FIFO cursor, the minimum positive priority kept exact by the same
//! recompute, lazy writing, and the slot protocol of `slots/` for the data.
//!
//! Fields and who touches them:
//! - the atomic tree: any thread, any time (its own protocol makes it bit-exact at
//!   quiescence);
//! - slot states and columns: `slots/`;
//! - cursor, completed count, running maximum: atomics in `slot_buffer/mod.rs`.
//!
//! Linearization points: an insert at the publication of its slot; an update entry at its
//! leaf store, made while it holds a read reference on the slot taken in the state that
//! matched its key (so no writer can overwrite the slot in between; the ancestors are
//! refreshed after, one climb per chunk of keys); a sampled item at the
//! load of its leaf, which comes after the load of the slot's state, and the copy is made
//! only if the slot is still in that state (so the priority belonged to the item copied).
//!
//! Lazy writing without a retire climb. A writer's first step (`SharedTree::retire_owned`)
//! stores its slots' leaves as 0 and does not climb; its install stores the new priorities
//! and climbs once, refreshing every ancestor from its children. Why that is enough:
//! - exact at quiescence: the tree's protocol (`tree/atomic.rs`) needs only that the last
//!   write to each leaf is followed by its writer's climb, which the install's is (and a
//!   writer that unwinds before its install climbs from its zeroed leaves instead:
//!   `RetiredLeaves` in `slot_buffer/insert.rs`);
//! - no in-flight sample: a descent that reaches a retired leaf reads 0 there, and a
//!   sampler takes a candidate only with a positive leaf and only if it can join the slot
//!   in the state it read, which an owned slot refuses;
//! - until the install's climb the ancestors still count the evicted priority: a target
//!   that falls in that mass finds nothing and is drawn again (`tree/atomic.rs`: the
//!   descent does not clamp stale mass into a neighbour), and the total and
//!   the minimum may include the evicted item (weights stay in (0, 1]). Any climb in flight
//!   does the same; a write with a retire climb had two such windows (the retire's climb,
//!   the install's climb) around a consistent copy, one without has one window that spans
//!   the copy and the install's climb;
//! - a write alone never makes the total 0 (the root keeps the evicted priority until
//!   the install replaces it); the zero-total check of `sample_in_spare` stays for the chunk
//!   that retires its first slot with a climb (LiveMax's default priority, which must not
//!   count the evicted item) and for `clear`.
//!
//! Why no retire climb: it was two thirds of a single insert's time (docs/performance.md,
//! "Measurements behind design choices").
//!
//! Leaves that do not change. A writer that finds, once it owns a slot, that the slot's
//! leaf already holds the new priority bit for bit (`SharedTree::keeps_leaves`: in a full
//! buffer, an insert at the default priority whose evicted item still had it) leaves the
//! leaf and its ancestors alone: no retire, no install, no climb. Why that is sound:
//! - nobody else writes the leaf while the slot is owned: an update stores a leaf only while
//!   it holds a read reference taken in the state that matched its key, which the owner's
//!   WRITER flag refuses, and the owner reads the leaf only after its wait for the slot's
//!   readers (Acquire, pairing with their Release exit), so it sees the last update's store;
//! - exact at quiescence: the last write to the leaf was someone else's, and that writer
//!   climbs after it (an update's climb may still be running: it is its own);
//! - no in-flight sample: a descent may land on the kept leaf, and the sampler is refused by
//!   the slot's state word and draws again, as for any slot in flight (independent draws:
//!   rejection sampling, the same distribution);
//! - a write that unwinds zeroes the kept leaf like a retired one (`RetiredLeaves`): the
//!   slot ends with no item.
//!
//! Loom model (k) `stale_update_of_a_kept_leaf` checks it, with the broken twin that reads
//! the leaf before owning the slot. SplitLock's writer cannot decide this itself (its
//! updates check the state under the tree lock without a read reference), so its retire
//! decides under the tree lock and its install is always made (`split_lock.rs`, "Leaves
//! that do not change").
//!
//! Nothing ever waits but a writer: for the previous writer of its own slot and for that
//! slot's in-flight copies. Sampling and updating never wait.
//!
//! Invariants (loom_tests/lock_free.rs): bit-exact tree with both sibling updates present;
//! no torn or in-flight or zero-priority sample; FIFO per slot; stale keys dropped; the
//! running maximum is the largest value written.

use super::protocol::{Candidate, Drawn, Fill, RawUpdate, SharedTree};
use super::slots::Slots;
use super::{Config, Key, UpdateReport};
use crate::error::{Error, Result};
use crate::mem::PREFETCH_AHEAD;
use crate::tree::{AtomicSumTree, Consistency, NOT_FOUND, SET_MANY_MAX};

impl SharedTree for AtomicSumTree {
    fn new(config: &Config, region: &mut crate::region::Region) -> Result<Self> {
        // The maxima, when LiveMax's default priorities or the max-heap selector need them.
        let k = config.fanout().get();
        AtomicSumTree::in_region(config.capacity(), k, config.keeps_maxima(), region)
    }

    fn get(&self, slot: usize) -> f64 {
        AtomicSumTree::get(self, slot)
    }

    fn total(&self) -> f64 {
        AtomicSumTree::total(self)
    }

    fn total_and_min(&self) -> (f64, Option<f64>) {
        (AtomicSumTree::total(self), self.min_positive())
    }

    fn max_leaf(&self) -> Option<f64> {
        AtomicSumTree::max_leaf(self)
    }

    fn rank(&self, extreme: crate::tree::Extreme, m: usize, out: &mut Vec<usize>) {
        AtomicSumTree::rank(self, extreme, m, out)
    }

    fn set_owned(&self, entries: &[(usize, f64)]) {
        // One climb for the whole batch: each touched ancestor is refreshed once.
        self.set_many(entries);
    }

    type Retired = ();

    fn retire_owned(&self, entries: &[(usize, f64)]) {
        // The leaves alone, at 0: no climb (module doc, "Lazy writing without a retire
        // climb"). The writer has left out the leaves it keeps (`keeps_leaves`).
        for &(slot, _) in entries {
            self.store_leaf(slot, 0.0);
        }
    }

    fn install_owned(&self, entries: &[(usize, f64)], _retired: ()) {
        // The climb that the retire left to it refreshes every touched ancestor once.
        self.set_owned(entries);
    }

    fn keeps_leaves(&self) -> bool {
        // Sound here (module doc, "Leaves that do not change"): an update stores a leaf only
        // while it holds a read reference on the slot, which the owner's WRITER flag refuses
        // and its wait for the readers outlasts, and every leaf store is followed by its
        // writer's own climb.
        true
    }

    fn update(
        &self,
        slots: &Slots,
        keys: &[Key],
        stored: &[f64],
        raw: RawUpdate<'_>,
    ) -> (UpdateReport, f64) {
        debug_assert!(keys.len() <= SET_MANY_MAX);
        let mut report = UpdateReport::default();
        let mut max_applied = 0.0f64;
        // Each leaf is stored while its slot is held; the ancestors of all of them are then
        // refreshed in one climb (each touched ancestor once), after the references are
        // gone: only the leaf store must come before a writer can take the slot, and the
        // tree's protocol is exact at quiescence whatever the order of leaf stores and
        // climbs.
        let mut leaves = [0usize; SET_MANY_MAX];
        let mut n = 0;
        for (j, (key, &value)) in keys.iter().zip(stored).enumerate() {
            if let Some(ahead) = keys.get(j + PREFETCH_AHEAD) {
                slots.prefetch(ahead.index);
            }
            // The leaf, and with it the raw priority (`RawPriorities::apply`: other
            // updaters of the key may hold the slot at once).
            let store = || match raw.store {
                Some(store) => {
                    store.apply(key.index, raw.raw[j], value, raw.alpha, |v| {
                        self.store_leaf(key.index, v)
                    });
                }
                None => self.store_leaf(key.index, value),
            };
            let applied = if slots.faults.update_holds_slot() {
                // The read reference keeps writers out of the slot until the leaf is stored.
                slots.try_read_key(*key).map(|_reading| {
                    store();
                    slots.point(crate::faults::Point::Updating);
                })
            } else {
                // The broken twin: the key checked, the slot not held.
                slots.holds(*key, slots.state(key.index)).then(store)
            };
            if applied.is_some() {
                leaves[n] = key.index;
                n += 1;
                max_applied = max_applied.max(raw.raw[j]);
                report.applied += 1;
            } else {
                report.stale += 1;
            }
        }
        slots.point(crate::faults::Point::Climbing);
        self.climb_leaves(&leaves[..n]);
        (report, max_applied)
    }

    fn candidates(
        &self,
        slots: &Slots,
        fill: &mut Fill<'_>,
        drawn: &mut Drawn,
    ) -> Result<(f64, f64)> {
        let total = self.total();
        let (true, Some(min_positive)) = (total > 0.0, self.min_positive()) else {
            return Err(Error::ZeroTotalPriority);
        };
        fill(total, &mut drawn.targets);
        self.find_prefix_batch(&drawn.targets, &mut drawn.indices);
        drawn.collect(slots, |index| {
            if index == NOT_FOUND {
                // The sampler draws this item again.
                Candidate {
                    index: 0,
                    priority: 0.0,
                    state: slots.state(0),
                }
            } else {
                self.candidate_at(slots, index)
            }
        });
        Ok((total, min_positive))
    }

    fn prefix_before(&self, slot: usize) -> f64 {
        AtomicSumTree::prefix_before(self, slot)
    }

    fn candidate(&self, slots: &Slots, x: f64) -> Option<Candidate> {
        Some(self.candidate_at(slots, self.find_prefix(x)?))
    }

    fn consistency(&self) -> Consistency {
        self.check()
    }

    fn memory_bytes(&self) -> usize {
        AtomicSumTree::memory_bytes(self)
    }

    fn restore_leaves(&mut self, leaves: &[f64]) {
        for (i, &p) in leaves.iter().enumerate() {
            self.store_leaf(i, p);
        }
        AtomicSumTree::rebuild(self);
    }

    fn rebuild(&self) {
        AtomicSumTree::rebuild(self);
    }

    fn reset_leaves(&self, leaves: &[f64]) {
        for (slot, &p) in leaves.iter().enumerate() {
            self.store_leaf(slot, p);
        }
        AtomicSumTree::rebuild(self);
    }

    #[cfg(loom)]
    fn inject_faults(&mut self, faults: &crate::faults::Faults) {
        self.faults = *faults;
    }
}

impl AtomicSumTree {
    fn candidate_at(&self, slots: &Slots, index: usize) -> Candidate {
        // State first, then the leaf: if the slot is rewritten in between, its epoch moves
        // on and the sampler's read reference (taken for this state) is refused.
        let state = slots.state(index);
        Candidate {
            index,
            priority: self.get(index),
            state,
        }
    }
}

super::slot_buffer::slot_buffer_type!(
    /// The lock-free buffer; see [`ConcurrentBuffer`](super::ConcurrentBuffer) for the API and
    /// semantics. Its tree is bit-exact whenever no thread is writing.
    ///
    /// ```
    /// use kary_replay::{ConcurrentBuffer, Config, DType, LockFreeBuffer, Schema};
    /// let buffer = LockFreeBuffer::new(Config::builder(4, Schema::new().column("x", DType::I32, 1)).alpha(1.0).build()?)?;
    /// buffer.insert_batch(&[(&[1, 2, 3][..]).into()], Some(&[0.1, 0.2, 0.3]))?;
    /// assert_eq!(buffer.total_priority(), 0.1 + 0.2 + 0.3);
    /// assert!(buffer.consistency().exact);
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    LockFreeBuffer,
    AtomicSumTree
);

/// The participants table of a buffer shared in a loom model (`LockFreeBuffer::share_for_model`).
#[cfg(loom)]
#[doc(hidden)]
pub struct ModelTable(std::sync::Arc<crate::region::RegionBuf<crate::buffer::reservations::Entry>>);

#[cfg(loom)]
impl LockFreeBuffer {
    /// Model hook: run this (heap) buffer as a shared mapping's runs it: optimistic readers,
    /// owners in slot words, recorded reservations and saves. Each model thread says which
    /// participant it is (`faults::as_participant`); returns the participants table.
    #[doc(hidden)]
    pub fn share_for_model(&mut self) -> Result<ModelTable> {
        use crate::buffer::reservations::{Entry, MAX_PARTICIPANTS};
        let table = std::sync::Arc::new(crate::region::Region::Heap.alloc(
            MAX_PARTICIPANTS,
            128,
            Entry::empty,
        )?);
        self.0
            .slots
            .set_mode(crate::buffer::slots::ReadMode::Optimistic { owner: 1 });
        self.0.journal = Some(crate::buffer::reservations::Journal::new(table.clone(), 0));
        Ok(ModelTable(table))
    }

    /// Model hook: recover dead participants `dead` as a survivor's watchdog does (then
    /// clear their entries); returns whether everything was recovered.
    #[doc(hidden)]
    pub fn recover_for_model(&self, table: &ModelTable, dead: &[usize]) -> bool {
        let r = crate::buffer::shm::Recoverer {
            buffer: &self.0,
            table: &table.0,
        };
        let done = r.recover_entries(dead);
        if done {
            for &j in dead {
                r.clear_entry(j);
            }
        }
        done
    }
}
