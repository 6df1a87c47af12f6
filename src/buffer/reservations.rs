//! Reservation records: one entry per participant of a buffer (a process attached to it),
//! each with the records of the generations its writers have reserved and not yet written,
//! so that a survivor can tell what a dead participant may have taken (module doc of `shm`,
//! "Reservations").
//!
//! A record is two words: `n` (generations) and `start` (the first generation, with its
//! state in the top bits: intended before the cursor's CAS, confirmed after it). A writer
//! stores `n`, then the intended start, CASes the cursor, then confirms: so whatever
//! instruction a process dies at, a survivor can tell which generations it may have taken
//! (`recover.rs` decides the intended-only case).

// The shared buffer itself is not built under loom (no mapping there): only the record
// protocol is, which the writer's path names.
#![cfg_attr(loom, allow(dead_code))]

use crate::faults::Point;
use crate::sync::{spin_wait, AtomicU64, Ordering};

/// Participants one mapping can hold (each owner number, `index + 1`, fits the slot word's
/// owner field: `slots::MAX_OWNER`).
#[cfg(not(loom))]
pub(crate) const MAX_PARTICIPANTS: usize = 256;
/// Loom models few participants (every entry is scanned by recovery).
#[cfg(loom)]
pub(crate) const MAX_PARTICIPANTS: usize = 3;

/// Reservations one participant can have in flight at once (one per inserting thread).
#[cfg(not(loom))]
pub(crate) const RECORDS: usize = 16;
#[cfg(loom)]
pub(crate) const RECORDS: usize = 2;

/// A record's state, in the top bits of `start`.
pub(crate) const INTENDED: u64 = 1 << 62;
/// The cursor's CAS succeeded: the generations are the record's.
pub(crate) const CONFIRMED: u64 = 2 << 62;
/// The state bits.
pub(crate) const STATE: u64 = 3 << 62;
/// A record that holds no generations: an update or a clear in flight (what a save waits
/// for; module doc of `slot_buffer`, "Save").
pub(crate) const UPDATING: u64 = STATE | 1;
/// A save about to set the cursor's SAVING flag.
pub(crate) const SAVE_INTENDED: u64 = STATE | 2;
/// A save that set the flag: it clears it when its copy is done.
pub(crate) const SAVE_CONFIRMED: u64 = STATE | 3;

/// One reservation: see the module doc.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Record {
    pub(crate) n: AtomicU64,
    pub(crate) start: AtomicU64,
}

/// One participant's entry in the table.
#[derive(Debug)]
#[repr(C, align(128))]
pub(crate) struct Entry {
    /// The process id of the holder (0: free); for [`ShmBuffer::participants`] and messages
    /// only: liveness is the kernel's lease, never this number.
    ///
    /// [`ShmBuffer::participants`]: super::ShmBuffer::participants
    pub(crate) pid: AtomicU64,
    pub(crate) records: [Record; RECORDS],
}

// SAFETY: atomics only.
unsafe impl crate::region::Shareable for Entry {}

impl Entry {
    pub(crate) fn empty() -> Entry {
        Entry {
            pid: AtomicU64::new(0),
            records: std::array::from_fn(|_| Record {
                n: AtomicU64::new(0),
                start: AtomicU64::new(0),
            }),
        }
    }
}

/// Leave entry `j` of `table` free (a participant recovered or gone): its records
/// cleared, then its pid.
pub(crate) fn clear_entry(table: &[Entry], j: usize) {
    for r in &table[j].records {
        // ORDERING: SeqCst, as every access to the table's entries.
        r.start.store(0, Ordering::SeqCst);
        r.n.store(0, Ordering::SeqCst);
    }
    table[j].pid.store(0, Ordering::SeqCst);
}

/// A participant's handle on its own entry: hands its records to the inserting threads.
#[derive(Debug)]
pub(crate) struct Journal {
    table: std::sync::Arc<crate::region::RegionBuf<Entry>>,
    me: usize,
    /// Records not in use by a thread of ours (bit `r`: record `r` free). Process-local.
    free: AtomicU64,
}

impl Journal {
    pub(crate) fn new(
        table: std::sync::Arc<crate::region::RegionBuf<Entry>>,
        me: usize,
    ) -> Journal {
        Journal {
            table,
            me,
            free: AtomicU64::new((1u64 << RECORDS) - 1),
        }
    }

    /// Test hook: stop here if `pause_at` (feature `kill-points`) asked for `point` (nothing
    /// without the feature).
    #[inline]
    pub(crate) fn point(&self, point: Point) {
        crate::faults::point(point);
    }

    /// Whether any entry has an update or a clear in flight (a dead one's is cleared by its
    /// recovery).
    pub(crate) fn any_updating(&self) -> bool {
        self.table.iter().any(|e| {
            e.records
                .iter()
                // ORDERING: SeqCst: the saver's side of the handshake in `enter_update`.
                .any(|r| r.start.load(Ordering::SeqCst) == UPDATING)
        })
    }

    /// Our entry: the handle's, or under loom the participant a model made this thread.
    fn me_now(&self) -> usize {
        #[cfg(loom)]
        if let Some(p) = crate::faults::participant() {
            return p as usize;
        }
        self.me
    }

    /// A record for one insert call, held until it is dropped (its generations written).
    pub(crate) fn claim(&self) -> RecordGuard<'_> {
        let mut attempt = 0;
        loop {
            // ORDERING: Relaxed: the bitmap only shares out records among our threads; the
            // record's own words carry what survivors read.
            let free = self.free.load(Ordering::Relaxed);
            if free == 0 {
                // More inserting threads than records: wait for one to finish.
                spin_wait(attempt);
                attempt = attempt.saturating_add(1);
                continue;
            }
            let r = free.trailing_zeros() as usize;
            // ORDERING: Acquire pairs with the previous holder's Release return of the bit.
            if self
                .free
                .compare_exchange_weak(free, free & !(1 << r), Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return RecordGuard {
                    journal: self,
                    record: &self.table[self.me_now()].records[r],
                    bit: 1 << r,
                };
            }
        }
    }
}

/// One of our records, held by one insert call.
pub(crate) struct RecordGuard<'a> {
    journal: &'a Journal,
    record: &'a Record,
    bit: u64,
}

impl RecordGuard<'_> {
    /// About to CAS the cursor from `first` for `n` generations.
    pub(crate) fn intend(&self, first: u64, n: u64) {
        // ORDERING: SeqCst, with the cursor's SeqCst CAS and the survivors' SeqCst loads:
        // a record read after a CAS that it intended shows at least the intent.
        self.record.n.store(n, Ordering::SeqCst);
        self.record.start.store(first | INTENDED, Ordering::SeqCst);
    }

    /// Mark the record `word` (0, [`UPDATING`], [`SAVE_INTENDED`], [`SAVE_CONFIRMED`]).
    pub(crate) fn mark(&self, word: u64) {
        // ORDERING: SeqCst: one side of a store-then-load handshake with a saver (an update)
        // or with recoverers (a save).
        self.record.start.store(word, Ordering::SeqCst);
    }

    /// The cursor's CAS from `first` succeeded.
    pub(crate) fn confirm(&self, first: u64) {
        // ORDERING: SeqCst, as in `intend`.
        self.record.start.store(first | CONFIRMED, Ordering::SeqCst);
    }
}

impl Drop for RecordGuard<'_> {
    fn drop(&mut self) {
        if crate::faults::dying() {
            // A modeled death (loom): a killed process runs no destructor.
            return;
        }
        // The reservation is written (or none was taken).
        // ORDERING: Release: the writes of the slots happen before a survivor sees the
        // record empty; the slot words say the rest.
        self.record.start.store(0, Ordering::Release);
        // ORDERING: Release pairs with the next claimer's Acquire.
        self.journal.free.fetch_or(self.bit, Ordering::Release);
    }
}
