/* A smoke test of every function of kary_replay.h (the shard calls: shards.c), for each variant: the values it returns
 * are checked against what was inserted. Run by ffi/tests/run.sh (also under valgrind). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "kary_replay.h"

#define CAP 16
#define N_COLUMNS 6

static const kr_column SCHEMA[N_COLUMNS] = {
    {"obs", KR_DTYPE_F32, 3, 0, NULL},   {"action", KR_DTYPE_I64, 1, 0, NULL}, {"reward", KR_DTYPE_F64, 1, 0, NULL},
    {"flags", KR_DTYPE_U8, 2, 0, NULL},  {"done", KR_DTYPE_BOOL, 1, 0, NULL},  {"step", KR_DTYPE_I32, 1, 0, NULL},
};

/* Item i's data: every value is derived from i, so a sampled row can be checked. */
typedef struct {
    float obs[3];
    int64_t action;
    double reward;
    uint8_t flags[2];
    bool done;
    int32_t step;
} item;

static item make_item(int i) {
    item it;
    it.obs[0] = (float)i;
    it.obs[1] = (float)i + 0.5f;
    it.obs[2] = -(float)i;
    it.action = (int64_t)i * 3;
    it.reward = (double)i / 4.0;
    it.flags[0] = (uint8_t)i;
    it.flags[1] = (uint8_t)(255 - i);
    it.done = (i % 2) == 1;
    it.step = (int32_t)i + 100;
    return it;
}

static void smoke(uint32_t variant) {
    kr_config config = kr_config_default();
    config.capacity = CAP;
    config.fanout = 4;
    config.variant = variant;
    config.alpha = 1.0;
    kr_buffer *buffer = NULL;
    CHECK_OK(kr_buffer_new(&config, SCHEMA, N_COLUMNS, &buffer));
    CHECK(buffer != NULL);

    size_t n = 0;
    CHECK_OK(kr_buffer_capacity(buffer, &n));
    CHECK(n == CAP);
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == 0);
    CHECK_OK(kr_buffer_memory_bytes(buffer, &n));
    CHECK(n >= CAP * (3 * 4 + 8 + 8 + 2 + 1 + 4));

    /* The configuration and the schema, read back from the handle. */
    kr_config read_config;
    CHECK_OK(kr_buffer_config(buffer, &read_config));
    CHECK(read_config.capacity == config.capacity && read_config.fanout == config.fanout);
    CHECK(read_config.variant == config.variant && read_config.alpha == config.alpha);
    CHECK(read_config.initial_priority == config.initial_priority);
    CHECK(read_config.weight_normalization == config.weight_normalization);
    CHECK(read_config.default_priority == config.default_priority);
    CHECK_OK(kr_buffer_n_columns(buffer, &n));
    CHECK(n == N_COLUMNS);
    for (size_t c = 0; c < N_COLUMNS; c++) {
        kr_column column = {NULL, 99, 99, 99, NULL};
        CHECK_OK(kr_buffer_column(buffer, c, &column));
        CHECK(strcmp(column.name, SCHEMA[c].name) == 0 && column.name != SCHEMA[c].name);
        CHECK(column.dtype == SCHEMA[c].dtype && column.shape == SCHEMA[c].shape);
    }
    kr_key key = {99, 99};
    bool present = true;
    CHECK_OK(kr_buffer_key(buffer, 0, &key, &present));
    CHECK(!present && key.index == 99);

    /* One item with kr_buffer_insert and a priority. */
    item it = make_item(0);
    const void *one[N_COLUMNS] = {it.obs, &it.action, &it.reward, it.flags, &it.done, &it.step};
    double p0 = 2.0;
    CHECK_OK(kr_buffer_insert(buffer, one, N_COLUMNS, &p0, &key));
    CHECK(key.index == 0 && kr_key_insertion(key) == 0);

    /* Seven more with kr_buffer_insert_batch: column-wise arrays, item-major. */
    enum { B = 7 };
    float obs[B * 3];
    int64_t action[B];
    double reward[B];
    uint8_t flags[B * 2];
    bool done[B];
    int32_t step[B];
    double priorities[B];
    for (int j = 0; j < B; j++) {
        item x = make_item(j + 1);
        memcpy(&obs[j * 3], x.obs, sizeof x.obs);
        action[j] = x.action;
        reward[j] = x.reward;
        memcpy(&flags[j * 2], x.flags, sizeof x.flags);
        done[j] = x.done;
        step[j] = x.step;
        priorities[j] = (double)(j + 1);
    }
    const void *batch[N_COLUMNS] = {obs, action, reward, flags, done, step};
    kr_key keys[B];
    CHECK_OK(kr_buffer_insert_batch(buffer, batch, N_COLUMNS, B, priorities, keys));
    for (int j = 0; j < B; j++) {
        CHECK(keys[j].index == (uint64_t)(j + 1) && kr_key_insertion(keys[j]) == (uint64_t)(j + 1));
    }
    /* And one with the default priority (running max: 7) and no key wanted. */
    it = make_item(8);
    const void *last[N_COLUMNS] = {it.obs, &it.action, &it.reward, it.flags, &it.done, &it.step};
    CHECK_OK(kr_buffer_insert(buffer, last, N_COLUMNS, NULL, NULL));

    uint64_t inserted = 0;
    CHECK_OK(kr_buffer_inserted(buffer, &inserted));
    CHECK(inserted == 9);
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == 9);
    double total = 0, p = 0;
    CHECK_OK(kr_buffer_total_priority(buffer, &total));
    CHECK(total == 2.0 + 28.0 + 7.0);
    CHECK_OK(kr_buffer_priority(buffer, 8, &p));
    CHECK(p == 7.0);
    CHECK_OK(kr_buffer_key(buffer, 5, &key, &present));
    CHECK(present && key.index == 5 && kr_key_insertion(key) == 5);

    /* Sample every output, then check each row against the item it names. */
    enum { S = 64 };
    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(42, &rng));
    kr_key s_keys[S];
    uint64_t s_indices[S];
    double s_weights[S], s_probabilities[S], s_priorities[S];
    float s_obs[S * 3];
    int64_t s_action[S];
    double s_reward[S];
    uint8_t s_flags[S * 2];
    bool s_done[S];
    int32_t s_step[S];
    void *const s_columns[N_COLUMNS] = {s_obs, s_action, s_reward, s_flags, s_done, s_step};
    float s_weights_f32[S];
    int64_t s_indices_i64[S];
    kr_sample_out out = {s_keys,      s_indices,     s_weights,    s_probabilities,
                         s_priorities, s_columns, s_weights_f32, s_indices_i64};
    for (uint32_t mode = KR_SAMPLE_INDEPENDENT; mode <= KR_SAMPLE_STRATIFIED; mode++) {
        CHECK_OK(kr_buffer_sample(buffer, rng, S, 0.4, mode, &out));
        for (int j = 0; j < S; j++) {
            int i = (int)s_indices[j];
            item x = make_item(i);
            CHECK(i >= 0 && i < 9);
            CHECK(s_keys[j].index == s_indices[j] && kr_key_insertion(s_keys[j]) == s_indices[j]);
            double expected_p = i == 0 ? 2.0 : i == 8 ? 7.0 : (double)i;
            CHECK(s_priorities[j] == expected_p);
            CHECK(fabs(s_probabilities[j] - expected_p / total) < 1e-12);
            CHECK(s_weights[j] > 0.0 && s_weights[j] <= 1.0);
            CHECK(memcmp(&s_obs[j * 3], x.obs, sizeof x.obs) == 0);
            CHECK(s_action[j] == x.action && s_reward[j] == x.reward);
            CHECK(memcmp(&s_flags[j * 2], x.flags, sizeof x.flags) == 0);
            CHECK(s_done[j] == x.done && s_step[j] == x.step);
            CHECK(s_weights_f32[j] == (float)s_weights[j] && s_indices_i64[j] == (int64_t)i);
        }
    }
    /* Without replacement: all 9 items once each, every probability the conditional one
       (p / (total - the priorities drawn before it)); a tenth is more than there are. */
    for (int round = 0; round < 20; round++) {
        CHECK_OK(kr_buffer_sample(buffer, rng, 9, 1.0, KR_SAMPLE_WITHOUT_REPLACEMENT, &out));
        double taken = 0.0;
        bool seen[9] = {false};
        for (int j = 0; j < 9; j++) {
            int i = (int)s_indices[j];
            CHECK(i >= 0 && i < 9 && !seen[i]);
            seen[i] = true;
            CHECK(fabs(s_probabilities[j] - s_priorities[j] / (total - taken)) < 1e-12);
            CHECK(s_weights[j] > 0.0 && s_weights[j] <= 1.0);
            CHECK(s_action[j] == make_item(i).action);
            taken += s_priorities[j];
        }
    }
    CHECK_STATUS(kr_buffer_sample(buffer, rng, 10, 0.4, KR_SAMPLE_WITHOUT_REPLACEMENT, &out),
                 KR_E_INVALID_ARGUMENT);
    /* Uniform: every item equally likely, probability 1/9, weight 1. */
    int uniform_counts[9] = {0};
    for (int round = 0; round < 50; round++) {
        CHECK_OK(kr_buffer_sample(buffer, rng, S, 0.4, KR_SAMPLE_UNIFORM, &out));
        for (int j = 0; j < S; j++) {
            int i = (int)s_indices[j];
            CHECK(i >= 0 && i < 9 && s_action[j] == make_item(i).action);
            CHECK(s_probabilities[j] == 1.0 / 9.0 && s_weights[j] == 1.0);
            uniform_counts[i]++;
        }
    }
    for (int i = 0; i < 9; i++) CHECK(uniform_counts[i] > 250 && uniform_counts[i] < 460); /* 356 expected */
    CHECK_STATUS(kr_buffer_sample(buffer, rng, 4, 0.4, 9, &out), KR_E_INVALID_ARGUMENT);
    /* Only some outputs: the rest are NULL. */
    kr_sample_out keys_only = {0};
    keys_only.keys = s_keys;
    CHECK_OK(kr_buffer_sample(buffer, rng, 4, 1.0, KR_SAMPLE_INDEPENDENT, &keys_only));
    /* The learner's pair for LibTorch: float32 weights, int64 indices, columns. */
    kr_sample_out torch_out = {0};
    torch_out.weights_f32 = s_weights_f32;
    torch_out.indices_i64 = s_indices_i64;
    torch_out.columns = s_columns;
    CHECK_OK(kr_buffer_sample(buffer, rng, S, 0.4, KR_SAMPLE_STRATIFIED, &torch_out));
    for (int j = 0; j < S; j++) {
        item x = make_item((int)s_indices_i64[j]);
        CHECK(s_weights_f32[j] > 0.0f && s_weights_f32[j] <= 1.0f);
        CHECK(s_action[j] == x.action && s_step[j] == x.step);
    }

    /* Update the first two sampled keys (given twice: the last entry wins). */
    /* A key is the slot and the generation word: the buffer's tag above bit 48, the
       insertion number below. */
    kr_config tagged;
    CHECK_OK(kr_buffer_config(buffer, &tagged));
    uint64_t tag = (uint64_t)tagged.key_tag << 48;
    kr_key upd_keys[3] = {{1, tag | 1}, {2, tag | 2}, {1, tag | 1}};
    CHECK(kr_key_tag(upd_keys[0]) == tagged.key_tag && kr_key_insertion(upd_keys[0]) == 1);
    double upd_p[3] = {10.0, 0.0, 0.5};
    kr_update_report report = {99, 99};
    CHECK_OK(kr_buffer_update_priorities(buffer, upd_keys, upd_p, 3, &report));
    CHECK(report.applied == 3 && report.stale == 0);
    /* The same priorities read by key; a key never handed out is refused. */
    double by_key[3] = {-1, -1, -1};
    size_t stale_keys = 99;
    CHECK_OK(kr_buffer_priorities(buffer, upd_keys, 3, by_key, &stale_keys));
    CHECK(by_key[0] == 0.5 && by_key[1] == 0.0 && by_key[2] == 0.5 && stale_keys == 0);
    CHECK_OK(kr_buffer_priorities(buffer, upd_keys, 0, NULL, NULL));
    CHECK_STATUS(kr_buffer_priorities(buffer, upd_keys, 3, NULL, NULL), KR_E_NULL);
    kr_key never = {1, tag | 1001};
    CHECK_STATUS(kr_buffer_priorities(buffer, &never, 1, by_key, &stale_keys), KR_E_INVALID_KEY);
    CHECK_OK(kr_buffer_priority(buffer, 1, &p));
    CHECK(p == 0.5);
    CHECK_OK(kr_buffer_priority(buffer, 2, &p));
    CHECK(p == 0.0);
    CHECK_OK(kr_buffer_total_priority(buffer, &total));
    CHECK(total == 2.0 + 0.5 + 0.0 + (28.0 - 1.0 - 2.0) + 7.0);

    /* Fill past capacity: FIFO eviction makes the old key stale. */
    for (int i = 9; i < CAP + 3; i++) {
        it = make_item(i % 200);
        const void *cols[N_COLUMNS] = {it.obs, &it.action, &it.reward, it.flags, &it.done, &it.step};
        CHECK_OK(kr_buffer_insert(buffer, cols, N_COLUMNS, NULL, NULL));
    }
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == CAP);
    CHECK_OK(kr_buffer_key(buffer, 1, &key, &present));
    CHECK(present && kr_key_insertion(key) == CAP + 1);
    double one_p = 3.0;
    CHECK_OK(kr_buffer_update_priorities(buffer, &upd_keys[0], &one_p, 1, &report));
    CHECK(report.applied == 0 && report.stale == 1);

    kr_consistency consistency;
    CHECK_OK(kr_buffer_consistency(buffer, &consistency));
    CHECK(consistency.exact && consistency.extrema_exact && consistency.max_abs_error == 0.0);

    /* Delete by key: the item in slot 5 goes (its key stale, its priority 0, len one less);
       the second entry of the same key is stale; a key never handed out, or NULL keys,
       delete nothing. */
    kr_key doomed;
    CHECK_OK(kr_buffer_key(buffer, 5, &doomed, &present));
    CHECK(present);
    kr_key never_made = {5, tag | 5000};
    kr_key bad_pair[2] = {doomed, never_made};
    CHECK_STATUS(kr_buffer_delete(buffer, bad_pair, 2, &report), KR_E_INVALID_KEY);
    CHECK_STATUS(kr_buffer_delete(buffer, NULL, 1, &report), KR_E_NULL);
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == CAP);
    kr_key twice[2] = {doomed, doomed};
    CHECK_OK(kr_buffer_delete(buffer, twice, 2, &report));
    CHECK(report.applied == 1 && report.stale == 1);
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == CAP - 1);
    CHECK_OK(kr_buffer_key(buffer, 5, &key, &present));
    CHECK(!present);
    CHECK_OK(kr_buffer_priority(buffer, 5, &p));
    CHECK(p == 0.0);
    CHECK_OK(kr_buffer_update_priorities(buffer, &doomed, &one_p, 1, &report));
    CHECK(report.applied == 0 && report.stale == 1);
    for (int r = 0; r < 20; r++) {
        CHECK_OK(kr_buffer_sample(buffer, rng, 4, 0.4, KR_SAMPLE_UNIFORM, &keys_only));
        for (int j = 0; j < 4; j++) {
            CHECK(s_keys[j].index != 5);
        }
    }
    CHECK_OK(kr_buffer_delete(buffer, NULL, 0, NULL));

    /* Write back by key: slot 6's action and step rewritten in place, its key and priority
       kept; the deleted key is stale (its rows skipped); bad columns write nothing. */
    kr_key kept;
    CHECK_OK(kr_buffer_key(buffer, 6, &kept, &present));
    CHECK(present);
    double kept_p = 0;
    CHECK_OK(kr_buffer_priority(buffer, 6, &kept_p));
    kr_key rewrite_keys[2] = {kept, doomed};
    int64_t new_action[2] = {-77, -78};
    int32_t new_step[2] = {-5, -6};
    size_t positions[2] = {1, 5};
    const void *rewritten[2] = {new_action, new_step};
    size_t bad_positions[2] = {1, 99};
    CHECK_STATUS(kr_buffer_write_back(buffer, rewrite_keys, 2, bad_positions, rewritten, 2, &report),
                 KR_E_LENGTH_MISMATCH);
    size_t twice_positions[2] = {1, 1};
    CHECK_STATUS(kr_buffer_write_back(buffer, rewrite_keys, 2, twice_positions, rewritten, 2, &report),
                 KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_buffer_write_back(buffer, rewrite_keys, 2, positions, NULL, 2, &report), KR_E_NULL);
    CHECK_OK(kr_buffer_write_back(buffer, rewrite_keys, 2, positions, rewritten, 2, &report));
    CHECK(report.applied == 1 && report.stale == 1);
    CHECK_OK(kr_buffer_key(buffer, 6, &key, &present));
    CHECK(present && key.generation == kept.generation);
    CHECK_OK(kr_buffer_priority(buffer, 6, &p));
    CHECK(p == kept_p);
    /* The rewritten row, read back by a sample at its own place in the tree. */
    int found = 0;
    for (int r = 0; r < 200 && !found; r++) {
        CHECK_OK(kr_buffer_sample(buffer, rng, S, 0.4, KR_SAMPLE_UNIFORM, &torch_out));
        for (int j = 0; j < S; j++) {
            if (s_indices_i64[j] == 6) {
                CHECK(s_action[j] == -77 && s_step[j] == -5);
                found = 1;
            }
        }
    }
    CHECK(found);

    /* Rebuild keeps an exact tree exact; clear empties it and the buffer works on. */
    CHECK_OK(kr_buffer_total_priority(buffer, &total));
    CHECK_OK(kr_buffer_rebuild(buffer));
    double rebuilt = 0;
    CHECK_OK(kr_buffer_total_priority(buffer, &rebuilt));
    CHECK(rebuilt == total);
    CHECK_OK(kr_buffer_clear(buffer));
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == 0);
    CHECK_OK(kr_buffer_total_priority(buffer, &total));
    CHECK(total == 0.0);
    CHECK_OK(kr_buffer_inserted(buffer, &inserted));
    CHECK(inserted == CAP + 3);
    for (size_t i = 0; i < CAP; i++) {
        CHECK_OK(kr_buffer_key(buffer, i, &key, &present));
        CHECK(!present);
    }
    CHECK(kr_buffer_sample(buffer, rng, 4, 0.4, KR_SAMPLE_STRATIFIED, &keys_only) == KR_E_EMPTY);
    CHECK_OK(kr_buffer_update_priorities(buffer, &upd_keys[1], &one_p, 1, &report));
    CHECK(report.applied == 0 && report.stale == 1);
    it = make_item(7);
    const void *again[N_COLUMNS] = {it.obs, &it.action, &it.reward, it.flags, &it.done, &it.step};
    CHECK_OK(kr_buffer_insert(buffer, again, N_COLUMNS, NULL, &key));
    CHECK(kr_key_insertion(key) == CAP + 3);
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == 1);
    /* The running maximum (10 before the clear) restarted from the initial priority. */
    CHECK_OK(kr_buffer_priority(buffer, key.index, &p));
    CHECK(p == config.initial_priority);
    CHECK_OK(kr_buffer_sample(buffer, rng, 4, 0.4, KR_SAMPLE_STRATIFIED, &keys_only));
    CHECK(s_keys[0].index == key.index && s_keys[0].generation == key.generation);

    kr_rng_free(rng);
    kr_buffer_free(buffer);
}

/* The staged writer: pushes become visible at each flush of 4, keys in push order, default
 * priorities decided at the flush, and a writer outlives kr_buffer_free (the buffer is freed
 * with it: valgrind sees no leak). */
static void writer_smoke(uint32_t variant) {
    kr_config config = kr_config_default();
    config.capacity = CAP;
    config.fanout = 4;
    config.variant = variant;
    config.alpha = 1.0;
    kr_buffer *buffer = NULL;
    CHECK_OK(kr_buffer_new(&config, SCHEMA, N_COLUMNS, &buffer));
    kr_writer *writer = NULL;
    CHECK_OK(kr_writer_new(buffer, 4, &writer));
    CHECK(writer != NULL);
    size_t n = 99, flushed = 99, staged = 99;
    const kr_key *keys = NULL;
    uint64_t next_generation = 0;
    for (int i = 0; i < 10; i++) {
        item it = make_item(i);
        const void *one[N_COLUMNS] = {it.obs, &it.action, &it.reward, it.flags, &it.done, &it.step};
        double p = (double)(i + 1);
        /* Items 0..5 with priorities, 6..9 with the default: pushing the 7th (index 6)
         * flushes 4 and 5 first, the 10th fills the batch 6..9. */
        CHECK_OK(kr_writer_push(writer, one, N_COLUMNS, i < 6 ? &p : NULL, &flushed));
        size_t expected = (i == 3 || i == 9) ? 4 : (i == 6) ? 2 : 0;
        CHECK(flushed == expected);
        CHECK_OK(kr_writer_keys(writer, &keys, &n));
        CHECK(n == flushed);
        for (size_t j = 0; j < n; j++) {
            CHECK(kr_key_insertion(keys[j]) == next_generation && keys[j].index == next_generation % CAP);
            next_generation++;
        }
    }
    CHECK_OK(kr_writer_staged(writer, &staged));
    CHECK(staged == 0);
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == 10);
    /* Staged, then flushed by hand. */
    item extra = make_item(10);
    const void *ex[N_COLUMNS] = {extra.obs, &extra.action, &extra.reward, extra.flags, &extra.done, &extra.step};
    CHECK_OK(kr_writer_push(writer, ex, N_COLUMNS, NULL, &flushed));
    CHECK(flushed == 0);
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == 10);
    CHECK_OK(kr_writer_flush(writer, &flushed));
    CHECK(flushed == 1);
    CHECK_OK(kr_writer_keys(writer, &keys, &n));
    CHECK(n == 1 && kr_key_insertion(keys[0]) == 10);
    CHECK_OK(kr_writer_flush(writer, &flushed));
    CHECK(flushed == 0);
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == 11);
    double p = 0;
    CHECK_OK(kr_buffer_priority(buffer, 9, &p));
    CHECK(p == 6.0); /* the running maximum at the flush */
    /* Bad input stages nothing. */
    CHECK_STATUS(kr_writer_push(writer, NULL, N_COLUMNS, NULL, NULL), KR_E_NULL);
    double bad = -1.0;
    item it = make_item(10);
    const void *one[N_COLUMNS] = {it.obs, &it.action, &it.reward, it.flags, &it.done, &it.step};
    CHECK_STATUS(kr_writer_push(writer, one, N_COLUMNS, &bad, NULL), KR_E_INVALID_PRIORITY);
    CHECK_STATUS(kr_writer_push(writer, one, N_COLUMNS - 1, NULL, NULL), KR_E_LENGTH_MISMATCH);
    CHECK_OK(kr_writer_staged(writer, &staged));
    CHECK(staged == 0);
    /* The buffer handle goes first; the writer still flushes into it, then frees it. */
    CHECK_OK(kr_writer_push(writer, one, N_COLUMNS, NULL, NULL));
    kr_buffer_free(buffer);
    CHECK_OK(kr_writer_push(writer, one, N_COLUMNS, NULL, &flushed));
    CHECK(flushed == 0);
    CHECK_OK(kr_writer_free(writer));
}

/* Consume after k draws: each item goes after its second draw reaches the caller; the
   global-lock buffer refuses the setting. */
static void consume(uint32_t variant) {
    kr_config config = kr_config_default();
    config.capacity = 16;
    config.variant = variant;
    config.max_times_sampled = 2;
    kr_buffer *buffer = NULL;
    if (variant == KR_VARIANT_GLOBAL_LOCK) {
        CHECK_STATUS(kr_buffer_new(&config, SCHEMA, N_COLUMNS, &buffer), KR_E_INVALID_ARGUMENT);
        CHECK(buffer == NULL);
        return;
    }
    config.max_times_sampled = 512;
    CHECK_STATUS(kr_buffer_new(&config, SCHEMA, N_COLUMNS, &buffer), KR_E_INVALID_ARGUMENT);
    config.max_times_sampled = 2;
    CHECK_OK(kr_buffer_new(&config, SCHEMA, N_COLUMNS, &buffer));
    kr_config got;
    CHECK_OK(kr_buffer_config(buffer, &got));
    CHECK(got.max_times_sampled == 2);
    for (int i = 0; i < 4; i++) {
        item it = make_item(i);
        const void *cols[N_COLUMNS] = {it.obs, &it.action, &it.reward, it.flags, &it.done, &it.step};
        CHECK_OK(kr_buffer_insert(buffer, cols, N_COLUMNS, NULL, NULL));
    }
    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(3, &rng));
    kr_key keys[4];
    kr_sample_out out = {0};
    out.keys = keys;
    int draws[4] = {0, 0, 0, 0};
    /* 8 draws in all, 4 at a time without replacement: each item twice, then none left. */
    for (int round = 0; round < 2; round++) {
        CHECK_OK(kr_buffer_sample(buffer, rng, 4, 0.4, KR_SAMPLE_WITHOUT_REPLACEMENT, &out));
        for (int j = 0; j < 4; j++) draws[keys[j].index] += 1;
    }
    for (int i = 0; i < 4; i++) CHECK(draws[i] == 2);
    size_t n = 99;
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == 0);
    CHECK_STATUS(kr_buffer_sample(buffer, rng, 1, 0.4, KR_SAMPLE_STRATIFIED, &out), KR_E_EMPTY);
    kr_buffer_free(buffer);

    /* A queue: one draw each, the oldest first (FIFO) or the newest (LIFO). */
    config.max_times_sampled = 1;
    CHECK_OK(kr_buffer_new(&config, SCHEMA, N_COLUMNS, &buffer));
    for (int i = 0; i < 4; i++) {
        item it = make_item(i);
        const void *cols[N_COLUMNS] = {it.obs, &it.action, &it.reward, it.flags, &it.done, &it.step};
        CHECK_OK(kr_buffer_insert(buffer, cols, N_COLUMNS, NULL, NULL));
    }
    double probabilities[2];
    out.probabilities = probabilities;
    CHECK_OK(kr_buffer_sample(buffer, rng, 2, 0.4, KR_SAMPLE_FIFO, &out));
    CHECK(keys[0].index == 0 && keys[1].index == 1 && probabilities[0] == 1.0);
    CHECK_OK(kr_buffer_sample(buffer, rng, 2, 0.4, KR_SAMPLE_LIFO, &out));
    CHECK(keys[0].index == 3 && keys[1].index == 2);
    CHECK_STATUS(kr_buffer_sample(buffer, rng, 1, 0.4, KR_SAMPLE_FIFO, &out), KR_E_EMPTY);
    kr_buffer_free(buffer);

    /* The heaps, one draw each: the largest priorities first (ties to the lower slot), then
       the smallest positive one; an item of priority 0 is never drawn. A buffer built without
       max_heap keeps no maxima: it refuses the max-heap draw and still takes the min-heap one. */
    CHECK_OK(kr_buffer_new(&config, SCHEMA, N_COLUMNS, &buffer));
    {
        item it = make_item(0);
        const void *cols[N_COLUMNS] = {it.obs, &it.action, &it.reward, it.flags, &it.done, &it.step};
        CHECK_OK(kr_buffer_insert(buffer, cols, N_COLUMNS, NULL, NULL));
    }
    CHECK_STATUS(kr_buffer_sample(buffer, rng, 1, 0.4, KR_SAMPLE_MAX_HEAP, &out), KR_E_INVALID_ARGUMENT);
    {
        char msg[512];
        size_t written = 0;
        CHECK_OK(kr_last_error_message(msg, sizeof msg, &written));
        CHECK(strstr(msg, "max_heap") != NULL);
    }
    CHECK_OK(kr_buffer_sample(buffer, rng, 1, 0.4, KR_SAMPLE_MIN_HEAP, &out));
    kr_buffer_free(buffer);
    config.max_heap = 1;
    CHECK_OK(kr_buffer_new(&config, SCHEMA, N_COLUMNS, &buffer));
    const double heap_priorities[6] = {3.0, 1.0, 4.0, 1.0, 5.0, 0.0};
    for (int i = 0; i < 6; i++) {
        item it = make_item(i);
        const void *cols[N_COLUMNS] = {it.obs, &it.action, &it.reward, it.flags, &it.done, &it.step};
        CHECK_OK(kr_buffer_insert(buffer, cols, N_COLUMNS, &heap_priorities[i], NULL));
    }
    CHECK_OK(kr_buffer_sample(buffer, rng, 2, 0.4, KR_SAMPLE_MAX_HEAP, &out));
    CHECK(keys[0].index == 4 && keys[1].index == 2 && probabilities[1] == 1.0);
    CHECK_OK(kr_buffer_sample(buffer, rng, 2, 0.4, KR_SAMPLE_MIN_HEAP, &out));
    CHECK(keys[0].index == 1 && keys[1].index == 3);
    CHECK_OK(kr_buffer_sample(buffer, rng, 1, 0.4, KR_SAMPLE_MAX_HEAP, &out));
    CHECK(keys[0].index == 0);
    CHECK_STATUS(kr_buffer_sample(buffer, rng, 1, 0.4, KR_SAMPLE_MIN_HEAP, &out), KR_E_ZERO_TOTAL_PRIORITY);
    kr_buffer_free(buffer);

    /* Shuffled passes: 6 items in batches of 4, so every second batch spans two passes;
       each run of 6 draws is every item once, and no batch holds one twice. */
    config.max_times_sampled = 0;
    CHECK_OK(kr_buffer_new(&config, SCHEMA, N_COLUMNS, &buffer));
    for (int i = 0; i < 6; i++) {
        item it = make_item(i);
        const void *cols[N_COLUMNS] = {it.obs, &it.action, &it.reward, it.flags, &it.done, &it.step};
        CHECK_OK(kr_buffer_insert(buffer, cols, N_COLUMNS, NULL, NULL));
    }
    kr_key shuffled_keys[4];
    double shuffled_probabilities[4];
    kr_sample_out shuffled = {0};
    shuffled.keys = shuffled_keys;
    shuffled.probabilities = shuffled_probabilities;
    int stream[24];
    for (int b = 0; b < 6; b++) {
        CHECK_OK(kr_buffer_sample(buffer, rng, 4, 0.4, KR_SAMPLE_SHUFFLED, &shuffled));
        for (int j = 0; j < 4; j++) {
            stream[b * 4 + j] = (int)shuffled_keys[j].index;
            CHECK(shuffled_probabilities[j] == 1.0 / 6.0);
            for (int k = 0; k < j; k++) CHECK(shuffled_keys[k].index != shuffled_keys[j].index);
        }
    }
    for (int pass = 0; pass < 4; pass++) {
        int seen[6] = {0};
        for (int j = 0; j < 6; j++) seen[stream[pass * 6 + j]]++;
        for (int i = 0; i < 6; i++) CHECK(seen[i] == 1);
    }
    CHECK_STATUS(kr_buffer_sample(buffer, rng, 7, 0.4, KR_SAMPLE_SHUFFLED, &shuffled), KR_E_INVALID_ARGUMENT);
    kr_rng_free(rng);
    kr_buffer_free(buffer);
}

/* A policy-version window: items carry the version of the policy that produced them (an
   i64 column); retire_before retires every item below a version, refuses inserts of one,
   and the floor only rises. */
static void versions(uint32_t variant) {
    static const kr_column V_SCHEMA[2] = {{"x", KR_DTYPE_F32, 1, 0, NULL}, {"version", KR_DTYPE_I64, 1, 0, NULL}};
    kr_config config = kr_config_default();
    config.capacity = 8;
    config.variant = variant;
    kr_buffer *buffer = NULL;
    config.version_column = "x"; /* not an i64 column */
    CHECK_STATUS(kr_buffer_new(&config, V_SCHEMA, 2, &buffer), KR_E_INVALID_SCHEMA);
    config.version_column = "missing";
    CHECK_STATUS(kr_buffer_new(&config, V_SCHEMA, 2, &buffer), KR_E_INVALID_SCHEMA);
    config.version_column = NULL;
    CHECK_OK(kr_buffer_new(&config, V_SCHEMA, 2, &buffer));
    int64_t floor = 7;
    uint64_t retired = 99;
    CHECK_STATUS(kr_buffer_retire_before(buffer, 1, &retired), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_buffer_version_floor(buffer, &floor), KR_E_INVALID_ARGUMENT);
    CHECK(floor == 7 && retired == 99);
    kr_buffer_free(buffer);

    char name[] = "version";
    config.version_column = name;
    CHECK_OK(kr_buffer_new(&config, V_SCHEMA, 2, &buffer));
    name[0] = 'X'; /* copied at kr_buffer_new */
    kr_config got;
    CHECK_OK(kr_buffer_config(buffer, &got));
    CHECK(got.version_column != NULL && strcmp(got.version_column, "version") == 0);
    CHECK_OK(kr_buffer_version_floor(buffer, &floor));
    CHECK(floor == INT64_MIN);
    float xs[6] = {0, 1, 2, 3, 4, 5};
    int64_t vs[6] = {3, 1, 4, 1, 5, 2};
    const void *cols[2] = {xs, vs};
    CHECK_OK(kr_buffer_insert_batch(buffer, cols, 2, 6, NULL, NULL));
    CHECK_OK(kr_buffer_retire_before(buffer, 3, &retired));
    CHECK(retired == 3);
    CHECK_OK(kr_buffer_retire_before(buffer, 2, NULL)); /* lower: nothing, floor kept */
    CHECK_OK(kr_buffer_version_floor(buffer, &floor));
    CHECK(floor == 3);
    size_t n = 0;
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == 3);
    int64_t old[1] = {2};
    const void *old_cols[2] = {xs, old};
    CHECK_STATUS(kr_buffer_insert(buffer, old_cols, 2, NULL, NULL), KR_E_INVALID_ARGUMENT);
    CHECK_OK(kr_buffer_len(buffer, &n));
    CHECK(n == 3);
    kr_rng *rng = NULL;
    CHECK_OK(kr_rng_new(5, &rng));
    kr_key keys[16];
    kr_sample_out out = {0};
    out.keys = keys;
    for (int r = 0; r < 10; r++) {
        CHECK_OK(kr_buffer_sample(buffer, rng, 16, 0.4, KR_SAMPLE_INDEPENDENT, &out));
        for (int j = 0; j < 16; j++) CHECK(vs[keys[j].index] >= 3);
    }
    CHECK_STATUS(kr_buffer_retire_before(NULL, 1, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_version_floor(buffer, NULL), KR_E_NULL);
    kr_rng_free(rng);
    kr_buffer_free(buffer);
}

/* Alpha at run time: raw priorities kept per item, every stored priority raised again
   exactly; a bad alpha is refused and changes nothing. */
static void alpha_at_run_time(uint32_t variant) {
    static const kr_column A_SCHEMA[1] = {{"x", KR_DTYPE_F32, 1, 0, NULL}};
    kr_config config = kr_config_default();
    config.capacity = 8;
    config.variant = variant;
    config.alpha = 0.5;
    kr_buffer *buffer = NULL;
    CHECK_OK(kr_buffer_new(&config, A_SCHEMA, 1, &buffer));
    float x[4] = {0, 1, 2, 3};
    const void *cols[1] = {x};
    double given[3] = {4.0, 9.0, 16.0};
    kr_key keys[4];
    CHECK_OK(kr_buffer_insert_batch(buffer, cols, 1, 3, given, keys));
    const void *last[1] = {&x[3]};
    CHECK_OK(kr_buffer_insert(buffer, last, 1, NULL, &keys[3])); /* the running maximum, 16 */
    double alpha = 0;
    CHECK_OK(kr_buffer_alpha(buffer, &alpha));
    CHECK(alpha == 0.5);
    double raw[4], stored[4];
    size_t stale = 99;
    CHECK_OK(kr_buffer_raw_priorities(buffer, keys, 4, raw, &stale));
    CHECK(stale == 0 && raw[0] == 4.0 && raw[1] == 9.0 && raw[2] == 16.0 && raw[3] == 16.0);
    CHECK_OK(kr_buffer_priorities(buffer, keys, 4, stored, NULL));
    CHECK(stored[0] == 2.0 && stored[1] == 3.0 && stored[2] == 4.0 && stored[3] == 4.0);
    CHECK_OK(kr_buffer_set_alpha(buffer, 1.0));
    CHECK_OK(kr_buffer_priorities(buffer, keys, 4, stored, NULL));
    CHECK(stored[0] == 4.0 && stored[1] == 9.0 && stored[2] == 16.0 && stored[3] == 16.0);
    kr_stats stats;
    CHECK_OK(kr_buffer_stats(buffer, &stats));
    CHECK(stats.total == 45.0);
    CHECK_STATUS(kr_buffer_set_alpha(buffer, NAN), KR_E_INVALID_ARGUMENT);
    CHECK_STATUS(kr_buffer_set_alpha(buffer, -1.0), KR_E_INVALID_ARGUMENT);
    CHECK_OK(kr_buffer_alpha(buffer, &alpha));
    CHECK(alpha == 1.0);
    CHECK_STATUS(kr_buffer_set_alpha(NULL, 1.0), KR_E_NULL);
    CHECK_STATUS(kr_buffer_alpha(buffer, NULL), KR_E_NULL);
    CHECK_STATUS(kr_buffer_raw_priorities(buffer, keys, 4, NULL, NULL), KR_E_NULL);
    kr_buffer_free(buffer);
}

int main(void) {
    CHECK(strcmp(kr_version(), "0.1.0") == 0);
    CHECK(strcmp(kr_status_str(KR_OK), "ok") == 0);
    for (kr_status s = KR_E_PANIC; s <= KR_OK; s++) {
        CHECK(kr_status_str(s) != NULL && strlen(kr_status_str(s)) > 0);
        CHECK(strcmp(kr_status_str(s), "unknown status") != 0);
    }
    CHECK(strcmp(kr_status_str(1), "unknown status") == 0);
    CHECK(strcmp(kr_status_str(-999), "unknown status") == 0);

    kr_config config = kr_config_default();
    CHECK(config.capacity == ((size_t)1 << 20) && config.fanout == 8);
    CHECK(config.variant == KR_VARIANT_SPLIT_LOCK && config.alpha == 0.6);
    CHECK(config.initial_priority == 1.0 && config.weight_normalization == KR_WEIGHTS_GLOBAL);
    CHECK(config.default_priority == KR_DEFAULT_PRIORITY_RUNNING_MAX);

    /* No failure yet on this thread: the message is empty. */
    char msg[64] = "x";
    size_t written = 99;
    CHECK_OK(kr_last_error_message(msg, sizeof msg, &written));
    CHECK(written == 0 && msg[0] == '\0');

    smoke(KR_VARIANT_GLOBAL_LOCK);
    smoke(KR_VARIANT_SPLIT_LOCK);
    smoke(KR_VARIANT_LOCK_FREE);
    writer_smoke(KR_VARIANT_GLOBAL_LOCK);
    writer_smoke(KR_VARIANT_SPLIT_LOCK);
    writer_smoke(KR_VARIANT_LOCK_FREE);
    consume(KR_VARIANT_GLOBAL_LOCK);
    consume(KR_VARIANT_SPLIT_LOCK);
    consume(KR_VARIANT_LOCK_FREE);
    versions(KR_VARIANT_GLOBAL_LOCK);
    versions(KR_VARIANT_SPLIT_LOCK);
    versions(KR_VARIANT_LOCK_FREE);
    alpha_at_run_time(KR_VARIANT_GLOBAL_LOCK);
    alpha_at_run_time(KR_VARIANT_SPLIT_LOCK);
    alpha_at_run_time(KR_VARIANT_LOCK_FREE);

    /* Free of NULL is a no-op. */
    kr_buffer_free(NULL);
    kr_rng_free(NULL);
    CHECK_OK(kr_writer_free(NULL));

    if (check_failures == 0) {
        printf("smoke: every function, 3 variants: ok\n");
    }
    return check_failures == 0 ? 0 : 1;
}
