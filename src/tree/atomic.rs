//! A K-ary sum tree whose nodes are atomics, for the lock-free buffer.
//!
//! Same implicit layout as the sequential tree ([`Layout`]), plus an explicit root node.
//! Each internal node keeps three fields, each an [`AtomicF64`]: the sum of its children,
//! the smallest positive leaf below it (infinity when none), and, when asked for, the
//! largest leaf below it.
//!
//! Protocol (docs/design.md, "Exactness"), field by field. A leaf write stores the leaf, then climbs
//! with each field (sum, minimum, maximum) on its own: at each level it reads the parent's
//! field, recomputes it from that field of its K children (the sum in the crate's fixed
//! order, [`group_sum`](super::group_sum), the sequential tree's too), installs it with a
//! compare-and-swap when it differs, and repeats until the parent's field it last read
//! equals what it computed from the children it read just after. The CAS itself is that
//! next read: after a success the field held the installed value at the CAS, after a
//! failure the value the CAS returned (one load fewer per level than loading again). A
//! thread climbs a field to the next level only if its CAS of that field succeeded; if it
//! saw the field already equal, whoever installed that value climbs instead.
//!
//! Why the tree is exact at quiescence: take a parent's field and the last successful CAS
//! of it (or its initial value, if none), value `v`. The CAS's thread then folded the
//! children and found `v` (or it would have CASed again, successfully, since nothing wrote
//! the field after). A child written after that fold is followed by its writer's refresh,
//! whose first read of the field (a load after the child write) gives `v`, and whose fold
//! (after the write) must give `v` too, or its CAS would succeed. The last child write's
//! fold sees every child's final value: the field equals, bit for bit, the fold of its
//! final children. So the tree is exactly what a fresh build would give, whatever the
//! interleaving. (The argument never mixes fields, so they climb apart: a sum's climb does
//! not load or compare minima, and a minimum's climb usually ends a level or two above the
//! leaf.)
//!
//! Why recompute-and-verify rather than the cheaper-looking alternatives: it gives the
//! strongest guarantee, bit-exact sums at quiescence with no quantization of priorities,
//! at a cost within its target (`leaf_write` in docs/performance.md). Exact fixed-point
//! sums with `fetch_add` would need more than 64 bits for the priorities users give
//! (1e-8 to 1e8 over 2^20 leaves spans 2^73), so either two-word sums that a descent can
//! read torn or a 128-bit CAS, and would still pay one locked instruction per level, which
//! is most of what a level costs here; f64 deltas would drift and need a repair that races
//! writers. What a level costs: a fold of the K children, the CAS (a locked instruction and
//! a full barrier on x86-64), and a second fold that the barrier makes wait.
//!
//! ORDERING: every node access is SeqCst. The argument above uses one total order over
//! leaf stores, parent CASes and the loads between them. On x86-64 a SeqCst load is a plain
//! load and a CAS is a locked instruction whatever its ordering; only the leaf store costs
//! more than a weaker ordering would (an XCHG where a Release store is a plain MOV).
//!
//! A reader that descends while others climb may see a parent that disagrees with its
//! children. A target past the children's sum by more than rounding (mass the parent still
//! counts: a leaf retired without a climb, or a climb in flight) finds nothing, as does a
//! group with no positive child, and the caller draws again (rejection: every other leaf
//! keeps its share; clamping into the last positive child, as the descent once did, gave
//! that child the stale share too). Past it by rounding only, the descent takes the last
//! positive child. It never returns a leaf it read as 0.

use super::layout::{Layout, LINE};
use super::Consistency;
use crate::error::Result;
use crate::faults::Faults;
use crate::region::{Region, RegionBox, RegionBuf};
use crate::sync::{AtomicF64, CachePadded, Ordering};

const SEQ: Ordering = Ordering::SeqCst;

/// The most entries one [`AtomicSumTree::set_many`] takes (the stack array of its climb).
pub(crate) const SET_MANY_MAX: usize = 64;

/// What [`AtomicSumTree::find_prefix_batch`] writes for a descent that found nothing.
pub(crate) const NOT_FOUND: usize = usize::MAX;

/// The atomic tree (see the module doc). `pub` only so that the public alias
/// [`LockFreeBuffer`](crate::LockFreeBuffer) can name it; its module is private.
#[derive(Debug)]
pub struct AtomicSumTree {
    layout: Layout,
    k: usize,
    /// Every node's sum, indexed like the layout (`layout.offset(level) + i`).
    sums: RegionBuf<AtomicF64>,
    /// Smallest positive leaf below each internal node (`+inf`: none); indexed like the
    /// layout, internal levels only.
    mins: RegionBuf<AtomicF64>,
    /// Largest leaf below each internal node, when tracked; indexed as `mins`.
    maxs: Option<RegionBuf<AtomicF64>>,
    /// The root's three fields, on a line of their own: every climb that reaches the root
    /// writes them, and the fields above are read by every operation of every thread.
    /// Unpadded, a LockFree actor beside a learner lost half its rate in some processes
    /// (docs/performance.md, "Measurements behind design choices").
    roots: RegionBox<CachePadded<Roots>>,
    /// The protocol's answers (a zero-sized type outside loom: `faults.rs`).
    pub(crate) faults: Faults,
}

/// `$body` with the const `$k` bound to the tree's fanout `$fanout` (one of the supported
/// powers of two): how the methods below reach their monomorphized forms.
macro_rules! by_fanout {
    ($fanout:expr, $k:ident => $body:expr) => {
        match $fanout {
            2 => {
                const $k: usize = 2;
                $body
            }
            4 => {
                const $k: usize = 4;
                $body
            }
            8 => {
                const $k: usize = 8;
                $body
            }
            16 => {
                const $k: usize = 16;
                $body
            }
            32 => {
                const $k: usize = 32;
                $body
            }
            64 => {
                const $k: usize = 64;
                $body
            }
            k => unreachable!("unsupported fanout {k}"),
        }
    };
}

/// `n` atomics set to `fill` from `region`, the first on a 64-byte boundary (a node group
/// fills one line).
fn aligned_atomics(region: &mut Region, n: usize, fill: f64) -> Result<RegionBuf<AtomicF64>> {
    region.alloc(n, LINE * 8, || AtomicF64::new(fill))
}

/// The root's fields may live in a shared mapping: atomics only.
// SAFETY: atomics only.
unsafe impl crate::region::Shareable for Roots {}

/// The root's fields (see [`AtomicSumTree::roots`]).
#[derive(Debug)]
struct Roots {
    sum: AtomicF64,
    min: AtomicF64,
    max: AtomicF64,
}

/// The K children of a group whose first child is `first` in `level` (that level's real
/// nodes): loaded by value (not stored into a scratch array that a reduction reads back
/// with wider loads, which stalls store forwarding); `pad` past the level's end.
#[inline(always)]
fn load_group<const K: usize>(level: &[AtomicF64], first: usize, pad: f64) -> [f64; K] {
    match level.get(first..first + K) {
        Some(full) => std::array::from_fn(|i| full[i].load(SEQ)),
        None => std::array::from_fn(|i| level.get(first + i).map_or(pad, |s| s.load(SEQ))),
    }
}

/// The child of group `group` of `nodes` (one level's real nodes) whose prefix range
/// holds `x`, and the sum before it: the first positive child whose serial inclusive
/// prefix exceeds `x`. Past the children's sum by at most `tolerance` (rounding) it is the
/// last positive child, entered past its end so that the descent keeps to the right; past
/// it by more (mass that the parent still counts and the children no longer hold: a leaf
/// retired without a climb, or a climb in flight) it is `None`, as when no child is
/// positive, and the caller draws again.
///
/// The group is loaded once (one line at K = 8) and the child counted without branches:
/// the prefixes of non-negative values never decrease, so the children whose prefix is not
/// above `x` come first, and the next one, if positive, is the answer of the serial scan
/// (its prefix is above `x`, and above its predecessor's, so it is positive unless `x` is
/// below 0). Anything else (a negative or NaN `x`, a target past the sum) takes the serial
/// scan over the same loaded values. Same adds in the same order as the scan, so the same
/// child and the same `before`, bit for bit (a unit test compares them).
#[inline(always)]
fn search_group<const K: usize>(
    nodes: &[AtomicF64],
    group: usize,
    x: f64,
    tolerance: f64,
) -> Option<(usize, f64)> {
    let first = group * K;
    let children = load_group::<K>(nodes, first, 0.0);
    let mut prefix = [0.0f64; K];
    let mut acc = 0.0;
    for (p, &c) in prefix.iter_mut().zip(&children) {
        acc += c;
        *p = acc;
    }
    let mut j = 0usize;
    for &p in &prefix {
        // Not `p <= x`: a NaN `x` must count every child (and so take the serial scan).
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        let past = !(x < p);
        j += past as usize;
    }
    if j < K && children[j] > 0.0 {
        let before = if j == 0 { 0.0 } else { prefix[j - 1] };
        return Some((first + j, before));
    }
    search_group_serial(&children, first, x, tolerance)
}

/// The serial scan that [`search_group`] stands for (and falls back to).
#[cold]
#[inline(never)]
fn search_group_serial(
    children: &[f64],
    first: usize,
    x: f64,
    tolerance: f64,
) -> Option<(usize, f64)> {
    let mut prefix = 0.0;
    let mut last_positive = None;
    for (i, &s) in children.iter().enumerate() {
        if s > 0.0 {
            if x < prefix + s {
                return Some((first + i, prefix));
            }
            last_positive = Some((first + i, prefix));
        }
        prefix += s;
    }
    // Past the children's sum (a NaN `x` is not: it takes the last positive child).
    if x - prefix > tolerance {
        return None;
    }
    last_positive
}

/// How far past a group's children a descent may find its target, relative to the total,
/// and still take the last positive child: the rounding of the targets' subtractions (at
/// most one unit in the last place of the total per level) and of the serial prefix against
/// the parent's pairwise sum (at most about K units in the last place of the parent), with
/// a wide margin (2^-40 against at most about 2^-45 for depth 10 and K = 64). Anything
/// larger is mass in flight, drawn again.
const PAST_END_TOLERANCE: f64 = 1.0 / (1u64 << 40) as f64;

/// `values` reduced pairwise with `op` (halves folded onto each other, as
/// [`group_sum`](super::group_sum) does): log2(K) dependent steps, no branches.
#[inline(always)]
fn reduce<const K: usize>(mut values: [f64; K], op: impl Fn(f64, f64) -> f64) -> f64 {
    let mut n = K;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            values[i] = op(values[i], values[i + n]);
        }
    }
    values[0]
}

/// The fold of a group of children: (sum, min positive, max).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Fold {
    sum: f64,
    min: f64,
    max: f64,
}

/// One of a node's fields: a climb refreshes each on its own (see [`AtomicSumTree::climb`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Sum,
    Min,
    Max,
}

/// One field of one level and of the level above: what the refreshes of that level's
/// groups read ([`AtomicSumTree::field_level`]).
#[derive(Debug, Clone, Copy)]
struct FieldLevel<'a> {
    field: Field,
    /// The level's real nodes (the leaves at the leaf level).
    children: &'a [AtomicF64],
    /// The level above (the root alone above level 0): group `g`'s parent is `parents[g]`.
    parents: &'a [AtomicF64],
    /// Whether `children` are leaves (a minimum then skips zeros).
    leaves: bool,
}

impl FieldLevel<'_> {
    /// The field's fold of group `group` for fanout `K`: the children are loaded into a
    /// K-array by value (padding children, never written, are not loaded) and reduced
    /// pairwise without branches. The sum is [`group_sum`](super::group_sum)'s order; a
    /// minimum or maximum does not depend on the order.
    #[inline(always)]
    fn fold<const K: usize>(&self, group: usize) -> f64 {
        let first = group * K;
        match self.field {
            Field::Sum => super::group_sum::<K>(&load_group::<K>(self.children, first, 0.0)),
            Field::Min => {
                let children = load_group::<K>(self.children, first, f64::INFINITY);
                // The smallest positive leaf: zeros count as infinity.
                let children = if self.leaves {
                    children.map(|s| if s > 0.0 { s } else { f64::INFINITY })
                } else {
                    children
                };
                reduce::<K>(children, |a, b| if b < a { b } else { a })
            }
            Field::Max => {
                let children = load_group::<K>(self.children, first, 0.0);
                // Folded from 0 (as every leaf is >= 0, the maximum of an empty group is 0).
                let max = reduce::<K>(children, |a, b| if b > a { b } else { a });
                if max > 0.0 {
                    max
                } else {
                    0.0
                }
            }
        }
    }
}

impl AtomicSumTree {
    #[cfg(all(test, not(loom)))]
    pub(crate) fn new(len: usize, k: usize, track_max: bool) -> Result<AtomicSumTree> {
        AtomicSumTree::in_region(len, k, track_max, &mut Region::Heap)
    }

    /// A tree whose nodes come from `region` (`region.rs`: the heap, or a shared mapping).
    pub(crate) fn in_region(
        len: usize,
        k: usize,
        track_max: bool,
        region: &mut Region,
    ) -> Result<AtomicSumTree> {
        let layout = Layout::new(len, k);
        let sums = aligned_atomics(region, layout.total(), 0.0)?;
        let internal = layout.internal_total();
        let mins = aligned_atomics(region, internal, f64::INFINITY)?;
        let maxs = if track_max {
            Some(aligned_atomics(region, internal, 0.0)?)
        } else {
            None
        };
        Ok(AtomicSumTree {
            layout,
            k,
            sums,
            mins,
            maxs,
            roots: region.alloc_one(
                128,
                CachePadded::new(Roots {
                    sum: AtomicF64::new(0.0),
                    min: AtomicF64::new(f64::INFINITY),
                    max: AtomicF64::new(0.0),
                }),
            )?,
            faults: Faults::none(),
        })
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        (self.sums.len() + self.mins.len() + self.maxs.as_ref().map_or(0, |m| m.len()))
            * std::mem::size_of::<AtomicF64>()
    }

    #[inline]
    fn leaf_level(&self) -> usize {
        self.layout.depth() - 1
    }

    #[inline]
    fn sum_at(&self, level: usize, i: usize) -> &AtomicF64 {
        &self.sums[self.layout.offset(level) + i]
    }

    /// Stored value of leaf `i` (`i < len`).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> f64 {
        self.sum_at(self.leaf_level(), i).load(SEQ)
    }

    pub(crate) fn total(&self) -> f64 {
        self.roots.sum.load(SEQ)
    }

    pub(crate) fn min_positive(&self) -> Option<f64> {
        let m = self.roots.min.load(SEQ);
        m.is_finite().then_some(m)
    }

    /// The largest leaf (only when built with `track_max`).
    pub(crate) fn max_leaf(&self) -> Option<f64> {
        self.maxs.as_ref().map(|_| self.roots.max.load(SEQ))
    }

    /// The leaves of the `m` largest (smallest) positive values as this search reads them,
    /// best first, ties by the lower leaf, into `out` ([`super::rank::rank_leaves`]).
    pub(crate) fn rank(&self, extreme: super::Extreme, m: usize, out: &mut Vec<usize>) {
        let leaf_level = self.leaf_level();
        let value = |level: usize, i: usize| {
            if level == leaf_level {
                return self.get(i);
            }
            let at = self.layout.offset(level) + i;
            match (extreme, &self.maxs) {
                (super::Extreme::Smallest, _) => self.mins[at].load(SEQ),
                (super::Extreme::Largest, Some(maxs)) => maxs[at].load(SEQ),
                // No maxima kept: every node with a positive leaf below is expanded.
                (super::Extreme::Largest, None) => match self.sums[at].load(SEQ) > 0.0 {
                    true => f64::INFINITY,
                    false => 0.0,
                },
            }
        };
        super::rank::rank_leaves(&self.layout, self.k, extreme, m, value, out);
    }

    /// Fold of the children group `group` of level `level` (the group of node `group` of
    /// level `level - 1`, or the root group when `level == 0`): every field, each as
    /// [`Self::fold_field`] computes it (the maximum is 0 above the leaves when untracked).
    fn fold(&self, level: usize, group: usize) -> Fold {
        let max = if self.maxs.is_some() || level == self.leaf_level() {
            self.fold_field(level, group, Field::Max)
        } else {
            0.0
        };
        Fold {
            sum: self.fold_field(level, group, Field::Sum),
            min: self.fold_field(level, group, Field::Min),
            max,
        }
    }

    /// One field of the fold of group `group` of level `level`: only that field's children
    /// are loaded ([`FieldLevel::fold`] for the tree's fanout).
    #[inline]
    fn fold_field(&self, level: usize, group: usize, field: Field) -> f64 {
        by_fanout!(self.k, K => self.field_level(level, field).fold::<K>(group))
    }

    /// What a refresh of `field` at `level` reads: that field of the level's real nodes
    /// and of their parents. A climb takes it once per level. An untracked maximum has no
    /// parents (`parents` is empty), but its fold of leaves is still what [`Self::check`]
    /// compares with.
    #[inline]
    fn field_level(&self, level: usize, field: Field) -> FieldLevel<'_> {
        let parents = if field == Field::Max && self.maxs.is_none() {
            &[]
        } else if level == 0 {
            std::slice::from_ref(match field {
                Field::Sum => &self.roots.sum,
                Field::Min => &self.roots.min,
                Field::Max => &self.roots.max,
            })
        } else {
            self.field_nodes(level - 1, field)
        };
        FieldLevel {
            field,
            children: self.field_nodes(level, field),
            parents,
            leaves: level == self.leaf_level(),
        }
    }

    /// `field` of the real nodes of `level` (the leaves themselves at the leaf level).
    #[inline]
    fn field_nodes(&self, level: usize, field: Field) -> &[AtomicF64] {
        let offset = self.layout.offset(level);
        let real = self.layout.real(level);
        if field == Field::Sum || level == self.leaf_level() {
            &self.sums[offset..][..real]
        } else if field == Field::Min {
            &self.mins[offset..][..real]
        } else {
            &self.maxs.as_ref().expect("max tracked")[offset..][..real]
        }
    }

    /// The three fields of the parent of group `group` of level `level`.
    #[inline]
    fn parent_fields(
        &self,
        level: usize,
        group: usize,
    ) -> (&AtomicF64, &AtomicF64, Option<&AtomicF64>) {
        if level == 0 {
            let max = self.maxs.as_ref().map(|_| &self.roots.max);
            (&self.roots.sum, &self.roots.min, max)
        } else {
            let at = self.layout.offset(level - 1) + group;
            (
                &self.sums[at],
                &self.mins[at],
                self.maxs.as_ref().map(|m| &m[at]),
            )
        }
    }

    /// Make every field of the parent of group `group` of level `level` equal the fold of
    /// its children ([`Self::refresh_field`] for each).
    fn refresh(&self, level: usize, group: usize) {
        for field in self.fields() {
            self.refresh_field(level, group, field);
        }
    }

    /// The fields this tree keeps.
    fn fields(&self) -> impl Iterator<Item = Field> {
        let max = self.maxs.is_some().then_some(Field::Max);
        [Field::Sum, Field::Min].into_iter().chain(max)
    }

    /// Make one field of the parent of group `group` of level `level` equal the fold of that
    /// field of its children: read the parent, then fold the children, and CAS the fold in
    /// when they differ, until a read parent equals the fold of the children read just
    /// after it. Returns whether one of our CASes succeeded (then the caller must climb on
    /// with this field).
    fn refresh_field(&self, level: usize, group: usize, field: Field) -> bool {
        by_fanout!(self.k, K => self.refresh_k::<K>(&self.field_level(level, field), group))
    }

    /// The refresh of group `group`'s parent in `at` (inlined into the climb, where the
    /// field is a constant and `at` is taken once per level).
    #[inline(always)]
    fn refresh_k<const K: usize>(&self, at: &FieldLevel<'_>, group: usize) -> bool {
        let parent = &at.parents[group];
        if !self.faults.verified_parent_stores() {
            // The broken twin: a blind store, no verification.
            parent.store(at.fold::<K>(group), SEQ);
            return true;
        }
        let mut installed = false;
        let mut old = parent.load(SEQ);
        loop {
            let new = at.fold::<K>(group);
            if new.to_bits() == old.to_bits() {
                return installed;
            }
            // The CAS is the next read of the parent: after a success the parent held `new`
            // at that point of the order, after a failure it held `current` (someone else
            // changed it); either way the loop folds the children again and compares.
            old = match parent.compare_exchange(old, new, SEQ, SEQ) {
                Ok(_) => {
                    installed = true;
                    new
                }
                Err(current) => current,
            };
        }
    }

    /// Store each `(leaf, value)` (checked by the caller; at most [`SET_MANY_MAX`] entries,
    /// distinct leaves) and bring the ancestors up to date in one climb: every leaf is stored
    /// first, then each level's touched parents are refreshed once each, whatever number of
    /// the entries lie below them (a batch of consecutive slots shares all but its lowest
    /// ancestors). The protocol is the module doc's: a field is climbed from a parent only by
    /// a thread whose CAS of it there succeeded, and every refresh ends with a verification.
    pub(crate) fn set_many(&self, entries: &[(usize, f64)]) {
        match entries.len() {
            0 => {}
            1 => self.climb::<1>(entries),
            _ => self.climb::<SET_MANY_MAX>(entries),
        }
    }

    /// `set_many` for at most M entries (the node lists are M-arrays on the stack: a single
    /// set does not clear room for 64).
    ///
    /// The fields climb apart, each on its own list of nodes: a thread climbs a field from a
    /// parent only if its CAS of that field there succeeded. The protocol's argument (module
    /// doc) is about one field and its children's same field, so it holds for each field
    /// alone; apart, a sum climbs without loading and comparing minima and maxima it did not
    /// change, and a minimum's climb usually ends a level or two up.
    fn climb<const M: usize>(&self, entries: &[(usize, f64)]) {
        debug_assert!(entries.len() <= M);
        let mut leaves = [0usize; M];
        for (&(i, value), node) in entries.iter().zip(leaves.iter_mut()) {
            self.store_leaf(i, value);
            *node = i;
        }
        self.climb_from::<M>(leaves, entries.len());
    }

    /// Store `value` (checked by the caller) at leaf `i` without climbing: the caller must
    /// follow it with [`Self::climb_leaves`] over a list holding `i`, or with a
    /// [`Self::set_many`] of leaf `i` (the protocol's "the last write to a child is followed
    /// by its writer's verification"), as the lock-free update does once the leaves of a
    /// chunk of keys are stored, each under its slot, and a writer does with its install
    /// after its retire (`buffer/lock_free.rs`).
    pub(crate) fn store_leaf(&self, i: usize, value: f64) {
        self.sum_at(self.leaf_level(), i).store(value, SEQ);
    }

    /// Bring the ancestors of `leaves` (stored with [`Self::store_leaf`]; at most
    /// [`SET_MANY_MAX`], repeats allowed) up to date in one climb, as `set_many` does.
    pub(crate) fn climb_leaves(&self, leaves: &[usize]) {
        debug_assert!(leaves.len() <= SET_MANY_MAX);
        let mut nodes = [0usize; SET_MANY_MAX];
        nodes[..leaves.len()].copy_from_slice(leaves);
        self.climb_from::<SET_MANY_MAX>(nodes, leaves.len());
    }

    /// The climb of `set_many` from the `n` stored leaves `leaves[..n]`
    /// ([`Self::climb_from_k`] for the tree's fanout).
    fn climb_from<const M: usize>(&self, leaves: [usize; M], n: usize) {
        by_fanout!(self.k, K => self.climb_from_k::<K, M>(leaves, n))
    }

    /// The climb for fanout `K`: one monomorphized climb per fanout and field, so that the
    /// folds and refreshes inline with constant sizes and no dispatch per node.
    fn climb_from_k<const K: usize, const M: usize>(&self, mut leaves: [usize; M], n: usize) {
        let mut level = self.leaf_level();
        // Sorted once: dividing by K keeps the order, and so does dropping nodes, so each
        // level's list stays sorted (the refreshes walk memory forward and a group's nodes
        // are adjacent, refreshed once).
        leaves[..n].sort_unstable();
        // A leaf write changes all three inputs of its parent: every list starts full.
        let (mut sums, mut mins, mut maxs) = (leaves, leaves, leaves);
        let (mut n_sum, mut n_min) = (n, n);
        let mut n_max = if self.maxs.is_some() { n } else { 0 };
        loop {
            n_sum = self.climb_level::<K, M>(level, &mut sums, n_sum, Field::Sum);
            n_min = self.climb_level::<K, M>(level, &mut mins, n_min, Field::Min);
            n_max = self.climb_level::<K, M>(level, &mut maxs, n_max, Field::Max);
            if (n_sum, n_min, n_max) == (0, 0, 0) || level == 0 {
                return;
            }
            level -= 1;
        }
    }

    /// One level of a climb of `field`: refresh the parent of each group of
    /// `nodes[..len]` (sorted, so a group's nodes are adjacent: refreshed once), and keep
    /// the parents whose CAS succeeded (they climb on). Returns how many were kept.
    #[inline(always)]
    fn climb_level<const K: usize, const M: usize>(
        &self,
        level: usize,
        nodes: &mut [usize; M],
        len: usize,
        field: Field,
    ) -> usize {
        if len == 0 {
            return 0;
        }
        let at = self.field_level(level, field);
        let shift = K.trailing_zeros(); // K is a power of two
        let mut kept = 0;
        let mut previous = usize::MAX;
        for j in 0..len {
            let group = nodes[j] >> shift;
            if group == previous {
                continue;
            }
            previous = group;
            if self.refresh_k::<K>(&at, group) {
                nodes[kept] = group;
                kept += 1;
            }
        }
        kept
    }

    /// Recompute every internal node from its children, bottom up, each through the same
    /// CAS-and-verify as a leaf write (so it may run beside writers; exact at quiescence).
    pub(crate) fn rebuild(&self) {
        for level in (0..=self.leaf_level()).rev() {
            for group in 0..self.layout.real(level).div_ceil(self.k) {
                self.refresh(level, group);
            }
        }
    }

    /// The sum of the leaves before leaf `i` (`i < len`), read level by level from the
    /// siblings to the left of `i`'s ancestors (as `KaryTree::prefix_before`).
    pub(crate) fn prefix_before(&self, i: usize) -> f64 {
        let mut sum = 0.0;
        let mut node = i;
        for level in (0..self.layout.depth()).rev() {
            for sibling in node - node % self.k..node {
                sum += self.sum_at(level, sibling).load(SEQ);
            }
            node /= self.k;
        }
        sum
    }

    /// The leaf whose prefix range holds `x`, descending through positive nodes only;
    /// `None` when a group on the way had no positive node (a concurrent update emptied
    /// it): the caller draws again.
    pub(crate) fn find_prefix(&self, x: f64) -> Option<usize> {
        let mut out = [0];
        self.find_prefix_batch(&[x], &mut out);
        (out[0] != NOT_FOUND).then_some(out[0])
    }

    /// [`Self::find_prefix`] for many targets, level by level in chunks so that the next
    /// level's groups can be prefetched while the current level is searched. `NOT_FOUND`
    /// where a descent found no positive node.
    pub(crate) fn find_prefix_batch(&self, targets: &[f64], out: &mut [usize]) {
        by_fanout!(self.k, K => self.find_prefix_batch_k::<K>(targets, out))
    }

    /// The batch descent for fanout `K` (each group loaded whole and searched without
    /// branches, see [`search_group`]).
    ///
    /// A target at or past the total (or NaN) is taken as the total: the last positive
    /// leaf. A target that falls past a group's children by more than rounding
    /// ([`PAST_END_TOLERANCE`] of the total) finds nothing: it fell in mass that the
    /// group's parent still counts and its children no longer hold (a leaf retired without
    /// a climb, `buffer/lock_free.rs`, or a climb in flight), and the caller draws again.
    /// Clamping it into the group's last positive child instead, as the descent once did,
    /// gave that child the stale share on top of its own.
    fn find_prefix_batch_k<const K: usize>(&self, targets: &[f64], out: &mut [usize]) {
        const CHUNK: usize = 64;
        let depth = self.layout.depth();
        let total = self.total();
        let tolerance = total * PAST_END_TOLERANCE;
        for (targets, out) in targets.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
            let mut x = [0.0; CHUNK];
            for (x, &t) in x.iter_mut().zip(targets) {
                // `min` takes the total for a NaN target.
                *x = t.min(total);
            }
            out.fill(0);
            for level in 0..depth {
                let nodes = self.field_nodes(level, Field::Sum);
                let next = (level + 1 < depth).then(|| self.layout.offset(level + 1));
                for (b, group) in out.iter_mut().enumerate() {
                    if *group == NOT_FOUND {
                        continue;
                    }
                    match search_group::<K>(nodes, *group, x[b], tolerance) {
                        Some((i, before)) => {
                            x[b] -= before;
                            *group = i;
                            if let Some(next) = next {
                                crate::mem::prefetch_line(
                                    self.sums.as_ptr().wrapping_add(next + i * K),
                                );
                            }
                        }
                        None => *group = NOT_FOUND,
                    }
                }
            }
        }
    }

    /// Compare every internal field with the fold of its children.
    pub(crate) fn check(&self) -> Consistency {
        let mut c = Consistency::default();
        let mut note = |stored: f64, exact: f64, extremum: bool| {
            if stored.to_bits() != exact.to_bits() {
                if extremum {
                    c.extrema_exact = false;
                } else {
                    c.exact = false;
                    let err = (stored - exact).abs();
                    c.max_abs_error = c.max_abs_error.max(err);
                    if exact != 0.0 {
                        c.max_rel_error = c.max_rel_error.max(err / exact.abs());
                    }
                }
            }
        };
        for level in 0..self.layout.depth() {
            let groups = if level == 0 {
                1
            } else {
                self.layout.real(level).div_ceil(self.k)
            };
            for group in 0..groups {
                let f = self.fold(level, group);
                let (sum, min, max) = self.parent_fields(level, group);
                note(sum.load(SEQ), f.sum, false);
                note(min.load(SEQ), f.min, true);
                if let Some(max) = max {
                    note(max.load(SEQ), f.max, true);
                }
            }
        }
        c
    }
}

#[cfg(all(test, not(loom)))]
#[path = "atomic_tests.rs"]
mod tests;
