//! The slot operations by key beside the FIFO writes: deleting an item (`remove`, and the
//! count of removed items a buffer's length subtracts) and rewriting its rows in place
//! (`write_back`), each taking the slot as a writer would.

use super::{ReadMode, SlotState, Slots, Take, EMPTY, EPOCH, REMOVED, UPDATER, WRITER};
use crate::buffer::Key;
use crate::storage::ColumnSlice;
use crate::sync::Ordering;

impl Slots {
    /// Set slot `slot`'s state word as a restore finds an item deleted by key: `epoch` writes
    /// completed, the last one's item removed (EMPTY and REMOVED), and counted in
    /// [`Slots::removed`] until a writer takes the slot.
    pub(crate) fn restore_removed(&mut self, slot: usize, epoch: u64) {
        assert!(0 < epoch && epoch <= EPOCH);
        // ORDERING: SeqCst, as in `restore_state`.
        self.word(slot)
            .store(epoch | EMPTY | REMOVED, Ordering::SeqCst);
        // ORDERING: Relaxed: a count with no data attached, on a buffer no one shares yet.
        self.removed.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Items deleted by key ([`Slots::remove`]) whose slots no writer (or clear) has taken
    /// since: they hold nothing, and a buffer's length does not count them. Exact when no
    /// deletion or write is in flight.
    pub(crate) fn removed(&self) -> u64 {
        // ORDERING: Relaxed: a count with no data attached.
        self.removed.0.load(Ordering::Relaxed)
    }

    /// The slot's next owner took `word` (the word it replaced): if it showed an item
    /// deleted by key, that item is no longer counted as removed.
    #[inline]
    pub(super) fn forget_removed(&self, word: u64) {
        if word & REMOVED != 0 {
            // ORDERING: Relaxed: a count; this owner's Acquire CAS of the word came after
            // the remover's increment (made while it owned the slot), so it never goes below 0.
            self.removed.0.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Delete `key`'s item if it is current (stored, no writer at work on the slot): own the
    /// slot as a writer would (after the copies in flight, and in optimistic mode after an
    /// updater's hold), run `zero_leaf`, count it removed, and leave the slot at the same
    /// epoch marked EMPTY and REMOVED: no reader joins, no key of it is current, and the
    /// slot's next writer goes on as after a [`Slots::clear`]. Returns whether it deleted
    /// (`false`: the key was stale, or a writer or another deletion took the slot first).
    pub(crate) fn remove(&self, key: Key, zero_leaf: impl FnOnce()) -> bool {
        if !self.faults.remover_owns_slot() {
            // The broken twin (loom): a look, then a plain store over whatever came between.
            let word = self.word(key.index).load(Ordering::Acquire);
            if !self.holds(key, SlotState(word)) {
                return false;
            }
            zero_leaf();
            self.removed.0.fetch_add(1, Ordering::Relaxed);
            self.word(key.index)
                .store((word & EPOCH) | EMPTY | REMOVED, Ordering::Release);
            return true;
        }
        let held = match self.mode {
            ReadMode::Counted => WRITER,
            ReadMode::Optimistic { .. } => WRITER | UPDATER,
        };
        let taken = self.own_if(key.index, |current| {
            if !self.holds(key, SlotState(current)) {
                Take::Never
            } else if current & held != 0 {
                Take::Wait
            } else {
                Take::Now
            }
        });
        let Some(word) = taken else {
            return false;
        };
        zero_leaf();
        // ORDERING: Relaxed: a count; counted while the slot is ours, so the next owner's
        // decrement (`forget_removed`, after its Acquire CAS of our Release store) follows it.
        self.removed.0.fetch_add(1, Ordering::Relaxed);
        // ORDERING: Release, as in `clear`.
        self.word(key.index)
            .store((word & EPOCH) | EMPTY | REMOVED, Ordering::Release);
        true
    }

    /// Overwrite item `item` of `columns` (column position, data) into `key`'s slot in place
    /// if `key` is current, under the slot protocol: own the slot as a writer would (after the
    /// copies in flight), copy, and store the same epoch back with no flags, so that the key
    /// stays current and a reader that joins after sees the new bytes (Release). Counted
    /// mode only: optimistic readers check the epoch, which does not change (the caller
    /// refuses). Returns whether it wrote (`false`: the key was stale).
    ///
    /// # Safety
    /// `columns` passed [`Schema::check_some`](crate::Schema::check_some) of these slots'
    /// schema for more than `item` items.
    pub(crate) unsafe fn write_back(
        &self,
        key: Key,
        columns: &[(usize, ColumnSlice<'_>)],
        item: usize,
    ) -> bool {
        assert!(!self.optimistic(), "a write back needs counted readers");
        let owns = self.faults.rewriter_owns_slot();
        let taken = match owns {
            true => self.own_if(key.index, |current| {
                match self.holds(key, SlotState(current)) {
                    true => Take::Now,
                    false => Take::Never,
                }
            }),
            // The broken twin (loom): a look, then the copy beside whoever reads.
            false => Some(self.word(key.index).load(Ordering::Acquire))
                .filter(|&w| self.holds(key, SlotState(w))),
        };
        let Some(word) = taken else {
            return false;
        };
        self.cells[key.index].with_mut(|_| {
            for (c, src) in columns {
                let raw = &self.columns[*c];
                let n = raw.row_bytes;
                // SAFETY: `src` holds more than `item` rows of `n` bytes of the column's
                // dtype (the caller's contract); the destination row lies inside the
                // column's allocation; we hold the slot's WRITER flag with no readers left,
                // so no other thread accesses these bytes; source and destination are
                // different allocations.
                unsafe {
                    crate::mem::copy_row_bytes(
                        src.as_bytes_ptr().add(item * n),
                        raw.base.add(key.index * n),
                        n,
                    )
                };
            }
        });
        // ORDERING: Release, as in `WriteGuard::publish`: a reader's Acquire join of this
        // epoch sees the bytes written above. The word held no flag but ours (`holds`).
        if owns {
            self.word(key.index).store(word & EPOCH, Ordering::Release);
        }
        true
    }
}
