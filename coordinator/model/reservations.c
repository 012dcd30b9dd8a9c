/* SPDX-License-Identifier: Apache-2.0 */
/* Capacity reservations as reservation pools for the solver (see reservations.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "reservations.h"
#include "timestamp.h"

const char *reservation_refusal(const NodeReservation *r, int64_t now) {
        if (!streq_ptr(r->state, "active"))
                return "not active";
        if (r->end_date > 0 && r->end_date <= now)
                return "past its end date";
        if (!streq_ptr(r->reservation_type, "default"))
                return "a capacity block: nodesmith launches only into On-Demand Capacity Reservations "
                       "(capacity blocks need the capacity-block market type and their end-of-block interruption)";
        return NULL;
}

double reservation_price(double on_demand_price) {
        return on_demand_price / 10000000.0;
}

bool reservation_node(const SolverNode *n) {
        for (size_t i = 0; i < n->n_labels; i++)
                if (streq(n->labels[i].key, RESERVATION_LABEL_ID) ||
                    (streq(solver_canonical_label_key(n->labels[i].key), SOLVER_LABEL_CAPACITY_TYPE) &&
                     streq_ptr(n->labels[i].value, RESERVATION_CAPACITY_TYPE)))
                        return true;
        return false;
}

bool reservation_usable(const NodeReservation *r, int64_t now) {
        return !reservation_refusal(r, now);
}

bool reservation_pool_admits(const SolverNodePool *pool) {
        const SolverLabel reserved = { SOLVER_LABEL_CAPACITY_TYPE, RESERVATION_CAPACITY_TYPE };
        for (size_t i = 0; i < pool->n_requirements; i++) {
                const SolverRequirement *q = &pool->requirements[i];
                if (streq(solver_canonical_label_key(q->key), SOLVER_LABEL_CAPACITY_TYPE) &&
                    !solver_requirement_matches_labels(q, &reserved, 1))
                        return false;
        }
        return true;
}

/* The NodePool narrowed to one reservation. */
static int reservation_pool(SolverArena *a, const SolverNodePool *base, const NodeReservation *r, SolverNodePool *ret) {
        static const char *const on_demand[] = { "on-demand" };
        size_t nq = 0, nl = 0;
        SolverRequirement *reqs = solver_arena_alloc(a, (base->n_requirements + 3) * sizeof *reqs);
        SolverLabel *labels = solver_arena_alloc(a, (base->n_labels + 2) * sizeof *labels);
        const char **type = solver_arena_alloc(a, sizeof(char *)), **zone = solver_arena_alloc(a, sizeof(char *));
        char *name = solver_arena_printf(a, "%s%c%s", base->name, RESERVATION_POOL_SEP, r->id);
        if (!reqs || !labels || !type || !zone || !name)
                return -ENOMEM;
        /* launched as on-demand capacity into the reservation: the capacity-type requirement
         * (which admits reserved) gives way to the on-demand offerings of the type and zone */
        for (size_t i = 0; i < base->n_requirements; i++)
                if (!streq(solver_canonical_label_key(base->requirements[i].key), SOLVER_LABEL_CAPACITY_TYPE))
                        reqs[nq++] = base->requirements[i];
        *type = r->instance_type;
        *zone = r->zone;
        reqs[nq++] = (SolverRequirement) { SOLVER_LABEL_CAPACITY_TYPE, SOLVER_OP_IN, on_demand, 1, 0 };
        reqs[nq++] = (SolverRequirement) { SOLVER_LABEL_INSTANCE_TYPE, SOLVER_OP_IN, type, 1, 0 };
        reqs[nq++] = (SolverRequirement) { SOLVER_LABEL_ZONE, SOLVER_OP_IN, zone, 1, 0 };
        for (size_t i = 0; i < base->n_labels; i++)
                labels[nl++] = base->labels[i];
        labels[nl++] = (SolverLabel) { RESERVATION_LABEL_ID, r->id };
        labels[nl++] = (SolverLabel) { RESERVATION_LABEL_TYPE, r->reservation_type };
        *ret = *base;
        ret->name = name;
        ret->requirements = reqs;
        ret->n_requirements = nq;
        ret->labels = labels;
        ret->n_labels = nl;
        ret->has_node_limit = true;
        ret->node_limit = (int64_t) r->available;
        ret->headroom = (SolverResources) {};
        return 0;
}

int reservation_pools(SolverArena *a, const SolverNodePool *pools, size_t n, reservation_lookup_t lookup,
                      void *userdata, int64_t now, SolverNodePool **ret, size_t *ret_n, size_t **ret_base,
                      const NodeReservation ***ret_reservation) {
        size_t total = n;
        for (size_t i = 0; i < n; i++) {
                size_t nr = 0;
                const NodeReservation *rs = pools[i].node_class ? lookup(pools[i].node_class, &nr, userdata) : NULL;
                if (rs && !pools[i].is_static && reservation_pool_admits(&pools[i]))
                        total += MIN(nr, (size_t) RESERVATION_MAX);
        }
        SolverNodePool *out = solver_arena_alloc(a, (total + 1) * sizeof *out);
        size_t *base = solver_arena_alloc(a, (total + 1) * sizeof *base);
        const NodeReservation **which = solver_arena_alloc(a, (total + 1) * sizeof *which);
        if (!out || !base || !which)
                return -ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                size_t nr = 0;
                const NodeReservation *rs = pools[i].node_class ? lookup(pools[i].node_class, &nr, userdata) : NULL;
                for (size_t j = 0; rs && !pools[i].is_static && reservation_pool_admits(&pools[i]) && j < nr &&
                                   j < RESERVATION_MAX;
                     j++) {
                        if (!reservation_usable(&rs[j], now) || rs[j].available == 0)
                                continue;
                        int r = reservation_pool(a, &pools[i], &rs[j], &out[k]);
                        if (r < 0)
                                return r;
                        base[k] = i;
                        which[k++] = &rs[j];
                }
                out[k] = pools[i];
                base[k] = i;
                which[k++] = NULL;
        }
        *ret = out;
        *ret_n = k;
        if (ret_base)
                *ret_base = base;
        if (ret_reservation)
                *ret_reservation = which;
        return 0;
}

static const char *jstr(const cJSON *o, const char *k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int parse_error(char **ret_error, size_t i, const char *field) {
        if (ret_error && asprintf(ret_error, "CapacityReservations[%zu]: %s is missing or not what EC2 writes", i,
                                  field) < 0)
                *ret_error = NULL;
        return -EINVAL;
}

static int parse_one(SolverArena *a, const cJSON *o, size_t i, NodeReservation *r, char **ret_error) {
        static const char *const required[] = { "CapacityReservationId", "InstanceType", "AvailabilityZone", "State" };
        for (size_t k = 0; k < ELEMENTSOF(required); k++)
                if (isempty(jstr(o, required[k])))
                        return parse_error(ret_error, i, required[k]);
        const cJSON *avail = cJSON_GetObjectItemCaseSensitive(o, "AvailableInstanceCount");
        if (!cJSON_IsNumber(avail) || avail->valuedouble < 0 || avail->valuedouble > 1e9)
                return parse_error(ret_error, i, "AvailableInstanceCount");
        int64_t end = 0;
        const char *end_s = jstr(o, "EndDate");
        if (end_s && timestamp_parse_rfc3339(end_s, 0, &end) < 0)
                return parse_error(ret_error, i, "EndDate");
        *r = (NodeReservation) {
                .id = solver_arena_strdup(a, jstr(o, "CapacityReservationId")),
                .owner_id = solver_arena_strdup(a, jstr(o, "OwnerId")),
                .instance_type = solver_arena_strdup(a, jstr(o, "InstanceType")),
                .zone = solver_arena_strdup(a, jstr(o, "AvailabilityZone")),
                .match_criteria = solver_arena_strdup(a, jstr(o, "InstanceMatchCriteria") ?: "open"),
                .reservation_type = solver_arena_strdup(a, jstr(o, "ReservationType") ?: "default"),
                .state = solver_arena_strdup(a, jstr(o, "State")),
                .end_date = end / 1000000,
                .available = (uint64_t) avail->valuedouble,
        };
        const cJSON *tags = cJSON_GetObjectItemCaseSensitive(o, "Tags"), *t;
        int nt = cJSON_GetArraySize(tags);
        if (tags && (!cJSON_IsArray(tags) || nt > 50))
                return parse_error(ret_error, i, "Tags");
        SolverLabel *tl = nt > 0 ? solver_arena_alloc(a, (size_t) nt * sizeof *tl) : NULL;
        if ((nt > 0 && !tl) || !r->id || !r->instance_type || !r->zone || !r->match_criteria || !r->reservation_type ||
            !r->state)
                return -ENOMEM;
        cJSON_ArrayForEach(t, tags) {
                if (!jstr(t, "Key"))
                        return parse_error(ret_error, i, "Tags[].Key");
                tl[r->n_tags++] = (SolverLabel) { solver_arena_strdup(a, jstr(t, "Key")),
                                                  solver_arena_strdup(a, jstr(t, "Value") ?: "") };
        }
        r->tags = tl;
        return 0;
}

int reservations_parse_describe(SolverArena *a, const cJSON *j, NodeReservation **ret, size_t *ret_n,
                                char **ret_error) {
        const cJSON *list = cJSON_IsArray(j) ? j : cJSON_GetObjectItemCaseSensitive(j, "CapacityReservations");
        if (!cJSON_IsArray(list)) {
                if (ret_error)
                        *ret_error = strdup("expected the answer of `aws ec2 describe-capacity-reservations` "
                                            "({\"CapacityReservations\": [...]})");
                return -EINVAL;
        }
        size_t n = (size_t) cJSON_GetArraySize(list);
        if (n > RESERVATION_MAX * 16) {
                if (ret_error)
                        *ret_error = strdup("too many capacity reservations");
                return -E2BIG;
        }
        NodeReservation *rs = solver_arena_alloc(a, (n + 1) * sizeof *rs);
        if (!rs)
                return -ENOMEM;
        size_t i = 0;
        const cJSON *o;
        cJSON_ArrayForEach(o, list) {
                int r = parse_one(a, o, i, &rs[i], ret_error);
                if (r < 0)
                        return r;
                i++;
        }
        *ret = rs;
        *ret_n = i;
        return 0;
}

static bool has_tag(const NodeReservation *r, const char *key, const char *value) {
        for (size_t i = 0; i < r->n_tags; i++)
                if (streq(r->tags[i].key, key) && (streq(value, "*") || streq_ptr(r->tags[i].value, value)))
                        return true;
        return false;
}

bool reservation_selected(const cJSON *terms, const NodeReservation *r) {
        const cJSON *term;
        if (!streq_ptr(r->state, "active"))
                return false;
        cJSON_ArrayForEach(term, terms) {
                const char *id = jstr(term, "id"), *owner = jstr(term, "ownerID"),
                           *match = jstr(term, "instanceMatchCriteria");
                if (id) {
                        if (streq(id, r->id))
                                return true;
                        continue;
                }
                bool ok = (!owner || streq_ptr(owner, r->owner_id)) && (!match || streq_ptr(match, r->match_criteria));
                const cJSON *t;
                cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(term, "tags"))
                        ok = ok && cJSON_IsString(t) && has_tag(r, t->string, t->valuestring);
                if (ok)
                        return true;
        }
        return false;
}

/* ---- pods ------------------------------------------------------------------------------------ */

enum { CT_SPOT = 1, CT_OD = 2, CT_RES = 4, CT_ALL = 7 };

static bool is_ct(const char *key) {
        return streq(solver_canonical_label_key(key), SOLVER_LABEL_CAPACITY_TYPE);
}

static unsigned ct_admitted(const SolverRequirement *q) {
        static const char *const names[] = { "spot", "on-demand", RESERVATION_CAPACITY_TYPE };
        unsigned m = 0;
        for (unsigned i = 0; i < ELEMENTSOF(names); i++)
                if (solver_requirement_matches_labels(q, &(SolverLabel) { SOLVER_LABEL_CAPACITY_TYPE, names[i] }, 1))
                        m |= 1u << i;
        return m;
}

/* The capacity types a term (and the pod's nodeSelector) admits. */
static unsigned term_admitted(const SolverPod *p, const SolverTerm *t) {
        unsigned m = CT_ALL;
        for (size_t i = 0; i < p->n_node_selector; i++)
                if (is_ct(p->node_selector[i].key)) {
                        const char *v[] = { p->node_selector[i].value };
                        m &= ct_admitted(&(SolverRequirement) { SOLVER_LABEL_CAPACITY_TYPE, SOLVER_OP_IN, v, 1, 0 });
                }
        for (size_t i = 0; t && i < t->n_reqs; i++)
                if (is_ct(t->reqs[i].key))
                        m &= ct_admitted(&t->reqs[i]);
        return m;
}

/* One rewritten term: t's requirements but capacity type, then what stands for `m` (0: a
 * capacity type In [], as unsatisfiable as the term was). */
static int make_term(SolverArena *a, const SolverTerm *t, unsigned m, SolverTerm *ret) {
        static const char *const ct_values[][3] = {
                [CT_SPOT] = { "spot" },
                [CT_OD] = { "on-demand" },
                [CT_SPOT | CT_OD] = { "spot", "on-demand" },
                [CT_OD | CT_RES] = { "on-demand", RESERVATION_CAPACITY_TYPE },
                [CT_ALL] = { "spot", "on-demand", RESERVATION_CAPACITY_TYPE },
        };
        unsigned slot = m & CT_RES && !(m & CT_OD) ? (m & ~CT_SPOT) | CT_OD : m;
        size_t n = t ? t->n_reqs : 0, k = 0;
        SolverRequirement *reqs = solver_arena_alloc(a, (n + 2) * sizeof *reqs);
        if (!reqs)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (!is_ct(t->reqs[i].key))
                        reqs[k++] = t->reqs[i];
        const char *const *v = ct_values[slot];
        size_t nv = 0;
        while (nv < 3 && v[nv])
                nv++;
        reqs[k++] = (SolverRequirement) { SOLVER_LABEL_CAPACITY_TYPE, SOLVER_OP_IN, v, nv, 0 };
        if ((m & CT_RES) && !(m & CT_OD))
                reqs[k++] = (SolverRequirement) { RESERVATION_LABEL_ID, SOLVER_OP_EXISTS, NULL, 0, 0 };
        else if ((m & CT_OD) && !(m & CT_RES))
                reqs[k++] = (SolverRequirement) { RESERVATION_LABEL_ID, SOLVER_OP_DOES_NOT_EXIST, NULL, 0, 0 };
        *ret = (SolverTerm) { reqs, k };
        return 0;
}

/* Whether the pod's rules tell on-demand from reserved (the only pods rewritten). */
static bool pod_splits(const SolverPod *p) {
        size_t nt = p->n_required_terms ? p->n_required_terms : 1;
        for (size_t i = 0; i < nt; i++) {
                unsigned m = term_admitted(p, p->n_required_terms ? &p->required_terms[i] : NULL);
                if (m && !!(m & CT_OD) != !!(m & CT_RES))
                        return true;
        }
        return false;
}

static int rewrite_pod(SolverArena *a, SolverPod *p) {
        size_t nt = p->n_required_terms ? p->n_required_terms : 1, k = 0, ns = 0;
        SolverTerm *terms = solver_arena_alloc(a, 2 * nt * sizeof *terms);
        SolverLabel *sel = solver_arena_alloc(a, (p->n_node_selector + 1) * sizeof *sel);
        if (!terms || !sel)
                return -ENOMEM;
        for (size_t i = 0; i < nt; i++) {
                const SolverTerm *t = p->n_required_terms ? &p->required_terms[i] : NULL;
                unsigned m = term_admitted(p, t);
                int r;
                if ((m & CT_RES) && !(m & CT_OD) && (m & CT_SPOT)) { /* in a reservation (first), or spot */
                        r = make_term(a, t, CT_RES, &terms[k++]);
                        if (r >= 0)
                                r = make_term(a, t, CT_SPOT, &terms[k++]);
                } else
                        r = make_term(a, t, m, &terms[k++]);
                if (r < 0)
                        return r;
        }
        /* the nodeSelector's capacity type now lives in every term */
        for (size_t i = 0; i < p->n_node_selector; i++)
                if (!is_ct(p->node_selector[i].key))
                        sel[ns++] = p->node_selector[i];
        p->node_selector = sel;
        p->n_node_selector = ns;
        p->required_terms = terms;
        p->n_required_terms = k;
        return 0;
}

int reservation_pods(SolverArena *a, const SolverPod *pods, size_t n, const SolverPod **ret) {
        SolverPod *out = NULL;
        for (size_t i = 0; i < n; i++) {
                if (pods[i].node_name || !pod_splits(&pods[i]))
                        continue;
                if (!out) {
                        out = solver_arena_alloc(a, (n + 1) * sizeof *out);
                        if (!out)
                                return -ENOMEM;
                        memcpy(out, pods, n * sizeof *out);
                }
                int r = rewrite_pod(a, &out[i]);
                if (r < 0)
                        return r;
        }
        *ret = out ? out : pods;
        return 0;
}
