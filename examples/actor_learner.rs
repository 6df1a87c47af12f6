//! The main job: an actor/learner-style loop on one thread with a CartPole-sized buffer.
//!
//! The "actor" steps a tiny synthetic environment and inserts transitions in local batches;
//! the "learner" samples stratified batches, computes fake TD errors from the sampled
//! rewards and writes them back as priorities. Prints progress and throughput.
//!
//! Run: `cargo run --release --example actor_learner -- [steps] [capacity] [fanout]`
//! (defaults: 2,000,000 environment steps, capacity 2^20, fanout 8).

use kary_replay::{Config, DType, ReplayBuffer, SampleBatch, SampleMode, Schema};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::time::Instant;

const BATCH: usize = 256;
const ACTOR_FLUSH: usize = 64;
const UPDATE_INTERVAL: usize = 32; // environment steps per learner step (replay ratio 8)

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let steps: usize = args.next().map_or(Ok(2_000_000), |s| s.parse())?;
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
    let mut buffer = ReplayBuffer::new(config)?;
    println!(
        "buffer: capacity {capacity}, fanout {fanout}, {:.1} MiB",
        buffer.memory_bytes() as f64 / (1 << 20) as f64
    );

    let mut rng = SmallRng::seed_from_u64(42);
    let mut state = [0f32; 4];
    let (mut obs, mut next): (Vec<f32>, Vec<f32>) = (Vec::new(), Vec::new());
    let (mut act, mut rew, mut done): (Vec<i64>, Vec<f32>, Vec<bool>) =
        (Vec::new(), Vec::new(), Vec::new());
    let mut batch = SampleBatch::default();
    let mut td = vec![0.0; BATCH];
    let (mut inserted, mut sampled, mut stale) = (0usize, 0usize, 0usize);
    let (mut insert_time, mut learn_time) = (0.0f64, 0.0f64);
    let start = Instant::now();
    let report_every = (steps / 10).max(1);

    for step in 1..=steps {
        // Actor: one environment step into the local batch.
        let action = rng.random_range(0..2i64);
        let mut s2 = state;
        s2[0] += if action == 1 { 0.01 } else { -0.01 };
        s2[1] = rng.random::<f32>() - 0.5;
        let terminal = s2[0].abs() > 2.4;
        obs.extend_from_slice(&state);
        act.push(action);
        rew.push(if terminal { 0.0 } else { 1.0 });
        next.extend_from_slice(&s2);
        done.push(terminal);
        state = if terminal { [0.0; 4] } else { s2 };

        if act.len() == ACTOR_FLUSH {
            let t = Instant::now();
            buffer.insert_batch(
                &[
                    (&obs).into(),
                    (&act).into(),
                    (&rew).into(),
                    (&next).into(),
                    (&done).into(),
                ],
                None,
            )?;
            insert_time += t.elapsed().as_secs_f64();
            inserted += act.len();
            for v in [&mut obs, &mut next] {
                v.clear();
            }
            act.clear();
            rew.clear();
            done.clear();
        }

        // Learner: sample, "train", write TD errors back.
        if step % UPDATE_INTERVAL == 0 && buffer.len() >= BATCH {
            let t = Instant::now();
            buffer.sample_into(BATCH, 0.4, SampleMode::Stratified, &mut rng, &mut batch)?;
            let rewards = batch.columns[2].as_f32().expect("reward is f32");
            for ((e, &r), &w) in td.iter_mut().zip(rewards).zip(&batch.weights) {
                *e = (f64::from(r) - 0.5).abs() * w + 1e-3 + rng.random::<f64>();
            }
            let report = buffer.update_priorities(&batch.keys, &td)?;
            learn_time += t.elapsed().as_secs_f64();
            sampled += BATCH;
            stale += report.stale;
        }

        if step % report_every == 0 {
            println!(
                "step {step:>9}: stored {:>8}, total priority {:>12.1}, sampled {sampled:>10}",
                buffer.len(),
                buffer.total_priority()
            );
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let consistency = buffer.tree().check();
    println!("done in {wall:.2} s");
    println!(
        "actor:   {inserted} inserts, {:.1} M items/s inside insert_batch",
        inserted as f64 / insert_time / 1e6
    );
    println!(
        "learner: {sampled} sampled + updated, {:.1} M items/s inside sample+update ({stale} stale)",
        sampled as f64 / learn_time / 1e6
    );
    // Writes recompute each touched parent from its children: exact with no rebuild.
    println!(
        "tree exact (every node the sum of its children, bit for bit): {}",
        consistency.exact && consistency.extrema_exact
    );
    assert!(consistency.exact && consistency.extrema_exact);
    Ok(())
}
