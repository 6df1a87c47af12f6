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
mod global_lock;
mod lock_free;
mod sequential;
mod shared;
mod slots;
mod split_lock;
mod writer;

pub use concurrent::ConcurrentBuffer;
pub use global_lock::GlobalLockBuffer;
pub use lock_free::LockFreeBuffer;
pub use sequential::ReplayBuffer;
pub use split_lock::SplitLockBuffer;
pub use writer::Writer;

use crate::error::{Error, Result};
use crate::rng::RandomSource;
use crate::storage::{ColumnData, Schema};
use crate::tree::{Fanout, MAX_CAPACITY, MAX_PRIORITY};

/// How the B targets of a sample are drawn from `[0, total)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SampleMode {
    /// B independent uniforms in `[0, total)`: draws with replacement.
    Independent,
    /// One uniform in each of B equal slices of `[0, total)`, as in the PER paper: lower
    /// variance, and high-priority items cannot crowd out the rest of the batch.
    #[default]
    Stratified,
}

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

/// A sampled item's identity: its slot and the generation of the data in that slot.
///
/// The generation is the item's insertion number (0 for the first item ever inserted), so
/// `generation % capacity == index`. A key stays valid until its slot is overwritten;
/// updates through a stale key are dropped.
///
/// `repr(C)`: on 64-bit targets it has the layout of the C ABI's `kr_key`, so arrays of keys
/// cross the boundary without a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(C)]
pub struct Key {
    /// Slot index in `0..capacity`.
    pub index: usize,
    /// Insertion number of the data the key refers to.
    pub generation: u64,
}

/// Outcome of a priority update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UpdateReport {
    /// Entries applied (a duplicate key counts each time; the last one wins).
    pub applied: usize,
    /// Entries dropped because their slot was overwritten since the key was made.
    pub stale: usize,
}

/// A sampled batch. All vectors have the batch's length (columns: batch x shape).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleBatch {
    /// Keys for [`ReplayBuffer::update_priorities`].
    pub keys: Vec<Key>,
    /// Slot indices (the keys' `index`).
    pub indices: Vec<usize>,
    /// Stored (alpha-exponentiated) priorities at sampling time.
    pub priorities: Vec<f64>,
    /// Sampling probabilities `p_i / total`.
    pub probabilities: Vec<f64>,
    /// Normalized importance weights in `(0, 1]`.
    pub weights: Vec<f64>,
    /// The gathered columns, in schema order.
    pub columns: Vec<ColumnData>,
    /// Where the concurrent buffers build a batch before it replaces the one above (so a
    /// failed call leaves the batch as it was, and a warm batch never allocates).
    spare: Spare,
}

/// The working space of [`SampleBatch`]: never compared, never cloned.
#[derive(Debug, Default)]
pub(crate) struct Spare {
    /// The batch being built; swapped with the public fields on success.
    pub(crate) batch: Option<Box<SampleBatch>>,
    pub(crate) candidates: Vec<shared::Candidate>,
    pub(crate) indices: Vec<usize>,
}

impl Clone for Spare {
    fn clone(&self) -> Spare {
        Spare::default()
    }
}

impl PartialEq for Spare {
    fn eq(&self, _: &Spare) -> bool {
        true
    }
}

impl SampleBatch {
    /// Build a new batch with `build` in the spare and swap it in only if `build` succeeds,
    /// so that on error `self` holds what it held (the promise of every `sample_into`).
    /// The spare keeps its buffers either way: once both halves are warm, nothing is
    /// allocated. `build` gets the spare batch and scratch for candidates and indices.
    /// `with_columns: false` leaves `self.columns` alone (index-only sampling).
    pub(crate) fn build_with(
        &mut self,
        with_columns: bool,
        build: impl FnOnce(&mut SampleBatch, &mut Vec<shared::Candidate>, &mut Vec<usize>) -> Result<()>,
    ) -> Result<()> {
        let mut spare_batch = self.spare.batch.take().unwrap_or_default();
        let result = build(
            &mut spare_batch,
            &mut self.spare.candidates,
            &mut self.spare.indices,
        );
        if result.is_ok() {
            std::mem::swap(&mut self.keys, &mut spare_batch.keys);
            std::mem::swap(&mut self.indices, &mut spare_batch.indices);
            std::mem::swap(&mut self.priorities, &mut spare_batch.priorities);
            std::mem::swap(&mut self.probabilities, &mut spare_batch.probabilities);
            std::mem::swap(&mut self.weights, &mut spare_batch.weights);
            if with_columns {
                std::mem::swap(&mut self.columns, &mut spare_batch.columns);
            }
        }
        self.spare.batch = Some(spare_batch);
        result
    }

    /// Make room for `batch` rows in every vector but the columns, fallibly: on error
    /// nothing changed but capacity.
    pub(crate) fn reserve_rows(&mut self, batch: usize) -> Result<()> {
        reserve(&mut self.keys, batch)?;
        reserve(&mut self.indices, batch)?;
        reserve(&mut self.priorities, batch)?;
        reserve(&mut self.probabilities, batch)?;
        reserve(&mut self.weights, batch)
    }

    /// Number of sampled items.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }
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
    /// Largest raw priority whose `p^alpha` stays within `MAX_PRIORITY`.
    max_raw_priority: f64,
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

    /// Checks a caller's raw priority (`position` names it in the error).
    #[inline]
    pub(crate) fn check_priority(&self, position: usize, value: f64) -> Result<()> {
        if (0.0..=self.max_raw_priority()).contains(&value) {
            Ok(())
        } else {
            Err(Error::InvalidPriority {
                position,
                value,
                max: MAX_PRIORITY,
            })
        }
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

    /// Checks a priority update: matching lengths, every key made by a buffer that has
    /// handed out `handed_out` generations, every priority valid.
    pub(crate) fn check_update(
        &self,
        keys: &[Key],
        priorities: &[f64],
        handed_out: u64,
    ) -> Result<()> {
        if keys.len() != priorities.len() {
            return Err(Error::LengthMismatch {
                what: "priorities",
                expected: keys.len(),
                got: priorities.len(),
            });
        }
        let capacity = self.capacity;
        for (position, (key, &p)) in keys.iter().zip(priorities).enumerate() {
            if key.index >= capacity {
                return Err(Error::OutOfRange {
                    index: key.index,
                    capacity,
                });
            }
            if key.generation >= handed_out || key.generation % capacity as u64 != key.index as u64
            {
                return Err(Error::InvalidKey {
                    index: key.index,
                    generation: key.generation,
                });
            }
            self.check_priority(position, p)?;
        }
        Ok(())
    }

    /// The largest raw priority that stays within [`MAX_PRIORITY`] after the exponent.
    pub(crate) fn max_raw_priority(&self) -> f64 {
        self.max_raw_priority
    }

    /// `value^alpha` for a checked raw priority; 0 stays 0.
    #[inline]
    pub(crate) fn stored_priority(&self, value: f64) -> f64 {
        if value == 0.0 {
            0.0
        } else if self.alpha == 1.0 {
            value
        } else {
            value.powf(self.alpha)
        }
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
}

impl ConfigBuilder {
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

    /// The validated configuration.
    pub fn build(self) -> Result<Config> {
        if self.capacity == 0 || self.capacity > MAX_CAPACITY {
            return Err(Error::InvalidCapacity(self.capacity));
        }
        self.schema.validate()?;
        let fanout = Fanout::new(self.fanout)?;
        if !(self.alpha.is_finite() && self.alpha >= 0.0) {
            return Err(Error::InvalidParameter {
                name: "alpha",
                value: self.alpha,
                reason: "must be finite and >= 0",
            });
        }
        let max_raw_priority = if self.alpha == 0.0 {
            f64::MAX
        } else {
            MAX_PRIORITY.powf(1.0 / self.alpha).min(f64::MAX)
        };
        if !(self.initial_priority > 0.0 && self.initial_priority <= max_raw_priority) {
            return Err(Error::InvalidParameter {
                name: "initial_priority",
                value: self.initial_priority,
                reason: "must be > 0 and finite (also after the alpha exponent)",
            });
        }
        Ok(Config {
            capacity: self.capacity,
            schema: self.schema,
            fanout,
            alpha: self.alpha,
            weight_normalization: self.weight_normalization,
            default_priority: self.default_priority,
            initial_priority: self.initial_priority,
            max_raw_priority,
        })
    }
}

/// Make `v` able to hold `len` elements without reallocating; a failure is
/// [`Error::Allocation`], never an abort.
pub(crate) fn reserve<T>(v: &mut Vec<T>, len: usize) -> Result<()> {
    v.try_reserve(len.saturating_sub(v.len()))
        .map_err(|_| Error::Allocation {
            bytes: len.saturating_mul(std::mem::size_of::<T>()),
        })
}

/// The checks every sampling call makes on its values before anything else: a batch of at
/// least 1 ([`Error::ZeroBatch`]) and a finite `beta >= 0` ([`Error::InvalidParameter`]).
/// Public so that other front ends (the C ABI) check in the same order with the same rule.
///
/// ```
/// use kary_replay::{buffer::check_sample_arguments, Error};
/// assert_eq!(check_sample_arguments(0, 0.4), Err(Error::ZeroBatch));
/// assert!(check_sample_arguments(32, f64::NAN).is_err());
/// assert!(check_sample_arguments(32, 0.4).is_ok());
/// ```
pub fn check_sample_arguments(batch: usize, beta: f64) -> Result<()> {
    if batch == 0 {
        return Err(Error::ZeroBatch);
    }
    check_beta(beta)
}

/// Checks beta: finite and >= 0.
pub(crate) fn check_beta(beta: f64) -> Result<()> {
    if beta.is_finite() && beta >= 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidParameter {
            name: "beta",
            value: beta,
            reason: "must be finite and >= 0",
        })
    }
}

/// The prefix target in `[0, total)` of item `stratum` of a batch of `batch` for a uniform
/// draw `u` in `[0, 1)`: the one rule of every sampler (the sequential and concurrent buffers'
/// first draws and redraws, and the device buffer's tensors, hence the generic `T`).
#[inline]
pub(crate) fn sampling_target<T>(mode: SampleMode, stratum: T, u: T, total: f64, batch: usize) -> T
where
    T: std::ops::Add<Output = T> + std::ops::Mul<f64, Output = T>,
{
    match mode {
        SampleMode::Independent => u * total,
        SampleMode::Stratified => (stratum + u) * (total / batch as f64),
    }
}

/// Fills `targets` with B prefix targets in `[0, total)` for `mode`.
#[inline]
pub(crate) fn draw_targets(
    mode: SampleMode,
    total: f64,
    targets: &mut [f64],
    rng: &mut dyn RandomSource,
) {
    rng.fill_f64(targets);
    let batch = targets.len();
    for (b, t) in targets.iter_mut().enumerate() {
        *t = sampling_target(mode, b as f64, *t, total, batch);
    }
}

/// Fills `weights` from the sampled stored priorities (all positive).
#[inline]
pub(crate) fn importance_weights(
    norm: WeightNormalization,
    beta: f64,
    min_positive: f64,
    priorities: &[f64],
    weights: &mut Vec<f64>,
) {
    weights.clear();
    if beta == 0.0 {
        weights.resize(priorities.len(), 1.0);
        return;
    }
    let reference = match norm {
        WeightNormalization::Global => min_positive,
        WeightNormalization::Batch => priorities.iter().copied().fold(f64::INFINITY, f64::min),
    };
    weights.extend(priorities.iter().map(|&p| {
        if beta == 1.0 {
            reference / p
        } else {
            (p / reference).powf(-beta)
        }
    }));
}
