//! Actors: each steps its own environment with its own copy of the policy and stages its
//! transitions 16 at a time into the buffer.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::envs::{CartPole, Pendulum, StepResult};
use crate::{ckpt::RngBoard, cli::*, policy::*, rate::*};
use crate::{monitor::*, nets::*, replay::*};
use tch::{Device, Tensor};

/// What every actor and learner thread of a run shares.
pub(crate) struct Shared<'a> {
    pub(crate) o: &'a Options,
    pub(crate) h: &'a Hyper,
    pub(crate) dims: Dims,
    pub(crate) device: Device,
    pub(crate) buffer: &'a dyn Replay,
    pub(crate) rate: &'a RateControl,
    pub(crate) board: &'a SnapshotBoard,
    pub(crate) stats: &'a Stats,
    pub(crate) rngs: &'a RngBoard,
}

/// Transitions staged on the host and inserted 16 at a time (one lock, one transfer):
/// items become sampleable when the stage is flushed, as the C++ actors' `kr::Writer`.
pub(crate) struct Stage {
    pub(crate) obs: Vec<f32>,
    pub(crate) act_i: Vec<i64>,
    pub(crate) act_f: Vec<f32>,
    pub(crate) reward: Vec<f32>,
    pub(crate) next: Vec<f32>,
    pub(crate) done: Vec<f32>,
    /// How each transition's episode goes on (what `--nstep`'s lanes need beside `done`).
    pub(crate) ends: Vec<End>,
}

pub(crate) const STAGE: usize = 16;

impl Stage {
    pub(crate) fn new() -> Stage {
        Stage {
            obs: vec![],
            act_i: vec![],
            act_f: vec![],
            reward: vec![],
            next: vec![],
            done: vec![],
            ends: vec![],
        }
    }
    pub(crate) fn len(&self) -> usize {
        self.reward.len()
    }
    /// Insert what is staged, as actor `lane`'s transitions.
    pub(crate) fn flush(&mut self, s: &Shared, lane: usize) {
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
            .insert(lane, &columns, &self.ends)
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
        self.ends.clear();
    }
}

pub(crate) fn run_actor(s: &Shared, id: usize, actors_left: &AtomicUsize) {
    let mut rng = s.rngs.actors[id].lock().unwrap().clone();
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
    loop {
        match s.rate.actor_step() {
            Step::Go => {}
            Step::Hold => {
                // A checkpoint: every counted step's transition goes into the buffer first.
                stage.flush(s, id);
                *s.rngs.actors[id].lock().unwrap() = rng.clone();
                s.rate.park();
                continue;
            }
            Step::End => break,
        }
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
        stage.ends.push(match (r.terminated, r.truncated) {
            (true, _) => End::Terminated,
            (false, true) => End::Truncated,
            (false, false) => End::Continues,
        });
        if stage.len() >= STAGE {
            stage.flush(s, id);
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
    stage.flush(s, id);
    *s.rngs.actors[id].lock().unwrap() = rng;
    actors_left.fetch_sub(1, Ordering::AcqRel);
}
