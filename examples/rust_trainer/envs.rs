//! Native CartPole-v1 and Pendulum-v1 for the Rust trainer, bit-equal to gymnasium 1.4.0 (with
//! its TimeLimit wrapper): the Rust twin of `examples/cpp_trainer/envs.hpp`, checked against
//! the same reference trajectories (`examples/data/`, `tests/trainer_envs.rs`). Rust never
//! contracts `a * b + c` into an FMA and `f64::sin`/`cos` call the platform libm (glibc's,
//! what NumPy calls for a scalar), so the bits follow from doing every operation in
//! gymnasium's order, with NumPy's float32 arithmetic for a float32 Pendulum action.

use std::f64::consts::PI;

/// The crate's xoshiro256** (the C++ trainer's `trainer::Rng`), with the draws the
/// environments and agents make.
#[derive(Clone, Debug)]
pub struct Rng(kary_replay::Xoshiro256);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(kary_replay::Xoshiro256::new(seed))
    }

    /// The generator's state words (a checkpoint saves them).
    pub fn state(&self) -> [u64; 4] {
        self.0.state()
    }

    /// A generator in a saved state; None for the all-zero state, which xoshiro never
    /// reaches.
    pub fn from_state(s: [u64; 4]) -> Option<Rng> {
        kary_replay::Xoshiro256::from_state(s).map(Rng)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        kary_replay::RandomSource::next_f64(&mut self.0)
    }

    pub fn uniform_in(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Uniform in {0, .., n-1}.
    pub fn below(&mut self, n: u32) -> u32 {
        (self.uniform() * n as f64) as u32
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// What a step returns besides the observation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepResult {
    pub reward: f64,
    /// A terminal state: no bootstrapping from it.
    pub terminated: bool,
    /// The time limit: bootstrap, but start a new episode.
    pub truncated: bool,
}

/// CartPole-v1: gymnasium's `CartPoleEnv` under `TimeLimit(500)`.
#[derive(Clone, Debug, Default)]
pub struct CartPole {
    state: [f64; 4],
    steps: u32,
}

impl CartPole {
    pub const OBS: usize = 4;
    pub const ACTIONS: usize = 2;
    pub const MAX_STEPS: u32 = 500;

    /// Uniform(-0.05, 0.05) in each state variable, as gymnasium's reset.
    pub fn reset(&mut self, rng: &mut Rng) {
        for s in &mut self.state {
            *s = rng.uniform_in(-0.05, 0.05);
        }
        self.steps = 0;
    }

    /// Inject a state (the reference test) and restart the time limit.
    #[allow(dead_code)] // for tests/trainer_envs.rs, which replays gymnasium\'s states
    pub fn set_state(&mut self, state: [f64; 4]) {
        self.state = state;
        self.steps = 0;
    }

    #[allow(dead_code)] // for tests/trainer_envs.rs
    pub fn state(&self) -> [f64; 4] {
        self.state
    }

    pub fn observe(&self, obs: &mut [f32]) {
        for (o, s) in obs.iter_mut().zip(self.state) {
            *o = s as f32;
        }
    }

    pub fn step(&mut self, action: usize) -> StepResult {
        let (gravity, masscart, masspole) = (9.8, 1.0, 0.1);
        let total_mass = masspole + masscart;
        let length = 0.5;
        let polemass_length = masspole * length;
        let (force_mag, tau) = (10.0, 0.02);
        let theta_threshold = 12.0 * 2.0 * PI / 360.0;
        let x_threshold = 2.4;

        let [mut x, mut x_dot, mut theta, mut theta_dot] = self.state;
        let force = if action == 1 { force_mag } else { -force_mag };
        let costheta = theta.cos();
        let sintheta = theta.sin();
        let temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass;
        let thetaacc = (gravity * sintheta - costheta * temp)
            / (length * (4.0 / 3.0 - masspole * (costheta * costheta) / total_mass));
        let xacc = temp - polemass_length * thetaacc * costheta / total_mass;
        // Explicit Euler: positions advance with the old velocities.
        x += tau * x_dot;
        x_dot += tau * xacc;
        theta += tau * theta_dot;
        theta_dot += tau * thetaacc;
        self.state = [x, x_dot, theta, theta_dot];
        self.steps += 1;
        StepResult {
            reward: 1.0, // also on the terminating step
            terminated: x < -x_threshold
                || x > x_threshold
                || theta < -theta_threshold
                || theta > theta_threshold,
            truncated: self.steps >= Self::MAX_STEPS,
        }
    }
}

/// Pendulum-v1: gymnasium's `PendulumEnv` under `TimeLimit(200)`.
#[derive(Clone, Debug, Default)]
pub struct Pendulum {
    state: [f64; 2],
    steps: u32,
}

impl Pendulum {
    pub const OBS: usize = 3;
    pub const ACTION_DIM: usize = 1;
    pub const MAX_STEPS: u32 = 200;
    pub const MAX_TORQUE: f32 = 2.0;

    /// theta uniform in [-pi, pi], theta_dot uniform in [-1, 1], as gymnasium's reset.
    pub fn reset(&mut self, rng: &mut Rng) {
        self.state = [rng.uniform_in(-PI, PI), rng.uniform_in(-1.0, 1.0)];
        self.steps = 0;
    }

    #[allow(dead_code)] // for tests/trainer_envs.rs, which replays gymnasium\'s states
    pub fn set_state(&mut self, state: [f64; 2]) {
        self.state = state;
        self.steps = 0;
    }

    #[allow(dead_code)] // for tests/trainer_envs.rs
    pub fn state(&self) -> [f64; 2] {
        self.state
    }

    pub fn observe(&self, obs: &mut [f32]) {
        obs[0] = self.state[0].cos() as f32;
        obs[1] = self.state[0].sin() as f32;
        obs[2] = self.state[1] as f32;
    }

    /// `action` is a float32 torque; the environment clips it to [-2, 2].
    pub fn step(&mut self, action: f32) -> StepResult {
        let (max_speed, dt, g, l) = (8.0, 0.05, 10.0, 1.0);
        let [th, thdot] = self.state;
        let u = action.clamp(-Self::MAX_TORQUE, Self::MAX_TORQUE);
        // NumPy: 0.001 * u**2 and 3.0 * u stay float32 for a float32 u (NEP 50).
        let u_cost = 0.001f32 * (u * u);
        let u_torque = 3.0f32 * u;
        let n = angle_normalize(th);
        let costs = n * n + 0.1 * (thdot * thdot) + u_cost as f64;
        let newthdot = (thdot + (3.0 * g / (2.0 * l) * th.sin() + u_torque as f64) * dt)
            .clamp(-max_speed, max_speed);
        let newth = th + newthdot * dt;
        self.state = [newth, newthdot];
        self.steps += 1;
        StepResult {
            reward: -costs,
            terminated: false,
            truncated: self.steps >= Self::MAX_STEPS,
        }
    }
}

/// `((x + pi) mod 2 pi) - pi` with NumPy's floor remainder (npy_divmod).
pub fn angle_normalize(x: f64) -> f64 {
    let a = x + PI;
    let b = 2.0 * PI;
    let mut m = a % b; // fmod
    if m != 0.0 {
        if (b < 0.0) != (m < 0.0) {
            m += b;
        }
    } else {
        m = 0.0f64.copysign(b);
    }
    m - PI
}
