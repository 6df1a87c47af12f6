//! The trainer's framework pieces that need no LibTorch: the Rust twin of
//! `examples/cpp_trainer/framework.hpp` (same flags, same rate control, same equation-5
//! solver, same native policy), unit-tested below (`cargo test --features tch --example
//! rust_trainer`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// Command line

/// A bad flag or value: main prints it and the usage, and exits with code 2. An empty
/// message is `--help` (exit 0).
#[derive(Debug, PartialEq)]
pub struct UsageError(pub String);

/// Which replay buffer the learners sample from (`--sampler`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampler {
    /// `gpu::HybridBuffer`: the CPU concurrent buffer (`--variant`) chooses the indices,
    /// the columns live on the device.
    Hybrid,
    /// `gpu::DeviceBuffer`: the whole tree and the columns on the device.
    Device,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub env: String,  // cartpole | pendulum
    pub algo: String, // dqn | td3
    pub actors: usize,
    pub learners: usize,
    pub variant: String, // global | split | lockfree
    pub fanout: usize,
    pub batch: usize,
    pub capacity: usize,
    pub steps: i64,
    pub seed: u64,
    pub update_interval: i64,
    pub priority_delay: usize,
    pub replay_ratio: f64,
    pub csv: String,
    pub automatic: bool,
    pub eval_every: i64,
    pub eval_episodes: usize,
    pub warmup: i64,
    pub lr: f64,
    pub max_seconds: f64,
    pub progress_seconds: f64,
    pub profile_seconds: f64,
    pub max_threads: usize,
    pub stop_when_solved: bool,
    // The Rust trainer's own: where the learners' networks and batches live.
    /// `cpu` or `cuda`; empty: CUDA when available, else CPU.
    pub device: String,
    pub sampler: Sampler,
}

pub const USAGE: &str =
    "usage: rust_trainer [--env cartpole|pendulum] [--algo dqn|td3] [--actors A] [--learners L]
         [--variant global|split|lockfree] [--fanout K] [--batch B] [--capacity N]
         [--steps S] [--seed X] [--update-interval T] [--priority-delay D]
         [--replay-ratio R] [--csv PATH] [--auto] [--eval-every E] [--eval-episodes N]
         [--warmup W] [--lr LR] [--max-seconds S] [--progress-seconds S]
         [--profile-seconds S] [--max-threads M] [--stop-when-solved]
         [--device cpu|cuda] [--sampler hybrid|device]";

fn parse_int(flag: &str, v: &str, lo: i64, hi: i64) -> Result<i64, UsageError> {
    match v.parse::<i64>() {
        Ok(x) if (lo..=hi).contains(&x) => Ok(x),
        _ => Err(UsageError(format!(
            "{flag} needs an integer in [{lo}, {hi}], got '{v}'"
        ))),
    }
}

fn parse_num(flag: &str, v: &str, lo: f64, hi: f64) -> Result<f64, UsageError> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= lo && x <= hi => Ok(x),
        _ => Err(UsageError(format!(
            "{flag} needs a number in [{lo}, {hi}], got '{v}'"
        ))),
    }
}

/// Parses the arguments (without the program name). Defaults that depend on the
/// environment are filled in here (the trainer README's "Hyperparameters" table), as in the C++
/// trainer, so the result is final.
pub fn parse_options(args: &[String]) -> Result<Options, UsageError> {
    let mut o = Options {
        env: "cartpole".into(),
        algo: String::new(),
        actors: 1,
        learners: 1,
        variant: "split".into(),
        fanout: 8,
        batch: 0,
        capacity: 100_000,
        steps: 0,
        seed: 1,
        update_interval: 0,
        priority_delay: 0,
        replay_ratio: 0.0,
        csv: String::new(),
        automatic: false,
        eval_every: 0,
        eval_episodes: 0,
        warmup: -1,
        lr: 0.0,
        max_seconds: 0.0,
        progress_seconds: 2.0,
        profile_seconds: 1.0,
        max_threads: 0,
        stop_when_solved: false,
        device: String::new(),
        sampler: Sampler::Hybrid,
    };
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let mut value = || -> Result<String, UsageError> {
            i += 1;
            args.get(i)
                .cloned()
                .ok_or_else(|| UsageError(format!("{flag} needs a value")))
        };
        match flag {
            "--env" => {
                o.env = value()?;
                if o.env != "cartpole" && o.env != "pendulum" {
                    return Err(UsageError(format!(
                        "--env is cartpole or pendulum, got '{}'",
                        o.env
                    )));
                }
            }
            "--algo" => {
                o.algo = value()?;
                if o.algo != "dqn" && o.algo != "td3" {
                    return Err(UsageError(format!(
                        "--algo is dqn or td3, got '{}'",
                        o.algo
                    )));
                }
            }
            "--actors" => o.actors = parse_int(flag, &value()?, 1, 256)? as usize,
            "--learners" => o.learners = parse_int(flag, &value()?, 1, 256)? as usize,
            "--variant" => {
                o.variant = value()?;
                if !["global", "split", "lockfree"].contains(&o.variant.as_str()) {
                    return Err(UsageError(format!(
                        "--variant is global, split or lockfree, got '{}'",
                        o.variant
                    )));
                }
            }
            "--fanout" => {
                o.fanout = parse_int(flag, &value()?, 2, 64)? as usize;
                if !o.fanout.is_power_of_two() {
                    return Err(UsageError("--fanout is 2, 4, 8, 16, 32 or 64".into()));
                }
            }
            "--batch" => o.batch = parse_int(flag, &value()?, 1, 65536)? as usize,
            "--capacity" => o.capacity = parse_int(flag, &value()?, 1, 1 << 30)? as usize,
            "--steps" => o.steps = parse_int(flag, &value()?, 1, 1 << 40)?,
            "--seed" => o.seed = parse_int(flag, &value()?, 0, 1 << 62)? as u64,
            "--update-interval" => o.update_interval = parse_int(flag, &value()?, 1, 1 << 30)?,
            "--priority-delay" => {
                o.priority_delay = parse_int(flag, &value()?, 0, 1 << 20)? as usize
            }
            "--replay-ratio" => o.replay_ratio = parse_num(flag, &value()?, 1e-3, 1e6)?,
            "--csv" => {
                o.csv = value()?;
                if o.csv.is_empty() {
                    return Err(UsageError("--csv needs a path".into()));
                }
            }
            "--auto" => o.automatic = true,
            "--eval-every" => o.eval_every = parse_int(flag, &value()?, 1, 1 << 40)?,
            "--eval-episodes" => o.eval_episodes = parse_int(flag, &value()?, 1, 10000)? as usize,
            "--warmup" => o.warmup = parse_int(flag, &value()?, 0, 1 << 40)?,
            "--lr" => o.lr = parse_num(flag, &value()?, 1e-7, 1.0)?,
            "--max-seconds" => o.max_seconds = parse_num(flag, &value()?, 0.01, 1e7)?,
            "--progress-seconds" => o.progress_seconds = parse_num(flag, &value()?, 0.05, 1e5)?,
            "--profile-seconds" => o.profile_seconds = parse_num(flag, &value()?, 0.05, 600.0)?,
            "--max-threads" => o.max_threads = parse_int(flag, &value()?, 2, 1024)? as usize,
            "--stop-when-solved" => o.stop_when_solved = true,
            "--device" => {
                o.device = value()?;
                if o.device != "cpu" && o.device != "cuda" {
                    return Err(UsageError(format!(
                        "--device is cpu or cuda, got '{}'",
                        o.device
                    )));
                }
            }
            "--sampler" => {
                o.sampler = match value()?.as_str() {
                    "hybrid" => Sampler::Hybrid,
                    "device" => Sampler::Device,
                    other => {
                        return Err(UsageError(format!(
                            "--sampler is hybrid or device, got '{other}'"
                        )))
                    }
                }
            }
            "-h" | "--help" => return Err(UsageError(String::new())),
            _ => return Err(UsageError(format!("unknown flag '{flag}'"))),
        }
        i += 1;
    }
    let cartpole = o.env == "cartpole";
    if o.algo.is_empty() {
        o.algo = if cartpole { "dqn" } else { "td3" }.into();
    }
    if cartpole && o.algo != "dqn" {
        return Err(UsageError(
            "CartPole has discrete actions: --algo dqn".into(),
        ));
    }
    if !cartpole && o.algo != "td3" {
        return Err(UsageError(
            "Pendulum has continuous actions: --algo td3".into(),
        ));
    }
    let pick = |c: f64, p: f64| if cartpole { c } else { p };
    if o.batch == 0 {
        o.batch = pick(64.0, 128.0) as usize;
    }
    if o.steps == 0 {
        o.steps = pick(60000.0, 20000.0) as i64;
    }
    if o.replay_ratio == 0.0 {
        o.replay_ratio = pick(16.0, 128.0);
    }
    if o.update_interval == 0 {
        o.update_interval = pick(16.0, 1.0) as i64;
    }
    if o.warmup < 0 {
        o.warmup = 1000;
    }
    if o.lr == 0.0 {
        o.lr = 1e-3;
    }
    if o.eval_every == 0 {
        o.eval_every = pick(2000.0, 1000.0) as i64;
    }
    if o.eval_episodes == 0 {
        o.eval_episodes = pick(20.0, 10.0) as usize;
    }
    if o.capacity < o.batch {
        return Err(UsageError("--capacity must be at least --batch".into()));
    }
    Ok(o)
}

// ---------------------------------------------------------------------------------------
// Rate control: holds the replay ratio R (gradient samples per inserted transition), as
// `trainer::RateControl` in framework.hpp.
//
// Actors count env steps, learners reserve samples B at a time. After the warm-up W, a
// learner may take a batch only while granted + B <= R (steps - W), and an actor may step
// only while R (steps - W) <= granted + slack: neither side runs ahead of the other by more
// than the slack. The slack is at least one round of every learner (L B samples), so both
// sides never wait at once (no deadlock).
//
// ORDERING: `steps` and `granted` are counters each side moves by CAS (AcqRel) and the other
// reads (Acquire); no data is published through them, so any order would keep the counts
// right, and Acquire/AcqRel only make a waiter's re-check after a notify see the move that
// caused it. `stopped` is Release/Acquire; `waiting` is a hint (a missed notify costs at
// most the 5 ms wait timeout).
pub struct RateControl {
    ratio: f64,
    warmup: i64,
    total: i64,
    slack: i64,
    steps: AtomicI64,
    granted: AtomicI64,
    stopped: AtomicBool,
    waiting: AtomicUsize,
    mutex: Mutex<()>,
    cv: Condvar,
}

impl RateControl {
    pub fn new(ratio: f64, warmup: i64, total: i64, slack: i64) -> RateControl {
        RateControl {
            ratio,
            warmup,
            total,
            slack,
            steps: AtomicI64::new(0),
            granted: AtomicI64::new(0),
            stopped: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            mutex: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// The samples the ratio allows after `steps` env steps.
    pub fn allowed(&self, steps: i64) -> i64 {
        if steps <= self.warmup {
            0
        } else {
            (self.ratio * (steps - self.warmup) as f64).floor() as i64
        }
    }

    fn actor_must_wait(&self, s: i64) -> bool {
        self.allowed(s) > self.granted.load(Ordering::Acquire) + self.slack
    }

    fn notify(&self) {
        let _g = self.mutex.lock().unwrap();
        self.cv.notify_all();
    }

    fn wait_a_little(&self, ready: impl Fn() -> bool) {
        let g = self.mutex.lock().unwrap();
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let _ = self
            .cv
            .wait_timeout_while(g, Duration::from_millis(5), |_| !ready())
            .unwrap();
        self.waiting.fetch_sub(1, Ordering::AcqRel);
    }

    /// An actor calls this before each env step: false when the run is over (the budget is
    /// spent or `stop` was called); otherwise the step is counted as taken.
    pub fn actor_step(&self) -> bool {
        loop {
            let s = self.steps.load(Ordering::Acquire);
            if self.stopped() || s >= self.total {
                return false;
            }
            if !self.actor_must_wait(s) {
                if self
                    .steps
                    .compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    if self.waiting.load(Ordering::Acquire) > 0 {
                        self.notify();
                    }
                    return true;
                }
                continue;
            }
            self.wait_a_little(|| {
                let s = self.steps.load(Ordering::Acquire);
                self.stopped() || s >= self.total || !self.actor_must_wait(s)
            });
        }
    }

    /// A learner calls this before sampling a batch of `batch`: false when the run is over
    /// (stopped, or the actors are done and the ratio is met).
    pub fn learner_take(&self, batch: i64) -> bool {
        loop {
            let g = self.granted.load(Ordering::Acquire);
            if self.stopped() {
                return false;
            }
            let s = self.steps.load(Ordering::Acquire);
            if g + batch <= self.allowed(s) {
                if self
                    .granted
                    .compare_exchange_weak(g, g + batch, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    if self.waiting.load(Ordering::Acquire) > 0 {
                        self.notify();
                    }
                    return true;
                }
                continue;
            }
            if s >= self.total {
                return false; // no more data will come
            }
            self.wait_a_little(|| {
                let s = self.steps.load(Ordering::Acquire);
                self.stopped()
                    || self.granted.load(Ordering::Acquire) + batch <= self.allowed(s)
                    || s >= self.total
            });
        }
    }

    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.notify();
    }
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
    pub fn steps(&self) -> i64 {
        self.steps.load(Ordering::Acquire)
    }
    #[cfg_attr(not(test), allow(dead_code))] // the tests' invariant
    pub fn granted(&self) -> i64 {
        self.granted.load(Ordering::Acquire)
    }
}

// ---------------------------------------------------------------------------------------
// Design-space exploration: the paper's equation 5, as `trainer::solve_equation5`:
//   f_a(x_a) = update_interval x f_l(x_l),  x_a + x_l <= M.
// The exhaustive search takes the pair whose balanced rate min(f_a, update_interval f_l) is
// highest; among pairs within 2% of it, the smaller mismatch, then fewer threads.

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DseChoice {
    pub actors: usize,
    pub learners: usize,
    /// Env steps/s at the replay ratio.
    pub balanced: f64,
    /// |ln(f_a / (update_interval f_l))|.
    pub mismatch: f64,
}

/// `f_a[x-1]` and `f_l[x-1]` are the profiles for x threads. None when no pair fits in m.
pub fn solve_equation5(
    f_a: &[f64],
    f_l: &[f64],
    update_interval: f64,
    m: usize,
) -> Option<DseChoice> {
    let mut best: Option<DseChoice> = None;
    for xa in 1..=f_a.len() {
        for xl in 1..=f_l.len() {
            if xa + xl > m {
                continue;
            }
            let a = f_a[xa - 1];
            let l = update_interval * f_l[xl - 1];
            let c = DseChoice {
                actors: xa,
                learners: xl,
                balanced: a.min(l),
                mismatch: (a.max(1e-12) / l.max(1e-12)).ln().abs(),
            };
            let better = match best {
                None => true,
                Some(b) if c.balanced > b.balanced * 1.02 => true,
                Some(b) if c.balanced >= b.balanced / 1.02 => {
                    c.mismatch < b.mismatch - 1e-9
                        || ((c.mismatch - b.mismatch).abs() <= 1e-9
                            && xa + xl < b.actors + b.learners)
                }
                Some(_) => false,
            };
            if better {
                best = Some(c);
            }
        }
    }
    best
}

// ---------------------------------------------------------------------------------------
// The actors' and evaluators' policy: a ReLU MLP evaluated in plain Rust from a snapshot of
// the parameter server's weights (row-major [out, in] weights, then biases, per layer), as
// `trainer::Mlp`: a few microseconds per step.

#[derive(Clone, Debug, Default)]
pub struct NativeMlp {
    pub sizes: Vec<usize>,
    pub w: Vec<Vec<f32>>,
    pub b: Vec<Vec<f32>>,
    /// TD3's actor: tanh, then x this scale.
    pub tanh_scale: Option<f32>,
}

/// A NativeMlp's working memory (reused between calls; one per thread).
#[derive(Default)]
pub struct Scratch {
    x: Vec<f32>,
    y: Vec<f32>,
    out: Vec<f32>,
}

impl NativeMlp {
    /// Writes `sizes.last()` outputs into `out`.
    pub fn forward(&self, input: &[f32], out: &mut [f32], scratch: &mut Scratch) {
        let Scratch { x, y, .. } = scratch;
        x.clear();
        x.extend_from_slice(input);
        let layers = self.sizes.len() - 1;
        for layer in 0..layers {
            let (n_in, n_out) = (self.sizes[layer], self.sizes[layer + 1]);
            let last = layer + 1 == layers;
            y.clear();
            for o in 0..n_out {
                let row = &self.w[layer][o * n_in..(o + 1) * n_in];
                let mut acc = self.b[layer][o];
                for (w, v) in row.iter().zip(x.iter()) {
                    acc += w * v;
                }
                if !last {
                    acc = acc.max(0.0);
                } else if let Some(scale) = self.tanh_scale {
                    acc = scale * acc.tanh();
                }
                y.push(acc);
            }
            std::mem::swap(x, y);
        }
        out.copy_from_slice(&x[..out.len()]);
    }

    pub fn outputs(&self) -> usize {
        *self.sizes.last().unwrap()
    }

    /// The index of the largest output (DQN's greedy action; the first on a tie, as
    /// std::max_element).
    pub fn argmax(&self, input: &[f32], scratch: &mut Scratch) -> usize {
        let mut out = std::mem::take(&mut scratch.out);
        out.resize(self.outputs(), 0.0);
        self.forward(input, &mut out, scratch);
        let mut best = 0;
        for (i, &v) in out.iter().enumerate() {
            if v > out[best] {
                best = i;
            }
        }
        scratch.out = out;
        best
    }
}

/// A published policy: the weights and the gradient round they come from.
pub struct Snapshot {
    pub policy: NativeMlp,
    pub round: i64,
}

/// The newest snapshot, swapped under a mutex (readers clone an Arc, nothing more).
#[derive(Default)]
pub struct SnapshotBoard {
    current: Mutex<Option<Arc<Snapshot>>>,
}

impl SnapshotBoard {
    pub fn publish(&self, s: Snapshot) {
        *self.current.lock().unwrap() = Some(Arc::new(s));
    }
    pub fn get(&self) -> Arc<Snapshot> {
        self.current
            .lock()
            .unwrap()
            .clone()
            .expect("a policy is published before any thread starts")
    }
}

// ---------------------------------------------------------------------------------------
// Statistics shared by the threads.

/// ORDERING: the counters are statistics, read for display only: Relaxed.
#[derive(Default)]
pub struct Stats {
    pub episodes: AtomicI64,
    /// Priorities written back (applied).
    pub priority_updates: AtomicI64,
    /// Dropped because the slot was overwritten since the sample.
    pub stale_updates: AtomicI64,
    pub contention_retries: AtomicI64,
    inner: Mutex<StatsInner>,
    /// The first error a thread hit; the run stops and reports it.
    failure: Mutex<Option<String>>,
}

#[derive(Default)]
struct StatsInner {
    returns: VecDeque<f64>, // the last 100 training episodes
    last_loss: f64,
}

impl Stats {
    pub fn episode_done(&self, ret: f64) {
        self.episodes.fetch_add(1, Ordering::Relaxed);
        let mut g = self.inner.lock().unwrap();
        g.returns.push_back(ret);
        if g.returns.len() > 100 {
            g.returns.pop_front();
        }
    }
    /// Mean of the last 100 training returns; NaN before the first episode ends.
    pub fn mean_return(&self) -> f64 {
        let g = self.inner.lock().unwrap();
        if g.returns.is_empty() {
            return f64::NAN;
        }
        g.returns.iter().sum::<f64>() / g.returns.len() as f64
    }
    pub fn set_loss(&self, loss: f64) {
        self.inner.lock().unwrap().last_loss = loss;
    }
    pub fn loss(&self) -> f64 {
        self.inner.lock().unwrap().last_loss
    }
    /// Records an error that ends the run (the first one is kept).
    pub fn fail(&self, error: String) {
        self.failure.lock().unwrap().get_or_insert(error);
    }
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().unwrap().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn defaults_follow_the_environment() {
        let o = parse_options(&[]).unwrap();
        assert_eq!((o.algo.as_str(), o.batch, o.steps), ("dqn", 64, 60000));
        assert_eq!(
            (o.replay_ratio, o.update_interval, o.eval_episodes),
            (16.0, 16, 20)
        );
        let o = parse_options(&args("--env pendulum")).unwrap();
        assert_eq!((o.algo.as_str(), o.batch, o.steps), ("td3", 128, 20000));
        assert_eq!(
            (o.replay_ratio, o.update_interval, o.eval_every),
            (128.0, 1, 1000)
        );
        let o = parse_options(&args("--sampler device --device cpu --actors 3")).unwrap();
        assert_eq!(
            (o.sampler, o.device.as_str(), o.actors),
            (Sampler::Device, "cpu", 3)
        );
    }

    #[test]
    fn bad_flags_are_refused_with_a_reason() {
        for (bad, says) in [
            ("--actors 0", "--actors needs an integer"),
            ("--env mountaincar", "--env is cartpole or pendulum"),
            ("--variant mutex", "--variant is"),
            ("--frobnicate", "unknown flag"),
            ("--env pendulum --algo dqn", "continuous actions"),
            ("--fanout 6", "--fanout is"),
            ("--sampler gpu", "--sampler is"),
            ("--device tpu", "--device is"),
            ("--batch 64 --capacity 10", "--capacity must be"),
            ("--lr", "needs a value"),
            ("--replay-ratio nan", "--replay-ratio needs a number"),
        ] {
            let e = parse_options(&args(bad)).unwrap_err();
            assert!(e.0.contains(says), "{bad}: {}", e.0);
        }
        assert_eq!(parse_options(&args("--help")).unwrap_err().0, "");
    }

    #[test]
    fn rate_control_holds_the_ratio_between_threads() {
        // 2 actors, 2 learners taking batches of 8 at ratio 4 with slack 32: at every moment
        // granted <= allowed(steps) and allowed(steps) <= granted + slack + one step's worth.
        let rate = RateControl::new(4.0, 10, 2000, 32);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| while rate.actor_step() {});
            }
            for _ in 0..2 {
                s.spawn(|| {
                    while rate.learner_take(8) {
                        let g = rate.granted();
                        let a = rate.allowed(rate.steps());
                        assert!(g <= a, "granted {g} > allowed {a}");
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..2000 {
                    let s = rate.steps();
                    let g = rate.granted();
                    // An actor may have stepped between the two loads: one step of slack.
                    assert!(
                        rate.allowed(s) <= g + 32 + 4 + 8,
                        "actors ran ahead: {s} steps, {g} granted"
                    );
                    std::thread::yield_now();
                }
            });
        });
        assert_eq!(rate.steps(), 2000);
        // Every sample the ratio allows was taken, in whole batches.
        assert!(rate.allowed(2000) - rate.granted() < 8);
    }

    #[test]
    fn stop_releases_waiting_threads() {
        let rate = RateControl::new(1.0, 0, 1 << 40, 0);
        std::thread::scope(|s| {
            let l = s.spawn(|| rate.learner_take(1000)); // never allowed: waits
            std::thread::sleep(Duration::from_millis(30));
            rate.stop();
            assert!(!l.join().unwrap());
        });
        assert!(!rate.actor_step());
    }

    #[test]
    fn equation5_picks_the_balanced_pair() {
        // Actors scale linearly (1000/s each), learners saturate; update interval 4.
        let fa = [1000.0, 2000.0, 3000.0];
        let fl = [300.0, 500.0, 550.0];
        let c = solve_equation5(&fa, &fl, 4.0, 4).unwrap();
        // (2, 2): min(2000, 2000) = 2000 is the best balanced rate within 4 threads.
        assert_eq!((c.actors, c.learners), (2, 2));
        assert!((c.balanced - 2000.0).abs() < 1e-9 && c.mismatch < 1e-9);
        // With 3 threads: (2, 1) gives min(2000, 1200) = 1200 > (1, 2)'s 1000.
        let c = solve_equation5(&fa, &fl, 4.0, 3).unwrap();
        assert_eq!((c.actors, c.learners), (2, 1));
        assert!(solve_equation5(&fa, &fl, 4.0, 1).is_none());
    }

    #[test]
    fn native_mlp_computes_relu_layers_and_tanh() {
        // 2-2-1: hidden = relu([1 -1; 0.5 0.5] x + [0, -1]), out = [2 3] h + 0.5
        let mut m = NativeMlp {
            sizes: vec![2, 2, 1],
            w: vec![vec![1.0, -1.0, 0.5, 0.5], vec![2.0, 3.0]],
            b: vec![vec![0.0, -1.0], vec![0.5]],
            tanh_scale: None,
        };
        let mut s = Scratch::default();
        let mut out = [0.0f32];
        m.forward(&[3.0, 1.0], &mut out, &mut s);
        // h = relu([2, 1]) = [2, 1]; out = 4 + 3 + 0.5
        assert_eq!(out[0], 7.5);
        m.forward(&[0.0, 1.0], &mut out, &mut s);
        // h = relu([-1, -0.5]) = [0, 0]
        assert_eq!(out[0], 0.5);
        m.tanh_scale = Some(2.0);
        m.forward(&[3.0, 1.0], &mut out, &mut s);
        assert_eq!(out[0], 2.0 * 7.5f32.tanh());
        let q = NativeMlp {
            sizes: vec![1, 3],
            w: vec![vec![1.0, 3.0, 2.0]],
            b: vec![vec![0.0; 3]],
            tanh_scale: None,
        };
        assert_eq!(q.argmax(&[1.0], &mut s), 1);
        assert_eq!(q.argmax(&[-1.0], &mut s), 0);
    }
}
