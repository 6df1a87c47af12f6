//! The read side of the slot protocol: a read reference ([`ReadGuard`]) and the row copies
//! made under it, counted or optimistic.

use super::*;

/// A read reference to one slot: in counted mode the slot's bytes stay put until it is
/// dropped; in optimistic mode the copy made under it is kept only if the slot's word still
/// shows its epoch afterwards (`Slots::copy_rows`).
pub(crate) struct ReadGuard<'a> {
    pub(super) slots: &'a Slots,
    pub(super) slot: usize,
    pub(super) joined: Joined,
}

/// What a [`ReadGuard`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Joined {
    /// Nothing (a loom twin's reader that skips its join).
    No,
    /// One of the slot's counted readers.
    Reader,
    /// The slot alone, for an update (optimistic mode).
    Updater,
    /// Nothing: a copy to check against `epoch` (optimistic mode).
    Optimistic { epoch: u64 },
}

impl ReadGuard<'_> {
    /// Whether what was copied under this guard may be kept: always for a counted reader
    /// (no writer could start); for an optimistic one, whether the slot still shows the
    /// epoch it was joined in, checked after an Acquire fence (a sequence lock's re-check:
    /// a copy that saw any store of a writer that took the slot since sees its flag here).
    pub(crate) fn still_current(&self) -> bool {
        let Joined::Optimistic { epoch } = self.joined else {
            return true;
        };
        // ORDERING: Acquire fence: pairs with a writer's Release fence after its flag
        // (`own`), as in `rows_still_current`.
        crate::sync::fence(Ordering::Acquire);
        // ORDERING: Relaxed, after the fence above.
        let now = self.slots.word(self.slot).load(Ordering::Relaxed);
        now & (WRITER | EMPTY | EPOCH) == epoch
    }
}

impl Slots {
    /// Copy the items of the slots `held` references into rows `first..first + held.len()`
    /// of each of `out`'s columns (already sized or checked for them; none when `out` has no
    /// columns), row by row, every line of a row prefetched `PREFETCH_AHEAD` rows ahead.
    ///
    /// A sampler joins a run of slots, copies their rows, then leaves them
    /// (`sample_in_spare`), rather than join, copy and leave one slot after another: a join
    /// or a leave is a locked instruction, which on x86-64 waits until the stores before it,
    /// the previous row's copy, have drained (docs/performance.md, "Measurements behind
    /// design choices").
    ///
    /// Returns how many of the rows, from the first, are good: all of them in counted mode;
    /// in optimistic mode those before the first slot whose word changed during the copy
    /// (its row, and the ones after it, are to be drawn again).
    ///
    /// # Safety
    /// `out` has no columns, or one per schema column, each of the column's dtype with room
    /// for at least `first + held.len()` rows; every guard in `held` belongs to `self`.
    pub(crate) unsafe fn copy_rows<D: ColumnRows + ?Sized>(
        &self,
        held: &[Option<ReadGuard<'_>>],
        out: &mut D,
        first: usize,
    ) -> usize {
        if let ReadMode::Optimistic { .. } = self.mode {
            // A sequence lock's reader: copy with atomic loads, then keep the rows whose
            // slots still show the epoch they were drawn in.
            #[cfg(not(loom))]
            {
                // SAFETY: the destination as the caller's contract says; the source row lies
                // inside the column, whose bytes every thread and process accesses in
                // optimistic mode only through the atomic copies; a row torn by a writer is
                // thrown away by `rows_still_current`.
                unsafe {
                    self.copy_held(held, out, first, false, crate::mem::copy_row_from_atomic)
                };
                return self.rows_still_current(held);
            }
            // Under loom threads take turns (loom switches only at its own operations), so a
            // writer's bytes are never read halfway: the tokens model the sequence lock.
            #[cfg(loom)]
            {
                // SAFETY: as in the counted copy below.
                unsafe { self.copy_held(held, out, first, false, crate::mem::copy_row_bytes) };
                return self.copy_tokens_optimistic(held);
            }
        }
        // SAFETY: column `c` of `out` has room for at least `first + held.len()` rows of `n`
        // bytes of the column's dtype (the caller's contract), so any bytes copied are a
        // valid value: they were written from a value of that type; the source row lies
        // inside the column's allocation; we hold a read reference on each slot, so no writer
        // touches it; `out` is the caller's memory, not ours.
        unsafe { self.copy_held(held, out, first, true, crate::mem::copy_row_bytes) };
        held.len()
    }

    /// Copy the row of each slot `held` references into rows `first..` of `out`'s columns
    /// with `copy`, each row's lines prefetched `PREFETCH_AHEAD` rows ahead; `tracked`: the
    /// copy is a counted reader's (loom checks it against the slot's writers).
    ///
    /// # Safety
    /// As [`Slots::copy_rows`]; `copy` may read the slots' bytes as the slots' mode allows.
    #[inline(always)]
    unsafe fn copy_held<D: ColumnRows + ?Sized>(
        &self,
        held: &[Option<ReadGuard<'_>>],
        out: &mut D,
        first: usize,
        tracked: bool,
        copy: unsafe fn(*const u8, *mut u8, usize),
    ) {
        for (r, guard) in held.iter().enumerate() {
            if let Some(Some(ahead)) = held.get(r + crate::mem::PREFETCH_AHEAD) {
                self.prefetch_row(ahead.slot);
            }
            let Some(guard) = guard else { continue };
            debug_assert!(std::ptr::eq(guard.slots, self));
            let mut row = || {
                for (c, raw) in self.columns.iter().enumerate().take(out.width()) {
                    let n = raw.row_bytes;
                    // SAFETY: the caller's contract: `out`'s column `c` has room for row
                    // `first + r`, the slot's row lies inside the column, and `copy` may read
                    // it in this mode.
                    unsafe {
                        copy(
                            raw.base.add(guard.slot * n),
                            out.column_base(c).add((first + r) * n),
                            n,
                        )
                    };
                }
            };
            if tracked {
                self.cells[guard.slot].with(|_| row());
            } else {
                row();
            }
        }
    }

    /// Under loom, the optimistic check on the rows' stand-ins: load each token, fence,
    /// check the words; a row kept whose token is not its epoch's was torn.
    #[cfg(loom)]
    fn copy_tokens_optimistic(&self, held: &[Option<ReadGuard<'_>>]) -> usize {
        let mut tokens = [0u64; 64];
        for (t, guard) in tokens.iter_mut().zip(held) {
            if let Some(g) = guard {
                // ORDERING: Relaxed, as a sequence lock's data loads.
                *t = self.tokens[g.slot].load(Ordering::Relaxed);
            }
        }
        // `rows_still_current` fences (Acquire) before its checks.
        let kept = self.rows_still_current(held);
        for (r, guard) in held.iter().enumerate().take(kept) {
            if let Some(ReadGuard {
                joined: Joined::Optimistic { epoch },
                slot,
                ..
            }) = guard
            {
                assert_eq!(
                    tokens[r], *epoch,
                    "torn: an optimistic copy of slot {slot} kept a row its writer had not finished"
                );
            }
        }
        kept
    }

    /// How many of the optimistic copies of `held`, from the first, may be kept: those
    /// before the first slot whose word no longer shows the epoch it was joined in.
    fn rows_still_current(&self, held: &[Option<ReadGuard<'_>>]) -> usize {
        // ORDERING: Acquire fence: pairs with a writer's Release fence after its flag, so a
        // load in the copy that saw one of its stores makes the flag (or a later word)
        // visible to the re-check below.
        crate::sync::fence(Ordering::Acquire);
        for (r, guard) in held.iter().enumerate() {
            let Some(guard) = guard else { continue };
            let Joined::Optimistic { epoch } = guard.joined else {
                continue;
            };
            // ORDERING: Relaxed, after the fence above.
            let now = self.word(guard.slot).load(Ordering::Relaxed);
            if now & (WRITER | EMPTY | EPOCH) != epoch {
                return r;
            }
        }
        held.len()
    }

    /// Ask for every line of slot `slot`'s row in every column (a hint: nothing is read
    /// into the program, any slot is fine).
    #[inline]
    fn prefetch_row(&self, slot: usize) {
        for raw in &self.columns {
            crate::mem::prefetch_bytes(
                raw.base.wrapping_add(slot.wrapping_mul(raw.row_bytes)),
                raw.row_bytes,
            );
        }
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        if crate::faults::dying() {
            // A modeled death (loom): a killed process runs no destructor.
            return;
        }
        match self.joined {
            Joined::Reader => {
                let order = self.slots.faults.reader_exit_order();
                // ORDERING: Release pairs with the writer's Acquire wait for zero readers: our
                // copy happens before its writes.
                self.slots.word(self.slot).fetch_sub(READER, order);
            }
            Joined::Updater => {
                // ORDERING: Release pairs with the next holder's Acquire CAS: our leaf store
                // happens before its accesses.
                self.slots
                    .word(self.slot)
                    .fetch_and(!(UPDATER | OWNER), Ordering::Release);
            }
            Joined::No | Joined::Optimistic { .. } => {}
        }
    }
}
