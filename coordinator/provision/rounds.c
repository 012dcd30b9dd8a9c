/* SPDX-License-Identifier: Apache-2.0 */
/* Provisioning rounds: snapshot, solve within the time budget, then the launches, their CreateFleet calls
 * overlapping. */
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
#include "macro.h"
#include "model/catalog.h"
#include "model/nodepool.h"
#include "model/userdata.h"
#include "provisioner-internal.h"
#include "solver/solver.h"

/* Drives the launches of the round: resolve what the node class needs, make the launch
 * template, create the fleet; then the next launch. */
void provision_round_next(Provisioner *p) {
        Round *rd = p->round;
        int r = 0;

        for (;;) {
                /* launches that went out in an earlier launch's CreateFleet */
                while (rd && rd->step == STEP_IDLE && rd->sent && rd->next < rd->result->n_launches && rd->sent[rd->next])
                        rd->next++;
                if (rd && rd->fleets_in_flight > 0 && (rd->next >= rd->result->n_launches || !provisioner_acting(p))) {
                        /* every CreateFleet is out: their answers are awaited apart (launching.c),
                         * the next round may run */
                        if (rd->next >= rd->result->n_launches && provisioner_acting(p) && provision_round_detach(p))
                                return;
                        rd->parked = true; /* the last CreateFleet answer ends the round */
                        return;
                }
                if (!rd || rd->next >= rd->result->n_launches || !provisioner_acting(p))
                        return provision_round_finish(p);
                const SolverLaunch *l = &rd->result->launches[rd->next];
                const SolverNodePool *pool = round_pool(rd, l->nodepool);
                switch (rd->step) {
                case STEP_IDLE:
                        rd->price_cap = provision_price_cap(p->registry, &rd->snap, l);
                        if (!provision_price_cap_allows(rd->price_cap, l->price)) {
                                size_t n = provision_price_cap_abandon(p->registry, &rd->snap, l);
                                p->replacements_abandoned++;
                                log_notice("Consolidation replacement for NodePool %s abandoned: its cheapest offering "
                                           "now costs $%.4f/h, not less than the $%.4f/h of the %zu node(s) it "
                                           "replaces; they stay.", pool->name, l->price, rd->price_cap, n);
                                rd->next++;
                                continue;
                        }
                        rd->res = provision_resolved_get(p, pool->node_class);
                        if (!rd->res) {
                                log_oom();
                                return provision_round_finish(p);
                        }
                        rd->arch = provision_arch_index(provision_arch_of_type(&rd->snap.types[l->type]));
                        if (rd->res->resolved_usec == 0 || provision_now_usec(p) - rd->res->resolved_usec > RESOLVE_TTL_USEC) {
                                provision_resolved_reset(rd->res);
                                rd->step = STEP_SUBNETS;
                        } else if (!rd->res->profile)
                                rd->step = STEP_PROFILE;
                        else if (!rd->res->ami[rd->arch])
                                rd->step = STEP_AMI;
                        else
                                rd->step = STEP_TEMPLATE;
                        continue;
                case STEP_SUBNETS: {
                        Ec2Filter f[4];
                        char names[4][160];
                        const char *values[4][2] = {};
                        size_t nf = provision_selector_filters(p, pool->node_class, "subnetSelectorTerms", f, names, values);
                        r = ec2_describe_subnets(p->ec2, NULL, f, nf, provision_on_subnets, p);
                        break;
                }
                case STEP_SGS: {
                        Ec2Filter f[4];
                        char names[4][160];
                        const char *values[4][2] = {};
                        size_t nf = provision_selector_filters(p, pool->node_class, "securityGroupSelectorTerms", f, names, values);
                        r = ec2_describe_security_groups(p->ec2, NULL, f, nf, provision_on_sgs, p);
                        break;
                }
                case STEP_PROFILE:
                        r = provision_profile_resolve(p, rd, pool->node_class);
                        if (r == 0) {
                                rd->step = rd->res->ami[rd->arch] ? STEP_TEMPLATE : STEP_AMI;
                                continue;
                        }
                        break;
                case STEP_AMI:
                        r = provision_ami_lookup(p, rd, pool->node_class);
                        break;
                case STEP_TEMPLATE: {
                        Ec2LaunchTemplateSpec spec;
                        bool create = false;
                        _cleanup_free_ char *ud = NULL;
                        r = provision_template_for(p, rd, l, &create, &spec, &ud);
                        if (r >= 0 && create) {
                                spec.user_data = ud;
                                r = ec2_create_launch_template(p->ec2, &spec, provision_on_template, p);
                                if (ud)
                                        explicit_bzero(ud, strlen(ud));
                                break;
                        }
                        if (r >= 0) {
                                rd->step = STEP_FLEET;
                                continue;
                        }
                        break;
                }
                case STEP_FLEET:
                        r = provision_fleet_start(p, rd, rd->next);
                        if (r == -ESTALE) { /* no longer acting: nothing more is launched */
                                rd->next = rd->result->n_launches;
                                continue;
                        }
                        if (r >= 0) { /* the next launch meanwhile, while slots are free */
                                rd->fleets_in_flight++;
                                rd->step = STEP_IDLE;
                                rd->next++;
                                if (rd->fleets_in_flight < FLEETS_AT_ONCE)
                                        continue;
                                rd->parked = true;
                                return;
                        }
                        break;
                }
                if (r < 0) {
                        Ec2Error e = { .kind = EC2_ERROR_OTHER, .error = r };
                        snprintf(e.code, sizeof e.code, "Local");
                        snprintf(e.message, sizeof e.message, "%s", strerror(-r));
                        provision_launch_failed(p, "launch", &e);
                }
                return; /* the callback continues */
        }
}

void provisioner_round_free(Round *rd) {
        if (!rd)
                return;
        provision_solve_free(rd->solve); /* waits for a solve under way */
        free(rd->fleet_calls);
        free(rd->sent);
        solver_result_free(rd->result);
        solver_free(rd->solver);
        nodepool_objects_free(rd->objects);
        solver_arena_free(rd->arena);
        free(rd);
}

void provision_round_finish(Provisioner *p) {
        Round *rd = p->round;
        if (!rd)
                return;
        p->last_round_seconds = (double) (provision_now_usec(p) - rd->started_usec) / 1e6;
        histogram_observe(&p->histograms.round_seconds, p->last_round_seconds);
        bool again = rd->launched_nothing || rd->budget_cut;
        p->round = NULL;
        provisioner_round_free(rd);
        provision_catalog_swap(p); /* a catalog built meanwhile: the round no longer points into the old one */
        /* capacity errors: solve again at once with those offerings left out; pods that came
         * while we were busy: their batch fires now */
        if (again || p->batch_open)
                provisioner_poke(p);
}

/* A slice of the snapshot's pods holds the loop this long at most (and the first pod of each
 * slice is always read): agents' reports and watch events are handled between slices (the
 * slices' timer and the sockets take turns). */
#define SNAPSHOT_SLICE_USEC (20 * USEC_PER_MSEC)

/* The round ends before launching anything. A batch that opened while it was under way (its
 * timers let it be) fires afresh. */
static void round_abort(Provisioner *p) {
        Round *rd = p->round;
        p->round = NULL;
        (void) sd_event_source_set_enabled(p->snapshot_slice, SD_EVENT_OFF);
        provisioner_round_free(rd);
        if (p->batch_open)
                provisioner_poke(p);
}

/* Where a round put pending pods on nodes that exist or are in flight, per node: the pods its
 * agent reports there, the pending pods counted there already (launched for it, or nominated by
 * the scheduler's preemption), the pods placed there now. One line, for reading a round against
 * what kube-scheduler then did (bench/bench_scaleout.py); nodes without placements are left out,
 * and at most ROOM_NODES are listed (the rest counted). */
#define ROOM_NODES 64
static void log_room(const Round *rd) {
        const SolverResult *res = rd->result;
        size_t n_pending = rd->objects ? rd->objects->n_pods : 0;
        struct { uint32_t node; size_t reported, counted, placed; } room[ROOM_NODES];
        size_t n = 0, more = 0;
        if (res->n_placed_existing == 0)
                return;
        for (size_t i = 0; i < rd->snap.n_pods && i < res->n_decisions; i++) {
                const SolverDecision *d = &res->decisions[i];
                if (rd->snap.pods[i].node_name || d->kind != SOLVER_DECISION_EXISTING || d->target >= rd->snap.n_nodes)
                        continue;
                size_t k = 0;
                while (k < n && room[k].node != d->target)
                        k++;
                if (k == n && n == ROOM_NODES) {
                        more++;
                        continue;
                }
                if (k == n)
                        room[n++] = (typeof(room[0])) { .node = d->target };
                room[k].placed++;
        }
        for (size_t i = 0; i < rd->snap.n_pods; i++) {
                const char *on = rd->snap.pods[i].node_name;
                for (size_t k = 0; on && k < n; k++)
                        if (streq_ptr(rd->snap.nodes[room[k].node].name, on)) {
                                *(i < n_pending ? &room[k].counted : &room[k].reported) += 1;
                                break;
                        }
        }
        char line[1800];
        size_t len = 0;
        line[0] = 0;
        for (size_t k = 0; k < n; k++) {
                const SolverNode *node = &rd->snap.nodes[room[k].node];
                int w = snprintf(line + len, sizeof line - len, " %s%s=%zu/%zu+%zu", strempty(node->name),
                                 node->in_flight ? "*" : "", room[k].reported, room[k].counted, room[k].placed);
                if (w < 0 || (size_t) w >= sizeof line - len) {
                        line[len] = 0;
                        more += room[k].placed;
                        continue;
                }
                len += (size_t) w;
        }
        log_info("Provisioning round room (node=reported/counted+placed, * in flight):%s; %zu placement(s) not listed.",
                 line, more);
}

static void round_decided(Provisioner *p, int r, char *err, uint64_t usec) {
        Round *rd = p->round;
        p->last_decision_seconds = (double) usec / 1e6;
        histogram_observe(&p->histograms.solver_seconds, p->last_decision_seconds);
        if (r < 0) {
                log_warning("Solver failed: %s", err ? err : strerror(-r));
                provision_set_error(p, "solver: %s", err ? err : strerror(-r));
                free(err);
                return round_abort(p);
        }
        free(err);
        const SolverResult *res = rd->result;
        size_t pending = rd->pending;
        p->pods_unschedulable = res->n_unschedulable;
        log_info("Provisioning: %zu pending pod(s): %zu on existing or in-flight nodes, %zu on %zu new node(s) "
                 "($%.4f/h), %zu unschedulable; decided in %.1f ms; %zu bound pod(s) counted before their agent "
                 "reported them.",
                 pending, res->n_placed_existing, res->n_placed_new, res->n_launches, res->total_price,
                 res->n_unschedulable, p->last_decision_seconds * 1000, rd->bound_unreported);
        log_room(rd);
        if (rd->missing > 0)
                log_info("Provisioning: static NodePools lack %zu node(s), launched whatever the pods.", rd->missing);
        if (res->budget_exhausted) {
                /* a partial plan: launch it, and plan the rest in the next round */
                rd->budget_cut = true;
                p->budget_cuts++;
                p->pods_deferred += res->n_deferred;
                log_info("Provisioning: the solver's time budget (%llu ms) ran out; %zu pod(s) left for the next round.",
                         (unsigned long long) p->cfg.solver_budget_ms, res->n_deferred);
        }
        for (size_t i = 0; i < res->n_decisions; i++)
                if (res->decisions[i].kind == SOLVER_DECISION_EXISTING && !rd->snap.pods[i].node_name &&
                    res->decisions[i].target < rd->snap.n_nodes)
                        if (p->ports.nominated)
                                p->ports.nominated(p->ports.userdata, rd->snap.nodes[res->decisions[i].target].name);
        for (size_t i = 0; i < res->n_decisions; i++)
                if (res->decisions[i].kind == SOLVER_DECISION_UNSCHEDULABLE && !rd->snap.pods[i].node_name)
                        log_info("Pod %s/%s cannot be placed: %s", rd->snap.pods[i].namespace_, rd->snap.pods[i].name,
                                 strempty(res->decisions[i].message));
        if (p->ports.decided)
                p->ports.decided(p->ports.userdata, rd);
        rd->next = 0;
        rd->step = STEP_IDLE;
        provision_round_next(p);
}

/* The snapshot is complete: what the solve needs, then the solve on its thread. */
static void round_snapshot_done(Provisioner *p) {
        Round *rd = p->round;
        size_t pending = 0;
        int r;

        r = provisioner_snapshot_end(p, rd, &pending);
        p->pending_unschedulable = pending;
        rd->pending = pending;
        size_t missing = 0; /* nodes static NodePools lack: launched without pending pods */
        for (size_t k = 0; r >= 0 && k < rd->snap.n_nodepools; k++)
                missing += solver_static_missing(&rd->snap, k);
        rd->missing = missing;
        if (r >= 0 && pending == 0 && missing == 0)
                log_debug("Provisioning round %llu: no pod is pending.", (unsigned long long) p->rounds);
        if (r < 0 || (pending == 0 && missing == 0))
                return round_abort(p);
        /* the zones nodes can go to must be known before solving */
        bool waiting = false;
        for (size_t i = 0; i < rd->snap.n_nodepools; i++) {
                waiting |= provision_prefetch(p, rd->snap.nodepools[i].node_class);
                /* and the capacity reservations the class selects, with the instances they have left */
                waiting |= provision_reservations_refresh(p, rd->snap.nodepools[i].node_class);
        }
        if (!waiting && provision_reservation_pools(p, rd) < 0)
                log_oom();
        if (waiting)
                return round_abort(p); /* the look-up starts the round again when done */
        /* pod uids for ClientTokens, by snapshot index (pending pods come first) */
        rd->pod_uids = solver_arena_alloc(rd->arena, (rd->snap.n_pods + 1) * sizeof(char *));
        if (!rd->pod_uids)
                return round_abort(p);
        for (size_t i = 0; i < rd->snap.n_pods; i++) {
                const SolverPod *sp = &rd->snap.pods[i];
                const char *uid = sp->node_name ? NULL : provisioner_snapshot_pod_uid(rd, i);
                rd->pod_uids[i] = solver_arena_printf(rd->arena, "%s/%s", strempty(sp->namespace_),
                                                      uid ? uid : strempty(sp->name));
        }

        SolverOptions opts = SOLVER_OPTIONS_DEFAULT;
        /* a consolidation that found its replacement on-demand (spot is not replaced by
         * spot unless allowed) launches it so */
        NodeEntry *e;
        REGISTRY_FOREACH(e, p->registry)
                opts.on_demand_only |= e->replace_started_usec && e->replace_on_demand;
        /* the budget bounds placing: compiling the snapshot is not cut (a budget spent
         * there would leave each round one node's worth of progress) */
        opts.time_budget_usec = p->cfg.solver_budget_ms * USEC_PER_MSEC;
        r = provision_solve_start(p, rd, &opts, round_decided);
        if (r < 0) {
                log_warning_errno(r, "Cannot start the solver: %m");
                provision_set_error(p, "solver: %s", strerror(-r));
                round_abort(p);
        }
}

/* Reads the next slice of the snapshot's pods; the last one goes on to the solve. */
static void round_snapshot_slice(Provisioner *p) {
        Round *rd = p->round;
        int r = provisioner_snapshot_pods(p, rd, provision_clock_usec() + SNAPSHOT_SLICE_USEC);
        if (r < 0) {
                log_warning_errno(r, "Cannot build the snapshot: %m");
                return round_abort(p);
        }
        if (r == 0) {
                /* a timer already due, not a defer source: sd-event dispatches a pending defer
                 * source before anything else, so slices on one would starve the sockets;
                 * timers and I/O take turns */
                (void) sd_event_source_set_time(p->snapshot_slice, 0);
                (void) sd_event_source_set_enabled(p->snapshot_slice, SD_EVENT_ONESHOT);
                return;
        }
        round_snapshot_done(p);
}

int provision_on_snapshot_slice(sd_event_source *s, uint64_t usec, void *userdata) {
        Provisioner *p = userdata;
        if (p->round && p->round->build && !p->round->solve && !p->round->result)
                round_snapshot_slice(p);
        return 0;
}

void provision_round_start(Provisioner *p) {
        Round *rd = NULL;
        int r;

        if (!p->leading || !p->learned || p->round)
                return; /* the round under way pokes again when it ends */
        /* A new leader first gives the agents a couple of report intervals to reach it, so it
         * knows what runs on the nodes before it decides anything. */
        uint64_t sync = 2 * p->cfg.report_interval_ms * USEC_PER_MSEC + USEC_PER_SEC;
        if (provision_now_usec(p) - p->leading_since_usec < sync) {
                provisioner_poke(p);
                return;
        }
        if (!kube_watch_synced(p->pods) || !kube_watch_synced(p->bound) || !kube_watch_synced(p->nodepools) ||
            !kube_watch_synced(p->nodes)) {
                provisioner_poke(p);
                return;
        }
        rd = calloc(1, sizeof *rd);
        if (!rd || solver_arena_new(&rd->arena) < 0) {
                free(rd);
                log_oom();
                return;
        }
        rd->started_usec = provision_now_usec(p);
        p->round = rd;
        p->rounds++;
        log_info("Provisioning round %llu: batch closed, building the snapshot.", (unsigned long long) p->rounds);

        r = provisioner_snapshot_begin(p, rd);
        if (r < 0) {
                log_warning_errno(r, "Cannot build the snapshot: %m");
                return round_abort(p);
        }
        /* The look-ups a first round waits for (below: subnets, capacity reservations) start
         * before the pods are read, when there are unbound pods: a round that would wait
         * reads them for nothing. */
        bool waiting = false;
        for (size_t i = 0; kube_watch_size(p->pods) > 0 && i < rd->objects->n_pools; i++) {
                waiting |= provision_prefetch(p, rd->objects->pools[i].node_class);
                waiting |= provision_reservations_refresh(p, rd->objects->pools[i].node_class);
        }
        if (waiting)
                return round_abort(p); /* the look-up starts the round again when done */
        round_snapshot_slice(p);
}
