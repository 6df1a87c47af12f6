/* Includes only the header: it must compile cleanly as C11 and as C++17 with
 * -Wall -Wextra -Werror -pedantic (ffi/tests/run.sh). */
#include "kary_replay.h"

int kr_header_only_check(void);
int kr_header_only_check(void) {
    kr_config config = kr_config_default();
    kr_key key = {0, 0};
    kr_update_report report = {0, 0};
    kr_status status = KR_OK;
    (void)key;
    (void)report;
    return (int)config.variant + status;
}
