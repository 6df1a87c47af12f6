// Rate control: holds the replay ratio between actor and learner threads.
// No LibTorch (framework_test.cpp tests it).
#ifndef KARY_TRAINER_RATE_CONTROL_HPP
#define KARY_TRAINER_RATE_CONTROL_HPP

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

namespace trainer {

// Rate control: holds the replay ratio R (gradient samples per inserted transition).
//
// Actors count env steps, learners reserve samples B at a time. After the warm-up W, a
// learner may take a batch only while granted + B <= R (steps - W), and an actor may step
// only while R (steps - W) <= granted + slack: neither side runs ahead of the other by more
// than the slack, whatever A, L and the thread timing. The slack is at least one round of
// every learner (L B samples), so both sides never wait at once (no deadlock).
//
// A checkpoint holds the actors (hold()): an actor asking for a step is told to park
// (Step::Hold); it flushes its staged transitions, parks (park(), counted) and goes on after
// release(). Every step counted before the hold is then in the buffer.
enum class Step { Go, Hold, End };

class RateControl {
public:
    RateControl(double ratio, long warmup, long total_steps, long slack_samples)
        : ratio_(ratio), warmup_(warmup), total_(total_steps), slack_(slack_samples) {}

    // An actor calls this before each env step: End when the run is over (the step budget
    // is spent or stop() was called), Hold while a checkpoint holds the actors; on Go the
    // step is counted as taken.
    Step actor_step() {
        long s = steps_.load(std::memory_order_relaxed);
        for (;;) {
            if (stopped_.load(std::memory_order_acquire) || s >= total_) return Step::End;
            if (holding_.load(std::memory_order_acquire)) return Step::Hold;
            if (!actor_must_wait(s)) {
                if (steps_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) {
                    if (waiting_learners_.load(std::memory_order_acquire) > 0) notify();
                    return Step::Go;
                }
                continue;
            }
            std::unique_lock<std::mutex> lock(mutex_);
            waiting_actors_.fetch_add(1, std::memory_order_acq_rel);
            cv_.wait_for(lock, std::chrono::milliseconds(5), [&] {
                s = steps_.load(std::memory_order_acquire);
                return stopped_.load(std::memory_order_acquire) || s >= total_ ||
                       holding_.load(std::memory_order_acquire) || !actor_must_wait(s);
            });
            waiting_actors_.fetch_sub(1, std::memory_order_acq_rel);
            s = steps_.load(std::memory_order_relaxed);
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
        cv_.wait(lock, [&] {
            return !holding_.load(std::memory_order_acquire) || stopped_.load(std::memory_order_acquire);
        });
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
    // The counters a checkpoint saved (a resumed run starts from them).
    void restore(long steps, long granted) {
        steps_.store(steps, std::memory_order_release);
        granted_.store(granted, std::memory_order_release);
    }

    // A learner calls this before sampling a batch of `batch`. Returns false when the run
    // is over (stop() was called, or the actors are done and the ratio is met).
    bool learner_take(long batch) {
        for (;;) {
            long g = granted_.load(std::memory_order_relaxed);
            if (stopped_.load(std::memory_order_acquire)) return false;
            const long s = steps_.load(std::memory_order_acquire);
            if (g + batch <= allowed(s)) {
                if (granted_.compare_exchange_weak(g, g + batch, std::memory_order_acq_rel)) {
                    if (waiting_actors_.load(std::memory_order_acquire) > 0) notify();
                    return true;
                }
                continue;
            }
            if (s >= total_) return false;  // no more data will come
            std::unique_lock<std::mutex> lock(mutex_);
            waiting_learners_.fetch_add(1, std::memory_order_acq_rel);
            cv_.wait_for(lock, std::chrono::milliseconds(5), [&] {
                return stopped_.load(std::memory_order_acquire) ||
                       granted_.load(std::memory_order_acquire) + batch <=
                           allowed(steps_.load(std::memory_order_acquire)) ||
                       steps_.load(std::memory_order_acquire) >= total_;
            });
            waiting_learners_.fetch_sub(1, std::memory_order_acq_rel);
        }
    }

    void stop() {
        stopped_.store(true, std::memory_order_release);
        notify();
    }
    bool stopped() const { return stopped_.load(std::memory_order_acquire); }
    long steps() const { return steps_.load(std::memory_order_acquire); }
    long granted() const { return granted_.load(std::memory_order_acquire); }
    long total() const { return total_; }
    // The samples the ratio allows after `steps` env steps.
    long allowed(long steps) const {
        return steps <= warmup_ ? 0 : static_cast<long>(std::floor(ratio_ * static_cast<double>(steps - warmup_)));
    }

private:
    bool actor_must_wait(long s) const { return allowed(s) > granted_.load(std::memory_order_acquire) + slack_; }
    void notify() {
        std::lock_guard<std::mutex> lock(mutex_);
        cv_.notify_all();
    }

    const double ratio_;
    const long warmup_, total_, slack_;
    std::atomic<long> steps_{0};
    std::atomic<long> granted_{0};
    std::atomic<bool> stopped_{false};
    std::atomic<bool> holding_{false};
    int parked_ = 0;  // under mutex_
    std::atomic<int> waiting_learners_{0};
    std::atomic<int> waiting_actors_{0};
    std::mutex mutex_;
    std::condition_variable cv_;
};

}  // namespace trainer

#endif  // KARY_TRAINER_RATE_CONTROL_HPP
