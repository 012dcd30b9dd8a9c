/* SPDX-License-Identifier: Apache-2.0 */
/* IMDS answers: spot instance-action, rebalance recommendation, scheduled maintenance (with
 * their dates). The first byte picks the parser. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "imds.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        log_set_max_level(LOG_EMERG);
        char *body = malloc(size);
        if (!body)
                return 0;
        memcpy(body, data + 1, size - 1);
        body[size - 1] = 0;
        ImdsNotice n[16];
        size_t k = 0;
        int64_t ms;
        switch (data[0] % 5) {
        case 0:
                (void) imds_parse_instance_action(body, size - 1, &n[0]);
                break;
        case 1:
                (void) imds_parse_rebalance(body, size - 1, &n[0]);
                break;
        case 2:
                (void) imds_parse_maintenance(body, size - 1, n, 16, &k);
                if (k > 16)
                        abort();
                break;
        case 3:
                (void) imds_parse_gmt_date(body, &ms);
                break;
        default:
                (void) imds_parse_iso8601(body, &ms);
        }
        free(body);
        return 0;
}
