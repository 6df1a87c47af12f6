//! The part of `SplitLock` and `LockFree` that does not depend on how the tree is shared:
//! the FIFO cursor, lazy writing, the sampler's retry loop and the update validation.
//!
//! A variant supplies a [`SharedTree`]: how to set a leaf owned by a writer, how to apply
//! updates with the key check atomic against writers, and how to turn prefix targets into
//! candidates `(index, priority, slot state)` that were consistent at one instant.
//!
//! Insert (lazy writing, the paper's algorithm 3, plus the slot protocol of `slots/`),
//! batch-aware: `insert` is a batch of one, `insert_batch` goes in chunks of up to
//! `WRITE_CHUNK` items (`write_chunk`):
//! 1. take the chunk's generations `g..g + n` from the cursor (one `fetch_add` for the
//!    whole `insert_batch`): slots `g % capacity ..`;
//! 2. own each slot for its epoch, in generation order (waits for the slot's previous
//!    writer and its readers);
//! 3. set their leaves to 0, so samplers stop choosing them (`SharedTree::retire_owned`):
//!    for SplitLock one tree operation (one acquisition of its locks); for LockFree the
//!    leaves alone, their ancestors left to step 5's climb (`lock_free.rs`, "Lazy writing
//!    without a retire climb"). A leaf that holds its new priority already, bit for bit,
//!    is left alone: LockFree's writer skips steps 3 and 5 for it, SplitLock's retire
//!    decides under its tree lock ("Leaves that do not change" in both files);
//! 4. copy the items, holding no tree lock;
//! 5. set their real priorities (one tree operation: for LockFree one climb that refreshes
//!    each touched ancestor once), then publish each slot (the linearization point of its
//!    item).
//!
//! An insert linearizes at step 5's publication. Between steps 3 and 5 the evicted item's
//! leaf is 0 (or kept, its slot refusing samplers) and the new one not yet in it; a sample
//! that finds the whole tree at 0 then (capacity 1, or every slot in flight, on SplitLock;
//! on LockFree a chunk that retires its first slot with a climb, as LiveMax's default
//! priority does, or a clear) sees
//! `completed != cursor`, so it retries and at last returns `Error::Contention`:
//! `ZeroTotalPriority` only when no write was in flight, i.e. every stored priority really
//! was 0.
//!
//! Sample: candidates come from the tree; each is taken only if the slot can be joined as a
//! reader in the very state seen with its priority (same epoch, no writer), which proves the
//! priority belonged to the item copied (runs of up to `READ_RUN` candidates are joined,
//! copied, then left together). Otherwise that one item is drawn again after a
//! `spin_wait`, at most `MAX_ATTEMPTS` times: in its own stratum for the first
//! `STRATUM_ATTEMPTS` redraws, then over the whole range (an independent draw: a stratum
//! covered by a slot in flight must not make the sample fail). Only a sample that met a
//! slot in flight is affected, and its item is still drawn in proportion to priority.
//!
//! Save (a checkpoint, `snapshot`): the buffer's state at one instant while its threads
//! run. The saver sets `SAVING` in the cursor (a `fetch_or`), which freezes the generations
//! handed out at C: a writer whose `fetch_add` returns the flag keeps its generations but
//! waits before it owns a slot, so nothing at or past C is written (until a later save,
//! which froze the cursor past its generations and so waits for it, lets it go: a writer
//! that overslept one save must not wait for the next). Priority updates and
//! clears enter through `updating` (increment, then read the cursor, both read-modify-writes)
//! and back out while the flag is set; the saver reads `updating` with a read-modify-write
//! after its `fetch_or`, so either the update sees the flag or the saver sees the update
//! and waits for it (an argument from the cursor's modification order alone, which loom
//! checks exactly). The
//! saver then waits until the `C` generations are completed (or burnt at the end of life)
//! and no update is in flight, copies leaves, state words and columns, and clears the flag.
//! Samplers never wait for a save: they only read. The copy is the state after exactly the
//! first C inserts and every update that completed before the flag.
//!
//! The files: `shared_tree.rs` (what a variant supplies), `insert.rs` (lazy writing),
//! `draw.rs` (the sampler's descent and retries), `save.rs` (the save pause and restore),
//! `types.rs` (the public types over this one), and the tests.

mod draw;
mod insert;
mod save;
#[cfg(all(test, not(loom)))]
mod tests;
mod types;

use super::protocol::{
    read_priorities, update_in_chunks, DrawCounts, Passes, RawPriorities, SharedTree, MAX_ATTEMPTS,
};
pub(crate) use types::slot_buffer_type;

use std::time::Instant;

use crate::rng::RandomSource;

use super::slots::Slots;
use super::{
    check_request, ConcurrentBuffer, Config, Descent, Draw, Key, Rows, SampleBatch, Stats,
    UpdateReport,
};
use crate::error::{Error, Result};
use crate::rate::{Admission, RateLimiter, Wait};
use crate::region::{Region, RegionBox};
use crate::storage::{ColumnData, ColumnSlice};
use crate::sync::{AtomicF64, AtomicU64, CachePadded, Ordering};
use crate::tree::Consistency;

/// The most read references a sampler holds at once: the slots of one run of candidates,
/// joined, copied and left together (see `sample_in_spare`).
const READ_RUN: usize = 64;

/// Items one batch writer owns and installs together (`SlotBuffer::write_chunk`): the size
/// of its stack arrays, and the most entries [`SharedTree::set_owned`] gets at a time.
pub(crate) const WRITE_CHUNK: usize = crate::tree::SET_MANY_MAX;

/// Set in the cursor while a save copies the buffer (module doc, "Save"); generations stay
/// far below it (2^63 inserts).
pub(crate) const SAVING: u64 = 1 << 63;

/// The concurrent buffer with lazy writing: slots with a state word each (`slots/`) and a
/// shared tree `T`, which is what tells the variants apart. Users name it through the
/// types over it, [`SplitLockBuffer`](super::SplitLockBuffer) (`T` = the split-lock tree)
/// and [`LockFreeBuffer`](super::LockFreeBuffer) (`T` = the atomic tree), and use it through
/// [`ConcurrentBuffer`].
#[derive(Debug)]
pub struct SlotBuffer<T> {
    config: Config,
    pub(crate) tree: T,
    pub(crate) slots: Slots,
    /// The buffer's counters, in the same region as the tree and the slots.
    pub(crate) counters: RegionBox<Counters>,
    /// The configuration's rate limiter: every insert and sample is admitted by it after
    /// its checks and before it touches the cursor, a slot or the tree.
    rate: Option<RateLimiter>,
    /// In a shared mapping, this participant's records of reserved generations (`shm`);
    /// none on the heap.
    pub(crate) journal: Option<crate::buffer::reservations::Journal>,
    /// The draws of each slot's item, when the configuration retires items after
    /// `max_times_sampled` draws (`protocol::DrawCounts`).
    pub(crate) draws: Option<DrawCounts>,
    /// The shuffled passes (`protocol::Passes`): on the heap only, so none in a shared
    /// mapping, which refuses the mode.
    pub(crate) passes: Option<Passes>,
    /// Each slot's raw priority, for `set_alpha` (`protocol::RawPriorities`).
    pub(crate) raw: RawPriorities,
}

/// The counters of a [`SlotBuffer`], one value in its region (`region.rs`): in a shared
/// mapping every process counts with the same atomics. `repr(C)`: the same offsets in
/// every process of one build.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Counters {
    /// Generations handed out: the FIFO cursor.
    pub(crate) cursor: CachePadded<AtomicU64>,
    /// Inserts completed.
    pub(crate) completed: CachePadded<AtomicU64>,
    /// `completed` when the last [`ConcurrentBuffer::clear`] began (read by `len`).
    pub(crate) completed_before_clear: AtomicU64,
    /// Generations handed out that no write will complete (refused at the end of life
    /// and not given back, or recovered from a dead process): a save counts them with
    /// `completed`.
    pub(crate) burnt: AtomicU64,
    /// Priority updates and clears in flight (module doc, "Save").
    pub(crate) updating: CachePadded<AtomicU64>,
    /// The generation a save in progress froze the cursor at (the last save's, after it).
    pub(crate) saving_from: AtomicU64,
    /// Largest raw priority given so far (RunningMax: its power under the alpha now is the
    /// default priority).
    pub(crate) running_max: CachePadded<AtomicF64>,
    /// The priority exponent now: the configuration's until a `set_alpha`, which changes it
    /// only while the buffer is paused as for a save.
    pub(crate) alpha: AtomicF64,
    /// A FIFO draw's start: every generation below it is gone for good (overwritten or
    /// emptied), so a draw of the oldest item skips them (`draw.rs`, `sample_ordered`).
    pub(crate) oldest: CachePadded<AtomicU64>,
    /// The policy-version floor ([`ConcurrentBuffer::retire_before`]), as
    /// [`Counters::floor_word`] encodes it (0: none; the word only grows).
    pub(crate) version_floor: AtomicU64,
}

impl Counters {
    /// `floor` as an unsigned word whose order is the versions' order (i64::MIN is 0).
    pub(crate) fn floor_word(floor: i64) -> u64 {
        (floor as u64) ^ (1 << 63)
    }

    /// The floor now ([`Counters::floor_word`] undone).
    pub(crate) fn floor(&self, order: Ordering) -> i64 {
        (self.version_floor.load(order) ^ (1 << 63)) as i64
    }
}

// SAFETY: atomics only.
unsafe impl crate::region::Shareable for Counters {}

impl<T: SharedTree> SlotBuffer<T> {
    /// A buffer with deliberate protocol faults, for the loom models only.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn with_faults(config: Config, faults: crate::faults::Faults) -> Result<Self> {
        let mut buffer = Self::new(config)?;
        buffer.slots.faults = faults;
        buffer.tree.inject_faults(&faults);
        if let Some(draws) = &mut buffer.draws {
            draws.inject_faults(&faults);
        }
        buffer.raw.inject_faults(&faults);
        Ok(buffer)
    }

    /// The ring's newest generations that may hold an item: the inserts completed since the
    /// last clear, at most the capacity. `len` is this less the items deleted by key.
    pub(crate) fn span(&self) -> usize {
        // ORDERING: Relaxed: a count with no data attached.
        let completed = self.counters.completed.load(Ordering::Relaxed);
        // ORDERING: Relaxed, as above.
        let before_clear = self.counters.completed_before_clear.load(Ordering::Relaxed);
        completed
            .saturating_sub(before_clear)
            .min(self.slots.capacity() as u64) as usize
    }

    /// `value^alpha` under the alpha now.
    #[inline]
    pub(crate) fn stored(&self, value: f64) -> f64 {
        super::stored_at(self.alpha(), value)
    }

    fn check_index(&self, index: usize) -> Result<()> {
        if index >= self.slots.capacity() {
            return Err(Error::OutOfRange {
                index,
                capacity: self.slots.capacity(),
            });
        }
        Ok(())
    }
}

impl<T: SharedTree> SlotBuffer<T> {
    /// The buffer for `config` (tagged already), its slots, tree and counters from
    /// `region`, in that order (a mapping's offsets follow from it).
    pub(crate) fn in_region(config: Config, region: &mut Region) -> Result<Self> {
        let slots = Slots::in_region(config.schema().clone(), config.capacity(), region)?;
        let tree = T::new(&config, region)?;
        let counters = region.alloc_one(
            128,
            Counters {
                cursor: CachePadded::new(AtomicU64::new(0)),
                completed: CachePadded::new(AtomicU64::new(0)),
                completed_before_clear: AtomicU64::new(0),
                burnt: AtomicU64::new(0),
                updating: CachePadded::new(AtomicU64::new(0)),
                saving_from: AtomicU64::new(0),
                running_max: CachePadded::new(AtomicF64::new(config.initial_priority())),
                alpha: AtomicF64::new(config.alpha()),
                oldest: CachePadded::new(AtomicU64::new(0)),
                version_floor: AtomicU64::new(Counters::floor_word(i64::MIN)),
            },
        )?;
        let rate = crate::rate::rate_limiter_in(config.rate_limit(), None, region)?;
        let draws = DrawCounts::in_region(config.max_times_sampled(), config.capacity(), region)?;
        let passes = matches!(region, Region::Heap).then(Passes::default);
        let raw = RawPriorities::in_region(config.capacity(), region)?;
        Ok(SlotBuffer {
            config,
            tree,
            slots,
            counters,
            rate,
            journal: None,
            draws,
            passes,
            raw,
        })
    }
}

impl<T: SharedTree> ConcurrentBuffer for SlotBuffer<T> {
    fn new(config: Config) -> Result<Self> {
        SlotBuffer::in_region(config.tagged(), &mut Region::Heap)
    }

    fn config(&self) -> &Config {
        &self.config
    }

    fn insert_waiting(
        &self,
        columns: &[ColumnSlice<'_>],
        priority: Option<f64>,
        wait: Wait,
    ) -> Result<Key> {
        self.config
            .check_insert(self.slots.count_items(columns)?, priority)?;
        // ORDERING: Relaxed, as in `insert_batch_waiting`.
        (self.config).check_versions(columns, 1, self.counters.floor(Ordering::Relaxed))?;
        let admission = Admission::insert(self.rate.as_ref(), 1, wait)?;
        let record = self.journal.as_ref().map(|j| j.claim());
        let first = self.reserve(1, record.as_ref());
        let first = admission.settle(first)?;
        let mut key = None;
        let priority = priority.as_ref().map(std::slice::from_ref);
        // SAFETY: `count_items` checked `columns` above and `check_insert` found one item.
        unsafe {
            self.write_chunk::<1>(first, columns, 0, 1, priority, &mut None, |k| key = Some(k))
        };
        Ok(key.expect("a chunk of one item yields one key"))
    }

    fn insert_batch_waiting(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
        wait: Wait,
    ) -> Result<()> {
        let items = self.slots.count_items(columns)?;
        self.config.check_batch_priorities(items, priorities)?;
        // ORDERING: Relaxed: a refusal up front; the check that makes the floor exact is
        // made again with the slots owned (`write_chunk`).
        (self.config).check_versions(columns, items, self.counters.floor(Ordering::Relaxed))?;
        crate::mem::reserve(keys, keys.len().saturating_add(items))?;
        let admission = Admission::insert(self.rate.as_ref(), items, wait)?;
        // SAFETY: `count_items` checked `columns` above and returned `items`.
        admission.settle(unsafe { self.write_all(columns, items, priorities, keys) })
    }

    /// Sample into `out`, built in `out`'s spare ([`SampleBatch::build_with`]): a failed call
    /// leaves `out` as it was, and a warm `out` never allocates.
    fn sample_waiting(
        &self,
        draw: Draw<'_>,
        rows: Rows<'_, '_>,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        wait: Wait,
    ) -> Result<Descent> {
        let limited = Admission::limited(self.rate.as_ref());
        let started = limited.then(Instant::now);
        // With a limit, `Empty` is a wait for the first inserts, after the admission.
        let len = if limited { 1 } else { self.len() };
        check_request(&draw, &rows, len, &self.config)?;
        let batch = draw.len();
        let admission = Admission::sample(self.rate.as_ref(), batch, wait)?;
        admission.until_filled(wait, started, || self.len() > 0)?;
        let result = match rows {
            Rows::Owned => out.build_with(true, |spare, drawn| {
                // Taken out for the call (no allocation) so that the rows and the rest of
                // the spare batch can be borrowed apart.
                let mut columns = std::mem::take(&mut spare.columns);
                let result = self.slots.shape_output(batch, &mut columns).and_then(|()| {
                    // SAFETY: `shape_output` just shaped `columns` for `batch` rows.
                    unsafe { self.sample_in_spare(draw, rng, spare, drawn, &mut columns[..]) }
                });
                spare.columns = columns;
                result
            }),
            Rows::Into(columns) => out.build_with(false, |spare, drawn| {
                // SAFETY: `check_request` checked `columns` for `batch` rows above.
                unsafe { self.sample_in_spare(draw, rng, spare, drawn, columns) }
            }),
            Rows::Skip => out.build_with(false, |spare, drawn| {
                let no_columns: &mut [ColumnData] = &mut [];
                // SAFETY: no columns: nothing is copied.
                unsafe { self.sample_in_spare(draw, rng, spare, drawn, no_columns) }
            }),
        };
        admission.settle(result)
    }

    fn rate_limiter(&self) -> Option<&RateLimiter> {
        self.rate.as_ref()
    }

    fn stats(&self) -> Stats {
        let (total, min_positive) = self.tree.total_and_min();
        // ORDERING: Relaxed, as in `raise_running_max`.
        let running_raw = self.counters.running_max.load(Ordering::Relaxed);
        let running_max =
            (self.config).default_stored(self.stored(running_raw), || self.tree.max_leaf());
        Stats {
            total,
            len: self.len(),
            capacity: self.slots.capacity(),
            inserted: self.inserted(),
            min_positive,
            running_max,
        }
    }

    fn update_priorities(&self, keys: &[Key], priorities: &[f64]) -> Result<UpdateReport> {
        let _updating = self.enter_update();
        // ORDERING: Relaxed: a key is valid if its generation was handed out at all.
        let handed_out = self.counters.cursor.load(Ordering::Relaxed) & !SAVING;
        self.config.check_update(keys, priorities, handed_out)?;
        let raw = Some(&self.raw);
        let (report, max_applied) =
            update_in_chunks(self.alpha(), raw, &self.tree, &self.slots, keys, priorities);
        if report.applied > 0 {
            self.raise_running_max(max_applied);
        }
        Ok(report)
    }

    fn raw_priorities_of(&self, keys: &[Key], out: &mut Vec<f64>) -> Result<usize> {
        out.clear();
        // ORDERING: Relaxed, as in `priorities_of`.
        let handed_out = self.counters.cursor.load(Ordering::Relaxed) & !SAVING;
        self.config.check_keys(keys, handed_out)?;
        read_priorities(|slot| self.raw.get(slot), &self.slots, keys, out)
    }

    fn alpha(&self) -> f64 {
        // ORDERING: Relaxed: it changes only while the buffer is paused, and the pause's
        // flag orders it for the writers and updaters that follow.
        self.counters.alpha.load(Ordering::Relaxed)
    }

    fn set_alpha(&self, alpha: f64) -> Result<()> {
        self.realpha(alpha)
    }

    fn priorities_of(&self, keys: &[Key], out: &mut Vec<f64>) -> Result<usize> {
        out.clear();
        // ORDERING: Relaxed: a key is valid if its generation was handed out at all.
        let handed_out = self.counters.cursor.load(Ordering::Relaxed) & !SAVING;
        self.config.check_keys(keys, handed_out)?;
        read_priorities(|slot| self.tree.get(slot), &self.slots, keys, out)
    }

    fn delete(&self, keys: &[Key]) -> Result<UpdateReport> {
        // Deletions enter as updates do: a save waits for them, or they for it.
        let _updating = self.enter_update();
        // ORDERING: Relaxed: a key is valid if its generation was handed out at all.
        let handed_out = self.counters.cursor.load(Ordering::Relaxed) & !SAVING;
        self.config.check_keys(keys, handed_out)?;
        let mut report = UpdateReport::default();
        for &key in keys {
            // Owning the slot, the leaf is ours to zero (as `clear`'s).
            match (self.slots).remove(key, || self.tree.set_owned(&[(key.index, 0.0)])) {
                true => report.applied += 1,
                false => report.stale += 1,
            }
        }
        Ok(report)
    }

    fn write_back(
        &self,
        keys: &[Key],
        columns: &[(usize, ColumnSlice<'_>)],
    ) -> Result<UpdateReport> {
        if self.slots.optimistic() {
            return Err(Error::InvalidParameter {
                name: "write_back",
                value: keys.len() as f64,
                reason: "a buffer in a shared mapping cannot write back in place: its readers \
                         check a copy by the slot's epoch, which a write back keeps",
            });
        }
        // As an update: a save waits for it, or it for the save.
        let _updating = self.enter_update();
        // ORDERING: Relaxed: a key is valid if its generation was handed out at all.
        let handed_out = self.counters.cursor.load(Ordering::Relaxed) & !SAVING;
        self.config.check_keys(keys, handed_out)?;
        self.config.schema().check_some(columns, keys.len())?;
        let mut report = UpdateReport::default();
        for (item, &key) in keys.iter().enumerate() {
            // SAFETY: `check_some` checked `columns` for `keys.len()` items.
            match unsafe { self.slots.write_back(key, columns, item) } {
                true => report.applied += 1,
                false => report.stale += 1,
            }
        }
        Ok(report)
    }

    fn retire_before(&self, version: i64) -> Result<u64> {
        let column = self.config.check_version_column()?;
        // As a deletion: a save waits for it, or it for the save.
        let _updating = self.enter_update();
        // ORDERING: Release (AcqRel): each slot's Release store below is after it, so a
        // writer whose Acquire CAS takes a slot after this call released it sees the floor
        // (`Slots::retire_below`).
        (self.counters.version_floor).fetch_max(Counters::floor_word(version), Ordering::AcqRel);
        let floor = self.counters.floor(Ordering::Acquire);
        let mut retired = 0;
        for slot in 0..self.slots.capacity() {
            // Owning the slot, the leaf is ours to zero (as `delete`'s).
            let zero = || self.tree.set_owned(&[(slot, 0.0)]);
            // SAFETY: the configuration checked that `column` is an i64 column of one element.
            let retired_here = unsafe { self.slots.retire_below(slot, column, floor, zero) };
            if retired_here {
                retired += 1;
            }
        }
        Ok(retired)
    }

    fn version_floor(&self) -> Option<i64> {
        self.config.version_column()?;
        Some(self.counters.floor(Ordering::Acquire))
    }

    fn priority(&self, index: usize) -> Result<f64> {
        self.check_index(index)?;
        Ok(self.tree.get(index))
    }

    fn key(&self, index: usize) -> Result<Option<Key>> {
        self.check_index(index)?;
        let state = self.slots.state(index);
        Ok(self
            .slots
            .generation(index, state)
            .map(|generation| self.config.key(index, generation)))
    }

    fn len(&self) -> usize {
        self.span().saturating_sub(self.slots.removed() as usize)
    }

    fn inserted(&self) -> u64 {
        // ORDERING: Relaxed, as in `reserve`.
        self.counters.cursor.load(Ordering::Relaxed) & !SAVING
    }

    fn total_priority(&self) -> f64 {
        self.tree.total()
    }

    fn consistency(&self) -> Consistency {
        self.tree.consistency()
    }

    fn memory_bytes(&self) -> usize {
        self.tree.memory_bytes() + self.slots.memory_bytes()
    }

    fn clear(&self) {
        let _updating = self.enter_update();
        // ORDERING: Relaxed: `len`'s counts carry no data.
        let completed = self.counters.completed.load(Ordering::Relaxed);
        self.counters
            .completed_before_clear
            .store(completed, Ordering::Relaxed);
        for slot in 0..self.slots.capacity() {
            // Owning the slot, the leaf is ours to zero (as a writer's lazy-writing zero).
            self.slots
                .clear(slot, || self.tree.set_owned(&[(slot, 0.0)]));
        }
        let initial = self.config.initial_priority();
        // ORDERING: Relaxed, as in `raise_running_max`.
        self.counters.running_max.store(initial, Ordering::Relaxed);
    }

    fn rebuild(&self) {
        self.tree.rebuild();
    }
}
