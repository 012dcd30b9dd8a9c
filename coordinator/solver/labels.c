/* SPDX-License-Identifier: Apache-2.0 */
/* Label keys, requirements, selectors, taints and tolerations. */

#include <stdio.h>

#include "macro.h"
#include "solver-internal.h"

static const char *const instance_suffixes[] = {
        "category", "family", "generation", "size", "cpu", "cpu-manufacturer",
        "cpu-sustained-clock-speed-mhz", "memory", "gpu-count", "gpu-name", "gpu-manufacturer",
        "gpu-memory", "hypervisor", "encryption-in-transit-supported", "network-bandwidth",
        "local-nvme", "ebs-bandwidth", "accelerator-name", "accelerator-count",
        "accelerator-manufacturer", "ena-bandwidth", "efa-count", "tenancy", "capability-flex",
};

const char *solver_canonical_label_key(const char *key) {
        if (!key)
                return NULL;
        if (strncmp(key, "karpenter.", 10) == 0) {
                if (streq(key, "karpenter.sh/capacity-type"))
                        return SOLVER_LABEL_CAPACITY_TYPE;
                if (streq(key, "karpenter.sh/nodepool"))
                        return SOLVER_LABEL_NODEPOOL;
                if (streq(key, "karpenter.k8s.aws/ec2nodeclass"))
                        return "nodesmith.io/ec2nodeclass";
                static const char pfx[] = "karpenter.k8s.aws/instance-";
                if (strncmp(key, pfx, sizeof(pfx) - 1) == 0) {
                        static const char *const canon[] = {
                                "nodesmith.io/instance-category",
                                "nodesmith.io/instance-family",
                                "nodesmith.io/instance-generation",
                                "nodesmith.io/instance-size",
                                "nodesmith.io/instance-cpu",
                                "nodesmith.io/instance-cpu-manufacturer",
                                "nodesmith.io/instance-cpu-sustained-clock-speed-mhz",
                                "nodesmith.io/instance-memory",
                                "nodesmith.io/instance-gpu-count",
                                "nodesmith.io/instance-gpu-name",
                                "nodesmith.io/instance-gpu-manufacturer",
                                "nodesmith.io/instance-gpu-memory",
                                "nodesmith.io/instance-hypervisor",
                                "nodesmith.io/instance-encryption-in-transit-supported",
                                "nodesmith.io/instance-network-bandwidth",
                                "nodesmith.io/instance-local-nvme",
                                "nodesmith.io/instance-ebs-bandwidth",
                                "nodesmith.io/instance-accelerator-name",
                                "nodesmith.io/instance-accelerator-count",
                                "nodesmith.io/instance-accelerator-manufacturer",
                                "nodesmith.io/instance-ena-bandwidth",
                                "nodesmith.io/instance-efa-count",
                                "nodesmith.io/instance-tenancy",
                                "nodesmith.io/instance-capability-flex",
                        };
                        _Static_assert(ELEMENTSOF(canon) == ELEMENTSOF(instance_suffixes), "");
                        const char *sfx = key + sizeof(pfx) - 1;
                        for (size_t i = 0; i < ELEMENTSOF(instance_suffixes); i++)
                                if (streq(sfx, instance_suffixes[i]))
                                        return canon[i];
                }
                return key;
        }
        if (strncmp(key, "beta.kubernetes.io/", 19) == 0) {
                if (streq(key, "beta.kubernetes.io/instance-type"))
                        return SOLVER_LABEL_INSTANCE_TYPE;
                if (streq(key, "beta.kubernetes.io/arch"))
                        return SOLVER_LABEL_ARCH;
                if (streq(key, "beta.kubernetes.io/os"))
                        return SOLVER_LABEL_OS;
                return key;
        }
        /* the EBS CSI driver's zone label (PersistentVolumes carry it) is the node's zone */
        if (streq(key, "failure-domain.beta.kubernetes.io/zone") || streq(key, "topology.ebs.csi.aws.com/zone"))
                return SOLVER_LABEL_ZONE;
        if (streq(key, "failure-domain.beta.kubernetes.io/region"))
                return SOLVER_LABEL_REGION;
        return key;
}

static const char *const op_names[] = {
        [SOLVER_OP_IN] = "In",
        [SOLVER_OP_NOT_IN] = "NotIn",
        [SOLVER_OP_EXISTS] = "Exists",
        [SOLVER_OP_DOES_NOT_EXIST] = "DoesNotExist",
        [SOLVER_OP_GT] = "Gt",
        [SOLVER_OP_LT] = "Lt",
};

int solver_operator_from_name(const char *name) {
        if (!name)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(op_names); i++)
                if (streq(name, op_names[i]))
                        return (int) i;
        return -EINVAL;
}

const char *solver_operator_to_name(SolverOperator op) {
        if ((unsigned) op >= ELEMENTSOF(op_names))
                return "?";
        return op_names[op];
}

const char *solver_capacity_type_to_name(SolverCapacityType ct) {
        switch (ct) {
        case SOLVER_CAPACITY_SPOT:
                return "spot";
        case SOLVER_CAPACITY_ON_DEMAND:
                return "on-demand";
        default:
                return "?";
        }
}

int solver_capacity_type_from_name(const char *name) {
        if (!name)
                return -EINVAL;
        if (streq(name, "spot"))
                return SOLVER_CAPACITY_SPOT;
        if (streq(name, "on-demand"))
                return SOLVER_CAPACITY_ON_DEMAND;
        return -EINVAL;
}

bool int_of(const char *s, int64_t *ret) {
        if (isempty(s))
                return false;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || *end)
                return false;
        *ret = v;
        return true;
}

/* ---- taints --------------------------------------------------------------------------------- */

bool solver_toleration_tolerates(const SolverToleration *t, const SolverTaint *taint) {
        if ((int) t->effect != SOLVER_EFFECT_ANY && t->effect != taint->effect)
                return false;
        if (isempty(t->key))
                return t->exists; /* empty key with Exists tolerates everything */
        if (!streq(t->key, taint->key))
                return false;
        if (t->exists)
                return true;
        return streq(t->value ? t->value : "", taint->value ? taint->value : "");
}

bool solver_tolerates_all(const SolverToleration *tols, size_t n_tols, const SolverTaint *taints,
                          size_t n_taints, bool ignore_prefer) {
        for (size_t i = 0; i < n_taints; i++) {
                if (ignore_prefer && taints[i].effect == SOLVER_EFFECT_PREFER_NO_SCHEDULE)
                        continue;
                bool ok = false;
                for (size_t j = 0; j < n_tols && !ok; j++)
                        ok = solver_toleration_tolerates(&tols[j], &taints[i]);
                if (!ok)
                        return false;
        }
        return true;
}

/* ---- selectors ------------------------------------------------------------------------------ */

static const char *label_get(const SolverLabel *labels, size_t n, const char *key, bool canon) {
        for (size_t i = 0; i < n; i++) {
                const char *k = canon ? solver_canonical_label_key(labels[i].key) : labels[i].key;
                if (k && streq(k, key))
                        return labels[i].value ? labels[i].value : "";
        }
        return NULL;
}

static bool value_in(const SolverRequirement *r, const char *v) {
        for (size_t i = 0; i < r->n_values; i++)
                if (r->values[i] && streq(r->values[i], v))
                        return true;
        return false;
}

bool req_value_matches(const SolverRequirement *r, const char *v) {
        int64_t a, b;
        switch (r->op) {
        case SOLVER_OP_IN:
                return v && value_in(r, v);
        case SOLVER_OP_NOT_IN:
                return !v || !value_in(r, v);
        case SOLVER_OP_EXISTS:
                return v != NULL;
        case SOLVER_OP_DOES_NOT_EXIST:
                return v == NULL;
        case SOLVER_OP_GT:
        case SOLVER_OP_LT:
                if (!v || r->n_values != 1 || !int_of(v, &a) || !int_of(r->values[0], &b))
                        return false;
                return r->op == SOLVER_OP_GT ? a > b : a < b;
        }
        return false;
}

bool solver_selector_matches(const SolverLabelSelector *sel, const SolverLabel *labels, size_t n) {
        if (!sel)
                return false;
        for (size_t i = 0; i < sel->n_match_labels; i++) {
                const char *v = label_get(labels, n, sel->match_labels[i].key, false);
                if (!v || !streq(v, sel->match_labels[i].value ? sel->match_labels[i].value : ""))
                        return false;
        }
        for (size_t i = 0; i < sel->n_exprs; i++) {
                const SolverRequirement *r = &sel->exprs[i];
                if (!req_value_matches(r, label_get(labels, n, r->key, false)))
                        return false;
        }
        return true;
}

bool solver_requirement_matches_labels(const SolverRequirement *req, const SolverLabel *labels,
                                       size_t n) {
        const char *key = solver_canonical_label_key(req->key);
        return req_value_matches(req, label_get(labels, n, key, true));
}

/* ---- value sets ----------------------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
        return x < y ? -1 : x > y;
}

static bool sorted_has(const uint32_t *v, uint32_t n, uint32_t x) {
        uint32_t lo = 0, hi = n;
        while (lo < hi) {
                uint32_t mid = (lo + hi) / 2;
                if (v[mid] == x)
                        return true;
                if (v[mid] < x)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return false;
}

/* A VSet describes where a label may stand: "absent" allowed or not, and which present values
 * are allowed: vals, or everything but vals (complement), within integer bounds. */
static bool bounds_ok(const VSet *s, const char *str) {
        if (!s->has_gt && !s->has_lt)
                return true;
        int64_t x;
        if (!str || !int_of(str, &x))
                return false;
        if (s->has_gt && !(x > s->gt))
                return false;
        if (s->has_lt && !(x < s->lt))
                return false;
        return true;
}

bool vset_contains(const VSet *s, uint32_t val, const char *str) {
        if (!bounds_ok(s, str))
                return false;
        bool in = sorted_has(s->vals, s->n, val);
        return s->complement ? !in : in;
}

static bool vset_present_empty(const VSet *s) {
        if (!s->complement)
                return s->n == 0;
        if (s->has_gt && s->has_lt && s->gt + 1 >= s->lt)
                return true;
        return false;
}

int vset_from_requirement(Solver *s, const SolverRequirement *r, uint32_t key, VSet *ret) {
        VSet v = { .key = key };
        switch (r->op) {
        case SOLVER_OP_IN:
        case SOLVER_OP_NOT_IN:
                v.complement = r->op == SOLVER_OP_NOT_IN;
                v.absent = r->op == SOLVER_OP_NOT_IN;
                if (r->n_values > 0) {
                        v.vals = solver_arena_alloc(s->arena, r->n_values * sizeof(uint32_t));
                        if (!v.vals)
                                return -ENOMEM;
                        for (size_t i = 0; i < r->n_values; i++) {
                                int q = intern_get(&s->vals, r->values[i] ? r->values[i] : "",
                                                   &v.vals[v.n]);
                                if (q < 0)
                                        return q;
                                v.n++;
                        }
                        qsort(v.vals, v.n, sizeof(uint32_t), cmp_u32);
                        uint32_t k = 0;
                        for (uint32_t i = 0; i < v.n; i++)
                                if (k == 0 || v.vals[k - 1] != v.vals[i])
                                        v.vals[k++] = v.vals[i];
                        v.n = k;
                }
                break;
        case SOLVER_OP_EXISTS:
                v.complement = true;
                break;
        case SOLVER_OP_DOES_NOT_EXIST:
                v.absent = true;
                break;
        case SOLVER_OP_GT:
        case SOLVER_OP_LT: {
                int64_t x;
                v.complement = true;
                if (r->n_values != 1 || !int_of(r->values[0], &x)) {
                        /* Never satisfiable. */
                        v.complement = false;
                        break;
                }
                if (r->op == SOLVER_OP_GT) {
                        v.has_gt = true;
                        v.gt = x;
                } else {
                        v.has_lt = true;
                        v.lt = x;
                }
                break;
        }
        }
        *ret = v;
        return 0;
}

/* a ∩ b into *ret (arena). Returns true when non-empty. */
static int vset_intersect(Solver *s, SolverArena *arena, const VSet *a, const VSet *b, VSet *ret,
                          bool *ret_nonempty) {
        VSet o = { .key = a->key, .absent = a->absent && b->absent };
        o.has_gt = a->has_gt || b->has_gt;
        o.gt = a->has_gt && b->has_gt ? MAX(a->gt, b->gt) : a->has_gt ? a->gt : b->gt;
        o.has_lt = a->has_lt || b->has_lt;
        o.lt = a->has_lt && b->has_lt ? MIN(a->lt, b->lt) : a->has_lt ? a->lt : b->lt;

        uint32_t cap = a->n + b->n;
        uint32_t *buf = cap ? solver_arena_alloc_nozero(arena, cap * sizeof(uint32_t)) : NULL;
        if (cap && !buf)
                return -ENOMEM;
        uint32_t n = 0;
        if (!a->complement && !b->complement) {
                for (uint32_t i = 0; i < a->n; i++)
                        if (sorted_has(b->vals, b->n, a->vals[i]))
                                buf[n++] = a->vals[i];
        } else if (!a->complement || !b->complement) {
                const VSet *pos = a->complement ? b : a, *neg = a->complement ? a : b;
                for (uint32_t i = 0; i < pos->n; i++)
                        if (!sorted_has(neg->vals, neg->n, pos->vals[i]))
                                buf[n++] = pos->vals[i];
        } else {
                o.complement = true;
                uint32_t i = 0, j = 0;
                while (i < a->n || j < b->n) {
                        if (j >= b->n || (i < a->n && a->vals[i] < b->vals[j]))
                                buf[n++] = a->vals[i++];
                        else if (i >= a->n || b->vals[j] < a->vals[i])
                                buf[n++] = b->vals[j++];
                        else {
                                buf[n++] = a->vals[i];
                                i++, j++;
                        }
                }
        }
        if (!o.complement && (o.has_gt || o.has_lt)) {
                uint32_t k = 0;
                for (uint32_t i = 0; i < n; i++)
                        if (bounds_ok(&o, s->vals.strs[buf[i]]))
                                buf[k++] = buf[i];
                n = k;
                o.has_gt = o.has_lt = false;
        }
        o.vals = buf;
        o.n = n;
        *ret = o;
        *ret_nonempty = o.absent || !vset_present_empty(&o);
        return 0;
}

static bool vset_equal(const VSet *a, const VSet *b) {
        return a->absent == b->absent && a->complement == b->complement && a->has_gt == b->has_gt &&
               a->has_lt == b->has_lt && (!a->has_gt || a->gt == b->gt) &&
               (!a->has_lt || a->lt == b->lt) && a->n == b->n &&
               (a->n == 0 || memcmp(a->vals, b->vals, a->n * sizeof(uint32_t)) == 0);
}

static const VSet *vsetlist_find(const VSetList *l, uint32_t key) {
        uint32_t lo = 0, hi = l ? l->n : 0;
        while (lo < hi) {
                uint32_t mid = (lo + hi) / 2;
                if (l->sets[mid].key == key)
                        return &l->sets[mid];
                if (l->sets[mid].key < key)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return NULL;
}

/* Adds (intersects) v into l, keeping keys sorted. -ENOENT when the result is empty. */
int vsetlist_add(Solver *s, VSetList *l, const VSet *v) {
        const VSet *cur = vsetlist_find(l, v->key);
        if (cur) {
                VSet o;
                bool ne;
                int r = vset_intersect(s, s->arena, cur, v, &o, &ne);
                if (r < 0)
                        return r;
                *(VSet *) cur = o;
                return ne ? 0 : -ENOENT;
        }
        VSet *n = solver_arena_alloc_nozero(s->arena, (l->n + 1) * sizeof(VSet));
        if (!n)
                return -ENOMEM;
        uint32_t i = 0, k = 0;
        for (; i < l->n && l->sets[i].key < v->key; i++)
                n[k++] = l->sets[i];
        n[k++] = *v;
        for (; i < l->n; i++)
                n[k++] = l->sets[i];
        l->sets = n;
        l->n++;
        return (v->absent || !vset_present_empty(v)) ? 0 : -ENOENT;
}

static const char *vset_describe(Solver *s, SolverArena *arena, const VSet *v) {
        if (v->absent && !v->complement && v->n == 0)
                return "absent";
        char buf[256];
        size_t o = 0;
        o += (size_t) snprintf(buf + o, sizeof(buf) - o, "%s", v->complement ? "not in [" : "in [");
        for (uint32_t i = 0; i < v->n && o < sizeof(buf) - 8; i++)
                o += (size_t) snprintf(buf + o, sizeof(buf) - o, "%s%s", i ? "," : "",
                                       s->vals.strs[v->vals[i]]);
        if (o < sizeof(buf) - 2)
                snprintf(buf + o, sizeof(buf) - o, "]");
        return solver_arena_strdup(arena, buf);
}

int vsetlist_narrow(Solver *s, SolverArena *arena, const VSetList *node, const VSetList *pod, const VSetList **ret,
                    const char **ret_msg) {
        VSetList out = {};
        bool copied = false;
        for (uint32_t i = 0; i < pod->n; i++) {
                const VSet *p = &pod->sets[i];
                const VSet *cur = vsetlist_find(copied ? &out : node, p->key);
                if (!cur) {
                        if (p->absent)
                                continue; /* label absent satisfies NotIn / DoesNotExist */
                        if (ret_msg)
                                *ret_msg = solver_arena_printf(
                                        arena, "label %s is not defined by the NodePool",
                                        s->keys.strs[p->key]);
                        return 0;
                }
                VSet o;
                bool ne;
                int r = vset_intersect(s, arena, cur, p, &o, &ne);
                if (r < 0)
                        return r;
                if (!ne) {
                        if (ret_msg)
                                *ret_msg = solver_arena_printf(
                                        arena, "label %s: the pod needs %s, the NodePool offers %s",
                                        s->keys.strs[p->key], vset_describe(s, arena, p),
                                        vset_describe(s, arena, cur));
                        return 0;
                }
                if (vset_equal(&o, cur))
                        continue;
                if (!copied) {
                        out.n = node ? node->n : 0;
                        out.sets = solver_arena_alloc_nozero(arena, (out.n + 1) * sizeof(VSet));
                        if (!out.sets)
                                return -ENOMEM;
                        if (out.n)
                                memcpy(out.sets, node->sets, out.n * sizeof(VSet));
                        copied = true;
                }
                *(VSet *) vsetlist_find(&out, p->key) = o;
        }
        if (copied) {
                VSetList *l = solver_arena_alloc(arena, sizeof(VSetList));
                if (!l)
                        return -ENOMEM;
                *l = out;
                *ret = l;
        } else
                *ret = NULL;
        return 1;
}
