/* Deliberately leaks a buffer: ffi/tests/run.sh checks that valgrind reports it (exit code
 * 99), so a clean valgrind run of the real tests means something. */
#include <stdlib.h>

#include "kary_replay.h"

int main(void) {
    static const kr_column schema[1] = {{"obs", KR_DTYPE_F32, 4, 0, NULL}};
    kr_config config = kr_config_default();
    config.capacity = 64;
    kr_buffer **holder = (kr_buffer **)malloc(sizeof *holder);
    if (holder == NULL || kr_buffer_new(&config, schema, 1, holder) != KR_OK) return 1;
    *holder = NULL; /* the only pointer to the buffer is gone: definitely lost */
    free(holder);
    return 0;
}
