// The command line: every flag, its default and its range, and the usage text.
// No LibTorch (framework_test.cpp tests it).
#ifndef KARY_TRAINER_OPTIONS_HPP
#define KARY_TRAINER_OPTIONS_HPP

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
#include <initializer_list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace trainer {

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
    std::string variant;            // global | split | lockfree; empty: split (shared with --processes)
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
    std::string checkpoint;         // --checkpoint DIR: where checkpoints go; empty: none
    long checkpoint_every = 0;      // env steps between checkpoints; 0: 10000
    bool resume = false;            // start from the newest checkpoint in `checkpoint`
    int nstep = 1;                  // n-step returns over lanes of steps (1: one-step transitions)
    bool processes = false;         // actors as forked processes on a buffer in shared memory
};

inline const char *usage() {
    return "usage: kary_trainer [--env cartpole|pendulum] [--algo dqn|td3] [--actors A] [--learners L]\n"
           "         [--variant global|split|lockfree] [--fanout K] [--batch B] [--capacity N]\n"
           "         [--steps S] [--seed X] [--update-interval T] [--priority-delay D]\n"
           "         [--replay-ratio R] [--csv PATH] [--auto] [--eval-every E] [--eval-episodes N]\n"
           "         [--warmup W] [--lr LR] [--max-seconds S] [--progress-seconds S]\n"
           "         [--profile-seconds S] [--max-threads M] [--stop-when-solved]\n"
           "         [--checkpoint DIR] [--checkpoint-every N] [--resume] [--nstep N] [--processes]";
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

namespace detail {
// `v` if it is one of `choices`, else the error that lists them.
inline std::string one_of(const std::string &flag, const std::string &v, std::initializer_list<const char *> choices) {
    std::string list;
    std::size_t k = 0;
    for (const char *c : choices) {
        if (v == c) return v;
        list += (k == 0 ? "" : k + 1 == choices.size() ? " or " : ", ");
        list += c;
        ++k;
    }
    throw UsageError(flag + " is " + list + ", got '" + v + "'");
}

// `v` unless it is empty (`what`: what the flag needs).
inline std::string non_empty(const std::string &flag, const std::string &v, const char *what) {
    if (v.empty()) throw UsageError(flag + " needs " + what);
    return v;
}

// Sets what `flag` names, reading its value with `value()` when it takes one.
template <class Value> void set_flag(Options &o, const std::string &flag, Value &&value) {
    auto integer = [&](long lo, long hi) { return parse_long(flag, value(), lo, hi); };
    auto number = [&](double lo, double hi) { return parse_double(flag, value(), lo, hi); };
    if (flag == "--env") {
        o.env = one_of(flag, value(), {"cartpole", "pendulum"});
    } else if (flag == "--algo") {
        o.algo = one_of(flag, value(), {"dqn", "td3"});
    } else if (flag == "--actors") {
        o.actors = static_cast<int>(integer(1, 256));
    } else if (flag == "--learners") {
        o.learners = static_cast<int>(integer(1, 256));
    } else if (flag == "--variant") {
        o.variant = one_of(flag, value(), {"global", "split", "lockfree"});
    } else if (flag == "--fanout") {
        o.fanout = static_cast<int>(integer(2, 64));
        if ((o.fanout & (o.fanout - 1)) != 0) throw UsageError("--fanout is 2, 4, 8, 16, 32 or 64");
    } else if (flag == "--batch") {
        o.batch = static_cast<int>(integer(1, 65536));
    } else if (flag == "--capacity") {
        o.capacity = integer(1, 1L << 30);
    } else if (flag == "--steps") {
        o.steps = integer(1, 1L << 40);
    } else if (flag == "--seed") {
        o.seed = static_cast<std::uint64_t>(integer(0, 1L << 62));
    } else if (flag == "--update-interval") {
        o.update_interval = static_cast<int>(integer(1, 1 << 30));
    } else if (flag == "--priority-delay") {
        o.priority_delay = static_cast<int>(integer(0, 1 << 20));
    } else if (flag == "--replay-ratio") {
        o.replay_ratio = number(1e-3, 1e6);
    } else if (flag == "--csv") {
        o.csv = non_empty(flag, value(), "a path");
    } else if (flag == "--auto") {
        o.automatic = true;
    } else if (flag == "--eval-every") {
        o.eval_every = integer(1, 1L << 40);
    } else if (flag == "--eval-episodes") {
        o.eval_episodes = static_cast<int>(integer(1, 10000));
    } else if (flag == "--warmup") {
        o.warmup = integer(0, 1L << 40);
    } else if (flag == "--lr") {
        o.lr = number(1e-7, 1.0);
    } else if (flag == "--max-seconds") {
        o.max_seconds = number(0.01, 1e7);
    } else if (flag == "--progress-seconds") {
        o.progress_seconds = number(0.05, 1e5);
    } else if (flag == "--profile-seconds") {
        o.profile_seconds = number(0.05, 600);
    } else if (flag == "--max-threads") {
        o.max_threads = static_cast<int>(integer(2, 1024));
    } else if (flag == "--stop-when-solved") {
        o.stop_when_solved = true;
    } else if (flag == "--checkpoint") {
        o.checkpoint = non_empty(flag, value(), "a directory");
    } else if (flag == "--checkpoint-every") {
        o.checkpoint_every = integer(1, 1L << 40);
    } else if (flag == "--nstep") {
        o.nstep = static_cast<int>(integer(1, 1000));
    } else if (flag == "--resume") {
        o.resume = true;
    } else if (flag == "--processes") {
        o.processes = true;
    } else if (flag == "-h" || flag == "--help") {
        throw UsageError("");
    } else {
        throw UsageError("unknown flag '" + flag + "'");
    }
}

// The algorithm and the defaults that depend on the environment, where no flag set them
// (the trainer README's "Hyperparameters": chosen so that both tasks are solved within
// the targets on 2 cores).
inline void fill_defaults(Options &o) {
    const bool cartpole = o.env == "cartpole";
    if (o.algo.empty()) o.algo = cartpole ? "dqn" : "td3";
    if (cartpole && o.algo != "dqn") throw UsageError("CartPole has discrete actions: --algo dqn");
    if (!cartpole && o.algo != "td3") throw UsageError("Pendulum has continuous actions: --algo td3");
    if (o.batch == 0) o.batch = cartpole ? 64 : 128;
    if (o.steps == 0) o.steps = cartpole ? 60000 : 20000;
    if (o.replay_ratio == 0) o.replay_ratio = cartpole ? 16.0 : 128.0;
    if (o.update_interval == 0) o.update_interval = cartpole ? 16 : 1;
    if (o.warmup < 0) o.warmup = 1000;
    if (o.lr == 0) o.lr = 1e-3;
    if (o.eval_every == 0) o.eval_every = cartpole ? 2000 : 1000;  // a given one is >= 1
    if (o.eval_episodes == 0) o.eval_episodes = cartpole ? 20 : 10;
    if (o.variant.empty()) o.variant = o.processes ? "shared" : "split";
}

// The checks across flags; --checkpoint-every gets its default once it is known to be allowed.
inline void check(Options &o) {
    if (o.capacity < o.batch) throw UsageError("--capacity must be at least --batch");
    if (o.checkpoint.empty() && (o.resume || o.checkpoint_every != 0)) {
        throw UsageError("--resume and --checkpoint-every need --checkpoint DIR");
    }
    if (o.checkpoint_every == 0) o.checkpoint_every = 10000;
    if (o.nstep > 1 && o.automatic) throw UsageError("--auto profiles the one-step buffer: drop --nstep or --auto");
    if (o.processes) {
        // What the actor processes share is the one-step buffer, the step count and the policy.
        if (o.variant != "shared") {
            throw UsageError("--processes shares the lock-free buffer in shared memory: drop --variant");
        }
        if (o.nstep > 1) throw UsageError("--processes shares the one-step buffer: drop --nstep or --processes");
        if (o.automatic) throw UsageError("--auto profiles threads: drop --auto or --processes");
        if (!o.checkpoint.empty()) {
            throw UsageError("--processes has no checkpoints (actor processes do not park): drop --checkpoint");
        }
    }
}
}  // namespace detail

// Parses argv (without argv[0]): each flag in turn, then the defaults that depend on the
// environment, then the checks across flags, so that the result is final. Throws
// UsageError on anything it does not understand.
inline Options parse_options(const std::vector<std::string> &args) {
    Options o;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string &flag = args[i];
        detail::set_flag(o, flag, [&]() -> const std::string & {
            if (i + 1 >= args.size()) throw UsageError(flag + " needs a value");
            return args[++i];
        });
    }
    detail::fill_defaults(o);
    detail::check(o);
    return o;
}

}  // namespace trainer

#endif  // KARY_TRAINER_OPTIONS_HPP
