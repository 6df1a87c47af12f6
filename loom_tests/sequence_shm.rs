//! A shared sequence buffer's lane writer dying, and its recovery (`sequence::shared`,
//! docs/design.md "Sequences across processes"), on a sequence buffer run as a mapping runs
//! it (`share_for_model`: optimistic samplers, lanes taken and kept in their words, owners
//! in state words). One lane of a ring of 4 steps, windows of 1 step: the writer
//! (participant 0) pushes step 4, which retires window 0, overwrites its row and completes
//! window 3, and dies at each point of that call (after the retirement, half-way through
//! the row, with window 3's leaf set and not published) beside an optimistic sampler
//! (participant 1). Then the survivor recovers the lane and a new writer takes it and pushes
//! four steps (wrapping its ring). After it: no window the sampler kept was torn (its rows' tokens, checked by
//! the sampler), the new writer never waits for what the dead one held, `len` counts the
//! windows that hold an item, every leaf with a priority holds one, and the tree is exact.
//!
//! Broken twin: a recovery that moves the lane's cursor past the dead episode's windows
//! without publishing them (the one in flight, the retired one): their leaves stay held,
//! the lane's next writer waits for one of them for ever when its ring comes round, and
//! loom must reject it.

use std::panic::AssertUnwindSafe;

use kary_replay::buffer::ShmPoint;
use kary_replay::faults_hooks::{as_participant, die_at};
use kary_replay::sequence::{SequenceBatch, SequenceBuffer, SequenceConfig};
use kary_replay::{DType, Error, Faults, SampleMode, Schema, Xoshiro256};

use crate::support::{model_with_waits, quiet_deaths, thread, Arc};

fn config() -> SequenceConfig {
    SequenceConfig::builder(1, 4, Schema::new().column("x", DType::I64, 2))
        .fanout(2)
        .alpha(1.0)
        .build()
        .expect("a valid configuration")
}

fn push<B: std::ops::Deref<Target = SequenceBuffer>>(
    lane: &mut kary_replay::sequence::LaneWriter<B>,
) {
    let p = lane.position() as i64;
    lane.push(&[(&[p, p][..]).into()]).unwrap();
}

fn writer_dies(point: Option<ShmPoint>, faults: Faults) {
    quiet_deaths();
    model_with_waits(move || {
        let mut buffer = SequenceBuffer::with_faults(config(), faults).unwrap();
        buffer.share_for_model();
        let buffer = Arc::new(buffer);
        as_participant(1);
        {
            // Steps 0..=3: windows 0, 1 and 2 complete (each needs its next step).
            let mut lane = SequenceBuffer::lane_shared(Arc::clone(&buffer), 0).unwrap();
            for _ in 0..4 {
                push(&mut lane);
            }
        }
        let writer = {
            let b = Arc::clone(&buffer);
            thread::spawn(move || {
                as_participant(0);
                if let Some(p) = point {
                    die_at(p, 0);
                }
                let died = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    let mut lane = SequenceBuffer::lane_shared(Arc::clone(&b), 0).unwrap();
                    push(&mut lane);
                }))
                .is_err();
                assert_eq!(
                    died,
                    point.is_some(),
                    "the writer died where the model said"
                );
            })
        };
        let sampler = {
            let b = Arc::clone(&buffer);
            thread::spawn(move || {
                as_participant(1);
                let mut out = SequenceBatch::default();
                let mut rng = Xoshiro256::new(3);
                // A kept window whose tokens are not its steps fails inside ("torn").
                match b.sample_into(1, 0.0, SampleMode::Independent, &mut rng, &mut out) {
                    Ok(()) | Err(Error::Contention { .. } | Error::ZeroTotalPriority) => {}
                    Err(e) => panic!("{e}"),
                }
            })
        };
        writer.join().unwrap();
        sampler.join().unwrap();
        if point.is_some() {
            assert!(buffer.recover_for_model(&[0]), "recovery incomplete");
        }
        // A new writer takes the lane and goes on: four more steps, round its ring.
        let mut lane = SequenceBuffer::lane_shared(Arc::clone(&buffer), 0).unwrap();
        for _ in 0..4 {
            push(&mut lane);
        }
        drop(lane);
        let mut held = 0;
        for leaf in 0..4 {
            let holds = buffer.key(leaf).unwrap().is_some();
            held += usize::from(holds);
            assert_eq!(holds, buffer.priority(leaf).unwrap() > 0.0, "leaf {leaf}");
        }
        assert_eq!(
            buffer.len(),
            held,
            "len counts the windows that hold an item"
        );
        assert!(held >= 1, "the new writer's window is sampleable");
        let c = buffer.consistency();
        assert!(c.exact, "inconsistent tree: {c:?}");
    });
}

const POINTS: [ShmPoint; 3] = [
    ShmPoint::LaneRetired,
    ShmPoint::LaneRow,
    ShmPoint::LaneInstalled,
];

#[test]
fn a_lane_writer_that_lives_beside_an_optimistic_sampler() {
    writer_dies(None, Faults::default());
}

#[test]
fn a_lane_writer_that_dies_at_each_point_is_recovered() {
    for p in POINTS {
        writer_dies(Some(p), Faults::default());
    }
}

/// Broken twin: the dead episode's windows are left held; the lane's next writer waits for
/// one of them for ever.
#[test]
#[should_panic(expected = "branches")]
fn recovery_that_leaves_the_dead_episodes_windows_held_is_rejected() {
    writer_dies(
        Some(ShmPoint::LaneInstalled),
        Faults {
            recovery_leaves_lane_windows_held: true,
            ..Faults::default()
        },
    );
}
