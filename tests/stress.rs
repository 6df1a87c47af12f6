//! Real-thread stress: A actor threads insert (single inserts, batches of mixed sizes up to
//! twice the capacity, and a staged writer each) while L learner threads sample and update
//! priorities (A, L up to 4), on a small capacity so that slots are overwritten
//! constantly, for about 10^6 operations per variant (scaled by `KARY_STRESS_SCALE`, which
//! the ThreadSanitizer run lowers).
//!
//! During the run every sampled item is checked: all its elements equal (no torn read),
//! positive priority (but in the quarter of the batches drawn uniformly), index in range,
//! weight in (0, 1], data that an actor wrote, and (a quarter of the batches are drawn
//! without replacement) no item twice in such a batch.
//! Afterwards: every insert is accounted for (generations 0..inserted handed out exactly
//! once; each slot holds the newest generation that maps to it, so everything older was
//! evicted in FIFO order), each surviving slot holds its item's data, and the tree is
//! consistent (exact: priorities are small integers with alpha 1).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;

use kary_replay::{
    ConcurrentBuffer, Config, DType, DefaultPriority, Error, GlobalLockBuffer,
    GlobalSpinLockBuffer, Key, LockFreeBuffer, SampleBatch, SampleMode, Schema, SplitLockBuffer,
};
use rand::{rngs::SmallRng, Rng, SeedableRng};

const ROW: usize = 12;
const CAPACITY: usize = 61;
const BATCH: usize = 8;

#[path = "support/scale.rs"]
mod scale;
use scale::factor as scale;

fn config(default_priority: DefaultPriority) -> Config {
    Config::builder(CAPACITY, Schema::new().column("x", DType::I64, ROW))
        .fanout(4)
        .alpha(1.0)
        .default_priority(default_priority)
        .build()
        .unwrap()
}

/// Every actor's item `seq` is `ROW` copies of `actor << 32 | seq`.
fn value(actor: usize, seq: u64) -> i64 {
    ((actor as i64) << 32) | seq as i64
}

#[derive(Default)]
struct LearnerStats {
    sampled: u64,
    contention: u64,
    applied: u64,
    stale: u64,
}

fn stress<B: ConcurrentBuffer>(
    actors: usize,
    learners: usize,
    operations: u64,
    default_priority: DefaultPriority,
) {
    let buffer = B::new(config(default_priority)).unwrap();
    let inserts_per_actor = (operations / 2 / actors as u64).max(1);
    let samples_per_learner = (operations / 2 / learners as u64).max(BATCH as u64);
    let start = Barrier::new(actors + learners);
    let actors_done = AtomicBool::new(false);
    let actors_left = AtomicU64::new(actors as u64);
    let (keys, stats) = std::thread::scope(|s| {
        let actor_handles: Vec<_> = (0..actors)
            .map(|actor| {
                let (buffer, start, actors_left, actors_done) =
                    (&buffer, &start, &actors_left, &actors_done);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(actor as u64);
                    let mut keys = Vec::with_capacity(inserts_per_actor as usize);
                    // A staged writer (flushing every 1 to 8 items) beside the direct calls;
                    // its items' seqs wait in `staged` until a push or flush returns keys.
                    let mut writer = buffer.writer(rng.random_range(1..=8)).unwrap();
                    let mut staged = std::collections::VecDeque::new();
                    start.wait();
                    let mut seq = 0;
                    while seq < inserts_per_actor {
                        let roll = rng.random_range(0..100);
                        if roll < 20 {
                            // A batch of mixed size: mostly 1 to 3 items, sometimes more
                            // than the capacity (several chunks, the batch overwriting
                            // itself), with priorities or without.
                            let n = if roll < 2 {
                                rng.random_range(1..=2 * CAPACITY as u64)
                            } else {
                                rng.random_range(1..=3)
                            }
                            .min(inserts_per_actor - seq);
                            let data: Vec<i64> = (seq..seq + n)
                                .flat_map(|q| [value(actor, q); ROW])
                                .collect();
                            let ps: Vec<f64> =
                                (0..n).map(|_| rng.random_range(1..=8) as f64).collect();
                            let ps = rng.random_bool(0.7).then_some(&ps[..]);
                            let got = buffer.insert_batch(&[(&data).into()], ps).unwrap();
                            keys.extend(got.into_iter().zip(seq..seq + n));
                            seq += n;
                        } else if roll < 60 {
                            let priority =
                                rng.random_bool(0.5).then(|| rng.random_range(1..=8) as f64);
                            let row = [value(actor, seq); ROW];
                            staged.push_back(seq);
                            let got = writer.push(&[(&row[..]).into()], priority).unwrap();
                            keys.extend(got.iter().map(|&k| (k, staged.pop_front().unwrap())));
                            seq += 1;
                        } else {
                            let priority =
                                rng.random_bool(0.5).then(|| rng.random_range(1..=8) as f64);
                            let key = buffer
                                .insert(&[(&[value(actor, seq); ROW][..]).into()], priority)
                                .unwrap();
                            keys.push((key, seq));
                            seq += 1;
                        }
                    }
                    let got = writer.flush().unwrap();
                    keys.extend(got.iter().map(|&k| (k, staged.pop_front().unwrap())));
                    assert!(staged.is_empty());
                    drop(writer);
                    if actors_left.fetch_sub(1, Ordering::AcqRel) == 1 {
                        actors_done.store(true, Ordering::Release);
                    }
                    keys
                })
            })
            .collect();
        let learner_handles: Vec<_> = (0..learners)
            .map(|learner| {
                let (buffer, start, actors_done) = (&buffer, &start, &actors_done);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(1000 + learner as u64);
                    let mut stats = LearnerStats::default();
                    let mut batch = SampleBatch::default();
                    start.wait();
                    // Keep sampling until this learner's share is done and the actors are
                    // done too, so that learners run alongside actors the whole time.
                    while stats.sampled < samples_per_learner
                        || !actors_done.load(Ordering::Acquire)
                    {
                        let mode = match rng.random_range(0..4) {
                            0 => SampleMode::Stratified,
                            1 => SampleMode::Independent,
                            2 => SampleMode::Uniform,
                            _ => SampleMode::WithoutReplacement,
                        };
                        match buffer.sample_into(BATCH, 0.6, mode, &mut rng, &mut batch) {
                            Ok(()) => {}
                            Err(Error::Contention { .. }) => {
                                stats.contention += 1;
                                continue;
                            }
                            // Without replacement, fewer positive items than the batch (the
                            // learners set priorities to 0 too).
                            Err(Error::InvalidParameter { name: "batch", .. })
                                if mode == SampleMode::WithoutReplacement =>
                            {
                                continue;
                            }
                            Err(Error::Empty) | Err(Error::ZeroTotalPriority) => {
                                // Learners set priorities to 0 too: once the actors are
                                // done, everything may have reached 0 for good.
                                if actors_done.load(Ordering::Acquire) {
                                    break;
                                }
                                std::thread::yield_now();
                                continue;
                            }
                            Err(e) => panic!("unexpected sampling error: {e}"),
                        }
                        let values = batch.columns[0].as_i64().unwrap();
                        for b in 0..BATCH {
                            let item = &values[b * ROW..(b + 1) * ROW];
                            assert!(item.iter().all(|&v| v == item[0]), "torn read {item:?}");
                            if mode != SampleMode::Uniform {
                                assert!(batch.priorities[b] > 0.0, "zero-priority sample");
                            }
                            assert!(batch.indices[b] < CAPACITY);
                            assert_eq!(batch.keys[b].index, batch.indices[b]);
                            assert_eq!(
                                batch.keys[b].insertion() % CAPACITY as u64,
                                batch.indices[b] as u64
                            );
                            let w = batch.weights[b];
                            assert!(w > 0.0 && w <= 1.0, "weight {w}");
                            if mode == SampleMode::WithoutReplacement {
                                assert!(
                                    !batch.indices[..b].contains(&batch.indices[b]),
                                    "an item twice without replacement: {:?}",
                                    batch.indices
                                );
                            }
                        }
                        stats.sampled += BATCH as u64;
                        // Zero priorities too: those items must then never be sampled.
                        let ps: Vec<f64> =
                            (0..BATCH).map(|_| rng.random_range(0..=8) as f64).collect();
                        let report = buffer.update_priorities(&batch.keys, &ps).unwrap();
                        assert_eq!(report.applied + report.stale, BATCH);
                        // Read back by key: a stored priority of the item, or stale.
                        let mut read = Vec::new();
                        let stale = buffer.priorities_of(&batch.keys, &mut read).unwrap();
                        assert_eq!(read.iter().filter(|p| p.is_nan()).count(), stale);
                        assert!(read.iter().all(|&p| p.is_nan() || (0.0..=8.0).contains(&p)));
                        stats.applied += report.applied as u64;
                        stats.stale += report.stale as u64;
                    }
                    stats
                })
            })
            .collect();
        let keys: Vec<Vec<(Key, u64)>> = actor_handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        let stats: Vec<LearnerStats> = learner_handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        (keys, stats)
    });

    // Every insert is accounted for: generations 0..inserted, each exactly once.
    let total_inserts: u64 = keys.iter().map(|k| k.len() as u64).sum();
    assert_eq!(buffer.inserted(), total_inserts);
    let mut by_generation: HashMap<u64, i64> = HashMap::new();
    for (actor, ks) in keys.iter().enumerate() {
        for &(key, seq) in ks {
            assert_eq!(key.insertion() % CAPACITY as u64, key.index as u64);
            assert!(by_generation
                .insert(key.insertion(), value(actor, seq))
                .is_none());
        }
    }
    assert!((0..total_inserts).all(|g| by_generation.contains_key(&g)));
    assert_eq!(buffer.len(), CAPACITY.min(total_inserts as usize));
    // FIFO: each slot holds the newest generation that maps to it; all older were evicted.
    let filled = CAPACITY.min(total_inserts as usize);
    let survivors: Vec<Key> = (0..filled)
        .map(|i| {
            let key = buffer.key(i).unwrap().expect("slot filled");
            let newest =
                (total_inserts - 1 - i as u64) / CAPACITY as u64 * CAPACITY as u64 + i as u64;
            assert_eq!(
                key.insertion(),
                newest,
                "slot {i} does not hold the newest item"
            );
            key
        })
        .collect();
    assert!((filled..CAPACITY).all(|i| buffer.key(i).unwrap().is_none()));
    // Quiescent consistency (integer priorities: every sum is exact).
    let c = buffer.consistency();
    assert!(c.exact && c.extrema_exact, "{c:?}");
    let sum: f64 = (0..CAPACITY).map(|i| buffer.priority(i).unwrap()).sum();
    assert_eq!(buffer.total_priority(), sum);
    // Each survivor's data is its item's: give all priority 1, then a stratified sample of
    // `filled` items visits every filled slot once.
    let report = buffer
        .update_priorities(&survivors, &vec![1.0; filled])
        .unwrap();
    assert_eq!(report.applied, filled);
    let batch = buffer
        .sample(
            filled,
            1.0,
            SampleMode::Stratified,
            &mut SmallRng::seed_from_u64(9),
        )
        .unwrap();
    let values = batch.columns[0].as_i64().unwrap();
    for (b, key) in batch.keys.iter().enumerate() {
        assert_eq!(key.index, b);
        assert_eq!(
            values[b * ROW],
            by_generation[&key.insertion()],
            "slot {b} holds the wrong data"
        );
    }
    let sampled: u64 = stats.iter().map(|s| s.sampled).sum();
    let contention: u64 = stats.iter().map(|s| s.contention).sum();
    // Contention is expected when a writer is descheduled while it owns a slot that fills
    // a stratum (8 threads on 2 cores): the sampler reports it instead of waiting. It must
    // stay the exception, and sampling must make progress.
    assert!(sampled > 0);
    assert!(
        contention * 20 <= sampled / BATCH as u64 + 20,
        "contention {contention}"
    );
    assert!(stats.iter().map(|s| s.applied).sum::<u64>() > 0);
    eprintln!(
        "{}: A={actors} L={learners}: {total_inserts} inserts, {sampled} sampled, {} stale, {contention} contended",
        std::any::type_name::<B>(),
        stats.iter().map(|s| s.stale).sum::<u64>()
    );
}

fn all_shapes<B: ConcurrentBuffer>() {
    let per_shape = (250_000.0 * scale()) as u64;
    stress::<B>(1, 1, per_shape, DefaultPriority::RunningMax);
    stress::<B>(4, 4, per_shape, DefaultPriority::RunningMax);
    stress::<B>(4, 1, per_shape, DefaultPriority::LiveMax);
    stress::<B>(1, 4, per_shape, DefaultPriority::RunningMax);
}

#[test]
fn global_lock_under_stress() {
    all_shapes::<GlobalLockBuffer>();
    all_shapes::<GlobalSpinLockBuffer>();
}

#[test]
fn split_lock_under_stress() {
    all_shapes::<SplitLockBuffer>();
}

#[test]
fn lock_free_under_stress() {
    all_shapes::<LockFreeBuffer>();
}

/// With no eviction (capacity above everything inserted), every key a
/// learner holds is current, so heavy contention must never make an update come back
/// stale: 2 actors (single inserts, batches, a staged writer) and 2 learners updating every
/// sampled key, on every variant.
fn fresh_keys_are_never_stale<B: ConcurrentBuffer>() {
    // Miri interprets every instruction: a small buffer and few operations still cover the
    // protocol there; native runs (and ThreadSanitizer) use the full size.
    const CAP: usize = if cfg!(miri) { 1 << 8 } else { 1 << 15 };
    const MIN_BATCHES: u32 = if cfg!(miri) { 2 } else { 50 };
    let buffer = B::new(
        Config::builder(CAP, Schema::new().column("x", DType::I64, ROW))
            .fanout(8)
            .build()
            .unwrap(),
    )
    .unwrap();
    let per_actor = if cfg!(miri) {
        12
    } else {
        (12_000.0 * scale().max(0.1)) as i64
    };
    let stale = AtomicU64::new(0);
    let applied = AtomicU64::new(0);
    let actors_left = AtomicU64::new(2);
    std::thread::scope(|s| {
        for actor in 0..2i64 {
            let (buffer, actors_left) = (&buffer, &actors_left);
            s.spawn(move || {
                let mut writer = buffer.writer(16).unwrap();
                let mut i = 0;
                while i < per_actor {
                    let v = [actor << 32 | i; ROW];
                    match i % 3 {
                        0 => {
                            buffer.insert(&[(&v[..]).into()], Some(2.0)).unwrap();
                        }
                        1 => {
                            writer.push(&[(&v[..]).into()], None).unwrap();
                        }
                        _ => {
                            let data: Vec<i64> = v.iter().chain(&v).copied().collect();
                            buffer.insert_batch(&[(&data).into()], None).unwrap();
                            i += 1;
                        }
                    }
                    i += 1;
                }
                drop(writer);
                actors_left.fetch_sub(1, Ordering::AcqRel);
            });
        }
        for learner in 0..2u64 {
            let (buffer, actors_left, stale, applied) = (&buffer, &actors_left, &stale, &applied);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(learner);
                let mut batch = SampleBatch::default();
                // Run beside the actors, and at least MIN_BATCHES whatever the timing.
                let mut done = 0;
                while actors_left.load(Ordering::Acquire) > 0 || done < MIN_BATCHES {
                    match buffer.sample_into(32, 0.4, SampleMode::Stratified, &mut rng, &mut batch)
                    {
                        Ok(()) => {}
                        Err(Error::Empty) | Err(Error::Contention { .. }) => continue,
                        Err(e) => panic!("unexpected sampling error: {e}"),
                    }
                    let ps: Vec<f64> = (0..32).map(|_| rng.random_range(0.5..4.0)).collect();
                    let report = buffer.update_priorities(&batch.keys, &ps).unwrap();
                    stale.fetch_add(report.stale as u64, Ordering::Relaxed);
                    applied.fetch_add(report.applied as u64, Ordering::Relaxed);
                    done += 1;
                }
            });
        }
    });
    assert!(buffer.inserted() < CAP as u64, "the test needs no eviction");
    assert!(applied.load(Ordering::Relaxed) > 0);
    assert_eq!(
        stale.load(Ordering::Relaxed),
        0,
        "{}: a fresh key was reported stale",
        std::any::type_name::<B>()
    );
}

#[test]
fn fresh_keys_are_never_stale_on_any_variant() {
    fresh_keys_are_never_stale::<GlobalLockBuffer>();
    fresh_keys_are_never_stale::<SplitLockBuffer>();
    fresh_keys_are_never_stale::<LockFreeBuffer>();
}
