// Actors as processes (--processes): forked before the learners start, sharing with the
// trainer the buffer (a kr::SharedBuffer), the step count and stop flag
// (RateControl::share_counts), and the published policy (SnapshotBoard::share), all in
// memory shared across fork; their episodes come back through a pipe.
// No LibTorch (framework_test.cpp tests it).
#ifndef KARY_TRAINER_PROCESSES_HPP
#define KARY_TRAINER_PROCESSES_HPP

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "kary_replay.hpp"
#include "stats.hpp"

namespace trainer {

// `bytes` of zeroed memory that processes forked later share (never unmapped: it lives as
// long as the run).
inline void *shared_memory(std::size_t bytes) {
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap of shared memory");
    return p;
}

// N forked processes, each running actor(i) and exiting: 0 when it returned or the buffer
// was closed under it (the run stopped), 1 after its message on stderr when it failed. A
// reaper thread counts them down in `actors_left` as they exit and records a failure in
// `stats` (which ends the run); a reader thread records their episodes. The children die
// with the trainer (PR_SET_PDEATHSIG).
class ActorProcesses {
public:
    ActorProcesses(int n, Stats &stats, std::atomic<int> &actors_left, const std::function<void(int)> &actor)
        : stats_(stats), actors_left_(actors_left) {
        int fds[2];
        if (pipe(fds) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
        std::fflush(stdout);  // nothing buffered is written twice
        std::fflush(stderr);
        const pid_t parent = getpid();
        for (int i = 0; i < n; ++i) {
            const pid_t pid = fork();
            if (pid < 0) {
                const int error = errno;
                stop_children();
                close(fds[0]);
                close(fds[1]);
                throw std::system_error(error, std::generic_category(), "fork");
            }
            if (pid == 0) {
                close(fds[0]);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != parent) _exit(1);  // the trainer died before the prctl
                signal(SIGPIPE, SIG_IGN);
                stats.episode_fd = fds[1];
                _exit(run_child(i, actor));
            }
            pids_.push_back(pid);
        }
        close(fds[1]);
        reader_ = std::thread([this, fd = fds[0]] { read_episodes(fd); });
        reaper_ = std::thread([this] { reap(); });
    }
    ~ActorProcesses() { join(); }
    ActorProcesses(const ActorProcesses &) = delete;
    ActorProcesses &operator=(const ActorProcesses &) = delete;

    // Wait for every child to exit (stop them first: RateControl::stop, the buffer's close)
    // and for the last of their episodes.
    void join() {
        if (reaper_.joinable()) reaper_.join();
        if (reader_.joinable()) reader_.join();
    }
    const std::vector<pid_t> &pids() const { return pids_; }

private:
    static int run_child(int i, const std::function<void(int)> &actor) {
        try {
            actor(i);
            return 0;
        } catch (const kary_replay::Error &e) {
            if (e.status() == KR_E_CLOSED) return 0;  // the trainer stopped the run
            std::fprintf(stderr, "actor process %d: %s\n", i, e.what());
        } catch (const std::exception &e) {
            std::fprintf(stderr, "actor process %d: %s\n", i, e.what());
        }
        return 1;
    }

    void read_episodes(int fd) {
        double ret;
        std::size_t have = 0;
        char *bytes = reinterpret_cast<char *>(&ret);
        for (;;) {
            const ssize_t n = read(fd, bytes + have, sizeof ret - have);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;  // every child's end closed: they all exited
            have += static_cast<std::size_t>(n);
            if (have == sizeof ret) {
                stats_.record_episode(ret);
                have = 0;
            }
        }
        close(fd);
    }

    // Each child as it exits, in any order (the trainer has no other children).
    void reap() {
        for (std::size_t left = pids_.size(); left > 0;) {
            int status = 0;
            const pid_t pid = waitpid(-1, &status, 0);
            if (pid < 0) {
                if (errno == EINTR) continue;
                break;  // ECHILD: none left
            }
            const auto it = std::find(pids_.begin(), pids_.end(), pid);
            if (it == pids_.end()) continue;
            --left;
            actors_left_.fetch_sub(1);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                stats_.fail("actor process " + std::to_string(it - pids_.begin()) + " (pid " + std::to_string(pid) +
                            ") " +
                            (WIFSIGNALED(status) ? std::string("killed by signal ") + std::to_string(WTERMSIG(status))
                                                 : "exited with status " + std::to_string(WEXITSTATUS(status))));
            }
        }
    }

    void stop_children() {
        for (pid_t pid : pids_) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
        pids_.clear();
    }

    Stats &stats_;
    std::atomic<int> &actors_left_;
    std::vector<pid_t> pids_;
    std::thread reader_, reaper_;
};

}  // namespace trainer

#endif  // KARY_TRAINER_PROCESSES_HPP
