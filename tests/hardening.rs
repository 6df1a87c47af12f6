//! Sizes, failed samples and zero totals, each a way a buffer can fail its callers:
//! - a huge batch is an `Error::Allocation`, never an abort, on every buffer;
//! - `items x shape` that wraps around is `Error::SizeOverflow`, not a count;
//! - a sample never says `ZeroTotalPriority` while positive items exist (capacity 1,
//!   an actor overwriting the one slot: lazy writing zeroes it for a moment);
//! - a failed `sample_into` leaves `out` exactly as it was, on every buffer.

use kary_replay::{
    ColumnSlice, ConcurrentBuffer, Config, DType, Error, GlobalLockBuffer, LockFreeBuffer,
    ReplayBuffer, SampleBatch, SampleMode, Schema, SplitLockBuffer,
};
use rand::{rngs::SmallRng, SeedableRng};

fn config(capacity: usize) -> Config {
    Config::builder(capacity, Schema::new().column("x", DType::F32, 3))
        .fanout(4)
        .alpha(1.0)
        .build()
        .unwrap()
}

/// What the tests do to a buffer (so one body covers the sequential and concurrent APIs).
enum Op<'a> {
    Insert(f64),
    ZeroAll,
    Sample(usize, &'a mut SampleBatch),
}
type R = Result<(), Error>;
/// One buffer of some variant, driven through [`Op`]s.
type Driver = Box<dyn FnMut(Op<'_>) -> R>;

fn apply<B: ConcurrentBuffer>(b: &B, op: Op<'_>, rng: &mut SmallRng) -> R {
    match op {
        Op::Insert(p) => b
            .insert(&[ColumnSlice::from(&[p as f32; 3][..])], Some(p))
            .map(|_| ()),
        Op::ZeroAll => {
            let keys: Vec<_> = (0..b.capacity())
                .filter_map(|i| b.key(i).unwrap())
                .collect();
            b.update_priorities(&keys, &vec![0.0; keys.len()])
                .map(|_| ())
        }
        Op::Sample(n, out) => b.sample_into(n, 0.4, SampleMode::Stratified, rng, out),
    }
}

fn apply_seq(b: &mut ReplayBuffer, op: Op<'_>, rng: &mut SmallRng) -> R {
    match op {
        Op::Insert(p) => b
            .insert(&[ColumnSlice::from(&[p as f32; 3][..])], Some(p))
            .map(|_| ()),
        Op::ZeroAll => {
            let keys: Vec<_> = (0..b.capacity())
                .filter_map(|i| b.key(i).unwrap())
                .collect();
            b.update_priorities(&keys, &vec![0.0; keys.len()])
                .map(|_| ())
        }
        Op::Sample(n, out) => b.sample_into(n, 0.4, SampleMode::Stratified, rng, out),
    }
}

/// A driver over one buffer of each variant: `run(name, op)`.
fn variants(capacity: usize) -> Vec<(&'static str, Driver)> {
    let seq = ReplayBuffer::new(config(capacity)).unwrap();
    let global = GlobalLockBuffer::new(config(capacity)).unwrap();
    let split = SplitLockBuffer::new(config(capacity)).unwrap();
    let lock_free = LockFreeBuffer::new(config(capacity)).unwrap();
    let mut seq = (seq, SmallRng::seed_from_u64(1));
    let mut global = (global, SmallRng::seed_from_u64(1));
    let mut split = (split, SmallRng::seed_from_u64(1));
    let mut lock_free = (lock_free, SmallRng::seed_from_u64(1));
    vec![
        (
            "ReplayBuffer",
            Box::new(move |op| apply_seq(&mut seq.0, op, &mut seq.1)),
        ),
        (
            "GlobalLock",
            Box::new(move |op| apply(&global.0, op, &mut global.1)),
        ),
        (
            "SplitLock",
            Box::new(move |op| apply(&split.0, op, &mut split.1)),
        ),
        (
            "LockFree",
            Box::new(move |op| apply(&lock_free.0, op, &mut lock_free.1)),
        ),
    ]
}

#[test]
fn a_failed_sample_leaves_out_as_it_was_and_huge_batches_fail_cleanly() {
    for (name, mut run) in variants(16) {
        for p in 1..=10 {
            run(Op::Insert(p as f64)).unwrap();
        }
        let mut out = SampleBatch::default();
        run(Op::Sample(5, &mut out)).unwrap();
        let before = out.clone();
        assert_eq!(before.len(), 5);
        // Sizes no allocator can give, and one whose byte count overflows.
        for batch in [1usize << 40, usize::MAX / 4, usize::MAX] {
            let err = run(Op::Sample(batch, &mut out)).unwrap_err();
            assert!(
                matches!(err, Error::Allocation { .. } | Error::SizeOverflow { .. }),
                "{name} batch {batch}: {err:?}"
            );
            assert_eq!(out, before, "{name}: batch {batch} changed out");
        }
        // A failure found after the arguments were checked.
        run(Op::ZeroAll).unwrap();
        assert_eq!(
            run(Op::Sample(7, &mut out)).unwrap_err(),
            Error::ZeroTotalPriority,
            "{name}"
        );
        assert_eq!(out, before, "{name}: a failed sample changed out");
        // And the batch still works afterwards.
        run(Op::Insert(2.0)).unwrap();
        run(Op::Sample(7, &mut out)).unwrap();
        assert_eq!(out.len(), 7, "{name}");
    }
}

#[test]
fn an_item_count_whose_size_wraps_is_an_error_not_a_count() {
    // 2^32 items of a u8 column, and a column of 2^32 f32 per item: 2^64 elements, which
    // wraps to 0 and so would match an empty slice given for it.
    let schema = Schema::new()
        .column("id", DType::U8, 1)
        .column("big", DType::F32, 1 << 32);
    let ids = vec![0u8; 1 << 32]; // zeroed pages: virtual memory, not touched
    let big: [f32; 0] = [];
    let err = schema
        .count_items(&[(&ids[..]).into(), (&big[..]).into()])
        .unwrap_err();
    assert!(matches!(err, Error::SizeOverflow { .. }), "{err:?}");
}

#[test]
fn a_schema_whose_item_size_overflows_is_rejected() {
    let schema = Schema::new()
        .column("a", DType::F64, usize::MAX / 8)
        .column("b", DType::F64, 2);
    assert!(matches!(schema.validate(), Err(Error::InvalidSchema(_))));
    assert!(matches!(
        Config::builder(1, schema).build(),
        Err(Error::InvalidSchema(_))
    ));
}

#[test]
fn a_column_of_dimensions_is_checked_and_stored_as_their_product() {
    let frame = Schema::new()
        .column("frame", DType::U8, [84, 84])
        .column("r", DType::F32, []);
    assert_eq!(frame.item_bytes(), 84 * 84 + 4);
    assert!(frame.validate().is_ok());
    for bad in [
        Schema::new().column("frame", DType::U8, [84, 0]),
        Schema::new().column("frame", DType::U8, [usize::MAX, 2]),
    ] {
        assert!(
            matches!(bad.validate(), Err(Error::InvalidSchema(_))),
            "{bad:?}"
        );
    }
    // An item of a [2, 3] column is 6 elements in, 6 out.
    let buffer = LockFreeBuffer::new(
        Config::builder(4, Schema::new().column("x", DType::I32, [2, 3]))
            .build()
            .unwrap(),
    )
    .unwrap();
    buffer
        .insert(&[(&[1, 2, 3, 4, 5, 6][..]).into()], Some(1.0))
        .unwrap();
    let err = buffer
        .insert(&[(&[1, 2, 3][..]).into()], Some(1.0))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ColumnLength {
                expected: 6,
                got: 3,
                ..
            }
        ),
        "{err:?}"
    );
}

fn never_zero_total_while_an_item_is_stored<B: ConcurrentBuffer>(name: &str) {
    let buffer = B::new(config(1)).unwrap();
    buffer
        .insert(&[ColumnSlice::from(&[1.0f32; 3][..])], Some(1.0))
        .unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..20_000 {
                let v = [i as f32; 3];
                buffer
                    .insert(&[ColumnSlice::from(&v[..])], Some(1.0))
                    .unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        s.spawn(|| {
            let mut rng = SmallRng::seed_from_u64(3);
            let mut out = SampleBatch::default();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                match buffer.sample_into(1, 0.4, SampleMode::Independent, &mut rng, &mut out) {
                    Ok(()) | Err(Error::Contention { .. }) => {}
                    Err(e) => panic!("{name}: {e:?} while an item of priority 1 is stored"),
                }
            }
        });
    });
}

#[test]
fn capacity_one_under_overwrites_never_reports_a_zero_total() {
    never_zero_total_while_an_item_is_stored::<SplitLockBuffer>("SplitLock");
    never_zero_total_while_an_item_is_stored::<LockFreeBuffer>("LockFree");
    never_zero_total_while_an_item_is_stored::<GlobalLockBuffer>("GlobalLock");
}
