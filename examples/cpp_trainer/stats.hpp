// Statistics shared by the threads.
// No LibTorch (framework_test.cpp tests it).
#ifndef KARY_TRAINER_STATS_HPP
#define KARY_TRAINER_STATS_HPP

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace trainer {

// Statistics shared by the threads.
struct Stats {
    std::atomic<long> grad_steps{0};      // parameter-server rounds
    std::atomic<long> episodes{0};
    std::atomic<long> priority_updates{0};  // priorities written back (applied)
    std::atomic<long> stale_updates{0};     // dropped because the slot was overwritten
    std::atomic<long> contention_retries{0};
    std::mutex mutex;
    std::deque<double> returns;  // last 100 training episodes (under mutex)
    double last_loss = 0;        // under mutex
    std::string failure_;        // the first error a thread hit (under mutex); ends the run

    void fail(const std::string &error) {
        std::lock_guard<std::mutex> lock(mutex);
        if (failure_.empty()) failure_ = error;
    }
    std::string failure() {
        std::lock_guard<std::mutex> lock(mutex);
        return failure_;
    }

    // In an actor process (--processes): the pipe its episodes go to; the trainer's reader
    // records them (record_episode). -1: record here.
    int episode_fd = -1;

    void episode_done(double ret) {
        if (episode_fd >= 0) {
            // 8 bytes, below PIPE_BUF: written whole. The reader gone (the trainer ended) is
            // no error of this process's.
            ssize_t written = ::write(episode_fd, &ret, sizeof ret);
            (void)written;
            return;
        }
        record_episode(ret);
    }
    void record_episode(double ret) {
        episodes.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(mutex);
        returns.push_back(ret);
        if (returns.size() > 100) returns.pop_front();
    }
    double mean_return() {
        std::lock_guard<std::mutex> lock(mutex);
        if (returns.empty()) return std::nan("");
        double s = 0;
        for (double r : returns) s += r;
        return s / static_cast<double>(returns.size());
    }
};

}  // namespace trainer

#endif  // KARY_TRAINER_STATS_HPP
