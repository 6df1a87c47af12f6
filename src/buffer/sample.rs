//! What a sample hands out and the arithmetic every sampler shares: [`SampleMode`],
//! [`SampleBatch`] with the spare it is built in, the argument checks, the prefix targets
//! and the importance weights. One function per rule, called by the sequential, concurrent,
//! C and device samplers.

use super::{Key, WeightNormalization};
use crate::error::{Error, Result};
use crate::mem::reserve;
use crate::rng::RandomSource;
use crate::storage::{ColumnData, ColumnSliceMut};
use crate::tree::Extreme;

/// The four methods that draw a batch of `batch` items, written once over `sample_with`:
/// the provided methods of [`ConcurrentBuffer`](super::ConcurrentBuffer) (`$vis` empty) and
/// the inherent ones of [`ReplayBuffer`](super::ReplayBuffer) (`$vis` is `pub`). `beta`
/// (finite, >= 0) is the importance-weight exponent throughout.
macro_rules! batch_sampling_methods {
    ($($vis:tt)*) => {
        /// Sample `batch` items (with replacement) proportionally to their stored
        /// priorities.
        $($vis)* fn sample(&self, batch: usize, beta: f64, mode: SampleMode, rng: &mut dyn RandomSource) -> Result<SampleBatch> {
            let mut out = SampleBatch::default();
            self.sample_into(batch, beta, mode, rng, &mut out)?;
            Ok(out)
        }

        /// [`Self::sample`] into a reused batch (no allocation once warm). On any error
        /// `out` is left as it was.
        $($vis)* fn sample_into(&self, batch: usize, beta: f64, mode: SampleMode, rng: &mut dyn RandomSource, out: &mut SampleBatch) -> Result<()> {
            self.sample_with(Draw::Batch { batch, beta, mode }, Rows::Owned, rng, out).map(drop)
        }

        /// Sample into the caller's memory: each sampled item's row is copied once,
        /// straight from the buffer into `columns` (one destination per schema column,
        /// each exactly `batch x shape` elements of the column's dtype: a tensor's
        /// storage, say); keys, indices, priorities, probabilities and weights go into
        /// `out`, whose `columns` are left alone.
        ///
        /// On failure `out` is unchanged. `columns` is unchanged when the call is refused
        /// before sampling (bad arguments, wrong destinations,
        /// [`Error::Empty`](crate::Error::Empty),
        /// [`Error::ZeroTotalPriority`](crate::Error::ZeroTotalPriority),
        /// [`Error::Allocation`](crate::Error::Allocation)); after
        /// [`Error::Contention`](crate::Error::Contention), which only a concurrent buffer
        /// returns, it may hold whole rows of items sampled before the failure (never a
        /// torn row): take its content as unspecified.
        ///
        /// ```
        /// use kary_replay::{ConcurrentBuffer, Config, DType, SampleBatch, SampleMode, Schema, SplitLockBuffer};
        /// use rand::{rngs::SmallRng, SeedableRng};
        ///
        /// let schema = Schema::new().column("obs", DType::F32, 2).column("action", DType::I64, 1);
        /// let buffer = SplitLockBuffer::new(Config::builder(64, schema).build()?)?;
        /// buffer.insert(&[(&[1.0f32, 2.0][..]).into(), (&[3i64][..]).into()], None)?;
        /// // The learner's own memory (a tensor's, say), filled in place.
        /// let (mut obs, mut action) = (vec![0f32; 4 * 2], vec![0i64; 4]);
        /// let mut out = SampleBatch::default();
        /// let mut rng = SmallRng::seed_from_u64(1);
        /// buffer.sample_columns_into(
        ///     4, 0.4, SampleMode::Stratified, &mut rng, &mut out,
        ///     &mut [(&mut obs[..]).into(), (&mut action[..]).into()],
        /// )?;
        /// assert_eq!(obs, [1.0, 2.0].repeat(4));
        /// assert_eq!(action, [3; 4]);
        /// assert_eq!(out.keys.len(), 4);
        /// assert!(out.columns.is_empty());
        /// # Ok::<(), kary_replay::Error>(())
        /// ```
        $($vis)* fn sample_columns_into(&self, batch: usize, beta: f64, mode: SampleMode, rng: &mut dyn RandomSource, out: &mut SampleBatch, columns: &mut [ColumnSliceMut<'_>]) -> Result<()> {
            self.sample_with(Draw::Batch { batch, beta, mode }, Rows::Into(columns), rng, out).map(drop)
        }

        /// [`Self::sample_into`] without the columns (`out.columns` is left alone): for
        /// callers that keep the data elsewhere (a device, say). Each item is still
        /// checked through its slot, as in every sample.
        $($vis)* fn sample_indices_into(&self, batch: usize, beta: f64, mode: SampleMode, rng: &mut dyn RandomSource, out: &mut SampleBatch) -> Result<()> {
            self.sample_with(Draw::Batch { batch, beta, mode }, Rows::Skip, rng, out).map(drop)
        }
    };
}
pub(super) use batch_sampling_methods;

/// How the B targets of a sample are drawn from `[0, total)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SampleMode {
    /// B independent uniforms in `[0, total)`: draws with replacement.
    Independent,
    /// One uniform in each of B equal slices of `[0, total)`, as in the PER paper: lower
    /// variance, and high-priority items cannot crowd out the rest of the batch.
    #[default]
    Stratified,
    /// Successive draws without replacement: no item twice in one batch. Draw `j` picks
    /// item `i` with probability `p_i / (total - E_j)`, `E_j` the stored priorities of the
    /// items drawn before it; the batch's `probabilities` are these conditional ones, and
    /// its weights are computed from them (docs/design.md, "Sampling without
    /// replacement"). A batch larger than the items of positive priority is refused.
    /// Flat and sequence buffers; a sharded or device buffer refuses it.
    WithoutReplacement,
    /// Every item stored equally likely, whatever its priority (0 included): B independent
    /// uniform draws among the N items, no tree walk; `probabilities` are `1 / N` and the
    /// weights 1 (Reverb's `Uniform` selector). Flat buffers; a sequence, sharded or device
    /// buffer refuses it.
    Uniform,
    /// The oldest item, as Reverb's `Fifo` selector: each draw of the batch takes the
    /// oldest item stored (the lowest generation) that has a draw left, so without
    /// `max_times_sampled` every draw is the same item, and with it
    /// ([`ConfigBuilder::max_times_sampled`](super::ConfigBuilder::max_times_sampled)) the
    /// batch takes the oldest items in order, `k` draws each at most: with `k = 1` the
    /// buffer is a queue. `probabilities` and weights are 1. Flat buffers; a sequence,
    /// sharded or device buffer refuses it.
    Fifo,
    /// The newest item, as Reverb's `Lifo` selector: [`SampleMode::Fifo`] from the other
    /// end.
    Lifo,
    /// Uniform draws without replacement across batches (TorchRL's
    /// `SamplerWithoutReplacement`, an epoch over the data): every sampler of the buffer
    /// draws from one pass, a uniformly random order of the items stored when the pass
    /// began, so no item is drawn twice in a pass, and every item stored throughout a pass
    /// is drawn once in it. When a pass runs out the next begins, over the items stored
    /// then; a batch that spans two passes still holds no item twice. An item gone since
    /// its pass began is skipped; one inserted during a pass joins the next.
    /// `probabilities` are `1 / N` and the weights 1. A batch larger than the items stored
    /// is refused. Flat buffers on the heap; a shared mapping, a sequence, sharded or
    /// device buffer refuses it, and checkpoints do not keep the pass (docs/design.md,
    /// "Shuffled passes").
    Shuffled,
    /// The item of the largest priority, as Reverb's `MaxHeap` selector: each draw of the
    /// batch takes the stored item of the largest positive priority that can be read and,
    /// with [`ConfigBuilder::max_times_sampled`](super::ConfigBuilder::max_times_sampled),
    /// has a draw left; a draw stays on its item, so without `max_times_sampled` every draw
    /// is the same item, and with `k = 1` the batch takes the `batch` largest in order.
    /// Ties go to the lower slot (Reverb's to the least recently inserted or updated).
    /// Items of priority 0 are not drawn. `probabilities` and weights are 1. The order is
    /// read from the tree's maxima by a best-first walk (`O(batch K log N)`); beside
    /// concurrent updates it is the order of the priorities the walk read. Flat buffers; a
    /// sequence, sharded or device buffer refuses it.
    MaxHeap,
    /// The item of the smallest positive priority, as Reverb's `MinHeap` selector:
    /// [`SampleMode::MaxHeap`] from the other end (read from the tree's minima).
    MinHeap,
}

impl SampleMode {
    /// The mode's name in the Python package and the docs.
    pub fn name(self) -> &'static str {
        match self {
            SampleMode::Independent => "independent",
            SampleMode::Stratified => "stratified",
            SampleMode::WithoutReplacement => "without_replacement",
            SampleMode::Uniform => "uniform",
            SampleMode::Fifo => "fifo",
            SampleMode::Lifo => "lifo",
            SampleMode::Shuffled => "shuffled",
            SampleMode::MaxHeap => "max_heap",
            SampleMode::MinHeap => "min_heap",
        }
    }
}

/// A sampled batch. All vectors have the batch's length (columns: batch x shape).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleBatch {
    /// Keys for [`ReplayBuffer::update_priorities`](super::ReplayBuffer::update_priorities).
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

crate::buffer::protocol::drawn_batch!(SampleBatch);

/// The working space of [`SampleBatch`]: never compared, never cloned.
#[derive(Debug, Default)]
pub(crate) struct Spare {
    /// The batch being built; swapped with the public fields on success.
    pub(crate) batch: Option<Box<SampleBatch>>,
    pub(crate) drawn: super::protocol::Drawn,
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
    /// allocated. `build` gets the spare batch and a descent's working space.
    /// `with_columns: false` leaves `self.columns` alone (index-only sampling).
    pub(crate) fn build_with<R>(
        &mut self,
        with_columns: bool,
        build: impl FnOnce(&mut SampleBatch, &mut super::protocol::Drawn) -> Result<R>,
    ) -> Result<R> {
        let mut spare_batch = self.spare.batch.take().unwrap_or_default();
        let result = build(&mut spare_batch, &mut self.spare.drawn);
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

/// The refusal of [`SampleMode::WithoutReplacement`], [`SampleMode::Uniform`] and the
/// ordered modes by a sampler that draws by priority with replacement only (`reason` says
/// which).
pub(crate) fn with_replacement_only(mode: SampleMode, reason: &'static str) -> Result<()> {
    match mode {
        SampleMode::WithoutReplacement
        | SampleMode::Uniform
        | SampleMode::Fifo
        | SampleMode::Lifo
        | SampleMode::Shuffled
        | SampleMode::MaxHeap
        | SampleMode::MinHeap => Err(Error::InvalidParameter {
            name: "mode",
            value: mode as u32 as f64,
            reason,
        }),
        _ => Ok(()),
    }
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
        // A draw without replacement starts as an independent one; the sampler redraws a
        // repeat from the items not drawn yet (`protocol::Distinct`).
        // The ordered modes draw no target (`Draw::ordered`).
        SampleMode::Independent
        | SampleMode::WithoutReplacement
        | SampleMode::Uniform
        | SampleMode::Fifo
        | SampleMode::Lifo
        | SampleMode::Shuffled
        | SampleMode::MaxHeap
        | SampleMode::MinHeap => u * total,
        SampleMode::Stratified => (stratum + u) * (total / batch as f64),
    }
}

/// What a sample draws: the first argument of the one sampling entry point,
/// [`ConcurrentBuffer::sample_with`](super::ConcurrentBuffer::sample_with) (and
/// [`ReplayBuffer::sample_with`](super::ReplayBuffer::sample_with)).
///
/// ```
/// use kary_replay::{Draw, SampleMode};
/// let batch = Draw::Batch { batch: 32, beta: 0.4, mode: SampleMode::Stratified };
/// assert_eq!(batch.len(), 32);
/// assert_eq!(Draw::At(&[0.25, 0.75]).len(), 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Draw<'a> {
    /// `batch` items drawn by the buffer in `mode`, with importance weights of exponent
    /// `beta` (finite, >= 0).
    Batch {
        /// Items to draw (at least 1).
        batch: usize,
        /// The importance-weight exponent.
        beta: f64,
        /// How the targets are drawn.
        mode: SampleMode,
    },
    /// One item at each fraction (each in `[0, 1)`) of the buffer's own total as its descent
    /// reads it: the positions a coordinator assigned to this buffer ([`crate::shard`]).
    /// The weights are all 1 (the coordinator computes the global ones).
    At(&'a [f64]),
}

impl Draw<'_> {
    /// Items in the sample.
    pub fn len(&self) -> usize {
        match self {
            Draw::Batch { batch, .. } => *batch,
            Draw::At(fractions) => fractions.len(),
        }
    }

    /// Whether the sample would hold no item (refused with [`Error::ZeroBatch`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether no item may be drawn twice ([`SampleMode::WithoutReplacement`]).
    pub fn without_replacement(&self) -> bool {
        matches!(
            self,
            Draw::Batch {
                mode: SampleMode::WithoutReplacement,
                ..
            }
        )
    }

    /// Whether every item is equally likely ([`SampleMode::Uniform`]).
    pub fn uniform(&self) -> bool {
        matches!(
            self,
            Draw::Batch {
                mode: SampleMode::Uniform,
                ..
            }
        )
    }

    /// Whether the draws come from the buffer's shuffled passes ([`SampleMode::Shuffled`]).
    pub fn shuffled(&self) -> bool {
        matches!(
            self,
            Draw::Batch {
                mode: SampleMode::Shuffled,
                ..
            }
        )
    }

    /// What a selector draw takes ([`SampleMode::Fifo`]: the oldest, `Lifo`: the newest,
    /// `MaxHeap`, `MinHeap`: the largest or smallest priority), or `None` for a draw from a
    /// distribution (by priority, uniform, shuffled).
    pub(crate) fn ordered(&self) -> Option<Selector> {
        match self {
            Draw::Batch { mode, .. } => match mode {
                SampleMode::Fifo => Some(Selector::Ring(Order::Oldest)),
                SampleMode::Lifo => Some(Selector::Ring(Order::Newest)),
                SampleMode::MaxHeap => Some(Selector::Heap(Extreme::Largest)),
                SampleMode::MinHeap => Some(Selector::Heap(Extreme::Smallest)),
                _ => None,
            },
            Draw::At(_) => None,
        }
    }

    /// The importance-weight exponent (0 for [`Draw::At`]: weights of 1).
    pub fn beta(&self) -> f64 {
        match self {
            Draw::Batch { beta, .. } => *beta,
            Draw::At(_) => 0.0,
        }
    }

    /// The checks of the values alone: [`check_sample_arguments`] or [`check_fractions`].
    pub(crate) fn check(&self) -> Result<()> {
        match self {
            Draw::Batch { batch, beta, .. } => check_sample_arguments(*batch, *beta),
            Draw::At(fractions) => check_fractions(fractions),
        }
    }

    /// Fills `targets` (one per item) for a descent over `total`.
    #[inline]
    pub(crate) fn fill(self, total: f64, targets: &mut [f64], rng: &mut dyn RandomSource) {
        match self {
            Draw::Batch { mode, .. } => draw_targets(mode, total, targets, rng),
            Draw::At(fractions) => {
                for (t, &f) in targets.iter_mut().zip(fractions) {
                    *t = f * total;
                }
            }
        }
    }

    /// The target of a redraw of item `b` of `batch` (its first candidate was in flight):
    /// in its own stratum while `in_stratum`, else over the whole range. A given fraction is
    /// not drawn again at the same place (the slot in flight would be found again): its
    /// redraws are independent draws over this buffer's total, so the item is still drawn in
    /// proportion to its priority within this buffer.
    #[inline]
    pub(crate) fn redraw(
        self,
        in_stratum: bool,
        b: usize,
        u: f64,
        total: f64,
        batch: usize,
    ) -> f64 {
        match self {
            Draw::Batch { mode, .. } if in_stratum => {
                sampling_target(mode, b as f64, u, total, batch)
            }
            _ => u * total,
        }
    }
}

/// Where a sample's rows go: the second argument of
/// [`ConcurrentBuffer::sample_with`](super::ConcurrentBuffer::sample_with).
#[derive(Debug)]
pub enum Rows<'a, 'b> {
    /// Into the batch's own `columns`, shaped by the buffer.
    Owned,
    /// Straight into the caller's memory: one destination per schema column, each exactly
    /// `batch x shape` elements of the column's dtype. The batch's `columns` are left alone.
    Into(&'a mut [ColumnSliceMut<'b>]),
    /// Nowhere (the caller keeps the data elsewhere, a device say); the batch's `columns`
    /// are left alone. Each item is still checked through its slot.
    Skip,
}

/// What a sample's descent read: the total it drew over and the smallest positive stored
/// priority its weights were referred to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Descent {
    /// Sum of the stored priorities the targets were drawn over.
    pub total: f64,
    /// The smallest positive stored priority read with it.
    pub min_positive: f64,
}

/// The checks of every sampling call, in the documented order: the values of `draw` (and
/// its mode against the buffer's `config`), then a buffer of `len` items holds something
/// ([`Error::Empty`]), then the caller's destinations (when `rows` has them) fit the batch
/// and the schema.
pub(crate) fn check_request(
    draw: &Draw<'_>,
    rows: &Rows<'_, '_>,
    len: usize,
    config: &super::Config,
) -> Result<()> {
    draw.check()?;
    if let Draw::Batch { mode, .. } = draw {
        config.check_mode(*mode)?;
    }
    if len == 0 {
        return Err(Error::Empty);
    }
    if draw.without_replacement() && draw.len() > len {
        return Err(super::protocol::too_few(draw.len()));
    }
    if draw.shuffled() && draw.len() > len {
        return Err(super::protocol::too_few_to_shuffle(draw.len()));
    }
    if let Rows::Into(columns) = rows {
        config.schema().check_destinations(draw.len(), columns)?;
    }
    Ok(())
}

/// The checks of [`ConcurrentBuffer::sample_at_into`](super::ConcurrentBuffer::sample_at_into)'s
/// fractions: at least one ([`Error::ZeroBatch`]), each finite and in `[0, 1)`
/// ([`Error::InvalidParameter`]).
///
/// ```
/// use kary_replay::{buffer::check_fractions, Error};
/// assert_eq!(check_fractions(&[]), Err(Error::ZeroBatch));
/// assert!(check_fractions(&[0.0, 0.5, 0.999]).is_ok());
/// assert!(check_fractions(&[1.0]).is_err());
/// assert!(check_fractions(&[f64::NAN]).is_err());
/// ```
pub fn check_fractions(fractions: &[f64]) -> Result<()> {
    if fractions.is_empty() {
        return Err(Error::ZeroBatch);
    }
    match fractions.iter().find(|f| !(0.0..1.0).contains(*f)) {
        Some(&value) => Err(Error::InvalidParameter {
            name: "fraction",
            value,
            reason: "must be in [0, 1)",
        }),
        None => Ok(()),
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

/// What a selector draw takes ([`Draw::ordered`]): each draw of the batch takes the first
/// item in this order that can be read (and has a draw left), and stays on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Selector {
    /// An end of the ring: by generation.
    Ring(Order),
    /// An end of the priorities: by the tree's extrema (`tree::rank`).
    Heap(Extreme),
}

/// Which end of the ring an ordered draw takes from ([`Selector::Ring`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// The oldest item first ([`SampleMode::Fifo`]).
    Oldest,
    /// The newest item first ([`SampleMode::Lifo`]).
    Newest,
}

impl Order {
    /// The `step`-th generation from this end of the `span` newest of `handed_out`.
    #[inline]
    pub(crate) fn generation(self, handed_out: u64, span: u64, step: u64) -> u64 {
        match self {
            Order::Oldest => handed_out - span + step,
            Order::Newest => handed_out - 1 - step,
        }
    }
}
