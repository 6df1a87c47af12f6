//! The optimizer and the parameter server: a hand-written Adam (torch.optim.Adam's step),
//! and the rounds in which learners' gradients are averaged into the master copy.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::nets::*;
use crate::{cli::*, policy::*};
use tch::Tensor;

/// Adam (torch.optim.Adam's defaults: betas 0.9 / 0.999, eps 1e-8, no weight decay) over a
/// list of parameters, stepped with the averaged gradients the parameter server holds.
pub(crate) struct Adam {
    pub(crate) lr: f64,
    pub(crate) step: i32,
    pub(crate) m: Vec<Tensor>,
    pub(crate) v: Vec<Tensor>,
}

impl Adam {
    pub(crate) const B1: f64 = 0.9;
    pub(crate) const B2: f64 = 0.999;
    pub(crate) const EPS: f64 = 1e-8;

    pub(crate) fn new(lr: f64, params: &[&Tensor]) -> Adam {
        Adam {
            lr,
            step: 0,
            m: params.iter().map(|p| p.zeros_like()).collect(),
            v: params.iter().map(|p| p.zeros_like()).collect(),
        }
    }

    pub(crate) fn step(&mut self, params: &mut [&mut Tensor], grads: &[Tensor]) {
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

// The parameter server: learners submit their gradients for a round; the last to arrive
// averages them into the master copy, steps Adam, updates the targets and publishes the
// policy; every learner then copies the master weights into its replica.
//
// A checkpoint holds the learners at a round's end (`hold`): the round that completes next
// leaves every learner waiting in `submit` until `release`, each having written its batch's
// priorities back and its gradient into the master copy. `quiet` says when all are there.

pub(crate) struct ServerState {
    pub(crate) master: Agent,
    pub(crate) sums: Vec<Option<Tensor>>, // per online parameter, in Agent::online_params order
    pub(crate) opts: Vec<Adam>,           // DQN: {q}; TD3: {actor, critics}
    pub(crate) active: usize,
    pub(crate) arrived: usize,
    pub(crate) round: i64,
    pub(crate) stopped: bool,
    /// A checkpoint asked the learners to stop at the next round's end.
    pub(crate) hold: bool,
    /// A round ended under `hold`: learners wait in `submit` until `release`.
    pub(crate) held: bool,
    /// Learners waiting because `held`.
    pub(crate) held_waiters: usize,
}

pub(crate) struct ParamServer<'a> {
    pub(crate) dqn: bool,
    pub(crate) h: &'a Hyper,
    pub(crate) board: &'a SnapshotBoard,
    pub(crate) state: Mutex<ServerState>,
    pub(crate) cv: Condvar,
}

impl<'a> ParamServer<'a> {
    pub(crate) fn new(
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
                hold: false,
                held: false,
                held_waiters: 0,
            }),
            cv: Condvar::new(),
        };
        let st = server.state.lock().unwrap();
        server.publish(&st);
        drop(st);
        server
    }

    pub(crate) fn round(&self) -> i64 {
        self.state.lock().unwrap().round
    }

    /// Adds this learner's gradients (one per online parameter; None where it has none this
    /// round) and blocks until the round is applied. False if the server stopped.
    pub(crate) fn submit(&self, grads: Vec<Option<Tensor>>) -> bool {
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
            self.wait_released(st);
            return true;
        }
        let st = self
            .cv
            .wait_while(st, |s| s.round == my_round && !s.stopped)
            .unwrap();
        let applied = st.round != my_round;
        self.wait_released(st);
        applied
    }

    /// Waits while a checkpoint holds the learners (after the round this learner joined).
    fn wait_released(&self, mut st: MutexGuard<'_, ServerState>) {
        if st.held && !st.stopped {
            st.held_waiters += 1;
            self.cv.notify_all();
            st = self.cv.wait_while(st, |s| s.held && !s.stopped).unwrap();
            st.held_waiters -= 1;
        }
    }

    /// Ask the learners to stop at the next round's end (`quiet` says when they have).
    pub(crate) fn hold(&self) {
        self.state.lock().unwrap().hold = true;
    }

    /// Every learner still running waits at a round's end (or none is running).
    pub(crate) fn quiet(&self) -> bool {
        let st = self.state.lock().unwrap();
        st.active == 0 || st.stopped || (st.held && st.held_waiters == st.active)
    }

    /// Let held learners go on.
    pub(crate) fn release(&self) {
        let mut st = self.state.lock().unwrap();
        st.hold = false;
        st.held = false;
        self.cv.notify_all();
    }

    /// The master networks, the optimizers and the round, as named tensors (the trainer's
    /// checkpoint file). Call while the learners are held.
    pub(crate) fn state_tensors(&self) -> Vec<(String, Tensor)> {
        let st = self.state.lock().unwrap();
        let mut out = vec![("round".to_string(), Tensor::from(st.round))];
        for (which, nets) in [("online", &st.master.online), ("target", &st.master.target)] {
            for (n, net) in nets.iter().enumerate() {
                for (i, p) in net.params.iter().enumerate() {
                    out.push((format!("{which}.{n}.{i}"), p.detach().copy()));
                }
            }
        }
        for (o, adam) in st.opts.iter().enumerate() {
            out.push((format!("adam.{o}.step"), Tensor::from(i64::from(adam.step))));
            for (i, (m, v)) in adam.m.iter().zip(&adam.v).enumerate() {
                out.push((format!("adam.{o}.m.{i}"), m.copy()));
                out.push((format!("adam.{o}.v.{i}"), v.copy()));
            }
        }
        out
    }

    /// Restores what `state_tensors` saved (before any learner starts); publishes the
    /// restored policy. Every tensor must be there with its shape.
    pub(crate) fn restore(&self, saved: Vec<(String, Tensor)>) -> Result<(), String> {
        let mut saved: HashMap<String, Tensor> = saved.into_iter().collect();
        let mut take = |name: String, like: &Tensor| -> Result<Tensor, String> {
            let t = saved
                .remove(&name)
                .ok_or_else(|| format!("the trainer state has no tensor {name}"))?;
            if t.size() != like.size() {
                return Err(format!(
                    "tensor {name} has shape {:?}, the network {:?}",
                    t.size(),
                    like.size()
                ));
            }
            Ok(t.to_kind(like.kind()).to_device(like.device()))
        };
        let mut st = self.state.lock().unwrap();
        let round = take("round".into(), &Tensor::from(0i64))?.int64_value(&[]);
        let ServerState { master, opts, .. } = &mut *st;
        for (which, nets) in [
            ("online", &mut master.online),
            ("target", &mut master.target),
        ] {
            for (n, net) in nets.iter_mut().enumerate() {
                for (i, p) in net.params.iter_mut().enumerate() {
                    let t = take(format!("{which}.{n}.{i}"), p)?;
                    tch::no_grad(|| {
                        p.copy_(&t);
                    });
                }
            }
        }
        for (o, adam) in opts.iter_mut().enumerate() {
            adam.step =
                take(format!("adam.{o}.step"), &Tensor::from(0i64))?.int64_value(&[]) as i32;
            for i in 0..adam.m.len() {
                adam.m[i] = take(format!("adam.{o}.m.{i}"), &adam.m[i])?;
                adam.v[i] = take(format!("adam.{o}.v.{i}"), &adam.v[i])?;
            }
        }
        if let Some(extra) = saved.keys().next() {
            return Err(format!(
                "the trainer state has an unknown tensor {extra} (another --algo?)"
            ));
        }
        st.round = round;
        self.publish(&st);
        Ok(())
    }

    /// A learner that stops: the round no longer waits for it.
    pub(crate) fn leave(&self) {
        let mut st = self.state.lock().unwrap();
        st.active -= 1;
        if st.active > 0 && st.arrived >= st.active {
            self.apply(&mut st);
        }
    }

    pub(crate) fn stop(&self) {
        self.state.lock().unwrap().stopped = true;
        self.cv.notify_all();
    }

    pub(crate) fn pull(&self, replica: &mut Agent) {
        let st = self.state.lock().unwrap();
        copy_all(&st.master.online, &mut replica.online);
        copy_all(&st.master.target, &mut replica.target);
    }

    pub(crate) fn apply(&self, st: &mut ServerState) {
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
        st.held = st.hold;
        self.publish(st);
        self.cv.notify_all();
    }

    pub(crate) fn publish(&self, st: &ServerState) {
        self.board.publish(Snapshot {
            policy: st.master.online[0].native(),
            round: st.round,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    /// A hold stops both learners at a round's end (`quiet`), no round is applied while
    /// they are held, and `state_tensors` restores into a fresh server bit for bit
    /// (networks, Adam's moments and steps, the round).
    #[test]
    fn a_hold_stops_learners_at_a_round_end_and_the_state_restores() {
        let o = parse_options(&[]).unwrap();
        let h = hyper_for(&o);
        let board = SnapshotBoard::default();
        let server = ParamServer::new(&o, &h, Agent::new(&o, &h, Device::Cpu, false), 2, &board);
        let grads = || -> Vec<Option<Tensor>> {
            let st = server.state.lock().unwrap();
            st.master
                .online_params()
                .iter()
                .map(|p| Some(p.ones_like() * 0.5))
                .collect()
        };
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..50 {
                        if !server.submit(grads()) {
                            break;
                        }
                    }
                    server.leave();
                });
            }
            server.hold();
            while !server.quiet() {
                std::thread::yield_now();
            }
            let round = server.round();
            assert!((1..50).contains(&round), "held at round {round}");
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert_eq!(server.round(), round, "a round was applied while held");
            let saved = server.state_tensors();
            let board2 = SnapshotBoard::default();
            let fresh =
                ParamServer::new(&o, &h, Agent::new(&o, &h, Device::Cpu, false), 2, &board2);
            fresh.restore(saved).unwrap();
            assert_eq!(fresh.round(), round);
            {
                let (a, b) = (server.state.lock().unwrap(), fresh.state.lock().unwrap());
                for (x, y) in a
                    .master
                    .online_params()
                    .iter()
                    .zip(b.master.online_params())
                {
                    assert!(x.equal(y), "a restored parameter differs");
                }
                assert_eq!(a.opts[0].step, b.opts[0].step);
                assert!(a.opts[0].step > 0);
                for (x, y) in a.opts[0].v.iter().zip(&b.opts[0].v) {
                    assert!(x.equal(y), "a restored moment differs");
                }
            }
            server.release();
        });
        assert_eq!(server.round(), 50);
        // A state with a missing tensor is refused.
        let mut partial = server.state_tensors();
        partial.pop();
        let board3 = SnapshotBoard::default();
        let other = ParamServer::new(&o, &h, Agent::new(&o, &h, Device::Cpu, false), 1, &board3);
        assert!(other.restore(partial).unwrap_err().contains("no tensor"));
    }

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
}
