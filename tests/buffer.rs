//! Buffer behaviour: every rejected input leaves the buffer exactly as it was, and the
//! pitfall cases of the issue (alpha, beta, duplicate and stale keys, tiny capacities,
//! extreme priority ranges, default priorities, FIFO eviction, clear).

use kary_replay::{
    ColumnData, Config, DType, DefaultPriority, Error, Key, ReplayBuffer, SampleBatch, SampleMode,
    Schema,
};
use rand::{rngs::SmallRng, SeedableRng};

fn schema() -> Schema {
    Schema::new()
        .column("obs", DType::F32, 2)
        .column("done", DType::Bool, 1)
}

fn buffer(capacity: usize, alpha: f64) -> ReplayBuffer {
    ReplayBuffer::new(
        Config::builder(capacity, schema())
            .fanout(4)
            .alpha(alpha)
            .build()
            .unwrap(),
    )
    .unwrap()
}

fn item(v: f32) -> (Vec<f32>, Vec<bool>) {
    (vec![v, v], vec![v as i32 % 2 == 0])
}

fn insert(b: &mut ReplayBuffer, v: f32, p: Option<f64>) -> Key {
    let (o, d) = item(v);
    b.insert(&[(&o).into(), (&d).into()], p).unwrap()
}

/// Inserts without a priority and returns the priority the item got.
fn default_of(b: &mut ReplayBuffer, v: f32) -> f64 {
    let k = insert(b, v, None);
    b.priority(k.index).unwrap()
}

/// Everything observable about a buffer.
#[derive(Debug, PartialEq)]
struct Snapshot {
    len: usize,
    inserted: u64,
    total: f64,
    priorities: Vec<f64>,
    keys: Vec<Option<Key>>,
    columns: Vec<ColumnData>,
    next_default: f64,
}

fn snapshot(b: &ReplayBuffer) -> Snapshot {
    let cap = b.capacity();
    // The default priority is observable through the next insert: probe it on a clone.
    let next_default = default_of(&mut b.clone(), 99.0);
    Snapshot {
        len: b.len(),
        inserted: b.inserted(),
        total: b.total_priority(),
        priorities: (0..cap).map(|i| b.priority(i).unwrap()).collect(),
        keys: (0..cap).map(|i| b.key(i).unwrap()).collect(),
        columns: (0..2).map(|c| b.storage().column(c).clone()).collect(),
        next_default,
    }
}

#[test]
fn rejected_calls_change_nothing() {
    // alpha 2: 1e300 overflows once squared, so it is rejected too.
    let mut b = buffer(5, 2.0);
    let keys: Vec<Key> = (0..7)
        .map(|i| insert(&mut b, i as f32, Some(1.0 + i as f64)))
        .collect();
    let before = snapshot(&b);
    let (o, d) = item(1.0);
    let bad_priorities = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 1e300];
    for p in bad_priorities {
        assert!(matches!(
            b.insert(&[(&o).into(), (&d).into()], Some(p)),
            Err(Error::InvalidPriority { .. })
        ));
        let err = b.insert_batch(
            &[(&[1.0f32, 1.0, 2.0, 2.0]).into(), (&[true, false]).into()],
            Some(&[1.0, p]),
        );
        assert!(
            matches!(err, Err(Error::InvalidPriority { position: 1, .. })),
            "{err:?}"
        );
        let err = b.update_priorities(&keys[3..5], &[2.0, p]);
        assert!(
            matches!(err, Err(Error::InvalidPriority { position: 1, .. })),
            "{err:?}"
        );
    }
    // Wrong column count, dtype, length; priorities of the wrong length.
    assert!(matches!(
        b.insert(&[(&o).into()], None),
        Err(Error::ColumnCount { .. })
    ));
    assert!(matches!(
        b.insert(&[(&[1i32, 2]).into(), (&d).into()], None),
        Err(Error::ColumnType { .. })
    ));
    assert!(matches!(
        b.insert(&[(&[1.0f32]).into(), (&d).into()], None),
        Err(Error::ColumnLength { .. })
    ));
    assert!(matches!(
        b.insert(&[(&[1.0f32; 4]).into(), (&[true; 2]).into()], None),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        b.insert_batch(&[(&[1.0f32; 4]).into(), (&[true; 2]).into()], Some(&[1.0])),
        Err(Error::LengthMismatch { .. })
    ));
    // Keys: length mismatch, out of range, forged generations.
    assert!(matches!(
        b.update_priorities(&keys[..2], &[1.0]),
        Err(Error::LengthMismatch { .. })
    ));
    let out_of_range = Key {
        index: 5,
        generation: 5,
    };
    assert!(matches!(
        b.update_priorities(&[keys[6], out_of_range], &[1.0, 1.0]),
        Err(Error::OutOfRange { .. })
    ));
    // With the buffer's tag: a generation of another slot, one not handed out yet; then the
    // key of a current item with another buffer's tag, with no tag, and a word past 2^63.
    let tag = keys[6].tag() as u16;
    let forged = [
        Key::new(tag, 1, 2),
        Key::new(tag, 2, 7),
        Key::new(tag % Key::MAX_TAG + 1, keys[6].index, keys[6].insertion()),
        Key::new(0, keys[6].index, keys[6].insertion()),
        Key {
            index: 0,
            generation: u64::MAX - 5,
        },
    ];
    for f in forged {
        assert!(
            matches!(
                b.update_priorities(&[keys[6], f], &[1.0, 1.0]),
                Err(Error::InvalidKey { .. })
            ),
            "{f:?}"
        );
    }
    assert!(b.priority(5).is_err() && b.key(5).is_err());
    // Bad sampling parameters leave the output untouched as well.
    let mut rng = SmallRng::seed_from_u64(1);
    let mut out = SampleBatch::default();
    assert_eq!(
        b.sample_into(0, 0.4, SampleMode::Stratified, &mut rng, &mut out),
        Err(Error::ZeroBatch)
    );
    for beta in [f64::NAN, -0.1, f64::INFINITY] {
        assert!(matches!(
            b.sample(4, beta, SampleMode::Stratified, &mut rng),
            Err(Error::InvalidParameter { name: "beta", .. })
        ));
    }
    assert_eq!(out, SampleBatch::default());
    assert_eq!(snapshot(&b), before);
}

#[test]
fn invalid_configs_are_rejected() {
    let s = schema;
    assert_eq!(
        Config::builder(0, s()).build().unwrap_err(),
        Error::InvalidCapacity(0)
    );
    assert_eq!(
        Config::builder(8, s()).fanout(3).build().unwrap_err(),
        Error::UnsupportedFanout(3)
    );
    assert_eq!(
        Config::builder(8, s()).fanout(128).build().unwrap_err(),
        Error::UnsupportedFanout(128)
    );
    for a in [f64::NAN, -0.5, f64::INFINITY] {
        assert!(matches!(
            Config::builder(8, s()).alpha(a).build(),
            Err(Error::InvalidParameter { name: "alpha", .. })
        ));
    }
    for p in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            Config::builder(8, s()).initial_priority(p).build(),
            Err(Error::InvalidParameter {
                name: "initial_priority",
                ..
            })
        ));
    }
    assert!(matches!(
        Config::builder(8, Schema::new()).build(),
        Err(Error::InvalidSchema(_))
    ));
    // Too large to allocate: an error, not an abort.
    let wide = Schema::new().column("x", DType::F64, 1 << 40);
    let config = Config::builder(1 << 20, wide).build().unwrap();
    assert!(matches!(
        ReplayBuffer::new(config),
        Err(Error::Allocation { .. })
    ));
}

#[test]
fn empty_and_all_zero_buffers_cannot_be_sampled() {
    let mut b = buffer(4, 1.0);
    let mut rng = SmallRng::seed_from_u64(1);
    assert_eq!(
        b.sample(1, 0.4, SampleMode::Independent, &mut rng),
        Err(Error::Empty)
    );
    insert(&mut b, 1.0, Some(0.0));
    assert_eq!(
        b.sample(1, 0.4, SampleMode::Independent, &mut rng),
        Err(Error::ZeroTotalPriority)
    );
}

#[test]
fn alpha_is_applied_and_zero_stays_zero() {
    for alpha in [0.0, 0.6, 1.0, 2.0] {
        let mut b = buffer(8, alpha);
        let k0 = insert(&mut b, 0.0, Some(0.0));
        let k1 = insert(&mut b, 1.0, Some(4.0));
        assert_eq!(b.priority(k0.index).unwrap(), 0.0, "alpha={alpha}");
        assert_eq!(b.priority(k1.index).unwrap(), 4f64.powf(alpha));
        b.update_priorities(&[k1], &[9.0]).unwrap();
        assert_eq!(b.priority(k1.index).unwrap(), 9f64.powf(alpha));
        // alpha = 0: every positive item weighs the same, zero ones are never drawn.
        let mut rng = SmallRng::seed_from_u64(2);
        let s = b
            .sample(64, 1.0, SampleMode::Independent, &mut rng)
            .unwrap();
        assert!(s.indices.iter().all(|&i| i == k1.index));
    }
}

#[test]
fn beta_zero_gives_unit_weights_and_beta_one_inverse_probabilities() {
    let mut b = buffer(16, 1.0);
    for i in 0..16 {
        insert(&mut b, i as f32, Some(1.0 + i as f64));
    }
    let mut rng = SmallRng::seed_from_u64(3);
    let s = b.sample(32, 0.0, SampleMode::Stratified, &mut rng).unwrap();
    assert!(s.weights.iter().all(|&w| w == 1.0));
    let s = b.sample(32, 1.0, SampleMode::Stratified, &mut rng).unwrap();
    let n = b.len() as f64;
    let max_w = 1.0 / (n * 1.0 / b.total_priority()); // from the smallest priority, 1
    for (w, p) in s.weights.iter().zip(&s.probabilities) {
        let expected = (1.0 / (n * p)) / max_w;
        assert!(
            (w - expected).abs() <= 1e-12 * expected,
            "{w} vs {expected}"
        );
    }
}

#[test]
fn duplicate_keys_last_wins_and_stale_keys_are_dropped() {
    let mut b = buffer(3, 1.0);
    let k: Vec<Key> = (0..3)
        .map(|i| insert(&mut b, i as f32, Some(1.0)))
        .collect();
    let r = b
        .update_priorities(&[k[1], k[2], k[1], k[1]], &[5.0, 6.0, 7.0, 8.0])
        .unwrap();
    assert_eq!((r.applied, r.stale), (4, 0));
    assert_eq!(b.priority(1).unwrap(), 8.0);
    // Overwrite slot 0 and 1 (FIFO), then update through the old keys.
    let k3 = insert(&mut b, 3.0, Some(2.0));
    let k4 = insert(&mut b, 4.0, Some(2.0));
    assert_eq!((k3.index, k4.index), (0, 1));
    let r = b
        .update_priorities(&[k[0], k[1], k[2], k3], &[50.0, 50.0, 60.0, 30.0])
        .unwrap();
    assert_eq!((r.applied, r.stale), (2, 2));
    assert_eq!(b.priority(0).unwrap(), 30.0);
    assert_eq!(b.priority(1).unwrap(), 2.0);
    assert_eq!(b.priority(2).unwrap(), 60.0);
}

#[test]
fn tiny_capacities_wrap_in_fifo_order() {
    for cap in [1, 2] {
        let mut b = buffer(cap, 1.0);
        let mut keys = Vec::new();
        for i in 0..5 {
            keys.push(insert(&mut b, i as f32, Some(1.0 + i as f64)));
            assert_eq!(b.len(), (i + 1).min(cap));
        }
        for (g, k) in keys.iter().enumerate() {
            assert_eq!(k.insertion(), g as u64);
            assert_eq!(k.index, g % cap);
        }
        // The newest `cap` items are present, in their slots.
        for k in &keys[5 - cap..] {
            assert_eq!(b.key(k.index).unwrap(), Some(*k));
        }
        let mut rng = SmallRng::seed_from_u64(4);
        let s = b.sample(10, 0.5, SampleMode::Stratified, &mut rng).unwrap();
        let obs = s.columns[0].as_f32().unwrap();
        for (j, key) in s.keys.iter().enumerate() {
            assert_eq!(
                obs[2 * j],
                key.insertion() as f32,
                "data belongs to the key's generation"
            );
        }
    }
}

#[test]
fn extreme_priority_ranges_sample_only_positive_items() {
    let mut b = buffer(64, 1.0);
    for i in 0..64 {
        let p = match i % 3 {
            0 => 1e-8,
            1 => 1e8,
            _ => 0.0,
        };
        insert(&mut b, i as f32, Some(p));
    }
    let mut rng = SmallRng::seed_from_u64(5);
    for mode in [SampleMode::Independent, SampleMode::Stratified] {
        let s = b.sample(4096, 1.0, mode, &mut rng).unwrap();
        assert!(s.indices.iter().all(|&i| i % 3 != 2));
        assert!(s.weights.iter().all(|&w| w > 0.0 && w <= 1.0));
    }
    // Drop the big ones: only the 1e-8 items remain samplable, despite the drift.
    let big: Vec<Key> = (0..64)
        .filter(|i| i % 3 == 1)
        .map(|i| b.key(i).unwrap().unwrap())
        .collect();
    b.update_priorities(&big, &vec![0.0; big.len()]).unwrap();
    let s = b
        .sample(1000, 1.0, SampleMode::Independent, &mut rng)
        .unwrap();
    assert!(s.indices.iter().all(|&i| i % 3 == 0));
}

#[test]
fn default_priorities_running_and_live_max() {
    let mut b = buffer(2, 1.0);
    assert_eq!(default_of(&mut b, 0.0), 1.0);
    insert(&mut b, 1.0, Some(7.0));
    let k = insert(&mut b, 2.0, None); // evicts the first item
    assert_eq!(b.priority(k.index).unwrap(), 7.0);
    // The running max does not fall when the 7 is lowered.
    let k7 = b.key(1).unwrap().unwrap();
    b.update_priorities(&[k7], &[0.5]).unwrap();
    assert_eq!(default_of(&mut b, 3.0), 7.0);

    let config = Config::builder(3, schema())
        .alpha(1.0)
        .default_priority(DefaultPriority::LiveMax)
        .initial_priority(2.0)
        .build()
        .unwrap();
    let mut b = ReplayBuffer::new(config).unwrap();
    assert_eq!(default_of(&mut b, 0.0), 2.0);
    let k = insert(&mut b, 1.0, Some(9.0));
    assert_eq!(default_of(&mut b, 2.0), 9.0);
    b.update_priorities(&[k], &[3.0]).unwrap();
    // Slot 0 (priority 2) is evicted: the live max is now 9 -> 3 from the update, and 9 at slot 2.
    assert_eq!(default_of(&mut b, 3.0), 9.0);
    b.clear();
    assert_eq!(default_of(&mut b, 4.0), 2.0);
}

#[test]
fn clear_empties_and_old_keys_stay_stale() {
    let mut b = buffer(4, 1.0);
    let old: Vec<Key> = (0..3)
        .map(|i| insert(&mut b, i as f32, Some(5.0)))
        .collect();
    b.clear();
    assert_eq!((b.len(), b.total_priority()), (0, 0.0));
    assert_eq!(b.key(0).unwrap(), None);
    let new = insert(&mut b, 9.0, Some(1.0));
    assert_eq!(new.insertion(), 3);
    let r = b.update_priorities(&old, &[2.0, 2.0, 2.0]).unwrap();
    assert_eq!((r.applied, r.stale), (0, 3));
    assert_eq!(b.total_priority(), 1.0);
}
