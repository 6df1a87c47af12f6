//! Learners: sample a batch with importance weights, compute the DQN or TD3 loss and
//! gradients on a replica, write |TD error| + eps back by key, and join the parameter
//! server's round.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::envs::{Pendulum, Rng};
use crate::{actor::*, nets::*, optim::*, replay::*};
use tch::{Reduction, Tensor};

/// DQN (double Q, Huber loss weighted by the importance weights): the gradients of the
/// q-network, |TD error| per item ([B] on the device) and the loss.
pub(crate) fn dqn_grads(a: &Agent, b: &Batch, h: &Hyper) -> (Vec<Option<Tensor>>, Tensor, f64) {
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
pub(crate) fn td3_grads(
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
pub(crate) fn sample_with_retry(
    s: &Shared,
    rng: &mut Rng,
    beta: f64,
) -> Result<Option<Batch>, String> {
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
pub(crate) fn write_back(s: &Shared, keys: &BatchKeys, priorities: &Tensor) -> Result<(), String> {
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
pub(crate) fn run_learner(s: &Shared, id: usize, server: &ParamServer, learn_total: i64) {
    if let Err(e) = learn(s, id, server, learn_total) {
        s.stats.fail(e);
        s.rate.stop();
        server.stop();
    }
    server.leave();
}

pub(crate) fn learn(
    s: &Shared,
    id: usize,
    server: &ParamServer,
    learn_total: i64,
) -> Result<(), String> {
    let mut a = Agent::new(s.o, s.h, s.device, true);
    server.pull(&mut a);
    let mut rng = s.rngs.learners[id].lock().unwrap().clone();
    let mut pending: VecDeque<(BatchKeys, Tensor)> = VecDeque::new(); // --priority-delay
    while s.rate.learner_take(s.o.batch as i64) {
        let progress = (s.rate.steps() as f64 / learn_total as f64).min(1.0);
        let beta = s.h.beta0 + (1.0 - s.h.beta0) * progress;
        let Some(batch) = sample_with_retry(s, &mut rng, beta)? else {
            break;
        };
        // A checkpoint saves the generator as of the last batch drawn.
        s.rngs.learners[id].lock().unwrap().clone_from(&rng);
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
