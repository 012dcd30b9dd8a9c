/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "registry.h"

/* A report unpacked into an arena, as the server makes them. */
static Nodesmith__V1__AgentReport *mk(const char *id, const char *boot, uint64_t seq, PbArena **ret) {
        Nodesmith__V1__AgentReport r = NODESMITH__V1__AGENT_REPORT__INIT;
        Nodesmith__V1__Identity ident = NODESMITH__V1__IDENTITY__INIT;
        ident.instance_id = (char *) id;
        ident.boot_id = (char *) boot;
        r.identity = &ident;
        r.sequence = seq;
        uint8_t buf[512];
        size_t n = nodesmith__v1__agent_report__pack(&r, buf);
        PbArena *a = pb_arena_new(1024);
        assert_non_null(a);
        Nodesmith__V1__AgentReport *u = nodesmith__v1__agent_report__unpack(pb_arena_allocator(a), n, buf);
        assert_non_null(u);
        *ret = a;
        return u;
}

static void test_update_and_duplicates(void **state) {
        Registry reg;
        PbArena *a;
        NodeEntry *e;
        bool is_new;
        assert_int_equal(registry_init(&reg, 10), 0);

        Nodesmith__V1__AgentReport *r = mk("i-1", "boot-a", 5, &a);
        assert_int_equal(registry_update(&reg, r, a, 100, &e, &is_new), 0);
        assert_true(is_new);
        assert_int_equal(reg.n, 1);

        /* same boot, older or equal sequence: a duplicate, nothing changes */
        r = mk("i-1", "boot-a", 5, &a);
        assert_int_equal(registry_update(&reg, r, a, 200, &e, &is_new), -EALREADY);
        pb_arena_free(a);
        assert_int_equal(registry_get(&reg, "i-1")->last_seen_usec, 100);

        /* a reboot restarts the sequence: accepted */
        r = mk("i-1", "boot-b", 1, &a);
        assert_int_equal(registry_update(&reg, r, a, 300, &e, &is_new), 0);
        assert_false(is_new);
        assert_int_equal(e->last_seen_usec, 300);
        assert_int_equal(e->reports, 2);
        registry_done(&reg);
}

static void test_limit_and_growth(void **state) {
        Registry reg;
        PbArena *a;
        char id[32];
        assert_int_equal(registry_init(&reg, 500), 0);
        for (int i = 0; i < 500; i++) {
                snprintf(id, sizeof id, "i-%05d", i);
                Nodesmith__V1__AgentReport *r = mk(id, "b", 1, &a);
                assert_int_equal(registry_update(&reg, r, a, 1, NULL, NULL), 0);
        }
        Nodesmith__V1__AgentReport *r = mk("i-overflow", "b", 1, &a);
        assert_int_equal(registry_update(&reg, r, a, 1, NULL, NULL), -ENOSPC);
        pb_arena_free(a);
        assert_int_equal(reg.n, 500);
        for (int i = 0; i < 500; i++) {
                snprintf(id, sizeof id, "i-%05d", i);
                assert_non_null(registry_get(&reg, id));
        }
        /* remove every other one; the rest must still be found */
        for (int i = 0; i < 500; i += 2) {
                snprintf(id, sizeof id, "i-%05d", i);
                assert_int_equal(registry_remove(&reg, id), 0);
        }
        assert_int_equal(registry_remove(&reg, "i-00000"), -ENOENT);
        assert_int_equal(reg.n, 250);
        size_t seen = 0;
        NodeEntry *e;
        REGISTRY_FOREACH(e, &reg) seen++;
        assert_int_equal(seen, 250);
        for (int i = 1; i < 500; i += 2) {
                snprintf(id, sizeof id, "i-%05d", i);
                assert_non_null(registry_get(&reg, id));
        }
        registry_done(&reg);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_update_and_duplicates),
                cmocka_unit_test(test_limit_and_growth),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
