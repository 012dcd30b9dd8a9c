/* SPDX-License-Identifier: Apache-2.0 */
/* Disruption passes: one decision per pass in Karpenter's order (expiration, static scale-down,
 * drift (drift.c), emptiness, consolidation), within budgets, consolidations validated before
 * acting. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agents/registry.h"
#include "balanced.h"
#include "churn.h"
#include "disruption.h"
#include "drift.h"
#include "json-util.h"
#include "kube.h"
#include "log.h"
#include "macro.h"
#include "model/disruption-policy.h"
#include "provision/provisioner.h"

#define DEFAULT_THRESHOLD 0.15
#define DEFAULT_CHURN_GUARD_S (15 * 60)
#define NOMINATED_HOLD_USEC (30 * USEC_PER_SEC)
#define REPLACE_TIMEOUT_USEC (10 * 60 * USEC_PER_SEC)
#define MAX_PENDING_NODES 128
#define N_RECENT 256

typedef enum Method {
        METHOD_EXPIRATION,
        METHOD_STATIC,
        METHOD_DRIFT,
        METHOD_NODEPOOL_DELETED,
        METHOD_EMPTINESS,
        METHOD_MULTI,
        METHOD_SINGLE,
        _METHOD_MAX,
} Method;

static const char *const method_names[] = {
        [METHOD_EXPIRATION] = "expiration",    [METHOD_STATIC] = "static-scale-down", [METHOD_DRIFT] = "drift",
        [METHOD_NODEPOOL_DELETED] = "nodepool-deleted", [METHOD_EMPTINESS] = "emptiness",
        [METHOD_MULTI] = "multi-node",         [METHOD_SINGLE] = "single-node",
};

typedef struct Recent {
        char key[128];
        uint64_t usec;
} Recent;

/* A consolidation found and waiting to be made again before it acts. */
typedef struct Pending {
        bool set;
        Method method;
        SolverConsolidationKind kind;
        char *nodes[MAX_PENDING_NODES];
        size_t n_nodes;
        double old_price, new_price;
        uint64_t decided_usec;
        char message[512];
} Pending;

struct Disruption {
        Pending pending;
        Recent churn[N_RECENT];        /* instance ids launched as replacements */
        size_t churn_next;
        Recent nominated[N_RECENT];    /* nodes pending pods were planned onto */
        size_t nominated_next;
        cJSON *explain;                /* the last pass, for people */
        cJSON *last_decision;
        uint64_t decisions[_METHOD_MAX];
        uint64_t validated, invalidated;
        uint64_t pass_failures;        /* passes that stopped on an error (logged, then counted) */
        uint64_t disruptions;          /* nodes told to drain (nodesmith_disruptions_total) */
        double last_pass_seconds;
        Provisioner *p;                /* the snapshot, the watches, the launches */
        Registry *registry;            /* the nodes that report: told to drain or to be replaced */
        DisruptionConfig cfg;
};

int disruption_new(Provisioner *p, Registry *registry, const DisruptionConfig *cfg, Disruption **ret) {
        Disruption *d = calloc(1, sizeof *d);
        if (!d)
                return -ENOMEM;
        d->p = p;
        d->registry = registry;
        d->cfg = *cfg;
        *ret = d;
        return 0;
}

static void pending_clear(Pending *pd) {
        for (size_t i = 0; i < pd->n_nodes; i++)
                free(pd->nodes[i]);
        *pd = (Pending) {};
}

Disruption *disruption_free(Disruption *d) {
        if (d) {
                pending_clear(&d->pending);
                cJSON_Delete(d->explain);
                cJSON_Delete(d->last_decision);
                free(d);
        }
        return NULL;
}

static void recent_add(Recent *r, size_t *next, const char *key, uint64_t now) {
        for (size_t i = 0; i < N_RECENT; i++)
                if (streq(r[i].key, key)) {
                        r[i].usec = now;
                        return;
                }
        Recent *x = &r[*next % N_RECENT];
        snprintf(x->key, sizeof x->key, "%s", key);
        x->usec = now;
        (*next)++;
}

static const Recent *recent_find(const Recent *r, const char *key) {
        for (size_t i = 0; key && i < N_RECENT; i++)
                if (r[i].key[0] && streq(r[i].key, key))
                        return &r[i];
        return NULL;
}

void disruption_launched(Disruption *d, const char *instance_id) {
        NodeEntry *e;
        bool replacing = false;
        REGISTRY_FOREACH(e, d->registry)
                replacing |= e->replace_started_usec > 0;
        if (replacing && instance_id)
                recent_add(d->churn, &d->churn_next, instance_id, provisioner_now(d->p));
}

void disruption_nominated(Disruption *d, const char *node) {
        if (node)
                recent_add(d->nominated, &d->nominated_next, node, provisioner_now(d->p));
}

/* ---- helpers ------------------------------------------------------------------------------- */

static NodeEntry *entry_for_node(Disruption *d, const char *name) {
        NodeEntry *e;
        REGISTRY_FOREACH(e, d->registry)
                if (streq_ptr(provisioner_node_name(d->p, e), name))
                        return e;
        return NULL;
}

static bool node_do_not_disrupt(Provisioner *p, const char *node) {
        const cJSON *obj = kube_watch_get(provisioner_watch(p, PROVISIONER_WATCH_NODES), NULL, node);
        const cJSON *ann = json_get(json_get(obj, "metadata"), "annotations");
        return streq_ptr(json_str(ann, "nodesmith.io/do-not-disrupt"), "true") ||
               streq_ptr(json_str(ann, "karpenter.sh/do-not-disrupt"), "true");
}

static void node_event(Provisioner *p, const char *node, const char *reason, const char *why) {
        KubeEventInfo ev = { .api_version = "v1", .kind = "Node", .name = node, .reason = reason,
                             .message = why, .component = "nodesmith-coordinator" };
        if (node)
                (void) kube_event_create(provisioner_kube(p), &ev, NULL, NULL, NULL);
}

typedef struct PdbQuery {
        const SolverPod *pod;
        const char *blocking;
} PdbQuery;

static int pdb_check(const cJSON *pdb, void *userdata) {
        PdbQuery *q = userdata;
        const cJSON *md = json_get(pdb, "metadata");
        const cJSON *allowed = json_get(json_get(pdb, "status"), "disruptionsAllowed");
        if (!streq_ptr(json_str(md, "namespace"), q->pod->namespace_) || !cJSON_IsNumber(allowed) ||
            allowed->valuedouble > 0)
                return 0;
        if (!disruption_selector_matches(json_get(json_get(pdb, "spec"), "selector"), q->pod->labels, q->pod->n_labels))
                return 0;
        q->blocking = json_str(md, "name");
        return -EEXIST; /* found: stop */
}

/* The PodDisruptionBudget that forbids evicting the pod now, if one does. */
static const char *pdb_blocking(Provisioner *p, const SolverPod *pod) {
        PdbQuery q = { .pod = pod };
        const KubeWatch *pdbs = provisioner_watch(p, PROVISIONER_WATCH_PDBS);
        if (pdbs && pod->namespace_)
                (void) kube_watch_foreach(pdbs, pdb_check, &q);
        return q.blocking;
}

/* Drain now: the node's pods are planned elsewhere at once. */
static void drain(Disruption *d, NodeEntry *e, const char *reason, const char *why) {
        Provisioner *p = d->p;
        if (!e || free_and_strdup(&e->reason, reason) < 0)
                return;
        e->action = NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN;
        e->deadline_unix_ms = 0;
        e->force = false;
        e->replace_started_usec = 0;
        registry_directive_changed(d->registry, e);
        d->disruptions++;
        const char *node = provisioner_node_name(p, e);
        log_notice("Disrupting Node %s (%s): %s; acting replica %s.", strempty(node), reason, why,
                   provisioner_acting_as(p));
        node_event(p, node, "Disrupting", why);
        provisioner_node_leaving(p, e);
}

/* Replace: its pods are planned elsewhere (a new node is launched for them); it drains once
 * the replacement is up. A consolidation's replacement must cost less than price_cap, what the
 * node(s) it replaces cost (provision/pricecap.c); 0: no cap (drift). */
static void replace(Disruption *d, NodeEntry *e, const char *reason, const char *why, bool on_demand,
                    double price_cap) {
        Provisioner *p = d->p;
        ProvisionerActivity pa;
        if (!e)
                return;
        provisioner_activity(p, &pa);
        e->replace_on_demand = on_demand;
        e->replace_price_cap = price_cap;
        e->replace_started_usec = provisioner_now(p);
        e->replace_round = pa.rounds;
        snprintf(e->replace_reason, sizeof e->replace_reason, "%s", reason);
        const char *node = provisioner_node_name(p, e);
        log_notice("Replacing Node %s (%s): %s.", strempty(node), reason, why);
        node_event(p, node, "Replacing", why);
        provisioner_poke(p);
}

/* Replacements whose new capacity is up (a round ran since, nothing in flight): drain. */
static void promote_replacements(Disruption *d, const ProvisionerActivity *pa, uint64_t now) {
        NodeEntry *e;
        bool settled = !pa->batch_open && !pa->round_running && pa->in_flight == 0;
        REGISTRY_FOREACH(e, d->registry) {
                if (!e->replace_started_usec)
                        continue;
                if (e->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN) {
                        e->replace_started_usec = 0; /* draining for another reason already */
                        continue;
                }
                bool timeout = now - e->replace_started_usec > REPLACE_TIMEOUT_USEC;
                if ((settled && pa->rounds > e->replace_round) || timeout) {
                        char why[128];
                        snprintf(why, sizeof why, "%s", timeout ? "replacement not up after 10 minutes; draining anyway"
                                                                : "its replacement is up");
                        drain(d, e, e->replace_reason[0] ? e->replace_reason : "replaced", why);
                }
        }
}

static int pool_index(const SolverSnapshot *sn, const char *pool) {
        for (size_t k = 0; pool && k < sn->n_nodepools; k++)
                if (streq(pool, sn->nodepools[k].name))
                        return (int) k;
        return -1;
}

static cJSON *node_json(cJSON *nodes, const SolverNode *n, const NodeEntry *e) {
        cJSON *j = cJSON_CreateObject();
        if (!j)
                return NULL;
        cJSON_AddStringToObject(j, "name", n->name);
        if (e)
                cJSON_AddStringToObject(j, "instanceId", e->instance_id);
        if (n->nodepool)
                cJSON_AddStringToObject(j, "nodepool", n->nodepool);
        if (n->instance_type)
                cJSON_AddStringToObject(j, "instanceType", n->instance_type);
        cJSON_AddStringToObject(j, "capacityType", solver_capacity_type_to_name(n->capacity_type));
        cJSON_AddNumberToObject(j, "price", n->price);
        cJSON_AddItemToArray(nodes, j);
        return j;
}

static void verdict(cJSON *j, bool candidate, const char *fmt, ...) _printf_(3, 4);
static void verdict(cJSON *j, bool candidate, const char *fmt, ...) {
        char buf[300];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        if (!j)
                return;
        cJSON_AddBoolToObject(j, "candidate", candidate);
        cJSON_AddStringToObject(j, "why", buf);
}

static cJSON *decision_json(Method m, SolverConsolidationKind kind, char *const *nodes, size_t n, double old_price,
                            double new_price, const char *message, uint64_t now_wall) {
        cJSON *j = cJSON_CreateObject(), *arr = cJSON_CreateArray();
        if (!j || !arr) {
                cJSON_Delete(j);
                cJSON_Delete(arr);
                return NULL;
        }
        cJSON_AddStringToObject(j, "method", method_names[m]);
        cJSON_AddStringToObject(j, "action", kind == SOLVER_CONSOLIDATE_REPLACE ? "replace" : "delete");
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(arr, cJSON_CreateString(nodes[i]));
        cJSON_AddItemToObject(j, "nodes", arr);
        cJSON_AddNumberToObject(j, "oldPrice", old_price);
        cJSON_AddNumberToObject(j, "newPrice", new_price);
        cJSON_AddStringToObject(j, "message", message);
        cJSON_AddNumberToObject(j, "unix", (double) now_wall);
        return j;
}

static void record(Disruption *d, Method m, SolverConsolidationKind kind, char *const *nodes, size_t n,
                   double old_price, double new_price, const char *message) {
        d->decisions[m]++;
        cJSON_Delete(d->last_decision);
        d->last_decision = decision_json(m, kind, nodes, n, old_price, new_price, message, (uint64_t) time(NULL));
}

/* Act on a consolidation: delete drains at once, replace launches first. */
static void act(Disruption *d, Method m, SolverConsolidationKind kind, char *const *nodes, size_t n,
                double old_price, double new_price, bool on_demand, const char *message) {
        const char *reason = m == METHOD_EMPTINESS ? "empty" : "underutilized";
        for (size_t i = 0; i < n; i++) {
                NodeEntry *e = entry_for_node(d, nodes[i]);
                if (kind == SOLVER_CONSOLIDATE_REPLACE)
                        replace(d, e, reason, message, on_demand, old_price);
                else
                        drain(d, e, reason, message);
        }
        record(d, m, kind, nodes, n, old_price, new_price, message);
}

/* ---- the pass ------------------------------------------------------------------------------- */

typedef struct Pass {
        Disruption *d;
        Provisioner *p;
        Round *rd;                      /* the snapshot, with its objects and arena: */
        const SolverSnapshot *sn;
        const NodepoolObjects *o;
        Solver *solver;                 /* made on the snapshot for consolidation */
        uint64_t now;
        time_t wall;
        size_t *pool_nodes, *pool_disrupting;
        cJSON *nodes_json;              /* explain: one entry per node */
        cJSON **node_j;                 /* by snapshot node */
        size_t *cand;
        size_t nc;
        size_t *podcount;
} Pass;

static size_t allowance(Pass *s, int k, DisruptionReason r) {
        const SolverSnapshot *sn = s->sn;
        if (k < 0 || (size_t) k >= sn->n_nodepools)
                return 0;
        size_t b = disruption_budget(s->o->extra[k].budgets, r, s->pool_nodes[k], s->wall);
        return b > s->pool_disrupting[k] ? b - s->pool_disrupting[k] : 0;
}

/* Whether a node may go now for a static NodePool's scale-down: registered, not leaving, not
 * held by do-not-disrupt; its pods' PodDisruptionBudgets are honoured by the drain. */
static bool static_removable(Pass *s, size_t i, size_t *ret_pods) {
        const SolverSnapshot *sn = s->sn;
        const SolverNode *n = &sn->nodes[i];
        NodeEntry *e = n->in_flight || n->deleting ? NULL : entry_for_node(s->d, n->name);
        if (!e || e->replace_started_usec || e->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN ||
            node_do_not_disrupt(s->p, n->name))
                return false;
        size_t pods = 0;
        for (size_t q = 0; q < sn->n_pods; q++)
                if (streq_ptr(sn->pods[q].node_name, n->name) && !sn->pods[q].daemonset) {
                        if (sn->pods[q].do_not_disrupt)
                                return false;
                        pods++;
                }
        *ret_pods = pods;
        return true;
}

/* Static NodePools with more nodes than their replicas (scaled down): the excess drains, the
 * nodes with the fewest pods first, then the cheapest to disrupt. Returns how many. */
static size_t static_scale_down(Pass *s) {
        const SolverSnapshot *sn = s->sn;
        size_t acted = 0;
        for (size_t k = 0; k < sn->n_nodepools; k++) {
                const SolverNodePool *pool = &sn->nodepools[k];
                size_t have = 0;
                if (!pool->is_static)
                        continue;
                for (size_t i = 0; i < sn->n_nodes; i++)
                        have += streq_ptr(sn->nodes[i].nodepool, pool->name) && !sn->nodes[i].deleting;
                while (have > pool->replicas) {
                        ssize_t best = -1;
                        size_t best_pods = 0, pods;
                        double best_cost = 0;
                        for (size_t i = 0; i < sn->n_nodes; i++) {
                                if (!streq_ptr(sn->nodes[i].nodepool, pool->name) || !static_removable(s, i, &pods))
                                        continue;
                                double cost = solver_disruption_cost(sn, i);
                                if (best < 0 || pods < best_pods || (pods == best_pods && cost < best_cost))
                                        best = (ssize_t) i, best_pods = pods, best_cost = cost;
                        }
                        if (best < 0)
                                break; /* the rest are in flight, leaving or held: a later pass */
                        const SolverNode *n = &sn->nodes[best];
                        char why[300], *names[] = { (char *) n->name };
                        snprintf(why, sizeof why, "static NodePool %s has %zu node(s) for %u replicas", pool->name, have,
                                 pool->replicas);
                        drain(s->d, entry_for_node(s->d, n->name), "scaled-down", why);
                        record(s->d, METHOD_STATIC, SOLVER_CONSOLIDATE_DELETE, names, 1, n->price, 0, why);
                        have--;
                        acted++;
                }
        }
        return acted;
}

/* The consolidation candidates, each node's verdict in the explanation. */
static int candidates(Pass *s) {
        Provisioner *p = s->p;
        const SolverSnapshot *sn = s->sn;
        const NodepoolObjects *o = s->o;
        for (size_t j = 0; j < sn->n_pods; j++)
                for (size_t i = 0; sn->pods[j].node_name && !sn->pods[j].daemonset && i < sn->n_nodes; i++)
                        if (streq(sn->pods[j].node_name, sn->nodes[i].name))
                                s->podcount[i]++;
        for (size_t i = 0; i < sn->n_nodes; i++) {
                const SolverNode *n = &sn->nodes[i];
                NodeEntry *e = n->in_flight ? NULL : entry_for_node(s->d, n->name);
                cJSON *j = s->node_j[i] = node_json(s->nodes_json, n, e);
                if (j) {
                        cJSON_AddNumberToObject(j, "pods", (double) s->podcount[i]);
                        cJSON_AddNumberToObject(j, "disruptionCost", solver_disruption_cost(sn, i));
                }
                int k = pool_index(sn, n->nodepool);
                if (!n->nodepool) {
                        verdict(j, false, "not managed by nodesmith");
                        continue;
                }
                if (n->in_flight) {
                        verdict(j, false, "launched, not registered yet");
                        continue;
                }
                if (e && e->replace_started_usec) {
                        verdict(j, false, "being replaced (%s)", e->replace_reason);
                        continue;
                }
                if (n->deleting) {
                        verdict(j, false, "leaving (%s)", e ? strempty(e->reason) : "draining");
                        continue;
                }
                if (!e) {
                        verdict(j, false, "its agent does not report");
                        continue;
                }
                if (n->unschedulable) {
                        verdict(j, false, "cordoned");
                        continue;
                }
                if (k < 0) {
                        verdict(j, false, "its NodePool %s is gone", n->nodepool);
                        continue;
                }
                const NodePoolExtra *x = &o->extra[k];
                if (sn->nodepools[k].is_static) {
                        verdict(j, false, "NodePool %s is static (replicas %u): its nodes are not consolidated",
                                n->nodepool, sn->nodepools[k].replicas);
                        continue;
                }
                if (x->consolidate_after_s < 0) {
                        verdict(j, false, "NodePool %s: consolidateAfter Never", n->nodepool);
                        continue;
                }
                /* at least two report intervals after its pods changed: what the agents say has
                 * caught up with what the scheduler did */
                uint64_t settled = s->now - e->pods_changed_usec;
                uint64_t floor = 2 * s->d->cfg.report_interval_ms * USEC_PER_MSEC + USEC_PER_SEC;
                if (settled < (uint64_t) x->consolidate_after_s * USEC_PER_SEC || settled < floor) {
                        verdict(j, false, "pods changed %.0fs ago (consolidateAfter %llds)",
                                (double) settled / USEC_PER_SEC, (long long) x->consolidate_after_s);
                        continue;
                }
                if (node_do_not_disrupt(p, n->name)) {
                        verdict(j, false, "the Node is annotated do-not-disrupt");
                        continue;
                }
                const char *blocker = NULL;
                for (size_t q = 0; q < sn->n_pods && !blocker; q++)
                        if (sn->pods[q].do_not_disrupt && streq_ptr(sn->pods[q].node_name, n->name))
                                blocker = sn->pods[q].name;
                if (blocker) {
                        verdict(j, false, "pod %s is annotated do-not-disrupt", blocker);
                        continue;
                }
                const char *pdb = NULL;
                for (size_t q = 0; q < sn->n_pods && !pdb; q++)
                        if (!sn->pods[q].daemonset && streq_ptr(sn->pods[q].node_name, n->name) &&
                            (pdb = pdb_blocking(p, &sn->pods[q])))
                                blocker = sn->pods[q].name;
                if (pdb) {
                        verdict(j, false, "pod %s: PodDisruptionBudget %s allows no disruption now", blocker, pdb);
                        continue;
                }
                if (s->podcount[i] > 0 && streq_ptr(x->consolidation_policy, "WhenEmpty")) {
                        verdict(j, false, "NodePool %s consolidates only empty nodes", n->nodepool);
                        continue;
                }
                const Recent *r = recent_find(s->d->nominated, n->name);
                if (r && s->now - r->usec < NOMINATED_HOLD_USEC) {
                        verdict(j, false, "pending pods were planned onto it %.0fs ago",
                                (double) (s->now - r->usec) / USEC_PER_SEC);
                        continue;
                }
                cJSON_AddBoolToObject(j, "candidate", true);
                s->cand[s->nc++] = i;
        }
        return 0;
}

/* Still a candidate, by name (for validation). */
static ssize_t candidate_index(Pass *s, const char *name) {
        for (size_t c = 0; c < s->nc; c++)
                if (streq(s->sn->nodes[s->cand[c]].name, name))
                        return (ssize_t) s->cand[c];
        return -1;
}

static double threshold_of(Pass *s, const size_t *nodes, size_t n) {
        double t = -1;
        for (size_t i = 0; i < n; i++) {
                int k = pool_index(s->sn, s->sn->nodes[nodes[i]].nodepool);
                double x = k >= 0 ? s->o->extra[k].consolidation_threshold : -1;
                t = MAX(t, x < 0 ? DEFAULT_THRESHOLD : x);
        }
        return t < 0 ? DEFAULT_THRESHOLD : t;
}

/* The replacements this coordinator launched, recorded on their Nodes (churn.c) so that a
 * restarted or new leader keeps guarding them. */
static void churn_record(Pass *s) {
        int64_t wall = (int64_t) s->wall * (int64_t) USEC_PER_SEC;
        for (size_t i = 0; i < N_RECENT; i++) {
                const Recent *r = &s->d->churn[i];
                NodeEntry *e = r->key[0] ? registry_get(s->d->registry, r->key) : NULL;
                if (e)
                        churn_annotate(s->p, provisioner_node_name(s->p, e), wall - (int64_t) (s->now - r->usec));
        }
}

/* How long ago node i was launched as a replacement (µs): this coordinator's record, else its
 * Node's annotation; false when it was not. */
static bool churn_age(Pass *s, size_t i, uint64_t *ret_age) {
        NodeEntry *e = entry_for_node(s->d, s->sn->nodes[i].name);
        const Recent *r = e ? recent_find(s->d->churn, e->instance_id) : NULL;
        int64_t at, wall = (int64_t) s->wall * (int64_t) USEC_PER_SEC;
        if (r)
                *ret_age = s->now - r->usec;
        else if (churn_annotated(s->p, s->sn->nodes[i].name, &at) >= 0)
                *ret_age = at < wall ? (uint64_t) (wall - at) : 0;
        else
                return false;
        return true;
}

/* The churn guard: a replacement is not consolidated again for a while. */
static void churn_guard(Pass *s) {
        size_t k = 0;
        for (size_t c = 0; c < s->nc; c++) {
                size_t i = s->cand[c];
                uint64_t age;
                int pk = pool_index(s->sn, s->sn->nodes[i].nodepool);
                int64_t guard = pk >= 0 ? s->o->extra[pk].churn_guard_s : -1;
                if (guard < 0)
                        guard = DEFAULT_CHURN_GUARD_S;
                if (churn_age(s, i, &age) && age < (uint64_t) guard * USEC_PER_SEC && s->podcount[i] > 0) {
                        cJSON_ReplaceItemInObjectCaseSensitive(s->node_j[i], "candidate", cJSON_CreateFalse());
                        cJSON_AddStringToObject(s->node_j[i], "why",
                                                "launched by a consolidation lately (churnGuard): only emptiness may take it");
                        continue;
                }
                s->cand[k++] = i;
        }
        s->nc = k;
}

static void explain_set(Disruption *d, Pass *s, const char *state, const char *message) {
        cJSON *j = cJSON_CreateObject();
        if (!j)
                return;
        cJSON_AddNumberToObject(j, "unix", (double) time(NULL));
        cJSON_AddStringToObject(j, "state", state);
        cJSON_AddStringToObject(j, "message", message);
        if (d->pending.set) {
                cJSON *pj = decision_json(d->pending.method, d->pending.kind, d->pending.nodes, d->pending.n_nodes,
                                          d->pending.old_price, d->pending.new_price, d->pending.message,
                                          (uint64_t) time(NULL));
                uint64_t delay = d->cfg.consolidation_validation_ms * USEC_PER_MSEC;
                uint64_t age = provisioner_now(d->p) - d->pending.decided_usec;
                if (pj)
                        cJSON_AddNumberToObject(pj, "validatesInSeconds",
                                                age >= delay ? 0.0 : (double) (delay - age) / USEC_PER_SEC);
                cJSON_AddItemToObject(j, "pending", pj);
        }
        if (d->last_decision)
                cJSON_AddItemToObject(j, "lastDecision", cJSON_Duplicate(d->last_decision, true));
        if (s && s->nodes_json) {
                cJSON_AddItemToObject(j, "nodes", s->nodes_json);
                s->nodes_json = NULL;
        }
        cJSON_Delete(d->explain);
        d->explain = j;
}

int disruption_pass(Disruption *d) {
        Provisioner *p = d->p;
        uint64_t now = provisioner_now(p), t0 = now;
        size_t pending = 0;
        char msg[512];
        const char *step = NULL; /* what failed, for the one log line */
        ProvisionerActivity pa;
        int r = 0;

        if (!provisioner_acting(p)) {
                explain_set(d, NULL, "standby", "this replica does not hold the Lease");
                return 0;
        }
        provisioner_activity(p, &pa);
        if (!pa.learned || pa.round_running)
                return 0;
        promote_replacements(d, &pa, now);
        if (pa.batch_open || pa.in_flight > 0) {
                explain_set(d, NULL, "waiting", "provisioning first: a batch is open or instances are in flight");
                return 0;
        }
        if (now - pa.leading_since_usec < 2 * d->cfg.report_interval_ms * USEC_PER_MSEC + USEC_PER_SEC)
                return 0;
        if (!kube_watch_synced(provisioner_watch(p, PROVISIONER_WATCH_PODS)) ||
            !kube_watch_synced(provisioner_watch(p, PROVISIONER_WATCH_NODES)) ||
            !kube_watch_synced(provisioner_watch(p, PROVISIONER_WATCH_NODEPOOLS)))
                return 0;
        Pass s = { .d = d, .p = p, .now = now, .wall = time(NULL) };
        churn_record(&s);
        r = provisioner_snapshot_take(p, &s.rd, &pending);
        if (r < 0) {
                step = "building the snapshot";
                goto done;
        }
        if (pending > 0) {
                snprintf(msg, sizeof msg, "provisioning first: %zu pod(s) pending or moving", pending);
                explain_set(d, NULL, "waiting", msg);
                goto done;
        }

        const SolverSnapshot *sn = s.sn = provisioner_round_snapshot(s.rd);
        const NodepoolObjects *o = s.o = provisioner_round_objects(s.rd);
        SolverArena *a = provisioner_round_arena(s.rd);
        s.pool_nodes = solver_arena_alloc(a, (sn->n_nodepools + 1) * sizeof(size_t));
        s.pool_disrupting = solver_arena_alloc(a, (sn->n_nodepools + 1) * sizeof(size_t));
        s.cand = solver_arena_alloc(a, (sn->n_nodes + 1) * sizeof(size_t));
        s.podcount = solver_arena_alloc(a, (sn->n_nodes + 1) * sizeof(size_t));
        s.node_j = solver_arena_alloc(a, (sn->n_nodes + 1) * sizeof(cJSON *));
        s.nodes_json = cJSON_CreateArray();
        if (!s.pool_nodes || !s.pool_disrupting || !s.cand || !s.podcount || !s.node_j || !s.nodes_json) {
                r = -ENOMEM, step = "allocating the pass";
                goto done;
        }
        for (size_t i = 0; i < sn->n_nodes; i++) {
                int k = pool_index(sn, sn->nodes[i].nodepool);
                if (k < 0)
                        continue;
                s.pool_nodes[k]++;
                NodeEntry *e = sn->nodes[i].in_flight ? NULL : entry_for_node(d, sn->nodes[i].name);
                if (sn->nodes[i].deleting || (e && e->replace_started_usec))
                        s.pool_disrupting[k]++;
        }

        /* 1. expiration: budgets do not hold it back */
        for (size_t i = 0; i < sn->n_nodes; i++) {
                const SolverNode *n = &sn->nodes[i];
                int k = pool_index(sn, n->nodepool);
                NodeEntry *e = k >= 0 && !n->deleting && !n->in_flight ? entry_for_node(d, n->name) : NULL;
                if (e && !e->replace_started_usec && o->extra[k].expire_after_s > 0 &&
                    now - e->first_seen_usec > (uint64_t) o->extra[k].expire_after_s * USEC_PER_SEC) {
                        snprintf(msg, sizeof msg, "older than its NodePool's expireAfter (%llds)",
                                 (long long) o->extra[k].expire_after_s);
                        char *names[] = { (char *) n->name };
                        drain(d, e, "expired", msg);
                        record(d, METHOD_EXPIRATION, SOLVER_CONSOLIDATE_DELETE, names, 1, n->price, 0, msg);
                        explain_set(d, NULL, "acted", msg);
                        goto done;
                }
        }

        /* 1b. static NodePools scaled down: no budget holds it back (the user asked for it) */
        size_t scaled = static_scale_down(&s);
        if (scaled > 0) {
                snprintf(msg, sizeof msg, "%zu node(s) of static NodePools above their replicas: draining", scaled);
                explain_set(d, NULL, "acted", msg);
                goto done;
        }

        /* 2. drift, and NodePools gone: within the Drifted budget, replace first */
        size_t acted = 0;
        for (size_t i = 0; i < sn->n_nodes; i++) {
                const SolverNode *n = &sn->nodes[i];
                if (!n->nodepool || n->in_flight || n->deleting)
                        continue;
                NodeEntry *e = entry_for_node(d, n->name);
                if (!e || e->replace_started_usec)
                        continue;
                int k = pool_index(sn, n->nodepool);
                char why[300];
                char *names[] = { (char *) n->name };
                if (k < 0) {
                        /* NodePool deleted: its nodes drain (their pods go to the pools left), a tenth at a time */
                        size_t gone = 0, leaving = 0;
                        for (size_t q = 0; q < sn->n_nodes; q++)
                                if (streq_ptr(sn->nodes[q].nodepool, n->nodepool)) {
                                        gone++;
                                        leaving += sn->nodes[q].deleting;
                                }
                        if (leaving >= MAX((gone + 9) / 10, (size_t) 1))
                                continue;
                        snprintf(why, sizeof why, "its NodePool %s was deleted", n->nodepool);
                        drain(d, e, "nodepool-deleted", why);
                        record(d, METHOD_NODEPOOL_DELETED, SOLVER_CONSOLIDATE_DELETE, names, 1, n->price, 0, why);
                        acted++;
                        continue;
                }
                if (!disruption_drifted(p, sn, o, a, i, k, e->instance_id, why, sizeof why))
                        continue;
                if (node_do_not_disrupt(p, n->name) || allowance(&s, k, DISRUPTION_DRIFTED) == 0)
                        continue;
                replace(d, e, "drifted", why, false, 0);
                s.pool_disrupting[k]++;
                record(d, METHOD_DRIFT, SOLVER_CONSOLIDATE_REPLACE, names, 1, n->price, 0, why);
                acted++;
        }
        if (acted > 0) {
                snprintf(msg, sizeof msg, "%zu node(s) drifted or left by a deleted NodePool: replacing", acted);
                explain_set(d, NULL, "acted", msg);
                goto done;
        }

        r = candidates(&s);
        if (r < 0) {
                step = "choosing candidates";
                goto done;
        }

        /* a consolidation found earlier: made again on fresh reports, then acted on */
        Pending *pd = &d->pending;
        if (pd->set) {
                uint64_t delay = d->cfg.consolidation_validation_ms * USEC_PER_MSEC;
                if (now - pd->decided_usec < delay) {
                        explain_set(d, &s, "validating", pd->message);
                        goto done;
                }
                size_t idx[MAX_PENDING_NODES];
                bool ok = true;
                for (size_t i = 0; i < pd->n_nodes && ok; i++) {
                        ssize_t x = candidate_index(&s, pd->nodes[i]);
                        ok = x >= 0;
                        if (ok)
                                idx[i] = (size_t) x;
                }
                SolverConsolidation *c = NULL;
                char *err = NULL;
                if (ok && pd->method == METHOD_EMPTINESS) {
                        for (size_t i = 0; i < pd->n_nodes && ok; i++)
                                ok = s.podcount[idx[i]] == 0;
                } else if (ok) {
                        SolverConsolidateOptions co = { .threshold = threshold_of(&s, idx, pd->n_nodes),
                                                        .spot_to_spot = d->cfg.spot_to_spot };
                        /* the solver failing is the pass failing, not the consolidation */
                        r = solver_new(sn, &s.solver, &err);
                        if (r >= 0)
                                r = solver_consolidate_evaluate(s.solver, &co, idx, pd->n_nodes, &c);
                        if (r < 0) {
                                snprintf(msg, sizeof msg, "validating the consolidation (%s)", strempty(err));
                                free(err);
                                pending_clear(pd);
                                step = msg;
                                goto done;
                        }
                        ok = c->kind == pd->kind &&
                             (c->kind != SOLVER_CONSOLIDATE_REPLACE || c->new_price <= pd->new_price * 1.001);
                        char bwhy[300];
                        if (ok && !balanced_approves(sn, o->extra, idx, pd->n_nodes, c->old_price, c->new_price,
                                                     bwhy, sizeof bwhy))
                                ok = false, snprintf(c->message, sizeof c->message, "%.250s", bwhy);
                        free(err);
                }
                if (ok) {
                        d->validated++;
                        act(d, pd->method, pd->kind, pd->nodes, pd->n_nodes, pd->old_price, c ? c->new_price : 0,
                            c && c->replacement && c->replacement->capacity_type == SOLVER_CAPACITY_ON_DEMAND,
                            c ? c->message : pd->message);
                        snprintf(msg, sizeof msg, "%s", pd->message);
                        pending_clear(pd);
                        explain_set(d, &s, "acted", msg);
                } else {
                        d->invalidated++;
                        snprintf(msg, sizeof msg, "dropped after validation: %s", c ? c->message : "a node is no longer a candidate");
                        log_info("Consolidation of %zu node(s) %s.", pd->n_nodes, msg);
                        pending_clear(pd);
                        explain_set(d, &s, "idle", msg);
                }
                solver_consolidation_free(c);
                goto done;
        }

        /* 3. emptiness: every empty candidate within the Empty budget, at once */
        Method method = METHOD_EMPTINESS;
        SolverConsolidationKind kind = SOLVER_CONSOLIDATE_DELETE;
        size_t *set = solver_arena_alloc(a, (s.nc + 1) * sizeof(size_t)), ns = 0;
        double old_price = 0, new_price = 0;
        bool on_demand = false;
        if (!set) {
                r = -ENOMEM, step = "allocating the pass";
                goto done;
        }
        for (size_t c = 0; c < s.nc; c++) {
                size_t i = s.cand[c];
                int k = pool_index(sn, sn->nodes[i].nodepool);
                if (s.podcount[i] > 0 || allowance(&s, k, DISRUPTION_EMPTY) == 0)
                        continue;
                s.pool_disrupting[k]++;
                set[ns++] = i;
                old_price += sn->nodes[i].price;
        }
        if (ns > 0)
                snprintf(msg, sizeof msg, "%zu empty node(s) (DaemonSet pods only); saves $%.4f/h", ns, old_price);

        /* 4, 5. multi-node then single-node consolidation */
        SolverConsolidation *c = NULL;
        if (ns == 0) {
                churn_guard(&s);
                size_t *allow = solver_arena_alloc(a, (sn->n_nodepools + 1) * sizeof(size_t));
                char *err = NULL;
                if (!allow) {
                        r = -ENOMEM, step = "allocating the pass";
                        goto done;
                }
                for (size_t k = 0; k < sn->n_nodepools; k++)
                        allow[k] = allowance(&s, (int) k, DISRUPTION_UNDERUTILIZED);
                SolverConsolidateOptions co = { .candidates = s.cand, .n_candidates = s.nc,
                                                .pool_allowance = allow,
                                                .threshold = threshold_of(&s, s.cand, s.nc),
                                                .spot_to_spot = d->cfg.spot_to_spot };
                r = solver_new(sn, &s.solver, &err);
                if (r < 0) {
                        snprintf(msg, sizeof msg, "compiling the snapshot (%s)", strempty(err));
                        free(err);
                        step = msg;
                        goto done;
                }
                r = solver_consolidate(s.solver, &co, &c);
                if (r < 0) {
                        step = "consolidating";
                        goto done;
                }
                if (c->kind == SOLVER_CONSOLIDATE_NONE) {
                        explain_set(d, &s, "idle", c->message);
                        solver_consolidation_free(c);
                        goto done;
                }
                char bwhy[300];
                if (!balanced_approves(sn, o->extra, c->nodes, c->n_nodes, c->old_price, c->new_price, bwhy,
                                       sizeof bwhy)) {
                        log_info("Consolidation of %zu node(s) not worth its disruption: %s.", c->n_nodes, bwhy);
                        explain_set(d, &s, "idle", bwhy);
                        solver_consolidation_free(c);
                        goto done;
                }
                method = c->multi ? METHOD_MULTI : METHOD_SINGLE;
                kind = c->kind;
                for (size_t i = 0; i < c->n_nodes && ns < s.nc; i++)
                        set[ns++] = c->nodes[i];
                old_price = c->old_price;
                new_price = c->new_price;
                on_demand = c->replacement && c->replacement->capacity_type == SOLVER_CAPACITY_ON_DEMAND;
                snprintf(msg, sizeof msg, "%s", c->message);
                solver_consolidation_free(c);
        }

        /* found: validated after the delay (at once when there is none) */
        pending_clear(pd);
        pd->method = method;
        pd->kind = kind;
        pd->old_price = old_price;
        pd->new_price = new_price;
        pd->decided_usec = now;
        snprintf(pd->message, sizeof pd->message, "%s", msg);
        for (size_t i = 0; i < ns && pd->n_nodes < MAX_PENDING_NODES; i++) {
                pd->nodes[pd->n_nodes] = strdup(sn->nodes[set[i]].name);
                if (!pd->nodes[pd->n_nodes]) {
                        pending_clear(pd);
                        r = -ENOMEM, step = "recording the consolidation";
                        goto done;
                }
                pd->n_nodes++;
        }
        pd->set = true;
        log_info("Consolidation found (%s, %s of %zu node(s)): %s; acting after %llums if it still holds.",
                 method_names[method], solver_consolidation_kind_to_name(kind), pd->n_nodes, msg,
                 (unsigned long long) d->cfg.consolidation_validation_ms);
        if (d->cfg.consolidation_validation_ms == 0) {
                d->validated++;
                act(d, pd->method, pd->kind, pd->nodes, pd->n_nodes, old_price, new_price, on_demand, msg);
                pending_clear(pd);
                explain_set(d, &s, "acted", msg);
        } else
                explain_set(d, &s, "validating", msg);
done:
        cJSON_Delete(s.nodes_json);
        solver_free(s.solver);
        provisioner_round_free(s.rd);
        d->last_pass_seconds = (double) (provisioner_now(p) - t0) / USEC_PER_SEC;
        if (r < 0) {
                char why[600];
                d->pass_failures++;
                snprintf(why, sizeof why, "the pass failed %s: %s", step, strerror(-r));
                explain_set(d, NULL, "failed", why);
                return log_warning_errno(r, "Disruption: %s", why);
        }
        return 0;
}

void disruption_metrics(const Disruption *d, StrBuf *b) {
        size_t replacing = 0;
        NodeEntry *e;
        REGISTRY_FOREACH(e, d->registry)
                replacing += e->replace_started_usec > 0;
        strbuf_printf(b, "# HELP nodesmith_disruptions_total Nodes the coordinator decided to remove (expired, empty, underutilized).\n"
                         "# TYPE nodesmith_disruptions_total counter\nnodesmith_disruptions_total %llu\n",
                      (unsigned long long) d->disruptions);
        strbuf_printf(b, "# HELP nodesmith_disruption_decisions_total Disruption decisions acted on, by method.\n"
                         "# TYPE nodesmith_disruption_decisions_total counter\n");
        for (int m = 0; m < _METHOD_MAX; m++)
                strbuf_printf(b, "nodesmith_disruption_decisions_total{method=\"%s\"} %llu\n", method_names[m],
                              (unsigned long long) d->decisions[m]);
        strbuf_printf(b, "# HELP nodesmith_consolidation_validations_total Consolidations made again after the validation delay, by result.\n"
                         "# TYPE nodesmith_consolidation_validations_total counter\n"
                         "nodesmith_consolidation_validations_total{result=\"acted\"} %llu\n"
                         "nodesmith_consolidation_validations_total{result=\"dropped\"} %llu\n",
                      (unsigned long long) d->validated, (unsigned long long) d->invalidated);
        strbuf_printf(b, "# HELP nodesmith_nodes_replacing Nodes whose replacement is being launched before they drain.\n"
                         "# TYPE nodesmith_nodes_replacing gauge\nnodesmith_nodes_replacing %zu\n", replacing);
        strbuf_printf(b, "# HELP nodesmith_disruption_pass_failures_total Disruption passes that stopped on an error.\n"
                         "# TYPE nodesmith_disruption_pass_failures_total counter\nnodesmith_disruption_pass_failures_total %llu\n",
                      (unsigned long long) d->pass_failures);
        strbuf_printf(b, "# HELP nodesmith_disruption_pass_seconds Duration of the last disruption pass.\n"
                         "# TYPE nodesmith_disruption_pass_seconds gauge\nnodesmith_disruption_pass_seconds %.6f\n",
                      d->last_pass_seconds);
}

char *disruption_api(const Disruption *d) {
        if (!d->explain)
                return strdup("{\"state\": \"starting\", \"message\": \"no disruption pass yet\"}");
        return cJSON_PrintUnformatted(d->explain);
}
