//! Checkpoints on every buffer: what a load restores (bytes, priorities bit for bit, keys,
//! len, cursor, running maximum, exact sums, the same draws), saves while threads run, and
//! every kind of bad input (a typed error, never a panic).

#[path = "support/scale.rs"]
mod scale;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use kary_replay::checkpoint::{self, LoadOptions, SaveOptions, UserValue, NO_ITEM};
use kary_replay::{
    Checkpoint, CheckpointErrorKind, ConcurrentBuffer, Config, DType, DefaultPriority, Error,
    GlobalLockBuffer, Key, Load, LockFreeBuffer, ReplayBuffer, SampleBatch, SampleMode, Schema,
    SplitLockBuffer,
};
use rand::{rngs::SmallRng, Rng, SeedableRng};

/// A fresh directory under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "kr-ckpt-{name}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn schema() -> Schema {
    Schema::new()
        .column("obs", DType::F32, 3)
        .column("action", DType::I64, 1)
        .column("done", DType::Bool, 1)
        .column("id", DType::U8, 2)
}

fn config(capacity: usize, default: DefaultPriority) -> Config {
    Config::builder(capacity, schema())
        .alpha(0.7)
        .fanout(4)
        .default_priority(default)
        .build()
        .unwrap()
}

/// The columns of item `i`.
fn row(i: u64) -> (Vec<f32>, [i64; 1], [bool; 1], [u8; 2]) {
    (
        vec![i as f32 * 0.5, -(i as f32), 1e-3 * i as f32],
        [i as i64 * 7 - 3],
        [i % 3 == 0],
        [(i % 251) as u8, (i / 251) as u8],
    )
}

/// Whatever a save and a load must keep, read through the public API.
#[derive(Debug, PartialEq)]
struct Observed {
    len: usize,
    inserted: u64,
    total_bits: u64,
    slots: Vec<(u64, Option<Key>)>,
    rows: Vec<Vec<u8>>,
}

/// The state of a concurrent buffer, every slot and every row (by sampling each key's slot
/// is not possible, so rows come from a sample of everything that is stored).
fn observe<B: ConcurrentBuffer>(b: &B) -> Observed {
    let capacity = b.capacity();
    let slots = (0..capacity)
        .map(|i| (b.priority(i).unwrap().to_bits(), b.key(i).unwrap()))
        .collect();
    Observed {
        len: b.len(),
        inserted: b.inserted(),
        total_bits: b.total_priority().to_bits(),
        slots,
        rows: rows_of(b),
    }
}

/// Every stored item's row, in slot order, through stratified samples (each slot with a
/// positive priority is drawn with overwhelming probability in 64 x capacity draws).
fn rows_of<B: ConcurrentBuffer>(b: &B) -> Vec<Vec<u8>> {
    if b.len() == 0 || b.total_priority() == 0.0 {
        return vec![];
    }
    let mut rng = SmallRng::seed_from_u64(11);
    let mut out = SampleBatch::default();
    b.sample_into(
        64 * b.capacity(),
        0.4,
        SampleMode::Stratified,
        &mut rng,
        &mut out,
    )
    .unwrap();
    let mut rows = vec![Vec::new(); b.capacity()];
    for (r, &i) in out.indices.iter().enumerate() {
        let mut bytes = Vec::new();
        for c in &out.columns {
            let data = c.as_slice();
            let n = data.as_bytes().len() / out.indices.len();
            bytes.extend_from_slice(&data.as_bytes()[r * n..(r + 1) * n]);
        }
        rows[i] = bytes;
    }
    rows
}

/// Inserts (wrapping several times), updates with magnitudes that change (large, then
/// small), a clear part-way, more inserts: a buffer with history.
fn fill<B: ConcurrentBuffer>(b: &B, seed: u64) -> Vec<Key> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let capacity = b.capacity() as u64;
    let mut keys = Vec::new();
    let mut id = 0u64;
    let mut insert = |b: &B, n: u64, keys: &mut Vec<Key>, rng: &mut SmallRng| {
        for _ in 0..n {
            let (obs, action, done, tag) = row(id);
            let priority = match rng.random_range(0..3) {
                0 => None,
                1 => Some(rng.random_range(1e-6..1e6)),
                _ => Some(0.0),
            };
            keys.push(
                b.insert(
                    &[
                        (&obs).into(),
                        (&action).into(),
                        (&done).into(),
                        (&tag).into(),
                    ],
                    priority,
                )
                .unwrap(),
            );
            id += 1;
        }
    };
    insert(b, 3 * capacity + 5, &mut keys, &mut rng);
    let recent: Vec<Key> = keys[keys.len() - capacity as usize..].to_vec();
    let big: Vec<f64> = recent.iter().map(|_| rng.random_range(1e6..1e8)).collect();
    b.update_priorities(&recent, &big).unwrap();
    let small: Vec<f64> = recent
        .iter()
        .map(|_| rng.random_range(1e-8..1e-4))
        .collect();
    b.update_priorities(&recent, &small).unwrap();
    b.clear();
    insert(b, capacity / 2 + 1, &mut keys, &mut rng);
    keys
}

fn round_trip<S: ConcurrentBuffer, L: ConcurrentBuffer + Load>(default: DefaultPriority) {
    let tmp = TempDir::new("round");
    let saved = S::new(config(37, default)).unwrap();
    let keys = fill(&saved, 5);
    let dir = tmp.0.join("a");
    saved.save(&dir).unwrap();
    let loaded = L::load(&dir).unwrap();
    let before = observe(&saved);
    assert_eq!(observe(&loaded), before);
    let c = loaded.consistency();
    assert!(c.exact && c.extrema_exact, "{c:?}");

    // Keys handed out before the save: the newest ones apply, overwritten ones are stale.
    let live = *keys.last().unwrap();
    let stale = keys[0];
    for b in [
        &saved as &dyn ConcurrentBuffer,
        &loaded as &dyn ConcurrentBuffer,
    ] {
        let report = b.update_priorities(&[live, stale], &[3.0, 3.0]).unwrap();
        assert_eq!((report.applied, report.stale), (1, 1));
        assert_eq!(b.priority(live.index).unwrap(), 3.0f64.powf(0.7));
    }
    // Both go on the same way: the next insert gets the same generation and priority.
    let (obs, action, done, tag) = row(999);
    let columns = [
        (&obs).into(),
        (&action).into(),
        (&done).into(),
        (&tag).into(),
    ];
    let a = saved.insert(&columns, None).unwrap();
    let b = loaded.insert(&columns, None).unwrap();
    assert_eq!(a, b);
    assert_eq!(
        saved.priority(a.index).unwrap(),
        loaded.priority(b.index).unwrap()
    );
    assert_eq!(observe(&saved), observe(&loaded));
}

#[test]
fn every_variant_loads_every_variant_bit_for_bit() {
    for default in [DefaultPriority::RunningMax, DefaultPriority::LiveMax] {
        round_trip::<GlobalLockBuffer, GlobalLockBuffer>(default);
        round_trip::<GlobalLockBuffer, SplitLockBuffer>(default);
        round_trip::<GlobalLockBuffer, LockFreeBuffer>(default);
        round_trip::<SplitLockBuffer, SplitLockBuffer>(default);
        round_trip::<SplitLockBuffer, LockFreeBuffer>(default);
        round_trip::<SplitLockBuffer, GlobalLockBuffer>(default);
        round_trip::<LockFreeBuffer, LockFreeBuffer>(default);
        round_trip::<LockFreeBuffer, SplitLockBuffer>(default);
        round_trip::<LockFreeBuffer, GlobalLockBuffer>(default);
    }
}

#[test]
fn the_sequential_buffer_round_trips_and_draws_the_same_samples() {
    let tmp = TempDir::new("seq");
    let mut saved = ReplayBuffer::new(config(50, DefaultPriority::RunningMax)).unwrap();
    for i in 0..130u64 {
        let (obs, action, done, tag) = row(i);
        saved
            .insert(
                &[
                    (&obs).into(),
                    (&action).into(),
                    (&done).into(),
                    (&tag).into(),
                ],
                Some(1.0 + (i % 9) as f64 * 1e3),
            )
            .unwrap();
    }
    let dir = tmp.0.join("seq");
    saved.save(&dir).unwrap();
    let loaded = ReplayBuffer::load(&dir).unwrap();
    assert_eq!(loaded.len(), saved.len());
    assert_eq!(loaded.inserted(), saved.inserted());
    assert_eq!(
        loaded.total_priority().to_bits(),
        saved.total_priority().to_bits()
    );
    for i in 0..50 {
        assert_eq!(loaded.key(i).unwrap(), saved.key(i).unwrap());
        assert_eq!(
            loaded.priority(i).unwrap().to_bits(),
            saved.priority(i).unwrap().to_bits()
        );
    }
    // The same RNG state draws the same batch, rows, weights and all.
    let mut r1 = SmallRng::seed_from_u64(3);
    let mut r2 = SmallRng::seed_from_u64(3);
    for mode in [SampleMode::Stratified, SampleMode::Independent] {
        let a = saved.sample(64, 0.4, mode, &mut r1).unwrap();
        let b = loaded.sample(64, 0.4, mode, &mut r2).unwrap();
        assert_eq!(a, b);
    }
}

#[test]
fn a_concurrent_buffer_draws_the_same_samples_after_a_load() {
    fn check<B: ConcurrentBuffer + Load>() {
        let tmp = TempDir::new("draws");
        let saved = B::new(config(64, DefaultPriority::RunningMax)).unwrap();
        fill(&saved, 9);
        let dir = tmp.0.join("d");
        saved.save(&dir).unwrap();
        let loaded = B::load(&dir).unwrap();
        let (mut r1, mut r2) = (SmallRng::seed_from_u64(8), SmallRng::seed_from_u64(8));
        let a = saved
            .sample(128, 0.5, SampleMode::Stratified, &mut r1)
            .unwrap();
        let b = loaded
            .sample(128, 0.5, SampleMode::Stratified, &mut r2)
            .unwrap();
        assert_eq!(a, b);
    }
    check::<GlobalLockBuffer>();
    check::<SplitLockBuffer>();
    check::<LockFreeBuffer>();
}

#[test]
fn user_data_rotation_latest_and_clean() {
    let tmp = TempDir::new("rot");
    let b = SplitLockBuffer::new(config(16, DefaultPriority::RunningMax)).unwrap();
    fill(&b, 1);
    for step in [10u64, 20, 30, 40] {
        let options = SaveOptions::new()
            .user("step", UserValue::U64(step))
            .user("rng", UserValue::Bytes(vec![1, 2, 3, step as u8]))
            .user("lr", UserValue::F64(0.1 + 1e-17))
            .user("name", UserValue::Str("run \"a\"".into()))
            .keep_last(2);
        b.save_with(&checkpoint::numbered(&tmp.0, step), &options)
            .unwrap();
    }
    let mut names: Vec<String> = std::fs::read_dir(&tmp.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["ckpt-000000000030", "ckpt-000000000040"]);
    let latest = checkpoint::latest(&tmp.0).unwrap().unwrap();
    assert_eq!(latest, checkpoint::numbered(&tmp.0, 40));
    let loaded = LockFreeBuffer::load_with(&latest, &LoadOptions::default()).unwrap();
    assert_eq!(loaded.user["step"], UserValue::U64(40));
    assert_eq!(loaded.user["rng"], UserValue::Bytes(vec![1, 2, 3, 40]));
    assert_eq!(loaded.user["lr"], UserValue::F64(0.1 + 1e-17));
    assert_eq!(checkpoint::user_data(&latest).unwrap(), loaded.user);

    // An uncommitted newer one and a stray temporary directory are ignored, then cleaned.
    let newer = checkpoint::numbered(&tmp.0, 50);
    std::fs::create_dir(&newer).unwrap();
    std::fs::write(newer.join("manifest.json"), b"{").unwrap();
    std::fs::create_dir(tmp.0.join(".ckpt-000000000060.tmp-1-2")).unwrap();
    assert_eq!(checkpoint::latest(&tmp.0).unwrap(), Some(latest.clone()));
    assert_eq!(checkpoint::clean(&tmp.0).unwrap(), 2);
    assert!(!newer.exists());
    assert!(latest.exists());

    // A save never replaces: the target must not exist.
    let err = b.save(&latest).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Checkpoint {
                kind: CheckpointErrorKind::Exists,
                ..
            }
        ),
        "{err}"
    );
    // A float the JSON cannot hold is refused before anything is written.
    let bad = SaveOptions::new().user("x", UserValue::F64(f64::NAN));
    let dir = tmp.0.join("nan");
    assert!(b.save_with(&dir, &bad).is_err());
    assert!(!dir.exists());
    let huge = SaveOptions::new().user("x", UserValue::Bytes(vec![0; 100_000]));
    assert!(b.save_with(&dir, &huge).is_err());
    assert!(!dir.exists());
}

/// Several writers insert numbered items, learners sample and update, and a saver saves
/// again and again meanwhile: each checkpoint is a state that existed (each writer's items
/// in it are a contiguous run of its sequence, ending with those evicted before it, and
/// every slot holds its newest generation), and its priorities are ones that were set.
#[test]
fn saves_while_actors_and_learners_run_are_states_that_existed() {
    fn run<B: ConcurrentBuffer + Load + 'static>() {
        const WRITERS: u64 = 3;
        let tmp = TempDir::new("live");
        let capacity = 512;
        let b = B::new(config(capacity, DefaultPriority::RunningMax)).unwrap();
        let stop = AtomicBool::new(false);
        let mut dirs = Vec::new();
        std::thread::scope(|s| {
            for w in 0..WRITERS {
                let (b, stop) = (&b, &stop);
                s.spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        // id = writer in the top bits, sequence number below.
                        let id = (w << 40) | n;
                        let (obs, _, done, _) = row(n);
                        let tag = [w as u8, 0];
                        let action = [id as i64];
                        b.insert(
                            &[
                                (&obs).into(),
                                (&action).into(),
                                (&done).into(),
                                (&tag).into(),
                            ],
                            Some(1.0 + (n % 5) as f64),
                        )
                        .unwrap();
                        n += 1;
                    }
                });
            }
            for l in 0..2u64 {
                let (b, stop) = (&b, &stop);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(l);
                    while !stop.load(Ordering::Relaxed) {
                        match b.sample(32, 0.4, SampleMode::Stratified, &mut rng) {
                            Ok(batch) => {
                                // An update's value is a function of the item: 100 + id % 7.
                                let ps: Vec<f64> = batch.columns[1]
                                    .as_i64()
                                    .unwrap()
                                    .iter()
                                    .map(|&id| 100.0 + (id % 7) as f64)
                                    .collect();
                                b.update_priorities(&batch.keys, &ps).unwrap();
                            }
                            Err(Error::Empty | Error::Contention { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                });
            }
            for i in 0..12 {
                // Let the writers run a little between saves (they insert a few thousand).
                while b.inserted() < (i + 1) * 700 {
                    std::thread::yield_now();
                }
                let dir = tmp.0.join(format!("s{i}"));
                b.save(&dir).unwrap();
                dirs.push(dir);
            }
            stop.store(true, Ordering::Relaxed);
        });
        for dir in &dirs {
            // The load checks every slot's generation against the cursor and the len.
            let loaded = GlobalLockBuffer::load(dir).unwrap();
            assert!(loaded.consistency().exact);
            let mut by_writer: Vec<Vec<u64>> = vec![Vec::new(); WRITERS as usize];
            loaded.with_locked(|r| {
                let n = r.len();
                assert!(n > 0);
                let mut rng = SmallRng::seed_from_u64(1);
                let batch = r
                    .sample(64 * capacity, 0.0, SampleMode::Stratified, &mut rng)
                    .unwrap();
                let ids = batch.columns[1].as_i64().unwrap();
                let mut seen = std::collections::BTreeMap::new();
                for (j, &slot) in batch.indices.iter().enumerate() {
                    seen.insert(slot, (ids[j] as u64, batch.priorities[j]));
                }
                assert_eq!(seen.len(), n, "every stored item drawn");
                for (_, (id, p)) in seen {
                    let (w, seq) = (id >> 40, id & ((1 << 40) - 1));
                    by_writer[w as usize].push(seq);
                    // Inserted at 1 + seq % 5, or updated to 100 + id % 7, as alpha says.
                    let inserted = (1.0 + (seq % 5) as f64).powf(0.7);
                    let updated = (100.0 + (id % 7) as f64).powf(0.7);
                    assert!(p == inserted || p == updated, "priority {p} of {id}");
                }
            });
            for seqs in &mut by_writer {
                seqs.sort_unstable();
                // FIFO eviction removes each writer's oldest items: what is left is a
                // contiguous run (a hole would be an item lost, or one written after a
                // later one of the same writer was left out).
                for pair in seqs.windows(2) {
                    assert_eq!(pair[1], pair[0] + 1, "a hole in a writer's items: {pair:?}");
                }
            }
        }
    }
    run::<SplitLockBuffer>();
    run::<LockFreeBuffer>();
    run::<GlobalLockBuffer>();
}

// ---------------------------------------------------------------------------------------
// Bad input

fn saved_dir(tmp: &TempDir) -> PathBuf {
    let b = SplitLockBuffer::new(config(40, DefaultPriority::RunningMax)).unwrap();
    fill(&b, 3);
    let dir = tmp.0.join("good");
    b.save(&dir).unwrap();
    dir
}

fn kind(r: kary_replay::Result<impl std::fmt::Debug>) -> CheckpointErrorKind {
    match r {
        Err(Error::Checkpoint { kind, .. }) => kind,
        other => panic!("expected a checkpoint error, got {other:?}"),
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Rewrite the manifest with `edit` and a matching COMMIT (so that the load reaches the
/// field checks rather than stopping at the CRC).
fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut m);
    let bytes = serde_json::to_vec_pretty(&m).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    std::fs::write(
        dir.join("COMMIT"),
        format!(
            "kary-replay-checkpoint v1 manifest-crc32 {:08x}\n",
            crc32fast::hash(&bytes)
        ),
    )
    .unwrap();
}

/// Rewrite a data file's bytes after its header with `edit`, and its CRC in the manifest.
fn edit_data(dir: &Path, name: &str, edit: impl FnOnce(&mut [u8])) {
    let path = dir.join(name);
    let mut bytes = std::fs::read(&path).unwrap();
    let header = 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    edit(&mut bytes[header..]);
    std::fs::write(&path, &bytes).unwrap();
    let crc = crc32fast::hash(&bytes);
    edit_manifest(dir, |m| m["files"][name]["crc32"] = crc.into());
}

type ManifestEdit = Box<dyn Fn(&mut serde_json::Value)>;
type DataEdit = Box<dyn Fn(&mut [u8])>;

#[test]
fn damaged_checkpoints_are_typed_errors() {
    use CheckpointErrorKind::*;
    let tmp = TempDir::new("bad");
    let good = saved_dir(&tmp);
    assert!(SplitLockBuffer::load(&good).is_ok());
    let n = std::cell::Cell::new(0);
    let fresh = || {
        n.set(n.get() + 1);
        let dir = tmp.0.join(format!("case{}", n.get()));
        copy_dir(&good, &dir);
        dir
    };
    let load = |dir: &Path| LockFreeBuffer::load(dir);

    // Files missing, truncated, extended, flipped.
    for name in [
        "COMMIT",
        "manifest.json",
        "priorities.npy",
        "generations.npy",
        "raw_priorities.npy",
        "col.obs.npy",
    ] {
        let dir = fresh();
        std::fs::remove_file(dir.join(name)).unwrap();
        let k = kind(load(&dir));
        assert!(matches!(k, Uncommitted | NotFound), "{name}: {k:?}");
    }
    for name in [
        "priorities.npy",
        "generations.npy",
        "col.done.npy",
        "col.id.npy",
    ] {
        let dir = fresh();
        let bytes = std::fs::read(dir.join(name)).unwrap();
        std::fs::write(dir.join(name), &bytes[..bytes.len() - 3]).unwrap();
        assert_eq!(kind(load(&dir)), Corrupt, "{name} truncated");
        std::fs::write(dir.join(name), [&bytes[..], b"x"].concat()).unwrap();
        assert_eq!(kind(load(&dir)), Corrupt, "{name} extended");
        let mut flipped = bytes.clone();
        let at = flipped.len() - 5;
        flipped[at] ^= 0x10;
        std::fs::write(dir.join(name), &flipped).unwrap();
        assert_eq!(kind(load(&dir)), Corrupt, "{name} flipped");
        let mut magic = bytes.clone();
        magic[1] = b'X';
        std::fs::write(dir.join(name), &magic).unwrap();
        assert_eq!(kind(load(&dir)), Format, "{name} magic");
    }
    // Every bit of the manifest flipped: the COMMIT's CRC catches each one.
    let manifest = std::fs::read(good.join("manifest.json")).unwrap();
    let dir = fresh();
    for byte in 0..manifest.len() {
        for bit in 0..8 {
            let mut m = manifest.clone();
            m[byte] ^= 1 << bit;
            std::fs::write(dir.join("manifest.json"), &m).unwrap();
            assert_eq!(kind(load(&dir)), Corrupt, "byte {byte} bit {bit}");
        }
    }
    let dir = fresh();
    std::fs::write(
        dir.join("COMMIT"),
        b"kary-replay-checkpoint v1 manifest-crc32 00000000\n",
    )
    .unwrap();
    assert_eq!(kind(load(&dir)), Corrupt);
    std::fs::write(dir.join("COMMIT"), b"garbage").unwrap();
    assert_eq!(kind(load(&dir)), Uncommitted);
    // A record whose hex letters changed case, or with a sign, is not the record a save
    // writes, even where it names the right CRC.
    let dir = fresh();
    let commit = std::fs::read_to_string(dir.join("COMMIT")).unwrap();
    let hex = commit.trim_end().rsplit(' ').next().unwrap().to_string();
    for damaged in [hex.to_uppercase(), format!("+{}", &hex[1..])] {
        if damaged != hex {
            std::fs::write(dir.join("COMMIT"), commit.replace(&hex, &damaged)).unwrap();
            assert_eq!(kind(load(&dir)), Uncommitted, "{damaged}");
        }
    }

    // Fields that pass the CRC but not the rules.
    let cases: Vec<(&str, ManifestEdit, CheckpointErrorKind)> = vec![
        ("version 2", Box::new(|m| m["version"] = 2.into()), Format),
        ("format", Box::new(|m| m["format"] = "npz".into()), Format),
        (
            "2^60 slots",
            Box::new(|m| m["config"]["capacity"] = (1u64 << 60).into()),
            Invalid,
        ),
        (
            "capacity 41",
            Box::new(|m| m["config"]["capacity"] = 41.into()),
            Corrupt,
        ),
        (
            "capacity 0",
            Box::new(|m| m["config"]["capacity"] = 0.into()),
            Invalid,
        ),
        (
            "fanout 5",
            Box::new(|m| m["config"]["fanout"] = 5.into()),
            Invalid,
        ),
        (
            "alpha NaN",
            Box::new(|m| m["config"]["alpha"] = (-1.0).into()),
            Invalid,
        ),
        (
            "len > capacity",
            Box::new(|m| m["state"]["len"] = 41.into()),
            Invalid,
        ),
        (
            "len off by one",
            Box::new(|m| m["state"]["len"] = 20.into()),
            Invalid,
        ),
        (
            "cursor",
            Box::new(|m| m["state"]["cursor"] = 39.into()),
            Invalid,
        ),
        (
            "inserted",
            Box::new(|m| m["state"]["inserted"] = 1000.into()),
            Invalid,
        ),
        (
            "running max",
            Box::new(|m| m["state"]["running_max"] = (-1.0).into()),
            Invalid,
        ),
        (
            "dtype",
            Box::new(|m| m["schema"][0]["dtype"] = "f16".into()),
            Invalid,
        ),
        (
            "shape",
            Box::new(|m| m["schema"][0]["shape"] = 4.into()),
            Corrupt,
        ),
        (
            "dims against shape",
            Box::new(|m| m["schema"][0]["dims"] = serde_json::json!([2, 2])),
            Invalid,
        ),
        (
            "dims against the file",
            Box::new(|m| m["schema"][0]["dims"] = serde_json::json!([1, 3])),
            Format,
        ),
        (
            "file name",
            Box::new(|m| m["schema"][0]["file"] = "../x.npy".into()),
            Invalid,
        ),
        ("unknown field", Box::new(|m| m["extra"] = 1.into()), Format),
        (
            "no files",
            Box::new(|m| m["files"] = serde_json::json!({})),
            Invalid,
        ),
        (
            "raw running max",
            Box::new(|m| m["state"]["running_max_raw"] = (-1.0).into()),
            Invalid,
        ),
        (
            "raw priorities without the raw running max",
            Box::new(|m| {
                m["state"]
                    .as_object_mut()
                    .unwrap()
                    .remove("running_max_raw");
            }),
            Invalid,
        ),
    ];
    for (what, edit, want) in cases {
        let dir = fresh();
        edit_manifest(&dir, edit);
        assert_eq!(kind(load(&dir)), want, "{what}");
        assert_eq!(kind(checkpoint::verify(&dir)), want, "{what} (verify)");
    }

    // Data that passes the CRC but not the rules.
    let data: Vec<(&str, &str, DataEdit)> = vec![
        (
            "NaN priority",
            "priorities.npy",
            Box::new(|d| d[..8].copy_from_slice(&f64::NAN.to_le_bytes())),
        ),
        (
            "negative priority",
            "priorities.npy",
            Box::new(|d| d[8..16].copy_from_slice(&(-1.0f64).to_le_bytes())),
        ),
        (
            "infinite priority",
            "priorities.npy",
            Box::new(|d| d[..8].copy_from_slice(&f64::INFINITY.to_le_bytes())),
        ),
        (
            "generation of another slot",
            "generations.npy",
            Box::new(|d| d[..8].copy_from_slice(&1u64.to_le_bytes())),
        ),
        (
            "empty slot with a priority",
            "priorities.npy",
            Box::new(|d| {
                // Slot 39 is empty after `fill` (a clear, then 21 inserts).
                d[39 * 8..40 * 8].copy_from_slice(&1.0f64.to_le_bytes())
            }),
        ),
        ("bool 2", "col.done.npy", Box::new(|d| d[3] = 2)),
        (
            "a raw priority whose power is not the stored one",
            "raw_priorities.npy",
            // Slot 5 holds the oldest item (21 inserts after a clear at 125).
            Box::new(|d| d[5 * 8..6 * 8].copy_from_slice(&1234.5f64.to_le_bytes())),
        ),
        (
            "empty slot with a raw priority",
            "raw_priorities.npy",
            Box::new(|d| d[..8].copy_from_slice(&1234.5f64.to_le_bytes())),
        ),
        (
            "NaN raw priority",
            "raw_priorities.npy",
            Box::new(|d| d[..8].copy_from_slice(&f64::NAN.to_le_bytes())),
        ),
    ];
    for (what, name, edit) in data {
        let dir = fresh();
        edit_data(&dir, name, edit);
        assert_eq!(kind(load(&dir)), Invalid, "{what}");
    }

    // What the caller asked for.
    let dir = fresh();
    let other = Schema::new().column("obs", DType::F32, 3);
    let opts = LoadOptions {
        schema: Some(other),
        capacity: None,
    };
    assert_eq!(kind(SplitLockBuffer::load_with(&dir, &opts)), Mismatch);
    let opts = LoadOptions {
        schema: Some(schema()),
        capacity: Some(41),
    };
    assert_eq!(kind(ReplayBuffer::load_with(&dir, &opts)), Mismatch);
    let opts = LoadOptions {
        schema: Some(schema()),
        capacity: Some(40),
    };
    assert!(ReplayBuffer::load_with(&dir, &opts).is_ok());

    // Paths that are no checkpoint.
    let file = tmp.0.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    assert_eq!(kind(load(&file)), NotFound);
    assert_eq!(kind(load(&tmp.0.join("missing"))), NotFound);
    let b = ReplayBuffer::new(config(4, DefaultPriority::RunningMax)).unwrap();
    assert_eq!(kind(b.save(file.join("sub"))), Io);
}

#[test]
fn verify_reports_what_the_checkpoint_holds() {
    let tmp = TempDir::new("verify");
    let b = LockFreeBuffer::new(config(40, DefaultPriority::RunningMax)).unwrap();
    fill(&b, 4);
    let dir = tmp.0.join("v");
    b.save(&dir).unwrap();
    let r = checkpoint::verify(&dir).unwrap();
    assert_eq!((r.len, r.inserted), (b.len(), b.inserted()));
    assert_eq!(r.cursor as u64, b.inserted() % 40);
    assert_eq!(r.total.to_bits(), b.total_priority().to_bits());
    assert_eq!(r.config.schema(), &schema());
    // priorities, generations, raw priorities, three columns, manifest.
    assert_eq!(r.files.len(), 7);
    assert!(dir.join("raw_priorities.npy").exists());
    let positive = (0..40).filter(|&i| b.priority(i).unwrap() > 0.0).count();
    assert_eq!(r.positive, positive);
    let generations = std::fs::read(dir.join("generations.npy")).unwrap();
    let header = 10 + u16::from_le_bytes([generations[8], generations[9]]) as usize;
    let empty = generations[header..]
        .chunks_exact(8)
        .filter(|g| u64::from_le_bytes((*g).try_into().unwrap()) == NO_ITEM)
        .count();
    assert_eq!(empty, 40 - b.len());
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, .. ProptestConfig::default() })]

        /// Any mutation of a valid checkpoint's files is a typed error (or, when it changed
        /// nothing, a successful load): never a panic, never a wrong buffer.
        #[test]
        fn mutated_checkpoints_never_load_wrong(
            file in 0usize..7,
            op in 0u8..4,
            at in any::<prop::sample::Index>(),
            value in any::<u8>(),
        ) {
            let tmp = TempDir::new("fuzz");
            let good = saved_dir(&tmp);
            let names = ["COMMIT", "manifest.json", "priorities.npy", "generations.npy",
                "col.obs.npy", "col.action.npy", "col.done.npy"];
            let path = good.join(names[file]);
            let original = std::fs::read(&path).unwrap();
            let mut bytes = original.clone();
            let i = at.index(bytes.len().max(1));
            match op {
                0 => bytes[i] = value,
                1 => bytes.truncate(i),
                2 => bytes.insert(i, value),
                _ => bytes[i] ^= 1 << (value % 8),
            }
            std::fs::write(&path, &bytes).unwrap();
            match LockFreeBuffer::load(&good) {
                Ok(_) => prop_assert_eq!(bytes, original),
                Err(Error::Checkpoint { .. }) => {}
                Err(e) => prop_assert!(false, "not a checkpoint error: {}", e),
            }
        }
    }
}

/// The crash test's child: saves numbered checkpoints in a loop until it is killed. Runs
/// only when the crash test starts it (the environment variable names the directory).
#[test]
fn crash_child() {
    let Ok(parent) = std::env::var("KARY_CKPT_CRASH_DIR") else {
        return;
    };
    let b = SplitLockBuffer::new(
        Config::builder(1 << 14, Schema::new().column("obs", DType::F32, 16))
            .build()
            .unwrap(),
    )
    .unwrap();
    let start = checkpoint::latest(&parent)
        .unwrap()
        .and_then(|d| {
            d.file_name()?
                .to_str()?
                .strip_prefix("ckpt-")?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    let obs = vec![0.25f32; 16 * 64];
    for step in start + 1.. {
        b.insert_batch(&[(&obs).into()], None).unwrap();
        let options = SaveOptions::new()
            .user("step", UserValue::U64(step))
            .keep_last(3);
        b.save_with(&checkpoint::numbered(&parent, step), &options)
            .unwrap();
    }
}

/// A child process that saves in a loop is killed with SIGKILL at random moments, 200
/// times: the newest committed checkpoint always verifies and loads, and nothing partial is
/// ever taken for a checkpoint.
#[cfg(unix)]
#[test]
fn a_save_killed_at_any_moment_leaves_the_last_committed_checkpoint() {
    use std::process::{Command, Stdio};
    let tmp = TempDir::new("crash");
    let exe = std::env::current_exe().unwrap();
    let mut rng = SmallRng::seed_from_u64(17);
    let mut saw = 0;
    let mut last_step = 0u64;
    let rounds = scale::scaled(200, 10);
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env("KARY_CKPT_CRASH_DIR", &tmp.0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // A kill at a random moment of the loop (the timing of a fault, not synchronization).
        std::thread::sleep(std::time::Duration::from_micros(
            rng.random_range(0..40_000),
        ));
        child.kill().unwrap();
        child.wait().unwrap();
        if let Some(dir) = checkpoint::latest(&tmp.0).unwrap() {
            saw += 1;
            let report = checkpoint::verify(&dir)
                .unwrap_or_else(|e| panic!("round {round}: the latest checkpoint fails: {e}"));
            let step = match report.user["step"] {
                UserValue::U64(s) => s,
                ref other => panic!("{other:?}"),
            };
            assert!(
                step >= last_step,
                "round {round}: went back from {last_step} to {step}"
            );
            last_step = step;
            let loaded = SplitLockBuffer::load(&dir).unwrap();
            assert_eq!(loaded.len(), report.len);
            assert!(loaded.consistency().exact);
        }
        // Whatever is numbered but uncommitted is never what `latest` returns.
        for e in std::fs::read_dir(&tmp.0).unwrap() {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("ckpt-") && checkpoint::verify(&path).is_err() {
                assert_ne!(Some(path.clone()), checkpoint::latest(&tmp.0).unwrap());
            }
        }
        if round % 50 == 49 {
            checkpoint::clean(&tmp.0).unwrap();
        }
    }
    assert!(
        saw > rounds / 2,
        "only {saw} of {rounds} rounds found a committed checkpoint"
    );
}

/// The command-line tool: 0 for a good checkpoint, 1 for a bad one, 2 for a usage error.
#[test]
fn the_command_line_tool_verifies_and_inspects() {
    use std::process::Command;
    let tmp = TempDir::new("cli");
    let good = saved_dir(&tmp);
    let tool = env!("CARGO_BIN_EXE_kary-replay-ckpt");
    let run = |args: &[&str]| {
        let out = Command::new(tool).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let g = good.to_str().unwrap();
    let (code, out, _) = run(&["verify", g]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("ok: "), "{out}");
    let (code, out, _) = run(&["inspect", g]);
    assert_eq!(code, Some(0));
    for needle in [
        "capacity 40",
        "obs",
        "F32 [3]",
        "priorities (stored)",
        "col.done.npy",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
    std::fs::write(good.join("COMMIT"), b"x").unwrap();
    let (code, _, err) = run(&["verify", g]);
    assert_eq!(code, Some(1));
    assert!(err.contains("not committed"), "{err}");
    assert_eq!(run(&["inspect", "/nonexistent/kr"]).0, Some(1));
    assert_eq!(run(&["latest", tmp.0.to_str().unwrap()]).0, Some(1));
    assert_eq!(run(&["frobnicate", g]).0, Some(2));
    assert_eq!(run(&[]).0, Some(2));
}

/// The numpy reader of docs/checkpoint.md, run on a checkpoint of every dtype when
/// `KARY_NUMPY_PYTHON` names a Python with numpy (the test command sets it).
#[test]
fn the_documented_numpy_reader_reads_a_checkpoint() {
    let Ok(python) = std::env::var("KARY_NUMPY_PYTHON") else {
        eprintln!("KARY_NUMPY_PYTHON not set: the numpy reader is not run");
        return;
    };
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/checkpoint.md"))
        .unwrap();
    let block = doc
        .split("<!-- numpy-reader:begin -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- numpy-reader:end -->").next())
        .expect("the reader's markers");
    let code: String = block
        .lines()
        .filter(|l| !l.starts_with("```"))
        .map(|l| format!("{l}\n"))
        .collect();
    let tmp = TempDir::new("numpy");
    let script = tmp.0.join("reader.py");
    std::fs::write(&script, code).unwrap();
    let schema = Schema::new()
        .column("u", DType::U8, 2)
        .column("i", DType::I32, [])
        .column("l", DType::I64, [3, 1])
        .column("f", DType::F32, [2, 2])
        .column("d", DType::F64, 1)
        .column("b", DType::Bool, 1);
    let b = LockFreeBuffer::new(Config::builder(100, schema).build().unwrap()).unwrap();
    for k in 0..130u8 {
        b.insert(
            &[
                (&[k, k][..]).into(),
                (&[k as i32][..]).into(),
                (&[k as i64; 3][..]).into(),
                (&[k as f32; 4][..]).into(),
                (&[k as f64][..]).into(),
                (&[k % 2 == 0][..]).into(),
            ],
            Some(0.5 + k as f64),
        )
        .unwrap();
    }
    let dir = tmp.0.join("ckpt");
    b.save(&dir).unwrap();
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut fields = text.splitn(4, ' ');
    let len: usize = fields.next().unwrap().parse().unwrap();
    let held: usize = fields.next().unwrap().parse().unwrap();
    let total: f64 = fields.next().unwrap().parse().unwrap();
    let shapes = fields.next().unwrap().trim();
    assert_eq!((len, held), (100, 100));
    assert!(
        (total - b.total_priority()).abs() <= 1e-12 * total,
        "{total}"
    );
    assert_eq!(
        shapes,
        "{'u': (100, 2), 'i': (100,), 'l': (100, 3, 1), 'f': (100, 2, 2), 'd': (100, 1), 'b': (100, 1)}"
    );
}
