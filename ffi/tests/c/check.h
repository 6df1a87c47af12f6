/* The C tests' one assertion: print where and why, count, go on (so one run shows every
 * failure); main returns the count. And the sentinel that shows an output was left alone. */
#ifndef KARY_REPLAY_TEST_CHECK_H
#define KARY_REPLAY_TEST_CHECK_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int check_failures = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                    \
        }                                                                        \
    } while (0)

/* A call that must return `expected`; on a mismatch print both and the last error. */
#define CHECK_STATUS(call, expected)                                             \
    do {                                                                         \
        kr_status check_got_ = (call);                                           \
        if (check_got_ != (expected)) {                                          \
            char check_msg_[512];                                                \
            kr_last_error_message(check_msg_, sizeof check_msg_, NULL);          \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d (%s); last error: %s\n", \
                    __FILE__, __LINE__, #call, (int)check_got_,                  \
                    kr_status_str(check_got_), (int)(expected),                  \
                    kr_status_str(expected), check_msg_);                        \
            check_failures++;                                                    \
        }                                                                        \
    } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, KR_OK)

/* Outputs start as a sentinel pattern (ARM); a failed call must leave them so
 * (CHECK_UNTOUCHED). */
#define SENTINEL 0xA5
static inline bool untouched(const void *p, size_t n) {
    const unsigned char *c = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) {
        if (c[i] != SENTINEL) return false;
    }
    return true;
}
#define ARM(x) memset(&(x), SENTINEL, sizeof(x))
#define CHECK_UNTOUCHED(x) CHECK(untouched(&(x), sizeof(x)))

#endif
