// The sequence buffer through the C++ wrapper: four lane writers on their own threads beside
// a sampler that checks that every sampled row is the step its key implies, of its lane, and
// an updater. RAII lanes give their lane back; bad input throws and changes nothing. Then a
// rate-limited buffer: actor threads and a learner hold the ratio in windows, close() stops
// them.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kary_replay.hpp"

namespace kr = kary_replay;

static int failures = 0;
#define EXPECT(cond)                                                         \
    do {                                                                     \
        if (!(cond)) {                                                       \
            std::fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                      \
        }                                                                    \
    } while (0)

// The status `f` throws, KR_OK when it returns.
template <class F> static kr_status status_of(F &&f) {
    try {
        f();
    } catch (const kr::Error &e) {
        return e.status();
    }
    return KR_OK;
}

// Two actor threads push 600 steps each beside a learner that samples 8 windows at a time
// until none is admitted for 200 ms: then `4 x inserts - samples` is within [16, 24) (4
// samples per window, range 32 +- 16, the learner stopped one batch above the low end).
// Then an actor blocked on the limit is stopped by close().
static void rate_limited() {
    kr::SequenceOptions options;
    options.config.lanes = 3;
    options.config.steps_per_lane = 64;
    options.config.window = 4;
    options.config.period = 2;
    options.config.rate.kind = KR_RATE_SAMPLE_TO_INSERT_RATIO;
    options.config.rate.samples_per_insert = 4.0;
    options.config.rate.min_size = 8;
    options.config.rate.error_buffer = 16.0;
    options.config.rate.sample_batch = 8;
    options.next_of = {"obs"};
    kr::SequenceBuffer seq(options, {kr::column<float>("obs", 2), kr::column<float>("reward", {})});
    EXPECT(seq.config().rate.insert_batch == 2);
    auto step = [](kr::LaneWriter &lane, int t, kr::Wait wait) {
        float obs[2] = {static_cast<float>(t), static_cast<float>(lane.position())};
        float reward[1] = {1.0f};
        lane.push({obs, reward}, wait);
        if (t % 29 == 28) lane.end_episode({obs}, false, wait);
    };
    std::vector<std::thread> actors;
    std::atomic<int> running{2};
    for (std::size_t l = 0; l < 2; ++l) {
        actors.emplace_back([&, l] {
            kr::LaneWriter lane(seq, l);
            for (int t = 0; t < 600; ++t) step(lane, t, kr::Wait::forever());
            running--;
        });
    }
    kr::Rng rng(3);
    std::vector<kr_key> keys(8);
    kr_seq_sample_out out{};
    out.keys = keys.data();
    std::uint64_t drawn = 0;
    const auto wait = kr::Wait::at_most(std::chrono::milliseconds(200));
    // A timeout while the actors run is a stalled machine, not the end.
    for (;;) {
        kr_status got = status_of([&] { seq.sample_into(rng, 8, 0.4, out, KR_SAMPLE_STRATIFIED, wait); });
        if (got == KR_OK) {
            drawn += 8;
        } else if (got != KR_E_TIMEOUT || running == 0) {
            EXPECT(got == KR_E_TIMEOUT);
            break;
        }
    }
    for (auto &a : actors) a.join();
    // What the actors' last windows admitted.
    while (status_of([&] { seq.sample_into(rng, 8, 0.4, out, KR_SAMPLE_STRATIFIED, kr::Wait::never()); }) == KR_OK) {
        drawn += 8;
    }
    kr_rate_stats s = seq.rate_stats();
    const double c = 4.0 * static_cast<double>(s.inserts) - static_cast<double>(s.samples);
    EXPECT(s.limited && s.samples == drawn && c >= 16.0 && c < 24.0);
    EXPECT(s.inserts == seq.len() || s.inserts > 64);  // retired windows leave len()
    // No learner now: the third lane blocks within a few windows, until close().
    std::atomic<kr_status> stopped{KR_OK};
    std::thread blocked([&] {
        kr::LaneWriter lane(seq, 2);
        stopped = status_of([&] {
            for (int t = 0; t < 600; ++t) step(lane, t, kr::Wait::forever());
        });
    });
    while (seq.rate_stats().insert_waiters == 0) std::this_thread::yield();
    seq.close();
    blocked.join();
    EXPECT(stopped == KR_E_CLOSED);
    EXPECT(status_of([&] { seq.sample_into(rng, 1, 0.4, out); }) == KR_E_CLOSED);
}

int main(int argc, char **argv) {
    rate_limited();
    const int steps = argc > 1 ? std::atoi(argv[1]) : 4000;
    constexpr std::size_t lanes = 4, window = 4, batch = 16;
    kr::SequenceOptions options;
    options.config.lanes = lanes;
    options.config.steps_per_lane = 64;
    options.config.window = window;
    options.config.period = 2;
    options.config.nstep = 3;
    options.config.gamma = 0.9;
    options.reward = "reward";
    options.stack = {{"obs", 2}};
    options.next_of = {"obs"};
    kr::SequenceBuffer seq(options, {kr::column<float>("obs", 2), kr::column<std::int64_t>("step", 1),
                                     kr::column<float>("reward", {})});

    // Bad input throws and changes nothing.
    {
        kr::LaneWriter lane(seq, 0);
        bool threw = false;
        try {
            kr::LaneWriter again(seq, 0);
        } catch (const kr::Error &e) {
            threw = e.status() == KR_E_INVALID_ARGUMENT;
        }
        EXPECT(threw);
        threw = false;
        double wrong[2] = {0, 0};
        std::int64_t step[1] = {0};
        float reward[1] = {0};
        try {
            lane.push({wrong, step, reward});
        } catch (const kr::Error &e) {
            threw = e.status() == KR_E_DTYPE_MISMATCH;
        }
        EXPECT(threw);
        EXPECT(lane.position() == 0);
    }

    std::atomic<bool> done{false};
    std::vector<std::thread> writers;
    for (std::size_t l = 0; l < lanes; ++l) {
        writers.emplace_back([&, l] {
            kr::LaneWriter lane(seq, l);
            unsigned seed = static_cast<unsigned>(l) + 1;
            for (int i = 0; i < steps; ++i) {
                std::int64_t p[1] = {static_cast<std::int64_t>(lane.position())};
                float obs[2] = {static_cast<float>(l), static_cast<float>(p[0])};
                float reward[1] = {1.0f};
                lane.push({obs, p, reward});
                seed = seed * 1103515245u + 12345u;
                if ((seed >> 16) % 7 == 0) {
                    float fin[2] = {static_cast<float>(l), -1.0f};
                    lane.end_episode({fin}, (seed >> 20) % 2 == 0);
                }
            }
        });
    }
    std::thread sampler([&] {
        kr::Rng rng(7);
        std::vector<float> obs(batch * window * 2 * 2), next(batch * 2 * 2), reward(batch * window);
        std::vector<std::int64_t> step(batch * window);
        std::vector<kr_key> keys(batch);
        std::vector<std::uint64_t> lengths(batch);
        std::vector<double> priorities(batch, 1.5);
        void *columns[3] = {obs.data(), step.data(), reward.data()};
        void *nexts[1] = {next.data()};
        kr_seq_sample_out out{};
        out.keys = keys.data();
        out.lengths = lengths.data();
        out.columns = columns;
        out.next = nexts;
        int sampled = 0;
        while (!done.load() || sampled == 0) {
            if (seq.len() == 0) continue;
            try {
                seq.sample_into(rng, batch, 0.4, out);
            } catch (const kr::Error &e) {
                EXPECT(e.status() == KR_E_CONTENTION || e.status() == KR_E_ZERO_TOTAL_PRIORITY);
                continue;
            }
            for (std::size_t b = 0; b < batch; ++b) {
                auto [lane, start] = seq.window_of(keys[b]);
                for (std::size_t i = 0; i < lengths[b]; ++i) {
                    EXPECT(step[b * window + i] == static_cast<std::int64_t>(start + i));
                    EXPECT(obs[((b * window + i) * 2 + 1) * 2] == static_cast<float>(lane));
                }
            }
            seq.update_priorities(kr::Span<const kr_key>(keys.data(), keys.size()),
                                  kr::Span<const double>(priorities.data(), priorities.size()));
            ++sampled;
        }
    });
    // A save while the lanes write, loaded back (schema and next_of read from it, a lane
    // of it written); a second save onto it throws. It waits for a first window (at most
    // 30 s): on a loaded machine the writers may not have finished one yet.
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
         seq.len() == 0 && std::chrono::steady_clock::now() < until;) {
        std::this_thread::yield();
    }
    char parent[] = "/tmp/kr-seq-cpp-XXXXXX";
    EXPECT(mkdtemp(parent) != nullptr);
    const std::string dir = std::string(parent) + "/ckpt";
    seq.save(dir, 0, {{"steps", 1}});
    {
        kr::SequenceBuffer copy = kr::SequenceBuffer::load(dir);
        EXPECT(copy.schema().size() == seq.schema().size());
        EXPECT(copy.config().window == window && copy.config().n_next_of == seq.config().n_next_of);
        EXPECT(copy.len() > 0);
        // Lane 0 is free in the copy (no writer is saved): a step and an episode's end.
        kr::LaneWriter lane(copy, 0);
        const std::size_t before = copy.len();
        std::int64_t p[1] = {static_cast<std::int64_t>(lane.position())};
        float obs[2] = {0.0f, static_cast<float>(p[0])}, reward[1] = {1.0f}, fin[2] = {0.0f, -1.0f};
        lane.push({obs, p, reward});
        lane.end_episode({fin}, true);
        EXPECT(copy.len() >= before);
    }
    bool threw = false;
    try {
        seq.save(dir);
    } catch (const kr::Error &) {
        threw = true;
    }
    EXPECT(threw);
    EXPECT(std::system(("rm -rf " + std::string(parent)).c_str()) == 0);
    for (auto &w : writers) w.join();
    done = true;
    sampler.join();
    EXPECT(seq.len() > 0);
    if (failures == 0) std::printf("sequence_cpp: all checks passed\n");
    return failures != 0;
}
