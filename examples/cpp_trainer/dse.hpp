// Design-space exploration (--auto): profile f_a(x) and f_l(x), then solve equation 5.
#ifndef KARY_TRAINER_DSE_HPP
#define KARY_TRAINER_DSE_HPP

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
#include "monitor.hpp"
#include "actor.hpp"
#include "learner.hpp"

namespace trainer {

namespace kr = kary_replay;

// A freshly initialized policy on `board` (the profiling runs act with it).
inline void publish_fresh_policy(trainer::SnapshotBoard &board, const Options &o, const Hyper &h) {
    auto snap = std::make_shared<trainer::Snapshot>();
    snap->policy = make_agent(o, h).online[0]->native();
    board.publish(std::move(snap));
}

inline double profile_actors(const Options &o, const Hyper &h, const Dims &d, int x) {
    Options p = o;
    // Act as after the exploration schedule (epsilon at its floor, no warm-up): the policy's
    // inference cost counts. The step budget is the RateControl's, below.
    p.steps = 1;
    p.warmup = 0;
    kr::Buffer buffer = make_buffer(p, h, d, 1 << 16);
    trainer::RateControl rate = trainer::RateControl::unthrottled(1L << 40);  // actors never wait
    trainer::SnapshotBoard board;
    publish_fresh_policy(board, p, h);
    trainer::Stats stats;
    RngBoard rngs(p.seed, x);
    Shared s{p, h, d, buffer, nullptr, rate, board, stats, rngs};
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

inline double profile_learners(const Options &o, const Hyper &h, const Dims &d, int x) {
    Options p = o;
    // A buffer filled by random play, then x learners doing real rounds, unthrottled.
    kr::Buffer buffer = make_buffer(p, h, d, 1 << 14);
    {
        Options fill = p;
        fill.steps = 1 << 14;
        fill.warmup = 1L << 40;
        trainer::RateControl rate = trainer::RateControl::unthrottled(fill.steps);
        trainer::SnapshotBoard board;
        publish_fresh_policy(board, fill, h);
        trainer::Stats stats;
        RngBoard rngs(fill.seed, 1);
        Shared s{fill, h, d, buffer, nullptr, rate, board, stats, rngs};
        std::atomic<int> left{1};
        if (p.env == "cartpole") {
            run_actor<trainer::CartPole>(s, 0, left);
        } else {
            run_actor<trainer::Pendulum>(s, 0, left);
        }
    }
    trainer::SnapshotBoard board;
    ParamServer server(p, h, make_agent(p, h), x, board);
    trainer::RateControl rate = trainer::RateControl::unthrottled(1L << 40);  // learners take freely
    trainer::Stats stats;
    RngBoard rngs(p.seed, 0);
    Shared s{p, h, d, buffer, nullptr, rate, board, stats, rngs};
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

inline void choose_threads(Options &o, const Hyper &h, const Dims &d) {
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

}  // namespace trainer

#endif  // KARY_TRAINER_DSE_HPP
