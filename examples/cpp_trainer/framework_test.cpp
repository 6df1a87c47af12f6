// Tests of the trainer's framework pieces that need no LibTorch: flags, the rate control,
// the actor processes of --processes, equation 5 and the native policy. Exit 0 when all pass.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "framework.hpp"

namespace {

int failures = 0;
#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            ++failures;                                                          \
        }                                                                        \
    } while (0)

trainer::Options parse(std::vector<std::string> a) { return trainer::parse_options(a); }

bool rejects(std::vector<std::string> a, const std::string &needle) {
    try {
        parse(a);
    } catch (const trainer::UsageError &e) {
        if (std::string(e.what()).find(needle) == std::string::npos) {
            std::fprintf(stderr, "message '%s' lacks '%s'\n", e.what(), needle.c_str());
            return false;
        }
        return true;
    }
    return false;
}

void flags() {
    trainer::Options o = parse({});
    CHECK(o.env == "cartpole" && o.algo == "dqn" && o.batch == 64 && o.actors == 1 && o.learners == 1);
    o = parse({"--env", "pendulum", "--actors", "3", "--learners", "2", "--variant", "lockfree", "--fanout", "16",
               "--batch", "32", "--capacity", "5000", "--steps", "777", "--seed", "9", "--update-interval", "4",
               "--priority-delay", "2", "--replay-ratio", "8", "--csv", "x.csv", "--auto"});
    CHECK(o.env == "pendulum" && o.algo == "td3" && o.actors == 3 && o.learners == 2 && o.variant == "lockfree");
    CHECK(o.fanout == 16 && o.batch == 32 && o.capacity == 5000 && o.steps == 777 && o.seed == 9);
    CHECK(o.update_interval == 4 && o.priority_delay == 2 && o.replay_ratio == 8 && o.csv == "x.csv" && o.automatic);
    CHECK(rejects({"--env", "mountaincar"}, "--env"));
    CHECK(rejects({"--algo", "td3"}, "discrete"));
    CHECK(rejects({"--env", "pendulum", "--algo", "dqn"}, "continuous"));
    CHECK(parse({}).variant == "split" && !parse({}).processes);
    CHECK(parse({"--processes"}).processes && parse({"--processes"}).variant == "shared");
    CHECK(rejects({"--processes", "--variant", "lockfree"}, "drop --variant"));
    CHECK(rejects({"--processes", "--nstep", "3"}, "--nstep"));
    CHECK(rejects({"--processes", "--auto"}, "--auto"));
    CHECK(rejects({"--processes", "--checkpoint", "/tmp/x"}, "--checkpoint"));
    CHECK(rejects({"--actors", "0"}, "--actors"));
    CHECK(rejects({"--actors", "two"}, "--actors"));
    CHECK(rejects({"--learners"}, "needs a value"));
    CHECK(rejects({"--fanout", "6"}, "--fanout"));
    CHECK(rejects({"--variant", "mutex"}, "--variant"));
    CHECK(rejects({"--replay-ratio", "nan"}, "--replay-ratio"));
    CHECK(rejects({"--batch", "64", "--capacity", "10"}, "--capacity"));
    CHECK(rejects({"--frobnicate"}, "unknown flag"));
    CHECK(rejects({"--resume"}, "need --checkpoint DIR"));
    CHECK(rejects({"--checkpoint-every", "100"}, "need --checkpoint DIR"));
    CHECK(rejects({"--checkpoint", "/tmp/x", "--checkpoint-every", "0"}, "--checkpoint-every"));
}

// A actors and L learners on the rate control: at every moment the samples granted stay
// within the slack of R x (steps - warm-up), and the run ends (no deadlock).
void rate_control(int actors, int learners, double ratio, long batch) {
    const long warmup = 100, total = 20000;
    const long slack = 2 * learners * batch;
    const auto allowed = [&](long steps) {
        return steps <= warmup ? 0L : static_cast<long>(std::floor(ratio * static_cast<double>(steps - warmup)));
    };
    trainer::RateControl rate(ratio, warmup, total, slack, batch);
    std::atomic<bool> bad{false};
    std::vector<std::thread> ts;
    for (int i = 0; i < actors; ++i) {
        ts.emplace_back([&] {
            while (rate.actor_step() == trainer::Step::Go) {
                // Granted never exceeds what the steps allow (read granted first: a step
                // taken between the two reads only raises what is allowed).
                const long g = rate.granted();
                if (g > allowed(rate.steps())) bad = true;
            }
        });
    }
    std::atomic<long> taken{0};
    for (int i = 0; i < learners; ++i) {
        ts.emplace_back([&] {
            while (rate.learner_take(batch)) taken += batch;
        });
    }
    for (auto &t : ts) t.join();
    CHECK(!bad);
    CHECK(rate.steps() == total);
    // At the end the learners have consumed what the ratio allows, within one batch each.
    CHECK(taken.load() <= allowed(total));
    CHECK(taken.load() > allowed(total) - learners * batch);
    CHECK(rate.granted() == taken.load());
    // And the actors never ran more than the slack ahead: checked through a run with a
    // learner that stops early (actors must then block, so stop() is what ends them).
    trainer::RateControl r2(ratio, warmup, total, slack, batch);
    std::thread a([&] {
        while (r2.actor_step() == trainer::Step::Go) {
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const long s = r2.steps();
    CHECK(s < total);
    CHECK(allowed(s) <= slack + static_cast<long>(ratio) + 1);
    r2.stop();
    a.join();
    // A range narrower than a learner's batch could deadlock: the crate's limiter refuses it.
    bool refused = false;
    try {
        trainer::RateControl narrow(ratio, warmup, total, batch / 2, batch);
    } catch (const kary_replay::Error &e) {
        refused = std::string(e.what()).find("deadlock") != std::string::npos;
    }
    CHECK(refused);
    // Counts resume: a run continues from a checkpoint's steps and granted samples.
    trainer::RateControl resumed(ratio, warmup, total, slack, batch, 1000, 0);
    CHECK(resumed.steps() == 1000 && resumed.granted() == 0);
    CHECK(resumed.learner_take(batch));
    CHECK(resumed.granted() == batch);
}

// A checkpoint's hold: every actor parks, no step is counted while they are parked, every
// step counted was taken, and release() lets them go on.
void hold_parks_actors() {
    trainer::RateControl rate = trainer::RateControl::unthrottled(1L << 40);
    std::atomic<long> taken{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < 3; ++i) {
        ts.emplace_back([&] {
            for (;;) {
                const trainer::Step step = rate.actor_step();
                if (step == trainer::Step::End) break;
                if (step == trainer::Step::Hold) {
                    rate.park();
                    continue;
                }
                taken += 1;
            }
        });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    rate.hold();
    while (rate.parked() < 3) std::this_thread::yield();
    const long steps = rate.steps();
    CHECK(steps == taken.load());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(rate.steps() == steps);
    rate.release();
    while (rate.steps() < steps + 100) std::this_thread::yield();
    rate.stop();
    for (auto &t : ts) t.join();
    CHECK(rate.parked() == 0);
}

void equation5() {
    // Actors: 1000 steps/s per thread; learners: 100 grad steps/s per thread; B/R = 4 env
    // steps per gradient step, so x_l learners need 400 x_l env steps/s.
    std::vector<double> fa, fl;
    for (int x = 1; x <= 7; ++x) {
        fa.push_back(1000.0 * x);
        fl.push_back(100.0 * x);
    }
    trainer::DseChoice c = trainer::solve_equation5(fa, fl, 4.0, 8);
    // Balanced rate min(1000 x_a, 400 x_l) with x_a + x_l <= 8: x_a = 2, x_l = 5 gives 2000.
    CHECK(c.actors == 2 && c.learners == 5);
    CHECK(c.balanced == 2000.0);
    // M = 2: the only choice.
    c = trainer::solve_equation5(fa, fl, 4.0, 2);
    CHECK(c.actors == 1 && c.learners == 1);
    // Learners that do not scale: one is enough, the rest go to actors if they help.
    std::vector<double> flat(7, 100.0);
    c = trainer::solve_equation5(fa, flat, 40.0, 8);
    CHECK(c.learners == 1 && c.actors == 4);
    bool threw = false;
    try {
        trainer::solve_equation5(fa, fl, 4.0, 1);
    } catch (const std::invalid_argument &) {
        threw = true;
    }
    CHECK(threw);
}

void mlp() {
    trainer::Mlp m;
    m.sizes = {2, 2, 1};
    m.w = {{1, -1, 0.5f, 0.5f}, {2, 3}};
    m.b = {{0, -10}, {0.25f}};
    const float in[2] = {3, 1};
    float out[1];
    m.forward(in, out);
    // Hidden: relu(3 - 1) = 2, relu(1.5 + 0.5 - 10) = 0; output 2*2 + 3*0 + 0.25.
    CHECK(out[0] == 4.25f);
    m.tanh_output = true;
    m.output_scale = 2.0f;
    m.forward(in, out);
    CHECK(out[0] == 2.0f * std::tanh(4.25f));
}

// A policy whose every weight is `x` (layers 2-3-1).
trainer::Snapshot snapshot_of(float x, long round) {
    trainer::Snapshot s;
    s.policy.sizes = {2, 3, 1};
    s.policy.w = {std::vector<float>(6, x), std::vector<float>(3, x)};
    s.policy.b = {std::vector<float>(3, x), std::vector<float>(1, x)};
    s.round = round;
    return s;
}

// Whether every weight of `s` is `x`.
bool all_weights(const trainer::Snapshot &s, float x) {
    for (std::size_t l = 0; l < s.policy.w.size(); ++l) {
        for (float v : s.policy.w[l]) {
            if (v != x) return false;
        }
        for (float v : s.policy.b[l]) {
            if (v != x) return false;
        }
    }
    return true;
}

// --processes' pieces across real processes: forked actors that take steps from the shared
// count until the trainer stops them, read the policy the trainer publishes after the fork
// (never a torn one), and send their episodes back; a failing actor process is reported.
void processes() {
    trainer::RateControl rate = trainer::RateControl::unthrottled(1L << 40);
    for (int i = 0; i < 5; ++i) CHECK(rate.actor_step() == trainer::Step::Go);  // counted before sharing
    rate.share_counts(trainer::shared_memory(sizeof(trainer::RateControl::Counts)));
    CHECK(rate.steps() == 5);
    trainer::SnapshotBoard board;
    board.publish(std::make_shared<trainer::Snapshot>(snapshot_of(1.0f, 1)));
    const std::size_t floats = trainer::SharedPolicy::floats_of(board.get()->policy);
    CHECK(floats == 13);
    board.share(trainer::SharedPolicy::make(trainer::shared_memory(trainer::SharedPolicy::bytes_for(floats)), floats));
    trainer::Stats stats;
    std::atomic<int> left{3};
    // Each actor: steps until stopped, checking each policy it reads is whole and never older
    // than the last; an episode per 1000 steps; it fails (throws) if it saw a torn policy or
    // does not read round 3, the trainer's last, once stopped.
    {
        trainer::ActorProcesses procs(3, stats, left, [&](int id) {
            long last_round = 0, steps = 0;
            while (rate.actor_step() == trainer::Step::Go) {
                auto snap = board.get();
                const float x = static_cast<float>(snap->round);
                if (!all_weights(*snap, x) || snap->round < last_round) throw std::runtime_error("a torn policy");
                last_round = snap->round;
                if (++steps % 1000 == 0) stats.episode_done(static_cast<double>(id));
            }
            // Stopped after the last publish: it is what this process reads now.
            auto last = board.get();
            if (last->round != 3 || !all_weights(*last, 3.0f)) {
                throw std::runtime_error("reads round " + std::to_string(last->round) + " after round 3");
            }
        });
        CHECK(procs.pids().size() == 3);
        // The actors' steps, seen here: 20000 more (at most 30 s).
        auto more_steps = [&] {
            const long want = rate.steps() + 20000;
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
            while (rate.steps() < want && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
            CHECK(rate.steps() >= want);
        };
        more_steps();
        board.publish(std::make_shared<trainer::Snapshot>(snapshot_of(2.0f, 2)));
        more_steps();
        board.publish(std::make_shared<trainer::Snapshot>(snapshot_of(3.0f, 3)));
        more_steps();
        rate.stop();
        procs.join();
    }
    CHECK(left.load() == 0);
    CHECK(stats.failure().empty());
    if (!stats.failure().empty()) std::fprintf(stderr, "%s\n", stats.failure().c_str());
    // Every step the actors took is counted once; every 1000th of each gave an episode.
    CHECK(rate.steps() >= 60005 && stats.episodes.load() >= 57);
    CHECK(all_weights(*board.get(), 3.0f));

    // An actor process that fails is reported, and one killed by a signal too.
    trainer::Stats failing;
    std::atomic<int> left2{2};
    {
        trainer::ActorProcesses procs(2, failing, left2, [](int id) {
            if (id == 0) throw std::runtime_error("a deliberate failure of the test");
            raise(SIGKILL);
        });
        procs.join();
    }
    CHECK(left2.load() == 0);
    CHECK(failing.failure().find("actor process") != std::string::npos);
    CHECK(failing.failure().find("exited with status 1") != std::string::npos ||
          failing.failure().find("killed by signal 9") != std::string::npos);
}

}  // namespace

int main() {
    flags();
    rate_control(1, 1, 4.0, 32);
    rate_control(3, 2, 16.0, 64);
    rate_control(2, 4, 0.5, 8);
    hold_parks_actors();
    processes();
    equation5();
    mlp();
    if (failures) {
        std::fprintf(stderr, "framework_test: %d checks FAILED\n", failures);
        return 1;
    }
    std::printf("framework_test: flags, rate control, actor processes, equation 5 and the native policy pass\n");
    return 0;
}
