//! Sampling the union of several buffers (shards) exactly, as if one buffer held them all.
//!
//! Each shard is a buffer of its own (in this process, or in another one: the Python
//! package's Ray layer hosts one per Ray actor). A [`Coordinator`] samples their union in
//! two steps:
//!
//! 1. from every shard's [`Stats`] (total `T_k`, length, smallest positive priority) it draws
//!    B masses over `[0, T)`, `T = sum T_k` (stratified or independent, as one buffer does),
//!    maps each to the shard whose range of the cumulative totals holds it, and to a
//!    fraction `f = (u - C_{k-1}) / T_k` of that shard's total ([`Coordinator::plan`]);
//! 2. each shard descends at its fractions of its own current total `T_k'`
//!    ([`ConcurrentBuffer::sample_at_into`]) and replies with keys, stored priorities `p_j`,
//!    columns and its stats; the coordinator then gives each draw its probability
//!    `P_j = (T_k / T) (p_j / T_k')` and importance weight `(N P_j)^-beta`, normalized by
//!    that of the smallest positive priority over all shards (`Global`) or by the batch's
//!    largest (`Batch`) ([`Coordinator::finish`]).
//!
//! `P_j` is the probability with which draw j picked its item: the shard with probability
//! `T_k / T` as planned, the item with `p_j / T_k'` within the shard. With no writes between
//! the two steps `T_k' = T_k`, so `P_j = p_j / T` and the batch is distributed exactly as
//! one buffer holding the union would draw it (tests/shard.rs checks probabilities and
//! weights to 1e-12 against such a buffer, and the draws with a chi-square). With writes in
//! between, the weights still use the actual probability of each draw, so they stay
//! unbiased; the same holds when the plan uses stats from an earlier reply (one round trip
//! per batch instead of two).
//!
//! Keys name their shard: every buffer puts its own tag in its keys ([`Key::tag`]), and the
//! shards of one union have distinct tags, so updates route by key alone
//! ([`ShardedBuffer::shard_of`]). [`ShardedBuffer`] is the in-process form: S buffers of any
//! variant, each actor inserting into its own, learners sampling the union. A rate limit
//! ([`Config::rate_limit`]) given to a [`ShardedBuffer`] is held once, for the union: every
//! insert into any shard and every sample of the union is admitted by one limiter.

use crate::buffer::{
    importance_weights, ConcurrentBuffer, Config, Key, SampleBatch, SampleMode, Stats,
    UpdateReport, WeightNormalization,
};
use crate::error::{Error, Result};
use crate::rate::{Admission, Batches, RateLimit, RateLimiter, Wait};
use crate::rng::RandomSource;
use crate::storage::ColumnSlice;

/// The most shards a [`Coordinator`] or [`ShardedBuffer`] takes (one per key tag).
pub const MAX_SHARDS: usize = Key::MAX_TAG as usize;

/// Why a union refuses [`SampleMode::WithoutReplacement`] (each draw's conditional
/// probability depends on what every other shard's earlier draws took) and
/// [`SampleMode::Uniform`] (its plan splits the draws by the shards' totals, not counts).
const SHARDS_WITH_REPLACEMENT: &str = "a sharded buffer samples by priority with replacement only (modes 2 to 6, without replacement, uniform, fifo, lifo and shuffled, are for one buffer)";

/// A shard's reply to its part of a plan: the stored priorities of its items, in the order
/// of its fractions, and the total its descent used ([`Stats::total`] from
/// [`ConcurrentBuffer::sample_at_into`]).
#[derive(Debug, Clone, Copy)]
pub struct Reply<'a> {
    /// Stored priorities, one per fraction the shard was given.
    pub priorities: &'a [f64],
    /// The shard's total at its descent.
    pub total: f64,
}

/// Plans and finishes samples of the union of S shards (module doc). One per learner
/// thread; it keeps its vectors, so a warm coordinator does not allocate.
///
/// ```
/// use kary_replay::shard::{Coordinator, Reply};
/// use kary_replay::{ConcurrentBuffer, Config, DType, SampleBatch, SampleMode, Schema};
/// use kary_replay::{SplitLockBuffer, WeightNormalization};
/// use rand::{rngs::SmallRng, SeedableRng};
///
/// let config = Config::builder(8, Schema::new().column("x", DType::I64, 1)).alpha(1.0).build()?;
/// let shards = [SplitLockBuffer::new(config.clone())?, SplitLockBuffer::new(config)?];
/// shards[0].insert_batch(&[(&[1i64, 2][..]).into()], Some(&[1.0, 3.0]))?;
/// shards[1].insert_batch(&[(&[3i64][..]).into()], Some(&[4.0]))?;
///
/// let mut rng = SmallRng::seed_from_u64(1);
/// let mut coordinator = Coordinator::new();
/// let stats: Vec<_> = shards.iter().map(|s| s.stats()).collect();
/// coordinator.plan(&stats, 4, SampleMode::Stratified, &mut rng)?; // 4 draws over a total of 8
/// let mut batches = [SampleBatch::default(), SampleBatch::default()];
/// let mut totals = [0.0; 2];
/// for k in 0..2 {
///     totals[k] = shards[k].sample_at_into(coordinator.fractions(k), &mut rng, &mut batches[k])?.total;
/// }
/// let replies: Vec<_> = (0..2)
///     .map(|k| Reply { priorities: &batches[k].priorities, total: totals[k] })
///     .collect();
/// let (mut probabilities, mut weights) = (vec![], vec![]);
/// coordinator.finish(&replies, 1.0, WeightNormalization::Global, &mut probabilities, &mut weights)?;
/// assert_eq!(coordinator.fractions(0).len() + coordinator.fractions(1).len(), 4);
/// assert!(probabilities.iter().all(|&p| p == 1.0 / 8.0 || p == 3.0 / 8.0 || p == 4.0 / 8.0));
/// # Ok::<(), kary_replay::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Coordinator {
    /// Each shard's total in the plan's stats.
    totals: Vec<f64>,
    /// Their sum.
    total: f64,
    /// The smallest positive priority over the shards in the plan's stats (infinity: none).
    min_positive: f64,
    /// Each shard's fractions, in draw order.
    fractions: Vec<Vec<f64>>,
    /// Cumulative totals (the end of each shard's range).
    ends: Vec<f64>,
    /// The draws.
    targets: Vec<f64>,
    /// What [`ShardedBuffer::sample_into`] reuses.
    scratch: Scratch,
}

/// A [`ShardedBuffer`] sample's working space, kept in the caller's [`Coordinator`].
#[derive(Debug, Clone, Default)]
struct Scratch {
    stats: Vec<Stats>,
    parts: Vec<SampleBatch>,
    totals: Vec<f64>,
}

impl Coordinator {
    /// An empty coordinator.
    pub fn new() -> Coordinator {
        Coordinator::default()
    }

    /// Plan `batch` draws over the union of shards whose stats are `stats` (one per shard):
    /// afterwards [`Self::fractions`] holds each shard's part. Errors, with the plan then
    /// empty: [`Error::ZeroBatch`], [`Error::Empty`] (no shard holds an item, or no shard at
    /// all), [`Error::ZeroTotalPriority`] (every stored priority is 0),
    /// [`Error::InvalidParameter`] (a total that is not finite or negative, or past
    /// [`MAX_SHARDS`] shards).
    pub fn plan(
        &mut self,
        stats: &[Stats],
        batch: usize,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
    ) -> Result<()> {
        self.clear(stats.len());
        if batch == 0 {
            return Err(Error::ZeroBatch);
        }
        crate::buffer::with_replacement_only(mode, SHARDS_WITH_REPLACEMENT)?;
        if stats.len() > MAX_SHARDS {
            return Err(Error::InvalidParameter {
                name: "shards",
                value: stats.len() as f64,
                reason: "at most 32767 shards",
            });
        }
        if let Some(bad) = stats
            .iter()
            .find(|s| !(s.total.is_finite() && s.total >= 0.0))
        {
            return Err(Error::InvalidParameter {
                name: "total",
                value: bad.total,
                reason: "a shard's total must be finite and >= 0",
            });
        }
        if stats.iter().all(|s| s.len == 0) {
            return Err(Error::Empty);
        }
        let mut end = 0.0;
        for s in stats {
            end += s.total;
            self.ends.push(end);
            self.totals.push(s.total);
            if s.total > 0.0 {
                if let Some(m) = s.min_positive {
                    self.min_positive = self.min_positive.min(m);
                }
            }
        }
        self.total = end;
        if end <= 0.0 || !end.is_finite() {
            self.clear(stats.len());
            return Err(Error::ZeroTotalPriority);
        }
        crate::mem::reserve(&mut self.targets, batch)?;
        self.targets.resize(batch, 0.0);
        crate::buffer::draw_targets(mode, end, &mut self.targets, rng);
        // The last shard with a positive total: where a draw rounded up to `end` goes.
        let last = stats.iter().rposition(|s| s.total > 0.0).unwrap_or(0);
        for &u in &self.targets {
            // The first shard whose range ends past `u` (it has a positive total: its end is
            // above the one before).
            let k = self.ends.partition_point(|&e| e <= u).min(last);
            let start = self.ends[k] - self.totals[k];
            let f = ((u - start) / self.totals[k]).clamp(0.0, ONE_BELOW);
            self.fractions[k].push(f);
        }
        Ok(())
    }

    /// Shard `shard`'s fractions in the last plan (in draw order; empty when it got none).
    pub fn fractions(&self, shard: usize) -> &[f64] {
        self.fractions.get(shard).map_or(&[], |f| &f[..])
    }

    /// Shards in the last plan.
    pub fn shards(&self) -> usize {
        self.totals.len()
    }

    /// The union's total in the last plan's stats.
    pub fn total(&self) -> f64 {
        self.total
    }

    /// The probabilities and importance weights of a batch whose items are the shards'
    /// replies concatenated in shard order (`replies[k]` holds shard k's priorities, as many
    /// as its fractions: module doc). `probabilities` and `weights` are replaced. Errors:
    /// [`Error::LengthMismatch`] when the replies do not match the plan (nothing is written),
    /// [`Error::InvalidParameter`] for a bad beta or reply total.
    pub fn finish(
        &self,
        replies: &[Reply<'_>],
        beta: f64,
        norm: WeightNormalization,
        probabilities: &mut Vec<f64>,
        weights: &mut Vec<f64>,
    ) -> Result<()> {
        crate::buffer::check_sample_arguments(1, beta)?;
        if replies.len() != self.shards() {
            return Err(Error::LengthMismatch {
                what: "replies",
                expected: self.shards(),
                got: replies.len(),
            });
        }
        let mut batch = 0usize;
        for (k, r) in replies.iter().enumerate() {
            if r.priorities.len() != self.fractions[k].len() {
                return Err(Error::LengthMismatch {
                    what: "a shard's reply",
                    expected: self.fractions[k].len(),
                    got: r.priorities.len(),
                });
            }
            let usable = r.total.is_finite() && r.total > 0.0;
            if !r.priorities.is_empty() && !usable {
                return Err(Error::InvalidParameter {
                    name: "total",
                    value: r.total,
                    reason: "a shard that sampled has a positive total",
                });
            }
            batch += r.priorities.len();
        }
        crate::mem::reserve(probabilities, batch)?;
        crate::mem::reserve(weights, batch)?;
        probabilities.clear();
        for (k, r) in replies.iter().enumerate() {
            let shard_share = self.totals[k] / self.total;
            probabilities.extend(r.priorities.iter().map(|&p| shard_share * (p / r.total)));
        }
        // The largest possible weight is that of the smallest positive priority; under
        // writes a draw's probability may be below it, and taking the smaller keeps every
        // weight in (0, 1].
        let batch_min = probabilities.iter().copied().fold(f64::INFINITY, f64::min);
        let reference = (self.min_positive / self.total).min(batch_min);
        importance_weights(norm, beta, reference, probabilities, weights);
        Ok(())
    }

    fn clear(&mut self, shards: usize) {
        self.totals.clear();
        self.ends.clear();
        self.total = 0.0;
        self.min_positive = f64::INFINITY;
        self.fractions.resize_with(shards, Vec::new);
        self.fractions.truncate(shards);
        for f in &mut self.fractions {
            f.clear();
        }
    }
}

/// The largest f64 below 1.
const ONE_BELOW: f64 = 1.0 - f64::EPSILON / 2.0;

/// S buffers of one variant, sampled as one (the thesis' banked buffer): each actor inserts
/// into a shard of its own, so actors on different shards share no cursor, lock or cache
/// line; learners sample the union exactly through a [`Coordinator`] each. Each shard has a
/// key tag of its own ([`Self::new`]), so [`Self::update_priorities`] routes by key.
///
/// A sampled batch's `indices` number the union's slots (shard k's slot i is
/// `k * shard capacity + i`); its keys' `index` is the slot in the shard.
///
/// ```
/// use kary_replay::shard::{Coordinator, ShardedBuffer};
/// use kary_replay::{Config, DType, LockFreeBuffer, SampleBatch, SampleMode, Schema};
/// use rand::{rngs::SmallRng, SeedableRng};
///
/// let config = Config::builder(1024, Schema::new().column("obs", DType::F32, 2)).build()?;
/// let buffer: ShardedBuffer<LockFreeBuffer> = ShardedBuffer::new(2, config)?;
/// std::thread::scope(|s| {
///     for actor in 0..2 {
///         let buffer = &buffer;
///         s.spawn(move || {
///             for step in 0..100 {
///                 buffer.insert(actor, &[(&[actor as f32, step as f32][..]).into()], None).unwrap();
///             }
///         });
///     }
/// });
/// let (mut coordinator, mut batch) = (Coordinator::new(), SampleBatch::default());
/// let mut rng = SmallRng::seed_from_u64(7);
/// buffer.sample_into(&mut coordinator, 32, 0.4, SampleMode::Stratified, &mut rng, &mut batch)?;
/// let report = buffer.update_priorities(&batch.keys, &vec![0.5; 32])?;
/// assert_eq!((buffer.len(), report.applied), (200, 32));
/// # Ok::<(), kary_replay::Error>(())
/// ```
#[derive(Debug)]
pub struct ShardedBuffer<B> {
    shards: Vec<B>,
    /// `(key tag, shard)` for every shard, sorted by tag: where a key goes.
    routes: Vec<(u16, usize)>,
    /// The union's rate limiter: admits every insert into a shard and every sample of the
    /// union, before the shard is touched.
    rate: Option<RateLimiter>,
}

impl<B: ConcurrentBuffer> ShardedBuffer<B> {
    /// `shards` buffers, each made with `config` (its capacity is each shard's) and key tags
    /// `base, base + 1, ...`: `base` is `config`'s [`key_tag`](Config::key_tag) when it has
    /// one (then `base + shards - 1` must not pass [`Key::MAX_TAG`]), else drawn at random.
    /// `config`'s rate limit, if any, is held once for the union (the shards hold none).
    pub fn new(shards: usize, config: Config) -> Result<Self> {
        if shards == 0 || shards > MAX_SHARDS {
            return Err(Error::InvalidParameter {
                name: "shards",
                value: shards as f64,
                reason: "must be between 1 and 32767",
            });
        }
        let last_base = Key::MAX_TAG as usize + 1 - shards;
        let base = match config.key_tag() {
            0 => {
                let drawn = crate::rng::Xoshiro256::from_entropy().next_u64();
                1 + (drawn % last_base as u64) as usize
            }
            tag if tag as usize > last_base => {
                return Err(Error::InvalidParameter {
                    name: "key_tag",
                    value: f64::from(tag),
                    reason: "leaves no room for one tag per shard below 32768",
                })
            }
            tag => tag as usize,
        };
        let rate = crate::rate::rate_limiter_from(config.rate_limit(), None)?;
        let shard_config = config.without_rate_limit();
        let mut buffers = Vec::new();
        crate::mem::reserve(&mut buffers, shards)?;
        for k in 0..shards {
            buffers.push(B::new(
                shard_config.clone().with_key_tag((base + k) as u16),
            )?);
        }
        let mut buffer = Self::from_shards(buffers)?;
        buffer.rate = rate;
        Ok(buffer)
    }

    /// This buffer with a rate limit for the union: `limit` with calls of up to `batches`,
    /// continuing from `counts` (inserts, samples: a checkpoint's) when given. Errors as
    /// [`RateLimiter::with_counts`].
    pub fn with_rate_limit(
        mut self,
        limit: RateLimit,
        batches: Batches,
        counts: Option<(u64, u64)>,
    ) -> Result<Self> {
        let (inserts, samples) = counts.unwrap_or((0, 0));
        self.rate = Some(RateLimiter::with_counts(limit, batches, inserts, samples)?);
        Ok(self)
    }

    /// Shards made elsewhere (loaded from checkpoints, say): 1 to [`MAX_SHARDS`] of them,
    /// with one configuration but for their key tags, which must all differ (an error
    /// otherwise, naming the shards), and no rate limit of their own (the union's is given
    /// with [`Self::with_rate_limit`]).
    pub fn from_shards(shards: Vec<B>) -> Result<Self> {
        let Some(first) = shards.first() else {
            return Err(Error::InvalidParameter {
                name: "shards",
                value: 0.0,
                reason: "must be between 1 and 32767",
            });
        };
        if shards.len() > MAX_SHARDS {
            return Err(Error::InvalidParameter {
                name: "shards",
                value: shards.len() as f64,
                reason: "must be between 1 and 32767",
            });
        }
        if let Some(k) = shards.iter().position(|s| s.rate_limiter().is_some()) {
            return Err(Error::InvalidParameter {
                name: "rate_limit",
                value: k as f64,
                reason: "a shard holds a rate limit of its own: give the limit to the \
                         ShardedBuffer (ShardedBuffer::new with a limited config, or \
                         with_rate_limit), which holds one for the union",
            });
        }
        if let Some(k) = shards
            .iter()
            .position(|s| !s.config().same_but_tag(first.config()))
        {
            return Err(Error::InvalidSchema(format!(
                "shard {k}'s configuration differs from shard 0's"
            )));
        }
        let mut routes = Vec::new();
        crate::mem::reserve(&mut routes, shards.len())?;
        routes.extend(
            shards
                .iter()
                .enumerate()
                .map(|(k, s)| (s.config().key_tag(), k)),
        );
        routes.sort_unstable();
        if let Some(w) = routes.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::InvalidSchema(format!(
                "shards {} and {} share key tag {}: each shard needs its own \
                 (ConfigBuilder::key_tag)",
                w[0].1.min(w[1].1),
                w[0].1.max(w[1].1),
                w[0].0
            )));
        }
        Ok(ShardedBuffer {
            shards,
            routes,
            rate: None,
        })
    }

    /// The shard whose tag `key` carries; `None` for a key of no shard of this buffer.
    pub fn shard_of(&self, key: Key) -> Option<usize> {
        let tag = u16::try_from(key.tag()).ok()?;
        let at = self.routes.binary_search_by_key(&tag, |r| r.0).ok()?;
        Some(self.routes[at].1)
    }

    /// The shard `key` names ([`Error::UnknownShard`] for none of this buffer's), whose
    /// configuration then checks the key as one buffer would ([`Config::check_keys`]).
    fn checked_shard_of(&self, key: Key) -> Result<usize> {
        let k = self.shard_of(key).ok_or(Error::UnknownShard {
            key: key.generation,
            shards: self.shards.len(),
        })?;
        let shard = &self.shards[k];
        shard.config().check_keys(&[key], shard.inserted())?;
        Ok(k)
    }

    /// The shards, in order.
    pub fn shards(&self) -> &[B] {
        &self.shards
    }

    /// The shards, given back.
    pub fn into_shards(self) -> Vec<B> {
        self.shards
    }

    fn shard(&self, shard: usize) -> Result<&B> {
        self.shards.get(shard).ok_or(Error::OutOfRange {
            index: shard,
            capacity: self.shards.len(),
        })
    }

    /// Insert one item into `shard` (see [`ConcurrentBuffer::insert`]); its key carries the
    /// shard's tag. Under a rate limit it waits for the union's limiter.
    pub fn insert(
        &self,
        shard: usize,
        columns: &[ColumnSlice<'_>],
        priority: Option<f64>,
    ) -> Result<Key> {
        let target = self.shard(shard)?;
        let config = target.config();
        config.check_insert(config.schema().count_items(columns)?, priority)?;
        let admission = Admission::insert(self.rate.as_ref(), 1, Wait::Block)?;
        admission.settle(target.insert(columns, priority))
    }

    /// Insert a batch into `shard`, appending its keys (which carry the shard's tag) to `keys`
    /// (see [`ConcurrentBuffer::insert_batch_into`]). Under a rate limit it waits for the
    /// union's limiter.
    pub fn insert_batch_into(
        &self,
        shard: usize,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
    ) -> Result<()> {
        self.insert_batch_waiting(shard, columns, priorities, keys, Wait::Block)
    }

    /// [`Self::insert_batch_into`] waiting for the union's rate limiter as `wait` says: the
    /// input is checked, then the limiter admits the batch's items, then the shard inserts
    /// them. On error nothing is inserted or counted.
    pub fn insert_batch_waiting(
        &self,
        shard: usize,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
        keys: &mut Vec<Key>,
        wait: Wait,
    ) -> Result<()> {
        let target = self.shard(shard)?;
        let config = target.config();
        let items = config.schema().count_items(columns)?;
        config.check_batch_priorities(items, priorities)?;
        let admission = Admission::insert(self.rate.as_ref(), items, wait)?;
        admission.settle(target.insert_batch_into(columns, priorities, keys))
    }

    /// The union's rate limiter, when the buffer has a rate limit.
    pub fn rate_limiter(&self) -> Option<&RateLimiter> {
        self.rate.as_ref()
    }

    crate::rate::rate_limit_methods!(pub);

    /// [`Self::insert_batch_into`] into a new vector.
    pub fn insert_batch(
        &self,
        shard: usize,
        columns: &[ColumnSlice<'_>],
        priorities: Option<&[f64]>,
    ) -> Result<Vec<Key>> {
        let mut keys = Vec::new();
        self.insert_batch_into(shard, columns, priorities, &mut keys)?;
        Ok(keys)
    }

    /// Every shard's stats, in shard order.
    pub fn stats(&self) -> Vec<Stats> {
        self.shards.iter().map(|s| s.stats()).collect()
    }

    /// Sample `batch` items of the union exactly (module doc): a plan from every shard's
    /// stats, then each shard's part with
    /// [`sample_at_columns_into`](ConcurrentBuffer::sample_at_columns_into), its rows copied
    /// straight into `out`'s columns. `coordinator` is the caller's (one per thread); on
    /// error `out` is unchanged. The guarantees of each shard's sample hold for its items;
    /// the probabilities are those of the draws (module doc). The batch lists shard 0's
    /// items first, then shard 1's, and so on (for a stratified sample, that is draw order).
    /// Under a rate limit it waits for the union's limiter.
    pub fn sample_into(
        &self,
        coordinator: &mut Coordinator,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<()> {
        self.sample_waiting(coordinator, batch, beta, mode, rng, out, Wait::Block)
    }

    /// [`Self::sample_into`] waiting for the union's rate limiter as `wait` says (after the
    /// arguments are checked, before any shard is read); a sample that then fails gives its
    /// admission back.
    #[allow(clippy::too_many_arguments)]
    pub fn sample_waiting(
        &self,
        coordinator: &mut Coordinator,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
        wait: Wait,
    ) -> Result<()> {
        crate::buffer::check_sample_arguments(batch, beta)?;
        crate::buffer::with_replacement_only(mode, SHARDS_WITH_REPLACEMENT)?;
        let started = self.rate.is_some().then(std::time::Instant::now);
        let admission = Admission::sample(self.rate.as_ref(), batch, wait)?;
        admission.until_filled(wait, started, || !self.is_empty())?;
        admission.settle(self.sample_admitted(coordinator, batch, beta, mode, rng, out))
    }

    fn sample_admitted(
        &self,
        coordinator: &mut Coordinator,
        batch: usize,
        beta: f64,
        mode: SampleMode,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<()> {
        let mut scratch = std::mem::take(&mut coordinator.scratch);
        scratch.stats.clear();
        scratch.stats.extend(self.shards.iter().map(|s| s.stats()));
        let result = coordinator
            .plan(&scratch.stats, batch, mode, rng)
            .and_then(|()| self.sample_parts(coordinator, &mut scratch, beta, rng, out));
        coordinator.scratch = scratch;
        result
    }

    /// Each shard's part of the planned batch, then the union's probabilities and weights.
    fn sample_parts(
        &self,
        coordinator: &Coordinator,
        scratch: &mut Scratch,
        beta: f64,
        rng: &mut dyn RandomSource,
        out: &mut SampleBatch,
    ) -> Result<()> {
        let config = self.shards[0].config();
        let (schema, capacity) = (config.schema(), config.capacity());
        let batch: usize = (0..self.shards.len())
            .map(|k| coordinator.fractions(k).len())
            .sum();
        scratch
            .parts
            .resize_with(self.shards.len(), SampleBatch::default);
        scratch.totals.clear();
        scratch.totals.resize(self.shards.len(), 0.0);
        out.build_with(true, |spare, _| {
            schema.shape_output(batch, &mut spare.columns)?;
            spare.reserve_rows(batch)?;
            spare.keys.clear();
            spare.indices.clear();
            spare.priorities.clear();
            let mut row = 0;
            for (k, shard) in self.shards.iter().enumerate() {
                let fractions = coordinator.fractions(k);
                if fractions.is_empty() {
                    continue;
                }
                let rows = row..row + fractions.len();
                let mut columns: Vec<_> = spare
                    .columns
                    .iter_mut()
                    .zip(schema.columns())
                    .map(|(c, spec)| c.slice_mut(rows.start * spec.shape..rows.end * spec.shape))
                    .collect();
                let part = &mut scratch.parts[k];
                scratch.totals[k] = shard
                    .sample_at_columns_into(fractions, rng, part, &mut columns)?
                    .total;
                spare.keys.extend_from_slice(&part.keys);
                spare
                    .indices
                    .extend(part.indices.iter().map(|&i| k * capacity + i));
                spare.priorities.extend_from_slice(&part.priorities);
                row = rows.end;
            }
            let replies: Vec<Reply<'_>> = (0..self.shards.len())
                .map(|k| Reply {
                    priorities: if coordinator.fractions(k).is_empty() {
                        &[]
                    } else {
                        &scratch.parts[k].priorities
                    },
                    total: scratch.totals[k],
                })
                .collect();
            coordinator.finish(
                &replies,
                beta,
                config.weight_normalization(),
                &mut spare.probabilities,
                &mut spare.weights,
            )
        })
    }

    /// Set the raw priorities of the items `keys` name, each in the shard its key names.
    /// Every key and priority is checked first (a key of no shard of this buffer is
    /// [`Error::UnknownShard`]; the rest as [`ConcurrentBuffer::update_priorities`] checks
    /// them), so an error changes nothing; stale keys are counted.
    pub fn update_priorities(&self, keys: &[Key], priorities: &[f64]) -> Result<UpdateReport> {
        if keys.len() != priorities.len() {
            return Err(Error::LengthMismatch {
                what: "priorities",
                expected: keys.len(),
                got: priorities.len(),
            });
        }
        let mut routed: Vec<(Vec<Key>, Vec<f64>)> = Vec::new();
        routed.resize_with(self.shards.len(), Default::default);
        for (position, (&key, &priority)) in keys.iter().zip(priorities).enumerate() {
            let k = self.shard_of(key).ok_or(Error::UnknownShard {
                key: key.generation,
                shards: self.shards.len(),
            })?;
            let shard = &self.shards[k];
            shard
                .config()
                .check_update(&[key], &[priority], shard.inserted())
                .map_err(|e| match e {
                    Error::InvalidPriority { value, max, .. } => Error::InvalidPriority {
                        position,
                        value,
                        max,
                    },
                    other => other,
                })?;
            routed[k].0.push(key);
            routed[k].1.push(priority);
        }
        let mut report = UpdateReport::default();
        for (shard, (keys, priorities)) in self.shards.iter().zip(&routed) {
            if !keys.is_empty() {
                let r = shard.update_priorities(keys, priorities)?;
                report.applied += r.applied;
                report.stale += r.stale;
            }
        }
        Ok(report)
    }

    /// Delete the items `keys` name, each in the shard its key names
    /// ([`ConcurrentBuffer::delete`]). Every key is checked first (a key of no shard of this
    /// buffer is [`Error::UnknownShard`]), so an error deletes nothing; stale keys are
    /// counted.
    pub fn delete(&self, keys: &[Key]) -> Result<UpdateReport> {
        let mut routed: Vec<Vec<Key>> = Vec::new();
        routed.resize_with(self.shards.len(), Default::default);
        for &key in keys {
            routed[self.checked_shard_of(key)?].push(key);
        }
        let mut report = UpdateReport::default();
        for (shard, keys) in self.shards.iter().zip(&routed) {
            if !keys.is_empty() {
                let r = shard.delete(keys)?;
                report.applied += r.applied;
                report.stale += r.stale;
            }
        }
        Ok(report)
    }

    /// Overwrite some columns of the items `keys` name, each in the shard its key names
    /// ([`ConcurrentBuffer::write_back`]): `columns` holds one row per key, in the keys'
    /// order. Every key and the columns are checked first (a key of no shard of this buffer
    /// is [`Error::UnknownShard`]; a key its shard never handed out, or columns that do not
    /// fit the schema, as one buffer refuses them), so an error writes nothing; stale keys
    /// are counted. Each run of consecutive keys of one shard is one call of that shard's.
    ///
    /// ```
    /// use kary_replay::shard::ShardedBuffer;
    /// use kary_replay::{Config, DType, LockFreeBuffer, Schema};
    /// let schema = Schema::new().column("goal", DType::F32, 1);
    /// let union: ShardedBuffer<LockFreeBuffer> = ShardedBuffer::new(2, Config::builder(4, schema).build()?)?;
    /// let a = union.insert_batch(0, &[(&[1.0f32, 2.0][..]).into()], None)?;
    /// let b = union.insert_batch(1, &[(&[3.0f32][..]).into()], None)?;
    /// let keys = [a[1], b[0]];
    /// let report = union.write_back(&keys, &[(0, (&[20.0f32, 30.0][..]).into())])?;
    /// assert_eq!((report.applied, report.stale), (2, 0));
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn write_back(
        &self,
        keys: &[Key],
        columns: &[(usize, ColumnSlice<'_>)],
    ) -> Result<UpdateReport> {
        let schema = self.shards[0].config().schema();
        schema.check_some(columns, keys.len())?;
        let mut owners = Vec::new();
        crate::mem::reserve(&mut owners, keys.len())?;
        for &key in keys {
            owners.push(self.checked_shard_of(key)?);
        }
        let specs = schema.columns();
        let mut report = UpdateReport::default();
        let mut part = Vec::with_capacity(columns.len());
        let mut start = 0;
        while start < keys.len() {
            let k = owners[start];
            let end = start + owners[start..].iter().take_while(|&&o| o == k).count();
            part.clear();
            part.extend(columns.iter().map(|&(c, col)| {
                let shape = specs[c].shape;
                (c, col.range(start * shape..end * shape))
            }));
            let r = self.shards[k].write_back(&keys[start..end], &part)?;
            report.applied += r.applied;
            report.stale += r.stale;
            start = end;
        }
        Ok(report)
    }

    /// Retire every item below policy version `version` in every shard and raise each
    /// shard's floor to it ([`ConcurrentBuffer::retire_before`]); the items retired over
    /// all shards. Shards whose items carry no version refuse it (checked on the first
    /// shard before any retires: every shard has one configuration).
    pub fn retire_before(&self, version: i64) -> Result<u64> {
        self.shards[0].config().check_version_column()?;
        let mut retired = 0;
        for shard in &self.shards {
            retired += shard.retire_before(version)?;
        }
        Ok(retired)
    }

    /// Change the priority exponent of every shard at run time
    /// ([`ConcurrentBuffer::set_alpha`]): each shard equals, bit for bit, a fresh shard built
    /// with `alpha` over its raw priorities once its call returns; the shards change one
    /// after another, so a union sample made meanwhile may draw shards under either alpha.
    /// A bad alpha is refused before any shard changes.
    pub fn set_alpha(&self, alpha: f64) -> Result<()> {
        crate::buffer::check_alpha(alpha)?;
        for shard in &self.shards {
            shard.set_alpha(alpha)?;
        }
        Ok(())
    }

    /// Items stored over all shards.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    /// Whether no shard holds an item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots over all shards.
    pub fn capacity(&self) -> usize {
        self.shards.iter().map(|s| s.capacity()).sum()
    }

    /// Generations handed out over all shards.
    pub fn inserted(&self) -> u64 {
        self.shards.iter().map(|s| s.inserted()).sum()
    }

    /// Sum of the stored priorities over all shards.
    pub fn total_priority(&self) -> f64 {
        self.shards.iter().map(|s| s.total_priority()).sum()
    }
}
