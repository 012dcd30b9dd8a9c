/* SPDX-License-Identifier: Apache-2.0 */
/* A consolidation's replacement carries a price cap (coordinator/provision/pricecap.c): a launch
 * holding only pods of nodes a consolidation replaces may cost less than those nodes did, its
 * fallbacks included; a launch that also holds other pods is not capped; with nothing under the
 * cap the replacement is given up and the nodes stop being replaced. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "coordinator/provision/provisioner-internal.h"

typedef struct Fx {
        Registry reg;
        SolverPod pods[8];
        SolverSnapshot snap;
} Fx;

/* An agent's report of node id holding the named pods (default namespace), put in the registry. */
static NodeEntry *node_with(Fx *f, const char *id, const char *const *names, size_t n) {
        Nodesmith__V1__NodeState s = NODESMITH__V1__NODE_STATE__INIT;
        Nodesmith__V1__Identity ident = NODESMITH__V1__IDENTITY__INIT;
        Nodesmith__V1__Pod pods[4], *pv[4];
        ident.instance_id = (char *) id;
        ident.boot_id = (char *) "boot";
        s.identity = &ident;
        for (size_t i = 0; i < n; i++) {
                nodesmith__v1__pod__init(&pods[i]);
                pods[i].name = (char *) names[i];
                pods[i].namespace_ = (char *) "default";
                pv[i] = &pods[i];
        }
        s.n_pods = n;
        s.pods = pv;
        uint8_t buf[2048];
        size_t len = nodesmith__v1__node_state__pack(&s, buf);
        PbArena *arena = pb_arena_new(1024);
        assert_non_null(arena);
        Nodesmith__V1__NodeState *st = nodesmith__v1__node_state__unpack(pb_arena_allocator(arena), len, buf);
        assert_non_null(st);
        NodeEntry *e;
        bool is_new;
        assert_int_equal(registry_put(&f->reg, id, 1, st, arena, buf, len, 100, &e, &is_new), 0);
        return e;
}

static int setup(void **state) {
        Fx *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(registry_init(&f->reg, 16), 0);
        static const char *const names[] = { "a-0", "a-1", "b-0", "pending-0" };
        for (size_t i = 0; i < 4; i++)
                f->pods[i] = (SolverPod) { .name = names[i], .namespace_ = "default" };
        f->snap = (SolverSnapshot) { .pods = f->pods, .n_pods = 4 };
        /* node-a (a-0, a-1) and node-b (b-0): one consolidation replaces both, $0.50/h in all */
        NodeEntry *a = node_with(f, "i-a", (const char *const[]) { "a-0", "a-1" }, 2);
        NodeEntry *b = node_with(f, "i-b", (const char *const[]) { "b-0" }, 1);
        a->replace_started_usec = b->replace_started_usec = 1000;
        a->replace_price_cap = b->replace_price_cap = 0.50;
        *state = f;
        return 0;
}

static int teardown(void **state) {
        Fx *f = *state;
        registry_done(&f->reg);
        free(f);
        return 0;
}

static void test_replacement_is_capped(void **state) {
        Fx *f = *state;
        uint32_t pods[] = { 0, 1, 2 };
        SolverLaunch l = { .pods = pods, .n_pods = 3, .price = 0.20 };
        /* one consolidation of two nodes: its cap once, not once per node */
        double cap = provision_price_cap(&f->reg, &f->snap, &l);
        assert_true(cap > 0.4999 && cap < 0.5001);
        assert_true(provision_price_cap_allows(cap, 0.20));
        assert_true(provision_price_cap_allows(cap, 0.4999));
        assert_false(provision_price_cap_allows(cap, 0.50)); /* no cheaper: not worth the churn */
        assert_false(provision_price_cap_allows(cap, 0.80));
        assert_true(provision_price_cap_allows(0, 9.99));   /* no cap */
        /* part of it only: still that consolidation's cap */
        l.n_pods = 1;
        cap = provision_price_cap(&f->reg, &f->snap, &l);
        assert_true(cap > 0.4999 && cap < 0.5001);
}

static void test_other_pods_lift_the_cap(void **state) {
        Fx *f = *state;
        /* a pending pod rides along: the launch is not only a replacement */
        uint32_t pods[] = { 0, 3 };
        SolverLaunch l = { .pods = pods, .n_pods = 2, .price = 0.90 };
        assert_true(provision_price_cap(&f->reg, &f->snap, &l) == 0);
        /* a drift replacement (no cap) is not capped either */
        NodeEntry *c = node_with(f, "i-c", (const char *const[]) { "pending-0" }, 1);
        c->replace_started_usec = 2000;
        assert_true(provision_price_cap(&f->reg, &f->snap, &l) == 0);
        /* two consolidations in one launch: both caps */
        c->replace_price_cap = 0.25;
        double cap = provision_price_cap(&f->reg, &f->snap, &l);
        assert_true(cap > 0.7499 && cap < 0.7501);
}

static void test_abandon_stops_the_replacement(void **state) {
        Fx *f = *state;
        uint32_t pods[] = { 2 };
        SolverLaunch l = { .pods = pods, .n_pods = 1, .price = 0.60 };
        assert_false(provision_price_cap_allows(provision_price_cap(&f->reg, &f->snap, &l), l.price));
        /* the whole consolidation is given up, node-a with it */
        assert_int_equal(provision_price_cap_abandon(&f->reg, &f->snap, &l), 2);
        assert_int_equal(registry_get(&f->reg, "i-a")->replace_started_usec, 0);
        assert_int_equal(registry_get(&f->reg, "i-b")->replace_started_usec, 0);
        assert_true(provision_price_cap(&f->reg, &f->snap, &l) == 0);
        assert_int_equal(provision_price_cap_abandon(&f->reg, &f->snap, &l), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_replacement_is_capped, setup, teardown),
                cmocka_unit_test_setup_teardown(test_other_pods_lift_the_cap, setup, teardown),
                cmocka_unit_test_setup_teardown(test_abandon_stops_the_replacement, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
