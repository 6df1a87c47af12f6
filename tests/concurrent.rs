//! The three concurrent buffers against the sequential one, single-threaded: the same
//! random operation sequences must give the same keys, reports, samples (indices, keys,
//! priorities, weights, columns), totals and errors. Priorities are small integers with
//! alpha 1, so every sum is exact and the descents must agree exactly.
//!
//! Also: the error paths change nothing, and the API is `Send + Sync`.

use kary_replay::{
    ColumnData, ConcurrentBuffer, Config, DType, DefaultPriority, Error, GlobalLockBuffer,
    GlobalSpinLockBuffer, Key, LockFreeBuffer, ReplayBuffer, SampleMode, Schema, SplitLockBuffer,
    WeightNormalization,
};
use proptest::prelude::*;
use rand::{rngs::SmallRng, SeedableRng};

#[derive(Debug, Clone)]
enum Op {
    Insert(Option<u8>),
    InsertBatch(Vec<Option<u8>>),
    Update(Vec<(usize, u8)>),
    Sample {
        batch: usize,
        seed: u64,
        stratified: bool,
    },
    Read(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::option::weighted(0.8, 0u8..=20).prop_map(Op::Insert),
        2 => proptest::collection::vec(proptest::option::weighted(0.8, 0u8..=20), 0..12)
            .prop_map(|ps| Op::InsertBatch(if ps.iter().all(Option::is_some) { ps } else {
                ps.into_iter().map(|_| None).collect()
            })),
        3 => proptest::collection::vec((any::<usize>(), 0u8..=20), 1..10).prop_map(Op::Update),
        2 => (1usize..20, any::<u64>(), any::<bool>())
            .prop_map(|(batch, seed, stratified)| Op::Sample { batch, seed, stratified }),
        1 => any::<usize>().prop_map(Op::Read),
    ]
}

fn schema() -> Schema {
    Schema::new()
        .column("obs", DType::F32, 3)
        .column("action", DType::I64, 1)
        .column("done", DType::Bool, 1)
}

fn item(n: u64) -> (Vec<f32>, Vec<i64>, Vec<bool>) {
    (
        vec![n as f32, n as f32 + 0.5, -(n as f32)],
        vec![n as i64 * 3],
        vec![n % 2 == 0],
    )
}

fn run<B: ConcurrentBuffer>(config: Config, ops: &[Op]) -> std::result::Result<(), TestCaseError> {
    let mut reference = ReplayBuffer::new(config.clone()).unwrap();
    let buffer = B::new(config.clone()).unwrap();
    let mut issued: Vec<Key> = Vec::new();
    let mut next = 0u64;
    for op in ops {
        match op {
            Op::Insert(p) => {
                let (o, a, d) = item(next);
                next += 1;
                let cols = [(&o).into(), (&a).into(), (&d).into()];
                let p = p.map(f64::from);
                let want = reference.insert(&cols, p).unwrap();
                prop_assert_eq!(buffer.insert(&cols, p).unwrap(), want);
                issued.push(want);
            }
            Op::InsertBatch(ps) => {
                let (mut o, mut a, mut d) = (vec![], vec![], vec![]);
                for _ in ps {
                    let (x, y, z) = item(next);
                    next += 1;
                    o.extend(x);
                    a.extend(y);
                    d.extend(z);
                }
                let cols = [(&o).into(), (&a).into(), (&d).into()];
                let ps: Option<Vec<f64>> = ps.iter().map(|p| p.map(f64::from)).collect();
                let want = reference.insert_batch(&cols, ps.as_deref()).unwrap();
                prop_assert_eq!(&buffer.insert_batch(&cols, ps.as_deref()).unwrap(), &want);
                issued.extend(want);
            }
            Op::Update(entries) => {
                if issued.is_empty() {
                    continue;
                }
                let keys: Vec<Key> = entries
                    .iter()
                    .map(|(k, _)| issued[k % issued.len()])
                    .collect();
                let ps: Vec<f64> = entries.iter().map(|(_, p)| f64::from(*p)).collect();
                let want = reference.update_priorities(&keys, &ps).unwrap();
                prop_assert_eq!(buffer.update_priorities(&keys, &ps).unwrap(), want);
            }
            Op::Sample {
                batch,
                seed,
                stratified,
            } => {
                let mode = if *stratified {
                    SampleMode::Stratified
                } else {
                    SampleMode::Independent
                };
                let want = reference.sample(*batch, 0.7, mode, &mut SmallRng::seed_from_u64(*seed));
                let got = buffer.sample(*batch, 0.7, mode, &mut SmallRng::seed_from_u64(*seed));
                match (want, got) {
                    (Ok(w), Ok(g)) => {
                        prop_assert_eq!(&g.indices, &w.indices);
                        prop_assert_eq!(&g.keys, &w.keys);
                        prop_assert_eq!(&g.priorities, &w.priorities);
                        prop_assert_eq!(&g.columns, &w.columns);
                        for (x, y) in g.weights.iter().zip(&w.weights) {
                            prop_assert!((x - y).abs() <= 1e-12, "weights {} vs {}", x, y);
                        }
                        for (x, y) in g.probabilities.iter().zip(&w.probabilities) {
                            prop_assert!((x - y).abs() <= 1e-12);
                        }
                    }
                    (w, g) => prop_assert_eq!(g.map(|_| ()), w.map(|_| ())),
                }
            }
            Op::Read(i) => {
                let i = i % config.capacity();
                prop_assert_eq!(buffer.priority(i), reference.priority(i));
                prop_assert_eq!(buffer.key(i), reference.key(i));
            }
        }
        prop_assert_eq!(buffer.len(), reference.len());
        prop_assert_eq!(buffer.inserted(), reference.inserted());
        prop_assert_eq!(buffer.total_priority(), reference.total_priority());
    }
    let c = buffer.consistency();
    prop_assert!(c.extrema_exact && c.max_rel_error <= 1e-12, "{:?}", c);
    Ok(())
}

fn config(capacity: usize, fanout: usize, live_max: bool, batch_norm: bool) -> Config {
    // One tag for every buffer made from it, so that their keys compare equal.
    Config::builder(capacity, schema())
        .key_tag(5)
        .fanout(fanout)
        .alpha(1.0)
        .default_priority(if live_max {
            DefaultPriority::LiveMax
        } else {
            DefaultPriority::RunningMax
        })
        .weight_normalization(if batch_norm {
            WeightNormalization::Batch
        } else {
            WeightNormalization::Global
        })
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn concurrent_buffers_match_the_sequential_one(
        capacity in prop_oneof![1usize..=13, Just(100usize)],
        fanout in prop::sample::select(vec![2usize, 4, 8, 16]),
        live_max in any::<bool>(),
        batch_norm in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let c = config(capacity, fanout, live_max, batch_norm);
        run::<GlobalLockBuffer>(c.clone(), &ops)?;
        run::<GlobalSpinLockBuffer>(c.clone(), &ops)?;
        run::<SplitLockBuffer>(c.clone(), &ops)?;
        run::<LockFreeBuffer>(c, &ops)?;
    }
}

/// Every rejected call returns its error and leaves everything observable unchanged.
fn rejected_calls_change_nothing<B: ConcurrentBuffer>() {
    let buffer = B::new(config(4, 2, false, false)).unwrap();
    let mut rng = SmallRng::seed_from_u64(3);
    assert_eq!(
        buffer
            .sample(4, 0.5, SampleMode::Stratified, &mut rng)
            .unwrap_err(),
        Error::Empty
    );
    let (o, a, d) = item(1);
    let cols = [(&o).into(), (&a).into(), (&d).into()];
    let key = buffer.insert(&cols, Some(0.0)).unwrap();
    assert_eq!(
        buffer
            .sample(4, 0.5, SampleMode::Stratified, &mut rng)
            .unwrap_err(),
        Error::ZeroTotalPriority
    );
    buffer.insert(&cols, Some(2.0)).unwrap();
    let snapshot = |b: &B| {
        (
            (0..4)
                .map(|i| (b.priority(i).unwrap(), b.key(i).unwrap()))
                .collect::<Vec<_>>(),
            b.len(),
            b.inserted(),
            b.total_priority(),
        )
    };
    let before = snapshot(&buffer);
    let tag = buffer.config().key_tag();
    let bad_key = Key::new(tag, 9, 9);
    let future_key = Key::new(tag, 2, 2);
    let wrong_slot = Key::new(tag, 1, 0);
    for p in [f64::NAN, -1.0, f64::INFINITY, 1e300] {
        assert!(matches!(
            buffer.insert(&cols, Some(p)),
            Err(Error::InvalidPriority { .. })
        ));
        assert!(matches!(
            buffer.update_priorities(&[key], &[p]),
            Err(Error::InvalidPriority { .. })
        ));
    }
    assert!(matches!(
        buffer.update_priorities(&[key, bad_key], &[1.0, 1.0]),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        buffer.update_priorities(&[key, future_key], &[1.0, 1.0]),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        buffer.update_priorities(&[wrong_slot], &[1.0]),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        buffer.update_priorities(&[key], &[1.0, 2.0]),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        buffer.insert(&cols[..2], None),
        Err(Error::ColumnCount { .. })
    ));
    let two = [1.0f32; 6];
    assert!(matches!(
        buffer.insert(&[(&two).into(), (&a).into(), (&d).into()], None),
        Err(Error::ColumnLength { .. })
    ));
    assert!(matches!(
        buffer.insert(&[(&a).into(), (&a).into(), (&d).into()], None),
        Err(Error::ColumnType { .. })
    ));
    assert!(matches!(
        buffer.insert_batch(&cols, Some(&[1.0, 2.0])),
        Err(Error::LengthMismatch { .. })
    ));
    let mut keys = vec![key];
    assert!(matches!(
        buffer.insert_batch_into(&cols, Some(&[1.0, 2.0]), &mut keys),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        buffer.insert_batch_into(&cols[..2], None, &mut keys),
        Err(Error::ColumnCount { .. })
    ));
    assert_eq!(keys, [key]);
    let mut out = buffer
        .sample(2, 0.5, SampleMode::Independent, &mut rng)
        .unwrap();
    let kept = out.clone();
    assert_eq!(
        buffer.sample_into(0, 0.5, SampleMode::Independent, &mut rng, &mut out),
        Err(Error::ZeroBatch)
    );
    assert!(matches!(
        buffer.sample_into(2, f64::NAN, SampleMode::Independent, &mut rng, &mut out),
        Err(Error::InvalidParameter { name: "beta", .. })
    ));
    assert_eq!(out, kept);
    assert!(matches!(buffer.priority(4), Err(Error::OutOfRange { .. })));
    assert!(matches!(buffer.key(4), Err(Error::OutOfRange { .. })));
    assert_eq!(snapshot(&buffer), before);
    // The sampled columns are the inserted ones.
    assert_eq!(
        kept.columns[0],
        ColumnData::F32(vec![1.0, 1.5, -1.0, 1.0, 1.5, -1.0])
    );
}

/// `insert_batch_into` appends what `insert_batch` returns, after the keys already there.
fn insert_batch_into_appends_the_keys<B: ConcurrentBuffer>() {
    let (returned, appended) = (
        B::new(config(5, 2, false, false)).unwrap(),
        B::new(config(5, 2, false, false)).unwrap(),
    );
    let (o, a, d) = item(1);
    let one = [(&o).into(), (&a).into(), (&d).into()];
    let mut keys = vec![returned.insert(&one, None).unwrap()];
    appended.insert(&one, None).unwrap();
    let (o, a, d) = (o.repeat(3), a.repeat(3), d.repeat(3));
    let cols = [(&o).into(), (&a).into(), (&d).into()];
    let first = keys[0];
    for priorities in [None, Some(&[1.0, 2.0, 3.0][..])] {
        let batch = returned.insert_batch(&cols, priorities).unwrap();
        let before = keys.len();
        appended
            .insert_batch_into(&cols, priorities, &mut keys)
            .unwrap();
        assert_eq!(keys[before..], batch[..]);
    }
    assert_eq!(keys[0], first);
    assert_eq!(keys.len(), 7);
    for i in 0..5 {
        assert_eq!(returned.key(i).unwrap(), appended.key(i).unwrap());
        assert_eq!(returned.priority(i).unwrap(), appended.priority(i).unwrap());
    }
}

#[test]
fn insert_batch_into_appends_the_keys_in_any_variant() {
    insert_batch_into_appends_the_keys::<GlobalLockBuffer>();
    insert_batch_into_appends_the_keys::<SplitLockBuffer>();
    insert_batch_into_appends_the_keys::<LockFreeBuffer>();
}

#[test]
fn rejected_calls_change_nothing_in_any_variant() {
    rejected_calls_change_nothing::<GlobalLockBuffer>();
    rejected_calls_change_nothing::<GlobalSpinLockBuffer>();
    rejected_calls_change_nothing::<SplitLockBuffer>();
    rejected_calls_change_nothing::<LockFreeBuffer>();
}

#[test]
fn buffers_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<GlobalLockBuffer>();
    check::<SplitLockBuffer>();
    check::<LockFreeBuffer>();
}

#[test]
fn huge_capacity_fails_cleanly() {
    let c = Config::builder(1 << 40, Schema::new().column("x", DType::F64, 1 << 10))
        .build()
        .unwrap();
    assert!(matches!(
        SplitLockBuffer::new(c.clone()),
        Err(Error::Allocation { .. })
    ));
    assert!(matches!(
        LockFreeBuffer::new(c.clone()),
        Err(Error::Allocation { .. })
    ));
    assert!(matches!(
        GlobalLockBuffer::new(c),
        Err(Error::Allocation { .. })
    ));
}
