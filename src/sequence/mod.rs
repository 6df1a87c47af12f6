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
pub(crate) mod config_json;
mod gather;
mod lane;
mod sample;
mod save;
mod shared;
#[cfg(all(test, not(loom)))]
mod tests;

pub use config::{NStep, Padding, Partial, SequenceConfig, SequenceConfigBuilder};
use lane::Lane;
pub use lane::LaneWriter;
pub use sample::{sequence_priorities, SequenceBatch};
#[cfg(loom)]
pub use save::SavedView;
pub use shared::SequenceRef;
#[cfg(all(unix, not(loom)))]
pub use shared::ShmSequenceBuffer;

use std::ops::Deref;

use crate::buffer::protocol::{read_priorities, redraw, update_in_chunks, Candidate, SharedTree};
#[cfg(any(loom, feature = "kill-points"))]
use crate::buffer::slots::ReadMode;
use crate::buffer::slots::Slots;
use crate::buffer::{Draw, Key, SampleMode, Stats, UpdateReport};
use crate::error::{Error, Result};
use crate::faults::Faults;
use crate::rate::{Admission, RateLimiter, Wait};
use crate::region::{Region, RegionBox, RegionBuf};
use crate::rng::RandomSource;
use crate::storage::{ColumnData, ColumnRows, ColumnSliceMut, Storage};
use crate::sync::CachePadded;
use crate::sync::{AtomicF64, AtomicU64, Mutex, Ordering, UnsafeCell};
use crate::tree::AtomicSumTree;
use shared::LaneWords;

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

/// The counters of a [`SequenceBuffer`], one value in its region (`region.rs`): in a
/// shared mapping every process counts with the same atomics. `repr(C)`: the same offsets in
/// every process of one build.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Counters {
    running_max: CachePadded<AtomicF64>,
    /// One more than the largest insertion number installed (keys past it are refused).
    handed_out: AtomicU64,
    /// Windows installed holding a priority, minus those retired (on the heap; a shared
    /// buffer counts per lane, in its lanes' words).
    live: AtomicU64,
    /// Steps written over all lanes.
    steps_written: AtomicU64,
    /// Set while a save copies (`save.rs`): priority updates wait.
    saving: CachePadded<AtomicU64>,
    /// Priority updates in flight (`save.rs`).
    updating: CachePadded<AtomicU64>,
}

// SAFETY: atomics only.
unsafe impl crate::region::Shareable for Counters {}

struct RawColumn {
    base: *mut u8,
    row_bytes: usize,
}

/// The lanes' steps: one row per step of every lane (`lane x T + step mod T`), reached only
/// through raw pointers taken at construction.
struct StepRows {
    columns: Vec<RawColumn>,
    /// Owns the column allocations on the heap (the schema alone in a mapping).
    storage: Storage,
    /// The columns' bytes in a mapping (none on the heap).
    _mapped: Vec<RegionBuf<u8>>,
    /// Loom-tracked stand-ins for the rows' bytes (zero-sized outside loom), counted mode.
    cells: Box<[UnsafeCell<()>]>,
    /// Zeros of the longest row: what an optimistic writer stores for the columns a
    /// final-observation row does not hold (its stores are atomic, from a source).
    zeros: Box<[u8]>,
    /// Under loom, optimistic mode's stand-in for a row's bytes: one more than the step its
    /// last writer wrote, stored and loaded as a sequence lock's data, so that a model finds
    /// a window kept while a writer was overwriting one of its rows.
    #[cfg(loom)]
    tokens: Box<[AtomicU64]>,
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
    /// Windows of the lane installed holding a priority, not retired (what a shared
    /// buffer's `len` sums).
    live: u64,
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
    info: RegionBuf<AtomicU64>,
    rows: StepRows,
    /// Each lane's state in this process: locked by its writer's calls, and by a save for
    /// its copy.
    lanes: Box<[Mutex<LaneSlot>]>,
    /// Each lane's words (`shared.rs`): where its cursor lives between calls, its writer's
    /// participant and the lock of a call in flight, when the buffer is shared by processes.
    lane_words: RegionBuf<CachePadded<LaneWords>>,
    /// Whether the buffer runs as one participant of a mapping shared by processes: lanes
    /// are taken, locked and kept in `lane_words`, and windows in flight are recovered
    /// when a participant dies.
    shared: bool,
    /// The buffer's counters, in the same region as the tree and the words.
    counters: RegionBox<Counters>,
    /// The rate limit's limiter, counting windows ([`SequenceConfigBuilder::rate_limit`]).
    rate: Option<RateLimiter>,
    /// In a shared mapping, this participant's records (its priority updates in flight);
    /// none on the heap.
    journal: Option<crate::buffer::reservations::Journal>,
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

    /// A buffer whose samplers copy windows optimistically, as a sequence lock's readers
    /// (atomic copies kept only if the window's leaf is unchanged after them: the mode of a
    /// mapping shared by processes), for the models and the tests of that mode.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn with_faults_optimistic(
        config: SequenceConfig,
        faults: Faults,
    ) -> Result<SequenceBuffer> {
        let mut buffer = Self::with_faults_inner(config, faults)?;
        buffer.slots.set_mode(ReadMode::Optimistic { owner: 1 });
        Ok(buffer)
    }

    /// [`SequenceBuffer::new`] with optimistic samplers (see `with_faults_optimistic`), for
    /// the tests of that mode.
    #[cfg(any(feature = "kill-points", loom))]
    #[doc(hidden)]
    pub fn optimistic_for_tests(config: SequenceConfig) -> Result<SequenceBuffer> {
        let mut buffer = Self::with_faults_inner(config, Faults::none())?;
        buffer.slots.set_mode(ReadMode::Optimistic { owner: 1 });
        Ok(buffer)
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
        let mut buffer = Self::in_region(config, counts, &mut Region::Heap)?;
        buffer.slots.faults = faults;
        buffer.faults = faults;
        Ok(buffer)
    }

    /// The buffer for `config` (tagged already) with its arrays from `region`: the state
    /// words, the tree, the description words, the lanes' words, the counters, the rate
    /// limiter's words and the columns, in that order (a mapping's offsets follow from it).
    pub(crate) fn in_region(
        config: SequenceConfig,
        counts: Option<(u64, u64)>,
        region: &mut Region,
    ) -> Result<SequenceBuffer> {
        let leaves = config.capacity();
        let rows_total = config
            .lanes
            .checked_mul(config.steps)
            .ok_or(Error::InvalidCapacity(usize::MAX))?;
        let slots = Slots::words_in(leaves, region)?;
        let tree = <AtomicSumTree as SharedTree>::new(&config.tree, region)?;
        let info = region.alloc(leaves, 128, || AtomicU64::new(0))?;
        let lane_words = region.alloc(config.lanes, 128, || CachePadded::new(LaneWords::new()))?;
        let running_max = config.tree.stored_priority(config.tree.initial_priority());
        let counters = region.alloc_one(
            128,
            Counters {
                running_max: CachePadded::new(AtomicF64::new(running_max)),
                handed_out: AtomicU64::new(0),
                live: AtomicU64::new(0),
                steps_written: AtomicU64::new(0),
                saving: CachePadded::new(AtomicU64::new(0)),
                updating: CachePadded::new(AtomicU64::new(0)),
            },
        )?;
        let rate = crate::rate::rate_limiter_in(config.rate_limit(), counts, region)?;
        let schema = config.schema().clone();
        let (mut storage, mut mapped) = match region.is_heap() {
            true => (Storage::new(schema, rows_total)?, Vec::new()),
            false => (Storage::schema_only(schema, rows_total), Vec::new()),
        };
        if !region.is_heap() {
            for c in config.schema().columns() {
                let bytes = (c.shape * c.dtype.size())
                    .checked_mul(rows_total)
                    .ok_or(Error::Allocation { bytes: usize::MAX })?;
                mapped.push(
                    region
                        .alloc_zeroed_bytes(bytes, 128)?
                        .expect("a region that is not the heap maps its columns"),
                );
            }
        }
        let columns: Vec<RawColumn> = (0..config.schema().columns().len())
            .map(|c| {
                let spec = &config.schema().columns()[c];
                RawColumn {
                    row_bytes: spec.shape * spec.dtype.size(),
                    // Reached only through this pointer from now on.
                    base: match mapped.get(c) {
                        Some(bytes) => bytes.as_ptr().cast_mut(),
                        None => storage.column_base(c),
                    },
                }
            })
            .collect();
        Ok(SequenceBuffer {
            tree,
            slots,
            info,
            rows: StepRows {
                zeros: vec![0; columns.iter().map(|c| c.row_bytes).max().unwrap_or(0)]
                    .into_boxed_slice(),
                columns,
                storage,
                _mapped: mapped,
                cells: (0..rows_total).map(|_| UnsafeCell::new(())).collect(),
                #[cfg(loom)]
                tokens: (0..rows_total).map(|_| AtomicU64::new(0)).collect(),
            },
            lanes: (0..config.lanes)
                .map(|_| Mutex::new(LaneSlot::default()))
                .collect(),
            lane_words,
            shared: false,
            counters,
            rate,
            journal: None,
            faults: Faults::none(),
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

    crate::rate::rate_limit_methods!(pub);

    /// Windows that can be sampled now (installed with a priority, not yet retired; a
    /// window whose priority was updated to 0 still counts).
    pub fn len(&self) -> usize {
        if self.shared {
            return self.shared_len();
        }
        // ORDERING: Relaxed: a count with no data attached.
        self.counters.live.load(Ordering::Relaxed) as usize
    }

    /// Whether no window can be sampled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Steps written over all lanes (final-observation rows included).
    pub fn steps_written(&self) -> u64 {
        // ORDERING: Relaxed: a count.
        self.counters.steps_written.load(Ordering::Relaxed)
    }

    /// How far the tree's sums are from their children's (exact at rest).
    pub fn consistency(&self) -> crate::tree::Consistency {
        self.tree.check()
    }

    /// Sum of the stored priorities.
    pub fn total(&self) -> f64 {
        self.tree.total()
    }

    /// The counts every family reports ([`Stats`]), in windows: `len` windows sampleable,
    /// `capacity` leaves, `inserted` insertion numbers handed out (one past the largest
    /// installed), the total and the smallest positive stored priority, the running maximum
    /// a new window gets.
    pub fn stats(&self) -> Stats {
        Stats {
            total: self.tree.total(),
            len: self.len(),
            capacity: self.config.capacity(),
            // ORDERING: Relaxed: a count.
            inserted: self.counters.handed_out.load(Ordering::Relaxed),
            min_positive: self.tree.min_positive(),
            // ORDERING: Relaxed: a single value with no data attached.
            running_max: self.counters.running_max.load(Ordering::Relaxed),
        }
    }

    /// Bytes held: the lanes' steps, the tree, the state and description words.
    pub fn memory_bytes(&self) -> usize {
        self.rows.storage.memory_bytes()
            + self.tree.memory_bytes()
            + self.slots.memory_bytes()
            + self.info.len() * std::mem::size_of::<AtomicU64>()
            + self.lane_words.len() * std::mem::size_of::<CachePadded<LaneWords>>()
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
        self.check_update(keys, priorities)?;
        let _updating = self.enter_update();
        let alpha = self.config.tree.alpha();
        let (report, max_applied) =
            update_in_chunks(alpha, None, &self.tree, &self.slots, keys, priorities);
        if report.applied > 0 {
            // The running maximum is a stored priority here: the power of the largest raw
            // one applied (the power is monotone).
            let max_stored = self.config.tree.stored_priority(max_applied);
            // ORDERING: Relaxed: a single value with no data attached.
            self.counters
                .running_max
                .fetch_max(max_stored, Ordering::Relaxed);
        }
        Ok(report)
    }

    /// The stored priorities of the windows `keys` name, one per key into `out` (cleared
    /// first), each read while its window is sampleable: NaN for a key of a window retired
    /// since; returns how many were. A key no buffer of this configuration handed out is
    /// refused ([`Error::InvalidKey`]) and `out` left empty.
    pub fn priorities_of(&self, keys: &[Key], out: &mut Vec<f64>) -> Result<usize> {
        out.clear();
        // ORDERING: Relaxed, as in `check_update`.
        let handed_out = self.counters.handed_out.load(Ordering::Relaxed);
        self.config.tree.check_keys(keys, handed_out)?;
        read_priorities(|slot| self.tree.get(slot), &self.slots, keys, out)
    }

    /// The checks of [`SequenceBuffer::update_priorities`] alone: `Ok` when it would accept
    /// `keys` and `priorities` now (a coordinator of shards checks every shard's part before
    /// any applies).
    pub fn check_update(&self, keys: &[Key], priorities: &[f64]) -> Result<()> {
        // ORDERING: Relaxed: a key is valid if its window was installed at all.
        let handed_out = self.counters.handed_out.load(Ordering::Relaxed);
        self.config.tree.check_update(keys, priorities, handed_out)
    }
}
