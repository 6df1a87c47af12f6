/* A buffer shared by processes from C: kr_shm_create (named and anonymous), kr_shm_attach,
 * kr_shm_attach_fd, kr_shm_fd, kr_shm_participants, kr_shm_recover, kr_shm_unlink; a forked
 * child that attaches by descriptor and inserts what the parent samples; a rate limit that a
 * forked child waits on until the parent inserts, and whose close ends its wait; children killed
 * (SIGKILL) while they insert, after which the parent's inserts and samples go on and every
 * row is whole; and every bad input's status. Run by ffi/tests/run.sh (also under valgrind,
 * with no fork: `shm quick`). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "kary_replay.h"

/* An item: its number and a checksum of it that a torn row breaks. */
static const kr_column SCHEMA[2] = {{"id", KR_DTYPE_I64, 1, 0, NULL}, {"check", KR_DTYPE_I64, 1, 0, NULL}};

static int64_t check_of(int64_t id) { return id * 1000003 + 17; }

static void insert_range(const kr_buffer *b, int64_t first, size_t n) {
    int64_t id[64], chk[64];
    double p[64];
    for (size_t i = 0; i < n; i++) {
        id[i] = first + (int64_t)i;
        chk[i] = check_of(id[i]);
        p[i] = 1.0 + (double)(i % 3);
    }
    const void *cols[2] = {id, chk};
    CHECK_OK(kr_buffer_insert_batch(b, cols, 2, n, p, NULL));
}

/* Sample 64 rows and check each: returns how many were whole. */
static size_t sample_whole(const kr_buffer *b, kr_rng *rng) {
    kr_key keys[64];
    int64_t id[64], chk[64];
    void *cols[2] = {id, chk};
    kr_sample_out out = {0};
    out.keys = keys;
    out.columns = cols;
    CHECK_OK(kr_buffer_sample(b, rng, 64, 0.4, KR_SAMPLE_STRATIFIED, &out));
    size_t whole = 0;
    for (int i = 0; i < 64; i++) whole += chk[i] == check_of(id[i]);
    return whole;
}

static void config_for(kr_config *config, size_t capacity) {
    *config = kr_config_default();
    config->capacity = capacity;
    config->alpha = 1.0;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    char name[64];
    snprintf(name, sizeof name, "kr-c-test-%ld", (long)getpid());
    kr_config config;
    config_for(&config, 4096);
    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(7, &rng));

    /* Named: create, attach, share. */
    kr_buffer *a = NULL, *b = NULL;
    CHECK_OK(kr_shm_create(name, &config, SCHEMA, 2, &a));
    CHECK_STATUS(kr_shm_create(name, &config, SCHEMA, 2, &b), KR_E_SHARED);
    CHECK_OK(kr_shm_attach(name, &b));
    insert_range(a, 0, 50);
    size_t len = 0, n = 0;
    CHECK_OK(kr_buffer_len(b, &len));
    CHECK(len == 50);
    CHECK(sample_whole(b, rng) == 64);
    /* Delete by key through one handle shows through the other; a write back is refused. */
    kr_key first;
    bool present = false;
    CHECK_OK(kr_buffer_key(a, 0, &first, &present));
    CHECK(present);
    kr_update_report report = {0, 0};
    size_t position = 0;
    int64_t new_id = 5;
    const void *new_cols[1] = {&new_id};
    CHECK_STATUS(kr_buffer_write_back(b, &first, 1, &position, new_cols, 1, &report), KR_E_INVALID_ARGUMENT);
    CHECK_OK(kr_buffer_delete(b, &first, 1, &report));
    CHECK(report.applied == 1);
    CHECK_OK(kr_buffer_len(a, &len));
    CHECK(len == 49);
    CHECK_OK(kr_shm_participants(a, &n));
    CHECK(n == 2);
    kr_config got;
    CHECK_OK(kr_buffer_config(b, &got));
    CHECK(got.variant == KR_VARIANT_SHARED && got.capacity == 4096);
    size_t cols = 0;
    CHECK_OK(kr_buffer_n_columns(b, &cols));
    CHECK(cols == 2);
    kr_buffer_free(b);
    b = NULL;
    CHECK_OK(kr_shm_participants(a, &n));
    CHECK(n == 1);

    /* A forked child attaches by descriptor and inserts; the parent samples its rows. (Not
     * under valgrind, `quick`: a forked child of a process with threads holds memory of
     * threads it does not have, which a leak check reports as lost.) */
    int fd = -1;
    CHECK_OK(kr_shm_fd(a, &fd));
    CHECK(fd >= 0);
    int status = 0;
    pid_t pid = quick ? -1 : fork();
    if (pid == 0) {
        kr_buffer *c = NULL;
        int ok = kr_shm_attach_fd(fd, &c) == KR_OK;
        for (int k = 0; ok && k < 10; k++) insert_range(c, 1000 + 64 * k, 64);
        kr_buffer_free(c);
        _exit(ok && check_failures == 0 ? 0 : 1);
    }
    if (pid > 0) {
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHECK_OK(kr_buffer_len(a, &len));
        CHECK(len == 49 + 640);
    }
    CHECK(sample_whole(a, rng) == 64);

    /* Children killed while they insert: nothing blocks the parent, every row is whole. */
    for (int k = 0; !quick && k < 20; k++) {
        pid = fork();
        if (pid == 0) {
            kr_buffer *c = NULL;
            if (kr_shm_attach(name, &c) != KR_OK) _exit(1);
            for (int64_t i = 0;; i += 16) insert_range(c, 100000 * (k + 1) + i, 16);
        }
        struct timespec nap = {0, (long)(1000000 + 300000 * k)};
        nanosleep(&nap, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        for (int j = 0; j < 64; j++) insert_range(a, 50000 + 64 * j, 64); /* over every slot */
        CHECK(sample_whole(a, rng) == 64);
        size_t recovered = 0;
        CHECK_OK(kr_shm_recover(a, &recovered));
        kr_consistency cons;
        CHECK_OK(kr_buffer_consistency(a, &cons));
        CHECK(cons.exact);
        CHECK_OK(kr_shm_participants(a, &n));
        CHECK(n == 1);
    }

    /* A rate limit shared by processes: 2 samples per insert after 32 items, within +-64
     * samples, calls of 16. A forked child's blocking sample waits for the parent's inserts;
     * then the parent's close ends the child's next wait. */
    {
        kr_config rc;
        config_for(&rc, 256);
        rc.rate_limit = KR_RATE_SAMPLE_TO_INSERT_RATIO;
        rc.rate_samples_per_insert = 2.0;
        rc.rate_min_size = 32;
        rc.rate_error_buffer = 64.0;
        rc.rate_insert_batch = 16;
        rc.rate_sample_batch = 16;
        kr_buffer *r = NULL;
        CHECK_OK(kr_shm_create(NULL, &rc, SCHEMA, 2, &r));
        kr_config got_rate;
        CHECK_OK(kr_buffer_config(r, &got_rate));
        CHECK(got_rate.rate_limit == KR_RATE_SAMPLE_TO_INSERT_RATIO && got_rate.rate_sample_batch == 16);
        kr_sample_out none_out = {0};
        CHECK_STATUS(kr_buffer_sample_wait(r, rng, 16, 0.4, KR_SAMPLE_STRATIFIED, 0.0, &none_out),
                     KR_E_RATE_LIMITED);
        kr_rate_stats rs;
        pid = quick ? -1 : fork();
        if (pid == 0) {
            kr_sample_out o = {0};
            int ok = 1;
            for (int k = 0; k < 4; k++) {
                ok &= kr_buffer_sample_wait(r, rng, 16, 0.4, KR_SAMPLE_STRATIFIED, KR_WAIT_FOREVER, &o) == KR_OK;
            }
            ok &= kr_buffer_sample_wait(r, rng, 16, 0.4, KR_SAMPLE_STRATIFIED, KR_WAIT_FOREVER, &o) == KR_E_CLOSED;
            _exit(ok ? 0 : 1);
        }
        if (pid > 0) {
            for (int waited = 0; waited < 10000; waited++) {
                CHECK_OK(kr_buffer_rate_stats(r, &rs));
                if (rs.sample_waiters == 1) break;
                struct timespec ms = {0, 1000000};
                nanosleep(&ms, NULL);
            }
            CHECK(rs.sample_waiters == 1);
            insert_range(r, 0, 16);
            insert_range(r, 16, 16);
            /* The child takes its 4 samples, then waits for a 5th until the close. */
            for (int waited = 0; waited < 10000; waited++) {
                CHECK_OK(kr_buffer_rate_stats(r, &rs));
                if (rs.samples == 64 && rs.sample_waiters == 1) break;
                struct timespec ms = {0, 1000000};
                nanosleep(&ms, NULL);
            }
            CHECK(rs.samples == 64 && rs.sample_waiters == 1);
            CHECK_OK(kr_buffer_close(r));
            waitpid(pid, &status, 0);
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            CHECK_OK(kr_buffer_rate_stats(r, &rs));
            CHECK(rs.limited && rs.closed && rs.inserts == 32 && rs.diff == 0.0);
        }
        kr_buffer_free(r);
    }

    /* Anonymous: attach by descriptor only; no name to unlink. */
    kr_buffer *m = NULL, *m2 = NULL;
    config_for(&config, 64);
    CHECK_OK(kr_shm_create(NULL, &config, SCHEMA, 2, &m));
    CHECK_OK(kr_shm_fd(m, &fd));
    CHECK_OK(kr_shm_attach_fd(fd, &m2));
    insert_range(m2, 0, 10);
    CHECK_OK(kr_buffer_len(m, &len));
    CHECK(len == 10);
    kr_buffer_free(m2);
    kr_buffer_free(m);

    /* Bad input: each status, nothing made. */
    kr_buffer *none = NULL;
    CHECK_STATUS(kr_shm_create(name, NULL, SCHEMA, 2, &none), KR_E_NULL);
    CHECK_STATUS(kr_shm_create(name, &config, SCHEMA, 2, NULL), KR_E_NULL);
    CHECK_STATUS(kr_shm_create("bad/name", &config, SCHEMA, 2, &none), KR_E_SHARED);
    CHECK_STATUS(kr_shm_create("x", &config, NULL, 0, &none), KR_E_INVALID_SCHEMA);
    CHECK_STATUS(kr_shm_attach(NULL, &none), KR_E_NULL);
    CHECK_STATUS(kr_shm_attach("kr-c-test-no-such-buffer", &none), KR_E_SHARED);
    CHECK_STATUS(kr_shm_attach_fd(-1, &none), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_shm_attach_fd(0, &none), KR_E_SHARED);
    CHECK(none == NULL);
    CHECK_STATUS(kr_shm_fd(NULL, &fd), KR_E_NULL);
    CHECK_STATUS(kr_shm_recover(NULL, NULL), KR_E_NULL);
    CHECK_STATUS(kr_shm_participants(a, NULL), KR_E_NULL);
    kr_buffer *plain = NULL;
    kr_config pc = kr_config_default();
    pc.capacity = 8;
    CHECK_OK(kr_buffer_new(&pc, SCHEMA, 2, &plain));
    CHECK_STATUS(kr_shm_recover(plain, NULL), KR_E_INVALID_ARGUMENT);
    kr_buffer_free(plain);
    pc.variant = KR_VARIANT_SHARED;
    CHECK_STATUS(kr_buffer_new(&pc, SCHEMA, 2, &plain), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_shm_unlink(NULL), KR_E_NULL);

    CHECK_OK(kr_shm_unlink(name));
    CHECK_STATUS(kr_shm_unlink(name), KR_E_SHARED);
    CHECK_STATUS(kr_shm_attach(name, &none), KR_E_SHARED);
    /* The handle outlives its name. */
    insert_range(a, 0, 5);
    kr_buffer_free(a);
    kr_rng_free(rng);
    if (check_failures == 0) printf("shm: ok\n");
    return check_failures;
}
