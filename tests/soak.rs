//! Soak: 10^6 random delta updates, then every internal node against an exact
//! re-summation of the leaves below it (double-double arithmetic, ~1e-32 relative).
//!
//! Drift bound asserted: each update moves a node by one rounded add and one rounded
//! subtract (the delta), each off by at most u = 2^-53 times the magnitudes involved,
//! all bounded by S, the largest sum the node can hold (leaves below it x the largest
//! priority, 1 here). After M updates: |stored - exact| <= 2 u M S. With M = 10^6 that is
//! a relative 2.2e-10 of a full node; the observed drift is printed and is far smaller
//! (rounding errors of random sign grow like sqrt(M)).
//! Then rebuild() must make every node equal its fixed-order sum bit for bit.

use kary_replay::{Fanout, SumTree};
use rand::{rngs::SmallRng, Rng, SeedableRng};

const UPDATES: usize = 1_000_000;
const N: usize = 10_000;

/// Error-free sum of two floats: (hi, lo) with hi + lo == a + b exactly.
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

fn dd_add((ah, al): (f64, f64), (bh, bl): (f64, f64)) -> (f64, f64) {
    let (s, e) = two_sum(ah, bh);
    let e = e + al + bl;
    two_sum(s, e)
}

#[test]
fn drift_stays_within_the_bound_and_rebuild_removes_it() {
    let u = f64::EPSILON / 2.0;
    let mut rng = SmallRng::seed_from_u64(2026);
    for k in Fanout::ALL {
        let mut t = SumTree::new(N, k).unwrap();
        for _ in 0..UPDATES {
            let i = rng.random_range(0..N);
            let p = if rng.random_bool(0.05) {
                0.0
            } else {
                rng.random::<f64>()
            };
            t.set(i, p).unwrap();
        }
        // Exact sums bottom-up; `under` counts the leaves below each node.
        let depth = t.depth();
        let kk = k.get();
        let mut level: Vec<((f64, f64), usize)> =
            (0..N).map(|i| ((t.node(depth - 1, i), 0.0), 1)).collect();
        let mut worst_rel: f64 = 0.0;
        for l in (0..depth - 1).rev() {
            let parents: Vec<((f64, f64), usize)> = level
                .chunks(kk)
                .map(|c| {
                    c.iter()
                        .fold(((0.0, 0.0), 0), |(s, n), &(v, m)| (dd_add(s, v), n + m))
                })
                .collect();
            assert_eq!(parents.len(), t.level_len(l));
            for (i, &((hi, lo), under)) in parents.iter().enumerate() {
                let exact = hi + lo;
                let err = (t.node(l, i) - exact).abs();
                let bound = 2.0 * u * UPDATES as f64 * under as f64;
                assert!(
                    err <= bound,
                    "K={} level {l} node {i}: error {err} > bound {bound}",
                    kk
                );
                if exact > 0.0 {
                    worst_rel = worst_rel.max(err / exact);
                }
            }
            level = parents;
        }
        println!("K={kk}: worst relative drift after {UPDATES} updates: {worst_rel:.3e}");
        assert!(t.check().extrema_exact);
        t.rebuild();
        let c = t.check();
        assert!(c.exact && c.extrema_exact, "K={kk}: {c:?}");
    }
}
