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

static Nodesmith__V1__AgentReport *mk_notices(const char *boot, uint64_t seq, const char **ids, size_t n,
                                              PbArena **ret) {
        Nodesmith__V1__AgentReport r = NODESMITH__V1__AGENT_REPORT__INIT;
        Nodesmith__V1__Identity ident = NODESMITH__V1__IDENTITY__INIT;
        Nodesmith__V1__Notice no[4], *nv[4];
        ident.instance_id = (char *) "i-n";
        ident.boot_id = (char *) boot;
        r.identity = &ident;
        r.sequence = seq;
        for (size_t i = 0; i < n; i++) {
                nodesmith__v1__notice__init(&no[i]);
                no[i].kind = NODESMITH__V1__NOTICE__KIND__KIND_MAINTENANCE;
                no[i].event_id = (char *) ids[i];
                no[i].deadline_unix_ms = 1000 * (int64_t) (i + 1);
                nv[i] = &no[i];
        }
        r.n_notices = n;
        r.notices = nv;
        uint8_t buf[1024];
        size_t len = nodesmith__v1__agent_report__pack(&r, buf);
        PbArena *a = pb_arena_new(2048);
        Nodesmith__V1__AgentReport *u = nodesmith__v1__agent_report__unpack(pb_arena_allocator(a), len, buf);
        assert_non_null(u);
        *ret = a;
        return u;
}

static int added, withdrawn;
static void count_changes(const NodeEntry *e, const NoticeRecord *n, bool add, void *userdata) {
        if (add)
                added++;
        else
                withdrawn++;
}

static void test_notices(void **state) {
        Registry reg;
        PbArena *a;
        NodeEntry *e;
        Nodesmith__V1__AgentReport *r;
        const char *ab[] = { "evt-a", "evt-b" }, *a_only[] = { "evt-a" };
        assert_int_equal(registry_init(&reg, 10), 0);

        r = mk_notices("b", 1, ab, 2, &a);
        assert_int_equal(registry_update(&reg, r, a, 1, &e, NULL), 0);
        assert_int_equal(registry_sync_notices(e, 5000, count_changes, NULL), 1);
        assert_int_equal(added, 2);
        assert_int_equal(registry_find_notice(e, "evt-a")->recorded_unix_ms, 5000);

        /* the same notices again: nothing new, first-recorded time kept */
        r = mk_notices("b", 2, ab, 2, &a);
        assert_int_equal(registry_update(&reg, r, a, 2, &e, NULL), 0);
        assert_int_equal(registry_sync_notices(e, 6000, count_changes, NULL), 0);
        assert_int_equal(added, 2);

        /* evt-b withdrawn (a maintenance event canceled) */
        r = mk_notices("b", 3, a_only, 1, &a);
        assert_int_equal(registry_update(&reg, r, a, 3, &e, NULL), 0);
        assert_int_equal(registry_sync_notices(e, 7000, count_changes, NULL), 1);
        assert_int_equal(withdrawn, 1);
        assert_int_equal(added, 2);
        assert_null(registry_find_notice(e, "evt-b"));
        assert_int_equal(registry_find_notice(e, "evt-a")->recorded_unix_ms, 5000);
        registry_done(&reg);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_update_and_duplicates),
                cmocka_unit_test(test_limit_and_growth),
                cmocka_unit_test(test_notices),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
