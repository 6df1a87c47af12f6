//! Reading stored priorities by key (`priorities_of`, every buffer), and the sample modes
//! beside the prioritized ones: uniform (`SampleMode::Uniform`, every item
//! equally likely, its priority ignored) on the flat buffers, and without replacement
//! (`SampleMode::WithoutReplacement`) against its exact law,
//! on every buffer family that offers it: the sequential buffer, the concurrent ones (a
//! shared mapping's included) and the sequence buffer; the sharded buffer and the coordinator refuse it.
//!
//! The law (docs/design.md, "Sampling without replacement"): draw `j` of a batch picks item
//! `i` with probability `p_i / (total - E_j)`, `E_j` the priorities of the items drawn before
//! it. So the first draw follows `p / total`, and the second
//! `P(second = i) = sum over k != i of (p_k / total) x p_i / (total - p_k)`. The test
//! draws batches of 4 from 2^10 and from 2^20 items, three of which hold 60%, 10% and 10% of
//! the mass (so both ways of drawing a repeat again are used: rejection while less than half
//! the mass is taken, the mapping past the taken items after the first), and checks both
//! positions with Pearson's chi-square over the three heavy items and
//! 16 bins of the light ones (fixed seeds; Wilson-Hilferty z < 4.75, about 1e-6), each
//! batch's items distinct, and its reported probabilities the conditional ones. The
//! statistic has power: the same check of draws with replacement fails (a heavy item is
//! drawn second less often without replacement); a mapping that does not step over the
//! items taken, or a redraw that shrinks the range instead of rejecting, fails these tests
//! (tried).

use kary_replay::sequence::{SequenceBatch, SequenceBuffer, SequenceConfig};
use kary_replay::shard::{Coordinator, ShardedBuffer};
#[cfg(all(unix, not(loom)))]
use kary_replay::ShmBuffer;
use kary_replay::{
    ConcurrentBuffer, Config, DType, Error, GlobalLockBuffer, Key, LockFreeBuffer, ReplayBuffer,
    SampleBatch, SampleMode, Schema, SplitLockBuffer, Xoshiro256,
};

const BINS: usize = 16;
const HEAVY: usize = 3;
const BATCH: usize = 4;
const Z_MAX: f64 = 4.75;

/// The shares of the total the heavy items hold: after the first is taken, more than half
/// the mass is gone, so a redraw maps the mass left past it (below half, a redraw rejects).
const HEAVY_SHARES: [f64; HEAVY] = [0.6, 0.1, 0.1];

/// Priorities over `n` items: light ones between 1 and 2 (every 7th 0, never drawn), and
/// three heavy ones holding 60%, 10% and 10% of the total.
fn priorities(n: usize) -> Vec<f64> {
    let mut ps: Vec<f64> = (0..n)
        .map(|i| {
            if i % 7 == 3 {
                0.0
            } else {
                1.0 + (i % 10) as f64 * 0.1
            }
        })
        .collect();
    let light: f64 = ps.iter().sum();
    for (h, share) in heavy(n).into_iter().zip(HEAVY_SHARES) {
        ps[h] = light * share / (1.0 - HEAVY_SHARES.iter().sum::<f64>());
    }
    ps
}

fn heavy(n: usize) -> [usize; HEAVY] {
    [1, n / 3 + 1, 2 * n / 3 + 1]
}

/// The category of item `i`: a heavy item's own, else its bin of consecutive light items.
fn category(n: usize, i: usize) -> usize {
    match heavy(n).iter().position(|&h| h == i) {
        Some(h) => BINS + h,
        None => i * BINS / n,
    }
}

/// The exact law of the first and the second draw over the categories.
fn law(ps: &[f64]) -> [Vec<f64>; 2] {
    let n = ps.len();
    let total: f64 = ps.iter().sum();
    let mut mass = [0.0; BINS + HEAVY];
    for (i, &p) in ps.iter().enumerate() {
        mass[category(n, i)] += p;
    }
    let first: Vec<f64> = mass.iter().map(|m| m / total).collect();
    let mut second = vec![0.0; BINS + HEAVY];
    for (k, &pk) in ps.iter().enumerate() {
        if pk == 0.0 {
            continue;
        }
        let ck = category(n, k);
        let left = total - pk;
        for (c, s) in second.iter_mut().enumerate() {
            let m = if c == ck { mass[c] - pk } else { mass[c] };
            *s += pk / total * m / left;
        }
    }
    [first, second]
}

/// Wilson-Hilferty: chi-square with `df` degrees of freedom to an approximate N(0,1) score.
fn z_score(counts: &[u64], expected: &[f64]) -> f64 {
    let draws = counts.iter().sum::<u64>() as f64;
    let chi2: f64 = counts
        .iter()
        .zip(expected)
        .map(|(&o, &p)| (o as f64 - p * draws).powi(2) / (p * draws))
        .sum();
    let df = (counts.len() - 1) as f64;
    let v = 2.0 / (9.0 * df);
    ((chi2 / df).cbrt() - (1.0 - v)) / v.sqrt()
}

/// `err` is the refusal of parameter `name` (`batch`: a batch without replacement larger than
/// the items; `mode`: a buffer that does not offer the mode).
fn assert_refused(err: &Error, name: &str) {
    assert!(
        matches!(err, Error::InvalidParameter { name: n, .. } if *n == name),
        "{err:?}"
    );
}

/// Checks one batch: distinct positive items, and each reported probability the
/// conditional one.
fn check_batch(ps: &[f64], total: f64, indices: &[usize], probabilities: &[f64]) {
    let mut taken = 0.0;
    for (j, (&i, &p)) in indices.iter().zip(probabilities).enumerate() {
        assert!(ps[i] > 0.0, "drew item {i} of priority 0");
        assert!(!indices[..j].contains(&i), "item {i} twice in {indices:?}");
        let want = ps[i] / (total - taken);
        assert!(
            (p - want).abs() <= want * 1e-9,
            "draw {j}: probability {p}, want {want}"
        );
        taken += ps[i];
    }
}

/// Draws `batches` batches with `sample` and returns the category counts of the first two
/// positions.
fn counts(
    seed: u64,
    n: usize,
    batches: usize,
    mut sample: impl FnMut(&mut Xoshiro256, &mut SampleBatch),
    check: impl Fn(&SampleBatch),
) -> [Vec<u64>; 2] {
    let mut rng = Xoshiro256::new(seed + n as u64);
    let mut out = SampleBatch::default();
    let mut counts = [vec![0u64; BINS + HEAVY], vec![0u64; BINS + HEAVY]];
    for _ in 0..batches {
        sample(&mut rng, &mut out);
        check(&out);
        for (position, c) in counts.iter_mut().enumerate() {
            c[category(n, out.indices[position])] += 1;
        }
    }
    counts
}

fn config(n: usize) -> Config {
    let schema = Schema::new().column("x", DType::I64, []);
    Config::builder(n, schema).alpha(1.0).build().unwrap()
}

fn filled<B: ConcurrentBuffer>(ps: &[f64]) -> B {
    let buffer = B::new(config(ps.len())).unwrap();
    let xs: Vec<i64> = (0..ps.len() as i64).collect();
    buffer.insert_batch(&[(&xs[..]).into()], Some(ps)).unwrap();
    buffer
}

fn check_law(name: &str, n: usize, counts: [Vec<u64>; 2], law: &[Vec<f64>; 2]) {
    for position in 0..2 {
        let z = z_score(&counts[position], &law[position]);
        println!("{name} n={n} draw {position}: z = {z:.3}");
        assert!(
            z < Z_MAX,
            "{name} n={n} draw {position}: z = {z} >= {Z_MAX}"
        );
    }
}

fn concurrent_law<B: ConcurrentBuffer>(name: &str, seed: u64, n: usize, batches: usize) {
    let ps = priorities(n);
    let total: f64 = ps.iter().sum();
    let law = law(&ps);
    let buffer: B = filled(&ps);
    let counts = counts(
        seed,
        n,
        batches,
        |rng, out| {
            buffer
                .sample_indices_into(BATCH, 0.4, SampleMode::WithoutReplacement, rng, out)
                .unwrap()
        },
        |out| check_batch(&ps, total, &out.indices, &out.probabilities),
    );
    check_law(name, n, counts, &law);
}

fn sequential_counts(ps: &[f64], batches: usize, mode: SampleMode) -> [Vec<u64>; 2] {
    let n = ps.len();
    let total: f64 = ps.iter().sum();
    let mut buffer = ReplayBuffer::new(config(n)).unwrap();
    let xs: Vec<i64> = (0..n as i64).collect();
    buffer.insert_batch(&[(&xs[..]).into()], Some(ps)).unwrap();
    counts(
        1,
        n,
        batches,
        |rng, out| {
            buffer
                .sample_indices_into(BATCH, 0.4, mode, rng, out)
                .unwrap()
        },
        |out| {
            if mode == SampleMode::WithoutReplacement {
                check_batch(ps, total, &out.indices, &out.probabilities)
            }
        },
    )
}

fn every_family(n: usize, batches: usize) {
    let ps = priorities(n);
    let law = law(&ps);
    let sequential = sequential_counts(&ps, batches, SampleMode::WithoutReplacement);
    check_law("ReplayBuffer", n, sequential, &law);
    concurrent_law::<SplitLockBuffer>("SplitLockBuffer", 2, n, batches);
    concurrent_law::<LockFreeBuffer>("LockFreeBuffer", 3, n, batches);
    concurrent_law::<GlobalLockBuffer>("GlobalLockBuffer", 4, n, batches);
    #[cfg(all(unix, not(loom)))]
    concurrent_law::<ShmBuffer>("ShmBuffer", 5, n, batches);
    // Power: draws with replacement put the heavy items second too often.
    let with = sequential_counts(&ps, batches, SampleMode::Independent);
    let z = z_score(&with[1], &law[1]);
    println!("with replacement n={n} draw 1: z = {z:.3}");
    assert!(
        z > 2.0 * Z_MAX,
        "the check cannot tell draws with replacement: z = {z}"
    );
}

#[test]
fn the_law_of_successive_draws_holds_at_2_10_items() {
    every_family(1 << 10, 200_000);
}

#[test]
fn the_law_of_successive_draws_holds_at_2_20_items() {
    every_family(1 << 20, 100_000);
}

#[test]
fn a_batch_of_every_positive_item_is_a_permutation() {
    // 64 items, 9 of priority 0: a batch of 55 takes every positive item once, however
    // skewed (one item holds almost all the mass, so redraws step over it every time).
    let mut ps: Vec<f64> = (0..64)
        .map(|i| if i % 7 == 3 { 0.0 } else { 1.0 })
        .collect();
    ps[5] = 1e6;
    let positive = ps.iter().filter(|&&p| p > 0.0).count();
    let total: f64 = ps.iter().sum();
    let buffer: SplitLockBuffer = filled(&ps);
    let mut rng = Xoshiro256::new(3);
    let mut out = SampleBatch::default();
    for _ in 0..50 {
        buffer
            .sample_indices_into(
                positive,
                1.0,
                SampleMode::WithoutReplacement,
                &mut rng,
                &mut out,
            )
            .unwrap();
        check_batch(&ps, total, &out.indices, &out.probabilities);
        assert_eq!(out.indices.len(), positive);
        // Weights: the conditional probabilities' (min_positive / (P_j x total)), <= 1.
        for (&w, &p) in out.weights.iter().zip(&out.probabilities) {
            let want = 1.0 / (p * total);
            assert!((w - want).abs() <= want * 1e-9, "weight {w}, want {want}");
        }
    }
    // One more than the positive items: refused, and `out` keeps the last batch.
    let before = out.clone();
    let err = buffer
        .sample_indices_into(
            positive + 1,
            0.4,
            SampleMode::WithoutReplacement,
            &mut rng,
            &mut out,
        )
        .unwrap_err();
    assert_refused(&err, "batch");
    assert_eq!(out, before);
    // More than the buffer holds: refused before any draw, by every family.
    let err = buffer
        .sample_indices_into(65, 0.4, SampleMode::WithoutReplacement, &mut rng, &mut out)
        .unwrap_err();
    assert_refused(&err, "batch");
    let mut sequential = ReplayBuffer::new(config(64)).unwrap();
    let xs: Vec<i64> = (0..64).collect();
    sequential
        .insert_batch(&[(&xs[..]).into()], Some(&ps))
        .unwrap();
    let err = sequential
        .sample_indices_into(
            positive + 1,
            0.4,
            SampleMode::WithoutReplacement,
            &mut rng,
            &mut out,
        )
        .unwrap_err();
    assert_refused(&err, "batch");
    assert_eq!(out, before);
}

#[test]
fn rows_follow_the_items_drawn_without_replacement() {
    let ps = priorities(256);
    let buffer: LockFreeBuffer = filled(&ps);
    let mut rng = Xoshiro256::new(5);
    let mut out = SampleBatch::default();
    for _ in 0..100 {
        buffer
            .sample_into(32, 0.4, SampleMode::WithoutReplacement, &mut rng, &mut out)
            .unwrap();
        let xs = out.columns[0].as_i64().unwrap();
        for (j, &i) in out.indices.iter().enumerate() {
            assert_eq!(xs[j], i as i64);
            assert!(!out.indices[..j].contains(&i));
        }
    }
}

#[test]
fn sequence_windows_are_drawn_without_replacement() {
    let schema = Schema::new().column("x", DType::F32, []);
    let config = SequenceConfig::builder(2, 64, schema)
        .window(4)
        .period(2)
        .alpha(1.0)
        .build()
        .unwrap();
    let buffer = SequenceBuffer::new(config).unwrap();
    for lane in 0..2 {
        let mut writer = buffer.lane(lane).unwrap();
        for step in 0..40 {
            writer.push(&[(&[step as f32][..]).into()]).unwrap();
        }
        writer.end_episode(&[], false).unwrap();
    }
    let windows = buffer.len();
    assert!(windows >= 30, "{windows} windows");
    // Skew the priorities: one window holds almost all the mass.
    let mut out = SequenceBatch::default();
    let mut rng = Xoshiro256::new(9);
    buffer
        .sample_into(windows, 0.0, SampleMode::Independent, &mut rng, &mut out)
        .unwrap();
    let first = out.keys[0];
    buffer.update_priorities(&[first], &[1e6]).unwrap();
    for _ in 0..20 {
        buffer
            .sample_into(
                windows,
                1.0,
                SampleMode::WithoutReplacement,
                &mut rng,
                &mut out,
            )
            .unwrap();
        let mut indices = out.indices.clone();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), windows, "a window twice: {:?}", out.indices);
        let total = out.total;
        let mut taken = 0.0;
        for (j, (&p, &prob)) in out.priorities.iter().zip(&out.probabilities).enumerate() {
            let want = p / (total - taken);
            assert!(
                (prob - want).abs() <= want * 1e-9,
                "draw {j}: {prob} vs {want}"
            );
            taken += p;
        }
    }
    let before = out.clone();
    let err = buffer
        .sample_into(
            windows + 1,
            0.0,
            SampleMode::WithoutReplacement,
            &mut rng,
            &mut out,
        )
        .unwrap_err();
    assert_refused(&err, "batch");
    assert_eq!(out.keys, before.keys);
}

#[test]
fn a_union_of_shards_refuses_to_draw_without_replacement() {
    let schema = Schema::new().column("x", DType::I64, []);
    let union: ShardedBuffer<SplitLockBuffer> =
        ShardedBuffer::new(2, Config::builder(8, schema).build().unwrap()).unwrap();
    for shard in 0..2 {
        union
            .insert_batch(shard, &[(&[1i64, 2, 3][..]).into()], None)
            .unwrap();
    }
    let mut coordinator = Coordinator::new();
    let mut rng = Xoshiro256::new(1);
    let mut out = SampleBatch::default();
    let err = union
        .sample_into(
            &mut coordinator,
            2,
            0.4,
            SampleMode::WithoutReplacement,
            &mut rng,
            &mut out,
        )
        .unwrap_err();
    assert_refused(&err, "mode");
    let stats = [union.shards()[0].stats(), union.shards()[1].stats()];
    let err = coordinator
        .plan(&stats, 2, SampleMode::WithoutReplacement, &mut rng)
        .unwrap_err();
    assert_refused(&err, "mode");
}

/// Uniform: each of the `n` items equally likely whatever its priority (zero ones included),
/// probabilities `1 / n`, weights 1, rows and keys of the item drawn; checked by chi-square
/// over 64 bins of a full ring that wrapped (the items are the newest `n`).
fn uniform_law(name: &str, n: usize, mut sample: impl FnMut(&mut Xoshiro256, &mut SampleBatch)) {
    const BINS: usize = 64;
    let mut rng = Xoshiro256::new(n as u64 + 17);
    let mut out = SampleBatch::default();
    let mut counts = vec![0u64; BINS];
    let mut zeros = 0u64;
    for _ in 0..4000 {
        sample(&mut rng, &mut out);
        let xs = out.columns[0].as_i64().unwrap();
        for (j, &i) in out.indices.iter().enumerate() {
            assert_eq!(out.probabilities[j], 1.0 / n as f64);
            assert_eq!(out.weights[j], 1.0);
            // Item g (inserted g-th, value g) lives in slot g % n; the buffer holds n..2n.
            assert_eq!(xs[j] as usize % n, i, "{name}: row of another item");
            assert_eq!(out.keys[j].insertion(), xs[j] as u64);
            counts[i * BINS / n] += 1;
            zeros += u64::from(xs[j] % 7 == 3);
        }
    }
    // Every 7th item has priority 0 and is drawn as often as the others.
    let share = zeros as f64 / counts.iter().sum::<u64>() as f64;
    assert!(
        (share - 1.0 / 7.0).abs() < 0.01,
        "{name}: zero-priority share {share}"
    );
    let expected = vec![1.0 / BINS as f64; BINS];
    let z = z_score(&counts, &expected);
    println!("{name} uniform n={n}: z = {z:.3}");
    assert!(z < Z_MAX, "{name}: uniform z = {z}");
}

fn ring_of(n: usize) -> (Vec<i64>, Vec<f64>) {
    // 2n items into a ring of n: the newest n survive; every 7th priority 0.
    let xs: Vec<i64> = (0..2 * n as i64).collect();
    let ps: Vec<f64> = (0..2 * n)
        .map(|i| {
            if i % 7 == 3 {
                0.0
            } else {
                1.0 + (i % 10) as f64
            }
        })
        .collect();
    (xs, ps)
}

fn concurrent_uniform<B: ConcurrentBuffer>(name: &str, n: usize) {
    let buffer = B::new(config(n)).unwrap();
    let (xs, ps) = ring_of(n);
    buffer.insert_batch(&[(&xs[..]).into()], Some(&ps)).unwrap();
    uniform_law(name, n, |rng, out| {
        buffer
            .sample_into(64, 0.4, SampleMode::Uniform, rng, out)
            .unwrap()
    });
}

#[test]
fn uniform_draws_ignore_priorities_on_every_flat_buffer() {
    for n in [1 << 10, 1 << 16] {
        let mut sequential = ReplayBuffer::new(config(n)).unwrap();
        let (xs, ps) = ring_of(n);
        sequential
            .insert_batch(&[(&xs[..]).into()], Some(&ps))
            .unwrap();
        uniform_law("ReplayBuffer", n, |rng, out| {
            sequential
                .sample_into(64, 0.4, SampleMode::Uniform, rng, out)
                .unwrap()
        });
        concurrent_uniform::<SplitLockBuffer>("SplitLockBuffer", n);
        concurrent_uniform::<LockFreeBuffer>("LockFreeBuffer", n);
        concurrent_uniform::<GlobalLockBuffer>("GlobalLockBuffer", n);
        #[cfg(all(unix, not(loom)))]
        concurrent_uniform::<ShmBuffer>("ShmBuffer", n);
    }
}

#[test]
fn uniform_draws_follow_a_partly_filled_ring_and_a_clear() {
    let buffer = SplitLockBuffer::new(config(64)).unwrap();
    let mut rng = Xoshiro256::new(2);
    let mut out = SampleBatch::default();
    let err = buffer
        .sample_into(4, 0.4, SampleMode::Uniform, &mut rng, &mut out)
        .unwrap_err();
    assert_eq!(err, Error::Empty);
    buffer
        .insert_batch(&[(&[5i64, 6, 7][..]).into()], Some(&[0.0, 0.0, 1.0]))
        .unwrap();
    let mut seen = [0u32; 3];
    for _ in 0..300 {
        buffer
            .sample_into(8, 0.4, SampleMode::Uniform, &mut rng, &mut out)
            .unwrap();
        for &x in out.columns[0].as_i64().unwrap() {
            seen[x as usize - 5] += 1;
        }
    }
    // Each of the 3 items about 800 times of 2400, the two of priority 0 included.
    assert!(seen.iter().all(|&c| (650..950).contains(&c)), "{seen:?}");
    buffer.clear();
    buffer.insert_batch(&[(&[9i64][..]).into()], None).unwrap();
    buffer
        .sample_into(8, 0.4, SampleMode::Uniform, &mut rng, &mut out)
        .unwrap();
    assert!(out.columns[0].as_i64().unwrap().iter().all(|&x| x == 9));
    assert!(out.probabilities.iter().all(|&p| p == 1.0));
}

#[test]
fn sequence_device_and_union_refuse_uniform_draws() {
    let schema = Schema::new().column("x", DType::F32, []);
    let buffer =
        SequenceBuffer::new(SequenceConfig::builder(1, 16, schema).build().unwrap()).unwrap();
    let mut writer = buffer.lane(0).unwrap();
    for step in 0..4 {
        writer.push(&[(&[step as f32][..]).into()]).unwrap();
    }
    drop(writer);
    let mut out = SequenceBatch::default();
    let err = buffer
        .sample_into(
            2,
            0.4,
            SampleMode::Uniform,
            &mut Xoshiro256::new(1),
            &mut out,
        )
        .unwrap_err();
    assert_refused(&err, "mode");
    let schema = Schema::new().column("x", DType::I64, []);
    let union: ShardedBuffer<SplitLockBuffer> =
        ShardedBuffer::new(2, Config::builder(8, schema).build().unwrap()).unwrap();
    union
        .insert_batch(0, &[(&[1i64][..]).into()], None)
        .unwrap();
    let err = union
        .sample_into(
            &mut Coordinator::new(),
            2,
            0.4,
            SampleMode::Uniform,
            &mut Xoshiro256::new(1),
            &mut SampleBatch::default(),
        )
        .unwrap_err();
    assert_refused(&err, "mode");
}

/// A buffer's `priorities_of`.
type ReadByKey<'a> = dyn Fn(&[Key], &mut Vec<f64>) -> kary_replay::Result<usize> + 'a;

/// `priorities_of`: the stored priority (`p^alpha`) of each current key, NaN for a key
/// whose item was evicted, the count of those; a foreign key refused with `out` empty.
fn check_priorities_of(name: &str, read: &ReadByKey<'_>, keys: &[Key], foreign: Key) {
    let mut out = vec![7.0];
    // 6 items into a ring of 4: the first two evicted; priorities 1..6, alpha 0.5.
    assert_eq!(read(keys, &mut out).unwrap(), 2, "{name}");
    assert!(out[0].is_nan() && out[1].is_nan(), "{name}: {out:?}");
    for (j, &p) in out.iter().enumerate().skip(2) {
        assert_eq!(p, ((j + 1) as f64).powf(0.5), "{name}");
    }
    let err = read(&[keys[5], foreign], &mut out).unwrap_err();
    assert!(
        matches!(err, Error::InvalidKey { .. } | Error::OutOfRange { .. }),
        "{name}: {err:?}"
    );
    assert!(out.is_empty(), "{name}");
}

fn flat_priorities_of<B: ConcurrentBuffer>(name: &str) {
    let schema = Schema::new().column("x", DType::I64, []);
    let buffer = B::new(Config::builder(4, schema).alpha(0.5).build().unwrap()).unwrap();
    let keys = buffer
        .insert_batch(
            &[(&[1i64, 2, 3, 4, 5, 6][..]).into()],
            Some(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        )
        .unwrap();
    let foreign = Key {
        index: 9,
        generation: 1,
    };
    check_priorities_of(name, &|k, out| buffer.priorities_of(k, out), &keys, foreign);
    // An update shows.
    buffer.update_priorities(&keys[5..], &[16.0]).unwrap();
    let mut out = Vec::new();
    buffer.priorities_of(&keys[5..], &mut out).unwrap();
    assert_eq!(out, [4.0], "{name}");
}

#[test]
fn priorities_by_key_on_every_buffer() {
    flat_priorities_of::<SplitLockBuffer>("SplitLockBuffer");
    flat_priorities_of::<LockFreeBuffer>("LockFreeBuffer");
    flat_priorities_of::<GlobalLockBuffer>("GlobalLockBuffer");
    #[cfg(all(unix, not(loom)))]
    flat_priorities_of::<ShmBuffer>("ShmBuffer");
    let schema = Schema::new().column("x", DType::I64, []);
    let mut sequential =
        ReplayBuffer::new(Config::builder(4, schema).alpha(0.5).build().unwrap()).unwrap();
    let keys = sequential
        .insert_batch(
            &[(&[1i64, 2, 3, 4, 5, 6][..]).into()],
            Some(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        )
        .unwrap();
    let foreign = Key {
        index: 1,
        generation: 77,
    };
    check_priorities_of(
        "ReplayBuffer",
        &|k, out| sequential.priorities_of(k, out),
        &keys,
        foreign,
    );
    // Windows: one lane of 8 steps, windows of 2 at period 1; a window is retired when a step
    // it reads is overwritten.
    let schema = Schema::new().column("x", DType::F32, []);
    let config = SequenceConfig::builder(1, 8, schema)
        .window(2)
        .alpha(0.5)
        .build()
        .unwrap();
    let buffer = SequenceBuffer::new(config).unwrap();
    let mut lane = buffer.lane(0).unwrap();
    for step in 0..4 {
        lane.push(&[(&[step as f32][..]).into()]).unwrap();
    }
    let mut out = SequenceBatch::default();
    buffer
        .sample_into(
            buffer.len(),
            0.0,
            SampleMode::WithoutReplacement,
            &mut Xoshiro256::new(1),
            &mut out,
        )
        .unwrap();
    let keys = out.keys.clone();
    let fours = vec![4.0; keys.len()];
    buffer.update_priorities(&keys, &fours).unwrap();
    let mut read = Vec::new();
    assert_eq!(buffer.priorities_of(&keys, &mut read).unwrap(), 0);
    assert!(read.iter().all(|&p| p == 2.0), "{read:?}");
    for step in 4..20 {
        lane.push(&[(&[step as f32][..]).into()]).unwrap();
    }
    assert_eq!(buffer.priorities_of(&keys, &mut read).unwrap(), keys.len());
    assert!(read.iter().all(|p| p.is_nan()));
    let foreign = Key {
        index: 0,
        generation: 1 << 40,
    };
    assert!(buffer.priorities_of(&[foreign], &mut read).is_err());
    assert!(read.is_empty());
}
