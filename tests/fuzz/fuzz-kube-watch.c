/* SPDX-License-Identifier: Apache-2.0 */
/* A Kubernetes watch stream: line framing with its cap, each event parsed as JSON, Status
 * objects. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>

#include "kube.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        KubeLines l;
        char *line;
        size_t len;
        log_set_max_level(LOG_EMERG);
        kube_lines_init(&l, 4096);
        /* fed in two pieces, as a stream arrives */
        size_t half = size / 2;
        if (kube_lines_feed(&l, (const char *) data, half) >= 0 &&
            kube_lines_feed(&l, (const char *) data + half, size - half) >= 0)
                while (kube_lines_next(&l, &line, &len)) {
                        cJSON *j = cJSON_ParseWithLength(line, len);
                        if (j) {
                                KubeStatus st;
                                (void) kube_status_parse(cJSON_GetObjectItem(j, "object"), &st);
                                cJSON_Delete(j);
                        }
                        /* the line lives in the framer's buffer until the next feed */
                }
        kube_lines_done(&l);
        return 0;
}
