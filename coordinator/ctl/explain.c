/* SPDX-License-Identifier: Apache-2.0 */
/* nodesmithctl explain [NODE]: why the coordinator disrupts a node, or why it does not: the last
 * disruption pass as /api/v1/disruption has it. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "macro.h"

static void decision(const char *title, const cJSON *d) {
        if (!d)
                return;
        printf("%s %s %s of", title, ctl_str(d, "method"), ctl_str(d, "action"));
        const cJSON *n;
        cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(d, "nodes"))
                printf(" %s", cJSON_IsString(n) ? n->valuestring : "?");
        printf(": %s", ctl_str(d, "message"));
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, "validatesInSeconds");
        if (cJSON_IsNumber(v))
                printf(" (checked again in %.0fs)", v->valuedouble);
        printf("\n");
}

static void help(void) {
        printf("Usage: nodesmithctl explain [NODE] [--coordinator URL] [-o text|json]\n\n"
               "Why the coordinator removes nodes, or keeps them: the state of its last\n"
               "disruption pass, the consolidation waiting to be checked again, the last\n"
               "decision, and for each node (or NODE) whether it is a candidate and why not.\n%s",
               CTL_KUBE_OPTIONS_HELP);
}

int ctl_explain_main(int argc, char **argv) {
        const char *base, *output = "text";
        int rc = ctl_common_options(argc, argv, help, &base, &output);
        if (rc >= 0)
                return rc;
        const char *node = optind < argc ? argv[optind] : NULL;

        _cleanup_free_ char *body = NULL;
        if (ctl_http_get(base, "/api/v1/disruption", &body) < 0)
                return 1;
        cJSON *j = cJSON_Parse(body);
        if (!j) {
                fprintf(stderr, "nodesmithctl: the coordinator's answer is not JSON\n");
                return 1;
        }
        const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(j, "nodes"), *n;
        rc = 0;
        if (streq(output, "json")) {
                if (node) {
                        const cJSON *found = NULL;
                        cJSON_ArrayForEach(n, nodes)
                                if (streq(ctl_str(n, "name"), node) || streq(ctl_str(n, "instanceId"), node))
                                        found = n;
                        _cleanup_free_ char *s = found ? cJSON_Print(found) : NULL;
                        printf("%s\n", s ? s : "null");
                        rc = found ? 0 : 1;
                } else
                        printf("%s\n", body);
                cJSON_Delete(j);
                return rc;
        }
        printf("Disruption:  %s: %s\n", ctl_str(j, "state"), ctl_str(j, "message"));
        decision("Waiting:    ", cJSON_GetObjectItemCaseSensitive(j, "pending"));
        decision("Last:       ", cJSON_GetObjectItemCaseSensitive(j, "lastDecision"));
        if (node) {
                const cJSON *found = NULL;
                cJSON_ArrayForEach(n, nodes)
                        if (streq(ctl_str(n, "name"), node) || streq(ctl_str(n, "instanceId"), node))
                                found = n;
                if (!found) {
                        printf("Node %s: not in the last pass (it looks at nodes only when nothing is pending)\n", node);
                        rc = 1;
                } else
                        printf("Node %s (%s, %s %s, $%.4f/h, %.0f pod(s), disruption cost %.2f): %s%s%s\n",
                               ctl_str(found, "name"), ctl_str(found, "nodepool"), ctl_str(found, "instanceType"),
                               ctl_str(found, "capacityType"), ctl_num(found, "price"), ctl_num(found, "pods"),
                               ctl_num(found, "disruptionCost"),
                               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(found, "candidate")) ? "a candidate"
                                                                                                : "not a candidate",
                               strcmp(ctl_str(found, "why"), "-") ? ": " : "",
                               strcmp(ctl_str(found, "why"), "-") ? ctl_str(found, "why") : "");
        } else if (cJSON_GetArraySize(nodes) > 0) {
                printf("\n%-36s %-10s %-14s %-10s %9s %5s %6s  %s\n", "NODE", "NODEPOOL", "TYPE", "CAPACITY", "$/H",
                       "PODS", "COST", "CANDIDATE");
                cJSON_ArrayForEach(n, nodes) {
                        bool cand = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(n, "candidate"));
                        printf("%-36s %-10s %-14s %-10s %9.4f %5.0f %6.2f  %s%s%s\n", ctl_str(n, "name"),
                               ctl_str(n, "nodepool"), ctl_str(n, "instanceType"), ctl_str(n, "capacityType"),
                               ctl_num(n, "price"), ctl_num(n, "pods"), ctl_num(n, "disruptionCost"),
                               cand ? "yes" : "no", strcmp(ctl_str(n, "why"), "-") ? ": " : "",
                               strcmp(ctl_str(n, "why"), "-") ? ctl_str(n, "why") : "");
                }
        }
        cJSON_Delete(j);
        return rc;
}
