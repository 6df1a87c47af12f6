//! The sequential K-ary sum tree, monomorphized over the fanout `K`.
//!
//! Three arrays share one [`Layout`]:
//! - `sums`: every level, leaves included; an internal node holds the sum of its K children,
//!   maintained by adding deltas (cheap: one add per level) and made bit-exact by
//!   [`KaryTree::rebuild`];
//! - `mins`: internal levels only; a node holds the smallest *nonzero* leaf below it, or
//!   `+inf` when every leaf below it is 0 ("empty"). A minimum involves no rounding, so this
//!   array is always exact;
//! - `maxs` (optional): internal levels only; the largest leaf below each node.
//!
//! Two invariants make the descent robust against float drift in `sums`:
//! 1. a node whose subtree is empty holds exactly `0.0` in `sums` (set() writes 0 rather than
//!    adding a delta when the exact `mins` says the subtree became empty), so a child with a
//!    positive sum always has a positive leaf below it;
//! 2. when the branch-free group search lands on a child that is not positive (x beyond the
//!    group's rounded sum, or a drifted internal node), a cold path picks the nearest child
//!    that `mins` (or, at the leaves, the leaf value) says is nonempty.
//!
//! Together: a descent that starts in a nonempty tree ends on a positive leaf below `len`.

use super::layout::{AlignedBuf, Layout, LINE};
use super::prefetch_line;

const EMPTY_MIN: f64 = f64::INFINITY;

/// Leaves sampled per chunk of the batched descent (state kept on the stack).
const CHUNK: usize = 256;

#[derive(Debug, Clone)]
pub(crate) struct KaryTree<const K: usize> {
    len: usize,
    layout: Layout,
    sums: AlignedBuf,
    mins: AlignedBuf,
    maxs: Option<AlignedBuf>,
}

/// Block length of the in-group prefix: the group is split into blocks whose prefixes are
/// computed independently, then carried across blocks. The dependency chain is
/// `block + K/block` adds instead of `K`.
const fn prefix_block(k: usize) -> usize {
    match k {
        0..=8 => k,
        16 => 4,
        _ => 8,
    }
}

/// Inclusive prefix over the group, counted branch-free: returns the number of children
/// whose inclusive prefix sum is `<= x` (the chosen child) and the prefix sum before it.
///
/// The prefix is blocked (see [`prefix_block`]) but still monotone, and a zero child's
/// prefix equals its predecessor's exactly (each block's carry is the previous block's
/// last prefix), so zero children are skipped as with a serial prefix.
#[inline(always)]
fn count_le<const K: usize>(group: &[f64; K], x: f64) -> (usize, f64) {
    let block = prefix_block(K);
    let mut prefix = [0.0f64; K];
    for (dst, src) in prefix
        .chunks_exact_mut(block)
        .zip(group.chunks_exact(block))
    {
        let mut acc = 0.0;
        for (d, &c) in dst.iter_mut().zip(src) {
            acc += c;
            *d = acc;
        }
    }
    let mut carry = 0.0;
    for dst in prefix.chunks_exact_mut(block) {
        for d in dst.iter_mut() {
            *d += carry;
        }
        carry = dst[block - 1];
    }
    let mut count = 0usize;
    for &p in &prefix {
        count += (p <= x) as usize;
    }
    let before = if count == 0 { 0.0 } else { prefix[count - 1] };
    (count, before)
}

/// Smallest positive value of the group, `+inf` when none is positive.
#[inline(always)]
fn group_min_positive(group: &[f64]) -> f64 {
    let mut m = EMPTY_MIN;
    for &v in group {
        let v = if v > 0.0 { v } else { EMPTY_MIN };
        m = if v < m { v } else { m };
    }
    m
}

#[inline(always)]
fn group_min(group: &[f64]) -> f64 {
    group
        .iter()
        .fold(EMPTY_MIN, |m, &v| if v < m { v } else { m })
}

#[inline(always)]
fn group_max(group: &[f64]) -> f64 {
    group.iter().fold(0.0, |m, &v| if v > m { v } else { m })
}

/// Prefetch every line of the group of K nodes that starts at `group`.
#[inline(always)]
fn prefetch_group<const K: usize>(group: *const f64) {
    let mut line = 0;
    while line < K {
        prefetch_line(group.wrapping_add(line));
        line += LINE;
    }
}

impl<const K: usize> KaryTree<K> {
    /// A tree of `len` zero leaves; `None` when the allocation fails.
    pub(crate) fn try_new(len: usize, track_max: bool) -> Option<Self> {
        let layout = Layout::new(len, K);
        let sums = AlignedBuf::try_new(layout.total(), 0.0)?;
        let mins = AlignedBuf::try_new(layout.internal_total(), EMPTY_MIN)?;
        let maxs = if track_max {
            Some(AlignedBuf::try_new(layout.internal_total(), 0.0)?)
        } else {
            None
        };
        Some(KaryTree {
            len,
            layout,
            sums,
            mins,
            maxs,
        })
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn leaf_level(&self) -> usize {
        self.layout.depth() - 1
    }

    #[inline]
    fn group(&self, level: usize, node: usize) -> &[f64; K] {
        let base = self.layout.offset(level) + node * K;
        self.sums.as_slice()[base..base + K].try_into().unwrap()
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> f64 {
        self.sums.as_slice()[self.layout.offset(self.leaf_level()) + i]
    }

    /// Sum of the root group, added in fixed order.
    #[inline]
    pub(crate) fn total(&self) -> f64 {
        self.group(0, 0).iter().sum()
    }

    /// Whether any leaf is positive (exact: read from `mins`, or the leaves themselves).
    #[inline]
    pub(crate) fn has_positive(&self) -> bool {
        self.min_positive().is_some()
    }

    pub(crate) fn min_positive(&self) -> Option<f64> {
        let m = if self.layout.depth() == 1 {
            group_min_positive(self.group(0, 0))
        } else {
            group_min(&self.mins.as_slice()[..K])
        };
        (m < EMPTY_MIN).then_some(m)
    }

    /// Largest leaf, if the tree tracks it.
    pub(crate) fn max_leaf(&self) -> Option<f64> {
        let maxs = self.maxs.as_ref()?;
        Some(if self.layout.depth() == 1 {
            group_max(self.group(0, 0))
        } else {
            group_max(&maxs.as_slice()[..K])
        })
    }

    /// Set leaf `i` to `p` (validated by the caller: finite, >= 0, `i < len`).
    ///
    /// Sums move by deltas. The companion extrema move incrementally: a parent's minimum
    /// changes to the child's new value when that is smaller, is rescanned from the K
    /// children only when the child that held the minimum rose, and otherwise stays; the
    /// walk stops once nothing changes.
    #[inline]
    pub(crate) fn set(&mut self, i: usize, p: f64) {
        let p = p + 0.0; // -0.0 -> 0.0
        let depth = self.layout.depth();
        let leaf_off = self.layout.offset(depth - 1);
        let old = self.sums.as_slice()[leaf_off + i];
        if old.to_bits() == p.to_bits() {
            return;
        }
        self.sums.as_mut_slice()[leaf_off + i] = p;
        let positive = |v: f64| if v > 0.0 { v } else { EMPTY_MIN };
        let mut delta = p - old;
        // What the parent sees of this child, before and after.
        let (mut min_old, mut min_new) = (positive(old), positive(p));
        let (mut max_old, mut max_new) = (old, p);
        let mut min_live = min_old != min_new;
        let mut max_live = self.maxs.is_some() && max_old != max_new;
        let mut node = i;
        for level in (0..depth - 1).rev() {
            let parent = node / K;
            let slot = self.layout.offset(level) + parent;
            let child_group = self.layout.offset(level + 1) + parent * K;
            let children_are_leaves = level + 2 == depth;
            let mut empty = false;
            if min_live {
                let m = self.mins.as_slice()[slot];
                let new_m = if min_new < m {
                    min_new
                } else if min_old == m {
                    let sums = self.sums.as_slice();
                    if children_are_leaves {
                        group_min_positive(&sums[child_group..child_group + K])
                    } else {
                        // `mins` shares the internal levels' offsets with `sums`.
                        group_min(&self.mins.as_slice()[child_group..child_group + K])
                    }
                } else {
                    m
                };
                if new_m == m {
                    // Emptiness here and above is unchanged; only the sums move on.
                    min_live = false;
                } else {
                    self.mins.as_mut_slice()[slot] = new_m;
                    (min_old, min_new) = (m, new_m);
                }
                empty = new_m == EMPTY_MIN;
            }
            if max_live {
                let sums = self.sums.as_slice();
                let maxs = self.maxs.as_mut().unwrap();
                let m = maxs.as_slice()[slot];
                let new_m = if max_new > m {
                    max_new
                } else if max_old == m {
                    if children_are_leaves {
                        group_max(&sums[child_group..child_group + K])
                    } else {
                        group_max(&maxs.as_slice()[child_group..child_group + K])
                    }
                } else {
                    m
                };
                if new_m == m {
                    max_live = false;
                } else {
                    maxs.as_mut_slice()[slot] = new_m;
                    (max_old, max_new) = (m, new_m);
                }
            }
            let sums = self.sums.as_mut_slice();
            if empty {
                // Invariant 1: an empty subtree sums to exactly 0, whatever the drift; the
                // ancestors lose exactly what this node held.
                delta = -sums[slot];
                sums[slot] = 0.0;
            } else {
                sums[slot] += delta;
            }
            node = parent;
            if !min_live && !max_live {
                // Only the sums above move now: one add per level, no chain between levels.
                for level in (0..level).rev() {
                    node /= K;
                    sums[self.layout.offset(level) + node] += delta;
                }
                break;
            }
        }
    }

    /// Is child `j` of group `node` at `level` nonempty? Exact (cold path only).
    fn nonempty(&self, level: usize, node: usize, j: usize) -> bool {
        if level == self.leaf_level() {
            self.group(level, node)[j] > 0.0
        } else {
            self.mins.as_slice()[self.layout.offset(level) + node * K + j] < EMPTY_MIN
        }
    }

    /// One step of the descent: in the group of `node` at `level`, the child that holds `x`.
    /// Returns the child's node index at `level` and `x` relative to that child.
    /// `level_nodes` is the level's storage (`sums` from the level's offset on).
    #[inline(always)]
    fn step(&self, level_nodes: &[f64], level: usize, node: usize, x: f64) -> (usize, f64) {
        let group: &[f64; K] = level_nodes[node * K..node * K + K].try_into().unwrap();
        let (j, before) = count_le(group, x);
        if j < K && group[j] > 0.0 {
            (node * K + j, x - before)
        } else {
            self.step_cold(level, node, j, x, before)
        }
    }

    #[inline(always)]
    fn level_nodes(&self, level: usize) -> &[f64] {
        &self.sums.as_slice()[self.layout.offset(level)..]
    }

    /// Invariant 2: `x` ran past the group's rounded sum, or landed on a child that is not
    /// positive. Take the nearest nonempty child, preferring the ones before `j`.
    #[cold]
    #[inline(never)]
    fn step_cold(&self, level: usize, node: usize, j: usize, x: f64, before: f64) -> (usize, f64) {
        if j < K && self.nonempty(level, node, j) {
            // A drifted internal node (sum <= 0) that still has leaves below it.
            return (node * K + j, x - before);
        }
        if let Some(jj) = (0..j.min(K))
            .rev()
            .find(|&jj| self.nonempty(level, node, jj))
        {
            // Everything below this child lies before x: take its last nonempty leaf.
            return (node * K + jj, f64::INFINITY);
        }
        if let Some(jj) = (j + 1..K).find(|&jj| self.nonempty(level, node, jj)) {
            // Take its first nonempty leaf.
            return (node * K + jj, 0.0);
        }
        unreachable!("sum tree invariant broken: descended into an empty subtree");
    }

    /// The smallest leaf index whose inclusive prefix sum exceeds `x`, robustly: `x` is
    /// clamped to `[0, total]` (NaN counts as 0). The caller checks `has_positive()`.
    #[inline]
    pub(crate) fn find_prefix(&self, x: f64) -> usize {
        let mut x = if x >= 0.0 { x } else { 0.0 };
        let mut node = 0;
        for level in 0..self.layout.depth() {
            (node, x) = self.step(self.level_nodes(level), level, node, x);
        }
        node
    }

    /// Hint that leaf `i` (and its sibling group's line) will be written soon.
    #[inline(always)]
    pub(crate) fn prefetch_leaf(&self, i: usize) {
        let off = self.layout.offset(self.leaf_level()) + i;
        prefetch_line(self.sums.as_slice().as_ptr().wrapping_add(off));
    }

    /// [`Self::find_prefix`] for a whole batch, level by level: every item steps down one
    /// level and prefetches its next group before any item takes the next step, so the
    /// cache misses of the batch overlap instead of queueing one after another.
    pub(crate) fn find_prefix_batch(&self, xs: &[f64], out: &mut [usize]) {
        debug_assert_eq!(xs.len(), out.len());
        let depth = self.layout.depth();
        let mut x = [0.0f64; CHUNK];
        for (xc, oc) in xs.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
            let n = xc.len();
            let x = &mut x[..n];
            for (dst, &src) in x.iter_mut().zip(xc) {
                *dst = if src >= 0.0 { src } else { 0.0 };
            }
            oc.fill(0);
            for level in 0..depth {
                let nodes = self.level_nodes(level);
                if level + 1 == depth {
                    for (node, xb) in oc.iter_mut().zip(x.iter_mut()) {
                        (*node, *xb) = self.step(nodes, level, *node, *xb);
                    }
                } else {
                    let next = self.level_nodes(level + 1).as_ptr();
                    for (node, xb) in oc.iter_mut().zip(x.iter_mut()) {
                        (*node, *xb) = self.step(nodes, level, *node, *xb);
                        prefetch_group::<K>(next.wrapping_add(*node * K));
                    }
                }
            }
        }
    }

    /// Recompute every internal node from its children in fixed order: afterwards each
    /// node equals, bit for bit, the left-to-right sum of its children.
    pub(crate) fn rebuild(&mut self) {
        let depth = self.layout.depth();
        for level in (0..depth - 1).rev() {
            for node in 0..self.layout.real(level) {
                let child_group = self.layout.offset(level + 1) + node * K;
                let slot = self.layout.offset(level) + node;
                let children = &self.sums.as_slice()[child_group..child_group + K];
                let sum = children.iter().fold(0.0, |a, &c| a + c);
                let (m, mx) = if level + 1 == depth - 1 {
                    (group_min_positive(children), group_max(children))
                } else {
                    let mins = &self.mins.as_slice()[child_group..child_group + K];
                    let mx = self.maxs.as_ref().map_or(0.0, |b| {
                        group_max(&b.as_slice()[child_group..child_group + K])
                    });
                    (group_min(mins), mx)
                };
                self.sums.as_mut_slice()[slot] = if m == EMPTY_MIN { 0.0 } else { sum };
                self.mins.as_mut_slice()[slot] = m;
                if let Some(b) = self.maxs.as_mut() {
                    b.as_mut_slice()[slot] = mx;
                }
            }
        }
    }

    /// Compare every internal node with the fixed-order sum (and min, max) of its children.
    pub(crate) fn check(&self) -> super::Consistency {
        let depth = self.layout.depth();
        let mut report = super::Consistency::default();
        for level in (0..depth - 1).rev() {
            for node in 0..self.layout.real(level) {
                let child_group = self.layout.offset(level + 1) + node * K;
                let slot = self.layout.offset(level) + node;
                let children = &self.sums.as_slice()[child_group..child_group + K];
                let sum = children.iter().fold(0.0, |a, &c| a + c);
                let (m, mx) = if level + 1 == depth - 1 {
                    (group_min_positive(children), group_max(children))
                } else {
                    let mx = self.maxs.as_ref().map_or(0.0, |b| {
                        group_max(&b.as_slice()[child_group..child_group + K])
                    });
                    (
                        group_min(&self.mins.as_slice()[child_group..child_group + K]),
                        mx,
                    )
                };
                let stored = self.sums.as_slice()[slot];
                let expected = if m == EMPTY_MIN { 0.0 } else { sum };
                report.record_sum(stored, expected);
                report.extrema_exact &= self.mins.as_slice()[slot] == m;
                if let Some(b) = &self.maxs {
                    report.extrema_exact &= b.as_slice()[slot] == mx;
                }
            }
        }
        report
    }

    pub(crate) fn depth(&self) -> usize {
        self.layout.depth()
    }

    pub(crate) fn level_len(&self, level: usize) -> usize {
        self.layout.real(level)
    }

    pub(crate) fn node(&self, level: usize, i: usize) -> f64 {
        self.sums.as_slice()[self.layout.offset(level) + i]
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.sums.bytes() + self.mins.bytes() + self.maxs.as_ref().map_or(0, AlignedBuf::bytes)
    }

    /// All leaves to 0, all internal nodes to their empty values.
    pub(crate) fn clear(&mut self) {
        self.sums.as_mut_slice().fill(0.0);
        self.mins.as_mut_slice().fill(EMPTY_MIN);
        if let Some(b) = self.maxs.as_mut() {
            b.as_mut_slice().fill(0.0);
        }
    }
}
