//! The heap selectors' walk: the leaves of the largest (or smallest) positive priorities, in
//! order, read from a tree's extrema (`maxs`, `mins`) by a best-first search.
//!
//! The frontier starts as the root group's nodes; the search pops the node of the best
//! value, and expands it into its K children until a leaf comes out. A node's value is the
//! best leaf below it, so every leaf comes out after every better one. Ties go to the lower
//! leaf index: the frontier orders equal values by the first leaf a node covers, and two
//! nodes of the frontier cover disjoint runs of leaves, so a node covering lower leaves
//! than a tied leaf is expanded first, and its tied leaves come out first.
//!
//! A leaf of 0 (an empty slot, a retired item, a priority of 0) is never ranked, nor is a
//! node with no positive leaf below it. Beside concurrent writers (the atomic tree) a node
//! may disagree with its children for a moment: the order is then the one of the values the
//! search read, and exact at quiescence.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::layout::Layout;

/// Which end of the priorities a heap selector takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extreme {
    /// The largest priority first ([`SampleMode::MaxHeap`](crate::SampleMode::MaxHeap)).
    Largest,
    /// The smallest positive priority first
    /// ([`SampleMode::MinHeap`](crate::SampleMode::MinHeap)).
    Smallest,
}

/// A node of the frontier: `better` orders by value (the larger the better: the value, or
/// its negation for [`Extreme::Smallest`]), then by the first leaf it covers (lower first).
#[derive(Debug, Clone, Copy)]
struct Node {
    better: f64,
    first_leaf: usize,
    level: usize,
    index: usize,
}

impl PartialEq for Node {
    fn eq(&self, other: &Node) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Node {}

impl PartialOrd for Node {
    fn partial_cmp(&self, other: &Node) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Node {
    fn cmp(&self, other: &Node) -> Ordering {
        self.better
            .total_cmp(&other.better)
            .then(other.first_leaf.cmp(&self.first_leaf))
    }
}

/// The leaves of the `m` best positive values of a tree of `layout` and fanout `k`, into
/// `out` (cleared first), best first, ties by the lower leaf: fewer when fewer leaves are
/// positive. `value(level, i)` reads node `i` of `level`: above the leaves its extremum for
/// `extreme` (the largest leaf below it, or `+inf` where the tree keeps no maxima and a leaf
/// below it is positive; the smallest positive leaf below it, `+inf` for none), at the
/// leaves the leaf.
pub(crate) fn rank_leaves(
    layout: &Layout,
    k: usize,
    extreme: Extreme,
    m: usize,
    value: impl Fn(usize, usize) -> f64,
    out: &mut Vec<usize>,
) {
    out.clear();
    let leaf_level = layout.depth() - 1;
    // Leaves a node of each level covers: k^(leaf_level - level).
    let mut stride = vec![1usize; layout.depth()];
    for level in (0..leaf_level).rev() {
        stride[level] = stride[level + 1].saturating_mul(k);
    }
    let better = |v: f64| -> Option<f64> {
        // A value of no positive leaf: 0 (a leaf, or a maximum), `+inf` (a minimum). A tree
        // that keeps no maxima gives `+inf` for a node with a positive leaf below it: such a
        // node is expanded before any leaf comes out (the walk visits every positive leaf).
        match extreme {
            Extreme::Largest => (v > 0.0).then_some(v),
            Extreme::Smallest => (v > 0.0 && v.is_finite()).then_some(-v),
        }
    };
    let mut frontier = BinaryHeap::new();
    let push = |frontier: &mut BinaryHeap<Node>, level: usize, index: usize| {
        if index < layout.real(level) {
            if let Some(better) = better(value(level, index)) {
                frontier.push(Node {
                    better,
                    first_leaf: index * stride[level],
                    level,
                    index,
                });
            }
        }
    };
    for index in 0..k {
        push(&mut frontier, 0, index);
    }
    while out.len() < m {
        let Some(node) = frontier.pop() else { break };
        if node.level == leaf_level {
            out.push(node.index);
            continue;
        }
        for child in node.index * k..node.index * k + k {
            push(&mut frontier, node.level + 1, child);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The reference: every positive leaf, sorted best first, ties by index.
    fn sorted(leaves: &[f64], extreme: Extreme, m: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..leaves.len()).filter(|&i| leaves[i] > 0.0).collect();
        order.sort_by(|&a, &b| {
            let by_value = match extreme {
                Extreme::Largest => leaves[b].total_cmp(&leaves[a]),
                Extreme::Smallest => leaves[a].total_cmp(&leaves[b]),
            };
            by_value.then(a.cmp(&b))
        });
        order.truncate(m);
        order
    }

    /// A layout's extrema computed from its leaves, as the trees keep them.
    fn ranked(leaves: &[f64], k: usize, extreme: Extreme, m: usize) -> Vec<usize> {
        let layout = Layout::new(leaves.len(), k);
        let leaf_level = layout.depth() - 1;
        let below = |level: usize, i: usize| -> &[f64] {
            let span = k.pow((leaf_level - level) as u32);
            let start = (i * span).min(leaves.len());
            &leaves[start..(start + span).min(leaves.len())]
        };
        let value = |level: usize, i: usize| {
            if level == leaf_level {
                return leaves[i];
            }
            let positive = below(level, i).iter().copied().filter(|&v| v > 0.0);
            match extreme {
                Extreme::Largest => positive.fold(0.0, f64::max),
                Extreme::Smallest => positive.fold(f64::INFINITY, f64::min),
            }
        };
        let mut out = Vec::new();
        rank_leaves(&layout, k, extreme, m, value, &mut out);
        out
    }

    #[test]
    fn the_walk_ranks_as_a_sort_with_ties_by_index() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for &len in &[1usize, 2, 3, 7, 8, 9, 63, 64, 65, 300, 1000] {
            for &k in &[2usize, 4, 8, 16] {
                // Few distinct values, so that ties are common; zeros among them.
                let leaves: Vec<f64> = (0..len)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        (state % 5) as f64 * 0.5
                    })
                    .collect();
                for extreme in [Extreme::Largest, Extreme::Smallest] {
                    for m in [1, 3, len, len + 5] {
                        assert_eq!(
                            ranked(&leaves, k, extreme, m),
                            sorted(&leaves, extreme, m),
                            "len {len}, k {k}, {extreme:?}, m {m}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn no_positive_leaf_ranks_nothing() {
        for extreme in [Extreme::Largest, Extreme::Smallest] {
            assert!(ranked(&[0.0; 20], 4, extreme, 5).is_empty());
        }
    }
}
