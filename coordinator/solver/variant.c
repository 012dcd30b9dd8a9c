/* SPDX-License-Identifier: Apache-2.0 */
/* Variants of a shape (one per relaxation level, built lazily): their constraints, the pools
 * they may open nodes in and the existing nodes they may use. */

#include <stdio.h>

#include "macro.h"
#include "solver-internal.h"

/* ---- variants ------------------------------------------------------------------------------- */

Variant *solver_variant(Solver *s, uint32_t shape, uint32_t level) {
        Shape *sh = &s->shapes[shape];
        if (level > sh->n_relax)
                return NULL;
        if (sh->variants[level])
                return sh->variants[level];
        const SolverPod *p = sh->pod;
        uint32_t drop[RELAX_PREFER_NO_SCHEDULE + 1] = {};
        for (uint32_t i = 0; i < level; i++)
                drop[sh->relax[i]]++;

        Variant *v = solver_arena_alloc(s->arena, sizeof(Variant));
        if (!v)
                return NULL;
        v->shape = shape;
        v->level = level;
        v->tolerate_prefer_no_schedule = drop[RELAX_PREFER_NO_SCHEDULE] > 0 || !s->any_prefer_no_schedule;

        /* requirements */
        size_t nreq = p->n_node_selector + 1;
        if (p->n_required_terms > 0)
                nreq += p->required_terms[MIN(drop[RELAX_REQUIRED_TERM], p->n_required_terms - 1)].n_reqs;
        bool pnode = drop[RELAX_PREF_NODE] < p->n_preferred_terms;
        const SolverTerm *pterm = pnode ? &p->preferred_terms[sh->pnode_order[drop[RELAX_PREF_NODE]]].term : NULL;
        if (pterm)
                nreq += pterm->n_reqs;
        v->reqs = solver_arena_alloc(s->arena, nreq * sizeof(void *));
        SolverRequirement *sel = solver_arena_alloc(s->arena, (p->n_node_selector + 1) * sizeof(SolverRequirement));
        if (!v->reqs || !sel)
                return NULL;
        for (size_t i = 0; i < p->n_node_selector; i++) {
                sel[i] = (SolverRequirement) { .key = p->node_selector[i].key, .op = SOLVER_OP_IN,
                                               .values = &p->node_selector[i].value, .n_values = 1 };
                v->reqs[v->n_reqs++] = &sel[i];
        }
        if (p->n_required_terms > 0) {
                const SolverTerm *t = &p->required_terms[MIN(drop[RELAX_REQUIRED_TERM], p->n_required_terms - 1)];
                for (size_t i = 0; i < t->n_reqs; i++)
                        v->reqs[v->n_reqs++] = &t->reqs[i];
        }
        if (pterm)
                for (size_t i = 0; i < pterm->n_reqs; i++)
                        v->reqs[v->n_reqs++] = &pterm->reqs[i];
        uint32_t n_plain = v->n_reqs;
        if (p->n_volume_zones > 0) {
                SolverRequirement *vz = solver_arena_alloc(s->arena, sizeof(SolverRequirement));
                if (!vz)
                        return NULL;
                *vz = (SolverRequirement) { .key = SOLVER_LABEL_ZONE, .op = SOLVER_OP_IN,
                                            .values = p->volume_zones, .n_values = p->n_volume_zones };
                v->reqs[v->n_reqs++] = vz;
        }
        CReqs c;
        if (solver_compile_reqs(s, v->reqs, n_plain, &c) < 0)
                return NULL;
        v->types = c.types;
        v->slots = c.slots;
        v->slots_novol = c.slots;
        v->new_nodes_ok = c.new_nodes_ok;
        v->custom = c.custom;
        v->pool_reqs = c.pool_reqs;
        v->n_pool_reqs = c.n_pool_reqs;
        if (c.custom_empty) {
                v->slots = 0;
                v->new_nodes_ok = false;
        }
        if (p->n_volume_zones > 0) {
                uint32_t m = 0;
                for (uint32_t z = 0; z < s->n_zones; z++)
                        for (size_t i = 0; i < p->n_volume_zones; i++)
                                if (p->volume_zones[i] && streq(p->volume_zones[i], s->zones[z]))
                                        m |= 1u << z;
                if ((v->slots & slots_of_zones(m)) != v->slots)
                        v->volume_restricted = true;
                v->slots &= slots_of_zones(m);
        }
        if (n_plain > 0) {
                char buf[1024];
                size_t o = 0;
                for (uint32_t i = 0; i < n_plain && o < sizeof(buf) - 64; i++)
                        o += (size_t) snprintf(buf + o, sizeof(buf) - o, "%s%s", i ? ", " : "",
                                               solver_describe_req(s->arena, v->reqs[i]));
                v->req_desc = solver_arena_strdup(s->arena, buf);
        }

        /* topology constraints */
        size_t ncons = p->n_spreads + p->n_affinity + p->n_anti_affinity + p->n_pref_affinity + p->n_pref_anti_affinity;
        v->cons = solver_arena_alloc(s->arena, (ncons + 1) * sizeof(Constraint));
        if (!v->cons)
                return NULL;
        uint32_t sa_seen = 0;
#define ADD_CON(k, g, skew, mind, required_term)                                                   \
        do {                                                                                       \
                Group *gr_ = &s->groups[g];                                                        \
                if (gr_->key == TOPO_OTHER) {                                                      \
                        if (required_term) {                                                       \
                                v->unsupported = true;                                             \
                                v->unsupported_msg = solver_arena_printf(                          \
                                        s->arena, "topology key %s is not supported (zone, hostname and capacity type are)", \
                                        gr_->description);                                         \
                        }                                                                          \
                        break;                                                                     \
                }                                                                                  \
                bool self_ = false;                                                                \
                for (uint32_t m_ = 0; m_ < sh->n_matches; m_++)                                    \
                        if (sh->matches[m_] == (g))                                                \
                                self_ = true;                                                      \
                v->cons[v->n_cons++] = (Constraint) { .kind = (k), .group = (g), .max_skew = (skew), \
                                                      .min_domains = (mind), .self = self_,        \
                                                      .required = (required_term) };               \
                if (gr_->key == TOPO_ZONE)                                                         \
                        v->zone_mode = true;                                                       \
                if (gr_->key == TOPO_CT)                                                           \
                        v->ct_mode = true;                                                         \
        } while (0)

        for (size_t i = 0; i < p->n_spreads; i++) {
                const SolverSpread *sp = &p->spreads[i];
                if (sp->schedule_anyway && sa_seen++ < drop[RELAX_SCHEDULE_ANYWAY])
                        continue;
                ADD_CON(CON_SPREAD, sh->spread_g[i], MAX(sp->max_skew, 1), sp->min_domains, !sp->schedule_anyway);
        }
        for (size_t i = 0; i < p->n_affinity; i++)
                ADD_CON(CON_AFFINITY, sh->aff_g[i], 0, 0, true);
        for (size_t i = 0; i < p->n_anti_affinity; i++)
                ADD_CON(CON_ANTI, sh->anti_g[i], 0, 0, true);
        for (size_t i = drop[RELAX_PREF_AFFINITY]; i < p->n_pref_affinity; i++)
                ADD_CON(CON_AFFINITY, sh->paff_g[sh->paff_order[i]], 0, 0, false);
        for (size_t i = drop[RELAX_PREF_ANTI]; i < p->n_pref_anti_affinity; i++)
                ADD_CON(CON_ANTI, sh->panti_g[sh->panti_order[i]], 0, 0, false);
#undef ADD_CON
        for (uint32_t m = 0; m < sh->n_matches; m++) {
                if (s->groups[sh->matches[m]].key == TOPO_ZONE)
                        v->zone_mode = true;
                if (s->groups[sh->matches[m]].key == TOPO_CT && s->groups[sh->matches[m]].has_anti_owners)
                        v->ct_mode = true;
        }
        if (sh->has_wffc)
                v->zone_mode = true;

        /* zone domains: zones where the pod could run */
        /* and capacity-type domains: those its pools offer it and existing nodes have */
        uint32_t ez = 0, ect = 0;
        uint64_t tmp[SOLVER_MAX_TYPES / 64], tmp2[SOLVER_MAX_TYPES / 64];
        for (uint32_t pi = 0; pi < s->n_pools; pi++) {
                const Pool *pl = &s->pools[pi];
                if (s->T == 0 || !bs_and_any(tmp, v->types, pl->types, s->W))
                        continue;
                uint64_t sl = v->slots & pl->slots;
                for (uint32_t z = 0; z < s->n_zones; z++) {
                        if (!(sl & slots_of_zone((int) z)) || (ez & (1u << z)))
                                continue;
                        solver_offer_set(s, sl & slots_of_zone((int) z), tmp2);
                        bs_and(tmp2, tmp, s->W);
                        if (bs_any(tmp2, s->W))
                                ez |= 1u << z;
                }
                for (int ct = 0; ct < _SOLVER_CAPACITY_MAX; ct++) {
                        if (!(sl & slots_of_ct(ct)) || (ect & (1u << ct)))
                                continue;
                        solver_offer_set(s, sl & slots_of_ct(ct), tmp2);
                        bs_and(tmp2, tmp, s->W);
                        if (bs_any(tmp2, s->W))
                                ect |= 1u << ct;
                }
        }
        for (uint32_t n = 0; n < s->n_existing; n++) {
                if (s->nodes[n].zone >= 0 && (zones_of_slots(v->slots) & (1u << s->nodes[n].zone)))
                        ez |= 1u << s->nodes[n].zone;
                if (v->slots & slots_of_ct(snap_ct(s, n)))
                        ect |= 1u << snap_ct(s, n);
        }
        v->eligible_zones = ez;
        v->eligible_cts = ect;

        v->pools = solver_arena_alloc(s->arena, (s->n_pools + 1) * sizeof(PoolCompat));
        v->node_ok = solver_arena_alloc(s->arena, s->n_existing + 1);
        if (!v->pools || !v->node_ok)
                return NULL;
        sh->variants[level] = v;
        return v;
}

PoolCompat *solver_pool_compat(Solver *s, Variant *v, uint32_t pi) {
        PoolCompat *pc = &v->pools[pi];
        if (pc->done)
                return pc;
        pc->done = true;
        const Pool *p = &s->pools[pi];
        const Shape *sh = &s->shapes[v->shape];
        const SolverPod *pod = sh->pod;
        SolverArena *a = s->arena;

        for (size_t t = 0; t < p->np->n_taints; t++) {
                const SolverTaint *tt = &p->np->taints[t];
                if (tt->effect == SOLVER_EFFECT_PREFER_NO_SCHEDULE && v->tolerate_prefer_no_schedule)
                        continue;
                if (!solver_tolerates_all(pod->tolerations, pod->n_tolerations, tt, 1, false)) {
                        pc->reason = SOLVER_REASON_TAINTS;
                        pc->message = solver_arena_printf(a, "does not tolerate taint %s%s%s:%s", tt->key,
                                                          tt->value ? "=" : "", tt->value ? tt->value : "",
                                                          tt->effect == SOLVER_EFFECT_NO_SCHEDULE ? "NoSchedule" :
                                                          tt->effect == SOLVER_EFFECT_NO_EXECUTE ? "NoExecute" :
                                                                                                  "PreferNoSchedule");
                        return pc;
                }
        }
        if (!v->new_nodes_ok) {
                pc->reason = SOLVER_REASON_REQUIREMENTS;
                pc->message = "the pod asks for a specific existing node (kubernetes.io/hostname) or contradictory labels";
                return pc;
        }
        if (v->n_pool_reqs && !solver_pool_reqs_ok(s, v->pool_reqs, v->n_pool_reqs, p->np->name)) {
                pc->reason = SOLVER_REASON_REQUIREMENTS;
                pc->message = solver_arena_printf(a, "the pod requires another NodePool (%s)",
                                                  solver_describe_req(a, v->pool_reqs[0]));
                return pc;
        }
        const char *msg = NULL;
        int q = solver_vsetlist_narrow(s, a, &p->custom, &v->custom, &pc->custom, &msg);
        if (q <= 0) {
                pc->reason = SOLVER_REASON_REQUIREMENTS;
                pc->message = msg ? msg : "out of memory";
                return pc;
        }
        pc->custom_changed = pc->custom != NULL;
        if (!pc->custom)
                pc->custom = &p->custom;

        uint64_t *types = solver_arena_alloc_nozero(a, s->W * sizeof(uint64_t));
        uint64_t tmp[SOLVER_MAX_TYPES / 64];
        if (!types) {
                pc->reason = SOLVER_REASON_UNSUPPORTED;
                pc->message = "out of memory";
                return pc;
        }
        if (s->T == 0 || !bs_and_any(types, v->types, p->types, s->W)) {
                pc->reason = SOLVER_REASON_REQUIREMENTS;
                /* name the pod requirement that excludes every type of the pool */
                const char *which = v->req_desc ? v->req_desc : "requirements";
                for (uint32_t i = 0; i < v->n_reqs; i++) {
                        CReqs c;
                        if (solver_compile_reqs(s, &v->reqs[i], 1, &c) < 0)
                                break;
                        if (!bs_and_any(tmp, c.types, p->types, s->W)) {
                                which = solver_describe_req(a, v->reqs[i]);
                                break;
                        }
                }
                pc->message = solver_arena_printf(a, "no instance type of the NodePool satisfies %s", which);
                return pc;
        }
        pc->slots = v->slots & p->slots;
        if (!pc->slots) {
                pc->reason = v->volume_restricted ? SOLVER_REASON_VOLUME_ZONE : SOLVER_REASON_REQUIREMENTS;
                pc->message = v->volume_restricted ? "the pod's volume is in a zone the NodePool does not offer"
                                                   : "no zone and capacity type allowed by both the pod and the NodePool";
                return pc;
        }
        solver_offer_set(s, pc->slots, tmp);
        if (!bs_and_any(types, types, tmp, s->W)) {
                pc->reason = v->volume_restricted ? SOLVER_REASON_VOLUME_ZONE : SOLVER_REASON_REQUIREMENTS;
                pc->message = v->volume_restricted
                                      ? "no matching instance type is offered in the zone of the pod's volume"
                                      : "no matching instance type has an available offering in the allowed zones and capacity types";
                return pc;
        }
        int64_t d[R_MAX];
        for (int r = 0; r < R_MAX; r++)
                d[r] = sh->req.v[r] + p->ds.v[r];
        solver_fit_set(s, p->fit, d, tmp);
        uint64_t *fit = solver_arena_alloc_nozero(a, s->W * sizeof(uint64_t));
        if (fit)
                bs_copy(fit, tmp, s->W);
        if (!bs_and_any(types, types, tmp, s->W) || (p->has_min_values && !solver_pool_min_values_ok(s, p, types))) {
                if (v->volume_restricted && fit) {
                        /* would a type with room exist without the volume's zone? */
                        uint64_t other[SOLVER_MAX_TYPES / 64];
                        solver_offer_set(s, v->slots_novol & p->slots, other);
                        bs_and(other, fit, s->W);
                        bs_and(other, v->types, s->W);
                        bs_and(other, p->types, s->W);
                        if (bs_any(other, s->W)) {
                                pc->reason = SOLVER_REASON_VOLUME_ZONE;
                                pc->message = solver_arena_printf(
                                        a, "no instance type with room for %s is offered in the zone of its volume",
                                        solver_format_resources(a, sh->req.v));
                                return pc;
                        }
                }
                pc->reason = SOLVER_REASON_RESOURCES;
                const char *ds = solver_format_resources(a, p->ds.v);
                pc->message = solver_arena_printf(a, "no instance type has room for %s%s%s%s",
                                                  solver_format_resources(a, sh->req.v),
                                                  p->ds.v[SOLVER_RES_PODS] ? " plus DaemonSet overhead " : "",
                                                  p->ds.v[SOLVER_RES_PODS] ? ds : "",
                                                  p->has_min_values ? " (with the NodePool's minValues)" : "");
                return pc;
        }
        pc->types = types;
        pc->ok = true;
        return pc;
}

static const char *node_label(const Solver *s, const SolverNode *n, const char *ckey) {
        for (size_t i = 0; i < n->n_labels; i++)
                if (streq(solver_canonical_label_key(n->labels[i].key), ckey))
                        return n->labels[i].value ? n->labels[i].value : "";
        if (streq(ckey, SOLVER_LABEL_HOSTNAME))
                return n->name;
        if (streq(ckey, SOLVER_LABEL_ZONE))
                return n->zone;
        if (streq(ckey, SOLVER_LABEL_CAPACITY_TYPE))
                return solver_capacity_type_to_name(n->capacity_type);
        if (streq(ckey, SOLVER_LABEL_NODEPOOL))
                return n->nodepool;
        if (streq(ckey, SOLVER_LABEL_INSTANCE_TYPE))
                return n->instance_type;
        return NULL;
}

/* Taints a node carries only while it starts: the kubelet registers with not-ready (the node
 * lifecycle controller removes it once Ready; unreachable while a lease lapses), an external cloud
 * provider adds uninitialized until its controller initialises the node. On a node a NodePool
 * launched they are temporary, as Karpenter treats them: reading them literally makes every
 * registering node look unusable and launches a second one for the same pods. */
static bool ephemeral_taint(const SolverTaint *t) {
        static const char *const keys[] = { "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
                                            "node.cloudprovider.kubernetes.io/uninitialized" };
        if (t->effect != SOLVER_EFFECT_NO_SCHEDULE)
                return false;
        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                if (streq(t->key, keys[i]))
                        return true;
        return false;
}

static bool node_tolerated(const SolverPod *pod, const SolverNode *n, bool ignore_prefer) {
        for (size_t i = 0; i < n->n_taints; i++) {
                if (n->nodepool && ephemeral_taint(&n->taints[i]))
                        continue;
                if (!solver_tolerates_all(pod->tolerations, pod->n_tolerations, &n->taints[i], 1, ignore_prefer))
                        return false;
        }
        return true;
}

bool solver_existing_ok(Solver *s, Variant *v, uint32_t ni) {
        uint8_t c = v->node_ok[ni];
        if (c)
                return c == 1;
        const SolverNode *n = &s->snap->nodes[ni];
        const SolverPod *pod = s->shapes[v->shape].pod;
        bool ok = node_tolerated(pod, n, v->tolerate_prefer_no_schedule);
        for (uint32_t i = 0; ok && i < v->n_reqs; i++)
                ok = solver_req_value_matches(v->reqs[i], node_label(s, n, solver_canonical_label_key(v->reqs[i]->key)));
        v->node_ok[ni] = ok ? 1 : 2;
        return ok;
}
