/* Rate limits from C, for each variant: kr_config's rate fields build the limit (and
 * kr_buffer_config reports them), samples wait for min_size, the *_wait calls return
 * KR_E_RATE_LIMITED at timeout 0 and KR_E_TIMEOUT after one, with nothing inserted, sampled
 * or counted; a refused configuration says why; bad input spends nothing; kr_buffer_close
 * ends every call with KR_E_CLOSED; a checkpoint keeps the counts; a kr_rate_limiter of its
 * own does the same apart from any buffer. Run by
 * ffi/tests/run.sh (also under valgrind). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "kary_replay.h"

static const kr_column SCHEMA[1] = {{"x", KR_DTYPE_F32, 2, 0, NULL}};

/* 2 samples per insert from 4 items on; the difference 2 * inserts - samples stays in
 * [0, 16]; inserts and samples of up to 4 items. */
static kr_config limited(uint32_t variant) {
    kr_config config = kr_config_default();
    config.capacity = 64;
    config.variant = variant;
    config.rate_limit = KR_RATE_SAMPLE_TO_INSERT_RATIO;
    config.rate_samples_per_insert = 2.0;
    config.rate_min_size = 4;
    config.rate_error_buffer = 8.0;
    config.rate_insert_batch = 4;
    config.rate_sample_batch = 4;
    return config;
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void insert(kr_buffer *b, size_t items, double timeout, kr_status expected) {
    float x[8] = {0};
    const void *cols[1] = {x};
    kr_key keys[4];
    CHECK_STATUS(kr_buffer_insert_batch_wait(b, cols, 1, items, NULL, timeout, keys), expected);
}

static kr_status sample(kr_buffer *b, kr_rng *rng, size_t batch, double timeout) {
    kr_key keys[4];
    kr_sample_out out;
    memset(&out, 0, sizeof out);
    out.keys = keys;
    return kr_buffer_sample_wait(b, rng, batch, 0.4, KR_SAMPLE_STRATIFIED, timeout, &out);
}

static void counts(kr_buffer *b, uint64_t inserts, uint64_t samples) {
    kr_rate_stats s;
    CHECK_OK(kr_buffer_rate_stats(b, &s));
    CHECK(s.limited);
    if (s.inserts != inserts || s.samples != samples) {
        fprintf(stderr, "counts (%llu, %llu), expected (%llu, %llu)\n",
                (unsigned long long)s.inserts, (unsigned long long)s.samples,
                (unsigned long long)inserts, (unsigned long long)samples);
    }
    CHECK(s.inserts == inserts && s.samples == samples);
    CHECK(s.diff == 2.0 * (double)inserts - (double)samples);
}

static void one_variant(uint32_t variant, const char *dir) {
    kr_config config = limited(variant);
    kr_buffer *b = NULL;
    CHECK_OK(kr_buffer_new(&config, SCHEMA, 1, &b));
    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(7, &rng));

    kr_config back;
    CHECK_OK(kr_buffer_config(b, &back));
    CHECK(back.rate_limit == KR_RATE_SAMPLE_TO_INSERT_RATIO && back.rate_samples_per_insert == 2.0 &&
          back.rate_min_size == 4 && back.rate_error_buffer == 8.0 && back.rate_insert_batch == 4 &&
          back.rate_sample_batch == 4);

    /* Before min_size: a sample does not fit; with a timeout it waits that long. */
    CHECK_STATUS(sample(b, rng, 1, 0.0), KR_E_RATE_LIMITED);
    double start = seconds_now();
    CHECK_STATUS(sample(b, rng, 1, 0.02), KR_E_TIMEOUT);
    CHECK(seconds_now() - start >= 0.02);
    CHECK(kr_status_is_retryable(KR_E_RATE_LIMITED) && kr_status_is_retryable(KR_E_TIMEOUT));
    CHECK(!kr_status_is_retryable(KR_E_CLOSED));

    insert(b, 4, KR_WAIT_FOREVER, KR_OK);
    counts(b, 4, 0);
    /* Bad input spends nothing: NaN timeout, a batch past rate_sample_batch, a NULL out, too
     * many items, a NaN priority. */
    CHECK_STATUS(sample(b, rng, 1, NAN), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(sample(b, rng, 5, 0.0), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_buffer_sample_wait(b, rng, 1, 0.4, KR_SAMPLE_STRATIFIED, 0.0, NULL), KR_E_NULL);
    insert(b, 5, 0.0, KR_E_INVALID_ARGUMENT);
    {
        float x[2] = {0};
        const void *cols[1] = {x};
        double bad = NAN;
        CHECK_STATUS(kr_buffer_insert_batch_wait(b, cols, 1, 1, &bad, 0.0, NULL), KR_E_INVALID_PRIORITY);
    }
    counts(b, 4, 0);

    /* The difference is 8: 8 samples fit, the 9th item does not. */
    CHECK_OK(sample(b, rng, 4, 0.0));
    CHECK_OK(sample(b, rng, 4, KR_WAIT_FOREVER));
    CHECK_STATUS(sample(b, rng, 1, 0.0), KR_E_RATE_LIMITED);
    counts(b, 4, 8);
    /* Inserts fit up to 16: 8 items, then they wait. */
    insert(b, 4, 0.0, KR_OK);
    insert(b, 4, 1.0, KR_OK);
    insert(b, 1, 0.0, KR_E_RATE_LIMITED);
    insert(b, 1, 0.01, KR_E_TIMEOUT);
    {
        float x[2] = {0};
        const void *cols[1] = {x};
        /* The blocking single insert would wait forever: only the _wait form is tried. */
        CHECK_STATUS(kr_buffer_insert_batch_wait(b, cols, 1, 1, NULL, 0.0, NULL), KR_E_RATE_LIMITED);
    }
    size_t len = 0;
    CHECK_OK(kr_buffer_len(b, &len));
    CHECK(len == 12);
    counts(b, 12, 8);

    /* A checkpoint keeps the limit and the counts, in every variant it loads into. */
    CHECK_OK(kr_buffer_save(b, dir, NULL));
    for (uint32_t v = KR_VARIANT_GLOBAL_LOCK; v <= KR_VARIANT_LOCK_FREE; v++) {
        kr_buffer *loaded = NULL;
        CHECK_OK(kr_buffer_load(dir, v, &loaded));
        counts(loaded, 12, 8);
        CHECK_OK(sample(loaded, rng, 4, 0.0));
        counts(loaded, 12, 12);
        kr_buffer_free(loaded);
    }

    /* Close: every later insert and sample is KR_E_CLOSED; reads go on. */
    CHECK_OK(kr_buffer_close(b));
    CHECK_STATUS(sample(b, rng, 1, KR_WAIT_FOREVER), KR_E_CLOSED);
    insert(b, 1, KR_WAIT_FOREVER, KR_E_CLOSED);
    kr_rate_stats s;
    CHECK_OK(kr_buffer_rate_stats(b, &s));
    CHECK(s.closed && s.open);
    CHECK_STATUS(kr_buffer_rate_stats(b, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_close(NULL), KR_E_NULL);

    kr_rng_free(rng);
    kr_buffer_free(b);
}

static void refused_and_unlimited(void) {
    kr_buffer *b = NULL;
    /* A range narrower than one batch each way could deadlock: refused, with the reason. */
    kr_config narrow = limited(KR_VARIANT_SPLIT_LOCK);
    narrow.rate_error_buffer = 1.0;
    CHECK_STATUS(kr_buffer_new(&narrow, SCHEMA, 1, &b), KR_E_INVALID_ARGUMENT);
    char message[512];
    kr_last_error_message(message, sizeof message, NULL);
    CHECK(strstr(message, "deadlock") != NULL);
    CHECK(b == NULL);
    kr_config unknown = limited(KR_VARIANT_SPLIT_LOCK);
    unknown.rate_limit = 99;
    CHECK_STATUS(kr_buffer_new(&unknown, SCHEMA, 1, &b), KR_E_INVALID_ARGUMENT);
    kr_config zero = limited(KR_VARIANT_SPLIT_LOCK);
    zero.rate_insert_batch = 0;
    CHECK_STATUS(kr_buffer_new(&zero, SCHEMA, 1, &b), KR_E_INVALID_ARGUMENT);

    /* Without a limit: no waits, stats say so, close does nothing. */
    kr_config plain = kr_config_default();
    plain.capacity = 8;
    CHECK_OK(kr_buffer_new(&plain, SCHEMA, 1, &b));
    kr_rate_stats s;
    memset(&s, 0xff, sizeof s);
    CHECK_OK(kr_buffer_rate_stats(b, &s));
    CHECK(!s.limited && s.inserts == 0 && s.samples == 0);
    CHECK_OK(kr_buffer_close(b));
    insert(b, 1, 0.0, KR_OK);
    kr_config back;
    CHECK_OK(kr_buffer_config(b, &back));
    CHECK(back.rate_limit == KR_RATE_NONE);
    kr_buffer_free(b);
}

/* A limiter of its own: the same limit from a kr_config, counts to continue from, every
 * status, close, and bad input (NULLs, no limit, counts it could not have reached). */
static void standalone_limiter(void) {
    kr_config config = limited(KR_VARIANT_SPLIT_LOCK);
    kr_rate_limiter *l = NULL;
    CHECK_OK(kr_rate_limiter_new(&config, 0, 0, &l));
    kr_rate_stats s;
    CHECK_STATUS(kr_rate_limiter_sample(l, 1, 0.0), KR_E_RATE_LIMITED);
    CHECK_STATUS(kr_rate_limiter_sample(l, 1, 0.01), KR_E_TIMEOUT);
    CHECK_OK(kr_rate_limiter_insert(l, 4, KR_WAIT_FOREVER));
    CHECK_OK(kr_rate_limiter_sample(l, 4, 0.0));
    CHECK_OK(kr_rate_limiter_sample(l, 4, 0.0));
    CHECK_STATUS(kr_rate_limiter_sample(l, 1, 0.0), KR_E_RATE_LIMITED);
    CHECK_STATUS(kr_rate_limiter_insert(l, 5, 0.0), KR_E_INVALID_ARGUMENT); /* past rate_insert_batch */
    CHECK_STATUS(kr_rate_limiter_insert(l, 1, NAN), KR_E_INVALID_ARGUMENT);
    CHECK_OK(kr_rate_limiter_stats(l, &s));
    CHECK(s.limited && s.inserts == 4 && s.samples == 8 && s.diff == 0.0 && s.open && !s.closed);
    CHECK_OK(kr_rate_limiter_close(l));
    CHECK_STATUS(kr_rate_limiter_insert(l, 1, KR_WAIT_FOREVER), KR_E_CLOSED);
    CHECK_STATUS(kr_rate_limiter_sample(l, 1, KR_WAIT_FOREVER), KR_E_CLOSED);
    CHECK_STATUS(kr_rate_limiter_stats(l, NULL), KR_E_NULL);
    kr_rate_limiter_free(l);

    /* Counts to continue from: 12 inserted, 8 sampled leave a difference of 16. */
    CHECK_OK(kr_rate_limiter_new(&config, 12, 8, &l));
    CHECK_STATUS(kr_rate_limiter_insert(l, 1, 0.0), KR_E_RATE_LIMITED);
    CHECK_OK(kr_rate_limiter_sample(l, 4, 0.0));
    kr_rate_limiter_free(l);

    kr_rate_limiter *none = NULL;
    CHECK_STATUS(kr_rate_limiter_new(&config, 0, 1, &none), KR_E_INVALID_ARGUMENT); /* a sample before min_size */
    kr_config plain = kr_config_default();
    CHECK_STATUS(kr_rate_limiter_new(&plain, 0, 0, &none), KR_E_INVALID_ARGUMENT); /* KR_RATE_NONE */
    CHECK_STATUS(kr_rate_limiter_new(NULL, 0, 0, &none), KR_E_NULL);
    CHECK_STATUS(kr_rate_limiter_new(&config, 0, 0, NULL), KR_E_NULL);
    CHECK(none == NULL);
    CHECK_STATUS(kr_rate_limiter_insert(NULL, 1, 0.0), KR_E_NULL);
    CHECK_STATUS(kr_rate_limiter_close(NULL), KR_E_NULL);
    kr_rate_limiter_free(NULL);
}

int main(void) {
    char root[] = "/tmp/kr-rate-c-XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    const uint32_t variants[3] = {KR_VARIANT_GLOBAL_LOCK, KR_VARIANT_SPLIT_LOCK, KR_VARIANT_LOCK_FREE};
    for (int v = 0; v < 3; v++) {
        char dir[256];
        snprintf(dir, sizeof dir, "%s/ckpt-%d", root, v);
        one_variant(variants[v], dir);
    }
    refused_and_unlimited();
    standalone_limiter();
    char command[300];
    snprintf(command, sizeof command, "rm -rf %s", root);
    if (system(command) != 0) check_failures++;
    if (check_failures == 0) printf("rate: ok\n");
    return check_failures;
}
