//! Lanes of steps stored once, and windows over them as prioritized items: n-step returns,
//! sequences (R2D2) and stacked frames that never cross an episode.
//!
//! A [`SequenceBuffer`] has L lanes (one per actor or vectorized environment), each a ring
//! of T steps of the schema's columns. An item is a *window*: W consecutive steps of one
//! episode starting at a step `s` that is a multiple of `period`, with its own leaf in a
//! K-ary sum tree (L x T / period leaves). One [`LaneWriter`] per lane appends steps
//! ([`LaneWriter::push`]) and ends episodes ([`LaneWriter::end_episode`], which stores the
//! episode's final observation once, in a row where no window starts). A sample draws
//! windows in proportion to their priorities and gathers their steps straight into the
//! caller's memory, with the n-step return, the discount to bootstrap with, the next
//! observation and stacks of frames computed on the way ([`SequenceBatch`]).
//!
//! # The protocol
//!
//! Each leaf has a state word of the slot protocol (`buffer/slots/`): a writer flag, a
//! reader count and an epoch. A leaf's epoch counts the laps of its lane's ring that it has
//! finished: the window starting at lane step `s` is lap `s / T` of leaf
//! `lane x T / period + (s mod T) / period`, and its key's insertion number is
//! `lap x leaves + leaf`, the generation the slot protocol gives epoch `lap + 1` (so
//! priority updates go through the lock-free tree's update unchanged).
//!
//! - **Install.** A window is complete when the row of its next observation has been
//!   written: step `s + R`, R its reach (W, or n when an n-step return reaches further), or
//!   the final-observation row when the episode ends before (the window is then
//!   `len < W` steps long if it ends inside the window itself). Its writer then sets its leaf and publishes the
//!   epoch (Release). A window that starts on no episode step (the final-observation row,
//!   the rows skipped to realign, see below) or that is cut short under [`Partial::Drop`] is
//!   published EMPTY: no key of it is ever current.
//! - **Retire before overwrite.** A window reads the steps `s - (k - 1) ..= s + R` at most
//!   (k the deepest stack, 1 without). Before a lane writes its step `p`, which evicts step
//!   `p - T`, it retires, in order, every window that starts at or before
//!   `p - T + k - 1`: it takes the leaf's writer flag (waiting for the samplers copying
//!   the window to leave), zeroes the leaf, and keeps the flag until the leaf's next window
//!   is finished. So no sampler reads a row while it is written, no window outlives any of
//!   its rows, and an update through the key of a retired window is counted stale. This is
//!   lazy writing applied to a window's first step; the configuration checks that a window
//!   always completes before it is retired (`R + k <= T`).
//! - **Sample.** A sampler descends, joins the leaf's state word in the state it read with
//!   the priority (so the priority belonged to the window copied), reads the window's
//!   description (length, terminal, how far its episode reaches back), copies its rows
//!   (at most two runs: the ring's wrap), and leaves. It never waits: a leaf in flight is
//!   drawn again.
//! - **Episodes never share a start.** After an episode's final-observation row the writer
//!   skips to the next multiple of `period`, so every episode starts on a window start:
//!   no episode step is left out of every window, and two episodes never claim one leaf
//!   (the cost: at most `period - 1` unused rows per episode, none for `period = 1`).
//!
//! Lanes share no rows, so lane writers meet only on the tree (lock-free, `tree/atomic.rs`);
//! a lane writer waits only for samplers copying one of its own windows.

mod config;
mod gather;
mod sample;
mod save;
#[cfg(all(test, not(loom)))]
mod tests;

pub use config::{NStep, Padding, Partial, SequenceConfig, SequenceConfigBuilder};
pub use sample::{sequence_priorities, SequenceBatch};
#[cfg(loom)]
pub use save::SavedView;

use std::ops::Deref;

use crate::buffer::slot_buffer::{redraw, update_in_chunks, Candidate, SharedTree};
use crate::buffer::slots::Slots;
use crate::buffer::{Draw, Key, SampleMode, UpdateReport};
use crate::error::{Error, Result};
use crate::faults::Faults;
use crate::rate::{Admission, RateLimiter, RateStats, Wait};
use crate::rng::RandomSource;
use crate::storage::{ColumnData, ColumnRows, ColumnSlice, ColumnSliceMut, Storage};
use crate::sync::{AtomicF64, AtomicU64, Mutex, Ordering, UnsafeCell};
use crate::tree::AtomicSumTree;

/// A window's description, packed in one word beside its leaf: written by its lane's writer
/// before the leaf's epoch is published (Release), read by samplers that joined the leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WindowInfo {
    /// Steps of the episode in the window (`1..=W`).
    len: u32,
    /// Steps of the episode from the window's start, counted up to the reach (`1..=reach`):
    /// fewer than the reach only when the episode ended within it.
    to_end: u32,
    /// The episode terminated (not truncated) at step `start + to_end - 1`.
    terminal: bool,
    /// Steps of the episode before the window's start, at most `k - 1`.
    back: u32,
}

/// Bits of each count in a packed [`WindowInfo`] (`config::MAX_STEPS` fits).
const INFO_BITS: u32 = 20;
const INFO_MASK: u64 = (1 << INFO_BITS) - 1;

impl WindowInfo {
    fn pack(self) -> u64 {
        u64::from(self.len)
            | (u64::from(self.to_end) << INFO_BITS)
            | (u64::from(self.back) << (2 * INFO_BITS))
            | (u64::from(self.terminal) << (3 * INFO_BITS))
    }
    fn unpack(word: u64) -> WindowInfo {
        WindowInfo {
            len: (word & INFO_MASK) as u32,
            to_end: ((word >> INFO_BITS) & INFO_MASK) as u32,
            back: ((word >> (2 * INFO_BITS)) & INFO_MASK) as u32,
            terminal: word >> (3 * INFO_BITS) & 1 != 0,
        }
    }
}

struct RawColumn {
    base: *mut u8,
    row_bytes: usize,
}

/// The lanes' steps: one row per step of every lane (`lane x T + step mod T`), reached only
/// through raw pointers taken at construction.
struct StepRows {
    columns: Vec<RawColumn>,
    /// Owns the column allocations.
    storage: Storage,
    /// Loom-tracked stand-ins for the rows' bytes (zero-sized outside loom).
    cells: Box<[UnsafeCell<()>]>,
}

/// The part of a lane that its writer owns: where it is in its ring and its episode.
#[derive(Debug, Clone, Default)]
struct LaneCursor {
    /// The next step to write (lane-absolute; its row is `next mod T`).
    next: u64,
    /// The first step of the episode being written, if one is.
    episode: Option<u64>,
    /// The next window start not yet finished (installed or published empty).
    finished_to: u64,
    /// The next window start not yet retired.
    retired_to: u64,
    /// Windows waiting for `flush` (when the writer batches installs).
    staged: Vec<(u64, WindowInfo)>,
    closed: bool,
}

/// A lane's state behind its mutex.
#[derive(Debug, Default)]
struct LaneSlot {
    cursor: LaneCursor,
    /// A [`LaneWriter`] holds the lane.
    taken: bool,
}

/// A prioritized buffer of windows over lanes of steps (module doc). Shared by reference
/// between threads: one [`LaneWriter`] per lane, any number of samplers and updaters.
///
/// ```
/// use kary_replay::sequence::{SequenceBatch, SequenceBuffer, SequenceConfig};
/// use kary_replay::{DType, SampleMode, Schema, Xoshiro256};
///
/// let schema = Schema::new()
///     .column("obs", DType::F32, 2)
///     .column("reward", DType::F32, []);
/// let config = SequenceConfig::builder(1, 64, schema)
///     .nstep(3, 0.5, "reward")
///     .next_of("obs")
///     .build()?;
/// let buffer = SequenceBuffer::new(config)?;
/// let mut lane = buffer.lane(0)?;
/// for t in 0..4 {
///     let obs = [t as f32, 0.0];
///     lane.push(&[(&obs[..]).into(), (&[1.0f32][..]).into()])?;
/// }
/// lane.end_episode(&[(&[9.0f32, 9.0][..]).into()], false)?;
/// drop(lane);
///
/// let mut out = SequenceBatch::default();
/// let mut rng = Xoshiro256::new(7);
/// buffer.sample_into(8, 0.4, SampleMode::Independent, &mut rng, &mut out)?;
/// for b in 0..8 {
///     let start = out.columns[0].as_f32().unwrap()[b * 2] as usize;
///     // 3 rewards of 1 from steps 0 and 1, fewer after; only step 0's window ends before
///     // the terminal step 3, so only it bootstraps (with 0.5^3).
///     assert_eq!(out.returns[b], [1.75, 1.75, 1.5, 1.0][start]);
///     assert_eq!(out.discounts[b], if start == 0 { 0.125 } else { 0.0 });
/// }
/// # Ok::<(), kary_replay::Error>(())
/// ```
pub struct SequenceBuffer {
    config: SequenceConfig,
    tree: AtomicSumTree,
    /// One state word per leaf (window start); no columns.
    slots: Slots,
    /// One [`WindowInfo`] word per leaf.
    info: Box<[AtomicU64]>,
    rows: StepRows,
    /// Each lane's state: locked by its writer's calls, and by a save for its copy.
    lanes: Box<[Mutex<LaneSlot>]>,
    running_max: AtomicF64,
    /// One more than the largest insertion number installed (keys past it are refused).
    handed_out: AtomicU64,
    /// Windows installed holding a priority, minus those retired.
    live: AtomicU64,
    /// Steps written over all lanes.
    steps_written: AtomicU64,
    /// Set while a save copies (`save.rs`): priority updates wait.
    saving: AtomicU64,
    /// Priority updates in flight (`save.rs`).
    updating: AtomicU64,
    /// The rate limit's limiter, counting windows ([`SequenceConfigBuilder::rate_limit`]).
    rate: Option<RateLimiter>,
    faults: Faults,
}

// SAFETY: the raw row pointers point into `rows.storage`, which the buffer owns and never
// reallocates. A row is written only by its lane's writer (one `LaneCursor` per lane, taken
// out of its mutex by one `LaneWriter` at a time) after it has retired every window that
// reads the row (holding those leaves' writer flags, with their readers gone), and read
// only by a sampler holding a read reference on a window that covers it, installed after
// the row was written (module doc).
unsafe impl Send for SequenceBuffer {}
// SAFETY: as for `Send`.
unsafe impl Sync for SequenceBuffer {}

impl std::fmt::Debug for SequenceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequenceBuffer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl SequenceBuffer {
    /// An empty buffer: every lane at step 0, no window.
    pub fn new(config: SequenceConfig) -> Result<SequenceBuffer> {
        Self::with_faults_inner(config, Faults::none())
    }

    /// A buffer with deliberate protocol faults, for the loom models only.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn with_faults(config: SequenceConfig, faults: Faults) -> Result<SequenceBuffer> {
        Self::with_faults_inner(config, faults)
    }

    fn with_faults_inner(config: SequenceConfig, faults: Faults) -> Result<SequenceBuffer> {
        Self::with_rate_counts(config, faults, None)
    }

    /// A buffer whose rate limiter, if it has one, continues from `counts` (inserts,
    /// samples: a checkpoint's).
    fn with_rate_counts(
        mut config: SequenceConfig,
        faults: Faults,
        counts: Option<(u64, u64)>,
    ) -> Result<SequenceBuffer> {
        config.tree = config.tree.clone().tagged();
        let leaves = config.capacity();
        let rows_total = config
            .lanes
            .checked_mul(config.steps)
            .ok_or(Error::InvalidCapacity(usize::MAX))?;
        let mut storage = Storage::new(config.schema().clone(), rows_total)?;
        let columns = (0..config.schema().columns().len())
            .map(|c| {
                let spec = &config.schema().columns()[c];
                RawColumn {
                    row_bytes: spec.shape * spec.dtype.size(),
                    base: storage.column_base(c),
                }
            })
            .collect();
        let tree =
            <AtomicSumTree as SharedTree>::new(&config.tree, &mut crate::region::Region::Heap)?;
        let mut slots = Slots::words_only(leaves)?;
        slots.faults = faults;
        let running_max = config.tree.stored_priority(config.tree.initial_priority());
        let rate = crate::rate::rate_limiter_from(config.rate_limit(), counts)?;
        Ok(SequenceBuffer {
            tree,
            slots,
            info: (0..leaves).map(|_| AtomicU64::new(0)).collect(),
            rows: StepRows {
                columns,
                storage,
                cells: (0..rows_total).map(|_| UnsafeCell::new(())).collect(),
            },
            lanes: (0..config.lanes)
                .map(|_| Mutex::new(LaneSlot::default()))
                .collect(),
            running_max: AtomicF64::new(running_max),
            handed_out: AtomicU64::new(0),
            live: AtomicU64::new(0),
            steps_written: AtomicU64::new(0),
            saving: AtomicU64::new(0),
            updating: AtomicU64::new(0),
            rate,
            faults,
            config,
        })
    }

    /// The configuration (with the key tag the buffer drew).
    pub fn config(&self) -> &SequenceConfig {
        &self.config
    }

    /// Take lane `lane`'s writer. One writer per lane at a time
    /// ([`Error::InvalidSequence`] while another holds it); dropping the writer gives the
    /// lane back where it stands, episode and all.
    pub fn lane(&self, lane: usize) -> Result<LaneWriter<&SequenceBuffer>> {
        LaneWriter::take(self, lane)
    }

    /// [`SequenceBuffer::lane`] holding the buffer through a shared pointer (an `Arc`), for
    /// a writer that moves to its own thread or lives in another language's object.
    pub fn lane_shared<B: Deref<Target = SequenceBuffer>>(
        buffer: B,
        lane: usize,
    ) -> Result<LaneWriter<B>> {
        LaneWriter::take(buffer, lane)
    }

    /// The rate limiter, when the configuration has a rate limit: its
    /// [`stats`](RateLimiter::stats) count windows.
    pub fn rate_limiter(&self) -> Option<&RateLimiter> {
        self.rate.as_ref()
    }

    /// The rate limiter's counts and state, when there is one.
    pub fn rate_stats(&self) -> Option<RateStats> {
        self.rate.as_ref().map(RateLimiter::stats)
    }

    /// Close the rate limiter: every lane call and sample waiting for it, and every later
    /// one, fails with [`Error::Closed`] (how a trainer stops its actors and learners). A
    /// buffer without a rate limit has nothing to close.
    pub fn close(&self) {
        if let Some(rate) = &self.rate {
            rate.close();
        }
    }

    /// Windows that can be sampled now (installed with a priority, not yet retired; a
    /// window whose priority was updated to 0 still counts).
    pub fn len(&self) -> usize {
        // ORDERING: Relaxed: a count with no data attached.
        self.live.load(Ordering::Relaxed) as usize
    }

    /// Whether no window can be sampled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Steps written over all lanes (final-observation rows included).
    pub fn steps_written(&self) -> u64 {
        // ORDERING: Relaxed: a count.
        self.steps_written.load(Ordering::Relaxed)
    }

    /// How far the tree's sums are from their children's (exact at rest).
    pub fn consistency(&self) -> crate::tree::Consistency {
        self.tree.check()
    }

    /// Sum of the stored priorities.
    pub fn total(&self) -> f64 {
        self.tree.total()
    }

    /// Bytes held: the lanes' steps, the tree, the state and description words.
    pub fn memory_bytes(&self) -> usize {
        self.rows.storage.memory_bytes()
            + self.tree.memory_bytes()
            + self.slots.memory_bytes()
            + self.info.len() * std::mem::size_of::<AtomicU64>()
    }

    /// The stored priority of leaf `index` (0 for a window not sampleable).
    pub fn priority(&self, index: usize) -> Result<f64> {
        if index >= self.config.capacity() {
            return Err(Error::OutOfRange {
                index,
                capacity: self.config.capacity(),
            });
        }
        Ok(self.tree.get(index))
    }

    /// The key of the window leaf `index` holds now, if it holds one that can be sampled
    /// (installed, not retired).
    pub fn key(&self, index: usize) -> Result<Option<Key>> {
        self.priority(index)?;
        let state = self.slots.state(index);
        Ok(match state.writing() {
            true => None,
            false => (self.slots.generation(index, state))
                .map(|generation| self.config.tree.key(index, generation)),
        })
    }

    /// The lane and first step (lane-absolute) of the window `key` names, whether or not it
    /// is still stored; [`Error::OutOfRange`] for a key no buffer of this shape makes.
    pub fn window_of(&self, key: Key) -> Result<(usize, u64)> {
        let leaves = self.config.capacity();
        if key.index >= leaves {
            return Err(Error::OutOfRange {
                index: key.index,
                capacity: leaves,
            });
        }
        Ok(self.locate(key.index, key.insertion() / leaves as u64))
    }

    /// The lane and first step of the window of leaf `leaf` in lap `lap`.
    fn locate(&self, leaf: usize, lap: u64) -> (usize, u64) {
        let per_lane = self.config.starts_per_lane();
        let lane = leaf / per_lane;
        let start =
            lap * self.config.steps as u64 + ((leaf % per_lane) * self.config.period) as u64;
        (lane, start)
    }

    /// The leaf and lap of lane `lane`'s window starting at step `start`.
    fn leaf_of(&self, lane: usize, start: u64) -> (usize, u64) {
        let steps = self.config.steps as u64;
        let per_lane = self.config.starts_per_lane();
        let leaf = lane * per_lane + ((start % steps) as usize) / self.config.period;
        (leaf, start / steps)
    }

    /// Set the priorities of the windows `keys` name (raw priorities, raised to alpha here).
    /// Keys of windows retired since are counted stale; a key no buffer of this
    /// configuration handed out is refused and nothing changes ([`Error::InvalidKey`]), as is
    /// a bad priority ([`Error::InvalidPriority`]).
    pub fn update_priorities(&self, keys: &[Key], priorities: &[f64]) -> Result<UpdateReport> {
        // ORDERING: Relaxed: a key is valid if its window was installed at all.
        let handed_out = self.handed_out.load(Ordering::Relaxed);
        self.config
            .tree
            .check_update(keys, priorities, handed_out)?;
        let _updating = self.enter_update();
        let (report, max_applied) =
            update_in_chunks(&self.config.tree, &self.tree, &self.slots, keys, priorities);
        if report.applied > 0 {
            // ORDERING: Relaxed: a single value with no data attached.
            self.running_max.fetch_max(max_applied, Ordering::Relaxed);
        }
        Ok(report)
    }
}

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
    fn take(buffer: B, lane: usize) -> Result<LaneWriter<B>> {
        let lanes = buffer.config.lanes;
        let Some(slot) = buffer.lanes.get(lane) else {
            return Err(Error::OutOfRange {
                index: lane,
                capacity: lanes,
            });
        };
        let mut slot = crate::sync::lock(slot);
        if slot.taken {
            return Err(Error::InvalidSequence(format!(
                "lane {lane} already has a writer"
            )));
        }
        slot.taken = true;
        drop(slot);
        Ok(LaneWriter {
            buffer,
            lane,
            batch: 1,
        })
    }

    /// Run `f` on the lane, its state locked.
    fn with<R>(&self, f: impl FnOnce(&mut Lane<'_>) -> R) -> R {
        let buffer = &*self.buffer;
        let mut slot = crate::sync::lock(&buffer.lanes[self.lane]);
        f(&mut Lane {
            buffer,
            lane: self.lane,
            cursor: &mut slot.cursor,
            batch: self.batch,
        })
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
        let mut slot = crate::sync::lock(&self.buffer.lanes[self.lane]);
        Lane {
            buffer: &self.buffer,
            lane: self.lane,
            cursor: &mut slot.cursor,
            batch: self.batch,
        }
        .flush();
        slot.taken = false;
    }
}

/// A lane's state, locked, with the buffer it belongs to: what a [`LaneWriter`]'s calls
/// (and a save's flush) work on.
struct Lane<'a> {
    buffer: &'a SequenceBuffer,
    lane: usize,
    cursor: &'a mut LaneCursor,
    batch: usize,
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
        let reach = self.buffer.config.reach() as u64;
        u64::from(self.cursor.finished_to + reach == self.cursor.next)
    }

    /// The windows `end_episode` completes with an item (the rest, cut short under
    /// [`Partial::Drop`], are published empty): every start not finished up to the last
    /// step, or up to the last one that leaves a whole window.
    fn completed_by_end(&self) -> u64 {
        let config = &self.buffer.config;
        let next = self.cursor.next;
        let last_kept = match config.partial {
            Partial::Keep => next.checked_sub(1),
            Partial::Drop => next.checked_sub(config.window as u64),
        };
        match last_kept {
            Some(last) if last >= self.cursor.finished_to => {
                (last - self.cursor.finished_to) / config.period as u64 + 1
            }
            _ => 0,
        }
    }
    /// Install every window staged by a batch (see [`LaneWriter::set_batch`]).
    fn flush(&mut self) {
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
        buffer.rows.cells[row].with_mut(|_| write(buffer, row));
        // ORDERING: Relaxed: a count.
        buffer.steps_written.fetch_add(1, Ordering::Relaxed);
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
            if held {
                // ORDERING: Relaxed: a count.
                buffer.live.fetch_sub(1, Ordering::Relaxed);
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
    fn install(&self, windows: &[(u64, WindowInfo)]) {
        if windows.is_empty() {
            return;
        }
        let buffer = self.buffer;
        // ORDERING: Relaxed: a single value with no data attached.
        let priority = buffer.running_max.load(Ordering::Relaxed);
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
            .handed_out
            .fetch_max(max_generation + 1, Ordering::Relaxed);
        buffer
            .live
            .fetch_add(windows.len() as u64, Ordering::Relaxed);
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
