/* The C tests' one assertion: print where and why, count, go on (so one run shows every
 * failure); main returns the count. */
#ifndef KARY_REPLAY_TEST_CHECK_H
#define KARY_REPLAY_TEST_CHECK_H

#include <stdio.h>

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

#endif
