//! The staged writer (`ConcurrentBuffer::writer`, `Writer`): when items become visible,
//! that a staged batch equals the same items inserted directly, bad input, dyn and `Arc`
//! buffers, and nothing lost on drop.

use std::sync::Arc;

use kary_replay::{
    ConcurrentBuffer, Config, DType, Error, GlobalLockBuffer, LockFreeBuffer, SampleMode, Schema,
    SplitLockBuffer, Writer,
};
use rand::{rngs::SmallRng, SeedableRng};

fn config(capacity: usize) -> Config {
    Config::builder(
        capacity,
        Schema::new()
            .column("obs", DType::F32, 3)
            .column("done", DType::Bool, 1),
    )
    // One tag for every buffer made from it, so that their keys compare equal.
    .key_tag(2)
    .fanout(4)
    .alpha(0.7)
    .build()
    .unwrap()
}

fn obs(i: usize) -> [f32; 3] {
    [i as f32, -(i as f32), 0.5]
}

fn staged_items_appear_at_flush_in_push_order<B: ConcurrentBuffer>() {
    let buffer = B::new(config(50)).unwrap();
    let direct = B::new(config(50)).unwrap();
    let mut writer = buffer.writer(8).unwrap();
    let mut keys = Vec::new();
    for i in 0..77 {
        let o = obs(i);
        let done = [i % 5 == 0];
        let p = (i % 7) as f64 + 0.5;
        let got = writer
            .push(&[(&o[..]).into(), (&done[..]).into()], Some(p))
            .unwrap();
        // A push returns keys only when it filled the batch.
        assert_eq!(got.len(), if (i + 1) % 8 == 0 { 8 } else { 0 }, "push {i}");
        keys.extend_from_slice(got);
        assert_eq!(writer.staged(), (i + 1) % 8);
        assert_eq!(
            buffer.inserted() as usize,
            (i + 1) / 8 * 8,
            "staged items are not visible"
        );
        direct
            .insert(&[(&o[..]).into(), (&done[..]).into()], Some(p))
            .unwrap();
    }
    keys.extend_from_slice(writer.flush().unwrap());
    assert_eq!(writer.staged(), 0);
    assert!(writer.flush().unwrap().is_empty());
    // Keys in push order: consecutive generations, FIFO eviction as for direct inserts.
    for (g, key) in keys.iter().enumerate() {
        assert_eq!(key.insertion(), g as u64);
        assert_eq!(key.index, g % 50);
    }
    assert_eq!(buffer.len(), direct.len());
    assert_eq!(buffer.inserted(), 77);
    for i in 0..50 {
        assert_eq!(buffer.priority(i).unwrap(), direct.priority(i).unwrap());
        assert_eq!(buffer.key(i).unwrap(), direct.key(i).unwrap());
    }
    let a = buffer
        .sample(
            32,
            0.4,
            SampleMode::Stratified,
            &mut SmallRng::seed_from_u64(3),
        )
        .unwrap();
    let b = direct
        .sample(
            32,
            0.4,
            SampleMode::Stratified,
            &mut SmallRng::seed_from_u64(3),
        )
        .unwrap();
    assert_eq!(a.keys, b.keys);
    assert_eq!(a.columns, b.columns);
    assert_eq!(a.weights, b.weights);
}

fn kinds_of_priority_flush_apart_and_bad_input_stages_nothing<B: ConcurrentBuffer>() {
    let buffer = B::new(config(16)).unwrap();
    let mut writer = buffer.writer(4).unwrap();
    let done = [false];
    writer
        .push(&[(&obs(0)[..]).into(), (&done[..]).into()], Some(3.0))
        .unwrap();
    writer
        .push(&[(&obs(1)[..]).into(), (&done[..]).into()], Some(5.0))
        .unwrap();
    // A default-priority item flushes the two explicit ones first.
    let got = writer
        .push(&[(&obs(2)[..]).into(), (&done[..]).into()], None)
        .unwrap()
        .to_vec();
    assert_eq!(got.len(), 2);
    assert_eq!(buffer.len(), 2);
    assert_eq!(writer.staged(), 1);
    let p = |x: f64| x.powf(0.7);
    assert_eq!(buffer.priority(0).unwrap(), p(3.0));
    assert_eq!(buffer.priority(1).unwrap(), p(5.0));
    // Bad input: an error, nothing staged, nothing inserted.
    let short = [1.0f32, 2.0];
    assert!(matches!(
        writer.push(&[(&short[..]).into(), (&done[..]).into()], None),
        Err(Error::ColumnLength { .. }) | Err(Error::LengthMismatch { .. })
    ));
    let wrong = [1i32, 2, 3];
    assert!(writer
        .push(&[(&wrong[..]).into(), (&done[..]).into()], None)
        .is_err());
    assert!(writer.push(&[(&obs(3)[..]).into()], None).is_err());
    for bad in [f64::NAN, -1.0, f64::INFINITY] {
        assert!(matches!(
            writer.push(&[(&obs(3)[..]).into(), (&done[..]).into()], Some(bad)),
            Err(Error::InvalidPriority { .. })
        ));
    }
    assert_eq!(writer.staged(), 1);
    assert_eq!(buffer.inserted(), 2);
    // Default priorities are the buffer's (running max: 5^0.7).
    writer.flush().unwrap();
    assert_eq!(buffer.priority(2).unwrap(), p(5.0));
    assert!(matches!(
        buffer.writer(0),
        Err(Error::InvalidParameter { name: "batch", .. })
    ));
}

fn drop_flushes<B: ConcurrentBuffer>() {
    let buffer = B::new(config(16)).unwrap();
    {
        let mut writer = buffer.writer(100).unwrap();
        for i in 0..5 {
            writer
                .push(&[(&obs(i)[..]).into(), (&[true][..]).into()], None)
                .unwrap();
        }
        assert_eq!(buffer.len(), 0);
    }
    assert_eq!(buffer.len(), 5);
}

#[test]
fn staged_writes_match_direct_inserts_on_every_variant() {
    staged_items_appear_at_flush_in_push_order::<GlobalLockBuffer>();
    staged_items_appear_at_flush_in_push_order::<SplitLockBuffer>();
    staged_items_appear_at_flush_in_push_order::<LockFreeBuffer>();
}

#[test]
fn priorities_and_bad_input_on_every_variant() {
    kinds_of_priority_flush_apart_and_bad_input_stages_nothing::<GlobalLockBuffer>();
    kinds_of_priority_flush_apart_and_bad_input_stages_nothing::<SplitLockBuffer>();
    kinds_of_priority_flush_apart_and_bad_input_stages_nothing::<LockFreeBuffer>();
}

#[test]
fn a_dropped_writer_flushes_on_every_variant() {
    drop_flushes::<GlobalLockBuffer>();
    drop_flushes::<SplitLockBuffer>();
    drop_flushes::<LockFreeBuffer>();
}

#[test]
fn writers_over_dyn_and_arc_buffers_from_threads() {
    let buffer: Arc<dyn ConcurrentBuffer> = Arc::new(LockFreeBuffer::new(config(4096)).unwrap());
    std::thread::scope(|s| {
        for t in 0..3 {
            let buffer = Arc::clone(&buffer);
            s.spawn(move || {
                let mut writer = Writer::new(buffer, 32).unwrap();
                for i in 0..1000 {
                    writer
                        .push(
                            &[(&obs(t * 1000 + i)[..]).into(), (&[false][..]).into()],
                            None,
                        )
                        .unwrap();
                }
            });
        }
    });
    assert_eq!(buffer.len(), 3000);
    let mut writer = Writer::new(&*buffer, 2).unwrap();
    writer
        .push(&[(&obs(0)[..]).into(), (&[false][..]).into()], None)
        .unwrap();
    assert_eq!(writer.buffer().len(), 3000);
    drop(writer);
    assert_eq!(buffer.len(), 3001);
    assert!(buffer.consistency().exact);
}
