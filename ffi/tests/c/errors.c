/* The C ABI's error paths: each bad call returns its documented status, writes nothing to
 * its outputs (they keep a sentinel pattern) and leaves the buffer as it was (checked by
 * reading everything back, a deterministic sample included). Run by ffi/tests/run.sh, also
 * under valgrind. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kary_replay.h"

#define CAP 8
#define S 6

static const kr_column SCHEMA[2] = {{"obs", KR_DTYPE_F32, 2, 0, NULL}, {"done", KR_DTYPE_BOOL, 1, 0, NULL}};

/* Everything observable about a buffer. */
typedef struct {
    size_t len, capacity;
    uint64_t inserted;
    double total;
    double priorities[CAP];
    kr_key keys[CAP];
    bool present[CAP];
    kr_status sample_status;
    kr_key s_keys[S];
    double s_weights[S];
    float s_obs[S * 2];
} snapshot;

static void take(const kr_buffer *b, snapshot *s) {
    memset(s, 0, sizeof *s);
    CHECK_OK(kr_buffer_len(b, &s->len));
    CHECK_OK(kr_buffer_capacity(b, &s->capacity));
    CHECK_OK(kr_buffer_inserted(b, &s->inserted));
    CHECK_OK(kr_buffer_total_priority(b, &s->total));
    for (size_t i = 0; i < CAP; i++) {
        CHECK_OK(kr_buffer_priority(b, i, &s->priorities[i]));
        CHECK_OK(kr_buffer_key(b, i, &s->keys[i], &s->present[i]));
    }
    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(7, &rng));
    bool done[S];
    void *const cols[2] = {s->s_obs, done};
    kr_sample_out out = {s->s_keys, NULL, s->s_weights, NULL, NULL, cols, NULL, NULL};
    s->sample_status = kr_buffer_sample(b, rng, S, 0.5, KR_SAMPLE_STRATIFIED, &out);
    kr_rng_free(rng);
}

static void check_unchanged(const kr_buffer *b, const snapshot *before, int line) {
    snapshot now;
    take(b, &now);
    if (memcmp(&now, before, sizeof now) != 0) {
        fprintf(stderr, "errors.c:%d: the buffer changed after a failed call\n", line);
        check_failures++;
    }
}
#define UNCHANGED(b, before) check_unchanged((b), (before), __LINE__)


static kr_buffer *new_buffer(uint32_t variant, size_t capacity) {
    kr_config config = kr_config_default();
    config.capacity = capacity;
    config.fanout = 4;
    config.variant = variant;
    config.alpha = 1.0;
    kr_buffer *b = NULL;
    CHECK_OK(kr_buffer_new(&config, SCHEMA, 2, &b));
    return b;
}

/* Bad configurations and schemas: a status, and `out` is not written. */
/* Columns of several dimensions: given by `ndim`/`dims` (with `shape` 0 or their product),
   handed back by kr_buffer_column, kept by a checkpoint (whose column file numpy reads as
   (capacity, 3, 4)) and by a load. */
static void dims_round_trip(const kr_config *config) {
    const size_t frame[2] = {3, 4};
    kr_column columns[2] = {{"frame", KR_DTYPE_U8, 0, 2, frame}, {"reward", KR_DTYPE_F32, 12, 2, frame}};
    kr_buffer *b = NULL;
    CHECK_OK(kr_buffer_new(config, columns, 2, &b));
    for (size_t i = 0; i < 2; i++) {
        kr_column c;
        CHECK_OK(kr_buffer_column(b, i, &c));
        CHECK(c.shape == 12 && c.ndim == 2 && c.dims != NULL && c.dims[0] == 3 && c.dims[1] == 4);
    }
    char parent[] = "/tmp/kr-c-dims-XXXXXX";
    CHECK(mkdtemp(parent) != NULL);
    char dir[256], path[512], cmd[700];
    snprintf(dir, sizeof dir, "%s/ckpt", parent);
    CHECK_OK(kr_buffer_save(b, dir, NULL));
    kr_buffer_free(b);
    snprintf(path, sizeof path, "%s/col.frame.npy", dir);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    char header[128] = {0};
    CHECK(fread(header, 1, sizeof header - 1, f) == sizeof header - 1);
    fclose(f);
    char want[64];
    snprintf(want, sizeof want, "'shape': (%d, 3, 4)", (int)config->capacity);
    CHECK(strstr(header + 10, want) != NULL);
    CHECK_OK(kr_buffer_load(dir, KR_VARIANT_LOCK_FREE, &b));
    kr_column c;
    CHECK_OK(kr_buffer_column(b, 0, &c));
    CHECK(c.shape == 12 && c.ndim == 2 && c.dims[0] == 3 && c.dims[1] == 4);
    kr_buffer_free(b);
    snprintf(cmd, sizeof cmd, "rm -rf %s", parent);
    CHECK(system(cmd) == 0);
}

static void creation_errors(void) {
    kr_config good = kr_config_default();
    good.capacity = CAP;
    kr_buffer *out;
    kr_config c;
#define BAD_CONFIG(field, value, status)             \
    do {                                             \
        c = good;                                    \
        c.field = value;                             \
        ARM(out);                                    \
        CHECK_STATUS(kr_buffer_new(&c, SCHEMA, 2, &out), status); \
        CHECK_UNTOUCHED(out);                        \
    } while (0)
    BAD_CONFIG(variant, 3, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(variant, UINT32_MAX, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(fanout, 3, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(fanout, 0, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(fanout, 128, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(capacity, 0, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(alpha, NAN, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(alpha, -1.0, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(initial_priority, 0.0, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(initial_priority, INFINITY, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(weight_normalization, 2, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(default_priority, 2, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(key_tag, 0x8000, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(key_tag, UINT32_MAX, KR_E_INVALID_ARGUMENT);
    BAD_CONFIG(max_heap, 2, KR_E_INVALID_ARGUMENT);
    /* A given key tag is the one in every key, and the one the buffer reports. */
    c = good;
    c.key_tag = 0x7fff;
    CHECK_OK(kr_buffer_new(&c, SCHEMA, 2, &out));
    {
        const void *cols[2] = {(float[2]){1.0f, 2.0f}, &(bool){true}};
        kr_key key;
        kr_config back;
        CHECK_OK(kr_buffer_insert(out, cols, 2, NULL, &key));
        CHECK(key.generation == (0x7fffULL << 48) && key.index == 0);
        CHECK_OK(kr_buffer_config(out, &back));
        CHECK(back.key_tag == 0x7fff);
    }
    kr_buffer_free(out);
    /* So large that allocation fails: a status, not an abort. */
    BAD_CONFIG(capacity, (size_t)1 << 40, KR_E_ALLOCATION);
    /* Above the largest capacity (2^40): out of range, before any allocation. */
    BAD_CONFIG(capacity, SIZE_MAX, KR_E_INVALID_ARGUMENT);

    kr_column bad_dtype[2] = {{"obs", 6, 2, 0, NULL}, {"done", KR_DTYPE_BOOL, 1, 0, NULL}};
    kr_column dup[2] = {{"obs", KR_DTYPE_F32, 2, 0, NULL}, {"obs", KR_DTYPE_BOOL, 1, 0, NULL}};
    kr_column empty_name[2] = {{"", KR_DTYPE_F32, 2, 0, NULL}, {"done", KR_DTYPE_BOOL, 1, 0, NULL}};
    kr_column zero_shape[2] = {{"obs", KR_DTYPE_F32, 0, 0, NULL}, {"done", KR_DTYPE_BOOL, 1, 0, NULL}};
    kr_column null_name[2] = {{NULL, KR_DTYPE_F32, 2, 0, NULL}, {"done", KR_DTYPE_BOOL, 1, 0, NULL}};
    const size_t frame[2] = {3, 4}, zero_dim[2] = {3, 0};
    kr_column null_dims[1] = {{"frame", KR_DTYPE_U8, 0, 2, NULL}};
    kr_column wrong_product[1] = {{"frame", KR_DTYPE_U8, 11, 2, frame}};
    kr_column dim_zero[1] = {{"frame", KR_DTYPE_U8, 0, 2, zero_dim}};
    struct {
        const kr_column *columns;
        size_t n;
        kr_status status;
    } schemas[] = {
        {bad_dtype, 2, KR_E_INVALID_ARGUMENT}, {dup, 2, KR_E_INVALID_SCHEMA},
        {empty_name, 2, KR_E_INVALID_SCHEMA},  {zero_shape, 2, KR_E_INVALID_SCHEMA},
        {null_name, 2, KR_E_NULL},             {SCHEMA, 0, KR_E_INVALID_SCHEMA},
        {NULL, 2, KR_E_NULL},                  {null_dims, 1, KR_E_NULL},
        {wrong_product, 1, KR_E_INVALID_SCHEMA}, {dim_zero, 1, KR_E_INVALID_SCHEMA},
    };
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++) {
        ARM(out);
        CHECK_STATUS(kr_buffer_new(&good, schemas[i].columns, schemas[i].n, &out), schemas[i].status);
        CHECK_UNTOUCHED(out);
    }
    ARM(out);
    CHECK_STATUS(kr_buffer_new(NULL, SCHEMA, 2, &out), KR_E_NULL);
    CHECK_UNTOUCHED(out);
    CHECK_STATUS(kr_buffer_new(&good, SCHEMA, 2, NULL), KR_E_NULL);
    CHECK_STATUS(kr_rng_new(1, NULL), KR_E_NULL);
    dims_round_trip(&good);
}

/* Every function with a NULL handle or a NULL required out-pointer. */
static void null_errors(kr_buffer *b) {
    snapshot before;
    take(b, &before);
    size_t n;
    double d;
    uint64_t u;
    kr_key key;
    bool present;
    kr_consistency consistency;
    kr_update_report report;
    ARM(n);
    ARM(d);
    ARM(u);
    ARM(key);
    ARM(present);
    ARM(consistency);
    ARM(report);
    CHECK_STATUS(kr_buffer_len(NULL, &n), KR_E_NULL);
    CHECK_STATUS(kr_buffer_capacity(NULL, &n), KR_E_NULL);
    CHECK_STATUS(kr_buffer_memory_bytes(NULL, &n), KR_E_NULL);
    CHECK_STATUS(kr_buffer_total_priority(NULL, &d), KR_E_NULL);
    CHECK_STATUS(kr_buffer_inserted(NULL, &u), KR_E_NULL);
    CHECK_STATUS(kr_buffer_priority(NULL, 0, &d), KR_E_NULL);
    CHECK_STATUS(kr_buffer_key(NULL, 0, &key, &present), KR_E_NULL);
    CHECK_STATUS(kr_buffer_consistency(NULL, &consistency), KR_E_NULL);
    CHECK_STATUS(kr_buffer_len(b, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_capacity(b, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_memory_bytes(b, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_total_priority(b, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_inserted(b, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_priority(b, 0, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_key(b, 0, NULL, &present), KR_E_NULL);
    CHECK_STATUS(kr_buffer_key(b, 0, &key, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_consistency(b, NULL), KR_E_NULL);
    kr_config config_out;
    kr_column column_out;
    ARM(config_out);
    ARM(column_out);
    CHECK_STATUS(kr_buffer_clear(NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_rebuild(NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_config(NULL, &config_out), KR_E_NULL);
    CHECK_STATUS(kr_buffer_config(b, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_n_columns(NULL, &n), KR_E_NULL);
    CHECK_STATUS(kr_buffer_n_columns(b, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_column(NULL, 0, &column_out), KR_E_NULL);
    CHECK_STATUS(kr_buffer_column(b, 0, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_column(b, 2, &column_out), KR_E_OUT_OF_RANGE);
    CHECK_STATUS(kr_buffer_column(b, (size_t)-1, &column_out), KR_E_OUT_OF_RANGE);
    CHECK_UNTOUCHED(config_out);
    CHECK_UNTOUCHED(column_out);
    CHECK_UNTOUCHED(n);
    CHECK_UNTOUCHED(d);
    CHECK_UNTOUCHED(u);
    CHECK_UNTOUCHED(key);
    CHECK_UNTOUCHED(present);
    CHECK_UNTOUCHED(consistency);

    float obs[2] = {1, 2};
    bool done = false;
    const void *cols[2] = {obs, &done};
    const void *null_col[2] = {obs, NULL};
    double p = 1.0;
    ARM(key);
    CHECK_STATUS(kr_buffer_insert(NULL, cols, 2, &p, &key), KR_E_NULL);
    CHECK_STATUS(kr_buffer_insert(b, NULL, 2, &p, &key), KR_E_NULL);
    CHECK_STATUS(kr_buffer_insert(b, null_col, 2, &p, &key), KR_E_NULL);
    CHECK_STATUS(kr_buffer_insert_batch(NULL, cols, 2, 1, &p, &key), KR_E_NULL);
    CHECK_STATUS(kr_buffer_insert_batch(b, NULL, 2, 1, &p, &key), KR_E_NULL);
    CHECK_STATUS(kr_buffer_insert_batch(b, null_col, 2, 1, &p, &key), KR_E_NULL);
    CHECK_UNTOUCHED(key);

    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(3, &rng));
    kr_key s_keys[S];
    ARM(s_keys);
    kr_sample_out out = {s_keys, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    void *const null_dst[2] = {NULL, NULL};
    kr_sample_out out_null_col = {s_keys, NULL, NULL, NULL, NULL, null_dst, NULL, NULL};
    CHECK_STATUS(kr_buffer_sample(NULL, rng, S, 0.5, KR_SAMPLE_STRATIFIED, &out), KR_E_NULL);
    CHECK_STATUS(kr_buffer_sample(b, NULL, S, 0.5, KR_SAMPLE_STRATIFIED, &out), KR_E_NULL);
    CHECK_STATUS(kr_buffer_sample(b, rng, S, 0.5, KR_SAMPLE_STRATIFIED, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_sample(b, rng, S, 0.5, KR_SAMPLE_STRATIFIED, &out_null_col), KR_E_NULL);
    CHECK_UNTOUCHED(s_keys);

    kr_key k = {0, 0};
    ARM(report);
    CHECK_STATUS(kr_buffer_update_priorities(NULL, &k, &p, 1, &report), KR_E_NULL);
    CHECK_STATUS(kr_buffer_update_priorities(b, NULL, &p, 1, &report), KR_E_NULL);
    CHECK_STATUS(kr_buffer_update_priorities(b, &k, NULL, 1, &report), KR_E_NULL);
    CHECK_UNTOUCHED(report);
    kr_rng_free(rng);
    UNCHANGED(b, &before);
}

/* Wrong counts, bad priorities, bad keys, bad sample arguments on a buffer with items. */
static void argument_errors(kr_buffer *b) {
    snapshot before;
    take(b, &before);
    CHECK(before.sample_status == KR_OK);
    float obs[6] = {1, 2, 3, 4, 5, 6};
    bool done[3] = {false, true, false};
    const void *cols[2] = {obs, done};
    kr_key keys[3];
    ARM(keys);

    /* Length mismatch: column count. */
    CHECK_STATUS(kr_buffer_insert(b, cols, 1, NULL, keys), KR_E_LENGTH_MISMATCH);
    CHECK_STATUS(kr_buffer_insert(b, cols, 3, NULL, keys), KR_E_LENGTH_MISMATCH);
    CHECK_STATUS(kr_buffer_insert_batch(b, cols, 1, 3, NULL, keys), KR_E_LENGTH_MISMATCH);

    /* Invalid priorities: one bad value anywhere rejects the whole call. */
    const double bad[] = {NAN, -1.0, INFINITY, -INFINITY, -0.0 - 1e-300, 1e300};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(kr_buffer_insert(b, cols, 2, &bad[i], keys), KR_E_INVALID_PRIORITY);
        double three[3] = {1.0, 2.0, bad[i]};
        CHECK_STATUS(kr_buffer_insert_batch(b, cols, 2, 3, three, keys), KR_E_INVALID_PRIORITY);
        kr_key two_keys[2] = {before.keys[0], before.keys[1]};
        double two[2] = {5.0, bad[i]};
        kr_update_report report;
        ARM(report);
        CHECK_STATUS(kr_buffer_update_priorities(b, two_keys, two, 2, &report), KR_E_INVALID_PRIORITY);
        CHECK_UNTOUCHED(report);
    }

    /* A bool column byte other than 0 or 1; a misaligned float column. */
    unsigned char bad_bool[3] = {0, 2, 1};
    const void *cols_bad_bool[2] = {obs, bad_bool};
    CHECK_STATUS(kr_buffer_insert_batch(b, cols_bad_bool, 2, 3, NULL, keys), KR_E_INVALID_ARGUMENT);
    float aligned[8];
    const void *cols_misaligned[2] = {(const char *)aligned + 1, done};
    CHECK_STATUS(kr_buffer_insert(b, cols_misaligned, 2, NULL, keys), KR_E_INVALID_ARGUMENT);
    CHECK_UNTOUCHED(keys);

    /* Counts no memory holds, as a negative count converted to size_t is: refused before
       the pointers are used (a slice that long would be undefined behaviour in the library). */
    long short_by_one = 2 - 3;
    CHECK_STATUS(kr_buffer_insert_batch(b, cols, 2, (size_t)short_by_one, NULL, keys),
                 KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_buffer_insert_batch(b, cols, 2, SIZE_MAX / 2, NULL, keys), KR_E_INVALID_ARGUMENT);
    {
        double ps[1] = {1.0};
        kr_update_report huge_report;
        ARM(huge_report);
        CHECK_STATUS(kr_buffer_update_priorities(b, before.keys, ps, (size_t)short_by_one, &huge_report),
                     KR_E_INVALID_ARGUMENT);
        CHECK_UNTOUCHED(huge_report);
    }
    CHECK_UNTOUCHED(keys);

    /* Keys: out of range, never made (future generation, wrong slot, another buffer's tag,
       no tag), and stale. A key's generation word carries the buffer's tag above bit 48. */
    kr_config own;
    CHECK_OK(kr_buffer_config(b, &own));
    CHECK(own.key_tag >= 1 && own.key_tag <= 0x7fff);
    uint64_t tag = (uint64_t)own.key_tag << 48;
    CHECK((before.keys[0].generation >> 48) == own.key_tag);
    kr_update_report report;
    double p = 4.0;
    kr_key out_of_range = {CAP, tag | CAP};
    kr_key huge_index = {UINT64_MAX, tag};
    kr_key future = {1, tag | (1 + 50 * CAP)};
    kr_key wrong_slot = {1, tag | 2};
    kr_key foreign = {before.keys[0].index,
                      ((uint64_t)(own.key_tag % 0x7fff + 1) << 48) | (before.keys[0].generation & 0xffffffffffffULL)};
    kr_key untagged = {before.keys[0].index, before.keys[0].generation & 0xffffffffffffULL};
    ARM(report);
    CHECK_STATUS(kr_buffer_update_priorities(b, &foreign, &p, 1, &report), KR_E_INVALID_KEY);
    CHECK_STATUS(kr_buffer_update_priorities(b, &untagged, &p, 1, &report), KR_E_INVALID_KEY);
    CHECK_STATUS(kr_buffer_update_priorities(b, &out_of_range, &p, 1, &report), KR_E_OUT_OF_RANGE);
    CHECK_STATUS(kr_buffer_update_priorities(b, &huge_index, &p, 1, &report), KR_E_OUT_OF_RANGE);
    CHECK_STATUS(kr_buffer_update_priorities(b, &future, &p, 1, &report), KR_E_INVALID_KEY);
    CHECK_STATUS(kr_buffer_update_priorities(b, &wrong_slot, &p, 1, &report), KR_E_INVALID_KEY);
    /* A good key followed by a bad one: the good one is not applied either. */
    kr_key mixed[2] = {before.keys[0], out_of_range};
    double mixed_p[2] = {9.0, 9.0};
    CHECK_STATUS(kr_buffer_update_priorities(b, mixed, mixed_p, 2, &report), KR_E_OUT_OF_RANGE);
    CHECK_UNTOUCHED(report);
    UNCHANGED(b, &before);
    if (before.inserted > CAP) {
        /* Slot 0 was overwritten: generation 0 is stale. Dropped and counted, status OK. */
        kr_key stale = {0, tag};
        CHECK_OK(kr_buffer_update_priorities(b, &stale, &p, 1, &report));
        CHECK(report.applied == 0 && report.stale == 1);
        UNCHANGED(b, &before);
    }

    double d;
    kr_key key;
    bool present;
    ARM(d);
    ARM(key);
    ARM(present);
    CHECK_STATUS(kr_buffer_priority(b, CAP, &d), KR_E_OUT_OF_RANGE);
    CHECK_STATUS(kr_buffer_priority(b, SIZE_MAX, &d), KR_E_OUT_OF_RANGE);
    CHECK_STATUS(kr_buffer_key(b, CAP, &key, &present), KR_E_OUT_OF_RANGE);
    CHECK_UNTOUCHED(d);
    CHECK_UNTOUCHED(key);
    CHECK_UNTOUCHED(present);

    /* Sample: batch 0, bad beta, unknown mode, misaligned output-free call. */
    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(3, &rng));
    kr_key s_keys[S];
    double s_weights[S];
    float s_obs[S * 2];
    bool s_done[S];
    void *const s_cols[2] = {s_obs, s_done};
    kr_sample_out out = {s_keys, NULL, s_weights, NULL, NULL, s_cols, NULL, NULL};
    ARM(s_keys);
    ARM(s_weights);
    ARM(s_obs);
    ARM(s_done);
    CHECK_STATUS(kr_buffer_sample(b, rng, 0, 0.5, KR_SAMPLE_STRATIFIED, &out), KR_E_INVALID_ARGUMENT);
    /* One order: values (batch, beta, mode) are checked before pointers (rng, out). */
    CHECK_STATUS(kr_buffer_sample(b, NULL, 0, 0.5, KR_SAMPLE_STRATIFIED, NULL), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_buffer_sample(b, NULL, S, NAN, KR_SAMPLE_STRATIFIED, &out), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_buffer_sample(b, rng, S, 0.5, 9, NULL), KR_E_INVALID_ARGUMENT);
    CHECK(kr_status_is_retryable(KR_E_CONTENTION) && !kr_status_is_retryable(KR_E_EMPTY));
    CHECK(strcmp(kr_status_str(KR_E_DTYPE_MISMATCH), "unknown status") != 0);
    CHECK_STATUS(kr_buffer_sample(b, rng, S, NAN, KR_SAMPLE_STRATIFIED, &out), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_buffer_sample(b, rng, S, -0.5, KR_SAMPLE_STRATIFIED, &out), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_buffer_sample(b, rng, S, 0.5, 9, &out), KR_E_INVALID_ARGUMENT);
    CHECK_UNTOUCHED(s_keys);
    CHECK_UNTOUCHED(s_weights);
    CHECK_UNTOUCHED(s_obs);
    CHECK_UNTOUCHED(s_done);
    kr_rng_free(rng);
    UNCHANGED(b, &before);
}

/* Sampling with nothing to sample: an empty buffer, then every priority 0. */
static void empty_errors(uint32_t variant) {
    kr_buffer *b = new_buffer(variant, CAP);
    snapshot before;
    take(b, &before);
    CHECK(before.sample_status == KR_E_EMPTY);
    CHECK(before.len == 0 && before.inserted == 0 && before.total == 0.0);
    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(3, &rng));
    kr_key s_keys[S];
    ARM(s_keys);
    kr_sample_out out = {s_keys, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    CHECK_STATUS(kr_buffer_sample(b, rng, S, 0.5, KR_SAMPLE_STRATIFIED, &out), KR_E_EMPTY);
    CHECK_STATUS(kr_buffer_sample(b, rng, S, 0.5, KR_SAMPLE_INDEPENDENT, &out), KR_E_EMPTY);
    CHECK_UNTOUCHED(s_keys);
    UNCHANGED(b, &before);

    float obs[2] = {1, 2};
    bool done = true;
    const void *cols[2] = {obs, &done};
    double zero = 0.0;
    CHECK_OK(kr_buffer_insert(b, cols, 2, &zero, NULL));
    take(b, &before);
    CHECK(before.sample_status == KR_E_ZERO_TOTAL_PRIORITY);
    CHECK_STATUS(kr_buffer_sample(b, rng, S, 0.5, KR_SAMPLE_STRATIFIED, &out), KR_E_ZERO_TOTAL_PRIORITY);
    CHECK_UNTOUCHED(s_keys);
    UNCHANGED(b, &before);
    kr_rng_free(rng);
    kr_buffer_free(b);
}

/* The last-error message: set by a failure, per thread, truncated safely. */
static void last_error(void) {
    kr_config c = kr_config_default();
    c.variant = 7;
    kr_buffer *out = NULL;
    CHECK_STATUS(kr_buffer_new(&c, SCHEMA, 2, &out), KR_E_INVALID_ARGUMENT);
    size_t full = 0;
    CHECK_OK(kr_last_error_message(NULL, 0, &full));
    CHECK(full > 0);
    char *msg = (char *)malloc(full + 1);
    size_t written = 0;
    CHECK_OK(kr_last_error_message(msg, full + 1, &written));
    CHECK(written == full && strlen(msg) == full && strstr(msg, "variant 7") != NULL);
    char small[4];
    CHECK_OK(kr_last_error_message(small, sizeof small, &written));
    CHECK(written == full && strlen(small) == 3 && memcmp(small, msg, 3) == 0);
    char one[1] = {'x'};
    CHECK_OK(kr_last_error_message(one, 1, NULL));
    CHECK(one[0] == '\0');
    CHECK_STATUS(kr_last_error_message(NULL, 5, &written), KR_E_NULL);
    free(msg);
}

/* The staged writer's error paths: a status, outputs untouched, nothing inserted. */
static void writer_errors(kr_buffer *b) {
    snapshot before;
    take(b, &before);
    kr_writer *w = (kr_writer *)(uintptr_t)0x1;
    CHECK_STATUS(kr_writer_new(NULL, 4, &w), KR_E_NULL);
    CHECK_STATUS(kr_writer_new(b, 0, &w), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_writer_new(b, 0, NULL), KR_E_INVALID_ARGUMENT); /* values before pointers */
    CHECK_STATUS(kr_writer_new(b, 4, NULL), KR_E_NULL);
    CHECK(w == (kr_writer *)(uintptr_t)0x1);
    w = NULL;
    CHECK_OK(kr_writer_new(b, 4, &w));
    float obs[2] = {1.0f, 2.0f};
    bool done = false;
    uint8_t bad_bool = 7;
    const void *cols[2] = {obs, &done};
    const void *bad_cols[2] = {obs, &bad_bool};
    const void *null_col[2] = {NULL, &done};
    double nan = NAN;
    size_t n = 99;
    CHECK_STATUS(kr_writer_push(NULL, cols, 2, NULL, &n), KR_E_NULL);
    CHECK_STATUS(kr_writer_push(w, cols, 3, NULL, &n), KR_E_LENGTH_MISMATCH);
    CHECK_STATUS(kr_writer_push(w, cols, 2, &nan, &n), KR_E_INVALID_PRIORITY);
    CHECK_STATUS(kr_writer_push(w, bad_cols, 2, NULL, &n), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_writer_push(w, null_col, 2, NULL, &n), KR_E_NULL);
    CHECK_STATUS(kr_writer_push(w, NULL, 2, NULL, &n), KR_E_NULL);
    CHECK(n == 99);
    CHECK_STATUS(kr_writer_flush(NULL, &n), KR_E_NULL);
    CHECK_STATUS(kr_writer_staged(NULL, &n), KR_E_NULL);
    CHECK_STATUS(kr_writer_staged(w, NULL), KR_E_NULL);
    const kr_key *keys = NULL;
    CHECK_STATUS(kr_writer_keys(NULL, &keys, &n), KR_E_NULL);
    CHECK_STATUS(kr_writer_keys(w, NULL, &n), KR_E_NULL);
    CHECK_STATUS(kr_writer_keys(w, &keys, NULL), KR_E_NULL);
    CHECK(n == 99 && keys == NULL);
    CHECK_OK(kr_writer_staged(w, &n));
    CHECK(n == 0);
    CHECK_OK(kr_writer_free(w));
    check_unchanged(b, &before, __LINE__);
}

/* Checkpoints: a round trip into every variant (priorities, keys, len), then the loader's
 * error paths: NULLs, an unknown variant, a missing directory, a path that is a file, an
 * unfinished save, a damaged file, a truncated one, a save onto an existing directory;
 * each a documented status with the output handle untouched. Under valgrind too. */
static void checkpoint_paths(kr_buffer *b) {
    char parent[] = "/tmp/kr-c-ckpt-XXXXXX";
    CHECK(mkdtemp(parent) != NULL);
    char dir[256], path[512], cmd[700];
    snprintf(dir, sizeof dir, "%s/ckpt-000000000001", parent);
    const char *keys[2] = {"env_steps", "seed"};
    const uint64_t values[2] = {12345, 7};
    kr_save_options options = kr_save_options_default();
    options.keep_last = 2;
    options.n_user = 2;
    options.user_keys = keys;
    options.user_values = values;
    CHECK_OK(kr_buffer_save(b, dir, &options));
    snapshot before;
    take(b, &before);
    const uint32_t variants[3] = {KR_VARIANT_GLOBAL_LOCK, KR_VARIANT_SPLIT_LOCK, KR_VARIANT_LOCK_FREE};
    for (int v = 0; v < 3; v++) {
        kr_buffer *loaded = NULL;
        CHECK_OK(kr_buffer_load(dir, variants[v], &loaded));
        check_unchanged(loaded, &before, __LINE__);
        kr_buffer_free(loaded);
    }
    kr_checkpoint_report report;
    CHECK_OK(kr_checkpoint_verify(dir, &report));
    CHECK(report.capacity == before.capacity && report.len == before.len);
    CHECK(report.inserted == before.inserted && report.n_columns == 2);
    uint64_t value = 0;
    bool present = false;
    CHECK_OK(kr_checkpoint_user_u64(dir, "env_steps", &value, &present));
    CHECK(present && value == 12345);
    CHECK_OK(kr_checkpoint_user_u64(dir, "missing", &value, &present));
    CHECK(!present);
    char latest[512];
    size_t written = 0;
    bool found = false;
    CHECK_OK(kr_checkpoint_latest(parent, latest, sizeof latest, &written, &found));
    CHECK(found && strcmp(latest, dir) == 0 && written == strlen(dir));
    CHECK_STATUS(kr_checkpoint_latest(parent, latest, 4, &written, &found), KR_E_LENGTH_MISMATCH);
    CHECK(written == strlen(dir));

    kr_buffer *out = (kr_buffer *)&out; /* a sentinel: must stay as it is */
    kr_buffer *const sentinel = out;
    CHECK_STATUS(kr_buffer_save(NULL, dir, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_save(b, NULL, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_save(b, "", NULL), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_buffer_save(b, dir, NULL), KR_E_IO); /* exists */
    CHECK_STATUS(kr_buffer_load(NULL, KR_VARIANT_SPLIT_LOCK, &out), KR_E_NULL);
    CHECK_STATUS(kr_buffer_load(dir, KR_VARIANT_SPLIT_LOCK, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_load(dir, 99, &out), KR_E_INVALID_ARGUMENT);
    snprintf(path, sizeof path, "%s/nothing-here", parent);
    CHECK_STATUS(kr_buffer_load(path, KR_VARIANT_SPLIT_LOCK, &out), KR_E_IO);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    CHECK_STATUS(kr_buffer_load(path, KR_VARIANT_SPLIT_LOCK, &out), KR_E_IO); /* a file */
    CHECK_STATUS(kr_checkpoint_verify(dir, NULL), KR_E_NULL);
    CHECK(out == sentinel);

    /* Damage: a copy of the checkpoint per case. */
    const char *damage[4] = {
        "rm %s/COMMIT",                                                         /* unfinished */
        "printf 'x' | dd of=%s/priorities.npy bs=1 seek=200 conv=notrunc 2>/dev/null", /* flipped */
        "truncate -s -8 %s/generations.npy",                                   /* truncated */
        "printf '{}' > %s/manifest.json",                                      /* CRC */
    };
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/damaged-%d", parent, i);
        snprintf(cmd, sizeof cmd, "cp -r %s %s", dir, path);
        CHECK(system(cmd) == 0);
        snprintf(cmd, sizeof cmd, damage[i], path);
        CHECK(system(cmd) == 0);
        CHECK_STATUS(kr_buffer_load(path, KR_VARIANT_LOCK_FREE, &out), KR_E_CORRUPT);
        kr_checkpoint_report r2;
        CHECK_STATUS(kr_checkpoint_verify(path, &r2), KR_E_CORRUPT);
        CHECK(out == sentinel);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", parent);
    CHECK(system(cmd) == 0);
}

int main(void) {
    creation_errors();
    last_error();
    const uint32_t variants[3] = {KR_VARIANT_GLOBAL_LOCK, KR_VARIANT_SPLIT_LOCK, KR_VARIANT_LOCK_FREE};
    for (int v = 0; v < 3; v++) {
        empty_errors(variants[v]);
        kr_buffer *b = new_buffer(variants[v], CAP);
        float obs[2 * (CAP + 3)];
        bool done[CAP + 3];
        double priorities[CAP + 3];
        for (int i = 0; i < CAP + 3; i++) {
            obs[2 * i] = (float)i;
            obs[2 * i + 1] = (float)-i;
            done[i] = i % 3 == 0;
            priorities[i] = 0.25 + i;
        }
        const void *cols[2] = {obs, done};
        /* Half full, then past capacity (slots overwritten, stale keys exist). */
        CHECK_OK(kr_buffer_insert_batch(b, cols, 2, CAP / 2, priorities, NULL));
        null_errors(b);
        argument_errors(b);
        writer_errors(b);
        checkpoint_paths(b);
        CHECK_OK(kr_buffer_insert_batch(b, cols, 2, CAP + 3, priorities, NULL));
        argument_errors(b);
        kr_buffer_free(b);
    }
    if (check_failures == 0) {
        printf("errors: every error path, 3 variants: documented status, outputs untouched, buffer unchanged\n");
    }
    return check_failures == 0 ? 0 : 1;
}
