// Shards through the C++ wrapper (kary_replay.hpp): 3 shards, each filled by its own actor
// thread through a kr::Writer while 2 learner threads sample the union, each with its own
// kr::Coordinator (stats -> plan -> sample_at per shard -> finish). Checks:
//   - during the run, every row is whole and names its item (its payload is its id's), its
//     key's tag names the shard it came from, and every weight is in (0, 1];
//   - at rest, each draw's probability is its priority over the union's total, as one
//     buffer holding the union gives it (to 1e-12), and updates route by the keys' tags;
//   - the wrapper's errors: an empty union, a shard the plan does not have, replies that do
//     not match the plan.
// Run by ffi/tests/run.sh, also under valgrind.
#include "kary_replay.hpp"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace kr = kary_replay;

namespace {

constexpr int SHARDS = 3;
constexpr int PER_SHARD = 400;
constexpr std::size_t BATCH = 32;
constexpr std::uint32_t BASE_TAG = 500;

std::atomic<int> failures{0};

void fail(const std::string &what) {
    if (failures.fetch_add(1) < 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

double priority_of(std::int64_t id) { return 1.0 + static_cast<double>(id % 7); }
float payload_of(std::int64_t id, std::size_t j) { return static_cast<float>(id) + 0.5f * static_cast<float>(j); }

// One union sample: its keys (shard order), priorities, payload rows and the finish.
struct UnionSample {
    std::vector<kr_key> keys;
    std::vector<double> priorities;
    std::vector<std::int64_t> ids;
    std::vector<float> payload;
    kr::Coordinator::Finished finished;
};

UnionSample sample_union(const std::vector<kr::Buffer> &shards, kr::Coordinator &coordinator, kr::Rng &rng,
                         double beta) {
    std::vector<kr_stats> stats;
    for (const kr::Buffer &s : shards) stats.push_back(s.stats());
    coordinator.plan(stats, BATCH, rng);
    UnionSample u;
    std::vector<kr_reply> replies;
    std::vector<kr::Sample> parts;
    for (std::size_t k = 0; k < shards.size(); ++k) {
        kr::Span<const double> fractions = coordinator.fractions(k);
        kr_stats at{};
        parts.push_back(fractions.empty() ? kr::Sample{}
                                          : kr::retry([&] { return shards[k].sample_at(rng, fractions, at); }));
        const kr::Sample &s = parts.back();
        replies.push_back(kr_reply{s.priorities.data(), s.size(), at.total});
        for (std::size_t j = 0; j < s.size(); ++j) {
            if (kr_key_tag(s.keys[j]) != BASE_TAG + k) fail("a key's tag does not name its shard");
            std::int64_t id = s.column<std::int64_t>(0)[j];
            u.keys.push_back(s.keys[j]);
            u.priorities.push_back(s.priorities[j]);
            u.ids.push_back(id);
            for (std::size_t e = 0; e < 2; ++e) u.payload.push_back(s.column<float>(1)[j * 2 + e]);
        }
    }
    u.finished = coordinator.finish(replies, beta);
    return u;
}

void check_rows(const UnionSample &u) {
    for (std::size_t j = 0; j < u.ids.size(); ++j) {
        std::int64_t id = u.ids[j];
        if (u.payload[2 * j] != payload_of(id, 0) || u.payload[2 * j + 1] != payload_of(id, 1)) {
            fail("a torn row: id " + std::to_string(id));
        }
        if (u.priorities[j] != priority_of(id)) fail("a row's priority is not its id's");
        double w = u.finished.weights[j];
        if (!(w > 0.0 && w <= 1.0)) fail("a weight outside (0, 1]: " + std::to_string(w));
    }
}

void run(std::uint32_t variant, const char *name) {
    std::vector<kr::Buffer> shards;
    for (int k = 0; k < SHARDS; ++k) {
        kr_config config = kr::default_config();
        config.capacity = 1024;
        config.variant = variant;
        config.alpha = 1.0;
        config.key_tag = BASE_TAG + static_cast<std::uint32_t>(k);
        shards.emplace_back(config, std::vector<kr::Column>{kr::column<std::int64_t>("id", 1),
                                                            kr::column<float>("payload", 2)});
        std::int64_t id[1] = {k * 100000};
        float payload[2] = {payload_of(id[0], 0), payload_of(id[0], 1)};
        shards.back().insert({kr::ColumnView(id), kr::ColumnView(payload)}, priority_of(id[0]));
    }

    std::atomic<bool> done{false};
    std::vector<std::thread> threads;
    for (int k = 0; k < SHARDS; ++k) {
        threads.emplace_back([&, k] {
            kr::Writer writer(shards[k], 16);
            for (int i = 1; i < PER_SHARD; ++i) {
                std::int64_t id[1] = {k * 100000 + i};
                float payload[2] = {payload_of(id[0], 0), payload_of(id[0], 1)};
                writer.push({kr::ColumnView(id), kr::ColumnView(payload)}, priority_of(id[0]));
            }
            writer.flush();
        });
    }
    std::atomic<int> batches{0};
    for (int l = 0; l < 2; ++l) {
        threads.emplace_back([&, l] {
            kr::Rng rng(static_cast<std::uint64_t>(l) + 1);
            kr::Coordinator coordinator;
            for (int n = 0; n < 10 || !done.load(); ++n) {
                check_rows(sample_union(shards, coordinator, rng, 0.4));
                batches.fetch_add(1);
            }
        });
    }
    for (int k = 0; k < SHARDS; ++k) threads[static_cast<std::size_t>(k)].join();
    done.store(true);
    for (std::size_t t = SHARDS; t < threads.size(); ++t) threads[t].join();

    // At rest: exact probabilities against the union's total, and routing by tag.
    double total = 0.0;
    for (const kr::Buffer &s : shards) total += s.total_priority();
    kr::Rng rng(99);
    kr::Coordinator coordinator;
    UnionSample u = sample_union(shards, coordinator, rng, 1.0);
    check_rows(u);
    if (u.ids.size() != BATCH) fail("the union sample has " + std::to_string(u.ids.size()) + " rows");
    for (std::size_t j = 0; j < u.ids.size(); ++j) {
        if (std::fabs(u.finished.probabilities[j] - u.priorities[j] / total) > 1e-12) {
            fail("a probability is not priority / union total");
        }
    }
    std::size_t shard = kr_key_tag(u.keys[0]) - BASE_TAG;
    double p = 2.0;
    if (shards[shard].update_priorities(kr::Span<const kr_key>(&u.keys[0], 1), kr::Span<const double>(&p, 1))
            .applied != 1) {
        fail("a shard did not apply its own key");
    }
    try {
        shards[(shard + 1) % SHARDS].update_priorities(kr::Span<const kr_key>(&u.keys[0], 1),
                                                        kr::Span<const double>(&p, 1));
        fail("another shard applied a key it never made");
    } catch (const kr::Error &e) {
        if (e.status() != KR_E_INVALID_KEY) fail(std::string("a foreign key: ") + e.what());
    }

    // The wrapper's errors.
    auto expect = [](kr_status status, auto &&f, const char *what) {
        try {
            f();
            fail(std::string(what) + " did not throw");
        } catch (const kr::Error &e) {
            if (e.status() != status) fail(std::string(what) + ": " + e.what());
        }
    };
    std::vector<kr_stats> none(2);
    expect(KR_E_EMPTY, [&] { coordinator.plan(none, BATCH, rng); }, "an empty union");
    expect(KR_E_OUT_OF_RANGE, [&] { coordinator.fractions(0); }, "a failed plan's shard");
    std::vector<kr_stats> stats{shards[0].stats()};
    coordinator.plan(stats, 4, rng);
    expect(KR_E_OUT_OF_RANGE, [&] { coordinator.fractions(1); }, "a shard the plan does not have");
    expect(KR_E_LENGTH_MISMATCH, [&] { coordinator.finish({}, 0.4); }, "no replies");
    std::vector<double> short_room(2);
    expect(KR_E_LENGTH_MISMATCH, [&] { coordinator.finish_into({}, 0.4, KR_WEIGHTS_GLOBAL, short_room, {}); },
           "too little room");

    std::printf("shards %s: %d union batches while 3 actors wrote, rows whole, probabilities exact: %s\n", name,
                batches.load(), failures.load() == 0 ? "ok" : "FAILED");
}

}  // namespace

int main() {
    run(KR_VARIANT_GLOBAL_LOCK, "GlobalLock");
    run(KR_VARIANT_SPLIT_LOCK, "SplitLock");
    run(KR_VARIANT_LOCK_FREE, "LockFree");
    return failures.load() == 0 ? 0 : 1;
}
