//! The command line: every flag, its default and its range, and the usage text. The Rust
//! twin of the C++ trainer's flags (`examples/cpp_trainer/framework.hpp`).

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
    /// `--checkpoint DIR`: where checkpoints go (empty: none).
    pub checkpoint: String,
    /// Env steps between checkpoints.
    pub checkpoint_every: i64,
    /// Start from the newest checkpoint in `checkpoint`.
    pub resume: bool,
    /// `--nstep N`: n-step returns over lanes of steps (one lane per actor); 1: one-step
    /// transitions.
    pub nstep: usize,
}

pub const USAGE: &str =
    "usage: rust_trainer [--env cartpole|pendulum] [--algo dqn|td3] [--actors A] [--learners L]
         [--variant global|split|lockfree] [--fanout K] [--batch B] [--capacity N]
         [--steps S] [--seed X] [--update-interval T] [--priority-delay D]
         [--replay-ratio R] [--csv PATH] [--auto] [--eval-every E] [--eval-episodes N]
         [--warmup W] [--lr LR] [--max-seconds S] [--progress-seconds S]
         [--profile-seconds S] [--max-threads M] [--stop-when-solved]
         [--device cpu|cuda] [--sampler hybrid|device]
         [--checkpoint DIR] [--checkpoint-every N] [--resume] [--nstep N]";

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

impl Default for Options {
    /// Every flag's default before the environment's are filled in (0 or -1: "the
    /// environment's", see [`fill_defaults`]).
    fn default() -> Options {
        Options {
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
            checkpoint: String::new(),
            checkpoint_every: 0,
            resume: false,
            nstep: 1,
        }
    }
}

/// Parses the arguments (without the program name): each flag in turn ([`set_flag`]), then
/// the defaults that depend on the environment ([`fill_defaults`], the trainer README's
/// "Hyperparameters" table), then the checks across flags ([`check`]), as in the C++
/// trainer, so the result is final.
pub fn parse_options(args: &[String]) -> Result<Options, UsageError> {
    let mut o = Options::default();
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let mut value = || {
            rest.next()
                .map(String::as_str)
                .ok_or_else(|| UsageError(format!("{flag} needs a value")))
        };
        set_flag(&mut o, flag, &mut value)?;
    }
    fill_defaults(&mut o)?;
    check(&mut o)?;
    Ok(o)
}

/// `v` if it is one of `choices`, else the error that lists them.
fn one_of(flag: &str, v: &str, choices: &[&str]) -> Result<String, UsageError> {
    match choices.contains(&v) {
        true => Ok(v.to_string()),
        false => {
            let (last, first) = choices.split_last().expect("choices");
            Err(UsageError(format!(
                "{flag} is {} or {last}, got '{v}'",
                first.join(", ")
            )))
        }
    }
}

/// `v` unless it is empty (`what` the flag needs).
fn non_empty(flag: &str, v: &str, what: &str) -> Result<String, UsageError> {
    match v.is_empty() {
        true => Err(UsageError(format!("{flag} needs {what}"))),
        false => Ok(v.to_string()),
    }
}

/// Sets what `flag` names, reading its value from `value` when it takes one.
fn set_flag<'a>(
    o: &mut Options,
    flag: &str,
    value: &mut dyn FnMut() -> Result<&'a str, UsageError>,
) -> Result<(), UsageError> {
    let int = |v: &str, lo, hi| parse_int(flag, v, lo, hi);
    let num = |v: &str, lo, hi| parse_num(flag, v, lo, hi);
    match flag {
        "--env" => o.env = one_of(flag, value()?, &["cartpole", "pendulum"])?,
        "--algo" => o.algo = one_of(flag, value()?, &["dqn", "td3"])?,
        "--actors" => o.actors = int(value()?, 1, 256)? as usize,
        "--learners" => o.learners = int(value()?, 1, 256)? as usize,
        "--variant" => o.variant = one_of(flag, value()?, &["global", "split", "lockfree"])?,
        "--fanout" => {
            o.fanout = int(value()?, 2, 64)? as usize;
            if !o.fanout.is_power_of_two() {
                return Err(UsageError("--fanout is 2, 4, 8, 16, 32 or 64".into()));
            }
        }
        "--batch" => o.batch = int(value()?, 1, 65536)? as usize,
        "--capacity" => o.capacity = int(value()?, 1, 1 << 30)? as usize,
        "--steps" => o.steps = int(value()?, 1, 1 << 40)?,
        "--seed" => o.seed = int(value()?, 0, 1 << 62)? as u64,
        "--update-interval" => o.update_interval = int(value()?, 1, 1 << 30)?,
        "--priority-delay" => o.priority_delay = int(value()?, 0, 1 << 20)? as usize,
        "--replay-ratio" => o.replay_ratio = num(value()?, 1e-3, 1e6)?,
        "--csv" => o.csv = non_empty(flag, value()?, "a path")?,
        "--auto" => o.automatic = true,
        "--eval-every" => o.eval_every = int(value()?, 1, 1 << 40)?,
        "--eval-episodes" => o.eval_episodes = int(value()?, 1, 10000)? as usize,
        "--warmup" => o.warmup = int(value()?, 0, 1 << 40)?,
        "--lr" => o.lr = num(value()?, 1e-7, 1.0)?,
        "--max-seconds" => o.max_seconds = num(value()?, 0.01, 1e7)?,
        "--progress-seconds" => o.progress_seconds = num(value()?, 0.05, 1e5)?,
        "--profile-seconds" => o.profile_seconds = num(value()?, 0.05, 600.0)?,
        "--max-threads" => o.max_threads = int(value()?, 2, 1024)? as usize,
        "--stop-when-solved" => o.stop_when_solved = true,
        "--device" => o.device = one_of(flag, value()?, &["cpu", "cuda"])?,
        "--sampler" => {
            o.sampler = match one_of(flag, value()?, &["hybrid", "device"])?.as_str() {
                "hybrid" => Sampler::Hybrid,
                _ => Sampler::Device,
            }
        }
        "--checkpoint" => o.checkpoint = non_empty(flag, value()?, "a directory")?,
        "--checkpoint-every" => o.checkpoint_every = int(value()?, 1, 1 << 40)?,
        "--resume" => o.resume = true,
        "--nstep" => o.nstep = int(value()?, 1, 1000)? as usize,
        "-h" | "--help" => return Err(UsageError(String::new())),
        _ => return Err(UsageError(format!("unknown flag '{flag}'"))),
    }
    Ok(())
}

/// The algorithm and the defaults that depend on the environment, where no flag set them.
fn fill_defaults(o: &mut Options) -> Result<(), UsageError> {
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
    Ok(())
}

/// The checks across flags; `--checkpoint-every` gets its default once it is known to be
/// allowed.
fn check(o: &mut Options) -> Result<(), UsageError> {
    if o.capacity < o.batch {
        return Err(UsageError("--capacity must be at least --batch".into()));
    }
    if o.checkpoint.is_empty() && (o.resume || o.checkpoint_every != 0) {
        return Err(UsageError(
            "--resume and --checkpoint-every need --checkpoint DIR".into(),
        ));
    }
    if o.checkpoint_every == 0 {
        o.checkpoint_every = 10_000;
    }
    if o.nstep > 1 && o.automatic {
        return Err(UsageError(
            "--auto profiles the one-step buffer: drop --nstep or --auto".into(),
        ));
    }
    if o.nstep > 1 && o.sampler == Sampler::Device {
        return Err(UsageError(
            "--nstep keeps its steps in lanes on the host: drop --sampler device".into(),
        ));
    }
    Ok(())
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
            ("--resume", "need --checkpoint DIR"),
            ("--nstep 3 --auto", "drop --nstep or --auto"),
            ("--nstep 3 --sampler device", "lanes on the host"),
            ("--nstep 0", "--nstep"),
            ("--checkpoint-every 100", "need --checkpoint DIR"),
            (
                "--checkpoint /tmp/x --checkpoint-every 0",
                "--checkpoint-every needs",
            ),
        ] {
            let e = parse_options(&args(bad)).unwrap_err();
            assert!(e.0.contains(says), "{bad}: {}", e.0);
        }
        assert_eq!(parse_options(&args("--help")).unwrap_err().0, "");
    }
}
