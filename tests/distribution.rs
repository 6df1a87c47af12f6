//! Statistical test of the sampling distribution at N = 2^20, both modes, fixed seeds.
//!
//! Items are grouped into 1024 bins of 1024 consecutive slots; 2^22 draws; Pearson's
//! chi-square against the expected bin probabilities (sum of p / total), df = 1023.
//! Threshold: the Wilson-Hilferty normal approximation z < 4.75, a p-value of about 1e-6
//! (a correct sampler fails with that probability; the seeds are fixed, so the test is
//! deterministic). Every 7th item has priority 0 and must never be drawn.
//! The test also shows that the statistic has power: the same counts checked against a
//! wrong distribution (uniform over the positive items, as if alpha were ignored) fail it.
//! Stratified draws vary less than multinomial ones, so their statistic sits below df:
//! the test is one-sided and rejects only an excess.

use kary_replay::{Config, DType, Fanout, ReplayBuffer, SampleBatch, SampleMode, Schema};
use rand::{rngs::SmallRng, SeedableRng};

const N: usize = 1 << 20;
const BINS: usize = 1024;
const DRAWS: usize = 1 << 22;
const Z_MAX: f64 = 4.75;

fn priority(i: usize) -> f64 {
    if i % 7 == 3 {
        0.0
    } else {
        1.0 + ((i / 1024) % 13) as f64 + (i % 10) as f64 * 0.1
    }
}

/// Wilson-Hilferty: chi-square with `df` degrees of freedom to an approximate N(0,1) score.
fn z_score(chi2: f64, df: f64) -> f64 {
    let v = 2.0 / (9.0 * df);
    ((chi2 / df).cbrt() - (1.0 - v)) / v.sqrt()
}

fn chi2(counts: &[u64], expected_p: &[f64], draws: f64) -> f64 {
    counts
        .iter()
        .zip(expected_p)
        .map(|(&o, &p)| {
            let e = p * draws;
            (o as f64 - e).powi(2) / e
        })
        .sum()
}

fn run(mode: SampleMode, fanout: usize, seed: u64) {
    let schema = Schema::new().column("x", DType::U8, 1);
    let config = Config::builder(N, schema)
        .fanout(fanout)
        .alpha(1.0)
        .build()
        .unwrap();
    let mut buf = ReplayBuffer::new(config).unwrap();
    let ps: Vec<f64> = (0..N).map(priority).collect();
    buf.insert_batch(&[(&vec![0u8; N]).into()], Some(&ps))
        .unwrap();

    let total: f64 = ps.iter().sum();
    let expected: Vec<f64> = ps
        .chunks(N / BINS)
        .map(|c| c.iter().sum::<f64>() / total)
        .collect();
    let mut counts = vec![0u64; BINS];
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out = SampleBatch::default();
    for _ in 0..DRAWS / 4096 {
        buf.sample_indices_into(4096, 0.0, mode, &mut rng, &mut out)
            .unwrap();
        for &i in &out.indices {
            assert!(ps[i] > 0.0, "drew zero-priority item {i}");
            counts[i / (N / BINS)] += 1;
        }
    }
    let df = (BINS - 1) as f64;
    let z = z_score(chi2(&counts, &expected, DRAWS as f64), df);
    println!("{mode:?} K={fanout}: z = {z:.3}");
    assert!(
        z < Z_MAX,
        "{mode:?} K={fanout}: chi-square z-score {z} >= {Z_MAX}"
    );

    // Power: the counts against a uniform law over the positive items must be rejected.
    let wrong_ps: Vec<f64> = ps
        .iter()
        .map(|&p| if p == 0.0 { 0.0 } else { 1.0 })
        .collect();
    let wrong_total: f64 = wrong_ps.iter().sum();
    let wrong: Vec<f64> = wrong_ps
        .chunks(N / BINS)
        .map(|c| c.iter().sum::<f64>() / wrong_total)
        .collect();
    let z_wrong = z_score(chi2(&counts, &wrong, DRAWS as f64), df);
    assert!(
        z_wrong > Z_MAX,
        "the chi-square test has no power: z = {z_wrong}"
    );
}

#[test]
fn independent_sampling_is_proportional() {
    run(SampleMode::Independent, Fanout::default().get(), 11);
}

#[test]
fn stratified_sampling_is_proportional() {
    run(SampleMode::Stratified, Fanout::default().get(), 12);
}

#[test]
fn binary_and_wide_fanouts_sample_the_same_law() {
    run(SampleMode::Independent, 2, 13);
    run(SampleMode::Stratified, 64, 14);
}
