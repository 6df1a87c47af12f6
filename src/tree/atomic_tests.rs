//! Tests of the lock-free sum tree: exact sums, stale mass and the group search.

use super::*;

#[test]
fn sets_keep_the_tree_exact_and_descents_match_a_scan() {
    for k in [2, 4, 8, 16] {
        for len in [1, 2, 3, k, k + 1, 100, 1000] {
            let tree = AtomicSumTree::new(len, k, true).unwrap();
            let mut reference = vec![0.0; len];
            for step in 0..3 * len {
                let i = (step * 7919) % len;
                let p = if step % 5 == 0 {
                    0.0
                } else {
                    (step % 13) as f64 + 0.25
                };
                tree.set_many(&[(i, p)]);
                reference[i] = p;
            }
            let c = tree.check();
            assert!(c.exact && c.extrema_exact, "k={k} len={len}: {c:?}");
            let total: f64 = reference.iter().sum();
            assert_eq!(tree.total(), tree.fold(0, 0).sum);
            assert!((tree.total() - total).abs() <= 1e-9 * total.max(1.0));
            let min = reference
                .iter()
                .copied()
                .filter(|&p| p > 0.0)
                .fold(f64::INFINITY, f64::min);
            assert_eq!(tree.min_positive(), min.is_finite().then_some(min));
            let max = reference.iter().copied().fold(0.0, f64::max);
            assert_eq!(tree.max_leaf(), Some(max));
            // Integer-and-quarter priorities: prefix sums are exact, so the descent
            // must match a linear scan exactly.
            let mut prefix = 0.0;
            for (i, &p) in reference.iter().enumerate() {
                if p > 0.0 {
                    assert_eq!(tree.find_prefix(prefix), Some(i));
                    assert_eq!(tree.find_prefix(prefix + p * 0.5), Some(i));
                }
                prefix += p;
            }
            if total > 0.0 {
                let last = reference.iter().rposition(|&p| p > 0.0);
                assert_eq!(tree.find_prefix(total), last);
                assert_eq!(tree.find_prefix(total * 4.0), last);
            } else {
                assert_eq!(tree.find_prefix(0.0), None);
            }
        }
    }
}

/// A leaf stored without a climb (a LockFree retire) leaves its mass in its ancestors:
/// the targets that fall in it find nothing (the sampler draws again) instead of going
/// to the group's last positive child, so every other leaf keeps exactly its share;
/// once the climb is made, no target is lost. Also at the top level (a tree of one
/// group, whose parent is the root).
#[test]
fn stale_mass_is_drawn_again_not_given_to_a_neighbour() {
    for (len, k) in [(16, 4), (4, 4)] {
        let tree = AtomicSumTree::new(len, k, false).unwrap();
        let ones: Vec<(usize, f64)> = (0..len).map(|i| (i, 1.0)).collect();
        tree.set_many(&ones);
        tree.store_leaf(1, 0.0);
        assert_eq!(tree.total(), len as f64, "no climb yet");
        // 1,000 targets per unit of mass.
        let mut drawn = vec![0usize; len];
        let mut not_found = 0;
        for t in 0..1000 * len {
            match tree.find_prefix((t as f64 + 0.5) / 1000.0) {
                Some(i) => drawn[i] += 1,
                None => not_found += 1,
            }
        }
        assert_eq!(drawn[1], 0, "len={len}: the retired leaf");
        for (i, &n) in drawn.iter().enumerate().filter(|&(i, _)| i != 1) {
            assert_eq!(n, 1000, "len={len}: leaf {i} got another's share");
        }
        assert_eq!(not_found, 1000, "len={len}");
        // The climb: the tree is exact again and every target finds a leaf.
        tree.set_many(&[(1, 0.0)]);
        assert!(tree.check().exact);
        assert!((0..1000).all(|t| tree.find_prefix(t as f64 * 0.015).is_some()));
    }
}

/// At quiescence no target is taken for stale mass, whatever the rounding: leaves that
/// went from large to small (1e8 down to 1e-8, some kept large), so the sums round at
/// every level, and targets over the whole range, at its ends and past it. (With no
/// tolerance for rounding, `PAST_END_TOLERANCE` = 0, this fails.)
#[test]
fn rounding_is_not_stale_mass() {
    for k in [2, 8, 64] {
        let len = 5000;
        let tree = AtomicSumTree::new(len, k, false).unwrap();
        let large: Vec<(usize, f64)> = (0..len).map(|i| (i, 1e8 + i as f64)).collect();
        for chunk in large.chunks(SET_MANY_MAX) {
            tree.set_many(chunk);
        }
        for i in 0..len {
            let p = if i % 97 == 0 {
                3e7 / (1 + i) as f64
            } else {
                1e-8 * (1 + i % 13) as f64
            };
            tree.set_many(&[(i, p)]);
        }
        assert!(tree.check().exact);
        let total = tree.total();
        let n = 100_000;
        let mut xs: Vec<f64> = (0..n).map(|t| total * t as f64 / n as f64).collect();
        xs.extend([
            0.0,
            total,
            total * (1.0 - f64::EPSILON),
            total * 2.0,
            f64::NAN,
        ]);
        for x in xs {
            assert!(tree.find_prefix(x).is_some(), "k={k} x={x} total={total}");
        }
    }
}

/// The branch-free group search gives the serial scan's child and `before`, bit for
/// bit, on groups with zeros, rounding, partial groups and targets at and past the
/// edges (negative, NaN, infinite).
#[test]
fn group_search_is_the_serial_scan() {
    fn check<const K: usize>(values: &[f64], xs: &[f64]) {
        let nodes: Vec<AtomicF64> = values.iter().map(|&v| AtomicF64::new(v)).collect();
        for group in 0..values.len().div_ceil(K) {
            let real = &values[group * K..values.len().min(group * K + K)];
            for &x in xs {
                let fast = search_group::<K>(&nodes, group, x, f64::INFINITY);
                let serial = search_group_serial(real, group * K, x, f64::INFINITY);
                assert_eq!(
                    fast.map(|(i, b)| (i, b.to_bits())),
                    serial.map(|(i, b)| (i, b.to_bits())),
                    "K={K} group={group} x={x} values={real:?}"
                );
            }
        }
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..400 {
        let len = 1 + (next() % 40) as usize;
        let values: Vec<f64> = (0..len)
            .map(|_| match next() % 4 {
                0 => 0.0,
                1 => 0.1 * (next() % 7) as f64,
                2 => 1e-300 * (next() % 3) as f64,
                _ => (next() % 1000) as f64 / 3.0,
            })
            .collect();
        let total: f64 = values.iter().sum();
        let mut xs = vec![-1.0, -0.0, 0.0, f64::NAN, f64::INFINITY, total, total * 2.0];
        let mut prefix = 0.0;
        for &v in &values {
            xs.extend([prefix, prefix + v, prefix + v * 0.5]);
            prefix += v;
        }
        xs.extend((0..8).map(|_| total * (next() % 1001) as f64 / 1000.0));
        match round % 4 {
            0 => check::<2>(&values, &xs),
            1 => check::<4>(&values, &xs),
            2 => check::<8>(&values, &xs),
            _ => check::<16>(&values, &xs),
        }
    }
}
