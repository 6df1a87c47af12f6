//! The heap selectors, Reverb's `MaxHeap` and `MinHeap` (`SampleMode::MaxHeap`,
//! `SampleMode::MinHeap`): every draw takes the stored item of the largest (smallest)
//! positive priority that has a draw left, ties to the lower slot, on every flat buffer; with
//! `max_times_sampled = 1` a concurrent buffer hands its items out in priority order, each
//! once, to consumers at once (sequence and sharded buffers refuse the modes: tests/ordered.rs).
//! Against a sort of the stored priorities at every size and
//! fanout, across the ring's wrap and after updates and deletions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

#[cfg(all(unix, not(loom)))]
use kary_replay::ShmBuffer;
use kary_replay::{
    Checkpoint, ConcurrentBuffer, Config, DType, Error, GlobalLockBuffer, Key, Load,
    LockFreeBuffer, ReplayBuffer, SampleBatch, SampleMode, Schema, SplitLockBuffer, Xoshiro256,
};

fn config(capacity: usize, fanout: usize, k: u32) -> Config {
    Config::builder(capacity, Schema::new().column("x", DType::I64, []))
        .alpha(1.0)
        .fanout(fanout)
        .max_times_sampled(k)
        .max_heap(true)
        .build()
        .unwrap()
}

fn xs(out: &SampleBatch) -> Vec<i64> {
    out.columns[0].as_i64().unwrap().to_vec()
}

/// The items of `priorities` (item `i` in slot `i`) best first for `mode`, ties by slot,
/// zeros left out.
fn sorted(priorities: &[f64], mode: SampleMode) -> Vec<i64> {
    let mut order: Vec<usize> = (0..priorities.len())
        .filter(|&i| priorities[i] > 0.0)
        .collect();
    order.sort_by(|&a, &b| {
        let by_value = match mode {
            SampleMode::MaxHeap => priorities[b].total_cmp(&priorities[a]),
            _ => priorities[a].total_cmp(&priorities[b]),
        };
        by_value.then(a.cmp(&b))
    });
    order.into_iter().map(|i| i as i64).collect()
}

/// Priorities with ties and zeros: few distinct values.
fn priorities(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = Xoshiro256::new(seed);
    (0..n)
        .map(|_| (kary_replay::RandomSource::next_f64(&mut rng) * 6.0).floor() * 0.25)
        .collect()
}

/// Without `max_times_sampled`: every draw of a batch is the top item; after it is
/// deleted, the next; probabilities and weights 1.
fn top_item<B: ConcurrentBuffer>(name: &str) {
    let buffer = B::new(config(8, 4, 0)).unwrap();
    let keys: Vec<Key> = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
        .iter()
        .enumerate()
        .map(|(i, &p)| buffer.insert(&[(&[i as i64][..]).into()], Some(p)).unwrap())
        .collect();
    let mut rng = Xoshiro256::new(1);
    let mut out = SampleBatch::default();
    for (mode, first, then) in [(SampleMode::MaxHeap, 5, 7), (SampleMode::MinHeap, 1, 3)] {
        buffer
            .sample_into(3, 0.4, mode, &mut rng, &mut out)
            .unwrap();
        assert_eq!(xs(&out), [first; 3], "{name} {mode:?}");
        assert_eq!(out.probabilities, [1.0; 3], "{name}");
        assert_eq!(out.weights, [1.0; 3], "{name}");
        buffer.delete(&keys[first as usize..][..1]).unwrap();
        buffer
            .sample_into(2, 0.4, mode, &mut rng, &mut out)
            .unwrap();
        assert_eq!(xs(&out), [then; 2], "{name} {mode:?} after a deletion");
    }
    // A raised priority moves its item to the top, a lowered one to the bottom.
    buffer.update_priorities(&keys[..1], &[100.0]).unwrap();
    buffer.update_priorities(&keys[2..3], &[0.5]).unwrap();
    buffer
        .sample_into(1, 0.4, SampleMode::MaxHeap, &mut rng, &mut out)
        .unwrap();
    assert_eq!(xs(&out), [0], "{name}");
    buffer
        .sample_into(1, 0.4, SampleMode::MinHeap, &mut rng, &mut out)
        .unwrap();
    assert_eq!(xs(&out), [2], "{name}");
    // Every priority 0: nothing to draw by priority.
    let zeros: Vec<f64> = vec![0.0; keys.len()];
    buffer.update_priorities(&keys, &zeros).unwrap();
    for mode in [SampleMode::MaxHeap, SampleMode::MinHeap] {
        let err = buffer
            .sample_into(1, 0.4, mode, &mut rng, &mut out)
            .unwrap_err();
        assert!(matches!(err, Error::ZeroTotalPriority), "{name}: {err:?}");
    }
    buffer.clear();
    let err = buffer
        .sample_into(1, 0.4, SampleMode::MaxHeap, &mut rng, &mut out)
        .unwrap_err();
    assert_eq!(err, Error::Empty, "{name}");
}

#[test]
fn max_and_min_heap_take_the_top_item_on_every_flat_buffer() {
    top_item::<SplitLockBuffer>("SplitLockBuffer");
    top_item::<LockFreeBuffer>("LockFreeBuffer");
    top_item::<GlobalLockBuffer>("GlobalLockBuffer");
    #[cfg(all(unix, not(loom)))]
    top_item::<ShmBuffer>("ShmBuffer");
    let mut buffer = ReplayBuffer::new(config(8, 4, 0)).unwrap();
    for (i, p) in [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
        .into_iter()
        .enumerate()
    {
        buffer.insert(&[(&[i as i64][..]).into()], Some(p)).unwrap();
    }
    let mut rng = Xoshiro256::new(2);
    let max = buffer
        .sample(2, 0.4, SampleMode::MaxHeap, &mut rng)
        .unwrap();
    let min = buffer
        .sample(2, 0.4, SampleMode::MinHeap, &mut rng)
        .unwrap();
    assert_eq!((xs(&max), xs(&min)), (vec![5, 5], vec![1, 1]));
    assert_eq!(
        (max.probabilities, max.weights),
        (vec![1.0; 2], vec![1.0; 2])
    );
    let zeros = vec![0.0; 8];
    let keys: Vec<Key> = (0..8).map(|i| buffer.key(i).unwrap().unwrap()).collect();
    buffer.update_priorities(&keys, &zeros).unwrap();
    let err = buffer
        .sample(1, 0.4, SampleMode::MaxHeap, &mut rng)
        .unwrap_err();
    assert_eq!(err, Error::ZeroTotalPriority);
}

/// A buffer built without `max_heap` keeps no maxima: it refuses `MaxHeap` (a clear error,
/// nothing drawn) and still takes `MinHeap`; under `LiveMax` (which keeps them) it takes both.
fn refused_without_maxima<B: ConcurrentBuffer>(name: &str) {
    let schema = Schema::new().column("x", DType::I64, []);
    let plain = Config::builder(8, schema.clone()).build().unwrap();
    let live = Config::builder(8, schema)
        .default_priority(kary_replay::DefaultPriority::LiveMax)
        .build()
        .unwrap();
    let mut rng = Xoshiro256::new(3);
    let mut out = SampleBatch::default();
    for (config, takes_max) in [(plain, false), (live, true)] {
        assert!(!config.max_heap());
        let buffer = B::new(config).unwrap();
        buffer
            .insert_batch(&[(&[0i64, 1, 2][..]).into()], Some(&[2.0, 5.0, 1.0]))
            .unwrap();
        match buffer.sample_into(2, 0.4, SampleMode::MaxHeap, &mut rng, &mut out) {
            Ok(()) => {
                assert!(takes_max, "{name}: max_heap drawn without maxima");
                assert_eq!(xs(&out), [1, 1], "{name}");
            }
            Err(err) => {
                assert!(!takes_max, "{name}: refused under LiveMax: {err:?}");
                match err {
                    Error::InvalidParameter {
                        name: "mode",
                        reason,
                        ..
                    } => {
                        assert!(reason.contains("max_heap(true)"), "{name}: {reason}")
                    }
                    other => panic!("{name}: {other:?}"),
                }
            }
        }
        buffer
            .sample_into(2, 0.4, SampleMode::MinHeap, &mut rng, &mut out)
            .unwrap();
        assert_eq!(xs(&out), [2, 2], "{name}");
    }
}

#[test]
fn max_heap_needs_a_tree_that_keeps_its_maxima() {
    refused_without_maxima::<SplitLockBuffer>("SplitLockBuffer");
    refused_without_maxima::<LockFreeBuffer>("LockFreeBuffer");
    refused_without_maxima::<GlobalLockBuffer>("GlobalLockBuffer");
    #[cfg(all(unix, not(loom)))]
    refused_without_maxima::<ShmBuffer>("ShmBuffer");
    let mut plain = ReplayBuffer::new(
        Config::builder(4, Schema::new().column("x", DType::I64, []))
            .build()
            .unwrap(),
    )
    .unwrap();
    plain.insert(&[(&[7i64][..]).into()], Some(1.0)).unwrap();
    let err = plain
        .sample(1, 0.4, SampleMode::MaxHeap, &mut Xoshiro256::new(4))
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidParameter { name: "mode", .. }),
        "{err:?}"
    );
    plain
        .sample(1, 0.4, SampleMode::MinHeap, &mut Xoshiro256::new(4))
        .unwrap();
}

/// With `max_times_sampled = 1`: batches take the items in priority order, ties by slot,
/// each once, until none is left; at several sizes and fanouts (trees of one to four
/// levels), priorities with many ties and zeros (zeros never drawn).
fn drains_in_order<B: ConcurrentBuffer>(name: &str) {
    for &(n, fanout) in &[
        (1usize, 2usize),
        (7, 2),
        (64, 4),
        (300, 8),
        (1000, 16),
        (513, 64),
    ] {
        for mode in [SampleMode::MaxHeap, SampleMode::MinHeap] {
            let buffer = B::new(config(n, fanout, 1)).unwrap();
            let ps = priorities(n, n as u64);
            for (i, &p) in ps.iter().enumerate() {
                buffer.insert(&[(&[i as i64][..]).into()], Some(p)).unwrap();
            }
            let want = sorted(&ps, mode);
            let mut rng = Xoshiro256::new(3);
            let mut out = SampleBatch::default();
            let mut seen = Vec::new();
            while seen.len() < want.len() {
                let batch = (want.len() - seen.len()).min(7);
                buffer
                    .sample_into(batch, 0.4, mode, &mut rng, &mut out)
                    .unwrap();
                seen.extend(xs(&out));
            }
            assert_eq!(seen, want, "{name} n {n} fanout {fanout} {mode:?}");
            // What is left is the items of priority 0.
            assert_eq!(buffer.len(), n - want.len(), "{name}");
        }
    }
}

#[test]
fn with_one_draw_each_batches_take_the_items_in_priority_order() {
    drains_in_order::<SplitLockBuffer>("SplitLockBuffer");
    drains_in_order::<LockFreeBuffer>("LockFreeBuffer");
    #[cfg(all(unix, not(loom)))]
    drains_in_order::<ShmBuffer>("ShmBuffer");
}

/// Across the ring's wrap (the slot order is not the insertion order there) and after
/// updates: the draw is the top of the priorities stored now, ties by slot.
fn follows_updates<B: ConcurrentBuffer>(name: &str) {
    let buffer = B::new(config(16, 4, 0)).unwrap();
    let mut stored = vec![0.0; 16];
    let mut rng = Xoshiro256::new(4);
    let mut out = SampleBatch::default();
    for round in 0..40u64 {
        let ps = priorities(5, round + 10);
        for &p in &ps {
            let key = buffer
                .insert(&[(&[round as i64][..]).into()], Some(p))
                .unwrap();
            stored[key.index] = p;
        }
        let keys: Vec<Key> = (0..16).filter_map(|i| buffer.key(i).unwrap()).collect();
        let fresh = priorities(keys.len(), round + 100);
        buffer.update_priorities(&keys, &fresh).unwrap();
        for (key, &p) in keys.iter().zip(&fresh) {
            stored[key.index] = p;
        }
        for mode in [SampleMode::MaxHeap, SampleMode::MinHeap] {
            let want = sorted(&stored, mode);
            match buffer.sample_into(1, 0.4, mode, &mut rng, &mut out) {
                Ok(()) => assert_eq!(out.indices[0] as i64, want[0], "{name} {round} {mode:?}"),
                Err(Error::ZeroTotalPriority) => assert!(want.is_empty(), "{name}"),
                Err(e) => panic!("{name}: {e:?}"),
            }
        }
    }
}

#[test]
fn the_top_follows_inserts_across_the_wrap_and_updates() {
    follows_updates::<SplitLockBuffer>("SplitLockBuffer");
    follows_updates::<LockFreeBuffer>("LockFreeBuffer");
    follows_updates::<GlobalLockBuffer>("GlobalLockBuffer");
    #[cfg(all(unix, not(loom)))]
    follows_updates::<ShmBuffer>("ShmBuffer");
}

/// A producer and two consumers at once on a max-heap with one draw each: every item reaches
/// exactly one consumer, once (a priority queue that several learners drain).
fn producer_and_consumers<B: ConcurrentBuffer>(name: &str) {
    const ITEMS: i64 = 10_000;
    let buffer = B::new(config(1024, 8, 1)).unwrap();
    let produced = AtomicBool::new(false);
    let seen = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        let (buffer, produced, seen) = (&buffer, &produced, &seen);
        for c in 0..2u64 {
            s.spawn(move || {
                let mut rng = Xoshiro256::new(c);
                let mut out = SampleBatch::default();
                let mut mine = Vec::new();
                loop {
                    let done = produced.load(Ordering::Acquire);
                    let want = buffer.len().clamp(1, 16);
                    match buffer.sample_into(want, 0.4, SampleMode::MaxHeap, &mut rng, &mut out) {
                        Ok(_) => mine.extend(xs(&out)),
                        Err(Error::Empty | Error::Contention { .. } | Error::ZeroTotalPriority)
                            if done && buffer.is_empty() =>
                        {
                            break
                        }
                        Err(Error::Empty | Error::Contention { .. } | Error::ZeroTotalPriority) => {
                            std::thread::yield_now()
                        }
                        Err(e) => panic!("{name}: {e:?}"),
                    }
                }
                let mut seen = seen.lock().unwrap();
                for x in mine {
                    *seen.entry(x).or_insert(0u32) += 1;
                }
            });
        }
        for x in 0..ITEMS {
            // Lose nothing to FIFO eviction: wait for the slot of the next insert to be free.
            while buffer
                .key(x as usize % buffer.capacity())
                .unwrap()
                .is_some()
            {
                std::thread::yield_now();
            }
            let p = 1.0 + (x % 97) as f64;
            buffer.insert(&[(&[x][..]).into()], Some(p)).unwrap();
        }
        produced.store(true, Ordering::Release);
    });
    let seen = seen.into_inner().unwrap();
    assert_eq!(
        seen.len(),
        ITEMS as usize,
        "{name}: an item never reached a consumer"
    );
    assert!(
        seen.values().all(|&n| n == 1),
        "{name}: an item reached two consumers"
    );
}

#[test]
fn a_max_heap_hands_each_item_to_one_consumer_once() {
    producer_and_consumers::<SplitLockBuffer>("SplitLockBuffer");
    producer_and_consumers::<LockFreeBuffer>("LockFreeBuffer");
}

/// A checkpoint keeps `max_heap`: the loaded buffer (any flat family) draws its top item.
#[test]
fn a_checkpoint_keeps_max_heap() {
    fn load_as<L: ConcurrentBuffer + Load>(dir: &std::path::Path, name: &str) {
        let loaded = L::load(dir).unwrap();
        assert!(loaded.config().max_heap(), "{name}");
        let top = loaded
            .sample(1, 0.4, SampleMode::MaxHeap, &mut Xoshiro256::new(5))
            .unwrap();
        assert_eq!(xs(&top), [1], "{name}");
    }
    let dir = std::env::temp_dir().join(format!("kr-max-heap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let buffer = LockFreeBuffer::new(config(8, 8, 0)).unwrap();
    buffer
        .insert_batch(&[(&[0i64, 1, 2][..]).into()], Some(&[2.0, 5.0, 1.0]))
        .unwrap();
    buffer.save(&dir).unwrap();
    load_as::<LockFreeBuffer>(&dir, "LockFreeBuffer");
    load_as::<SplitLockBuffer>(&dir, "SplitLockBuffer");
    load_as::<GlobalLockBuffer>(&dir, "GlobalLockBuffer");
    let sequential = ReplayBuffer::load(&dir).unwrap();
    assert!(sequential.config().max_heap());
    let _ = std::fs::remove_dir_all(&dir);
}
