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
//   --processes          the actors as forked processes instead of threads, on a buffer in
//                        shared memory (kr::SharedBuffer) whose own rate limit holds the
//                        ratio across processes (processes.hpp);
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


// What the monitor, the checkpoints and the report read of a running trainer.
struct Run {
    const Options &o;
    kr::Buffer &buffer;
    kr::SequenceBuffer *seq;  // --nstep N > 1: the buffer in use instead
    ParamServer &server;
    RateControl &rate;
    Stats &stats;
    RngBoard &rngs;
    SnapshotBoard &board;
    std::atomic<int> &actors_left;
    Clock::time_point t0 = Clock::now();

    // Items the learners sample from now: transitions, or (--nstep) n-step windows.
    std::size_t replay_len() const { return seq ? seq->len() : buffer.len(); }

    Counters counters(int evaluations) const {
        Counters c;
        c.steps = rate.steps();
        c.granted = rate.granted();
        c.episodes = stats.episodes.load();
        c.priority_updates = stats.priority_updates.load();
        c.stale_updates = stats.stale_updates.load();
        c.evaluations = static_cast<std::uint64_t>(evaluations);
        return c;
    }

    // Saves a checkpoint as the run is (the caller makes it quiet) and says where.
    void save(int evaluations) const {
        std::optional<std::string> dir = save_checkpoint(o, buffer, seq, server, counters(evaluations), rngs);
        if (!dir) return;
        std::printf("checkpoint at %ld env steps: %s (buffer len %zu)\n", rate.steps(), dir->c_str(), replay_len());
        std::fflush(stdout);
    }

    // Holds the learners at a round's end and the actors at their next step, saves, and lets
    // them go on (ckpt.hpp). False, with the failure recorded in stats, when it failed.
    bool checkpoint_now(int evaluations) const {
        server.hold();
        while (!server.quiet() && stats.failure().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        rate.hold();
        while (rate.parked() < actors_left.load() && stats.failure().empty()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        std::string error = stats.failure();
        if (error.empty()) {
            try {
                save(evaluations);
            } catch (const std::exception &e) {
                error = std::string("checkpoint: ") + e.what();
            }
        }
        rate.release();
        server.release();
        if (!error.empty()) stats.fail(error);
        return error.empty();
    }
};

// The main thread while the actors and learners run: greedy evaluations every --eval-every
// env steps, checkpoints every --checkpoint-every, a progress line and CSV row every
// --progress-seconds; and what the evaluations found.
struct Monitor {
    const Run &run;
    std::ofstream &csv;
    int eval_count;
    const double threshold = solve_threshold(run.o);
    std::optional<std::pair<long, double>> solved;  // env steps, wall s
    int evals_after = 0, evals_after_ok = 0;
    double last_eval = std::nan("");
    long next_eval = (run.rate.steps() / run.o.eval_every + 1) * run.o.eval_every;
    long next_checkpoint = (run.rate.steps() / run.o.checkpoint_every + 1) * run.o.checkpoint_every;
    double next_progress = run.o.progress_seconds;
    long last_steps = 0, last_grads = 0;  // at the last progress line
    double last_t = 0;

    // Until the actors are done, a thread fails, --max-seconds passes or (with
    // --stop-when-solved) an evaluation solves the task.
    void watch() {
        const Options &o = run.o;
        for (;;) {
            const bool done = run.actors_left.load() == 0 && run.rate.steps() >= o.steps;
            const double t = seconds_since(run.t0);
            const long steps = run.rate.steps();
            if ((steps >= next_eval || (done && eval_count == 0)) && evaluate(steps)) return;
            if (!o.checkpoint.empty() && steps >= next_checkpoint && !done) {
                if (!run.checkpoint_now(eval_count)) return;
                while (next_checkpoint <= run.rate.steps()) next_checkpoint += o.checkpoint_every;
            }
            if (t >= next_progress || done) progress(t, steps);
            if (done || !run.stats.failure().empty()) return;
            if (o.max_seconds > 0 && t >= o.max_seconds) {
                std::printf("stopping: --max-seconds %.1f reached\n", o.max_seconds);
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }

    // A greedy evaluation of the latest policy; true when the run is to stop
    // (--stop-when-solved and solved).
    bool evaluate(long steps) {
        const Options &o = run.o;
        auto snap = run.board.get();
        const double ret = trainer::evaluate(o, snap->policy, o.eval_episodes, static_cast<std::uint64_t>(eval_count));
        ++eval_count;
        last_eval = ret;
        const double te = seconds_since(run.t0);
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
        return solved && o.stop_when_solved;
    }

    // The progress line and its CSV row: rates since the last one.
    void progress(double t, long steps) {
        const long grads = run.server.rounds();
        const double sps = (steps - last_steps) / std::max(1e-9, t - last_t);
        const double gps = (grads - last_grads) / std::max(1e-9, t - last_t);
        std::printf("[%7.1fs] env steps %ld (%.0f/s)  grad steps %ld (%.0f/s)  buffer %zu/%ld  episodes %ld  "
                    "return(100) %.1f  priorities %ld (stale %ld)\n",
                    t, steps, sps, grads, gps, run.replay_len(), run.o.capacity, run.stats.episodes.load(),
                    run.stats.mean_return(), run.stats.priority_updates.load(), run.stats.stale_updates.load());
        std::fflush(stdout);
        row("progress", t, std::nan(""), sps, gps);
        last_steps = steps;
        last_grads = grads;
        last_t = t;
        while (next_progress <= t) next_progress += run.o.progress_seconds;
    }

    void row(const char *kind, double t, double eval, double sps, double gps) {
        if (!csv.is_open()) return;
        double loss;
        {
            std::lock_guard<std::mutex> lock(run.stats.mutex);
            loss = run.stats.last_loss;
        }
        auto num = [](double v) { return std::isnan(v) ? std::string() : std::to_string(v); };
        csv << kind << ',' << t << ',' << run.rate.steps() << ',' << run.server.rounds() << ','
            << run.stats.episodes.load() << ',' << run.replay_len() << ',' << num(run.stats.mean_return()) << ','
            << num(eval) << ',' << num(sps) << ',' << num(gps) << ',' << loss << ','
            << run.stats.priority_updates.load() << ',' << run.stats.stale_updates.load() << '\n';
    }

    // The totals, whether and when the run solved the task, and the one machine-readable line
    // that bench/trainer_results.py reads.
    void report() const {
        const Options &o = run.o;
        const double wall = seconds_since(run.t0);
        std::printf("done: %ld env steps, %ld gradient steps, %ld episodes in %.1f s; %ld priority updates applied, "
                    "%ld stale; %ld sampling retries\n",
                    run.rate.steps(), run.server.rounds(), run.stats.episodes.load(), wall,
                    run.stats.priority_updates.load(), run.stats.stale_updates.load(),
                    run.stats.contention_retries.load());
        if (solved) {
            std::printf("solved: first greedy evaluation >= %g at %ld env steps, %.1f s; later evaluations >= "
                        "threshold: %d of %d\n",
                        threshold, solved->first, solved->second, evals_after_ok, evals_after);
        } else {
            std::printf("not solved: no greedy evaluation reached %g (last %.1f)\n", threshold, last_eval);
        }
        std::printf("RESULT trainer=cpp env=%s algo=%s seed=%llu actors=%d learners=%d variant=%s solved=%d "
                    "solved_steps=%ld solved_s=%.2f later_ok=%d later=%d wall_s=%.2f env_steps=%ld grad_steps=%ld "
                    "priority_updates=%ld nstep=%d\n",
                    o.env.c_str(), o.algo.c_str(), static_cast<unsigned long long>(o.seed), o.actors, o.learners,
                    o.variant.c_str(), solved ? 1 : 0, solved ? solved->first : -1L, solved ? solved->second : -1.0,
                    evals_after_ok, evals_after, wall, run.rate.steps(), run.server.rounds(),
                    run.stats.priority_updates.load(), o.nstep);
    }
};

// The counters a resumed run takes back from its checkpoint (the buffer, the networks and
// the generators came back with find_checkpoint; the rate control's counts were given to
// its constructor); returns the evaluations made so far.
inline int restore(const Resume &r, const Run &run) {
    // torch's generator (TD3's target noise) is reseeded; the learners reseed theirs.
    torch::manual_seed(run.o.seed + static_cast<std::uint64_t>(r.counters.steps));
    run.stats.episodes.store(r.counters.episodes);
    run.stats.priority_updates.store(r.counters.priority_updates);
    run.stats.stale_updates.store(r.counters.stale_updates);
    // With --nstep: the windows sampleable and the steps written (what kary-replay-ckpt
    // inspect reports of a sequence checkpoint).
    const std::size_t len = run.seq ? run.seq->len() : run.buffer.len();
    const std::uint64_t inserted = run.seq ? run.seq->steps_written() : run.buffer.inserted();
    std::printf("resumed from %s at env step %ld: buffer len %zu, inserted %llu, round %ld\n", r.dir.c_str(),
                r.counters.steps, len, static_cast<unsigned long long>(inserted), run.server.rounds());
    return static_cast<int>(r.counters.evaluations);
}

// The CSV of --csv with its header written (not open without --csv); false when it cannot
// be written.
inline bool open_csv(const std::string &path, std::ofstream &csv) {
    if (path.empty()) return true;
    csv.open(path);
    if (!csv) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        return false;
    }
    csv << "kind,wall_s,env_steps,grad_steps,episodes,buffer_len,train_return_100,eval_return,env_steps_per_s,"
           "grad_steps_per_s,loss,priority_updates,stale_updates\n";
    return true;
}

inline int train(Options o) {
    const Hyper h = hyper_for(o);
    const Dims d = dims_for(o);
    if (o.automatic) choose_threads(o, h, d);
    torch::manual_seed(o.seed);
    trainer::SnapshotBoard board;
    ParamServer server(o, h, make_agent(o, h), o.learners, board);
    RngBoard rngs(o.seed, o.actors);
    std::optional<kr::Buffer> loaded;
    std::optional<kr::SequenceBuffer> seq;
    std::optional<Resume> resumed;
    if (o.resume) {
        resumed = find_checkpoint(o, loaded, seq, server, rngs);
        if (!resumed) std::printf("--resume: no checkpoint in %s: a new run\n", o.checkpoint.c_str());
    }
    if (loaded && !fits_run(*loaded, d, o.capacity)) {
        std::fprintf(stderr, "kary_trainer: error: checkpoint %s has another schema or capacity than this run\n",
                     resumed->dir.c_str());
        return 1;
    }
    // With --nstep N > 1 the steps go to lanes of a sequence buffer (the one-step buffer is
    // then made at its smallest and left empty).
    if (seq && !fits_lanes(*seq, o, d)) {
        std::fprintf(stderr,
                     "kary_trainer: error: checkpoint %s has other lanes than this run (one per actor, --capacity, "
                     "--nstep)\n",
                     resumed->dir.c_str());
        return 1;
    }
    // Slack: two rounds of every learner, or 2 x 16 transitions per actor, whichever is more.
    const long slack = std::max<long>(2L * o.learners * o.batch,
                                      static_cast<long>(std::ceil(2.0 * 16 * o.actors * o.replay_ratio)));
    // --processes: the buffer in shared memory holds the replay ratio for every process.
    kr::Buffer buffer = loaded        ? std::move(*loaded)
                        : o.processes ? kr::Buffer(make_shared_buffer(o, h, d, slack))
                                      : make_buffer(o, h, d, o.nstep > 1 ? o.batch : o.capacity);
    if (o.nstep > 1 && !seq) seq.emplace(make_sequence(o, h, d));
    const long steps0 = resumed ? resumed->counters.steps : 0, granted0 = resumed ? resumed->counters.granted : 0;
    trainer::RateControl rate = o.processes
                                    ? trainer::RateControl::unthrottled(o.steps)
                                    : trainer::RateControl(o.replay_ratio, o.warmup, o.steps, slack, o.batch, steps0,
                                                           granted0);
    trainer::Stats stats;
    std::atomic<int> actors_left{o.actors};
    Run run{o, buffer, seq ? &*seq : nullptr, server, rate, stats, rngs, board, actors_left};
    const int eval_count = resumed ? restore(*resumed, run) : 0;
    Shared s{o, h, d, buffer, seq ? &*seq : nullptr, rate, board, stats, rngs};

    std::printf("kary_trainer: %s %s, %d actors + %d learners, buffer %s K=%d capacity %ld, batch %d, replay ratio "
                "%g, %ld env steps, seed %llu, n-step %d\n",
                o.env.c_str(), o.algo.c_str(), o.actors, o.learners, seq ? "sequence (lanes)" : o.variant.c_str(),
                o.fanout, o.capacity, o.batch, o.replay_ratio, o.steps, static_cast<unsigned long long>(o.seed),
                o.nstep);
    std::fflush(stdout);
    std::ofstream csv;
    if (!open_csv(o.csv, csv)) return 1;

    auto actor = [&](int i) {
        if (o.env == "cartpole") {
            run_actor<trainer::CartPole>(s, i, actors_left);
        } else {
            run_actor<trainer::Pendulum>(s, i, actors_left);
        }
    };
    run.t0 = Clock::now();
    std::optional<ActorProcesses> processes;
    if (o.processes) {
        // The step count and the policy in memory the actor processes share; forked before
        // any learner thread runs.
        rate.share_counts(shared_memory(sizeof(RateControl::Counts)));
        const std::size_t floats = SharedPolicy::floats_of(board.get()->policy);
        board.share(SharedPolicy::make(shared_memory(SharedPolicy::bytes_for(floats)), floats));
        processes.emplace(o.actors, stats, actors_left, actor);
    }
    std::vector<std::thread> threads;
    for (int i = 0; i < o.learners; ++i) {
        threads.emplace_back([&, i] { run_learner(s, i, server, o.steps); });
    }
    for (int i = 0; i < (o.processes ? 0 : o.actors); ++i) threads.emplace_back([&, i] { actor(i); });
    Monitor monitor{run, csv, eval_count};
    monitor.watch();
    rate.stop();
    // Wakes what waits on the shared buffer's rate limit, in every process.
    if (o.processes) buffer.close();
    server.stop();
    for (auto &th : threads) th.join();
    if (processes) processes->join();
    if (!stats.failure().empty()) {
        std::fprintf(stderr, "kary_trainer: error: %s\n", stats.failure().c_str());
        return 1;
    }
    // Every thread has stopped: the state is quiet as it is.
    if (!o.checkpoint.empty()) run.save(monitor.eval_count);
    monitor.report();
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
