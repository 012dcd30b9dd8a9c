/* SPDX-License-Identifier: Apache-2.0 */
/* The provisioner's metrics and its /api/v1/provisioning answer. */
#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agents/nodebind.h"
#include "agents/proxydrain.h"
#include "aws/aws-credentials.h"
#include "aws/ec2.h"
#include "aws/instanceprofile.h"
#include "catalog-ec2.h"
#include "fileio.h"
#include "http.h"
#include "kube.h"
#include "launchclass.h"
#include "log.h"
#include "promtext.h"
#include "macro.h"
#include "model/catalog.h"
#include "model/nodepool.h"
#include "model/userdata.h"
#include "provisioner-internal.h"
#include "solver/solver.h"

/* ---- reporting ------------------------------------------------------------------------------ */

void provisioner_metrics(Provisioner *p, StrBuf *b) {
        if (!p)
                return;
        const Ec2Stats *es = ec2_client_stats(p->ec2);
        strbuf_printf(b, "# HELP nodesmith_pending_pods Pending pods the scheduler marked Unschedulable, at the last round.\n"
                         "# TYPE nodesmith_pending_pods gauge\nnodesmith_pending_pods %zu\n", p->pending_unschedulable);
        strbuf_printf(b, "# HELP nodesmith_provisioning_rounds_total Provisioning rounds (batches solved).\n"
                         "# TYPE nodesmith_provisioning_rounds_total counter\nnodesmith_provisioning_rounds_total %llu\n",
                      (unsigned long long) p->rounds);
        strbuf_printf(b, "# HELP nodesmith_launches_total Fleets that launched at least one instance.\n"
                         "# TYPE nodesmith_launches_total counter\nnodesmith_launches_total %llu\n",
                      (unsigned long long) p->launches);
        strbuf_printf(b, "# HELP nodesmith_instances_launched_total Instances launched.\n"
                         "# TYPE nodesmith_instances_launched_total counter\nnodesmith_instances_launched_total %llu\n",
                      (unsigned long long) p->instances_launched);
        strbuf_printf(b, "# HELP nodesmith_launch_errors_total Launch steps that failed.\n"
                         "# TYPE nodesmith_launch_errors_total counter\nnodesmith_launch_errors_total %llu\n",
                      (unsigned long long) p->launch_errors);
        strbuf_printf(b, "# HELP nodesmith_insufficient_capacity_total Offerings marked unavailable after insufficient capacity.\n"
                         "# TYPE nodesmith_insufficient_capacity_total counter\nnodesmith_insufficient_capacity_total %llu\n",
                      (unsigned long long) p->ice_total);
        strbuf_printf(b, "# HELP nodesmith_replacements_abandoned_total Consolidation replacements given up: no offering cost less than the nodes they replace.\n"
                         "# TYPE nodesmith_replacements_abandoned_total counter\nnodesmith_replacements_abandoned_total %llu\n",
                      (unsigned long long) p->replacements_abandoned);
        strbuf_printf(b, "# HELP nodesmith_launch_events_dropped_total Events of launches not sent: %d already waited to be.\n"
                         "# TYPE nodesmith_launch_events_dropped_total counter\nnodesmith_launch_events_dropped_total %llu\n",
                      EVENTS_QUEUED_MAX, (unsigned long long) p->events_dropped);
        strbuf_printf(b, "# HELP nodesmith_instances_in_flight Instances launched and not registered yet.\n"
                         "# TYPE nodesmith_instances_in_flight gauge\nnodesmith_instances_in_flight %zu\n", p->n_inflight);
        strbuf_printf(b, "# HELP nodesmith_decision_seconds Time the solver took in the last round.\n"
                         "# TYPE nodesmith_decision_seconds gauge\nnodesmith_decision_seconds %.6f\n", p->last_decision_seconds);
        strbuf_printf(b, "# HELP nodesmith_solver_budget_exhausted_total Rounds whose solver ran out of its time budget (a partial plan).\n"
                         "# TYPE nodesmith_solver_budget_exhausted_total counter\nnodesmith_solver_budget_exhausted_total %llu\n"
                         "# HELP nodesmith_solver_deferred_pods_total Pods such rounds left for the next round.\n"
                         "# TYPE nodesmith_solver_deferred_pods_total counter\nnodesmith_solver_deferred_pods_total %llu\n",
                      (unsigned long long) p->budget_cuts, (unsigned long long) p->pods_deferred);
        strbuf_printf(b, "# HELP nodesmith_ec2_requests_total EC2 and SSM HTTP requests.\n"
                         "# TYPE nodesmith_ec2_requests_total counter\nnodesmith_ec2_requests_total %llu\n"
                         "# HELP nodesmith_ec2_throttled_total Throttling answers from EC2.\n"
                         "# TYPE nodesmith_ec2_throttled_total counter\nnodesmith_ec2_throttled_total %llu\n",
                      (unsigned long long) (es ? es->requests : 0), (unsigned long long) (es ? es->throttled : 0));
        strbuf_printf(b, "# HELP nodesmith_instances_terminated_total Instances terminated after a drain or deletion.\n"
                         "# TYPE nodesmith_instances_terminated_total counter\nnodesmith_instances_terminated_total %llu\n",
                      (unsigned long long) p->terminated);
        prom_counter(b, "nodesmith_instances_terminated_unregistered_total",
                     "Instances terminated for never registering.", p->terminated_unregistered);
        prom_counter(b, "nodesmith_dead_nodes_total",
                     "Nodes found dead (Ready Unknown, agent silent) and terminated without a drain.", p->dead_nodes);
}

char *provisioner_api(Provisioner *p) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return NULL;
        cJSON_AddBoolToObject(o, "leading", p && p->leading);
        if (p) {
                cJSON *a = cJSON_AddArrayToObject(o, "inFlight");
                uint64_t now = provision_now_usec(p);
                for (size_t i = 0; i < p->n_inflight; i++) {
                        const InFlight *f = &p->inflight[i];
                        cJSON *j = cJSON_CreateObject();
                        cJSON_AddStringToObject(j, "instanceId", f->instance_id);
                        cJSON_AddStringToObject(j, "nodepool", f->nodepool);
                        cJSON_AddStringToObject(j, "instanceType", f->instance_type);
                        cJSON_AddStringToObject(j, "zone", f->zone);
                        cJSON_AddStringToObject(j, "capacityType", solver_capacity_type_to_name(f->capacity_type));
                        cJSON_AddNumberToObject(j, "ageSeconds", (double) (now - f->launched_usec) / 1e6);
                        cJSON_AddNumberToObject(j, "nominatedPods", (double) f->n_pods);
                        cJSON_AddItemToArray(a, j);
                }
                cJSON_AddNumberToObject(o, "pendingPods", (double) p->pending_unschedulable);
                cJSON_AddNumberToObject(o, "unschedulablePods", (double) p->pods_unschedulable);
                cJSON_AddNumberToObject(o, "rounds", (double) p->rounds);
                cJSON_AddNumberToObject(o, "instancesLaunched", (double) p->instances_launched);
                cJSON_AddNumberToObject(o, "lastDecisionSeconds", p->last_decision_seconds);
                cJSON_AddStringToObject(o, "lastError", p->last_error);
        }
        char *s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        return s;
}
