//! Writing back by key (`write_back`): the named columns of current items rewritten in
//! place, whole (threads that sample beside it never see half a row), keys and priorities
//! unchanged, stale keys skipped, bad columns and foreign keys refused with nothing
//! written, a shared mapping refusing the call.
//!
//! Deleting items by key (`delete`) on every buffer family: a deleted item is never
//! sampled again (by priority, uniformly, without replacement), its key is stale for every
//! call that takes keys, `len` and the total leave it out, and its slot is filled by the
//! insert that reaches it without evicting anything; a foreign key is refused with nothing
//! deleted; checkpoints keep deletions (a loaded buffer goes on counting as the saved one
//! would); clear after deletions; and threads that insert, delete and sample at once leave
//! a buffer whose counts are exact at quiescence and whose sampled rows match their
//! priorities.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use kary_replay::shard::ShardedBuffer;
#[cfg(all(unix, not(loom)))]
use kary_replay::ShmBuffer;
use kary_replay::{
    Checkpoint, ConcurrentBuffer, Config, DType, Error, GlobalLockBuffer, Key, Load,
    LockFreeBuffer, ReplayBuffer, SampleBatch, SampleMode, Schema, SplitLockBuffer, Xoshiro256,
};
use rand::{rngs::SmallRng, Rng, SeedableRng};

fn config(capacity: usize) -> Config {
    let schema = Schema::new().column("x", DType::I64, []);
    Config::builder(capacity, schema)
        .alpha(1.0)
        .build()
        .unwrap()
}

/// A fresh directory under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "kr-delete-{name}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The values the rows of a sample hold.
fn values(out: &SampleBatch) -> Vec<i64> {
    out.columns[0].as_i64().unwrap().to_vec()
}

/// What every family must do, through the trait: 6 items (x = 0..6, priority x + 1) in a
/// ring of 8, items 1 and 3 deleted.
fn deletes<B: ConcurrentBuffer>(name: &str) {
    let buffer = B::new(config(8)).unwrap();
    let xs: Vec<i64> = (0..6).collect();
    let ps: Vec<f64> = (1..=6).map(f64::from).collect();
    let keys = buffer.insert_batch(&[(&xs[..]).into()], Some(&ps)).unwrap();
    // A key of no buffer of this configuration: refused, nothing deleted.
    let foreign = Key {
        index: 9,
        generation: 1,
    };
    assert!(buffer.delete(&[keys[0], foreign]).is_err(), "{name}");
    assert_eq!(buffer.len(), 6, "{name}");
    let report = buffer.delete(&[keys[1], keys[3], keys[3]]).unwrap();
    assert_eq!((report.applied, report.stale), (2, 1), "{name}");
    assert_eq!(buffer.len(), 4, "{name}");
    assert_eq!(buffer.total_priority(), 21.0 - 2.0 - 4.0, "{name}");
    assert_eq!(buffer.key(1).unwrap(), None, "{name}");
    assert_eq!(buffer.priority(3).unwrap(), 0.0, "{name}");
    // The key is stale everywhere.
    let report = buffer.update_priorities(&keys[1..2], &[50.0]).unwrap();
    assert_eq!((report.applied, report.stale), (0, 1), "{name}");
    let mut read = Vec::new();
    assert_eq!(buffer.priorities_of(&keys[..4], &mut read).unwrap(), 2);
    assert!(
        read[1].is_nan() && read[3].is_nan() && read[2] == 3.0,
        "{name}"
    );
    assert_eq!(buffer.delete(&keys[1..2]).unwrap().stale, 1, "{name}");
    // Never drawn again, whatever the mode.
    let mut rng = Xoshiro256::new(7);
    let mut out = SampleBatch::default();
    let mut seen = [0u32; 6];
    for _ in 0..200 {
        for mode in [SampleMode::Independent, SampleMode::Uniform] {
            buffer
                .sample_into(8, 0.4, mode, &mut rng, &mut out)
                .unwrap();
            for x in values(&out) {
                seen[x as usize] += 1;
            }
            if mode == SampleMode::Uniform {
                assert!(out.probabilities.iter().all(|&p| p == 0.25), "{name}");
            }
        }
    }
    assert_eq!((seen[1], seen[3]), (0, 0), "{name}: {seen:?}");
    assert!(
        [0, 2, 4, 5].iter().all(|&x| seen[x] > 100),
        "{name}: {seen:?}"
    );
    buffer
        .sample_into(4, 0.4, SampleMode::WithoutReplacement, &mut rng, &mut out)
        .unwrap();
    let mut drawn = values(&out);
    drawn.sort_unstable();
    assert_eq!(drawn, [0, 2, 4, 5], "{name}");
    assert!(buffer
        .sample_into(5, 0.4, SampleMode::WithoutReplacement, &mut rng, &mut out)
        .is_err());
    // The ring goes on: slots 6 and 7 are new, slot 0 evicts x = 0, slot 1 (deleted) fills
    // without evicting, slot 2 evicts, slot 3 (deleted) fills.
    for (x, len) in [(6, 5), (7, 6), (8, 6), (9, 7), (10, 7), (11, 8)] {
        buffer
            .insert(&[(&[x as i64][..]).into()], Some(1.0))
            .unwrap();
        assert_eq!(buffer.len(), len, "{name} after x = {x}");
    }
    // Clear after deletions: nothing left, every old key stale.
    let key = buffer.key(4).unwrap().unwrap();
    assert_eq!(buffer.delete(&[key]).unwrap().applied, 1, "{name}");
    buffer.clear();
    assert_eq!(buffer.len(), 0, "{name}");
    buffer.insert(&[(&[20i64][..]).into()], Some(1.0)).unwrap();
    assert_eq!(buffer.len(), 1, "{name}");
    assert_eq!(buffer.delete(&keys).unwrap().stale, keys.len(), "{name}");
}

#[test]
fn deleted_items_are_gone_on_every_concurrent_buffer() {
    deletes::<SplitLockBuffer>("SplitLockBuffer");
    deletes::<LockFreeBuffer>("LockFreeBuffer");
    deletes::<GlobalLockBuffer>("GlobalLockBuffer");
    #[cfg(all(unix, not(loom)))]
    deletes::<ShmBuffer>("ShmBuffer");
}

#[test]
fn deleted_items_are_gone_from_the_sequential_buffer() {
    let mut buffer = ReplayBuffer::new(config(8)).unwrap();
    let xs: Vec<i64> = (0..6).collect();
    let keys = buffer
        .insert_batch(&[(&xs[..]).into()], Some(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
        .unwrap();
    let foreign = Key {
        index: 9,
        generation: 1,
    };
    assert!(buffer.delete(&[keys[0], foreign]).is_err());
    let report = buffer.delete(&[keys[1], keys[3], keys[3]]).unwrap();
    assert_eq!((report.applied, report.stale, buffer.len()), (2, 1, 4));
    assert_eq!(buffer.total_priority(), 15.0);
    let mut rng = SmallRng::seed_from_u64(3);
    for mode in [SampleMode::Independent, SampleMode::Uniform] {
        let batch = buffer.sample(64, 0.4, mode, &mut rng).unwrap();
        assert!(values(&batch).iter().all(|&x| x != 1 && x != 3), "{mode:?}");
    }
    for (x, len) in [(6, 5), (7, 6), (8, 6), (9, 7), (10, 7), (11, 8)] {
        buffer
            .insert(&[(&[x as i64][..]).into()], Some(1.0))
            .unwrap();
        assert_eq!(buffer.len(), len, "after x = {x}");
    }
}

#[test]
fn a_union_of_shards_deletes_in_the_shard_a_key_names() {
    let union: ShardedBuffer<SplitLockBuffer> = ShardedBuffer::new(2, config(8)).unwrap();
    let a = union
        .insert_batch(0, &[(&[1i64, 2][..]).into()], None)
        .unwrap();
    let b = union
        .insert_batch(1, &[(&[3i64][..]).into()], None)
        .unwrap();
    let report = union.delete(&[a[1], b[0], b[0]]).unwrap();
    assert_eq!((report.applied, report.stale, union.len()), (2, 1, 1));
    assert!(union
        .delete(&[Key {
            index: 0,
            generation: 0
        }])
        .is_err());
    assert_eq!(union.len(), 1);
}

/// Save after deletions, load, and check that the loaded buffer is the saved one and goes
/// on as it would: the deleted slots fill without evicting.
fn checkpoint_keeps<B: ConcurrentBuffer + Load>(name: &str, first: usize) {
    let tmp = TempDir::new(name);
    let buffer = B::new(config(8)).unwrap();
    let xs: Vec<i64> = (0..first as i64).collect();
    let keys = buffer.insert_batch(&[(&xs[..]).into()], None).unwrap();
    let n = keys.len();
    buffer.delete(&[keys[n - 3], keys[n - 5]]).unwrap();
    buffer.save(&tmp.0).unwrap();
    let loaded = B::load(&tmp.0).unwrap();
    assert_eq!(loaded.len(), buffer.len(), "{name}");
    for i in 0..8 {
        assert_eq!(loaded.key(i).unwrap(), buffer.key(i).unwrap(), "{name}");
    }
    for x in 0..10i64 {
        buffer.insert(&[(&[x][..]).into()], None).unwrap();
        loaded.insert(&[(&[x][..]).into()], None).unwrap();
        assert_eq!(loaded.len(), buffer.len(), "{name} after {x}");
    }
}

#[test]
fn checkpoints_keep_deletions() {
    // A ring partly filled, and one wrapped around.
    for first in [6, 13] {
        checkpoint_keeps::<SplitLockBuffer>("split", first);
        checkpoint_keeps::<LockFreeBuffer>("lockfree", first);
        checkpoint_keeps::<GlobalLockBuffer>("global", first);
    }
    let tmp = TempDir::new("sequential");
    let mut buffer = ReplayBuffer::new(config(8)).unwrap();
    let xs: Vec<i64> = (0..13).collect();
    let keys = buffer.insert_batch(&[(&xs[..]).into()], None).unwrap();
    buffer.delete(&[keys[10], keys[8]]).unwrap();
    buffer.save(&tmp.0).unwrap();
    let mut loaded = ReplayBuffer::load(&tmp.0).unwrap();
    for x in 0..10i64 {
        buffer.insert(&[(&[x][..]).into()], None).unwrap();
        loaded.insert(&[(&[x][..]).into()], None).unwrap();
        assert_eq!(loaded.len(), buffer.len(), "after {x}");
    }
}

/// Two writers, a deleter and a sampler at once; the priority of an item is `1 + x % 7`,
/// so a sampled row must show the priority of its own item.
fn threads<B: ConcurrentBuffer + 'static>(name: &str) {
    let buffer = B::new(config(256)).unwrap();
    let done = AtomicBool::new(false);
    // Batches sampled and items deleted so far: the writers go on until both are under way.
    let (sampled, deleted) = (AtomicUsize::new(0), AtomicUsize::new(0));
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..2i64)
            .map(|w| {
                let (buffer, sampled, deleted) = (&buffer, &sampled, &deleted);
                s.spawn(move || {
                    let busy = || {
                        sampled.load(Ordering::Relaxed) < 100
                            || deleted.load(Ordering::Relaxed) < 100
                    };
                    let mut i = 0;
                    while i < 20_000 || busy() {
                        let x = i * 2 + w;
                        i += 1;
                        buffer
                            .insert(&[(&[x][..]).into()], Some(1.0 + (x % 7) as f64))
                            .unwrap();
                    }
                })
            })
            .collect();
        let (buffer, done, sampled, deleted) = (&buffer, &done, &sampled, &deleted);
        let deleter = s.spawn(move || {
            let mut rng = SmallRng::seed_from_u64(1);
            while !done.load(Ordering::Relaxed) {
                let keys: Vec<Key> = (0..4)
                    .filter_map(|_| buffer.key(rng.random_range(0..256)).unwrap())
                    .collect();
                let applied = buffer.delete(&keys).unwrap().applied;
                deleted.fetch_add(applied, Ordering::Relaxed);
            }
        });
        let sampler = s.spawn(move || {
            let mut rng = Xoshiro256::new(2);
            let mut out = SampleBatch::default();
            let mut batches = 0;
            while !done.load(Ordering::Relaxed) {
                let mode = match batches % 3 {
                    0 => SampleMode::Independent,
                    1 => SampleMode::Uniform,
                    _ => SampleMode::Stratified,
                };
                match buffer.sample_into(16, 0.4, mode, &mut rng, &mut out) {
                    Ok(_) => {
                        for (x, &p) in values(&out).iter().zip(&out.priorities) {
                            assert_eq!(p, 1.0 + (x % 7) as f64, "{name}: row {x}");
                        }
                        batches += 1;
                        sampled.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(Error::Empty | Error::Contention { .. } | Error::ZeroTotalPriority) => {}
                    Err(e) => panic!("{name}: {e:?}"),
                }
            }
        });
        // The writers first, then the others.
        for writer in writers {
            writer.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        deleter.join().unwrap();
        sampler.join().unwrap();
    });
    println!("{name}: {deleted:?} deleted, {sampled:?} batches");
    // Quiescent: the counts are exact.
    let stored = (0..256)
        .filter(|&i| buffer.key(i).unwrap().is_some())
        .count();
    assert_eq!(buffer.len(), stored, "{name}");
    let total: f64 = (0..256).map(|i| buffer.priority(i).unwrap()).sum();
    assert_eq!(buffer.total_priority(), total, "{name}");
    assert!(buffer.consistency().exact, "{name}");
}

#[test]
fn inserts_deletes_and_samples_at_once() {
    threads::<SplitLockBuffer>("SplitLockBuffer");
    threads::<LockFreeBuffer>("LockFreeBuffer");
    threads::<GlobalLockBuffer>("GlobalLockBuffer");
    #[cfg(all(unix, not(loom)))]
    threads::<ShmBuffer>("ShmBuffer");
}

/// Two columns: `x` (4 equal elements: a torn row mixes them) and `goal`.
fn two_columns(capacity: usize) -> Config {
    let schema = Schema::new()
        .column("x", DType::I64, 4)
        .column("goal", DType::F32, [])
        .column("p", DType::F64, []);
    Config::builder(capacity, schema)
        .alpha(1.0)
        .build()
        .unwrap()
}

fn x4(xs: &[i64]) -> Vec<i64> {
    xs.iter().flat_map(|&x| [x; 4]).collect()
}

/// A write back that must be refused: what is wrong, its columns, its keys.
type Refused<'a> = (
    &'static str,
    Vec<(usize, kary_replay::ColumnSlice<'a>)>,
    Vec<Key>,
);

/// What every buffer that writes back must do, through `write`: 6 items, x = 0..6, goal
/// x / 2, priority x + 1; the items x = 1 and x = 2 rewritten (goal and x), x = 3 deleted first.
fn writes_back<B: ConcurrentBuffer>(name: &str) {
    let buffer = B::new(two_columns(8)).unwrap();
    let xs: Vec<i64> = (0..6).collect();
    let goals: Vec<f32> = xs.iter().map(|&x| x as f32 / 2.0).collect();
    let ps: Vec<f64> = xs.iter().map(|&x| x as f64 + 1.0).collect();
    let keys = buffer
        .insert_batch(
            &[(&x4(&xs)[..]).into(), (&goals[..]).into(), (&ps[..]).into()],
            Some(&ps),
        )
        .unwrap();
    buffer.delete(&keys[3..4]).unwrap();
    let foreign = Key {
        index: 9,
        generation: 1,
    };
    let goal: &[f32] = &[10.0, 20.0];
    let refused: [Refused<'_>; 6] = [
        (
            "foreign key",
            vec![(1, goal.into())],
            vec![keys[1], foreign],
        ),
        (
            "no such column",
            vec![(3, goal.into())],
            keys[1..3].to_vec(),
        ),
        (
            "wrong dtype",
            vec![(1, (&[1.0f64, 2.0][..]).into())],
            keys[1..3].to_vec(),
        ),
        (
            "wrong length",
            vec![(1, (&goal[..1]).into())],
            keys[1..3].to_vec(),
        ),
        (
            "a column twice",
            vec![(1, goal.into()), (1, goal.into())],
            keys[1..3].to_vec(),
        ),
        (
            "one key for two rows",
            vec![(1, goal.into())],
            keys[1..2].to_vec(),
        ),
    ];
    for (what, columns, keys) in refused {
        assert!(
            buffer.write_back(&keys, &columns).is_err(),
            "{name}: {what}"
        );
    }
    let new_x = x4(&[100, 200, 300]);
    let report = buffer
        .write_back(
            &[keys[1], keys[2], keys[3]],
            &[
                (1, (&[10.0f32, 20.0, 30.0][..]).into()),
                (0, (&new_x[..]).into()),
            ],
        )
        .unwrap();
    assert_eq!((report.applied, report.stale), (2, 1), "{name}");
    assert_eq!(
        buffer.key(1).unwrap(),
        Some(keys[1]),
        "{name}: the key changed"
    );
    let mut read = Vec::new();
    buffer.priorities_of(&keys[1..3], &mut read).unwrap();
    assert_eq!(read, [2.0, 3.0], "{name}: a priority changed");
    // Every item's rows, by a sample of all of them without replacement.
    let mut out = SampleBatch::default();
    let mut rng = Xoshiro256::new(1);
    buffer
        .sample_into(5, 0.4, SampleMode::WithoutReplacement, &mut rng, &mut out)
        .unwrap();
    let x = out.columns[0].as_i64().unwrap();
    let goal = out.columns[1].as_f32().unwrap();
    for (j, key) in out.keys.iter().enumerate() {
        let g = key.insertion() as i64;
        let (want_x, want_goal) = match g {
            1 => (100, 10.0),
            2 => (200, 20.0),
            _ => (g, g as f32 / 2.0),
        };
        assert_eq!((x[4 * j], goal[j]), (want_x, want_goal), "{name}: item {g}");
    }
}

/// A union writes each row back in the shard its key names, keys of two shards interleaved
/// (three runs), a stale key counted; a key of no shard, or columns that do not fit, write
/// nothing anywhere.
#[test]
fn a_union_of_shards_writes_back_in_the_shard_a_key_names() {
    let union: ShardedBuffer<LockFreeBuffer> = ShardedBuffer::new(2, two_columns(4)).unwrap();
    let insert = |shard: usize, xs: &[i64]| {
        let goals: Vec<f32> = xs.iter().map(|&x| x as f32 / 2.0).collect();
        let ps: Vec<f64> = xs.iter().map(|&x| x as f64 + 1.0).collect();
        let x = x4(xs);
        let columns = [(&x[..]).into(), (&goals[..]).into(), (&ps[..]).into()];
        union.insert_batch(shard, &columns, None).unwrap()
    };
    let a = insert(0, &[0, 1, 2]);
    let b = insert(1, &[10, 11]);
    insert(1, &[12, 13, 14]); // x = 14 takes x = 10's slot in shard 1's ring of 4
    let goal = |union: &ShardedBuffer<LockFreeBuffer>, key: Key| -> f32 {
        let shard = &union.shards()[union.shard_of(key).unwrap()];
        let mut out = SampleBatch::default();
        // The one item with a positive priority is the one to read.
        let keys: Vec<Key> = (0..4).filter_map(|i| shard.key(i).unwrap()).collect();
        let zeros: Vec<f64> = keys
            .iter()
            .map(|&k| if k == key { 1.0 } else { 0.0 })
            .collect();
        shard.update_priorities(&keys, &zeros).unwrap();
        shard
            .sample_into(
                1,
                0.4,
                SampleMode::Stratified,
                &mut Xoshiro256::new(1),
                &mut out,
            )
            .unwrap();
        assert_eq!(out.keys[0], key);
        out.columns[1].as_f32().unwrap()[0]
    };
    let foreign = Key {
        index: 0,
        generation: 0,
    };
    let refused: [(&str, Vec<Key>, Vec<f32>); 2] = [
        ("a key of no shard", vec![a[1], foreign], vec![7.0, 7.0]),
        ("one row short", vec![a[1], b[0]], vec![7.0]),
    ];
    for (what, keys, goals) in refused {
        assert!(
            union
                .write_back(&keys, &[(1, (&goals[..]).into())])
                .is_err(),
            "{what}"
        );
    }
    // b[0] (x = 10) was overwritten by x = 14 in shard 1's ring of 4: stale.
    let keys = [a[1], b[1], a[2], b[0]];
    let report = union
        .write_back(&keys, &[(1, (&[21.0f32, 31.0, 22.0, 99.0][..]).into())])
        .unwrap();
    assert_eq!((report.applied, report.stale), (3, 1));
    assert_eq!(goal(&union, a[1]), 21.0);
    assert_eq!(goal(&union, a[2]), 22.0);
    assert_eq!(goal(&union, b[1]), 31.0);
    assert_eq!(goal(&union, a[0]), 0.0, "an item not named was written");
}

#[test]
fn write_back_rewrites_rows_in_place_on_every_buffer() {
    writes_back::<SplitLockBuffer>("SplitLockBuffer");
    writes_back::<LockFreeBuffer>("LockFreeBuffer");
    writes_back::<GlobalLockBuffer>("GlobalLockBuffer");
    // The sequential buffer, through the same calls.
    let mut buffer = ReplayBuffer::new(two_columns(4)).unwrap();
    let keys = buffer
        .insert_batch(
            &[
                (&x4(&[0, 1])[..]).into(),
                (&[0.0f32, 0.5][..]).into(),
                (&[1.0, 2.0][..]).into(),
            ],
            None,
        )
        .unwrap();
    assert!(buffer
        .write_back(&keys, &[(1, (&[1.0f32][..]).into())])
        .is_err());
    let report = buffer
        .write_back(&keys[1..], &[(1, (&[7.0f32][..]).into())])
        .unwrap();
    assert_eq!(report.applied, 1);
    assert_eq!(buffer.storage().column(1).as_f32().unwrap()[1], 7.0);
}

#[cfg(all(unix, not(loom)))]
#[test]
fn a_shared_mapping_refuses_to_write_back() {
    let buffer = ShmBuffer::create_anonymous(two_columns(4)).unwrap();
    let key = buffer
        .insert(
            &[
                (&[1i64; 4][..]).into(),
                (&[0.0f32][..]).into(),
                (&[1.0][..]).into(),
            ],
            None,
        )
        .unwrap();
    let err = buffer
        .write_back(&[key], &[(1, (&[1.0f32][..]).into())])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidParameter {
                name: "write_back",
                ..
            }
        ),
        "{err:?}"
    );
}

/// Writers, a rewriter and a sampler at once: a sampled row is never half rewritten (its 4
/// elements of `x` agree, and `goal` is `x / 2` or what the rewriter wrote with it).
fn rewrites_under_threads<B: ConcurrentBuffer + 'static>(name: &str) {
    let buffer = B::new(two_columns(64)).unwrap();
    let done = AtomicBool::new(false);
    let rewritten = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let (buffer, done, rewritten) = (&buffer, &done, &rewritten);
        let writer = s.spawn(move || {
            let mut i = 0i64;
            while i < 20_000 || rewritten.load(Ordering::Relaxed) < 100 {
                let p = [1.0];
                buffer
                    .insert(
                        &[
                            (&[i; 4][..]).into(),
                            (&[i as f32 / 2.0][..]).into(),
                            (&p[..]).into(),
                        ],
                        Some(1.0),
                    )
                    .unwrap();
                i += 1;
            }
        });
        s.spawn(move || {
            let mut rng = SmallRng::seed_from_u64(3);
            while !done.load(Ordering::Relaxed) {
                let Some(key) = buffer.key(rng.random_range(0..64)).unwrap() else {
                    continue;
                };
                // A rewritten row: x negative, goal its half.
                let v = -(rng.random_range(1..1_000_000i64));
                let report = buffer
                    .write_back(
                        &[key],
                        &[
                            (0, (&[v; 4][..]).into()),
                            (1, (&[v as f32 / 2.0][..]).into()),
                        ],
                    )
                    .unwrap();
                rewritten.fetch_add(report.applied, Ordering::Relaxed);
            }
        });
        s.spawn(move || {
            let mut rng = Xoshiro256::new(4);
            let mut out = SampleBatch::default();
            while !done.load(Ordering::Relaxed) {
                if buffer
                    .sample_into(16, 0.4, SampleMode::Independent, &mut rng, &mut out)
                    .is_err()
                {
                    continue;
                }
                let x = out.columns[0].as_i64().unwrap();
                let goal = out.columns[1].as_f32().unwrap();
                for j in 0..16 {
                    let row = &x[4 * j..4 * j + 4];
                    assert!(row.iter().all(|&v| v == row[0]), "{name}: torn x {row:?}");
                    assert_eq!(
                        goal[j],
                        row[0] as f32 / 2.0,
                        "{name}: goal of another write"
                    );
                }
            }
        });
        writer.join().unwrap();
        done.store(true, Ordering::Relaxed);
    });
    println!("{name}: {rewritten:?} rewritten");
}

#[test]
fn write_back_beside_writers_and_samplers() {
    rewrites_under_threads::<SplitLockBuffer>("SplitLockBuffer");
    rewrites_under_threads::<LockFreeBuffer>("LockFreeBuffer");
    rewrites_under_threads::<GlobalLockBuffer>("GlobalLockBuffer");
}
