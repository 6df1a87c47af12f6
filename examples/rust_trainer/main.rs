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
//! `--device` is `cuda` by default where CUDA is available, else `cpu`. Build and run:
//! `scripts/rust-trainer.sh [flags]` (examples/rust_trainer/README.md).

mod envs;
mod framework;

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use envs::{CartPole, Pendulum, Rng, StepResult};
use framework::{
    parse_options, solve_equation5, NativeMlp, Options, RateControl, Sampler, Scratch, Snapshot,
    SnapshotBoard, Stats, UsageError, USAGE,
};
use kary_replay::gpu::{DeviceBuffer, DeviceKeys, HybridBuffer, Precision};
use kary_replay::{
    ConcurrentBuffer, Config, DType, DefaultPriority, GlobalLockBuffer, Key, LockFreeBuffer,
    RandomSource, SampleMode, Schema, SplitLockBuffer, UpdateReport,
};
use tch::{Device, Kind, Reduction, Tensor};

impl RandomSource for Rng {
    fn next_f64(&mut self) -> f64 {
        self.uniform()
    }
}

// ---------------------------------------------------------------------------------------
// Hyperparameters (the README's table; the C++ trainer's `Hyper`).

struct Hyper {
    gamma: f64,
    lr: f64,
    priority_eps: f64,
    alpha: f64,
    beta0: f64,
    hidden: usize,
    eps_start: f64,
    eps_end: f64,
    eps_fraction: f64,
    dqn_tau: f64,
    policy_noise: f64,
    noise_clip: f64,
    explore_noise: f64,
    policy_delay: i64,
    td3_tau: f64,
}

fn hyper_for(o: &Options) -> Hyper {
    let dqn = o.algo == "dqn";
    Hyper {
        gamma: if dqn { 0.99 } else { 0.98 },
        lr: o.lr,
        priority_eps: 1e-3,
        alpha: 0.6,
        beta0: 0.4,
        hidden: if dqn { 64 } else { 128 },
        eps_start: 1.0,
        eps_end: 0.02,
        eps_fraction: 0.25,
        dqn_tau: 0.02,
        policy_noise: 0.2,
        noise_clip: 0.5,
        explore_noise: 0.1,
        policy_delay: 2,
        td3_tau: 0.005,
    }
}

// ---------------------------------------------------------------------------------------
// Networks: ReLU MLPs as plain tensors (weight [out, in], bias [out] per layer), initialized
// as torch.nn.Linear (uniform in +-1/sqrt(fan_in)).

struct Net {
    sizes: Vec<usize>,
    tanh_scale: Option<f32>,
    params: Vec<Tensor>, // w0, b0, w1, b1, ...
}

impl Net {
    fn new(sizes: Vec<usize>, tanh_scale: Option<f32>, device: Device, trainable: bool) -> Net {
        let mut params = Vec::new();
        for pair in sizes.windows(2) {
            let (n_in, n_out) = (pair[0] as i64, pair[1] as i64);
            let bound = 1.0 / (n_in as f64).sqrt();
            let mut w = Tensor::empty([n_out, n_in], (Kind::Float, device));
            let mut b = Tensor::empty([n_out], (Kind::Float, device));
            let _ = w.uniform_(-bound, bound);
            let _ = b.uniform_(-bound, bound);
            params.push(w.set_requires_grad(trainable));
            params.push(b.set_requires_grad(trainable));
        }
        Net {
            sizes,
            tanh_scale,
            params,
        }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let layers = self.params.len() / 2;
        let mut x = x.shallow_clone();
        for l in 0..layers {
            x = x.linear(&self.params[2 * l], Some(&self.params[2 * l + 1]));
            if l + 1 < layers {
                x = x.relu();
            }
        }
        match self.tanh_scale {
            Some(s) => x.tanh() * f64::from(s),
            None => x,
        }
    }

    /// The weights as a plain-Rust policy for actors and evaluators.
    fn native(&self) -> NativeMlp {
        let host = |t: &Tensor| {
            Vec::<f32>::try_from(
                &t.detach()
                    .to_device(Device::Cpu)
                    .contiguous()
                    .flatten(0, -1),
            )
            .expect("a float tensor")
        };
        let mut m = NativeMlp {
            sizes: self.sizes.clone(),
            tanh_scale: self.tanh_scale,
            ..NativeMlp::default()
        };
        for l in 0..self.params.len() / 2 {
            m.w.push(host(&self.params[2 * l]));
            m.b.push(host(&self.params[2 * l + 1]));
        }
        m
    }
}

/// One set of networks: the parameter server's master copy or a learner's replica.
/// DQN: online {q}; TD3: online {actor, critic1, critic2}; `target` mirrors `online`.
struct Agent {
    online: Vec<Net>,
    target: Vec<Net>,
}

impl Agent {
    fn new(o: &Options, h: &Hyper, device: Device, trainable: bool) -> Agent {
        let hd = h.hidden;
        let shapes: Vec<(Vec<usize>, Option<f32>)> = if o.algo == "dqn" {
            vec![(vec![CartPole::OBS, hd, hd, CartPole::ACTIONS], None)]
        } else {
            let (obs, act) = (Pendulum::OBS, Pendulum::ACTION_DIM);
            vec![
                (vec![obs, hd, hd, act], Some(Pendulum::MAX_TORQUE)),
                (vec![obs + act, hd, hd, 1], None),
                (vec![obs + act, hd, hd, 1], None),
            ]
        };
        let online: Vec<Net> = shapes
            .iter()
            .map(|(s, t)| Net::new(s.clone(), *t, device, trainable))
            .collect();
        let mut target: Vec<Net> = shapes
            .iter()
            .map(|(s, t)| Net::new(s.clone(), *t, device, false))
            .collect();
        copy_all(&online, &mut target);
        Agent { online, target }
    }

    fn online_params(&self) -> Vec<&Tensor> {
        self.online.iter().flat_map(|n| n.params.iter()).collect()
    }
}

fn copy_all(from: &[Net], to: &mut [Net]) {
    tch::no_grad(|| {
        for (f, t) in from.iter().zip(to.iter_mut()) {
            for (a, b) in f.params.iter().zip(t.params.iter_mut()) {
                b.copy_(a);
            }
        }
    });
}

fn soft_update(from: &[Net], to: &mut [Net], tau: f64) {
    tch::no_grad(|| {
        for (f, t) in from.iter().zip(to.iter_mut()) {
            for (a, b) in f.params.iter().zip(t.params.iter_mut()) {
                let mixed = &*b * (1.0 - tau) + a * tau;
                b.copy_(&mixed);
            }
        }
    });
}

/// Adam (torch.optim.Adam's defaults: betas 0.9 / 0.999, eps 1e-8, no weight decay) over a
/// list of parameters, stepped with the averaged gradients the parameter server holds.
struct Adam {
    lr: f64,
    step: i32,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
}

impl Adam {
    const B1: f64 = 0.9;
    const B2: f64 = 0.999;
    const EPS: f64 = 1e-8;

    fn new(lr: f64, params: &[&Tensor]) -> Adam {
        Adam {
            lr,
            step: 0,
            m: params.iter().map(|p| p.zeros_like()).collect(),
            v: params.iter().map(|p| p.zeros_like()).collect(),
        }
    }

    fn step(&mut self, params: &mut [&mut Tensor], grads: &[Tensor]) {
        self.step += 1;
        let bc1 = 1.0 - Self::B1.powi(self.step);
        let bc2 = 1.0 - Self::B2.powi(self.step);
        tch::no_grad(|| {
            for (i, (p, g)) in params.iter_mut().zip(grads).enumerate() {
                self.m[i] = &self.m[i] * Self::B1 + g * (1.0 - Self::B1);
                self.v[i] = &self.v[i] * Self::B2 + g * g * (1.0 - Self::B2);
                let denom = (self.v[i].sqrt() / bc2.sqrt()) + Self::EPS;
                let update = &self.m[i] / denom * (self.lr / bc1);
                let _ = p.g_sub_(&update);
            }
        });
    }
}

// ---------------------------------------------------------------------------------------
// The parameter server: learners submit their gradients for a round; the last to arrive
// averages them into the master copy, steps Adam, updates the targets and publishes the
// policy; every learner then copies the master weights into its replica.

struct ServerState {
    master: Agent,
    sums: Vec<Option<Tensor>>, // per online parameter, in Agent::online_params order
    opts: Vec<Adam>,           // DQN: {q}; TD3: {actor, critics}
    active: usize,
    arrived: usize,
    round: i64,
    stopped: bool,
}

struct ParamServer<'a> {
    dqn: bool,
    h: &'a Hyper,
    board: &'a SnapshotBoard,
    state: Mutex<ServerState>,
    cv: Condvar,
}

impl<'a> ParamServer<'a> {
    fn new(
        o: &Options,
        h: &'a Hyper,
        master: Agent,
        learners: usize,
        board: &'a SnapshotBoard,
    ) -> Self {
        let dqn = o.algo == "dqn";
        let opts = if dqn {
            vec![Adam::new(h.lr, &master.online_params())]
        } else {
            let actor: Vec<&Tensor> = master.online[0].params.iter().collect();
            let critics: Vec<&Tensor> = master.online[1..]
                .iter()
                .flat_map(|n| n.params.iter())
                .collect();
            vec![Adam::new(h.lr, &actor), Adam::new(h.lr, &critics)]
        };
        let n = master.online_params().len();
        let server = ParamServer {
            dqn,
            h,
            board,
            state: Mutex::new(ServerState {
                master,
                sums: (0..n).map(|_| None).collect(),
                opts,
                active: learners,
                arrived: 0,
                round: 0,
                stopped: false,
            }),
            cv: Condvar::new(),
        };
        let st = server.state.lock().unwrap();
        server.publish(&st);
        drop(st);
        server
    }

    fn round(&self) -> i64 {
        self.state.lock().unwrap().round
    }

    /// Adds this learner's gradients (one per online parameter; None where it has none this
    /// round) and blocks until the round is applied. False if the server stopped.
    fn submit(&self, grads: Vec<Option<Tensor>>) -> bool {
        let mut st = self.state.lock().unwrap();
        tch::no_grad(|| {
            for (sum, g) in st.sums.iter_mut().zip(grads) {
                if let Some(g) = g {
                    *sum = Some(match sum.take() {
                        None => g,
                        Some(s) => s + g,
                    });
                }
            }
        });
        st.arrived += 1;
        let my_round = st.round;
        if st.arrived >= st.active {
            self.apply(&mut st);
            return true;
        }
        let st = self
            .cv
            .wait_while(st, |s| s.round == my_round && !s.stopped)
            .unwrap();
        st.round != my_round
    }

    /// A learner that stops: the round no longer waits for it.
    fn leave(&self) {
        let mut st = self.state.lock().unwrap();
        st.active -= 1;
        if st.active > 0 && st.arrived >= st.active {
            self.apply(&mut st);
        }
    }

    fn stop(&self) {
        self.state.lock().unwrap().stopped = true;
        self.cv.notify_all();
    }

    fn pull(&self, replica: &mut Agent) {
        let st = self.state.lock().unwrap();
        copy_all(&st.master.online, &mut replica.online);
        copy_all(&st.master.target, &mut replica.target);
    }

    fn apply(&self, st: &mut ServerState) {
        let inv = 1.0 / st.arrived as f64;
        let sums: Vec<Option<Tensor>> = st.sums.iter_mut().map(|s| s.take()).collect();
        let avg: Vec<Option<Tensor>> = sums.into_iter().map(|s| s.map(|s| s * inv)).collect();
        let ServerState {
            master,
            opts,
            round,
            ..
        } = st;
        if self.dqn {
            let grads: Vec<Tensor> = avg
                .into_iter()
                .map(|g| g.expect("every q gradient"))
                .collect();
            let mut ps: Vec<&mut Tensor> = master.online[0].params.iter_mut().collect();
            opts[0].step(&mut ps, &grads);
            soft_update(&master.online, &mut master.target, self.h.dqn_tau);
        } else {
            let n_actor = master.online[0].params.len();
            let mut avg = avg;
            let critic_grads: Vec<Tensor> = avg
                .split_off(n_actor)
                .into_iter()
                .map(|g| g.expect("every critic gradient"))
                .collect();
            let mut critic_ps: Vec<&mut Tensor> = master.online[1..]
                .iter_mut()
                .flat_map(|n| n.params.iter_mut())
                .collect();
            opts[1].step(&mut critic_ps, &critic_grads); // critics, every round
            if *round % self.h.policy_delay == 0 {
                // The actor, on the delayed rounds only (its gradients exist then).
                if let Some(actor_grads) = avg.into_iter().collect::<Option<Vec<Tensor>>>() {
                    let mut actor_ps: Vec<&mut Tensor> =
                        master.online[0].params.iter_mut().collect();
                    opts[0].step(&mut actor_ps, &actor_grads);
                }
                soft_update(&master.online, &mut master.target, self.h.td3_tau);
            }
        }
        st.round += 1;
        st.arrived = 0;
        self.publish(st);
        self.cv.notify_all();
    }

    fn publish(&self, st: &ServerState) {
        self.board.publish(Snapshot {
            policy: st.master.online[0].native(),
            round: st.round,
        });
    }
}

// ---------------------------------------------------------------------------------------
// The replay buffer, seen by actors and learners: a HybridBuffer over one of the three CPU
// concurrent buffers, or a DeviceBuffer. Inserts take `&mut self` on both (an insert never
// races a gather of the slot it overwrites), so the buffer sits behind a lock: an RwLock
// for the HybridBuffer (learners sample and update under the read lock, concurrently; an
// actor's staged insert of 16 takes the write lock), a Mutex for the DeviceBuffer (its
// update_priorities is `&mut self` too).

/// Keys of a sampled batch: on the host (HybridBuffer's CPU tree) or on the device.
enum BatchKeys {
    Host(Vec<Key>),
    Device(DeviceKeys),
}

/// A sampled batch: every tensor on the learners' device.
struct Batch {
    keys: BatchKeys,
    weights: Tensor,      // [B, 1] f32
    columns: Vec<Tensor>, // obs, action, reward, next_obs, done; each [B, shape]
}

trait Replay: Send + Sync {
    fn insert(&self, columns: &[Tensor]) -> kary_replay::Result<()>;
    fn sample(&self, batch: usize, beta: f64, rng: &mut Rng) -> kary_replay::Result<Batch>;
    /// Writes `priorities` ([B] f32 on the device) back by key.
    fn update(&self, keys: &BatchKeys, priorities: &Tensor) -> kary_replay::Result<UpdateReport>;
    fn len(&self) -> usize;
    fn name(&self) -> String;
}

struct Hybrid<T: ConcurrentBuffer>(RwLock<HybridBuffer<T>>, &'static str);

impl<T: ConcurrentBuffer + Send + Sync> Replay for Hybrid<T> {
    fn insert(&self, columns: &[Tensor]) -> kary_replay::Result<()> {
        self.0
            .write()
            .unwrap()
            .insert_batch(columns, None)
            .map(|_| ())
    }
    fn sample(&self, batch: usize, beta: f64, rng: &mut Rng) -> kary_replay::Result<Batch> {
        let buffer = self.0.read().unwrap();
        let s = buffer.sample(batch, beta, SampleMode::Stratified, rng)?;
        // The B weights travel with the B indices; the columns were gathered on the device.
        let weights = Tensor::from_slice(&s.host.weights)
            .to_kind(Kind::Float)
            .to_device(buffer.device())
            .view([-1, 1]);
        Ok(Batch {
            keys: BatchKeys::Host(s.host.keys),
            weights,
            columns: s.columns,
        })
    }
    fn update(&self, keys: &BatchKeys, priorities: &Tensor) -> kary_replay::Result<UpdateReport> {
        let BatchKeys::Host(keys) = keys else {
            unreachable!("a HybridBuffer's keys are on the host")
        };
        let ps = Vec::<f64>::try_from(&priorities.to_kind(Kind::Double).to_device(Device::Cpu))
            .expect("a 1-D tensor");
        self.0.read().unwrap().update_priorities(keys, &ps)
    }
    fn len(&self) -> usize {
        self.0.read().unwrap().len()
    }
    fn name(&self) -> String {
        format!("HybridBuffer<{}>", self.1)
    }
}

struct OnDevice(Mutex<DeviceBuffer>);

impl Replay for OnDevice {
    fn insert(&self, columns: &[Tensor]) -> kary_replay::Result<()> {
        self.0
            .lock()
            .unwrap()
            .insert_batch(columns, None)
            .map(|_| ())
    }
    fn sample(&self, batch: usize, beta: f64, _rng: &mut Rng) -> kary_replay::Result<Batch> {
        // Targets are drawn with torch's generator on the device (seeded in main).
        let s = self
            .0
            .lock()
            .unwrap()
            .sample(batch, beta, SampleMode::Stratified)?;
        Ok(Batch {
            keys: BatchKeys::Device(s.keys),
            weights: s.weights.to_kind(Kind::Float).view([-1, 1]),
            columns: s.columns,
        })
    }
    fn update(&self, keys: &BatchKeys, priorities: &Tensor) -> kary_replay::Result<UpdateReport> {
        let BatchKeys::Device(keys) = keys else {
            unreachable!("a DeviceBuffer's keys are on the device")
        };
        self.0.lock().unwrap().update_priorities(keys, priorities)
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn name(&self) -> String {
        "DeviceBuffer".into()
    }
}

/// The schema's shapes: obs, action (DQN: one i64 index; TD3: the action dimension in f32).
struct Dims {
    obs: usize,
    act: usize,
    discrete: bool,
}

fn dims_for(o: &Options) -> Dims {
    if o.algo == "dqn" {
        Dims {
            obs: CartPole::OBS,
            act: 1,
            discrete: true,
        }
    } else {
        Dims {
            obs: Pendulum::OBS,
            act: Pendulum::ACTION_DIM,
            discrete: false,
        }
    }
}

fn make_replay(
    o: &Options,
    h: &Hyper,
    d: &Dims,
    capacity: usize,
    device: Device,
) -> kary_replay::Result<Box<dyn Replay>> {
    let schema = Schema::new()
        .column("obs", DType::F32, d.obs)
        .column(
            "action",
            if d.discrete { DType::I64 } else { DType::F32 },
            d.act,
        )
        .column("reward", DType::F32, 1)
        .column("next_obs", DType::F32, d.obs)
        .column("done", DType::F32, 1);
    let config = Config::builder(capacity, schema)
        .fanout(o.fanout)
        .alpha(h.alpha)
        .default_priority(DefaultPriority::RunningMax)
        .build()?;
    Ok(match (o.sampler, o.variant.as_str()) {
        (Sampler::Device, _) => Box::new(OnDevice(Mutex::new(DeviceBuffer::new(
            config,
            device,
            Precision::F64,
        )?))),
        (Sampler::Hybrid, "global") => Box::new(Hybrid::<GlobalLockBuffer>(
            RwLock::new(HybridBuffer::new(config, device)?),
            "GlobalLock",
        )),
        (Sampler::Hybrid, "split") => Box::new(Hybrid::<SplitLockBuffer>(
            RwLock::new(HybridBuffer::new(config, device)?),
            "SplitLock",
        )),
        (Sampler::Hybrid, _) => Box::new(Hybrid::<LockFreeBuffer>(
            RwLock::new(HybridBuffer::new(config, device)?),
            "LockFree",
        )),
    })
}

// ---------------------------------------------------------------------------------------
// Actors

struct Shared<'a> {
    o: &'a Options,
    h: &'a Hyper,
    dims: Dims,
    device: Device,
    buffer: &'a dyn Replay,
    rate: &'a RateControl,
    board: &'a SnapshotBoard,
    stats: &'a Stats,
}

/// Transitions staged on the host and inserted 16 at a time (one lock, one transfer):
/// items become sampleable when the stage is flushed, as the C++ actors' `kr::Writer`.
struct Stage {
    obs: Vec<f32>,
    act_i: Vec<i64>,
    act_f: Vec<f32>,
    reward: Vec<f32>,
    next: Vec<f32>,
    done: Vec<f32>,
}

const STAGE: usize = 16;

impl Stage {
    fn new() -> Stage {
        Stage {
            obs: vec![],
            act_i: vec![],
            act_f: vec![],
            reward: vec![],
            next: vec![],
            done: vec![],
        }
    }
    fn len(&self) -> usize {
        self.reward.len()
    }
    fn flush(&mut self, s: &Shared) {
        let m = self.len() as i64;
        if m == 0 {
            return;
        }
        let d = &s.dims;
        let on = |t: Tensor, k: usize| t.view([m, k as i64]).to_device(s.device);
        let action = if d.discrete {
            on(Tensor::from_slice(&self.act_i), 1)
        } else {
            on(Tensor::from_slice(&self.act_f), d.act)
        };
        let columns = [
            on(Tensor::from_slice(&self.obs), d.obs),
            action,
            on(Tensor::from_slice(&self.reward), 1),
            on(Tensor::from_slice(&self.next), d.obs),
            on(Tensor::from_slice(&self.done), 1),
        ];
        s.buffer
            .insert(&columns)
            .expect("inserting a checked batch");
        for v in [
            &mut self.obs,
            &mut self.act_f,
            &mut self.reward,
            &mut self.next,
            &mut self.done,
        ] {
            v.clear();
        }
        self.act_i.clear();
    }
}

fn run_actor(s: &Shared, id: usize, actors_left: &AtomicUsize) {
    let mut rng = Rng::new(s.o.seed.wrapping_mul(7919).wrapping_add(id as u64 + 1));
    let mut scratch = Scratch::default();
    let mut stage = Stage::new();
    let mut snap = s.board.get();
    let mut since_refresh = 0;
    let mut obs = vec![0f32; s.dims.obs];
    let mut next = obs.clone();
    let mut cart = CartPole::default();
    let mut pend = Pendulum::default();
    let cartpole = s.o.env == "cartpole";
    if cartpole {
        cart.reset(&mut rng);
        cart.observe(&mut obs);
    } else {
        pend.reset(&mut rng);
        pend.observe(&mut obs);
    }
    let mut ret = 0.0;
    while s.rate.actor_step() {
        let step = s.rate.steps();
        since_refresh += 1;
        if since_refresh >= s.o.update_interval {
            snap = s.board.get();
            since_refresh = 0;
        }
        let r: StepResult;
        if cartpole {
            // Epsilon-greedy, epsilon falling linearly over eps_fraction of the run.
            let frac = (step as f64 / (s.h.eps_fraction * s.o.steps as f64)).min(1.0);
            let eps = s.h.eps_start + frac * (s.h.eps_end - s.h.eps_start);
            let a = if step < s.o.warmup || rng.uniform() < eps {
                rng.below(CartPole::ACTIONS as u32) as usize
            } else {
                snap.policy.argmax(&obs, &mut scratch)
            };
            r = cart.step(a);
            cart.observe(&mut next);
            stage.act_i.push(a as i64);
        } else {
            let max_u = Pendulum::MAX_TORQUE;
            let a = if step < s.o.warmup {
                rng.uniform_in(-f64::from(max_u), f64::from(max_u)) as f32
            } else {
                let mut out = [0f32];
                snap.policy.forward(&obs, &mut out, &mut scratch);
                (out[0] + (s.h.explore_noise * f64::from(max_u) * rng.normal()) as f32)
                    .clamp(-max_u, max_u)
            };
            r = pend.step(a);
            pend.observe(&mut next);
            stage.act_f.push(a);
        }
        stage.obs.extend_from_slice(&obs);
        stage.reward.push(r.reward as f32);
        stage.next.extend_from_slice(&next);
        stage.done.push(if r.terminated { 1.0 } else { 0.0 }); // truncation still bootstraps
        if stage.len() >= STAGE {
            stage.flush(s);
        }
        ret += r.reward;
        if r.terminated || r.truncated {
            s.stats.episode_done(ret);
            ret = 0.0;
            if cartpole {
                cart.reset(&mut rng);
                cart.observe(&mut obs);
            } else {
                pend.reset(&mut rng);
                pend.observe(&mut obs);
            }
        } else {
            std::mem::swap(&mut obs, &mut next);
        }
    }
    stage.flush(s);
    actors_left.fetch_sub(1, Ordering::AcqRel);
}

// ---------------------------------------------------------------------------------------
// Learners

/// DQN (double Q, Huber loss weighted by the importance weights): the gradients of the
/// q-network, |TD error| per item ([B] on the device) and the loss.
fn dqn_grads(a: &Agent, b: &Batch, h: &Hyper) -> (Vec<Option<Tensor>>, Tensor, f64) {
    let [obs, act, reward, next, done] = &b.columns[..] else {
        unreachable!()
    };
    let q = a.online[0].forward(obs).gather(1, act, false);
    let y = tch::no_grad(|| {
        let best = a.online[0].forward(next).argmax(1, true); // double Q: online picks
        let qn = a.target[0].forward(next).gather(1, &best, false); // target evaluates
        reward + (1.0 - done) * qn * h.gamma
    });
    let per_item = q.huber_loss(&y, Reduction::None, 1.0);
    let loss = (&b.weights * per_item).mean(None);
    let grads = Tensor::run_backward(&[&loss], &a.online_params(), false, false);
    let td = (&q - &y).detach().abs().view([-1]);
    (
        grads.into_iter().map(Some).collect(),
        td,
        loss.double_value(&[]),
    )
}

/// TD3 (twin critics, target smoothing; critic loss weighted by the importance weights;
/// the actor's gradient on policy rounds only): gradients for [actor, critic1, critic2]
/// (actor's None off the policy rounds), |TD error| of the first critic, the critic loss.
fn td3_grads(
    a: &Agent,
    b: &Batch,
    h: &Hyper,
    policy_round: bool,
) -> (Vec<Option<Tensor>>, Tensor, f64) {
    let [obs, act, reward, next, done] = &b.columns[..] else {
        unreachable!()
    };
    let max_u = f64::from(Pendulum::MAX_TORQUE);
    let y = tch::no_grad(|| {
        let noise = (act.randn_like() * (h.policy_noise * max_u))
            .clamp(-h.noise_clip * max_u, h.noise_clip * max_u);
        let next_a = (a.target[0].forward(next) + noise).clamp(-max_u, max_u);
        let na = Tensor::cat(&[next, &next_a], 1);
        let tq = a.target[1].forward(&na).minimum(&a.target[2].forward(&na));
        reward + (1.0 - done) * tq * h.gamma
    });
    let sa = Tensor::cat(&[obs, act], 1);
    let q1 = a.online[1].forward(&sa);
    let q2 = a.online[2].forward(&sa);
    let critic_loss = (&b.weights * ((&q1 - &y).square() + (&q2 - &y).square())).mean(None);
    let critic_ps: Vec<&Tensor> = a.online[1..].iter().flat_map(|n| n.params.iter()).collect();
    let critic_g = Tensor::run_backward(&[&critic_loss], &critic_ps, false, false);
    let mut grads: Vec<Option<Tensor>> = Vec::new();
    if policy_round {
        let actor_ps: Vec<&Tensor> = a.online[0].params.iter().collect();
        let pa = a.online[0].forward(obs);
        let actor_loss = -a.online[1].forward(&Tensor::cat(&[obs, &pa], 1)).mean(None);
        grads.extend(
            Tensor::run_backward(&[&actor_loss], &actor_ps, false, false)
                .into_iter()
                .map(Some),
        );
    } else {
        grads.extend((0..a.online[0].params.len()).map(|_| None));
    }
    grads.extend(critic_g.into_iter().map(Some));
    let td = (&q1 - &y).detach().abs().view([-1]);
    (grads, td, critic_loss.double_value(&[]))
}

/// Samples a batch; None when the run stopped first. Retries on contention (a writer was
/// busy on the slots drawn) and waits while the buffer is still empty: with a short warm-up
/// the rate control may grant a batch before the first staged insert is flushed.
fn sample_with_retry(s: &Shared, rng: &mut Rng, beta: f64) -> Result<Option<Batch>, String> {
    let mut attempt = 0;
    loop {
        match s.buffer.sample(s.o.batch, beta, rng) {
            Ok(b) => return Ok(Some(b)),
            Err(e) if e.is_retryable() && attempt < 1000 => {
                attempt += 1;
                s.stats.contention_retries.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
            }
            Err(kary_replay::Error::Empty) if !s.rate.stopped() => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(kary_replay::Error::Empty) => return Ok(None),
            Err(e) => return Err(format!("sampling failed: {e}")),
        }
    }
}

/// Writes a batch's new priorities back and counts them.
fn write_back(s: &Shared, keys: &BatchKeys, priorities: &Tensor) -> Result<(), String> {
    let r = s.buffer.update(keys, priorities).map_err(|e| match e {
        kary_replay::Error::InvalidPriority { .. } => format!(
            "a TD error is not a valid priority ({e}): the loss diverged; try a smaller --lr"
        ),
        e => format!("writing priorities back failed: {e}"),
    })?;
    s.stats
        .priority_updates
        .fetch_add(r.applied as i64, Ordering::Relaxed);
    s.stats
        .stale_updates
        .fetch_add(r.stale as i64, Ordering::Relaxed);
    Ok(())
}

/// A learner thread: errors stop the whole run (the monitor reports them).
fn run_learner(s: &Shared, id: usize, server: &ParamServer, learn_total: i64) {
    if let Err(e) = learn(s, id, server, learn_total) {
        s.stats.fail(e);
        s.rate.stop();
        server.stop();
    }
    server.leave();
}

fn learn(s: &Shared, id: usize, server: &ParamServer, learn_total: i64) -> Result<(), String> {
    let mut a = Agent::new(s.o, s.h, s.device, true);
    server.pull(&mut a);
    let mut rng = Rng::new(s.o.seed.wrapping_mul(31).wrapping_add(id as u64 + 7));
    let mut pending: VecDeque<(BatchKeys, Tensor)> = VecDeque::new(); // --priority-delay
    while s.rate.learner_take(s.o.batch as i64) {
        let progress = (s.rate.steps() as f64 / learn_total as f64).min(1.0);
        let beta = s.h.beta0 + (1.0 - s.h.beta0) * progress;
        let Some(batch) = sample_with_retry(s, &mut rng, beta)? else {
            break;
        };
        let round = server.round();
        let (grads, td, loss) = if s.o.algo == "dqn" {
            dqn_grads(&a, &batch, s.h)
        } else {
            td3_grads(&a, &batch, s.h, round % s.h.policy_delay == 0)
        };
        // |TD error| + eps by key, D batches late (--priority-delay): the thesis' relaxed order.
        pending.push_back((batch.keys, td + s.h.priority_eps));
        while pending.len() > s.o.priority_delay {
            let (k, p) = pending.pop_front().unwrap();
            write_back(s, &k, &p)?;
        }
        if !server.submit(grads) {
            break;
        }
        server.pull(&mut a);
        s.stats.set_loss(loss);
    }
    for (k, p) in &pending {
        write_back(s, k, p)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Greedy evaluation on the evaluator's own environments (the C++ trainer's seeds).

fn evaluate(o: &Options, policy: &NativeMlp, episodes: usize, salt: u64) -> f64 {
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

fn solve_threshold(o: &Options) -> f64 {
    if o.env == "cartpole" {
        475.0
    } else {
        -200.0
    }
}

// ---------------------------------------------------------------------------------------
// Design-space exploration (--auto): profile f_a(x) and f_l(x), solve equation 5.

fn publish_fresh_policy(board: &SnapshotBoard, o: &Options, h: &Hyper) {
    board.publish(Snapshot {
        policy: Agent::new(o, h, Device::Cpu, false).online[0].native(),
        round: 0,
    });
}

fn profile_actors(o: &Options, h: &Hyper, device: Device, x: usize) -> f64 {
    // Act as after the exploration schedule (epsilon at its floor, no warm-up).
    let mut p = o.clone();
    p.steps = 1;
    p.warmup = 0;
    let d = dims_for(&p);
    let buffer = make_replay(&p, h, &d, 1 << 16, device).expect("a valid profiling buffer");
    let rate = RateControl::new(1.0, 1 << 40, 1 << 40, 0); // warm-up forever: actors never wait
    let board = SnapshotBoard::default();
    publish_fresh_policy(&board, &p, h);
    let stats = Stats::default();
    let s = Shared {
        o: &p,
        h,
        dims: d,
        device,
        buffer: &*buffer,
        rate: &rate,
        board: &board,
        stats: &stats,
    };
    let left = AtomicUsize::new(x);
    let t0 = Instant::now();
    let (steps, dt) = std::thread::scope(|sc| {
        for i in 0..x {
            let (s, left) = (&s, &left);
            sc.spawn(move || run_actor(s, i, left));
        }
        std::thread::sleep(Duration::from_secs_f64(o.profile_seconds));
        let r = (rate.steps(), t0.elapsed().as_secs_f64());
        rate.stop();
        r
    });
    steps as f64 / dt
}

fn profile_learners(o: &Options, h: &Hyper, device: Device, x: usize) -> f64 {
    // A buffer filled by random play, then x learners doing real rounds, unthrottled.
    let d = dims_for(o);
    let buffer = make_replay(o, h, &d, 1 << 14, device).expect("a valid profiling buffer");
    {
        let mut fill = o.clone();
        fill.steps = 1 << 14;
        fill.warmup = 1 << 40;
        let rate = RateControl::new(1.0, 1 << 40, fill.steps, 0);
        let board = SnapshotBoard::default();
        publish_fresh_policy(&board, &fill, h);
        let stats = Stats::default();
        let s = Shared {
            o: &fill,
            h,
            dims: dims_for(o),
            device,
            buffer: &*buffer,
            rate: &rate,
            board: &board,
            stats: &stats,
        };
        run_actor(&s, 0, &AtomicUsize::new(1));
    }
    let board = SnapshotBoard::default();
    let server = ParamServer::new(o, h, Agent::new(o, h, device, false), x, &board);
    let rate = RateControl::new(1e6, 0, 1 << 40, 1 << 40);
    // Let the learners take batches freely: pretend the actors have run far ahead.
    while rate.steps() < 1000 && rate.actor_step() {}
    let stats = Stats::default();
    let s = Shared {
        o,
        h,
        dims: d,
        device,
        buffer: &*buffer,
        rate: &rate,
        board: &board,
        stats: &stats,
    };
    let t0 = Instant::now();
    let (rounds, dt) = std::thread::scope(|sc| {
        for i in 0..x {
            let (s, server) = (&s, &server);
            sc.spawn(move || run_learner(s, i, server, 1 << 40));
        }
        std::thread::sleep(Duration::from_secs_f64(o.profile_seconds));
        let r = (server.round(), t0.elapsed().as_secs_f64());
        rate.stop();
        server.stop();
        r
    });
    rounds as f64 * x as f64 / dt // gradient steps (batches) per second
}

fn choose_threads(o: &mut Options, h: &Hyper, device: Device) {
    let m = if o.max_threads > 0 {
        o.max_threads
    } else {
        std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .max(2)
    };
    let (mut fa, mut fl) = (Vec::new(), Vec::new());
    println!(
        "--auto: profiling 1..{} actor and learner threads ({:.1} s each), M = {m} cores",
        m - 1,
        o.profile_seconds
    );
    println!(
        "{:>8} {:>18} {:>22}",
        "threads", "f_a (env steps/s)", "f_l (grad steps/s)"
    );
    for x in 1..m {
        fa.push(profile_actors(o, h, device, x));
        fl.push(profile_learners(o, h, device, x));
        println!("{x:>8} {:>18.0} {:>22.1}", fa[x - 1], fl[x - 1]);
        let _ = std::io::stdout().flush();
    }
    let ui = o.batch as f64 / o.replay_ratio; // env steps per gradient step
    let c = solve_equation5(&fa, &fl, ui, m).expect("M >= 2 leaves a pair");
    println!(
        "--auto: equation 5 with update_interval = B/R = {}/{} = {ui:.3} env steps per gradient step:",
        o.batch, o.replay_ratio
    );
    println!(
        "--auto: choose {} actors + {} learners: f_a = {:.0}, update_interval x f_l = {:.0} env steps/s (balanced {:.0})",
        c.actors,
        c.learners,
        fa[c.actors - 1],
        ui * fl[c.learners - 1],
        c.balanced
    );
    o.actors = c.actors;
    o.learners = c.learners;
}

// ---------------------------------------------------------------------------------------

fn num(v: f64) -> String {
    if v.is_nan() {
        String::new()
    } else {
        format!("{v:.6}")
    }
}

fn train(mut o: Options) -> Result<(), String> {
    let device = match o.device.as_str() {
        "cpu" => Device::Cpu,
        "cuda" if tch::Cuda::is_available() => Device::Cuda(0),
        "cuda" => {
            return Err(
                "--device cuda: CUDA is not available (tch::Cuda::is_available() is false)".into(),
            )
        }
        _ => Device::cuda_if_available(),
    };
    let h = hyper_for(&o);
    tch::manual_seed(o.seed as i64);
    if o.automatic {
        choose_threads(&mut o, &h, device);
    }
    tch::manual_seed(o.seed as i64);
    let o = o;
    let d = dims_for(&o);
    let buffer = make_replay(&o, &h, &d, o.capacity, device).map_err(|e| format!("buffer: {e}"))?;
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
    let s = Shared {
        o: &o,
        h: &h,
        dims: d,
        device,
        buffer: &*buffer,
        rate: &rate,
        board: &board,
        stats: &stats,
    };

    println!(
        "rust_trainer: {} {}, {} actors + {} learners, {} K={} capacity {} on {:?}, batch {}, replay ratio {}, {} env steps, seed {}",
        o.env, o.algo, o.actors, o.learners, buffer.name(), o.fanout, o.capacity, device, o.batch,
        o.replay_ratio, o.steps, o.seed
    );
    let _ = std::io::stdout().flush();

    let mut csv = match o.csv.as_str() {
        "" => None,
        path => {
            let mut f = std::io::BufWriter::new(
                std::fs::File::create(path).map_err(|e| format!("cannot write {path}: {e}"))?,
            );
            writeln!(
                f,
                "kind,wall_s,env_steps,grad_steps,episodes,buffer_len,train_return_100,eval_return,env_steps_per_s,grad_steps_per_s,loss,priority_updates,stale_updates"
            )
            .map_err(|e| e.to_string())?;
            Some(f)
        }
    };
    let t0 = Instant::now();
    let actors_left = AtomicUsize::new(o.actors);
    let threshold = solve_threshold(&o);
    let mut solved: Option<(i64, f64)> = None;
    let (mut evals_after, mut evals_after_ok, mut eval_count) = (0, 0, 0u64);
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
        let mut next_eval = o.eval_every;
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
    let wall = t0.elapsed().as_secs_f64();
    let (updates, stale) = (
        stats.priority_updates.load(Ordering::Relaxed),
        stats.stale_updates.load(Ordering::Relaxed),
    );
    println!(
        "done: {} env steps, {} gradient steps, {} episodes in {wall:.1} s; {updates} priority updates applied, {stale} stale; {} sampling retries",
        rate.steps(),
        server.round(),
        stats.episodes.load(Ordering::Relaxed),
        stats.contention_retries.load(Ordering::Relaxed)
    );
    match solved {
        Some((st, ts)) => println!(
            "solved: first greedy evaluation >= {threshold} at {st} env steps, {ts:.1} s; later evaluations >= threshold: {evals_after_ok} of {evals_after}"
        ),
        None => println!("not solved: no greedy evaluation reached {threshold} (last {last_eval:.1})"),
    }
    // One machine-readable line for scripts/trainer_results.py (the C++ trainer's, with
    // trainer=rust and the sampler and device).
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
        solved.is_some() as i32,
        solved.map_or(-1, |x| x.0),
        solved.map_or(-1.0, |x| x.1),
        rate.steps(),
        server.round(),
        if device == Device::Cpu { "cpu" } else { "cuda" }
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written Adam follows torch.optim.Adam (tch's `nn::Adam`, which calls it)
    /// step for step on a quadratic.
    #[test]
    fn adam_matches_torch() {
        let init = Tensor::from_slice(&[0.5f32, -2.0, 3.0]);
        let goal = Tensor::from_slice(&[1.0f32, 1.0, -1.0]);
        let vs = tch::nn::VarStore::new(Device::Cpu);
        let w = vs.root().var_copy("w", &init);
        let mut torch_adam =
            tch::nn::OptimizerConfig::build(tch::nn::Adam::default(), &vs, 0.05).unwrap();
        let mut ours = init.copy();
        let mut adam = Adam::new(0.05, &[&ours]);
        for _ in 0..20 {
            let loss = (&w - &goal).square().sum(None);
            torch_adam.backward_step(&loss);
            let grad = (&ours - &goal) * 2.0;
            adam.step(&mut [&mut ours], &[grad]);
        }
        let diff = (&ours - &w.detach()).abs().max().double_value(&[]);
        assert!(diff < 1e-6, "ours and torch's Adam differ by {diff}");
        // And it moved: a broken step would leave the parameters where they were.
        assert!((&ours - &init).abs().min().double_value(&[]) > 0.1);
    }

    /// A round waits for every learner and applies the sum of their gradients (averaged):
    /// +1 from one learner and -1 from the other cancel, so round 1 leaves every parameter
    /// exactly where it was (were either gradient lost, each would move by the learning
    /// rate: Adam's first step is lr x sign); round 2 (+1 and +3) moves every one down.
    #[test]
    fn a_round_averages_every_learners_gradients() {
        let o = parse_options(&[]).unwrap();
        let h = hyper_for(&o);
        let board = SnapshotBoard::default();
        let server = ParamServer::new(&o, &h, Agent::new(&o, &h, Device::Cpu, false), 2, &board);
        let params = || -> Vec<Tensor> {
            let st = server.state.lock().unwrap();
            st.master.online_params().iter().map(|p| p.copy()).collect()
        };
        let before = params();
        let grads = |v: f64| -> Vec<Option<Tensor>> {
            before.iter().map(|p| Some(p.ones_like() * v)).collect()
        };
        let round = |a: f64, b: f64| {
            let (g1, g2) = (grads(a), grads(b));
            std::thread::scope(|s| {
                let a = s.spawn(|| server.submit(g1));
                let b = s.spawn(|| server.submit(g2));
                assert!(a.join().unwrap() && b.join().unwrap());
            });
        };
        round(1.0, -1.0);
        assert_eq!((server.round(), board.get().round), (1, 1));
        for (p, b) in params().iter().zip(&before) {
            assert!(p.equal(b), "a zero average moved a parameter");
        }
        round(1.0, 3.0);
        assert_eq!(server.round(), 2);
        for (p, b) in params().iter().zip(&before) {
            let hi = (p - b).max().double_value(&[]);
            assert!(hi < -0.5 * h.lr, "a parameter moved by {hi}, lr {}", h.lr);
        }
        // A replica pulls exactly the master's weights.
        let mut replica = Agent::new(&o, &h, Device::Cpu, true);
        server.pull(&mut replica);
        let st = server.state.lock().unwrap();
        for (r, m) in replica
            .online_params()
            .iter()
            .zip(st.master.online_params())
        {
            assert!(r.equal(m));
        }
    }

    /// The published native policy computes what the tch network computes.
    #[test]
    fn native_policy_matches_the_network() {
        for env in ["cartpole", "pendulum"] {
            let o = parse_options(&["--env".into(), env.into()]).unwrap();
            let h = hyper_for(&o);
            let agent = Agent::new(&o, &h, Device::Cpu, false);
            let net = &agent.online[0];
            let native = net.native();
            let x = Tensor::randn([5, net.sizes[0] as i64], (Kind::Float, Device::Cpu));
            let want = Vec::<f32>::try_from(&net.forward(&x).flatten(0, -1)).unwrap();
            let xs = Vec::<f32>::try_from(&x.flatten(0, -1)).unwrap();
            let mut scratch = Scratch::default();
            let n_out = native.outputs();
            for (r, row) in xs.chunks(net.sizes[0]).enumerate() {
                let mut out = vec![0f32; n_out];
                native.forward(row, &mut out, &mut scratch);
                for (j, v) in out.iter().enumerate() {
                    let w = want[r * n_out + j];
                    assert!((v - w).abs() <= 1e-5 * (1.0 + w.abs()), "{env}: {v} vs {w}");
                }
            }
        }
    }
}
