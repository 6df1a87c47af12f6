//! The main job on threads: actor threads step a tiny synthetic environment and insert
//! transitions while learner threads sample stratified batches and write TD errors back,
//! all on one shared concurrent buffer. Runs each of the three variants in turn and prints
//! throughput and the checks made at the end (every insert accounted for, tree consistent).
//!
//! Run: `cargo run --release --example parallel_actors_learners -- [steps] [capacity] [fanout]`
//! (defaults: 1,000,000 environment steps in all, capacity 2^20, fanout 8; 2 actors and
//! 2 learners; a learner step of 256 per 32 environment steps, replay ratio 8). Actors
//! insert through a staged writer (`buffer.writer(32)`), one transition per step.
//!
//! Stale updates: each learner writes its batch's new priorities back by key; an entry is
//! dropped as stale when its item was evicted (FIFO) between the sample and the update, so
//! the share is about (items inserted during one learner step) / capacity for a full
//! buffer, and 0 while the buffer has never wrapped (a fresh key is never reported stale:
//! tests/stress.rs). The lazy-writing variants (SplitLock, LockFree) report a few more than
//! GlobalLock at the same insert rate because an eviction starts earlier there: a slot's
//! item is gone from the moment its writer owns the slot (lazy writing zeroes the leaf
//! then), not at the moment the new item is published, and a staged writer owns a whole
//! chunk of slots at once; an update that meets such a slot is stale a few microseconds
//! before GlobalLock would call it so. The line printed per variant gives the share and
//! the evictions that made it possible.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use kary_replay::{
    ConcurrentBuffer, Config, DType, Error, GlobalLockBuffer, LockFreeBuffer, SampleBatch,
    SampleMode, Schema, SplitLockBuffer,
};
use rand::{rngs::SmallRng, Rng, SeedableRng};

const ACTORS: usize = 2;
const LEARNERS: usize = 2;
const BATCH: usize = 256;
const UPDATE_INTERVAL: u64 = 32;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let steps: u64 = args.next().map_or(Ok(1_000_000), |s| s.parse())?;
    let capacity: usize = args.next().map_or(Ok(1 << 20), |s| s.parse())?;
    let fanout: usize = args.next().map_or(Ok(8), |s| s.parse())?;
    let schema = Schema::new()
        .column("obs", DType::F32, 4)
        .column("action", DType::I64, 1)
        .column("reward", DType::F32, 1)
        .column("next_obs", DType::F32, 4)
        .column("done", DType::Bool, 1);
    let config = Config::builder(capacity, schema)
        .fanout(fanout)
        .alpha(0.6)
        .build()?;
    println!("{ACTORS} actors, {LEARNERS} learners, {steps} environment steps, capacity {capacity}, fanout {fanout}");
    run(GlobalLockBuffer::new(config.clone())?, "GlobalLock", steps)?;
    run(SplitLockBuffer::new(config.clone())?, "SplitLock", steps)?;
    run(LockFreeBuffer::new(config)?, "LockFree", steps)?;
    Ok(())
}

fn run<B: ConcurrentBuffer>(buffer: B, name: &str, steps: u64) -> Result<(), Error> {
    let env_steps = AtomicU64::new(0);
    let learner_steps = AtomicU64::new(0);
    let actors_done = AtomicBool::new(false);
    let start = Instant::now();
    let (stale, updates) = std::thread::scope(|s| -> Result<(usize, usize), Error> {
        let actors: Vec<_> = (0..ACTORS)
            .map(|a| {
                let (buffer, env_steps) = (&buffer, &env_steps);
                s.spawn(move || -> Result<(), Error> {
                    let mut rng = SmallRng::seed_from_u64(a as u64);
                    let mut writer = buffer.writer(32)?;
                    let mut state = [0f32; 4];
                    for _ in 0..steps / ACTORS as u64 {
                        let action = rng.random_range(0..2i64);
                        let mut next = state;
                        next[0] += if action == 1 { 0.01 } else { -0.01 };
                        next[1] = rng.random::<f32>() - 0.5;
                        let terminal = next[0].abs() > 2.4;
                        let reward = [if terminal { 0.0f32 } else { 1.0 }];
                        writer.push(
                            &[
                                (&state).into(),
                                (&[action]).into(),
                                (&reward).into(),
                                (&next).into(),
                                (&[terminal]).into(),
                            ],
                            None,
                        )?;
                        env_steps.fetch_add(1, Ordering::Relaxed);
                        state = if terminal { [0.0; 4] } else { next };
                    }
                    writer.flush()?;
                    Ok(())
                })
            })
            .collect();
        let learners: Vec<_> = (0..LEARNERS)
            .map(|l| {
                let (buffer, env_steps, learner_steps, actors_done) =
                    (&buffer, &env_steps, &learner_steps, &actors_done);
                s.spawn(move || -> Result<(usize, usize), Error> {
                    let mut rng = SmallRng::seed_from_u64(100 + l as u64);
                    let mut batch = SampleBatch::default();
                    let mut td = vec![0.0; BATCH];
                    let (mut stale, mut updates) = (0, 0);
                    // Keep the replay ratio: one learner step per UPDATE_INTERVAL env steps.
                    loop {
                        let due = env_steps.load(Ordering::Relaxed) / UPDATE_INTERVAL;
                        if learner_steps.load(Ordering::Relaxed) >= due {
                            if actors_done.load(Ordering::Acquire) {
                                return Ok((stale, updates));
                            }
                            std::thread::yield_now();
                            continue;
                        }
                        learner_steps.fetch_add(1, Ordering::Relaxed);
                        match buffer.sample_into(
                            BATCH,
                            0.4,
                            SampleMode::Stratified,
                            &mut rng,
                            &mut batch,
                        ) {
                            Ok(()) => {}
                            Err(Error::Empty | Error::Contention { .. }) => continue,
                            Err(e) => return Err(e),
                        }
                        let rewards = batch.columns[2].as_f32().expect("reward is f32");
                        for ((e, &r), &w) in td.iter_mut().zip(rewards).zip(&batch.weights) {
                            *e = (f64::from(r) - 0.5).abs() * w + 1e-3 + rng.random::<f64>();
                        }
                        stale += buffer.update_priorities(&batch.keys, &td)?.stale;
                        updates += BATCH;
                    }
                })
            })
            .collect();
        for actor in actors {
            actor.join().expect("actor thread")?;
        }
        actors_done.store(true, Ordering::Release);
        let (mut stale, mut updates) = (0, 0);
        for learner in learners {
            let (s, u) = learner.join().expect("learner thread")?;
            stale += s;
            updates += u;
        }
        Ok((stale, updates))
    })?;
    let wall = start.elapsed().as_secs_f64();
    let inserted = buffer.inserted();
    let learned = learner_steps.load(Ordering::Relaxed);
    let consistency = buffer.consistency();
    println!(
        "{name:>10}: {wall:.2} s, {:.2} M inserts/s, {:.2} M sampled+updated items/s, \
         {stale} of {updates} updates stale ({:.3}%, {} evictions); \
         stored {}, inserted {inserted}, tree max relative error {:.1e}",
        inserted as f64 / wall / 1e6,
        (learned * BATCH as u64) as f64 / wall / 1e6,
        100.0 * stale as f64 / updates.max(1) as f64,
        inserted.saturating_sub(buffer.capacity() as u64),
        buffer.len(),
        consistency.max_rel_error,
    );
    assert_eq!(
        inserted,
        steps / ACTORS as u64 * ACTORS as u64,
        "an insert went missing"
    );
    assert_eq!(buffer.len(), (inserted as usize).min(buffer.capacity()));
    assert!(
        consistency.max_rel_error < 1e-9,
        "tree inconsistent: {consistency:?}"
    );
    Ok(())
}
