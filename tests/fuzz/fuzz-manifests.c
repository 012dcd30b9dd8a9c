/* SPDX-License-Identifier: Apache-2.0 */
/* What users give nodesmithctl simulate and the coordinator reads from the API: JSON or YAML
 * documents of Pods, workloads, NodePools, EC2NodeClasses, Karpenter objects; and the kubelet
 * configuration the agent reads. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>

#include "capacity.h"
#include "log.h"
#include "model/karpenter.h"
#include "model/nodepool.h"
#include "yaml-json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        log_set_max_level(LOG_EMERG);
        KubeletSettings k = {};
        (void) kubelet_config_parse((const char *) data, size, &k);

        cJSON *docs = NULL;
        if (yaml_documents_to_json((const char *) data, size, &docs) < 0)
                return 0;
        NodepoolObjects *o = NULL;
        if (nodepool_objects_new(&o) >= 0) {
                char *err = NULL;
                if (nodepool_objects_add(o, docs, "fuzz", &err) >= 0)
                        (void) nodepool_objects_finish(o, NULL, &err);
                free(err);
                nodepool_objects_free(o);
        }
        cJSON *conv = NULL;
        char **notes = NULL, *err = NULL;
        if (karpenter_convert(docs, &conv, &notes, &err) >= 0) {
                cJSON_Delete(conv);
                karpenter_notes_free(notes);
        }
        free(err);
        cJSON_Delete(docs);
        return 0;
}
