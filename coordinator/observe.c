/* SPDX-License-Identifier: Apache-2.0 */
/* The fleet's metrics, from what coordinator.c hands over (ObserveSources): nodes, drains,
 * budgets, watches, EC2, histograms. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agents/registry.h"
#include "aws/ec2.h"
#include "http/api.h"
#include "json-util.h"
#include "kube.h"
#include "kubenode.h"
#include "leader.h"
#include "macro.h"
#include "model/catalog.h"
#include "model/disruption-policy.h"
#include "observe.h"
#include "promtext.h"
#include "provision/provisioner.h"
#include "status/status.h"

#define FLEET_GROUPS_MAX 4096 /* distinct (pool, type, zone, capacity type); more are summed as "other" */

typedef struct FleetGroup {
        const char *nodepool, *instance_type, *zone, *capacity_type;
        uint64_t nodes;
        double cpu, memory, cpu_requested, memory_requested, cost;
} FleetGroup;

typedef struct Fleet {
        FleetGroup *groups;
        size_t n;
        bool truncated;
} Fleet;

/* USD/h of one instance: the catalog's offering for its zone and capacity type, else the
 * on-demand price; 0 when the catalog does not know the type. */
static double instance_price(const Catalog *cat, const char *type, const char *zone, bool spot) {
        size_t n = 0;
        const SolverInstanceType *types = cat ? catalog_types(cat, &n) : NULL;
        int i = cat ? catalog_find(cat, type) : -ENOENT;
        if (i < 0 || (size_t) i >= n)
                return 0;
        const SolverInstanceType *t = &types[i];
        for (size_t k = 0; k < t->n_offerings; k++)
                if (streq_ptr(t->offerings[k].zone, zone) &&
                    (t->offerings[k].capacity_type == SOLVER_CAPACITY_SPOT) == spot && t->offerings[k].price > 0)
                        return t->offerings[k].price;
        return catalog_on_demand_price(cat, type);
}

static FleetGroup *fleet_group(Fleet *f, const char *pool, const char *type, const char *zone, const char *ct) {
        for (size_t i = 0; i < f->n; i++) {
                FleetGroup *g = &f->groups[i];
                if (streq(g->nodepool, pool) && streq(g->instance_type, type) && streq(g->zone, zone) &&
                    streq(g->capacity_type, ct))
                        return g;
        }
        if (f->n >= FLEET_GROUPS_MAX) {
                f->truncated = true;
                return NULL;
        }
        FleetGroup *g = &f->groups[f->n++];
        *g = (FleetGroup) { .nodepool = pool, .instance_type = type, .zone = zone, .capacity_type = ct };
        return g;
}

static void fleet_collect(const ObserveSources *src, Fleet *f) {
        const Catalog *cat = provisioner_catalog(src->provisioner);
        NodeEntry *e;
        REGISTRY_FOREACH(e, src->registry) {
                const Nodesmith__V1__Identity *id = e->state ? e->state->identity : NULL;
                if (!id)
                        continue;
                const char *ct = capacity_type_name(id->capacity_type);
                ct = isempty(ct) ? "unknown" : ct;
                FleetGroup *g = fleet_group(f, strempty(id->nodepool), strempty(id->instance_type),
                                            strempty(id->zone), ct);
                if (!g)
                        continue;
                g->nodes++;
                if (e->state->allocatable) {
                        g->cpu += (double) e->state->allocatable->cpu_millis / 1000.0;
                        g->memory += (double) e->state->allocatable->memory_bytes;
                }
                if (e->state->requested) {
                        g->cpu_requested += (double) e->state->requested->cpu_millis / 1000.0;
                        g->memory_requested += (double) e->state->requested->memory_bytes;
                }
                g->cost += instance_price(cat, id->instance_type, id->zone, streq(ct, "spot"));
        }
}

static void fleet_series(StrBuf *b, const char *name, const FleetGroup *g, const char *resource, double v) {
        strbuf_printf(b, "%s{nodepool=\"", name);
        prom_label_value(b, g->nodepool);
        strbuf_printf(b, "\",instance_type=\"");
        prom_label_value(b, g->instance_type);
        strbuf_printf(b, "\",zone=\"");
        prom_label_value(b, g->zone);
        strbuf_printf(b, "\",capacity_type=\"%s\"", g->capacity_type);
        if (resource)
                strbuf_printf(b, ",resource=\"%s\"", resource);
        strbuf_printf(b, "} %.17g\n", v);
}

static void fleet_render(const Fleet *f, StrBuf *b) {
        strbuf_printf(b, "# HELP nodesmith_fleet_nodes Nodes reporting, by NodePool, instance type, zone and capacity type.\n"
                         "# TYPE nodesmith_fleet_nodes gauge\n");
        for (size_t i = 0; i < f->n; i++)
                fleet_series(b, "nodesmith_fleet_nodes", &f->groups[i], NULL, (double) f->groups[i].nodes);
        strbuf_printf(b, "# HELP nodesmith_fleet_allocatable Allocatable cpu (cores) and memory (bytes) of the reporting nodes.\n"
                         "# TYPE nodesmith_fleet_allocatable gauge\n");
        for (size_t i = 0; i < f->n; i++) {
                fleet_series(b, "nodesmith_fleet_allocatable", &f->groups[i], "cpu", f->groups[i].cpu);
                fleet_series(b, "nodesmith_fleet_allocatable", &f->groups[i], "memory", f->groups[i].memory);
        }
        strbuf_printf(b, "# HELP nodesmith_fleet_requested Cpu (cores) and memory (bytes) requested by the pods on the reporting nodes.\n"
                         "# TYPE nodesmith_fleet_requested gauge\n");
        for (size_t i = 0; i < f->n; i++) {
                fleet_series(b, "nodesmith_fleet_requested", &f->groups[i], "cpu", f->groups[i].cpu_requested);
                fleet_series(b, "nodesmith_fleet_requested", &f->groups[i], "memory", f->groups[i].memory_requested);
        }
        strbuf_printf(b, "# HELP nodesmith_fleet_cost_dollars_per_hour What the reporting nodes cost, from the catalog's prices (USD per hour).\n"
                         "# TYPE nodesmith_fleet_cost_dollars_per_hour gauge\n");
        for (size_t i = 0; i < f->n; i++)
                fleet_series(b, "nodesmith_fleet_cost_dollars_per_hour", &f->groups[i], NULL, f->groups[i].cost);
        strbuf_printf(b, "# HELP nodesmith_fleet_truncated Whether more than %d groups of nodes were left out of the nodesmith_fleet_ series.\n"
                         "# TYPE nodesmith_fleet_truncated gauge\nnodesmith_fleet_truncated %d\n",
                      FLEET_GROUPS_MAX, f->truncated ? 1 : 0);
}

/* Nodes told to drain, by the reason given to their agent, and those still reporting after
 * their deadline. */
static void drains_render(const Registry *registry, StrBuf *b) {
        const char *reasons[32];
        uint64_t counts[ELEMENTSOF(reasons)] = {}, other = 0, overdue = 0;
        size_t n = 0;
        int64_t now_ms = (int64_t) time(NULL) * 1000;
        NodeEntry *e;
        REGISTRY_FOREACH(e, registry) {
                if (e->action != NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN)
                        continue;
                if (e->deadline_unix_ms > 0 && e->deadline_unix_ms < now_ms && !e->terminate_sent_usec)
                        overdue++;
                const char *r = isempty(e->reason) ? "unspecified" : e->reason;
                size_t i = 0;
                while (i < n && !streq(reasons[i], r))
                        i++;
                if (i == n && n < ELEMENTSOF(reasons))
                        reasons[n++] = r;
                if (i < n)
                        counts[i]++;
                else
                        other++;
        }
        strbuf_printf(b, "# HELP nodesmith_nodes_draining Nodes told to drain, by reason.\n"
                         "# TYPE nodesmith_nodes_draining gauge\n");
        for (size_t i = 0; i < n; i++) {
                strbuf_printf(b, "nodesmith_nodes_draining{reason=\"");
                prom_label_value(b, reasons[i]);
                strbuf_printf(b, "\"} %llu\n", (unsigned long long) counts[i]);
        }
        if (other)
                strbuf_printf(b, "nodesmith_nodes_draining{reason=\"other\"} %llu\n", (unsigned long long) other);
        strbuf_printf(b, "# HELP nodesmith_drains_past_deadline Nodes still draining after the deadline their drain was given.\n"
                         "# TYPE nodesmith_drains_past_deadline gauge\nnodesmith_drains_past_deadline %llu\n",
                      (unsigned long long) overdue);
}

typedef struct Budgets {
        const Registry *registry;
        StrBuf *b;
} Budgets;

/* Each NodePool's disruption budget now, per reason: how many of its nodes may be disrupting
 * at once (+Inf: no active budget limits it). */
static int pool_budgets(const cJSON *pool, void *userdata) {
        Budgets *bu = userdata;
        const char *name = kube_object_meta(pool, "name");
        const cJSON *budgets = json_get(json_get(json_get(pool, "spec"), "disruption"), "budgets");
        size_t nodes = 0;
        NodeEntry *e;
        if (!name)
                return 0;
        REGISTRY_FOREACH(e, bu->registry)
                nodes += e->state && e->state->identity && streq_ptr(e->state->identity->nodepool, name);
        for (DisruptionReason r = 0; r < _DISRUPTION_REASON_MAX; r++) {
                size_t n = disruption_budget(budgets, r, nodes, time(NULL));
                strbuf_printf(bu->b, "nodesmith_nodepool_disruption_budget{nodepool=\"");
                prom_label_value(bu->b, name);
                if (n == SIZE_MAX)
                        strbuf_printf(bu->b, "\",reason=\"%s\"} +Inf\n", disruption_reason_to_name(r));
                else
                        strbuf_printf(bu->b, "\",reason=\"%s\"} %zu\n", disruption_reason_to_name(r), n);
        }
        return 0;
}

typedef struct Oldest {
        int64_t now_ms;
        int64_t oldest_ms;
        uint64_t n;
} Oldest;

static int oldest_pending(const cJSON *pod, void *userdata) {
        Oldest *o = userdata;
        if (!pod_unschedulable(pod))
                return 0;
        int64_t created = kube_parse_rfc3339_ms(json_str(json_get(pod, "metadata"), "creationTimestamp"));
        o->n++;
        if (created > 0 && created < o->now_ms && o->now_ms - created > o->oldest_ms)
                o->oldest_ms = o->now_ms - created;
        return 0;
}

static void watch_errors(StrBuf *b, const char *resource, const KubeWatch *w) {
        KubeWatchStats st = {};
        if (!w)
                return;
        kube_watch_stats(w, &st);
        strbuf_printf(b, "nodesmith_kube_watch_errors_total{resource=\"%s\"} %u\n", resource, st.errors);
}

void observe_metrics(const ObserveSources *src, StrBuf *b) {
        const Provisioner *p = src->provisioner;
        Fleet f = { .groups = calloc(FLEET_GROUPS_MAX, sizeof(FleetGroup)) };
        if (!f.groups) {
                b->error = -ENOMEM;
                return;
        }
        fleet_collect(src, &f);
        fleet_render(&f, b);
        free(f.groups);
        drains_render(src->registry, b);

        strbuf_printf(b, "# HELP nodesmith_leader_lease_transitions The Lease's leaseTransitions as last read: how often leadership changed hands.\n"
                         "# TYPE nodesmith_leader_lease_transitions gauge\nnodesmith_leader_lease_transitions %llu\n",
                      (unsigned long long) leader_transitions(src->leader));

        strbuf_printf(b, "# HELP nodesmith_nodepool_disruption_budget Nodes of each NodePool that may be disrupting at once now, by reason (its budgets).\n"
                         "# TYPE nodesmith_nodepool_disruption_budget gauge\n");
        const KubeWatch *pools = provisioner_watch(p, PROVISIONER_WATCH_NODEPOOLS);
        if (pools)
                (void) kube_watch_foreach(pools, pool_budgets, &(Budgets) { .registry = src->registry, .b = b });

        Oldest o = { .now_ms = (int64_t) time(NULL) * 1000 };
        const KubeWatch *pods = provisioner_watch(p, PROVISIONER_WATCH_PODS);
        if (pods)
                (void) kube_watch_foreach(pods, oldest_pending, &o);
        strbuf_printf(b, "# HELP nodesmith_pending_pod_oldest_seconds Age of the oldest pod the scheduler marked Unschedulable (0: none).\n"
                         "# TYPE nodesmith_pending_pod_oldest_seconds gauge\nnodesmith_pending_pod_oldest_seconds %.3f\n",
                      (double) o.oldest_ms / 1000.0);

        strbuf_printf(b, "# HELP nodesmith_kube_watch_errors_total Failed list or watch requests to the Kubernetes API, by resource (each retried).\n"
                         "# TYPE nodesmith_kube_watch_errors_total counter\n");
        static const char *const resources[_PROVISIONER_WATCH_MAX] = {
                [PROVISIONER_WATCH_PODS] = "pods",           [PROVISIONER_WATCH_NODES] = "nodes",
                [PROVISIONER_WATCH_NODEPOOLS] = "nodepools", [PROVISIONER_WATCH_NODECLASSES] = "ec2nodeclasses",
                [PROVISIONER_WATCH_DAEMONSETS] = "daemonsets", [PROVISIONER_WATCH_PDBS] = "poddisruptionbudgets",
        };
        for (ProvisionerWatch w = 0; w < _PROVISIONER_WATCH_MAX; w++)
                watch_errors(b, resources[w], provisioner_watch(p, w));
        const Ec2Stats *es = provisioner_ec2_stats(p);
        strbuf_printf(b, "# HELP nodesmith_ec2_errors_total EC2 and SSM calls that ended in an error (after retries).\n"
                         "# TYPE nodesmith_ec2_errors_total counter\nnodesmith_ec2_errors_total %llu\n",
                      (unsigned long long) (es ? es->errors : 0));
        status_writer_metrics(src->status, b);
        const ProvisionerHistograms *h = provisioner_histograms(p);
        if (!h)
                return;
        histogram_render(&h->round_seconds, b, "nodesmith_provisioning_round_duration_seconds",
                         "Provisioning rounds from the closed batch to the last launch answered.");
        histogram_render(&h->solver_seconds, b, "nodesmith_solver_duration_seconds",
                         "Time the solver took to decide a provisioning round.");
        histogram_render(&h->registration_seconds, b, "nodesmith_node_registration_duration_seconds",
                         "Launched instances from CreateFleet to their Node registering.");
}
