//! The save pause (module doc of `slot_buffer`, "Save"): the cursor frozen, updates
//! drained, the copy; and the buffer restored from a checkpoint.

use super::super::{ConcurrentBuffer, Config};
use super::*;
use crate::buffer::protocol::UpdateGate;
use crate::buffer::reservations::{RecordGuard, SAVE_CONFIRMED, SAVE_INTENDED, UPDATING};
use crate::checkpoint::{Plan, Snapshot, State, UserData, NO_ITEM};
use crate::error::Result;
use crate::sync::{spin_wait, AtomicU64, Ordering};

/// A priority update or clear in flight (module doc, "Save"); dropping it leaves. In a
/// shared mapping it is a record of ours marked UPDATING rather than a count, so that a
/// process that dies inside leaves nothing a save would wait for once it is recovered.
pub(super) struct Updating<'a, T>(&'a SlotBuffer<T>, Option<RecordGuard<'a>>);

impl<T> Drop for Updating<'_, T> {
    fn drop(&mut self) {
        if crate::faults::dying() {
            // A modeled death (loom): a killed process runs no destructor.
            return;
        }
        if self.1.is_some() {
            // The record's drop leaves (a Release store, which a saver's SeqCst load pairs
            // with, as with the count below).
            return;
        }
        self.0.gate().leave();
    }
}

/// Clears the cursor's `SAVING` flag when a save's copy ends, on every path (then the
/// save's record, in a shared mapping, when it is dropped after this).
pub(super) struct Resume<'a>(&'a AtomicU64);

/// A pause ([`SlotBuffer::pause`]): the cursor frozen at `frozen` until it is dropped. The
/// fields drop in order: the flag cleared, then the record of a shared mapping's save.
pub(super) struct Paused<'a> {
    pub(super) frozen: u64,
    _resume: Resume<'a>,
    _record: Option<RecordGuard<'a>>,
}

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        if crate::faults::dying() {
            // A modeled death (loom): a killed process runs no destructor.
            return;
        }
        // ORDERING: SeqCst, as the flag's setting; Release for the writers' Acquire wait.
        self.0.fetch_and(!SAVING, Ordering::SeqCst);
    }
}

impl<T> SlotBuffer<T> {
    /// The update/save gate: the cursor's `SAVING` bit over the count of updates.
    pub(super) fn gate(&self) -> UpdateGate<'_> {
        UpdateGate {
            flag: &self.counters.cursor,
            bit: SAVING,
            updating: &self.counters.updating,
        }
    }
}

impl<T: SharedTree> SlotBuffer<T> {
    /// Wait while a save holds the cursor frozen.
    pub(super) fn wait_for_save(&self) {
        self.gate().wait_while_flagged();
    }

    /// Wait while a save that froze the cursor at or before `first` copies. A later save
    /// (frozen past `first`) waits for this write instead, so the writer goes on: waiting
    /// for that one too would deadlock the two.
    pub(super) fn wait_to_write(&self, first: u64) {
        let mut attempt = 0;
        loop {
            // ORDERING: SeqCst, with the saver's SeqCst `fetch_or` and store of
            // `saving_from`: a flag seen set with `saving_from <= first` is this writer's
            // save or an older one's value that the current save has not replaced yet
            // (values only grow), and the writer waits for either to move.
            if self.counters.cursor.load(Ordering::SeqCst) & SAVING == 0
                || self.counters.saving_from.load(Ordering::SeqCst) > first
            {
                return;
            }
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
    }

    /// Enter a priority update or a clear: counted in `updating` (in a shared mapping: a
    /// record marked UPDATING) once no save is copying.
    pub(super) fn enter_update(&self) -> Updating<'_, T> {
        if let Some(journal) = &self.journal {
            let record = journal.claim();
            loop {
                // The same handshake as the count's below: our SeqCst store, then a SeqCst
                // read-modify-write of the cursor; the saver's `fetch_or`, then its SeqCst
                // loads of every record (`Journal::any_updating`).
                record.mark(UPDATING);
                // ORDERING: SeqCst, see above.
                if self.counters.cursor.fetch_add(0, Ordering::SeqCst) & SAVING == 0 {
                    return Updating(self, Some(record));
                }
                record.mark(0);
                self.wait_for_save();
            }
        }
        self.gate().enter();
        Updating(self, None)
    }

    /// Pause the buffer as a save does (module doc, "Save"): the cursor frozen, then every
    /// write below the freeze completed and no update in flight; writers past it and updates
    /// wait until the returned guard is dropped. Samplers go on.
    pub(super) fn pause(&self) -> Paused<'_> {
        let mut attempt = 0;
        // In a shared mapping the save is recorded (intended, then confirmed), so that a
        // survivor can clear the flag of a saver that died.
        let record = self.journal.as_ref().map(|j| j.claim());
        let frozen = loop {
            if let Some(r) = &record {
                r.mark(SAVE_INTENDED);
            }
            // ORDERING: SeqCst: see the module doc.
            let before = self.counters.cursor.fetch_or(SAVING, Ordering::SeqCst);
            if before & SAVING == 0 {
                if let Some(r) = &record {
                    r.mark(SAVE_CONFIRMED);
                }
                break before;
            }
            if let Some(r) = &record {
                r.mark(0);
            }
            // Another save is copying: wait for it.
            self.wait_for_save();
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        };
        // ORDERING: SeqCst, see `wait_to_write`.
        self.counters.saving_from.store(frozen, Ordering::SeqCst);
        let paused = Paused {
            frozen,
            _resume: Resume(&self.counters.cursor),
            _record: record,
        };
        if let Some(journal) = &self.journal {
            journal.point(crate::faults::Point::Saving);
        }
        while self.slots.faults.saver_waits() {
            if let Some(journal) = &self.journal {
                // A shared mapping: the slots themselves say whether every generation below
                // the freeze is written (a dead writer's count of its last chunk may be
                // missing from `completed`, while its generations are written empty by its
                // recovery), and the records whether an update is in flight.
                if self.written_below(frozen) && !journal.any_updating() {
                    break;
                }
                spin_wait(attempt);
                attempt = attempt.saturating_add(1);
                continue;
            }
            // ORDERING: SeqCst, see the module doc: pairs with the writers' SeqCst increment
            // of `completed` after their publication (their bytes are visible to the copy)
            // and with the updates' entry.
            let done = self.counters.completed.load(Ordering::SeqCst)
                + self.counters.burnt.load(Ordering::SeqCst);
            if done >= frozen && self.gate().drained() {
                break;
            }
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
        paused
    }

    /// [`ConcurrentBuffer::set_alpha`]: under a pause, every leaf of an item set to its raw
    /// priority's power under `alpha` (the others to 0), the sums made again, then the alpha
    /// stored, all before the pause ends.
    pub(super) fn realpha(&self, alpha: f64) -> Result<()> {
        super::super::check_alpha(alpha)?;
        let capacity = self.slots.capacity();
        let mut leaves = Vec::new();
        crate::mem::reserve(&mut leaves, capacity)?;
        let _paused = self.pause();
        leaves.extend((0..capacity).map(|slot| {
            match self.slots.generation(slot, self.slots.state(slot)) {
                Some(_) => super::super::stored_at(alpha, self.raw.get(slot)),
                None => 0.0,
            }
        }));
        self.tree.reset_leaves(&leaves);
        // ORDERING: Relaxed: the pause's end (a SeqCst read-modify-write of the cursor)
        // publishes it to the writers and updates that waited.
        self.counters.alpha.store(alpha, Ordering::Relaxed);
        Ok(())
    }

    /// The buffer's state at one instant, its threads paused for the copy (module doc,
    /// "Save").
    pub(crate) fn snapshot(&self) -> Result<Snapshot<'_>> {
        let paused = self.pause();
        let frozen = paused.frozen;
        let capacity = self.slots.capacity();
        let mut priorities = Vec::new();
        crate::mem::reserve(&mut priorities, capacity)?;
        self.tree.copy_leaves(&mut priorities, capacity);
        let mut generations = Vec::new();
        crate::mem::reserve(&mut generations, capacity)?;
        generations.extend((0..capacity).map(|slot| {
            (self.slots)
                .generation(slot, self.slots.state(slot))
                .unwrap_or(NO_ITEM)
        }));
        // With `max_times_sampled`: each stored item's draws delivered so far (draws of calls
        // still in flight are not counted: samplers go on during a save).
        let draws = self.draws.as_ref().map(|draws| {
            let epoch = |g: u64| g / capacity as u64 + 1;
            let delivered = |(slot, &g): (usize, &u64)| match g {
                NO_ITEM => 0,
                g => draws.delivered(slot, epoch(g)).min(self.draw_limit() - 1),
            };
            generations.iter().enumerate().map(delivered).collect()
        });
        let mut columns = Vec::new();
        for (c, spec) in self.config.schema().columns().iter().enumerate() {
            let n = capacity * spec.shape * spec.dtype.size();
            let mut bytes = Vec::new();
            crate::mem::reserve(&mut bytes, n)?;
            // SAFETY: no writer owns a slot: every generation below `frozen` is completed
            // (read above with SeqCst, after each writer's publication) and those at or past
            // it wait for the flag before they own one. `bytes` has room for `n`.
            unsafe { self.slots.copy_column(c, bytes.spare_capacity_mut()) };
            // SAFETY: `copy_column` initialized the first `n` bytes.
            unsafe { bytes.set_len(n) };
            columns.push(std::borrow::Cow::Owned(bytes));
        }
        // In a shared mapping the items are counted: a writer that died between publishing
        // its last chunk and counting it left `completed` short (`len`'s doc).
        let len = match self.journal {
            Some(_) => generations.iter().filter(|&&g| g != NO_ITEM).count(),
            None => self.len(),
        };
        let raw_priorities = (generations.iter().enumerate())
            .map(|(slot, &g)| match g {
                NO_ITEM => 0.0,
                _ => self.raw.get(slot),
            })
            .collect();
        // ORDERING: Relaxed, as in `raise_running_max`; no update runs now.
        let running_raw = self.counters.running_max.load(Ordering::Relaxed);
        Ok(Snapshot {
            config: &self.config,
            inserted: frozen,
            len,
            running_max: self.stored(running_raw),
            alpha: self.alpha(),
            raw: Some(crate::checkpoint::RawState {
                priorities: std::borrow::Cow::Owned(raw_priorities),
                running_max: running_raw,
            }),
            priorities,
            generations: std::borrow::Cow::Owned(generations),
            columns,
            rate_counts: self.rate.as_ref().map(|r| {
                let s = r.stats();
                (s.inserts, s.samples)
            }),
            version_floor: self.version_floor().filter(|&f| f != i64::MIN),
            draws,
        })
    }

    /// Whether every generation below `frozen` is written (each slot's epoch at least the
    /// number of generations below `frozen` that map to it): the shared mapping's test.
    fn written_below(&self, frozen: u64) -> bool {
        let capacity = self.slots.capacity() as u64;
        let (whole, part) = (frozen / capacity, frozen % capacity);
        (0..self.slots.capacity()).all(|s| {
            let need = whole + u64::from((s as u64) < part);
            // `state` is an Acquire load: the writer's bytes are visible to the copy.
            self.slots.state(s).epoch() >= need
        })
    }

    /// A buffer in the state of the checkpoint `plan` opened.
    pub(crate) fn restore(plan: &Plan) -> Result<(Self, UserData)> {
        let state = plan.read_state()?;
        let mut buffer = Self::from_state(plan.config.clone(), &state)?;
        for c in 0..plan.config.schema().columns().len() {
            // SAFETY: `read_column` writes only 0 or 1 into a bool column.
            plan.read_column(c, unsafe { buffer.slots.column_bytes_mut(c) })?;
        }
        Ok((buffer, state.user))
    }

    /// A buffer of `config` in `state` (a checked checkpoint's), its columns zero.
    pub(crate) fn from_state(config: Config, state: &State) -> Result<Self> {
        let mut buffer = <Self as ConcurrentBuffer>::new(config)?;
        buffer.rate =
            crate::rate::rate_limiter_from(buffer.config.rate_limit(), state.rate_counts)?;
        let capacity = buffer.config.capacity();
        let span = state.span();
        for (slot, &g) in state.generations.iter().enumerate() {
            let epoch = Plan::epoch(state.inserted, capacity, slot);
            // The generation of the slot's last write; an empty slot among the newest `span`
            // held an item deleted by key (`State::span`).
            let last = (epoch > 0).then(|| (epoch - 1) * capacity as u64 + slot as u64);
            match last {
                Some(last) if g == NO_ITEM && last >= state.inserted - span => {
                    buffer.slots.restore_removed(slot, epoch)
                }
                _ => buffer.slots.restore_state(slot, epoch, g != NO_ITEM),
            }
        }
        buffer.tree.restore_leaves(&state.priorities);
        let raw = state.raw_or_derived(buffer.config.alpha());
        for (slot, &r) in raw.priorities.iter().enumerate() {
            buffer.raw.set(slot, r);
        }
        // ORDERING: Relaxed: a fresh buffer no other thread sees yet.
        buffer
            .counters
            .cursor
            .store(state.inserted, Ordering::Relaxed);
        // ORDERING: Relaxed, as above.
        buffer
            .counters
            .completed
            .store(state.inserted, Ordering::Relaxed);
        // ORDERING: Relaxed, as above; `len` is then `span` less the slots restored as
        // deleted, which is `state.len` (`Plan` checked it against the stored items).
        buffer
            .counters
            .completed_before_clear
            .store(state.inserted - span, Ordering::Relaxed);
        // ORDERING: Relaxed, as above.
        buffer
            .counters
            .running_max
            .store(raw.running_max, Ordering::Relaxed);
        if let (Some(draws), Some(counts)) = (&buffer.draws, &state.draws) {
            for (slot, (&n, &g)) in counts.iter().zip(&state.generations).enumerate() {
                if g != NO_ITEM && n > 0 {
                    draws.restore(slot, Plan::epoch(state.inserted, capacity, slot), n);
                }
            }
        }
        let floor = state.version_floor.unwrap_or(i64::MIN);
        // ORDERING: Relaxed, as above.
        (buffer.counters.version_floor).store(Counters::floor_word(floor), Ordering::Relaxed);
        Ok(buffer)
    }
}

impl<T: SharedTree> SlotBuffer<T> {
    /// `max_times_sampled` as a count of draws (with it set).
    fn draw_limit(&self) -> u16 {
        self.config.max_times_sampled().map_or(1, |k| k as u16)
    }
}

impl<T: SharedTree> crate::checkpoint::Checkpoint for SlotBuffer<T> {
    fn save_with(
        &self,
        dir: &std::path::Path,
        options: &crate::checkpoint::SaveOptions,
    ) -> Result<()> {
        let snapshot = self.snapshot()?;
        crate::checkpoint::write(&snapshot, dir, options)
    }
}
