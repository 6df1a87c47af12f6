//! The sequence buffer's lane protocol (`kary_replay::sequence`): a lane writer wrapping a
//! tiny ring beside a sampler and an updater. Two models, each with the invariants:
//!
//! - no sampled window crosses its episode or the write head, and every row is the step its
//!   key implies (a torn or overwritten row shows another step number; a race on a row's
//!   bytes is a loom causality violation);
//! - an update through the key of a window whose first step was overwritten counts stale:
//!   at rest a retired window's leaf is 0, and every leaf with a priority holds a window;
//! - the tree's sums are exact at rest.
//!
//! - (q1) windows of 2 steps over a ring of 4, no stack: the writer's 5th step evicts step
//!   0, so window 0 must be retired first;
//! - (q2) the same with a 2-frame stack: the window starting at 1 reads step 0 as its first
//!   frame, so it must be retired before step 0 is overwritten, though its own first step
//!   is 1.
//!
//! - (q3) a save beside the lane writer, and beside the updater: the copy holds every window's rows
//!   as the steps its position implies, no window its lane had not finished, and no
//!   priority above the copy's running maximum (an update copied half-way).
//!
//! - (q4) (q2) with an optimistic sampler (a sequence lock's reader, as in a mapping shared
//!   by processes): it copies rows while the writer overwrites them, and keeps a window only
//!   if its leaf is unchanged after the copy; each row's stand-in token says which step it
//!   held, so a window kept over an overwritten row fails the model.
//!
//! Under loom, `broken_*` run (q1) with the retire after the overwrite, (q2) with the
//! retire at a window's last step instead of its first, (q3) with a save that does not
//! pause the updates, and (q4) with a sampler that keeps its copy unchecked, and expect
//! loom to reject all four.

use kary_replay::sequence::{SequenceBatch, SequenceBuffer, SequenceConfig};
use kary_replay::{DType, Error, Key, SampleMode, Schema, Xoshiro256};

#[cfg(loom)]
use crate::support::model_with_waits;
use crate::support::{model, thread, Arc};

#[cfg(loom)]
use kary_replay::Faults;

/// Each step is `(step, step)`: a row of another step, or torn, shows a different number.
fn config(frames: usize) -> SequenceConfig {
    let mut b = SequenceConfig::builder(1, 4, Schema::new().column("x", DType::I64, 2))
        .window(2)
        .fanout(2)
        .alpha(1.0);
    if frames > 1 {
        b = b.stack("x", frames);
    }
    b.build().expect("a valid configuration")
}

/// No faults outside loom (the crate's `Faults` exists only under `--cfg loom`).
#[cfg(not(loom))]
#[derive(Debug, Default, Clone, Copy)]
struct Faults {
    _none: (),
}

/// How the model's sampler holds a window: joined to its leaf's readers (a writer waits for
/// it), or optimistically (a sequence lock's reader, as in a mapping shared by processes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readers {
    Counted,
    Optimistic,
}

#[cfg(loom)]
fn build(frames: usize, faults: Faults, readers: Readers) -> SequenceBuffer {
    match readers {
        Readers::Counted => SequenceBuffer::with_faults(config(frames), faults).unwrap(),
        Readers::Optimistic => {
            SequenceBuffer::with_faults_optimistic(config(frames), faults).unwrap()
        }
    }
}

#[cfg(not(loom))]
fn build(frames: usize, _faults: Faults, readers: Readers) -> SequenceBuffer {
    match readers {
        Readers::Counted => SequenceBuffer::new(config(frames)).unwrap(),
        Readers::Optimistic => SequenceBuffer::optimistic_for_tests(config(frames)).unwrap(),
    }
}

fn push<B: std::ops::Deref<Target = SequenceBuffer>>(
    lane: &mut kary_replay::sequence::LaneWriter<B>,
) {
    let p = lane.position() as i64;
    lane.push(&[(&[p, p][..]).into()]).unwrap();
}

/// Steps 0..=2 written (window 0 installed), then in parallel: the writer writes steps 3
/// and 4 (installing windows 1 and 2, evicting step 0), a sampler draws one window and
/// checks its rows, and an updater raises window 0 through the key taken before.
fn lane_vs_sample_and_update(frames: usize, faults: Faults, readers: Readers) {
    model(move || {
        let buffer = Arc::new(build(frames, faults, readers));
        let mut lane = SequenceBuffer::lane_shared(Arc::clone(&buffer), 0).unwrap();
        for _ in 0..3 {
            push(&mut lane);
        }
        let first: Key = buffer.key(0).unwrap().expect("window 0 installed");
        let writer = thread::spawn(move || {
            push(&mut lane);
            push(&mut lane);
        });
        let sampler = {
            let buffer = Arc::clone(&buffer);
            thread::spawn(move || {
                let mut out = SequenceBatch::default();
                let mut rng = Xoshiro256::new(3);
                match buffer.sample_into(1, 0.0, SampleMode::Independent, &mut rng, &mut out) {
                    // Under loom an optimistic sampler's rows are plain bytes that no model
                    // orders (the real ones are atomics): its tokens stand in for them, and
                    // the sampler itself fails on a kept window whose tokens are not its
                    // steps ("torn"). Outside loom the bytes are checked as for counted ones.
                    Ok(()) if cfg!(loom) && readers == Readers::Optimistic => {}
                    Ok(()) => {
                        let (_, start) = buffer.window_of(out.keys[0]).unwrap();
                        let x = out.columns[0].as_i64().unwrap();
                        let k = frames as u64;
                        for i in 0..out.lengths[0] as u64 {
                            for j in 0..k {
                                // Padding repeats the episode's first step (0).
                                let want = (start + i + j).saturating_sub(k - 1) as i64;
                                let at = ((i * k + j) * 2) as usize;
                                assert_eq!(
                                    [x[at], x[at + 1]],
                                    [want, want],
                                    "a row that is not the step its key implies (window {start})"
                                );
                            }
                        }
                    }
                    // Retiring a window and installing the next are two events: with a
                    // stack, step 4 retires window 1 before it completes window 2, and in
                    // between no window is sampleable.
                    Err(Error::Contention { .. } | Error::ZeroTotalPriority) => {}
                    Err(e) => panic!("{e}"),
                }
            })
        };
        let updater = {
            let buffer = Arc::clone(&buffer);
            thread::spawn(move || {
                buffer.update_priorities(&[first], &[5.0]).unwrap();
            })
        };
        writer.join().unwrap();
        sampler.join().unwrap();
        updater.join().unwrap();
        // Window 0 read step 0, which step 4 overwrote: retired, its leaf 0, its key stale.
        assert!(
            buffer.key(0).unwrap().is_none(),
            "window 0 outlived its first step"
        );
        assert_eq!(
            buffer.priority(0).unwrap(),
            0.0,
            "a stale update landed on a retired window"
        );
        for leaf in 0..4 {
            let held = buffer.key(leaf).unwrap().is_some();
            assert_eq!(held, buffer.priority(leaf).unwrap() > 0.0, "leaf {leaf}");
        }
        let c = buffer.consistency();
        assert!(c.exact, "inconsistent tree: {c:?}");
    });
}

/// (q1)
#[test]
fn lane_wraps_beside_a_sampler_and_an_updater() {
    lane_vs_sample_and_update(1, Faults::default(), Readers::Counted);
}

/// (q2)
#[test]
fn lane_with_a_stack_wraps_beside_a_sampler_and_an_updater() {
    lane_vs_sample_and_update(2, Faults::default(), Readers::Counted);
}

/// (q4) (q2) with an optimistic sampler: it copies while the writer overwrites, and keeps
/// its copy only if the window's leaf is unchanged after it.
#[test]
fn lane_with_a_stack_wraps_beside_an_optimistic_sampler() {
    lane_vs_sample_and_update(2, Faults::default(), Readers::Optimistic);
}

/// (q4) broken: the optimistic sampler keeps its copy unchecked: a window whose step 0 the
/// writer overwrote during the copy is kept.
#[cfg(loom)]
#[test]
#[should_panic(expected = "torn")]
fn broken_optimistic_sampler_without_check() {
    lane_vs_sample_and_update(
        2,
        Faults {
            sequence_sampler_skips_check: true,
            ..Faults::default()
        },
        Readers::Optimistic,
    );
}

/// (q1) broken: the writer overwrites step 0 before it retires window 0: a sampler copying
/// window 0 races the write.
#[cfg(loom)]
#[test]
#[should_panic(expected = "Causality violation")]
fn broken_retire_after_overwrite() {
    lane_vs_sample_and_update(
        1,
        Faults {
            lane_retires_after_overwrite: true,
            ..Faults::default()
        },
        Readers::Counted,
    );
}

/// (q2) broken: a window is retired when its last step is overwritten, not its first (with
/// the look-back): window 0 stays sampleable over the overwritten step 0.
#[cfg(loom)]
#[test]
#[should_panic(expected = "a row that is not the step its key implies")]
fn broken_retire_at_last_step() {
    lane_vs_sample_and_update(
        2,
        Faults {
            lane_retires_at_last_step: true,
            ..Faults::default()
        },
        Readers::Counted,
    );
}

/// (q3) Steps 0..=2 written (window 0 installed), then in parallel with a save: the
/// writer writes steps 3 and 4 (`update == false`, retiring window 0), or the updater
/// raises window 0 to 5, past the running maximum (1).
#[cfg(loom)]
fn save_vs_lane_or_update(update: bool, faults: Faults) {
    // The saver and the updater wait for each other's flags: spin loops that loom counts
    // as branches.
    model_with_waits(move || {
        let buffer = Arc::new(build(1, faults, Readers::Counted));
        let mut lane = SequenceBuffer::lane_shared(Arc::clone(&buffer), 0).unwrap();
        for _ in 0..3 {
            push(&mut lane);
        }
        let first: Key = buffer.key(0).unwrap().expect("window 0 installed");
        let other = {
            let buffer = Arc::clone(&buffer);
            thread::spawn(move || match update {
                true => {
                    buffer.update_priorities(&[first], &[5.0]).unwrap();
                }
                false => {
                    push(&mut lane);
                    push(&mut lane);
                }
            })
        };
        let view = buffer.saved_view().unwrap();
        other.join().unwrap();
        let (next, finished_to, retired_to) = view.lanes[0];
        assert!(retired_to <= finished_to && finished_to <= next);
        let x = &view.columns[0];
        for (leaf, w) in view.windows.iter().enumerate() {
            assert!(
                view.priorities[leaf] <= view.running_max,
                "a saved priority above the saved running maximum (leaf {leaf})"
            );
            if w[0] == 0 {
                assert_eq!(
                    view.priorities[leaf], 0.0,
                    "a saved priority with no window"
                );
                continue;
            }
            // Ring of 4, one start per step: leaf j's newest window starts at the last
            // step below `finished_to` that is j mod 4.
            let start = (finished_to - 1 - leaf as u64) / 4 * 4 + leaf as u64;
            assert!(start >= retired_to, "a saved window its lane retired");
            for i in 0..u64::from(w[0]) {
                let row = ((start + i) % 4) as usize;
                let v = i64::from_le_bytes(x[row * 16..row * 16 + 8].try_into().unwrap());
                assert_eq!(v, (start + i) as i64, "a saved row that is not its step");
            }
        }
    });
}

/// (q3) against the lane writer.
#[cfg(loom)]
#[test]
fn save_beside_a_lane_writer() {
    save_vs_lane_or_update(false, Faults::default());
}

/// (q3) against the updater.
#[cfg(loom)]
#[test]
fn save_beside_an_updater() {
    save_vs_lane_or_update(true, Faults::default());
}

/// (q3) broken: the save copies while an update is half-way (its leaf raised, the running
/// maximum not yet).
#[cfg(loom)]
#[test]
#[should_panic(expected = "a saved priority above the saved running maximum")]
fn broken_save_without_update_pause() {
    save_vs_lane_or_update(
        true,
        Faults {
            sequence_save_skips_update_pause: true,
            ..Faults::default()
        },
    );
}
