//! Sampling without replacement, for every sampler: the items a batch has taken so far and
//! the conditional draw among the others (docs/design.md, "Sampling without replacement").
//!
//! A batch is drawn as with replacement (one target per item, a batched descent), then its
//! items are taken in order; an item whose candidate repeats one taken before it is drawn
//! again from the items not taken yet. That redraw maps a uniform target over the mass left,
//! `total - E`, onto the whole range by stepping over the taken items' spans (each item's
//! span starts at the sum of the leaves before it, `prefix_before`), so it needs no change to
//! the tree. Draw `j` then picks item `i` with probability `p_i / total + (E_j / total) x
//! p_i / (total - E_j) = p_i / (total - E_j)`: successive sampling without replacement,
//! exactly, at the cost of a few prefix sums only when a repeat happens.

use crate::buffer::{importance_weights, WeightNormalization};
use crate::error::{Error, Result};

/// What a sample without replacement has taken so far (kept from sample to sample, no
/// allocation once warm).
#[derive(Debug, Default)]
pub struct Distinct {
    /// The indices taken, sorted.
    taken: Vec<usize>,
    /// The items taken, in order: index and stored priority.
    order: Vec<(usize, f64)>,
    /// `(start, length)` in the tree's prefix space of `order[..spans_of]`, sorted by start;
    /// built when the first redraw needs it.
    spans: Vec<(f64, f64)>,
    spans_of: usize,
    /// The stored priorities taken.
    mass: f64,
    /// Scratch for the weights' priorities.
    effective: Vec<f64>,
}

impl Distinct {
    /// Ready for a batch of `batch`: room for each vector (fallibly), nothing taken.
    pub(crate) fn start(&mut self, batch: usize) -> Result<()> {
        crate::mem::reserve(&mut self.taken, batch)?;
        crate::mem::reserve(&mut self.order, batch)?;
        crate::mem::reserve(&mut self.spans, batch)?;
        crate::mem::reserve(&mut self.effective, batch)?;
        self.taken.clear();
        self.order.clear();
        self.spans.clear();
        self.spans_of = 0;
        self.mass = 0.0;
        Ok(())
    }

    /// Whether `index` was taken by this batch.
    #[inline]
    pub(crate) fn contains(&self, index: usize) -> bool {
        self.taken.binary_search(&index).is_ok()
    }

    /// Take `index`, of stored priority `priority`, as the batch's next item; returns its
    /// conditional probability `priority / (total - E)`, `E` what was taken before.
    pub(crate) fn take(&mut self, index: usize, priority: f64, total: f64) -> f64 {
        let left = total - self.mass;
        let at = self.taken.partition_point(|&i| i < index);
        self.taken.insert(at, index);
        self.order.push((index, priority));
        self.mass += priority;
        if left > 0.0 {
            (priority / left).min(1.0)
        } else {
            1.0
        }
    }

    /// A target in `[0, total)` for a draw among the items not taken, from a uniform `u` in
    /// `[0, 1)`: `u x (total - E)` with every taken item's span stepped over. `prefix(i)` is
    /// the sum of the leaves before leaf `i`. [`Error::InvalidParameter`] (`batch`) when no
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
        for &(index, priority) in &self.order[self.spans_of..] {
            let start = prefix(index);
            let at = self.spans.partition_point(|&(s, _)| s < start);
            self.spans.insert(at, (start, priority));
        }
        self.spans_of = self.order.len();
        let mut x = u * left;
        for &(start, length) in &self.spans {
            if start > x {
                break;
            }
            x += length;
        }
        Ok(x)
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

/// The error of a batch without replacement larger than the items it can draw from.
pub(crate) fn too_few(batch: usize) -> Error {
    Error::InvalidParameter {
        name: "batch",
        value: batch as f64,
        reason:
            "a sample without replacement draws at most as many items as hold a positive priority",
    }
}
