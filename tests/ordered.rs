//! The ordered selectors, Reverb's `Fifo` and `Lifo` (`SampleMode::Fifo`, `SampleMode::Lifo`):
//! every draw takes the oldest (newest) item stored that has a draw left, on every flat
//! buffer; with `max_times_sampled = 1` a concurrent buffer is a queue that hands each item
//! out exactly once, in order, to consumers at once. Sequence and sharded buffers refuse the
//! modes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use kary_replay::rate::{Batches, RateLimit};
use kary_replay::sequence::{SequenceBatch, SequenceBuffer, SequenceConfig};
use kary_replay::shard::{Coordinator, ShardedBuffer};
#[cfg(all(unix, not(loom)))]
use kary_replay::ShmBuffer;
use kary_replay::{
    ConcurrentBuffer, Config, DType, Error, GlobalLockBuffer, LockFreeBuffer, ReplayBuffer,
    SampleBatch, SampleMode, Schema, SplitLockBuffer, Xoshiro256,
};

fn config(capacity: usize, k: u32) -> Config {
    Config::builder(capacity, Schema::new().column("x", DType::I64, []))
        .alpha(1.0)
        .max_times_sampled(k)
        .build()
        .unwrap()
}

fn xs(out: &SampleBatch) -> Vec<i64> {
    out.columns[0].as_i64().unwrap().to_vec()
}

/// Without `max_times_sampled`: 10 items into a ring of 8 leave 2..=9; every draw of a
/// batch is the oldest (2) or the newest (9), until that one is deleted.
fn selects<B: ConcurrentBuffer>(name: &str) {
    let buffer = B::new(config(8, 0)).unwrap();
    let items: Vec<i64> = (0..10).collect();
    let keys = buffer.insert_batch(&[(&items[..]).into()], None).unwrap();
    let mut rng = Xoshiro256::new(1);
    let mut out = SampleBatch::default();
    for (mode, first, then) in [(SampleMode::Fifo, 2, 3), (SampleMode::Lifo, 9, 8)] {
        buffer
            .sample_into(3, 0.4, mode, &mut rng, &mut out)
            .unwrap();
        assert_eq!(xs(&out), [first; 3], "{name} {mode:?}");
        assert_eq!(out.probabilities, [1.0; 3], "{name}");
        assert_eq!(out.weights, [1.0; 3], "{name}");
        buffer
            .delete(&keys[first as usize..first as usize + 1])
            .unwrap();
        buffer
            .sample_into(2, 0.4, mode, &mut rng, &mut out)
            .unwrap();
        assert_eq!(xs(&out), [then; 2], "{name} {mode:?} after a deletion");
    }
    buffer.clear();
    let err = buffer
        .sample_into(1, 0.4, SampleMode::Fifo, &mut rng, &mut out)
        .unwrap_err();
    assert_eq!(err, Error::Empty, "{name}");
}

#[test]
fn fifo_and_lifo_take_the_oldest_and_newest_item_on_every_flat_buffer() {
    selects::<SplitLockBuffer>("SplitLockBuffer");
    selects::<LockFreeBuffer>("LockFreeBuffer");
    selects::<GlobalLockBuffer>("GlobalLockBuffer");
    #[cfg(all(unix, not(loom)))]
    selects::<ShmBuffer>("ShmBuffer");
    let mut buffer = ReplayBuffer::new(config(8, 0)).unwrap();
    let items: Vec<i64> = (0..10).collect();
    buffer.insert_batch(&[(&items[..]).into()], None).unwrap();
    let mut rng = Xoshiro256::new(2);
    let fifo = buffer.sample(2, 0.4, SampleMode::Fifo, &mut rng).unwrap();
    let lifo = buffer.sample(2, 0.4, SampleMode::Lifo, &mut rng).unwrap();
    assert_eq!((xs(&fifo), xs(&lifo)), (vec![2, 2], vec![9, 9]));
}

/// With `max_times_sampled = 1` the buffer is a queue: batches of the oldest items in
/// order (or the newest, for LIFO), each item once, then `Empty`.
fn queues<B: ConcurrentBuffer>(name: &str) {
    for (mode, order) in [(SampleMode::Fifo, 1i64), (SampleMode::Lifo, -1)] {
        let buffer = B::new(config(128, 1)).unwrap();
        let items: Vec<i64> = (0..100).collect();
        buffer.insert_batch(&[(&items[..]).into()], None).unwrap();
        let mut rng = Xoshiro256::new(3);
        let mut out = SampleBatch::default();
        let mut seen = Vec::new();
        while buffer
            .sample_into(10, 0.4, mode, &mut rng, &mut out)
            .is_ok()
        {
            seen.extend(xs(&out));
        }
        let mut want: Vec<i64> = (0..100).collect();
        if order < 0 {
            want.reverse();
        }
        assert_eq!(seen, want, "{name} {mode:?}");
        assert_eq!(buffer.len(), 0, "{name}");
    }
}

#[test]
fn with_one_draw_each_a_concurrent_buffer_is_a_queue() {
    queues::<SplitLockBuffer>("SplitLockBuffer");
    queues::<LockFreeBuffer>("LockFreeBuffer");
    #[cfg(all(unix, not(loom)))]
    queues::<ShmBuffer>("ShmBuffer");
}

/// A producer and two consumers at once on a FIFO queue: every item reaches exactly one
/// consumer, once.
fn producer_and_consumers<B: ConcurrentBuffer>(name: &str) {
    const ITEMS: i64 = 20_000;
    let buffer = B::new(config(1024, 1)).unwrap();
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
                    // A batch needs as many items as its size (each is drawn once): fewer once the
                    // queue runs low.
                    let want = buffer.len().clamp(1, 16);
                    match buffer.sample_into(want, 0.4, SampleMode::Fifo, &mut rng, &mut out) {
                        Ok(_) => mine.extend(xs(&out)),
                        Err(Error::Empty | Error::Contention { .. })
                            if done && buffer.is_empty() =>
                        {
                            break
                        }
                        Err(Error::Empty | Error::Contention { .. }) => std::thread::yield_now(),
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
            // The ring evicts whatever the slot of the next insert holds (FIFO eviction), an
            // item a consumer's call holds included: a producer that must lose nothing waits
            // for that slot to be free (item `x` is generation `x`: one producer).
            while buffer
                .key(x as usize % buffer.capacity())
                .unwrap()
                .is_some()
            {
                std::thread::yield_now();
            }
            buffer.insert(&[(&[x][..]).into()], None).unwrap();
        }
        produced.store(true, Ordering::Release);
    });
    let seen = seen.into_inner().unwrap();
    let lost: Vec<i64> = (0..ITEMS).filter(|x| !seen.contains_key(x)).collect();
    assert!(
        lost.is_empty(),
        "{name}: never reached a consumer: {lost:?}"
    );
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
fn a_queue_hands_each_item_to_one_consumer_once() {
    producer_and_consumers::<SplitLockBuffer>("SplitLockBuffer");
    producer_and_consumers::<LockFreeBuffer>("LockFreeBuffer");
    #[cfg(all(unix, not(loom)))]
    producer_and_consumers::<ShmBuffer>("ShmBuffer");
}

/// The IMPALA shape under a `Queue` limit: a producer inserting batches of 64 that the limit
/// admits, a consumer drawing batches of 64 whenever the limit admits one (with fewer items
/// written yet, the draw fails with `Contention` and is retried). A sample is counted when
/// admitted, before it retires its items, so the limit lets inserts in that land while it
/// runs: with `Queue(capacity - 64)` the ring has room for them and every item is handed out
/// once; `Queue(capacity)` would evict undelivered items and is refused.
fn limited_queue<B: ConcurrentBuffer>(name: &str) {
    const CAPACITY: usize = 1024;
    const ITEMS: i64 = 64 * 400;
    let queue = |size: u64| {
        Config::builder(CAPACITY, Schema::new().column("x", DType::I64, []))
            .max_times_sampled(1)
            .rate_limit(
                RateLimit::Queue(size),
                Batches {
                    insert: 64,
                    sample: 64,
                },
            )
            .build()
    };
    assert!(
        matches!(
            queue(CAPACITY as u64),
            Err(Error::InvalidParameter {
                name: "rate_limit",
                ..
            })
        ),
        "{name}"
    );
    let buffer = B::new(queue(CAPACITY as u64 - 64).unwrap()).unwrap();
    let mut seen = HashMap::new();
    std::thread::scope(|s| {
        let buffer = &buffer;
        s.spawn(move || {
            for r in 0..ITEMS / 64 {
                let xs: Vec<i64> = (r * 64..r * 64 + 64).collect();
                buffer.insert_batch(&[(&xs[..]).into()], None).unwrap();
            }
        });
        let mut rng = Xoshiro256::new(1);
        let mut got = 0;
        while got < ITEMS {
            let wait = std::time::Duration::from_secs(10);
            match buffer.sample_timeout(64, 0.4, SampleMode::Fifo, &mut rng, wait) {
                Ok(out) => {
                    for x in xs(&out) {
                        *seen.entry(x).or_insert(0u32) += 1;
                        got += 1;
                    }
                }
                Err(Error::Contention { .. }) => std::thread::yield_now(),
                Err(e) => panic!("{name}: after {got} items: {e}"),
            }
        }
    });
    assert_eq!(seen.len(), ITEMS as usize, "{name}");
    assert!(seen.values().all(|&n| n == 1), "{name}");
    assert!(buffer.is_empty(), "{name}");
}

#[test]
fn a_queue_limited_queue_hands_every_item_out_once() {
    limited_queue::<SplitLockBuffer>("SplitLockBuffer");
    limited_queue::<LockFreeBuffer>("LockFreeBuffer");
    #[cfg(all(unix, not(loom)))]
    limited_queue::<ShmBuffer>("ShmBuffer");
}

#[test]
fn sequence_and_sharded_buffers_refuse_the_ordered_and_heap_modes() {
    let schema = Schema::new().column("x", DType::F32, []);
    let seq = SequenceBuffer::new(SequenceConfig::builder(1, 16, schema).build().unwrap()).unwrap();
    let mut lane = seq.lane(0).unwrap();
    for t in 0..4 {
        lane.push(&[(&[t as f32][..]).into()]).unwrap();
    }
    drop(lane);
    let union: ShardedBuffer<SplitLockBuffer> = ShardedBuffer::new(2, config(8, 0)).unwrap();
    union
        .insert_batch(0, &[(&[1i64][..]).into()], None)
        .unwrap();
    for mode in [
        SampleMode::Fifo,
        SampleMode::Lifo,
        SampleMode::MaxHeap,
        SampleMode::MinHeap,
    ] {
        let err = seq
            .sample_into(
                1,
                0.4,
                mode,
                &mut Xoshiro256::new(1),
                &mut SequenceBatch::default(),
            )
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidParameter { name: "mode", .. }),
            "{err:?}"
        );
        let err = union
            .sample_into(
                &mut Coordinator::new(),
                1,
                0.4,
                mode,
                &mut Xoshiro256::new(1),
                &mut SampleBatch::default(),
            )
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidParameter { name: "mode", .. }),
            "{err:?}"
        );
    }
}
