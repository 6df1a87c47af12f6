//! The sequential prioritized replay buffer (`&mut self` to write, `&self` to sample).
//!
//! State: a [`SumTree`] over the slots' stored priorities, the columnar [`Storage`], and
//! per slot the generation (insertion number) of the data it holds. The FIFO cursor is
//! derived from the insertion counter: item number `g` lives in slot `g % capacity`.
//!
//! Every method validates its whole input before it changes anything.

use std::borrow::Cow;
use std::path::Path;

use crate::checkpoint::{
    Checkpoint, Load, LoadOptions, Loaded, Plan, RawState, SaveOptions, Snapshot, State,
};
use crate::rng::RandomSource;

use super::protocol::{batch_weights, Distinct, Drawn, Passes, Uniform};
use super::sample::Selector;
use super::{
    check_request, Config, DefaultPriority, Descent, Draw, Key, Rows, SampleBatch, SampleMode,
    Stats, UpdateReport,
};
use crate::error::{Error, Result};
use crate::mem::{prefetch_line, PREFETCH_AHEAD};
use crate::storage::{ColumnData, ColumnSlice, ColumnSliceMut, Storage};
use crate::tree::SumTree;

/// The random source of a sample at given fractions: `Draw::At` takes no draw, and the
/// sequential buffer never draws again (nothing is ever in flight).
struct NoDraws;

impl RandomSource for NoDraws {
    fn next_f64(&mut self) -> f64 {
        0.0
    }
}

/// Generation of a slot that holds nothing.
const NO_DATA: u64 = u64::MAX;

/// A prioritized experience replay buffer for one thread.
///
/// ```
/// use kary_replay::{Config, DType, ReplayBuffer, SampleMode, Schema};
/// use rand::{rngs::SmallRng, SeedableRng};
///
/// let schema = Schema::new().column("obs", DType::F32, 2).column("reward", DType::F32, 1);
/// let mut buffer = ReplayBuffer::new(Config::builder(4, schema).alpha(1.0).build()?)?;
/// // A batch of 3 items: columns are item-major, `items x shape` elements each.
/// let keys = buffer.insert_batch(
///     &[(&[0.0f32, 0.0, 1.0, 1.0, 2.0, 2.0]).into(), (&[0.0f32, 1.0, 2.0]).into()],
///     Some(&[1.0, 0.0, 3.0]),
/// )?;
/// assert_eq!(buffer.len(), 3);
/// assert_eq!(buffer.total_priority(), 4.0);
///
/// let mut rng = SmallRng::seed_from_u64(0);
/// let batch = buffer.sample(8, 1.0, SampleMode::Independent, &mut rng)?;
/// assert!(batch.indices.iter().all(|&i| i != 1)); // priority 0: never sampled
///
/// // Two more inserts wrap around and overwrite slot 0: its old key goes stale.
/// buffer.insert(&[(&[3.0f32, 3.0]).into(), (&[3.0f32]).into()], None)?;
/// buffer.insert(&[(&[4.0f32, 4.0]).into(), (&[4.0f32]).into()], None)?;
/// let report = buffer.update_priorities(&keys, &[5.0, 5.0, 5.0])?;
/// assert_eq!((report.applied, report.stale), (2, 1));
/// # Ok::<(), kary_replay::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ReplayBuffer {
    config: Config,
    tree: SumTree,
    storage: Storage,
    generations: Vec<u64>,
    /// Items ever inserted: the next item's generation.
    inserted: u64,
    /// Items stored.
    len: usize,
    /// The ring's newest generations that may hold an item: inserts since the last clear,
    /// at most the capacity (`len` is this less the items deleted by key).
    span: usize,
    /// Largest raw priority given so far (RunningMax: its power is the default priority).
    running_max: f64,
    /// Each slot's raw priority, before the exponent ([`ReplayBuffer::set_alpha`]).
    raw: Vec<f64>,
    /// The policy-version floor ([`ReplayBuffer::retire_before`]; `i64::MIN`: none).
    version_floor: i64,
    /// The shuffled passes ([`SampleMode::Shuffled`](super::SampleMode::Shuffled)).
    passes: Passes,
}

impl ReplayBuffer {
    /// An empty buffer; fails cleanly (no abort) when the memory cannot be had. A
    /// configuration with a rate limit is refused ([`Error::InvalidParameter`]): this
    /// buffer has one thread, which would wait for itself; use a concurrent buffer, or a
    /// [`RateLimiter`](crate::rate::RateLimiter) of its own with `try_*` calls.
    pub fn new(config: Config) -> Result<ReplayBuffer> {
        if config.rate_limit().is_some() {
            return Err(Error::InvalidParameter {
                name: "rate_limit",
                value: 1.0,
                reason: "the sequential ReplayBuffer has one thread, which would wait for \
                         itself: use a concurrent buffer (they hold the limit), or a \
                         standalone RateLimiter with try_insert / try_sample",
            });
        }
        ReplayBuffer::under_limiter(config)
    }

    /// A buffer of `config` whose rate limit, if it has one, its owner holds and enforces
    /// (a [`GlobalLock`](crate::GlobalLockBuffer) around it): kept in the configuration,
    /// not enforced here.
    pub(crate) fn under_limiter(config: Config) -> Result<ReplayBuffer> {
        if config.max_times_sampled().is_some() {
            return Err(Error::InvalidParameter {
                name: "max_times_sampled",
                value: f64::from(config.max_times_sampled().unwrap_or(0)),
                reason: "the sequential and global-lock buffers do not retire items as they \
                         draw them: use SplitLockBuffer or LockFreeBuffer (or a shared buffer)",
            });
        }
        let config = config.tagged();
        let capacity = config.capacity();
        // Storage first: it is usually the largest allocation, so a failure costs least.
        let storage = Storage::new(config.schema().clone(), capacity)?;
        // The maxima, when LiveMax's default priorities or the max-heap selector need them.
        let tree = SumTree::build(capacity, config.fanout(), config.keeps_maxima())?;
        let mut generations = Vec::new();
        generations
            .try_reserve_exact(capacity)
            .map_err(|_| Error::Allocation {
                bytes: capacity.saturating_mul(8),
            })?;
        generations.resize(capacity, NO_DATA);
        let mut raw = Vec::new();
        crate::mem::reserve(&mut raw, capacity)?;
        raw.resize(capacity, 0.0);
        let running_max = config.initial_priority();
        Ok(ReplayBuffer {
            config,
            tree,
            storage,
            generations,
            inserted: 0,
            len: 0,
            span: 0,
            running_max,
            raw,
            version_floor: i64::MIN,
            passes: Passes::default(),
        })
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Items stored now (at most the capacity).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots.
    pub fn capacity(&self) -> usize {
        self.config.capacity()
    }

    /// Items ever inserted (including evicted ones, and ones before [`Self::clear`]).
    pub fn inserted(&self) -> u64 {
        self.inserted
    }

    /// Sum of the stored priorities.
    pub fn total_priority(&self) -> f64 {
        self.tree.total()
    }

    /// Stored (alpha-exponentiated) priority of slot `index` (0 for an empty slot).
    pub fn priority(&self, index: usize) -> Result<f64> {
        self.tree.get(index)
    }

    /// The key of the item in slot `index`, or `None` when the slot is empty.
    pub fn key(&self, index: usize) -> Result<Option<Key>> {
        let generation = *self.generations.get(index).ok_or(Error::OutOfRange {
            index,
            capacity: self.capacity(),
        })?;
        Ok((generation != NO_DATA).then(|| self.config.key(index, generation)))
    }

    /// The sum tree (read-only: consistency checks, introspection).
    pub fn tree(&self) -> &SumTree {
        &self.tree
    }

    /// The stored columns (read-only).
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Recompute the tree's internal nodes from the leaves. Writes already keep them exact;
    /// this is a repair, never needed in normal use.
    pub fn rebuild(&mut self) {
        self.tree.rebuild();
    }

    /// Bytes held by the tree, the columns and the generations.
    pub fn memory_bytes(&self) -> usize {
        self.tree.memory_bytes() + self.storage.memory_bytes() + self.generations.capacity() * 8
    }

    /// Insert one item (each column slice holds exactly one item's elements).
    /// `priority` is raw (alpha is applied); `None` gives the default priority.
    pub fn insert(&mut self, columns: &[ColumnSlice<'_>], priority: Option<f64>) -> Result<Key> {
        self.config
            .check_insert(self.storage.count_items(columns)?, priority)?;
        (self.config).check_versions(columns, 1, self.version_floor)?;
        // SAFETY: `count_items` checked `columns` just above and found at least one item
        // (`check_insert` asks for exactly one).
        Ok(unsafe { self.insert_checked(columns, 0, priority) })
    }

    /// Insert a batch: each column slice holds `items x shape` elements, item-major.
    /// `priorities`, when given, holds one raw priority per item. Items beyond the capacity
    /// evict earlier ones, those of this batch included, in FIFO order.
    pub fn insert_batch(
        &mut self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
    ) -> Result<Vec<Key>> {
        let mut keys = Vec::new();
        self.insert_batch_into(columns, priorities, &mut keys)?;
        Ok(keys)
    }

    /// [`insert_batch`](ReplayBuffer::insert_batch), appending the keys to `keys` (which
    /// then never allocates once it has room for them). On error nothing is inserted and
    /// `keys` is unchanged.
    pub fn insert_batch_into(
        &mut self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
    ) -> Result<()> {
        let items = self.storage.count_items(columns)?;
        self.config.check_batch_priorities(items, priorities)?;
        (self.config).check_versions(columns, items, self.version_floor)?;
        crate::mem::reserve(keys, keys.len().saturating_add(items))?;
        keys.extend((0..items).map(|i| {
            // SAFETY: `count_items` checked `columns` above and found `items` items.
            unsafe { self.insert_checked(columns, i, priorities.map(|ps| ps[i])) }
        }));
        Ok(())
    }

    /// Insert item `item` of `columns` with raw priority `raw` (checked), or the default.
    ///
    /// # Safety
    /// `columns` passed this buffer's `count_items` and `item` is below its count.
    unsafe fn insert_checked(
        &mut self,
        columns: &[ColumnSlice<'_>],
        item: usize,
        raw: Option<f64>,
    ) -> Key {
        let generation = self.inserted;
        let slot = (generation % self.capacity() as u64) as usize;
        let raw = match raw {
            Some(p) => {
                self.running_max = self.running_max.max(p);
                p
            }
            None => self.default_raw(slot),
        };
        let stored = self.config.stored_priority(raw);
        self.raw[slot] = raw;
        // SAFETY: the caller's contract, and `slot < capacity` (a generation modulo it).
        unsafe { self.storage.write_unchecked(slot, columns, item) };
        // An empty slot (never written, cleared, or its item deleted) evicts nothing.
        self.len += usize::from(self.generations[slot] == NO_DATA);
        self.generations[slot] = generation;
        self.tree.set_unchecked(slot, stored);
        self.inserted += 1;
        self.span = (self.span + 1).min(self.capacity());
        self.config.key(slot, generation)
    }

    /// The raw priority for a new item that goes into `slot` without one: the running
    /// maximum, or under LiveMax the root of the largest stored priority (its power stands
    /// for it).
    fn default_raw(&mut self, slot: usize) -> f64 {
        if self.config.default_priority() == DefaultPriority::RunningMax {
            return self.running_max;
        }
        // The evicted item is not live any more.
        self.tree.set_unchecked(slot, 0.0);
        match self.tree.max_leaf() {
            Some(m) if m > 0.0 => super::raw_of_stored(self.config.alpha(), m),
            _ => self.config.initial_priority(),
        }
    }

    super::sample::batch_sampling_methods!(pub);

    /// One item at each of `fractions` of the total: see
    /// [`ConcurrentBuffer::sample_at_into`](super::ConcurrentBuffer::sample_at_into).
    pub fn sample_at_into(&self, fractions: &[f64], out: &mut SampleBatch) -> Result<Stats> {
        self.sample_with(Draw::At(fractions), Rows::Owned, &mut NoDraws, out)?;
        Ok(self.stats())
    }

    /// [`Self::sample_at_into`] with the rows copied straight into `columns` (see
    /// [`Self::sample_columns_into`]).
    pub fn sample_at_columns_into(
        &self,
        fractions: &[f64],
        out: &mut SampleBatch,
        columns: &mut [ColumnSliceMut<'_>],
    ) -> Result<Stats> {
        let rows = Rows::Into(columns);
        self.sample_with(Draw::At(fractions), rows, &mut NoDraws, out)?;
        Ok(self.stats())
    }

    /// The one sampling entry point, which the methods above call (see
    /// [`ConcurrentBuffer::sample_with`](super::ConcurrentBuffer::sample_with)); here a
    /// failed call writes nothing anywhere, the caller's columns included.
    pub fn sample_with(
        &self,
        draw: Draw<'_>,
        rows: Rows<'_, '_>,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<Descent> {
        check_request(&draw, &rows, self.len, &self.config)?;
        match rows {
            Rows::Owned => out.build_with(true, |spare, drawn| {
                let descent = self.sample_in_spare(draw, rng, spare, drawn)?;
                self.storage.gather(&spare.indices, &mut spare.columns)?;
                Ok(descent)
            }),
            Rows::Into(columns) => out.build_with(false, |spare, drawn| {
                let descent = self.sample_in_spare(draw, rng, spare, drawn)?;
                // Only once the sample succeeded: a failed call leaves `columns` alone.
                // SAFETY: `check_request` checked `columns` for the batch's rows above, and
                // the sample holds that many indices.
                unsafe { self.storage.gather_rows(&spare.indices, columns) };
                Ok(descent)
            }),
            Rows::Skip => out.build_with(false, |spare, drawn| {
                self.sample_in_spare(draw, rng, spare, drawn)
            }),
        }
    }

    /// Total, length, capacity, inserted, smallest positive and running maximum (see
    /// [`Stats`]).
    pub fn stats(&self) -> Stats {
        let running_max = (self.config)
            .default_stored(self.config.stored_priority(self.running_max), || {
                self.tree.max_leaf()
            });
        Stats {
            total: self.tree.total(),
            len: self.len,
            capacity: self.capacity(),
            inserted: self.inserted,
            min_positive: self.tree.min_positive(),
            running_max,
        }
    }

    /// Everything but the columns, into `out` (which may be left half-written on error).
    fn sample_in_spare(
        &self,
        draw: Draw<'_>,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        drawn: &mut Drawn,
    ) -> Result<Descent> {
        let distinct = &mut drawn.distinct;
        let batch = draw.len();
        out.reserve_rows(batch)?;
        // `probabilities` holds the targets until the priorities are known.
        out.probabilities.clear();
        out.probabilities.resize(batch, 0.0);
        out.indices.clear();
        let (total, min_positive) = if let Some(selector) = draw.ordered() {
            // The oldest (newest) item stored, or the one of the largest (smallest) positive
            // priority, at every draw: this buffer retires nothing as it draws (no
            // `max_times_sampled`).
            let index = match selector {
                Selector::Ring(order) => {
                    let (handed, span) = (self.inserted, self.span as u64);
                    (0..span)
                        .map(|step| order.generation(handed, span, step))
                        .map(|g| ((g % self.capacity() as u64) as usize, g))
                        .find(|&(slot, g)| self.generations[slot] == g)
                        .map(|(slot, _)| slot)
                        .ok_or(Error::Empty)?
                }
                Selector::Heap(extreme) => {
                    if self.len == 0 {
                        return Err(Error::Empty);
                    }
                    self.tree.rank(extreme, 1, &mut out.indices);
                    out.indices.pop().ok_or(Error::ZeroTotalPriority)?
                }
            };
            out.indices.clear();
            out.indices.resize(batch, index);
            (self.len as f64, 1.0)
        } else if draw.uniform() {
            // Each of the `len` items equally likely: no descent, a slot of the ring's newest
            // `span` drawn, again while it holds nothing (its item deleted by key); `total`
            // is the items' count.
            let uniform = Uniform::newest(self.inserted, self.span, self.capacity());
            draw.fill(1.0, &mut out.probabilities, rng);
            for &u in &out.probabilities {
                let mut index = uniform.slot(u);
                let mut attempt = 0;
                while self.generations[index] == NO_DATA {
                    attempt += 1;
                    if attempt >= crate::buffer::protocol::MAX_ATTEMPTS {
                        return Err(Error::Contention { attempts: attempt });
                    }
                    index = uniform.slot(rng.next_f64());
                }
                out.indices.push(index);
            }
            (self.len as f64, 1.0)
        } else if draw.shuffled() {
            // The pass's next generations, skipping those gone since it began (evicted or
            // deleted between calls: nothing changes while this call runs).
            let (generations, inserted, span) = (&self.generations, self.inserted, self.span);
            let stored = |g: u64| generations[(g % generations.len() as u64) as usize] == g;
            let present = |order: &mut Vec<u64>| {
                crate::mem::reserve(order, span)?;
                order.extend((inserted - span as u64..inserted).filter(|&g| stored(g)));
                Ok(())
            };
            let (held, pending) = (&mut drawn.held, &mut drawn.pending);
            crate::mem::reserve(held, batch)?;
            held.clear();
            while held.len() < batch {
                pending.clear();
                let need = batch - held.len();
                (self.passes).take(need, batch, held, present, rng, pending)?;
                held.extend(pending.iter().copied().filter(|&g| stored(g)));
            }
            let capacity = self.capacity() as u64;
            out.indices
                .extend(held.iter().map(|&g| (g % capacity) as usize));
            (self.len as f64, 1.0)
        } else {
            let min_positive = self.tree.min_positive().ok_or(Error::ZeroTotalPriority)?;
            let total = self.tree.total();
            draw.fill(total, &mut out.probabilities, rng);
            out.indices.resize(batch, 0);
            self.tree
                .find_prefix_batch_unchecked(&out.probabilities, &mut out.indices);
            if draw.without_replacement() {
                self.redraw_repeats(total, batch, rng, out, distinct)?;
            }
            (total, min_positive)
        };
        out.priorities.clear();
        out.priorities
            .extend(out.indices.iter().map(|&i| self.tree.get_unchecked(i)));
        out.keys.clear();
        let config = &self.config;
        let generations = &self.generations;
        out.keys.extend(
            out.indices
                .iter()
                .map(|&index| config.key(index, generations[index])),
        );
        let norm = self.config.weight_normalization();
        batch_weights(draw, norm, (total, min_positive), out, distinct);
        Ok(Descent {
            total,
            min_positive,
        })
    }

    /// Without replacement: each item of `out.indices` that repeats one before it drawn again
    /// among the items not taken (`protocol::Distinct`); each item's conditional probability
    /// into `out.probabilities`.
    fn redraw_repeats(
        &self,
        total: f64,
        batch: usize,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        distinct: &mut Distinct,
    ) -> Result<()> {
        distinct.start(batch)?;
        for (j, index) in out.indices.iter_mut().enumerate() {
            let mut attempt = 0;
            while distinct.contains(*index) {
                attempt += 1;
                if attempt >= crate::buffer::protocol::MAX_ATTEMPTS {
                    return Err(Error::Contention { attempts: attempt });
                }
                let x = distinct
                    .target(rng.next_f64(), total, batch, |i| self.tree.prefix_before(i))?;
                *index = self.tree.find_prefix_unchecked(x);
            }
            let p = self.tree.get_unchecked(*index);
            out.probabilities[j] = distinct.take(*index, p, total);
        }
        Ok(())
    }

    /// The stored priorities of the items `keys` name, one per key into `out` (cleared
    /// first): NaN for a stale key; returns how many were stale
    /// ([`ConcurrentBuffer::priorities_of`](super::ConcurrentBuffer::priorities_of)).
    pub fn priorities_of(&self, keys: &[Key], out: &mut Vec<f64>) -> Result<usize> {
        self.read_by_key(keys, out, |slot| self.tree.get_unchecked(slot))
    }

    /// `read(slot)` of each current key's slot into `out` (cleared first), NaN for a stale
    /// key; returns how many were stale. A key no buffer of this configuration made is
    /// refused and `out` left empty.
    fn read_by_key(
        &self,
        keys: &[Key],
        out: &mut Vec<f64>,
        read: impl Fn(usize) -> f64,
    ) -> Result<usize> {
        out.clear();
        self.config.check_keys(keys, self.inserted)?;
        crate::mem::reserve(out, keys.len())?;
        let mut stale = 0;
        for key in keys {
            if key.names(self.generations[key.index]) {
                out.push(read(key.index));
            } else {
                stale += 1;
                out.push(f64::NAN);
            }
        }
        Ok(stale)
    }

    /// Set the raw priorities of the items named by `keys` (alpha is applied). Entries whose
    /// slot was overwritten since the key was made are dropped and counted as stale; for a
    /// key given twice, the last entry wins.
    pub fn update_priorities(&mut self, keys: &[Key], priorities: &[f64]) -> Result<UpdateReport> {
        self.config.check_update(keys, priorities, self.inserted)?;
        let mut report = UpdateReport::default();
        let (generations, config, running_max, raw) = (
            &self.generations,
            &self.config,
            &mut self.running_max,
            &mut self.raw,
        );
        let current = keys
            .iter()
            .zip(priorities)
            .enumerate()
            .filter_map(|(j, (key, &p))| {
                if let Some(ahead) = keys.get(j + PREFETCH_AHEAD) {
                    prefetch_line(generations[..].as_ptr().wrapping_add(ahead.index));
                }
                if key.names(generations[key.index]) {
                    let stored = config.stored_priority(p);
                    raw[key.index] = p;
                    *running_max = running_max.max(p);
                    report.applied += 1;
                    Some((key.index, stored))
                } else {
                    report.stale += 1;
                    None
                }
            });
        self.tree.set_many_unchecked(current);
        Ok(report)
    }

    /// Delete the items `keys` name
    /// ([`ConcurrentBuffer::delete`](super::ConcurrentBuffer::delete)): each current one's
    /// priority set to 0, its key stale for good, its slot left empty until the insert that
    /// reaches it. A stale key (or one given twice) is counted; a key no buffer of this
    /// configuration made is refused and nothing is deleted.
    pub fn delete(&mut self, keys: &[Key]) -> Result<UpdateReport> {
        self.config.check_keys(keys, self.inserted)?;
        let mut report = UpdateReport::default();
        for key in keys {
            if key.names(self.generations[key.index]) {
                self.generations[key.index] = NO_DATA;
                self.tree.set_unchecked(key.index, 0.0);
                self.len -= 1;
                report.applied += 1;
            } else {
                report.stale += 1;
            }
        }
        Ok(report)
    }

    /// Retire every item whose policy version is below `version` and raise the floor to it
    /// ([`ConcurrentBuffer::retire_before`](super::ConcurrentBuffer::retire_before)):
    /// returns the items retired; later inserts of a version below the floor are refused.
    pub fn retire_before(&mut self, version: i64) -> Result<u64> {
        let column = self.config.check_version_column()?;
        self.version_floor = self.version_floor.max(version);
        let ColumnData::I64(versions) = self.storage.column(column) else {
            unreachable!("the version column is i64 (checked at build)")
        };
        let mut retired = 0;
        for (slot, generation) in self.generations.iter_mut().enumerate() {
            if *generation != NO_DATA && versions[slot] < self.version_floor {
                *generation = NO_DATA;
                self.tree.set_unchecked(slot, 0.0);
                self.len -= 1;
                retired += 1;
            }
        }
        Ok(retired)
    }

    /// The policy-version floor ([`ReplayBuffer::retire_before`]): `i64::MIN` until the
    /// first call; `None` when the items carry no version.
    pub fn version_floor(&self) -> Option<i64> {
        self.config.version_column().map(|_| self.version_floor)
    }

    /// Overwrite some columns of the items `keys` name, in place
    /// ([`ConcurrentBuffer::write_back`](super::ConcurrentBuffer::write_back)): `columns`
    /// holds (column position, data) pairs, one item per key; stale keys are counted and
    /// skipped; a foreign key or a column that does not match writes nothing.
    pub fn write_back(
        &mut self,
        keys: &[Key],
        columns: &[(usize, ColumnSlice<'_>)],
    ) -> Result<UpdateReport> {
        self.config.check_keys(keys, self.inserted)?;
        self.config.schema().check_some(columns, keys.len())?;
        let mut report = UpdateReport::default();
        for (item, key) in keys.iter().enumerate() {
            if key.names(self.generations[key.index]) {
                // SAFETY: `check_some` checked `columns` for `keys.len()` items, and a key
                // that names a stored item has `index < capacity`.
                unsafe { self.storage.write_some_unchecked(key.index, columns, item) };
                report.applied += 1;
            } else {
                report.stale += 1;
            }
        }
        Ok(report)
    }

    /// Remove every item. Keys made before stay stale forever (generations keep counting);
    /// the running maximum restarts from the initial priority.
    pub fn clear(&mut self) {
        self.tree.clear();
        self.generations.fill(NO_DATA);
        self.len = 0;
        self.span = 0;
        self.running_max = self.config.initial_priority();
    }

    /// The priority exponent now ([`ConcurrentBuffer::set_alpha`](super::ConcurrentBuffer::set_alpha)).
    pub fn alpha(&self) -> f64 {
        self.config.alpha()
    }

    /// Change the priority exponent: every item's stored priority becomes its raw priority
    /// raised to `alpha`, and the tree is summed again, equal bit for bit to the tree of a
    /// fresh buffer built with `alpha` over the same raw priorities
    /// ([`ConcurrentBuffer::set_alpha`](super::ConcurrentBuffer::set_alpha) has the details).
    /// A bad alpha is refused and changes nothing.
    pub fn set_alpha(&mut self, alpha: f64) -> Result<()> {
        super::check_alpha(alpha)?;
        self.config.alpha = alpha;
        let (config, raw, generations) = (&self.config, &self.raw, &self.generations);
        self.tree
            .set_many_unchecked((0..self.capacity()).map(|slot| {
                let stored = match generations[slot] {
                    NO_DATA => 0.0,
                    _ => config.stored_priority(raw[slot]),
                };
                (slot, stored)
            }));
        self.tree.rebuild();
        Ok(())
    }

    /// The raw priorities of the items `keys` name, one per key into `out` (cleared first):
    /// NaN for a stale key; returns how many were stale.
    pub fn raw_priorities_of(&self, keys: &[Key], out: &mut Vec<f64>) -> Result<usize> {
        self.read_by_key(keys, out, |slot| self.raw[slot])
    }
}

impl ReplayBuffer {
    /// The buffer's state as a save writes it: its own memory, borrowed.
    pub(crate) fn snapshot(&self) -> Snapshot<'_> {
        let columns = self.config.schema().columns().len();
        Snapshot {
            config: &self.config,
            inserted: self.inserted,
            len: self.len,
            running_max: self.config.stored_priority(self.running_max),
            alpha: self.config.alpha(),
            raw: Some(RawState {
                priorities: (0..self.capacity())
                    .map(|i| match self.generations[i] {
                        NO_DATA => 0.0,
                        _ => self.raw[i],
                    })
                    .collect(),
                running_max: self.running_max,
            }),
            priorities: (0..self.capacity())
                .map(|i| self.tree.get_unchecked(i))
                .collect(),
            generations: Cow::Borrowed(&self.generations),
            columns: (0..columns)
                .map(|c| Cow::Borrowed(self.storage.column(c).as_slice().as_bytes()))
                .collect(),
            rate_counts: None,
            version_floor: self.version_floor().filter(|&f| f != i64::MIN),
            draws: None,
        }
    }
}

impl Checkpoint for ReplayBuffer {
    fn save_with(&self, dir: &Path, options: &SaveOptions) -> Result<()> {
        crate::checkpoint::write(&self.snapshot(), dir, options)
    }
}

/// A checkpoint saved with a rate limit loads without it (this buffer holds none; the
/// limit and its counts stay in the files).
impl Load for ReplayBuffer {
    fn load_with<P: AsRef<Path>>(dir: P, options: &LoadOptions) -> Result<Loaded<Self>> {
        let plan = Plan::open(dir.as_ref(), options)?;
        let (mut buffer, state) = ReplayBuffer::load_plan(&plan)?;
        buffer.config = buffer.config.without_rate_limit();
        Ok(Loaded {
            buffer,
            user: state.user,
        })
    }
}

impl ReplayBuffer {
    /// The buffer the checkpoint `plan` opened holds, and its state (whose rate counts a
    /// caller that holds the limit restores).
    pub(crate) fn load_plan(plan: &Plan) -> Result<(ReplayBuffer, State)> {
        let state = plan.read_state()?;
        let mut buffer = ReplayBuffer::from_state(plan.config.clone(), &state)?;
        for c in 0..plan.config.schema().columns().len() {
            // SAFETY: `read_column` writes only 0 or 1 into a bool column.
            plan.read_column(c, unsafe { buffer.storage.column_bytes_mut(c) })?;
        }
        Ok((buffer, state))
    }

    /// A buffer of `config` in `state` (a checked checkpoint's), its columns zero; its rate
    /// limit, if any, is its owner's to enforce ([`ReplayBuffer::under_limiter`]).
    pub(crate) fn from_state(config: Config, state: &State) -> Result<ReplayBuffer> {
        let mut buffer = ReplayBuffer::under_limiter(config)?;
        buffer.generations.copy_from_slice(&state.generations);
        buffer
            .tree
            .set_many_unchecked(state.priorities.iter().copied().enumerate());
        buffer.tree.rebuild();
        buffer.inserted = state.inserted;
        buffer.len = state.len;
        buffer.span = state.span() as usize;
        let raw = state.raw_or_derived(buffer.config.alpha());
        buffer.raw.copy_from_slice(&raw.priorities);
        buffer.running_max = raw.running_max;
        buffer.version_floor = state.version_floor.unwrap_or(i64::MIN);
        Ok(buffer)
    }
}
