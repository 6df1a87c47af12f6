//! The K-ary sum tree: N leaves of priorities, every internal node the sum of its K
//! children, in one cache-aligned, pointer-free allocation (see `layout`).
//!
//! The fanout is chosen at run time ([`Fanout`]); inside, each fanout has its own
//! monomorphized tree so that the group search is unrolled for its K.
//!
//! | operation | cost |
//! |---|---|
//! | [`SumTree::get`], [`SumTree::total`], [`SumTree::min_positive`] | O(1) (O(K) for the last two) |
//! | [`SumTree::set`] | O(K log_K N): each touched parent recomputed from its K children (one line) |
//! | [`SumTree::find_prefix`] | O(K log_K N), branch-free inside each group |
//! | [`SumTree::find_prefix_batch`] | the same per item, level by level with prefetching |
//! | [`SumTree::rebuild`], [`SumTree::check`] | O(N) |

mod atomic;
mod kary;
mod layout;
mod rank;

use crate::error::{Error, Result};
pub(crate) use atomic::{AtomicSumTree, NOT_FOUND, SET_MANY_MAX};
use kary::KaryTree;
pub(crate) use rank::Extreme;

/// The number of children of every internal node.
///
/// ```
/// use kary_replay::Fanout;
/// assert_eq!(Fanout::new(16).unwrap().get(), 16);
/// assert!(Fanout::new(3).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fanout(usize);

impl Fanout {
    /// Every supported fanout, smallest first.
    pub const ALL: [Fanout; 6] = [
        Fanout(2),
        Fanout(4),
        Fanout(8),
        Fanout(16),
        Fanout(32),
        Fanout(64),
    ];

    /// The fanout `k`, if it is one of 2, 4, 8, 16, 32, 64.
    pub fn new(k: usize) -> Result<Fanout> {
        if Fanout::ALL.iter().any(|f| f.0 == k) {
            Ok(Fanout(k))
        } else {
            Err(Error::UnsupportedFanout(k))
        }
    }

    /// The fanout as a number.
    pub fn get(self) -> usize {
        self.0
    }
}

impl Default for Fanout {
    /// 8: the fastest sample and learner step up to N = 2^20 on the development machine, and
    /// the largest speed-up over the binary tree (docs/performance.md, "The tree and the
    /// sequential buffer").
    fn default() -> Fanout {
        Fanout(8)
    }
}

/// How far the stored internal nodes are from the fixed-order sums of their children.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Consistency {
    /// Largest `|stored - sum of children|` over all internal nodes.
    pub max_abs_error: f64,
    /// Largest `|stored - sum| / |sum|` over internal nodes with a nonzero sum.
    pub max_rel_error: f64,
    /// Whether every internal node equals its children's sum bit for bit.
    pub exact: bool,
    /// Whether the companion minimum (and maximum) nodes are exact; they always should be.
    pub extrema_exact: bool,
}

impl Default for Consistency {
    fn default() -> Consistency {
        Consistency {
            max_abs_error: 0.0,
            max_rel_error: 0.0,
            exact: true,
            extrema_exact: true,
        }
    }
}

impl Consistency {
    fn record_sum(&mut self, stored: f64, expected: f64) {
        let err = (stored - expected).abs();
        self.exact &= stored.to_bits() == expected.to_bits();
        self.max_abs_error = self.max_abs_error.max(err);
        if expected != 0.0 {
            self.max_rel_error = self.max_rel_error.max(err / expected.abs());
        }
    }
}

#[derive(Debug, Clone)]
enum Inner {
    K2(KaryTree<2>),
    K4(KaryTree<4>),
    K8(KaryTree<8>),
    K16(KaryTree<16>),
    K32(KaryTree<32>),
    K64(KaryTree<64>),
}

macro_rules! dispatch {
    ($inner:expr, $t:ident => $body:expr) => {
        match $inner {
            Inner::K2($t) => $body,
            Inner::K4($t) => $body,
            Inner::K8($t) => $body,
            Inner::K16($t) => $body,
            Inner::K32($t) => $body,
            Inner::K64($t) => $body,
        }
    };
}

/// The sum of a sibling group in the one fixed order every tree in the crate uses:
/// pairwise by halves (`g[i] + g[i + K/2]`, then again on the K/2 partial sums, down to one).
/// Every internal node is this function of its K children (padding children are 0), so a
/// node is determined by the current leaves alone: no rounding from earlier values survives.
/// The order is pairwise rather than left to right because a leaf write recomputes one
/// group per level in a dependent chain: log2(K) adds of latency instead of K.
///
/// On x86_64 the halving runs on SSE2 pairs (`addpd`, part of the x86_64 baseline): lane `l`
/// of pair `j` is child `2j + l`, so adding pair `j + n` to pair `j` is exactly the scalar
/// step on children `2j` and `2j + 1`, and each lane rounds as a scalar add does (IEEE
/// round-to-nearest, no fused operation): the result is bit-for-bit the scalar order's, in
/// half the instructions (LLVM leaves the scalar form unvectorized).
#[inline(always)]
pub(crate) fn group_sum<const K: usize>(group: &[f64; K]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if K >= 4 {
        use core::arch::x86_64::{
            _mm_add_pd, _mm_cvtsd_f64, _mm_loadu_pd, _mm_set_pd, _mm_unpackhi_pd,
        };
        // SAFETY: SSE2 is part of the x86_64 baseline, so these intrinsics run on every
        // x86_64 target; each load reads two f64 at `2j < K` inside `group`.
        unsafe {
            let mut pairs = [_mm_set_pd(0.0, 0.0); 32];
            for (j, pair) in pairs.iter_mut().take(K / 2).enumerate() {
                *pair = _mm_loadu_pd(group.as_ptr().add(2 * j));
            }
            let mut n = K / 2;
            while n > 1 {
                n /= 2;
                for j in 0..n {
                    pairs[j] = _mm_add_pd(pairs[j], pairs[j + n]);
                }
            }
            let hi = _mm_unpackhi_pd(pairs[0], pairs[0]);
            return _mm_cvtsd_f64(pairs[0]) + _mm_cvtsd_f64(hi);
        }
    }
    group_sum_scalar(group)
}

/// [`group_sum`]'s order, one scalar add at a time (the reference the SIMD form must equal).
#[inline(always)]
pub(crate) fn group_sum_scalar<const K: usize>(group: &[f64; K]) -> f64 {
    let mut partial = *group;
    let mut n = K;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            partial[i] += partial[i + n];
        }
    }
    partial[0]
}

/// Largest stored priority accepted, so that the sum of a full tree stays finite.
pub const MAX_PRIORITY: f64 = 1e250;

/// Largest capacity (leaves) of a tree or buffer.
pub const MAX_CAPACITY: usize = 1 << 40;

/// Checks a priority about to be stored: finite, >= 0, <= [`MAX_PRIORITY`].
pub(crate) fn check_priority(position: usize, value: f64) -> Result<()> {
    check_priority_within(position, value, MAX_PRIORITY)
}

/// Checks a priority: finite, >= 0, <= `max` (at most [`MAX_PRIORITY`]; the error names
/// [`MAX_PRIORITY`], the bound of what is stored).
pub(crate) fn check_priority_within(position: usize, value: f64, max: f64) -> Result<()> {
    if (0.0..=max).contains(&value) {
        Ok(())
    } else {
        Err(Error::InvalidPriority {
            position,
            value,
            max: MAX_PRIORITY,
        })
    }
}

/// A K-ary sum tree over `len` priorities (all 0 at first).
///
/// ```
/// use kary_replay::{Fanout, SumTree};
/// let mut tree = SumTree::new(5, Fanout::new(4)?)?;
/// for (i, p) in [1.0, 0.0, 2.0, 3.0, 0.5].into_iter().enumerate() {
///     tree.set(i, p)?;
/// }
/// assert_eq!(tree.total(), 6.5);
/// assert_eq!(tree.find_prefix(0.5), Some(0)); // prefix sums: 1, 1, 3, 6, 6.5
/// assert_eq!(tree.find_prefix(1.0), Some(2)); // leaf 1 has priority 0: skipped
/// assert_eq!(tree.find_prefix(6.5), Some(4)); // x == total: the last positive leaf
/// assert_eq!(tree.min_positive(), Some(0.5));
/// # Ok::<(), kary_replay::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SumTree {
    inner: Inner,
    fanout: Fanout,
}

impl SumTree {
    /// A tree of `len` leaves, all 0.
    pub fn new(len: usize, fanout: Fanout) -> Result<SumTree> {
        SumTree::build(len, fanout, false)
    }

    /// Like [`SumTree::new`], and also keeps the largest leaf ([`SumTree::max_leaf`]).
    pub fn with_max(len: usize, fanout: Fanout) -> Result<SumTree> {
        SumTree::build(len, fanout, true)
    }

    /// [`SumTree::with_max`] when `track_max`, else [`SumTree::new`].
    pub(crate) fn build(len: usize, fanout: Fanout, track_max: bool) -> Result<SumTree> {
        if len == 0 || len > MAX_CAPACITY {
            return Err(Error::InvalidCapacity(len));
        }
        let alloc = Error::Allocation {
            bytes: len.saturating_mul(8),
        };
        let inner = match fanout.get() {
            2 => Inner::K2(KaryTree::try_new(len, track_max).ok_or(alloc)?),
            4 => Inner::K4(KaryTree::try_new(len, track_max).ok_or(alloc)?),
            8 => Inner::K8(KaryTree::try_new(len, track_max).ok_or(alloc)?),
            16 => Inner::K16(KaryTree::try_new(len, track_max).ok_or(alloc)?),
            32 => Inner::K32(KaryTree::try_new(len, track_max).ok_or(alloc)?),
            64 => Inner::K64(KaryTree::try_new(len, track_max).ok_or(alloc)?),
            k => return Err(Error::UnsupportedFanout(k)),
        };
        Ok(SumTree { inner, fanout })
    }

    /// Number of leaves.
    #[inline]
    pub fn len(&self) -> usize {
        dispatch!(&self.inner, t => t.len())
    }

    /// Always false: a tree has at least one leaf. (Present for the `len` convention.)
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The fanout K.
    pub fn fanout(&self) -> Fanout {
        self.fanout
    }

    /// Priority of leaf `i`, exactly as set.
    #[inline]
    pub fn get(&self, i: usize) -> Result<f64> {
        self.check_index(i)?;
        Ok(dispatch!(&self.inner, t => t.get(i)))
    }

    /// Set leaf `i` to `priority` (finite, `>= 0`, `<=` [`MAX_PRIORITY`]).
    #[inline]
    pub fn set(&mut self, i: usize, priority: f64) -> Result<()> {
        self.check_index(i)?;
        check_priority(0, priority)?;
        dispatch!(&mut self.inner, t => t.set(i, priority));
        Ok(())
    }

    /// Set `indices[j]` to `priorities[j]` for every j, in order (a repeated index: the last
    /// value wins). Everything is validated first: on error nothing changes. The batch is
    /// written level by level (leaves first, then each level's touched parents), so the work
    /// of its items overlaps instead of queueing one after another.
    ///
    /// ```
    /// use kary_replay::{Fanout, SumTree};
    /// let mut tree = SumTree::new(10, Fanout::new(4)?)?;
    /// tree.set_batch(&[3, 7, 3], &[1.0, 2.0, 5.0])?;
    /// assert_eq!(tree.total(), 7.0);
    /// assert!(tree.set_batch(&[1], &[f64::NAN]).is_err());
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn set_batch(&mut self, indices: &[usize], priorities: &[f64]) -> Result<()> {
        if indices.len() != priorities.len() {
            return Err(Error::LengthMismatch {
                what: "priorities",
                expected: indices.len(),
                got: priorities.len(),
            });
        }
        for (position, (&i, &p)) in indices.iter().zip(priorities).enumerate() {
            self.check_index(i)?;
            check_priority(position, p)?;
        }
        self.set_many_unchecked(indices.iter().copied().zip(priorities.iter().copied()));
        Ok(())
    }

    /// Set many leaves, in order (a repeated index: the last value wins), without checks: the
    /// caller has validated every index and priority. Leaves are written a chunk at a time and
    /// the internal levels brought up to date level by level, so the work of the chunk's items
    /// overlaps (several times faster than one [`SumTree::set`] after another).
    #[inline]
    pub(crate) fn set_many_unchecked(&mut self, items: impl IntoIterator<Item = (usize, f64)>) {
        dispatch!(&mut self.inner, t => t.set_many(items))
    }

    /// Set leaf `i` without checks; the caller has validated both.
    #[inline]
    pub(crate) fn set_unchecked(&mut self, i: usize, priority: f64) {
        dispatch!(&mut self.inner, t => t.set(i, priority))
    }

    #[inline]
    pub(crate) fn get_unchecked(&self, i: usize) -> f64 {
        dispatch!(&self.inner, t => t.get(i))
    }

    fn check_index(&self, i: usize) -> Result<()> {
        if i < self.len() {
            Ok(())
        } else {
            Err(Error::OutOfRange {
                index: i,
                capacity: self.len(),
            })
        }
    }

    /// Sum of all leaves (the root group, added in fixed order).
    #[inline]
    pub fn total(&self) -> f64 {
        dispatch!(&self.inner, t => t.total())
    }

    /// Whether some leaf is positive (exact, unaffected by rounding of the sums).
    #[inline]
    pub fn has_positive(&self) -> bool {
        dispatch!(&self.inner, t => t.has_positive())
    }

    /// The smallest positive leaf, or `None` when every leaf is 0.
    pub fn min_positive(&self) -> Option<f64> {
        dispatch!(&self.inner, t => t.min_positive())
    }

    /// The largest leaf, for trees made with [`SumTree::with_max`].
    pub fn max_leaf(&self) -> Option<f64> {
        dispatch!(&self.inner, t => t.max_leaf())
    }

    /// The leaves of the `m` largest (smallest) positive priorities, best first, ties by the
    /// lower leaf, into `out` (cleared first): a heap selector's order.
    pub(crate) fn rank(&self, extreme: Extreme, m: usize, out: &mut Vec<usize>) {
        dispatch!(&self.inner, t => t.rank(extreme, m, out))
    }

    /// The smallest leaf index `i` whose inclusive prefix sum exceeds `x` (inverse CDF).
    ///
    /// `x` is clamped to `[0, total]` (NaN counts as 0). The result is always below
    /// [`SumTree::len`] and always a positive leaf, whatever the rounding: `x == total`
    /// gives the last positive leaf. `None` when every leaf is 0.
    #[inline]
    pub fn find_prefix(&self, x: f64) -> Option<usize> {
        dispatch!(&self.inner, t => t.has_positive().then(|| t.find_prefix(x)))
    }

    /// [`SumTree::find_prefix`] of a tree known to hold a positive leaf.
    pub(crate) fn find_prefix_unchecked(&self, x: f64) -> usize {
        dispatch!(&self.inner, t => t.find_prefix(x))
    }

    /// The sum of the leaves before leaf `i` (`i < len`), as the descent's nodes hold it.
    pub(crate) fn prefix_before(&self, i: usize) -> f64 {
        dispatch!(&self.inner, t => t.prefix_before(i))
    }

    /// [`SumTree::find_prefix`] for a batch, walked level by level with prefetching.
    ///
    /// ```
    /// use kary_replay::{Fanout, SumTree};
    /// let mut tree = SumTree::new(100, Fanout::new(8)?)?;
    /// for i in 0..100 { tree.set(i, 1.0)?; }
    /// let mut out = [0; 3];
    /// tree.find_prefix_batch(&[0.5, 42.0, 99.9], &mut out)?;
    /// assert_eq!(out, [0, 42, 99]);
    /// # Ok::<(), kary_replay::Error>(())
    /// ```
    pub fn find_prefix_batch(&self, targets: &[f64], out: &mut [usize]) -> Result<()> {
        if targets.len() != out.len() {
            return Err(Error::LengthMismatch {
                what: "out",
                expected: targets.len(),
                got: out.len(),
            });
        }
        if !self.has_positive() {
            return Err(Error::ZeroTotalPriority);
        }
        self.find_prefix_batch_unchecked(targets, out);
        Ok(())
    }

    #[inline]
    pub(crate) fn find_prefix_batch_unchecked(&self, targets: &[f64], out: &mut [usize]) {
        dispatch!(&self.inner, t => t.find_prefix_batch(targets, out))
    }

    /// Recompute every internal node from its children. [`SumTree::set`] already keeps every
    /// node equal to the fixed-order sum of its children, so this changes nothing on a
    /// tree that only `set` has touched; it is the repair for a tree whose check fails.
    pub fn rebuild(&mut self) {
        dispatch!(&mut self.inner, t => t.rebuild())
    }

    /// Compare every internal node with the fixed-order sum of its children.
    pub fn check(&self) -> Consistency {
        dispatch!(&self.inner, t => t.check())
    }

    /// Set every leaf to 0.
    pub fn clear(&mut self) {
        dispatch!(&mut self.inner, t => t.clear())
    }

    /// Levels, leaves included (introspection for tests and tools).
    pub fn depth(&self) -> usize {
        dispatch!(&self.inner, t => t.depth())
    }

    /// Real (unpadded) nodes of `level` (0 = the root group's level).
    pub fn level_len(&self, level: usize) -> usize {
        dispatch!(&self.inner, t => t.level_len(level))
    }

    /// Node `i` of `level` as stored (introspection; panics when out of range).
    pub fn node(&self, level: usize, i: usize) -> f64 {
        assert!(level < self.depth() && i < self.level_len(level));
        dispatch!(&self.inner, t => t.node(level, i))
    }

    /// Bytes held by the tree's arrays.
    pub fn memory_bytes(&self) -> usize {
        dispatch!(&self.inner, t => t.memory_bytes())
    }
}

#[cfg(test)]
mod tests;
