//! The sequential K-ary sum tree, monomorphized over the fanout `K`.
//!
//! Three arrays share one [`Layout`]:
//! - `sums`: every level, leaves included; an internal node holds [`group_sum`] of its K
//!   children. A leaf write recomputes each touched parent from its K children (one cache
//!   line, K adds, log2 K of them in the dependent chain), never adds a delta, so every node
//!   is a function of the current leaves only: bit-exact at every moment, and no rounding
//!   from a past large priority survives once it shrinks (deltas kept it, and skewed samples
//!   after TD errors fell);
//! - `mins`: internal levels only; a node holds the smallest *nonzero* leaf below it, or
//!   `+inf` when every leaf below it is 0 ("empty");
//! - `maxs` (optional): internal levels only; the largest leaf below each node.
//!
//! The descent is robust against rounding at the group level: `x` may exceed a group's
//! rounded sum, or land on a child that is 0. Sums of non-negative values are 0 exactly when
//! every term is 0, so a child with a positive sum has a positive leaf below it, and when the
//! branch-free group search lands on a child that is not positive, a cold path picks the
//! nearest child that `mins` (or, at the leaves, the leaf value) says is nonempty.
//! A descent that starts in a nonempty tree therefore ends on a positive leaf below `len`.

use super::group_sum;
use super::layout::{AlignedBuf, Layout, LINE};
use crate::mem::{prefetch_line, PREFETCH_AHEAD};

const EMPTY_MIN: f64 = f64::INFINITY;

/// Leaves sampled per chunk of the batched descent (state kept on the stack).
const CHUNK: usize = 256;

/// Leaves written per chunk of [`KaryTree::set_many`] (state kept on the stack).
const WRITE_CHUNK: usize = 64;

/// The chunk of [`KaryTree::set_many`] for a batch known to be shorter (its stack buffers
/// are zeroed on every call, 2.5 KB at [`WRITE_CHUNK`]).
const SMALL_CHUNK: usize = 32;

/// Levels of more `f64`s than this (32 KiB, an L1 data cache) get their parents prefetched
/// by [`KaryTree::set_many`]'s climb.
const PREFETCH_LEVEL: usize = 4096;

/// A level with more than this many nodes per climbing item is climbed without the
/// unchanged-parent check of [`KaryTree::set_many`] (items rarely meet there).
const SPARSE: usize = 8;

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

/// [`group_sum`] of the group with child `j` replaced by `value`, without a store: the
/// replacement is a per-lane select, so the group can be read straight from memory.
#[inline(always)]
fn group_sum_replacing<const K: usize>(group: &[f64; K], j: usize, value: f64) -> f64 {
    let mut children = [0.0f64; K];
    for (lane, (dst, &src)) in children.iter_mut().zip(group).enumerate() {
        *dst = if lane == j { value } else { src };
    }
    group_sum(&children)
}

/// Smallest positive value of the group, `+inf` when none is positive.
#[inline(always)]
pub(super) fn group_min_positive(group: &[f64]) -> f64 {
    let mut m = EMPTY_MIN;
    for &v in group {
        let v = if v > 0.0 { v } else { EMPTY_MIN };
        m = if v < m { v } else { m };
    }
    m
}

/// [`group_min_positive`] of a whole group, on SSE2 pairs where available (the minimum is
/// exact in any order, so the result is the same).
#[inline(always)]
pub(super) fn group_min_positive_k<const K: usize>(group: &[f64; K]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if K >= 2 {
        use core::arch::x86_64::{
            _mm_and_pd, _mm_andnot_pd, _mm_cmpgt_pd, _mm_cvtsd_f64, _mm_loadu_pd, _mm_min_pd,
            _mm_or_pd, _mm_set1_pd, _mm_setzero_pd, _mm_unpackhi_pd,
        };
        // SAFETY: SSE2 is part of the x86_64 baseline; each load reads two f64 at
        // `2j < K` inside `group`.
        unsafe {
            let empty = _mm_set1_pd(EMPTY_MIN);
            let zero = _mm_setzero_pd();
            let mut m = empty;
            for j in 0..K / 2 {
                let v = _mm_loadu_pd(group.as_ptr().add(2 * j));
                let positive = _mm_cmpgt_pd(v, zero);
                let v = _mm_or_pd(_mm_and_pd(positive, v), _mm_andnot_pd(positive, empty));
                m = _mm_min_pd(m, v);
            }
            let hi = _mm_unpackhi_pd(m, m);
            return _mm_cvtsd_f64(_mm_min_pd(m, hi));
        }
    }
    group_min_positive(group)
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

/// A level's nodes seen as groups of K (`<[f64]>::as_chunks` is newer than the MSRV).
struct Groups<'a, const K: usize>(&'a [f64]);

impl<const K: usize> Groups<'_, K> {
    /// Group `g`: nodes `g*K .. g*K + K`.
    #[inline(always)]
    fn get(&self, g: usize) -> &[f64; K] {
        self.0[g * K..g * K + K].try_into().unwrap()
    }
}

/// One level of a minimum's or maximum's climb in [`KaryTree::set_chunks`] (above the first
/// level): each node of `nodes` (children at `child_off`, sorted runs of siblings done once)
/// has its parent at `parent_off` recomputed with `fold` over its K children. Returns how
/// many parents changed; they are left at the front of `nodes`, the next level's list.
#[inline(always)]
fn climb_extremum<const K: usize>(
    field: &mut [f64],
    nodes: &mut [usize],
    parent_off: usize,
    child_off: usize,
    fold: fn(&[f64]) -> f64,
) -> usize {
    let (mut live, mut previous) = (0, usize::MAX);
    for t in 0..nodes.len() {
        if let Some(&ahead) = nodes.get(t + PREFETCH_AHEAD) {
            prefetch_line(field.as_ptr().wrapping_add(parent_off + ahead / K));
        }
        let parent = nodes[t] / K;
        if parent == previous {
            continue;
        }
        previous = parent;
        let group = child_off + parent * K;
        let m = fold(&field[group..group + K]);
        let changed = m != field[parent_off + parent];
        field[parent_off + parent] = m;
        nodes[live] = parent;
        live += changed as usize;
    }
    live
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

    /// Sum of the root group, in the fixed order of [`group_sum`].
    #[inline]
    pub(crate) fn total(&self) -> f64 {
        group_sum(self.group(0, 0))
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

    /// The leaves of the `m` largest (smallest) positive values, best first, ties by the
    /// lower leaf, into `out` ([`super::rank::rank_leaves`]).
    pub(crate) fn rank(&self, extreme: super::rank::Extreme, m: usize, out: &mut Vec<usize>) {
        let leaf_level = self.leaf_level();
        let value = |level: usize, i: usize| {
            let at = self.layout.offset(level) + i;
            if level == leaf_level {
                return self.sums.as_slice()[at];
            }
            match (extreme, &self.maxs) {
                (super::rank::Extreme::Smallest, _) => self.mins.as_slice()[at],
                (super::rank::Extreme::Largest, Some(maxs)) => maxs.as_slice()[at],
                // No maxima kept: every node with a positive leaf below is expanded.
                (super::rank::Extreme::Largest, None) => match self.sums.as_slice()[at] > 0.0 {
                    true => f64::INFINITY,
                    false => 0.0,
                },
            }
        };
        super::rank::rank_leaves(&self.layout, K, extreme, m, value, out);
    }

    /// Set leaf `i` to `p` (validated by the caller: finite, >= 0, `i < len`).
    ///
    /// Each ancestor's sum is recomputed from its K children; the climb stops early once a
    /// recomputed sum is bit-for-bit what was stored and the extrema are settled (nothing
    /// above can change then). The companion extrema move incrementally: a parent's minimum
    /// changes to the child's new value when that is smaller, is rescanned from the K
    /// children only when the child that held the minimum rose, and otherwise stays.
    #[inline]
    pub(crate) fn set(&mut self, i: usize, p: f64) {
        let p = p + 0.0; // -0.0 -> 0.0
        let depth = self.layout.depth();
        let leaf_off = self.layout.offset(depth - 1);
        let old = self.sums.as_slice()[leaf_off + i];
        if old.to_bits() == p.to_bits() {
            return;
        }
        let positive = |v: f64| if v > 0.0 { v } else { EMPTY_MIN };
        // What the parent sees of this child, before and after.
        let (mut min_old, mut min_new) = (positive(old), positive(p));
        let (mut max_old, mut max_new) = (old, p);
        let mut min_live = min_old != min_new;
        let mut max_live = self.maxs.is_some() && max_old != max_new;
        let mut sum_live = true;
        // `value` is the new sum of `node` at the level below the loop's, not stored yet: a
        // group is read before its changed child is written, so the wide loads of the group
        // never wait on a store still in flight (store-to-load forwarding fails when a load
        // spans a narrower pending store; it cost 30-40 ns per update at K = 8).
        let mut value = p;
        let mut node = i;
        for level in (0..depth - 1).rev() {
            let parent = node / K;
            let slot = self.layout.offset(level) + parent;
            let child_group = self.layout.offset(level + 1) + parent * K;
            let children_are_leaves = level + 2 == depth;
            if sum_live {
                let sums = self.sums.as_mut_slice();
                let children: &[f64; K] = sums[child_group..child_group + K].try_into().unwrap();
                let sum = group_sum_replacing(children, node % K, value);
                sums[child_group + node % K] = value;
                sum_live = sum.to_bits() != sums[slot].to_bits();
                value = sum;
            }
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
                    min_live = false;
                } else {
                    self.mins.as_mut_slice()[slot] = new_m;
                    (min_old, min_new) = (m, new_m);
                }
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
            if !sum_live && !min_live && !max_live {
                return;
            }
            node = parent;
        }
        if sum_live {
            // The root group's node (or, in a one-level tree, the leaf itself).
            self.sums.as_mut_slice()[self.layout.offset(0) + node] = value;
        }
    }

    /// Set many leaves (each validated by the caller; a repeated index: the last value wins)
    /// and bring the internal nodes up to date level by level.
    ///
    /// Per chunk of items: every leaf is written first, then each level's touched parents
    /// are recomputed from their K children before any parent of the next level up. A
    /// parent's recomputation depends only on the level below, so the parents of one level
    /// are independent and the chunk's dependency chains run side by side instead of one
    /// after another, as [`Self::set`]'s would (log2 K adds per level in each chain). A node
    /// climbs only while the field it carries changed (see [`Self::set_chunks`]). Where
    /// several items meet in one parent, the first recomputes it from the final children
    /// and climbs on; the others find it unchanged and stop.
    ///
    /// A single item takes [`Self::set`]'s climb: clearing the chunk buffers (2.5 KB) would
    /// cost a single insert's retire or publish more than its whole climb.
    pub(crate) fn set_many(&mut self, items: impl IntoIterator<Item = (usize, f64)>) {
        let mut items = items.into_iter();
        let Some(first) = items.next() else {
            return;
        };
        let mut rest = items.peekable();
        if rest.peek().is_none() {
            self.set(first.0, first.1);
        } else if rest.size_hint().1.is_some_and(|n| n < SMALL_CHUNK) {
            // A staged writer's batch: buffers sized for it, not for a learner's.
            self.set_chunks::<SMALL_CHUNK>(std::iter::once(first).chain(rest));
        } else {
            self.set_chunks::<WRITE_CHUNK>(std::iter::once(first).chain(rest));
        }
    }

    /// [`Self::set_many`] for two or more items, a chunk at a time.
    ///
    /// The sums, minima and maxima climb on separate work lists: a list holds the nodes whose
    /// field changed at the level below, compacted branch-free as it climbs (a node whose
    /// recomputed field is unchanged drops out by not advancing the list's length), so no
    /// branch depends on whether a field changed: where items meet, near the root, that is
    /// a coin toss a branch would mispredict. Three costs are cut from a plain climb:
    /// - the first level loads each changed leaf's group once for its sum, minimum and
    ///   maximum (a changed leaf always changes all three inputs; most climbs of the minimum
    ///   and maximum end there);
    /// - a level much wider than the list (`SPARSE`) skips the unchanged-parent check: items
    ///   rarely meet there, and a meeting just recomputes a parent twice to the same value;
    /// - parents are prefetched only on levels larger than L1 (`PREFETCH_LEVEL`);
    /// - a node whose parent is the previous node's is skipped: a batch of consecutive
    ///   slots (a staged writer's retire and publish) recomputes each parent once, not once
    ///   per child.
    fn set_chunks<const C: usize>(&mut self, items: impl Iterator<Item = (usize, f64)>) {
        let depth = self.layout.depth();
        let leaf_off = self.layout.offset(depth - 1);
        let mut items = items;
        let mut chunk = [(0usize, 0.0f64); C];
        let mut sum_nodes = [0usize; C];
        let mut min_nodes = [0usize; C];
        let mut max_nodes = [0usize; C];
        loop {
            let mut len = 0;
            for (dst, item) in chunk.iter_mut().zip(&mut items) {
                *dst = item;
                len += 1;
            }
            if len == 0 {
                return;
            }
            let chunk = &chunk[..len];
            let mut n_sum = 0;
            for (j, &(i, p)) in chunk.iter().enumerate() {
                if let Some(&(ahead, _)) = chunk.get(j + PREFETCH_AHEAD) {
                    self.prefetch_leaf(ahead);
                }
                let p = p + 0.0; // -0.0 -> 0.0
                let sums = self.sums.as_mut_slice();
                let old = sums[leaf_off + i];
                sums[leaf_off + i] = p;
                // Stored leaves are never -0.0, so a changed leaf also changed its positive
                // value and its value: the same list starts all three climbs (see below).
                sum_nodes[n_sum] = i;
                n_sum += (old.to_bits() != p.to_bits()) as usize;
            }
            let (mut n_min, mut n_max) = (0, 0);
            for level in (0..depth - 1).rev() {
                let children_are_leaves = level + 2 == depth;
                let parent_off = self.layout.offset(level);
                let child_off = self.layout.offset(level + 1);
                // Prefetch parents only where their level outgrows L1 (the levels near the
                // root stay cached, and the hint would cost more than it saves).
                let prefetch = child_off - parent_off > PREFETCH_LEVEL;
                let (upper, lower) = self.sums.as_mut_slice().split_at_mut(child_off);
                let parents = &mut upper[parent_off..];
                let groups = Groups::<K>(lower);
                if children_are_leaves {
                    // The first level: every changed leaf changed its group's sum, minimum
                    // and maximum inputs, and the group is loaded once for all three.
                    let mins = &mut self.mins.as_mut_slice()[parent_off..];
                    let mut maxs = self
                        .maxs
                        .as_mut()
                        .map(|m| &mut m.as_mut_slice()[parent_off..]);
                    let (mut live, mut live_min, mut live_max) = (0, 0, 0);
                    let mut previous = usize::MAX;
                    for t in 0..n_sum {
                        if prefetch {
                            if let Some(&ahead) = sum_nodes[..n_sum].get(t + PREFETCH_AHEAD) {
                                prefetch_line(parents.as_ptr().wrapping_add(ahead / K));
                                prefetch_line(mins.as_ptr().wrapping_add(ahead / K));
                            }
                        }
                        let parent = sum_nodes[t] / K;
                        if parent == previous {
                            continue; // a run of siblings (consecutive slots): done once
                        }
                        previous = parent;
                        let group = groups.get(parent);
                        let sum = group_sum(group);
                        let changed = sum.to_bits() != parents[parent].to_bits();
                        parents[parent] = sum;
                        let m = group_min_positive_k(group);
                        let min_changed = m != mins[parent];
                        mins[parent] = m;
                        sum_nodes[live] = parent;
                        live += changed as usize;
                        min_nodes[live_min] = parent;
                        live_min += min_changed as usize;
                        if let Some(maxs) = maxs.as_deref_mut() {
                            let m = group_max(group);
                            let max_changed = m != maxs[parent];
                            maxs[parent] = m;
                            max_nodes[live_max] = parent;
                            live_max += max_changed as usize;
                        }
                    }
                    (n_sum, n_min, n_max) = (live, live_min, live_max);
                    continue;
                }
                if self.layout.real(level) > SPARSE * n_sum {
                    // Items rarely meet on a level this much wider than the list: every item
                    // climbs on without reading the old parent (a meeting recomputes a parent
                    // twice from the same children, which writes the same value).
                    let (mut live, mut previous) = (0, usize::MAX);
                    for t in 0..n_sum {
                        if prefetch {
                            if let Some(&ahead) = sum_nodes[..n_sum].get(t + PREFETCH_AHEAD) {
                                prefetch_line(parents.as_ptr().wrapping_add(ahead / K));
                            }
                        }
                        let parent = sum_nodes[t] / K;
                        if parent == previous {
                            continue;
                        }
                        previous = parent;
                        parents[parent] = group_sum(groups.get(parent));
                        sum_nodes[live] = parent;
                        live += 1;
                    }
                    n_sum = live;
                } else {
                    let (mut live, mut previous) = (0, usize::MAX);
                    for t in 0..n_sum {
                        let parent = sum_nodes[t] / K;
                        if parent == previous {
                            continue;
                        }
                        previous = parent;
                        let sum = group_sum(groups.get(parent));
                        let changed = sum.to_bits() != parents[parent].to_bits();
                        parents[parent] = sum;
                        sum_nodes[live] = parent;
                        live += changed as usize;
                    }
                    n_sum = live;
                }
                // `mins` and `maxs` share the internal levels' offsets with `sums`.
                n_min = climb_extremum::<K>(
                    self.mins.as_mut_slice(),
                    &mut min_nodes[..n_min],
                    parent_off,
                    child_off,
                    group_min,
                );
                if let Some(maxs) = self.maxs.as_mut() {
                    n_max = climb_extremum::<K>(
                        maxs.as_mut_slice(),
                        &mut max_nodes[..n_max],
                        parent_off,
                        child_off,
                        group_max,
                    );
                }
                if n_sum + n_min + n_max == 0 {
                    break;
                }
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

    /// `x` ran past the group's rounded sum, or landed on a child that is not positive. Take the nearest nonempty child, preferring the ones before `j`.
    #[cold]
    #[inline(never)]
    fn step_cold(&self, level: usize, node: usize, j: usize, x: f64, before: f64) -> (usize, f64) {
        if j < K && self.nonempty(level, node, j) {
            // Not reached while sums are exact (a nonempty subtree sums to > 0); kept so that
            // a tree whose nodes were damaged still never descends into an empty subtree.
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

    /// The sum of the leaves before leaf `i` as the descent's groups hold it: at each level,
    /// the siblings to the left of `i`'s ancestor (where a descent to `i` starts on its
    /// leaf, up to rounding).
    pub(crate) fn prefix_before(&self, i: usize) -> f64 {
        let mut sum = 0.0;
        let mut node = i;
        for level in (0..self.layout.depth()).rev() {
            sum += self.group(level, node / K)[..node % K].iter().sum::<f64>();
            node /= K;
        }
        sum
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

    /// Node `node` of `level` (an internal level): its slot, and the sum, min and max its
    /// children fold to (the max 0 without `maxs`).
    fn folded(&self, level: usize, node: usize) -> (usize, f64, f64, f64) {
        let child_group = self.layout.offset(level + 1) + node * K;
        let slot = self.layout.offset(level) + node;
        let children: &[f64; K] = self.sums.as_slice()[child_group..child_group + K]
            .try_into()
            .unwrap();
        let sum = group_sum(children);
        let (m, mx) = if level + 1 == self.layout.depth() - 1 {
            (group_min_positive(children), group_max(children))
        } else {
            let mins = &self.mins.as_slice()[child_group..child_group + K];
            let mx = self.maxs.as_ref().map_or(0.0, |b| {
                group_max(&b.as_slice()[child_group..child_group + K])
            });
            (group_min(mins), mx)
        };
        (slot, sum, m, mx)
    }

    /// Recompute every internal node from its children: afterwards each node equals, bit
    /// for bit, [`group_sum`] of its children.
    pub(crate) fn rebuild(&mut self) {
        for level in (0..self.layout.depth() - 1).rev() {
            for node in 0..self.layout.real(level) {
                let (slot, sum, m, mx) = self.folded(level, node);
                self.sums.as_mut_slice()[slot] = sum;
                self.mins.as_mut_slice()[slot] = m;
                if let Some(b) = self.maxs.as_mut() {
                    b.as_mut_slice()[slot] = mx;
                }
            }
        }
    }

    /// Compare every internal node with [`group_sum`] (and min, max) of its children.
    pub(crate) fn check(&self) -> super::Consistency {
        let mut report = super::Consistency::default();
        for level in (0..self.layout.depth() - 1).rev() {
            for node in 0..self.layout.real(level) {
                let (slot, sum, m, mx) = self.folded(level, node);
                report.record_sum(self.sums.as_slice()[slot], sum);
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
