//! The implicit, pointer-free layout shared by every tree in the crate.
//!
//! Levels are stored top to bottom in one allocation. Level 0 is the root group (the K
//! children of the conceptual root, padded to K); the last level holds the leaves, padded
//! to a whole number of groups. Each level starts on a 64-byte boundary. A group of K
//! `f64` (8K bytes) therefore starts on a 64-byte boundary for K >= 8 and, for K < 8,
//! lies inside one cache line (8K divides 64): no group ever straddles two lines.
//!
//! Node `i` of level `l` lives at `offset(l) + i`; its children are nodes
//! `i*K .. i*K + K` of level `l + 1`, and its parent is node `i / K` of level `l - 1`.

/// `f64`s per 64-byte cache line.
pub(crate) const LINE: usize = 8;

/// Level offsets and sizes of a tree with `leaves` leaves and fanout `k`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Offset (in `f64`s) of each level, top to bottom.
    offsets: Vec<usize>,
    /// Real (unpadded) node count of each level.
    real: Vec<usize>,
    /// Total `f64`s in the allocation.
    total: usize,
}

impl Layout {
    pub(crate) fn new(leaves: usize, k: usize) -> Layout {
        assert!(leaves >= 1 && k >= 2);
        // Real node counts bottom-up until a level fits in one group.
        let mut real = vec![leaves];
        while *real.last().unwrap() > k {
            let n = *real.last().unwrap();
            real.push(n.div_ceil(k));
        }
        real.reverse();
        let mut offsets = Vec::with_capacity(real.len());
        let mut total = 0;
        for &n in &real {
            offsets.push(total);
            let padded = n.div_ceil(k) * k;
            total += padded.div_ceil(LINE) * LINE;
        }
        Layout {
            offsets,
            real,
            total,
        }
    }

    /// Number of levels, leaves included (1 when the leaves are the root group).
    #[inline]
    pub(crate) fn depth(&self) -> usize {
        self.offsets.len()
    }

    #[inline]
    pub(crate) fn offset(&self, level: usize) -> usize {
        self.offsets[level]
    }

    /// Real nodes of a level (the leaf level's is the tree's length).
    #[inline]
    pub(crate) fn real(&self, level: usize) -> usize {
        self.real[level]
    }

    /// `f64`s in the whole allocation, leaves included.
    #[inline]
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// `f64`s of the internal levels (everything above the leaves).
    #[inline]
    pub(crate) fn internal_total(&self) -> usize {
        self.offsets[self.depth() - 1]
    }
}

/// A buffer of `f64`s (or of 8-byte `AtomicF64`s) whose first element sits on a 64-byte
/// boundary: the sequential tree's nodes and the atomic tree's.
///
/// Over-allocates by one line and starts at the first aligned element. The `Vec` is
/// never resized, so the alignment holds for its whole life. Safe code only. (Under loom
/// an `AtomicF64` is larger than 8 bytes and the start is merely some element: the models
/// do not care about cache lines.)
#[derive(Debug, Clone)]
pub(crate) struct AlignedBuf<T = f64> {
    raw: Vec<T>,
    start: usize,
    len: usize,
}

impl AlignedBuf<f64> {
    /// `len` copies of `fill`, or `None` when the allocation fails.
    pub(crate) fn try_new(len: usize, fill: f64) -> Option<AlignedBuf> {
        AlignedBuf::try_new_with(len, || fill)
    }
}

impl<T> AlignedBuf<T> {
    /// `len` elements made by `fill`, or `None` when the allocation fails.
    pub(crate) fn try_new_with(len: usize, mut fill: impl FnMut() -> T) -> Option<AlignedBuf<T>> {
        let mut raw = Vec::new();
        raw.try_reserve_exact(len.checked_add(LINE)?).ok()?;
        raw.extend((0..len + LINE).map(|_| fill()));
        let misalign = (raw.as_ptr() as usize / 8) % LINE;
        let start = (LINE - misalign) % LINE;
        Some(AlignedBuf { raw, start, len })
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[T] {
        &self.raw[self.start..self.start + self.len]
    }

    #[inline]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.raw[self.start..self.start + self.len]
    }

    pub(crate) fn bytes(&self) -> usize {
        self.raw.capacity() * std::mem::size_of::<T>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_group_when_leaves_fit() {
        for k in [2, 4, 8, 16, 32, 64] {
            for n in 1..=k {
                let l = Layout::new(n, k);
                assert_eq!(l.depth(), 1, "k={k} n={n}");
                assert_eq!(l.internal_total(), 0);
                assert!(l.total() >= k);
            }
        }
    }

    #[test]
    fn levels_are_line_aligned_and_hold_their_groups() {
        for k in [2, 4, 8, 16, 32, 64] {
            for n in [k + 1, 3 * k + 1, 1000, 1 << 20] {
                let l = Layout::new(n, k);
                assert_eq!(l.real(l.depth() - 1), n);
                assert!(l.real(0) <= k);
                for lev in 0..l.depth() {
                    assert_eq!(l.offset(lev) % LINE, 0);
                    let padded = l.real(lev).div_ceil(k) * k;
                    let end = if lev + 1 < l.depth() {
                        l.offset(lev + 1)
                    } else {
                        l.total()
                    };
                    assert!(l.offset(lev) + padded <= end);
                    if lev > 0 {
                        assert_eq!(l.real(lev - 1), l.real(lev).div_ceil(k));
                    }
                }
            }
        }
    }

    #[test]
    fn aligned_buf_is_aligned() {
        for len in [1, 7, 8, 100] {
            let b = AlignedBuf::try_new(len, 0.0).unwrap();
            assert_eq!(b.as_slice().as_ptr() as usize % 64, 0);
            assert_eq!(b.as_slice().len(), len);
        }
        assert!(AlignedBuf::try_new(usize::MAX / 2, 0.0).is_none());
    }
}
