// The monitor's greedy evaluation on its own environments, and the clock every part reads.
#ifndef KARY_TRAINER_MONITOR_HPP
#define KARY_TRAINER_MONITOR_HPP

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
#include "actor.hpp"
#include "nets.hpp"

namespace trainer {

namespace kr = kary_replay;

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Greedy evaluation on the evaluator's own environments.

inline double evaluate(const Options &o, const trainer::Mlp &policy, int episodes, std::uint64_t salt) {
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

inline double solve_threshold(const Options &o) { return o.env == "cartpole" ? 475.0 : -200.0; }

}  // namespace trainer

#endif  // KARY_TRAINER_MONITOR_HPP
