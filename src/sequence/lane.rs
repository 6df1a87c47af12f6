//! A lane's writer: appends steps, ends episodes, installs windows and retires them
//! before their rows are overwritten (the module doc of `sequence` has the protocol).

use std::ops::Deref;

use super::{LaneCursor, Partial, SequenceBuffer, WindowInfo};
use crate::buffer::protocol::SharedTree;
use crate::error::{Error, Result};
use crate::rate::{Admission, Wait};
use crate::storage::ColumnSlice;
use crate::sync::Ordering;

/// The writer of one lane: appends its steps, ends its episodes, installs its windows and
/// retires them before their rows are overwritten. Holds the lane until dropped.
///
/// Each call locks the lane's state for its length (uncontended but for a save, which
/// holds every lane between two calls of its writer).
///
/// `B` is how it holds the buffer: `&SequenceBuffer` ([`SequenceBuffer::lane`]) or a
/// shared pointer ([`SequenceBuffer::lane_shared`]).
pub struct LaneWriter<B: Deref<Target = SequenceBuffer>> {
    buffer: B,
    lane: usize,
    /// Install windows in batches of this many (1: each as soon as it is complete).
    batch: usize,
}

impl<B: Deref<Target = SequenceBuffer>> std::fmt::Debug for LaneWriter<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneWriter")
            .field("lane", &self.lane)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

impl<B: Deref<Target = SequenceBuffer>> LaneWriter<B> {
    pub(super) fn take(buffer: B, lane: usize) -> Result<LaneWriter<B>> {
        let lanes = buffer.config.lanes;
        let Some(slot) = buffer.lanes.get(lane) else {
            return Err(Error::OutOfRange {
                index: lane,
                capacity: lanes,
            });
        };
        if buffer.shared {
            // Every process's writers: the lane's words alone (`shared.rs`).
            if let Err(holder) = buffer.lane_words[lane].take(buffer.owner()) {
                return Err(Error::InvalidSequence(format!(
                    "lane {lane} already has a writer (participant {})",
                    holder - 1
                )));
            }
        } else {
            let mut slot = crate::sync::lock(slot);
            if slot.taken {
                return Err(Error::InvalidSequence(format!(
                    "lane {lane} already has a writer"
                )));
            }
            slot.taken = true;
        }
        Ok(LaneWriter {
            buffer,
            lane,
            batch: 1,
        })
    }

    /// Run `f` on the lane, its state locked.
    fn with<R>(&self, f: impl FnOnce(&mut Lane<'_>) -> R) -> R {
        self.buffer.with_lane(self.lane, self.batch, f)
    }

    /// The lane this writer owns.
    pub fn lane(&self) -> usize {
        self.lane
    }

    /// Install complete windows in batches of `windows` (one tree climb per batch) rather
    /// than each as it completes; [`LaneWriter::flush`] installs what is staged. Default 1.
    pub fn set_batch(&mut self, windows: usize) -> Result<()> {
        if windows == 0 {
            return Err(Error::InvalidSequence(
                "an install batch must hold at least 1 window".into(),
            ));
        }
        if windows > 1 && self.buffer.shared {
            return Err(Error::InvalidSequence(
                "a buffer shared by processes installs each window as it completes (a batch \
                 of 1)"
                    .into(),
            ));
        }
        self.flush();
        self.batch = windows;
        Ok(())
    }

    /// Steps this lane has taken (its position in its own timeline: rows skipped to
    /// realign an episode count).
    pub fn position(&self) -> u64 {
        self.with(|lane| lane.cursor.next)
    }

    /// Whether an episode is under way (a step pushed since the last end).
    pub fn in_episode(&self) -> bool {
        self.with(|lane| lane.cursor.episode.is_some())
    }

    /// Append one step: one slice per schema column, holding one item each. The first step
    /// after an episode's end starts a new episode. Bad columns change nothing
    /// ([`Error::ColumnCount`], [`Error::ColumnType`], [`Error::ColumnLength`]); a closed
    /// lane refuses ([`Error::LaneClosed`]). With a rate limit, a step that completes a
    /// window waits until the limiter admits it ([`LaneWriter::push_waiting`]).
    pub fn push(&mut self, columns: &[ColumnSlice<'_>]) -> Result<()> {
        self.push_waiting(columns, Wait::Block)
    }

    /// [`LaneWriter::push`], waiting for the rate limiter as `wait` says: the window the
    /// step completes, if it completes one, is admitted as an insert first
    /// ([`Error::Timeout`], [`Error::RateLimited`], [`Error::Closed`] change nothing).
    pub fn push_waiting(&mut self, columns: &[ColumnSlice<'_>], wait: Wait) -> Result<()> {
        self.admitted(
            wait,
            |lane| {
                lane.check_step(columns)?;
                Ok(lane.completed_by_push())
            },
            |lane| lane.push(columns),
        )
    }

    /// Append `n` steps in order: one slice per schema column holding `n` items each (a
    /// chunk a shard receives, a vectorized actor's history); returns `n`. The columns are
    /// checked first: bad ones change nothing ([`Error::ColumnCount`],
    /// [`Error::ColumnType`], [`Error::ColumnLength`], [`Error::LaneClosed`]). Then each step
    /// is [`LaneWriter::push`]ed (with a rate limit, each waits as a push does; an error then,
    /// [`Error::Closed`], leaves the steps before it written, as separate pushes would).
    pub fn push_steps(&mut self, columns: &[ColumnSlice<'_>]) -> Result<usize> {
        let n = self.with(|lane| {
            lane.check_open()?;
            lane.buffer.config.schema().count_items(columns)
        })?;
        let shapes: Vec<usize> = (self.buffer.config.schema().columns().iter())
            .map(|spec| spec.shape)
            .collect();
        let mut step: Vec<ColumnSlice<'_>> = Vec::with_capacity(columns.len());
        for t in 0..n {
            step.clear();
            step.extend(
                (columns.iter().zip(&shapes))
                    .map(|(c, &shape)| c.range(t * shape..(t + 1) * shape)),
            );
            self.push(&step)?;
        }
        Ok(n)
    }

    /// End the episode: `final_obs` holds the episode's true next observation after its
    /// last step, one slice per `next_of` column (none without `next_of`), stored once in a
    /// final-observation row. `truncated`: the episode was cut (a time limit), so its
    /// return bootstraps; otherwise it terminated and the discount after it is 0. Every
    /// window of the episode is then complete. [`Error::InvalidSequence`] when no step was
    /// pushed since the last end; bad columns change nothing.
    ///
    /// With a rate limit, the windows it completes are admitted as one insert first
    /// ([`LaneWriter::end_episode_waiting`]).
    pub fn end_episode(&mut self, final_obs: &[ColumnSlice<'_>], truncated: bool) -> Result<()> {
        self.end_episode_waiting(final_obs, truncated, Wait::Block)
    }

    /// [`LaneWriter::end_episode`], waiting for the rate limiter as `wait` says (as
    /// [`LaneWriter::push_waiting`]).
    pub fn end_episode_waiting(
        &mut self,
        final_obs: &[ColumnSlice<'_>],
        truncated: bool,
        wait: Wait,
    ) -> Result<()> {
        self.admitted(
            wait,
            |lane| {
                lane.check_end(final_obs)?;
                Ok(lane.completed_by_end())
            },
            |lane| lane.end_episode(final_obs, truncated),
        )
    }

    /// Run `call` on the lane after the rate limiter admitted the windows it completes
    /// (`count`, which checks the call's arguments first): the admission waits with the
    /// lane unlocked (a save can go on), and is given back if `call` fails. Only this
    /// writer moves the lane's cursor, so the count still holds when `call` runs.
    fn admitted(
        &mut self,
        wait: Wait,
        count: impl FnOnce(&mut Lane<'_>) -> Result<u64>,
        call: impl FnOnce(&mut Lane<'_>) -> Result<()>,
    ) -> Result<()> {
        let Some(rate) = self.buffer.rate.as_ref() else {
            return self.with(call);
        };
        let windows = self.with(count)?;
        let admission = Admission::insert(Some(rate), windows as usize, wait)?;
        admission.settle(self.with(call))
    }

    /// The windows that `steps` more pushes, then an [`LaneWriter::end_episode`] if `end`,
    /// would complete with an item (those a rate limit counts for them), computed without
    /// writing anything: what a writer that admits a chunk of steps at once asks its
    /// limiter for (a shard of a union whose limiter is elsewhere). A `steps` past what the
    /// lane can ever take saturates (the count is then a bound).
    pub fn windows_completed_by(&mut self, steps: u64, end: bool) -> u64 {
        self.with(|lane| lane.completed_by(steps, end))
    }

    /// Install every window staged by a batch (see [`LaneWriter::set_batch`]).
    pub fn flush(&mut self) {
        self.with(|lane| lane.flush())
    }

    /// Close the lane: no step is taken after this ([`Error::LaneClosed`]), by this writer
    /// or a later one, nor after a save and a load. Complete windows are installed; the
    /// windows of an episode still under way, which would need its next step, are never
    /// made sampleable.
    pub fn close(&mut self) {
        self.with(|lane| lane.close())
    }
}

impl<B: Deref<Target = SequenceBuffer>> Drop for LaneWriter<B> {
    /// Installs what is staged and gives the lane back where it stands.
    fn drop(&mut self) {
        if crate::faults::dying() {
            // A modeled death (loom): a killed process gives nothing back.
            return;
        }
        self.flush();
        let buffer = &*self.buffer;
        match buffer.shared {
            true => buffer.lane_words[self.lane].give_back(),
            false => crate::sync::lock(&buffer.lanes[self.lane]).taken = false,
        }
    }
}

impl SequenceBuffer {
    /// Run `f` on lane `lane`, its state locked: this process's lock, or in a buffer shared
    /// by processes the lane's lock word, its cursor loaded from its words and stored back
    /// after `f` (`shared.rs`).
    pub(super) fn with_lane<R>(
        &self,
        lane: usize,
        batch: usize,
        f: impl FnOnce(&mut Lane<'_>) -> R,
    ) -> R {
        if !self.shared {
            let mut slot = crate::sync::lock(&self.lanes[lane]);
            return f(&mut Lane {
                buffer: self,
                lane,
                cursor: &mut slot.cursor,
                batch,
            });
        }
        // Every process's calls on the lane, this one's threads included: the lane's lock
        // word alone.
        let words = &self.lane_words[lane];
        words.lock(self.owner());
        let mut call = SharedCall {
            words,
            cursor: words.load(),
        };
        f(&mut Lane {
            buffer: self,
            lane,
            cursor: &mut call.cursor,
            batch,
        })
    }
}

/// A call on a shared lane: stores the cursor and lets the lane's lock go when it ends, on
/// every path but a modeled death (a killed process stores nothing).
struct SharedCall<'a> {
    words: &'a super::shared::LaneWords,
    cursor: LaneCursor,
}

impl Drop for SharedCall<'_> {
    fn drop(&mut self) {
        if crate::faults::dying() {
            return;
        }
        self.words.store(&self.cursor);
        self.words.unlock();
    }
}

/// A lane's state, locked, with the buffer it belongs to: what a [`LaneWriter`]'s calls
/// (and a save's flush) work on.
pub(super) struct Lane<'a> {
    pub(super) buffer: &'a SequenceBuffer,
    pub(super) lane: usize,
    pub(super) cursor: &'a mut LaneCursor,
    pub(super) batch: usize,
}

impl Lane<'_> {
    /// Append one step: one slice per schema column, holding one item each. The first step
    /// after an episode's end starts a new episode. Bad columns change nothing
    /// ([`Error::ColumnCount`], [`Error::ColumnType`], [`Error::ColumnLength`]); a closed
    /// lane refuses ([`Error::LaneClosed`]).
    fn push(&mut self, columns: &[ColumnSlice<'_>]) -> Result<()> {
        self.check_step(columns)?;
        if self.cursor.episode.is_none() {
            self.cursor.episode = Some(self.cursor.next);
        }
        self.write_row(|buffer, row| {
            // SAFETY: `check_step` checked `columns`: one item of each column's dtype.
            unsafe { buffer.write_columns(row, columns, None) }
        });
        // Windows whose row `reach` steps on (their next observation) now exists are complete.
        let (w, reach) = (
            self.buffer.config.window as u64,
            self.buffer.config.reach() as u64,
        );
        while self.cursor.finished_to + reach < self.cursor.next {
            let start = self.cursor.finished_to;
            let info = self.info(start, w, reach, false);
            self.finish(start, Some(info));
        }
        Ok(())
    }

    /// End the episode: `final_obs` holds the episode's true next observation after its
    /// last step, one slice per `next_of` column (none without `next_of`), stored once in a
    /// final-observation row. `truncated`: the episode was cut (a time limit), so its
    /// return bootstraps; otherwise it terminated and the discount after it is 0. Every
    /// window of the episode is then complete. [`Error::InvalidSequence`] when no step was
    /// pushed since the last end; bad columns change nothing.
    fn end_episode(&mut self, final_obs: &[ColumnSlice<'_>], truncated: bool) -> Result<()> {
        self.check_end(final_obs)?;
        let last = self.cursor.next - 1;
        self.write_row(|buffer, row| {
            // SAFETY: `check_end` checked each slice: one item of its column's dtype.
            unsafe { buffer.write_columns(row, final_obs, Some(&buffer.config.next_of)) }
        });
        // Every window of the episode is complete: the final row follows its last step.
        let (w, reach) = (
            self.buffer.config.window as u64,
            self.buffer.config.reach() as u64,
        );
        let period = self.buffer.config.period as u64;
        while self.cursor.finished_to <= last {
            let start = self.cursor.finished_to;
            let left = last + 1 - start;
            let len = left.min(w);
            let keep = len == w || self.buffer.config.partial == Partial::Keep;
            let info = self.info(start, len, left.min(reach), !truncated && left <= reach);
            self.finish(start, keep.then_some(info));
        }
        // Realign: the next episode starts on a window start; no window starts between.
        let aligned = self.cursor.next.div_ceil(period) * period;
        while self.cursor.finished_to < aligned {
            self.finish(self.cursor.finished_to, None);
        }
        self.cursor.next = aligned;
        self.cursor.episode = None;
        self.flush();
        Ok(())
    }

    /// A push's checks: the lane is open, and `columns` hold one step of the schema.
    fn check_step(&self, columns: &[ColumnSlice<'_>]) -> Result<()> {
        self.check_open()?;
        let items = self.buffer.config.schema().count_items(columns)?;
        if items != 1 {
            return Err(Error::LengthMismatch {
                what: "steps in a push",
                expected: 1,
                got: items,
            });
        }
        Ok(())
    }

    /// An episode end's checks: the lane is open, an episode is under way, and `final_obs`
    /// holds one item of each `next_of` column.
    fn check_end(&self, final_obs: &[ColumnSlice<'_>]) -> Result<()> {
        self.check_open()?;
        let Some(_) = self.cursor.episode else {
            return Err(Error::InvalidSequence(format!(
                "lane {}: end_episode with no step pushed since the last end",
                self.lane
            )));
        };
        let buffer = self.buffer;
        let next_of = &buffer.config.next_of;
        if final_obs.len() != next_of.len() {
            return Err(Error::ColumnCount {
                expected: next_of.len(),
                got: final_obs.len(),
            });
        }
        for (&c, col) in next_of.iter().zip(final_obs) {
            let spec = &buffer.config.schema().columns()[c];
            if col.dtype() != spec.dtype {
                return Err(Error::ColumnType {
                    column: spec.name.clone(),
                    expected: spec.dtype,
                    got: col.dtype(),
                });
            }
            if col.len() != spec.shape {
                return Err(Error::ColumnLength {
                    column: spec.name.clone(),
                    expected: spec.shape,
                    got: col.len(),
                });
            }
        }
        Ok(())
    }

    /// The windows a push completes now: the one whose next observation the new step is,
    /// if a window starts `reach` steps back and is not finished (the lane keeps
    /// `finished_to + reach >= next`, so at most one).
    fn completed_by_push(&self) -> u64 {
        self.completed_by(1, false)
    }

    /// The windows `end_episode` completes with an item (the rest, cut short under
    /// [`Partial::Drop`], are published empty): every start not finished up to the last
    /// step, or up to the last one that leaves a whole window.
    fn completed_by_end(&self) -> u64 {
        self.completed_by(0, true)
    }

    /// The windows `steps` pushes and then, if `end`, an episode's end would complete
    /// with an item: [`Lane::completed_by_push`] over each push (every start whose reach
    /// row the pushes write), then [`Lane::completed_by_end`] from where they leave the
    /// lane.
    fn completed_by(&self, steps: u64, end: bool) -> u64 {
        let config = &self.buffer.config;
        let (reach, period) = (config.reach() as u64, config.period as u64);
        // Saturating: a count for more steps than a lane can ever take is only a bound.
        let next = self.cursor.next.saturating_add(steps);
        let mut finished = self.cursor.finished_to;
        let mut count = 0;
        if finished + reach < next {
            let n = (next - reach - 1 - finished) / period + 1;
            count += n;
            finished += n * period;
        }
        if end && (steps > 0 || self.cursor.episode.is_some()) {
            let last_kept = match config.partial {
                Partial::Keep => next.checked_sub(1),
                Partial::Drop => next.checked_sub(config.window as u64),
            };
            if let Some(last) = last_kept.filter(|&last| last >= finished) {
                count += (last - finished) / period + 1;
            }
        }
        count
    }

    /// Install every window staged by a batch (see [`LaneWriter::set_batch`]).
    pub(super) fn flush(&mut self) {
        let staged = std::mem::take(&mut self.cursor.staged);
        self.install(&staged);
        self.cursor.staged = staged;
        self.cursor.staged.clear();
    }

    /// Close the lane: no step is taken after this ([`Error::LaneClosed`]). Complete windows
    /// are installed; the windows of an episode still under way, which would need its next
    /// step, are never made sampleable.
    fn close(&mut self) {
        if self.cursor.closed {
            return;
        }
        self.flush();
        let period = self.buffer.config.period as u64;
        let aligned = self.cursor.next.div_ceil(period) * period;
        while self.cursor.finished_to < aligned {
            self.finish(self.cursor.finished_to, None);
        }
        self.cursor.episode = None;
        self.cursor.closed = true;
    }

    fn check_open(&self) -> Result<()> {
        if self.cursor.closed {
            return Err(Error::LaneClosed { lane: self.lane });
        }
        Ok(())
    }

    /// The description of the window starting at `start` with `len` steps, `to_end` of its
    /// episode's steps within its reach, ending in a terminal or not.
    fn info(&self, start: u64, len: u64, to_end: u64, terminal: bool) -> WindowInfo {
        let episode = self.cursor.episode.unwrap_or(start);
        let look_back = self.buffer.config.look_back() as u64;
        WindowInfo {
            len: len as u32,
            to_end: to_end as u32,
            terminal,
            back: (start - episode).min(look_back - 1) as u32,
        }
    }

    /// Write the lane's next row with `write(buffer, row)`, retiring first every window that
    /// reads the step it evicts.
    fn write_row(&mut self, write: impl FnOnce(&SequenceBuffer, usize)) {
        let steps = self.buffer.config.steps as u64;
        let p = self.cursor.next;
        let faults = self.buffer.faults;
        // Windows that read step `p - T` start at or before `p - T + k - 1`.
        let bound = match faults.lane_retires_at_first_step() {
            true => (p + self.buffer.config.look_back() as u64 - 1).checked_sub(steps),
            false => p.checked_sub(steps + self.buffer.config.window as u64),
        };
        let before = faults.lane_retires_before_overwrite();
        if before {
            self.retire_through(bound);
        }
        let buffer = self.buffer;
        let row = buffer.row(self.lane, p);
        if buffer.slots.optimistic() {
            // No tracked cell: samplers copy this row while it is written, and keep their
            // copy only if the window they drew is unchanged after it.
            #[cfg(loom)]
            // ORDERING: Relaxed after the Release fence of the retirements above (`own`),
            // as a sequence lock's data stores.
            buffer.rows.tokens[row].store(p + 1, Ordering::Relaxed);
            write(buffer, row);
        } else {
            buffer.rows.cells[row].with_mut(|_| write(buffer, row));
        }
        // ORDERING: Relaxed: a count.
        buffer
            .counters
            .steps_written
            .fetch_add(1, Ordering::Relaxed);
        if !before {
            self.retire_through(bound);
        }
        self.cursor.next += 1;
    }

    /// Retire, in order, every window starting at or before `bound` not yet retired.
    fn retire_through(&mut self, bound: Option<u64>) {
        let Some(bound) = bound else { return };
        let period = self.buffer.config.period as u64;
        if self.cursor.staged.first().is_some_and(|&(s, _)| s <= bound) {
            self.flush();
        }
        while self.cursor.retired_to <= bound {
            let start = self.cursor.retired_to;
            debug_assert!(
                start < self.cursor.finished_to,
                "window {start} retired before it was finished"
            );
            let buffer = self.buffer;
            let (leaf, _) = buffer.leaf_of(self.lane, start);
            let mut held = false;
            buffer.slots.retire_held(leaf, || {
                held = true;
                buffer.tree.set_owned(&[(leaf, 0.0)]);
            });
            buffer.slots.point(crate::faults::Point::LaneRetired);
            if held {
                // ORDERING: Relaxed: a count.
                buffer.counters.live.fetch_sub(1, Ordering::Relaxed);
                self.cursor.live -= 1;
            }
            self.cursor.retired_to += period;
        }
    }

    /// Finish the window starting at `start` (the next one not finished): stage it for
    /// installing (`Some`) or publish it empty (`None`).
    fn finish(&mut self, start: u64, info: Option<WindowInfo>) {
        debug_assert_eq!(start, self.cursor.finished_to);
        self.cursor.finished_to += self.buffer.config.period as u64;
        match info {
            Some(info) => {
                self.cursor.staged.push((start, info));
                if self.cursor.staged.len() >= self.batch {
                    self.flush();
                }
            }
            None => {
                // Windows finish in order: the staged ones come first.
                self.flush();
                self.install_one_empty(start);
            }
        }
    }

    /// Publish the window at `start` empty: it holds no item and no key of it is current.
    fn install_one_empty(&self, start: u64) {
        let buffer = self.buffer;
        let (leaf, lap) = buffer.leaf_of(self.lane, start);
        if lap == 0 {
            drop(buffer.slots.begin_write(leaf, 0));
        } else {
            buffer.slots.finish_held(leaf, lap, false);
        }
    }

    /// Install `windows` (complete, in order): describe them, set their leaves in one tree
    /// operation, then publish each.
    fn install(&mut self, windows: &[(u64, WindowInfo)]) {
        if windows.is_empty() {
            return;
        }
        let buffer = self.buffer;
        // ORDERING: Relaxed: a single value with no data attached.
        let priority = buffer.counters.running_max.load(Ordering::Relaxed);
        let mut entries = Vec::with_capacity(windows.len());
        let mut guards = Vec::new();
        let mut max_generation = 0;
        for &(start, info) in windows {
            let (leaf, lap) = buffer.leaf_of(self.lane, start);
            if lap == 0 {
                guards.push(buffer.slots.begin_write(leaf, 0));
            }
            // ORDERING: Relaxed: published by the epoch's Release store below.
            buffer.info[leaf].store(info.pack(), Ordering::Relaxed);
            entries.push((leaf, priority));
            max_generation =
                max_generation.max(lap * buffer.config.capacity() as u64 + leaf as u64);
        }
        for chunk in entries.chunks(crate::tree::SET_MANY_MAX) {
            buffer.tree.set_owned(chunk);
        }
        // ORDERING: Relaxed: counts; a key is checked against its slot, not these.
        buffer
            .counters
            .handed_out
            .fetch_max(max_generation + 1, Ordering::Relaxed);
        buffer
            .counters
            .live
            .fetch_add(windows.len() as u64, Ordering::Relaxed);
        self.cursor.live += windows.len() as u64;
        buffer.slots.point(crate::faults::Point::LaneInstalled);
        let mut guards = guards.into_iter();
        for &(start, _) in windows {
            let (leaf, lap) = buffer.leaf_of(self.lane, start);
            if lap == 0 {
                guards
                    .next()
                    .expect("one guard per first-lap window")
                    .publish();
            } else {
                buffer.slots.finish_held(leaf, lap, true);
            }
        }
    }
}
