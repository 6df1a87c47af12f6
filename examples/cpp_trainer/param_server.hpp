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
//
// A checkpoint holds the learners at a round's end (hold()): the round that completes next
// leaves every learner waiting in submit() until release(), each having written its batch's
// priorities back and its gradient into the master copy. quiet() says when all are there.

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
            wait_released(lock);
            return true;
        }
        cv_.wait(lock, [&] { return round_ != my_round || stopped_; });
        const bool applied = round_ != my_round;
        wait_released(lock);
        return applied;
    }

    // Ask the learners to stop at the next round's end (quiet() says when they have).
    void hold() {
        std::lock_guard<std::mutex> lock(mutex_);
        hold_ = true;
    }
    // Every learner still running waits at a round's end (or none is running).
    bool quiet() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return active_ == 0 || stopped_ || (held_ && held_waiters_ == active_);
    }
    // Let held learners go on.
    void release() {
        std::lock_guard<std::mutex> lock(mutex_);
        hold_ = false;
        held_ = false;
        cv_.notify_all();
    }

    // The master networks (online and target), the optimizers' state and the round, into
    // `archive` (the trainer's checkpoint file). Call while the learners are held.
    void save(torch::serialize::OutputArchive &archive) const {
        std::lock_guard<std::mutex> lock(mutex_);
        archive.write("round", torch::tensor(static_cast<std::int64_t>(round_)));
        write_params(archive, "online", master_.online_params());
        write_params(archive, "target", master_.target_params());
        for (std::size_t i = 0; i < opts_.size(); ++i) {
            torch::serialize::OutputArchive sub;
            opts_[i]->save(sub);
            archive.write("adam." + std::to_string(i), sub);
        }
    }

    // Restores what save() wrote (before any learner starts) and publishes the policy.
    // Throws std::runtime_error naming what is missing or of the wrong shape.
    void load(torch::serialize::InputArchive &archive) {
        std::lock_guard<std::mutex> lock(mutex_);
        torch::Tensor round;
        if (!archive.try_read("round", round)) throw std::runtime_error("the trainer state has no round");
        read_params(archive, "online", master_.online_params());
        read_params(archive, "target", master_.target_params());
        for (std::size_t i = 0; i < opts_.size(); ++i) {
            torch::serialize::InputArchive sub;
            if (!archive.try_read("adam." + std::to_string(i), sub)) {
                throw std::runtime_error("the trainer state has no optimizer " + std::to_string(i));
            }
            opts_[i]->load(sub);
        }
        round_ = round.item<std::int64_t>();
        publish();
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
        held_ = hold_;
        publish();
        cv_.notify_all();
    }

    // Waits while a checkpoint holds the learners (after the round this learner joined).
    void wait_released(std::unique_lock<std::mutex> &lock) {
        if (!held_ || stopped_) return;
        ++held_waiters_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return !held_ || stopped_; });
        --held_waiters_;
    }

    static void write_params(torch::serialize::OutputArchive &archive, const std::string &prefix,
                             const std::vector<torch::Tensor> &ps) {
        for (std::size_t i = 0; i < ps.size(); ++i) archive.write(prefix + "." + std::to_string(i), ps[i].detach());
    }
    static void read_params(torch::serialize::InputArchive &archive, const std::string &prefix,
                            const std::vector<torch::Tensor> &ps) {
        torch::NoGradGuard no_grad;
        for (std::size_t i = 0; i < ps.size(); ++i) {
            const std::string name = prefix + "." + std::to_string(i);
            torch::Tensor t;
            if (!archive.try_read(name, t)) throw std::runtime_error("the trainer state has no tensor " + name);
            if (t.sizes() != ps[i].sizes()) {
                throw std::runtime_error("tensor " + name + " has another shape than the network (another --algo?)");
            }
            ps[i].copy_(t);
        }
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
    bool hold_ = false;     // a checkpoint asked the learners to stop at the next round's end
    bool held_ = false;     // a round ended under hold_: learners wait until release()
    int held_waiters_ = 0;  // learners waiting because held_
    trainer::SnapshotBoard &board_;
};

}  // namespace trainer

#endif  // KARY_TRAINER_PARAM_SERVER_HPP
