/* SPDX-License-Identifier: Apache-2.0 */
/* The object set: manifests and API objects gathered, workloads expanded, volumes resolved. */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "disruption-policy.h"
#include "grow.h"
#include "json-util.h"
#include "karpenter.h"
#include "log.h"
#include "macro.h"
#include "nodeclass-check.h"
#include "nodepool.h"
#include "parse-internal.h"
#include "quantity.h"
#include "reservations.h"

/* ---- the object set ------------------------------------------------------------------------- */

typedef struct Claim {
        const char *key;       /* ns/name */
        const char *volume;
        const char *sc;
} Claim;

typedef struct Volume {
        const char *name;
        const char **zones;
        size_t n_zones;
} Volume;

typedef struct StorageClass {
        const char *name;
        bool wffc, is_default;
        const char **zones;
        size_t n_zones;
} StorageClass;

typedef struct Prio {
        const char *name;
        int32_t value;
        bool global_default;
} Prio;

typedef struct Priv {
        PodExtra *pod_extra;   /* parallel to pods */
        PodExtra *ds_extra;
        Claim *claims;
        size_t n_claims;
        Volume *volumes;
        size_t n_volumes;
        StorageClass *scs;
        size_t n_scs;
        Prio *prios;
        size_t n_prios;
} Priv;

int nodepool_objects_new(NodepoolObjects **ret) {
        NodepoolObjects *o = calloc(1, sizeof(NodepoolObjects));
        if (!o)
                return -ENOMEM;
        int r = solver_arena_new(&o->arena);
        o->priv = calloc(1, sizeof(Priv));
        if (r < 0 || !o->priv) {
                nodepool_objects_free(o);
                return r < 0 ? r : -ENOMEM;
        }
        *ret = o;
        return 0;
}

NodepoolObjects *nodepool_objects_free(NodepoolObjects *o) {
        if (!o)
                return NULL;
        for (size_t i = 0; i < o->n_classes; i++)
                cJSON_Delete(o->classes[i].spec);
        for (size_t i = 0; i < o->n_pools; i++)
                cJSON_Delete(o->extra[i].budgets);
        for (size_t i = 0; i < o->n_notes; i++)
                free(o->notes[i]);
        free(o->notes);
        Priv *pv = o->priv;
        if (pv) {
                free(pv->pod_extra);
                free(pv->ds_extra);
                free(pv->claims);
                free(pv->volumes);
                free(pv->scs);
                free(pv->prios);
                free(pv);
        }
        free(o->pods);
        free(o->daemonsets);
        free(o->pools);
        free(o->extra);
        free(o->classes);
        free(o->nodes);
        solver_arena_free(o->arena);
        free(o);
        return NULL;
}

static int note(NodepoolObjects *o, const char *fmt, ...) _printf_(2, 3);
static int note(NodepoolObjects *o, const char *fmt, ...) {
        if (o->n_notes >= 1000)
                return 0;
        char **nn = realloc(o->notes, (o->n_notes + 2) * sizeof(char *));
        if (!nn)
                return -ENOMEM;
        o->notes = nn;
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(&o->notes[o->n_notes], fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        o->n_notes++;
        o->notes[o->n_notes] = NULL;
        return 0;
}

/* Grows an array and its parallel array together. */
#define GROW_PAIR(arr, n, cap, extra_arr)                                                                \
        ({                                                                                           \
                int _r = 0;                                                                          \
                if ((n) == (cap)) {                                                                  \
                        size_t _nc = (cap) ? (cap) * 2 : 16;                                         \
                        void *_a = realloc((arr), _nc * sizeof(*(arr)));                             \
                        if (_a)                                                              \
                                (arr) = _a;                                                          \
                        void *_e = realloc((extra_arr), _nc * sizeof(*(extra_arr)));                 \
                        if (_e)                                                              \
                                (extra_arr) = _e;                                                    \
                        if (_a && _e)                                                        \
                                (cap) = _nc;                                                         \
                        else                                                                 \
                                _r = -ENOMEM;                                                        \
                }                                                                                    \
                _r;                                                                                  \
        })

/* An object's parse error, prefixed with where it came from ("FILE: "); takes err. */
static int from_source(int r, const char *source, char *err, char **ret_error) {
        if (ret_error && err && asprintf(ret_error, "%s%s%s", source ? source : "", source ? ": " : "", err) < 0)
                *ret_error = NULL;
        free(err);
        return r;
}


static int ensure_pods(NodepoolObjects *o, size_t more) {
        Priv *pv = o->priv;
        if (o->n_pods + more > NODEPOOL_MAX_PODS)
                return -E2BIG;
        if (o->n_pods + more <= o->cap_pods)
                return 0;
        size_t nc = MAX(o->cap_pods * 2, o->n_pods + more + 16);
        SolverPod *np = realloc(o->pods, nc * sizeof(SolverPod));
        if (!np)
                return -ENOMEM;
        o->pods = np;
        PodExtra *nx = realloc(pv->pod_extra, nc * sizeof(PodExtra));
        if (!nx)
                return -ENOMEM;
        pv->pod_extra = nx;
        o->cap_pods = nc;
        return 0;
}

static int add_workload(NodepoolObjects *o, Ctx *c, const cJSON *j, const char *kind) {
        Priv *pv = o->priv;
        const char *name, *ns;
        int r = model_parse_meta(c, j, "", &name, &ns, NULL, NULL, true);
        if (r < 0)
                return r;
        const cJSON *spec = json_get(j, "spec");
        if (!cJSON_IsObject(spec))
                return model_fail(c, "spec", "is required");
        bool set;
        int64_t replicas = 1;
        bool is_ds = streq(kind, "DaemonSet");
        if (streq(kind, "Job")) {
                r = model_get_int(c, spec, "parallelism", "spec.parallelism", 0, NODEPOOL_MAX_REPLICAS, &set, &replicas);
                if (r < 0)
                        return r;
                if (!set)
                        replicas = 1;
        } else if (!is_ds) {
                r = model_get_int(c, spec, "replicas", "spec.replicas", 0, NODEPOOL_MAX_REPLICAS, &set, &replicas);
                if (r < 0)
                        return r;
                if (!set)
                        replicas = 1;
        }
        const cJSON *tmpl = json_get(spec, "template");
        if (!cJSON_IsObject(tmpl))
                return model_fail(c, "spec.template", "is required");
        SolverLabel *labels;
        size_t nl;
        const char *ignored;
        r = model_parse_meta(c, tmpl, "spec.template.", &ignored, NULL, &labels, &nl, false);
        if (r < 0)
                return r;
        SolverPod tp = { .namespace_ = ns, .labels = labels, .n_labels = nl };
        PodExtra tx = {};
        tp.do_not_disrupt = model_annotation_true(tmpl, "karpenter.sh/do-not-disrupt") ||
                            model_annotation_true(tmpl, "nodesmith.io/do-not-disrupt");
        r = model_parse_pod_spec(c, json_get(tmpl, "spec"), ns, labels, nl, "spec.template.spec", &tp, &tx);
        if (r < 0)
                return r;
        tp.owner = solver_arena_printf(o->arena, "%s/%s", kind, name);
        if (is_ds) {
                r = GROW_PAIR(o->daemonsets, o->n_daemonsets, o->cap_daemonsets, pv->ds_extra);
                if (r < 0)
                        return r;
                tp.name = name;
                o->daemonsets[o->n_daemonsets] = tp;
                pv->ds_extra[o->n_daemonsets++] = tx;
                return 0;
        }
        /* StatefulSet claims: one per replica and template, resolved through storage classes */
        const cJSON *vct = streq(kind, "StatefulSet") ? json_get(spec, "volumeClaimTemplates") : NULL;
        r = ensure_pods(o, (size_t) replicas);
        if (r == -E2BIG)
                return model_fail(c, "spec.replicas", "more than %d pods in total", NODEPOOL_MAX_PODS);
        if (r < 0)
                return r;
        for (int64_t i = 0; i < replicas; i++) {
                SolverPod *p = &o->pods[o->n_pods];
                PodExtra *x = &pv->pod_extra[o->n_pods];
                *p = tp;
                *x = tx;
                p->name = solver_arena_printf(o->arena, "%s-%" PRId64, name, i);
                if (!p->name)
                        return -ENOMEM;
                if (cJSON_IsArray(vct) && cJSON_GetArraySize(vct) > 0) {
                        size_t nv = (size_t) cJSON_GetArraySize(vct);
                        const char **cl = solver_arena_alloc(o->arena, (tx.n_claims + nv + 1) * sizeof(char *));
                        if (!cl)
                                return -ENOMEM;
                        if (tx.n_claims)
                                memcpy(cl, tx.claims, tx.n_claims * sizeof(char *));
                        size_t k = tx.n_claims, vi = 0;
                        const cJSON *v;
                        cJSON_ArrayForEach(v, vct) {
                                const cJSON *vn = json_get(json_get(v, "metadata"), "name");
                                char p2[128];
                                if (!cJSON_IsString(vn))
                                        return model_fail(c, P(p2, "spec.volumeClaimTemplates[%zu].metadata.name", vi), "is required");
                                cl[k] = solver_arena_printf(o->arena, "%s/%s-%s-%" PRId64, ns, vn->valuestring, name, i);
                                /* remember the template's storage class for unknown claims */
                                const cJSON *scn = json_get(json_get(v, "spec"), "storageClassName");
                                Claim *cn = realloc(pv->claims, (pv->n_claims + 1) * sizeof(Claim));
                                if (!cn || !cl[k])
                                        return -ENOMEM;
                                pv->claims = cn;
                                pv->claims[pv->n_claims++] = (Claim) {
                                        cl[k], NULL,
                                        cJSON_IsString(scn) ? solver_arena_strdup(o->arena, scn->valuestring) : NULL };
                                k++;
                                vi++;
                        }
                        x->claims = cl;
                        x->n_claims = k;
                }
                o->n_pods++;
        }
        return 0;
}

static int add_object(NodepoolObjects *o, const cJSON *j, const char *source, unsigned depth, char **ret_error);

static int add_list(NodepoolObjects *o, const cJSON *items, const char *source, unsigned depth, char **ret_error) {
        const cJSON *e;
        cJSON_ArrayForEach(e, items) {
                int r = add_object(o, e, source, depth + 1, ret_error);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* A Karpenter object: converted first, its notes kept, what it became added. */
static int add_converted(NodepoolObjects *o, const cJSON *j, const char *source, unsigned depth, char **ret_error) {
        cJSON *conv = NULL;
        char **notes = NULL;
        int r = karpenter_convert(j, &conv, &notes, ret_error);
        if (r < 0)
                return r;
        for (char **n = notes; n && *n; n++)
                (void) note(o, "%s", *n);
        karpenter_notes_free(notes);
        r = add_list(o, conv, source, depth, ret_error);
        cJSON_Delete(conv);
        return r;
}

static int add_object(NodepoolObjects *o, const cJSON *j, const char *source, unsigned depth, char **ret_error) {
        Priv *pv = o->priv;
        if (depth > 8)
                return -E2BIG;
        if (cJSON_IsArray(j))
                return add_list(o, j, source, depth, ret_error);
        if (cJSON_IsNull(j))
                return 0;
        const char *kind = json_str(j, "kind");
        char what[400];
        const cJSON *nm = json_get(json_get(j, "metadata"), "name"), *nsj = json_get(json_get(j, "metadata"), "namespace");
        const char *nms = cJSON_IsString(nm) ? nm->valuestring : "?";
        static const char *const cluster_scoped[] = { "NodePool", "EC2NodeClass", "Node", "PersistentVolume",
                                                      "StorageClass", "PriorityClass", "Provisioner", "AWSNodeTemplate" };
        bool namespaced = kind != NULL;
        for (size_t i = 0; kind && i < ELEMENTSOF(cluster_scoped); i++)
                if (streq(kind, cluster_scoped[i]))
                        namespaced = false;
        const char *nsv = cJSON_IsString(nsj) ? nsj->valuestring : namespaced ? "default" : NULL;
        snprintf(what, sizeof(what), "%s%s%s %s%s%s", source ? source : "", source ? ": " : "", kind ? kind : "object",
                 nsv ? nsv : "", nsv ? "/" : "", nms);
        Ctx c = { o->arena, what, ret_error };
        if (!cJSON_IsObject(j))
                return model_fail(&c, NULL, "is not an object");
        if (!kind)
                return model_fail(&c, "kind", "is required");
        int r;
        size_t kl = strlen(kind);
        if (streq(kind, "List") || (kl > 4 && streq(kind + kl - 4, "List"))) {
                const cJSON *items = json_get(j, "items");
                if (!cJSON_IsArray(items))
                        return model_fail(&c, "items", "must be a list");
                return add_list(o, items, source, depth, ret_error);
        }
        if (streq(kind, "Pod")) {
                r = ensure_pods(o, 1);
                if (r == -E2BIG)
                        return model_fail(&c, NULL, "more than %d pods in total", NODEPOOL_MAX_PODS);
                if (r < 0)
                        return r;
                r = model_pod_from_json(&c, j, &o->pods[o->n_pods], &pv->pod_extra[o->n_pods]);
                if (r < 0)
                        return r;
                o->n_pods++;
                return 0;
        }
        if (streq(kind, "Deployment") || streq(kind, "StatefulSet") || streq(kind, "ReplicaSet") ||
            streq(kind, "Job") || streq(kind, "DaemonSet") || streq(kind, "ReplicationController"))
                return add_workload(o, &c, j, kind);
        if (streq(kind, "NodePool") && (model_api_group_is(j, "nodesmith.io") || model_api_group_is(j, "karpenter.sh"))) {
                const cJSON *av = json_get(j, "apiVersion");
                if (!streq(av->valuestring, "nodesmith.io/v1")) {
                        return add_converted(o, j, source, depth, ret_error);
                }
                r = GROW_PAIR(o->pools, o->n_pools, o->cap_pools, o->extra);
                if (r < 0)
                        return r;
                char *err = NULL;
                r = nodepool_parse_nodepool(o->arena, j, &o->pools[o->n_pools], &o->extra[o->n_pools], &err);
                if (r < 0) {
                        /* a NodePool refused after its budgets were copied must not keep them */
                        cJSON_Delete(o->extra[o->n_pools].budgets);
                        o->extra[o->n_pools].budgets = NULL;
                        return from_source(r, source, err, ret_error);
                }
                for (size_t i = 0; i < o->n_pools; i++)
                        if (streq(o->pools[i].name, o->pools[o->n_pools].name)) {
                                cJSON_Delete(o->extra[o->n_pools].budgets);
                                return model_fail(&c, "metadata.name", "another NodePool has this name");
                        }
                o->n_pools++;
                return 0;
        }
        if ((streq(kind, "EC2NodeClass") && (model_api_group_is(j, "nodesmith.io") || model_api_group_is(j, "karpenter.k8s.aws"))) ||
            streq(kind, "Provisioner") || streq(kind, "AWSNodeTemplate")) {
                const cJSON *av = json_get(j, "apiVersion");
                if (!cJSON_IsString(av) || !streq(av->valuestring, "nodesmith.io/v1")) {
                        return add_converted(o, j, source, depth, ret_error);
                }
                r = GROW(o->classes, o->cap_classes, o->n_classes + 1, (size_t) NODEPOOL_MAX_OBJECTS);
                if (r < 0)
                        return r;
                char *err = NULL;
                r = nodepool_parse_nodeclass(o->arena, j, &o->classes[o->n_classes], &err);
                if (r < 0)
                        return from_source(r, source, err, ret_error);
                o->n_classes++;
                return 0;
        }
        if (streq(kind, "Node")) {
                r = GROW(o->nodes, o->cap_nodes, o->n_nodes + 1, (size_t) NODEPOOL_MAX_OBJECTS);
                if (r < 0)
                        return r;
                char *err = NULL;
                r = nodepool_parse_node(o->arena, j, &o->nodes[o->n_nodes], &err);
                if (r < 0)
                        return from_source(r, source, err, ret_error);
                o->n_nodes++;
                return 0;
        }
        if (streq(kind, "PersistentVolumeClaim")) {
                const char *name, *ns, *vol, *sc;
                const cJSON *spec = json_get(j, "spec");
                r = model_parse_meta(&c, j, "", &name, &ns, NULL, NULL, true);
                if (r >= 0)
                        r = model_get_str(&c, spec, "volumeName", "spec.volumeName", &vol);
                if (r >= 0)
                        r = model_get_str(&c, spec, "storageClassName", "spec.storageClassName", &sc);
                if (r < 0)
                        return r;
                Claim *cn = realloc(pv->claims, (pv->n_claims + 1) * sizeof(Claim));
                if (!cn)
                        return -ENOMEM;
                pv->claims = cn;
                pv->claims[pv->n_claims++] = (Claim) { solver_arena_printf(o->arena, "%s/%s", ns, name), vol, sc };
                return 0;
        }
        if (streq(kind, "PersistentVolume")) {
                const char *name;
                r = model_parse_meta(&c, j, "", &name, NULL, NULL, NULL, true);
                if (r < 0)
                        return r;
                /* zones from spec.nodeAffinity (or the zone label) */
                const char **zones = NULL;
                size_t nz = 0;
                const cJSON *terms = json_get(json_get(json_get(json_get(j, "spec"), "nodeAffinity"), "required"), "nodeSelectorTerms");
                const cJSON *t;
                size_t ti = 0;
                cJSON_ArrayForEach(t, terms) {
                        SolverTerm term;
                        char p[128];
                        r = model_parse_term(&c, t, P(p, "spec.nodeAffinity.required.nodeSelectorTerms[%zu]", ti++), &term);
                        if (r < 0)
                                return r;
                        for (size_t i = 0; i < term.n_reqs; i++) {
                                const char *k = solver_canonical_label_key(term.reqs[i].key);
                                if ((streq(k, SOLVER_LABEL_ZONE) || streq(k, "topology.ebs.csi.aws.com/zone")) &&
                                    term.reqs[i].op == SOLVER_OP_IN) {
                                        zones = (const char **) term.reqs[i].values;
                                        nz = term.reqs[i].n_values;
                                }
                        }
                }
                const cJSON *zl = json_get(json_get(json_get(j, "metadata"), "labels"), SOLVER_LABEL_ZONE);
                if (!zones && cJSON_IsString(zl)) {
                        zones = solver_arena_alloc(o->arena, sizeof(char *));
                        if (!zones)
                                return -ENOMEM;
                        zones[0] = solver_arena_strdup(o->arena, zl->valuestring);
                        nz = 1;
                }
                Volume *nv = realloc(pv->volumes, (pv->n_volumes + 1) * sizeof(Volume));
                if (!nv)
                        return -ENOMEM;
                pv->volumes = nv;
                pv->volumes[pv->n_volumes++] = (Volume) { name, zones, nz };
                return 0;
        }
        if (streq(kind, "StorageClass")) {
                const char *name, *mode;
                r = model_parse_meta(&c, j, "", &name, NULL, NULL, NULL, true);
                if (r >= 0)
                        r = model_get_str(&c, j, "volumeBindingMode", "volumeBindingMode", &mode);
                if (r < 0)
                        return r;
                StorageClass sc = { .name = name, .wffc = mode && streq(mode, "WaitForFirstConsumer"),
                                    .is_default = model_annotation_true(j, "storageclass.kubernetes.io/is-default-class") };
                const cJSON *at = json_get(j, "allowedTopologies"), *t;
                cJSON_ArrayForEach(t, at) {
                        const cJSON *e;
                        cJSON_ArrayForEach(e, json_get(t, "matchLabelExpressions")) {
                                const cJSON *k = json_get(e, "key");
                                if (!cJSON_IsString(k))
                                        continue;
                                const char *ck = solver_canonical_label_key(k->valuestring);
                                if (streq(ck, SOLVER_LABEL_ZONE) || streq(ck, "topology.ebs.csi.aws.com/zone")) {
                                        r = model_parse_string_list(&c, json_get(e, "values"), "allowedTopologies[].values", &sc.zones,
                                                              &sc.n_zones);
                                        if (r < 0)
                                                return r;
                                }
                        }
                }
                StorageClass *ns = realloc(pv->scs, (pv->n_scs + 1) * sizeof(StorageClass));
                if (!ns)
                        return -ENOMEM;
                pv->scs = ns;
                pv->scs[pv->n_scs++] = sc;
                return 0;
        }
        if (streq(kind, "PriorityClass")) {
                const char *name;
                bool set;
                int64_t v;
                r = model_parse_meta(&c, j, "", &name, NULL, NULL, NULL, true);
                if (r >= 0)
                        r = model_get_int(&c, j, "value", "value", INT32_MIN, INT32_MAX, &set, &v);
                if (r < 0)
                        return r;
                if (!set)
                        return model_fail(&c, "value", "is required");
                Prio *np = realloc(pv->prios, (pv->n_prios + 1) * sizeof(Prio));
                if (!np)
                        return -ENOMEM;
                pv->prios = np;
                pv->prios[pv->n_prios++] = (Prio) { name, (int32_t) v, cJSON_IsTrue(json_get(j, "globalDefault")) };
                return 0;
        }
        return note(o, "%s: not used (kind %s)", what, kind);
}

static bool is_karpenter(const cJSON *j, unsigned depth) {
        if (depth > 8)
                return false;
        if (cJSON_IsArray(j)) {
                const cJSON *e;
                cJSON_ArrayForEach(e, j)
                        if (is_karpenter(e, depth + 1))
                                return true;
                return false;
        }
        const char *kind = json_str(j, "kind");
        if (!kind)
                return false;
        size_t kl = strlen(kind);
        if (streq(kind, "List") || (kl > 4 && streq(kind + kl - 4, "List")))
                return is_karpenter(json_get(j, "items"), depth + 1);
        return streq(kind, "Provisioner") || streq(kind, "AWSNodeTemplate") ||
               ((streq(kind, "NodePool") || streq(kind, "EC2NodeClass")) &&
                (model_api_group_is(j, "karpenter.sh") || model_api_group_is(j, "karpenter.k8s.aws")));
}

int nodepool_objects_add(NodepoolObjects *o, const cJSON *doc, const char *source, char **ret_error) {
        if (ret_error)
                *ret_error = NULL;
        cJSON *converted = NULL;
        if (is_karpenter(doc, 0)) {
                /* convert the whole document set at once, so that a Provisioner's kubelet
                 * settings can reach the node class converted with it */
                char **notes = NULL;
                int r = karpenter_convert(doc, &converted, &notes, ret_error);
                if (r < 0)
                        return r;
                for (char **n = notes; n && *n; n++)
                        (void) note(o, "%s%s%s", source ? source : "", source ? ": " : "", *n);
                karpenter_notes_free(notes);
                doc = converted;
        }
        int r = add_object(o, doc, source, 0, ret_error);
        cJSON_Delete(converted);
        if (r == -E2BIG && ret_error && !*ret_error &&
            asprintf(ret_error, "%s: lists nested too deeply", source ? source : "input") < 0)
                *ret_error = NULL;
        return r;
}

static const Claim *claim_find(const Priv *pv, const char *key) {
        const Claim *found = NULL;
        for (size_t i = 0; i < pv->n_claims; i++)
                if (streq(pv->claims[i].key, key) && (!found || pv->claims[i].volume || !found->volume))
                        found = &pv->claims[i];
        return found;
}

static const StorageClass *sc_find(const Priv *pv, const char *name) {
        for (size_t i = 0; i < pv->n_scs; i++)
                if (name ? streq(pv->scs[i].name, name) : pv->scs[i].is_default)
                        return &pv->scs[i];
        return NULL;
}

/* allowed = allowed ∩ zones (NULL allowed: no restriction yet) */
static int intersect_zones(SolverArena *a, const char ***allowed, size_t *n, bool *restricted, const char *const *zones,
                           size_t nz) {
        if (!*restricted) {
                const char **c = solver_arena_alloc(a, (nz + 1) * sizeof(char *));
                if (!c)
                        return -ENOMEM;
                if (nz)
                        memcpy(c, zones, nz * sizeof(char *));
                *allowed = c;
                *n = nz;
                *restricted = true;
                return 0;
        }
        size_t k = 0;
        for (size_t i = 0; i < *n; i++)
                for (size_t j = 0; j < nz; j++)
                        if (streq((*allowed)[i], zones[j])) {
                                (*allowed)[k++] = (*allowed)[i];
                                break;
                        }
        *n = k;
        return 0;
}

static int resolve_pod(NodepoolObjects *o, SolverPod *p, const PodExtra *x) {
        Priv *pv = o->priv;
        /* priority class */
        if (!x->priority_set) {
                const char *cls = x->priority_class;
                bool found = false;
                for (size_t i = 0; i < pv->n_prios && !found; i++)
                        if (cls ? streq(pv->prios[i].name, cls) : pv->prios[i].global_default) {
                                p->priority = pv->prios[i].value;
                                found = true;
                        }
                if (!found && cls) {
                        if (streq(cls, "system-node-critical"))
                                p->priority = 2000001000;
                        else if (streq(cls, "system-cluster-critical"))
                                p->priority = 2000000000;
                        else
                                (void) note(o, "Pod %s/%s: PriorityClass %s not given; priority 0 assumed", p->namespace_,
                                            p->name, cls);
                }
        }
        /* volumes */
        const char **zones = NULL, **wffc = NULL;
        size_t nz = 0, nw = 0;
        bool restricted = false;
        for (size_t i = 0; i < x->n_claims; i++) {
                const Claim *cl = claim_find(pv, x->claims[i]);
                if (!cl) {
                        (void) note(o, "Pod %s/%s: PersistentVolumeClaim %s not given; its volume is ignored", p->namespace_,
                                    p->name, x->claims[i]);
                        continue;
                }
                const Volume *v = NULL;
                for (size_t k = 0; cl->volume && k < pv->n_volumes; k++)
                        if (streq(pv->volumes[k].name, cl->volume))
                                v = &pv->volumes[k];
                if (v) {
                        if (v->n_zones && intersect_zones(o->arena, &zones, &nz, &restricted, v->zones, v->n_zones) < 0)
                                return -ENOMEM;
                        continue;
                }
                if (cl->volume) {
                        (void) note(o, "Pod %s/%s: PersistentVolume %s not given; its zone is unknown", p->namespace_, p->name,
                                    cl->volume);
                        continue;
                }
                const StorageClass *sc = sc_find(pv, cl->sc);
                if (sc && sc->n_zones && intersect_zones(o->arena, &zones, &nz, &restricted, sc->zones, sc->n_zones) < 0)
                        return -ENOMEM;
                if (!sc || sc->wffc) {
                        if (!wffc) {
                                wffc = solver_arena_alloc(o->arena, (x->n_claims + 1) * sizeof(char *));
                                if (!wffc)
                                        return -ENOMEM;
                        }
                        wffc[nw++] = cl->key;
                }
        }
        if (restricted) {
                p->volume_zones = zones;
                p->n_volume_zones = nz;
                if (nz == 0)
                        (void) note(o, "Pod %s/%s: its volumes are in different zones", p->namespace_, p->name);
        }
        p->wffc_claims = wffc;
        p->n_wffc_claims = nw;
        return 0;
}

int nodepool_objects_finish(NodepoolObjects *o, Catalog *catalog, char **ret_error) {
        Priv *pv = o->priv;
        int r;
        if (ret_error)
                *ret_error = NULL;
        for (size_t i = 0; i < o->n_pods; i++) {
                r = resolve_pod(o, &o->pods[i], &pv->pod_extra[i]);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < o->n_pods; i++) {
                SolverPod *p = &o->pods[i];
                if (!p->node_name)
                        continue;
                bool known = false;
                for (size_t k = 0; k < o->n_nodes && !known; k++)
                        known = streq(o->nodes[k].name, p->node_name);
                if (!known)
                        (void) note(o, "Pod %s/%s: bound to node %s, which is not given; left out", p->namespace_, p->name,
                                    p->node_name);
        }
        for (size_t i = 0; i < o->n_daemonsets; i++) {
                r = resolve_pod(o, &o->daemonsets[i], &pv->ds_extra[i]);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < o->n_pools; i++) {
                SolverNodePool *p = &o->pools[i];
                const NodeClass *nc = NULL;
                for (size_t k = 0; p->node_class && k < o->n_classes; k++)
                        if (streq(o->classes[k].name, p->node_class))
                                nc = &o->classes[k];
                if (p->node_class && !nc && o->n_classes > 0)
                        (void) note(o, "NodePool %s: EC2NodeClass %s not given; default kubelet settings assumed", p->name,
                                    p->node_class);
                if (nc && catalog && (nc->has_kubelet || nc->root_volume_bytes > 0)) {
                        r = catalog_allocatable_for(catalog, nc->has_kubelet ? &nc->kubelet : NULL, nc->root_volume_bytes,
                                                    &p->allocatable);
                        if (r < 0)
                                return r;
                }
        }
        for (size_t i = 0; catalog && i < o->n_nodes; i++) {
                SolverNode *n = &o->nodes[i];
                int t = catalog_find(catalog, n->instance_type);
                if (t < 0)
                        continue;
                size_t nt;
                const SolverInstanceType *it = &catalog_types(catalog, &nt)[t];
                for (size_t k = 0; k < it->n_offerings; k++)
                        if (it->offerings[k].capacity_type == n->capacity_type &&
                            (!n->zone || streq(it->offerings[k].zone, n->zone)))
                                n->price = it->offerings[k].price;
                /* reserved capacity is paid for whatever runs on it: near free, as Karpenter
                 * prices it, so consolidation does not trade it for on-demand or spot */
                if (reservation_node(n))
                        n->price = reservation_price(n->price);
        }
        return 0;
}
