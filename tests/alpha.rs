//! Alpha at run time (`set_alpha`) on every flat buffer: the tree after a change equals, bit
//! for bit, the tree of a fresh buffer built with the new alpha over the same raw
//! priorities (the same calls made on it), default priorities included; raw priorities read
//! by key; checkpoints keep alpha and the raw priorities (`tests/checkpoint.rs` refuses a
//! corrupt one); bad alphas change nothing; a power past the bound is clamped; and writers,
//! updaters and samplers running through changes leave every stored priority the power of
//! its raw one.

#[cfg(all(unix, not(loom)))]
use kary_replay::ShmBuffer;
use kary_replay::{
    Checkpoint, ConcurrentBuffer, Config, DType, DefaultPriority, Error, GlobalLockBuffer, Key,
    Load, LockFreeBuffer, ReplayBuffer, SampleBatch, SampleMode, Schema, SplitLockBuffer,
    Xoshiro256,
};

fn config(alpha: f64, default: DefaultPriority) -> Config {
    Config::builder(64, Schema::new().column("x", DType::I64, []))
        .alpha(alpha)
        .fanout(4)
        .default_priority(default)
        .build()
        .unwrap()
}

/// The same calls on any buffer: 100 inserts into 64 slots (some without a priority),
/// updates (one of them stale), deletions. Returns the keys of the last 64 inserts.
fn history<B: ConcurrentBuffer>(buffer: &B) -> Vec<Key> {
    let mut keys = Vec::new();
    for chunk in 0..10i64 {
        let items: Vec<i64> = (chunk * 10..chunk * 10 + 10).collect();
        let priorities: Vec<f64> = items
            .iter()
            .map(|&i| 0.3 + (i % 17) as f64 * 0.71)
            .collect();
        let given = (chunk % 3 != 1).then_some(&priorities[..]);
        keys.extend(buffer.insert_batch(&[(&items[..]).into()], given).unwrap());
    }
    let updates: Vec<Key> = keys[30..50].to_vec();
    let values: Vec<f64> = (0..20).map(|i| 1.0 + i as f64 * 3.3).collect();
    buffer.update_priorities(&updates, &values).unwrap();
    buffer.delete(&keys[60..63]).unwrap();
    keys.split_off(36)
}

/// Every stored priority, the total and a seeded sample (its slots and insertion numbers:
/// each buffer draws its own key tag), as bits.
type Fingerprint = (Vec<u64>, u64, Vec<(usize, u64)>, Vec<u64>);

fn fingerprint<B: ConcurrentBuffer>(buffer: &B) -> Fingerprint {
    let priorities = (0..64)
        .map(|i| buffer.priority(i).unwrap().to_bits())
        .collect();
    let mut out = SampleBatch::default();
    let mut rng = Xoshiro256::new(9);
    buffer
        .sample_into(32, 0.4, SampleMode::Stratified, &mut rng, &mut out)
        .unwrap();
    let weights = out.weights.iter().map(|w| w.to_bits()).collect();
    let keys = out.keys.iter().map(|k| (k.index, k.insertion())).collect();
    (priorities, buffer.total_priority().to_bits(), keys, weights)
}

fn equals_a_fresh_build<B: ConcurrentBuffer>(name: &str, default: DefaultPriority) {
    let changed = B::new(config(0.6, default)).unwrap();
    let keys = history(&changed);
    let before = fingerprint(&changed);
    let mut raw = Vec::new();
    changed.raw_priorities_of(&keys, &mut raw).unwrap();
    changed.set_alpha(0.3).unwrap();
    assert_eq!(changed.alpha(), 0.3, "{name}");
    // A fresh buffer built with the new alpha over the same raw priorities: the same
    // items, each given the raw priority the first buffer kept, the same deletions.
    let rebuilt = B::new(config(0.3, default)).unwrap();
    let items: Vec<i64> = (0..100).collect();
    let mut given = vec![1.0; 36];
    given.extend(raw.iter().map(|r| if r.is_nan() { 1.0 } else { *r }));
    let rebuilt_keys = rebuilt
        .insert_batch(&[(&items[..]).into()], Some(&given))
        .unwrap();
    rebuilt.delete(&rebuilt_keys[60..63]).unwrap();
    assert_eq!(
        fingerprint(&changed),
        fingerprint(&rebuilt),
        "{name}: after set_alpha, against a build over the raw priorities"
    );
    if default == DefaultPriority::LiveMax {
        return;
    }
    // Under RunningMax the same calls made on a fresh buffer give the same raw priorities
    // (and the same running maximum).
    let fresh = B::new(config(0.3, default)).unwrap();
    let fresh_keys = history(&fresh);
    assert_eq!(
        fingerprint(&changed),
        fingerprint(&fresh),
        "{name}: after set_alpha"
    );
    let mut raw_fresh = Vec::new();
    fresh
        .raw_priorities_of(&fresh_keys, &mut raw_fresh)
        .unwrap();
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&raw), bits(&raw_fresh), "{name}: raw priorities");
    // Deleted items stay out (NaN: stale), the rest are as given or stood for.
    assert!(raw[24..27].iter().all(|r| r.is_nan()), "{name}");
    // Key 0 holds x = 36, updated (x in 30..50 to 1 + 3.3 j); key 14 holds x = 50, as given.
    assert_eq!(raw[0], 1.0 + 6.0 * 3.3, "{name}");
    assert_eq!(raw[14], 0.3 + (50 % 17) as f64 * 0.71, "{name}");
    // A default priority after the change is the running maximum's power under it.
    let next = [500i64];
    changed.insert(&[(&next[..]).into()], None).unwrap();
    fresh.insert(&[(&next[..]).into()], None).unwrap();
    assert_eq!(
        fingerprint(&changed),
        fingerprint(&fresh),
        "{name}: a default insert"
    );
    // Back to the first alpha: the first buffer's tree again.
    let back = B::new(config(0.6, default)).unwrap();
    history(&back);
    changed.set_alpha(0.6).unwrap();
    back.insert(&[(&next[..]).into()], None).unwrap();
    assert_eq!(
        fingerprint(&changed),
        fingerprint(&back),
        "{name}: and back"
    );
    assert_ne!(
        before,
        fingerprint(&fresh),
        "{name}: the change changed nothing"
    );
    assert!(changed.consistency().exact, "{name}");
}

#[test]
fn a_changed_alpha_equals_a_fresh_build_on_every_flat_buffer() {
    for default in [DefaultPriority::RunningMax, DefaultPriority::LiveMax] {
        equals_a_fresh_build::<SplitLockBuffer>("SplitLockBuffer", default);
        equals_a_fresh_build::<LockFreeBuffer>("LockFreeBuffer", default);
        equals_a_fresh_build::<GlobalLockBuffer>("GlobalLockBuffer", default);
        #[cfg(all(unix, not(loom)))]
        equals_a_fresh_build::<ShmBuffer>("ShmBuffer", default);
    }
    // The sequential buffer, through its own methods.
    let mut changed = ReplayBuffer::new(config(0.6, DefaultPriority::RunningMax)).unwrap();
    let mut fresh = ReplayBuffer::new(config(0.3, DefaultPriority::RunningMax)).unwrap();
    for b in [&mut changed, &mut fresh] {
        let items: Vec<i64> = (0..80).collect();
        let ps: Vec<f64> = (0..80).map(|i| 0.5 + (i % 13) as f64).collect();
        let keys = b.insert_batch(&[(&items[..]).into()], Some(&ps)).unwrap();
        b.insert(&[(&[80i64][..]).into()], None).unwrap();
        b.update_priorities(&keys[20..30], &[7.5; 10]).unwrap();
    }
    changed.set_alpha(0.3).unwrap();
    let bits = |b: &ReplayBuffer| -> Vec<u64> {
        (0..64).map(|i| b.priority(i).unwrap().to_bits()).collect()
    };
    assert_eq!(bits(&changed), bits(&fresh));
    assert_eq!(
        changed.total_priority().to_bits(),
        fresh.total_priority().to_bits()
    );
    assert_eq!(changed.alpha(), 0.3);
}

fn refuses_bad_alphas<B: ConcurrentBuffer>(name: &str) {
    let buffer = B::new(config(0.6, DefaultPriority::RunningMax)).unwrap();
    history(&buffer);
    let before = fingerprint(&buffer);
    for bad in [f64::NAN, -0.5, f64::INFINITY] {
        let err = buffer.set_alpha(bad).unwrap_err();
        assert!(
            matches!(err, Error::InvalidParameter { name: "alpha", .. }),
            "{name}: {err:?}"
        );
    }
    assert_eq!(buffer.alpha(), 0.6, "{name}");
    assert_eq!(fingerprint(&buffer), before, "{name}");
    // Alpha 0: every positive item equally likely.
    buffer.set_alpha(0.0).unwrap();
    let positive = (0..64)
        .filter(|&i| buffer.priority(i).unwrap() > 0.0)
        .count();
    assert_eq!(buffer.total_priority(), positive as f64, "{name}");
}

#[test]
fn bad_alphas_are_refused_and_change_nothing() {
    refuses_bad_alphas::<SplitLockBuffer>("SplitLockBuffer");
    refuses_bad_alphas::<LockFreeBuffer>("LockFreeBuffer");
    refuses_bad_alphas::<GlobalLockBuffer>("GlobalLockBuffer");
}

/// Priorities are checked against the configuration's alpha; a larger alpha set later
/// stores a power past the bound as the bound.
#[test]
fn a_power_past_the_bound_is_clamped() {
    let buffer = LockFreeBuffer::new(config(0.5, DefaultPriority::RunningMax)).unwrap();
    let key = buffer.insert(&[(&[1i64][..]).into()], Some(1e300)).unwrap();
    assert_eq!(buffer.priority(key.index).unwrap(), 1e150);
    buffer.set_alpha(1.0).unwrap();
    assert_eq!(
        buffer.priority(key.index).unwrap(),
        kary_replay::MAX_PRIORITY
    );
    assert!(buffer.total_priority().is_finite());
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp(name: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("kary-alpha-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    TempDir(dir)
}

fn checkpoints_keep<B: ConcurrentBuffer + Checkpoint + Load>(name: &str) {
    let tmp = temp(name);
    let buffer = B::new(config(0.6, DefaultPriority::RunningMax)).unwrap();
    let keys = history(&buffer);
    buffer.set_alpha(0.3).unwrap();
    let dir = tmp.0.join("ckpt");
    buffer.save(&dir).unwrap();
    let loaded = B::load(&dir).unwrap();
    assert_eq!(loaded.alpha(), 0.3, "{name}");
    assert_eq!(fingerprint(&loaded), fingerprint(&buffer), "{name}");
    let (mut a, mut b) = (Vec::new(), Vec::new());
    buffer.raw_priorities_of(&keys, &mut a).unwrap();
    loaded.raw_priorities_of(&keys, &mut b).unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"), "{name}");
    // Back to 0.6 on both: still equal (the raw priorities came through whole).
    buffer.set_alpha(0.6).unwrap();
    loaded.set_alpha(0.6).unwrap();
    assert_eq!(fingerprint(&loaded), fingerprint(&buffer), "{name}");
}

#[test]
fn checkpoints_keep_alpha_and_the_raw_priorities() {
    checkpoints_keep::<SplitLockBuffer>("split");
    checkpoints_keep::<LockFreeBuffer>("lockfree");
    checkpoints_keep::<GlobalLockBuffer>("global");
}

/// Two writer threads, two updaters of the same keys and a sampler run while the main
/// thread changes alpha 20 times: at the end every stored item's priority is its raw
/// priority's power under the last alpha, bit for bit, and the tree is exact.
fn under_threads<B: ConcurrentBuffer + Sync>(name: &str) {
    let buffer = B::new(config(0.6, DefaultPriority::RunningMax)).unwrap();
    let keys = history(&buffer);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..2i64 {
            let (buffer, stop) = (&buffer, &stop);
            s.spawn(move || {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let p = (i % 7 + 1) as f64 * 0.5;
                    let given = (i % 3 != 0).then_some(p);
                    buffer
                        .insert(&[(&[1000 * t + i][..]).into()], given)
                        .unwrap();
                    i += 1;
                }
            });
        }
        for t in 0..2 {
            let (buffer, stop, keys) = (&buffer, &stop, &keys);
            s.spawn(move || {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let p = vec![1.0 + (i + t) as f64; keys.len()];
                    buffer.update_priorities(keys, &p).unwrap();
                    i += 1;
                }
            });
        }
        let (buffer, stop) = (&buffer, &stop);
        s.spawn(move || {
            let mut rng = Xoshiro256::new(3);
            let mut out = SampleBatch::default();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match buffer.sample_into(16, 0.4, SampleMode::Stratified, &mut rng, &mut out) {
                    Ok(()) | Err(Error::Contention { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        });
        for round in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(2));
            buffer.set_alpha([0.2, 0.7, 1.0, 0.45][round % 4]).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let alpha = buffer.alpha();
    for slot in 0..64 {
        let Some(key) = buffer.key(slot).unwrap() else {
            continue;
        };
        let mut raw = Vec::new();
        buffer.raw_priorities_of(&[key], &mut raw).unwrap();
        let expected = if alpha == 1.0 {
            raw[0]
        } else {
            raw[0].powf(alpha)
        };
        assert_eq!(
            buffer.priority(slot).unwrap().to_bits(),
            expected.to_bits(),
            "{name}: slot {slot}, raw {}",
            raw[0]
        );
    }
    assert!(buffer.consistency().exact, "{name}");
}

#[test]
fn writers_updaters_and_samplers_run_through_changes_of_alpha() {
    under_threads::<SplitLockBuffer>("SplitLockBuffer");
    under_threads::<LockFreeBuffer>("LockFreeBuffer");
    under_threads::<GlobalLockBuffer>("GlobalLockBuffer");
}
