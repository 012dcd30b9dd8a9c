/* SPDX-License-Identifier: Apache-2.0 */
/* bench/scheduling --pods-from FILE: pods read from a file instead of drawn by the bench's own
 * generator. bench/bench_karpenter.py has Karpenter's benchmark (makeDiversePods, Go's
 * math/rand, seed 42) write each size's pods there, so both schedulers plan the very same pods.
 *
 *   {"source": "...", "seed": 42, "pods": [
 *     {"name": "...", "kind": "plain|spread-zone|spread-host|affinity-zone|anti-host|other",
 *      "namespace": "default", "cpuMillis": 250, "memoryBytes": 268435456,
 *      "labels": {"my-label": "c"},
 *      "topologySpread": [{"topologyKey": "topology.kubernetes.io/zone", "maxSkew": 1,
 *                          "matchLabels": {"my-label": "e"}}],
 *      "podAffinity": [{"topologyKey": "...", "matchLabels": {...}}],
 *      "podAntiAffinity": [{"topologyKey": "...", "matchLabels": {...}}]}]}
 *
 * Labels and selectors are taken as given: a selector matches every pod of its namespace whose
 * labels it names, whatever group made the pod (Karpenter's groups draw their label values from
 * the same seven, so its selectors match across groups). Spread constraints are DoNotSchedule;
 * topology keys are zone or hostname. Any other member, an unknown kind or topology key, a
 * non-integral or negative quantity is refused with a message naming it: nothing in the file is
 * read and then ignored. Included by bench/scheduling.c only. */
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <cjson/cJSON.h>

#include "lib/fileio.h"
#include "lib/json-util.h"
#include "lib/macro.h"

#define PODS_FILE_MAX ((size_t) 256 << 20) /* 20 000 pods take about 6 MiB */
#define PODS_FILE_MAX_LABELS 64

static const char *const pod_kinds[] = { "plain", "spread-zone", "spread-host", "affinity-zone", "anti-host",
                                         "other" };
#define N_POD_KINDS (sizeof(pod_kinds) / sizeof(pod_kinds[0]))

typedef struct PodsFile {
        SolverPod *pods;
        size_t n;
        size_t per_kind[N_POD_KINDS];
        char *source;  /* what wrote the file, printed in the header */
        int64_t seed;  /* the seed it drew them with (-1: not given), printed too */
} PodsFile;

static _Noreturn __attribute__((format(printf, 3, 4))) void pods_file_die(const char *path, const char *pod,
                                                                           const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s: %s: %s%s%s", BENCH_NAME, path, pod ? "pod " : "", pod ? pod : "", pod ? ": " : "");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        exit(1);
}

static void *pods_file_alloc(Bench *b, size_t size) {
        void *p = solver_arena_alloc(b->arena, size);
        if (!p)
                die("out of memory");
        return p;
}

/* Only these members: anything else is refused, by name. */
static void pods_file_only(const char *path, const char *pod, const cJSON *o, const char *const *known) {
        const cJSON *m;
        cJSON_ArrayForEach(m, o) {
                bool ok = false;
                for (size_t i = 0; known[i]; i++)
                        ok = ok || strcmp(m->string, known[i]) == 0;
                if (!ok)
                        pods_file_die(path, pod, "unknown member \"%s\"", m->string);
        }
}

static int64_t pods_file_int(const char *path, const char *pod, const cJSON *o, const char *key, int64_t lo) {
        const cJSON *v = json_get(o, key);
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double) lo ||
            v->valuedouble > 9.0e15)
                pods_file_die(path, pod, "\"%s\" is not an integer >= %" PRId64, key, lo);
        return (int64_t) v->valuedouble;
}

/* A JSON object of strings as labels (matchLabels too); NULL or {} gives none. */
static SolverLabel *pods_file_labels(Bench *b, const char *path, const char *pod, const cJSON *o, const char *key,
                                     size_t *ret_n) {
        const cJSON *m = json_get(o, key);
        *ret_n = 0;
        if (!m)
                return NULL;
        int n = cJSON_GetArraySize(m);
        if (!cJSON_IsObject(m) || n > PODS_FILE_MAX_LABELS)
                pods_file_die(path, pod, "\"%s\" is not an object of at most %d strings",
                                                             key, PODS_FILE_MAX_LABELS);
        SolverLabel *l = pods_file_alloc(b, ((size_t) n + 1) * sizeof(SolverLabel));
        const cJSON *e;
        size_t i = 0;
        cJSON_ArrayForEach(e, m) {
                if (!cJSON_IsString(e))
                        pods_file_die(path, pod, "\"%s\" member \"%s\" is not a string", key,
                                                                     e->string);
                l[i++] = (SolverLabel) { solver_arena_strdup(b->arena, e->string),
                                         solver_arena_strdup(b->arena, e->valuestring) };
        }
        *ret_n = i;
        return l;
}

static const char *pods_file_topology_key(const char *path, const char *pod, const cJSON *t) {
        const char *k = json_str(t, "topologyKey");
        if (k && strcmp(k, SOLVER_LABEL_ZONE) == 0)
                return SOLVER_LABEL_ZONE;
        if (k && strcmp(k, SOLVER_LABEL_HOSTNAME) == 0)
                return SOLVER_LABEL_HOSTNAME;
        pods_file_die(path, pod, "topologyKey \"%s\" (only %s and %s)", k ? k : "(none)",
                                                     SOLVER_LABEL_ZONE, SOLVER_LABEL_HOSTNAME);
}

/* A pod's array of terms: spreads (maxSkew required) or pod (anti-)affinity terms. */
static void *pods_file_terms(Bench *b, const char *path, const char *pod, const cJSON *o, const char *key,
                             bool spread, size_t *ret_n) {
        static const char *const spread_keys[] = { "topologyKey", "maxSkew", "matchLabels", NULL };
        static const char *const term_keys[] = { "topologyKey", "matchLabels", NULL };
        const cJSON *a = json_get(o, key);
        *ret_n = 0;
        if (!a)
                return NULL;
        int n = cJSON_GetArraySize(a);
        if (!cJSON_IsArray(a) || n > 16)
                pods_file_die(path, pod, "\"%s\" is not an array of at most 16 terms", key);
        SolverSpread *sp = spread ? pods_file_alloc(b, ((size_t) n + 1) * sizeof(SolverSpread)) : NULL;
        SolverPodAffinityTerm *at = spread ? NULL
                                           : pods_file_alloc(b, ((size_t) n + 1) * sizeof(SolverPodAffinityTerm));
        const cJSON *t;
        size_t i = 0;
        cJSON_ArrayForEach(t, a) {
                if (!cJSON_IsObject(t))
                        pods_file_die(path, pod, "a member of \"%s\" is not an object", key);
                pods_file_only(path, pod, t, spread ? spread_keys : term_keys);
                SolverLabelSelector sel = {};
                sel.match_labels = pods_file_labels(b, path, pod, t, "matchLabels", &sel.n_match_labels);
                if (!json_get(t, "matchLabels"))
                        pods_file_die(path, pod, "a term of \"%s\" has no matchLabels", key);
                const char *tk = pods_file_topology_key(path, pod, t);
                if (spread)
                        sp[i] = (SolverSpread) { .topology_key = tk,
                                                 .max_skew = (int32_t) pods_file_int(path, pod, t, "maxSkew", 1),
                                                 .selector = sel };
                else
                        at[i] = (SolverPodAffinityTerm) { .topology_key = tk, .selector = sel };
                i++;
        }
        *ret_n = i;
        return spread ? (void *) sp : (void *) at;
}

static void pods_file_load(Bench *b, const char *path, PodsFile *ret) {
        static const char *const top_keys[] = { "source", "seed", "pods", NULL };
        static const char *const pod_keys[] = { "name", "kind", "namespace", "cpuMillis", "memoryBytes", "labels",
                                                "topologySpread", "podAffinity", "podAntiAffinity", NULL };
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        int r = read_file_bounded(path, PODS_FILE_MAX, &text, &len);
        if (r < 0)
                pods_file_die(path, NULL, "%s", r == -EFBIG ? "larger than 256 MiB" : strerror(-r));
        cJSON *root = cJSON_ParseWithLength(text, len);
        if (!cJSON_IsObject(root))
                pods_file_die(path, NULL, "not a JSON object");
        pods_file_only(path, NULL, root, top_keys);
        const cJSON *list = json_get(root, "pods");
        int n = cJSON_GetArraySize(list);
        if (!cJSON_IsArray(list) || n < 1 || n > SOLVER_MAX_PODS)
                pods_file_die(path, NULL, "\"pods\" is not an array of 1 to 1 000 000 pods");
        *ret = (PodsFile) { .n = (size_t) n, .source = solver_arena_strdup(b->arena, json_str(root, "source")),
                            .seed = json_get(root, "seed") ? pods_file_int(path, NULL, root, "seed", 0) : -1 };
        ret->pods = pods_file_alloc(b, ((size_t) n + 1) * sizeof(SolverPod));
        if (!ret->pods)
                die("out of memory");
        const cJSON *o;
        size_t i = 0;
        cJSON_ArrayForEach(o, list) {
                const char *name = json_str(o, "name");
                if (!cJSON_IsObject(o) || !name || !*name)
                        pods_file_die(path, NULL, "pod %zu has no name", i);
                pods_file_only(path, name, o, pod_keys);
                const char *kind = json_str(o, "kind"), *ns = json_str(o, "namespace");
                size_t k = 0;
                while (kind && k < N_POD_KINDS && strcmp(kind, pod_kinds[k]) != 0)
                        k++;
                if (!kind || k == N_POD_KINDS)
                        pods_file_die(path, name, "unknown kind \"%s\"", kind ? kind : "(none)");
                if (!ns || !*ns)
                        pods_file_die(path, name, "no namespace");
                ret->per_kind[k]++;
                SolverPod *p = &ret->pods[i++];
                p->name = solver_arena_strdup(b->arena, name);
                p->owner = pod_kinds[k];
                p->namespace_ = solver_arena_strdup(b->arena, ns);
                p->requests.v[SOLVER_RES_CPU] = pods_file_int(path, name, o, "cpuMillis", 0);
                p->requests.v[SOLVER_RES_MEMORY] = pods_file_int(path, name, o, "memoryBytes", 0);
                p->requests.v[SOLVER_RES_PODS] = 1;
                p->labels = pods_file_labels(b, path, name, o, "labels", &p->n_labels);
                p->spreads = pods_file_terms(b, path, name, o, "topologySpread", true, &p->n_spreads);
                p->affinity = pods_file_terms(b, path, name, o, "podAffinity", false, &p->n_affinity);
                p->anti_affinity = pods_file_terms(b, path, name, o, "podAntiAffinity", false, &p->n_anti_affinity);
        }
        cJSON_Delete(root);
}
