//! The monitor's greedy evaluation on the evaluator's own environments, and the policy the
//! actors start from.

use std::collections::VecDeque;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use crate::envs::{CartPole, Pendulum, Rng};
use crate::{cli::*, policy::*};

// Greedy evaluation on the evaluator's own environments (the C++ trainer's seeds).

pub(crate) fn evaluate(o: &Options, policy: &NativeMlp, episodes: usize, salt: u64) -> f64 {
    let mut total = 0.0;
    let mut scratch = Scratch::default();
    for e in 0..episodes {
        let mut rng = Rng::new(
            o.seed
                .wrapping_mul(1_000_003)
                .wrapping_add(salt.wrapping_mul(1009))
                .wrapping_add(e as u64 + 12345),
        );
        let mut ret = 0.0;
        if o.env == "cartpole" {
            let mut env = CartPole::default();
            env.reset(&mut rng);
            let mut obs = [0f32; 4];
            loop {
                env.observe(&mut obs);
                let r = env.step(policy.argmax(&obs, &mut scratch));
                ret += r.reward;
                if r.terminated || r.truncated {
                    break;
                }
            }
        } else {
            let mut env = Pendulum::default();
            env.reset(&mut rng);
            let (mut obs, mut a) = ([0f32; 3], [0f32; 1]);
            loop {
                env.observe(&mut obs);
                policy.forward(&obs, &mut a, &mut scratch);
                let r = env.step(a[0]);
                ret += r.reward;
                if r.terminated || r.truncated {
                    break;
                }
            }
        }
        total += ret;
    }
    total / episodes as f64
}

pub(crate) fn solve_threshold(o: &Options) -> f64 {
    if o.env == "cartpole" {
        475.0
    } else {
        -200.0
    }
}

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
