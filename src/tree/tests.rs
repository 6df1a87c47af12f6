use super::*;
use rand::{rngs::SmallRng, Rng, SeedableRng};

fn tree_with(k: usize, leaves: &[f64]) -> SumTree {
    let mut t = SumTree::new(leaves.len(), Fanout::new(k).unwrap()).unwrap();
    for (i, &p) in leaves.iter().enumerate() {
        t.set(i, p).unwrap();
    }
    t
}

/// Reference: smallest i with inclusive prefix > x, with x clamped and x >= total mapped
/// to the last positive leaf.
fn reference(leaves: &[f64], x: f64) -> Option<usize> {
    let mut acc = 0.0;
    for (i, &p) in leaves.iter().enumerate() {
        acc += p;
        if acc > x && p > 0.0 {
            return Some(i);
        }
    }
    leaves.iter().rposition(|&p| p > 0.0)
}

fn next_up(x: f64) -> f64 {
    f64::from_bits(x.to_bits() + 1)
}
fn next_down(x: f64) -> f64 {
    if x > 0.0 {
        f64::from_bits(x.to_bits() - 1)
    } else {
        x
    }
}

#[test]
fn fanouts_outside_the_set_are_rejected() {
    for k in [0, 1, 3, 5, 12, 128] {
        assert_eq!(Fanout::new(k), Err(Error::UnsupportedFanout(k)));
    }
    assert_eq!(
        SumTree::new(0, Fanout::default()).unwrap_err(),
        Error::InvalidCapacity(0)
    );
}

#[test]
fn invalid_priorities_and_indices_change_nothing() {
    let mut t = tree_with(4, &[1.0, 2.0, 3.0]);
    for bad in [f64::NAN, f64::INFINITY, -1.0, -0.0 - 1e-300, 1e300] {
        assert!(matches!(t.set(1, bad), Err(Error::InvalidPriority { .. })));
    }
    assert!(matches!(
        t.set(3, 1.0),
        Err(Error::OutOfRange {
            index: 3,
            capacity: 3
        })
    ));
    assert!(t.get(3).is_err());
    assert_eq!(t.get(1).unwrap(), 2.0);
    assert_eq!(t.total(), 6.0);
}

#[test]
fn x_at_total_and_its_neighbours_never_escape() {
    for k in [2, 4, 8, 16, 32, 64] {
        for n in [1, 2, 3, k - 1, k, k + 1, 3 * k + 1, 1000] {
            if n == 0 {
                continue;
            }
            // Trailing zero leaves, awkward values.
            let mut leaves: Vec<f64> = (0..n).map(|i| 0.1 + (i % 7) as f64 * 0.3).collect();
            for p in leaves.iter_mut().skip(n / 2 + 1) {
                *p = 0.0;
            }
            let t = tree_with(k, &leaves);
            let total = t.total();
            let last_positive = leaves.iter().rposition(|&p| p > 0.0).unwrap();
            for x in [
                total,
                next_down(total),
                next_up(total),
                total * 2.0,
                f64::INFINITY,
            ] {
                let i = t.find_prefix(x).unwrap();
                assert!(i < n && leaves[i] > 0.0, "k={k} n={n} x={x} -> {i}");
                if x >= total {
                    assert_eq!(i, last_positive, "k={k} n={n} x={x}");
                }
            }
            for x in [0.0, -1.0, f64::NAN, f64::NEG_INFINITY] {
                assert_eq!(t.find_prefix(x), Some(0), "k={k} n={n} x={x}");
            }
        }
    }
}

#[test]
fn zero_leaves_are_never_returned() {
    for k in [2, 4, 16, 64] {
        let n = 5 * k + 3;
        let leaves: Vec<f64> = (0..n).map(|i| if i % 3 == 1 { 1.5 } else { 0.0 }).collect();
        let t = tree_with(k, &leaves);
        let mut acc = 0.0;
        for (i, &p) in leaves.iter().enumerate() {
            acc += p;
            // Exactly at each boundary and just below it.
            for x in [acc, next_down(acc)] {
                let got = t.find_prefix(x).unwrap();
                assert!(leaves[got] > 0.0, "k={k} x={x} -> {got}");
                assert_eq!(Some(got), reference(&leaves, x), "k={k} i={i} x={x}");
            }
        }
    }
}

#[test]
fn all_zero_tree_has_no_prefix() {
    let mut t = tree_with(4, &[0.0; 10]);
    assert_eq!(t.find_prefix(0.0), None);
    assert_eq!(t.min_positive(), None);
    assert_eq!(
        t.find_prefix_batch(&[0.0], &mut [0]),
        Err(Error::ZeroTotalPriority)
    );
    t.set(7, 2.0).unwrap();
    assert_eq!(t.find_prefix(123.0), Some(7));
    t.set(7, 0.0).unwrap();
    assert_eq!(t.total(), 0.0);
    assert!(!t.has_positive());
}

#[test]
fn batch_matches_single() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    for k in [2, 4, 8, 16, 32, 64] {
        for n in [1, 2, 3, 17, 1000, 4099] {
            let leaves: Vec<f64> = (0..n)
                .map(|_| {
                    if rng.random_bool(0.2) {
                        0.0
                    } else {
                        rng.random::<f64>() * 10.0
                    }
                })
                .collect();
            if leaves.iter().all(|&p| p == 0.0) {
                continue;
            }
            let t = tree_with(k, &leaves);
            let total = t.total();
            let xs: Vec<f64> = (0..700)
                .map(|_| rng.random::<f64>() * total * 1.01)
                .collect();
            let mut out = vec![0; xs.len()];
            t.find_prefix_batch(&xs, &mut out).unwrap();
            for (x, i) in xs.iter().zip(&out) {
                assert_eq!(Some(*i), t.find_prefix(*x));
                assert!(leaves[*i] > 0.0);
            }
        }
    }
}

#[test]
fn min_and_max_follow_updates() {
    for k in [2, 4, 8, 16, 32, 64] {
        let mut t = SumTree::with_max(200, Fanout::new(k).unwrap()).unwrap();
        assert_eq!(t.max_leaf(), Some(0.0));
        t.set(5, 3.0).unwrap();
        t.set(150, 0.25).unwrap();
        t.set(199, 9.0).unwrap();
        assert_eq!(t.min_positive(), Some(0.25));
        assert_eq!(t.max_leaf(), Some(9.0));
        t.set(150, 0.0).unwrap();
        t.set(199, 1.0).unwrap();
        assert_eq!(t.min_positive(), Some(1.0));
        assert_eq!(t.max_leaf(), Some(3.0));
        let c = t.check();
        assert!(c.extrema_exact);
        t.clear();
        assert_eq!(t.min_positive(), None);
        assert_eq!(t.max_leaf(), Some(0.0));
        assert_eq!(t.total(), 0.0);
    }
}

#[test]
fn emptied_subtrees_sum_to_exactly_zero() {
    // Values that do not cancel exactly under deltas: 0.1 + 0.2 - 0.1 - 0.2 != 0.
    for k in [2, 4, 16] {
        let mut t = SumTree::new(4 * k, Fanout::new(k).unwrap()).unwrap();
        t.set(0, 0.1).unwrap();
        t.set(1, 0.2).unwrap();
        t.set(3 * k, 5.0).unwrap();
        t.set(0, 0.0).unwrap();
        t.set(1, 0.0).unwrap();
        for level in 0..t.depth() - 1 {
            assert_eq!(t.node(level, 0), 0.0, "k={k} level={level}");
        }
        assert_eq!(t.find_prefix(0.0), Some(3 * k));
    }
}

#[test]
fn extreme_ranges_stay_robust() {
    // 1e8 swallows 1e-8 in every sum above it; removing it leaves drift behind.
    for k in [2, 4, 16, 64] {
        let n = 3 * k + 1;
        let mut t = SumTree::new(n, Fanout::new(k).unwrap()).unwrap();
        for i in 0..n {
            t.set(i, if i % 2 == 0 { 1e-8 } else { 1e8 }).unwrap();
        }
        for i in (1..n).step_by(2) {
            t.set(i, 0.0).unwrap();
        }
        for x in [0.0, 1e-9, 1e-8, 1.0, t.total(), next_up(t.total())] {
            let i = t.find_prefix(x).unwrap();
            assert!(i < n && i % 2 == 0, "k={k} x={x} -> {i}");
        }
        t.rebuild();
        assert!(t.check().exact);
        let expected: f64 = (0..n).step_by(2).map(|_| 1e-8).sum();
        assert!((t.total() - expected).abs() <= 1e-20);
    }
}

#[test]
fn rebuild_restores_bit_exactness() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
    for k in [2, 16, 64] {
        let n = 5000;
        let mut t = SumTree::new(n, Fanout::new(k).unwrap()).unwrap();
        for _ in 0..50_000 {
            t.set(rng.random_range(0..n), rng.random::<f64>()).unwrap();
        }
        let before = t.check();
        assert!(before.max_rel_error < 1e-9, "{before:?}");
        t.rebuild();
        let after = t.check();
        assert!(after.exact && after.extrema_exact, "{after:?}");
    }
}

#[test]
fn memory_is_close_to_the_leaf_bound() {
    let n = 1 << 20;
    for k in [8, 16, 32, 64] {
        let t = SumTree::new(n, Fanout::new(k).unwrap()).unwrap();
        // leaves x 8 x K/(K-1), plus the exact min companion (internal nodes only).
        let bound = (n * 8) as f64 * k as f64 / (k as f64 - 1.0) * 1.10;
        assert!(
            (t.memory_bytes() as f64) < bound + (2 * n * 8 / (k - 1)) as f64,
            "k={k}"
        );
    }
}

/// Every stored node of `t`, as bits (for bit-for-bit comparisons of two trees).
fn node_bits(t: &SumTree) -> Vec<u64> {
    (0..t.depth())
        .flat_map(|l| (0..t.level_len(l)).map(move |i| (l, i)))
        .map(|(l, i)| t.node(l, i).to_bits())
        .collect()
}

#[test]
fn set_many_and_one_set_after_another_build_the_same_tree() {
    let mut rng = SmallRng::seed_from_u64(99);
    for k in Fanout::ALL {
        for len in [1, 2, 7, k.get(), k.get() + 1, 100, 1000, 5000] {
            for track_max in [false, true] {
                let new = |len| {
                    if track_max {
                        SumTree::with_max(len, k).unwrap()
                    } else {
                        SumTree::new(len, k).unwrap()
                    }
                };
                let (mut one, mut many) = (new(len), new(len));
                for round in 0..20 {
                    // Batches past one chunk, with repeated indices, zeros, large then small;
                    // items packed into a few groups (they meet) or spread (they rarely do).
                    let b = rng.random_range(1..600);
                    let span = if round % 2 == 0 {
                        len.min(64 + round)
                    } else {
                        len
                    };
                    let scale = if round < 10 { 8.0 } else { -8.0 };
                    let items: Vec<(usize, f64)> = (0..b)
                        .map(|_| {
                            let i = rng.random_range(0..span);
                            let p = if rng.random_bool(0.2) {
                                0.0
                            } else {
                                10f64.powf(scale * rng.random::<f64>())
                            };
                            (i, p)
                        })
                        .collect();
                    for &(i, p) in &items {
                        one.set(i, p).unwrap();
                    }
                    many.set_many_unchecked(items.iter().copied());
                    let what = format!("K={} len={len} max={track_max} round {round}", k.get());
                    assert_eq!(node_bits(&one), node_bits(&many), "{what}");
                    assert_eq!(one.min_positive(), many.min_positive(), "{what}");
                    assert_eq!(one.max_leaf(), many.max_leaf(), "{what}");
                    let c = many.check();
                    assert!(c.exact && c.extrema_exact, "{what}: {c:?}");
                }
            }
        }
    }
}

/// The SSE2 group sum and minimum must be bit-for-bit the scalar order's: every tree, the
/// lock-free one included, relies on one function of the children.
fn simd_group_ops_match_scalar<const K: usize>(rng: &mut SmallRng) {
    let rounds = if cfg!(miri) { 40 } else { 2000 };
    for round in 0..rounds {
        let mut g = [0.0f64; K];
        // Mostly comparable magnitudes (where the order of the adds shows in the rounding),
        // sometimes wild ones: zeros, subnormals, 1e-300 beside 1e300.
        let wild = round % 4 == 0;
        for v in &mut g {
            *v = match rng.random_range(0..if wild { 4 } else { 8 }) {
                0 => 0.0,
                1 => 10f64.powf(rng.random_range(-300.0..300.0)),
                2 => f64::MIN_POSITIVE * rng.random::<f64>(), // subnormal
                _ => rng.random::<f64>() * if round % 2 == 0 { 1e8 } else { 1e-8 },
            };
        }
        assert_eq!(
            group_sum(&g).to_bits(),
            group_sum_scalar(&g).to_bits(),
            "{g:?}"
        );
        assert_eq!(
            kary::group_min_positive_k(&g).to_bits(),
            kary::group_min_positive(&g).to_bits(),
            "{g:?}"
        );
    }
}

#[test]
fn simd_group_sum_and_min_equal_the_scalar_ones() {
    let mut rng = SmallRng::seed_from_u64(5);
    simd_group_ops_match_scalar::<2>(&mut rng);
    simd_group_ops_match_scalar::<4>(&mut rng);
    simd_group_ops_match_scalar::<8>(&mut rng);
    simd_group_ops_match_scalar::<16>(&mut rng);
    simd_group_ops_match_scalar::<32>(&mut rng);
    simd_group_ops_match_scalar::<64>(&mut rng);
}
