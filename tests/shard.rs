//! Sampling the union of shards: `stats`, `sample_at`, the coordinator and `ShardedBuffer`,
//! on every variant. With no concurrent writes a sharded sample must equal one buffer
//! holding the union (probabilities and weights to 1e-12, the same items for the same
//! draws), and its draws must pass a chi-square test against `p / T`.

use kary_replay::shard::{Coordinator, Reply, ShardedBuffer};
use kary_replay::{
    ConcurrentBuffer, Config, DType, DefaultPriority, Error, GlobalLockBuffer,
    GlobalSpinLockBuffer, Key, LockFreeBuffer, ReplayBuffer, SampleBatch, SampleMode, Schema,
    SplitLockBuffer, Stats, WeightNormalization,
};
use rand::{rngs::SmallRng, SeedableRng};

const PER_SHARD: usize = 96;

fn config(capacity: usize, norm: WeightNormalization) -> Config {
    let schema = Schema::new()
        .column("id", DType::I64, 1)
        .column("obs", DType::F32, 2);
    Config::builder(capacity, schema)
        .alpha(0.7)
        .weight_normalization(norm)
        .build()
        .unwrap()
}

/// The raw priority of item `id` (some zero: never drawn).
fn priority(id: usize) -> f64 {
    if id % 11 == 5 {
        0.0
    } else {
        0.1 + (id % 17) as f64 * 0.37 + (id / 50) as f64
    }
}

fn rows(ids: std::ops::Range<usize>) -> (Vec<i64>, Vec<f32>, Vec<f64>) {
    let id: Vec<i64> = ids.clone().map(|i| i as i64).collect();
    let obs: Vec<f32> = ids.clone().flat_map(|i| [i as f32, -(i as f32)]).collect();
    (id, obs, ids.map(priority).collect())
}

/// S shards holding items `k * PER_SHARD + j` (shard k gets `fill[k]` items), and one buffer
/// holding the same items in the same order.
fn sharded_and_union<B: ConcurrentBuffer>(
    fill: &[usize],
    norm: WeightNormalization,
) -> (ShardedBuffer<B>, B) {
    let sharded = ShardedBuffer::<B>::new(fill.len(), config(PER_SHARD, norm)).unwrap();
    let union = B::new(config(PER_SHARD * fill.len(), norm)).unwrap();
    for (k, &n) in fill.iter().enumerate() {
        let (id, obs, ps) = rows(k * PER_SHARD..k * PER_SHARD + n);
        if n > 0 {
            sharded
                .insert_batch(k, &[(&id[..]).into(), (&obs[..]).into()], Some(&ps))
                .unwrap();
            union
                .insert_batch(&[(&id[..]).into(), (&obs[..]).into()], Some(&ps))
                .unwrap();
        }
    }
    (sharded, union)
}

fn ids(batch: &SampleBatch) -> &[i64] {
    batch.columns[0].as_i64().unwrap()
}

/// Sorted (id, probability, weight) rows of a batch.
fn by_item(batch: &SampleBatch) -> Vec<(i64, f64, f64)> {
    let mut rows: Vec<_> = ids(batch)
        .iter()
        .zip(&batch.probabilities)
        .zip(&batch.weights)
        .map(|((&id, &p), &w)| (id, p, w))
        .collect();
    rows.sort_by(|a, b| a.partial_cmp(b).unwrap());
    rows
}

fn equals_one_buffer_holding_the_union<B: ConcurrentBuffer>() {
    for norm in [WeightNormalization::Global, WeightNormalization::Batch] {
        // An empty shard, a full one, a partial one.
        let (sharded, union) = sharded_and_union::<B>(&[40, 0, PER_SHARD, 7], norm);
        assert_eq!(sharded.len(), union.len());
        assert!((sharded.total_priority() - union.total_priority()).abs() < 1e-12);
        let mut coordinator = Coordinator::new();
        for mode in [SampleMode::Stratified, SampleMode::Independent] {
            for (seed, beta) in [(1u64, 0.4), (2, 1.0), (3, 0.0), (4, 0.77)] {
                let mut a = SampleBatch::default();
                let mut rng = SmallRng::seed_from_u64(seed);
                sharded
                    .sample_into(&mut coordinator, 256, beta, mode, &mut rng, &mut a)
                    .unwrap();
                // The same draws over the same cumulative layout pick the same items.
                let b = union
                    .sample(256, beta, mode, &mut SmallRng::seed_from_u64(seed))
                    .unwrap();
                let (a_rows, b_rows) = (by_item(&a), by_item(&b));
                assert_eq!(a_rows.len(), 256);
                for (x, y) in a_rows.iter().zip(&b_rows) {
                    assert_eq!(x.0, y.0, "{mode:?} {norm:?}: not the same items");
                    assert!(
                        (x.1 - y.1).abs() <= 1e-12 * y.1,
                        "probability {x:?} vs {y:?}"
                    );
                    assert!((x.2 - y.2).abs() <= 1e-12, "weight {x:?} vs {y:?}");
                }
                if mode == SampleMode::Stratified {
                    // Shard order is draw order.
                    assert_eq!(ids(&a), ids(&b));
                }
                // Every row is the item its key names, with the key's shard.
                for (j, key) in a.keys.iter().enumerate() {
                    let (k, local) = (sharded.shard_of(*key).unwrap(), key);
                    let id = ids(&a)[j] as usize;
                    assert_eq!((k, local.index), (id / PER_SHARD, id % PER_SHARD));
                    assert_eq!(a.indices[j], id);
                    assert_eq!(a.columns[1].as_f32().unwrap()[2 * j], id as f32);
                    assert_eq!(
                        a.priorities[j],
                        sharded.shards()[k].priority(local.index).unwrap()
                    );
                }
            }
        }
    }
}

#[test]
fn equals_one_buffer_holding_the_union_on_every_variant() {
    equals_one_buffer_holding_the_union::<SplitLockBuffer>();
    equals_one_buffer_holding_the_union::<LockFreeBuffer>();
    equals_one_buffer_holding_the_union::<GlobalLockBuffer>();
}

/// Wilson-Hilferty: chi-square with `df` degrees of freedom to an approximate N(0,1) score.
fn z_score(chi2: f64, df: f64) -> f64 {
    let v = 2.0 / (9.0 * df);
    ((chi2 / df).cbrt() - (1.0 - v)) / v.sqrt()
}

#[test]
fn sharded_draws_pass_a_chi_square_against_the_union() {
    let fill = [PER_SHARD, 30, 0, PER_SHARD, 61];
    let (sharded, _) = sharded_and_union::<LockFreeBuffer>(&fill, WeightNormalization::Global);
    let n = PER_SHARD * fill.len();
    let stored: Vec<f64> = (0..n)
        .map(|i| {
            let k = i / PER_SHARD;
            if i % PER_SHARD < fill[k] {
                priority(i).powf(0.7)
            } else {
                0.0
            }
        })
        .collect();
    let total: f64 = stored.iter().sum();
    for (mode, seed) in [(SampleMode::Independent, 5), (SampleMode::Stratified, 6)] {
        let mut counts = vec![0u64; n];
        let (mut coordinator, mut out) = (Coordinator::new(), SampleBatch::default());
        let mut rng = SmallRng::seed_from_u64(seed);
        let draws = 400_000;
        for _ in 0..draws / 500 {
            sharded
                .sample_into(&mut coordinator, 500, 0.4, mode, &mut rng, &mut out)
                .unwrap();
            for &i in &out.indices {
                counts[i] += 1;
            }
        }
        let mut chi2 = 0.0;
        let mut df = 0.0;
        for (i, &c) in counts.iter().enumerate() {
            if stored[i] == 0.0 {
                assert_eq!(c, 0, "item {i} has priority 0 and was drawn");
                continue;
            }
            let e = stored[i] / total * draws as f64;
            chi2 += (c as f64 - e).powi(2) / e;
            df += 1.0;
        }
        let z = z_score(chi2, df - 1.0);
        assert!(z < 4.75, "{mode:?}: chi-square z = {z}");
        // Power: the same counts against a uniform law over the positive items fail.
        let positive = stored.iter().filter(|&&p| p > 0.0).count() as f64;
        let wrong: f64 = counts
            .iter()
            .zip(&stored)
            .filter(|(_, &p)| p > 0.0)
            .map(|(&c, _)| {
                let e = draws as f64 / positive;
                (c as f64 - e).powi(2) / e
            })
            .sum();
        assert!(z_score(wrong, df - 1.0) > 4.75, "the test has no power");
    }
}

fn sample_at_descends_at_the_fractions<B: ConcurrentBuffer>() {
    let buffer = B::new(config(16, WeightNormalization::Global)).unwrap();
    let (id, obs, _) = rows(0..4);
    buffer
        .insert_batch(
            &[(&id[..]).into(), (&obs[..]).into()],
            Some(&[1.0, 0.0, 3.0, 4.0]),
        )
        .unwrap();
    let stored: Vec<f64> = [1.0f64, 0.0, 3.0, 4.0]
        .iter()
        .map(|p| p.powf(0.7))
        .collect();
    let total: f64 = stored.iter().sum();
    let fractions = [
        0.0,
        stored[0] / total - 1e-9,
        stored[0] / total + 1e-9,
        0.999_999,
    ];
    let mut out = SampleBatch::default();
    let mut rng = SmallRng::seed_from_u64(1);
    let stats = buffer
        .sample_at_into(&fractions, &mut rng, &mut out)
        .unwrap();
    assert_eq!(out.indices, [0, 0, 2, 3]);
    assert_eq!(ids(&out), [0, 0, 2, 3]);
    assert_eq!(out.weights, [1.0; 4]);
    for (p, &i) in out.probabilities.iter().zip(&out.indices) {
        assert!((p - stored[i] / total).abs() < 1e-15);
    }
    assert!((stats.total - total).abs() < 1e-12);
    assert_eq!((stats.len, stats.capacity, stats.inserted), (4, 16, 4));
    assert_eq!(stats.min_positive, Some(stored[0]));
    assert_eq!(stats.running_max, stored[3]);
    assert_eq!(buffer.stats(), stats);

    // Into the caller's memory.
    let (mut id_out, mut obs_out) = (vec![0i64; 2], vec![0f32; 4]);
    let mut info = SampleBatch::default();
    buffer
        .sample_at_columns_into(
            &[0.99, 0.0],
            &mut rng,
            &mut info,
            &mut [(&mut id_out[..]).into(), (&mut obs_out[..]).into()],
        )
        .unwrap();
    assert_eq!(id_out, [3, 0]);
    assert_eq!(obs_out, [3.0, -3.0, 0.0, -0.0]);

    // Bad fractions and empty calls change nothing.
    let before = out.clone();
    for bad in [&[][..], &[1.0], &[-0.1], &[f64::NAN], &[0.5, f64::INFINITY]] {
        let e = buffer.sample_at_into(bad, &mut rng, &mut out).unwrap_err();
        assert!(
            matches!(e, Error::ZeroBatch | Error::InvalidParameter { .. }),
            "{e}"
        );
        assert_eq!(out, before);
    }
    let e = buffer
        .sample_at_columns_into(&[0.5], &mut rng, &mut info, &mut [(&mut id_out[..]).into()])
        .unwrap_err();
    assert!(matches!(e, Error::ColumnCount { .. }), "{e}");
    let empty = B::new(config(4, WeightNormalization::Global)).unwrap();
    assert_eq!(
        empty.sample_at_into(&[0.5], &mut rng, &mut out),
        Err(Error::Empty)
    );
    let stats = empty.stats();
    assert_eq!((stats.total, stats.len, stats.min_positive), (0.0, 0, None));
    assert_eq!(stats.running_max, 1.0);
    buffer.clear();
    assert_eq!(
        buffer.sample_at_into(&[0.5], &mut rng, &mut out),
        Err(Error::Empty)
    );
    assert_eq!(out, before);
}

#[test]
fn sample_at_and_stats_on_every_variant() {
    sample_at_descends_at_the_fractions::<SplitLockBuffer>();
    sample_at_descends_at_the_fractions::<LockFreeBuffer>();
    sample_at_descends_at_the_fractions::<GlobalLockBuffer>();
    sample_at_descends_at_the_fractions::<GlobalSpinLockBuffer>();
    // The sequential buffer, directly.
    let mut seq = ReplayBuffer::new(config(8, WeightNormalization::Global)).unwrap();
    let (id, obs, _) = rows(0..2);
    seq.insert_batch(&[(&id[..]).into(), (&obs[..]).into()], Some(&[1.0, 1.0]))
        .unwrap();
    let mut out = SampleBatch::default();
    let stats = seq.sample_at_into(&[0.25, 0.75], &mut out).unwrap();
    assert_eq!(out.indices, [0, 1]);
    assert_eq!((stats.len, stats.min_positive), (2, Some(1.0)));
}

#[test]
fn live_max_stats_report_the_largest_stored_priority() {
    let schema = Schema::new().column("x", DType::U8, 1);
    let config = Config::builder(4, schema)
        .alpha(1.0)
        .default_priority(DefaultPriority::LiveMax)
        .build()
        .unwrap();
    let buffer = SplitLockBuffer::new(config).unwrap();
    let keys = buffer
        .insert_batch(&[(&[1u8, 2][..]).into()], Some(&[5.0, 2.0]))
        .unwrap();
    assert_eq!(buffer.stats().running_max, 5.0);
    buffer.update_priorities(&keys[..1], &[1.0]).unwrap();
    assert_eq!(buffer.stats().running_max, 2.0);
}

#[test]
fn keys_route_updates_and_bad_keys_change_nothing() {
    let (sharded, _) =
        sharded_and_union::<SplitLockBuffer>(&[10, 10, 10], WeightNormalization::Global);
    let (mut coordinator, mut out) = (Coordinator::new(), SampleBatch::default());
    let mut rng = SmallRng::seed_from_u64(9);
    sharded
        .sample_into(
            &mut coordinator,
            64,
            0.4,
            SampleMode::Stratified,
            &mut rng,
            &mut out,
        )
        .unwrap();
    let report = sharded
        .update_priorities(&out.keys, &vec![2.0; out.keys.len()])
        .unwrap();
    assert_eq!((report.applied, report.stale), (64, 0));
    for key in &out.keys {
        let k = sharded.shard_of(*key).unwrap();
        assert_eq!(
            sharded.shards()[k].priority(key.index).unwrap(),
            2f64.powf(0.7)
        );
    }
    let totals: Vec<f64> = sharded.stats().iter().map(|s| s.total).collect();
    let good = out.keys[0];
    let tags: Vec<u16> = sharded
        .shards()
        .iter()
        .map(|s| s.config().key_tag())
        .collect();
    let past = tags.iter().max().unwrap() + 1;
    let bad_keys = [
        // An untagged key, the next tag after the shards' (a fourth shard's), a tag no buffer
        // can have.
        Key::new(0, good.index, good.insertion()),
        Key::new(past, good.index, good.insertion()),
        Key {
            index: 0,
            generation: u64::MAX,
        },
    ];
    for bad in bad_keys {
        let e = sharded
            .update_priorities(&[good, bad], &[9.0, 9.0])
            .unwrap_err();
        assert!(matches!(e, Error::UnknownShard { shards: 3, .. }), "{e}");
    }
    // A generation never handed out, a bad priority, lengths that differ.
    let never = Key::new(tags[0], 0, 96);
    assert!(matches!(
        sharded.update_priorities(&[good, never], &[9.0, 9.0]),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        sharded.update_priorities(&[good, good], &[9.0, f64::NAN]),
        Err(Error::InvalidPriority { position: 1, .. })
    ));
    assert!(matches!(
        sharded.update_priorities(&[good], &[]),
        Err(Error::LengthMismatch { .. })
    ));
    let after: Vec<f64> = sharded.stats().iter().map(|s| s.total).collect();
    assert_eq!(totals, after, "a refused update changed something");

    // Stale keys are counted: overwrite shard 0's items.
    let shard0: Vec<Key> = out
        .keys
        .iter()
        .copied()
        .filter(|k| sharded.shard_of(*k) == Some(0))
        .collect();
    let (id, obs, ps) = rows(0..PER_SHARD);
    sharded
        .insert_batch(0, &[(&id[..]).into(), (&obs[..]).into()], Some(&ps))
        .unwrap();
    let report = sharded
        .update_priorities(&shard0, &vec![1.0; shard0.len()])
        .unwrap();
    assert_eq!((report.applied, report.stale), (0, shard0.len()));
    assert!(!shard0.is_empty());
}

#[test]
fn shard_keys_and_construction_errors() {
    let c = config(4, WeightNormalization::Global);
    // Shards get consecutive tags from the configuration's, or from a drawn one.
    let at = |tag: u16| {
        Config::builder(4, c.schema().clone())
            .key_tag(tag)
            .build()
            .unwrap()
    };
    let numbered = ShardedBuffer::<SplitLockBuffer>::new(3, at(7)).unwrap();
    let tags: Vec<u16> = numbered
        .shards()
        .iter()
        .map(|s| s.config().key_tag())
        .collect();
    assert_eq!(tags, [7, 8, 9]);
    let top = ShardedBuffer::<SplitLockBuffer>::new(2, at(Key::MAX_TAG - 1)).unwrap();
    let (id, obs, _) = rows(0..1);
    let key = top
        .insert(1, &[(&id[..]).into(), (&obs[..]).into()], None)
        .unwrap();
    assert!(key.generation < 1 << 63, "keys fit in an int64");
    assert_eq!(
        (key.tag(), top.shard_of(key)),
        (u64::from(Key::MAX_TAG), Some(1))
    );
    let e = ShardedBuffer::<SplitLockBuffer>::new(2, at(Key::MAX_TAG)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidParameter {
                name: "key_tag",
                ..
            }
        ),
        "{e}"
    );
    let drawn = ShardedBuffer::<SplitLockBuffer>::new(2, c.clone()).unwrap();
    let t = drawn.shards()[0].config().key_tag();
    assert!(t >= 1 && drawn.shards()[1].config().key_tag() == t + 1);
    // Shards made apart need distinct tags.
    let e = ShardedBuffer::from_shards(vec![
        SplitLockBuffer::new(at(5)).unwrap(),
        SplitLockBuffer::new(at(6)).unwrap(),
        SplitLockBuffer::new(at(5)).unwrap(),
    ])
    .unwrap_err();
    assert!(
        e.to_string().contains("shards 0 and 2 share key tag 5"),
        "{e}"
    );
    assert!(ShardedBuffer::<SplitLockBuffer>::new(0, c.clone()).is_err());
    assert!(ShardedBuffer::<SplitLockBuffer>::from_shards(vec![]).is_err());
    let other = SplitLockBuffer::new(config(8, WeightNormalization::Global)).unwrap();
    let e = ShardedBuffer::from_shards(vec![SplitLockBuffer::new(c.clone()).unwrap(), other])
        .unwrap_err();
    assert!(e.to_string().contains("shard 1"), "{e}");
    let sharded = ShardedBuffer::<SplitLockBuffer>::new(2, c).unwrap();
    let (id, obs, _) = rows(0..1);
    assert!(matches!(
        sharded.insert(2, &[(&id[..]).into(), (&obs[..]).into()], None),
        Err(Error::OutOfRange { .. })
    ));
    let (mut coordinator, mut out) = (Coordinator::new(), SampleBatch::default());
    let mut rng = SmallRng::seed_from_u64(1);
    assert_eq!(
        sharded.sample_into(
            &mut coordinator,
            4,
            0.4,
            SampleMode::Stratified,
            &mut rng,
            &mut out
        ),
        Err(Error::Empty)
    );
    sharded
        .insert(1, &[(&id[..]).into(), (&obs[..]).into()], Some(0.0))
        .unwrap();
    assert_eq!(
        sharded.sample_into(
            &mut coordinator,
            4,
            0.4,
            SampleMode::Stratified,
            &mut rng,
            &mut out
        ),
        Err(Error::ZeroTotalPriority)
    );
    assert_eq!(out, SampleBatch::default());
}

#[test]
fn the_coordinator_checks_its_inputs_and_weighs_stale_plans_by_the_actual_draw() {
    let mut rng = SmallRng::seed_from_u64(3);
    let mut c = Coordinator::new();
    let stats = |total: f64, len: usize, min: Option<f64>| Stats {
        total,
        len,
        capacity: 8,
        inserted: len as u64,
        min_positive: min,
        running_max: 1.0,
    };
    assert_eq!(
        c.plan(&[], 4, SampleMode::Stratified, &mut rng),
        Err(Error::Empty)
    );
    assert_eq!(
        c.plan(
            &[stats(1.0, 1, Some(1.0))],
            0,
            SampleMode::Stratified,
            &mut rng
        ),
        Err(Error::ZeroBatch)
    );
    assert!(c
        .plan(
            &[stats(f64::NAN, 1, Some(1.0))],
            4,
            SampleMode::Stratified,
            &mut rng
        )
        .is_err());
    // Two shards planned with totals 1 and 3: stratified, 4 draws, one in shard 0.
    c.plan(
        &[stats(1.0, 1, Some(1.0)), stats(3.0, 3, Some(1.0))],
        4,
        SampleMode::Stratified,
        &mut rng,
    )
    .unwrap();
    assert_eq!((c.fractions(0).len(), c.fractions(1).len()), (1, 3));
    assert!(c.fractions(1).iter().all(|f| (0.0..1.0).contains(f)));
    let (mut p, mut w) = (vec![], vec![]);
    assert!(matches!(
        c.finish(
            &[Reply {
                priorities: &[1.0],
                total: 1.0
            }],
            0.5,
            WeightNormalization::Global,
            &mut p,
            &mut w
        ),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        c.finish(
            &[
                Reply {
                    priorities: &[1.0],
                    total: 1.0
                },
                Reply {
                    priorities: &[1.0],
                    total: 3.0
                }
            ],
            0.5,
            WeightNormalization::Global,
            &mut p,
            &mut w
        ),
        Err(Error::LengthMismatch { .. })
    ));
    // Shard 1 changed since the plan (its total is now 6, one item of priority 4): each
    // draw's probability is the actual one, (T_k / T) (p / T_k').
    c.finish(
        &[
            Reply {
                priorities: &[1.0],
                total: 1.0,
            },
            Reply {
                priorities: &[1.0, 1.0, 4.0],
                total: 6.0,
            },
        ],
        1.0,
        WeightNormalization::Global,
        &mut p,
        &mut w,
    )
    .unwrap();
    let expected = [0.25, 0.75 / 6.0, 0.75 / 6.0, 0.75 * 4.0 / 6.0];
    for (a, b) in p.iter().zip(expected) {
        assert!((a - b).abs() < 1e-15, "{p:?}");
    }
    // Weights in (0, 1], the smallest probability getting 1.
    assert!(w.iter().all(|&x| x > 0.0 && x <= 1.0));
    assert_eq!(w[1], 1.0);
    assert!((w[0] - (0.75 / 6.0) / 0.25).abs() < 1e-15);
}

#[test]
fn actors_on_their_own_shards_and_learners_on_the_union_lose_nothing() {
    const ACTORS: usize = 3;
    const CAPACITY: usize = 512;
    const ITEMS: usize = 3000;
    let schema = Schema::new().column("x", DType::I64, 2);
    let config = Config::builder(CAPACITY, schema).build().unwrap();
    let sharded = ShardedBuffer::<LockFreeBuffer>::new(ACTORS, config).unwrap();
    std::thread::scope(|s| {
        for actor in 0..ACTORS {
            let sharded = &sharded;
            s.spawn(move || {
                for i in 0..ITEMS / 10 {
                    let base = (actor * ITEMS + i * 10) as i64;
                    let x: Vec<i64> = (base..base + 10).flat_map(|v| [v, v * 3]).collect();
                    let ps: Vec<f64> = (0..10).map(|j| 0.5 + j as f64).collect();
                    sharded
                        .insert_batch(actor, &[(&x[..]).into()], Some(&ps))
                        .unwrap();
                }
            });
        }
        for learner in 0..2 {
            let sharded = &sharded;
            s.spawn(move || {
                let (mut c, mut out) = (Coordinator::new(), SampleBatch::default());
                let mut rng = SmallRng::seed_from_u64(learner);
                let mut done = 0;
                while done < 300 {
                    match sharded.sample_into(
                        &mut c,
                        32,
                        0.4,
                        SampleMode::Stratified,
                        &mut rng,
                        &mut out,
                    ) {
                        Ok(()) => {
                            let x = match &out.columns[0] {
                                kary_replay::ColumnData::I64(x) => x,
                                _ => unreachable!(),
                            };
                            for (j, key) in out.keys.iter().enumerate() {
                                // Whole rows, from the shard the key names.
                                assert_eq!(x[2 * j + 1], x[2 * j] * 3);
                                let k = sharded.shard_of(*key).unwrap();
                                assert_eq!(x[2 * j] as usize / ITEMS, k);
                            }
                            assert!(out.weights.iter().all(|&w| w > 0.0 && w <= 1.0));
                            let r = sharded
                                .update_priorities(&out.keys, &vec![1.5; 32])
                                .unwrap();
                            assert_eq!(r.applied + r.stale, 32);
                            done += 1;
                        }
                        Err(Error::Empty) | Err(Error::Contention { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    for (k, shard) in sharded.shards().iter().enumerate() {
        assert_eq!(shard.inserted(), ITEMS as u64, "shard {k}");
        assert_eq!(shard.len(), CAPACITY);
        assert!(shard.consistency().exact, "shard {k}");
        // The newest CAPACITY items are the ones stored (FIFO eviction).
        let mut stored: Vec<u64> = (0..CAPACITY)
            .map(|i| shard.key(i).unwrap().unwrap().insertion())
            .collect();
        stored.sort();
        assert_eq!(
            stored,
            ((ITEMS - CAPACITY) as u64..ITEMS as u64).collect::<Vec<_>>()
        );
    }
    assert_eq!(sharded.inserted(), (ACTORS * ITEMS) as u64);
}

/// A directory under the system's temporary one, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("kr-shard-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn checkpoint_kind(e: Error) -> kary_replay::CheckpointErrorKind {
    match e {
        Error::Checkpoint { kind, .. } => kind,
        other => panic!("not a checkpoint error: {other:?}"),
    }
}

fn sharded_checkpoint_round_trips<B: ConcurrentBuffer + kary_replay::Load>(name: &str) {
    use kary_replay::checkpoint::{read_sharded_manifest, shard_dir};
    let scratch = Scratch::new(name);
    let (sharded, _) = sharded_and_union::<B>(&[40, 0, PER_SHARD], WeightNormalization::Global);
    let (id, obs, ps) = rows(1000..1010);
    sharded
        .insert_batch(2, &[(&id[..]).into(), (&obs[..]).into()], Some(&ps))
        .unwrap(); // 10 evicted in shard 2
    let mut coordinator = Coordinator::new();
    let mut batch = SampleBatch::default();
    let mut rng = SmallRng::seed_from_u64(5);
    (sharded.sample_into(
        &mut coordinator,
        64,
        0.4,
        SampleMode::Stratified,
        &mut rng,
        &mut batch,
    ))
    .unwrap();
    let dir = scratch.0.join("ckpt");
    sharded.save(&dir).unwrap();
    let manifest = read_sharded_manifest(&dir).unwrap();
    assert_eq!((manifest.num_shards, manifest.capacity), (3, PER_SHARD));
    let counts: Vec<(u64, usize)> = manifest
        .shards
        .iter()
        .map(|s| (s.inserted, s.len))
        .collect();
    assert_eq!(counts, [(40, 40), (0, 0), (106, 96)]);
    let back = ShardedBuffer::<B>::load(&dir).unwrap();
    for (a, b) in sharded.shards().iter().zip(back.shards()) {
        assert_eq!(a.stats(), b.stats());
        for slot in 0..PER_SHARD {
            assert_eq!(a.priority(slot).unwrap(), b.priority(slot).unwrap());
            assert_eq!(a.key(slot).unwrap(), b.key(slot).unwrap());
        }
    }
    // Keys handed out before the save apply to the loaded buffer as to the saved one.
    let p = vec![3.0; batch.keys.len()];
    let old = sharded.update_priorities(&batch.keys, &p).unwrap();
    assert_eq!(back.update_priorities(&batch.keys, &p).unwrap(), old);
    // A save never replaces.
    assert_eq!(
        checkpoint_kind(sharded.save(&dir).unwrap_err()),
        kary_replay::CheckpointErrorKind::Exists
    );
    // A shard's file cut short: that shard's own error, nothing loaded.
    let victim = std::fs::read_dir(shard_dir(&dir, 2))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "npy"))
        .unwrap();
    let data = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &data[..data.len() / 2]).unwrap();
    assert!(ShardedBuffer::<B>::load(&dir).is_err());
    std::fs::write(&victim, &data).unwrap();
    assert!(ShardedBuffer::<B>::load(&dir).is_ok());
    // A committed sharded checkpoint in a numbered directory is a checkpoint to `latest`
    // and `clean` (which once removed it as an unfinished save).
    let numbered = kary_replay::checkpoint::numbered(&scratch.0, 7);
    sharded.save(&numbered).unwrap();
    std::fs::create_dir(kary_replay::checkpoint::numbered(&scratch.0, 8)).unwrap();
    assert_eq!(kary_replay::checkpoint::clean(&scratch.0).unwrap(), 1);
    assert_eq!(
        kary_replay::checkpoint::latest(&scratch.0).unwrap(),
        Some(numbered.clone())
    );
    assert!(ShardedBuffer::<B>::load(&numbered).is_ok());
}

#[test]
fn sharded_checkpoints_round_trip_on_every_variant() {
    sharded_checkpoint_round_trips::<LockFreeBuffer>("lockfree");
    sharded_checkpoint_round_trips::<SplitLockBuffer>("split");
    sharded_checkpoint_round_trips::<GlobalLockBuffer>("global");
}

#[test]
fn a_damaged_or_unfinished_sharded_checkpoint_is_a_typed_error() {
    use kary_replay::checkpoint::{read_sharded_manifest, SHARDED_FORMAT};
    use kary_replay::CheckpointErrorKind as Kind;
    let scratch = Scratch::new("damage");
    let (sharded, _) = sharded_and_union::<SplitLockBuffer>(&[10, 20], WeightNormalization::Global);
    let dir = scratch.0.join("ckpt");
    sharded.save(&dir).unwrap();
    let load = || ShardedBuffer::<SplitLockBuffer>::load(&dir).map(|_| ());
    let (commit, manifest) = (dir.join("COMMIT"), dir.join("manifest.json"));
    let good_commit = std::fs::read(&commit).unwrap();
    let good_manifest = std::fs::read_to_string(&manifest).unwrap();
    assert!(String::from_utf8(good_commit.clone())
        .unwrap()
        .starts_with(&format!("{SHARDED_FORMAT} manifest-crc32 ")));

    // No COMMIT: an unfinished save; no directory at all: not found.
    std::fs::remove_file(&commit).unwrap();
    assert_eq!(checkpoint_kind(load().unwrap_err()), Kind::Uncommitted);
    let missing = ShardedBuffer::<SplitLockBuffer>::load(scratch.0.join("nothing"));
    assert_eq!(checkpoint_kind(missing.unwrap_err()), Kind::NotFound);
    // Another format's COMMIT.
    std::fs::write(
        &commit,
        "kary-replay-checkpoint v1 manifest-crc32 00000000\n",
    )
    .unwrap();
    assert_eq!(checkpoint_kind(load().unwrap_err()), Kind::Format);
    // A manifest changed after its COMMIT: the CRC says so.
    std::fs::write(&commit, &good_commit).unwrap();
    std::fs::write(
        &manifest,
        good_manifest.replace("\"len\": 20", "\"len\": 19"),
    )
    .unwrap();
    assert_eq!(checkpoint_kind(load().unwrap_err()), Kind::Corrupt);
    // The first writer's COMMIT (the format line alone) is read without a CRC; then the
    // manifest's own rules and each shard's counts still catch a change.
    std::fs::write(&commit, format!("{SHARDED_FORMAT}\n")).unwrap();
    assert_eq!(checkpoint_kind(load().unwrap_err()), Kind::Corrupt); // len 19 is not shard 1's 20
    std::fs::write(
        &manifest,
        good_manifest.replace("\"num_shards\": 2", "\"num_shards\": 3"),
    )
    .unwrap();
    assert_eq!(
        checkpoint_kind(read_sharded_manifest(&dir).unwrap_err()),
        Kind::Corrupt
    );
    std::fs::write(&manifest, "{ not json").unwrap();
    assert_eq!(
        checkpoint_kind(read_sharded_manifest(&dir).unwrap_err()),
        Kind::Corrupt
    );
    std::fs::write(&manifest, &good_manifest).unwrap();
    load().unwrap();
    // Fields a front end added are kept through a read.
    let mut m = read_sharded_manifest(&dir).unwrap();
    m.extra.insert("key_base".into(), 7.into());
    let other = scratch.0.join("other");
    std::fs::create_dir(&other).unwrap();
    kary_replay::checkpoint::write_sharded_manifest(&other, &m).unwrap();
    assert_eq!(read_sharded_manifest(&other).unwrap().extra["key_base"], 7);
    // A manifest whose fields contradict each other is refused before anything is written.
    let third = scratch.0.join("third");
    std::fs::create_dir(&third).unwrap();
    m.num_shards = 5;
    let refused = kary_replay::checkpoint::write_sharded_manifest(&third, &m);
    assert_eq!(checkpoint_kind(refused.unwrap_err()), Kind::Invalid);
    assert!(!third.join("manifest.json").exists() && !third.join("COMMIT").exists());
}
