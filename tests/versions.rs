//! A policy-version window (`version_column`, `retire_before`) on every flat buffer: the
//! items below the floor are retired (keys stale, never sampled, not counted), an insert of
//! one is refused with nothing changed, the floor only rises, `clear` and checkpoints keep
//! it, the configuration's checks, a union of shards; and actor threads inserting versions
//! that lag the learner's while the learner raises the floor: no sample after a raise
//! returns an item below it, and at quiescence every stored item is at or above the floor
//! and `len` counts exactly the stored items.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use kary_replay::shard::ShardedBuffer;
#[cfg(all(unix, not(loom)))]
use kary_replay::ShmBuffer;
use kary_replay::{
    ConcurrentBuffer, Config, DType, Error, GlobalLockBuffer, Load, LockFreeBuffer, ReplayBuffer,
    SampleBatch, SampleMode, Schema, SplitLockBuffer,
};
use rand::{rngs::SmallRng, Rng, SeedableRng};

#[path = "support/scale.rs"]
mod scale;

/// Two columns: `x` (f32) and `version` (i64), the version column.
fn config(capacity: usize) -> Config {
    let schema = Schema::new()
        .column("x", DType::F32, [])
        .column("version", DType::I64, []);
    Config::builder(capacity, schema)
        .alpha(1.0)
        .version_column("version")
        .build()
        .unwrap()
}

/// A fresh directory under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        TempDir(std::env::temp_dir().join(format!(
            "kr-versions-{name}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        )))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn versions_of(out: &SampleBatch) -> Vec<i64> {
    out.columns[1].as_i64().unwrap().to_vec()
}

/// Every stored item's version, read slot by slot (keys say which slots hold one).
fn stored_versions<B: ConcurrentBuffer>(buffer: &B) -> Vec<i64> {
    let mut rng = SmallRng::seed_from_u64(0);
    if buffer.is_empty() {
        return Vec::new();
    }
    let n = buffer.len();
    let batch = buffer
        .sample(n, 0.4, SampleMode::WithoutReplacement, &mut rng)
        .unwrap();
    let mut v = versions_of(&batch);
    v.sort_unstable();
    v
}

/// What every family must do, through the trait: items of versions 0..8 in a ring of 16.
fn retires<B: ConcurrentBuffer>(name: &str) {
    let buffer = B::new(config(16)).unwrap();
    assert_eq!(buffer.version_floor(), Some(i64::MIN), "{name}");
    let xs: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let vs: Vec<i64> = (0..8).collect();
    let keys = buffer
        .insert_batch(&[(&xs[..]).into(), (&vs[..]).into()], None)
        .unwrap();
    assert_eq!(buffer.retire_before(3).unwrap(), 3, "{name}");
    assert_eq!(buffer.version_floor(), Some(3), "{name}");
    assert_eq!(buffer.len(), 5, "{name}");
    assert_eq!(buffer.total_priority(), 5.0, "{name}");
    // Retired keys are stale: an update applies to none of them.
    let report = buffer.update_priorities(&keys[..4], &[9.0; 4]).unwrap();
    assert_eq!((report.applied, report.stale), (1, 3), "{name}");
    let mut rng = SmallRng::seed_from_u64(1);
    for mode in [
        SampleMode::Independent,
        SampleMode::Uniform,
        SampleMode::Fifo,
    ] {
        let batch = buffer.sample(32, 0.4, mode, &mut rng).unwrap();
        assert!(
            versions_of(&batch).iter().all(|&v| v >= 3),
            "{name} {mode:?}"
        );
    }
    // The floor only rises: a lower version retires nothing and leaves it at 3.
    assert_eq!(buffer.retire_before(1).unwrap(), 0, "{name}");
    assert_eq!(buffer.version_floor(), Some(3), "{name}");
    // An insert holding a retired version is refused whole; nothing changes.
    let inserted = buffer.inserted();
    let err = buffer
        .insert_batch(
            &[(&[0.0f32, 0.0][..]).into(), (&[5i64, 2][..]).into()],
            None,
        )
        .unwrap_err();
    assert_eq!(
        err,
        Error::RetiredVersion {
            version: 2,
            floor: 3
        },
        "{name}"
    );
    let one = [(&[0.0f32][..]).into(), (&[1i64][..]).into()];
    assert!(matches!(
        buffer.insert(&one, None),
        Err(Error::RetiredVersion { .. })
    ));
    assert_eq!((buffer.inserted(), buffer.len()), (inserted, 5), "{name}");
    // Newer items go in; raising the floor past all of them empties the buffer.
    buffer
        .insert_batch(
            &[(&[0.0f32; 4][..]).into(), (&[8i64, 9, 10, 11][..]).into()],
            None,
        )
        .unwrap();
    assert_eq!(buffer.len(), 9, "{name}");
    assert_eq!(
        stored_versions(&buffer),
        (3..12).collect::<Vec<_>>(),
        "{name}"
    );
    assert_eq!(buffer.retire_before(12).unwrap(), 9, "{name}");
    assert!(buffer.is_empty(), "{name}");
    assert_eq!(
        buffer
            .sample(1, 0.4, SampleMode::Independent, &mut rng)
            .unwrap_err(),
        Error::Empty,
        "{name}"
    );
    // Inserts after retirements fill the ring as after deletions.
    for v in 12..40i64 {
        buffer
            .insert(&[(&[0.0f32][..]).into(), (&[v][..]).into()], None)
            .unwrap();
    }
    assert_eq!(buffer.len(), 16, "{name}");
    assert_eq!(
        stored_versions(&buffer),
        (24..40).collect::<Vec<_>>(),
        "{name}"
    );
    // `clear` keeps the floor.
    buffer.clear();
    assert_eq!(buffer.version_floor(), Some(12), "{name}");
    assert!(buffer.insert(&one, None).is_err(), "{name}");
}

#[test]
fn retire_before_on_every_concurrent_buffer() {
    retires::<SplitLockBuffer>("SplitLockBuffer");
    retires::<LockFreeBuffer>("LockFreeBuffer");
    retires::<GlobalLockBuffer>("GlobalLockBuffer");
    #[cfg(all(unix, not(loom)))]
    retires::<ShmBuffer>("ShmBuffer");
}

#[test]
fn retire_before_on_the_sequential_buffer() {
    let mut buffer = ReplayBuffer::new(config(8)).unwrap();
    let xs: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let vs: Vec<i64> = vec![4, 1, 5, 2, 6, 3];
    buffer
        .insert_batch(&[(&xs[..]).into(), (&vs[..]).into()], None)
        .unwrap();
    assert_eq!(buffer.retire_before(4).unwrap(), 3);
    assert_eq!((buffer.len(), buffer.version_floor()), (3, Some(4)));
    let one = [(&[0.0f32][..]).into(), (&[3i64][..]).into()];
    assert_eq!(
        buffer.insert(&one, None).unwrap_err(),
        Error::RetiredVersion {
            version: 3,
            floor: 4
        }
    );
    let mut rng = SmallRng::seed_from_u64(3);
    let batch = buffer
        .sample(64, 0.4, SampleMode::Independent, &mut rng)
        .unwrap();
    assert!(versions_of(&batch).iter().all(|&v| v >= 4));
}

#[test]
fn the_configuration_checks_the_version_column() {
    let schema = Schema::new()
        .column("x", DType::F32, [])
        .column("v32", DType::I32, [])
        .column("v2", DType::I64, [2]);
    for name in ["missing", "v32", "v2"] {
        let err = Config::builder(4, schema.clone())
            .version_column(name)
            .build();
        assert!(
            matches!(err, Err(Error::InvalidSchema(_))),
            "{name}: {err:?}"
        );
    }
    // Without a version column the call is refused and nothing changes.
    let plain = Config::builder(4, Schema::new().column("x", DType::F32, []))
        .build()
        .unwrap();
    let buffer = SplitLockBuffer::new(plain.clone()).unwrap();
    assert!(matches!(
        buffer.retire_before(1),
        Err(Error::InvalidParameter { .. })
    ));
    assert_eq!(buffer.version_floor(), None);
    assert!(ReplayBuffer::new(plain).unwrap().retire_before(1).is_err());
}

#[test]
fn checkpoints_keep_the_column_and_the_floor() {
    fn round_trip<B: ConcurrentBuffer + Load>(name: &str) {
        let buffer = B::new(config(8)).unwrap();
        let vs: Vec<i64> = (0..6).collect();
        buffer
            .insert_batch(&[(&[0.0f32; 6][..]).into(), (&vs[..]).into()], None)
            .unwrap();
        buffer.retire_before(2).unwrap();
        let dir = TempDir::new(name);
        buffer.save(&dir.0).unwrap();
        let loaded = B::load(&dir.0).unwrap();
        assert_eq!(loaded.config().version_column(), Some(1), "{name}");
        assert_eq!(loaded.version_floor(), Some(2), "{name}");
        assert_eq!(loaded.len(), 4, "{name}");
        let one = [(&[0.0f32][..]).into(), (&[1i64][..]).into()];
        assert!(loaded.insert(&one, None).is_err(), "{name}");
        assert_eq!(loaded.retire_before(4).unwrap(), 2, "{name}");
        // The sequential buffer reads the same files.
        let sequential = ReplayBuffer::load(&dir.0).unwrap();
        assert_eq!(sequential.version_floor(), Some(2), "{name}");
    }
    round_trip::<SplitLockBuffer>("split");
    round_trip::<LockFreeBuffer>("lockfree");
    round_trip::<GlobalLockBuffer>("global");
}

#[test]
fn a_union_of_shards_retires_in_every_shard() {
    let union: ShardedBuffer<LockFreeBuffer> = ShardedBuffer::new(2, config(8)).unwrap();
    for shard in 0..2 {
        union
            .insert_batch(
                shard,
                &[(&[0.0f32; 3][..]).into(), (&[1i64, 2, 3][..]).into()],
                None,
            )
            .unwrap();
    }
    assert_eq!(union.retire_before(3).unwrap(), 4);
    assert_eq!(union.len(), 2);
    let plain = Config::builder(4, Schema::new().column("x", DType::F32, []))
        .build()
        .unwrap();
    let union: ShardedBuffer<LockFreeBuffer> = ShardedBuffer::new(2, plain).unwrap();
    assert!(union.retire_before(3).is_err());
}

/// Actors insert items of the version they last read, which lags the learner's (each
/// actor's version is the learner's minus up to 4); the learner raises the version and
/// retires everything older than `version - 2`, sampling between raises. Refused inserts
/// are counted and skipped. Every sample taken after a raise returned holds no item below
/// that floor; at quiescence the stored items are all at or above the floor, and their
/// number is `len`.
fn races<B: ConcurrentBuffer>(name: &str) {
    let buffer = B::new(config(256)).unwrap();
    let policy = AtomicI64::new(0);
    let done = AtomicBool::new(false);
    let refused = AtomicU64::new(0);
    let rounds = scale::scaled(400, 20) as i64;
    std::thread::scope(|s| {
        for actor in 0..2u64 {
            let (buffer, policy, done, refused) = (&buffer, &policy, &done, &refused);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(actor);
                while !done.load(Ordering::Relaxed) {
                    let v = policy.load(Ordering::Relaxed) - rng.random_range(0..5);
                    let n = rng.random_range(1..8);
                    let xs = vec![0.0f32; n];
                    let vs = vec![v; n];
                    match buffer.insert_batch(&[(&xs[..]).into(), (&vs[..]).into()], None) {
                        Ok(_) => {}
                        Err(Error::RetiredVersion { .. }) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("{name}: {e}"),
                    }
                }
            });
        }
        let mut rng = SmallRng::seed_from_u64(99);
        let mut out = SampleBatch::default();
        for round in 1..=rounds {
            // Each round waits for the actors to insert a few batches more.
            let seen = buffer.inserted();
            while buffer.inserted() < seen + 16 {
                std::thread::yield_now();
            }
            policy.store(round, Ordering::Relaxed);
            let floor = round - 2;
            buffer.retire_before(floor).unwrap();
            for _ in 0..4 {
                match buffer.sample_into(16, 0.4, SampleMode::Independent, &mut rng, &mut out) {
                    Ok(_) => {
                        let low = versions_of(&out).into_iter().min().unwrap();
                        assert!(low >= floor, "{name}: round {round} sampled version {low}");
                    }
                    Err(Error::Empty | Error::Contention { .. } | Error::ZeroTotalPriority) => {}
                    Err(e) => panic!("{name}: {e}"),
                }
            }
        }
        done.store(true, Ordering::Relaxed);
    });
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "{name}: no insert met the floor"
    );
    let floor = buffer.version_floor().unwrap();
    let stored = stored_versions(&buffer);
    assert!(
        stored.iter().all(|&v| v >= floor),
        "{name}: {stored:?} below {floor}"
    );
    assert_eq!(stored.len(), buffer.len(), "{name}");
    let held = (0..buffer.capacity())
        .filter(|&i| buffer.key(i).unwrap().is_some())
        .count();
    assert_eq!(held, buffer.len(), "{name}");
}

#[test]
fn threads_never_see_an_item_below_the_floor() {
    races::<SplitLockBuffer>("SplitLockBuffer");
    races::<LockFreeBuffer>("LockFreeBuffer");
    races::<GlobalLockBuffer>("GlobalLockBuffer");
    #[cfg(all(unix, not(loom)))]
    races::<ShmBuffer>("ShmBuffer");
}
