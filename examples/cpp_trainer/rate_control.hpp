// Rate control: the run's step budget and checkpoint holds, with the replay ratio held by
// the crate's rate limiter (kary_replay::RateLimiter). No LibTorch (framework_test.cpp tests it).
#ifndef KARY_TRAINER_RATE_CONTROL_HPP
#define KARY_TRAINER_RATE_CONTROL_HPP

#include "kary_replay.hpp"

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
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace trainer {

// The replay ratio R (gradient samples per inserted transition) is the crate's
// SampleToInsertRatio (KR_RATE_SAMPLE_TO_INSERT_RANGE): after the warm-up W,
// R x steps - granted stays within [R W, R W + slack], so a learner takes a batch of B only
// while granted + B <= R (steps - W) and an actor steps only while it stays at most `slack`
// ahead. Each env step is an insert of 1 admitted by the limiter (one compare-and-swap),
// each batch a sample of B. The slack is at least one round of every learner (L B
// samples): the limiter refuses a range in which both sides could wait at once.
//
// With --processes the actors are processes and the shared buffer's own rate limit holds the
// ratio (replay.hpp, make_shared_buffer): this RateControl is unthrottled, its step count
// and stop flag in memory the actor processes share (share_counts).
//
// What stays the trainer's own: the step budget (an actor reserves its step before it asks
// the limiter, so at most `total` steps are taken), stop(), and the checkpoint hold: an
// actor asking for a step while a checkpoint holds the actors is told to park instead
// (Step::Hold); it flushes its staged transitions, parks (park(), counted) and goes on
// after release(). Every step taken before the hold is then in the buffer. Waits on the
// limiter run in slices of kSlice, so that a hold or a stop is seen.
enum class Step { Go, Hold, End };

class RateControl {
public:
    // Replay ratio `ratio` after `warmup` steps within `slack` samples, for `total` env
    // steps and learner batches of `batch`, continuing from `steps` and `granted` (a
    // checkpoint's counts). Throws kary_replay::Error when the limiter refuses the range (its
    // message says what would work).
    RateControl(double ratio, long warmup, long total, long slack, long batch, long steps = 0, long granted = 0)
        : total_(total) {
        own_.steps.store(steps);
        kr_config c = kr_config_default();
        const long min_size = std::max(warmup, 1L);
        c.rate_limit = KR_RATE_SAMPLE_TO_INSERT_RANGE;
        c.rate_samples_per_insert = ratio;
        c.rate_min_size = static_cast<std::uint64_t>(min_size);
        c.rate_min_diff = ratio * static_cast<double>(min_size);
        c.rate_max_diff = c.rate_min_diff + static_cast<double>(slack);
        c.rate_insert_batch = 1;
        c.rate_sample_batch = static_cast<std::uint64_t>(batch);
        limiter_.emplace(c, static_cast<std::uint64_t>(steps), static_cast<std::uint64_t>(granted));
    }

    // No replay ratio: actors step until `total`, learners take every batch they ask for
    // (the thread-count profiles).
    static RateControl unthrottled(long total) { return RateControl(total); }

    // The step count and the stop flag: what actor processes (--processes) share with the
    // trainer. Lock-free atomics, so they work in memory shared across fork.
    struct Counts {
        std::atomic<long> steps{0};
        std::atomic<bool> stopped{false};
    };
    static_assert(std::atomic<long>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
                  "the counts must work in memory shared by processes");

    // Keep the counts at `place` from now on (memory shared with processes forked later;
    // unthrottled only, as a limiter's state would stay in this process): the count so far
    // goes there. Call before any actor or learner runs.
    void share_counts(void *place) {
        if (limiter_) throw std::logic_error("a throttled RateControl keeps its limiter in one process");
        Counts *shared = new (place) Counts;
        shared->steps.store(counts().steps.load());
        shared->stopped.store(counts().stopped.load());
        shared_ = shared;
    }

    // An actor calls this before each env step: End when the run is over (the step budget
    // is spent or stop() was called), Hold while a checkpoint holds the actors; on Go the
    // step is counted as taken.
    Step actor_step() {
        std::atomic<long> &steps = counts().steps;
        for (;;) {
            if (stopped()) return Step::End;
            if (holding_.load(std::memory_order_acquire)) return Step::Hold;
            // Reserve the step within the budget, then have the limiter admit it.
            if (steps.fetch_add(1, std::memory_order_acq_rel) >= total_) {
                steps.fetch_sub(1, std::memory_order_acq_rel);
                return Step::End;
            }
            if (!limiter_) return Step::Go;
            try {
                if (limiter_->insert(1, kSlice)) return Step::Go;
                // Not admitted yet: give the step back and look at hold and stop again.
                steps.fetch_sub(1, std::memory_order_acq_rel);
            } catch (const kary_replay::Error &) {
                steps.fetch_sub(1, std::memory_order_acq_rel);  // closed: the run stopped
                return Step::End;
            }
        }
    }

    // Hold the actors: each parks at its next step (Step::Hold).
    void hold() {
        holding_.store(true, std::memory_order_release);
        notify();
    }
    // An actor told to hold waits here until release() (or stop()).
    void park() {
        std::unique_lock<std::mutex> lock(mutex_);
        ++parked_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return !holding_.load(std::memory_order_acquire) || stopped(); });
        --parked_;
    }
    // Actors parked now.
    int parked() {
        std::lock_guard<std::mutex> lock(mutex_);
        return parked_;
    }
    // Let parked actors go on.
    void release() {
        holding_.store(false, std::memory_order_release);
        notify();
    }

    // A learner calls this before sampling a batch of `batch`. Returns false when the run
    // is over (stop() was called, or the actors are done and the ratio is met).
    bool learner_take(long batch) {
        if (!limiter_) return !stopped();
        const auto n = static_cast<std::uint64_t>(batch);
        for (;;) {
            if (stopped()) return false;
            try {
                if (limiter_->sample(n, kSlice)) return true;
                // No more data will come: take what the ratio still allows.
                if (steps() >= total_) return limiter_->sample(n, kary_replay::Wait::never());
            } catch (const kary_replay::Error &) {
                return false;  // closed: the run stopped
            }
        }
    }

    // End the run: every actor and learner waiting on the limiter returns at once.
    void stop() {
        counts().stopped.store(true, std::memory_order_release);
        if (limiter_) limiter_->close();
        notify();
    }
    bool stopped() const { return counts().stopped.load(std::memory_order_acquire); }
    long steps() const { return counts().steps.load(std::memory_order_acquire); }
    // Samples granted to the learners (the limiter's count).
    long granted() const { return limiter_ ? static_cast<long>(limiter_->stats().samples) : 0; }
    long total() const { return total_; }

private:
    explicit RateControl(long total) : total_(total) {}
    Counts &counts() { return shared_ ? *shared_ : own_; }
    const Counts &counts() const { return shared_ ? *shared_ : own_; }
    void notify() {
        std::lock_guard<std::mutex> lock(mutex_);
        cv_.notify_all();
    }

    static constexpr std::chrono::milliseconds kSliceMs{5};
    inline static const kary_replay::Wait kSlice = kary_replay::Wait::at_most(kSliceMs);

    const long total_;
    Counts own_;
    Counts *shared_ = nullptr;  // share_counts(): the counts live there instead
    std::optional<kary_replay::RateLimiter> limiter_;  // none: unthrottled
    std::atomic<bool> holding_{false};
    int parked_ = 0;  // under mutex_
    std::mutex mutex_;
    std::condition_variable cv_;
};

}  // namespace trainer

#endif  // KARY_TRAINER_RATE_CONTROL_HPP
