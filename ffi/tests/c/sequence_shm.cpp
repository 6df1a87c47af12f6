// A sequence buffer shared by processes through the C++ wrapper (kr::SharedSequenceBuffer):
// a forked actor process attaches by name and writes a lane through kr::LaneWriter while the
// parent samples windows, every window's rows whole; an actor killed (SIGKILL) mid-episode
// is recovered and its lane takes a new writer; the handle used as a kr::SequenceBuffer;
// each error (KR_E_SHARED, KR_E_INVALID_ARGUMENT) thrown as kr::Error. `quick`: no fork
// (for valgrind).
#include "kary_replay.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace kr = kary_replay;

namespace {

int failures = 0;

void check(bool ok, const std::string &what) {
    if (!ok && failures++ < 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

kr_status status_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const kr::Error &e) {
        return e.status();
    }
    return KR_OK;
}

constexpr std::size_t W = 4, B = 32;

kr::SequenceOptions options() {
    kr::SequenceOptions o;
    o.config.lanes = 2;
    o.config.steps_per_lane = 64;
    o.config.window = W;
    o.config.period = 2;
    o.config.alpha = 1.0;
    return o;
}

std::vector<kr::Column> schema() { return {kr::column<float>("obs", 2), kr::column<float>("reward", {})}; }

// Push `steps` steps into `lane` (lane number `n`): obs = (v, -v), v = 1000 n + its step.
void write(kr::LaneWriter &lane, std::size_t n, int steps, int episode) {
    for (int t = 0; t < steps; ++t) {
        float v = static_cast<float>(1000 * n + lane.position()), obs[2] = {v, -v}, reward[1] = {1.0f};
        lane.push({obs, reward});
        if ((t + 1) % episode == 0) lane.end_episode({}, true);
    }
}

// Sample B windows: consecutive steps of their lane, whole. Returns how many (0: none yet).
std::size_t whole_windows(const kr::SequenceBuffer &seq, kr::Rng &rng) {
    std::vector<float> obs(B * W * 2), rewards(B * W);
    std::vector<kr_key> keys(B);
    std::vector<std::uint64_t> lengths(B);
    void *cols[2] = {obs.data(), rewards.data()};
    kr_seq_sample_out out{};
    out.columns = cols;
    out.keys = keys.data();
    out.lengths = lengths.data();
    kr_status s = status_of([&] { seq.sample_into(rng, B, 0.4, out); });
    if (s == KR_E_EMPTY || s == KR_E_ZERO_TOTAL_PRIORITY) return 0;
    check(s == KR_OK, "sample");
    std::size_t whole = 0;
    for (std::size_t b = 0; b < B; ++b) {
        auto [lane, start] = seq.window_of(keys[b]);
        bool ok = true;
        for (std::uint64_t i = 0; i < lengths[b]; ++i) {
            float v = obs[(b * W + i) * 2];
            ok = ok && v == static_cast<float>(1000 * lane + start + i) && obs[(b * W + i) * 2 + 1] == -v;
        }
        whole += ok;
    }
    return whole;
}

int wait_child(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

[[noreturn]] void actor(const std::string &name, bool forever) {
    try {
        kr::SharedSequenceBuffer seq = kr::SharedSequenceBuffer::attach(name);
        kr::LaneWriter lane(seq, 1);
        do {
            write(lane, 1, 300, 23);
        } while (forever);
    } catch (const kr::Error &) {
        _exit(10);
    }
    _exit(0);
}

}  // namespace

int main(int argc, char **argv) {
    bool quick = argc > 1 && std::strcmp(argv[1], "quick") == 0;
    const std::string name = "kr-cpp-seq-" + std::to_string(getpid());
    {
        kr::SharedSequenceBuffer seq = kr::SharedSequenceBuffer::create(name, options(), schema());
        check(status_of([&] { kr::SharedSequenceBuffer::create(name, options(), schema()); }) == KR_E_SHARED,
              "a name is taken once");
        check(status_of([&] { kr::SharedSequenceBuffer::attach(name + "-none"); }) == KR_E_SHARED,
              "an unknown name");
        check(seq.name() == name && seq.participants() == 1, "name and participants");
        kr::Rng rng(3);
        {
            kr::SharedSequenceBuffer other = kr::SharedSequenceBuffer::attach(name);
            check(seq.participants() == 2, "two handles");
            kr::LaneWriter lane(seq, 0);
            check(status_of([&] { kr::LaneWriter again(other, 0); }) == KR_E_INVALID_ARGUMENT,
                  "one writer per lane");
            write(lane, 0, 40, 1000);
            check(whole_windows(other, rng) == B, "the other handle samples whole windows");
        }
        if (!quick) {
            pid_t pid = fork();
            if (pid == 0) actor(name, false);
            std::size_t checked = 0;
            while (waitpid(pid, nullptr, WNOHANG) == 0) checked += whole_windows(seq, rng);
            check(checked >= B, "the parent sampled while the actor wrote");
            for (int k = 0; k < 4; ++k) {
                pid = fork();
                if (pid == 0) actor(name, true);
                std::this_thread::sleep_for(std::chrono::milliseconds(20 + 7 * k));
                kill(pid, SIGKILL);
                check(wait_child(pid) == 128 + SIGKILL, "killed");
                seq.recover();
                check(seq.participants() == 1, "the dead actor recovered");
                kr::LaneWriter lane(seq, 1);
                check(lane.position() % 2 == 0, "the lane stands on a window start");
                write(lane, 1, 30, 1000);
                check(whole_windows(seq, rng) == B, "whole windows after recovery");
            }
        }
        kr::SharedSequenceBuffer::unlink(name);
    }
    check(status_of([&] { kr::SharedSequenceBuffer::unlink(name); }) == KR_E_SHARED, "unlinked once");
    if (failures == 0) std::printf("sequence_shm_cpp: ok\n");
    return failures;
}
