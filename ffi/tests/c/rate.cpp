// A rate limit through the C++ wrapper (kary_replay.hpp), for each variant: 2 actor threads
// push through kr::Writer while 2 learner threads sample and update, all blocking on the
// buffer's limiter; the main thread closes the buffer once the learners have sampled enough,
// and every thread ends with KR_E_CLOSED. Checks:
//   - at rest, the limiter's difference is inserts * 4 - samples, within the range, and
//     every admitted insert is in the buffer;
//   - Wait::never() and Wait::at_most() throw retryable KR_E_RATE_LIMITED / KR_E_TIMEOUT and
//     change nothing; rate_stats() and config() report the limit.
// Run by ffi/tests/run.sh, also under valgrind (argument: samples to wait for).
#include "kary_replay.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace kr = kary_replay;

namespace {

std::atomic<int> failures{0};

void fail(const std::string &what) {
    if (failures.fetch_add(1) < 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

void check(bool ok, const std::string &what) {
    if (!ok) fail(what);
}

// 4 samples per insert after 64 items, within +-32 samples; writers of 8, samples of 16.
kr_config limited(std::uint32_t variant) {
    kr_config config = kr_config_default();
    config.capacity = 1024;
    config.variant = variant;
    config.rate_limit = KR_RATE_SAMPLE_TO_INSERT_RATIO;
    config.rate_samples_per_insert = 4.0;
    config.rate_min_size = 64;
    config.rate_error_buffer = 32.0;
    config.rate_insert_batch = 8;
    config.rate_sample_batch = 16;
    return config;
}

kr_status status_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const kr::Error &e) {
        return e.status();
    }
    return KR_OK;
}

void one_variant(std::uint32_t variant, std::uint64_t samples_wanted) {
    kr::Buffer buffer(limited(variant), {kr::column<float>("obs", 2)});
    check(buffer.config().rate_limit == KR_RATE_SAMPLE_TO_INSERT_RATIO, "config reports the limit");
    kr::Rng probe(1);
    float row[2] = {1.0f, 2.0f};

    // Before min_size: a sample does not fit.
    kr_status s = status_of([&] { buffer.sample(probe, 1, 0.4, KR_SAMPLE_STRATIFIED, kr::Wait::never()); });
    check(s == KR_E_RATE_LIMITED, "a sample before min_size is rate limited");
    auto start = std::chrono::steady_clock::now();
    s = status_of([&] {
        buffer.sample(probe, 1, 0.4, KR_SAMPLE_STRATIFIED, kr::Wait::at_most(std::chrono::milliseconds(20)));
    });
    check(s == KR_E_TIMEOUT, "a sample with a timeout times out");
    check(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(20), "it waited its time");
    check(kr::Error(KR_E_TIMEOUT, "").retryable() && kr::Error(KR_E_RATE_LIMITED, "").retryable(),
          "timeouts and refusals are retryable");
    check(buffer.rate_stats().samples == 0 && buffer.len() == 0, "nothing spent");

    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int actor = 0; actor < 2; ++actor) {
        threads.emplace_back([&, actor] {
            kr::Writer writer(buffer, 8);
            float obs[2] = {static_cast<float>(actor), 0.0f};
            try {
                while (!stop.load()) writer.push({kr::ColumnView(obs)});
            } catch (const kr::Error &e) {
                if (e.status() != KR_E_CLOSED) fail(std::string("actor: ") + e.what());
            }
        });
    }
    for (int learner = 0; learner < 2; ++learner) {
        threads.emplace_back([&, learner] {
            kr::Rng rng(100 + learner);
            try {
                for (;;) {
                    kr::Sample batch = buffer.sample(rng, 16, 0.4);
                    std::vector<double> priorities(batch.keys.size(), 1.5);
                    buffer.update_priorities(batch.keys, priorities);
                }
            } catch (const kr::Error &e) {
                if (e.status() != KR_E_CLOSED) fail(std::string("learner: ") + e.what());
            }
        });
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (buffer.rate_stats().samples < samples_wanted) {
        if (std::chrono::steady_clock::now() > deadline) {
            fail("the learners did not sample enough in time");
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    stop.store(true);
    buffer.close();
    for (std::thread &t : threads) t.join();

    kr_rate_stats r = buffer.rate_stats();
    check(r.limited && r.closed && r.open, "stats: limited, closed, open");
    check(r.diff == 4.0 * static_cast<double>(r.inserts) - static_cast<double>(r.samples), "diff is exact");
    check(r.diff >= 4.0 * 64 - 32 && r.diff <= 4.0 * 64 + 32, "diff within the range: " + std::to_string(r.diff));
    check(buffer.inserted() == r.inserts, "every admitted insert is in the buffer");
    check(r.insert_waiters == 0 && r.sample_waiters == 0, "no waiter left");
    s = status_of([&] { buffer.insert({kr::ColumnView(row)}); });
    check(s == KR_E_CLOSED, "an insert after close is KR_E_CLOSED");
}

}  // namespace

int main(int argc, char **argv) {
    std::uint64_t samples_wanted = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000;
    for (std::uint32_t v : {KR_VARIANT_GLOBAL_LOCK, KR_VARIANT_SPLIT_LOCK, KR_VARIANT_LOCK_FREE}) {
        one_variant(v, samples_wanted);
    }
    if (failures.load() == 0) std::printf("rate_cpp: ok\n");
    return failures.load() == 0 ? 0 : 1;
}
