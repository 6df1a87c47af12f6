// The parameter server: learners submit their gradients for a round; the last to arrive
// averages them, steps the optimizer, updates the targets and publishes the policy.
#ifndef KARY_TRAINER_PARAM_SERVER_HPP
#define KARY_TRAINER_PARAM_SERVER_HPP

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

namespace trainer {

namespace kr = kary_replay;

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

}  // namespace trainer

#endif  // KARY_TRAINER_PARAM_SERVER_HPP
