// The actors' and evaluators' policy: a ReLU MLP evaluated in plain C++ from a snapshot of
// the parameter server's weights, the board the snapshots are published on, and the shared
// memory that carries them to actor processes.
// No LibTorch (framework_test.cpp tests it).
#ifndef KARY_TRAINER_POLICY_HPP
#define KARY_TRAINER_POLICY_HPP

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
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace trainer {

// The actors' and evaluators' policy: a ReLU MLP evaluated in plain C++ from a snapshot of
// the parameter server's weights (row-major [out, in] weights, then biases, per layer).
// For a 4-64-64-2 Q-network this is a few microseconds per step, against tens for a
// LibTorch forward call on one item.
struct Mlp {
    std::vector<int> sizes;                 // input, hidden..., output
    std::vector<std::vector<float>> w, b;   // per layer
    bool tanh_output = false;               // TD3's actor: tanh, then x output_scale
    float output_scale = 1.0f;

    // The widest layer forward() can hold (its scratch is on the stack); MlpNet::native()
    // refuses wider nets.
    static constexpr int kMaxWidth = 512;

    // Writes sizes.back() outputs.
    void forward(const float *in, float *out) const {
        float buf_a[kMaxWidth], buf_b[kMaxWidth];
        const float *x = in;
        for (std::size_t layer = 0; layer + 1 < sizes.size(); ++layer) {
            const int n_in = sizes[layer], n_out = sizes[layer + 1];
            const bool last = layer + 2 == sizes.size();
            float *y = last ? out : (layer % 2 == 0 ? buf_a : buf_b);
            const float *wl = w[layer].data();
            for (int o = 0; o < n_out; ++o) {
                float acc = b[layer][o];
                const float *row = wl + static_cast<std::size_t>(o) * n_in;
                for (int i = 0; i < n_in; ++i) acc += row[i] * x[i];
                if (!last) {
                    acc = acc > 0 ? acc : 0;
                } else if (tanh_output) {
                    acc = output_scale * std::tanh(acc);
                }
                y[o] = acc;
            }
            x = y;
        }
    }
    int outputs() const { return sizes.back(); }
};

// A published policy: the weights and the gradient round they come from.
struct Snapshot {
    Mlp policy;
    long round = 0;
};

// A snapshot's weights in memory that forked actor processes share (--processes): a
// sequence lock over relaxed atomic floats. One writer at a time (the parameter server's
// publish, under the board's mutex); readers copy, then check that no write began or ended
// meanwhile, and copy again if one did. Laid out in place at the start of its memory
// (bytes_for), so it works at any address every process maps.
class SharedPolicy {
public:
    static std::size_t bytes_for(std::size_t floats) { return sizeof(SharedPolicy) + floats * sizeof(std::atomic<float>); }
    // Made in `place` (bytes_for(floats) bytes, suitably aligned), with no snapshot yet.
    static SharedPolicy *make(void *place, std::size_t floats) {
        auto *p = new (place) SharedPolicy(floats);
        for (std::size_t i = 0; i < floats; ++i) new (&p->weights()[i]) std::atomic<float>(0.0f);
        return p;
    }
    static std::size_t floats_of(const Mlp &m) {
        std::size_t n = 0;
        for (std::size_t l = 0; l < m.w.size(); ++l) n += m.w[l].size() + m.b[l].size();
        return n;
    }

    // Publish `s` (its policy's weights: each layer's w, then its b). Returns the version.
    std::uint64_t write(const Snapshot &s) {
        if (floats_of(s.policy) != floats_) throw std::logic_error("SharedPolicy: a policy of another size");
        const std::uint64_t v = seq_.load(std::memory_order_relaxed);
        seq_.store(v + 1, std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_release);
        std::atomic<float> *out = weights();
        for (std::size_t l = 0; l < s.policy.w.size(); ++l) {
            for (float x : s.policy.w[l]) (out++)->store(x, std::memory_order_relaxed);
            for (float x : s.policy.b[l]) (out++)->store(x, std::memory_order_relaxed);
        }
        round_.store(s.round, std::memory_order_relaxed);
        seq_.store(v + 2, std::memory_order_release);
        return v + 2;
    }

    // The version now (even: no write in progress; 0: nothing published).
    std::uint64_t version() const { return seq_.load(std::memory_order_acquire); }

    // The newest snapshot into `into` (whose policy has this one's shape); returns its version.
    std::uint64_t read(Snapshot &into) const {
        for (;;) {
            const std::uint64_t v = seq_.load(std::memory_order_acquire);
            if (v % 2 != 0) {
                std::this_thread::yield();
                continue;
            }
            const std::atomic<float> *in = weights();
            for (std::size_t l = 0; l < into.policy.w.size(); ++l) {
                for (float &x : into.policy.w[l]) x = (in++)->load(std::memory_order_relaxed);
                for (float &x : into.policy.b[l]) x = (in++)->load(std::memory_order_relaxed);
            }
            into.round = round_.load(std::memory_order_relaxed);
            std::atomic_thread_fence(std::memory_order_acquire);
            if (seq_.load(std::memory_order_relaxed) == v) return v;
        }
    }

private:
    explicit SharedPolicy(std::size_t floats) : floats_(floats) {}
    std::atomic<float> *weights() { return reinterpret_cast<std::atomic<float> *>(this + 1); }
    const std::atomic<float> *weights() const { return reinterpret_cast<const std::atomic<float> *>(this + 1); }

    std::atomic<std::uint64_t> seq_{0};
    std::atomic<long> round_{0};
    const std::size_t floats_;
};
static_assert(std::atomic<float>::is_always_lock_free && std::atomic<std::uint64_t>::is_always_lock_free,
              "a shared policy needs lock-free atomics");
static_assert(sizeof(SharedPolicy) % alignof(std::atomic<float>) == 0, "the weights follow the header");

// The newest snapshot, swapped under a mutex (readers copy a shared_ptr, nothing more).
// Shared (share()), a publish also writes the weights to a SharedPolicy, and a get() in any
// process that maps it returns the newest published there.
class SnapshotBoard {
public:
    void publish(std::shared_ptr<const Snapshot> s) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (shared_) seen_ = shared_->write(*s);
        current_ = std::move(s);
    }
    std::shared_ptr<const Snapshot> get() const {
        std::lock_guard<std::mutex> lock(mutex_);
        if (shared_ && current_ && shared_->version() != seen_) {
            auto fresh = std::make_shared<Snapshot>(*current_);  // the shape; the weights follow
            seen_ = shared_->read(*fresh);
            current_ = std::move(fresh);
        }
        return current_;
    }
    // Publish to `shared` from now on, the current snapshot first (call with one published,
    // before the processes that read it are forked).
    void share(SharedPolicy *shared) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!current_) throw std::logic_error("SnapshotBoard::share: nothing published yet");
        shared_ = shared;
        seen_ = shared_->write(*current_);
    }

private:
    mutable std::mutex mutex_;
    mutable std::shared_ptr<const Snapshot> current_;
    SharedPolicy *shared_ = nullptr;
    mutable std::uint64_t seen_ = 0;
};

}  // namespace trainer

#endif  // KARY_TRAINER_POLICY_HPP
