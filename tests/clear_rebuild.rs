//! `clear` and `rebuild` on every buffer : the sequential buffer and the
//! three concurrent ones through `dyn ConcurrentBuffer`, alone and beside real threads.

#[path = "support/scale.rs"]
mod scale;
use kary_replay::{
    ConcurrentBuffer, Config, DType, Error, GlobalLockBuffer, Key, LockFreeBuffer, ReplayBuffer,
    SampleMode, Schema, SplitLockBuffer,
};
use rand::{rngs::SmallRng, SeedableRng};

fn config(capacity: usize) -> Config {
    Config::builder(capacity, Schema::new().column("x", DType::I32, 2))
        .alpha(1.0)
        .initial_priority(2.0)
        // One tag for every variant, so that their keys compare equal.
        .key_tag(3)
        .build()
        .unwrap()
}

fn variants(capacity: usize) -> Vec<(&'static str, Box<dyn ConcurrentBuffer>)> {
    vec![
        (
            "GlobalLock",
            Box::new(GlobalLockBuffer::new(config(capacity)).unwrap()),
        ),
        (
            "SplitLock",
            Box::new(SplitLockBuffer::new(config(capacity)).unwrap()),
        ),
        (
            "LockFree",
            Box::new(LockFreeBuffer::new(config(capacity)).unwrap()),
        ),
    ]
}

fn row(i: u32) -> [i32; 2] {
    let i = i as i32;
    [i, i.wrapping_mul(7)]
}

#[test]
fn clear_empties_every_variant_and_the_buffer_works_on() {
    for (name, buffer) in variants(16) {
        let mut rng = SmallRng::seed_from_u64(1);
        let keys: Vec<Key> = (0..10)
            .map(|i| buffer.insert(&[(&row(i)).into()], Some(100.0)).unwrap())
            .collect();
        assert_eq!(buffer.len(), 10, "{name}");
        buffer.clear();
        assert_eq!(buffer.len(), 0, "{name}");
        assert!(buffer.is_empty(), "{name}");
        assert_eq!(buffer.total_priority(), 0.0, "{name}");
        assert_eq!(buffer.inserted(), 10, "{name}: generations keep counting");
        assert!(buffer.consistency().exact, "{name}");
        for i in 0..16 {
            assert_eq!(buffer.key(i).unwrap(), None, "{name}: slot {i} kept a key");
            assert_eq!(
                buffer.priority(i).unwrap(),
                0.0,
                "{name}: slot {i} kept a leaf"
            );
        }
        assert_eq!(
            buffer
                .sample(4, 0.4, SampleMode::Stratified, &mut rng)
                .unwrap_err(),
            Error::Empty,
            "{name}"
        );
        let report = buffer.update_priorities(&keys, &[1.0; 10]).unwrap();
        assert_eq!((report.applied, report.stale), (0, 10), "{name}: old keys");
        // The running maximum (100) restarted from the initial priority (2).
        let fresh = buffer.insert(&[(&row(99)).into()], None).unwrap();
        assert_eq!(fresh.insertion(), 10, "{name}");
        assert_eq!(buffer.priority(fresh.index).unwrap(), 2.0, "{name}");
        assert_eq!(buffer.len(), 1, "{name}");
        let batch = buffer
            .sample(8, 0.4, SampleMode::Independent, &mut rng)
            .unwrap();
        assert!(batch.keys.iter().all(|&k| k == fresh), "{name}");
        let expected: Vec<i32> = (0..8).flat_map(|_| row(99)).collect();
        assert_eq!(
            batch.columns[0].as_slice(),
            (&expected[..]).into(),
            "{name}: the rows after the clear"
        );
        // Fill past the capacity: len counts from the clear and saturates.
        for i in 0..40 {
            buffer.insert(&[(&row(i)).into()], Some(1.5)).unwrap();
        }
        assert_eq!(buffer.len(), 16, "{name}");
        assert!(buffer.consistency().exact, "{name}");
    }
}

#[test]
fn rebuild_keeps_an_exact_tree_exact_on_every_variant() {
    for (name, buffer) in variants(100) {
        for i in 0..100 {
            buffer
                .insert(&[(&row(i)).into()], Some(1e-8 + f64::from(i)))
                .unwrap();
        }
        let keys: Vec<Key> = (0..100).map(|i| buffer.key(i).unwrap().unwrap()).collect();
        let big: Vec<f64> = (0..100).map(|i| 1e8 * f64::from(i + 1)).collect();
        buffer.update_priorities(&keys, &big).unwrap();
        buffer.update_priorities(&keys, &[1e-8; 100]).unwrap();
        let total = buffer.total_priority();
        buffer.rebuild();
        assert_eq!(buffer.total_priority().to_bits(), total.to_bits(), "{name}");
        assert!(buffer.consistency().exact, "{name}");
        assert_eq!(buffer.len(), 100, "{name}");
    }
}

#[test]
fn sequential_clear_and_rebuild_agree_with_the_concurrent_ones() {
    let mut sequential = ReplayBuffer::new(config(16)).unwrap();
    let lock_free = LockFreeBuffer::new(config(16)).unwrap();
    for i in 0..20 {
        sequential
            .insert(&[(&row(i)).into()], Some(f64::from(i)))
            .unwrap();
        lock_free
            .insert(&[(&row(i)).into()], Some(f64::from(i)))
            .unwrap();
    }
    sequential.clear();
    lock_free.clear();
    for i in 0..5 {
        sequential.insert(&[(&row(i)).into()], None).unwrap();
        lock_free.insert(&[(&row(i)).into()], None).unwrap();
    }
    sequential.rebuild();
    lock_free.rebuild();
    assert_eq!(sequential.len(), lock_free.len());
    assert_eq!(
        sequential.total_priority().to_bits(),
        lock_free.total_priority().to_bits()
    );
    for i in 0..16 {
        assert_eq!(sequential.key(i).unwrap(), lock_free.key(i).unwrap());
        assert_eq!(
            sequential.priority(i).unwrap(),
            lock_free.priority(i).unwrap()
        );
    }
}

/// Actors insert, a learner samples and updates, while another thread clears and rebuilds
/// again and again. At the end (quiescence): a slot has a key exactly when its leaf is
/// positive (no item without its priority, no priority without its item), every sampled row
/// was whole, and the tree is exact.
#[test]
fn clear_and_rebuild_beside_actors_and_a_learner() {
    let rounds = scale::scaled(2000, 20) as u32;
    for (name, buffer) in variants(64) {
        let buffer = &*buffer;
        std::thread::scope(|s| {
            for actor in 0..2u32 {
                s.spawn(move || {
                    for i in 0..rounds {
                        let id = actor * 1_000_000 + i;
                        buffer
                            .insert(&[(&row(id)).into()], Some(1.0 + f64::from(i % 5)))
                            .unwrap();
                    }
                });
            }
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(3);
                for _ in 0..rounds / 4 {
                    match buffer.sample(8, 0.4, SampleMode::Stratified, &mut rng) {
                        Ok(batch) => {
                            let rows = batch.columns[0].as_slice();
                            let kary_replay::ColumnSlice::I32(rows) = rows else {
                                panic!("{name}: dtype")
                            };
                            for pair in rows.chunks(2) {
                                assert_eq!(pair[1], pair[0].wrapping_mul(7), "{name}: torn row");
                            }
                            buffer
                                .update_priorities(&batch.keys, &vec![0.5; batch.len()])
                                .unwrap();
                        }
                        Err(e) => assert!(
                            matches!(e, Error::Empty | Error::ZeroTotalPriority)
                                || e.is_retryable(),
                            "{name}: {e}"
                        ),
                    }
                }
            });
            s.spawn(move || {
                for _ in 0..(rounds / 100).max(3) {
                    buffer.clear();
                    buffer.rebuild();
                    std::thread::yield_now();
                }
            });
        });
        for i in 0..64 {
            let key = buffer.key(i).unwrap();
            let leaf = buffer.priority(i).unwrap();
            assert_eq!(
                key.is_some(),
                leaf > 0.0,
                "{name}: slot {i}: {key:?}, {leaf}"
            );
        }
        assert!(buffer.consistency().exact, "{name}");
        buffer.clear();
        assert_eq!(buffer.len(), 0, "{name}");
        assert_eq!(buffer.total_priority(), 0.0, "{name}");
    }
}
