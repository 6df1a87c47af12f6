/* The sequence calls from C: a lane's windows with a stack, next observations and n-step
 * returns, checked value by value; every error path leaves the outputs untouched; a save
 * and a load that sample alike; a rate limit counted in windows (the *_wait calls, close,
 * the counts, a checkpoint that keeps them). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kary_replay.h"

enum { W = 3, K = 2, B = 64 };

/* obs: float x 2 = (step, 0); action: int64 = step; reward: float. */
static kr_status push(kr_lane *lane, int64_t step, float reward) {
    float obs[2] = {(float)step, 0.0f};
    const void *cols[3] = {obs, &step, &reward};
    return kr_lane_push(lane, cols, 3);
}

/* A rate limit of 2 sampled windows per window from 4 windows on, within +-8: windows of 4
 * steps every 2 (an episode's end completes up to 2: the insert batch worked out). */
static void rate_limited(void) {
    kr_column columns[3] = {
        {"obs", KR_DTYPE_F32, 2, 0, NULL},
        {"action", KR_DTYPE_I64, 1, 0, NULL},
        {"reward", KR_DTYPE_F32, 1, 0, NULL},
    };
    const char *next_of[1] = {"obs"};
    kr_seq_config config = kr_seq_config_default();
    config.steps_per_lane = 64;
    config.window = 4;
    config.period = 2;
    config.next_of = next_of;
    config.n_next_of = 1;
    CHECK(config.rate.kind == KR_RATE_NONE && config.rate.insert_batch == 0);
    config.rate.kind = KR_RATE_SAMPLE_TO_INSERT_RATIO;
    config.rate.samples_per_insert = 2.0;
    config.rate.min_size = 4;
    config.rate.error_buffer = 8.0;
    config.rate.sample_batch = 4;
    kr_seq *seq = NULL;
    kr_seq_config bad = config;
    bad.rate.insert_batch = 1; /* an episode's end completes 2 */
    CHECK_STATUS(kr_seq_new(&bad, columns, 3, &seq), KR_E_INVALID_ARGUMENT);
    bad = config;
    bad.rate.kind = 99;
    CHECK_STATUS(kr_seq_new(&bad, columns, 3, &seq), KR_E_INVALID_ARGUMENT);
    CHECK(seq == NULL);
    CHECK_OK(kr_seq_new(&config, columns, 3, &seq));
    kr_seq_config got = {0};
    CHECK_OK(kr_seq_config_of(seq, &got));
    CHECK(got.rate.kind == KR_RATE_SAMPLE_TO_INSERT_RATIO && got.rate.insert_batch == 2);
    CHECK(got.rate.sample_batch == 4 && got.rate.error_buffer == 8.0 && got.rate.min_size == 4);

    kr_lane *lane = NULL;
    CHECK_OK(kr_seq_lane(seq, 0, &lane));
    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(5, &rng));
    static kr_key keys[4];
    kr_seq_sample_out out = {0};
    out.keys = keys;
    /* Nothing to sample yet: refused at once, or after the timeout; nothing counted. */
    CHECK_STATUS(kr_seq_sample_wait(seq, rng, 4, 0.4, KR_SAMPLE_STRATIFIED, 0.0, &out), KR_E_RATE_LIMITED);
    CHECK_STATUS(kr_seq_sample_wait(seq, rng, 4, 0.4, KR_SAMPLE_STRATIFIED, 0.02, &out), KR_E_TIMEOUT);
    CHECK_STATUS(kr_seq_sample_wait(seq, rng, 4, 0.4, KR_SAMPLE_STRATIFIED, NAN, &out), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_seq_sample_wait(seq, rng, 5, 0.4, KR_SAMPLE_STRATIFIED, 0.0, &out), KR_E_INVALID_ARGUMENT);

    /* With no sample, inserts stop at 8 windows: step 18 completes the 8th, step 20 waits. */
    int64_t step = 0;
    float obs[2] = {0.0f, 0.0f}, reward = 1.0f;
    const void *cols[3] = {obs, &step, &reward};
    kr_status s = KR_OK;
    for (step = 0; step < 64; step++) {
        obs[0] = (float)step;
        s = kr_lane_push_wait(lane, cols, 3, 0.0);
        if (s != KR_OK) break;
    }
    CHECK(s == KR_E_RATE_LIMITED && step == 20);
    CHECK(kr_status_is_retryable(s));
    CHECK_STATUS(kr_lane_push_wait(lane, cols, 3, 0.02), KR_E_TIMEOUT);
    CHECK_STATUS(kr_lane_push_wait(lane, cols, 3, NAN), KR_E_INVALID_ARGUMENT);
    uint64_t position = 0;
    CHECK_OK(kr_lane_position(lane, &position));
    CHECK(position == 20);
    kr_rate_stats stats = {0};
    CHECK_OK(kr_seq_rate_stats(seq, &stats));
    CHECK(stats.limited && stats.inserts == 8 && stats.samples == 0 && stats.open);
    CHECK_STATUS(kr_seq_rate_stats(seq, NULL), KR_E_NULL);

    /* Samples make room: 2 windows sampled, one more window fits. */
    CHECK_OK(kr_seq_sample_wait(seq, rng, 2, 0.4, KR_SAMPLE_STRATIFIED, 0.0, &out));
    CHECK_OK(kr_lane_push_wait(lane, cols, 3, 0.0));
    CHECK_OK(kr_seq_rate_stats(seq, &stats));
    CHECK(stats.inserts == 9 && stats.samples == 2 && stats.diff == 16.0);
    size_t len = 0;
    CHECK_OK(kr_seq_len(seq, &len));
    CHECK(len == 9);

    /* A checkpoint keeps the limit and the counts. */
    char parent[] = "/tmp/kr-seq-rate-XXXXXX";
    CHECK(mkdtemp(parent) != NULL);
    char dir[64];
    snprintf(dir, sizeof dir, "%s/ckpt", parent);
    CHECK_OK(kr_seq_save(seq, dir, NULL));
    kr_seq *copy = NULL;
    CHECK_OK(kr_seq_load(dir, &copy));
    kr_rate_stats copied = {0};
    CHECK_OK(kr_seq_rate_stats(copy, &copied));
    CHECK(copied.limited && copied.inserts == 9 && copied.samples == 2);
    kr_seq_free(copy);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", parent);
    CHECK(system(cmd) == 0);

    /* Close: every lane call and sample is refused from then on. */
    CHECK_OK(kr_seq_close(seq));
    CHECK_STATUS(kr_lane_push_wait(lane, cols, 3, -1.0), KR_E_CLOSED);
    CHECK_STATUS(kr_lane_push(lane, cols, 3), KR_E_CLOSED);
    CHECK_STATUS(kr_seq_sample(seq, rng, 1, 0.4, KR_SAMPLE_STRATIFIED, &out), KR_E_CLOSED);
    CHECK_STATUS(kr_seq_close(NULL), KR_E_NULL);
    const void *final_cols[1] = {obs};
    CHECK_STATUS(kr_lane_end_episode_wait(lane, final_cols, 1, false, 0.0), KR_E_CLOSED);
    CHECK_STATUS(kr_lane_end_episode_wait(NULL, final_cols, 1, false, 0.0), KR_E_NULL);
    kr_lane_free(lane);
    kr_rng_free(rng);
    kr_seq_free(seq);
}

int main(void) {
    rate_limited();
    size_t dims_obs[1] = {2};
    kr_column columns[3] = {
        {"obs", KR_DTYPE_F32, 2, 1, dims_obs},
        {"action", KR_DTYPE_I64, 1, 0, NULL},
        {"reward", KR_DTYPE_F32, 1, 0, NULL},
    };
    const char *stack_names[1] = {"obs"};
    size_t stack_frames[1] = {K};
    const char *next_of[1] = {"obs"};
    kr_seq_config config = kr_seq_config_default();
    config.lanes = 2;
    config.steps_per_lane = 32;
    config.window = W;
    config.nstep = 2;
    config.gamma = 0.5;
    config.reward = "reward";
    config.stack_columns = stack_names;
    config.stack_frames = stack_frames;
    config.n_stack = 1;
    config.next_of = next_of;
    config.n_next_of = 1;

    /* Bad configurations: nothing is made. */
    kr_seq *seq = NULL;
    kr_seq_config bad = config;
    bad.period = 0;
    CHECK_STATUS(kr_seq_new(&bad, columns, 3, &seq), KR_E_INVALID_ARGUMENT);
    bad = config;
    bad.window = 31;
    CHECK_STATUS(kr_seq_new(&bad, columns, 3, &seq), KR_E_INVALID_ARGUMENT);
    bad = config;
    bad.partial = 7;
    CHECK_STATUS(kr_seq_new(&bad, columns, 3, &seq), KR_E_INVALID_ARGUMENT);
    bad = config;
    bad.reward = NULL;
    CHECK_STATUS(kr_seq_new(&bad, columns, 3, &seq), KR_E_NULL);
    bad = config;
    const char *nope[1] = {"frame"};
    bad.stack_columns = nope;
    CHECK_STATUS(kr_seq_new(&bad, columns, 3, &seq), KR_E_INVALID_ARGUMENT);
    bad = config;
    bad.reward = "action";
    CHECK_STATUS(kr_seq_new(&bad, columns, 3, &seq), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_seq_new(NULL, columns, 3, &seq), KR_E_NULL);
    CHECK_STATUS(kr_seq_new(&config, columns, 3, NULL), KR_E_NULL);
    CHECK(seq == NULL);
    CHECK_OK(kr_seq_new(&config, columns, 3, &seq));

    kr_lane *lane = NULL, *second = NULL;
    CHECK_STATUS(kr_seq_lane(seq, 2, &lane), KR_E_OUT_OF_RANGE);
    CHECK_OK(kr_seq_lane(seq, 0, &lane));
    CHECK_STATUS(kr_seq_lane(seq, 0, &second), KR_E_INVALID_ARGUMENT);
    CHECK(second == NULL);

    /* Bad steps change nothing. */
    float final_obs[2] = {-1.0f, 0.0f};
    const void *final_cols[1] = {final_obs};
    CHECK_STATUS(kr_lane_end_episode(lane, final_cols, 1, false), KR_E_INVALID_ARGUMENT);
    const void *two[2] = {final_obs, final_obs};
    CHECK_STATUS(kr_lane_push(lane, two, 2), KR_E_LENGTH_MISMATCH);
    CHECK_STATUS(kr_lane_push(NULL, two, 3), KR_E_NULL);
    CHECK_STATUS(kr_lane_push(lane, NULL, 3), KR_E_NULL);
    uint64_t position = 99;
    CHECK_OK(kr_lane_position(lane, &position));
    CHECK(position == 0);

    /* An episode of 5 steps with rewards 1, 2, 4, 8, 16, terminated; then 4 more steps. */
    for (int t = 0; t < 5; t++) CHECK_OK(push(lane, t, (float)(1 << t)));
    CHECK_STATUS(kr_lane_end_episode(lane, final_cols, 0, false), KR_E_LENGTH_MISMATCH);
    CHECK_OK(kr_lane_end_episode(lane, final_cols, 1, false));
    for (int t = 6; t < 10; t++) CHECK_OK(push(lane, t, 0.0f));
    size_t len = 0;
    CHECK_OK(kr_seq_len(seq, &len));
    CHECK(len == 5 + 1); /* 0..4, and 6 (its row 9 is written) */

    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(3, &rng));
    static float obs_out[B * W * K * 2], next_out[B * K * 2], returns[B], discounts[B];
    static int64_t action_out[B * W];
    static float reward_out[B * W];
    static kr_key keys[B];
    static double weights[B];
    static uint64_t lengths[B];
    static bool mask[B * W];
    void *dest[3] = {obs_out, action_out, reward_out};
    void *next_dest[1] = {next_out};
    kr_seq_sample_out out = {0};
    out.keys = keys;
    out.weights = weights;
    out.lengths = lengths;
    out.mask = mask;
    out.returns = returns;
    out.discounts = discounts;
    out.columns = dest;
    out.next = next_dest;

    /* Refusals first: nothing is written. */
    ARM(keys);
    ARM(obs_out);
    CHECK_STATUS(kr_seq_sample(seq, rng, 0, 0.4, KR_SAMPLE_STRATIFIED, &out), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_seq_sample(seq, NULL, B, 0.4, KR_SAMPLE_STRATIFIED, &out), KR_E_NULL);
    CHECK_STATUS(kr_seq_sample(seq, rng, B, 0.4, 9, &out), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_seq_sample(seq, rng, B, NAN, KR_SAMPLE_STRATIFIED, &out), KR_E_INVALID_ARGUMENT);
    kr_seq_sample_out misaligned = out;
    misaligned.weights = (double *)((char *)weights + 1);
    CHECK_STATUS(kr_seq_sample(seq, rng, B, 0.4, KR_SAMPLE_STRATIFIED, &misaligned), KR_E_INVALID_ARGUMENT);
    void *null_dest[3] = {obs_out, NULL, reward_out};
    kr_seq_sample_out holes = out;
    holes.columns = null_dest;
    CHECK_STATUS(kr_seq_sample(seq, rng, B, 0.4, KR_SAMPLE_STRATIFIED, &holes), KR_E_NULL);
    CHECK_UNTOUCHED(keys);
    CHECK_UNTOUCHED(obs_out);

    /* Without replacement: the 6 windows once each; a seventh is more than there are. */
    for (int round = 0; round < 10; round++) {
        CHECK_OK(kr_seq_sample(seq, rng, 6, 0.4, KR_SAMPLE_WITHOUT_REPLACEMENT, &out));
        for (int b = 0; b < 6; b++) {
            for (int c = 0; c < b; c++) CHECK(keys[b].index != keys[c].index);
        }
    }
    CHECK_STATUS(kr_seq_sample(seq, rng, 7, 0.4, KR_SAMPLE_WITHOUT_REPLACEMENT, &out), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_seq_sample(seq, rng, 2, 0.4, KR_SAMPLE_UNIFORM, &out), KR_E_INVALID_ARGUMENT);

    CHECK_OK(kr_seq_sample(seq, rng, B, 0.4, KR_SAMPLE_STRATIFIED, &out));
    for (int b = 0; b < B; b++) {
        size_t l = 9;
        uint64_t start = 99;
        CHECK_OK(kr_seq_window_of(seq, keys[b], &l, &start));
        CHECK(l == 0);
        CHECK(start <= 4 || start == 6);
        uint64_t last = start <= 4 ? 4 : 1000;
        uint64_t length = start + W - 1 <= last ? W : last + 1 - start;
        CHECK(lengths[b] == length);
        for (int i = 0; i < W; i++) {
            CHECK(mask[b * W + i] == ((uint64_t)i < length));
            CHECK(action_out[b * W + i] == ((uint64_t)i < length ? (int64_t)(start + i) : 0));
            for (int j = 0; j < K; j++) {
                /* The frames ending at the step, the episode's first repeated before it. */
                int64_t first = start <= 4 ? 0 : 6;
                int64_t want = (int64_t)start + i + j - (K - 1);
                if (want < first) want = first;
                float got = obs_out[((b * W + i) * K + j) * 2];
                CHECK((uint64_t)i < length ? got == (float)want : got == 0.0f);
            }
        }
        /* n = 2: the next observation two steps on, or the final row (-1) at step 5. */
        uint64_t m = length < 2 ? length : 2;
        float next_last = next_out[(b * K + K - 1) * 2];
        CHECK(next_last == (start + m == 5 ? -1.0f : (float)(start + m)));
        if (start <= 4) {
            double r0 = (double)(1 << start), r1 = start + 1 <= 4 ? (double)(1 << (start + 1)) : 0.0;
            CHECK(fabs(returns[b] - (r0 + 0.5 * r1)) < 1e-6);
            CHECK(discounts[b] == (start + m == 5 ? 0.0f : 0.25f));
        } else {
            CHECK(returns[b] == 0.0f && discounts[b] == 0.25f);
        }
    }

    /* Updates: a bad priority changes nothing; a good one applies. */
    double ps[B];
    for (int b = 0; b < B; b++) ps[b] = 1.0 + b;
    ps[3] = NAN;
    kr_update_report report = {0};
    CHECK_STATUS(kr_seq_update_priorities(seq, keys, ps, B, &report), KR_E_INVALID_PRIORITY);
    ps[3] = 2.0;
    CHECK_OK(kr_seq_update_priorities(seq, keys, ps, B, &report));
    CHECK(report.applied == B && report.stale == 0);
    kr_key bogus = keys[0];
    bogus.generation ^= (uint64_t)1 << 50;
    CHECK_STATUS(kr_seq_update_priorities(seq, &bogus, ps, 1, &report), KR_E_INVALID_KEY);
    CHECK_STATUS(kr_seq_update_priorities(seq, NULL, ps, 1, &report), KR_E_NULL);
    /* Read back by key (the stored priorities: alpha is the default 0.6). */
    static double by_key[B];
    size_t stale_windows = 99;
    CHECK_OK(kr_seq_priorities(seq, keys, B, by_key, &stale_windows));
    CHECK(stale_windows == 0);
    for (int b = 0; b < B; b++) {
        int last = b; /* a window sampled twice has the priority of its last entry */
        for (int c = b + 1; c < B; c++) {
            if (keys[c].index == keys[b].index) last = c;
        }
        CHECK(fabs(by_key[b] - pow(ps[last], 0.6)) < 1e-12);
    }
    CHECK_STATUS(kr_seq_priorities(seq, &bogus, 1, by_key, NULL), KR_E_INVALID_KEY);

    /* A save while the lane's writer is held, a load, and the same sample from both. */
    char parent[] = "/tmp/kr-seq-ckpt-XXXXXX";
    CHECK(mkdtemp(parent) != NULL);
    char dir[64], flat_dir[64];
    snprintf(dir, sizeof dir, "%s/ckpt", parent);
    snprintf(flat_dir, sizeof flat_dir, "%s/flat", parent);
    const char *user_keys[1] = {"env_steps"};
    uint64_t user_values[1] = {10};
    kr_save_options options = kr_save_options_default();
    options.n_user = 1;
    options.user_keys = user_keys;
    options.user_values = user_values;
    CHECK_STATUS(kr_seq_save(NULL, dir, NULL), KR_E_NULL);
    CHECK_STATUS(kr_seq_save(seq, NULL, NULL), KR_E_NULL);
    CHECK_STATUS(kr_seq_save(seq, "", NULL), KR_E_INVALID_ARGUMENT);
    CHECK_OK(kr_seq_save(seq, dir, &options));
    CHECK_STATUS(kr_seq_save(seq, dir, NULL), KR_E_IO); /* exists */
    uint64_t env_steps = 0;
    bool present = false;
    CHECK_OK(kr_checkpoint_user_u64(dir, "env_steps", &env_steps, &present));
    CHECK(present && env_steps == 10);
    kr_seq *copy = NULL;
    CHECK_STATUS(kr_seq_load(NULL, &copy), KR_E_NULL);
    CHECK_STATUS(kr_seq_load(dir, NULL), KR_E_NULL);
    CHECK_STATUS(kr_seq_load(flat_dir, &copy), KR_E_IO); /* no such directory */
    CHECK(copy == NULL);
    CHECK_OK(kr_seq_load(dir, &copy));
    /* The loaded buffer describes itself: its schema and configuration are the saved ones. */
    size_t n_columns = 0;
    CHECK_OK(kr_seq_n_columns(copy, &n_columns));
    CHECK(n_columns == 3);
    kr_column got_column = {0};
    CHECK_OK(kr_seq_column(copy, 0, &got_column));
    CHECK(strcmp(got_column.name, "obs") == 0 && got_column.dtype == KR_DTYPE_F32 && got_column.shape == 2);
    CHECK(got_column.ndim == 1 && got_column.dims[0] == 2);
    CHECK_OK(kr_seq_column(copy, 1, &got_column));
    CHECK(strcmp(got_column.name, "action") == 0 && got_column.ndim == 1 && got_column.dims[0] == 1);
    CHECK_STATUS(kr_seq_column(copy, 3, &got_column), KR_E_OUT_OF_RANGE);
    CHECK_STATUS(kr_seq_column(copy, 0, NULL), KR_E_NULL);
    CHECK_STATUS(kr_seq_n_columns(NULL, &n_columns), KR_E_NULL);
    kr_seq_config got = {0};
    CHECK_OK(kr_seq_config_of(copy, &got));
    CHECK(got.lanes == 2 && got.steps_per_lane == 32 && got.window == W && got.period == 1);
    CHECK(got.nstep == 2 && got.gamma == 0.5 && strcmp(got.reward, "reward") == 0);
    CHECK(got.n_stack == 1 && strcmp(got.stack_columns[0], "obs") == 0 && got.stack_frames[0] == K);
    CHECK(got.n_next_of == 1 && strcmp(got.next_of[0], "obs") == 0);
    CHECK(got.partial == KR_PARTIAL_KEEP && got.padding == KR_PADDING_REPEAT && got.fanout == 8);
    kr_seq_config original = {0};
    CHECK_OK(kr_seq_config_of(seq, &original));
    CHECK(got.key_tag == original.key_tag && got.key_tag != 0);
    CHECK_STATUS(kr_seq_config_of(copy, NULL), KR_E_NULL);
    size_t copy_len = 0;
    CHECK_OK(kr_seq_len(copy, &copy_len));
    CHECK_OK(kr_seq_len(seq, &len));
    CHECK(copy_len == len);
    {
        static kr_key keys_a[B], keys_b[B];
        static float returns_a[B], returns_b[B];
        kr_rng *ra = NULL, *rb = NULL;
        CHECK_OK(kr_rng_new(11, &ra));
        CHECK_OK(kr_rng_new(11, &rb));
        kr_seq_sample_out oa = {0}, ob = {0};
        oa.keys = keys_a;
        ob.keys = keys_b;
        oa.returns = returns_a;
        ob.returns = returns_b;
        CHECK_OK(kr_seq_sample(seq, ra, B, 0.4, KR_SAMPLE_STRATIFIED, &oa));
        CHECK_OK(kr_seq_sample(copy, rb, B, 0.4, KR_SAMPLE_STRATIFIED, &ob));
        CHECK(memcmp(keys_a, keys_b, sizeof keys_a) == 0);
        CHECK(memcmp(returns_a, returns_b, sizeof returns_a) == 0);
        kr_rng_free(ra);
        kr_rng_free(rb);
    }
    /* The copy's lane stands where the original's does. */
    kr_lane *copy_lane = NULL;
    uint64_t copy_position = 0;
    CHECK_OK(kr_lane_position(lane, &position));
    CHECK_OK(kr_seq_lane(copy, 0, &copy_lane));
    CHECK_OK(kr_lane_position(copy_lane, &copy_position));
    CHECK(copy_position == position);
    CHECK_OK(push(copy_lane, (int64_t)copy_position, 1.0f));
    kr_lane_free(copy_lane);
    kr_seq_free(copy);
    /* Each format's loader refuses the other's. */
    kr_buffer *flat = NULL;
    CHECK_STATUS(kr_buffer_load(dir, KR_VARIANT_LOCK_FREE, &flat), KR_E_CORRUPT);
    CHECK(flat == NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", parent);
    CHECK(system(cmd) == 0);

    /* A closed lane refuses steps; the lane comes back to the next writer. */
    CHECK_OK(kr_lane_close(lane));
    CHECK_STATUS(push(lane, 10, 0.0f), KR_E_CLOSED);
    kr_lane_free(lane);
    CHECK_OK(kr_seq_lane(seq, 0, &lane));
    CHECK_STATUS(push(lane, 10, 0.0f), KR_E_CLOSED);
    CHECK_OK(kr_lane_set_batch(lane, 4));
    CHECK_STATUS(kr_lane_set_batch(lane, 0), KR_E_INVALID_ARGUMENT);
    CHECK_OK(kr_lane_flush(lane));
    size_t bytes = 0;
    CHECK_OK(kr_seq_memory_bytes(seq, &bytes));
    CHECK(bytes >= 2 * 32 * (8 + 8 + 4));

    /* The buffer outlives its free while a lane holds it. */
    kr_seq_free(seq);
    CHECK_OK(kr_lane_position(lane, &position));
    kr_lane_free(lane);
    kr_lane_free(NULL);
    kr_seq_free(NULL);
    kr_rng_free(rng);
    if (check_failures == 0) printf("sequence: all checks passed\n");
    return check_failures != 0;
}
