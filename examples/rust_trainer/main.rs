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
        "RESULT trainer=rust env={} algo={} seed={} actors={} learners={} variant={variant} solved={} solved_steps={} solved_s={:.2} later_ok={evals_after_ok} later={evals_after} wall_s={wall:.2} env_steps={} grad_steps={} priority_updates={updates} device={} nstep={}",
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
        if device == Device::Cpu { "cpu" } else { "cuda" },
        o.nstep
    );
}

/// The options with `--auto`'s thread counts chosen, the device and the hyperparameters;
/// torch's generator seeded.
fn prepare(mut o: Options) -> Result<(Options, Device, Hyper), String> {
    let device = device_for(&o)?;
    let h = hyper_for(&o);
    tch::manual_seed(o.seed as i64);
    if o.automatic {
        choose_threads(&mut o, &h, device);
    }
    tch::manual_seed(o.seed as i64);
    Ok((o, device, h))
}

/// The checkpoint `--resume` continues from, if there is one.
fn resume_point(o: &Options) -> Result<Option<ckpt::Resume>, String> {
    let resumed = match o.resume {
        true => ckpt::find(o)?,
        false => None,
    };
    if o.resume && resumed.is_none() {
        println!("--resume: no checkpoint in {}: a new run", o.checkpoint);
    }
    if let Some(r) = &resumed {
        // torch's generator (TD3's target noise, the device sampler's draws) is reseeded.
        tch::manual_seed(o.seed.wrapping_add(r.steps as u64) as i64);
    }
    Ok(resumed)
}

/// What a resumed run takes back from its checkpoint besides the buffer and the rate
/// control's counts (given to `RateControl::new`): the networks and the optimizer and the
/// statistics. Returns the evaluations
/// made so far.
fn restore(r: &mut ckpt::Resume, run: &Run<'_>) -> Result<u64, String> {
    run.server.restore(std::mem::take(&mut r.tensors))?;
    run.stats.episodes.store(r.episodes, Ordering::Relaxed);
    run.stats
        .priority_updates
        .store(r.priority_updates, Ordering::Relaxed);
    run.stats
        .stale_updates
        .store(r.stale_updates, Ordering::Relaxed);
    println!(
        "resumed from {} at env step {}: buffer len {}, inserted {}, round {}",
        r.dir.display(),
        r.steps,
        run.buffer.len(),
        run.buffer.inserted(),
        run.server.round()
    );
    Ok(r.evaluations)
}

/// What the monitor, the checkpoints and the report read of a running trainer.
struct Run<'a> {
    o: &'a Options,
    buffer: &'a dyn Replay,
    server: &'a ParamServer<'a>,
    rate: &'a RateControl,
    stats: &'a Stats,
    rngs: &'a ckpt::RngBoard,
    board: &'a SnapshotBoard,
    actors_left: &'a AtomicUsize,
    t0: Instant,
}

impl Run<'_> {
    fn counters(&self, evaluations: u64) -> ckpt::Counters {
        ckpt::Counters {
            steps: self.rate.steps(),
            granted: self.rate.granted(),
            episodes: self.stats.episodes.load(Ordering::Relaxed),
            priority_updates: self.stats.priority_updates.load(Ordering::Relaxed),
            stale_updates: self.stats.stale_updates.load(Ordering::Relaxed),
            evaluations,
        }
    }

    /// Saves a checkpoint as the run is (the caller makes it quiet) and says where.
    fn save(&self, evaluations: u64) -> Result<(), String> {
        let dir = ckpt::save(
            self.o,
            self.buffer,
            self.server.state_tensors(),
            &self.counters(evaluations),
            self.rngs,
        )?;
        if let Some(dir) = dir {
            println!(
                "checkpoint at {} env steps: {} (buffer len {})",
                self.rate.steps(),
                dir.display(),
                self.buffer.len()
            );
            let _ = std::io::stdout().flush();
        }
        Ok(())
    }

    /// Holds the learners at a round's end and the actors at their next step, saves, and
    /// lets them go on (ckpt.rs).
    fn checkpoint_now(&self, evaluations: u64) -> Result<(), String> {
        self.server.hold();
        while !self.server.quiet() && self.stats.failure().is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.rate.hold();
        while self.rate.parked() < self.actors_left.load(Ordering::Acquire)
            && self.stats.failure().is_none()
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        let result = match self.stats.failure() {
            Some(e) => Err(e),
            None => self.save(evaluations),
        };
        self.rate.release();
        self.server.release();
        result
    }
}

/// The main thread while the actors and learners run: greedy evaluations every
/// `--eval-every` env steps, checkpoints every `--checkpoint-every`, a progress line and CSV
/// row every `--progress-seconds`; and what the evaluations found.
struct Monitor<'a> {
    run: &'a Run<'a>,
    csv: Option<std::io::BufWriter<std::fs::File>>,
    threshold: f64,
    eval_count: u64,
    solved: Option<(i64, f64)>,
    evals_after: i32,
    evals_after_ok: i32,
    last_eval: f64,
    next_eval: i64,
    next_checkpoint: i64,
    next_progress: f64,
    /// Env steps, gradient steps and seconds at the last progress line.
    last: (i64, i64, f64),
}

impl<'a> Monitor<'a> {
    fn new(
        run: &'a Run<'a>,
        csv: Option<std::io::BufWriter<std::fs::File>>,
        eval_count: u64,
    ) -> Monitor<'a> {
        let (o, first) = (run.o, run.rate.steps());
        Monitor {
            run,
            csv,
            threshold: solve_threshold(o),
            eval_count,
            solved: None,
            evals_after: 0,
            evals_after_ok: 0,
            last_eval: f64::NAN,
            next_eval: (first / o.eval_every + 1) * o.eval_every,
            next_checkpoint: (first / o.checkpoint_every + 1) * o.checkpoint_every,
            next_progress: o.progress_seconds,
            last: (0, 0, 0.0),
        }
    }

    /// Until the actors are done, a thread fails, `--max-seconds` passes or (with
    /// `--stop-when-solved`) an evaluation solves the task.
    fn watch(&mut self) -> Result<(), String> {
        let (o, rate, run) = (self.run.o, self.run.rate, self.run);
        loop {
            let done = run.actors_left.load(Ordering::Acquire) == 0 && rate.steps() >= o.steps;
            let t = run.t0.elapsed().as_secs_f64();
            let steps = rate.steps();
            if (steps >= self.next_eval || (done && self.eval_count == 0)) && self.evaluate(steps) {
                return Ok(());
            }
            if !o.checkpoint.is_empty() && steps >= self.next_checkpoint && !done {
                run.checkpoint_now(self.eval_count)?;
                while self.next_checkpoint <= rate.steps() {
                    self.next_checkpoint += o.checkpoint_every;
                }
            }
            if t >= self.next_progress || done {
                self.progress(t, steps);
            }
            if done {
                return Ok(());
            }
            if let Some(e) = run.stats.failure() {
                return Err(e);
            }
            if o.max_seconds > 0.0 && t >= o.max_seconds {
                println!("stopping: --max-seconds {:.1} reached", o.max_seconds);
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A greedy evaluation of the latest policy; true when the run is to stop
    /// (`--stop-when-solved` and solved).
    fn evaluate(&mut self, steps: i64) -> bool {
        let o = self.run.o;
        let snap = self.run.board.get();
        let ret = evaluate(o, &snap.policy, o.eval_episodes, self.eval_count);
        self.eval_count += 1;
        self.last_eval = ret;
        let te = self.run.t0.elapsed().as_secs_f64();
        let ok = ret >= self.threshold;
        if self.solved.is_some() {
            self.evals_after += 1;
            self.evals_after_ok += ok as i32;
        } else if ok {
            self.solved = Some((steps, te));
        }
        println!(
            "[{te:7.1}s] eval at {steps} env steps (round {}): mean greedy return {ret:.1} over {} episodes{}",
            snap.round,
            o.eval_episodes,
            if !ok { "" } else if self.evals_after == 0 { "  SOLVED" } else { "  (>= threshold)" }
        );
        let _ = std::io::stdout().flush();
        self.row("eval", te, ret, f64::NAN, f64::NAN);
        while self.next_eval <= steps {
            self.next_eval += o.eval_every;
        }
        self.solved.is_some() && o.stop_when_solved
    }

    /// The progress line and its CSV row: rates since the last one.
    fn progress(&mut self, t: f64, steps: i64) {
        let (run, o) = (self.run, self.run.o);
        let grads = run.server.round();
        let (last_steps, last_grads, last_t) = self.last;
        let dt = (t - last_t).max(1e-9);
        let sps = (steps - last_steps) as f64 / dt;
        let gps = (grads - last_grads) as f64 / dt;
        println!(
            "[{t:7.1}s] env steps {steps} ({sps:.0}/s)  grad steps {grads} ({gps:.0}/s)  buffer {}/{}  episodes {}  return(100) {:.1}  priorities {} (stale {})",
            run.buffer.len(),
            o.capacity,
            run.stats.episodes.load(Ordering::Relaxed),
            run.stats.mean_return(),
            run.stats.priority_updates.load(Ordering::Relaxed),
            run.stats.stale_updates.load(Ordering::Relaxed)
        );
        let _ = std::io::stdout().flush();
        self.row("progress", t, f64::NAN, sps, gps);
        self.last = (steps, grads, t);
        while self.next_progress <= t {
            self.next_progress += o.progress_seconds;
        }
    }

    fn row(&mut self, kind: &str, t: f64, eval: f64, sps: f64, gps: f64) {
        let run = self.run;
        if let Some(f) = &mut self.csv {
            let _ = writeln!(
                f,
                "{kind},{t:.6},{},{},{},{},{},{},{},{},{:.6},{},{}",
                run.rate.steps(),
                run.server.round(),
                run.stats.episodes.load(Ordering::Relaxed),
                run.buffer.len(),
                num(run.stats.mean_return()),
                num(eval),
                num(sps),
                num(gps),
                run.stats.loss(),
                run.stats.priority_updates.load(Ordering::Relaxed),
                run.stats.stale_updates.load(Ordering::Relaxed)
            );
        }
    }

    /// Flushes the CSV and sums the run up.
    fn finish(mut self) -> Result<Outcome, String> {
        if let Some(f) = self.csv.as_mut() {
            f.flush()
                .map_err(|e| format!("writing {}: {e}", self.run.o.csv))?;
        }
        Ok(Outcome {
            wall: self.run.t0.elapsed().as_secs_f64(),
            env_steps: self.run.rate.steps(),
            grad_steps: self.run.server.round(),
            threshold: self.threshold,
            solved: self.solved,
            evals_after: self.evals_after,
            evals_after_ok: self.evals_after_ok,
            last_eval: self.last_eval,
        })
    }
}

fn train(o: Options) -> Result<(), String> {
    let (o, device, h) = prepare(o)?;
    let mut resumed = resume_point(&o)?;
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
    let counts = resumed.as_ref().map(|r| (r.steps, r.granted));
    let rate = RateControl::new(o.replay_ratio, o.warmup, o.steps, slack, o.batch, counts)?;
    let stats = Stats::default();
    let rngs = ckpt::RngBoard::new(o.seed, o.actors, o.learners, resumed.as_ref());
    let actors_left = AtomicUsize::new(o.actors);
    let mut run = Run {
        o: &o,
        buffer: &*buffer,
        server: &server,
        rate: &rate,
        stats: &stats,
        rngs: &rngs,
        board: &board,
        actors_left: &actors_left,
        t0: Instant::now(),
    };
    let eval_count = match &mut resumed {
        Some(r) => restore(r, &run)?,
        None => 0,
    };
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
    let csv = open_csv(&o.csv)?;
    run.t0 = Instant::now();
    let mut monitor = Monitor::new(&run, csv, eval_count);
    std::thread::scope(|sc| -> Result<(), String> {
        for i in 0..o.learners {
            let (s, server) = (&s, &server);
            sc.spawn(move || run_learner(s, i, server, o.steps));
        }
        for i in 0..o.actors {
            let (s, left) = (&s, &actors_left);
            sc.spawn(move || run_actor(s, i, left));
        }
        let result = monitor.watch();
        rate.stop();
        server.stop();
        result
    })?;
    if !o.checkpoint.is_empty() {
        // Every thread has stopped: the state is quiet as it is.
        run.save(monitor.eval_count)?;
    }
    let outcome = monitor.finish()?;
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
