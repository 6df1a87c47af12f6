// A buffer shared by processes through the C++ wrapper (kr::SharedBuffer): two forked actor
// processes attach by name and push through kr::Writer while a forked learner process
// samples and updates priorities and the parent samples too; then an actor is killed
// (SIGKILL) while it pushes, and the parent's inserts and samples go on, every row whole.
// Also: anonymous buffers attached by descriptor, the handle used as a kr::Buffer, moves,
// and each error (KR_E_SHARED, KR_E_INVALID_ARGUMENT) thrown as kr::Error.
// Run by ffi/tests/run.sh, also under valgrind with no fork (`shm_cpp quick`).
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

std::int64_t check_of(std::int64_t id) { return id * 1000003 + 17; }

std::vector<kr::Column> schema() { return {kr::column<std::int64_t>("id", 1), kr::column<std::int64_t>("check", 1)}; }

kr_config config_of(std::size_t capacity) {
    kr_config config = kr_config_default();
    config.capacity = capacity;
    config.alpha = 1.0;
    return config;
}

// Push ids first.. through a Writer of 16 until `stop` says so or `count` are pushed.
void push_ids(const kr::Buffer &buffer, std::int64_t first, std::int64_t count) {
    kr::Writer writer(buffer, 16);
    for (std::int64_t id = first; id < first + count; ++id) {
        const std::int64_t row_id[1] = {id}, row_check[1] = {check_of(id)};
        writer.push({row_id, row_check}, 1.0 + static_cast<double>(id % 3));
    }
    writer.flush();
}

// Sample 64 rows; how many are whole (their checksum holds).
std::size_t whole_rows(const kr::Buffer &buffer, kr::Rng &rng) {
    kr::Sample s = buffer.sample(rng, 64, 0.4);
    kr::Span<const std::int64_t> ids = s.column<std::int64_t>(0), checks = s.column<std::int64_t>(1);
    std::size_t whole = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) whole += checks[i] == check_of(ids[i]);
    return whole;
}

int wait_child(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int main(int argc, char **argv) {
    bool quick = argc > 1 && std::strcmp(argv[1], "quick") == 0;
    std::string name = "kr-cpp-test-" + std::to_string(getpid());
    kr::Rng rng(11);
    {
        kr::SharedBuffer a = kr::SharedBuffer::create(name, config_of(4096), schema());
        check(a.name() == name, "name()");
        check(status_of([&] { kr::SharedBuffer::create(name, config_of(4096), schema()); }) == KR_E_SHARED,
              "a second create of the name throws KR_E_SHARED");
        kr::SharedBuffer b = kr::SharedBuffer::attach(name);
        check(b.schema().size() == 2 && b.schema()[0].name == "id", "attach reads the schema");
        check(b.config().variant == KR_VARIANT_SHARED && b.capacity() == 4096, "attach reads the config");
        check(a.participants() == 2, "two participants");
        push_ids(a, 0, 100);
        check(b.len() == 100, "b sees a's items");
        check(whole_rows(b, rng) == 64, "b samples whole rows");

        // Moved, still the same handle; the base class works on it.
        kr::SharedBuffer moved = std::move(b);
        const kr::Buffer &as_buffer = moved;
        check(as_buffer.len() == 100 && moved.name() == name, "a moved handle keeps working");

        if (!quick) {
            // Two actor processes and a learner process on the one buffer, beside the parent.
            std::vector<pid_t> actors;
            for (int k = 0; k < 2; ++k) {
                pid_t pid = fork();
                if (pid == 0) {
                    int code = 0;
                    try {
                        kr::SharedBuffer mine = kr::SharedBuffer::attach(name);
                        push_ids(mine, 10000 * (k + 1), 2000);
                    } catch (const std::exception &e) {
                        std::fprintf(stderr, "actor: %s\n", e.what());
                        code = 1;
                    }
                    _exit(code);
                }
                actors.push_back(pid);
            }
            pid_t learner = fork();
            if (learner == 0) {
                // The inherited handle: it attaches again on its first call.
                int code = 0;
                try {
                    kr::Rng mine(99);
                    for (int step = 0; step < 200; ++step) {
                        kr::Sample s = moved.sample(mine, 32, 0.4);
                        kr::Span<const std::int64_t> ids = s.column<std::int64_t>(0);
                        kr::Span<const std::int64_t> checks = s.column<std::int64_t>(1);
                        for (std::size_t i = 0; i < ids.size(); ++i) code |= checks[i] != check_of(ids[i]);
                        std::vector<double> priorities(s.keys.size(), 2.0);
                        moved.update_priorities(s.keys, priorities);
                    }
                } catch (const std::exception &e) {
                    std::fprintf(stderr, "learner: %s\n", e.what());
                    code = 1;
                }
                _exit(code);
            }
            std::size_t parent_whole = 0;
            for (int step = 0; step < 100; ++step) parent_whole += whole_rows(a, rng);
            check(parent_whole == 100 * 64, "the parent samples whole rows beside them");
            for (pid_t pid : actors) check(wait_child(pid) == 0, "an actor process");
            check(wait_child(learner) == 0, "the learner process: whole rows, updates taken");
            check(a.inserted() == 100 + 2 * 2000, "every actor's item is in: " + std::to_string(a.inserted()));

            // An actor killed while it pushes: the parent goes on; every row stays whole.
            for (int k = 0; k < 5; ++k) {
                pid_t pid = fork();
                if (pid == 0) {
                    try {
                        kr::SharedBuffer mine = kr::SharedBuffer::attach(name);
                        push_ids(mine, 1000000 * (k + 1), INT64_MAX / 4);
                    } catch (...) {
                    }
                    _exit(1);
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(2 + k));
                kill(pid, SIGKILL);
                check(wait_child(pid) == 128 + SIGKILL, "the actor was killed");
                push_ids(a, 500000, 4096);  // over every slot: none is left held
                check(whole_rows(a, rng) == 64, "whole rows after a kill");
                a.recover();
                check(a.consistency().exact, "sums exact after recovery");
                check(a.participants() == 2, "the dead process is no participant");
            }
        }
    }
    check(status_of([&] { kr::SharedBuffer::attach(name); }) == KR_OK, "the name outlives the handles");
    kr::SharedBuffer::unlink(name);
    check(status_of([&] { kr::SharedBuffer::attach(name); }) == KR_E_SHARED, "attach after unlink throws");
    check(status_of([&] { kr::SharedBuffer::unlink(name); }) == KR_E_SHARED, "a second unlink throws");

    // Anonymous: reached through its descriptor.
    {
        kr::SharedBuffer m = kr::SharedBuffer::anonymous(config_of(64), schema());
        check(m.name().empty(), "no name");
        kr::SharedBuffer m2 = kr::SharedBuffer::attach_fd(m.fd());
        push_ids(m2, 0, 10);
        check(m.len() == 10, "one mapping behind both handles");
        check(m.recover() == 0, "nothing to recover");
    }

    // Bad input: thrown, nothing made.
    check(status_of([&] { kr::SharedBuffer::create("bad/name", config_of(64), schema()); }) == KR_E_SHARED,
          "a bad name throws KR_E_SHARED");
    check(status_of([&] { kr::SharedBuffer::create("kr-cpp-empty", config_of(64), {}); }) == KR_E_INVALID_SCHEMA,
          "an empty schema throws KR_E_INVALID_SCHEMA");
    check(status_of([&] { kr::SharedBuffer::attach_fd(-1); }) == KR_E_INVALID_ARGUMENT, "fd -1");
    check(status_of([&] { kr::SharedBuffer::attach_fd(0); }) == KR_E_SHARED, "fd 0 is no shared buffer");
    kr_config bad = config_of(0);
    check(status_of([&] { kr::SharedBuffer::create("kr-cpp-zero", bad, schema()); }) == KR_E_INVALID_ARGUMENT,
          "capacity 0 throws KR_E_INVALID_ARGUMENT");

    if (failures == 0) std::printf("shm_cpp: ok\n");
    return failures == 0 ? 0 : 1;
}
