// Networks and agents: the hyperparameters, ReLU MLPs as LibTorch modules, the DQN and TD3
// agents, target updates.
#ifndef KARY_TRAINER_NETS_HPP
#define KARY_TRAINER_NETS_HPP

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

namespace trainer {

namespace kr = kary_replay;

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

inline void copy_params(const std::vector<torch::Tensor> &from, const std::vector<torch::Tensor> &to) {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
}

inline void soft_update(const std::vector<torch::Tensor> &from, const std::vector<torch::Tensor> &to, double tau) {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < from.size(); ++i) to[i].mul_(1.0 - tau).add_(from[i], tau);
}

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

inline Hyper hyper_for(const Options &o) {
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

inline Agent make_agent(const Options &o, const Hyper &h) {
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

}  // namespace trainer

#endif  // KARY_TRAINER_NETS_HPP
