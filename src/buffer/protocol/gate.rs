//! The update/save gate: priority updates (and clears) enter through a count, and back out
//! while a save holds its flag; a save sets the flag and waits for the count to drain. Both
//! sides use read-modify-writes only: an update increments `updating`, then reads the flag
//! word with a `fetch_add(0)`; the saver sets the flag with a `fetch_or`, then reads
//! `updating` with a `fetch_add(0)`. Either the update's read of the flag word comes first
//! in that word's modification order (the saver's `fetch_or` reads from it, acquiring the
//! increment, and its read of `updating` sees the update) or the update sees the flag. The
//! argument uses modification orders alone, which loom checks exactly.
//!
//! The flat buffers' flag is the `SAVING` bit of their cursor (a save also freezes
//! inserts); the sequence buffer's is a word of its own. A flat buffer in a shared mapping
//! enters through a reservation record instead of the count (`save.rs`).

use crate::sync::{spin_wait, AtomicU64, Ordering};

/// A gate over a flag bit and a count of updates in flight.
#[derive(Clone, Copy)]
pub(crate) struct UpdateGate<'a> {
    /// The word that holds a save's flag.
    pub(crate) flag: &'a AtomicU64,
    /// The flag's bit in it.
    pub(crate) bit: u64,
    /// Updates in flight.
    pub(crate) updating: &'a AtomicU64,
}

impl UpdateGate<'_> {
    /// Enter an update once no save holds the flag: counted in `updating` on return; the
    /// caller leaves with [`UpdateGate::leave`].
    pub(crate) fn enter(self) {
        loop {
            // ORDERING: SeqCst read-modify-writes on both sides (module doc).
            self.updating.fetch_add(1, Ordering::SeqCst);
            // ORDERING: SeqCst, a read that is a read-modify-write (module doc).
            if self.flag.fetch_add(0, Ordering::SeqCst) & self.bit == 0 {
                return;
            }
            // ORDERING: SeqCst, see above.
            self.updating.fetch_sub(1, Ordering::SeqCst);
            self.wait_while_flagged();
        }
    }

    /// Leave an update.
    pub(crate) fn leave(self) {
        // ORDERING: Release pairs with the saver's SeqCst read of `updating`: the update's
        // writes happen before the save's copy.
        self.updating.fetch_sub(1, Ordering::Release);
    }

    /// Wait while a save holds the flag.
    pub(crate) fn wait_while_flagged(self) {
        let mut attempt = 0;
        // ORDERING: Acquire pairs with the saver's Release clear of the flag (nothing is
        // read through it; the protocol orders the data).
        while self.flag.load(Ordering::Acquire) & self.bit != 0 {
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
    }

    /// Whether no update is in flight, read after the saver set its flag (module doc).
    pub(crate) fn drained(self) -> bool {
        // ORDERING: SeqCst, a read-modify-write (module doc): it reads the latest count.
        self.updating.fetch_add(0, Ordering::SeqCst) == 0
    }
}
