//! Rate limits on sequence buffers, counted in windows: a lane call is admitted for the
//! windows it completes (exactly those, for any window, period, n-step reach and partial
//! rule), a sample for its batch; refused, timed-out and failed calls spend nothing and
//! change nothing; close wakes blocked lanes and samplers; checkpoints keep the limit and
//! its counts; actor and learner threads hold the ratio.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kary_replay::rate::{Batches, RateLimit};
use kary_replay::sequence::{
    LaneWriter, Partial, SequenceBatch, SequenceBuffer, SequenceConfig, SequenceConfigBuilder,
};
use kary_replay::{
    Checkpoint, ColumnSlice, DType, Draw, Error, Load, SampleMode, Schema, Wait, Xoshiro256,
};
use proptest::prelude::*;

const MODE: SampleMode = SampleMode::Independent;

fn schema() -> Schema {
    Schema::new()
        .column("obs", DType::F32, 2)
        .column("reward", DType::F32, [])
}

/// `lanes` lanes of 64 steps, windows of 4 starting every 2 steps, next observation kept.
fn builder(lanes: usize) -> SequenceConfigBuilder {
    SequenceConfig::builder(lanes, 64, schema())
        .window(4)
        .period(2)
        .next_of("obs")
}

/// 2 sampled windows per inserted window from 4 windows on, within +-8; up to 4 per sample.
fn limited(lanes: usize) -> SequenceBuffer {
    let config = builder(lanes)
        .rate_limit(
            RateLimit::sample_to_insert_ratio(2.0, 4, 8.0),
            Batches {
                insert: 2,
                sample: 4,
            },
        )
        .build()
        .unwrap();
    SequenceBuffer::new(config).unwrap()
}

fn step<'a>(obs: &'a [f32; 2], reward: &'a [f32; 1]) -> [ColumnSlice<'a>; 2] {
    [(&obs[..]).into(), (&reward[..]).into()]
}

fn push(lane: &mut LaneWriter<&SequenceBuffer>, wait: Wait) -> Result<(), Error> {
    let obs = [lane.lane() as f32, lane.position() as f32];
    lane.push_waiting(&step(&obs, &[1.0]), wait)
}

fn end(lane: &mut LaneWriter<&SequenceBuffer>, wait: Wait) -> Result<(), Error> {
    let obs = [-1.0f32, lane.position() as f32];
    lane.end_episode_waiting(&[(&obs[..]).into()], false, wait)
}

fn sample(buffer: &SequenceBuffer, batch: usize, wait: Wait) -> Result<SequenceBatch, Error> {
    let mut out = SequenceBatch::default();
    let mut rng = Xoshiro256::new(3);
    let draw = Draw::Batch {
        batch,
        beta: 0.4,
        mode: MODE,
    };
    buffer.sample_into_waiting(draw, &mut rng, &mut out, wait)?;
    Ok(out)
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "kr-seqrate-{}-{name}-{:x}",
        std::process::id(),
        Xoshiro256::from_entropy().next_u64()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn counts(buffer: &SequenceBuffer) -> (u64, u64) {
    let s = buffer.rate_stats().expect("a limited buffer");
    (s.inserts, s.samples)
}

#[test]
fn windows_are_what_is_counted() {
    let buffer = limited(1);
    let mut lane = buffer.lane(0).unwrap();
    // Sampling opens at 4 windows: a window completes when the step 4 after its start is
    // pushed (its next observation), so 3 steps complete none.
    for _ in 0..3 {
        push(&mut lane, Wait::Never).unwrap();
    }
    assert_eq!(counts(&buffer), (0, 0));
    assert!(matches!(
        sample(&buffer, 1, Wait::Never),
        Err(Error::RateLimited(_))
    ));
    // Steps 4 and 6 complete the windows starting at 0 and 2; the episode's end after step
    // 7 completes those at 4 and 6 (kept partial): 4 windows, sampling opens.
    for _ in 0..5 {
        push(&mut lane, Wait::Never).unwrap();
    }
    assert_eq!(counts(&buffer), (2, 0));
    end(&mut lane, Wait::Never).unwrap();
    assert_eq!(counts(&buffer), (4, 0));
    assert_eq!(buffer.len(), 4);
    // `2 x inserts - samples` stays in 2 x 4 +- 8 = [0, 16]: 8 samples may go now.
    for _ in 0..2 {
        let out = sample(&buffer, 4, Wait::Never).unwrap();
        assert_eq!(out.keys.len(), 4);
    }
    assert_eq!(counts(&buffer), (4, 8));
    assert!(matches!(
        sample(&buffer, 1, Wait::Never),
        Err(Error::RateLimited(_))
    ));
    let waited = Instant::now();
    assert!(matches!(
        sample(&buffer, 1, Wait::For(Duration::from_millis(30))),
        Err(Error::Timeout { .. })
    ));
    assert!(waited.elapsed() >= Duration::from_millis(30));
    assert_eq!(counts(&buffer), (4, 8));
}

#[test]
fn inserts_too_far_ahead_wait_and_change_nothing() {
    let buffer = limited(1);
    let mut lane = buffer.lane(0).unwrap();
    // With no sample, `2 x inserts` stays at most 16: 8 windows, the 8th completed by
    // step 18, so step 20 is refused.
    let mut refused = None;
    for i in 0..64 {
        match push(&mut lane, Wait::Never) {
            Ok(()) => {}
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    let (at, e) = refused.expect("the limit stops the lane");
    assert!(matches!(e, Error::RateLimited(_)), "{e:?}");
    let (position, len) = (lane.position(), buffer.len());
    assert_eq!(counts(&buffer).0, len as u64);
    assert_eq!((position, len), (20, 8));
    assert_eq!(position, at, "a refused step is not written");
    assert!(matches!(
        push(&mut lane, Wait::For(Duration::from_millis(20))),
        Err(Error::Timeout { .. })
    ));
    assert_eq!((lane.position(), buffer.len()), (position, len));
    // A sample makes room for one more window.
    sample(&buffer, 2, Wait::Never).unwrap();
    push(&mut lane, Wait::Never).unwrap();
    assert_eq!(buffer.len(), len + 1);
}

#[test]
fn bad_calls_spend_nothing() {
    let buffer = limited(1);
    let mut lane = buffer.lane(0).unwrap();
    for _ in 0..4 {
        push(&mut lane, Wait::Never).unwrap();
    }
    // The next step completes a window; a wrong one is refused before the admission.
    let obs = [0.0f32; 3];
    let err = lane
        .push_waiting(&step_wrong(&obs), Wait::Never)
        .unwrap_err();
    assert!(matches!(err, Error::ColumnLength { .. }), "{err:?}");
    assert!(matches!(
        lane.push_waiting(&[(&obs[..2]).into()], Wait::Never),
        Err(Error::ColumnCount { .. })
    ));
    assert!(matches!(
        lane.end_episode_waiting(&[], false, Wait::Never),
        Err(Error::ColumnCount { .. })
    ));
    assert_eq!(counts(&buffer), (0, 0));
    assert_eq!(lane.position(), 4);
    assert!(matches!(
        sample(&buffer, 0, Wait::Never),
        Err(Error::ZeroBatch)
    ));
    assert!(matches!(
        sample(&buffer, 5, Wait::Never),
        Err(Error::InvalidParameter { .. })
    ));
    assert_eq!(counts(&buffer), (0, 0));
    // A closed lane refuses after the admission and gives it back.
    push(&mut lane, Wait::Never).unwrap();
    assert_eq!(counts(&buffer), (1, 0));
    lane.close();
    assert!(matches!(
        push(&mut lane, Wait::Never),
        Err(Error::LaneClosed { lane: 0 })
    ));
    assert_eq!(counts(&buffer).0, buffer.len() as u64);
}

fn step_wrong(obs: &[f32; 3]) -> [ColumnSlice<'_>; 2] {
    [(&obs[..]).into(), (&[1.0f32][..]).into()]
}

#[test]
fn close_wakes_blocked_lanes_and_samplers() {
    let buffer = limited(2);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| sample(&buffer, 4, Wait::Block));
        let actor = s.spawn(|| {
            let mut lane = buffer.lane(1).unwrap();
            // Nothing samples: the lane blocks once inserts are 8 windows ahead.
            loop {
                if let Err(e) = push(&mut lane, Wait::Block) {
                    stop.store(true, Ordering::SeqCst);
                    return e;
                }
            }
        });
        // The sampler waits for 4 windows, gets them, then the actor blocks.
        let out = sampler.join().unwrap().unwrap();
        assert_eq!(out.keys.len(), 4);
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !stop.load(Ordering::SeqCst),
            "the actor is blocked, not failing"
        );
        let blocked = sample(&buffer, 4, Wait::Never);
        assert!(blocked.is_ok() || matches!(blocked, Err(Error::RateLimited(_))));
        buffer.close();
        assert!(matches!(actor.join().unwrap(), Error::Closed));
    });
    assert!(matches!(
        sample(&buffer, 1, Wait::Block),
        Err(Error::Closed)
    ));
    let mut lane = buffer.lane(0).unwrap();
    // Even a step that completes no window is refused once closed.
    assert!(matches!(push(&mut lane, Wait::Never), Err(Error::Closed)));
    assert_eq!(lane.position(), 0);
}

#[test]
fn an_empty_limited_buffer_waits_for_its_first_windows() {
    let config = builder(1)
        .rate_limit(
            RateLimit::MinSize(1),
            Batches {
                insert: 2,
                sample: 8,
            },
        )
        .build()
        .unwrap();
    let buffer = SequenceBuffer::new(config).unwrap();
    std::thread::scope(|s| {
        let sampler = s.spawn(|| sample(&buffer, 8, Wait::For(Duration::from_secs(30))));
        std::thread::sleep(Duration::from_millis(20));
        let mut lane = buffer.lane(0).unwrap();
        for _ in 0..5 {
            push(&mut lane, Wait::Block).unwrap();
        }
        let out = sampler.join().unwrap().unwrap();
        assert_eq!(out.keys.len(), 8);
    });
    assert_eq!(counts(&buffer), (1, 8));
}

#[test]
fn checkpoints_keep_the_limit_and_its_counts() {
    let buffer = limited(2);
    let mut lane = buffer.lane(0).unwrap();
    for _ in 0..9 {
        push(&mut lane, Wait::Never).unwrap();
    }
    end(&mut lane, Wait::Never).unwrap();
    drop(lane);
    sample(&buffer, 4, Wait::Never).unwrap();
    let before = counts(&buffer);
    let dir = scratch("limited");
    buffer.save(&dir).unwrap();
    let loaded = SequenceBuffer::load(&dir).unwrap();
    assert_eq!(loaded.config().rate_limit(), buffer.config().rate_limit());
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(counts(&loaded), before);
    // The credit goes on where it stood: as many samples fit as before the save.
    let mut fit = [0, 0];
    for (k, b) in [&buffer, &loaded].into_iter().enumerate() {
        while sample(b, 1, Wait::Never).is_ok() {
            fit[k] += 1;
        }
    }
    assert_eq!(fit[0], fit[1]);
    assert!(fit[0] > 0);
    // An unlimited buffer's checkpoint has no limit.
    let plain = SequenceBuffer::new(builder(1).build().unwrap()).unwrap();
    let dir = scratch("plain");
    plain.save(&dir).unwrap();
    let loaded = SequenceBuffer::load(&dir).unwrap();
    assert!(loaded.rate_limiter().is_none());
    let manifest = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    assert!(!manifest.contains("rate_limit") && !manifest.contains("\"rate\""));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Actors and learners on real threads: the ratio of sampled to inserted windows stays in
/// its range the whole time, and every admitted window is installed.
#[test]
fn threads_hold_the_ratio() {
    let lanes = 3;
    let config = builder(lanes)
        .rate_limit(
            RateLimit::sample_to_insert_ratio(4.0, 8, 16.0),
            Batches {
                insert: 2,
                sample: 8,
            },
        )
        .build()
        .unwrap();
    let buffer = SequenceBuffer::new(config).unwrap();
    let steps = 600usize;
    let running = std::sync::atomic::AtomicUsize::new(lanes);
    std::thread::scope(|s| {
        for l in 0..lanes {
            let (buffer, running) = (&buffer, &running);
            s.spawn(move || {
                let mut lane = buffer.lane(l).unwrap();
                for t in 0..steps {
                    push(&mut lane, Wait::Block).unwrap();
                    if t % 37 == 36 {
                        end(&mut lane, Wait::Block).unwrap();
                    }
                }
                lane.close();
                running.fetch_sub(1, Ordering::SeqCst);
            });
        }
        let learners: Vec<_> = (0..2)
            .map(|_| {
                let (buffer, running) = (&buffer, &running);
                s.spawn(move || {
                    let mut drawn = 0u64;
                    loop {
                        match sample(buffer, 8, Wait::For(Duration::from_millis(300))) {
                            Ok(out) => {
                                assert_eq!(out.keys.len(), 8);
                                drawn += 8;
                                let (i, smp) = counts(buffer);
                                // Read mid-flight: each count may miss the calls of the
                                // other threads (3 actors' 8, a learner's 8) being counted.
                                let c = 4 * i as i64 - smp as i64;
                                assert!((16 - 16..=48 + 24).contains(&c) || i < 8, "credit {c}");
                            }
                            // A timeout with actors still running is a stalled
                            // machine, not the end.
                            Err(Error::Timeout { .. }) if running.load(Ordering::SeqCst) > 0 => {}
                            Err(Error::Timeout { .. }) => {
                                // What the actors' last windows admitted.
                                while sample(buffer, 8, Wait::Never).is_ok() {
                                    drawn += 8;
                                }
                                return drawn;
                            }
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                })
            })
            .collect();
        let drawn: u64 = learners.into_iter().map(|h| h.join().unwrap()).sum();
        let (inserts, samples) = counts(&buffer);
        assert_eq!(samples, drawn);
        // At rest, the learners sampled down to the range's low end: one more batch of 8
        // would have left `[16, 48]`.
        let c = 4 * inserts as i64 - samples as i64;
        assert!((16..24).contains(&c), "credit {c} after {inserts} inserts");
    });
    let (inserts, _) = counts(&buffer);
    assert!(inserts >= buffer.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any window, period, n-step reach and partial rule, any episode lengths: the limiter
    /// counts exactly the windows installed (a ring long enough that none is retired).
    #[test]
    fn admissions_equal_windows_installed(
        window in 1usize..6,
        period in 1usize..4,
        nstep in prop::option::of(1usize..8),
        drop_partial in any::<bool>(),
        ops in prop::collection::vec(0u8..8, 1..120),
    ) {
        let steps = 256usize.div_ceil(period) * period;
        let mut b = SequenceConfig::builder(1, steps, schema())
            .window(window)
            .period(period)
            .partial(if drop_partial { Partial::Drop } else { Partial::Keep })
            .next_of("obs");
        if let Some(n) = nstep {
            b = b.nstep(n, 0.9, "reward");
        }
        let probe = b.clone().build().unwrap();
        let batches = Batches { insert: probe.max_windows_per_call(), sample: 1 };
        let buffer = SequenceBuffer::new(b.rate_limit(RateLimit::MinSize(1), batches).build().unwrap()).unwrap();
        let mut lane = buffer.lane(0).unwrap();
        for op in ops {
            if op == 0 && lane.in_episode() {
                end(&mut lane, Wait::Never).unwrap();
            } else {
                push(&mut lane, Wait::Never).unwrap();
            }
            prop_assert_eq!(counts(&buffer).0, buffer.len() as u64);
        }
    }

    /// `windows_completed_by(n, end)` predicts, before they run, the windows that `n`
    /// pushes and then an episode's end (if `end`) install: what a shard whose limiter is
    /// elsewhere admits for a chunk of steps.
    #[test]
    fn a_chunk_of_steps_is_counted_before_it_runs(
        window in 1usize..6,
        period in 1usize..4,
        nstep in prop::option::of(1usize..8),
        drop_partial in any::<bool>(),
        chunks in prop::collection::vec((0u64..12, any::<bool>()), 1..30),
    ) {
        let steps = 512usize.div_ceil(period) * period;
        let mut b = SequenceConfig::builder(1, steps, schema())
            .window(window)
            .period(period)
            .partial(if drop_partial { Partial::Drop } else { Partial::Keep })
            .next_of("obs");
        if let Some(n) = nstep {
            b = b.nstep(n, 0.9, "reward");
        }
        let buffer = SequenceBuffer::new(b.build().unwrap()).unwrap();
        let mut lane = buffer.lane(0).unwrap();
        for (n, end_it) in chunks {
            let end_it = end_it && (n > 0 || lane.in_episode());
            let predicted = lane.windows_completed_by(n, end_it);
            let before = buffer.len();
            for _ in 0..n {
                push(&mut lane, Wait::Never).unwrap();
            }
            if end_it {
                end(&mut lane, Wait::Never).unwrap();
            }
            prop_assert_eq!(predicted, (buffer.len() - before) as u64);
        }
    }
}

/// A count asked for more steps than a lane can ever take is a bound, not an overflow: it
/// saturates, and counts at least what any smaller chunk would.
#[test]
fn a_count_for_endless_steps_saturates() {
    let config = SequenceConfig::builder(1, 64, schema())
        .window(2)
        .next_of("obs")
        .build()
        .unwrap();
    let buffer = SequenceBuffer::new(config).unwrap();
    let mut lane = buffer.lane(0).unwrap();
    for _ in 0..5 {
        push(&mut lane, Wait::Never).unwrap();
    }
    let endless = lane.windows_completed_by(u64::MAX, true);
    assert!(endless >= lane.windows_completed_by(1 << 40, true));
    assert!(endless >= lane.windows_completed_by(u64::MAX - 1, false));
    assert_eq!(lane.position(), 5, "counting changes nothing");
}
