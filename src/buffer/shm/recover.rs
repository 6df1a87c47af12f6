//! Recovery of dead participants (module doc of `shm`, "Participants"; docs/design.md, "One
//! buffer across processes").
//!
//! A participant is dead when its pid is still set in its entry and no open file
//! description holds its lease. A recoverer takes the lease itself (so no other process
//! recovers the same entry, and no new process takes the entry meanwhile), then:
//!
//! 1. Slot words that name it: a write in progress is published empty at its next epoch,
//!    its leaf zeroed (what a write that unwinds does); an update in progress is released.
//! 2. Its records: the generations of a confirmed record that are not published yet are
//!    written empty (the slot owned as a writer would, the evicted item's leaf zeroed).
//!    An intended record (the process died around its CAS of the cursor) is the dead
//!    process's only if the CAS happened: the cursor is past its start, no other entry
//!    confirms the same start, no live entry still intends it, and its first generation is
//!    neither written nor held. Then its generations are written empty too, except any that
//!    a live entry's confirmed record covers.
//! 3. The tree is climbed again from every leaf (`AtomicSumTree::rebuild`, the climb
//!    protocol on every node): the dead process may have stored leaves and died before its
//!    climb.
//!
//! A generation whose slot still waits for an older generation of another writer waits
//! (passes repeat); if the whole recovery cannot finish within [`RECOVERY_BUDGET`] the
//! entry is left as it is, lease released, for the next pass.

use std::time::Duration;

use crate::buffer::reservations::{
    Entry, CONFIRMED, INTENDED, MAX_PARTICIPANTS, SAVE_CONFIRMED, SAVE_INTENDED, STATE,
};
use crate::buffer::slot_buffer::{SlotBuffer, SAVING};
use crate::buffer::ConcurrentBuffer;
use crate::sync::{spin_wait, Ordering};
use crate::tree::AtomicSumTree;

/// How long one recovery may wait for live writers ahead of the dead one's generations.
const RECOVERY_BUDGET: Duration = Duration::from_millis(500);

/// How long a recoverer waits for a live entry that intends the same start as a dead one
/// (a few instructions, unless its process is descheduled).
const INTENT_WAIT: Duration = Duration::from_millis(20);

/// A bound on a recovery's waiting: real time, or under loom (which models no time) a few
/// attempts.
struct Budget {
    #[cfg(not(loom))]
    until: std::time::Instant,
    #[cfg(loom)]
    left: u32,
}

impl Budget {
    fn new(_time: Duration) -> Budget {
        Budget {
            #[cfg(not(loom))]
            until: std::time::Instant::now() + _time,
            #[cfg(loom)]
            left: 3,
        }
    }

    /// Whether the budget is spent (counting one more attempt under loom).
    fn spent(&mut self) -> bool {
        #[cfg(not(loom))]
        {
            std::time::Instant::now() > self.until
        }
        #[cfg(loom)]
        {
            self.left = self.left.saturating_sub(1);
            self.left == 0
        }
    }
}

/// A range of generations to write empty, and whether a live entry's confirmed record may
/// claim some of them (an intended record's range).
struct Pending {
    next: u64,
    end: u64,
    check_claims: bool,
}

/// Recovery over a buffer and its participants table: what a handle runs (`Inner`), and
/// what the loom models run directly.
pub(crate) struct Recoverer<'a> {
    pub(crate) buffer: &'a SlotBuffer<AtomicSumTree>,
    pub(crate) table: &'a [Entry],
}

impl Recoverer<'_> {
    /// Leave dead entry `j` free once recovered.
    #[cfg(loom)]
    pub(crate) fn clear_entry(&self, j: usize) {
        crate::buffer::reservations::clear_entry(self.table, j);
    }

    /// Steps 1-3 of the module doc for entries `dead` (whose leases we hold). Returns
    /// whether everything was recovered.
    pub(crate) fn recover_entries(&self, dead: &[usize]) -> bool {
        let buffer = &self.buffer;
        let slots = &buffer.slots;
        let tree = &buffer.tree;
        let owners: Vec<u64> = dead.iter().map(|&j| j as u64 + 1).collect();
        let mut burnt = 0u64;
        // 0. A save that a dead participant started: its flag, cleared.
        if !self.clear_dead_save(dead) {
            return false;
        }
        // 1. Slot words that name a dead participant. A slot held for writing is a write
        // (its generation in a confirmed record of the owner's: published at the next
        // epoch) or a clear (kept at its epoch).
        let capacity = slots.capacity() as u64;
        for s in 0..slots.capacity() {
            let seen = slots.state(s);
            let owner = seen.owner();
            let Some(at) = owners.iter().position(|&o| o == owner) else {
                continue;
            };
            let write =
                seen.writing() && self.confirms(dead[at], seen.epoch() * capacity + s as u64);
            if slots.release_dead(s, seen, write, || tree.store_leaf(s, 0.0)) && write {
                burnt += 1;
            }
        }
        // 2. The records.
        let mut pending = Vec::new();
        let mut complete = true;
        for &j in dead
            .iter()
            .filter(|_| slots.faults.recovery_reads_records())
        {
            for r in &self.table[j].records {
                // ORDERING: SeqCst, as every access to the table's entries.
                let start = r.start.load(Ordering::SeqCst);
                let n = r.n.load(Ordering::SeqCst);
                let first = start & !STATE;
                match start & STATE {
                    CONFIRMED => pending.push(Pending {
                        next: first,
                        end: first + n,
                        check_claims: false,
                    }),
                    INTENDED => match self.intent_won(j, first, dead, &owners) {
                        Some(true) => pending.push(Pending {
                            next: first,
                            end: first + n,
                            check_claims: true,
                        }),
                        Some(false) => {}
                        None => complete = false,
                    },
                    _ => {}
                }
            }
        }
        let mut budget = Budget::new(RECOVERY_BUDGET);
        let mut attempt = 0;
        while pending.iter().any(|p| p.next < p.end) {
            let mut progressed = false;
            for p in &mut pending {
                while p.next < p.end {
                    match self.write_empty(p.next, p.check_claims, dead, &owners) {
                        Some(wrote) => {
                            burnt += u64::from(wrote);
                            p.next += 1;
                            progressed = true;
                        }
                        // Waits for an older generation of the slot: next pass.
                        None => break,
                    }
                }
            }
            if budget.spent() {
                complete = false;
                break;
            }
            if !progressed {
                spin_wait(attempt);
                attempt = attempt.saturating_add(1);
            }
        }
        if burnt > 0 {
            // ORDERING: SeqCst, as `completed`, which a save reads with it.
            buffer.counters.burnt.fetch_add(burnt, Ordering::SeqCst);
        }
        // 3. Every leaf's last store followed by a climb.
        buffer.rebuild();
        complete
    }

    /// Write generation `g` empty if it still needs it (the slot at its epoch, free); `None`
    /// while the slot waits for an older generation (or a live update); `Some(false)` when
    /// nothing was to be done (written already, or another entry's).
    fn write_empty(
        &self,
        g: u64,
        check_claims: bool,
        dead: &[usize],
        owners: &[u64],
    ) -> Option<bool> {
        let slots = &self.buffer.slots;
        let tree = &self.buffer.tree;
        let (s, epoch) = slots.locate(g);
        let seen = slots.state(s);
        if seen.epoch() > epoch {
            return Some(false);
        }
        if seen.epoch() < epoch {
            return None;
        }
        if seen.writing() {
            // Another writer holds this epoch: not ours after all (an intended record), or a
            // dead one's that step 1 released meanwhile.
            return match owners.contains(&seen.owner()) {
                true => Some(slots.release_dead(s, seen, true, || tree.store_leaf(s, 0.0))),
                false => Some(false),
            };
        }
        if seen.updating() {
            if owners.contains(&seen.owner()) {
                slots.release_dead(s, seen, false, || {});
            }
            return None;
        }
        // ORDERING: SeqCst, with the saver's `fetch_or` and store of `saving_from`: a save
        // in progress copies every slot at or past its freeze as it is; recovery waits.
        let cursor = self.buffer.counters.cursor.load(Ordering::SeqCst);
        if cursor & SAVING != 0 && g >= self.buffer.counters.saving_from.load(Ordering::SeqCst) {
            return None;
        }
        if check_claims && self.claimed_by_other(g, dead) {
            return Some(false);
        }
        match slots.write_empty(s, seen, || tree.store_leaf(s, 0.0)) {
            true => Some(true),
            // The word changed under us: look again.
            false => None,
        }
    }

    /// Whether entry `j` confirms a record that covers generation `g`.
    fn confirms(&self, j: usize, g: u64) -> bool {
        self.table[j].records.iter().any(|r| {
            // ORDERING: SeqCst, as every access to the table's entries.
            let start = r.start.load(Ordering::SeqCst);
            let n = r.n.load(Ordering::SeqCst);
            let first = start & !STATE;
            start & STATE == CONFIRMED && first <= g && g < first + n
        })
    }

    /// Step 0: if a dead entry in `dead` recorded a save (intended or confirmed) and the
    /// cursor's SAVING flag is set with no live saver confirming it, clear it: only one save
    /// holds the flag at a time, so it was a dead one's. `false` while a live entry still
    /// intends a save past [`INTENT_WAIT`].
    fn clear_dead_save(&self, dead: &[usize]) -> bool {
        let saved = |j: usize| {
            self.table[j].records.iter().any(|r| {
                // ORDERING: SeqCst, as every access to the table's entries.
                let start = r.start.load(Ordering::SeqCst);
                start == SAVE_INTENDED || start == SAVE_CONFIRMED
            })
        };
        if !dead.iter().any(|&j| saved(j)) {
            return true;
        }
        let mut budget = Budget::new(INTENT_WAIT);
        let mut attempt = 0;
        loop {
            let mut live_intent = false;
            for k in (0..MAX_PARTICIPANTS).filter(|k| !dead.contains(k)) {
                for r in &self.table[k].records {
                    // ORDERING: SeqCst, as above.
                    match r.start.load(Ordering::SeqCst) {
                        SAVE_CONFIRMED => return true,
                        SAVE_INTENDED => live_intent = true,
                        _ => {}
                    }
                }
            }
            if !live_intent {
                // ORDERING: SeqCst, as the flag's setting and clearing (`save.rs`).
                self.buffer
                    .counters
                    .cursor
                    .fetch_and(!SAVING, Ordering::SeqCst);
                return true;
            }
            if budget.spent() {
                return false;
            }
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
    }

    /// Whether an entry other than `dead`'s confirms a record that covers generation `g`.
    fn claimed_by_other(&self, g: u64, dead: &[usize]) -> bool {
        (0..MAX_PARTICIPANTS)
            .filter(|k| !dead.contains(k))
            .any(|k| {
                self.table[k].records.iter().any(|r| {
                    // ORDERING: SeqCst, as every access to the table's entries.
                    let start = r.start.load(Ordering::SeqCst);
                    let n = r.n.load(Ordering::SeqCst);
                    let first = start & !STATE;
                    start & STATE == CONFIRMED && first <= g && g < first + n
                })
            })
    }

    /// Whether dead entry `j`'s record intending start `first` took its generations:
    /// `None` while a live entry still intends the same start past [`INTENT_WAIT`].
    fn intent_won(&self, j: usize, first: u64, dead: &[usize], owners: &[u64]) -> Option<bool> {
        let counters = &self.buffer.counters;
        let mut budget = Budget::new(INTENT_WAIT);
        let mut attempt = 0;
        loop {
            // ORDERING: SeqCst, with the writers' SeqCst record stores and cursor CAS.
            let cursor = counters.cursor.load(Ordering::SeqCst) & !SAVING;
            if cursor <= first {
                return Some(false);
            }
            let mut live_intent = false;
            for k in (0..MAX_PARTICIPANTS).filter(|&k| k != j) {
                for r in &self.table[k].records {
                    // ORDERING: SeqCst, as above.
                    let start = r.start.load(Ordering::SeqCst);
                    if start & !STATE != first {
                        continue;
                    }
                    match start & STATE {
                        CONFIRMED => return Some(false),
                        INTENDED if !dead.contains(&k) => live_intent = true,
                        _ => {}
                    }
                }
            }
            let (s, epoch) = self.buffer.slots.locate(first);
            let seen = self.buffer.slots.state(s);
            if seen.epoch() > epoch || (seen.writing() && !owners.contains(&seen.owner())) {
                return Some(false);
            }
            if !live_intent {
                return Some(true);
            }
            if budget.spent() {
                return None;
            }
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
    }
}
