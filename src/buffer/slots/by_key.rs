//! The slot operations by key beside the FIFO writes: deleting an item (`remove`, and the
//! count of removed items a buffer's length subtracts), rewriting its rows in place
//! (`write_back`) and retiring it by its policy version (`retire_below`), each taking the
//! slot as a writer would.

use super::{ReadMode, SlotState, Slots, Take, WriteGuard, EMPTY, EPOCH, REMOVED, UPDATER, WRITER};
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

    /// The policy version in slot `slot`'s row of column `column` (an i64 column of one
    /// element).
    ///
    /// # Safety
    /// The caller owns the slot (no writer can be at work on its bytes) and `column` is an
    /// i64 column of one element.
    unsafe fn version_at(&self, slot: usize, column: usize) -> i64 {
        let raw = &self.columns[column];
        debug_assert_eq!(raw.row_bytes, 8);
        self.cells[slot].with(|_| {
            // SAFETY: the row lies inside the column's allocation; the caller owns the slot,
            // so no thread writes these bytes now (readers only read them).
            unsafe { (raw.base.add(slot * 8) as *const i64).read_unaligned() }
        })
    }

    /// Take slot `slot` as a writer would (after the write in flight, and in optimistic
    /// mode after an updater's hold; empty slots too), and if it holds an item whose
    /// version (column `column`) is below `floor`, retire it as [`Slots::remove`] does:
    /// `zero_leaf`, counted removed, left EMPTY and REMOVED at the same epoch. Otherwise the
    /// slot is released as it was. Returns whether it retired an item.
    ///
    /// Taking every slot, empty ones included, is what makes the floor exact against
    /// writers in flight: a writer that takes the slot after this call released it saw the
    /// release (its Acquire CAS reads this Release store), so it sees the floor the caller
    /// raised before, and retires its own item at publication (`WriteGuard::publish_retired`);
    /// a writer that took it before is waited for, and its item is looked at here.
    ///
    /// # Safety
    /// `column` is an i64 column of one element of these slots' schema.
    pub(crate) unsafe fn retire_below(
        &self,
        slot: usize,
        column: usize,
        floor: i64,
        zero_leaf: impl FnOnce(),
    ) -> bool {
        let held = match self.mode {
            ReadMode::Counted => WRITER,
            ReadMode::Optimistic { .. } => WRITER | UPDATER,
        };
        let word = self
            .own_if(slot, |current| match current & held {
                0 => Take::Now,
                _ => Take::Wait,
            })
            .expect("an owner that never gives up takes the slot");
        let kept = word & (EPOCH | EMPTY | REMOVED);
        // SAFETY: the slot is ours; `column` is as the caller says.
        let stale = self.generation(slot, SlotState(word)).is_some()
            && unsafe { self.version_at(slot, column) } < floor;
        if !stale {
            // ORDERING: Release: a writer's Acquire CAS that reads this store sees
            // everything before it (the caller's raise of the floor included).
            self.word(slot).store(kept, Ordering::Release);
            return false;
        }
        zero_leaf();
        // ORDERING: Relaxed: a count, as in `remove`.
        self.removed.0.fetch_add(1, Ordering::Relaxed);
        // ORDERING: Release, as in `remove`.
        self.word(slot)
            .store((word & EPOCH) | EMPTY | REMOVED, Ordering::Release);
        true
    }
}

impl WriteGuard<'_> {
    /// Publish the slot as holding an item retired at once (its policy version is below the
    /// buffer's floor, found while the slot was owned): EMPTY and REMOVED at the new epoch,
    /// counted removed, so no key of it is current and the next writer goes on. The caller
    /// set its leaf to 0.
    pub(crate) fn publish_retired(self) {
        // ORDERING: Relaxed: a count, made while the slot is ours (as in `remove`).
        self.slots.removed.0.fetch_add(1, Ordering::Relaxed);
        // ORDERING: Release, as in `publish`.
        self.slots
            .word(self.slot)
            .store((self.epoch + 1) | EMPTY | REMOVED, Ordering::Release);
        self.slots.forget_removed(self.replaces);
        std::mem::forget(self);
    }
}
