/* SPDX-License-Identifier: Apache-2.0 */
/* The agent's report built from hostile pod objects (a tenant writes them): the input is a JSON
 * array of Pod objects as the API server would hand them to the agent's watch. Each is parsed
 * (pod_info_parse), turned into its report entry with its scheduling data under the budget
 * (report_pod_to_pb), and the whole report packed within max-message: it must always fit, each
 * pod's scheduling data must stay within 16 KiB, and the packed bytes must read back. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "log.h"
#include "wire.h"

#define MAX_MESSAGE (1u << 20)
#define MAX_PODS 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static PodInfo infos[MAX_PODS];
        static Nodesmith__V1__Pod pods[MAX_PODS];
        static Nodesmith__V1__Pod *ptrs[MAX_PODS];
        static Nodesmith__V1__Resources requests[MAX_PODS];
        static char *scheduling[MAX_PODS];

        log_set_max_level(LOG_EMERG);
        cJSON *arr = cJSON_ParseWithLength((const char *) data, size);
        if (!cJSON_IsArray(arr)) {
                cJSON_Delete(arr);
                return 0;
        }
        size_t n = 0, budget = MAX_MESSAGE / 2;
        const cJSON *obj;
        cJSON_ArrayForEach(obj, arr) {
                if (n == MAX_PODS)
                        break;
                memset(&infos[n], 0, sizeof infos[n]);
                if (pod_info_parse(obj, &infos[n]) < 0)
                        continue;
                (void) report_pod_to_pb(&infos[n], obj, &budget, &pods[n], &requests[n], &scheduling[n]);
                if (scheduling[n] && strlen(scheduling[n]) > 16 * 1024)
                        abort();
                ptrs[n] = &pods[n];
                n++;
        }
        Nodesmith__V1__NodeState st = NODESMITH__V1__NODE_STATE__INIT;
        Nodesmith__V1__Identity id = NODESMITH__V1__IDENTITY__INIT;
        Nodesmith__V1__Resources cap = NODESMITH__V1__RESOURCES__INIT;
        id.instance_id = (char *) "i-0fuzz";
        id.node_name = (char *) "ip-fuzz";
        st.identity = &id;
        st.capacity = st.allocatable = &cap;
        st.n_pods = n;
        st.pods = n ? ptrs : NULL;
        WireEnvelope w = { .token = "t", .instance_id = "i-0fuzz", .boot_id = "b", .sequence = 1 };
        uint8_t *buf = NULL;
        size_t len = 0;
        if (wire_pack_report(&w, &st, MAX_MESSAGE, &buf, &len) < 0)
                abort(); /* MAX_PODS pods with bounded names and the budget always fit */
        WireView v;
        Nodesmith__V1__NodeState *back = NULL;
        if (wire_peek_report(buf, len, &v) < 0 ||
            !(back = nodesmith__v1__node_state__unpack(NULL, v.state.len, v.state.data)) || back->n_pods != n)
                abort();
        nodesmith__v1__node_state__free_unpacked(back, NULL);
        free(buf);
        for (size_t i = 0; i < n; i++) {
                free(scheduling[i]);
                scheduling[i] = NULL;
        }
        cJSON_Delete(arr);
        return 0;
}
