// The replay adapter: the buffer's schema (one row per transition) and its construction.
#ifndef KARY_TRAINER_REPLAY_HPP
#define KARY_TRAINER_REPLAY_HPP

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

struct Dims {
    int obs;
    int act;  // DQN: 1 (int64 index); TD3: action dimension (float32)
    bool discrete;
};

inline Dims dims_for(const Options &o) {
    if (o.algo == "dqn") return Dims{trainer::CartPole::kObs, 1, true};
    return Dims{trainer::Pendulum::kObs, trainer::Pendulum::kActionDim, false};
}

// One row per transition: obs, action, reward, next_obs, done.
inline std::vector<kr::Column> schema_for(const Dims &d) {
    return {
        kr::column<float>("obs", static_cast<std::size_t>(d.obs)),
        d.discrete ? kr::column<std::int64_t>("action", 1) : kr::column<float>("action", static_cast<std::size_t>(d.act)),
        kr::column<float>("reward", 1),
        kr::column<float>("next_obs", static_cast<std::size_t>(d.obs)),
        kr::column<float>("done", 1),
    };
}

// Whether a loaded buffer has this run's schema and capacity.
inline bool fits_run(const kr::Buffer &b, const Dims &d, long capacity) {
    const std::vector<kr::Column> want = schema_for(d);
    const std::vector<kr::Column> &got = b.schema();
    if (b.capacity() != static_cast<std::size_t>(capacity) || got.size() != want.size()) return false;
    for (std::size_t i = 0; i < want.size(); ++i) {
        if (got[i].name != want[i].name || got[i].dtype != want[i].dtype || got[i].shape != want[i].shape) return false;
    }
    return true;
}

// With --nstep N > 1: one lane per actor of one row per step (obs, action, reward); each
// item a one-step window with its N-step return, discount and next observation.
inline std::vector<kr::Column> lane_schema_for(const Dims &d) {
    return {
        kr::column<float>("obs", static_cast<std::size_t>(d.obs)),
        d.discrete ? kr::column<std::int64_t>("action", 1) : kr::column<float>("action", static_cast<std::size_t>(d.act)),
        kr::column<float>("reward", 1),
    };
}

inline kr::SequenceBuffer make_sequence(const Options &o, const Hyper &h, const Dims &d) {
    kr::SequenceOptions so;
    so.config.lanes = static_cast<std::size_t>(o.actors);
    // --capacity transitions over all lanes, plus room for a return's reach and final rows.
    so.config.steps_per_lane = static_cast<std::size_t>(o.capacity / o.actors + o.nstep + 2);
    so.config.nstep = static_cast<std::size_t>(o.nstep);
    so.config.gamma = h.gamma;
    so.config.fanout = static_cast<std::size_t>(o.fanout);
    so.config.alpha = h.alpha;
    so.reward = "reward";
    so.next_of = {"obs"};
    return kr::SequenceBuffer(so, lane_schema_for(d));
}

// Whether a loaded sequence buffer is the one this run would make: its schema, one lane per
// actor of the same length, the same n.
inline bool fits_lanes(const kr::SequenceBuffer &seq, const Options &o, const Dims &d) {
    const std::vector<kr::Column> want = lane_schema_for(d);
    const std::vector<kr::Column> &got = seq.schema();
    if (got.size() != want.size()) return false;
    for (std::size_t i = 0; i < want.size(); ++i) {
        if (got[i].name != want[i].name || got[i].dtype != want[i].dtype || got[i].shape != want[i].shape) return false;
    }
    const kr_seq_config c = seq.config();
    return c.lanes == static_cast<std::size_t>(o.actors) &&
           c.steps_per_lane == static_cast<std::size_t>(o.capacity / o.actors + o.nstep + 2) &&
           c.nstep == static_cast<std::size_t>(o.nstep);
}

// The items an actor stages before its kr::Writer inserts them in one call.
constexpr std::size_t kWriterBatch = 16;

inline kr_config buffer_config(const Options &o, const Hyper &h, long capacity) {
    kr_config cfg = kr::default_config();
    cfg.capacity = static_cast<std::size_t>(capacity);
    cfg.fanout = static_cast<std::size_t>(o.fanout);
    cfg.variant = o.variant == "global" ? KR_VARIANT_GLOBAL_LOCK
                  : o.variant == "split" ? KR_VARIANT_SPLIT_LOCK
                                         : KR_VARIANT_LOCK_FREE;
    cfg.alpha = h.alpha;
    cfg.default_priority = KR_DEFAULT_PRIORITY_RUNNING_MAX;
    return cfg;
}

inline kr::Buffer make_buffer(const Options &o, const Hyper &h, const Dims &d, long capacity) {
    return kr::Buffer(buffer_config(o, h, capacity), schema_for(d));
}

// The buffer of --processes: in shared memory (anonymous, inherited by the actor processes
// forked later), holding the replay ratio itself, across processes: the RateControl's
// limit (R samples per transition after the warm-up, within `slack` samples), counted per
// writer batch of kWriterBatch transitions instead of per env step.
inline kr::SharedBuffer make_shared_buffer(const Options &o, const Hyper &h, const Dims &d, long slack) {
    kr_config cfg = buffer_config(o, h, o.capacity);
    const long min_size = std::max(o.warmup, 1L);
    cfg.rate_limit = KR_RATE_SAMPLE_TO_INSERT_RANGE;
    cfg.rate_samples_per_insert = o.replay_ratio;
    cfg.rate_min_size = static_cast<std::uint64_t>(min_size);
    cfg.rate_min_diff = o.replay_ratio * static_cast<double>(min_size);
    cfg.rate_max_diff = cfg.rate_min_diff + static_cast<double>(slack);
    cfg.rate_insert_batch = kWriterBatch;
    cfg.rate_sample_batch = static_cast<std::uint64_t>(o.batch);
    return kr::SharedBuffer::anonymous(cfg, schema_for(d));
}

}  // namespace trainer

#endif  // KARY_TRAINER_REPLAY_HPP
