//! The insert path: the FIFO cursor and lazy writing (module doc of `slot_buffer`, steps 1-5).

use super::super::slots::{WriteGuard, MAX_EPOCH};
use super::super::{DefaultPriority, Key};
use super::*;
use crate::buffer::reservations::RecordGuard;
use crate::error::{Error, Result};
use crate::faults::Point;
use crate::storage::ColumnSlice;
use crate::sync::Ordering;

/// The slots of a writer's chunk, owned and not yet installed: if the chunk unwinds (a
/// panic in a copy) before the install, dropping this sets their leaves to 0 through
/// [`SharedTree::set_owned`], ancestors included, so the tree is exact at quiescence
/// whatever `retire_owned` left undone, and a slot whose leaf was kept
/// ([`SharedTree::keeps_leaves`]) does not keep the priority of an item it no longer holds.
/// The writer sets `n` to 0 once its install is made.
pub(super) struct RetiredLeaves<'a, T: SharedTree, const M: usize> {
    pub(super) tree: &'a T,
    pub(super) slots: [usize; M],
    pub(super) n: usize,
}

impl<T: SharedTree, const M: usize> Drop for RetiredLeaves<'_, T, M> {
    fn drop(&mut self) {
        if crate::faults::dying() {
            // A modeled death (loom): a killed process runs no destructor.
            return;
        }
        for &slot in &self.slots[..self.n] {
            self.tree.set_owned(&[(slot, 0.0)]);
        }
    }
}

impl<T: SharedTree> SlotBuffer<T> {
    /// Raise the running maximum (a raw priority) to `raw`.
    pub(super) fn raise_running_max(&self, raw: f64) {
        if !self.slots.faults.max_by_cas() {
            // ORDERING: Relaxed (the broken twin's racy load-then-store).
            if self.counters.running_max.load(Ordering::Relaxed) < raw {
                self.counters.running_max.store(raw, Ordering::Relaxed);
            }
            return;
        }
        // ORDERING: Relaxed: the maximum is a single value with no data attached; each
        // read-modify-write sees the latest value in the modification order.
        self.counters.running_max.fetch_max(raw, Ordering::Relaxed);
    }

    /// Take `n` consecutive generations from the cursor; in a shared mapping, recorded in
    /// `record` (`buffer/reservations.rs`) before they are taken, so that a survivor finds them if
    /// this process dies.
    pub(super) fn reserve(&self, n: u64, record: Option<&RecordGuard<'_>>) -> Result<u64> {
        if let Some(record) = record {
            return self.reserve_recorded(n, record);
        }
        let capacity = self.slots.capacity() as u64;
        // ORDERING: SeqCst, for the zero-total test in `sample_in_spare` (a writer takes its
        // generation before it zeroes its leaf); the slot's state word orders everything
        // about the data.
        let taken = self.counters.cursor.fetch_add(n, Ordering::SeqCst);
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
                .counters
                .cursor
                .compare_exchange(first + n, first, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                // ORDERING: SeqCst, as `completed`, which a save reads with it.
                self.counters.burnt.fetch_add(n, Ordering::SeqCst);
            }
            return Err(Error::GenerationsExhausted {
                index: (last % capacity) as usize,
            });
        }
        Ok(first)
    }

    /// [`Self::reserve`] in a shared mapping: a CAS of the cursor, its intent recorded before
    /// and its success after, so that a survivor can tell which generations a dead writer
    /// held (`shm/recover.rs`).
    fn reserve_recorded(&self, n: u64, record: &RecordGuard<'_>) -> Result<u64> {
        let capacity = self.slots.capacity() as u64;
        // ORDERING: SeqCst, as in `reserve`, and with the record's SeqCst stores.
        let mut current = self.counters.cursor.load(Ordering::SeqCst);
        loop {
            let first = current & !SAVING;
            let last = first + n.max(1) - 1;
            if u128::from(last) >= (u128::from(MAX_EPOCH) + 1) * u128::from(capacity) {
                // Nothing taken: nothing to give back.
                return Err(Error::GenerationsExhausted {
                    index: (last % capacity) as usize,
                });
            }
            record.intend(first, n);
            // ORDERING: SeqCst, see above.
            match self.counters.cursor.compare_exchange_weak(
                current,
                current + n,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    record.confirm(first);
                    if let Some(j) = &self.journal {
                        j.point(Point::Reserved);
                    }
                    if current & SAVING != 0 {
                        self.wait_to_write(first);
                    }
                    return Ok(first);
                }
                Err(seen) => current = seen,
            }
        }
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
    pub(super) unsafe fn write_chunk<const M: usize>(
        &self,
        first: u64,
        columns: &[ColumnSlice<'_>],
        offset: usize,
        n: usize,
        priorities: Option<&[f64]>,
        default: &mut Option<(f64, f64)>,
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
        // The items whose policy version is below the floor are retired as they are
        // published; the floor is read once the slots are owned (`Slots::retire_below`
        // says why that makes it exact), before in the loom twin that breaks it.
        let versions = self.config.version_column().is_some();
        let owned_first = self.slots.faults.writer_reads_floor_owned();
        // ORDERING: Acquire: pairs with `retire_before`'s raise through the slot words
        // (see above); the early read of the twin has nothing to pair with.
        let mut floor = (versions && !owned_first).then(|| self.counters.floor(Ordering::Acquire));
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
        if versions && owned_first {
            // ORDERING: Acquire, see above.
            floor = Some(self.counters.floor(Ordering::Acquire));
        }
        let mut below = [false; M];
        if let Some(floor) = floor {
            for (j, b) in below.iter_mut().take(n).enumerate() {
                *b = self
                    .config
                    .version_of(columns, offset + j)
                    .is_some_and(|v| v < floor);
            }
        }
        if let Some(j) = &self.journal {
            j.point(Point::Owned);
        }
        // The exponent now: a `set_alpha` waits for this chunk (its generations were handed
        // out before the pause froze the cursor) or this chunk for it (it waited to write).
        let alpha = self.alpha();
        let mut raws = [0.0f64; M];
        // With default priorities under LiveMax, the first slot is retired alone first,
        // climb included: each item of a batch gets the largest live priority once the first
        // item's predecessor is gone, which is what one insert after another gives (each
        // later item sees the earlier ones at that value, and an evicted leaf only ever
        // lowers the max).
        let live_default = priorities.is_none()
            && default.is_none()
            && self.config.default_priority() == DefaultPriority::LiveMax;
        // A default priority is a raw one too (`set_alpha` raises it again): the running
        // maximum's, or under LiveMax the root of the largest stored priority, whose power
        // then stands for it.
        if live_default {
            self.tree.set_owned(&entries[..1]);
            let raw = match self.tree.max_leaf() {
                Some(m) if m > 0.0 => super::super::raw_of_stored(alpha, m),
                _ => self.config.initial_priority(),
            };
            *default = Some((raw, super::super::stored_at(alpha, raw)));
        }
        match priorities {
            Some(ps) => {
                let mut max = 0.0f64;
                let given = &ps[offset..offset + n];
                for (j, (entry, &p)) in entries.iter_mut().zip(given).enumerate() {
                    entry.1 = super::super::stored_at(alpha, p);
                    raws[j] = p;
                    if !below[j] {
                        max = max.max(p);
                    }
                }
                self.raise_running_max(max);
            }
            None => {
                // One value for every item of the batch (see above), read once per batch;
                // LiveMax's was read above.
                let (raw, stored) = *default.get_or_insert_with(|| {
                    // ORDERING: Relaxed, as in `raise_running_max`.
                    let raw = self.counters.running_max.load(Ordering::Relaxed);
                    (raw, super::super::stored_at(alpha, raw))
                });
                for (entry, r) in entries.iter_mut().zip(&mut raws) {
                    entry.1 = stored;
                    *r = raw;
                }
            }
        }
        // The raw priorities, while the slots are owned: no reader takes one before the
        // publication below.
        for (&(slot, _), &raw) in entries.iter().zip(&raws) {
            self.raw.set(slot, raw);
        }
        // An item retired as it is published gets no mass.
        if floor.is_some() {
            for (entry, _) in entries.iter_mut().zip(&below).filter(|(_, &b)| b) {
                entry.1 = 0.0;
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
            if j == 0 {
                if let Some(journal) = &self.journal {
                    journal.point(Point::Copying);
                }
            }
        }
        // Step 3: the real priorities (one tree operation); then each slot is published
        // (the linearization point: until then samplers see the old item's leaf at 0, or a
        // kept leaf whose slot refuses them, and the new one absent).
        if m > 0 {
            self.tree.install_owned(install, retire);
        }
        retired.n = 0;
        if let Some(journal) = &self.journal {
            journal.point(Point::Installed);
        }
        for (j, guard) in guards.iter_mut().take(n).enumerate() {
            if let Some(guard) = guard.take() {
                match below[j] {
                    false => guard.publish(),
                    true => guard.publish_retired(),
                }
                on_key(self.config.key(entries[j].0, first + j as u64));
            }
            if j == 0 {
                if let Some(journal) = &self.journal {
                    journal.point(Point::Publishing);
                }
            }
        }
        // ORDERING: SeqCst, for the zero-total test in `sample_in_spare`.
        self.counters
            .completed
            .fetch_add(n as u64, Ordering::SeqCst);
    }

    /// Insert `items` items of `columns` (validated) in chunks of at most `WRITE_CHUNK`
    /// (and at most `capacity`) generations each; the keys in item order.
    ///
    /// # Safety
    /// `columns` passed this buffer's `count_items`, which returned `items`.
    pub(super) unsafe fn write_all(
        &self,
        columns: &[ColumnSlice<'_>],
        items: usize,
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
    ) -> Result<()> {
        let record = self.journal.as_ref().map(|j| j.claim());
        let first = self.reserve(items as u64, record.as_ref())?;
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
}
