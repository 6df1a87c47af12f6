//! The `&self` API that every concurrent buffer offers.

use std::time::Duration;

use crate::rate::{RateLimiter, Wait};
use crate::rng::RandomSource;

use super::{Config, Descent, Draw, Key, Rows, SampleBatch, SampleMode, Stats, UpdateReport};
use crate::error::Result;
use crate::storage::{ColumnSlice, ColumnSliceMut};
use crate::tree::Consistency;

/// A prioritized replay buffer that many threads share (`Send + Sync`, every method takes
/// `&self`): actors call [`insert`](Self::insert) / [`insert_batch`](Self::insert_batch),
/// learners call [`sample`](Self::sample) and
/// [`update_priorities`](Self::update_priorities), anyone may read the rest.
///
/// Semantics are those of the sequential [`ReplayBuffer`](super::ReplayBuffer) (keys with
/// generations, stale updates dropped, a repeated key's last entry wins, both sampling
/// modes, both weight normalizations), with every operation linearizable per item:
///
/// - an insert takes the next generation from a shared FIFO cursor; writers of one slot
///   complete in generation order, so nothing is lost but by FIFO eviction;
/// - a sampled item was, at one instant during the call, stored with the reported positive
///   priority and fully written: no torn data, no slot in the middle of a write;
/// - `total` and the weight reference are read once per sample; under concurrent writes
///   `probabilities` are therefore those of that instant, and weights are clamped to 1;
/// - sampling never waits for writers: it draws again elsewhere, and after a bounded
///   number of draws for one item returns [`Error::Contention`](crate::Error::Contention).
///
/// ```
/// use kary_replay::{ConcurrentBuffer, Config, DType, LockFreeBuffer, SampleMode, Schema};
/// use rand::{rngs::SmallRng, SeedableRng};
///
/// let schema = Schema::new().column("obs", DType::F32, 2);
/// let buffer = LockFreeBuffer::new(Config::builder(1024, schema).build()?)?;
/// std::thread::scope(|s| {
///     for actor in 0..2 {
///         let buffer = &buffer;
///         s.spawn(move || {
///             for step in 0..100 {
///                 let obs = [actor as f32, step as f32];
///                 buffer.insert(&[obs[..].into()], None).unwrap();
///             }
///         });
///     }
/// });
/// assert_eq!(buffer.len(), 200);
/// let mut rng = SmallRng::seed_from_u64(7);
/// let batch = buffer.sample(32, 0.4, SampleMode::Stratified, &mut rng)?;
/// let report = buffer.update_priorities(&batch.keys, &vec![0.5; 32])?;
/// assert_eq!(report.applied, 32);
/// assert!(buffer.consistency().exact);
/// # Ok::<(), kary_replay::Error>(())
/// ```
pub trait ConcurrentBuffer: Send + Sync + crate::checkpoint::Checkpoint {
    /// An empty buffer; fails cleanly (no abort) when the memory cannot be had.
    fn new(config: Config) -> Result<Self>
    where
        Self: Sized;

    /// The configuration it was made with.
    fn config(&self) -> &Config;

    /// Insert one item (each column slice holds one item's elements). `priority` is raw
    /// (alpha is applied); `None` gives the default priority. Under a rate limit it waits
    /// until the limiter admits it ([`Self::insert_waiting`]).
    fn insert(&self, columns: &[ColumnSlice<'_>], priority: Option<f64>) -> Result<Key> {
        self.insert_waiting(columns, priority, Wait::Block)
    }

    /// [`Self::insert`] that does not wait for the rate limiter:
    /// [`Error::RateLimited`](crate::Error::RateLimited) when it would have to (a buffer
    /// without a limit never does).
    fn try_insert(&self, columns: &[ColumnSlice<'_>], priority: Option<f64>) -> Result<Key> {
        self.insert_waiting(columns, priority, Wait::Never)
    }

    /// [`Self::insert`] that waits at most `timeout` for the rate limiter:
    /// [`Error::Timeout`](crate::Error::Timeout) then, with nothing inserted or spent.
    fn insert_timeout(
        &self,
        columns: &[ColumnSlice<'_>],
        priority: Option<f64>,
        timeout: Duration,
    ) -> Result<Key> {
        self.insert_waiting(columns, priority, Wait::For(timeout))
    }

    /// The one single-item insert, which [`Self::insert`], [`Self::try_insert`] and
    /// [`Self::insert_timeout`] call: the input is checked, then the rate limiter (if the
    /// configuration has one, [`Config::rate_limit`]) admits one item as `wait` says, before
    /// any lock is taken, then the item is written. Any error leaves the buffer and the
    /// limiter's counts as they were: [`Error::RateLimited`](crate::Error::RateLimited),
    /// [`Error::Timeout`](crate::Error::Timeout), [`Error::Closed`](crate::Error::Closed)
    /// from the limiter, the input's errors before it.
    fn insert_waiting(
        &self,
        columns: &[ColumnSlice<'_>],
        priority: Option<f64>,
        wait: Wait,
    ) -> Result<Key>;

    /// Insert a batch (`items x shape` elements per column, item-major), with one raw
    /// priority per item or none. The items get consecutive generations. Under a rate limit
    /// the batch is admitted whole (it spends its item count), waiting as long as it takes.
    fn insert_batch(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
    ) -> Result<Vec<Key>> {
        let mut keys = Vec::new();
        self.insert_batch_waiting(columns, priorities, &mut keys, Wait::Block)?;
        Ok(keys)
    }

    /// [`Self::insert_batch`] that does not wait for the rate limiter (as [`Self::try_insert`]).
    fn try_insert_batch(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
    ) -> Result<Vec<Key>> {
        let mut keys = Vec::new();
        self.insert_batch_waiting(columns, priorities, &mut keys, Wait::Never)?;
        Ok(keys)
    }

    /// [`Self::insert_batch`] that waits at most `timeout` for the rate limiter (as
    /// [`Self::insert_timeout`]).
    fn insert_batch_timeout(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        timeout: Duration,
    ) -> Result<Vec<Key>> {
        let mut keys = Vec::new();
        self.insert_batch_waiting(columns, priorities, &mut keys, Wait::For(timeout))?;
        Ok(keys)
    }

    /// [`insert_batch`](ConcurrentBuffer::insert_batch), appending the keys to `keys`: on
    /// the crate's buffers it does not allocate once `keys` has room for them (a staged
    /// [`Writer`](super::Writer) flushes through it). On error nothing is inserted and `keys`
    /// is unchanged.
    fn insert_batch_into(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
    ) -> Result<()> {
        self.insert_batch_waiting(columns, priorities, keys, Wait::Block)
    }

    /// The one batch insert, which every other calls: checks the input, has the rate
    /// limiter admit the batch's items as `wait` says (before any lock), then writes them
    /// and appends their keys to `keys`. Errors as [`Self::insert_waiting`]; on error
    /// nothing is inserted, nothing spent, and `keys` is unchanged.
    fn insert_batch_waiting(
        &self,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
        wait: Wait,
    ) -> Result<()>;

    /// A [`Writer`](super::Writer) that stages single inserts from this thread and writes
    /// them `batch` at a time through
    /// [`insert_batch_into`](ConcurrentBuffer::insert_batch_into) (for
    /// a `dyn ConcurrentBuffer`: `Writer::new(&*buffer, batch)`). Staged items become
    /// visible when the writer flushes (see its doc).
    fn writer(&self, batch: usize) -> Result<super::Writer<&Self>>
    where
        Self: Sized,
    {
        super::Writer::new(self, batch)
    }

    /// The one sampling entry point, which every other sampling method calls: draw what
    /// `draw` says, put the rows where `rows` says, and write keys, indices, priorities,
    /// probabilities and weights into `out`. Returns what the descent read. Under a rate
    /// limit ([`Config::rate_limit`]) the sample's items are admitted as `wait` says, after
    /// the checks and before any lock; a sample that then fails (nothing to draw, say)
    /// gives its admission back.
    ///
    /// The checks, in this order: the values of `draw` ([`Error::ZeroBatch`](crate::Error::ZeroBatch),
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter)), then
    /// [`Error::Empty`](crate::Error::Empty), then the destinations of
    /// [`Rows::Into`], then the limiter's ([`Error::RateLimited`](crate::Error::RateLimited),
    /// [`Error::Timeout`](crate::Error::Timeout), [`Error::Closed`](crate::Error::Closed)).
    /// On any error `out` is left as it was; what the caller's columns may
    /// then hold is said at [`Self::sample_columns_into`]. A warm `out` is not allocated
    /// into.
    ///
    /// A new buffer family implements this method; [`Self::sample_with`], [`Self::sample`],
    /// [`Self::sample_into`], [`Self::sample_columns_into`],
    /// [`Self::sample_indices_into`], [`Self::sample_at_into`] and
    /// [`Self::sample_at_columns_into`] are provided on top of it.
    ///
    /// ```
    /// use kary_replay::{ConcurrentBuffer, Config, DType, Draw, Rows, SampleBatch, SampleMode, Schema, SplitLockBuffer, Wait};
    /// use rand::{rngs::SmallRng, SeedableRng};
    ///
    /// let schema = Schema::new().column("x", DType::I64, 1);
    /// let buffer = SplitLockBuffer::new(Config::builder(8, schema).alpha(1.0).build()?)?;
    /// buffer.insert_batch(&[(&[10i64, 20][..]).into()], Some(&[1.0, 3.0]))?;
    /// let mut rng = SmallRng::seed_from_u64(1);
    /// let mut out = SampleBatch::default();
    /// let draw = Draw::Batch { batch: 4, beta: 0.0, mode: SampleMode::Stratified };
    /// let descent = buffer.sample_waiting(draw, Rows::Skip, &mut rng, &mut out, Wait::Block)?;
    /// assert_eq!((descent.total, descent.min_positive), (4.0, 1.0));
    /// assert_eq!(out.indices, [0, 1, 1, 1]);
    /// assert!(out.columns.is_empty());
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    fn sample_waiting(
        &self,
        draw: Draw<'_>,
        rows: Rows<'_, '_>,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        wait: Wait,
    ) -> Result<Descent>;

    /// [`Self::sample_waiting`] waiting as long as the rate limiter makes it: what
    /// [`Self::sample`] and its siblings call.
    fn sample_with(
        &self,
        draw: Draw<'_>,
        rows: Rows<'_, '_>,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<Descent> {
        self.sample_waiting(draw, rows, rng, out, Wait::Block)
    }

    super::sample::batch_sampling_methods!();

    /// [`Self::sample`] that does not wait for the rate limiter:
    /// [`Error::RateLimited`](crate::Error::RateLimited) when it would have to. Other
    /// destinations and waits: [`Self::sample_waiting`].
    fn try_sample(
        &self,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
    ) -> Result<SampleBatch> {
        let mut out = SampleBatch::default();
        let draw = Draw::Batch { batch, beta, mode };
        self.sample_waiting(draw, Rows::Owned, rng, &mut out, Wait::Never)?;
        Ok(out)
    }

    /// [`Self::sample`] that waits at most `timeout` for the rate limiter:
    /// [`Error::Timeout`](crate::Error::Timeout) then, with nothing spent.
    fn sample_timeout(
        &self,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
        timeout: Duration,
    ) -> Result<SampleBatch> {
        let mut out = SampleBatch::default();
        let draw = Draw::Batch { batch, beta, mode };
        self.sample_waiting(draw, Rows::Owned, rng, &mut out, Wait::For(timeout))?;
        Ok(out)
    }

    /// The rate limiter every insert and sample goes through, when the configuration has a
    /// limit ([`Config::rate_limit`]).
    fn rate_limiter(&self) -> Option<&RateLimiter>;

    crate::rate::rate_limit_methods!();

    /// Sample one item at each of `fractions` (each in `[0, 1)`) of this buffer's own total,
    /// as read by the descent: the positions a coordinator assigned to this buffer when it
    /// samples the union of several ([`crate::shard`]). Keys, indices, stored priorities and
    /// columns go into `out`, its `probabilities` are this buffer's own (`p / total`) and its
    /// `weights` are all 1 (the coordinator computes the global ones). Returns the buffer's
    /// [`Stats`] with the `total` and `min_positive` the descent used.
    ///
    /// The guarantees of [`Self::sample`] hold: every item was stored, whole, with the
    /// reported priority at one instant during the call. An item whose slot was in flight is
    /// drawn again independently over this buffer (so still in proportion to its priority
    /// here), and after a bounded number of draws the call returns
    /// [`Error::Contention`](crate::Error::Contention). Errors as for `sample` (with
    /// [`check_fractions`](super::check_fractions) for the fractions); `out` is then unchanged.
    ///
    /// ```
    /// use kary_replay::{ConcurrentBuffer, Config, DType, SampleBatch, Schema, SplitLockBuffer};
    /// use rand::{rngs::SmallRng, SeedableRng};
    ///
    /// let schema = Schema::new().column("x", DType::I64, 1);
    /// let buffer = SplitLockBuffer::new(Config::builder(8, schema).alpha(1.0).build()?)?;
    /// buffer.insert_batch(&[(&[10i64, 20, 30][..]).into()], Some(&[1.0, 2.0, 1.0]))?;
    /// let mut out = SampleBatch::default();
    /// let stats = buffer.sample_at_into(&[0.1, 0.5, 0.9], &mut SmallRng::seed_from_u64(1), &mut out)?;
    /// assert_eq!(out.indices, [0, 1, 2]);
    /// assert_eq!(out.probabilities, [0.25, 0.5, 0.25]);
    /// assert_eq!((stats.total, stats.len, stats.min_positive), (4.0, 3, Some(1.0)));
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    fn sample_at_into(
        &self,
        fractions: &[f64],
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<Stats> {
        let descent = self.sample_with(Draw::At(fractions), Rows::Owned, rng, out)?;
        Ok(stats_after(self, descent))
    }

    /// [`Self::sample_at_into`] with the rows copied straight into `columns`, as
    /// [`Self::sample_columns_into`] does (`out.columns` is left alone).
    fn sample_at_columns_into(
        &self,
        fractions: &[f64],
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        columns: &mut [ColumnSliceMut<'_>],
    ) -> Result<Stats> {
        let descent = self.sample_with(Draw::At(fractions), Rows::Into(columns), rng, out)?;
        Ok(stats_after(self, descent))
    }

    /// Total, length, capacity, generations handed out, smallest positive priority and
    /// running maximum, each read once (O(K)): what a coordinator of several buffers reads.
    fn stats(&self) -> Stats;

    /// Set the raw priorities of the items named by `keys`; stale keys are dropped and
    /// counted, a key given twice ends with its last entry.
    fn update_priorities(&self, keys: &[Key], priorities: &[f64]) -> Result<UpdateReport>;

    /// The stored (alpha-exponentiated) priorities of the items `keys` name, one per key into
    /// `out` (cleared first), read while each item is current: NaN for a stale key (its slot
    /// was overwritten since). Returns how many were stale. A key no buffer of this
    /// configuration made is refused and `out` is left empty ([`Config::check_keys`]).
    ///
    /// ```
    /// use kary_replay::{ConcurrentBuffer, Config, DType, LockFreeBuffer, Schema};
    /// let buffer = LockFreeBuffer::new(Config::builder(2, Schema::new().column("x", DType::U8, 1)).alpha(1.0).build()?)?;
    /// let keys = buffer.insert_batch(&[(&[1u8, 2, 3][..]).into()], Some(&[1.0, 2.0, 3.0]))?;
    /// let mut out = Vec::new();
    /// assert_eq!(buffer.priorities_of(&keys, &mut out)?, 1); // the first was evicted
    /// assert!(out[0].is_nan() && out[1..] == [2.0, 3.0]);
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    ///
    /// The provided method reads [`Self::key`] then [`Self::priority`] per key (a writer may
    /// come between them); the crate's buffers read each under the slot protocol instead.
    fn priorities_of(&self, keys: &[Key], out: &mut Vec<f64>) -> Result<usize> {
        out.clear();
        self.config().check_keys(keys, self.inserted())?;
        crate::mem::reserve(out, keys.len())?;
        let mut stale = 0;
        for key in keys {
            let current = self.key(key.index)? == Some(*key);
            stale += usize::from(!current);
            out.push(match current {
                true => self.priority(key.index)?,
                false => f64::NAN,
            });
        }
        Ok(stale)
    }

    /// Delete the items `keys` name: each current one is taken out as a writer takes a slot
    /// (after the copies of it in flight), its priority set to 0 and its key made stale for
    /// good; no sample sees it once the call returns, and [`len`](Self::len) no longer
    /// counts it. Its slot stays in the FIFO ring: the insert that reaches it next fills it,
    /// evicting nothing. A stale key (or one given twice) is counted, not an error; a key no
    /// buffer of this configuration made is refused and nothing is deleted
    /// ([`Config::check_keys`]). Returns the count deleted (`applied`) and stale.
    ///
    /// ```
    /// use kary_replay::{ConcurrentBuffer, Config, DType, SplitLockBuffer, Schema};
    /// let buffer = SplitLockBuffer::new(Config::builder(4, Schema::new().column("x", DType::U8, 1)).build()?)?;
    /// let keys = buffer.insert_batch(&[(&[1u8, 2, 3][..]).into()], Some(&[1.0, 2.0, 3.0]))?;
    /// let report = buffer.delete(&[keys[1], keys[1]])?;
    /// assert_eq!((report.applied, report.stale, buffer.len()), (1, 1, 2));
    /// assert_eq!(buffer.key(keys[1].index)?, None);
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    fn delete(&self, keys: &[Key]) -> Result<UpdateReport>;

    /// Retire every item whose policy version (the configuration's
    /// [`version_column`](super::ConfigBuilder::version_column)) is below `version`, and
    /// raise the buffer's floor to `version` (it never goes down: a lower `version` retires
    /// nothing new). Exact under concurrency: once the call returns, no item below the
    /// floor is stored, counted by `len` or drawn; an insert that holds one is refused
    /// ([`Error::RetiredVersion`](crate::Error::RetiredVersion), nothing inserted), and a
    /// write already past that check when the floor rose retires its own item as it
    /// publishes it (its key is returned, stale at once). Retired items' keys are stale, as
    /// after [`delete`](ConcurrentBuffer::delete). Returns the items retired by this call.
    /// `clear` keeps the floor; checkpoints keep it. A buffer whose items carry no version
    /// refuses the call ([`Error::InvalidParameter`](crate::Error::InvalidParameter)).
    ///
    /// Each slot is taken as a writer takes it (after the write and the copies in flight),
    /// one at a time: O(capacity), for the rare moment a learner moves its window.
    fn retire_before(&self, version: i64) -> Result<u64>;

    /// The policy-version floor ([`retire_before`](ConcurrentBuffer::retire_before)):
    /// `i64::MIN` until the first call; `None` when the items carry no version.
    fn version_floor(&self) -> Option<i64>;

    /// The priority exponent now: the configuration's alpha until a
    /// [`set_alpha`](ConcurrentBuffer::set_alpha).
    fn alpha(&self) -> f64;

    /// Change the priority exponent at run time, exactly: every item's stored priority
    /// becomes its raw priority (kept per item: the one it was given, or for a default
    /// priority the raw maximum it stood for) raised to `alpha`, and every node of the tree
    /// is summed again, so that the tree equals, bit for bit, the tree of a fresh buffer
    /// built with `alpha` over the same raw priorities
    /// ([`raw_priorities_of`](ConcurrentBuffer::raw_priorities_of)). The running maximum,
    /// a raw priority, gives the default priority under the new alpha. Inserts, updates and
    /// deletions pause meanwhile, as for a save (O(capacity)); samplers go on, and one that
    /// runs while the leaves change may draw under either alpha. Priorities are still
    /// checked against the bound of the configuration's alpha; under a larger alpha a raw
    /// priority whose power passes [`MAX_PRIORITY`](crate::tree::MAX_PRIORITY) is stored as
    /// that. A bad alpha (NaN, infinite, negative) is refused and changes nothing.
    fn set_alpha(&self, alpha: f64) -> Result<()>;

    /// The raw priorities (before the exponent) of the items `keys` name, one per key into
    /// `out` (cleared first), read as [`priorities_of`](ConcurrentBuffer::priorities_of)
    /// reads the stored ones: NaN for a stale key; returns how many were stale.
    fn raw_priorities_of(&self, keys: &[Key], out: &mut Vec<f64>) -> Result<usize>;

    /// Overwrite some columns of the items `keys` name, in place (a relabelled goal, a
    /// recomputed return): `columns` holds (column position, data) pairs, each data
    /// item-major with one item per key ([`Schema::check_some`](crate::Schema::check_some)).
    /// Each current item is taken as a writer takes a slot (after the copies of it in
    /// flight), its rows written, and the slot released at the same epoch: the key stays
    /// current, the priority is unchanged, and no sample sees a half-written row. A stale key
    /// is counted and its rows skipped; a key no buffer of this configuration made, or a
    /// column that does not match, is refused and nothing is written. Returns the count
    /// written (`applied`) and stale. A buffer in a shared mapping refuses the call
    /// ([`Error::InvalidParameter`](crate::Error::InvalidParameter)): its readers check a
    /// copy by the slot's epoch, which a write back keeps.
    ///
    /// ```
    /// use kary_replay::{ConcurrentBuffer, Config, DType, LockFreeBuffer, Schema};
    /// let schema = Schema::new().column("obs", DType::F32, 2).column("goal", DType::F32, 1);
    /// let buffer = LockFreeBuffer::new(Config::builder(4, schema).build()?)?;
    /// let keys = buffer.insert_batch(
    ///     &[(&[0.0f32, 0.0, 1.0, 1.0][..]).into(), (&[5.0f32, 6.0][..]).into()],
    ///     None,
    /// )?;
    /// // The second item's goal relabelled to 9.
    /// let report = buffer.write_back(&keys[1..], &[(1, (&[9.0f32][..]).into())])?;
    /// assert_eq!((report.applied, report.stale), (1, 0));
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    fn write_back(
        &self,
        keys: &[Key],
        columns: &[(usize, ColumnSlice<'_>)],
    ) -> Result<UpdateReport>;

    /// Stored (alpha-exponentiated) priority of slot `index` now.
    fn priority(&self, index: usize) -> Result<f64>;

    /// The key of the item in slot `index` now, or `None` when it never held one.
    fn key(&self, index: usize) -> Result<Option<Key>>;

    /// Items stored (inserts completed, at most the capacity, less the items deleted by
    /// key or cleared). Exact when no insert, deletion or clear is in flight.
    fn len(&self) -> usize;

    /// Whether no insert has completed.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots.
    fn capacity(&self) -> usize {
        self.config().capacity()
    }

    /// Generations handed out so far (inserts begun, evicted ones included).
    fn inserted(&self) -> u64;

    /// Sum of the stored priorities. Exact when no other thread is writing; while writes
    /// are in flight it is the tree's root at that instant, which on `LockFreeBuffer` may
    /// still count an item being evicted (its leaf is zeroed first, its ancestors refreshed
    /// by the new item's climb) or miss part of a climb in flight, and on both slot buffers
    /// counts an item being evicted whose leaf is kept (the new item's priority is the
    /// same, bit for bit: the sum is the one the publication will give).
    fn total_priority(&self) -> f64;

    /// How far the tree's internal nodes are from the sums of their children. Meaningful
    /// when no other thread is writing (quiescence); `LockFreeBuffer` is then exact.
    fn consistency(&self) -> Consistency;

    /// Bytes held by the tree, the columns and the per-slot state.
    fn memory_bytes(&self) -> usize;

    /// Remove every item, as [`ReplayBuffer::clear`](super::ReplayBuffer::clear) does: keys
    /// made before stay stale for good (generations keep counting, so
    /// [`inserted`](Self::inserted) does not go back), and the running maximum restarts from
    /// the initial priority.
    ///
    /// It may run while other threads use the buffer. Slot by slot, it takes each slot as a
    /// writer would (after the write of that slot in flight, if any, and that slot's copies
    /// in flight) and empties it: an insert whose slot `clear` has not reached yet is
    /// removed, one made after `clear` passed its slot stays; no sample sees a half-cleared
    /// item, and an update of a removed item is stale. [`len`](Self::len) is exact when no
    /// insert ran beside `clear`; otherwise it counts the inserts that completed after
    /// `clear` began, some of which it may have removed, until the buffer fills again.
    fn clear(&self);

    /// Recompute every internal node of the tree from the leaves. Writes already keep the
    /// tree exact (see [`consistency`](Self::consistency)), so this is a repair, never needed
    /// in normal use. Safe while other threads write; the result is exact at quiescence.
    fn rebuild(&self);
}

/// `buffer`'s [`Stats`] with the `total` and `min_positive` that a sample's descent read.
fn stats_after<B: ConcurrentBuffer + ?Sized>(buffer: &B, descent: Descent) -> Stats {
    Stats {
        total: descent.total,
        min_positive: Some(descent.min_positive),
        ..buffer.stats()
    }
}
