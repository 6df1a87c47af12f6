// The trainer's framework pieces that need no LibTorch (framework_test.cpp tests them):
// the command line, the rate control that holds the replay ratio, the design-space
// exploration of the paper's equation 5, the actors' native policy (a small MLP evaluated
// in plain C++ from a parameter-server snapshot), and the run statistics.
#ifndef KARY_TRAINER_FRAMEWORK_HPP
#define KARY_TRAINER_FRAMEWORK_HPP

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

// ---------------------------------------------------------------------------------------
// Command line

// A bad flag or value: main prints what() and the usage line, and exits with code 2.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Options {
    std::string env = "cartpole";  // cartpole | pendulum
    std::string algo;              // dqn | td3; empty: the environment's algorithm
    int actors = 1;
    int learners = 1;
    std::string variant = "split";  // global | split | lockfree
    int fanout = 8;
    int batch = 0;                  // 0: the algorithm's default
    long capacity = 100000;
    long steps = 0;                 // total env steps; 0: the algorithm's default
    std::uint64_t seed = 1;
    int update_interval = 0;        // actors refresh their policy every T env steps; 0: default
    int priority_delay = 0;         // priority updates applied D batches late
    double replay_ratio = 0;        // gradient samples per inserted transition; 0: default
    std::string csv;                // CSV path; empty: none
    bool automatic = false;         // --auto: choose actors and learners by equation 5
    // Beyond the list: evaluation, warm-up, learning rate, and a wall-time cap.
    long eval_every = 0;            // env steps between greedy evaluations; 0: default
    int eval_episodes = 0;          // 0: 20 (CartPole) or 10 (Pendulum)
    long warmup = -1;               // env steps before learning starts; -1: default
    double lr = 0;                  // 0: default
    double max_seconds = 0;         // stop after this wall time; 0: no cap
    double progress_seconds = 2.0;  // a progress line (and CSV row) this often
    double profile_seconds = 1.0;   // --auto: length of each profiling run
    int max_threads = 0;            // --auto: M, the cores to share; 0: hardware threads
    bool stop_when_solved = false;  // end the run at the first solving evaluation
};

inline const char *usage() {
    return "usage: kary_trainer [--env cartpole|pendulum] [--algo dqn|td3] [--actors A] [--learners L]\n"
           "         [--variant global|split|lockfree] [--fanout K] [--batch B] [--capacity N]\n"
           "         [--steps S] [--seed X] [--update-interval T] [--priority-delay D]\n"
           "         [--replay-ratio R] [--csv PATH] [--auto] [--eval-every E] [--eval-episodes N]\n"
           "         [--warmup W] [--lr LR] [--max-seconds S] [--progress-seconds S]\n"
           "         [--profile-seconds S] [--max-threads M] [--stop-when-solved]";
}

namespace detail {
inline long parse_long(const std::string &flag, const std::string &v, long lo, long hi) {
    char *end = nullptr;
    errno = 0;
    long x = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0 || x < lo || x > hi) {
        throw UsageError(flag + " needs an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                         "], got '" + v + "'");
    }
    return x;
}
inline double parse_double(const std::string &flag, const std::string &v, double lo, double hi) {
    char *end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x) || x < lo || x > hi) {
        throw UsageError(flag + " needs a number in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                         "], got '" + v + "'");
    }
    return x;
}
}  // namespace detail

// Parses argv (without argv[0]); throws UsageError on anything it does not understand.
// Defaults that depend on the environment are filled in here, so that the result is final.
inline Options parse_options(const std::vector<std::string> &args) {
    Options o;
    bool have_eval_every = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string &flag = args[i];
        auto value = [&]() -> const std::string & {
            if (i + 1 >= args.size()) throw UsageError(flag + " needs a value");
            return args[++i];
        };
        if (flag == "--env") {
            o.env = value();
            if (o.env != "cartpole" && o.env != "pendulum") {
                throw UsageError("--env is cartpole or pendulum, got '" + o.env + "'");
            }
        } else if (flag == "--algo") {
            o.algo = value();
            if (o.algo != "dqn" && o.algo != "td3") throw UsageError("--algo is dqn or td3, got '" + o.algo + "'");
        } else if (flag == "--actors") {
            o.actors = static_cast<int>(detail::parse_long(flag, value(), 1, 256));
        } else if (flag == "--learners") {
            o.learners = static_cast<int>(detail::parse_long(flag, value(), 1, 256));
        } else if (flag == "--variant") {
            o.variant = value();
            if (o.variant != "global" && o.variant != "split" && o.variant != "lockfree") {
                throw UsageError("--variant is global, split or lockfree, got '" + o.variant + "'");
            }
        } else if (flag == "--fanout") {
            o.fanout = static_cast<int>(detail::parse_long(flag, value(), 2, 64));
            if ((o.fanout & (o.fanout - 1)) != 0) throw UsageError("--fanout is 2, 4, 8, 16, 32 or 64");
        } else if (flag == "--batch") {
            o.batch = static_cast<int>(detail::parse_long(flag, value(), 1, 65536));
        } else if (flag == "--capacity") {
            o.capacity = detail::parse_long(flag, value(), 1, 1L << 30);
        } else if (flag == "--steps") {
            o.steps = detail::parse_long(flag, value(), 1, 1L << 40);
        } else if (flag == "--seed") {
            o.seed = static_cast<std::uint64_t>(detail::parse_long(flag, value(), 0, 1L << 62));
        } else if (flag == "--update-interval") {
            o.update_interval = static_cast<int>(detail::parse_long(flag, value(), 1, 1 << 30));
        } else if (flag == "--priority-delay") {
            o.priority_delay = static_cast<int>(detail::parse_long(flag, value(), 0, 1 << 20));
        } else if (flag == "--replay-ratio") {
            o.replay_ratio = detail::parse_double(flag, value(), 1e-3, 1e6);
        } else if (flag == "--csv") {
            o.csv = value();
            if (o.csv.empty()) throw UsageError("--csv needs a path");
        } else if (flag == "--auto") {
            o.automatic = true;
        } else if (flag == "--eval-every") {
            o.eval_every = detail::parse_long(flag, value(), 1, 1L << 40);
            have_eval_every = true;
        } else if (flag == "--eval-episodes") {
            o.eval_episodes = static_cast<int>(detail::parse_long(flag, value(), 1, 10000));
        } else if (flag == "--warmup") {
            o.warmup = detail::parse_long(flag, value(), 0, 1L << 40);
        } else if (flag == "--lr") {
            o.lr = detail::parse_double(flag, value(), 1e-7, 1.0);
        } else if (flag == "--max-seconds") {
            o.max_seconds = detail::parse_double(flag, value(), 0.01, 1e7);
        } else if (flag == "--progress-seconds") {
            o.progress_seconds = detail::parse_double(flag, value(), 0.05, 1e5);
        } else if (flag == "--profile-seconds") {
            o.profile_seconds = detail::parse_double(flag, value(), 0.05, 600);
        } else if (flag == "--max-threads") {
            o.max_threads = static_cast<int>(detail::parse_long(flag, value(), 2, 1024));
        } else if (flag == "--stop-when-solved") {
            o.stop_when_solved = true;
        } else if (flag == "-h" || flag == "--help") {
            throw UsageError("");
        } else {
            throw UsageError("unknown flag '" + flag + "'");
        }
    }
    const bool cartpole = o.env == "cartpole";
    if (o.algo.empty()) o.algo = cartpole ? "dqn" : "td3";
    if (cartpole && o.algo != "dqn") throw UsageError("CartPole has discrete actions: --algo dqn");
    if (!cartpole && o.algo != "td3") throw UsageError("Pendulum has continuous actions: --algo td3");
    // Defaults (the trainer README's "Hyperparameters" table): chosen so that both tasks are solved
    // within the targets on 2 cores.
    if (o.batch == 0) o.batch = cartpole ? 64 : 128;
    if (o.steps == 0) o.steps = cartpole ? 60000 : 20000;
    if (o.replay_ratio == 0) o.replay_ratio = cartpole ? 16.0 : 128.0;
    if (o.update_interval == 0) o.update_interval = cartpole ? 16 : 1;
    if (o.warmup < 0) o.warmup = cartpole ? 1000 : 1000;
    if (o.lr == 0) o.lr = cartpole ? 1e-3 : 1e-3;
    if (!have_eval_every) o.eval_every = cartpole ? 2000 : 1000;
    if (o.eval_episodes == 0) o.eval_episodes = cartpole ? 20 : 10;
    if (o.capacity < o.batch) throw UsageError("--capacity must be at least --batch");
    return o;
}

// ---------------------------------------------------------------------------------------
// Rate control: holds the replay ratio R (gradient samples per inserted transition).
//
// Actors count env steps, learners reserve samples B at a time. After the warm-up W, a
// learner may take a batch only while granted + B <= R (steps - W), and an actor may step
// only while R (steps - W) <= granted + slack: neither side runs ahead of the other by more
// than the slack, whatever A, L and the thread timing. The slack is at least one round of
// every learner (L B samples), so both sides never wait at once (no deadlock).
class RateControl {
public:
    RateControl(double ratio, long warmup, long total_steps, long slack_samples)
        : ratio_(ratio), warmup_(warmup), total_(total_steps), slack_(slack_samples) {}

    // An actor calls this before each env step. Returns false when the run is over (the
    // step budget is spent or stop() was called); otherwise the step is counted as taken.
    bool actor_step() {
        long s = steps_.load(std::memory_order_relaxed);
        for (;;) {
            if (stopped_.load(std::memory_order_acquire) || s >= total_) return false;
            if (!actor_must_wait(s)) {
                if (steps_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) {
                    if (waiting_learners_.load(std::memory_order_acquire) > 0) notify();
                    return true;
                }
                continue;
            }
            std::unique_lock<std::mutex> lock(mutex_);
            waiting_actors_.fetch_add(1, std::memory_order_acq_rel);
            cv_.wait_for(lock, std::chrono::milliseconds(5), [&] {
                s = steps_.load(std::memory_order_acquire);
                return stopped_.load(std::memory_order_acquire) || s >= total_ || !actor_must_wait(s);
            });
            waiting_actors_.fetch_sub(1, std::memory_order_acq_rel);
            s = steps_.load(std::memory_order_relaxed);
        }
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
    std::atomic<int> waiting_learners_{0};
    std::atomic<int> waiting_actors_{0};
    std::mutex mutex_;
    std::condition_variable cv_;
};

// ---------------------------------------------------------------------------------------
// Design-space exploration: the paper's equation 5,
//   f_a(x_a) = update_interval x f_l(x_l),  x_a + x_l <= M,
// with f_a in env steps/s, f_l in gradient steps/s (all learners together) and
// update_interval = B / R env steps per gradient step. Integer thread counts rarely meet the
// equality, so the exhaustive search takes the pair whose balanced rate
// min(f_a(x_a), update_interval f_l(x_l)) (the env steps/s the run can hold at ratio R) is
// highest, and among pairs within 2% of it the one with the smaller mismatch, then fewer
// threads.
struct DseChoice {
    int actors = 1, learners = 1;
    double balanced = 0;  // env steps/s at the replay ratio
    double mismatch = 0;  // |log(f_a / (update_interval f_l))|
};

inline DseChoice solve_equation5(const std::vector<double> &f_a, const std::vector<double> &f_l,
                                 double update_interval, int m) {
    // f_a[x-1] and f_l[x-1] are the profiles for x threads.
    DseChoice best;
    best.balanced = -1;
    for (int xa = 1; xa <= static_cast<int>(f_a.size()); ++xa) {
        for (int xl = 1; xl <= static_cast<int>(f_l.size()); ++xl) {
            if (xa + xl > m) continue;
            const double a = f_a[xa - 1];
            const double l = update_interval * f_l[xl - 1];
            DseChoice c{xa, xl, std::min(a, l), std::fabs(std::log(std::max(a, 1e-12) / std::max(l, 1e-12)))};
            bool better;
            if (best.balanced < 0 || c.balanced > best.balanced * 1.02) {
                better = true;
            } else if (c.balanced >= best.balanced / 1.02) {
                better = c.mismatch < best.mismatch - 1e-9 ||
                         (std::fabs(c.mismatch - best.mismatch) <= 1e-9 && xa + xl < best.actors + best.learners);
            } else {
                better = false;
            }
            if (better) best = c;
        }
    }
    if (best.balanced < 0) throw std::invalid_argument("equation 5 needs M >= 2 and non-empty profiles");
    return best;
}

// ---------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------
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

    void episode_done(double ret) {
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

#endif  // KARY_TRAINER_FRAMEWORK_HPP
