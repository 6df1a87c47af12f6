// The actors' and evaluators' policy: a ReLU MLP evaluated in plain C++ from a snapshot of
// the parameter server's weights, and the board the snapshots are published on.
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

// The newest snapshot, swapped under a mutex (readers copy a shared_ptr, nothing more).
class SnapshotBoard {
public:
    void publish(std::shared_ptr<const Snapshot> s) {
        std::lock_guard<std::mutex> lock(mutex_);
        current_ = std::move(s);
    }
    std::shared_ptr<const Snapshot> get() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return current_;
    }

private:
    mutable std::mutex mutex_;
    std::shared_ptr<const Snapshot> current_;
};

}  // namespace trainer

#endif  // KARY_TRAINER_POLICY_HPP
