//! Consume after k draws (`Config::max_times_sampled`, Reverb's `max_times_sampled`) on
//! every buffer that holds it (the concurrent ones, a shared mapping's and a union of
//! shards): each item is drawn exactly k times in all, by any number of samplers at once,
//! whatever the mode (by priority with or without replacement, uniform), and then retired:
//! its key stale, `len` and the total without it. The buffers that cannot retire what they
//! draw refuse the setting; a checkpoint keeps it.

use std::collections::HashMap;
use std::sync::Mutex;

use kary_replay::shard::{Coordinator, ShardedBuffer};
#[cfg(all(unix, not(loom)))]
use kary_replay::ShmBuffer;
use kary_replay::{
    Checkpoint, ConcurrentBuffer, Config, DType, Error, GlobalLockBuffer, Key, Load,
    LockFreeBuffer, ReplayBuffer, SampleBatch, SampleMode, Schema, SplitLockBuffer, Xoshiro256,
    MAX_TIMES_SAMPLED,
};

fn config(capacity: usize, k: u32) -> Config {
    let schema = Schema::new().column("x", DType::I64, []);
    Config::builder(capacity, schema)
        .alpha(1.0)
        .max_times_sampled(k)
        .build()
        .unwrap()
}

/// Draw from `buffer` until it is empty, `threads` samplers at once, each batch of
/// `batch` in `mode`; returns how many times each key was drawn, and checks each row.
fn drain<B: ConcurrentBuffer>(
    buffer: &B,
    threads: u64,
    batch: usize,
    mode: SampleMode,
) -> HashMap<Key, u32> {
    let seen = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        for t in 0..threads {
            let seen = &seen;
            s.spawn(move || {
                let mut rng = Xoshiro256::new(t + 1);
                let mut out = SampleBatch::default();
                let mut mine: Vec<Key> = Vec::new();
                // A batch needs `batch` draws at once: once the items left cannot give as
                // many (each at most k), it fails with `Contention` and consumes nothing, so
                // the sampler goes on one draw at a time.
                let mut batch = batch;
                loop {
                    // A batch without replacement larger than what is left is refused.
                    let want = match mode {
                        SampleMode::WithoutReplacement => batch.min(buffer.len()),
                        _ => batch,
                    };
                    if want == 0 {
                        break;
                    }
                    match buffer.sample_into(want, 0.4, mode, &mut rng, &mut out) {
                        Ok(_) => {
                            for (key, &x) in out.keys.iter().zip(out.columns[0].as_i64().unwrap()) {
                                assert_eq!(x as u64, key.insertion(), "a row of another item");
                                mine.push(*key);
                            }
                        }
                        Err(Error::Empty | Error::ZeroTotalPriority) => break,
                        // The last items' slots held by their retirers, or a batch without
                        // replacement that asked for more than another sampler left.
                        Err(Error::Contention { .. } | Error::InvalidParameter { .. }) => batch = 1,
                        Err(e) => panic!("{e:?}"),
                    }
                }
                let mut seen = seen.lock().unwrap();
                for key in mine {
                    *seen.entry(key).or_insert(0) += 1;
                }
            });
        }
    });
    seen.into_inner().unwrap()
}

/// 200 items, `x` their insertion numbers, each with priority 1 + x % 5, into `buffer`;
/// their keys.
fn fill<B: ConcurrentBuffer>(buffer: &B) -> Vec<Key> {
    let base = buffer.inserted() as i64;
    let xs: Vec<i64> = (base..base + 200).collect();
    let ps: Vec<f64> = xs.iter().map(|x| 1.0 + (x % 5) as f64).collect();
    buffer.insert_batch(&[(&xs[..]).into()], Some(&ps)).unwrap()
}

fn consumes<B: ConcurrentBuffer>(name: &str) {
    for (k, threads, batch, mode) in [
        (1, 1, 16, SampleMode::WithoutReplacement),
        (1, 2, 8, SampleMode::Stratified),
        (3, 2, 8, SampleMode::Independent),
        (2, 2, 8, SampleMode::Uniform),
    ] {
        let buffer = B::new(config(256, k)).unwrap();
        let keys = fill(&buffer);
        let seen = drain(&buffer, threads, batch, mode);
        for key in &keys {
            assert_eq!(
                seen.get(key).copied(),
                Some(k),
                "{name} k={k} {mode:?}: drawn other than k times"
            );
            assert_eq!(buffer.key(key.index).unwrap(), None, "{name}: not retired");
        }
        assert_eq!(
            seen.len(),
            keys.len(),
            "{name}: drew something never inserted"
        );
        assert_eq!((buffer.len(), buffer.total_priority()), (0, 0.0), "{name}");
        assert!(buffer.consistency().exact, "{name}");
        // The slots fill again, and their new items count from 0.
        let again = fill(&buffer);
        assert_eq!(buffer.len(), 200, "{name}");
        let seen = drain(&buffer, 1, 4, SampleMode::Stratified);
        assert!(again.iter().all(|key| seen.get(key) == Some(&k)), "{name}");
    }
}

#[test]
fn each_item_is_drawn_exactly_k_times_on_every_concurrent_buffer() {
    consumes::<SplitLockBuffer>("SplitLockBuffer");
    consumes::<LockFreeBuffer>("LockFreeBuffer");
    #[cfg(all(unix, not(loom)))]
    consumes::<ShmBuffer>("ShmBuffer");
}

#[test]
fn a_union_of_shards_consumes_in_each_shard() {
    let union: ShardedBuffer<SplitLockBuffer> = ShardedBuffer::new(2, config(64, 1)).unwrap();
    for shard in 0..2 {
        let xs: Vec<i64> = (0..32).collect();
        union
            .insert_batch(shard, &[(&xs[..]).into()], None)
            .unwrap();
    }
    let mut coordinator = Coordinator::new();
    let mut rng = Xoshiro256::new(5);
    let mut out = SampleBatch::default();
    let mut drawn = 0;
    while !union.is_empty() && drawn < 1000 {
        let batch = union.sample_into(
            &mut coordinator,
            4,
            0.4,
            SampleMode::Stratified,
            &mut rng,
            &mut out,
        );
        if batch.is_ok() {
            drawn += out.keys.len();
        }
    }
    assert_eq!((drawn, union.len()), (64, 0));
}

#[test]
fn buffers_that_cannot_retire_refuse_the_setting() {
    let refused = |e: Error| {
        assert!(
            matches!(
                e,
                Error::InvalidParameter {
                    name: "max_times_sampled",
                    ..
                }
            ),
            "{e:?}"
        )
    };
    refused(ReplayBuffer::new(config(8, 1)).unwrap_err());
    refused(GlobalLockBuffer::new(config(8, 2)).unwrap_err());
    let schema = Schema::new().column("x", DType::I64, []);
    let too_many = Config::builder(8, schema)
        .max_times_sampled(MAX_TIMES_SAMPLED + 1)
        .build();
    refused(too_many.unwrap_err());
}

#[test]
fn a_checkpoint_keeps_the_setting() {
    let dir = std::env::temp_dir().join(format!("kr-consume-{}", std::process::id()));
    let buffer = SplitLockBuffer::new(config(16, 2)).unwrap();
    fill_few(&buffer);
    buffer.save(&dir).unwrap();
    let loaded = SplitLockBuffer::load(&dir).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(loaded.config().max_times_sampled(), Some(2));
    let seen = drain(&loaded, 1, 2, SampleMode::Stratified);
    assert_eq!(seen.len(), 4);
    assert!(seen.values().all(|&n| n == 2));
}

fn fill_few<B: ConcurrentBuffer>(buffer: &B) {
    buffer
        .insert_batch(&[(&[0i64, 1, 2, 3][..]).into()], None)
        .unwrap();
}

/// A checkpoint keeps each item's draws delivered: with `k = 3`, an item drawn twice before
/// the save is retired by its third draw after the load, one drawn once by its second and
/// third; a sequential load of the same files refuses nothing and keeps the setting.
#[test]
fn checkpoints_keep_the_draws_delivered() {
    fn round_trip<B: ConcurrentBuffer + Load>(name: &str) {
        let schema = Schema::new().column("x", DType::I64, []);
        let config = Config::builder(8, schema)
            .max_times_sampled(3)
            .build()
            .unwrap();
        let buffer = B::new(config).unwrap();
        buffer
            .insert_batch(&[(&[0i64, 1][..]).into()], None)
            .unwrap();
        let mut rng = Xoshiro256::new(1);
        // x = 0 drawn twice, x = 1 once (FIFO draws take the oldest with a draw left).
        for _ in 0..2 {
            buffer.sample(1, 0.4, SampleMode::Fifo, &mut rng).unwrap();
        }
        buffer.sample(1, 0.4, SampleMode::Lifo, &mut rng).unwrap();
        let dir = std::env::temp_dir().join(format!("kr-draws-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        buffer.save(&dir).unwrap();
        let loaded = B::load(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let mut draw = |mode| {
            let b = loaded.sample(1, 0.4, mode, &mut rng).unwrap();
            b.columns[0].as_i64().unwrap()[0]
        };
        assert_eq!(draw(SampleMode::Fifo), 0, "{name}");
        assert_eq!(loaded.len(), 1, "{name}: x = 0 retired by its third draw");
        assert_eq!((draw(SampleMode::Fifo), loaded.len()), (1, 1), "{name}");
        assert_eq!((draw(SampleMode::Fifo), loaded.len()), (1, 0), "{name}");
    }
    round_trip::<SplitLockBuffer>("split");
    round_trip::<LockFreeBuffer>("lockfree");
}
