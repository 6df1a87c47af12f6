//! Saving a sequence buffer while its threads run, and restoring one from a checkpoint
//! (`checkpoint/sequence.rs` has the files).
//!
//! The save pause: the saver locks every lane's state in lane order (a lane writer holds its
//! lane's lock for one call, so the saver waits at most for one call per lane and then
//! stands between two calls of every writer), installs the windows each lane's writer
//! staged, and then pauses priority updates: an update counts itself in `updating` and
//! then reads `saving` (both read-modify-writes), backing out while it is set; the saver
//! sets `saving` (a read-modify-write) and then waits for `updating` to reach 0. Either the
//! update's read of `saving` comes first in that word's modification order, and the saver's
//! set reads from it, so the saver's read of `updating` sees the update, or the update sees
//! the flag. Samplers never wait: they only read. The copy is then the state after every
//! writer call and update that completed before the pause, and none that began after it.

use super::{Lane, LaneCursor, SequenceBuffer, WindowInfo};
use crate::buffer::protocol::{SharedTree, UpdateGate};
use crate::buffer::reservations::{RecordGuard, UPDATING};
use crate::checkpoint::{
    self, Checkpoint, LaneState, Load, LoadOptions, Loaded, SaveOptions, SequenceCounts,
    SequencePlan, SequenceSnapshot, SequenceState, UserData,
};
use crate::error::{CheckpointErrorKind as Kind, Error, Result};
use crate::sync::{spin_wait, Ordering};
use std::path::Path;

/// A priority update in flight (module doc); dropping it leaves. In a shared buffer it is a
/// record of ours marked UPDATING rather than a count (as the flat shared buffer's), so that
/// a process that dies inside leaves nothing a save would wait for once it is recovered.
pub(super) struct Updating<'a>(&'a SequenceBuffer, Option<RecordGuard<'a>>);

impl Drop for Updating<'_> {
    fn drop(&mut self) {
        if crate::faults::dying() {
            // A modeled death (loom): a killed process runs no destructor.
            return;
        }
        if self.1.is_none() {
            self.0.gate().leave();
        }
        // A record's drop leaves (a Release store, which a saver's SeqCst load pairs with).
    }
}

/// Every lane's lock word of a shared buffer, held for a save's copy; dropping it lets them
/// go (after a modeled death, nothing: a killed process lets nothing go).
struct LockedWords<'a>(&'a SequenceBuffer);

impl<'a> LockedWords<'a> {
    fn lock(buffer: &'a SequenceBuffer) -> LockedWords<'a> {
        let owner = buffer.owner();
        for words in buffer.lane_words.iter() {
            words.lock(owner);
        }
        LockedWords(buffer)
    }
}

impl Drop for LockedWords<'_> {
    fn drop(&mut self) {
        if crate::faults::dying() {
            return;
        }
        for words in self.0.lane_words.iter() {
            words.unlock();
        }
    }
}

/// Priority updates paused for a save's copy; dropping it lets them go on.
struct Paused<'a>(&'a SequenceBuffer);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        // ORDERING: SeqCst, as the flag's setting; Release for the updates' Acquire wait. A
        // read-modify-write, as the setting (and as `slot_buffer`'s `Resume`).
        self.0.counters.saving.fetch_and(0, Ordering::SeqCst);
    }
}

impl SequenceBuffer {
    /// The update/save gate (`slot_buffer`'s, over this buffer's own flag word).
    fn gate(&self) -> UpdateGate<'_> {
        UpdateGate {
            flag: &self.counters.saving,
            // Any value: 1, or in a shared buffer the saver's owner number.
            bit: u64::MAX,
            updating: &self.counters.updating,
        }
    }

    /// Enter a priority update: counted in `updating` (in a shared buffer: a record marked
    /// UPDATING) once no save is copying.
    pub(super) fn enter_update(&self) -> Updating<'_> {
        if let Some(journal) = &self.journal {
            let record = journal.claim();
            loop {
                // The count's handshake (`UpdateGate`) with the record for the count: our
                // SeqCst store, then a SeqCst read-modify-write of the flag; the saver's
                // `fetch_or`, then its SeqCst loads of every record.
                record.mark(UPDATING);
                // ORDERING: SeqCst, see above.
                if self.counters.saving.fetch_add(0, Ordering::SeqCst) == 0 {
                    return Updating(self, Some(record));
                }
                record.mark(0);
                self.gate().wait_while_flagged();
            }
        }
        self.gate().enter();
        Updating(self, None)
    }

    /// Pause priority updates (the caller holds every lane, so no other save runs).
    fn pause_updates(&self) -> Paused<'_> {
        // In a shared buffer the saver's owner number, so that a survivor can clear the flag
        // of a saver that died (`shared.rs`).
        let flag = match self.shared {
            true => self.owner(),
            false => 1,
        };
        // ORDERING: SeqCst (module doc).
        self.counters.saving.fetch_or(flag, Ordering::SeqCst);
        let paused = Paused(self);
        let mut attempt = 0;
        while !self.gate().drained() || self.journal.as_ref().is_some_and(|j| j.any_updating()) {
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
        paused
    }

    /// The buffer's state at one instant, its writers and updates paused for the copy
    /// (module doc).
    pub(crate) fn snapshot(&self) -> Result<SequenceSnapshot<'_>> {
        // Every writer stopped between two calls: this process's lane locks, or in a shared
        // buffer every process's, the lanes' lock words, in lane order (the cursors as their
        // last calls left them; nothing is staged there).
        let mut lanes: Vec<_> = match self.shared {
            true => Vec::new(),
            false => self.lanes.iter().map(crate::sync::lock).collect(),
        };
        let words = self.shared.then(|| LockedWords::lock(self));
        for (lane, slot) in lanes.iter_mut().enumerate() {
            Lane {
                buffer: self,
                lane,
                cursor: &mut slot.cursor,
                batch: 1,
            }
            .flush();
        }
        let cursors: Vec<LaneState> = match &words {
            Some(_) => (self.lane_words.iter())
                .map(|w| lane_state(&w.load()))
                .collect(),
            None => lanes.iter().map(|slot| lane_state(&slot.cursor)).collect(),
        };
        let _paused = self
            .faults
            .sequence_save_pauses_updates()
            .then(|| self.pause_updates());
        let leaves = self.config.capacity();
        let mut priorities = Vec::new();
        crate::mem::reserve(&mut priorities, leaves)?;
        self.tree.copy_leaves(&mut priorities, leaves);
        let mut windows = Vec::new();
        crate::mem::reserve(&mut windows, leaves)?;
        windows.extend((0..leaves).map(|leaf| {
            let state = self.slots.state(leaf);
            match state.writing() || self.slots.generation(leaf, state).is_none() {
                true => [0; 4],
                false => {
                    // ORDERING: Relaxed: written by a writer call that completed before we
                    // took its lane's lock.
                    let info = WindowInfo::unpack(self.info[leaf].load(Ordering::Relaxed));
                    [info.len, info.to_end, info.back, u32::from(info.terminal)]
                }
            }
        }));
        let rows = self.rows.cells.len();
        let mut columns = Vec::new();
        for raw in &self.rows.columns {
            let n = rows * raw.row_bytes;
            let mut bytes: Vec<u8> = Vec::new();
            crate::mem::reserve(&mut bytes, n)?;
            for (row, cell) in self.rows.cells.iter().enumerate() {
                cell.with(|_| {
                    // SAFETY: the row lies inside the column's allocation; no writer runs
                    // (we hold every lane), so no one writes it during the copy.
                    let src = unsafe {
                        std::slice::from_raw_parts(raw.base.add(row * raw.row_bytes), raw.row_bytes)
                    };
                    bytes.extend_from_slice(src);
                });
            }
            columns.push(bytes);
        }
        // ORDERING: Relaxed for the counts: every call that changed them completed before
        // the lanes' locks and the pause (which order them before these loads).
        Ok(SequenceSnapshot {
            config: &self.config,
            priorities,
            windows,
            columns,
            lanes: cursors,
            counts: SequenceCounts {
                live: self.counters.live.load(Ordering::Relaxed),
                running_max: self.counters.running_max.load(Ordering::Relaxed),
                handed_out: self.counters.handed_out.load(Ordering::Relaxed),
                steps_written: self.counters.steps_written.load(Ordering::Relaxed),
                rate_counts: self.rate.as_ref().map(|r| {
                    let s = r.stats();
                    (s.inserts, s.samples)
                }),
            },
        })
    }

    /// A buffer in the state of the checkpoint `plan` opened.
    fn restore(plan: &SequencePlan) -> Result<(SequenceBuffer, UserData)> {
        let state = plan.read_state()?;
        let leaves = check_state(&plan.config, &state)
            .map_err(|detail| checkpoint_invalid(plan.dir(), detail))?;
        let mut buffer = SequenceBuffer::with_rate_counts(
            plan.config.clone(),
            crate::faults::Faults::none(),
            state.counts.rate_counts,
        )?;
        let per_lane = buffer.config.starts_per_lane();
        let mut lane_live = vec![0u64; buffer.config.lanes];
        for (leaf, (&(epoch, held), w)) in leaves.iter().zip(&state.windows).enumerate() {
            lane_live[leaf / per_lane] += u64::from(!held && w[0] > 0);
            if held {
                buffer.slots.restore_held(leaf, epoch);
            } else {
                buffer.slots.restore_state(leaf, epoch, w[0] > 0);
            }
            let info = WindowInfo {
                len: w[0],
                to_end: w[1],
                back: w[2],
                terminal: w[3] != 0,
            };
            // ORDERING: Relaxed: a fresh buffer no other thread sees yet.
            buffer.info[leaf].store(info.pack(), Ordering::Relaxed);
        }
        buffer.tree.restore_leaves(&state.priorities);
        for ((slot, lane), live) in buffer.lanes.iter().zip(&state.lanes).zip(lane_live) {
            crate::sync::lock(slot).cursor = LaneCursor {
                next: lane.next,
                episode: lane.episode,
                finished_to: lane.finished_to,
                retired_to: lane.retired_to,
                staged: Vec::new(),
                closed: lane.closed,
                live,
            };
        }
        let (to, from) = (&buffer.counters, &state.counts);
        // ORDERING: Relaxed, as above.
        to.live.store(from.live, Ordering::Relaxed);
        to.running_max.store(from.running_max, Ordering::Relaxed);
        to.handed_out.store(from.handed_out, Ordering::Relaxed);
        to.steps_written
            .store(from.steps_written, Ordering::Relaxed);
        for c in 0..buffer.rows.columns.len() {
            let raw = &buffer.rows.columns[c];
            let n = buffer.rows.cells.len() * raw.row_bytes;
            // SAFETY: the column's allocation holds `n` initialized bytes from `base`; the
            // buffer is ours alone (no writer, no sampler), and `read_column` writes only
            // valid values of the column's dtype (0 or 1 for bool).
            let out = unsafe { std::slice::from_raw_parts_mut(raw.base, n) };
            plan.read_column(c, out)?;
        }
        Ok((buffer, state.user))
    }
}

/// What a save would write, in memory, for the loom models: each leaf's priority and
/// window (`[len, to_end, back, terminal]`), the running maximum, each column's rows and
/// each lane's `(next, finished_to, retired_to)`.
#[cfg(loom)]
#[doc(hidden)]
#[derive(Debug)]
pub struct SavedView {
    pub priorities: Vec<f64>,
    pub windows: Vec<[u32; 4]>,
    pub running_max: f64,
    pub columns: Vec<Vec<u8>>,
    pub lanes: Vec<(u64, u64, u64)>,
}

#[cfg(loom)]
impl SequenceBuffer {
    /// The state a save would write (see [`SavedView`]).
    #[doc(hidden)]
    pub fn saved_view(&self) -> Result<SavedView> {
        let s = self.snapshot()?;
        Ok(SavedView {
            priorities: s.priorities,
            windows: s.windows,
            running_max: s.counts.running_max,
            columns: s.columns,
            lanes: (s.lanes.iter())
                .map(|l| (l.next, l.finished_to, l.retired_to))
                .collect(),
        })
    }
}

fn lane_state(c: &LaneCursor) -> LaneState {
    LaneState {
        next: c.next,
        episode: c.episode,
        finished_to: c.finished_to,
        retired_to: c.retired_to,
        closed: c.closed,
    }
}

fn checkpoint_invalid(dir: &Path, detail: String) -> Error {
    Error::Checkpoint {
        kind: Kind::Invalid,
        path: dir.display().to_string(),
        detail,
    }
}

/// Check a checkpoint's state against the rules every writer keeps (the module doc of
/// `sequence`), so that the restored buffer's writers, samplers and updates run the
/// protocol from a state it can reach. Returns each leaf's epoch (windows finished) and
/// whether its last window is retired and held for the next.
fn check_state(
    config: &super::SequenceConfig,
    state: &SequenceState,
) -> std::result::Result<Vec<(u64, bool)>, String> {
    let t = config.steps as u64;
    let period = config.period as u64;
    let reach = config.reach() as u64;
    let w = config.window as u32;
    let look_back = config.look_back() as u32;
    // Laps a lane may have taken: every leaf's epoch fits its state word.
    let max_next = (crate::buffer::slots::MAX_EPOCH - 1).saturating_mul(t);
    for (l, c) in state.lanes.iter().enumerate() {
        let lane_bad = |what: &str| Err(format!("lane {l}: {what} ({c:?})"));
        if c.next > max_next {
            return lane_bad("more steps than a lane can take");
        }
        if c.finished_to % period != 0 || c.retired_to % period != 0 {
            return lane_bad("a window cursor that is not a multiple of the period");
        }
        if c.retired_to > c.finished_to || c.finished_to > c.retired_to + t {
            return lane_bad("windows retired past those finished, or a ring's worth unretired");
        }
        let aligned = c.next.div_ceil(period) * period;
        if c.finished_to > aligned || c.finished_to + reach < c.next {
            return lane_bad("windows finished out of step with the lane's position");
        }
        match (c.episode, c.closed) {
            (Some(e), false) => {
                if e % period != 0 || e > c.finished_to || e >= c.next {
                    return lane_bad("an episode start out of step with the lane");
                }
            }
            (Some(_), true) => return lane_bad("a closed lane with an episode under way"),
            (None, false) if c.finished_to != c.next => {
                return lane_bad("windows left unfinished between episodes")
            }
            (None, true) if c.finished_to != aligned => {
                return lane_bad("windows left unfinished in a closed lane")
            }
            (None, _) => {}
        }
        // A close finishes the windows up to `aligned` without a write: the last windows
        // of their leaves must be retired already.
        if !c.closed && c.finished_to < aligned && aligned - period >= c.retired_to + t {
            return lane_bad("a window would be finished over one not retired");
        }
    }
    let leaves = config.capacity();
    let per_lane = config.starts_per_lane();
    let (mut live, mut newest_held, mut newest_any) = (0u64, None::<u64>, None::<u64>);
    let mut out = Vec::with_capacity(leaves);
    for leaf in 0..leaves {
        let c = &state.lanes[leaf / per_lane];
        let offset = ((leaf % per_lane) as u64) * period;
        let epoch = match c.finished_to > offset {
            true => (c.finished_to - offset - 1) / t + 1,
            false => 0,
        };
        let start = (epoch > 0).then(|| offset + (epoch - 1) * t);
        let held = start.is_some_and(|s| s < c.retired_to);
        let generation = start.map(|_| (epoch - 1) * leaves as u64 + leaf as u64);
        newest_any = newest_any.max(generation);
        let [len, to_end, back, terminal] = state.windows[leaf];
        let leaf_bad = |what: &str| {
            Err(format!(
                "leaf {leaf}: {what} (window {:?}, priority {})",
                state.windows[leaf], state.priorities[leaf]
            ))
        };
        if len == 0 {
            if state.windows[leaf] != [0; 4] || state.priorities[leaf] != 0.0 {
                return leaf_bad("a window of no steps with a description or a priority");
            }
        } else {
            let Some(s) = start.filter(|_| !held) else {
                return leaf_bad("a window where its lane has none");
            };
            if len > w
                || to_end < len
                || u64::from(to_end) > reach
                || (len < w && to_end != len)
                || (len < w && config.partial == super::Partial::Drop)
                || terminal > 1
                || back >= look_back
                || u64::from(back) > s
                || s + u64::from(to_end) >= c.next
            {
                return leaf_bad("a window its lane's writer could not have made");
            }
            live += 1;
            newest_held = newest_held.max(generation);
        }
        out.push((epoch, held));
    }
    if live != state.counts.live {
        return Err(format!(
            "{live} windows held, the state says {}",
            state.counts.live
        ));
    }
    let (low, high) = (
        newest_held.map_or(0, |g| g + 1),
        newest_any.map_or(0, |g| g + 1),
    );
    if !(low..=high).contains(&state.counts.handed_out) {
        return Err(format!(
            "{} windows handed out, the leaves say {low} to {high}",
            state.counts.handed_out
        ));
    }
    let positions: u64 = state.lanes.iter().map(|c| c.next).sum();
    if state.counts.steps_written > positions {
        return Err(format!(
            "{} steps written, more than the lanes' positions ({positions})",
            state.counts.steps_written
        ));
    }
    Ok(out)
}

impl Checkpoint for SequenceBuffer {
    /// Save into the new directory `dir` as a sequence checkpoint
    /// (`checkpoint/sequence.rs`) while writers, samplers and updaters run: each lane's
    /// writer and the priority updates pause for the in-memory copy (the windows a writer
    /// staged are installed first); samplers go on.
    fn save_with(&self, dir: &Path, options: &SaveOptions) -> Result<()> {
        let snapshot = self.snapshot()?;
        checkpoint::write_sequence(&snapshot, dir, options)
    }
}

impl Load for SequenceBuffer {
    /// Load the sequence checkpoint at `dir`: every lane where it stood (episode under way
    /// included, no writer holding it), every window, priority and key as saved.
    fn load_with<P: AsRef<Path>>(dir: P, options: &LoadOptions) -> Result<Loaded<Self>> {
        let plan = SequencePlan::open(dir.as_ref(), options)?;
        let (buffer, user) = SequenceBuffer::restore(&plan)?;
        Ok(Loaded { buffer, user })
    }
}
