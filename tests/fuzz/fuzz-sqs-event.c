/* SPDX-License-Identifier: Apache-2.0 */
/* The interruption queue's input: EventBridge event bodies (first byte even) and SQS
 * ReceiveMessage answers (first byte odd). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "interruption/sqs-event.h"
#include "aws/sqs.h"

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
        if (data[0] % 2 == 0) {
                SqsEvent ev;
                if (sqs_event_parse(body, size - 1, &ev) == 0) {
                        if (ev.n_instances == 0 || ev.n_instances > SQS_EVENT_MAX_INSTANCES || ev.kind >= _SQS_EVENT_KIND_MAX)
                                abort();
                        for (size_t i = 0; i < ev.n_instances; i++)
                                if (!sqs_instance_id_valid(ev.instances[i]))
                                        abort();
                }
        } else {
                SqsMessage m[SQS_MAX_MESSAGES];
                size_t n = 0;
                if (sqs_parse_receive(body, size - 1, m, &n) == 0) {
                        if (n > SQS_MAX_MESSAGES)
                                abort();
                        for (size_t i = 0; i < n; i++)
                                sqs_message_done(&m[i]);
                }
        }
        free(body);
        return 0;
}
