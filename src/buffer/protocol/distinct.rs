//! Sampling without replacement, for every sampler: the items a batch has taken so far and
//! the conditional draw among the others (docs/design.md, "Sampling without replacement").
//!
//! A batch is drawn as with replacement (one target per item, a batched descent), then its
//! items are taken in order; an item whose candidate repeats one taken before it is drawn
//! again from the items not taken yet: by rejection (a plain draw, again while it lands on an
//! item taken) while less than half the total is taken, else by mapping a uniform target
//! over the mass left, `total - E`, onto the whole range, stepping over the taken items'
//! spans (each item's span starts at the sum of the leaves before it, `prefix_before`). Both
//! need no change to the tree. Draw `j` then picks item `i` with probability `p_i / total + (E_j / total) x
//! p_i / (total - E_j) = p_i / (total - E_j)`: successive sampling without replacement,
//! exactly, at the cost of a few prefix sums only when a repeat happens.

use crate::buffer::{importance_weights, Draw, WeightNormalization};
use crate::error::{Error, Result};

/// What a sample without replacement has taken so far (kept from sample to sample, no
/// allocation once warm).
#[derive(Debug, Default)]
pub struct Distinct {
    /// The indices taken (and those a run holds before they are taken).
    taken: IndexSet,
    /// The items taken, in order: index and stored priority.
    order: Vec<(usize, f64)>,
    /// `(start, taken mass up to its end)` in the tree's prefix space of the taken items
    /// merged so far, sorted by start; built when the first redraw needs it.
    spans: Vec<(f64, f64)>,
    spans_of: usize,
    /// `(start, length)` of the items taken since the last merge, unsorted.
    fresh: Vec<(f64, f64)>,
    /// Scratch for the merge.
    merged: Vec<(f64, f64)>,
    /// The stored priorities taken.
    mass: f64,
    /// Scratch for the weights' priorities.
    effective: Vec<f64>,
}

impl Distinct {
    /// Ready for a batch of `batch`: room for each vector (fallibly), nothing taken.
    pub(crate) fn start(&mut self, batch: usize) -> Result<()> {
        self.taken.reset(batch)?;
        crate::mem::reserve(&mut self.order, batch)?;
        crate::mem::reserve(&mut self.spans, batch)?;
        crate::mem::reserve(&mut self.fresh, batch)?;
        crate::mem::reserve(&mut self.merged, batch)?;
        crate::mem::reserve(&mut self.effective, batch)?;
        self.order.clear();
        self.spans.clear();
        self.fresh.clear();
        self.spans_of = 0;
        self.mass = 0.0;
        Ok(())
    }

    /// Whether `index` was taken by this batch (or is held for it).
    #[inline]
    pub(crate) fn contains(&self, index: usize) -> bool {
        self.taken.contains(index)
    }

    /// Hold `index` for the batch before it is taken (a run of joined candidates, whose
    /// rows are copied together): a later candidate of the run that repeats it is drawn
    /// again. [`Self::take`] or [`Self::release`] follows.
    #[inline]
    pub(crate) fn hold(&mut self, index: usize) {
        self.taken.insert(index);
    }

    /// Let go of a held `index` that was not taken (its copy was torn).
    #[inline]
    pub(crate) fn release(&mut self, index: usize) {
        self.taken.remove(index);
    }

    /// Take `index` (held or not), of stored priority `priority`, as the batch's next item;
    /// returns its conditional probability `priority / (total - E)`, `E` what was taken
    /// before.
    #[inline]
    pub(crate) fn take(&mut self, index: usize, priority: f64, total: f64) -> f64 {
        let left = total - self.mass;
        self.taken.insert(index);
        self.order.push((index, priority));
        self.mass += priority;
        if left > 0.0 {
            (priority / left).min(1.0)
        } else {
            1.0
        }
    }

    /// A target in `[0, total)` for a draw among the items not taken, from a uniform `u` in
    /// `[0, 1)`: while less than half the total is taken, `u x total` (the caller draws again
    /// if it lands on an item taken); then `u x (total - E)` with every taken item's span
    /// stepped over. `prefix(i)` is the sum of the leaves before leaf `i`. [`Error::InvalidParameter`] (`batch`) when no
    /// mass is left: the batch asks for more items than hold a positive priority.
    pub(crate) fn target(
        &mut self,
        u: f64,
        total: f64,
        batch: usize,
        prefix: impl Fn(usize) -> f64,
    ) -> Result<f64> {
        let left = total - self.mass;
        // Also NaN: nothing to draw from.
        if left.partial_cmp(&(total * 1e-12)) != Some(std::cmp::Ordering::Greater) {
            return Err(too_few(batch));
        }
        if self.mass < total * REJECT_BELOW {
            // Most of the mass is left: a plain draw, which the caller draws again while it
            // lands on an item taken (rejection: the same law, in fewer than two descents on
            // average, and no prefix sums).
            return Ok(u * total);
        }
        // The spans of the items taken since the last redraw, unsorted; merged into the
        // sorted ones once there are more than a few.
        for &(index, priority) in &self.order[self.spans_of..] {
            self.fresh.push((prefix(index), priority));
        }
        self.spans_of = self.order.len();
        if self.fresh.len() > FRESH {
            self.merge();
        }
        // The target `x` of the whole range is the least fixed point of
        // `x = y + S(x)`, `S(x)` the length of the taken spans that start at or before `x`:
        // from `x = y` each step adds the spans passed, and stops once no new one is.
        let y = u * left;
        let mut x = y;
        for _ in 0..=self.spans.len() + self.fresh.len() {
            let next = y + self.stepped_over(x);
            if next == x {
                break;
            }
            x = next;
        }
        Ok(x)
    }

    /// The length of the taken spans that start at or before `x`: a binary search in the
    /// sorted ones (`spans` keeps the mass up to each one's end), a look at the fresh ones.
    #[inline]
    fn stepped_over(&self, x: f64) -> f64 {
        let sorted = match self.spans.partition_point(|&(start, _)| start <= x) {
            0 => 0.0,
            k => self.spans[k - 1].1,
        };
        let fresh: f64 = self
            .fresh
            .iter()
            .filter(|&&(start, _)| start <= x)
            .map(|&(_, length)| length)
            .sum();
        sorted + fresh
    }

    /// Merge the fresh spans into the sorted ones (`spans`: `(start, mass up to its end)`).
    fn merge(&mut self) {
        self.fresh.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        self.merged.clear();
        let mut end = 0.0;
        let (mut old, mut fresh) = (0, 0);
        let mut before = 0.0;
        while old < self.spans.len() || fresh < self.fresh.len() {
            let take_old = fresh == self.fresh.len()
                || (old < self.spans.len() && self.spans[old].0 <= self.fresh[fresh].0);
            let (start, length) = if take_old {
                let (start, through) = self.spans[old];
                old += 1;
                let length = through - before;
                before = through;
                (start, length)
            } else {
                fresh += 1;
                self.fresh[fresh - 1]
            };
            end += length;
            self.merged.push((start, end));
        }
        std::mem::swap(&mut self.spans, &mut self.merged);
        self.fresh.clear();
    }

    /// The batch's importance weights from its conditional `probabilities`: those of
    /// [`importance_weights`] for the priorities `probabilities[j] x total` (each at least
    /// the item's own, so a weight referred to `min_positive` stays in (0, 1]).
    pub(crate) fn weights(
        &mut self,
        norm: WeightNormalization,
        beta: f64,
        min_positive: f64,
        probabilities: &[f64],
        total: f64,
        weights: &mut Vec<f64>,
    ) {
        self.effective.clear();
        self.effective
            .extend(probabilities.iter().map(|&p| p * total));
        importance_weights(norm, beta, min_positive, &self.effective, weights);
    }
}

/// Below this fraction of the total taken, a redraw is a plain draw that the caller rejects
/// while it lands on an item taken (at most 2 descents expected); above it, the mass left is
/// mapped onto the range past the taken spans.
const REJECT_BELOW: f64 = 0.5;

/// The per-item vectors every sampler's batch fills the same way (the flat
/// [`SampleBatch`](crate::SampleBatch) and the sequence buffer's windows).
pub(crate) trait DrawnBatch {
    /// Empty the vectors a draw fills: keys, indices, priorities, probabilities.
    fn clear_drawn(&mut self);
    /// The priorities drawn, and the probabilities and weights to fill from them.
    fn weight_parts(&mut self) -> (&[f64], &mut Vec<f64>, &mut Vec<f64>);
}

/// [`DrawnBatch`] for a batch type whose fields `keys`, `indices`, `priorities`,
/// `probabilities` and `weights` are its per-item vectors.
macro_rules! drawn_batch {
    ($batch:ty) => {
        impl $crate::buffer::protocol::DrawnBatch for $batch {
            fn clear_drawn(&mut self) {
                self.keys.clear();
                self.indices.clear();
                self.priorities.clear();
                self.probabilities.clear();
            }

            fn weight_parts(&mut self) -> (&[f64], &mut Vec<f64>, &mut Vec<f64>) {
                (&self.priorities, &mut self.probabilities, &mut self.weights)
            }
        }
    };
}
pub(crate) use drawn_batch;

/// A batch's `probabilities` and `weights` once its `priorities` are drawn (one per item):
/// uniform, `1 / total` (`total` the items' count) and weights 1; without replacement, the
/// conditional probabilities the sampler left in `probabilities` and their weights
/// ([`Distinct::weights`]); else `p / total` and the importance weights. The weights'
/// reference is the smaller of `min_positive` and the batch's smallest priority (under
/// concurrent updates a sampled priority may be below the minimum read at the start: taking
/// the smaller keeps every weight in (0, 1]). Every sampler's last step.
pub(crate) fn batch_weights(
    draw: Draw<'_>,
    norm: WeightNormalization,
    (total, min_positive): (f64, f64),
    out: &mut impl DrawnBatch,
    distinct: &mut Distinct,
) {
    let (priorities, probabilities, weights) = out.weight_parts();
    let (batch, beta) = (priorities.len(), draw.beta());
    let reference = min_positive.min(priorities.iter().copied().fold(f64::INFINITY, f64::min));
    if draw.ordered().is_some() {
        // A selector, not a distribution: each item is the one the order names.
        probabilities.clear();
        probabilities.resize(batch, 1.0);
        weights.clear();
        weights.resize(batch, 1.0);
    } else if draw.uniform() || draw.shuffled() {
        // Each item of the `total` stored equally likely (shuffled: at each draw of a pass
        // that began over all of them).
        probabilities.clear();
        probabilities.resize(batch, 1.0 / total);
        weights.clear();
        weights.resize(batch, 1.0);
    } else if draw.without_replacement() {
        distinct.weights(norm, beta, reference, probabilities, total, weights);
    } else {
        probabilities.clear();
        probabilities.extend(priorities.iter().map(|&p| p / total));
        importance_weights(norm, beta, reference, priorities, weights);
    }
}

/// The unsorted spans a redraw looks through before they are merged into the sorted ones.
const FRESH: usize = 16;

/// A set of slot indices for one batch: open addressing with linear probing in a table of at
/// least twice the batch, emptied in O(1) by a new stamp (a table kept from batch to batch
/// is never cleared but when the stamp wraps).
#[derive(Debug, Default)]
struct IndexSet {
    /// `(index, stamp)`; an entry is in the set when its stamp is the current one.
    table: Vec<(usize, u32)>,
    stamp: u32,
}

/// A removed entry: probes go on past it, nothing matches it.
const GONE: usize = usize::MAX;

impl IndexSet {
    /// Empty, with room for `batch` indices (fallibly).
    fn reset(&mut self, batch: usize) -> Result<()> {
        let want = batch
            .checked_mul(2)
            .and_then(usize::checked_next_power_of_two)
            .ok_or(Error::SizeOverflow {
                what: "a batch without replacement",
            })?
            .max(16);
        if self.table.len() < want {
            crate::mem::reserve(&mut self.table, want)?;
            self.table.clear();
            self.table.resize(want, (0, 0));
            self.stamp = 0;
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.table.fill((0, 0));
            self.stamp = 1;
        }
        Ok(())
    }

    #[inline]
    fn first(&self, index: usize) -> usize {
        // Fibonacci hashing: the top bits of the product.
        let h = (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        h as usize & (self.table.len() - 1)
    }

    /// Where `index` is, if it is in the set. Probes at most the whole table (an entry
    /// removed keeps its stamp, so a batch of many holds and releases may leave no free
    /// entry to stop at).
    #[inline]
    fn find(&self, index: usize) -> Option<usize> {
        let mask = self.table.len() - 1;
        let mut at = self.first(index);
        for _ in 0..self.table.len() {
            let (i, stamp) = self.table[at];
            if stamp != self.stamp {
                return None;
            }
            if i == index {
                return Some(at);
            }
            at = (at + 1) & mask;
        }
        None
    }

    #[inline]
    fn contains(&self, index: usize) -> bool {
        self.find(index).is_some()
    }

    /// Add `index` (nothing if it is in): into the first free or removed entry of its
    /// probe sequence. There is one: at most `batch` indices are in at once, in a table of
    /// at least twice as many entries.
    #[inline]
    fn insert(&mut self, index: usize) {
        if self.contains(index) {
            return;
        }
        let mask = self.table.len() - 1;
        let mut at = self.first(index);
        for _ in 0..self.table.len() {
            let (i, stamp) = self.table[at];
            if stamp != self.stamp || i == GONE {
                self.table[at] = (index, self.stamp);
                return;
            }
            at = (at + 1) & mask;
        }
        unreachable!("a batch's index set holds more than half its table");
    }

    #[inline]
    fn remove(&mut self, index: usize) {
        if let Some(at) = self.find(index) {
            self.table[at].0 = GONE;
        }
    }
}

/// The error of a batch without replacement larger than the items it can draw from.
pub(crate) fn too_few(batch: usize) -> Error {
    Error::InvalidParameter {
        name: "batch",
        value: batch as f64,
        reason:
            "a sample without replacement draws at most as many items as hold a positive priority",
    }
}
