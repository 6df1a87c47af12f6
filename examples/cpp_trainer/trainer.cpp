// kary_trainer: the reference trainer. Parallel C++ LibTorch actors and learners on the
// kary-replay buffer through its C ABI (kary_replay.hpp), after the paper's framework:
//
//   actors (A threads)   own environment, own copy of the policy (refreshed from the
//                        parameter server every T env steps), exploration, transitions
//                        pushed through a staged kr_writer with the default priority;
//   learners (L threads) sample B items with importance weights straight into tensor
//                        memory (torch::from_blob over the sample outputs), compute the
//                        loss and gradients on their replica of the networks, and write
//                        |TD error| + eps back by key (optionally D batches late);
//   parameter server     the last learner of each round averages the L gradients, applies
//                        the optimizer step, updates the targets and publishes the policy;
//   rate control         holds the replay ratio (gradient samples per transition);
//   monitor (main)       progress line and CSV row every few seconds, greedy evaluation
//                        every E env steps on its own environments;
//   checkpoints          with --checkpoint DIR, every N env steps and at the end (ckpt.hpp);
//                        --resume continues from the newest.
//
// DQN (double Q, target network, Huber loss) for CartPole-v1, TD3 for Pendulum-v1, both with
// prioritized replay. --auto profiles actors and learners and picks A and L by the paper's
// equation 5. See examples/cpp_trainer/README.md for the flags and results.
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>


#include "actor.hpp"
#include "ckpt.hpp"
#include "dse.hpp"
#include "envs.hpp"
#include "framework.hpp"
#include "kary_replay.hpp"
#include "learner.hpp"
#include "monitor.hpp"
#include "nets.hpp"
#include "param_server.hpp"
#include "replay.hpp"

namespace trainer {


inline int train(Options o) {
    const Hyper h = hyper_for(o);
    const Dims d = dims_for(o);
    if (o.automatic) choose_threads(o, h, d);
    torch::manual_seed(o.seed);
    trainer::SnapshotBoard board;
    ParamServer server(o, h, make_agent(o, h), o.learners, board);
    RngBoard rngs(o.seed, o.actors);
    std::optional<kr::Buffer> loaded;
    std::optional<Resume> resumed;
    if (o.resume) {
        resumed = find_checkpoint(o, loaded, server, rngs);
        if (!resumed) std::printf("--resume: no checkpoint in %s: a new run\n", o.checkpoint.c_str());
    }
    if (loaded && !fits_run(*loaded, d, o.capacity)) {
        std::fprintf(stderr, "kary_trainer: error: checkpoint %s has another schema or capacity than this run\n",
                     resumed->dir.c_str());
        return 1;
    }
    kr::Buffer buffer = loaded ? std::move(*loaded) : make_buffer(o, h, d, o.capacity);
    // Slack: two rounds of every learner, or 2 x 16 transitions per actor, whichever is more.
    const long slack = std::max<long>(2L * o.learners * o.batch,
                                      static_cast<long>(std::ceil(2.0 * 16 * o.actors * o.replay_ratio)));
    trainer::RateControl rate(o.replay_ratio, o.warmup, o.steps, slack);
    trainer::Stats stats;
    int eval_count = 0;
    if (resumed) {
        // torch's generator (TD3's target noise) is reseeded; the learners reseed theirs.
        torch::manual_seed(o.seed + static_cast<std::uint64_t>(resumed->counters.steps));
        rate.restore(resumed->counters.steps, resumed->counters.granted);
        stats.episodes.store(resumed->counters.episodes);
        stats.priority_updates.store(resumed->counters.priority_updates);
        stats.stale_updates.store(resumed->counters.stale_updates);
        eval_count = static_cast<int>(resumed->counters.evaluations);
        std::printf("resumed from %s at env step %ld: buffer len %zu, inserted %llu, round %ld\n",
                    resumed->dir.c_str(), resumed->counters.steps, buffer.len(),
                    static_cast<unsigned long long>(buffer.inserted()), server.rounds());
    }
    Shared s{o, h, d, buffer, rate, board, stats, rngs};

    std::printf("kary_trainer: %s %s, %d actors + %d learners, buffer %s K=%d capacity %ld, batch %d, replay ratio "
                "%g, %ld env steps, seed %llu\n",
                o.env.c_str(), o.algo.c_str(), o.actors, o.learners, o.variant.c_str(), o.fanout, o.capacity, o.batch,
                o.replay_ratio, o.steps, static_cast<unsigned long long>(o.seed));
    std::fflush(stdout);

    std::ofstream csv;
    if (!o.csv.empty()) {
        csv.open(o.csv);
        if (!csv) {
            std::fprintf(stderr, "cannot write %s\n", o.csv.c_str());
            return 1;
        }
        csv << "kind,wall_s,env_steps,grad_steps,episodes,buffer_len,train_return_100,eval_return,env_steps_per_s,"
               "grad_steps_per_s,loss,priority_updates,stale_updates\n";
    }
    auto t0 = Clock::now();
    std::atomic<int> actors_left{o.actors};
    std::vector<std::thread> threads;
    for (int i = 0; i < o.learners; ++i) {
        threads.emplace_back([&, i] { run_learner(s, i, server, o.steps); });
    }
    for (int i = 0; i < o.actors; ++i) {
        threads.emplace_back([&, i] {
            if (o.env == "cartpole") {
                run_actor<trainer::CartPole>(s, i, actors_left);
            } else {
                run_actor<trainer::Pendulum>(s, i, actors_left);
            }
        });
    }

    auto counters = [&] {
        Counters c;
        c.steps = rate.steps();
        c.granted = rate.granted();
        c.episodes = stats.episodes.load();
        c.priority_updates = stats.priority_updates.load();
        c.stale_updates = stats.stale_updates.load();
        c.evaluations = static_cast<std::uint64_t>(eval_count);
        return c;
    };
    auto saved = [&](const std::optional<std::string> &dir) {
        if (!dir) return;
        std::printf("checkpoint at %ld env steps: %s (buffer len %zu)\n", rate.steps(), dir->c_str(), buffer.len());
        std::fflush(stdout);
    };
    // Holds the learners at a round's end and the actors at their next step, saves, and
    // lets them go on (ckpt.hpp).
    auto checkpoint_now = [&] {
        server.hold();
        while (!server.quiet() && stats.failure().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        rate.hold();
        while (rate.parked() < actors_left.load() && stats.failure().empty()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        std::optional<std::string> dir;
        std::string error = stats.failure();
        if (error.empty()) {
            try {
                dir = save_checkpoint(o, buffer, server, counters(), rngs);
            } catch (const std::exception &e) {
                error = std::string("checkpoint: ") + e.what();
            }
        }
        rate.release();
        server.release();
        if (!error.empty()) {
            stats.fail(error);
            return false;
        }
        saved(dir);
        return true;
    };

    const double threshold = solve_threshold(o);
    const long first = rate.steps();
    long next_eval = (first / o.eval_every + 1) * o.eval_every;
    long next_checkpoint = (first / o.checkpoint_every + 1) * o.checkpoint_every;
    double next_progress = o.progress_seconds;
    long last_steps = 0, last_grads = 0;
    double last_t = 0;
    std::optional<std::pair<long, double>> solved;  // env steps, wall s
    int evals_after = 0, evals_after_ok = 0;
    double last_eval = std::nan("");
    auto row = [&](const char *kind, double t, double eval, double sps, double gps) {
        if (!csv.is_open()) return;
        double loss;
        {
            std::lock_guard<std::mutex> lock(stats.mutex);
            loss = stats.last_loss;
        }
        auto num = [](double v) { return std::isnan(v) ? std::string() : std::to_string(v); };
        csv << kind << ',' << t << ',' << rate.steps() << ',' << server.rounds() << ',' << stats.episodes.load() << ','
            << buffer.len() << ',' << num(stats.mean_return()) << ',' << num(eval) << ',' << num(sps) << ','
            << num(gps) << ',' << loss << ',' << stats.priority_updates.load() << ',' << stats.stale_updates.load()
            << '\n';
    };
    for (;;) {
        const bool done = actors_left.load() == 0 && rate.steps() >= o.steps;
        const double t = seconds_since(t0);
        const long steps = rate.steps();
        if (steps >= next_eval || (done && eval_count == 0)) {
            auto snap = board.get();
            const double ret = evaluate(o, snap->policy, o.eval_episodes, static_cast<std::uint64_t>(eval_count));
            ++eval_count;
            last_eval = ret;
            const double te = seconds_since(t0);
            const bool ok = ret >= threshold;
            if (solved) {
                ++evals_after;
                evals_after_ok += ok;
            } else if (ok) {
                solved = {steps, te};
            }
            std::printf("[%7.1fs] eval at %ld env steps (round %ld): mean greedy return %.1f over %d episodes%s\n", te,
                        steps, snap->round, ret, o.eval_episodes,
                        ok ? (evals_after == 0 ? "  SOLVED" : "  (>= threshold)") : "");
            std::fflush(stdout);
            row("eval", te, ret, std::nan(""), std::nan(""));
            while (next_eval <= steps) next_eval += o.eval_every;
            if (solved && o.stop_when_solved) break;
        }
        if (!o.checkpoint.empty() && steps >= next_checkpoint && !done) {
            if (!checkpoint_now()) break;
            while (next_checkpoint <= rate.steps()) next_checkpoint += o.checkpoint_every;
        }
        if (t >= next_progress || done) {
            const long grads = server.rounds();
            const double sps = (steps - last_steps) / std::max(1e-9, t - last_t);
            const double gps = (grads - last_grads) / std::max(1e-9, t - last_t);
            const double mr = stats.mean_return();
            std::printf("[%7.1fs] env steps %ld (%.0f/s)  grad steps %ld (%.0f/s)  buffer %zu/%ld  episodes %ld  "
                        "return(100) %.1f  priorities %ld (stale %ld)\n",
                        t, steps, sps, grads, gps, buffer.len(), o.capacity, stats.episodes.load(), mr,
                        stats.priority_updates.load(), stats.stale_updates.load());
            std::fflush(stdout);
            row("progress", t, std::nan(""), sps, gps);
            last_steps = steps;
            last_grads = grads;
            last_t = t;
            while (next_progress <= t) next_progress += o.progress_seconds;
        }
        if (done) break;
        if (!stats.failure().empty()) break;
        if (o.max_seconds > 0 && t >= o.max_seconds) {
            std::printf("stopping: --max-seconds %.1f reached\n", o.max_seconds);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    rate.stop();
    server.stop();
    for (auto &th : threads) th.join();
    if (!stats.failure().empty()) {
        std::fprintf(stderr, "kary_trainer: error: %s\n", stats.failure().c_str());
        return 1;
    }
    if (!o.checkpoint.empty()) {
        // Every thread has stopped: the state is quiet as it is.
        saved(save_checkpoint(o, buffer, server, counters(), rngs));
    }
    const double wall = seconds_since(t0);
    std::printf("done: %ld env steps, %ld gradient steps, %ld episodes in %.1f s; %ld priority updates applied, %ld "
                "stale; %ld sampling retries\n",
                rate.steps(), server.rounds(), stats.episodes.load(), wall, stats.priority_updates.load(),
                stats.stale_updates.load(), stats.contention_retries.load());
    if (solved) {
        std::printf("solved: first greedy evaluation >= %g at %ld env steps, %.1f s; later evaluations >= "
                    "threshold: %d of %d\n",
                    threshold, solved->first, solved->second, evals_after_ok, evals_after);
    } else {
        std::printf("not solved: no greedy evaluation reached %g (last %.1f)\n", threshold, last_eval);
    }
    // One machine-readable line for bench/trainer_results.py.
    std::printf("RESULT trainer=cpp env=%s algo=%s seed=%llu actors=%d learners=%d variant=%s solved=%d "
                "solved_steps=%ld solved_s=%.2f later_ok=%d later=%d wall_s=%.2f env_steps=%ld grad_steps=%ld "
                "priority_updates=%ld\n",
                o.env.c_str(), o.algo.c_str(), static_cast<unsigned long long>(o.seed), o.actors, o.learners,
                o.variant.c_str(), solved ? 1 : 0, solved ? solved->first : -1L, solved ? solved->second : -1.0,
                evals_after_ok, evals_after, wall, rate.steps(), server.rounds(), stats.priority_updates.load());
    return 0;
}

}  // namespace trainer

int main(int argc, char **argv) {
    trainer::Options o;
    try {
        o = trainer::parse_options(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const trainer::UsageError &e) {
        if (e.what()[0] != '\0') std::fprintf(stderr, "kary_trainer: %s\n", e.what());
        std::fprintf(stderr, "%s\n", trainer::usage());
        return e.what()[0] != '\0' ? 2 : 0;
    }
    // One intra-op thread per actor or learner thread (TOOLCHAIN.md).
    torch::set_num_threads(1);
    at::set_num_interop_threads(1);
    try {
        return trainer::train(o);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "kary_trainer: error: %s\n", e.what());
        return 1;
    }
}
