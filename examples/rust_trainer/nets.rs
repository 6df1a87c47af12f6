//! Networks: the hyperparameters, ReLU MLPs as plain tensors, the DQN and TD3 agents, and
//! the target updates.

use crate::envs::{CartPole, Pendulum};
use crate::{cli::*, policy::*};
use tch::{Device, Kind, Tensor};

// Hyperparameters (the README's table; the C++ trainer's `Hyper`).

pub(crate) struct Hyper {
    pub(crate) gamma: f64,
    pub(crate) lr: f64,
    pub(crate) priority_eps: f64,
    pub(crate) alpha: f64,
    pub(crate) beta0: f64,
    pub(crate) hidden: usize,
    pub(crate) eps_start: f64,
    pub(crate) eps_end: f64,
    pub(crate) eps_fraction: f64,
    pub(crate) dqn_tau: f64,
    pub(crate) policy_noise: f64,
    pub(crate) noise_clip: f64,
    pub(crate) explore_noise: f64,
    pub(crate) policy_delay: i64,
    pub(crate) td3_tau: f64,
}

pub(crate) fn hyper_for(o: &Options) -> Hyper {
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

// Networks: ReLU MLPs as plain tensors (weight [out, in], bias [out] per layer), initialized
// as torch.nn.Linear (uniform in +-1/sqrt(fan_in)).

pub(crate) struct Net {
    pub(crate) sizes: Vec<usize>,
    pub(crate) tanh_scale: Option<f32>,
    pub(crate) params: Vec<Tensor>, // w0, b0, w1, b1, ...
}

impl Net {
    pub(crate) fn new(
        sizes: Vec<usize>,
        tanh_scale: Option<f32>,
        device: Device,
        trainable: bool,
    ) -> Net {
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

    pub(crate) fn forward(&self, x: &Tensor) -> Tensor {
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
    pub(crate) fn native(&self) -> NativeMlp {
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
pub(crate) struct Agent {
    pub(crate) online: Vec<Net>,
    pub(crate) target: Vec<Net>,
}

impl Agent {
    pub(crate) fn new(o: &Options, h: &Hyper, device: Device, trainable: bool) -> Agent {
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

    pub(crate) fn online_params(&self) -> Vec<&Tensor> {
        self.online.iter().flat_map(|n| n.params.iter()).collect()
    }
}

pub(crate) fn copy_all(from: &[Net], to: &mut [Net]) {
    tch::no_grad(|| {
        for (f, t) in from.iter().zip(to.iter_mut()) {
            for (a, b) in f.params.iter().zip(t.params.iter_mut()) {
                b.copy_(a);
            }
        }
    });
}

pub(crate) fn soft_update(from: &[Net], to: &mut [Net], tau: f64) {
    tch::no_grad(|| {
        for (f, t) in from.iter().zip(to.iter_mut()) {
            for (a, b) in f.params.iter().zip(t.params.iter_mut()) {
                let mixed = &*b * (1.0 - tau) + a * tau;
                b.copy_(&mixed);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

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
