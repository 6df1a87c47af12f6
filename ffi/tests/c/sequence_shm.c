/* Sequence buffers shared by processes from C (kr_seq_shm_*): a forked actor process
 * attaches by name and writes a lane while the parent samples windows, every window's rows
 * whole; an actor killed (SIGKILL) inside an episode is recovered and its lane takes a new
 * writer (from the next window start); every bad input (NULL, a name taken or unknown, a flat buffer's name, the calls
 * of a shared buffer on one that is not) is a status and changes nothing. `quick`: no fork
 * (for valgrind). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "kary_replay.h"

enum { W = 4, B = 32 };

static kr_column columns[2] = {
    {"obs", KR_DTYPE_F32, 2, 0, NULL},
    {"reward", KR_DTYPE_F32, 1, 0, NULL},
};

static kr_seq_config config_of(void) {
    kr_seq_config config = kr_seq_config_default();
    config.lanes = 2;
    config.steps_per_lane = 64;
    config.window = W;
    config.period = 2;
    config.alpha = 1.0;
    return config;
}

/* Push lane `lane`'s steps from its position for `steps` steps; obs = (v, -v) with v the
 * lane-absolute step plus 1000 x lane; an episode every `episode` steps. */
static kr_status write_lane(kr_lane *lane, int lane_no, int steps, int episode) {
    for (int t = 0; t < steps; t++) {
        uint64_t pos = 0;
        kr_status s = kr_lane_position(lane, &pos);
        if (s != KR_OK) return s;
        float v = (float)(1000 * lane_no) + (float)pos, obs[2] = {v, -v}, reward = 1.0f;
        const void *cols[2] = {obs, &reward};
        s = kr_lane_push(lane, cols, 2);
        if (s != KR_OK) return s;
        if ((t + 1) % episode == 0) {
            s = kr_lane_end_episode(lane, NULL, 0, true);
            if (s != KR_OK) return s;
        }
    }
    return KR_OK;
}

/* Sample B windows; each one's steps must be consecutive steps of its lane, whole. Returns
 * the windows checked (0 when nothing is sampleable). */
static size_t check_windows(kr_seq *seq, kr_rng *rng) {
    static float obs[B * W * 2], rewards[B * W];
    static kr_key keys[B];
    static uint64_t lengths[B];
    kr_seq_sample_out out = {0};
    void *cols[2] = {obs, rewards};
    out.columns = cols;
    out.keys = keys;
    out.lengths = lengths;
    kr_status s = kr_seq_sample(seq, rng, B, 0.4, KR_SAMPLE_STRATIFIED, &out);
    if (s == KR_E_EMPTY || s == KR_E_ZERO_TOTAL_PRIORITY) return 0;
    CHECK_OK(s);
    for (size_t b = 0; b < B; b++) {
        size_t lane = 0;
        uint64_t start = 0;
        CHECK_OK(kr_seq_window_of(seq, keys[b], &lane, &start));
        for (uint64_t i = 0; i < lengths[b]; i++) {
            float v = obs[(b * W + i) * 2];
            CHECK(v == (float)(1000 * lane) + (float)(start + i));
            CHECK(obs[(b * W + i) * 2 + 1] == -v);
        }
    }
    return B;
}

static int wait_child(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The child: attach by name, write lane 1 (forever when `forever`), exit 0. */
static void actor(const char *name, int forever) {
    kr_seq *seq = NULL;
    if (kr_seq_shm_attach(name, &seq) != KR_OK) _exit(10);
    kr_lane *lane = NULL;
    if (kr_seq_lane(seq, 1, &lane) != KR_OK) _exit(11);
    do {
        if (write_lane(lane, 1, 300, 23) != KR_OK) _exit(12);
    } while (forever);
    kr_lane_free(lane);
    kr_seq_free(seq);
    _exit(0);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    char name[64];
    snprintf(name, sizeof name, "kr-c-seq-%d", (int)getpid());
    kr_seq_config config = config_of();
    kr_seq *seq = NULL;
    /* Bad input: a status, nothing made. */
    CHECK_STATUS(kr_seq_shm_create(name, NULL, columns, 2, &seq), KR_E_NULL);
    CHECK_STATUS(kr_seq_shm_create(name, &config, columns, 2, NULL), KR_E_NULL);
    CHECK_STATUS(kr_seq_shm_create("bad/name", &config, columns, 2, &seq), KR_E_SHARED);
    CHECK_STATUS(kr_seq_shm_attach(NULL, &seq), KR_E_NULL);
    CHECK_STATUS(kr_seq_shm_attach(name, &seq), KR_E_SHARED);
    CHECK(seq == NULL);
    CHECK_OK(kr_seq_shm_create(name, &config, columns, 2, &seq));
    kr_seq *again = NULL;
    CHECK_STATUS(kr_seq_shm_create(name, &config, columns, 2, &again), KR_E_SHARED);
    /* A sequence buffer of one process has no mapping. */
    kr_seq *local = NULL;
    CHECK_OK(kr_seq_new(&config, columns, 2, &local));
    size_t n = 0;
    CHECK_STATUS(kr_seq_shm_recover(local, &n), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_seq_shm_participants(local, &n), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_seq_shm_recover(NULL, &n), KR_E_NULL);
    kr_seq_free(local);
    /* A flat shared buffer's name is not a sequence buffer's. */
    char flat_name[80];
    snprintf(flat_name, sizeof flat_name, "%s-flat", name);
    kr_column x = {"x", KR_DTYPE_F32, 1, 0, NULL};
    kr_config flat_config = kr_config_default();
    flat_config.capacity = 16;
    kr_buffer *flat = NULL;
    CHECK_OK(kr_shm_create(flat_name, &flat_config, &x, 1, &flat));
    CHECK_STATUS(kr_seq_shm_attach(flat_name, &again), KR_E_SHARED);
    CHECK(again == NULL);
    kr_buffer_free(flat);
    CHECK_OK(kr_shm_unlink(flat_name));

    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(3, &rng));
    /* Two handles in this process: one writer per lane across them, batches refused. */
    CHECK_OK(kr_seq_shm_attach(name, &again));
    CHECK_OK(kr_seq_shm_participants(seq, &n));
    CHECK(n == 2);
    kr_lane *lane0 = NULL, *other = NULL;
    CHECK_OK(kr_seq_lane(seq, 0, &lane0));
    CHECK_STATUS(kr_seq_lane(again, 0, &other), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_lane_set_batch(lane0, 8), KR_E_INVALID_ARGUMENT);
    CHECK_OK(write_lane(lane0, 0, 40, 1000));
    kr_lane_free(lane0);
    CHECK(check_windows(again, rng) == B);
    kr_seq_free(again);

    if (!quick) {
        /* An actor process writes lane 1 while the parent samples. */
        pid_t pid = fork();
        if (pid == 0) actor(name, 0);
        size_t checked = 0;
        while (waitpid(pid, NULL, WNOHANG) == 0) checked += check_windows(seq, rng);
        checked += check_windows(seq, rng);
        CHECK(checked >= B);
        size_t windows = 0;
        CHECK_OK(kr_seq_len(seq, &windows));
        CHECK(windows > 0);
        /* Actors killed mid-run: recovered, the lane goes on with a new writer. */
        for (int k = 0; k < 5; k++) {
            pid = fork();
            if (pid == 0) actor(name, 1);
            struct timespec nap = {0, (long)(20 + 7 * k) * 1000000L};
            nanosleep(&nap, NULL);
            kill(pid, SIGKILL);
            CHECK(wait_child(pid) == 128 + SIGKILL);
            size_t recovered = 0;
            CHECK_OK(kr_seq_shm_recover(seq, &recovered));
            CHECK_OK(kr_seq_shm_participants(seq, &n));
            CHECK(n == 1);
            check_windows(seq, rng);
            kr_lane *lane1 = NULL;
            CHECK_OK(kr_seq_lane(seq, 1, &lane1));
            /* The dead episode was ended: the lane stands on a window start. */
            uint64_t pos = 1;
            CHECK_OK(kr_lane_position(lane1, &pos));
            CHECK(pos % 2 == 0);
            CHECK_OK(write_lane(lane1, 1, 30, 1000));
            kr_lane_free(lane1);
            CHECK(check_windows(seq, rng) == B);
        }
    }
    kr_rng_free(rng);
    kr_seq_free(seq);
    CHECK_OK(kr_shm_unlink(name));
    CHECK_STATUS(kr_shm_unlink(name), KR_E_SHARED);
    if (check_failures == 0) printf("sequence_shm: ok\n");
    return check_failures;
}
