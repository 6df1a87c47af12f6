/* Sampling the union of shards from C, for each variant: kr_buffer_stats, kr_buffer_sample_at
 * and the kr_coordinator calls give every draw the probability and weight that one buffer
 * holding the union gives it, the rows match their keys, updates route by the keys' tags;
 * and every bad input returns its documented status with the outputs untouched. Run by
 * ffi/tests/run.sh (also under valgrind). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "kary_replay.h"

#define SHARDS 3
#define PER_SHARD 10
#define B 64
#define BETA 0.5

/* One column: the item's shard and number within it, so a sampled row names its item. */
static const kr_column SCHEMA[1] = {{"id", KR_DTYPE_I64, 2, 0, NULL}};

static double priority_of(int shard, int i) { return 0.5 + shard + 0.25 * i; }

static kr_buffer *new_shard(uint32_t variant, int shard, int items) {
    kr_config config = kr_config_default();
    config.capacity = 16;
    config.fanout = 4;
    config.variant = variant;
    config.alpha = 1.0;
    config.key_tag = 100 + (uint32_t)shard;
    kr_buffer *b = NULL;
    CHECK_OK(kr_buffer_new(&config, SCHEMA, 1, &b));
    for (int i = 0; i < items; i++) {
        int64_t id[2] = {shard, i};
        const void *cols[1] = {id};
        double p = priority_of(shard, i);
        CHECK_OK(kr_buffer_insert(b, cols, 1, &p, NULL));
    }
    return b;
}

/* Plan, sample each shard at its fractions, finish: check each draw against the union. */
static void union_sample(uint32_t variant) {
    kr_buffer *shards[SHARDS];
    kr_stats stats[SHARDS];
    double union_total = 0.0, min_positive = INFINITY;
    for (int k = 0; k < SHARDS; k++) {
        shards[k] = new_shard(variant, k, PER_SHARD);
        CHECK_OK(kr_buffer_stats(shards[k], &stats[k]));
        CHECK(stats[k].len == PER_SHARD && stats[k].capacity == 16 && stats[k].inserted == PER_SHARD);
        double total = 0.0;
        for (int i = 0; i < PER_SHARD; i++) total += priority_of(k, i);
        CHECK(fabs(stats[k].total - total) < 1e-12);
        CHECK(stats[k].min_positive == priority_of(k, 0));
        CHECK(stats[k].running_max == priority_of(k, PER_SHARD - 1));
        union_total += total;
        min_positive = fmin(min_positive, priority_of(k, 0));
    }

    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(11, &rng));
    kr_coordinator *c = NULL;
    CHECK_OK(kr_coordinator_new(&c));
    /* A union samples with replacement only. */
    CHECK_STATUS(kr_coordinator_plan(c, stats, SHARDS, B, KR_SAMPLE_WITHOUT_REPLACEMENT, rng), KR_E_INVALID_ARGUMENT);
    CHECK_OK(kr_coordinator_plan(c, stats, SHARDS, B, KR_SAMPLE_STRATIFIED, rng));

    /* Each shard's part, its rows checked against its keys; the replies in shard order. */
    int64_t ids[B * 2];
    kr_key keys[B];
    double priorities[B], weights_in_shard[B];
    kr_reply replies[SHARDS];
    size_t at = 0;
    for (int k = 0; k < SHARDS; k++) {
        const double *fractions = NULL;
        size_t n = 0;
        CHECK_OK(kr_coordinator_fractions(c, (size_t)k, &fractions, &n));
        CHECK(n > 0); /* 64 stratified draws over three similar totals reach every shard */
        void *const cols[1] = {&ids[2 * at]};
        kr_sample_out out = {0};
        out.keys = &keys[at];
        out.priorities = &priorities[at];
        out.weights = &weights_in_shard[at];
        out.columns = cols;
        kr_stats descent;
        CHECK_OK(kr_buffer_sample_at(shards[k], rng, fractions, n, &out, &descent));
        CHECK(descent.total == stats[k].total && descent.len == PER_SHARD);
        for (size_t j = at; j < at + n; j++) {
            CHECK(kr_key_tag(keys[j]) == 100 + (uint64_t)k);
            CHECK(ids[2 * j] == k && ids[2 * j + 1] == (int64_t)keys[j].index);
            CHECK(priorities[j] == priority_of(k, (int)keys[j].index));
            CHECK(weights_in_shard[j] == 1.0);
        }
        replies[k] = (kr_reply){&priorities[at], n, descent.total};
        at += n;
    }
    CHECK(at == B);

    double probabilities[B], weights[B];
    float weights_f32[B];
    CHECK_OK(kr_coordinator_finish(c, replies, SHARDS, BETA, KR_WEIGHTS_GLOBAL, B, probabilities, weights,
                                   weights_f32));
    for (size_t j = 0; j < B; j++) {
        /* As one buffer of the union: P = p / T, w = (P / P_min)^-beta. */
        double p = priorities[j] / union_total;
        CHECK(fabs(probabilities[j] - p) < 1e-12);
        double w = pow(p / (min_positive / union_total), -BETA);
        CHECK(fabs(weights[j] - w) < 1e-12);
        CHECK(weights_f32[j] == (float)weights[j]);
    }

    /* Updates route by tag: a shard takes its own keys and refuses another shard's. */
    kr_update_report report;
    double one = 1.0;
    size_t k0 = (size_t)(ids[0]);
    CHECK_OK(kr_buffer_update_priorities(shards[k0], &keys[0], &one, 1, &report));
    CHECK(report.applied == 1);
    CHECK_STATUS(kr_buffer_update_priorities(shards[(k0 + 1) % SHARDS], &keys[0], &one, 1, &report),
                 KR_E_INVALID_KEY);

    /* A shard with no items gets no draw, and its fractions are empty. */
    kr_buffer *empty = new_shard(variant, SHARDS, 0);
    kr_stats with_empty[2];
    CHECK_OK(kr_buffer_stats(empty, &with_empty[0]));
    CHECK(with_empty[0].len == 0 && with_empty[0].total == 0.0 && with_empty[0].min_positive == 0.0);
    with_empty[1] = stats[0];
    CHECK_OK(kr_coordinator_plan(c, with_empty, 2, 8, KR_SAMPLE_INDEPENDENT, rng));
    const double *f = NULL;
    size_t n = 99;
    CHECK_OK(kr_coordinator_fractions(c, 0, &f, &n));
    CHECK(n == 0);
    CHECK_OK(kr_coordinator_fractions(c, 1, &f, &n));
    CHECK(n == 8);

    kr_buffer_free(empty);
    kr_coordinator_free(c);
    kr_rng_free(rng);
    for (int k = 0; k < SHARDS; k++) kr_buffer_free(shards[k]);
}


static void errors(uint32_t variant) {
    kr_buffer *b = new_shard(variant, 0, PER_SHARD);
    kr_buffer *empty = new_shard(variant, 1, 0);
    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(3, &rng));

    /* kr_buffer_stats */
    kr_stats s;
    ARM(s);
    CHECK_STATUS(kr_buffer_stats(NULL, &s), KR_E_NULL);
    CHECK_STATUS(kr_buffer_stats(b, NULL), KR_E_NULL);
    CHECK_UNTOUCHED(s);

    /* kr_buffer_sample_at, in the documented order of its checks. */
    double good[2] = {0.1, 0.9};
    kr_key keys[2];
    double pr[2];
    kr_sample_out out = {0};
    out.keys = keys;
    out.priorities = pr;
    ARM(keys);
    ARM(pr);
    ARM(s);
    CHECK_STATUS(kr_buffer_sample_at(NULL, rng, good, 2, &out, &s), KR_E_NULL);
    CHECK_STATUS(kr_buffer_sample_at(b, rng, NULL, 2, &out, &s), KR_E_NULL);
    CHECK_STATUS(kr_buffer_sample_at(b, rng, good, 0, &out, &s), KR_E_INVALID_ARGUMENT);
    double bad[5] = {1.0, -0.1, NAN, INFINITY, 0.5};
    for (size_t i = 0; i < 4; i++) {
        CHECK_STATUS(kr_buffer_sample_at(b, rng, &bad[i], 1, &out, &s), KR_E_INVALID_ARGUMENT);
    }
    CHECK_STATUS(kr_buffer_sample_at(b, rng, (const double *)((char *)good + 1), 1, &out, &s),
                 KR_E_INVALID_ARGUMENT); /* misaligned */
    CHECK_STATUS(kr_buffer_sample_at(b, NULL, good, 2, &out, &s), KR_E_NULL);
    CHECK_STATUS(kr_buffer_sample_at(b, rng, good, 2, NULL, &s), KR_E_NULL);
    void *const null_col[1] = {NULL};
    kr_sample_out with_null = out;
    with_null.columns = null_col;
    CHECK_STATUS(kr_buffer_sample_at(b, rng, good, 2, &with_null, &s), KR_E_NULL);
    CHECK_STATUS(kr_buffer_sample_at(b, rng, good, 2, &out, (kr_stats *)((char *)&s + 1)),
                 KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_buffer_sample_at(empty, rng, good, 2, &out, &s), KR_E_EMPTY);
    CHECK_UNTOUCHED(keys);
    CHECK_UNTOUCHED(pr);
    CHECK_UNTOUCHED(s);
    /* Stats may be NULL. */
    CHECK_OK(kr_buffer_sample_at(b, rng, good, 2, &out, NULL));

    /* The coordinator. */
    CHECK_STATUS(kr_coordinator_new(NULL), KR_E_NULL);
    kr_coordinator *c = NULL;
    CHECK_OK(kr_coordinator_new(&c));
    kr_stats st[2];
    CHECK_OK(kr_buffer_stats(b, &st[0]));
    CHECK_OK(kr_buffer_stats(empty, &st[1]));
    CHECK_STATUS(kr_coordinator_plan(NULL, st, 2, 4, KR_SAMPLE_STRATIFIED, rng), KR_E_NULL);
    CHECK_STATUS(kr_coordinator_plan(c, NULL, 2, 4, KR_SAMPLE_STRATIFIED, rng), KR_E_NULL);
    CHECK_STATUS(kr_coordinator_plan(c, st, 2, 4, 9, rng), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_coordinator_plan(c, st, 2, 4, KR_SAMPLE_STRATIFIED, NULL), KR_E_NULL);
    CHECK_STATUS(kr_coordinator_plan(c, st, 2, 0, KR_SAMPLE_STRATIFIED, rng), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_coordinator_plan(c, &st[1], 1, 4, KR_SAMPLE_STRATIFIED, rng), KR_E_EMPTY);
    CHECK_STATUS(kr_coordinator_plan(c, st, 0, 4, KR_SAMPLE_STRATIFIED, rng), KR_E_EMPTY);
    kr_stats odd[1] = {st[0]};
    odd[0].total = 0.0;
    CHECK_STATUS(kr_coordinator_plan(c, odd, 1, 4, KR_SAMPLE_STRATIFIED, rng), KR_E_ZERO_TOTAL_PRIORITY);
    odd[0].total = -1.0;
    CHECK_STATUS(kr_coordinator_plan(c, odd, 1, 4, KR_SAMPLE_STRATIFIED, rng), KR_E_INVALID_ARGUMENT);
    odd[0].total = NAN;
    CHECK_STATUS(kr_coordinator_plan(c, odd, 1, 4, KR_SAMPLE_STRATIFIED, rng), KR_E_INVALID_ARGUMENT);
    odd[0] = st[0];
    odd[0].min_positive = -1.0;
    CHECK_STATUS(kr_coordinator_plan(c, odd, 1, 4, KR_SAMPLE_STRATIFIED, rng), KR_E_INVALID_ARGUMENT);
    odd[0].min_positive = NAN;
    CHECK_STATUS(kr_coordinator_plan(c, odd, 1, 4, KR_SAMPLE_STRATIFIED, rng), KR_E_INVALID_ARGUMENT);

    /* After a failed plan the plan is empty: no shard to ask for. */
    const double *f = NULL;
    size_t n = 0;
    CHECK_STATUS(kr_coordinator_fractions(c, 0, &f, &n), KR_E_OUT_OF_RANGE);

    CHECK_OK(kr_coordinator_plan(c, st, 2, 4, KR_SAMPLE_STRATIFIED, rng));
    ARM(f);
    ARM(n);
    CHECK_STATUS(kr_coordinator_fractions(NULL, 0, &f, &n), KR_E_NULL);
    CHECK_STATUS(kr_coordinator_fractions(c, 0, NULL, &n), KR_E_NULL);
    CHECK_STATUS(kr_coordinator_fractions(c, 0, &f, NULL), KR_E_NULL);
    CHECK_STATUS(kr_coordinator_fractions(c, 2, &f, &n), KR_E_OUT_OF_RANGE);
    CHECK_UNTOUCHED(f);
    CHECK_UNTOUCHED(n);
    CHECK_OK(kr_coordinator_fractions(c, 0, &f, &n));
    CHECK(n == 4);
    double part[4];
    memcpy(part, f, sizeof part);
    double sampled[4];
    kr_sample_out pout = {0};
    pout.priorities = sampled;
    kr_stats at;
    CHECK_OK(kr_buffer_sample_at(b, rng, part, 4, &pout, &at));

    /* kr_coordinator_finish: every fault leaves the outputs as they were. */
    kr_reply replies[2] = {{sampled, 4, at.total}, {NULL, 0, 0.0}};
    double probabilities[4], weights[4];
    float wf[4];
    ARM(probabilities);
    ARM(weights);
    ARM(wf);
    CHECK_STATUS(kr_coordinator_finish(NULL, replies, 2, 0.5, KR_WEIGHTS_GLOBAL, 4, probabilities, weights, wf),
                 KR_E_NULL);
    CHECK_STATUS(kr_coordinator_finish(c, NULL, 2, 0.5, KR_WEIGHTS_GLOBAL, 4, probabilities, weights, wf),
                 KR_E_NULL);
    CHECK_STATUS(kr_coordinator_finish(c, replies, 2, 0.5, 9, 4, probabilities, weights, wf),
                 KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_coordinator_finish(c, replies, 1, 0.5, KR_WEIGHTS_GLOBAL, 4, probabilities, weights, wf),
                 KR_E_LENGTH_MISMATCH);
    CHECK_STATUS(kr_coordinator_finish(c, replies, 2, 0.5, KR_WEIGHTS_GLOBAL, 3, probabilities, weights, wf),
                 KR_E_LENGTH_MISMATCH);
    CHECK_STATUS(kr_coordinator_finish(c, replies, 2, -1.0, KR_WEIGHTS_GLOBAL, 4, probabilities, weights, wf),
                 KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_coordinator_finish(c, replies, 2, NAN, KR_WEIGHTS_GLOBAL, 4, probabilities, weights, wf),
                 KR_E_INVALID_ARGUMENT);
    kr_reply short_reply[2] = {{sampled, 3, at.total}, {NULL, 0, 0.0}};
    CHECK_STATUS(kr_coordinator_finish(c, short_reply, 2, 0.5, KR_WEIGHTS_GLOBAL, 4, probabilities, weights, wf),
                 KR_E_LENGTH_MISMATCH);
    kr_reply null_reply[2] = {{NULL, 4, at.total}, {NULL, 0, 0.0}};
    CHECK_STATUS(kr_coordinator_finish(c, null_reply, 2, 0.5, KR_WEIGHTS_GLOBAL, 4, probabilities, weights, wf),
                 KR_E_NULL);
    kr_reply zero_total[2] = {{sampled, 4, 0.0}, {NULL, 0, 0.0}};
    CHECK_STATUS(kr_coordinator_finish(c, zero_total, 2, 0.5, KR_WEIGHTS_GLOBAL, 4, probabilities, weights, wf),
                 KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_coordinator_finish(c, replies, 2, 0.5, KR_WEIGHTS_GLOBAL, 4,
                                       (double *)((char *)probabilities + 1), weights, wf),
                 KR_E_INVALID_ARGUMENT);
    CHECK_UNTOUCHED(probabilities);
    CHECK_UNTOUCHED(weights);
    CHECK_UNTOUCHED(wf);
    /* Outputs may be NULL; with the batch norm the largest weight is 1. */
    CHECK_OK(kr_coordinator_finish(c, replies, 2, 0.5, KR_WEIGHTS_BATCH, 4, NULL, weights, NULL));
    double largest = 0.0;
    for (int j = 0; j < 4; j++) largest = fmax(largest, weights[j]);
    CHECK(largest == 1.0);

    kr_coordinator_free(c);
    kr_coordinator_free(NULL);
    kr_rng_free(rng);
    kr_buffer_free(empty);
    kr_buffer_free(b);
}

int main(void) {
    const uint32_t variants[3] = {KR_VARIANT_GLOBAL_LOCK, KR_VARIANT_SPLIT_LOCK, KR_VARIANT_LOCK_FREE};
    for (int v = 0; v < 3; v++) {
        union_sample(variants[v]);
        errors(variants[v]);
    }
    if (check_failures == 0) {
        printf("shards: the union's probabilities and weights, routing by tag, every error path, 3 variants: ok\n");
    }
    return check_failures == 0 ? 0 : 1;
}
