// Actors: each steps its own environment with its own copy of the policy and pushes its
// transitions through a staged kr::Writer.
#ifndef KARY_TRAINER_ACTOR_HPP
#define KARY_TRAINER_ACTOR_HPP

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
#include "replay.hpp"

namespace trainer {

namespace kr = kary_replay;

// Every actor's exploration RNG as it stood last (actors store theirs when they park or
// stop; a checkpoint saves them), and the salt of the learners' seeds: 0 in a new run, the
// env step of the checkpoint in a resumed one (the learners' kr::Rng is opaque, so a resumed
// run reseeds them, and torch's generator, from the seed and the step).
struct RngBoard {
    std::mutex mutex;
    std::vector<trainer::Rng> actors;
    std::uint64_t learner_salt = 0;

    RngBoard(std::uint64_t seed, int n_actors) {
        for (int i = 0; i < n_actors; ++i) actors.emplace_back(seed * 7919 + static_cast<std::uint64_t>(i) + 1);
    }
    trainer::Rng get(int id) {
        std::lock_guard<std::mutex> lock(mutex);
        return actors[static_cast<std::size_t>(id)];
    }
    void put(int id, const trainer::Rng &r) {
        std::lock_guard<std::mutex> lock(mutex);
        actors[static_cast<std::size_t>(id)] = r;
    }
};

// What every actor and learner thread of a run shares.
struct Shared {
    const Options &o;
    const Hyper &h;
    Dims dims;
    kr::Buffer &buffer;
    // With --nstep N > 1, the buffer the actors and learners use instead (one lane per actor).
    kr::SequenceBuffer *seq;
    trainer::RateControl &rate;
    trainer::SnapshotBoard &board;
    trainer::Stats &stats;
    RngBoard &rngs;
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
    trainer::Rng rng = s.rngs.get(id);
    Env env;
    env.reset(rng);
    Explorer explore{s, rng, {}};
    // Small staged batches: items become sampleable when the writer flushes. With --nstep,
    // the actor's lane instead: a step's window is sampleable once its return's n steps
    // (or its episode's end) are written.
    kr::Writer writer(s.buffer, trainer::kWriterBatch);
    std::optional<kr::LaneWriter> lane;
    if (s.seq) lane.emplace(*s.seq, static_cast<std::size_t>(id));
    std::shared_ptr<const trainer::Snapshot> snap = s.board.get();
    long since_refresh = 0;
    std::vector<float> obs(static_cast<std::size_t>(s.dims.obs)), next(obs.size());
    env.observe(obs.data());
    double ret = 0;
    for (;;) {
        const trainer::Step grant = s.rate.actor_step();
        if (grant == trainer::Step::End) break;
        if (grant == trainer::Step::Hold) {
            // A checkpoint: every counted step's transition goes into the buffer first.
            writer.flush();
            s.rngs.put(id, rng);
            s.rate.park();
            continue;
        }
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
        const kr::ColumnView action = s.dims.discrete ? kr::ColumnView(&a_index, KR_DTYPE_I64, 1)
                                                      : kr::ColumnView(&a_value, KR_DTYPE_F32, 1);
        if (lane) {
            lane->push({kr::ColumnView(kr::Span<const float>(obs.data(), obs.size())), action,
                        kr::ColumnView(&reward, KR_DTYPE_F32, 1)});
            if (r.terminated || r.truncated) {
                // The true final observation, stored once; a truncation bootstraps from it.
                lane->end_episode({kr::ColumnView(kr::Span<const float>(next.data(), next.size()))},
                                  !r.terminated);
            }
        } else if (s.dims.discrete) {
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
    s.rngs.put(id, rng);
    actors_left.fetch_sub(1);
}

}  // namespace trainer

#endif  // KARY_TRAINER_ACTOR_HPP
