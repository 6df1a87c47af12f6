//! Prioritized replay buffers: the configuration, the types a buffer hands out, and the
//! sampling arithmetic that every variant shares.
//!
//! Semantics (docs/design.md, "Semantics"):
//! - stored priority `p = priority^alpha` (a priority of 0 stays 0, also for alpha = 0);
//! - `P(i) = p_i / sum_j p_j`; an item whose stored priority is 0 is never sampled;
//! - importance weight `w_i = (N * P(i))^-beta / max_w`, N the items stored. With
//!   [`WeightNormalization::Global`], `max_w` is the weight of the smallest positive stored
//!   priority, so `w_i = (p_i / p_min)^-beta`; with [`WeightNormalization::Batch`] it is the
//!   largest weight in the batch. Either way `0 < w <= 1`, and beta = 0 gives all ones;
//! - a new item without a priority gets [`DefaultPriority::RunningMax`] (the largest stored
//!   priority ever given, starting at `initial_priority^alpha`) or
//!   [`DefaultPriority::LiveMax`] (the largest among the items stored now).

mod concurrent;
pub(crate) mod config_json;
mod global_lock;
mod lock_free;
pub(crate) mod protocol;
pub(crate) mod reservations;
mod sample;
mod sequential;
pub(crate) mod shm;
pub(crate) mod slot_buffer;
pub(crate) mod slots;
mod split_lock;
mod writer;

pub use concurrent::ConcurrentBuffer;
pub use global_lock::{
    GlobalLock, GlobalLockBuffer, GlobalSpinLockBuffer, LockKind, Parking, Spinning,
};
pub use lock_free::LockFreeBuffer;
#[cfg(feature = "tch")]
pub(crate) use sample::check_beta;
#[cfg(feature = "tch")]
pub(crate) use sample::sampling_target;
pub use sample::{
    check_fractions, check_sample_arguments, Descent, Draw, Rows, SampleBatch, SampleMode,
};
pub(crate) use sample::{check_request, draw_targets, importance_weights, with_replacement_only};
pub use sequential::ReplayBuffer;
/// Test hooks of the shared buffer (feature `kill-points`): stop a participant at a
/// protocol point, to kill it there.
#[cfg(feature = "kill-points")]
pub use shm::{pause_at as shm_pause_at, Point as ShmPoint};
#[cfg(all(unix, not(loom)))]
pub use shm::{Participant, ShmBuffer, WATCH_INTERVAL};
pub use split_lock::SplitLockBuffer;
pub use writer::Writer;

use crate::error::{Error, Result};
#[cfg(doc)]
use crate::rate::RateLimiter;
#[cfg(doc)]
use crate::rate::Wait;
use crate::rate::{Batches, Params, RateLimit};
use crate::storage::{ColumnSlice, Schema};
use crate::tree::{Fanout, MAX_CAPACITY, MAX_PRIORITY};
use crate::DType;
pub use protocol::MAX_TIMES_SAMPLED;

/// What the importance weights are divided by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightNormalization {
    /// By the largest possible weight (that of the smallest positive stored priority).
    #[default]
    Global,
    /// By the largest weight in the batch.
    Batch,
}

/// The priority of an item inserted without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DefaultPriority {
    /// The largest priority ever stored (never decreases until [`ReplayBuffer::clear`]).
    #[default]
    RunningMax,
    /// The largest priority among the items stored now (kept by a max companion tree);
    /// `initial_priority` when every stored priority is 0 or nothing is stored.
    LiveMax,
}

/// A sampled item's identity: its slot, the buffer that made it, and the generation of the
/// data in that slot.
///
/// `generation` is one 64-bit word, the same in every language (a Python key is this word,
/// a C `kr_key` carries it): the tag of the buffer that handed the key out in bits 48..63
/// ([`Key::tag`], 1 to [`Key::MAX_TAG`], [`Config::key_tag`]) and the item's insertion number
/// (0 for the first item ever inserted) in bits 0..48 ([`Key::insertion`]), so that
/// `insertion % capacity == index` (until 2^48 inserts, after which the insertion number
/// wraps). A key stays valid until its slot is overwritten; updates through a stale key
/// are dropped, and a key of another buffer is refused ([`Error::InvalidKey`]) unless the
/// two buffers share a tag (1 chance in 32,767 for two buffers with drawn tags).
///
/// `repr(C)`: on 64-bit targets it has the layout of the C ABI's `kr_key`, so arrays of keys
/// cross the boundary without a copy.
///
/// ```
/// use kary_replay::Key;
/// let key = Key::new(0x12, 3, 1003);
/// assert_eq!(key.generation, (0x12 << 48) | 1003);
/// assert_eq!((key.tag(), key.index, key.insertion()), (0x12, 3, 1003));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(C)]
pub struct Key {
    /// Slot index in `0..capacity`.
    pub index: usize,
    /// The buffer's tag (bits 48..63) and the item's insertion number (bits 0..48).
    pub generation: u64,
}

impl Key {
    /// Bits of [`Key::generation`] that hold the insertion number.
    pub const INSERTION_BITS: u32 = 48;
    /// The largest tag (15 bits, so that a key stays below 2^63: an `int64` holds it).
    pub const MAX_TAG: u16 = 0x7fff;
    const INSERTION_MASK: u64 = (1 << Self::INSERTION_BITS) - 1;

    /// The key of buffer `tag`'s item number `insertion` (taken modulo 2^48), in slot `index`.
    pub fn new(tag: u16, index: usize, insertion: u64) -> Key {
        Key {
            index,
            generation: (u64::from(tag) << Self::INSERTION_BITS)
                | (insertion & Self::INSERTION_MASK),
        }
    }

    /// The tag of the buffer that made the key (bits 48..63 of the generation word; a word
    /// past 2^63 has a tag past [`Key::MAX_TAG`], which no buffer has).
    pub fn tag(&self) -> u64 {
        self.generation >> Self::INSERTION_BITS
    }

    /// The item's insertion number modulo 2^48 (bits 0..48 of the generation word).
    pub fn insertion(&self) -> u64 {
        self.generation & Self::INSERTION_MASK
    }

    /// Whether this key names the item inserted `insertion`-th (a stored generation).
    #[inline]
    pub(crate) fn names(&self, insertion: u64) -> bool {
        self.insertion() == insertion & Self::INSERTION_MASK
    }
}

/// Outcome of a priority update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UpdateReport {
    /// Entries applied (a duplicate key counts each time; the last one wins).
    pub applied: usize,
    /// Entries dropped because their slot was overwritten since the key was made.
    pub stale: usize,
}

/// What a coordinator needs to know of a buffer to sample the union of several exactly
/// ([`crate::shard`]): read in O(K), without a lock on the lock-free buffer.
///
/// Each field is read at one instant, but not all at the same one while other threads
/// write; from [`ConcurrentBuffer::sample_at_into`] the `total` and `min_positive` are those
/// the call's descent used.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Stats {
    /// Sum of the stored priorities.
    pub total: f64,
    /// Items stored.
    pub len: usize,
    /// Slots.
    pub capacity: usize,
    /// Generations handed out so far (evicted items included).
    pub inserted: u64,
    /// The smallest positive stored priority, `None` when there is none.
    pub min_positive: Option<f64>,
    /// The stored priority an insert without one would get now: the running maximum (the
    /// largest priority ever stored, [`DefaultPriority::RunningMax`]), or under
    /// [`DefaultPriority::LiveMax`] the largest stored now.
    pub running_max: f64,
}

/// A validated buffer configuration. Make one with [`Config::builder`].
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    capacity: usize,
    schema: Schema,
    fanout: Fanout,
    alpha: f64,
    weight_normalization: WeightNormalization,
    default_priority: DefaultPriority,
    initial_priority: f64,
    /// The tag in the keys of a buffer made with this configuration; 0 until one is drawn.
    key_tag: u16,
    /// Largest raw priority whose `p^alpha` stays within `MAX_PRIORITY`.
    max_raw_priority: f64,
    /// The rate limit a concurrent buffer holds, with the largest calls it admits.
    rate_limit: Option<(RateLimit, Batches)>,
    /// Draws after which an item is deleted (0: no limit).
    max_times_sampled: u32,
    /// The column holding each item's policy version (an i64 column of one element).
    version_column: Option<usize>,
    /// Whether the tree keeps each node's largest leaf for [`SampleMode::MaxHeap`].
    max_heap: bool,
}

impl Config {
    /// Start a configuration for `capacity` items of `schema`; defaults: fanout 8,
    /// alpha 0.6, Global weight normalization, RunningMax default priority, initial
    /// priority 1.
    ///
    /// ```
    /// use kary_replay::{Config, DType, Schema, WeightNormalization};
    /// let schema = Schema::new().column("obs", DType::F32, 4);
    /// let config = Config::builder(1 << 16, schema.clone())
    ///     .fanout(8)
    ///     .alpha(0.7)
    ///     .weight_normalization(WeightNormalization::Batch)
    ///     .build()?;
    /// assert_eq!(config.fanout().get(), 8);
    /// assert!(Config::builder(0, schema.clone()).build().is_err());
    /// assert!(Config::builder(10, schema).alpha(f64::NAN).build().is_err());
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn builder(capacity: usize, schema: Schema) -> ConfigBuilder {
        ConfigBuilder {
            capacity,
            schema,
            fanout: Fanout::default().get(),
            alpha: 0.6,
            weight_normalization: WeightNormalization::default(),
            default_priority: DefaultPriority::default(),
            initial_priority: 1.0,
            key_tag: 0,
            rate_limit: None,
            max_times_sampled: 0,
            version_column: None,
            max_heap: false,
        }
    }

    /// Items the buffer holds before FIFO eviction starts.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// The column schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }
    /// The tree's fanout.
    pub fn fanout(&self) -> Fanout {
        self.fanout
    }
    /// The priority exponent.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }
    /// How importance weights are normalized.
    pub fn weight_normalization(&self) -> WeightNormalization {
        self.weight_normalization
    }
    /// The priority of items inserted without one.
    pub fn default_priority(&self) -> DefaultPriority {
        self.default_priority
    }
    /// The priority (before alpha) that new items get while no larger one was seen.
    pub fn initial_priority(&self) -> f64 {
        self.initial_priority
    }
    /// The tag in the keys of a buffer made with this configuration ([`Key::tag`]): the one
    /// given to [`ConfigBuilder::key_tag`], or 0 when a buffer draws its own at construction
    /// (a buffer's [`config`](crate::ConcurrentBuffer::config) always has its tag).
    pub fn key_tag(&self) -> u16 {
        self.key_tag
    }

    /// The rate limit a concurrent buffer of this configuration holds, and the largest
    /// insert and sample it admits ([`ConfigBuilder::rate_limit`]); `None` when unlimited.
    pub fn rate_limit(&self) -> Option<(RateLimit, Batches)> {
        self.rate_limit
    }

    /// Draws after which a concurrent buffer deletes an item (Reverb's
    /// `max_times_sampled`, [`ConfigBuilder::max_times_sampled`]); `None`: no limit.
    pub fn max_times_sampled(&self) -> Option<u32> {
        (self.max_times_sampled > 0).then_some(self.max_times_sampled)
    }

    /// The position of the column that holds each item's policy version
    /// ([`ConfigBuilder::version_column`]); `None` when items carry none.
    pub fn version_column(&self) -> Option<usize> {
        self.version_column
    }

    /// Whether [`ConfigBuilder::max_heap`] was asked for.
    pub fn max_heap(&self) -> bool {
        self.max_heap
    }

    /// Whether a buffer of this configuration keeps its tree's maxima: for
    /// [`SampleMode::MaxHeap`] ([`ConfigBuilder::max_heap`]), or for
    /// [`DefaultPriority::LiveMax`]'s default priorities.
    pub(crate) fn keeps_maxima(&self) -> bool {
        self.max_heap || self.default_priority == DefaultPriority::LiveMax
    }

    /// [`SampleMode::MaxHeap`]'s check: a buffer that keeps no maxima refuses it
    /// ([`Error::InvalidParameter`]) rather than walk every leaf.
    pub(crate) fn check_mode(&self, mode: SampleMode) -> Result<()> {
        if mode == SampleMode::MaxHeap && !self.keeps_maxima() {
            return Err(Error::InvalidParameter {
                name: "mode",
                value: mode as u32 as f64,
                reason: "max_heap needs a buffer built to keep its tree's maxima: \
                         Config::builder(..).max_heap(true) (kr_config.max_heap = 1, \
                         max_heap=True in Python), or the live_max default priority",
            });
        }
        Ok(())
    }

    /// The policy version of item `item` of `columns` (checked against this schema, with
    /// more than `item` items). `None` without a version column.
    pub(crate) fn version_of(&self, columns: &[ColumnSlice<'_>], item: usize) -> Option<i64> {
        let c = self.version_column?;
        match columns[c] {
            ColumnSlice::I64(v) => Some(v[item]),
            _ => unreachable!("the version column is i64 (checked at build)"),
        }
    }

    /// The version column, or the error a buffer whose items carry no version gives
    /// [`ConcurrentBuffer::retire_before`].
    pub(crate) fn check_version_column(&self) -> Result<usize> {
        self.version_column.ok_or(Error::InvalidParameter {
            name: "retire_before",
            value: 0.0,
            reason: "the buffer's items carry no policy version: name an i64 column with \
                     ConfigBuilder::version_column",
        })
    }

    /// Refuse a batch of `items` items of `columns` that holds a version below `floor`
    /// ([`ConcurrentBuffer::retire_before`]): nothing is inserted.
    pub(crate) fn check_versions(
        &self,
        columns: &[ColumnSlice<'_>],
        items: usize,
        floor: i64,
    ) -> Result<()> {
        if self.version_column.is_none() || floor == i64::MIN {
            return Ok(());
        }
        match (0..items).find_map(|i| self.version_of(columns, i).filter(|&v| v < floor)) {
            None => Ok(()),
            Some(version) => Err(Error::RetiredVersion { version, floor }),
        }
    }

    /// This configuration without its rate limit (what a buffer that holds the limiter
    /// outside its inner one gives the inner one).
    pub(crate) fn without_rate_limit(mut self) -> Config {
        self.rate_limit = None;
        self
    }

    /// This configuration with a tag drawn when none was given: what a buffer keeps.
    pub(crate) fn tagged(mut self) -> Config {
        if self.key_tag == 0 {
            let drawn = crate::rng::Xoshiro256::from_entropy().next_u64();
            self.key_tag = 1 + (drawn % u64::from(Key::MAX_TAG)) as u16;
        }
        self
    }

    /// This configuration with the given tag (checked by the caller).
    pub(crate) fn with_key_tag(mut self, tag: u16) -> Config {
        self.key_tag = tag;
        self
    }

    /// Whether `other` differs from this configuration in nothing but the key tag.
    pub(crate) fn same_but_tag(&self, other: &Config) -> bool {
        *self == other.clone().with_key_tag(self.key_tag)
    }

    /// The key of the item inserted `insertion`-th, in slot `index`.
    #[inline]
    pub(crate) fn key(&self, index: usize, insertion: u64) -> Key {
        Key::new(self.key_tag, index, insertion)
    }

    /// Checks a caller's raw priority (`position` names it in the error).
    #[inline]
    pub(crate) fn check_priority(&self, position: usize, value: f64) -> Result<()> {
        crate::tree::check_priority_within(position, value, self.max_raw_priority())
    }

    /// Checks a single insert: `items` counted in its columns, and its optional priority.
    pub(crate) fn check_insert(&self, items: usize, priority: Option<f64>) -> Result<()> {
        if items != 1 {
            return Err(Error::LengthMismatch {
                what: "items in insert",
                expected: 1,
                got: items,
            });
        }
        priority.map_or(Ok(()), |p| self.check_priority(0, p))
    }

    /// Checks the optional priorities of a batch insert of `items` items.
    pub(crate) fn check_batch_priorities(
        &self,
        items: usize,
        priorities: Option<&[f64]>,
    ) -> Result<()> {
        let Some(ps) = priorities else {
            return Ok(());
        };
        if ps.len() != items {
            return Err(Error::LengthMismatch {
                what: "priorities",
                expected: items,
                got: ps.len(),
            });
        }
        ps.iter()
            .enumerate()
            .try_for_each(|(i, &p)| self.check_priority(i, p))
    }

    /// The checks of a priority update, changing nothing: matching lengths
    /// ([`Error::LengthMismatch`]), every key one that a buffer of this configuration that
    /// has handed out `handed_out` generations made ([`Error::OutOfRange`],
    /// [`Error::InvalidKey`]; stale keys pass: an update drops them), every priority valid
    /// ([`Error::InvalidPriority`]). Every buffer's `update_priorities` makes these checks
    /// first; a caller that splits one update over several buffers (shards) can make them on
    /// every part before any applies. Generations only grow, so a check that passed stays
    /// passed.
    ///
    /// ```
    /// use kary_replay::{ConcurrentBuffer, Config, DType, Error, Key, Schema, SplitLockBuffer};
    /// let buffer = SplitLockBuffer::new(Config::builder(8, Schema::new().column("x", DType::U8, 1)).build()?)?;
    /// let key = buffer.insert(&[(&[1u8][..]).into()], None)?;
    /// let config = buffer.config();
    /// assert!(config.check_update(&[key], &[2.0], buffer.inserted()).is_ok());
    /// let never = Key { index: 1, generation: 1 };
    /// assert!(matches!(config.check_update(&[never], &[2.0], buffer.inserted()), Err(Error::InvalidKey { .. })));
    /// assert!(config.check_update(&[key], &[f64::NAN], buffer.inserted()).is_err());
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn check_update(&self, keys: &[Key], priorities: &[f64], handed_out: u64) -> Result<()> {
        if keys.len() != priorities.len() {
            return Err(Error::LengthMismatch {
                what: "priorities",
                expected: keys.len(),
                got: priorities.len(),
            });
        }
        self.check_keys(keys, handed_out)?;
        for (position, &p) in priorities.iter().enumerate() {
            self.check_priority(position, p)?;
        }
        Ok(())
    }

    /// The key checks of [`Self::check_update`] alone: every key one that a buffer of this
    /// configuration that has handed out `handed_out` generations made
    /// ([`Error::OutOfRange`], [`Error::InvalidKey`]); stale keys pass.
    pub fn check_keys(&self, keys: &[Key], handed_out: u64) -> Result<()> {
        let capacity = self.capacity;
        // Below 2^48 inserts an insertion number is exact, so it must be one handed out and
        // belong to its slot; past that it wraps, and only the slot's own check remains.
        let exact = handed_out <= Key::INSERTION_MASK;
        for key in keys {
            if key.index >= capacity {
                return Err(Error::OutOfRange {
                    index: key.index,
                    capacity,
                });
            }
            let insertion = key.insertion();
            if key.tag() != u64::from(self.key_tag)
                || (exact
                    && (insertion >= handed_out || insertion % capacity as u64 != key.index as u64))
            {
                return Err(Error::InvalidKey {
                    index: key.index,
                    generation: key.generation,
                    tag: self.key_tag,
                });
            }
        }
        Ok(())
    }

    /// The largest raw priority that stays within [`MAX_PRIORITY`] after the exponent.
    pub(crate) fn max_raw_priority(&self) -> f64 {
        self.max_raw_priority
    }

    /// The stored priority an item inserted without one gets: `running_max` under
    /// [`DefaultPriority::RunningMax`]; under [`DefaultPriority::LiveMax`] the largest
    /// stored priority now (`live_max()`, called only then), or the initial priority when
    /// none is positive.
    pub(crate) fn default_stored(
        &self,
        running_max: f64,
        live_max: impl FnOnce() -> Option<f64>,
    ) -> f64 {
        match self.default_priority {
            DefaultPriority::RunningMax => running_max,
            DefaultPriority::LiveMax => match live_max() {
                Some(m) if m > 0.0 => m,
                _ => self.stored_priority(self.initial_priority),
            },
        }
    }

    /// `value^alpha` for a checked raw priority; 0 stays 0.
    #[inline]
    pub(crate) fn stored_priority(&self, value: f64) -> f64 {
        stored_at(self.alpha, value)
    }
}

/// `value^alpha` for a checked raw priority: 0 stays 0, and a power past [`MAX_PRIORITY`] (a
/// priority checked under a smaller alpha than the one a `set_alpha` made current since) is
/// [`MAX_PRIORITY`].
#[inline]
pub(crate) fn stored_at(alpha: f64, value: f64) -> f64 {
    if value == 0.0 {
        0.0
    } else if alpha == 1.0 {
        value.min(MAX_PRIORITY)
    } else {
        value.powf(alpha).min(MAX_PRIORITY)
    }
}

/// A raw priority whose power under `alpha` stands for the stored priority `stored` (a
/// default priority under [`DefaultPriority::LiveMax`]): its root, within rounding (exact
/// for alpha 1); 1 for alpha 0, where every positive priority is stored as 1.
pub(crate) fn raw_of_stored(alpha: f64, stored: f64) -> f64 {
    if alpha == 1.0 || stored == 0.0 {
        stored
    } else if alpha == 0.0 {
        1.0
    } else {
        stored.powf(1.0 / alpha)
    }
}

/// The largest raw priority whose power under `alpha` stays within [`MAX_PRIORITY`].
pub(crate) fn max_raw_for(alpha: f64) -> f64 {
    if alpha == 0.0 {
        f64::MAX
    } else {
        MAX_PRIORITY.powf(1.0 / alpha).min(f64::MAX)
    }
}

/// Checks an alpha given at run time: finite and >= 0.
pub(crate) fn check_alpha(alpha: f64) -> Result<()> {
    if alpha.is_finite() && alpha >= 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidParameter {
            name: "alpha",
            value: alpha,
            reason: "must be finite and >= 0",
        })
    }
}

/// Builder for [`Config`]; [`ConfigBuilder::build`] validates everything.
#[derive(Debug, Clone)]
pub struct ConfigBuilder {
    capacity: usize,
    schema: Schema,
    fanout: usize,
    alpha: f64,
    weight_normalization: WeightNormalization,
    default_priority: DefaultPriority,
    initial_priority: f64,
    key_tag: u16,
    rate_limit: Option<(RateLimit, Batches)>,
    max_times_sampled: u32,
    version_column: Option<String>,
    max_heap: bool,
}

impl ConfigBuilder {
    /// The schema given to [`Config::builder`] (for builders that wrap this one).
    pub(crate) fn schema_ref(&self) -> &Schema {
        &self.schema
    }
    /// The capacity, set by a builder that wraps this one once it knows it.
    pub(crate) fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }
    /// Tree fanout: 2, 4, 8, 16, 32 or 64.
    pub fn fanout(mut self, k: usize) -> Self {
        self.fanout = k;
        self
    }
    /// Priority exponent alpha (finite, >= 0; 0 gives uniform sampling of positive items).
    pub fn alpha(mut self, alpha: f64) -> Self {
        self.alpha = alpha;
        self
    }
    /// Importance-weight normalization.
    pub fn weight_normalization(mut self, w: WeightNormalization) -> Self {
        self.weight_normalization = w;
        self
    }
    /// Priority of items inserted without one.
    pub fn default_priority(mut self, d: DefaultPriority) -> Self {
        self.default_priority = d;
        self
    }
    /// Starting value (before alpha) of the default priority: finite and > 0.
    pub fn initial_priority(mut self, p: f64) -> Self {
        self.initial_priority = p;
        self
    }
    /// The tag in the buffer's keys, 1 to [`Key::MAX_TAG`] ([`Key::tag`]). Without one, each
    /// buffer draws its own at random when it is made, so that another buffer's key is
    /// refused; give one to make keys reproducible or to number shards.
    pub fn key_tag(mut self, tag: u16) -> Self {
        self.key_tag = tag;
        self
    }
    /// Hold the ratio of sampled to inserted items as `limit` says ([`crate::rate`]):
    /// each concurrent buffer admits every insert and sample through a [`RateLimiter`]
    /// before it takes any lock, waiting or refusing as the call's [`Wait`] says.
    /// `batches` are the largest insert (a [`Writer`]'s batch, an `insert_batch`) and the
    /// largest sample it will be asked for: a limit under which some call could wait forever
    /// is refused here, and a larger call is refused when made. The sequential
    /// [`ReplayBuffer`] refuses a configuration with a limit (its one thread would wait for
    /// itself).
    ///
    /// ```
    /// use kary_replay::rate::{Batches, RateLimit};
    /// use kary_replay::{ConcurrentBuffer, Config, DType, Error, Schema, SampleMode, SplitLockBuffer};
    /// use rand::{rngs::SmallRng, SeedableRng};
    ///
    /// let schema = Schema::new().column("x", DType::F32, 1);
    /// // Each item sampled 2 times on average, from 4 items on: the difference
    /// // `2 * inserts - samples` stays within 2 * 4 +- 8.
    /// let limit = RateLimit::sample_to_insert_ratio(2.0, 4, 8.0);
    /// let config = Config::builder(64, schema).rate_limit(limit, Batches { insert: 4, sample: 4 }).build()?;
    /// let buffer = SplitLockBuffer::new(config)?;
    /// let mut rng = SmallRng::seed_from_u64(1);
    /// assert!(matches!(buffer.try_sample(4, 0.4, SampleMode::Stratified, &mut rng), Err(Error::RateLimited(_))));
    /// buffer.insert_batch(&[(&[1.0f32, 2.0, 3.0, 4.0][..]).into()], None)?;
    /// buffer.try_sample(4, 0.4, SampleMode::Stratified, &mut rng)?;
    /// buffer.try_sample(4, 0.4, SampleMode::Stratified, &mut rng)?; // difference 8 - 8 = 0
    /// assert!(buffer.try_sample(1, 0.4, SampleMode::Stratified, &mut rng).is_err());
    /// assert_eq!(buffer.rate_stats().map(|s| (s.inserts, s.samples)), Some((4, 8)));
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn rate_limit(mut self, limit: RateLimit, batches: Batches) -> Self {
        self.rate_limit = Some((limit, batches));
        self
    }

    /// Delete each item after its `k`-th draw (Reverb's `max_times_sampled`; 0, the
    /// default, is no limit; at most [`MAX_TIMES_SAMPLED`]). An item is retired once exactly
    /// `k` of its draws reached callers, however many samplers draw at once: a draw past the
    /// `k`-th is drawn again elsewhere, a call that fails gives its draws back, and the
    /// item's key goes stale as after [`delete`](ConcurrentBuffer::delete). Every draw
    /// counts, each of a batch with replacement too; so a batch needs as many draws as its
    /// size, and when the items left cannot give them it fails with
    /// [`Error::Contention`], consuming nothing. The concurrent buffers
    /// hold it (shared and sharded ones included); the sequential buffer and the device
    /// buffers refuse it, as does a sequence buffer. With a [`RateLimit::Queue`] limit of
    /// `size`, `size` + the largest sample must not exceed the capacity (refused otherwise;
    /// one more largest sample for each further sampler thread): a sample is counted when
    /// admitted and retires its items when it ends, and the ring needs room for the inserts
    /// admitted meanwhile, or it evicts items never handed out.
    ///
    /// ```
    /// use kary_replay::{ConcurrentBuffer, Config, DType, Error, LockFreeBuffer, SampleMode, Schema};
    /// use rand::{rngs::SmallRng, SeedableRng};
    /// let schema = Schema::new().column("x", DType::U8, 1);
    /// let buffer = LockFreeBuffer::new(Config::builder(8, schema).max_times_sampled(1).build()?)?;
    /// buffer.insert_batch(&[(&[1u8, 2][..]).into()], None)?;
    /// let mut rng = SmallRng::seed_from_u64(1);
    /// let batch = buffer.sample(2, 0.4, SampleMode::WithoutReplacement, &mut rng)?;
    /// assert_eq!(batch.keys.len(), 2);
    /// assert_eq!(buffer.len(), 0); // each drawn once, so each gone
    /// assert_eq!(buffer.sample(1, 0.4, SampleMode::Stratified, &mut rng).unwrap_err(), Error::Empty);
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn max_times_sampled(mut self, k: u32) -> Self {
        self.max_times_sampled = k;
        self
    }

    /// Name the column that holds each item's policy version: an `i64` column of one
    /// element, written by the actor with the version of the policy that produced the item.
    /// A learner then retires every item older than a version at run time
    /// ([`ConcurrentBuffer::retire_before`]), exactly: once the call returns no item below
    /// it is stored, sampled or counted, and an insert of one is refused
    /// ([`Error::RetiredVersion`]). Held by every flat buffer (shared and sharded ones
    /// included); checkpoints keep the column and the floor.
    ///
    /// ```
    /// use kary_replay::{ConcurrentBuffer, Config, DType, Error, LockFreeBuffer, Schema};
    /// let schema = Schema::new().column("obs", DType::F32, 2).column("version", DType::I64, 1);
    /// let buffer = LockFreeBuffer::new(Config::builder(8, schema).version_column("version").build()?)?;
    /// buffer.insert_batch(&[(&[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0][..]).into(), (&[1i64, 2, 3][..]).into()], None)?;
    /// assert_eq!(buffer.retire_before(3)?, 2); // versions 1 and 2 retired
    /// assert_eq!(buffer.len(), 1);
    /// let old = [(&[0.0f32, 0.0][..]).into(), (&[2i64][..]).into()];
    /// assert_eq!(buffer.insert(&old, None).unwrap_err(), Error::RetiredVersion { version: 2, floor: 3 });
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn version_column(mut self, name: &str) -> Self {
        self.version_column = Some(name.to_owned());
        self
    }

    /// Keep, in each tree node, the largest priority below it as well as the sum and the
    /// smallest positive one, so that [`SampleMode::MaxHeap`] finds the largest stored
    /// priorities in `O(K log n)` (off by default; on anyway under
    /// [`DefaultPriority::LiveMax`], which needs the largest). A buffer without it refuses
    /// `MaxHeap` ([`Error::InvalidParameter`]); [`SampleMode::MinHeap`] needs nothing (every
    /// tree keeps its smallest positive priorities). The price is paid by every priority
    /// write: about 1.4x a lock-free update (docs/performance.md, "Heap
    /// selectors"). Held by every flat buffer; checkpoints and shared mappings keep it.
    ///
    /// ```
    /// use kary_replay::{ConcurrentBuffer, Config, DType, Error, LockFreeBuffer, SampleMode, Schema};
    /// use rand::{rngs::SmallRng, SeedableRng};
    /// let schema = Schema::new().column("x", DType::U8, 1);
    /// let mut rng = SmallRng::seed_from_u64(1);
    /// let plain = LockFreeBuffer::new(Config::builder(8, schema.clone()).build()?)?;
    /// plain.insert_batch(&[(&[1u8, 2][..]).into()], Some(&[1.0, 3.0]))?;
    /// assert!(matches!(plain.sample(1, 0.4, SampleMode::MaxHeap, &mut rng), Err(Error::InvalidParameter { .. })));
    /// let heap = LockFreeBuffer::new(Config::builder(8, schema).max_heap(true).build()?)?;
    /// heap.insert_batch(&[(&[1u8, 2][..]).into()], Some(&[1.0, 3.0]))?;
    /// assert_eq!(heap.sample(1, 0.4, SampleMode::MaxHeap, &mut rng)?.keys[0].index, 1);
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn max_heap(mut self, on: bool) -> Self {
        self.max_heap = on;
        self
    }

    /// The validated configuration.
    pub fn build(self) -> Result<Config> {
        if self.capacity == 0 || self.capacity > MAX_CAPACITY {
            return Err(Error::InvalidCapacity(self.capacity));
        }
        self.schema.validate()?;
        let fanout = Fanout::new(self.fanout)?;
        check_alpha(self.alpha)?;
        let max_raw_priority = max_raw_for(self.alpha);
        if !(self.initial_priority > 0.0 && self.initial_priority <= max_raw_priority) {
            return Err(Error::InvalidParameter {
                name: "initial_priority",
                value: self.initial_priority,
                reason: "must be > 0 and finite (also after the alpha exponent)",
            });
        }
        if self.key_tag > Key::MAX_TAG {
            return Err(Error::InvalidParameter {
                name: "key_tag",
                value: f64::from(self.key_tag),
                reason: "must be between 1 and 32767 (0: drawn when a buffer is made)",
            });
        }
        if let Some((limit, batches)) = self.rate_limit {
            Params::new(limit, batches)?;
        }
        if self.max_times_sampled > MAX_TIMES_SAMPLED {
            return Err(Error::InvalidParameter {
                name: "max_times_sampled",
                value: f64::from(self.max_times_sampled),
                reason: "at most 511 (0: no limit)",
            });
        }
        if let (Some((RateLimit::Queue(size), batches)), true) =
            (self.rate_limit, self.max_times_sampled > 0)
        {
            // A sample is counted when admitted and its items retired when it ends, so the
            // inserts that its count lets in may land before it retires them: the ring must
            // have room for the queue and one sample in flight, or it evicts items no one
            // was handed.
            if size.saturating_add(batches.sample) > self.capacity as u64 {
                return Err(Error::InvalidParameter {
                    name: "rate_limit",
                    value: size as f64,
                    reason: "a Queue limit with max_times_sampled must leave room for a \
                             sample in flight: Queue size + the largest sample <= capacity \
                             (plus one largest sample for each further sampler thread), or \
                             the ring evicts items never handed out",
                });
            }
        }
        let version_column = match &self.version_column {
            None => None,
            Some(name) => {
                let position = self.schema.position(name).ok_or_else(|| {
                    Error::InvalidSchema(format!("version_column: no column named {name:?}"))
                })?;
                let spec = &self.schema.columns()[position];
                if spec.dtype != DType::I64 || spec.shape != 1 {
                    return Err(Error::InvalidSchema(format!(
                        "version_column {name:?} must be an i64 column of one element, not {:?} x {}",
                        spec.dtype, spec.shape
                    )));
                }
                Some(position)
            }
        };
        Ok(Config {
            capacity: self.capacity,
            schema: self.schema,
            fanout,
            alpha: self.alpha,
            weight_normalization: self.weight_normalization,
            default_priority: self.default_priority,
            initial_priority: self.initial_priority,
            key_tag: self.key_tag,
            max_raw_priority,
            rate_limit: self.rate_limit,
            max_times_sampled: self.max_times_sampled,
            version_column,
            max_heap: self.max_heap,
        })
    }
}
