//! Consume after k draws (Reverb's `max_times_sampled`): one count per slot of the draws of
//! the item in it, so that an item is retired once exactly `k` of its draws reached callers,
//! however many samplers draw at once, and no draw goes past `k`.
//!
//! The count word of a slot holds the epoch of the item it counts (bits 18..64: a slot's
//! epochs fit in 46 bits), its draws delivered (`n`, bits 9..18) and its draws reserved by
//! calls in flight (`r`, bits 0..9). A sampler reserves a draw while it holds the item as
//! the slot protocol says (a read reference, or an optimistic copy checked current), with a
//! CAS that starts from 0 for a newer epoch than the word's, refuses for an older one (the
//! item it holds was overwritten since) and refuses once `n + r` is `k` (drawn again
//! elsewhere). When its call succeeds it commits each reservation (`n + 1`, `r - 1`), and
//! the commit that makes `n` equal `k` retires the item; when the call fails it gives its
//! reservations back (`r - 1`), so a failed call consumes nothing. Writers never touch the
//! counts, and a count never carries over to the next item of its slot.

use crate::error::Result;
use crate::region::{Region, RegionBuf};
use crate::sync::{AtomicU64, Ordering};

/// The most draws an item may be given before it is deleted.
pub const MAX_TIMES_SAMPLED: u32 = (1 << PART_BITS) - 1;

/// Bits of each of the two counts (delivered, reserved).
const PART_BITS: u32 = 9;
const PART: u64 = (1 << PART_BITS) - 1;
/// Where the epoch starts.
const EPOCH_SHIFT: u32 = 2 * PART_BITS;

/// One slot's count word.
#[repr(transparent)]
pub(crate) struct CountWord(AtomicU64);

// SAFETY: atomics only.
unsafe impl crate::region::Shareable for CountWord {}

/// What reserving one draw says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    /// Reserved: keep the row; commit or give back when the call ends.
    Kept,
    /// The item had its `k` draws delivered or reserved already (or was overwritten): draw
    /// again.
    Spent,
}

/// The draw counts of a buffer whose configuration has `max_times_sampled`.
pub(crate) struct DrawCounts {
    words: RegionBuf<CountWord>,
    k: u64,
    /// The loom twin that reserves with a load and a store.
    faults: crate::faults::Faults,
}

impl std::fmt::Debug for DrawCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrawCounts")
            .field("k", &self.k)
            .finish_non_exhaustive()
    }
}

impl DrawCounts {
    /// Counts for `capacity` slots from `region`, when `k` (the configuration's
    /// `max_times_sampled`) is set; none otherwise (and nothing allocated).
    pub(crate) fn in_region(
        k: Option<u32>,
        capacity: usize,
        region: &mut Region,
    ) -> Result<Option<DrawCounts>> {
        let Some(k) = k else { return Ok(None) };
        let words = region.alloc(capacity, 128, || CountWord(AtomicU64::new(0)))?;
        Ok(Some(DrawCounts {
            words,
            k: u64::from(k),
            faults: crate::faults::Faults::none(),
        }))
    }

    /// Plant the loom twin's fault.
    #[cfg(loom)]
    pub(crate) fn inject_faults(&mut self, faults: &crate::faults::Faults) {
        self.faults = *faults;
    }

    /// Reserve a draw of the item of epoch `epoch` in `slot`, which the caller holds.
    pub(crate) fn reserve(&self, slot: usize, epoch: u64) -> Counted {
        let word = &self.words[slot].0;
        // ORDERING: Relaxed throughout: the counts carry no data (the rows are the slot
        // protocol's); exactly-once rests on the CAS's atomicity alone.
        let mut current = word.load(Ordering::Relaxed);
        loop {
            let (n, r) = match (current >> EPOCH_SHIFT).cmp(&epoch) {
                std::cmp::Ordering::Less => (0, 0),
                std::cmp::Ordering::Equal => ((current >> PART_BITS) & PART, current & PART),
                std::cmp::Ordering::Greater => return Counted::Spent,
            };
            if n + r >= self.k {
                return Counted::Spent;
            }
            let next = (epoch << EPOCH_SHIFT) | (n << PART_BITS) | (r + 1);
            if !self.faults.consume_counts_by_cas() {
                // The broken twin (loom): a load, then a blind store.
                word.store(next, Ordering::Relaxed);
                return Counted::Kept;
            }
            match word.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Counted::Kept,
                Err(seen) => current = seen,
            }
        }
    }

    /// The draws of the item of epoch `epoch` in `slot` that reached callers (0 when the
    /// word counts another item): what a checkpoint keeps. Draws reserved by calls still in
    /// flight are not counted.
    pub(crate) fn delivered(&self, slot: usize, epoch: u64) -> u16 {
        // ORDERING: Relaxed, as in `reserve`.
        let word = self.words[slot].0.load(Ordering::Relaxed);
        match word >> EPOCH_SHIFT == epoch {
            true => ((word >> PART_BITS) & PART) as u16,
            false => 0,
        }
    }

    /// Set the count of the item of epoch `epoch` in `slot` to `delivered` draws, none in
    /// flight (a restore, on a buffer no other thread uses yet; `delivered < k`).
    pub(crate) fn restore(&self, slot: usize, epoch: u64, delivered: u16) {
        debug_assert!(u64::from(delivered) < self.k);
        let word = (epoch << EPOCH_SHIFT) | (u64::from(delivered) << PART_BITS);
        // ORDERING: Relaxed: a buffer no one shares yet.
        self.words[slot].0.store(word, Ordering::Relaxed);
    }

    /// Commit a draw reserved for the item of epoch `epoch` in `slot` (its call succeeded):
    /// returns whether this draw was the item's `k`-th delivered, whose caller retires it.
    pub(crate) fn commit(&self, slot: usize, epoch: u64) -> bool {
        let word = &self.words[slot].0;
        // ORDERING: Relaxed, as in `reserve`.
        let mut current = word.load(Ordering::Relaxed);
        loop {
            if current >> EPOCH_SHIFT != epoch || current & PART == 0 {
                // The slot holds a newer item, whose count this is not.
                return false;
            }
            let n = ((current >> PART_BITS) & PART) + 1;
            let next = (epoch << EPOCH_SHIFT) | (n << PART_BITS) | ((current & PART) - 1);
            match word.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return n == self.k,
                Err(seen) => current = seen,
            }
        }
    }

    /// Give back a draw reserved for the item of epoch `epoch` in `slot` (its call failed:
    /// nothing of it reaches the caller).
    pub(crate) fn give_back(&self, slot: usize, epoch: u64) {
        let word = &self.words[slot].0;
        // ORDERING: Relaxed, as in `reserve`.
        let mut current = word.load(Ordering::Relaxed);
        while current >> EPOCH_SHIFT == epoch && current & PART > 0 {
            match word.compare_exchange_weak(
                current,
                current - 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }
}
