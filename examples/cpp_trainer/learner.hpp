// Learners: sample a batch straight into tensor memory, compute the DQN or TD3 loss and
// gradients on a replica, write |TD error| + eps back by key, join the parameter server.
#ifndef KARY_TRAINER_LEARNER_HPP
#define KARY_TRAINER_LEARNER_HPP

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "envs.hpp"
#include "framework.hpp"
#include "kary_replay.hpp"
#include "nets.hpp"
#include "param_server.hpp"
#include "replay.hpp"
#include "actor.hpp"

namespace trainer {

namespace kr = kary_replay;

struct LearnerBatch {
    std::size_t b;
    // `reward` is the one-step reward or the n-step return; `discount` what the target's
    // next value is multiplied by: gamma x (1 - done), or the n-step discount (0 after a
    // terminal).
    std::vector<float> obs, next, reward, done, discount, act_f, weights;
    std::vector<std::int64_t> act_i;
    std::vector<kr_key> keys;

    LearnerBatch(std::size_t batch, const Dims &d)
        : b(batch), obs(batch * d.obs), next(batch * d.obs), reward(batch), done(batch), discount(batch),
          act_f(d.discrete ? 0 : batch * d.act), weights(batch), act_i(d.discrete ? batch : 0), keys(batch) {}

    // Samples B items straight into this memory (no per-item copy); false when the run
    // stopped first. Retries on contention (a writer was busy on the slots drawn) and waits
    // while the buffer is still empty: with a short warm-up the rate control may grant a
    // batch before the first staged insert is flushed.
    bool sample(const Shared &s, kr::Rng &rng, double beta) {
        const Dims &d = s.dims;
        kr::SampleOut out{};
        out.keys = kr::Span<kr_key>(keys);
        out.weights_f32 = kr::Span<float>(weights);
        out.columns = {
            kr::ColumnOut(kr::Span<float>(obs)),
            d.discrete ? kr::ColumnOut(kr::Span<std::int64_t>(act_i)) : kr::ColumnOut(kr::Span<float>(act_f)),
            kr::ColumnOut(kr::Span<float>(reward)),
            kr::ColumnOut(kr::Span<float>(next)),
            kr::ColumnOut(kr::Span<float>(done)),
        };
        // The sequence buffer's outputs: one-step windows (obs, action, the step's reward into
        // `done`, unused), the next observation, the n-step return and discount.
        void *lane_columns[3] = {obs.data(), d.discrete ? static_cast<void *>(act_i.data()) : act_f.data(),
                                 done.data()};
        void *lane_next[1] = {next.data()};
        kr_seq_sample_out seq_out{};
        seq_out.keys = keys.data();
        seq_out.weights_f32 = weights.data();
        seq_out.columns = lane_columns;
        seq_out.next = lane_next;
        seq_out.returns = reward.data();
        seq_out.discounts = discount.data();
        for (int contention = 0;;) {
            try {
                if (s.seq) {
                    s.seq->sample_into(rng, b, beta, seq_out);
                } else {
                    s.buffer.sample_into(rng, b, beta, KR_SAMPLE_STRATIFIED, out);
                    for (std::size_t i = 0; i < b; ++i) {
                        discount[i] = static_cast<float>(s.h.gamma) * (1.0f - done[i]);
                    }
                }
                return true;
            } catch (const kr::Error &e) {
                // --processes: the run's end closes the buffer (its rate limit) under a waiting sample.
                if (e.status() == KR_E_CLOSED && s.rate.stopped()) return false;
                if (e.status() == KR_E_EMPTY || (s.seq && e.status() == KR_E_ZERO_TOTAL_PRIORITY)) {
                    if (s.rate.stopped()) return false;
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                    continue;
                }
                if (!e.retryable() || ++contention > 1000) throw;
                s.stats.contention_retries.fetch_add(1, std::memory_order_relaxed);
                std::this_thread::yield();
            }
        }
    }

    // Tensors over the sampled memory (torch::from_blob: no copy).
    torch::Tensor t_obs(const Dims &d) { return torch::from_blob(obs.data(), {(long)b, d.obs}); }
    torch::Tensor t_next(const Dims &d) { return torch::from_blob(next.data(), {(long)b, d.obs}); }
    torch::Tensor t_reward() { return torch::from_blob(reward.data(), {(long)b, 1}); }
    torch::Tensor t_discount() { return torch::from_blob(discount.data(), {(long)b, 1}); }
    torch::Tensor t_weights() { return torch::from_blob(weights.data(), {(long)b, 1}); }
    torch::Tensor t_act_i() { return torch::from_blob(act_i.data(), {(long)b, 1}, torch::kInt64); }
    torch::Tensor t_act_f(const Dims &d) { return torch::from_blob(act_f.data(), {(long)b, d.act}); }
};

// One gradient computation on the replica; leaves the gradients in its parameters and
// returns |TD error| per item and the loss.
inline std::pair<torch::Tensor, double> dqn_grads(Agent &a, LearnerBatch &lb, const Dims &d, const Hyper &h) {
    for (auto &p : a.online_params()) p.mutable_grad() = torch::Tensor();
    torch::Tensor obs = lb.t_obs(d), next = lb.t_next(d);
    torch::Tensor q = a.online[0]->forward(obs).gather(1, lb.t_act_i());
    torch::Tensor y;
    {
        torch::NoGradGuard no_grad;
        torch::Tensor best = a.online[0]->forward(next).argmax(1, true);  // double Q: online picks
        torch::Tensor qn = a.target[0]->forward(next).gather(1, best);    // target evaluates
        y = lb.t_reward() + lb.t_discount() * qn;
    }
    torch::Tensor per_item = torch::nn::functional::huber_loss(
        q, y, torch::nn::functional::HuberLossFuncOptions().reduction(torch::kNone).delta(1.0));
    torch::Tensor loss = (lb.t_weights() * per_item).mean();
    loss.backward();
    return {(q - y).detach().abs().reshape({-1}), loss.item<double>()};
}

inline std::pair<torch::Tensor, double> td3_grads(Agent &a, LearnerBatch &lb, const Dims &d, const Hyper &h,
                                           bool policy_round) {
    for (auto &p : a.online_params()) p.mutable_grad() = torch::Tensor();
    const double max_u = trainer::Pendulum::kMaxTorque;
    torch::Tensor obs = lb.t_obs(d), next = lb.t_next(d), act = lb.t_act_f(d);
    torch::Tensor y;
    {
        torch::NoGradGuard no_grad;
        torch::Tensor noise =
            (torch::randn_like(act) * (h.policy_noise * max_u)).clamp(-h.noise_clip * max_u, h.noise_clip * max_u);
        torch::Tensor next_a = (a.target[0]->forward(next) + noise).clamp(-max_u, max_u);
        torch::Tensor na = torch::cat({next, next_a}, 1);
        torch::Tensor tq = torch::min(a.target[1]->forward(na), a.target[2]->forward(na));
        y = lb.t_reward() + lb.t_discount() * tq;
    }
    torch::Tensor sa = torch::cat({obs, act}, 1);
    torch::Tensor q1 = a.online[1]->forward(sa), q2 = a.online[2]->forward(sa);
    torch::Tensor w = lb.t_weights();
    torch::Tensor critic_loss = (w * ((q1 - y).pow(2) + (q2 - y).pow(2))).mean();
    critic_loss.backward();
    if (policy_round) {
        // The actor's gradient only: autograd::grad leaves the critics' gradients alone.
        std::vector<torch::Tensor> actor_ps = a.online[0]->parameters();
        torch::Tensor actor_loss = -a.online[1]->forward(torch::cat({obs, a.online[0]->forward(obs)}, 1)).mean();
        std::vector<torch::Tensor> g = torch::autograd::grad({actor_loss}, actor_ps);
        for (std::size_t i = 0; i < actor_ps.size(); ++i) actor_ps[i].mutable_grad() = g[i];
    }
    return {(q1 - y).detach().abs().reshape({-1}), critic_loss.item<double>()};
}

inline void learn(const Shared &s, int id, ParamServer &server, long learn_total);

// A learner thread: an error stops the whole run (the monitor reports it and exits 1).
inline void run_learner(const Shared &s, int id, ParamServer &server, long learn_total) {
    try {
        learn(s, id, server, learn_total);
    } catch (const kr::Error &e) {
        s.stats.fail(e.status() == KR_E_INVALID_PRIORITY
                         ? std::string("a TD error is not a valid priority (") + e.what() +
                               "): the loss diverged; try a smaller --lr"
                         : std::string("learner: ") + e.what());
        s.rate.stop();
        server.stop();
    } catch (const std::exception &e) {
        s.stats.fail(std::string("learner: ") + e.what());
        s.rate.stop();
        server.stop();
    }
    server.leave();
}

inline void learn(const Shared &s, int id, ParamServer &server, long learn_total) {
    const std::uint64_t salt = s.rngs.learner_salt * 0x9e3779b97f4a7c15ULL;
    torch::manual_seed(static_cast<std::uint64_t>(s.o.seed * 104729 + static_cast<std::uint64_t>(id)) ^ salt);
    Agent a = make_agent(s.o, s.h);
    server.pull(a);
    kr::Rng rng((s.o.seed * 31 + static_cast<std::uint64_t>(id) + 7) ^ salt);
    LearnerBatch lb(static_cast<std::size_t>(s.o.batch), s.dims);
    std::deque<std::pair<std::vector<kr_key>, std::vector<double>>> pending;  // --priority-delay
    auto write_back = [&](const std::vector<kr_key> &keys, const std::vector<double> &ps) {
        kr_update_report r = s.seq ? s.seq->update_priorities(kr::Span<const kr_key>(keys.data(), keys.size()),
                                                              kr::Span<const double>(ps.data(), ps.size()))
                                   : s.buffer.update_priorities(keys, ps);
        s.stats.priority_updates.fetch_add(static_cast<long>(r.applied), std::memory_order_relaxed);
        s.stats.stale_updates.fetch_add(static_cast<long>(r.stale), std::memory_order_relaxed);
    };
    std::vector<double> ps(lb.b);
    while (s.rate.learner_take(s.o.batch)) {
        const double progress = std::min(1.0, static_cast<double>(s.rate.steps()) / static_cast<double>(learn_total));
        const double beta = s.h.beta0 + (1.0 - s.h.beta0) * progress;
        if (!lb.sample(s, rng, beta)) break;
        const long round = server.round();
        auto [td, loss] = s.o.algo == "dqn" ? dqn_grads(a, lb, s.dims, s.h)
                                            : td3_grads(a, lb, s.dims, s.h, round % s.h.policy_delay == 0);
        // |TD error| + eps by key, D batches late (--priority-delay): the thesis' relaxed order.
        const float *t = td.data_ptr<float>();
        for (std::size_t i = 0; i < lb.b; ++i) ps[i] = static_cast<double>(t[i]) + s.h.priority_eps;
        pending.emplace_back(lb.keys, ps);
        while (static_cast<int>(pending.size()) > s.o.priority_delay) {
            write_back(pending.front().first, pending.front().second);
            pending.pop_front();
        }
        if (!server.submit(a)) break;
        server.pull(a);
        {
            std::lock_guard<std::mutex> lock(s.stats.mutex);
            s.stats.last_loss = loss;
        }
    }
    for (auto &p : pending) write_back(p.first, p.second);
}

}  // namespace trainer

#endif  // KARY_TRAINER_LEARNER_HPP
