//! The device tree: the K-ary sum tree and its positive-minimum companion as one tensor per
//! level, with the batch descent and the touched-parents recompute (see the module doc of
//! [`crate::gpu`]).

use tch::{Device, Kind, Tensor};

/// The K-ary sum tree and minimum tree as per-level tensors.
pub(super) struct LevelTree {
    pub(super) k: i64,
    pub(super) kind: Kind,
    /// `sums[0]` is the root (one node), `sums[depth]` the leaves (padded to a multiple of K).
    pub(super) sums: Vec<Tensor>,
    /// Positive minima, `+inf` for subtrees without a positive priority.
    pub(super) mins: Vec<Tensor>,
}

impl LevelTree {
    /// [`crate::Error::Allocation`] where the device cannot hold the levels.
    pub(super) fn new(
        capacity: usize,
        k: usize,
        kind: Kind,
        device: Device,
    ) -> crate::Result<LevelTree> {
        let k = k as i64;
        // Widths bottom-up: leaves, then ceil(width / K) per level, up to one root.
        let mut widths = vec![capacity as i64];
        while *widths.last().unwrap() > 1 {
            let w = *widths.last().unwrap();
            widths.push((w + k - 1) / k);
        }
        if widths.len() == 1 {
            // Capacity 1: a root over one leaf group.
            widths.push(1);
        }
        // widths[0] == 1: the root. Level j >= 1 holds K children for each node of level
        // j - 1 (padding included), so its size is widths[j - 1] * K.
        widths.reverse();
        let sizes: Vec<i64> = (0..widths.len())
            .map(|j| if j == 0 { 1 } else { widths[j - 1] * k })
            .collect();
        let level = |n: i64, value: f64| super::filled(&[n as usize], value, kind, device);
        Ok(LevelTree {
            k,
            kind,
            sums: sizes
                .iter()
                .map(|&n| level(n, 0.0))
                .collect::<crate::Result<_>>()?,
            mins: sizes
                .iter()
                .map(|&n| level(n, f64::INFINITY))
                .collect::<crate::Result<_>>()?,
        })
    }

    pub(super) fn depth(&self) -> usize {
        self.sums.len() - 1
    }

    pub(super) fn leaves(&self) -> &Tensor {
        &self.sums[self.depth()]
    }

    /// Write `values` at leaf `slots` and recompute the touched parents level by level.
    /// Entries with the same slot must carry the same value (callers make them so).
    pub(super) fn set_leaves(&mut self, slots: &Tensor, values: &Tensor) {
        let d = self.depth();
        let values = values.to_kind(self.kind);
        let _ = self.sums[d].index_copy_(0, slots, &values);
        let positive = values.gt(0.0);
        let _ = self.mins[d].index_copy_(
            0,
            slots,
            &values.where_scalarother(&positive, f64::INFINITY),
        );
        let b = slots.size()[0];
        let mut idx = slots.shallow_clone();
        for j in (0..d).rev() {
            // A level with no more nodes than the batch is cheaper to recompute whole than
            // to gather B rows of it (and most of it is touched anyway): the upper levels.
            let nodes = self.sums[j + 1].size()[0] / self.k;
            if nodes <= b {
                self.recompute_level(j);
                continue;
            }
            let parents = idx.floor_divide_scalar(self.k);
            let rows = self.sums[j + 1]
                .view([-1, self.k])
                .index_select(0, &parents);
            let sums = rows.sum_dim_intlist(1, false, self.kind);
            let _ = self.sums[j].index_copy_(0, &parents, &sums);
            let min_rows = self.mins[j + 1]
                .view([-1, self.k])
                .index_select(0, &parents);
            let _ = self.mins[j].index_copy_(0, &parents, &min_rows.amin(1, false));
            idx = parents;
        }
    }

    /// Recompute every level from the leaves (all nodes, not only touched ones).
    pub(super) fn rebuild(&mut self) {
        for j in (0..self.depth()).rev() {
            self.recompute_level(j);
        }
    }

    /// Recompute all of level `j` from level `j + 1`.
    pub(super) fn recompute_level(&mut self, j: usize) {
        let sums = self.sums[j + 1]
            .view([-1, self.k])
            .sum_dim_intlist(1, false, self.kind);
        let mins = self.mins[j + 1].view([-1, self.k]).amin(1, false);
        let n = sums.size()[0];
        let mut stored_sums = self.sums[j].narrow(0, 0, n);
        stored_sums.copy_(&sums);
        let mut stored_mins = self.mins[j].narrow(0, 0, n);
        stored_mins.copy_(&mins);
    }

    /// Leaf indices for prefix targets (`[B]`, node precision, already in `[0, total)`).
    pub(super) fn descend(&self, targets: &Tensor) -> Tensor {
        let device = targets.device();
        let b = targets.size()[0];
        let mut x = targets.shallow_clone();
        let mut node = Tensor::zeros([b], (Kind::Int64, device));
        for j in 1..=self.depth() {
            // The K children of each current node: [B, K].
            let rows = self.sums[j].view([-1, self.k]).index_select(0, &node);
            // A child is positive when its subtree holds a positive leaf: the exact minimum
            // companion says so (as on the CPU tree), not the sum, which a stale or drifted
            // parent can make positive over an all-zero group. Every node chosen so has a
            // positive child below it, so the descent never ends on a zero or padding leaf.
            let positive = self.mins[j]
                .view([-1, self.k])
                .index_select(0, &node)
                .lt(f64::INFINITY);
            let csum = rows.cumsum(1, self.kind);
            // Keep x inside this node's range, below its total (float drift between levels).
            let row_total = csum.narrow(1, self.k - 1, 1);
            let below = row_total.nextafter(&Tensor::zeros_like(&row_total));
            let xs = x.unsqueeze(1).minimum(&below).clamp_min(0.0);
            // c = positive children whose whole prefix lies at or below x; the chosen child
            // is the (c + 1)-th positive one, so it is always positive (also where a GPU
            // scan's rounding makes the prefixes non-monotone).
            let passed = csum.le_tensor(&xs).logical_and(&positive);
            let npos = positive.sum_dim_intlist(1, true, Kind::Int64);
            let c = passed
                .sum_dim_intlist(1, true, Kind::Int64)
                .minimum(&(&npos - 1))
                .clamp_min(0);
            // Positives among children 0..=i; `values.searchsorted(sorted)`: the receiver
            // holds the values.
            let rank = positive.cumsum(1, Kind::Int64);
            let child = (&c + 1)
                .searchsorted(&rank, false, false, "left", None::<Tensor>)
                .clamp_max(self.k - 1);
            // Step down: subtract the prefix before the chosen child.
            let prev = (&child - 1).clamp_min(0);
            let prefix = csum
                .gather(1, &prev, false)
                .where_scalarother(&child.gt(0), 0.0);
            x = (xs - prefix).squeeze_dim(1).clamp_min(0.0);
            node = node * self.k + child.squeeze_dim(1);
        }
        node
    }

    /// How far each stored parent is from its children (sum and minimum), on the host.
    pub(super) fn check(&self) -> crate::Consistency {
        let mut c = crate::Consistency::default();
        for j in 0..self.depth() {
            let recomputed = self.sums[j + 1]
                .view([-1, self.k])
                .sum_dim_intlist(1, false, self.kind);
            let stored = &self.sums[j].narrow(0, 0, recomputed.size()[0]);
            let diff = (stored - &recomputed).abs().max().double_value(&[]);
            let scale = recomputed.abs().clamp_min(f64::MIN_POSITIVE);
            let rel = ((stored - &recomputed).abs() / scale)
                .max()
                .double_value(&[]);
            c.max_abs_error = c.max_abs_error.max(diff);
            c.max_rel_error = c.max_rel_error.max(rel);
            if diff != 0.0 {
                c.exact = false;
            }
            let mins = self.mins[j + 1].view([-1, self.k]).amin(1, false);
            let stored_mins = self.mins[j].narrow(0, 0, mins.size()[0]);
            if !bool::try_from(mins.eq_tensor(&stored_mins).all()).unwrap_or(false) {
                c.extrema_exact = false;
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::LevelTree;
    use tch::{Device, Kind, Tensor};

    /// Capacity 5, K = 4 (leaves 5..8 are padding), leaves [1, 1, 1, 1, 0],
    /// and the parent of the all-zero group {4, padding} stale at 1 (a drifted or
    /// rescaled-behind-its-back tree). Targets in [4, 5) reach that parent. Deciding
    /// positivity by the sums chose it and then, finding no positive child, clamped to child
    /// K - 1: padding leaf 7. With the minimum companion the parent is not positive, and
    /// every leaf returned is a real one with a positive priority.
    #[test]
    fn a_group_without_a_positive_child_never_yields_padding() {
        let mut tree = LevelTree::new(5, 4, Kind::Double, Device::Cpu).unwrap();
        let slots = Tensor::from_slice(&[0i64, 1, 2, 3, 4]);
        let values = Tensor::from_slice(&[1.0f64, 1.0, 1.0, 1.0, 0.0]);
        tree.set_leaves(&slots, &values);
        assert_eq!(tree.depth(), 2);
        let _ = tree.sums[1].get(1).fill_(1.0);
        let _ = tree.sums[0].get(0).fill_(5.0);
        let targets = Tensor::from_slice(&[4.0f64, 4.25, 4.5, 4.999, 3.5, 0.0]);
        let leaves = Vec::<i64>::try_from(&tree.descend(&targets)).unwrap();
        for (t, leaf) in [4.0, 4.25, 4.5, 4.999, 3.5, 0.0].iter().zip(&leaves) {
            assert!(
                (0..4).contains(leaf),
                "target {t} descended to leaf {leaf}: padding, out of range, or a zero priority"
            );
        }
    }
}
