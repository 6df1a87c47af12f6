//! [`SequenceConfig`]: the lanes, the windows over them, and what a sample computes.

use crate::buffer::{Config, ConfigBuilder, DefaultPriority, WeightNormalization};
use crate::error::{Error, Result};
use crate::storage::{DType, Schema};

/// What becomes of a window whose episode ends inside it (fewer than `window` steps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Partial {
    /// Keep it, shorter: its mask is false past its length (n-step returns need these: the
    /// last `n - 1` steps of every episode start one).
    #[default]
    Keep,
    /// Never make it sampleable (R2D2's fixed-length sequences).
    Drop,
}

/// What fills the frames of a stack that reach back past the episode's first step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Padding {
    /// The episode's first frame, repeated (what Atari wrappers do at a reset).
    #[default]
    Repeat,
    /// Zeros.
    Zeros,
}

/// The n-step return a sample computes for a window starting at step `s`:
/// `sum_{i<m} gamma^i r_{s+i}` over the `m = min(n, steps left in the episode)` steps from
/// its start (which may reach past the window: a DQN learner's window is 1 step), and the
/// discount to bootstrap with, `gamma^m`, or 0 when the episode terminated within those
/// steps (not when it was truncated). The next observation is then step `s + m`'s.
#[derive(Debug, Clone, PartialEq)]
pub struct NStep {
    /// Steps summed (at least 1).
    pub n: usize,
    /// The discount, in `[0, 1]`.
    pub gamma: f64,
    /// The reward column: a scalar of `f32` or `f64`.
    pub reward: String,
}

/// A validated configuration of a [`SequenceBuffer`](super::SequenceBuffer). Make one with
/// [`SequenceConfig::builder`].
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceConfig {
    pub(crate) lanes: usize,
    pub(crate) steps: usize,
    pub(crate) window: usize,
    pub(crate) period: usize,
    pub(crate) partial: Partial,
    pub(crate) nstep: Option<(NStep, usize)>,
    /// `(column index, frames)` for each stacked column, in schema order.
    pub(crate) stack: Vec<(usize, usize)>,
    pub(crate) padding: Padding,
    /// Column indices whose next observation a sample returns, in schema order.
    pub(crate) next_of: Vec<usize>,
    /// The tree's configuration: one leaf per possible window start.
    pub(crate) tree: Config,
}

impl SequenceConfig {
    /// Start a configuration of `lanes` lanes of `steps_per_lane` steps of `schema`. Defaults:
    /// windows of 1 step every step (an n-step transition), partial windows kept, no n-step
    /// return, no stack, no next observation; the tree's defaults as in [`Config::builder`].
    ///
    /// ```
    /// use kary_replay::sequence::SequenceConfig;
    /// use kary_replay::{DType, Schema};
    /// let schema = Schema::new()
    ///     .column("obs", DType::U8, [84, 84])
    ///     .column("action", DType::I64, [])
    ///     .column("reward", DType::F32, []);
    /// // Ape-X's n = 3 over 4-frame stacks, next observation stored once.
    /// let config = SequenceConfig::builder(4, 1 << 12, schema)
    ///     .nstep(3, 0.99, "reward")
    ///     .stack("obs", 4)
    ///     .next_of("obs")
    ///     .build()?;
    /// assert_eq!(config.window(), 1);
    /// assert_eq!(config.reach(), 3);
    /// assert_eq!(config.capacity(), 4 << 12);
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn builder(lanes: usize, steps_per_lane: usize, schema: Schema) -> SequenceConfigBuilder {
        SequenceConfigBuilder {
            lanes,
            steps: steps_per_lane,
            window: None,
            period: 1,
            partial: Partial::Keep,
            nstep: None,
            stack: Vec::new(),
            padding: Padding::Repeat,
            next_of: Vec::new(),
            // One leaf per window start: the capacity is known at `build`.
            tree: Config::builder(0, schema).default_priority(DefaultPriority::RunningMax),
        }
    }

    /// Lanes (one writer each).
    pub fn lanes(&self) -> usize {
        self.lanes
    }
    /// Steps each lane's ring holds.
    pub fn steps_per_lane(&self) -> usize {
        self.steps
    }
    /// Steps per window.
    pub fn window(&self) -> usize {
        self.window
    }
    /// Steps between window starts.
    pub fn period(&self) -> usize {
        self.period
    }
    /// Possible window starts: the tree's leaves, `lanes x steps_per_lane / period`.
    pub fn capacity(&self) -> usize {
        self.lanes * self.steps / self.period
    }
    /// The schema of a step.
    pub fn schema(&self) -> &Schema {
        self.tree.schema()
    }
    /// The priority exponent and the rest of the tree's configuration.
    pub fn tree(&self) -> &Config {
        &self.tree
    }
    /// What becomes of windows cut short by their episode's end.
    pub fn partial(&self) -> Partial {
        self.partial
    }
    /// How stacks are padded at an episode's start.
    pub fn padding(&self) -> Padding {
        self.padding
    }
    /// The n-step return a sample computes, if any.
    pub fn nstep(&self) -> Option<&NStep> {
        self.nstep.as_ref().map(|(n, _)| n)
    }
    /// The stacked columns and their frames, in schema order.
    pub fn stacks(&self) -> Vec<(&str, usize)> {
        (self.stack.iter())
            .map(|&(c, k)| (self.schema().columns()[c].name.as_str(), k))
            .collect()
    }
    /// The columns whose next observation a sample returns, in schema order.
    pub fn next_of_columns(&self) -> Vec<&str> {
        (self.next_of.iter())
            .map(|&c| self.schema().columns()[c].name.as_str())
            .collect()
    }
    /// Frames stacked for column `c` (1 when it is not stacked).
    pub(crate) fn frames(&self, c: usize) -> usize {
        self.stack
            .iter()
            .find(|&&(s, _)| s == c)
            .map_or(1, |&(_, k)| k)
    }
    /// Steps after a window's start that it reads up to (the next observation's row):
    /// the window, or n when an n-step return reaches further.
    pub fn reach(&self) -> usize {
        self.nstep
            .as_ref()
            .map_or(self.window, |(n, _)| n.n.max(self.window))
    }
    /// The deepest stack (1 without any): how far back a window reads.
    pub(crate) fn look_back(&self) -> usize {
        self.stack.iter().map(|&(_, k)| k).max().unwrap_or(1)
    }
    /// The most windows one lane call completes, what a rate limit admits as one insert:
    /// `ceil(reach / period)` (an episode's end completes every window its last `reach`
    /// steps start; a push completes at most one).
    pub fn max_windows_per_call(&self) -> u64 {
        max_windows_per_call(self.reach(), self.period)
    }
    /// The rate limit in windows, and the largest insert and sample it admits
    /// ([`SequenceConfigBuilder::rate_limit`]); `None` when unlimited.
    pub fn rate_limit(&self) -> Option<(crate::rate::RateLimit, crate::rate::Batches)> {
        self.tree.rate_limit()
    }
    /// Window starts per lane.
    pub(crate) fn starts_per_lane(&self) -> usize {
        self.steps / self.period
    }
}

/// Builder for [`SequenceConfig`]; [`SequenceConfigBuilder::build`] validates everything.
#[derive(Debug, Clone)]
pub struct SequenceConfigBuilder {
    lanes: usize,
    steps: usize,
    window: Option<usize>,
    period: usize,
    partial: Partial,
    nstep: Option<NStep>,
    stack: Vec<(String, usize)>,
    padding: Padding,
    next_of: Vec<String>,
    /// The tree's configuration: its schema and the options below, which are the flat
    /// buffer's own (windows get the running maximum when installed without a priority).
    tree: ConfigBuilder,
}

/// The most steps a window, an n-step return or a stack may span (their counts share one
/// word per window).
pub const MAX_STEPS: usize = (1 << 20) - 1;

fn invalid(reason: String) -> Error {
    Error::InvalidSequence(reason)
}

impl SequenceConfigBuilder {
    /// Steps per window (default 1: one transition, with its n-step return when configured).
    pub fn window(mut self, steps: usize) -> Self {
        self.window = Some(steps);
        self
    }
    /// Steps between window starts (default 1: a window may start at every step). Must
    /// divide `steps_per_lane`.
    pub fn period(mut self, steps: usize) -> Self {
        self.period = steps;
        self
    }
    /// What becomes of windows cut short by their episode's end (default: kept).
    pub fn partial(mut self, partial: Partial) -> Self {
        self.partial = partial;
        self
    }
    /// Compute n-step returns over column `reward` (a scalar `f32` or `f64`) with discount
    /// `gamma` ([`NStep`]).
    pub fn nstep(mut self, n: usize, gamma: f64, reward: &str) -> Self {
        self.nstep = Some(NStep {
            n,
            gamma,
            reward: reward.to_string(),
        });
        self
    }
    /// Hand out column `column` as stacks of the `frames` frames ending at each step,
    /// stored once per step.
    pub fn stack(mut self, column: &str, frames: usize) -> Self {
        self.stack.push((column.to_string(), frames));
        self
    }
    /// How stacks are padded at an episode's start (default: the first frame repeated).
    pub fn padding(mut self, padding: Padding) -> Self {
        self.padding = padding;
        self
    }
    /// Hand out each window's next observation of `column` (the row after its last step, or
    /// the episode's final observation): no next-observation column is stored.
    pub fn next_of(mut self, column: &str) -> Self {
        self.next_of.push(column.to_string());
        self
    }
    /// Tree fanout ([`ConfigBuilder::fanout`]).
    pub fn fanout(self, k: usize) -> Self {
        self.with_tree(|t| t.fanout(k))
    }
    /// Priority exponent ([`ConfigBuilder::alpha`]).
    pub fn alpha(self, alpha: f64) -> Self {
        self.with_tree(|t| t.alpha(alpha))
    }
    /// Importance-weight normalization ([`ConfigBuilder::weight_normalization`]).
    pub fn weight_normalization(self, w: WeightNormalization) -> Self {
        self.with_tree(|t| t.weight_normalization(w))
    }
    /// Starting value of the running maximum that windows installed without a priority get
    /// ([`ConfigBuilder::initial_priority`]).
    pub fn initial_priority(self, p: f64) -> Self {
        self.with_tree(|t| t.initial_priority(p))
    }
    /// The tag in the buffer's keys ([`ConfigBuilder::key_tag`]).
    pub fn key_tag(self, tag: u16) -> Self {
        self.with_tree(|t| t.key_tag(tag))
    }
    /// Hold the ratio of sampled to inserted windows in a range ([`ConfigBuilder::rate_limit`],
    /// counted in windows): a lane's calls wait while the windows they complete would put
    /// the inserts too far ahead, samples while they would put the samples too far ahead.
    /// `batches.insert` must cover the windows one lane call can complete
    /// ([`SequenceConfig::max_windows_per_call`]) and `batches.sample` the largest batch.
    ///
    /// ```
    /// use kary_replay::rate::{Batches, RateLimit};
    /// use kary_replay::sequence::SequenceConfig;
    /// use kary_replay::{DType, Error, Schema};
    /// let schema = Schema::new().column("obs", DType::F32, 4);
    /// let builder = SequenceConfig::builder(2, 64, schema).window(8).period(4);
    /// let limit = RateLimit::sample_to_insert_ratio(2.0, 16, 32.0);
    /// // An episode's end completes up to ceil(8 / 4) = 2 windows.
    /// let refused = builder.clone().rate_limit(limit, Batches { insert: 1, sample: 8 }).build();
    /// assert!(matches!(refused, Err(Error::InvalidSequence(_))));
    /// let config = builder.rate_limit(limit, Batches { insert: 2, sample: 8 }).build()?;
    /// assert_eq!(config.max_windows_per_call(), 2);
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn rate_limit(self, limit: crate::rate::RateLimit, batches: crate::rate::Batches) -> Self {
        self.with_tree(|t| t.rate_limit(limit, batches))
    }
    fn with_tree(mut self, set: impl FnOnce(ConfigBuilder) -> ConfigBuilder) -> Self {
        self.tree = set(self.tree);
        self
    }

    /// Validate. Typed errors: [`Error::InvalidSchema`] for the schema,
    /// [`Error::InvalidSequence`] for the lanes and windows (a period of 0 or one that does
    /// not divide the ring, a window longer than the ring, a stack or reward on a column that
    /// does not exist, ...), and the tree's errors for the rest.
    ///
    /// ```
    /// use kary_replay::sequence::SequenceConfig;
    /// use kary_replay::{DType, Error, Schema};
    /// let schema = Schema::new().column("obs", DType::F32, 4);
    /// let err = SequenceConfig::builder(1, 16, schema.clone()).window(17).build().unwrap_err();
    /// assert!(matches!(err, Error::InvalidSequence(_)));
    /// assert!(SequenceConfig::builder(1, 16, schema.clone()).period(0).build().is_err());
    /// assert!(SequenceConfig::builder(1, 16, schema).stack("frame", 4).build().is_err());
    /// ```
    pub fn build(self) -> Result<SequenceConfig> {
        let schema = self.tree.schema_ref();
        schema.validate()?;
        let column = |name: &str, what: &str| {
            schema
                .columns()
                .iter()
                .position(|c| c.name == name)
                .ok_or_else(|| {
                    invalid(format!(
                        "{what} names column {name:?}, which the schema does not have"
                    ))
                })
        };
        if self.lanes == 0 {
            return Err(invalid("lanes must be at least 1".into()));
        }
        if self.period == 0 {
            return Err(invalid("period must be at least 1".into()));
        }
        if self.steps == 0 || self.steps % self.period != 0 {
            return Err(invalid(format!(
                "steps_per_lane ({}) must be a positive multiple of the period ({})",
                self.steps, self.period
            )));
        }
        let window = self.window.unwrap_or(1);
        if window == 0 || window > MAX_STEPS {
            return Err(invalid(format!(
                "window must be 1 to {MAX_STEPS} steps, got {window}"
            )));
        }
        let nstep = match self.nstep {
            None => None,
            Some(n) => {
                if n.n == 0 || n.n > MAX_STEPS {
                    return Err(invalid(format!(
                        "nstep n must be 1 to {MAX_STEPS}, got {}",
                        n.n
                    )));
                }
                if !(0.0..=1.0).contains(&n.gamma) {
                    return Err(Error::InvalidParameter {
                        name: "gamma",
                        value: n.gamma,
                        reason: "must be in [0, 1]",
                    });
                }
                let c = column(&n.reward, "nstep's reward")?;
                let spec = &schema.columns()[c];
                if spec.shape != 1 || !matches!(spec.dtype, DType::F32 | DType::F64) {
                    return Err(invalid(format!(
                        "the reward column {:?} must be one f32 or f64 per step, not {} x {:?}",
                        spec.name, spec.shape, spec.dtype
                    )));
                }
                Some((n, c))
            }
        };
        let mut stack = Vec::new();
        for (name, frames) in &self.stack {
            let c = column(name, "stack")?;
            if *frames == 0 || *frames > MAX_STEPS {
                return Err(invalid(format!(
                    "stack of {name:?} must have 1 to {MAX_STEPS} frames, got {frames}"
                )));
            }
            if stack.iter().any(|&(s, _)| s == c) {
                return Err(invalid(format!("column {name:?} is stacked twice")));
            }
            stack.push((c, *frames));
        }
        stack.sort_unstable();
        let mut next_of = Vec::new();
        for name in &self.next_of {
            let c = column(name, "next_of")?;
            if next_of.contains(&c) {
                return Err(invalid(format!("next_of names column {name:?} twice")));
            }
            next_of.push(c);
        }
        next_of.sort_unstable();
        let look_back = stack.iter().map(|&(_, k)| k).max().unwrap_or(1);
        // A window reads from `look_back - 1` steps before its start to the row `reach`
        // steps after it (its next observation); that must fit in the ring with the step
        // being written.
        let reach = nstep.as_ref().map_or(window, |(n, _)| n.n.max(window));
        let reads = reach + look_back;
        if reads > self.steps {
            return Err(invalid(format!(
                "a window of {window} steps (n-step reach {reach}) with a stack of {look_back} \
                 frames reads {reads} steps, more than a lane's ring of {} holds",
                self.steps
            )));
        }
        let leaves = self
            .lanes
            .checked_mul(self.steps / self.period)
            .ok_or(Error::InvalidCapacity(usize::MAX))?;
        let tree = self.tree.with_capacity(leaves).build()?;
        let per_call = max_windows_per_call(reach, self.period);
        if let Some((_, batches)) = tree.rate_limit() {
            if batches.insert < per_call {
                return Err(invalid(format!(
                    "a lane call can complete up to {per_call} windows (an episode's end: \
                     reach {reach} over period {}), so the rate limit's insert batch must be \
                     at least {per_call}, not {}",
                    self.period, batches.insert
                )));
            }
        }
        Ok(SequenceConfig {
            lanes: self.lanes,
            steps: self.steps,
            window,
            period: self.period,
            partial: self.partial,
            nstep,
            stack,
            padding: self.padding,
            next_of,
            tree,
        })
    }
}

/// [`SequenceConfig::max_windows_per_call`] of a reach and a period.
fn max_windows_per_call(reach: usize, period: usize) -> u64 {
    reach.div_ceil(period) as u64
}
