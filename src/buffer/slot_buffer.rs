//! The part of `SplitLock` and `LockFree` that does not depend on how the tree is shared:
//! the FIFO cursor, lazy writing, the sampler's retry loop and the update validation.
//!
//! A variant supplies a [`SharedTree`]: how to set a leaf owned by a writer, how to apply
//! updates with the key check atomic against writers, and how to turn prefix targets into
//! candidates `(index, priority, slot state)` that were consistent at one instant.
//!
//! Insert (lazy writing, the paper's algorithm 3, plus the slot protocol of `slots.rs`),
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

use crate::rng::RandomSource;

use super::slots::{ReadGuard, SlotState, Slots, WriteGuard, MAX_EPOCH};
use super::{
    check_request, importance_weights, ConcurrentBuffer, Config, DefaultPriority, Descent, Draw,
    Key, Rows, SampleBatch, Stats, UpdateReport,
};
use crate::checkpoint::{Plan, Snapshot, State, UserData, NO_ITEM};
use crate::error::{Error, Result};
use crate::storage::{ColumnData, ColumnRows, ColumnSlice};
use crate::sync::{spin_wait, AtomicF64, AtomicU64, CachePadded, Ordering};
use crate::tree::Consistency;

/// Draws for one sampled item before the sample gives up with `Error::Contention`.
#[cfg(not(loom))]
pub(crate) const MAX_ATTEMPTS: u32 = 4096;
/// Loom explores every retry: keep the loop short.
#[cfg(loom)]
pub(crate) const MAX_ATTEMPTS: u32 = 3;

/// Redraws inside a stratified item's own stratum before its redraws span the whole range:
/// a stratum covered by one slot in flight (a write, or a clear, that
/// has not zeroed its leaf yet) would otherwise fail every redraw until `Contention`.
#[cfg(not(loom))]
const STRATUM_ATTEMPTS: u32 = 8;
#[cfg(loom)]
const STRATUM_ATTEMPTS: u32 = 1;

/// The most read references a sampler holds at once: the slots of one run of candidates,
/// joined, copied and left together (see `sample_in_spare`).
const READ_RUN: usize = 64;

/// Entries of an update applied together: their exponents are paid outside any lock, and
/// [`SharedTree::update`] gets at most this many at a time (so it can stage them on the stack).
pub(crate) const UPDATE_CHUNK: usize = 64;

/// Items one batch writer owns and installs together (`SlotBuffer::write_chunk`): the size
/// of its stack arrays, and the most entries [`SharedTree::set_owned`] gets at a time.
pub(crate) const WRITE_CHUNK: usize = crate::tree::SET_MANY_MAX;

/// Set in the cursor while a save copies the buffer (module doc, "Save"); generations stay
/// far below it (2^63 inserts).
const SAVING: u64 = 1 << 63;

/// The slots of a writer's chunk, owned and not yet installed: if the chunk unwinds (a
/// panic in a copy) before the install, dropping this sets their leaves to 0 through
/// [`SharedTree::set_owned`], ancestors included, so the tree is exact at quiescence
/// whatever `retire_owned` left undone, and a slot whose leaf was kept
/// ([`SharedTree::keeps_leaves`]) does not keep the priority of an item it no longer holds.
/// The writer sets `n` to 0 once its install is made.
struct RetiredLeaves<'a, T: SharedTree, const M: usize> {
    tree: &'a T,
    slots: [usize; M],
    n: usize,
}

impl<T: SharedTree, const M: usize> Drop for RetiredLeaves<'_, T, M> {
    fn drop(&mut self) {
        for &slot in &self.slots[..self.n] {
            self.tree.set_owned(&[(slot, 0.0)]);
        }
    }
}

/// A sampling candidate: what the tree said about one slot at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    pub(crate) index: usize,
    pub(crate) priority: f64,
    pub(crate) state: SlotState,
}

/// How a variant shares its tree. `pub` only so that the public aliases
/// ([`SplitLockBuffer`](super::SplitLockBuffer), [`LockFreeBuffer`](super::LockFreeBuffer))
/// can name `SlotBuffer<T>`; it lives in a private module, so no other crate can name or
/// implement it (a sealed trait).
pub trait SharedTree: Send + Sync + std::fmt::Debug + Sized {
    fn new(config: &Config) -> Result<Self>;
    /// Priority retrieval.
    fn get(&self, slot: usize) -> f64;
    fn total(&self) -> f64;
    /// The total and the smallest positive leaf (`None` when none is positive), read
    /// together (under one lock where the tree has one).
    fn total_and_min(&self) -> (f64, Option<f64>);
    /// The largest stored priority (LiveMax trees only).
    fn max_leaf(&self) -> Option<f64>;
    /// Set the leaves of slots whose WRITER flags the caller holds (distinct slots, at most
    /// [`WRITE_CHUNK`] of them), in one tree operation.
    fn set_owned(&self, entries: &[(usize, f64)]);
    /// Lazy writing's first step for slots whose WRITER flags the caller holds (`entries`
    /// as for [`Self::set_owned`], each slot with the priority its install will set): set
    /// their leaves to 0, so that samplers stop choosing them. The writer then makes the
    /// install, [`Self::install_owned`] of the same entries (or, if it unwinds, a
    /// `set_owned` of zeros: [`RetiredLeaves`]). Two freedoms a tree may take:
    /// - a tree whose descents tolerate a parent ahead of its children (the atomic tree: a
    ///   target in a parent's stale mass finds nothing and is drawn again) may store the
    ///   leaves alone and leave the ancestors to the install;
    /// - a tree that makes this write atomically with every other leaf write (SplitLock,
    ///   under its tree lock) may leave alone a leaf that holds its new priority bit for
    ///   bit already: the install then finds it unchanged and propagates nothing. Samplers
    ///   that land on the slot meanwhile are refused by its state word and draw again, as
    ///   for any slot in flight.
    fn retire_owned(&self, entries: &[(usize, f64)]) -> Self::Retired;
    /// What a retire leaves for the install of the same slots (SplitLock: where its writes
    /// wait among the writes posted for the tree lock's next holder).
    type Retired: Copy;
    /// Lazy writing's last tree step: [`Self::set_owned`] of the entries, `retired` being
    /// what [`Self::retire_owned`] returned for them (or for all of them but the first:
    /// LiveMax's first slot was zeroed with its own `set_owned`). A tree may merge the two
    /// (SplitLock turns a retire still posted into the install).
    fn install_owned(&self, entries: &[(usize, f64)], retired: Self::Retired);
    /// Whether a writer that owns a slot may skip both steps of lazy writing for it when
    /// the slot's leaf ([`Self::get`], read once the slot is owned) holds the new priority
    /// already, bit for bit: no retire, no install, nothing above the leaf touched.
    /// Samplers that land on the slot while it is owned are refused by its state word and
    /// draw again, as for any slot in flight. Sound only
    /// if nothing but the owner can write the leaf once the owner's WRITER flag is set and
    /// its readers are gone, and every earlier leaf write is followed by its writer's own
    /// refresh of the ancestors (then leaving the leaf alone leaves the tree as exact as it
    /// was). The default is `false`: on SplitLock an update checks the slot's state under
    /// the tree lock without a read reference, so it may write the leaf after a check made
    /// outside that lock; SplitLock decides under the lock, in its retire, and the install
    /// that it always gets, ordered after any such update by the tree lock, sets the new
    /// priority whatever the retire decided.
    fn keeps_leaves(&self) -> bool {
        false
    }
    /// Apply `stored[j]` to `keys[j]` in order (at most [`UPDATE_CHUNK`] entries), each only
    /// if its key is current, checked atomically with the write against the slot's writers. Also returns the largest
    /// value applied (0 when none).
    fn update(&self, slots: &Slots, keys: &[Key], stored: &[f64]) -> (UpdateReport, f64);
    /// `(total, min_positive)` and one candidate per target drawn by `draw(total, targets)`
    /// (`indices` is scratch; both vectors have room for `targets.len()`);
    /// `Error::ZeroTotalPriority` when the tree holds no positive leaf.
    fn candidates(
        &self,
        slots: &Slots,
        targets: &mut [f64],
        draw: &mut dyn FnMut(f64, &mut [f64]),
        indices: &mut Vec<usize>,
        out: &mut Vec<Candidate>,
    ) -> Result<(f64, f64)>;
    /// One candidate for target `x`, or `None` (nothing positive found on the way).
    fn candidate(&self, slots: &Slots, x: f64) -> Option<Candidate>;
    fn consistency(&self) -> Consistency;
    fn memory_bytes(&self) -> usize;
    /// Recompute every internal node from the leaves (exact at quiescence).
    fn rebuild(&self);
    /// Every leaf, as `get` reads them one by one (a save's copy, with no writer running).
    fn copy_leaves(&self, out: &mut Vec<f64>, capacity: usize) {
        out.extend((0..capacity).map(|slot| self.get(slot)));
    }
    /// Set every leaf of a fresh, unshared tree to `leaves` and make the sums exact (a
    /// checkpoint's restore).
    fn restore_leaves(&mut self, leaves: &[f64]);
    /// Take the tree-level faults of a loom model's broken twin (most trees have none).
    #[cfg(loom)]
    fn inject_faults(&mut self, _faults: &crate::faults::Faults) {}
}

/// The concurrent buffer with lazy writing: slots with a state word each (`slots.rs`) and a
/// shared tree `T`, which is what tells the variants apart. Users name it through the
/// types over it, [`SplitLockBuffer`](super::SplitLockBuffer) (`T` = the split-lock tree)
/// and [`LockFreeBuffer`](super::LockFreeBuffer) (`T` = the atomic tree), and use it through
/// [`ConcurrentBuffer`].
#[derive(Debug)]
pub struct SlotBuffer<T> {
    config: Config,
    pub(crate) tree: T,
    pub(crate) slots: Slots,
    /// Generations handed out: the FIFO cursor.
    cursor: CachePadded<AtomicU64>,
    /// Inserts completed.
    completed: CachePadded<AtomicU64>,
    /// `completed` when the last [`ConcurrentBuffer::clear`] began (read by `len`).
    completed_before_clear: AtomicU64,
    /// Generations handed out that no write will complete (refused at the end of life
    /// and not given back): a save counts them with `completed`.
    burnt: AtomicU64,
    /// Priority updates and clears in flight (module doc, "Save").
    updating: CachePadded<AtomicU64>,
    /// The generation a save in progress froze the cursor at (the last save's, after it).
    saving_from: AtomicU64,
    /// Largest stored priority given so far (RunningMax).
    running_max: CachePadded<AtomicF64>,
}

/// A priority update or clear in flight (module doc, "Save"); dropping it leaves.
struct Updating<'a, T>(&'a SlotBuffer<T>);

impl<T> Drop for Updating<'_, T> {
    fn drop(&mut self) {
        // ORDERING: Release pairs with a saver's SeqCst load of `updating`: the update's
        // writes happen before the saver's copy.
        self.0.updating.fetch_sub(1, Ordering::Release);
    }
}

/// Clears the cursor's `SAVING` flag when a save's copy ends, on every path.
struct Resume<'a>(&'a AtomicU64);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        // ORDERING: SeqCst, as the flag's setting; Release for the writers' Acquire wait.
        self.0.fetch_and(!SAVING, Ordering::SeqCst);
    }
}

impl<T: SharedTree> SlotBuffer<T> {
    /// A buffer with deliberate protocol faults, for the loom models only.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn with_faults(config: Config, faults: crate::faults::Faults) -> Result<Self> {
        let mut buffer = Self::new(config)?;
        buffer.slots.faults = faults;
        buffer.tree.inject_faults(&faults);
        Ok(buffer)
    }

    /// Wait while a save holds the cursor frozen.
    fn wait_for_save(&self) {
        let mut attempt = 0;
        // ORDERING: Acquire pairs with the saver's Release clear of the flag (nothing is
        // read through it; the slot protocol orders the data).
        while self.cursor.load(Ordering::Acquire) & SAVING != 0 {
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
    }

    /// Wait while a save that froze the cursor at or before `first` copies. A later save
    /// (frozen past `first`) waits for this write instead, so the writer goes on: waiting
    /// for that one too would deadlock the two.
    fn wait_to_write(&self, first: u64) {
        let mut attempt = 0;
        loop {
            // ORDERING: SeqCst, with the saver's SeqCst `fetch_or` and store of
            // `saving_from`: a flag seen set with `saving_from <= first` is this writer's
            // save or an older one's value that the current save has not replaced yet
            // (values only grow), and the writer waits for either to move.
            if self.cursor.load(Ordering::SeqCst) & SAVING == 0
                || self.saving_from.load(Ordering::SeqCst) > first
            {
                return;
            }
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
    }

    /// Enter a priority update or a clear: counted in `updating` once no save is copying.
    fn enter_update(&self) -> Updating<'_, T> {
        loop {
            // ORDERING: SeqCst read-modify-writes on both sides, so that no reasoning about a
            // total order of loads is needed (module doc, "Save"): if our read of the cursor
            // comes before the saver's `fetch_or` in the cursor's modification order, the
            // saver's `fetch_or` reads from it (acquiring our increment), and its read of
            // `updating` sees us; otherwise we see its flag.
            self.updating.fetch_add(1, Ordering::SeqCst);
            // ORDERING: SeqCst, see above (a read that is a read-modify-write).
            if self.cursor.fetch_add(0, Ordering::SeqCst) & SAVING == 0 {
                return Updating(self);
            }
            // ORDERING: SeqCst, see above.
            self.updating.fetch_sub(1, Ordering::SeqCst);
            self.wait_for_save();
        }
    }

    /// The buffer's state at one instant, its threads paused for the copy (module doc,
    /// "Save").
    pub(crate) fn snapshot(&self) -> Result<Snapshot<'_>> {
        let mut attempt = 0;
        let frozen = loop {
            // ORDERING: SeqCst: see the module doc.
            let before = self.cursor.fetch_or(SAVING, Ordering::SeqCst);
            if before & SAVING == 0 {
                break before;
            }
            // Another save is copying: wait for it.
            self.wait_for_save();
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        };
        // ORDERING: SeqCst, see `wait_to_write`.
        self.saving_from.store(frozen, Ordering::SeqCst);
        let _resume = Resume(&self.cursor);
        while self.slots.faults.saver_waits() {
            // ORDERING: SeqCst, see the module doc: pairs with the writers' SeqCst increment
            // of `completed` after their publication (their bytes are visible to the copy)
            // and with the updates' entry.
            let done = self.completed.load(Ordering::SeqCst) + self.burnt.load(Ordering::SeqCst);
            // ORDERING: SeqCst, a read-modify-write (see `enter_update`): it reads the latest
            // count, after every update that read the cursor before our flag.
            if done >= frozen && self.updating.fetch_add(0, Ordering::SeqCst) == 0 {
                break;
            }
            spin_wait(attempt);
            attempt = attempt.saturating_add(1);
        }
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
        Ok(Snapshot {
            config: &self.config,
            inserted: frozen,
            len: self.len(),
            // ORDERING: Relaxed, as in `raise_running_max`; no update runs now.
            running_max: self.running_max.load(Ordering::Relaxed),
            priorities,
            generations: std::borrow::Cow::Owned(generations),
            columns,
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
        let capacity = buffer.config.capacity();
        for (slot, &g) in state.generations.iter().enumerate() {
            let epoch = Plan::epoch(state.inserted, capacity, slot);
            buffer.slots.restore_state(slot, epoch, g != NO_ITEM);
        }
        buffer.tree.restore_leaves(&state.priorities);
        // ORDERING: Relaxed: a fresh buffer no other thread sees yet.
        buffer.cursor.store(state.inserted, Ordering::Relaxed);
        // ORDERING: Relaxed, as above.
        buffer.completed.store(state.inserted, Ordering::Relaxed);
        // ORDERING: Relaxed, as above; `len` is then `inserted - (inserted - len)`.
        buffer
            .completed_before_clear
            .store(state.inserted - state.len as u64, Ordering::Relaxed);
        // ORDERING: Relaxed, as above.
        buffer
            .running_max
            .store(state.running_max, Ordering::Relaxed);
        Ok(buffer)
    }

    fn raise_running_max(&self, stored: f64) {
        if !self.slots.faults.max_by_cas() {
            // ORDERING: Relaxed (the broken twin's racy load-then-store).
            if self.running_max.load(Ordering::Relaxed) < stored {
                self.running_max.store(stored, Ordering::Relaxed);
            }
            return;
        }
        // ORDERING: Relaxed: the maximum is a single value with no data attached; each
        // read-modify-write sees the latest value in the modification order.
        self.running_max.fetch_max(stored, Ordering::Relaxed);
    }

    /// Take `n` consecutive generations from the cursor.
    fn reserve(&self, n: u64) -> Result<u64> {
        let capacity = self.slots.capacity() as u64;
        // ORDERING: SeqCst, for the zero-total test in `sample_in_spare` (a writer takes its
        // generation before it zeroes its leaf); the slot's state word orders everything
        // about the data.
        let taken = self.cursor.fetch_add(n, Ordering::SeqCst);
        let first = taken & !SAVING;
        if taken & SAVING != 0 {
            // A save froze the cursor before these generations: write them after it.
            self.wait_to_write(first);
        }
        let last = first + n.max(1) - 1;
        // `last / capacity > MAX_EPOCH`, without a division.
        if u128::from(last) >= (u128::from(MAX_EPOCH) + 1) * u128::from(capacity) {
            // Give the numbers back only if nobody took more since; otherwise they stay
            // burnt, as the buffer is at its end of life anyway.
            // ORDERING: Relaxed: the give-back publishes nothing. A sampler's zero-total test
            // that reads the cursor before it sees `started != finished` and retries (at
            // worst `Contention`); one that reads it after sees the numbers never used.
            if self
                .cursor
                .compare_exchange(first + n, first, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                // ORDERING: SeqCst, as `completed`, which a save reads with it.
                self.burnt.fetch_add(n, Ordering::SeqCst);
            }
            return Err(Error::GenerationsExhausted {
                index: (last % capacity) as usize,
            });
        }
        Ok(first)
    }

    #[allow(clippy::too_many_arguments)]
    /// Insert items `offset..offset + n` of `columns` (validated) as generations `first..first
    /// + n` (`n <= WRITE_CHUNK`, `n <= capacity`: distinct slots), appending their keys.
    ///
    /// The batch-aware writer: the n slots are owned in generation order, the evicted
    /// items' leaves retired in one tree operation, the rows copied with no tree lock held,
    /// the n priorities installed in one tree operation, then the slots published (each
    /// item's linearization point). Owning several slots at once cannot deadlock: a writer
    /// waits only for the writer of an older generation of the same slot, which (a chunk
    /// spanning fewer than `capacity` generations) holds only generations older than all of
    /// the waiter's, so every chain of waits ends at the oldest writer in flight, which
    /// waits only for copies.
    ///
    /// `M` bounds `n` and sizes the stack arrays (guards, entries): a single insert asks
    /// for 1 and does not clear and drop room for [`WRITE_CHUNK`] (a fifth of a one-thread
    /// direct actor's time before it did).
    ///
    /// # Safety
    /// `columns` passed this buffer's `count_items`, and `offset + n` is at most the count it
    /// returned.
    unsafe fn write_chunk<const M: usize>(
        &self,
        first: u64,
        columns: &[ColumnSlice<'_>],
        offset: usize,
        n: usize,
        priorities: Option<&[f64]>,
        default: &mut Option<f64>,
        mut on_key: impl FnMut(Key),
    ) {
        debug_assert!(n <= M && M <= WRITE_CHUNK && n as u64 <= self.slots.capacity() as u64);
        let mut guards: [Option<WriteGuard<'_>>; M] = std::array::from_fn(|_| None);
        let mut entries = [(0usize, 0.0f64); M];
        // Zeroes the owned slots' leaves, ancestors included, if the chunk unwinds before
        // its install (a tree may retire leaves without climbing, `SharedTree::retire_owned`,
        // or keep them, `SharedTree::keeps_leaves`); declared after `guards`, so it runs while
        // the slots are still owned.
        let mut retired = RetiredLeaves::<T, M> {
            tree: &self.tree,
            slots: [0; M],
            n: 0,
        };
        // Generations `first..first + n`, slot and epoch stepped from the first's.
        let (first_slot, first_epoch) = self.slots.locate(first);
        let next = |slot: usize, epoch: u64| match slot + 1 {
            s if s == self.slots.capacity() => (0, epoch + 1),
            s => (s, epoch),
        };
        // The leaves as the owner finds them, for `SharedTree::keeps_leaves` (read before
        // owning in the loom twin that breaks it).
        let keeps = self.tree.keeps_leaves();
        let mut held = [0.0f64; M];
        if keeps && !self.slots.faults.writer_reads_leaves_owned() {
            let (mut slot, mut epoch) = (first_slot, first_epoch);
            for h in held.iter_mut().take(n) {
                *h = self.tree.get(slot);
                (slot, epoch) = next(slot, epoch);
            }
        }
        let (mut slot, mut epoch) = (first_slot, first_epoch);
        for (j, (guard, entry)) in guards.iter_mut().zip(&mut entries).take(n).enumerate() {
            *guard = Some(self.slots.begin_write(slot, epoch));
            if keeps && self.slots.faults.writer_reads_leaves_owned() {
                held[j] = self.tree.get(slot);
            }
            *entry = (slot, 0.0);
            retired.slots[j] = slot;
            (slot, epoch) = next(slot, epoch);
        }
        let entries = &mut entries[..n];
        retired.n = n;
        // With default priorities under LiveMax, the first slot is retired alone first,
        // climb included: each item of a batch gets the largest live priority once the first
        // item's predecessor is gone, which is what one insert after another gives (each
        // later item sees the earlier ones at that value, and an evicted leaf only ever
        // lowers the max).
        let live_default = priorities.is_none()
            && default.is_none()
            && self.config.default_priority() == DefaultPriority::LiveMax;
        if live_default {
            self.tree.set_owned(&entries[..1]);
            *default = Some(match self.tree.max_leaf() {
                Some(m) if m > 0.0 => m,
                _ => self.config.stored_priority(self.config.initial_priority()),
            });
        }
        match priorities {
            Some(ps) => {
                let mut max = 0.0f64;
                for (entry, &p) in entries.iter_mut().zip(&ps[offset..offset + n]) {
                    entry.1 = self.config.stored_priority(p);
                    max = max.max(entry.1);
                }
                self.raise_running_max(max);
            }
            None => {
                // One value for every item of the batch (see above), read once per batch;
                // LiveMax's was read above.
                // ORDERING: Relaxed, as in `raise_running_max`.
                let stored =
                    *default.get_or_insert_with(|| self.running_max.load(Ordering::Relaxed));
                for entry in entries.iter_mut() {
                    entry.1 = stored;
                }
            }
        }
        // The leaves that change: a slot whose leaf holds its new priority already is left
        // alone where the tree allows the writer to decide so (`SharedTree::keeps_leaves`);
        // LiveMax's first slot was zeroed above, so it changes.
        let mut install = [(0usize, 0.0f64); M];
        let mut m = 0;
        for (j, &(slot, stored)) in entries.iter().enumerate() {
            let kept = keeps && !(live_default && j == 0) && held[j].to_bits() == stored.to_bits();
            if !kept {
                install[m] = (slot, stored);
                m += 1;
            }
        }
        let install = &install[..m];
        // Lazy writing, step 1: samplers stop choosing the slots (`SharedTree::retire_owned`:
        // one tree operation, on LockFree the leaves alone, on SplitLock only the leaves
        // that do not hold their new priorities already).
        let retire = self
            .tree
            .retire_owned(&install[usize::from(live_default)..]);
        // Step 2: the copies, with no tree lock held.
        for (j, guard) in guards.iter_mut().take(n).enumerate() {
            if let Some(guard) = guard {
                // SAFETY: `offset + j < offset + n`, within the checked items (the caller's
                // contract); the guard is one of this buffer's slots.
                unsafe { guard.write(columns, offset + j) };
            }
        }
        // Step 3: the real priorities (one tree operation); then each slot is published
        // (the linearization point: until then samplers see the old item's leaf at 0, or a
        // kept leaf whose slot refuses them, and the new one absent).
        if m > 0 {
            self.tree.install_owned(install, retire);
        }
        retired.n = 0;
        for (j, guard) in guards.iter_mut().take(n).enumerate() {
            if let Some(guard) = guard.take() {
                guard.publish();
                on_key(Key {
                    index: entries[j].0,
                    generation: first + j as u64,
                });
            }
        }
        // ORDERING: SeqCst, for the zero-total test in `sample_in_spare`.
        self.completed.fetch_add(n as u64, Ordering::SeqCst);
    }

    /// Insert `items` items of `columns` (validated) in chunks of at most `WRITE_CHUNK`
    /// (and at most `capacity`) generations each; the keys in item order.
    ///
    /// # Safety
    /// `columns` passed this buffer's `count_items`, which returned `items`.
    unsafe fn write_all(
        &self,
        columns: &[ColumnSlice<'_>],
        items: usize,
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
    ) -> Result<()> {
        let first = self.reserve(items as u64)?;
        let chunk = WRITE_CHUNK.min(self.slots.capacity());
        let mut offset = 0;
        let mut default = None;
        while offset < items {
            let n = chunk.min(items - offset);
            // SAFETY: `offset + n <= items`, the checked count (the caller's contract).
            unsafe {
                self.write_chunk::<WRITE_CHUNK>(
                    first + offset as u64,
                    columns,
                    offset,
                    n,
                    priorities,
                    &mut default,
                    |key| keys.push(key),
                )
            };
            offset += n;
        }
        Ok(())
    }

    /// Sample `draw` into `out` (everything but its columns) and copy each sampled item's
    /// row into `columns` (none when it has no columns); returns what the descent read.
    ///
    /// # Safety
    /// `columns` has no columns, or one per schema column, each of the column's dtype with
    /// room for at least `draw.len()` rows.
    unsafe fn sample_in_spare<D: ColumnRows + ?Sized>(
        &self,
        draw: Draw<'_>,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        candidates: &mut Vec<Candidate>,
        indices: &mut Vec<usize>,
        columns: &mut D,
    ) -> Result<Descent> {
        let batch = draw.len();
        out.reserve_rows(batch)?;
        crate::mem::reserve(candidates, batch)?;
        crate::mem::reserve(indices, batch)?;
        // `probabilities` holds the targets until the priorities are known.
        out.probabilities.clear();
        out.probabilities.resize(batch, 0.0);
        let mut attempt = 0;
        let (total, min_positive) = loop {
            candidates.clear();
            // ORDERING: SeqCst, with the cursor load below and the writers' SeqCst increments
            // of both counters: a writer whose lazy-writing zero this descent saw had taken
            // its generation before (so `started` counts it) and completes after (so
            // `finished` does not), whence `started != finished`.
            let finished = self.completed.load(Ordering::SeqCst);
            match self.tree.candidates(
                &self.slots,
                &mut out.probabilities,
                &mut |total, out| draw.fill(total, out, rng),
                indices,
                candidates,
            ) {
                Err(Error::ZeroTotalPriority) => {
                    // ORDERING: SeqCst, see above.
                    let started = self.cursor.load(Ordering::SeqCst) & !SAVING;
                    if started == finished || !self.slots.faults.zero_total_checks_writers() {
                        // No write was in flight: every stored priority was 0.
                        return Err(Error::ZeroTotalPriority);
                    }
                    // The zero may be lazy writing's (the evicted leaf zeroed, the new item
                    // not yet published): not final, so try again, then give up retryably.
                    attempt += 1;
                    if attempt >= MAX_ATTEMPTS {
                        return Err(Error::Contention { attempts: attempt });
                    }
                    spin_wait(attempt);
                }
                other => break other?,
            }
        };
        out.keys.clear();
        out.indices.clear();
        out.priorities.clear();
        // Rows are copied in runs: read references on up to `READ_RUN` consecutive
        // candidates, joined in the state each was drawn in, then their rows copied
        // (`Slots::copy_rows`, which says why), then the references dropped. A run ends
        // before the first candidate that cannot be joined; that item is drawn again holding
        // no reference, so the sampler never waits while it keeps a writer waiting. A writer
        // that needs a slot of a run waits for the run's copies (64 rows: about 10 us at
        // 1028 bytes) where it waited for one row's.
        let mut held: [Option<ReadGuard<'_>>; READ_RUN] = std::array::from_fn(|_| None);
        let mut b = 0;
        while b < batch {
            let start = b;
            while b < batch && b - start < READ_RUN {
                let c = candidates[b];
                let guard = (c.priority > 0.0)
                    .then(|| self.slots.try_read(c.index, c.state))
                    .flatten();
                let Some(guard) = guard else { break };
                held[b - start] = Some(guard);
                b += 1;
            }
            let run = &mut held[..b - start];
            // SAFETY: rows `start..b` lie within the `batch` rows `columns` has room for (the
            // caller's contract); the guards are this buffer's.
            unsafe { self.slots.copy_rows(run, columns, start) };
            for (guard, &c) in run.iter_mut().zip(&candidates[start..b]) {
                self.push_sampled(c, out);
                *guard = None;
            }
            if b < batch && b - start < READ_RUN {
                // Candidate `b` was in flight or rewritten: draw that item again.
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    if attempt >= MAX_ATTEMPTS {
                        return Err(Error::Contention { attempts: attempt });
                    }
                    spin_wait(attempt);
                    let in_stratum = attempt < STRATUM_ATTEMPTS;
                    let x = draw.redraw(in_stratum, b, rng.next_f64(), total, batch);
                    let Some(c) = self.tree.candidate(&self.slots, x) else {
                        continue;
                    };
                    if c.priority <= 0.0 {
                        continue;
                    }
                    if let Some(guard) = self.slots.try_read(c.index, c.state) {
                        held[0] = Some(guard);
                        // SAFETY: row `b < batch`, as above.
                        unsafe { self.slots.copy_rows(&held[..1], columns, b) };
                        self.push_sampled(c, out);
                        held[0] = None;
                        break;
                    }
                }
                b += 1;
            }
        }
        for (prob, &p) in out.probabilities.iter_mut().zip(&out.priorities) {
            *prob = p / total;
        }
        // Under concurrent updates a sampled priority may be below the minimum read at the
        // start; taking the smaller keeps every weight in (0, 1].
        let batch_min = out.priorities.iter().copied().fold(f64::INFINITY, f64::min);
        importance_weights(
            self.config.weight_normalization(),
            draw.beta(),
            min_positive.min(batch_min),
            &out.priorities,
            &mut out.weights,
        );
        Ok(Descent {
            total,
            min_positive,
        })
    }

    /// Record sampled candidate `c`, whose row was copied under a read reference that the
    /// caller still holds: its key, index and priority.
    fn push_sampled(&self, c: Candidate, out: &mut SampleBatch) {
        let priority = (self.slots.faults).reported_priority(c.priority, || self.tree.get(c.index));
        // A positive priority means the slot holds an item: epoch >= 1.
        let generation = self.slots.generation(c.index, c.state).unwrap_or(0);
        out.keys.push(Key {
            index: c.index,
            generation,
        });
        out.indices.push(c.index);
        out.priorities.push(priority);
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

impl<T: SharedTree> ConcurrentBuffer for SlotBuffer<T> {
    fn new(config: Config) -> Result<Self> {
        let slots = Slots::new(config.schema().clone(), config.capacity())?;
        let tree = T::new(&config)?;
        let running_max = config.stored_priority(config.initial_priority());
        Ok(SlotBuffer {
            config,
            tree,
            slots,
            cursor: CachePadded::new(AtomicU64::new(0)),
            completed: CachePadded::new(AtomicU64::new(0)),
            completed_before_clear: AtomicU64::new(0),
            burnt: AtomicU64::new(0),
            updating: CachePadded::new(AtomicU64::new(0)),
            saving_from: AtomicU64::new(0),
            running_max: CachePadded::new(AtomicF64::new(running_max)),
        })
    }

    fn config(&self) -> &Config {
        &self.config
    }

    fn insert(&self, columns: &[ColumnSlice<'_>], priority: Option<f64>) -> Result<Key> {
        self.config
            .check_insert(self.slots.count_items(columns)?, priority)?;
        let first = self.reserve(1)?;
        let mut key = None;
        let priority = priority.as_ref().map(std::slice::from_ref);
        // SAFETY: `count_items` checked `columns` above and `check_insert` found one item.
        unsafe {
            self.write_chunk::<1>(first, columns, 0, 1, priority, &mut None, |k| key = Some(k))
        };
        Ok(key.expect("a chunk of one item yields one key"))
    }

    fn insert_batch(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
    ) -> Result<Vec<Key>> {
        let mut keys = Vec::new();
        self.insert_batch_into(columns, priorities, &mut keys)?;
        Ok(keys)
    }

    fn insert_batch_into(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
    ) -> Result<()> {
        let items = self.slots.count_items(columns)?;
        self.config.check_batch_priorities(items, priorities)?;
        crate::mem::reserve(keys, keys.len().saturating_add(items))?;
        // SAFETY: `count_items` checked `columns` above and returned `items`.
        unsafe { self.write_all(columns, items, priorities, keys) }
    }

    /// Sample into `out`, built in `out`'s spare ([`SampleBatch::build_with`]): a failed call
    /// leaves `out` as it was, and a warm `out` never allocates.
    fn sample_with(
        &self,
        draw: Draw<'_>,
        rows: Rows<'_, '_>,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<Descent> {
        check_request(&draw, &rows, self.len(), self.config.schema())?;
        let batch = draw.len();
        match rows {
            Rows::Owned => out.build_with(true, |spare, candidates, indices| {
                // Taken out for the call (no allocation) so that the rows and the rest of
                // the spare batch can be borrowed apart.
                let mut columns = std::mem::take(&mut spare.columns);
                let result = self.slots.shape_output(batch, &mut columns).and_then(|()| {
                    // SAFETY: `shape_output` just shaped `columns` for `batch` rows.
                    unsafe {
                        self.sample_in_spare(
                            draw,
                            rng,
                            spare,
                            candidates,
                            indices,
                            &mut columns[..],
                        )
                    }
                });
                spare.columns = columns;
                result
            }),
            Rows::Into(columns) => out.build_with(false, |spare, candidates, indices| {
                // SAFETY: `check_request` checked `columns` for `batch` rows above.
                unsafe { self.sample_in_spare(draw, rng, spare, candidates, indices, columns) }
            }),
            Rows::Skip => out.build_with(false, |spare, candidates, indices| {
                let no_columns: &mut [ColumnData] = &mut [];
                // SAFETY: no columns: nothing is copied.
                unsafe { self.sample_in_spare(draw, rng, spare, candidates, indices, no_columns) }
            }),
        }
    }

    fn stats(&self) -> Stats {
        let (total, min_positive) = self.tree.total_and_min();
        // ORDERING: Relaxed, as in `raise_running_max`.
        let running_max = (self.config)
            .default_stored(self.running_max.load(Ordering::Relaxed), || {
                self.tree.max_leaf()
            });
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
        let handed_out = self.cursor.load(Ordering::Relaxed) & !SAVING;
        self.config.check_update(keys, priorities, handed_out)?;
        let mut report = UpdateReport::default();
        let mut max_applied = 0.0f64;
        for (keys, priorities) in keys
            .chunks(UPDATE_CHUNK)
            .zip(priorities.chunks(UPDATE_CHUNK))
        {
            let mut stored = [0.0f64; UPDATE_CHUNK];
            for (s, &p) in stored.iter_mut().zip(priorities) {
                *s = self.config.stored_priority(p);
            }
            let (chunk, max) = self.tree.update(&self.slots, keys, &stored[..keys.len()]);
            report.applied += chunk.applied;
            report.stale += chunk.stale;
            max_applied = max_applied.max(max);
        }
        if report.applied > 0 {
            self.raise_running_max(max_applied);
        }
        Ok(report)
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
            .map(|generation| Key { index, generation }))
    }

    fn len(&self) -> usize {
        // ORDERING: Relaxed: a count with no data attached.
        let completed = self.completed.load(Ordering::Relaxed);
        // ORDERING: Relaxed, as above.
        let before_clear = self.completed_before_clear.load(Ordering::Relaxed);
        completed
            .saturating_sub(before_clear)
            .min(self.slots.capacity() as u64) as usize
    }

    fn inserted(&self) -> u64 {
        // ORDERING: Relaxed, as in `reserve`.
        self.cursor.load(Ordering::Relaxed) & !SAVING
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
        let completed = self.completed.load(Ordering::Relaxed);
        self.completed_before_clear
            .store(completed, Ordering::Relaxed);
        for slot in 0..self.slots.capacity() {
            // Owning the slot, the leaf is ours to zero (as a writer's lazy-writing zero).
            self.slots
                .clear(slot, || self.tree.set_owned(&[(slot, 0.0)]));
        }
        let initial = self.config.stored_priority(self.config.initial_priority());
        // ORDERING: Relaxed, as in `raise_running_max`.
        self.running_max.store(initial, Ordering::Relaxed);
    }

    fn rebuild(&self) {
        self.tree.rebuild();
    }
}

/// A public buffer type over `SlotBuffer<$tree>`: the newtype, its [`ConcurrentBuffer`]
/// impl forwarding every method, and the loom-only constructor with faults. One definition
/// for `SplitLockBuffer` and `LockFreeBuffer`, so that users name and read real types.
macro_rules! slot_buffer_type {
    ($(#[$attr:meta])* $name:ident, $tree:ty) => {
        $(#[$attr])*
        #[derive(Debug)]
        pub struct $name(pub(crate) $crate::buffer::slot_buffer::SlotBuffer<$tree>);

        impl $name {
            /// A buffer with deliberate protocol faults, for the loom models only.
            #[cfg(loom)]
            #[doc(hidden)]
            pub fn with_faults(
                config: $crate::buffer::Config,
                faults: $crate::faults::Faults,
            ) -> $crate::Result<Self> {
                $crate::buffer::slot_buffer::SlotBuffer::with_faults(config, faults).map($name)
            }
        }

        impl $name {
            /// The state a save would write, for the loom models: (inserted, len, running
            /// maximum, each slot's priority, generation and column bytes).
            #[cfg(loom)]
            #[doc(hidden)]
            #[allow(clippy::type_complexity)]
            pub fn snapshot_for_model(
                &self,
            ) -> (u64, usize, f64, Vec<f64>, Vec<u64>, Vec<Vec<u8>>) {
                let s = self.0.snapshot().expect("a small snapshot");
                (
                    s.inserted,
                    s.len,
                    s.running_max,
                    s.priorities,
                    s.generations.into_owned(),
                    s.columns.into_iter().map(|c| c.into_owned()).collect(),
                )
            }
        }

        impl $crate::checkpoint::Checkpoint for $name {
            fn save_with(
                &self,
                dir: &std::path::Path,
                options: &$crate::checkpoint::SaveOptions,
            ) -> $crate::Result<()> {
                self.0.save_with(dir, options)
            }
        }

        impl $crate::checkpoint::sealed::TreeState for $name {
            #[allow(private_interfaces)]
            fn tree_state(&self) -> $crate::Result<$crate::checkpoint::State> {
                self.0.snapshot().map($crate::checkpoint::State::of)
            }
            #[allow(private_interfaces)]
            fn from_tree_state(
                config: $crate::buffer::Config,
                state: &$crate::checkpoint::State,
            ) -> $crate::Result<Self> {
                $crate::buffer::slot_buffer::SlotBuffer::<$tree>::from_state(config, state)
                    .map($name)
            }
        }

        impl $crate::checkpoint::TreeState for $name {}

        impl $crate::checkpoint::Load for $name {
            fn load_with<P: AsRef<std::path::Path>>(
                dir: P,
                options: &$crate::checkpoint::LoadOptions,
            ) -> $crate::Result<$crate::checkpoint::Loaded<Self>> {
                let plan = $crate::checkpoint::Plan::open(dir.as_ref(), options)?;
                let (buffer, user) =
                    $crate::buffer::slot_buffer::SlotBuffer::<$tree>::restore(&plan)?;
                Ok($crate::checkpoint::Loaded {
                    buffer: $name(buffer),
                    user,
                })
            }
        }

        impl $crate::buffer::ConcurrentBuffer for $name {
            fn new(config: $crate::buffer::Config) -> $crate::Result<Self> {
                <$crate::buffer::slot_buffer::SlotBuffer<$tree> as $crate::buffer::ConcurrentBuffer>::new(config).map($name)
            }
            fn config(&self) -> &$crate::buffer::Config {
                self.0.config()
            }
            fn insert(
                &self,
                columns: &[$crate::storage::ColumnSlice<'_>],
                priority: Option<f64>,
            ) -> $crate::Result<$crate::buffer::Key> {
                self.0.insert(columns, priority)
            }
            fn insert_batch(
                &self,
                columns: &[$crate::storage::ColumnSlice<'_>],
                priorities: Option<&[f64]>,
            ) -> $crate::Result<Vec<$crate::buffer::Key>> {
                self.0.insert_batch(columns, priorities)
            }
            fn insert_batch_into(
                &self,
                columns: &[$crate::storage::ColumnSlice<'_>],
                priorities: Option<&[f64]>,
                keys: &mut Vec<$crate::buffer::Key>,
            ) -> $crate::Result<()> {
                self.0.insert_batch_into(columns, priorities, keys)
            }
            fn sample_with(
                &self,
                draw: $crate::buffer::Draw<'_>,
                rows: $crate::buffer::Rows<'_, '_>,
                rng: &mut dyn $crate::RandomSource,
                out: &mut $crate::buffer::SampleBatch,
            ) -> $crate::Result<$crate::buffer::Descent> {
                self.0.sample_with(draw, rows, rng, out)
            }
            fn stats(&self) -> $crate::buffer::Stats {
                self.0.stats()
            }
            fn update_priorities(
                &self,
                keys: &[$crate::buffer::Key],
                priorities: &[f64],
            ) -> $crate::Result<$crate::buffer::UpdateReport> {
                self.0.update_priorities(keys, priorities)
            }
            fn priority(&self, index: usize) -> $crate::Result<f64> {
                self.0.priority(index)
            }
            fn key(&self, index: usize) -> $crate::Result<Option<$crate::buffer::Key>> {
                self.0.key(index)
            }
            fn len(&self) -> usize {
                self.0.len()
            }
            fn inserted(&self) -> u64 {
                self.0.inserted()
            }
            fn total_priority(&self) -> f64 {
                self.0.total_priority()
            }
            fn consistency(&self) -> $crate::tree::Consistency {
                self.0.consistency()
            }
            fn memory_bytes(&self) -> usize {
                self.0.memory_bytes()
            }
            fn clear(&self) {
                self.0.clear()
            }
            fn rebuild(&self) {
                self.0.rebuild()
            }
        }
    };
}
pub(crate) use slot_buffer_type;

/// Test hook: the generations' end of life without 2^47 writes per slot.
#[cfg(all(test, not(loom)))]
impl<T: SharedTree> SlotBuffer<T> {
    /// Make a quiescent buffer that holds `capacity` items look as if every slot had had
    /// all its writes but the last ([`MAX_EPOCH`]): each state word at `MAX_EPOCH`, the
    /// cursor and the completed count at `MAX_EPOCH * capacity`, which this returns (the
    /// next generation; the `capacity` after it are the last). The items, their rows and
    /// leaves stay (their keys' generations change with the epochs).
    pub(crate) fn age_to_last_epoch_for_test(&self) -> u64 {
        let capacity = self.slots.capacity();
        assert_eq!(self.len(), capacity, "fill the buffer first");
        for slot in 0..capacity {
            self.slots.set_epoch_for_test(slot, MAX_EPOCH);
        }
        let handed_out = MAX_EPOCH * capacity as u64;
        // ORDERING: SeqCst, as in `Slots::set_epoch_for_test`: a quiescent buffer, one thread.
        self.cursor.store(handed_out, Ordering::SeqCst);
        self.completed.store(handed_out, Ordering::SeqCst);
        self.completed_before_clear.store(0, Ordering::SeqCst);
        handed_out
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::SharedTree;
    use crate::rng::RandomSource;
    use crate::{
        ConcurrentBuffer, Config, DType, LockFreeBuffer, SampleBatch, SampleMode, Schema,
        SplitLockBuffer,
    };

    struct Lcg(u64);
    impl RandomSource for Lcg {
        fn next_f64(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
        }
    }

    /// Four items of equal priority, so stratum b of a stratified batch of 4
    /// covers exactly slot b, and slot 0 held by a writer that has not zeroed its leaf. Every
    /// draw in stratum 0 lands on the held slot; before the fallback the sample failed with
    /// `Contention` after 4096 redraws, now its redraws leave the stratum and the sample
    /// succeeds without slot 0.
    fn a_blocked_stratum_falls_back_to_the_whole_range<B>(buffer: &super::SlotBuffer<B>)
    where
        B: super::SharedTree,
    {
        for v in 0..4u8 {
            buffer.insert(&[(&[v][..]).into()], Some(1.0)).unwrap();
        }
        // The next write of slot 0 is generation 4: epoch 4 / capacity 4 = 1.
        let held = buffer.slots.begin_write(0, 1);
        let mut out = SampleBatch::default();
        let mut rng = Lcg(7);
        for _ in 0..20 {
            buffer
                .sample_into(4, 0.4, SampleMode::Stratified, &mut rng, &mut out)
                .expect("a blocked stratum must not make the sample fail");
            assert!(!out.indices.contains(&0), "slot 0 is being written");
            assert_eq!(&out.indices[1..], &[1, 2, 3]);
        }
        drop(held);
    }

    /// A buffer whose slots have had every epoch but the last: the next `capacity` writes
    /// fit, the one after is `GenerationsExhausted` and changes nothing (a batch that would
    /// cross the end is refused whole), and a staged writer keeps what it could not flush.
    fn generations_run_out_cleanly<B: super::SharedTree>(buffer: super::SlotBuffer<B>) {
        use crate::{Error, Key, Writer};
        for v in 0..4u8 {
            buffer.insert(&[(&[v][..]).into()], Some(1.0)).unwrap();
        }
        let base = buffer.age_to_last_epoch_for_test();
        // The items kept their leaves; their keys now carry the aged generations.
        assert_eq!(buffer.total_priority(), 4.0);
        assert_eq!(
            buffer.key(1).unwrap(),
            Some(Key {
                index: 1,
                generation: base - 4 + 1
            })
        );
        let keys = buffer
            .insert_batch(&[(&[10u8, 11, 12][..]).into()], Some(&[2.0, 2.0, 2.0]))
            .unwrap();
        let generations: Vec<u64> = keys.iter().map(|k| k.generation).collect();
        assert_eq!(generations, [base, base + 1, base + 2]);
        let snapshot = |b: &super::SlotBuffer<B>| {
            (
                b.len(),
                b.inserted(),
                b.total_priority(),
                (0..4).map(|i| b.key(i).unwrap()).collect::<Vec<_>>(),
                (0..4).map(|i| b.priority(i).unwrap()).collect::<Vec<_>>(),
            )
        };
        let before = snapshot(&buffer);
        // Two more would need generation base + 4, of epoch MAX_EPOCH + 1: refused whole.
        assert!(matches!(
            buffer.insert_batch(&[(&[13u8, 14][..]).into()], None),
            Err(Error::GenerationsExhausted { .. })
        ));
        assert_eq!(snapshot(&buffer), before, "a refused batch changes nothing");
        // The last generation fits; after it, every write is refused.
        let last = buffer.insert(&[(&[13u8][..]).into()], Some(3.0)).unwrap();
        assert_eq!(last.generation, base + 3);
        let full = snapshot(&buffer);
        assert!(matches!(
            buffer.insert(&[(&[14u8][..]).into()], None),
            Err(Error::GenerationsExhausted { index: 0 })
        ));
        assert_eq!(snapshot(&buffer), full);
        // A staged writer: its flush fails and keeps the item.
        let mut writer = Writer::new(&buffer, 4).unwrap();
        writer.push(&[(&[15u8][..]).into()], None).unwrap();
        assert!(matches!(
            writer.flush(),
            Err(Error::GenerationsExhausted { .. })
        ));
        assert_eq!(writer.staged(), 1, "nothing staged is lost");
        drop(writer);
        assert_eq!(snapshot(&buffer), full);
        // What is stored can still be sampled and updated.
        let mut out = SampleBatch::default();
        buffer
            .sample_into(8, 0.4, SampleMode::Stratified, &mut Lcg(3), &mut out)
            .unwrap();
        assert!(out.keys.iter().all(|k| k.generation >= base));
        let report = buffer.update_priorities(&[last], &[5.0]).unwrap();
        assert_eq!(report.applied, 1);
        assert_eq!(
            buffer.priority(3).unwrap(),
            buffer.config().stored_priority(5.0)
        );
    }

    #[test]
    fn generations_run_out_cleanly_on_split_lock() {
        generations_run_out_cleanly(buffer::<SplitLockBuffer>().0);
    }

    #[test]
    fn generations_run_out_cleanly_on_lock_free() {
        generations_run_out_cleanly(buffer::<LockFreeBuffer>().0);
    }

    fn buffer<B: ConcurrentBuffer>() -> B {
        B::new(
            Config::builder(4, Schema::new().column("x", DType::U8, 1))
                .build()
                .unwrap(),
        )
        .unwrap()
    }

    /// A LockFree buffer of capacity 4 holding priorities 1, 2, 3, 4 (before the exponent).
    fn lock_free_with_four_items() -> LockFreeBuffer {
        let buffer = buffer::<LockFreeBuffer>();
        for v in 0..4u8 {
            buffer
                .insert(&[(&[v][..]).into()], Some(1.0 + f64::from(v)))
                .unwrap();
        }
        buffer
    }

    /// A LockFree retire stores the leaf alone (the ancestors keep the evicted priority until
    /// the install's climb), and a write that unwinds before its install leaves the tree
    /// exact again: `RetiredLeaves` climbs from the zeroed leaf while the slot is owned.
    #[test]
    fn a_lock_free_write_that_unwinds_before_its_install_leaves_the_tree_exact() {
        let buffer = lock_free_with_four_items();
        let total = buffer.total_priority();
        // The next write of slot 0 is generation 4: epoch 1.
        let write = buffer.0.slots.begin_write(0, 1);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _retired = super::RetiredLeaves::<_, 1> {
                tree: &buffer.0.tree,
                slots: [0],
                n: 1,
            };
            buffer.0.tree.retire_owned(&[(0, 0.0)]);
            assert_eq!(buffer.priority(0).unwrap(), 0.0);
            assert_eq!(buffer.total_priority(), total, "the retire did not climb");
            assert!(!buffer.consistency().exact);
            panic!("a copy that fails");
        }));
        assert!(unwound.is_err());
        drop(write);
        assert!(buffer.consistency().exact);
        assert_eq!(buffer.priority(0).unwrap(), 0.0);
        let rest: f64 = (1..4).map(|i| buffer.priority(i).unwrap()).sum();
        assert!((buffer.total_priority() - rest).abs() < 1e-12);
        assert!(buffer.total_priority() < total);
    }

    /// A kept leaf (`SharedTree::keeps_leaves`) whose write unwinds is zeroed with its
    /// ancestors: the slot ends with no item, so it must not keep the evicted priority.
    #[test]
    fn a_lock_free_write_that_kept_its_leaf_and_unwinds_zeroes_it() {
        let buffer = lock_free_with_four_items();
        let write = buffer.0.slots.begin_write(0, 1);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // As `write_chunk` arms it: every owned slot, kept or retired.
            let _owned = super::RetiredLeaves::<_, 1> {
                tree: &buffer.0.tree,
                slots: [0],
                n: 1,
            };
            panic!("a copy that fails");
        }));
        assert!(unwound.is_err());
        drop(write);
        assert!(buffer.consistency().exact);
        assert_eq!(buffer.priority(0).unwrap(), 0.0);
        assert_eq!(buffer.key(0).unwrap(), None);
        let rest: f64 = (1..4).map(|i| buffer.priority(i).unwrap()).sum();
        assert!((buffer.total_priority() - rest).abs() < 1e-12);
    }

    /// Batches in which some slots keep their leaves (the new priority is the evicted one)
    /// and others change: every variant ends with the same priorities, exact sums and the
    /// new keys, whichever slots the lock-free writer left alone.
    fn kept_and_changed_leaves<B: ConcurrentBuffer>() {
        let schema = Schema::new().column("x", DType::U8, 1);
        let buffer = B::new(Config::builder(4, schema).alpha(1.0).build().unwrap()).unwrap();
        let rows: Vec<u8> = (0..4).collect();
        buffer
            .insert_batch(&[(&rows[..]).into()], Some(&[2.0, 3.0, 2.0, 5.0]))
            .unwrap();
        let keys = buffer
            .insert_batch(&[(&rows[..]).into()], Some(&[2.0, 7.0, 2.0, 1.0]))
            .unwrap();
        assert_eq!(
            (0..4)
                .map(|i| buffer.priority(i).unwrap())
                .collect::<Vec<_>>(),
            [2.0, 7.0, 2.0, 1.0]
        );
        assert_eq!(buffer.total_priority(), 12.0);
        assert!(buffer.consistency().exact);
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(buffer.key(i).unwrap(), Some(*key));
            assert_eq!(key.generation, 4 + i as u64);
        }
        // Single inserts at the default priority (the running maximum, 7): slot 1 keeps
        // its leaf, the others change.
        for _ in 0..4 {
            buffer.insert(&[(&[9u8][..]).into()], None).unwrap();
        }
        assert_eq!(buffer.total_priority(), 28.0);
        assert!(buffer.consistency().exact);
        let report = buffer.update_priorities(&keys, &[1.0; 4]).unwrap();
        assert_eq!((report.applied, report.stale), (0, 4));
    }

    #[test]
    fn kept_and_changed_leaves_on_split_lock() {
        kept_and_changed_leaves::<SplitLockBuffer>();
    }

    #[test]
    fn kept_and_changed_leaves_on_lock_free() {
        kept_and_changed_leaves::<LockFreeBuffer>();
    }

    #[test]
    fn a_blocked_stratum_falls_back_on_split_lock() {
        a_blocked_stratum_falls_back_to_the_whole_range(&buffer::<SplitLockBuffer>().0);
    }

    #[test]
    fn a_blocked_stratum_falls_back_on_lock_free() {
        a_blocked_stratum_falls_back_to_the_whole_range(&buffer::<LockFreeBuffer>().0);
    }
}
