//! Soak: 10^6 random updates whose magnitudes span 1e-8 to 1e8 (TD errors start large and
//! shrink), then every internal node must equal the fixed-order sum of its children bit for
//! bit, with no rebuild: a touched parent is recomputed from its K children, so nothing of
//! the past survives in the sums. Each node is also compared with an exact re-summation of
//! the leaves below it (double-double arithmetic): the only error left is the rounding of
//! one fresh summation, at most (depth x K) u relative.

use kary_replay::{Fanout, SumTree};
use rand::{rngs::SmallRng, Rng, SeedableRng};

#[path = "support/scale.rs"]
mod scale;

/// 10^6 in the full run (`KARY_STRESS_SCALE` = 1).
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
fn sums_stay_exact_through_a_million_updates_of_changing_magnitude() {
    let u = f64::EPSILON / 2.0;
    let mut rng = SmallRng::seed_from_u64(2026);
    let updates = scale::scaled(UPDATES, 10_000);
    for k in Fanout::ALL {
        let mut t = SumTree::new(N, k).unwrap();
        for step in 0..updates {
            let i = rng.random_range(0..N);
            // The first half large, the second half small: the shrinking of TD errors.
            let scale = if step < updates / 2 { 8.0 } else { -8.0 };
            let p = if rng.random_bool(0.05) {
                0.0
            } else {
                10f64.powf(scale * rng.random::<f64>())
            };
            t.set(i, p).unwrap();
        }
        let c = t.check();
        assert!(c.exact && c.extrema_exact, "K={}: {c:?}", k.get());
        let depth = t.depth();
        let kk = k.get();
        let mut level: Vec<(f64, f64)> = (0..N).map(|i| (t.node(depth - 1, i), 0.0)).collect();
        let mut worst_rel: f64 = 0.0;
        for l in (0..depth - 1).rev() {
            let parents: Vec<(f64, f64)> = level
                .chunks(kk)
                .map(|c| c.iter().fold((0.0, 0.0), |s, &v| dd_add(s, v)))
                .collect();
            assert_eq!(parents.len(), t.level_len(l));
            for (i, &(hi, lo)) in parents.iter().enumerate() {
                let exact = hi + lo;
                let err = (t.node(l, i) - exact).abs();
                let bound = ((depth - l) * kk) as f64 * u * exact;
                assert!(
                    err <= bound,
                    "K={kk} level {l} node {i}: error {err} > {bound}"
                );
                if exact > 0.0 {
                    worst_rel = worst_rel.max(err / exact);
                }
            }
            level = parents;
        }
        println!("K={kk}: worst relative error after {updates} updates: {worst_rel:.3e}");
        let mut rebuilt = t.clone();
        rebuilt.rebuild();
        assert_eq!(rebuilt.total().to_bits(), t.total().to_bits(), "K={kk}");
    }
}
