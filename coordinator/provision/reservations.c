/* SPDX-License-Identifier: Apache-2.0 */
/* The capacity reservations an EC2NodeClass selects: looked up through DescribeCapacityReservations
 * (one query per term, ORed, as Karpenter does), planned with as reservation pools
 * (model/reservations.h), counted down as launches use them, shown in the class's status. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aws/ec2.h"
#include "kube.h"
#include "log.h"
#include "macro.h"
#include "model/reservations.h"
#include "provisioner-internal.h"

#define RESERVATIONS_TTL_USEC (60 * USEC_PER_SEC)
#define TERM_MAX_FILTERS 4 /* state, owner-id, instance-match-criteria, and tags */

typedef struct Lookup {
        Provisioner *p;
        Resolved *res;
        char *node_class;
        bool for_round;                   /* a round waits for it: start one when done */
        size_t term;                      /* the term whose query is under way */
        Ec2CapacityReservationList *found; /* all terms' answers so far, each id once */
} Lookup;

static int64_t wall_seconds(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec;
}

static const cJSON *class_terms(Provisioner *p, const char *node_class) {
        const cJSON *nc = p->nodeclasses ? kube_watch_get(p->nodeclasses, NULL, node_class) : NULL;
        return jget(jget(nc, "spec"), "capacityReservationSelectorTerms");
}

static void reservations_clear(Resolved *res) {
        res->cr_list = ec2_capacity_reservation_list_free(res->cr_list);
        free(res->reservations);
        res->reservations = NULL;
        res->n_reservations = 0;
}

/* Moves the answer's reservations not seen yet into found (the answer is freed). */
static int merge(Ec2CapacityReservationList *found, Ec2CapacityReservationList *list) {
        int r = 0;
        for (size_t i = 0; i < list->n; i++) {
                bool dup = false;
                for (size_t k = 0; k < found->n && !dup; k++)
                        dup = streq(found->items[k].id, list->items[i].id);
                if (dup || r < 0)
                        continue;
                Ec2CapacityReservation *n = realloc(found->items, (found->n + 1) * sizeof *n);
                if (!n) {
                        r = -ENOMEM;
                        continue;
                }
                found->items = n;
                found->items[found->n++] = list->items[i];
                list->items[i] = (Ec2CapacityReservation) {};
        }
        ec2_capacity_reservation_list_free(list);
        return r;
}

static void lookup_done(Lookup *lk, const char *error) {
        Provisioner *p = lk->p;
        Resolved *res = lk->res;
        res->reservations_looking = false;
        res->reservations_usec = provision_now_usec(p);
        snprintf(res->reservations_error, sizeof res->reservations_error, "%s", strempty(error));
        if (!error) {
                NodeReservation *nr = calloc(lk->found->n + 1, sizeof *nr);
                if (nr) {
                        reservations_clear(res);
                        for (size_t i = 0; i < lk->found->n; i++) {
                                const Ec2CapacityReservation *c = &lk->found->items[i];
                                nr[i] = (NodeReservation) { .id = c->id, .owner_id = c->owner_id,
                                                            .instance_type = c->instance_type, .zone = c->zone,
                                                            .match_criteria = c->match_criteria,
                                                            .reservation_type = c->reservation_type,
                                                            .state = c->state, .end_date = c->end_date,
                                                            .available = c->available };
                                const char *why = reservation_refusal(&nr[i], wall_seconds());
                                if (why && streq(c->state, "active"))
                                        log_notice("EC2NodeClass %s: capacity reservation %s (%s in %s) is not used: %s.",
                                                   lk->node_class, c->id, c->instance_type, c->zone, why);
                        }
                        res->reservations = nr;
                        res->n_reservations = lk->found->n;
                        res->cr_list = TAKE_PTR(lk->found);
                        log_info("EC2NodeClass %s: %zu capacity reservation(s) selected.", lk->node_class,
                                 res->n_reservations);
                } else
                        log_oom();
        } else
                log_warning("EC2NodeClass %s: capacity reservations not looked up: %s", lk->node_class, error);
        bool for_round = lk->for_round || res->reservations_round_waits;
        res->reservations_round_waits = false;
        ec2_capacity_reservation_list_free(lk->found);
        free(lk->node_class);
        free(lk);
        if (!for_round)
                return;
        /* the round that waited for this look-up starts again, as after the subnets' */
        if (p->round) {
                provisioner_poke(p);
                return;
        }
        provision_batch_close(p);
        provision_round_start(p);
}

static int query_term(Lookup *lk);

static void on_reservations(Ec2Client *ec2, const Ec2Error *err, Ec2CapacityReservationList *list, void *userdata) {
        Lookup *lk = userdata;
        char msg[256];
        /* an id that does not exist (any more) selects nothing, as in Karpenter */
        if (err && err->kind != EC2_ERROR_NOT_FOUND) {
                snprintf(msg, sizeof msg, "DescribeCapacityReservations: %.90s %.130s", err->code, err->message);
                ec2_capacity_reservation_list_free(list);
                return lookup_done(lk, msg);
        }
        if (list && merge(lk->found, list) < 0)
                return lookup_done(lk, "out of memory");
        lk->term++;
        int r = query_term(lk);
        if (r < 0) {
                snprintf(msg, sizeof msg, "DescribeCapacityReservations: %s", strerror(-r));
                return lookup_done(lk, msg);
        }
        if (r == 0)
                return lookup_done(lk, NULL);
}

/* Starts the query of term lk->term (1), or returns 0 past the last term. Karpenter's queries:
 * an id on its own; else tags, ownerID and instanceMatchCriteria as filters; active ones only. */
static int query_term(Lookup *lk) {
        const cJSON *term = cJSON_GetArrayItem(class_terms(lk->p, lk->node_class), (int) lk->term);
        if (!term)
                return 0;
        static const char *const active[] = { "active" };
        Ec2Filter f[TERM_MAX_FILTERS + 20];
        char names[20][160];
        const char *vals[TERM_MAX_FILTERS + 20][1];
        size_t n = 0;
        f[n++] = (Ec2Filter) { "state", active, 1 };
        const char *id = jstr(term, "id"), *owner = jstr(term, "ownerID"), *match = jstr(term, "instanceMatchCriteria");
        if (id) {
                const char *ids[] = { id, NULL };
                return ec2_describe_capacity_reservations(lk->p->ec2, ids, f, n, on_reservations, lk) < 0 ? -EIO : 1;
        }
        if (owner) {
                vals[n][0] = owner;
                f[n] = (Ec2Filter) { "owner-id", vals[n], 1 };
                n++;
        }
        if (match) {
                vals[n][0] = match;
                f[n] = (Ec2Filter) { "instance-match-criteria", vals[n], 1 };
                n++;
        }
        const cJSON *t;
        size_t k = 0;
        cJSON_ArrayForEach(t, jget(term, "tags")) {
                if (k >= ELEMENTSOF(names) || n >= EC2_MAX_FILTERS || !cJSON_IsString(t))
                        return -E2BIG;
                bool any = streq(t->valuestring, "*");
                snprintf(names[k], sizeof names[k], any ? "tag-key" : "tag:%s", t->string);
                vals[n][0] = any ? t->string : t->valuestring;
                f[n] = (Ec2Filter) { names[k], vals[n], 1 };
                n++;
                k++;
        }
        return ec2_describe_capacity_reservations(lk->p->ec2, NULL, f, n, on_reservations, lk) < 0 ? -EIO : 1;
}

static bool reservations_start(Provisioner *p, const char *node_class, bool for_round) {
        if (isempty(node_class))
                return false;
        Resolved *res = provision_resolved_get(p, node_class);
        const cJSON *terms = class_terms(p, node_class);
        if (!res)
                return false;
        if (cJSON_GetArraySize(terms) == 0) {
                reservations_clear(res);
                res->reservations_usec = 0;
                return false;
        }
        if (res->reservations_looking) {
                res->reservations_round_waits |= for_round;
                return true;
        }
        uint64_t now = provision_now_usec(p);
        if (res->reservations_usec && now - res->reservations_usec < RESERVATIONS_TTL_USEC)
                return false;
        Lookup *lk = calloc(1, sizeof *lk);
        if (!lk || !(lk->node_class = strdup(node_class)) || !(lk->found = calloc(1, sizeof *lk->found))) {
                if (lk)
                        free(lk->node_class);
                free(lk);
                return false;
        }
        lk->p = p;
        lk->res = res;
        lk->for_round = for_round;
        int r = query_term(lk);
        if (r <= 0) {
                res->reservations_usec = now; /* tried: not again before the TTL */
                log_warning("EC2NodeClass %s: capacity reservations not looked up: %s", node_class,
                            r == -E2BIG ? "a term has more tags than EC2 takes filters" : strerror(-r));
                ec2_capacity_reservation_list_free(lk->found);
                free(lk->node_class);
                free(lk);
                return false;
        }
        res->reservations_looking = true;
        return true;
}

bool provision_reservations_refresh(Provisioner *p, const char *node_class) {
        return reservations_start(p, node_class, true);
}

static int refresh_class(const cJSON *nc, void *userdata) {
        const char *name = kube_object_meta(nc, "name");
        if (name && cJSON_GetArraySize(jget(jget(nc, "spec"), "capacityReservationSelectorTerms")) > 0)
                (void) reservations_start(userdata, name, false);
        return 0;
}

void provisioner_reservations_housekeeping(Provisioner *p) {
        /* the classes' status and the drift of their nodes follow EC2 without pods pending */
        if (p->leading && p->nodeclasses && !p->round)
                (void) kube_watch_foreach(p->nodeclasses, refresh_class, p);
}

void provision_reservation_released(Provisioner *p, const char *instance_id) {
        const InFlight *f = provision_inflight_find(p, instance_id);
        const char *rid = f ? f->reservation_id : NULL;
        for (size_t i = 0; !rid && p->seen_instances && i < p->seen_instances->n; i++)
                if (streq_ptr(p->seen_instances->items[i].id, instance_id))
                        rid = p->seen_instances->items[i].capacity_reservation_id;
        for (size_t i = 0; rid && i < p->n_resolved; i++)
                for (size_t k = 0; k < p->resolved[i]->n_reservations; k++)
                        if (streq(p->resolved[i]->reservations[k].id, rid))
                                p->resolved[i]->reservations[k].available++;
}

bool provisioner_reservation_drifted(Provisioner *p, const char *node_class, const char *instance_id, char *why,
                                     size_t size) {
        const Resolved *res = provisioner_resolved_find(p, strempty(node_class));
        if (!res || !res->reservations_usec || res->reservations_error[0] ||
            cJSON_GetArraySize(class_terms(p, node_class)) == 0)
                return false; /* not known, or the class launches outside reservations (preference none) */
        const Ec2Instance *in = NULL;
        for (size_t i = 0; p->seen_instances && instance_id && i < p->seen_instances->n && !in; i++)
                if (streq_ptr(p->seen_instances->items[i].id, instance_id))
                        in = &p->seen_instances->items[i];
        if (!in || isempty(in->capacity_reservation_id))
                return false;
        for (size_t i = 0; i < res->n_reservations; i++)
                if (streq(res->reservations[i].id, in->capacity_reservation_id))
                        return false;
        snprintf(why, size, "its capacity reservation %s is no longer selected by EC2NodeClass %s's "
                 "capacityReservationSelectorTerms", in->capacity_reservation_id, node_class);
        return true;
}

static const NodeReservation *lookup_class(const char *node_class, size_t *ret_n, void *userdata) {
        Provisioner *p = userdata;
        for (size_t i = 0; i < p->n_resolved; i++)
                if (streq(p->resolved[i]->node_class, node_class) && cJSON_GetArraySize(class_terms(p, node_class)) > 0) {
                        *ret_n = p->resolved[i]->n_reservations;
                        return p->resolved[i]->reservations;
                }
        *ret_n = 0;
        return NULL;
}

int provision_reservation_pools(Provisioner *p, Round *rd) {
        SolverNodePool *pools;
        size_t n, *base;
        const NodeReservation **which;
        int r = reservation_pools(rd->arena, rd->snap.nodepools, rd->snap.n_nodepools, lookup_class, p, wall_seconds(),
                                  &pools, &n, &base, &which);
        if (r < 0 || n == rd->snap.n_nodepools)
                return r;
        /* the round's own copies: a look-up may replace the class's list while it launches */
        for (size_t k = 0; k < n; k++) {
                if (!which[k])
                        continue;
                NodeReservation *c = solver_arena_alloc(rd->arena, sizeof *c);
                if (!c)
                        return -ENOMEM;
                *c = *which[k];
                c->id = solver_arena_strdup(rd->arena, which[k]->id);
                c->owner_id = solver_arena_strdup(rd->arena, which[k]->owner_id);
                c->instance_type = solver_arena_strdup(rd->arena, which[k]->instance_type);
                c->zone = solver_arena_strdup(rd->arena, which[k]->zone);
                c->match_criteria = solver_arena_strdup(rd->arena, which[k]->match_criteria);
                c->reservation_type = solver_arena_strdup(rd->arena, which[k]->reservation_type);
                c->state = solver_arena_strdup(rd->arena, which[k]->state);
                which[k] = c;
        }
        rd->snap.nodepools = pools;
        rd->snap.n_nodepools = n;
        rd->pool_base = base;
        rd->pool_reservation = which;
        /* pods that tell reserved from on-demand, as Karpenter's labels do (same order: the
         * round's pod uids stay valid) */
        return reservation_pods(rd->arena, rd->snap.pods, rd->snap.n_pods, &rd->snap.pods);
}

void provision_reservation_used(Provisioner *p, const char *node_class, const char *id, bool exhausted) {
        Resolved *res = node_class ? provision_resolved_get(p, node_class) : NULL;
        for (size_t i = 0; res && i < res->n_reservations; i++)
                if (streq(res->reservations[i].id, id)) {
                        /* launched: one fewer until EC2 is asked again (it counts the launch too) */
                        if (exhausted)
                                res->reservations[i].available = 0;
                        else if (res->reservations[i].available > 0)
                                res->reservations[i].available--;
                }
}
