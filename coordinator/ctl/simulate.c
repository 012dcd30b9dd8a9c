/* SPDX-License-Identifier: Apache-2.0 */
/* nodesmithctl simulate: what nodesmith would launch for these pods, offline. */

#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>

#include "model/catalog.h"
#include "ctl-solver.h"
#include "model/nodepool.h"
#include "sim-reservations.h"
#include "solver/solver.h"
#include "log.h"
#include "macro.h"
#include "yaml-json.h"

#define MAX_FILES 32
#define CATALOG_NAME "catalog-us-east-1.json"

DEFINE_TRIVIAL_CLEANUP_FUNC(SolverModel *, solver_model_free);

int ctl_solver_read_documents(const char *path, cJSON **ret, char **ret_error) {
        FILE *f = streq(path, "-") ? stdin : fopen(path, "re");
        if (!f) {
                int r = -errno;
                if (asprintf(ret_error, "%s: %s", path, strerror(errno)) < 0)
                        *ret_error = NULL;
                return r;
        }
        char *buf = NULL;
        size_t n = 0, cap = 0;
        int r = 0;
        for (;;) {
                if (n + 65536 + 1 > cap) {
                        cap = cap ? cap * 2 : 65536 * 2;
                        if (cap > YAML_JSON_MAX_INPUT + 65536 * 4) {
                                r = -E2BIG;
                                break;
                        }
                        char *nb = realloc(buf, cap);
                        if (!nb) {
                                r = -ENOMEM;
                                break;
                        }
                        buf = nb;
                }
                size_t k = fread(buf + n, 1, cap - n - 1, f);
                n += k;
                if (k == 0)
                        break;
        }
        if (r >= 0 && ferror(f))
                r = -EIO;
        if (f != stdin)
                fclose(f);
        if (r >= 0 && n > YAML_JSON_MAX_INPUT)
                r = -E2BIG;
        if (r < 0) {
                free(buf);
                if (asprintf(ret_error, "%s: %s", path,
                             r == -E2BIG ? "file too large" : strerror(-r)) < 0)
                        *ret_error = NULL;
                return r;
        }
        buf[n] = 0;
        char err[256];
        r = json_or_yaml_documents_error(buf, n, ret, err, sizeof(err));
        free(buf);
        if (r < 0) {
                if (asprintf(ret_error, "%s: %s", path, err[0] ? err : strerror(-r)) < 0)
                        *ret_error = NULL;
                return r;
        }
        return 0;
}

static int load_catalog(const char *path, Catalog **ret) {
        char *err = NULL;
        int r;
        if (path) {
                r = catalog_load_file(path, ret, &err);
                if (r < 0) {
                        fprintf(stderr, "nodesmithctl simulate: catalog %s\n", err ? err : strerror(-r));
                        free(err);
                }
                return r;
        }
        const char *env = getenv("NODESMITH_CATALOG");
        char exe[PATH_MAX], cand[PATH_MAX + 64];
        const char *tries[8];
        size_t nt = 0;
        char rel1[PATH_MAX + 64], rel2[PATH_MAX + 64];
        if (!isempty(env))
                tries[nt++] = env;
        tries[nt++] = "data/" CATALOG_NAME;
        ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (k > 0) {
                exe[k] = 0;
                char *slash = strrchr(exe, '/');
                if (slash) {
                        *slash = 0;
                        snprintf(rel1, sizeof(rel1), "%s/../data/%s", exe, CATALOG_NAME);
                        snprintf(rel2, sizeof(rel2), "%s/../../data/%s", exe, CATALOG_NAME);
                        tries[nt++] = rel1;
                        tries[nt++] = rel2;
                        snprintf(cand, sizeof(cand), "%s/../share/nodesmith/%s", exe, CATALOG_NAME);
                        tries[nt++] = cand;
                }
        }
        tries[nt++] = "/usr/share/nodesmith/" CATALOG_NAME;
        for (size_t i = 0; i < nt; i++) {
                if (access(tries[i], R_OK) < 0)
                        continue;
                r = catalog_load_file(tries[i], ret, &err);
                if (r < 0) {
                        fprintf(stderr, "nodesmithctl simulate: catalog %s\n", err ? err : strerror(-r));
                        free(err);
                }
                return r;
        }
        fprintf(stderr, "nodesmithctl simulate: no instance catalog found; pass --catalog FILE or set NODESMITH_CATALOG\n");
        return -ENOENT;
}

static void usage(FILE *f) {
        fprintf(f,
                "Usage: nodesmithctl simulate --pods FILE --nodepools FILE [--nodes FILE] [--catalog FILE]\n"
                "                             [--reservations FILE] [-o table|json [--model]] [--no-headroom]\n"
                "                             [--no-preemption] [--max-types N] [--target-nodes N]\n\n"
                "Reads Kubernetes objects (JSON or YAML, several documents allowed; '-' is stdin):\n"
                "  --pods       Pods, Deployments, StatefulSets, ReplicaSets, Jobs, DaemonSets, PVCs, PVs,\n"
                "               StorageClasses, PriorityClasses, or lists of them (repeatable)\n"
                "  --nodepools  NodePools and EC2NodeClasses (nodesmith.io/v1; Karpenter's are converted)\n"
                "  --nodes      Nodes that exist already, and their pods through --pods with spec.nodeName\n"
                "  --catalog    instance catalog (default: $NODESMITH_CATALOG or data/%s)\n"
                "  --reservations  capacity reservations: the answer of `aws ec2 describe-capacity-reservations`\n"
                "               (JSON); each EC2NodeClass plans with those its capacityReservationSelectorTerms\n"
                "               select, first, as the coordinator does\n"
                "and prints the plan: which nodes to launch, where each pod goes, what cannot run and why,\n"
                "and the hourly cost. --model adds to the JSON what new nodes may be (pool, type, capacity\n"
                "type, price, room after DaemonSets) and the pending pods' shapes (bench/optimum.py).\n"
                "--target-nodes N sizes new nodes so the pods fit in about N of them (fewer, bigger nodes).\n",
                CATALOG_NAME);
}

/* What a launched node of this type can hold in its pool (EC2NodeClass kubelet settings). */
static const SolverResources *launch_allocatable(const SolverSnapshot *snap, const SolverLaunch *l) {
        const SolverNodePool *np = &snap->nodepools[l->nodepool];
        return np->allocatable ? &np->allocatable[l->type] : &snap->types[l->type].allocatable;
}

static const char *pod_ref(const SolverPod *p, char *buf, size_t n) {
        snprintf(buf, n, "%s/%s", p->namespace_ ? p->namespace_ : "default", p->name ? p->name : "?");
        return buf;
}

static cJSON *resources_json(const SolverResources *r) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return NULL;
        for (int i = 0; i < _SOLVER_RES_MAX; i++) {
                if (r->v[i] == 0)
                        continue;
                char b[48];
                cJSON_AddStringToObject(o, solver_resource_to_name(i), solver_format_quantity(r->v[i], i, b, sizeof(b)));
        }
        return o;
}

/* "web x3, db x1" from the pods' owners (or names) */
static void owners_summary(const SolverSnapshot *snap, const SolverLaunch *l, char *buf, size_t n) {
        size_t o = 0;
        buf[0] = 0;
        const char *seen[8];
        int count[8];
        size_t ns = 0, more = 0;
        for (size_t i = 0; i < l->n_pods; i++) {
                const SolverPod *p = &snap->pods[l->pods[i]];
                const char *who = p->owner ? strchr(p->owner, '/') + 1 : p->name;
                size_t k;
                for (k = 0; k < ns; k++)
                        if (streq(seen[k], who))
                                break;
                if (k < ns)
                        count[k]++;
                else if (ns < ELEMENTSOF(seen)) {
                        seen[ns] = who;
                        count[ns++] = 1;
                } else
                        more++;
        }
        for (size_t k = 0; k < ns && o < n; k++)
                o += (size_t) snprintf(buf + o, n - o, "%s%s x%d", k ? ", " : "", seen[k], count[k]);
        if (more && o < n)
                snprintf(buf + o, n - o, ", +%zu more", more);
}

static int print_table(const SolverSnapshot *snap, const SolverResult *res, const NodepoolObjects *objs,
                       const SimReservations *rv) {
        char b3[48], b4[48], who[256], ref[300];
        if (res->n_launches > 0) {
                printf("%-14s %-18s %-12s %-9s %9s %5s %-19s %-21s %s\n", "NODEPOOL", "INSTANCE TYPE", "ZONE", "CAPACITY",
                       "$/HOUR", "PODS", "CPU REQ/ALLOC", "MEMORY REQ/ALLOC", "WORKLOADS");
                for (size_t i = 0; i < res->n_launches; i++) {
                        const SolverLaunch *l = &res->launches[i];
                        const SolverInstanceType *t = &snap->types[l->type];
                        const SolverResources *alloc = launch_allocatable(snap, l);
                        char cpu[100], mem[100];
                        snprintf(cpu, sizeof(cpu), "%" PRId64 "m/%" PRId64 "m", l->requests.v[SOLVER_RES_CPU],
                                 alloc->v[SOLVER_RES_CPU]);
                        snprintf(mem, sizeof(mem), "%s/%s",
                                 solver_format_quantity(l->requests.v[SOLVER_RES_MEMORY], SOLVER_RES_MEMORY, b3, sizeof(b3)),
                                 solver_format_quantity(alloc->v[SOLVER_RES_MEMORY], SOLVER_RES_MEMORY, b4, sizeof(b4)));
                        owners_summary(snap, l, who, sizeof(who));
                        if (l->headroom_units)
                                snprintf(who + strlen(who), sizeof(who) - strlen(who), "%sheadroom x%u", who[0] ? ", " : "",
                                         l->headroom_units);
                        printf("%-14s %-18s %-12s %-9s %9.4f %5zu %-19s %-21s %s\n", sim_launch_pool(rv, snap, l),
                               t->name, l->zone ? l->zone : "any", sim_launch_capacity_type(rv, l, l->capacity_type),
                               sim_launch_price(rv, l, l->price), l->n_pods, cpu, mem, who);
                        if (sim_launch_reservation(rv, l))
                                printf("%-14s into capacity reservation %s\n", "", sim_launch_reservation(rv, l)->id);
                }
        } else
                printf("No new nodes needed.\n");

        size_t existing = 0;
        for (size_t i = 0; i < res->n_decisions; i++)
                existing += res->decisions[i].kind == SOLVER_DECISION_EXISTING;
        if (existing) {
                printf("\nOn existing nodes (%zu pods):\n", existing);
                for (size_t n = 0; n < snap->n_nodes; n++) {
                        size_t c = 0;
                        for (size_t i = 0; i < res->n_decisions; i++)
                                c += res->decisions[i].kind == SOLVER_DECISION_EXISTING && res->decisions[i].target == n;
                        if (c)
                                printf("  %-40s %zu pods\n", snap->nodes[n].name, c);
                }
        }
        if (res->n_preempting) {
                printf("\nPreemption (no new capacity needed):\n");
                for (size_t i = 0; i < res->n_decisions; i++)
                        if (res->decisions[i].kind == SOLVER_DECISION_PREEMPT)
                                printf("  %-40s preempts lower-priority pods on %s\n",
                                       pod_ref(&snap->pods[i], ref, sizeof(ref)), snap->nodes[res->decisions[i].target].name);
                for (size_t i = 0; i < res->n_preempted_pods; i++)
                        printf("  %-40s is evicted and re-planned\n",
                               pod_ref(&snap->pods[res->preempted_pods[i]], ref, sizeof(ref)));
        }
        if (res->n_unschedulable) {
                printf("\nCannot be placed (%zu pods):\n", res->n_unschedulable);
                for (size_t i = 0; i < res->n_decisions; i++) {
                        const SolverDecision *d = &res->decisions[i];
                        if (d->kind == SOLVER_DECISION_UNSCHEDULABLE)
                                printf("  %-40s %-12s %s\n", pod_ref(&snap->pods[i], ref, sizeof(ref)),
                                       solver_reason_to_name(d->reason), d->message ? d->message : "");
                }
        }
        for (size_t i = 0; i < res->n_claim_zones; i++)
                printf("%sVolume claim %s follows its pod to %s\n", i == 0 ? "\n" : "", res->claim_zones[i].claim,
                       res->claim_zones[i].zone ? res->claim_zones[i].zone : "the zone EC2 picks");
        printf("\nTotal: %zu new node%s, $%.4f per hour; %zu pods on new nodes, %zu on existing nodes, %zu preempting, "
               "%zu cannot be placed\n",
               res->n_launches, res->n_launches == 1 ? "" : "s", sim_total_price(rv, res), res->n_placed_new, res->n_placed_existing,
               res->n_preempting, res->n_unschedulable);
        for (size_t i = 0; i < objs->n_notes; i++)
                printf("%s%s\n", i == 0 ? "\nNotes:\n  " : "  ", objs->notes[i]);
        return 0;
}

/* Raw numbers (millicores, bytes, units) for tools that compute with them. */
static cJSON *resources_raw_json(const SolverResources *r) {
        cJSON *o = cJSON_CreateObject();
        for (int i = 0; o && i < _SOLVER_RES_MAX; i++)
                if (r->v[i] != 0)
                        cJSON_AddNumberToObject(o, solver_resource_to_name(i), (double) r->v[i]);
        return o;
}

static cJSON *zones_json(const Solver *s, uint32_t zones) {
        cJSON *a = cJSON_CreateArray();
        for (uint32_t z = 0; a && z < 32; z++)
                if ((zones & (1u << z)) && solver_zone_name(s, z))
                        cJSON_AddItemToArray(a, cJSON_CreateString(solver_zone_name(s, z)));
        return a;
}

static cJSON *model_json(const SolverSnapshot *snap, const Solver *solver, const SolverModel *m) {
        char ref[300];
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return NULL;
        cJSON *kinds = cJSON_AddArrayToObject(o, "kinds");
        for (size_t i = 0; kinds && i < m->n_kinds; i++) {
                const SolverModelKind *k = &m->kinds[i];
                cJSON *ko = cJSON_CreateObject();
                if (!ko)
                        break;
                cJSON_AddItemToArray(kinds, ko);
                cJSON_AddStringToObject(ko, "nodepool", snap->nodepools[k->nodepool].name);
                cJSON_AddStringToObject(ko, "instanceType", snap->types[k->type].name);
                cJSON_AddStringToObject(ko, "capacityType", solver_capacity_type_to_name(k->capacity_type));
                cJSON_AddNumberToObject(ko, "price", k->price);
                cJSON_AddItemToObject(ko, "room", resources_raw_json(&k->room));
                cJSON_AddItemToObject(ko, "zones", zones_json(solver, k->zones));
        }
        cJSON *shapes = cJSON_AddArrayToObject(o, "shapes");
        for (size_t i = 0; shapes && i < m->n_shapes; i++) {
                const SolverModelShape *ms = &m->shapes[i];
                cJSON *so = cJSON_CreateObject();
                if (!so)
                        break;
                cJSON_AddItemToArray(shapes, so);
                cJSON *pods = cJSON_AddArrayToObject(so, "pods");
                for (size_t k = 0; pods && k < ms->n_pods; k++)
                        cJSON_AddItemToArray(pods, cJSON_CreateString(pod_ref(&snap->pods[ms->pods[k]], ref, sizeof(ref))));
                cJSON_AddItemToObject(so, "requests", resources_raw_json(&ms->requests));
                cJSON_AddNumberToObject(so, "maxPerNode", ms->max_per_node);
                cJSON_AddBoolToObject(so, "relaxed", ms->constrained);
                cJSON_AddNumberToObject(so, "zoneSpread", ms->zone_spread);
                cJSON_AddItemToObject(so, "zones", zones_json(solver, ms->zones));
                cJSON *ks = cJSON_AddArrayToObject(so, "kinds");
                for (size_t k = 0; ks && k < ms->n_kinds; k++)
                        cJSON_AddItemToArray(ks, cJSON_CreateNumber(ms->kinds[k]));
        }
        return o;
}

static int print_json(const SolverSnapshot *snap, const SolverResult *res, const NodepoolObjects *objs,
                      const SimReservations *rv,
                      const Solver *solver, const SolverModel *model) {
        char ref[300];
        cJSON *root = cJSON_CreateObject();
        if (!root)
                return -ENOMEM;
        cJSON *launches = cJSON_AddArrayToObject(root, "launches");
        for (size_t i = 0; i < res->n_launches; i++) {
                const SolverLaunch *l = &res->launches[i];
                cJSON *o = cJSON_CreateObject();
                if (!o)
                        break;
                cJSON_AddItemToArray(launches, o);
                const NodeReservation *cr = sim_launch_reservation(rv, l);
                cJSON_AddStringToObject(o, "nodepool", sim_launch_pool(rv, snap, l));
                if (cr)
                        cJSON_AddStringToObject(o, "capacityReservationId", cr->id);
                if (snap->nodepools[l->nodepool].node_class)
                        cJSON_AddStringToObject(o, "nodeClass", snap->nodepools[l->nodepool].node_class);
                cJSON_AddStringToObject(o, "instanceType", snap->types[l->type].name);
                if (l->zone)
                        cJSON_AddStringToObject(o, "zone", l->zone);
                else
                        cJSON_AddNullToObject(o, "zone");
                cJSON_AddStringToObject(o, "capacityType", sim_launch_capacity_type(rv, l, l->capacity_type));
                cJSON_AddNumberToObject(o, "price", sim_launch_price(rv, l, l->price));
                cJSON_AddNumberToObject(o, "instanceTypeOptions", (double) l->n_types);
                cJSON_AddItemToObject(o, "requests", resources_json(&l->requests));
                cJSON_AddItemToObject(o, "allocatable", resources_json(launch_allocatable(snap, l)));
                cJSON *labels = cJSON_AddObjectToObject(o, "labels");
                for (size_t k = 0; k < l->n_labels; k++)
                        cJSON_AddStringToObject(labels, l->labels[k].key,
                                                streq(l->labels[k].key, SOLVER_LABEL_NODEPOOL) ? sim_launch_pool(rv, snap, l)
                                                                                               : l->labels[k].value);
                if (cr && !cJSON_GetObjectItemCaseSensitive(labels, "karpenter.sh/capacity-type"))
                        cJSON_AddStringToObject(labels, "karpenter.sh/capacity-type", RESERVATION_CAPACITY_TYPE);
                cJSON *pods = cJSON_AddArrayToObject(o, "pods");
                for (size_t k = 0; k < l->n_pods; k++)
                        cJSON_AddItemToArray(pods, cJSON_CreateString(pod_ref(&snap->pods[l->pods[k]], ref, sizeof(ref))));
                cJSON_AddNumberToObject(o, "headroomUnits", l->headroom_units);
                cJSON *offs = cJSON_AddArrayToObject(o, "offerings");
                for (size_t k = 0; k < l->n_offerings; k++) {
                        cJSON *of = cJSON_CreateObject();
                        if (!of)
                                break;
                        cJSON_AddStringToObject(of, "instanceType", snap->types[l->offerings[k].type].name);
                        cJSON_AddStringToObject(of, "zone", l->offerings[k].zone);
                        cJSON_AddStringToObject(of, "capacityType", sim_launch_capacity_type(rv, l, l->offerings[k].capacity_type));
                        cJSON_AddNumberToObject(of, "price", sim_launch_price(rv, l, l->offerings[k].price));
                        cJSON_AddItemToArray(offs, of);
                }
        }
        cJSON *existing = cJSON_AddArrayToObject(root, "existing");
        cJSON *pre = cJSON_AddArrayToObject(root, "preemptions");
        cJSON *uns = cJSON_AddArrayToObject(root, "unschedulable");
        for (size_t i = 0; i < res->n_decisions; i++) {
                const SolverDecision *d = &res->decisions[i];
                cJSON *o = NULL;
                switch (d->kind) {
                case SOLVER_DECISION_EXISTING:
                        o = cJSON_CreateObject();
                        cJSON_AddStringToObject(o, "pod", pod_ref(&snap->pods[i], ref, sizeof(ref)));
                        cJSON_AddStringToObject(o, "node", snap->nodes[d->target].name);
                        cJSON_AddItemToArray(existing, o);
                        break;
                case SOLVER_DECISION_PREEMPT:
                        o = cJSON_CreateObject();
                        cJSON_AddStringToObject(o, "pod", pod_ref(&snap->pods[i], ref, sizeof(ref)));
                        cJSON_AddStringToObject(o, "node", snap->nodes[d->target].name);
                        cJSON_AddItemToArray(pre, o);
                        break;
                case SOLVER_DECISION_UNSCHEDULABLE:
                        o = cJSON_CreateObject();
                        cJSON_AddStringToObject(o, "pod", pod_ref(&snap->pods[i], ref, sizeof(ref)));
                        cJSON_AddStringToObject(o, "reason", solver_reason_to_name(d->reason));
                        cJSON_AddStringToObject(o, "message", d->message ? d->message : "");
                        cJSON_AddItemToArray(uns, o);
                        break;
                default:
                        break;
                }
                if (o && d->relaxed)
                        cJSON_AddNumberToObject(o, "preferencesRelaxed", d->relaxed);
        }
        cJSON *evicted = cJSON_AddArrayToObject(root, "preempted");
        for (size_t i = 0; i < res->n_preempted_pods; i++)
                cJSON_AddItemToArray(evicted, cJSON_CreateString(pod_ref(&snap->pods[res->preempted_pods[i]], ref, sizeof(ref))));
        cJSON *claims = cJSON_AddArrayToObject(root, "claimZones");
        for (size_t i = 0; i < res->n_claim_zones; i++) {
                cJSON *o = cJSON_CreateObject();
                if (!o)
                        break;
                cJSON_AddStringToObject(o, "claim", res->claim_zones[i].claim);
                if (res->claim_zones[i].zone)
                        cJSON_AddStringToObject(o, "zone", res->claim_zones[i].zone);
                else
                        cJSON_AddNullToObject(o, "zone");
                cJSON_AddItemToArray(claims, o);
        }
        cJSON *sum = cJSON_AddObjectToObject(root, "summary");
        cJSON_AddNumberToObject(sum, "pods", (double) res->n_decisions);
        cJSON_AddNumberToObject(sum, "newNodes", (double) res->n_launches);
        cJSON_AddNumberToObject(sum, "placedOnNewNodes", (double) res->n_placed_new);
        cJSON_AddNumberToObject(sum, "placedOnExistingNodes", (double) res->n_placed_existing);
        cJSON_AddNumberToObject(sum, "preempting", (double) res->n_preempting);
        cJSON_AddNumberToObject(sum, "unschedulable", (double) res->n_unschedulable);
        cJSON_AddNumberToObject(sum, "hourlyCost", sim_total_price(rv, res));
        cJSON *notes = cJSON_AddArrayToObject(root, "notes");
        for (size_t i = 0; i < objs->n_notes; i++)
                cJSON_AddItemToArray(notes, cJSON_CreateString(objs->notes[i]));
        if (model)
                cJSON_AddItemToObject(root, "model", model_json(snap, solver, model));
        char *s = model ? cJSON_PrintUnformatted(root) : cJSON_Print(root);
        cJSON_Delete(root);
        if (!s)
                return -ENOMEM;
        printf("%s\n", s);
        free(s);
        return 0;
}

static int add_file(NodepoolObjects *objs, const char *path, size_t *ret_pools_before) {
        cJSON *docs = NULL;
        char *err = NULL;
        int r = ctl_solver_read_documents(path, &docs, &err);
        if (r < 0) {
                fprintf(stderr, "nodesmithctl simulate: %s\n", err ? err : strerror(-r));
                free(err);
                return r;
        }
        if (ret_pools_before)
                *ret_pools_before = objs->n_pools;
        r = nodepool_objects_add(objs, docs, path, &err);
        cJSON_Delete(docs);
        if (r < 0) {
                fprintf(stderr, "nodesmithctl simulate: %s\n",
                        err ? err : r == -E2BIG ? "input too large" : strerror(-r));
                free(err);
        }
        return r;
}

int ctl_simulate_main(int argc, char **argv) {
        static const struct option opts[] = {
                { "pods", required_argument, NULL, 'p' },
                { "nodepools", required_argument, NULL, 'n' },
                { "nodes", required_argument, NULL, 'N' },
                { "catalog", required_argument, NULL, 'c' },
                { "output", required_argument, NULL, 'o' },
                { "no-headroom", no_argument, NULL, 'H' },
                { "no-preemption", no_argument, NULL, 'P' },
                { "max-types", required_argument, NULL, 'm' },
                { "model", no_argument, NULL, 'M' },
                { "target-nodes", required_argument, NULL, 'T' },
                { "reservations", required_argument, NULL, 'R' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *pods[MAX_FILES], *pools[MAX_FILES], *nodes[MAX_FILES], *catalog_path = NULL, *reservations = NULL;
        size_t np = 0, npl = 0, nn = 0;
        bool json = false, model = false;
        SolverOptions so = SOLVER_OPTIONS_DEFAULT;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) >= 0) {
                switch (c) {
                case 'p':
                case 'n':
                case 'N': {
                        size_t *cnt = c == 'p' ? &np : c == 'n' ? &npl : &nn;
                        const char **arr = c == 'p' ? pods : c == 'n' ? pools : nodes;
                        if (*cnt >= MAX_FILES) {
                                fprintf(stderr, "nodesmithctl simulate: at most %d files per option\n", MAX_FILES);
                                return 2;
                        }
                        arr[(*cnt)++] = optarg;
                        break;
                }
                case 'c':
                        catalog_path = optarg;
                        break;
                case 'R':
                        reservations = optarg;
                        break;
                case 'o':
                        if (streq(optarg, "json"))
                                json = true;
                        else if (!streq(optarg, "table")) {
                                fprintf(stderr, "nodesmithctl simulate: -o must be table or json\n");
                                return 2;
                        }
                        break;
                case 'H':
                        so.no_headroom = true;
                        break;
                case 'P':
                        so.no_preemption = true;
                        break;
                case 'm': {
                        char *end;
                        unsigned long v = strtoul(optarg, &end, 10);
                        if (*end || v == 0 || v > 1000) {
                                fprintf(stderr, "nodesmithctl simulate: --max-types must be 1..1000\n");
                                return 2;
                        }
                        so.max_types_per_launch = v;
                        break;
                }
                case 'M':
                        model = true;
                        break;
                case 'T': {
                        char *end;
                        errno = 0;
                        unsigned long v = strtoul(optarg, &end, 10);
                        if (errno || *end || end == optarg || v == 0 || v > SOLVER_MAX_NODES) {
                                fprintf(stderr, "nodesmithctl simulate: --target-nodes must be 1..%d\n", SOLVER_MAX_NODES);
                                return 2;
                        }
                        so.target_nodes = v;
                        break;
                }
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "nodesmithctl simulate: unexpected argument '%s'\n", argv[optind]);
                usage(stderr);
                return 2;
        }
        if (model && !json) {
                fprintf(stderr, "nodesmithctl simulate: --model needs -o json\n");
                return 2;
        }
        if (np == 0 || npl == 0) {
                fprintf(stderr, "nodesmithctl simulate: --pods and --nodepools are required\n");
                usage(stderr);
                return 2;
        }

        _cleanup_(catalog_freep) Catalog *catalog = NULL;
        if (load_catalog(catalog_path, &catalog) < 0)
                return 1;
        _cleanup_(nodepool_objects_freep) NodepoolObjects *objs = NULL;
        if (nodepool_objects_new(&objs) < 0)
                return log_oom(), 1;
        for (size_t i = 0; i < npl; i++) {
                size_t before;
                if (add_file(objs, pools[i], &before) < 0)
                        return 1;
                if (objs->n_pools == before) {
                        fprintf(stderr, "nodesmithctl simulate: %s: no NodePool in this file\n", pools[i]);
                        return 1;
                }
        }
        for (size_t i = 0; i < nn; i++)
                if (add_file(objs, nodes[i], NULL) < 0)
                        return 1;
        for (size_t i = 0; i < np; i++)
                if (add_file(objs, pods[i], NULL) < 0)
                        return 1;
        char *err = NULL;
        int r = nodepool_objects_finish(objs, catalog, &err);
        if (r < 0) {
                fprintf(stderr, "nodesmithctl simulate: %s\n", err ? err : strerror(-r));
                free(err);
                return 1;
        }
        SimReservations rv = {};
        if (reservations && sim_reservations_load(reservations, objs, &rv, &err) < 0) {
                fprintf(stderr, "nodesmithctl simulate: %s\n", err ? err : "cannot read the reservations");
                free(err);
                return 1;
        }
        if (!reservations)
                sim_reservations_warn_unused(objs);
        size_t nt;
        const SolverInstanceType *types = catalog_types(catalog, &nt);
        SolverSnapshot snap = {
                .types = types, .n_types = nt,
                .nodepools = objs->pools, .n_nodepools = objs->n_pools,
                .nodes = objs->nodes, .n_nodes = objs->n_nodes,
                .pods = objs->pods, .n_pods = objs->n_pods,
                .daemonsets = objs->daemonsets, .n_daemonsets = objs->n_daemonsets,
        };
        if (reservations && sim_reservations_apply(&rv, &snap) < 0)
                return log_oom(), 1;
        Solver *s = NULL;
        r = solver_new(&snap, &s, &err);
        if (r < 0) {
                fprintf(stderr, "nodesmithctl simulate: %s\n", err ? err : strerror(-r));
                free(err);
                return 1;
        }
        SolverResult *res = NULL;
        r = solver_provision(s, &so, &res);
        if (r < 0) {
                solver_free(s);
                fprintf(stderr, "nodesmithctl simulate: planning failed: %s\n", strerror(-r));
                return 1;
        }
        _cleanup_(solver_model_freep) SolverModel *sm = NULL;
        if (model && solver_model(s, &sm) < 0) {
                solver_result_free(res);
                solver_free(s);
                return log_oom(), 1;
        }
        const SimReservations *rvp = reservations ? &rv : NULL;
        r = json ? print_json(&snap, res, objs, rvp, s, sm) : print_table(&snap, res, objs, rvp);
        solver_result_free(res);
        solver_free(s);
        if (fflush(stdout) != 0 || r < 0)
                return 1;
        return 0;
}
