//! Slot protocol and shared columnar storage for the buffers that copy data outside any
//! tree lock (`SplitLock`, `LockFree`).
//!
//! Each slot has one state word (`AtomicU64`):
//!
//! ```text
//!   bit 63       WRITER: a writer owns the slot (new readers are refused)
//!   bit 62       EMPTY: the last write did not complete (it unwound): no item, no key
//!   bits 47..62  readers: threads copying or updating the slot now (15 bits)
//!   bit 46       REMOVED (with EMPTY): the item was deleted by key ([`Slots::remove`]),
//!                and the slots' count of removed items counts it
//!   bits 0..46   epoch: writes completed to the slot (0: it never held data)
//! ```
//!
//! The item in a slot with epoch `e > 0` has generation `(e - 1) * capacity + slot`, so item
//! number `g` is written by the writer that finds epoch `g / capacity`: writers of one slot
//! go in FIFO order however the threads are scheduled.
//!
//! - A writer for epoch `e` waits until the word shows epoch `e` and no writer, sets
//!   WRITER with a CAS (Acquire), waits for the readers to drain (Acquire, pairs with their
//!   Release decrement), writes, and stores `e + 1` with no flags (Release: pairs with the
//!   readers' Acquire CAS, so a reader that sees epoch `e + 1` sees the whole item). Only
//!   [`WriteGuard::publish`], called once the copy is done, stores that; a guard dropped
//!   without it (a panic unwinding through the copy) stores `e + 1 | EMPTY`: the next writer
//!   may go on, but no reader joins and no key is current, so a torn row is never published.
//! - A reader adds one to the readers field with a CAS (Acquire) that also checks the
//!   expected epoch and that WRITER is clear; it never waits: on failure it retries
//!   elsewhere or reports the key stale. It drops out with a Release `fetch_sub`.
//!
//! So no plain byte of storage is read while another thread writes it, and a writer waits
//! only for the copies of its own slot in flight. Readers hold one slot at a time, so the
//! readers field counts threads, not batch items.
//!
//! The columns are one contiguous array each, reached only through raw pointers taken at
//! construction: no reference to a column's memory is ever formed after that, so
//! concurrent accesses to different slots never alias. Under loom a per-slot tracked cell
//! is touched with every access, so a model in which a copy races a write fails.

use super::Key;
use crate::error::{Error, Result};
use crate::faults::Faults;
use crate::region::{Region, RegionBox, RegionBuf};
use crate::storage::{ColumnData, ColumnRows, ColumnSlice, Schema, Storage};
use crate::sync::{spin_wait, AtomicU64, CachePadded, Ordering, UnsafeCell};

const WRITER: u64 = 1 << 63;
const EMPTY: u64 = 1 << 62;
const READER_SHIFT: u32 = 47;
const READER: u64 = 1 << READER_SHIFT;
const READERS: u64 = 0x7FFF << READER_SHIFT;
/// The item was deleted by key (set with EMPTY): counted in [`Slots::removed`] until the
/// slot's next owner replaces the word.
const REMOVED: u64 = 1 << 46;
const EPOCH: u64 = REMOVED - 1;
/// Optimistic mode: an updater holds the slot (the readers field's top bit).
const UPDATER: u64 = 1 << 61;
/// Optimistic mode: who holds the slot, writer or updater (the readers field's other bits).
const OWNER: u64 = 0x3FFF << READER_SHIFT;
/// The most participants an optimistic slot word can name (owner 0 is nobody).
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const MAX_OWNER: u64 = 0x3FFF;

/// The largest epoch a writer may start from (its write makes it `MAX_EPOCH + 1 == EPOCH`).
pub(crate) const MAX_EPOCH: u64 = EPOCH - 1;

/// A snapshot of a slot's state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotState(u64);

impl SlotState {
    /// Writes completed to the slot.
    #[inline]
    pub(crate) fn epoch(self) -> u64 {
        self.0 & EPOCH
    }

    /// Whether a writer owns the slot.
    #[inline]
    pub(crate) fn writing(self) -> bool {
        self.0 & WRITER != 0
    }

    /// Whether generation `generation` of this slot's `capacity`-slot ring is gone for good
    /// in this state: overwritten (a later epoch), or emptied (deleted, cleared, or its write
    /// unwound) with no one at work on the slot. A generation not yet written, or one
    /// being rewritten or deleted now, is not.
    #[inline]
    pub(crate) fn gone(self, generation: u64, capacity: u64) -> bool {
        let written = generation / capacity + 1;
        self.epoch() > written
            || (self.epoch() == written && self.0 & EMPTY != 0 && !self.writing())
    }

    /// Optimistic mode: the participant that holds the slot, writing or updating (0: none).
    #[cfg_attr(loom, allow(dead_code))]
    #[inline]
    pub(crate) fn owner(self) -> u64 {
        match self.0 & (WRITER | UPDATER) {
            0 => 0,
            _ => (self.0 & OWNER) >> READER_SHIFT,
        }
    }

    /// Optimistic mode: whether an updater holds the slot.
    #[cfg_attr(loom, allow(dead_code))]
    #[inline]
    pub(crate) fn updating(self) -> bool {
        self.0 & UPDATER != 0
    }
}

/// The owner number this thread writes into slot words: the handle's, or under loom the
/// participant a model made this thread (`faults::as_participant`).
#[inline(always)]
fn owner_now(owner: u64) -> u64 {
    #[cfg(loom)]
    if let Some(p) = crate::faults::participant() {
        return p + 1;
    }
    owner
}

/// How samplers and updaters hold a slot (docs/design.md, "One buffer across processes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadMode {
    /// Readers join the slot's reader count; a writer waits for them to leave. One process.
    Counted,
    /// Readers hold nothing: they copy with atomic loads and keep the copy only if the slot
    /// word did not change meanwhile (a sequence lock). An updater takes the slot alone
    /// (UPDATER), and a writer or updater writes its participant number `owner` into the
    /// word, so that a survivor can tell what a dead process held. Shared mappings.
    #[cfg_attr(loom, allow(dead_code))]
    Optimistic { owner: u64 },
}

struct RawColumn {
    base: *mut u8,
    row_bytes: usize,
}

/// State words per 128-byte group (two 64-byte lines: the adjacent-line prefetcher moves
/// them in pairs, which is why crossbeam pads to 128 bytes on x86-64).
const WORDS_PER_GROUP: usize = 16;

/// One group of state words, aligned so that no other group shares its lines.
#[repr(align(128))]
pub(crate) struct StateGroup([AtomicU64; WORDS_PER_GROUP]);

// SAFETY: atomics only.
unsafe impl crate::region::Shareable for StateGroup {}

/// The count of items deleted by key whose slots no one has taken since (their words show
/// REMOVED), kept beside the state words in their region.
#[repr(C)]
pub(crate) struct RemovedCount(CachePadded<AtomicU64>);

// SAFETY: atomics only.
unsafe impl crate::region::Shareable for RemovedCount {}

/// What an owner's test says of a slot's word (`Slots::own_if`).
enum Take {
    /// Set the flag on this word.
    Now,
    /// Not yet: look again.
    Wait,
    /// Never: give up.
    Never,
}

/// Slot states plus the columns they guard.
///
/// The state words are interleaved so that consecutive slots, which consecutive
/// generations (and so concurrent actors) write, never share a cache line: slot `s` is
/// word `s / groups` of group `s % groups` (one-to-one onto `groups * 16 >= capacity`
/// words). `groups` is a power of two, so that finding a word takes a shift and a mask
/// where a division took about 4 ns of a 45 ns insert (at most 8 bytes more per slot
/// than the fewest groups). With one group (capacity <= 16) every slot shares it, as
/// there is nothing to spread over.
pub struct Slots {
    states: RegionBuf<StateGroup>,
    /// Items removed by key and not yet replaced (the words with REMOVED).
    removed: RegionBox<RemovedCount>,
    /// log2 of `states.len()`.
    group_shift: u32,
    capacity: usize,
    /// log2 of `capacity` when it is a power of two (`locate` shifts instead of dividing).
    capacity_shift: Option<u32>,
    /// Loom-tracked stand-ins for the slots' bytes (zero-sized outside loom).
    cells: Box<[UnsafeCell<()>]>,
    columns: Vec<RawColumn>,
    /// The schema, and on the heap the column allocations; their memory is reached only
    /// through `columns`.
    storage: Storage,
    /// The column allocations in a shared mapping (none on the heap).
    _mapped_columns: Vec<RegionBuf<u8>>,
    /// How readers hold a slot.
    mode: ReadMode,
    /// Under loom, optimistic mode's stand-in for a row's bytes: the epoch its last writer
    /// wrote, stored and loaded as a sequence lock's data (`write`, `copy_rows`), so that a
    /// model finds a copy accepted while a writer was at work.
    #[cfg(loom)]
    tokens: Box<[AtomicU64]>,
    /// The protocol's answers (a zero-sized type outside loom: `faults.rs`).
    pub(crate) faults: Faults,
}

// SAFETY: the raw column pointers point into `storage`, which `Slots` owns and never
// reallocates. Every access to a slot's bytes goes through `write` (the caller holds the
// slot's WRITER flag) or `Slots::copy_rows` (the caller holds a read reference on each slot it
// copies), and the
// state word's protocol (module doc) keeps those exclusive.
unsafe impl Send for Slots {}
// SAFETY: as for `Send`: shared access is mediated by the per-slot state words.
unsafe impl Sync for Slots {}

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots")
            .field("capacity", &self.capacity)
            .field("schema", self.storage.schema())
            .finish_non_exhaustive()
    }
}

impl Slots {
    #[cfg(all(test, not(loom)))]
    pub(crate) fn new(schema: Schema, capacity: usize) -> Result<Slots> {
        Slots::in_region(schema, capacity, &mut Region::Heap)
    }

    /// Slots whose state words and columns come from `region` (`region.rs`): on the heap the
    /// columns are a [`Storage`]'s, in a mapping they follow the state words.
    pub(crate) fn in_region(schema: Schema, capacity: usize, region: &mut Region) -> Result<Slots> {
        if region.is_heap() {
            return Slots::over(Storage::new(schema, capacity)?, Vec::new(), region);
        }
        schema.validate()?;
        let mut mapped = Vec::with_capacity(schema.columns().len());
        for c in schema.columns() {
            let bytes = (c.shape * c.dtype.size())
                .checked_mul(capacity)
                .ok_or(Error::Allocation { bytes: usize::MAX })?;
            mapped.push(
                region
                    .alloc_zeroed_bytes(bytes, 128)?
                    .expect("a region that is not the heap maps its columns"),
            );
        }
        Slots::over(Storage::schema_only(schema, capacity), mapped, region)
    }

    /// State words alone, from `region`, for `capacity` items whose bytes live elsewhere: a
    /// sequence buffer's windows, which read the lanes' steps (`sequence/`).
    pub(crate) fn words_in(capacity: usize, region: &mut Region) -> Result<Slots> {
        Slots::over(Storage::without_columns(capacity), Vec::new(), region)
    }

    /// Slots over `storage`'s schema; the columns are `mapped`'s when it has them, else the
    /// storage's own.
    fn over(
        mut storage: Storage,
        mut mapped: Vec<RegionBuf<u8>>,
        region: &mut Region,
    ) -> Result<Slots> {
        let capacity = storage.capacity();
        let columns = (0..storage.schema().columns().len())
            .map(|c| RawColumn {
                row_bytes: storage.schema().columns()[c].shape
                    * storage.schema().columns()[c].dtype.size(),
                base: match mapped.get_mut(c) {
                    // Reached only through this pointer from now on (module doc).
                    Some(bytes) => bytes.as_ptr().cast_mut(),
                    None => storage.column_base(c),
                },
            })
            .collect();
        let groups = capacity.div_ceil(WORDS_PER_GROUP).next_power_of_two();
        let states = region.alloc(groups, 128, || {
            StateGroup(std::array::from_fn(|_| AtomicU64::new(0)))
        })?;
        let removed = region.alloc_one(128, RemovedCount(CachePadded::new(AtomicU64::new(0))))?;
        Ok(Slots {
            states,
            removed,
            group_shift: groups.trailing_zeros(),
            capacity,
            capacity_shift: capacity
                .is_power_of_two()
                .then(|| capacity.trailing_zeros()),
            cells: (0..capacity).map(|_| UnsafeCell::new(())).collect(),
            columns,
            storage,
            _mapped_columns: mapped,
            mode: ReadMode::Counted,
            #[cfg(loom)]
            tokens: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            faults: Faults::none(),
        })
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Test hook of a shared buffer (`shm::pause_at`): nothing on the heap.
    #[inline]
    pub(crate) fn point(&self, point: crate::faults::Point) {
        if let ReadMode::Optimistic { .. } = self.mode {
            crate::faults::point(point);
        }
    }

    /// Hold slots as `mode` says (set before the slots are shared).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn set_mode(&mut self, mode: ReadMode) {
        if let ReadMode::Optimistic { owner } = mode {
            assert!((1..=MAX_OWNER).contains(&owner), "owner {owner}");
        }
        self.mode = mode;
    }

    /// Whether readers copy optimistically (a sequence lock's readers: atomic copies,
    /// checked afterwards) rather than joining the slot's reader count.
    #[inline]
    pub(crate) fn optimistic(&self) -> bool {
        matches!(self.mode, ReadMode::Optimistic { .. })
    }

    /// The owner number this thread writes into state words, in optimistic mode (a
    /// participant of a mapping); `None` in counted mode.
    #[inline]
    pub(crate) fn owner(&self) -> Option<u64> {
        match self.mode {
            ReadMode::Optimistic { owner } => Some(owner_now(owner)),
            ReadMode::Counted => None,
        }
    }

    /// The state word of `slot` (see the type's doc for the interleaving).
    #[inline]
    fn word(&self, slot: usize) -> &AtomicU64 {
        &self.states[slot & (self.states.len() - 1)].0[slot >> self.group_shift]
    }

    /// Copy every byte of column `c` (`capacity` rows) into the start of `out`, which has
    /// room for them (and is initialized by the copy).
    ///
    /// # Safety
    /// No writer owns any slot during the call, and none has since the caller last
    /// synchronized with every completed write (a checkpoint's save pauses the writers and
    /// waits for those in flight).
    pub(crate) unsafe fn copy_column(&self, c: usize, out: &mut [std::mem::MaybeUninit<u8>]) {
        let raw = &self.columns[c];
        assert!(out.len() >= self.capacity * raw.row_bytes);
        let n = self.capacity * raw.row_bytes;
        for cell in self.cells.iter() {
            // Loom records a read of every slot (a no-op outside loom).
            cell.with(|_| {});
        }
        // SAFETY: the column's allocation holds `capacity x row_bytes` bytes from `base`, all
        // initialized and written by no one now (the caller's contract); `out` is the
        // caller's, a different allocation, with room for them (asserted).
        unsafe { std::ptr::copy_nonoverlapping(raw.base, out.as_mut_ptr().cast::<u8>(), n) };
    }

    /// Column `c`'s bytes of a slots object nothing else uses (a checkpoint's restore).
    ///
    /// # Safety
    /// Bytes written into a bool column are 0 or 1.
    pub(crate) unsafe fn column_bytes_mut(&mut self, c: usize) -> &mut [u8] {
        let raw = &self.columns[c];
        // SAFETY: the column's allocation holds `capacity x row_bytes` initialized bytes from
        // `base` (through which every access to it goes); `&mut self` excludes every other
        // access for the slice's lifetime; `u8` is valid for any byte, and the caller writes
        // only valid values for the column's dtype.
        unsafe { std::slice::from_raw_parts_mut(raw.base, self.capacity * raw.row_bytes) }
    }

    /// Set slot `slot`'s state word as a restore finds it: `epoch` writes completed, and the
    /// last one holds an item or (`holds == false`, `epoch > 0`) was cleared.
    pub(crate) fn restore_state(&mut self, slot: usize, epoch: u64, holds: bool) {
        assert!(epoch <= EPOCH);
        let word = match holds || epoch == 0 {
            true => epoch,
            false => epoch | EMPTY,
        };
        // ORDERING: SeqCst, the strongest: a restore on a fresh buffer no other thread can
        // see yet (`&mut self`); sharing it later synchronizes.
        self.word(slot).store(word, Ordering::SeqCst);
    }

    /// Set slot `slot`'s state word as a restore finds a slot retired and held across calls
    /// ([`Slots::retire_held`]): `epoch` writes completed, WRITER set, until
    /// [`Slots::finish_held`].
    pub(crate) fn restore_held(&mut self, slot: usize, epoch: u64) {
        assert!(epoch <= EPOCH);
        // ORDERING: SeqCst, as in `restore_state`.
        self.word(slot).store(epoch | WRITER, Ordering::SeqCst);
    }

    /// Test hook: set slot `slot`'s state word to `epoch` writes completed, no flags (the
    /// caller makes the buffer around it agree; nothing may be using the slot).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn set_epoch_for_test(&self, slot: usize, epoch: u64) {
        assert!(epoch <= EPOCH);
        // ORDERING: SeqCst, the strongest: a test hook on a quiescent buffer, off every
        // hot path; the test's later calls run on this thread.
        self.word(slot).store(epoch, Ordering::SeqCst);
    }

    /// The slot and the epoch of generation `generation`: `(g % capacity, g / capacity)`.
    #[inline]
    pub(crate) fn locate(&self, generation: u64) -> (usize, u64) {
        match self.capacity_shift {
            Some(shift) => (
                (generation & ((1u64 << shift) - 1)) as usize,
                generation >> shift,
            ),
            None => {
                let capacity = self.capacity as u64;
                ((generation % capacity) as usize, generation / capacity)
            }
        }
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.storage.memory_bytes() + self.states.len() * std::mem::size_of::<StateGroup>()
    }

    /// Shape `out` for `rows` sampled items.
    pub(crate) fn shape_output(&self, rows: usize, out: &mut Vec<ColumnData>) -> Result<()> {
        self.storage.shape_output(rows, out)
    }

    /// Items in `columns` (or the error describing the first mismatch).
    pub(crate) fn count_items(&self, columns: &[ColumnSlice<'_>]) -> Result<usize> {
        self.storage.count_items(columns)
    }

    /// The state word of `slot` now.
    #[inline]
    pub(crate) fn state(&self, slot: usize) -> SlotState {
        // ORDERING: Acquire pairs with the writer's Release store of the new epoch, so a
        // caller that sees epoch e also sees everything the writer did before it.
        SlotState(self.word(slot).load(Ordering::Acquire))
    }

    /// Ask for `slot`'s state word's cache line (a hint).
    #[inline]
    pub(crate) fn prefetch(&self, slot: usize) {
        // Any index may come here (a descent's NOT_FOUND marker too): a hint, never a panic.
        if slot < self.capacity {
            crate::mem::prefetch_line(self.word(slot) as *const AtomicU64);
        }
    }

    /// The generation of the item that `state` says `slot` holds, if any.
    #[inline]
    pub(crate) fn generation(&self, slot: usize, state: SlotState) -> Option<u64> {
        let epoch = state.epoch();
        (epoch > 0 && state.0 & EMPTY == 0)
            .then(|| (epoch - 1) * self.capacity() as u64 + slot as u64)
    }

    /// Whether `state` (of `key.index`) shows `key`'s item stored and no writer at work on
    /// the slot: the one test of "is this key current".
    #[inline]
    pub(crate) fn holds(&self, key: Key, state: SlotState) -> bool {
        !state.writing()
            && self
                .generation(key.index, state)
                .is_some_and(|g| key.names(g))
    }

    /// Hold `key`'s slot for an update if `key` is current there (its item stored, no
    /// writer at work): while the guard lives, no writer can overwrite the item. Counted
    /// mode joins the readers; optimistic mode takes the slot alone (UPDATER, with this
    /// participant's number), waiting only for another updater of the slot.
    #[inline]
    pub(crate) fn try_read_key(&self, key: Key) -> Option<ReadGuard<'_>> {
        let state = self.state(key.index);
        if !self.holds(key, state) {
            return None;
        }
        let ReadMode::Optimistic { owner } = self.mode else {
            return self.try_read(key.index, state);
        };
        let owner = owner_now(owner);
        // Another updater of the same item holds it for a few instructions (or is a dead
        // process, which recovery clears). ORDERING: Acquire pairs with the previous
        // holder's Release exit, so its leaf store happens before ours.
        self.join(key.index, state, Joined::Updater, |current| {
            (current & UPDATER == 0).then_some(current | UPDATER | (owner << READER_SHIFT))
        })
    }

    /// Take `slot` for writing its item number `epoch + 1`: waits (spinning) for the
    /// previous write of the slot to complete and for its readers to leave.
    #[inline]
    pub(crate) fn begin_write(&self, slot: usize, epoch: u64) -> WriteGuard<'_> {
        let held = match self.mode {
            ReadMode::Counted => WRITER,
            ReadMode::Optimistic { .. } => WRITER | UPDATER,
        };
        let word = self.own(slot, |current| {
            let in_order = current & (held | EPOCH) == epoch;
            self.faults.writer_may_take(in_order, current & WRITER != 0)
        });
        WriteGuard {
            slots: self,
            slot,
            epoch,
            replaces: word,
        }
    }

    /// Empty `slot` without starting a new epoch (`clear`): own it as a writer would (after
    /// the write in flight, if any, and the copies in flight), run `zero_leaf`, then leave it
    /// at the same epoch marked EMPTY: no item, no current key, no reader joins, and the
    /// slot's next writer (the one for this epoch) goes on as if nothing happened.
    pub(crate) fn clear(&self, slot: usize, zero_leaf: impl FnOnce()) {
        let held = match self.mode {
            ReadMode::Counted => WRITER,
            ReadMode::Optimistic { .. } => WRITER | UPDATER,
        };
        let word = self.own(slot, |current| current & held == 0);
        zero_leaf();
        self.forget_removed(word);
        // ORDERING: Release, as in `WriteGuard::publish`: whoever takes the slot next sees
        // the leaf zeroed. Readers cannot join while WRITER is set, so the word is ours.
        self.word(slot)
            .store((word & EPOCH) | EMPTY, Ordering::Release);
    }

    /// Retire the item in `slot` and keep the slot (a lane writer's first step before it
    /// overwrites a step that the item's window reads): own it as a writer would (after the
    /// copies in flight), run `zero_leaf` if it held an item, and leave WRITER set, so that
    /// no reader joins and no key of it is current until [`Slots::finish_held`]. Returns
    /// the slot's epoch (writes completed).
    pub(crate) fn retire_held(&self, slot: usize, zero_leaf: impl FnOnce()) -> u64 {
        // In optimistic mode an updater holds the slot alone (UPDATER): wait for it too.
        let held = match self.mode {
            ReadMode::Counted => WRITER,
            ReadMode::Optimistic { .. } => WRITER | UPDATER,
        };
        let word = self.own(slot, |current| current & held == 0);
        if word & EMPTY == 0 && word & EPOCH > 0 {
            zero_leaf();
        }
        self.forget_removed(word);
        // ORDERING: Release, as in `clear`: the slot's next owner sees the leaf zeroed.
        // Readers cannot join while WRITER is set, so the word is ours.
        self.word(slot)
            .store((word & EPOCH) | WRITER, Ordering::Release);
        word & EPOCH
    }

    /// End the write that [`Slots::retire_held`] began at `epoch`: publish epoch `epoch + 1`,
    /// holding an item (`holds`) or EMPTY (`WriteGuard::publish` and its drop, for a slot
    /// owned across calls).
    pub(crate) fn finish_held(&self, slot: usize, epoch: u64, holds: bool) {
        debug_assert!(self.state(slot).writing());
        let word = match holds {
            true => epoch + 1,
            false => (epoch + 1) | EMPTY,
        };
        // ORDERING: Release, as in `WriteGuard::publish`: whatever the owner wrote for the
        // item (its leaf, its window's description) is visible to whoever sees the epoch.
        self.word(slot).store(word, Ordering::Release);
    }

    /// Recovery (optimistic mode): `slot`'s word is `seen`, held by a dead participant
    /// (its number in the word). A write (`write`): run `zero_leaf` and publish the slot
    /// empty at the next epoch, as a write that unwound would have (`WriteGuard`'s drop);
    /// a clear (`!write`): the same at the same epoch, as `clear` leaves it. An update:
    /// release the slot. Returns whether the word still was `seen` (else someone else
    /// recovered it first, and nothing was done).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn release_dead(
        &self,
        slot: usize,
        seen: SlotState,
        write: bool,
        zero_leaf: impl FnOnce(),
    ) -> bool {
        let word = self.word(slot);
        if seen.writing() {
            // The dead writer's flag keeps every other writer, updater and reader out, and no
            // recoverer but us works on this participant (its lease is ours): the leaf is
            // ours to zero.
            zero_leaf();
            let epoch = seen.epoch() + u64::from(write && self.faults.recovery_bumps_epoch());
            // ORDERING: Release, as in `WriteGuard::publish`: the next writer sees the leaf.
            let done = word
                .compare_exchange(seen.0, epoch | EMPTY, Ordering::Release, Ordering::Relaxed)
                .is_ok();
            if done {
                self.forget_removed(seen.0);
            }
            done
        } else {
            // ORDERING: Release, as in `ReadGuard`'s drop for an updater.
            word.compare_exchange(
                seen.0,
                seen.0 & !(UPDATER | OWNER),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
        }
    }

    /// Recovery (optimistic mode): write `slot`'s item number `seen.epoch() + 1` as an
    /// empty one, for a generation that a dead writer reserved and never took: own the slot
    /// as a writer would (if its word still is `seen`: that epoch, nobody holding it), run
    /// `zero_leaf` (the evicted item's leaf), publish it EMPTY. Returns whether it did.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn write_empty(
        &self,
        slot: usize,
        seen: SlotState,
        zero_leaf: impl FnOnce(),
    ) -> bool {
        let ReadMode::Optimistic { owner } = self.mode else {
            return false;
        };
        let owner = owner_now(owner);
        if seen.0 & (WRITER | UPDATER) != 0 {
            return false;
        }
        let word = self.word(slot);
        // ORDERING: Acquire, as in `own`.
        if word
            .compare_exchange(
                seen.0,
                seen.0 | WRITER | (owner << READER_SHIFT),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return false;
        }
        zero_leaf();
        self.forget_removed(seen.0);
        // ORDERING: Release, as in `WriteGuard::publish`.
        let epoch = seen.epoch() + u64::from(self.faults.recovery_bumps_epoch());
        word.store(epoch | EMPTY, Ordering::Release);
        true
    }

    /// Set `slot`'s WRITER flag once `ready(word)` holds for the word it replaces, then wait
    /// for the slot's readers to leave (counted mode; in optimistic mode the flag carries
    /// this participant's number and there are no readers to wait for). Returns the word the
    /// flag was set on.
    #[inline]
    fn own(&self, slot: usize, ready: impl Fn(u64) -> bool) -> u64 {
        let taken = self.own_if(slot, |current| match ready(current) {
            true => Take::Now,
            false => Take::Wait,
        });
        taken.expect("an owner that never gives up takes the slot")
    }

    /// [`Slots::own`], giving up (`None`, nothing changed) as soon as `ready` says `Never`.
    #[inline]
    fn own_if(&self, slot: usize, ready: impl Fn(u64) -> Take) -> Option<u64> {
        let word = self.word(slot);
        let (flag, counted) = match self.mode {
            ReadMode::Counted => (WRITER, true),
            ReadMode::Optimistic { owner } => (WRITER | (owner_now(owner) << READER_SHIFT), false),
        };
        let mut attempt = 0;
        let owned = loop {
            // ORDERING: Relaxed is enough to look; the CAS below is the acquiring step.
            let current = word.load(Ordering::Relaxed);
            let take = ready(current);
            if let Take::Never = take {
                return None;
            }
            // ORDERING: Acquire pairs with the previous writer's Release store of the word
            // and with readers' Release decrements, so their accesses happen before ours.
            if matches!(take, Take::Now)
                && word
                    .compare_exchange_weak(
                        current,
                        current | flag,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                break current;
            }
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        };
        if !counted {
            // A sequence lock's writer: the flag is ordered before every store of the copy,
            // so a reader whose load sees one of them then sees the flag on its re-check.
            crate::sync::fence(Ordering::Release);
            return Some(owned);
        }
        let mut attempt = 0;
        // ORDERING: Acquire pairs with each reader's Release decrement: their copies of the
        // old item happen before our writes.
        while word.load(Ordering::Acquire) & READERS != 0 {
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
        Some(owned)
    }

    /// Join `slot`'s readers if its state still is `expected` but for the reader count (same
    /// epoch, no writer). Never waits for a writer: `None` when the slot changed. Waits only
    /// when the readers field is saturated, for one of those readers to leave.
    #[inline]
    pub(crate) fn try_read(&self, slot: usize, expected: SlotState) -> Option<ReadGuard<'_>> {
        if expected.writing() {
            return None;
        }
        let word = self.word(slot);
        if let ReadMode::Optimistic { .. } = self.mode {
            // Nothing to join: the copy is checked against this state afterwards
            // (`copy_rows`). An updater at work changes no byte of the item.
            // ORDERING: Relaxed: `expected` came from an Acquire load (`state`).
            let current = word.load(Ordering::Relaxed);
            return (current & (WRITER | EMPTY | EPOCH) == expected.epoch()).then_some(ReadGuard {
                slots: self,
                slot,
                joined: Joined::Optimistic {
                    epoch: expected.epoch(),
                },
            });
        }
        if !self.faults.reader_joins() {
            return Some(ReadGuard {
                slots: self,
                slot,
                joined: Joined::No,
            });
        }
        // Saturated (2^15 - 1 readers in the slot): the item is still current, so wait for
        // one of them to leave rather than report it gone (an update of a fresh key must
        // never come back stale). ORDERING: Acquire pairs with the writer's Release store of
        // this epoch: the item's bytes are visible to our copy.
        self.join(slot, expected, Joined::Reader, |current| {
            (current & READERS != READERS).then_some(current + READER)
        })
    }

    /// Join `slot` as `joined` while its word shows `expected`'s epoch and no writer:
    /// `next(word)` is the word with us joined, or `None` while the slot cannot take us yet
    /// (we spin). `None` when the slot changed; the CAS that joins is Acquire.
    #[inline]
    fn join(
        &self,
        slot: usize,
        expected: SlotState,
        joined: Joined,
        next: impl Fn(u64) -> Option<u64>,
    ) -> Option<ReadGuard<'_>> {
        let word = self.word(slot);
        let mut current = expected.0;
        let mut attempt = 0;
        loop {
            if current & (WRITER | EMPTY | EPOCH) != expected.epoch() {
                return None;
            }
            let Some(joining) = next(current) else {
                spin_wait(attempt);
                attempt = attempt.saturating_add(1);
                // ORDERING: Relaxed: only a look; the CAS below is the acquiring step.
                current = word.load(Ordering::Relaxed);
                continue;
            };
            // ORDERING: Acquire, as the caller says.
            match word.compare_exchange_weak(current, joining, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => {
                    return Some(ReadGuard {
                        slots: self,
                        slot,
                        joined,
                    })
                }
                Err(seen) => current = seen,
            }
        }
    }
}

/// Ownership of one slot for writing. [`WriteGuard::publish`] makes the item visible;
/// dropping the guard without publishing (a panic mid-write) leaves the slot EMPTY.
pub(crate) struct WriteGuard<'a> {
    slots: &'a Slots,
    slot: usize,
    epoch: u64,
    /// The word the writer took the slot from (an item deleted by key stops counting as
    /// removed once the word is replaced).
    replaces: u64,
}

impl WriteGuard<'_> {
    /// Copy item `item` of `columns` into the slot.
    ///
    /// # Safety
    /// `columns` passed [`Slots::count_items`] of the slots this guard belongs to, and
    /// `item` is below the count it returned.
    pub(crate) unsafe fn write(&mut self, columns: &[ColumnSlice<'_>], item: usize) {
        let slots = self.slots;
        if let ReadMode::Optimistic { .. } = slots.mode {
            // Under loom, the token stands for the row's bytes (loom sees no plain byte),
            // and the bytes are plain: threads take turns at loom's operations only.
            #[cfg(loom)]
            // ORDERING: Relaxed after the Release fence that followed the flag (`own`), as
            // a sequence lock's data stores.
            slots.tokens[self.slot].store(self.epoch + 1, Ordering::Relaxed);
            #[cfg(loom)]
            use crate::mem::copy_row_bytes as store_row;
            #[cfg(not(loom))]
            use crate::mem::copy_row_to_atomic as store_row;
            for (raw, src) in slots.columns.iter().zip(columns) {
                let n = raw.row_bytes;
                // SAFETY: as below; readers of these bytes load them only through
                // `copy_row_from_atomic` (optimistic mode), so the atomic stores race with
                // no plain access (under loom the copy is plain, and no reader reads it
                // halfway: loom switches threads at its own operations only).
                unsafe {
                    store_row(
                        src.as_bytes_ptr().add(item * n),
                        raw.base.add(self.slot * n),
                        n,
                    )
                };
            }
            return;
        }
        slots.cells[self.slot].with_mut(|_| {
            for (raw, src) in slots.columns.iter().zip(columns) {
                let n = raw.row_bytes;
                let src_base = src.as_bytes_ptr();
                // SAFETY: `src` holds at least `item + 1` rows of `n` bytes of the column's
                // dtype (the caller's contract: `count_items`); the destination row `slot` lies inside the column's allocation
                // of `capacity` rows; we hold the slot's WRITER flag with no readers left, so
                // no other thread accesses these destination bytes; source and destination
                // are different allocations.
                unsafe {
                    crate::mem::copy_row_bytes(
                        src_base.add(item * n),
                        raw.base.add(self.slot * n),
                        n,
                    )
                };
            }
        });
    }
}

impl WriteGuard<'_> {
    /// The write is complete: publish the slot's new epoch (the insert's linearization point).
    #[inline]
    pub(crate) fn publish(self) {
        // ORDERING: Release pairs with readers' Acquire CAS (and the next writer's): the
        // bytes written above are visible to whoever sees the new epoch. Readers cannot
        // join while WRITER is set, so the word is ours to overwrite.
        self.slots
            .word(self.slot)
            .store(self.epoch + 1, Ordering::Release);
        self.slots.forget_removed(self.replaces);
        std::mem::forget(self);
    }
}

impl Drop for WriteGuard<'_> {
    /// Only reached when the write did not complete (`publish` forgets the guard): the next
    /// writer of the slot may go on, but the slot holds no item (EMPTY), so its torn bytes
    /// are never read and no key for it is current.
    fn drop(&mut self) {
        if crate::faults::dying() {
            // A modeled death (loom): a killed process runs no destructor.
            return;
        }
        // ORDERING: Release, as in `publish`: the next writer's Acquire CAS sees our writes.
        self.slots
            .word(self.slot)
            .store((self.epoch + 1) | EMPTY, Ordering::Release);
        self.slots.forget_removed(self.replaces);
    }
}

mod by_key;
mod read;
use read::Joined;
pub(crate) use read::ReadGuard;
#[cfg(all(test, not(loom)))]
mod tests;
