//! rust_trainer: the Rust half of the reference trainer pair. The same framework, algorithms,
//! flags, progress line, CSV and RESULT line as the C++ LibTorch trainer
//! (`examples/cpp_trainer/`), on tch and the crate's own API, with learners whose batches
//! live on a device:
//!
//!   actors (A threads)   own environment (`envs.rs`, bit-equal to gymnasium), own copy of
//!                        the policy (a plain-Rust MLP refreshed from the parameter server
//!                        every T env steps), exploration, transitions staged 16 at a time
//!                        and inserted with the default (running-max) priority;
//!   learners (L threads) sample B items with importance weights through
//!                        `gpu::HybridBuffer` (the CPU concurrent buffer of `--variant`
//!                        chooses the indices, the columns live on the device: only the B
//!                        indices go to the device and the B weights with them) or
//!                        `gpu::DeviceBuffer` (tree and columns on the device), `--sampler`;
//!                        a sampled batch never passes through the host; each learner
//!                        computes the loss and gradients on its replica and writes
//!                        |TD error| + eps back by key (optionally D batches late);
//!   parameter server     the last learner of each round averages the L gradients, steps
//!                        Adam, updates the targets and publishes the policy;
//!   rate control         holds the replay ratio (gradient samples per transition);
//!   monitor (main)       progress line and CSV row every few seconds, greedy evaluation
//!                        every E env steps.
//!
//!   checkpoints          with `--checkpoint DIR`, every N env steps and at the end
//!                        (`ckpt.rs`); `--resume` continues from the newest.
//!
//! `--device` is `cuda` by default where CUDA is available, else `cpu`. Build and run:
//! `examples/rust_trainer/run.sh [flags]` (examples/rust_trainer/README.md).

mod actor;
mod ckpt;
mod cli;
mod dse;
mod envs;
mod learner;
mod monitor;
mod nets;
mod optim;
mod policy;
mod rate;
mod replay;

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actor::*;
use cli::*;
use dse::*;
use envs::Rng;
use kary_replay::RandomSource;
use learner::*;
use monitor::*;
use nets::*;
use optim::*;
use policy::*;
use rate::*;
use replay::*;
use tch::Device;

impl RandomSource for Rng {
    fn next_f64(&mut self) -> f64 {
        self.uniform()
    }
}

// ---------------------------------------------------------------------------------------

fn num(v: f64) -> String {
    if v.is_nan() {
        String::new()
    } else {
        format!("{v:.6}")
    }
}

/// The device `--device` names (`auto`: CUDA where there is one).
fn device_for(o: &Options) -> Result<Device, String> {
    Ok(match o.device.as_str() {
        "cpu" => Device::Cpu,
        "cuda" if tch::Cuda::is_available() => Device::Cuda(0),
        "cuda" => {
            return Err(
                "--device cuda: CUDA is not available (tch::Cuda::is_available() is false)".into(),
            )
        }
        _ => Device::cuda_if_available(),
    })
}

/// The CSV of `--csv` with its header written, or None without one.
fn open_csv(path: &str) -> Result<Option<std::io::BufWriter<std::fs::File>>, String> {
    if path.is_empty() {
        return Ok(None);
    }
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).map_err(|e| format!("cannot write {path}: {e}"))?,
    );
    writeln!(
        f,
        "kind,wall_s,env_steps,grad_steps,episodes,buffer_len,train_return_100,eval_return,env_steps_per_s,grad_steps_per_s,loss,priority_updates,stale_updates"
    )
    .map_err(|e| e.to_string())?;
    Ok(Some(f))
}

/// What a finished run prints: the totals, whether and when it solved the task, and the one
/// machine-readable line that bench/trainer_results.py reads (the C++ trainer's, with
/// trainer=rust and the sampler and device).
struct Outcome {
    wall: f64,
    env_steps: i64,
    grad_steps: i64,
    threshold: f64,
    solved: Option<(i64, f64)>,
    evals_after: i32,
    evals_after_ok: i32,
    last_eval: f64,
}

fn report(o: &Options, stats: &Stats, device: Device, r: &Outcome) {
    let (updates, stale) = (
        stats.priority_updates.load(Ordering::Relaxed),
        stats.stale_updates.load(Ordering::Relaxed),
    );
    let (wall, threshold, evals_after, evals_after_ok) =
        (r.wall, r.threshold, r.evals_after, r.evals_after_ok);
    println!(
        "done: {} env steps, {} gradient steps, {} episodes in {wall:.1} s; {updates} priority updates applied, {stale} stale; {} sampling retries",
        r.env_steps,
        r.grad_steps,
        stats.episodes.load(Ordering::Relaxed),
        stats.contention_retries.load(Ordering::Relaxed)
    );
    match r.solved {
        Some((st, ts)) => println!(
            "solved: first greedy evaluation >= {threshold} at {st} env steps, {ts:.1} s; later evaluations >= threshold: {evals_after_ok} of {evals_after}"
        ),
        None => println!(
            "not solved: no greedy evaluation reached {threshold} (last {:.1})",
            r.last_eval
        ),
    }
    let variant = match o.sampler {
        Sampler::Hybrid => o.variant.clone(),
        Sampler::Device => "device".into(),
    };
    println!(
        "RESULT trainer=rust env={} algo={} seed={} actors={} learners={} variant={variant} solved={} solved_steps={} solved_s={:.2} later_ok={evals_after_ok} later={evals_after} wall_s={wall:.2} env_steps={} grad_steps={} priority_updates={updates} device={}",
        o.env,
        o.algo,
        o.seed,
        o.actors,
        o.learners,
        r.solved.is_some() as i32,
        r.solved.map_or(-1, |x| x.0),
        r.solved.map_or(-1.0, |x| x.1),
        r.env_steps,
        r.grad_steps,
        if device == Device::Cpu { "cpu" } else { "cuda" }
    );
}

fn train(mut o: Options) -> Result<(), String> {
    let device = device_for(&o)?;
    let h = hyper_for(&o);
    tch::manual_seed(o.seed as i64);
    if o.automatic {
        choose_threads(&mut o, &h, device);
    }
    tch::manual_seed(o.seed as i64);
    let o = o;
    let mut resumed = match o.resume {
        true => ckpt::find(&o)?,
        false => None,
    };
    if o.resume && resumed.is_none() {
        println!("--resume: no checkpoint in {}: a new run", o.checkpoint);
    }
    if let Some(r) = &resumed {
        // torch's generator (TD3's target noise, the device sampler's draws) is reseeded.
        tch::manual_seed(o.seed.wrapping_add(r.steps as u64) as i64);
    }
    let d = dims_for(&o);
    let from = resumed.as_ref().map(|r| r.dir.clone());
    let buffer = make_replay(&o, &h, &d, o.capacity, device, from.as_deref())
        .map_err(|e| format!("buffer: {e}"))?;
    let board = SnapshotBoard::default();
    let server = ParamServer::new(
        &o,
        &h,
        Agent::new(&o, &h, device, false),
        o.learners,
        &board,
    );
    // Slack: two rounds of every learner, or 2 x 16 transitions per actor, whichever is more.
    let slack = ((2 * o.learners * o.batch) as i64)
        .max((2.0 * STAGE as f64 * o.actors as f64 * o.replay_ratio).ceil() as i64);
    let rate = RateControl::new(o.replay_ratio, o.warmup, o.steps, slack);
    let stats = Stats::default();
    let rngs = ckpt::RngBoard::new(o.seed, o.actors, o.learners, resumed.as_ref());
    let mut eval_count = 0u64;
    if let Some(r) = &mut resumed {
        server.restore(std::mem::take(&mut r.tensors))?;
        rate.restore(r.steps, r.granted);
        stats.episodes.store(r.episodes, Ordering::Relaxed);
        stats
            .priority_updates
            .store(r.priority_updates, Ordering::Relaxed);
        stats
            .stale_updates
            .store(r.stale_updates, Ordering::Relaxed);
        eval_count = r.evaluations;
        println!(
            "resumed from {} at env step {}: buffer len {}, inserted {}, round {}",
            r.dir.display(),
            r.steps,
            buffer.len(),
            buffer.inserted(),
            server.round()
        );
    }
    let s = Shared {
        o: &o,
        h: &h,
        dims: d,
        device,
        buffer: &*buffer,
        rate: &rate,
        board: &board,
        stats: &stats,
        rngs: &rngs,
    };

    println!(
        "rust_trainer: {} {}, {} actors + {} learners, {} K={} capacity {} on {:?}, batch {}, replay ratio {}, {} env steps, seed {}",
        o.env, o.algo, o.actors, o.learners, buffer.name(), o.fanout, o.capacity, device, o.batch,
        o.replay_ratio, o.steps, o.seed
    );
    let _ = std::io::stdout().flush();

    let mut csv = open_csv(&o.csv)?;
    let t0 = Instant::now();
    let actors_left = AtomicUsize::new(o.actors);
    let threshold = solve_threshold(&o);
    let mut solved: Option<(i64, f64)> = None;
    let (mut evals_after, mut evals_after_ok) = (0, 0);
    let counters = |evaluations: u64| ckpt::Counters {
        steps: rate.steps(),
        granted: rate.granted(),
        episodes: stats.episodes.load(Ordering::Relaxed),
        priority_updates: stats.priority_updates.load(Ordering::Relaxed),
        stale_updates: stats.stale_updates.load(Ordering::Relaxed),
        evaluations,
    };
    let saved = |dir: Option<std::path::PathBuf>| {
        if let Some(dir) = dir {
            println!(
                "checkpoint at {} env steps: {} (buffer len {})",
                rate.steps(),
                dir.display(),
                buffer.len()
            );
            let _ = std::io::stdout().flush();
        }
    };
    // Holds the learners at a round's end and the actors at their next step, saves, and
    // lets them go on (ckpt.rs).
    let checkpoint_now = |evaluations: u64| -> Result<(), String> {
        server.hold();
        while !server.quiet() && stats.failure().is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        rate.hold();
        while rate.parked() < actors_left.load(Ordering::Acquire) && stats.failure().is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let result = match stats.failure() {
            Some(e) => Err(e),
            None => ckpt::save(
                &o,
                &*buffer,
                server.state_tensors(),
                &counters(evaluations),
                &rngs,
            ),
        };
        rate.release();
        server.release();
        saved(result?);
        Ok(())
    };
    let mut last_eval = f64::NAN;
    std::thread::scope(|sc| -> Result<(), String> {
        for i in 0..o.learners {
            let (s, server) = (&s, &server);
            sc.spawn(move || run_learner(s, i, server, o.steps));
        }
        for i in 0..o.actors {
            let (s, left) = (&s, &actors_left);
            sc.spawn(move || run_actor(s, i, left));
        }
        let first = rate.steps();
        let mut next_eval = (first / o.eval_every + 1) * o.eval_every;
        let mut next_checkpoint = (first / o.checkpoint_every + 1) * o.checkpoint_every;
        let mut next_progress = o.progress_seconds;
        let (mut last_steps, mut last_grads, mut last_t) = (0i64, 0i64, 0.0f64);
        let row = |csv: &mut Option<std::io::BufWriter<std::fs::File>>,
                   kind: &str,
                   t: f64,
                   eval: f64,
                   sps: f64,
                   gps: f64| {
            if let Some(f) = csv {
                let _ = writeln!(
                    f,
                    "{kind},{t:.6},{},{},{},{},{},{},{},{},{:.6},{},{}",
                    rate.steps(),
                    server.round(),
                    stats.episodes.load(Ordering::Relaxed),
                    buffer.len(),
                    num(stats.mean_return()),
                    num(eval),
                    num(sps),
                    num(gps),
                    stats.loss(),
                    stats.priority_updates.load(Ordering::Relaxed),
                    stats.stale_updates.load(Ordering::Relaxed)
                );
            }
        };
        let result = loop {
            let done = actors_left.load(Ordering::Acquire) == 0 && rate.steps() >= o.steps;
            let t = t0.elapsed().as_secs_f64();
            let steps = rate.steps();
            if steps >= next_eval || (done && eval_count == 0) {
                let snap = board.get();
                let ret = evaluate(&o, &snap.policy, o.eval_episodes, eval_count);
                eval_count += 1;
                last_eval = ret;
                let te = t0.elapsed().as_secs_f64();
                let ok = ret >= threshold;
                if solved.is_some() {
                    evals_after += 1;
                    evals_after_ok += ok as i32;
                } else if ok {
                    solved = Some((steps, te));
                }
                println!(
                    "[{te:7.1}s] eval at {steps} env steps (round {}): mean greedy return {ret:.1} over {} episodes{}",
                    snap.round,
                    o.eval_episodes,
                    if !ok { "" } else if evals_after == 0 { "  SOLVED" } else { "  (>= threshold)" }
                );
                let _ = std::io::stdout().flush();
                row(&mut csv, "eval", te, ret, f64::NAN, f64::NAN);
                while next_eval <= steps {
                    next_eval += o.eval_every;
                }
                if solved.is_some() && o.stop_when_solved {
                    break Ok(());
                }
            }
            if !o.checkpoint.is_empty() && steps >= next_checkpoint && !done {
                if let Err(e) = checkpoint_now(eval_count) {
                    break Err(e);
                }
                while next_checkpoint <= rate.steps() {
                    next_checkpoint += o.checkpoint_every;
                }
            }
            if t >= next_progress || done {
                let grads = server.round();
                let dt = (t - last_t).max(1e-9);
                let sps = (steps - last_steps) as f64 / dt;
                let gps = (grads - last_grads) as f64 / dt;
                println!(
                    "[{t:7.1}s] env steps {steps} ({sps:.0}/s)  grad steps {grads} ({gps:.0}/s)  buffer {}/{}  episodes {}  return(100) {:.1}  priorities {} (stale {})",
                    buffer.len(),
                    o.capacity,
                    stats.episodes.load(Ordering::Relaxed),
                    stats.mean_return(),
                    stats.priority_updates.load(Ordering::Relaxed),
                    stats.stale_updates.load(Ordering::Relaxed)
                );
                let _ = std::io::stdout().flush();
                row(&mut csv, "progress", t, f64::NAN, sps, gps);
                (last_steps, last_grads, last_t) = (steps, grads, t);
                while next_progress <= t {
                    next_progress += o.progress_seconds;
                }
            }
            if done {
                break Ok(());
            }
            if let Some(e) = stats.failure() {
                break Err(e);
            }
            if o.max_seconds > 0.0 && t >= o.max_seconds {
                println!("stopping: --max-seconds {:.1} reached", o.max_seconds);
                break Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        rate.stop();
        server.stop();
        result
    })?;
    if let Some(f) = csv.as_mut() {
        f.flush().map_err(|e| format!("writing {}: {e}", o.csv))?;
    }
    if !o.checkpoint.is_empty() {
        // Every thread has stopped: the state is quiet as it is.
        saved(ckpt::save(
            &o,
            &*buffer,
            server.state_tensors(),
            &counters(eval_count),
            &rngs,
        )?);
    }
    let outcome = Outcome {
        wall: t0.elapsed().as_secs_f64(),
        env_steps: rate.steps(),
        grad_steps: server.round(),
        threshold,
        solved,
        evals_after,
        evals_after_ok,
        last_eval,
    };
    report(&o, &stats, device, &outcome);
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse_options(&args) {
        Ok(o) => o,
        Err(UsageError(msg)) => {
            if msg.is_empty() {
                println!("{USAGE}");
                std::process::exit(0);
            }
            eprintln!("rust_trainer: {msg}\n{USAGE}");
            std::process::exit(2);
        }
    };
    // One intra-op thread per actor or learner thread (TOOLCHAIN.md).
    tch::set_num_threads(1);
    tch::set_num_interop_threads(1);
    if let Err(e) = train(o) {
        eprintln!("rust_trainer: error: {e}");
        std::process::exit(1);
    }
}
