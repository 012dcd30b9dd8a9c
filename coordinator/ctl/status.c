/* SPDX-License-Identifier: Apache-2.0 */
/* nodesmithctl status: what the coordinator is doing: leadership, nodes, pending pods,
 * instances launched and not yet registered, the last error. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "macro.h"


static void help(void) {
        printf("Usage: nodesmithctl status [--coordinator URL] [-o text|json]\n\n"
               "Leadership, nodes reporting, pending pods, instances in flight and the last\n"
               "provisioning error of the coordinator at URL [$NODESMITH_COORDINATOR_HTTP or\n"
               "http://127.0.0.1:8081; a bearer token from $NODESMITH_API_TOKEN].\n%s", CTL_KUBE_OPTIONS_HELP);
}

int ctl_status_main(int argc, char **argv) {
        const char *base, *output = "text";
        int rc = ctl_common_options(argc, argv, help, &base, &output);
        if (rc >= 0)
                return rc;

        _cleanup_free_ char *prov = NULL, *nodes = NULL;
        if (ctl_http_get(base, "/api/v1/provisioning", &prov) < 0 || ctl_http_get(base, "/api/v1/nodes", &nodes) < 0)
                return 1;
        if (streq(output, "json")) {
                printf("{\"provisioning\": %s, \"nodes\": %s}\n", prov, nodes);
                return 0;
        }
        cJSON *p = cJSON_Parse(prov), *n = cJSON_Parse(nodes);
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(n, "items"), *it;
        int reporting = 0, draining = 0, noticed = 0;
        cJSON_ArrayForEach(it, items) {
                reporting++;
                if (streq(ctl_str(it, "action"), "drain"))
                        draining++;
                if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(it, "notices")) > 0)
                        noticed++;
        }
        const cJSON *leading = cJSON_GetObjectItemCaseSensitive(p, "leading");
        printf("Leader:              %s\n", cJSON_IsTrue(leading) ? "yes (this replica acts)" : "no (standby)");
        printf("Nodes reporting:     %d (%d with notices, %d draining)\n", reporting, noticed, draining);
        printf("Pending pods:        %.0f (%.0f cannot be placed by any NodePool)\n", ctl_num(p, "pendingPods"),
               ctl_num(p, "unschedulablePods"));
        printf("Rounds:              %.0f (last decision %.1f ms)\n", ctl_num(p, "rounds"),
               ctl_num(p, "lastDecisionSeconds") * 1000);
        printf("Instances launched:  %.0f\n", ctl_num(p, "instancesLaunched"));
        const cJSON *fl = cJSON_GetObjectItemCaseSensitive(p, "inFlight");
        printf("In flight:           %d\n", cJSON_GetArraySize(fl));
        cJSON_ArrayForEach(it, fl)
                printf("  %-20s %-14s %-10s %-12s %-10s %5.1fs  %.0f pod(s)\n", ctl_str(it, "instanceId"),
                       ctl_str(it, "instanceType"), ctl_str(it, "capacityType"), ctl_str(it, "zone"), ctl_str(it, "nodepool"),
                       ctl_num(it, "ageSeconds"), ctl_num(it, "nominatedPods"));
        printf("Last error:          %s\n", ctl_str(p, "lastError"));
        cJSON_Delete(p);
        cJSON_Delete(n);
        return 0;
}
