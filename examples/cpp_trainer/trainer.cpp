// kary_trainer: the reference trainer. Parallel C++ LibTorch actors and learners on the
// kary-replay buffer through its C ABI (kary_replay.hpp), after the paper's framework:
//
//   actors (A threads)   own environment, own copy of the policy (refreshed from the
//                        parameter server every T env steps), exploration, transitions
//                        pushed through a staged kr_writer with the default priority;
//   learners (L threads) sample B items with importance weights straight into tensor
//                        memory (torch::from_blob over the sample outputs), compute the
//                        loss and gradients on their replica of the networks, and write
//                        |TD error| + eps back by key (optionally D batches late);
//   parameter server     the last learner of each round averages the L gradients, applies
//                        the optimizer step, updates the targets and publishes the policy;
//   rate control         holds the replay ratio (gradient samples per transition);
//   monitor (main)       progress line and CSV row every few seconds, greedy evaluation
//                        every E env steps on its own environments.
//
// DQN (double Q, target network, Huber loss) for CartPole-v1, TD3 for Pendulum-v1, both with
// prioritized replay. --auto profiles actors and learners and picks A and L by the paper's
// equation 5. See README "The reference trainer" for the flags and results.
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

namespace kr = kary_replay;
using trainer::Options;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---------------------------------------------------------------------------------------
// Networks

struct MlpNetImpl : torch::nn::Module {
    std::vector<torch::nn::Linear> layers;
    std::vector<int> sizes;
    bool tanh_output;
    float output_scale;

    MlpNetImpl(std::vector<int> sizes_, bool tanh_output_ = false, float output_scale_ = 1.0f)
        : sizes(std::move(sizes_)), tanh_output(tanh_output_), output_scale(output_scale_) {
        for (std::size_t i = 0; i + 1 < sizes.size(); ++i) {
            layers.push_back(register_module("l" + std::to_string(i), torch::nn::Linear(sizes[i], sizes[i + 1])));
        }
    }
    torch::Tensor forward(torch::Tensor x) {
        for (std::size_t i = 0; i < layers.size(); ++i) {
            x = layers[i]->forward(x);
            if (i + 1 < layers.size()) x = torch::relu(x);
        }
        return tanh_output ? output_scale * torch::tanh(x) : x;
    }
    // The weights as a plain-C++ policy for actors and evaluators.
    trainer::Mlp native() const {
        trainer::Mlp m;
        for (int n : sizes) {
            if (n > trainer::Mlp::kMaxWidth) throw std::invalid_argument("layer wider than Mlp::kMaxWidth");
        }
        m.sizes = sizes;
        m.tanh_output = tanh_output;
        m.output_scale = output_scale;
        for (const auto &l : layers) {
            torch::Tensor w = l->weight.detach().contiguous();
            torch::Tensor b = l->bias.detach().contiguous();
            m.w.emplace_back(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
            m.b.emplace_back(b.data_ptr<float>(), b.data_ptr<float>() + b.numel());
        }
        return m;
    }
};
TORCH_MODULE(MlpNet);

void copy_params(const std::vector<torch::Tensor> &from, const std::vector<torch::Tensor> &to) {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
}

void soft_update(const std::vector<torch::Tensor> &from, const std::vector<torch::Tensor> &to, double tau) {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < from.size(); ++i) to[i].mul_(1.0 - tau).add_(from[i], tau);
}

// ---------------------------------------------------------------------------------------
// Algorithms. An Agent is one set of networks: the parameter server's master copy or a
// learner's replica. `online` nets are trained, `target` nets follow them.

struct Hyper {
    double gamma;
    double lr;
    double priority_eps = 1e-3;
    double alpha = 0.6;
    double beta0 = 0.4;
    // DQN
    int hidden = 64;
    double eps_start = 1.0, eps_end = 0.02, eps_fraction = 0.25;  // of --steps
    double dqn_tau = 0.02;  // Polyak step of the target net, every round
    // TD3
    double policy_noise = 0.2, noise_clip = 0.5, explore_noise = 0.1;  // x max torque
    int policy_delay = 2;
    double td3_tau = 0.005;
};

Hyper hyper_for(const Options &o) {
    Hyper h;
    h.lr = o.lr;
    if (o.algo == "dqn") {
        h.gamma = 0.99;
        h.hidden = 64;
    } else {
        h.gamma = 0.98;
        h.hidden = 128;
    }
    return h;
}

struct Agent {
    std::vector<MlpNet> online, target;  // DQN: {q}; TD3: {actor, critic1, critic2}

    std::vector<torch::Tensor> online_params() const {
        std::vector<torch::Tensor> v;
        for (const auto &n : online)
            for (auto &p : n->parameters()) v.push_back(p);
        return v;
    }
    std::vector<torch::Tensor> target_params() const {
        std::vector<torch::Tensor> v;
        for (const auto &n : target)
            for (auto &p : n->parameters()) v.push_back(p);
        return v;
    }
};

Agent make_agent(const Options &o, const Hyper &h) {
    Agent a;
    if (o.algo == "dqn") {
        const int obs = trainer::CartPole::kObs, acts = trainer::CartPole::kActions;
        a.online.push_back(MlpNet(std::vector<int>{obs, h.hidden, h.hidden, acts}));
        a.target.push_back(MlpNet(std::vector<int>{obs, h.hidden, h.hidden, acts}));
    } else {
        const int obs = trainer::Pendulum::kObs, act = trainer::Pendulum::kActionDim;
        const float max_u = trainer::Pendulum::kMaxTorque;
        a.online.push_back(MlpNet(std::vector<int>{obs, h.hidden, h.hidden, act}, true, max_u));
        a.online.push_back(MlpNet(std::vector<int>{obs + act, h.hidden, h.hidden, 1}));
        a.online.push_back(MlpNet(std::vector<int>{obs + act, h.hidden, h.hidden, 1}));
        for (const auto &n : a.online) a.target.push_back(MlpNet(n->sizes, n->tanh_output, n->output_scale));
    }
    copy_params(a.online_params(), a.target_params());
    return a;
}

// ---------------------------------------------------------------------------------------
// The parameter server: learners submit their gradients for a round; the last to arrive
// averages them into the master copy, steps the optimizer(s), updates the targets and
// publishes the policy; every learner then copies the master weights into its replica.
// Between the end of round r and the last submission of round r+1 nothing writes the
// master weights, so the copies need no lock.

class ParamServer {
public:
    ParamServer(const Options &o, const Hyper &h, Agent master, int learners, trainer::SnapshotBoard &board)
        : o_(o), h_(h), master_(std::move(master)), active_(learners), board_(board) {
        if (o.algo == "dqn") {
            opts_.push_back(std::make_unique<torch::optim::Adam>(master_.online[0]->parameters(),
                                                                 torch::optim::AdamOptions(h.lr)));
        } else {
            opts_.push_back(std::make_unique<torch::optim::Adam>(master_.online[0]->parameters(),
                                                                 torch::optim::AdamOptions(h.lr)));
            std::vector<torch::Tensor> critics = master_.online[1]->parameters();
            for (auto &p : master_.online[2]->parameters()) critics.push_back(p);
            opts_.push_back(std::make_unique<torch::optim::Adam>(critics, torch::optim::AdamOptions(h.lr)));
        }
        master_params_ = master_.online_params();
        publish();
    }

    // The round the next submission belongs to.
    long round() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return round_;
    }

    // Adds this learner's gradients (those defined) to the round and blocks until the round
    // is applied. Returns false if the server stopped.
    bool submit(const Agent &replica) {
        std::vector<torch::Tensor> ps = replica.online_params();
        std::unique_lock<std::mutex> lock(mutex_);
        {
            torch::NoGradGuard no_grad;
            for (std::size_t i = 0; i < ps.size(); ++i) {
                const torch::Tensor &g = ps[i].grad();
                if (!g.defined()) continue;
                torch::Tensor &mg = master_params_[i].mutable_grad();
                if (!mg.defined()) {
                    mg = g.clone();
                } else {
                    mg.add_(g);
                }
            }
        }
        ++arrived_;
        const long my_round = round_;
        if (arrived_ >= active_) {
            apply(lock);
            return true;
        }
        cv_.wait(lock, [&] { return round_ != my_round || stopped_; });
        return round_ != my_round;
    }

    // A learner that stops: the round no longer waits for it.
    void leave() {
        std::unique_lock<std::mutex> lock(mutex_);
        --active_;
        if (active_ > 0 && arrived_ >= active_) apply(lock);
    }

    void stop() {
        std::lock_guard<std::mutex> lock(mutex_);
        stopped_ = true;
        cv_.notify_all();
    }

    void pull(Agent &replica) const {
        copy_params(master_.online_params(), replica.online_params());
        copy_params(master_.target_params(), replica.target_params());
    }

    long rounds() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return round_;
    }

private:
    void apply(std::unique_lock<std::mutex> &) {
        torch::NoGradGuard no_grad;
        const double inv = 1.0 / static_cast<double>(arrived_);
        for (auto &p : master_params_) {
            if (p.grad().defined()) p.mutable_grad().mul_(inv);
        }
        if (o_.algo == "dqn") {
            opts_[0]->step();
            soft_update(master_.online_params(), master_.target_params(), h_.dqn_tau);
        } else {
            opts_[1]->step();  // critics, every round
            if (round_ % h_.policy_delay == 0) {
                opts_[0]->step();  // actor, on the delayed rounds only (its grads exist then)
                soft_update(master_.online_params(), master_.target_params(), h_.td3_tau);
            }
        }
        for (auto &p : master_params_) {
            if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
        }
        ++round_;
        arrived_ = 0;
        publish();
        cv_.notify_all();
    }

    void publish() {
        auto s = std::make_shared<trainer::Snapshot>();
        s->policy = master_.online[0]->native();
        s->round = round_;
        board_.publish(std::move(s));
    }

    const Options &o_;
    const Hyper &h_;
    Agent master_;
    std::vector<torch::Tensor> master_params_;
    std::vector<std::unique_ptr<torch::optim::Adam>> opts_;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    int active_;
    int arrived_ = 0;
    long round_ = 0;
    bool stopped_ = false;
    trainer::SnapshotBoard &board_;
};

// ---------------------------------------------------------------------------------------
// The replay buffer's schema: one row per transition.

struct Dims {
    int obs;
    int act;  // DQN: 1 (int64 index); TD3: action dimension (float32)
    bool discrete;
};

Dims dims_for(const Options &o) {
    if (o.algo == "dqn") return Dims{trainer::CartPole::kObs, 1, true};
    return Dims{trainer::Pendulum::kObs, trainer::Pendulum::kActionDim, false};
}

kr::Buffer make_buffer(const Options &o, const Hyper &h, const Dims &d, long capacity) {
    kr_config cfg = kr::default_config();
    cfg.capacity = static_cast<std::size_t>(capacity);
    cfg.fanout = static_cast<std::size_t>(o.fanout);
    cfg.variant = o.variant == "global" ? KR_VARIANT_GLOBAL_LOCK
                  : o.variant == "split" ? KR_VARIANT_SPLIT_LOCK
                                         : KR_VARIANT_LOCK_FREE;
    cfg.alpha = h.alpha;
    cfg.default_priority = KR_DEFAULT_PRIORITY_RUNNING_MAX;
    std::vector<kr::Column> schema{
        kr::column<float>("obs", static_cast<std::size_t>(d.obs)),
        d.discrete ? kr::column<std::int64_t>("action", 1) : kr::column<float>("action", static_cast<std::size_t>(d.act)),
        kr::column<float>("reward", 1),
        kr::column<float>("next_obs", static_cast<std::size_t>(d.obs)),
        kr::column<float>("done", 1),
    };
    return kr::Buffer(cfg, std::move(schema));
}

// ---------------------------------------------------------------------------------------
// Actors

struct Shared {
    const Options &o;
    const Hyper &h;
    Dims dims;
    kr::Buffer &buffer;
    trainer::RateControl &rate;
    trainer::SnapshotBoard &board;
    trainer::Stats &stats;
};

// Chooses an action with the actor's exploration: epsilon-greedy over Q (DQN) or the
// deterministic action plus Gaussian noise (TD3); uniform random during the warm-up.
struct Explorer {
    const Shared &s;
    trainer::Rng &rng;
    std::vector<float> out;

    std::int64_t dqn(const trainer::Mlp &q, const float *obs, long step) {
        const double frac = std::min(1.0, static_cast<double>(step) / (s.h.eps_fraction * s.o.steps));
        const double eps = s.h.eps_start + frac * (s.h.eps_end - s.h.eps_start);
        if (step < s.o.warmup || rng.uniform() < eps) return rng.below(trainer::CartPole::kActions);
        return greedy_discrete(q, obs, out);
    }
    float td3(const trainer::Mlp &pi, const float *obs, long step) {
        const float max_u = trainer::Pendulum::kMaxTorque;
        if (step < s.o.warmup) return static_cast<float>(rng.uniform(-max_u, max_u));
        out.resize(1);
        pi.forward(obs, out.data());
        float a = out[0] + static_cast<float>(s.h.explore_noise * max_u * rng.normal());
        return std::clamp(a, -max_u, max_u);
    }
    static std::int64_t greedy_discrete(const trainer::Mlp &q, const float *obs, std::vector<float> &out) {
        out.resize(static_cast<std::size_t>(q.outputs()));
        q.forward(obs, out.data());
        return std::max_element(out.begin(), out.end()) - out.begin();
    }
};

template <class Env> void run_actor(const Shared &s, int id, std::atomic<int> &actors_left) {
    trainer::Rng rng(s.o.seed * 7919 + static_cast<std::uint64_t>(id) + 1);
    Env env;
    env.reset(rng);
    Explorer explore{s, rng, {}};
    // Small staged batches: items become sampleable when the writer flushes.
    kr::Writer writer(s.buffer, 16);
    std::shared_ptr<const trainer::Snapshot> snap = s.board.get();
    long since_refresh = 0;
    std::vector<float> obs(static_cast<std::size_t>(s.dims.obs)), next(obs.size());
    env.observe(obs.data());
    double ret = 0;
    while (s.rate.actor_step()) {
        const long step = s.rate.steps();
        if (++since_refresh >= s.o.update_interval) {
            snap = s.board.get();
            since_refresh = 0;
        }
        trainer::StepResult r;
        std::int64_t a_index = 0;
        float a_value = 0;
        if constexpr (std::is_same_v<Env, trainer::CartPole>) {
            a_index = explore.dqn(snap->policy, obs.data(), step);
            r = env.step(static_cast<int>(a_index));
        } else {
            a_value = explore.td3(snap->policy, obs.data(), step);
            r = env.step(a_value);
        }
        env.observe(next.data());
        const float reward = static_cast<float>(r.reward);
        const float done = r.terminated ? 1.0f : 0.0f;  // truncation still bootstraps
        if (s.dims.discrete) {
            writer.push({kr::ColumnView(kr::Span<const float>(obs.data(), obs.size())),
                         kr::ColumnView(&a_index, KR_DTYPE_I64, 1), kr::ColumnView(&reward, KR_DTYPE_F32, 1),
                         kr::ColumnView(kr::Span<const float>(next.data(), next.size())),
                         kr::ColumnView(&done, KR_DTYPE_F32, 1)});
        } else {
            writer.push({kr::ColumnView(kr::Span<const float>(obs.data(), obs.size())),
                         kr::ColumnView(&a_value, KR_DTYPE_F32, 1), kr::ColumnView(&reward, KR_DTYPE_F32, 1),
                         kr::ColumnView(kr::Span<const float>(next.data(), next.size())),
                         kr::ColumnView(&done, KR_DTYPE_F32, 1)});
        }
        ret += r.reward;
        if (r.terminated || r.truncated) {
            s.stats.episode_done(ret);
            ret = 0;
            env.reset(rng);
            env.observe(obs.data());
        } else {
            obs.swap(next);
        }
    }
    writer.flush();
    actors_left.fetch_sub(1);
}

// ---------------------------------------------------------------------------------------
// Learners

struct LearnerBatch {
    std::size_t b;
    std::vector<float> obs, next, reward, done, act_f, weights;
    std::vector<std::int64_t> act_i;
    std::vector<kr_key> keys;

    LearnerBatch(std::size_t batch, const Dims &d)
        : b(batch), obs(batch * d.obs), next(batch * d.obs), reward(batch), done(batch),
          act_f(d.discrete ? 0 : batch * d.act), weights(batch), act_i(d.discrete ? batch : 0), keys(batch) {}

    // Samples B items straight into this memory (no per-item copy); false when the run
    // stopped first. Retries on contention (a writer was busy on the slots drawn) and waits
    // while the buffer is still empty: with a short warm-up the rate control may grant a
    // batch before the first staged insert is flushed.
    bool sample(const kr::Buffer &buffer, kr::Rng &rng, double beta, const Dims &d, trainer::Stats &stats,
                const trainer::RateControl &rate) {
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
        for (int contention = 0;;) {
            try {
                buffer.sample_into(rng, b, beta, KR_SAMPLE_STRATIFIED, out);
                return true;
            } catch (const kr::Error &e) {
                if (e.status() == KR_E_EMPTY) {
                    if (rate.stopped()) return false;
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                    continue;
                }
                if (!e.retryable() || ++contention > 1000) throw;
                stats.contention_retries.fetch_add(1, std::memory_order_relaxed);
                std::this_thread::yield();
            }
        }
    }

    // Tensors over the sampled memory (torch::from_blob: no copy).
    torch::Tensor t_obs(const Dims &d) { return torch::from_blob(obs.data(), {(long)b, d.obs}); }
    torch::Tensor t_next(const Dims &d) { return torch::from_blob(next.data(), {(long)b, d.obs}); }
    torch::Tensor t_reward() { return torch::from_blob(reward.data(), {(long)b, 1}); }
    torch::Tensor t_done() { return torch::from_blob(done.data(), {(long)b, 1}); }
    torch::Tensor t_weights() { return torch::from_blob(weights.data(), {(long)b, 1}); }
    torch::Tensor t_act_i() { return torch::from_blob(act_i.data(), {(long)b, 1}, torch::kInt64); }
    torch::Tensor t_act_f(const Dims &d) { return torch::from_blob(act_f.data(), {(long)b, d.act}); }
};

// One gradient computation on the replica; leaves the gradients in its parameters and
// returns |TD error| per item and the loss.
std::pair<torch::Tensor, double> dqn_grads(Agent &a, LearnerBatch &lb, const Dims &d, const Hyper &h) {
    for (auto &p : a.online_params()) p.mutable_grad() = torch::Tensor();
    torch::Tensor obs = lb.t_obs(d), next = lb.t_next(d);
    torch::Tensor q = a.online[0]->forward(obs).gather(1, lb.t_act_i());
    torch::Tensor y;
    {
        torch::NoGradGuard no_grad;
        torch::Tensor best = a.online[0]->forward(next).argmax(1, true);  // double Q: online picks
        torch::Tensor qn = a.target[0]->forward(next).gather(1, best);    // target evaluates
        y = lb.t_reward() + h.gamma * (1.0 - lb.t_done()) * qn;
    }
    torch::Tensor per_item = torch::nn::functional::huber_loss(
        q, y, torch::nn::functional::HuberLossFuncOptions().reduction(torch::kNone).delta(1.0));
    torch::Tensor loss = (lb.t_weights() * per_item).mean();
    loss.backward();
    return {(q - y).detach().abs().reshape({-1}), loss.item<double>()};
}

std::pair<torch::Tensor, double> td3_grads(Agent &a, LearnerBatch &lb, const Dims &d, const Hyper &h,
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
        y = lb.t_reward() + h.gamma * (1.0 - lb.t_done()) * tq;
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

void learn(const Shared &s, int id, ParamServer &server, long learn_total);

// A learner thread: an error stops the whole run (the monitor reports it and exits 1).
void run_learner(const Shared &s, int id, ParamServer &server, long learn_total) {
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

void learn(const Shared &s, int id, ParamServer &server, long learn_total) {
    torch::manual_seed(static_cast<std::uint64_t>(s.o.seed * 104729 + static_cast<std::uint64_t>(id)));
    Agent a = make_agent(s.o, s.h);
    server.pull(a);
    kr::Rng rng(s.o.seed * 31 + static_cast<std::uint64_t>(id) + 7);
    LearnerBatch lb(static_cast<std::size_t>(s.o.batch), s.dims);
    std::deque<std::pair<std::vector<kr_key>, std::vector<double>>> pending;  // --priority-delay
    auto write_back = [&](const std::vector<kr_key> &keys, const std::vector<double> &ps) {
        kr_update_report r = s.buffer.update_priorities(keys, ps);
        s.stats.priority_updates.fetch_add(static_cast<long>(r.applied), std::memory_order_relaxed);
        s.stats.stale_updates.fetch_add(static_cast<long>(r.stale), std::memory_order_relaxed);
    };
    std::vector<double> ps(lb.b);
    while (s.rate.learner_take(s.o.batch)) {
        const double progress = std::min(1.0, static_cast<double>(s.rate.steps()) / static_cast<double>(learn_total));
        const double beta = s.h.beta0 + (1.0 - s.h.beta0) * progress;
        if (!lb.sample(s.buffer, rng, beta, s.dims, s.stats, s.rate)) break;
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

// ---------------------------------------------------------------------------------------
// Greedy evaluation on the evaluator's own environments.

double evaluate(const Options &o, const trainer::Mlp &policy, int episodes, std::uint64_t salt) {
    double total = 0;
    std::vector<float> out;
    for (int e = 0; e < episodes; ++e) {
        trainer::Rng rng(o.seed * 1000003 + salt * 1009 + static_cast<std::uint64_t>(e) + 12345);
        double ret = 0;
        if (o.env == "cartpole") {
            trainer::CartPole env;
            env.reset(rng);
            float obs[4];
            for (;;) {
                env.observe(obs);
                auto r = env.step(static_cast<int>(Explorer::greedy_discrete(policy, obs, out)));
                ret += r.reward;
                if (r.terminated || r.truncated) break;
            }
        } else {
            trainer::Pendulum env;
            env.reset(rng);
            float obs[3], a[1];
            for (;;) {
                env.observe(obs);
                policy.forward(obs, a);
                auto r = env.step(a[0]);
                ret += r.reward;
                if (r.terminated || r.truncated) break;
            }
        }
        total += ret;
    }
    return total / episodes;
}

double solve_threshold(const Options &o) { return o.env == "cartpole" ? 475.0 : -200.0; }

// ---------------------------------------------------------------------------------------
// Design-space exploration (--auto): profile f_a(x) and f_l(x), solve equation 5.

// A freshly initialized policy on `board` (the profiling runs act with it).
void publish_fresh_policy(trainer::SnapshotBoard &board, const Options &o, const Hyper &h) {
    auto snap = std::make_shared<trainer::Snapshot>();
    snap->policy = make_agent(o, h).online[0]->native();
    board.publish(std::move(snap));
}

double profile_actors(const Options &o, const Hyper &h, const Dims &d, int x) {
    Options p = o;
    // Act as after the exploration schedule (epsilon at its floor, no warm-up): the policy's
    // inference cost counts. The step budget is the RateControl's, below.
    p.steps = 1;
    p.warmup = 0;
    kr::Buffer buffer = make_buffer(p, h, d, 1 << 16);
    trainer::RateControl rate(1.0, 1L << 40, 1L << 40, 0);  // warm-up forever: actors never wait
    trainer::SnapshotBoard board;
    publish_fresh_policy(board, p, h);
    trainer::Stats stats;
    Shared s{p, h, d, buffer, rate, board, stats};
    std::atomic<int> left{x};
    std::vector<std::thread> threads;
    auto t0 = Clock::now();
    for (int i = 0; i < x; ++i) {
        threads.emplace_back([&, i] {
            if (p.env == "cartpole") {
                run_actor<trainer::CartPole>(s, i, left);
            } else {
                run_actor<trainer::Pendulum>(s, i, left);
            }
        });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(o.profile_seconds));
    const long steps = rate.steps();
    const double dt = seconds_since(t0);
    rate.stop();
    for (auto &t : threads) t.join();
    return static_cast<double>(steps) / dt;
}

double profile_learners(const Options &o, const Hyper &h, const Dims &d, int x) {
    Options p = o;
    // A buffer filled by random play, then x learners doing real rounds, unthrottled.
    kr::Buffer buffer = make_buffer(p, h, d, 1 << 14);
    {
        Options fill = p;
        fill.steps = 1 << 14;
        fill.warmup = 1L << 40;
        trainer::RateControl rate(1.0, 1L << 40, fill.steps, 0);
        trainer::SnapshotBoard board;
        publish_fresh_policy(board, fill, h);
        trainer::Stats stats;
        Shared s{fill, h, d, buffer, rate, board, stats};
        std::atomic<int> left{1};
        if (p.env == "cartpole") {
            run_actor<trainer::CartPole>(s, 0, left);
        } else {
            run_actor<trainer::Pendulum>(s, 0, left);
        }
    }
    trainer::SnapshotBoard board;
    ParamServer server(p, h, make_agent(p, h), x, board);
    trainer::RateControl rate(1e6, 0, 1L << 40, 1L << 40);
    // Let the learners take batches freely: pretend the actors have run far ahead.
    while (rate.steps() < 1000 && rate.actor_step()) {
    }
    trainer::Stats stats;
    Shared s{p, h, d, buffer, rate, board, stats};
    std::vector<std::thread> threads;
    auto t0 = Clock::now();
    for (int i = 0; i < x; ++i) threads.emplace_back([&, i] { run_learner(s, i, server, 1L << 40); });
    std::this_thread::sleep_for(std::chrono::duration<double>(o.profile_seconds));
    const long rounds = server.rounds();
    const double dt = seconds_since(t0);
    rate.stop();
    server.stop();
    for (auto &t : threads) t.join();
    return static_cast<double>(rounds) * x / dt;  // gradient steps (batches) per second
}

void choose_threads(Options &o, const Hyper &h, const Dims &d) {
    const int m = o.max_threads > 0 ? o.max_threads : std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
    std::vector<double> fa, fl;
    std::printf("--auto: profiling 1..%d actor and learner threads (%.1f s each), M = %d cores\n", m - 1,
                o.profile_seconds, m);
    std::printf("%8s %18s %22s\n", "threads", "f_a (env steps/s)", "f_l (grad steps/s)");
    for (int x = 1; x <= m - 1; ++x) {
        fa.push_back(profile_actors(o, h, d, x));
        fl.push_back(profile_learners(o, h, d, x));
        std::printf("%8d %18.0f %22.1f\n", x, fa.back(), fl.back());
        std::fflush(stdout);
    }
    const double ui = o.batch / o.replay_ratio;  // env steps per gradient step
    trainer::DseChoice c = trainer::solve_equation5(fa, fl, ui, m);
    std::printf("--auto: equation 5 with update_interval = B/R = %d/%g = %.3f env steps per gradient step:\n", o.batch,
                o.replay_ratio, ui);
    std::printf("--auto: choose %d actors + %d learners: f_a = %.0f, update_interval x f_l = %.0f env steps/s "
                "(balanced %.0f)\n",
                c.actors, c.learners, fa[c.actors - 1], ui * fl[c.learners - 1], c.balanced);
    o.actors = c.actors;
    o.learners = c.learners;
}

// ---------------------------------------------------------------------------------------

int train(Options o) {
    const Hyper h = hyper_for(o);
    const Dims d = dims_for(o);
    if (o.automatic) choose_threads(o, h, d);
    torch::manual_seed(o.seed);
    kr::Buffer buffer = make_buffer(o, h, d, o.capacity);
    trainer::SnapshotBoard board;
    ParamServer server(o, h, make_agent(o, h), o.learners, board);
    // Slack: two rounds of every learner, or 2 x 16 transitions per actor, whichever is more.
    const long slack = std::max<long>(2L * o.learners * o.batch,
                                      static_cast<long>(std::ceil(2.0 * 16 * o.actors * o.replay_ratio)));
    trainer::RateControl rate(o.replay_ratio, o.warmup, o.steps, slack);
    trainer::Stats stats;
    Shared s{o, h, d, buffer, rate, board, stats};

    std::printf("kary_trainer: %s %s, %d actors + %d learners, buffer %s K=%d capacity %ld, batch %d, replay ratio "
                "%g, %ld env steps, seed %llu\n",
                o.env.c_str(), o.algo.c_str(), o.actors, o.learners, o.variant.c_str(), o.fanout, o.capacity, o.batch,
                o.replay_ratio, o.steps, static_cast<unsigned long long>(o.seed));
    std::fflush(stdout);

    std::ofstream csv;
    if (!o.csv.empty()) {
        csv.open(o.csv);
        if (!csv) {
            std::fprintf(stderr, "cannot write %s\n", o.csv.c_str());
            return 1;
        }
        csv << "kind,wall_s,env_steps,grad_steps,episodes,buffer_len,train_return_100,eval_return,env_steps_per_s,"
               "grad_steps_per_s,loss,priority_updates,stale_updates\n";
    }
    auto t0 = Clock::now();
    std::atomic<int> actors_left{o.actors};
    std::vector<std::thread> threads;
    for (int i = 0; i < o.learners; ++i) {
        threads.emplace_back([&, i] { run_learner(s, i, server, o.steps); });
    }
    for (int i = 0; i < o.actors; ++i) {
        threads.emplace_back([&, i] {
            if (o.env == "cartpole") {
                run_actor<trainer::CartPole>(s, i, actors_left);
            } else {
                run_actor<trainer::Pendulum>(s, i, actors_left);
            }
        });
    }

    const double threshold = solve_threshold(o);
    long next_eval = o.eval_every;
    double next_progress = o.progress_seconds;
    long last_steps = 0, last_grads = 0;
    double last_t = 0;
    std::optional<std::pair<long, double>> solved;  // env steps, wall s
    int evals_after = 0, evals_after_ok = 0, eval_count = 0;
    double last_eval = std::nan("");
    auto row = [&](const char *kind, double t, double eval, double sps, double gps) {
        if (!csv.is_open()) return;
        double loss;
        {
            std::lock_guard<std::mutex> lock(stats.mutex);
            loss = stats.last_loss;
        }
        auto num = [](double v) { return std::isnan(v) ? std::string() : std::to_string(v); };
        csv << kind << ',' << t << ',' << rate.steps() << ',' << server.rounds() << ',' << stats.episodes.load() << ','
            << buffer.len() << ',' << num(stats.mean_return()) << ',' << num(eval) << ',' << num(sps) << ','
            << num(gps) << ',' << loss << ',' << stats.priority_updates.load() << ',' << stats.stale_updates.load()
            << '\n';
    };
    for (;;) {
        const bool done = actors_left.load() == 0 && rate.steps() >= o.steps;
        const double t = seconds_since(t0);
        const long steps = rate.steps();
        if (steps >= next_eval || (done && eval_count == 0)) {
            auto snap = board.get();
            const double ret = evaluate(o, snap->policy, o.eval_episodes, static_cast<std::uint64_t>(eval_count));
            ++eval_count;
            last_eval = ret;
            const double te = seconds_since(t0);
            const bool ok = ret >= threshold;
            if (solved) {
                ++evals_after;
                evals_after_ok += ok;
            } else if (ok) {
                solved = {steps, te};
            }
            std::printf("[%7.1fs] eval at %ld env steps (round %ld): mean greedy return %.1f over %d episodes%s\n", te,
                        steps, snap->round, ret, o.eval_episodes,
                        ok ? (evals_after == 0 ? "  SOLVED" : "  (>= threshold)") : "");
            std::fflush(stdout);
            row("eval", te, ret, std::nan(""), std::nan(""));
            while (next_eval <= steps) next_eval += o.eval_every;
            if (solved && o.stop_when_solved) break;
        }
        if (t >= next_progress || done) {
            const long grads = server.rounds();
            const double sps = (steps - last_steps) / std::max(1e-9, t - last_t);
            const double gps = (grads - last_grads) / std::max(1e-9, t - last_t);
            const double mr = stats.mean_return();
            std::printf("[%7.1fs] env steps %ld (%.0f/s)  grad steps %ld (%.0f/s)  buffer %zu/%ld  episodes %ld  "
                        "return(100) %.1f  priorities %ld (stale %ld)\n",
                        t, steps, sps, grads, gps, buffer.len(), o.capacity, stats.episodes.load(), mr,
                        stats.priority_updates.load(), stats.stale_updates.load());
            std::fflush(stdout);
            row("progress", t, std::nan(""), sps, gps);
            last_steps = steps;
            last_grads = grads;
            last_t = t;
            while (next_progress <= t) next_progress += o.progress_seconds;
        }
        if (done) break;
        if (!stats.failure().empty()) break;
        if (o.max_seconds > 0 && t >= o.max_seconds) {
            std::printf("stopping: --max-seconds %.1f reached\n", o.max_seconds);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    rate.stop();
    server.stop();
    for (auto &th : threads) th.join();
    if (!stats.failure().empty()) {
        std::fprintf(stderr, "kary_trainer: error: %s\n", stats.failure().c_str());
        return 1;
    }
    const double wall = seconds_since(t0);
    std::printf("done: %ld env steps, %ld gradient steps, %ld episodes in %.1f s; %ld priority updates applied, %ld "
                "stale; %ld sampling retries\n",
                rate.steps(), server.rounds(), stats.episodes.load(), wall, stats.priority_updates.load(),
                stats.stale_updates.load(), stats.contention_retries.load());
    if (solved) {
        std::printf("solved: first greedy evaluation >= %g at %ld env steps, %.1f s; later evaluations >= "
                    "threshold: %d of %d\n",
                    threshold, solved->first, solved->second, evals_after_ok, evals_after);
    } else {
        std::printf("not solved: no greedy evaluation reached %g (last %.1f)\n", threshold, last_eval);
    }
    // One machine-readable line for scripts/trainer_results.py.
    std::printf("RESULT trainer=cpp env=%s algo=%s seed=%llu actors=%d learners=%d variant=%s solved=%d "
                "solved_steps=%ld solved_s=%.2f later_ok=%d later=%d wall_s=%.2f env_steps=%ld grad_steps=%ld "
                "priority_updates=%ld\n",
                o.env.c_str(), o.algo.c_str(), static_cast<unsigned long long>(o.seed), o.actors, o.learners,
                o.variant.c_str(), solved ? 1 : 0, solved ? solved->first : -1L, solved ? solved->second : -1.0,
                evals_after_ok, evals_after, wall, rate.steps(), server.rounds(), stats.priority_updates.load());
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    Options o;
    try {
        o = trainer::parse_options(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const trainer::UsageError &e) {
        if (e.what()[0] != '\0') std::fprintf(stderr, "kary_trainer: %s\n", e.what());
        std::fprintf(stderr, "%s\n", trainer::usage());
        return e.what()[0] != '\0' ? 2 : 0;
    }
    // One intra-op thread per actor or learner thread (TOOLCHAIN.md).
    torch::set_num_threads(1);
    at::set_num_interop_threads(1);
    try {
        return train(o);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "kary_trainer: error: %s\n", e.what());
        return 1;
    }
}
