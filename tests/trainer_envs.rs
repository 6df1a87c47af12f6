//! The Rust trainer's environments (examples/rust_trainer/envs.rs) against gymnasium 1.4.0:
//! the reference trajectories in examples/data/ are replayed with the initial state of each
//! episode injected and the recorded actions applied, and every state, observation, reward
//! and flag must be bit-equal (the C++ trainer's env_test does the same for envs.hpp).

#[path = "../examples/rust_trainer/envs.rs"]
#[allow(dead_code)] // the trainer's module: this test drives the environments, not its generator
mod envs;

use envs::{CartPole, Pendulum, StepResult};
use std::collections::HashMap;

fn rows(name: &str) -> Vec<HashMap<String, String>> {
    let path = format!("{}/examples/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut lines = text.lines().map(|l| l.trim_end_matches('\r'));
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            header
                .iter()
                .enumerate()
                .map(|(i, h)| (h.to_string(), cells.get(i).unwrap_or(&"").to_string()))
                .collect()
        })
        .collect()
}

fn f(r: &HashMap<String, String>, k: &str) -> f64 {
    r[k].parse().unwrap_or_else(|_| panic!("{k}: {:?}", r[k]))
}

#[derive(Default)]
struct Check {
    checked: usize,
    failures: Vec<String>,
}

impl Check {
    fn bits64(&mut self, r: &HashMap<String, String>, what: &str, got: f64, want: f64) {
        self.checked += 1;
        if got.to_bits() != want.to_bits() {
            self.failures.push(format!(
                "episode {} t={}: {what} is {got:e}, gymnasium has {want:e}",
                r["episode"], r["t"]
            ));
        }
    }
    fn bits32(&mut self, r: &HashMap<String, String>, what: &str, got: f32, want: f32) {
        self.bits64(r, what, got as f64, want as f64);
    }
    fn flags(&mut self, r: &HashMap<String, String>, s: StepResult) {
        self.bits64(
            r,
            "terminated",
            s.terminated as u8 as f64,
            f(r, "terminated"),
        );
        self.bits64(r, "truncated", s.truncated as u8 as f64, f(r, "truncated"));
    }
    fn finish(self, env: &str, min_rows: usize) {
        assert!(
            self.checked >= min_rows,
            "{env}: only {} values checked",
            self.checked
        );
        assert!(
            self.failures.is_empty(),
            "{env}: {} of {} values differ from gymnasium, first: {:?}",
            self.failures.len(),
            self.checked,
            &self.failures[..self.failures.len().min(5)]
        );
    }
}

#[test]
fn cartpole_replays_gymnasium_bit_for_bit() {
    let mut env = CartPole::default();
    let mut c = Check::default();
    let mut obs = [0f32; 4];
    for r in rows("cartpole_v1_reference.csv") {
        if r["t"] == "0" {
            env.set_state([
                f(&r, "x"),
                f(&r, "x_dot"),
                f(&r, "theta"),
                f(&r, "theta_dot"),
            ]);
        } else {
            let s = env.step(f(&r, "action") as usize);
            let st = env.state();
            for (i, k) in ["x", "x_dot", "theta", "theta_dot"].iter().enumerate() {
                c.bits64(&r, k, st[i], f(&r, k));
            }
            c.bits64(&r, "reward", s.reward, f(&r, "reward"));
            c.flags(&r, s);
        }
        env.observe(&mut obs);
        for (i, k) in ["obs0", "obs1", "obs2", "obs3"].iter().enumerate() {
            c.bits32(&r, k, obs[i], f(&r, k) as f32);
        }
    }
    c.finish("CartPole-v1", 8000);
}

#[test]
fn pendulum_replays_gymnasium_bit_for_bit() {
    let mut env = Pendulum::default();
    let mut c = Check::default();
    let mut obs = [0f32; 3];
    for r in rows("pendulum_v1_reference.csv") {
        if r["t"] == "0" {
            env.set_state([f(&r, "th"), f(&r, "thdot")]);
        } else {
            // The recorded actions are float32 values written as Python floats: exact.
            let s = env.step(f(&r, "action") as f32);
            let st = env.state();
            c.bits64(&r, "th", st[0], f(&r, "th"));
            c.bits64(&r, "thdot", st[1], f(&r, "thdot"));
            c.bits64(&r, "reward", s.reward, f(&r, "reward"));
            c.flags(&r, s);
        }
        env.observe(&mut obs);
        for (i, k) in ["obs0", "obs1", "obs2"].iter().enumerate() {
            c.bits32(&r, k, obs[i], f(&r, k) as f32);
        }
    }
    c.finish("Pendulum-v1", 5000);
}

/// The check can fail: one ulp off in the integrator shows up.
#[test]
fn a_drifted_state_is_caught() {
    let r = rows("cartpole_v1_reference.csv");
    let mut env = CartPole::default();
    let first = &r[0];
    let x = f(first, "x");
    env.set_state([
        f64::from_bits(x.to_bits() + 1),
        f(first, "x_dot"),
        f(first, "theta"),
        f(first, "theta_dot"),
    ]);
    env.step(f(&r[1], "action") as usize);
    assert_ne!(env.state()[0].to_bits(), f(&r[1], "x").to_bits());
}
