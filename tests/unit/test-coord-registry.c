/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "agents/registry.h"

typedef struct Packed {
        uint8_t buf[2048];
        size_t len;
        Nodesmith__V1__NodeState *state;
        PbArena *arena;
} Packed;

/* A node state packed as an agent sends it and unpacked into an arena as the server does. */
static void pack_unpack(Packed *p, const Nodesmith__V1__NodeState *s) {
        p->len = nodesmith__v1__node_state__pack(s, p->buf);
        p->arena = pb_arena_new(1024);
        assert_non_null(p->arena);
        p->state = nodesmith__v1__node_state__unpack(pb_arena_allocator(p->arena), p->len, p->buf);
        assert_non_null(p->state);
}

static void mk_with(Packed *p, const char *id, const char *boot, const char **notice_ids, size_t n,
                    Nodesmith__V1__Pod **pods, size_t n_pods) {
        Nodesmith__V1__NodeState s = NODESMITH__V1__NODE_STATE__INIT;
        Nodesmith__V1__Identity ident = NODESMITH__V1__IDENTITY__INIT;
        Nodesmith__V1__Notice no[4], *nv[4];
        ident.instance_id = (char *) id;
        ident.boot_id = (char *) boot;
        s.identity = &ident;
        for (size_t i = 0; i < n; i++) {
                nodesmith__v1__notice__init(&no[i]);
                no[i].kind = NODESMITH__V1__NOTICE__KIND__KIND_MAINTENANCE;
                no[i].event_id = (char *) notice_ids[i];
                no[i].deadline_unix_ms = 1000 * (int64_t) (i + 1);
                nv[i] = &no[i];
        }
        s.n_notices = n;
        s.notices = n ? nv : NULL;
        s.n_pods = n_pods;
        s.pods = pods;
        pack_unpack(p, &s);
}

static void mk(Packed *p, const char *id, const char *boot, const char **notice_ids, size_t n) {
        mk_with(p, id, boot, notice_ids, n, NULL, 0);
}

static int put(Registry *reg, Packed *p, const char *id, uint64_t seq, uint64_t now, NodeEntry **e,
               bool *is_new) {
        int r = registry_put(reg, id, seq, p->state, p->arena, p->buf, p->len, now, e, is_new);
        if (r < 0)
                pb_arena_free(p->arena);
        return r;
}

static void test_duplicates_and_unchanged(void **state) {
        Registry reg;
        Packed p;
        NodeEntry *e;
        bool is_new;
        assert_int_equal(registry_init(&reg, 10), 0);

        mk(&p, "i-1", "boot-a", NULL, 0);
        assert_int_equal(put(&reg, &p, "i-1", 5, 100, &e, &is_new), 0);
        assert_true(is_new);
        assert_int_equal(reg.n, 1);

        /* same boot, older or equal sequence: a duplicate */
        assert_true(registry_is_duplicate(e, "boot-a", 5));
        assert_true(registry_is_duplicate(e, "boot-a", 4));
        assert_false(registry_is_duplicate(e, "boot-a", 6));
        /* a reboot restarts the sequence: not a duplicate */
        assert_false(registry_is_duplicate(e, "boot-b", 1));

        /* the same bytes: unchanged, only touched */
        Packed same;
        mk(&same, "i-1", "boot-a", NULL, 0);
        assert_true(registry_state_unchanged(e, same.buf, same.len));
        pb_arena_free(same.arena);
        registry_touch(e, 6, 200);
        assert_int_equal(e->sequence, 6);
        assert_int_equal(e->last_seen_usec, 200);
        assert_int_equal(e->reports, 2);

        /* different bytes: changed */
        Packed other;
        mk(&other, "i-1", "boot-b", NULL, 0);
        assert_false(registry_state_unchanged(e, other.buf, other.len));
        assert_int_equal(put(&reg, &other, "i-1", 1, 300, &e, &is_new), 0);
        assert_false(is_new);
        assert_string_equal(e->state->identity->boot_id, "boot-b");
        assert_int_equal(e->reports, 3);
        registry_done(&reg);
}

/* A state of i-1 with the given pods (uids), the first one's phase as given. */
static void mk_pods(Packed *p, const char *const *uids, size_t n, const char *phase) {
        Nodesmith__V1__Pod pod[4], *pv[4];
        for (size_t i = 0; i < n; i++) {
                nodesmith__v1__pod__init(&pod[i]);
                pod[i].uid = (char *) uids[i];
                pod[i].phase = (char *) (i == 0 ? phase : "Running");
                pv[i] = &pod[i];
        }
        mk_with(p, "i-1", "boot-a", NULL, 0, pv, n);
}

/* pods_changed_usec moves when the set of pods changes, not when a pod's fields or their order do. */
static void test_pods_changed(void **state) {
        Registry reg;
        Packed p;
        NodeEntry *e;
        assert_int_equal(registry_init(&reg, 10), 0);

        mk_pods(&p, (const char *[]) { "u1", "u2", "u3" }, 3, "Running");
        assert_int_equal(put(&reg, &p, "i-1", 1, 100, &e, NULL), 0);
        assert_int_equal(e->pods_changed_usec, 100);
        /* same pods, same order, one phase changed */
        mk_pods(&p, (const char *[]) { "u1", "u2", "u3" }, 3, "Pending");
        assert_int_equal(put(&reg, &p, "i-1", 2, 200, &e, NULL), 0);
        assert_int_equal(e->pods_changed_usec, 100);
        /* same pods in another order */
        mk_pods(&p, (const char *[]) { "u1", "u3", "u2" }, 3, "Running");
        assert_int_equal(put(&reg, &p, "i-1", 3, 300, &e, NULL), 0);
        assert_int_equal(e->pods_changed_usec, 100);
        /* one pod replaced by another, after a common prefix */
        mk_pods(&p, (const char *[]) { "u1", "u3", "u4" }, 3, "Running");
        assert_int_equal(put(&reg, &p, "i-1", 4, 400, &e, NULL), 0);
        assert_int_equal(e->pods_changed_usec, 400);
        /* one pod gone */
        mk_pods(&p, (const char *[]) { "u1", "u3" }, 2, "Running");
        assert_int_equal(put(&reg, &p, "i-1", 5, 500, &e, NULL), 0);
        assert_int_equal(e->pods_changed_usec, 500);
        registry_done(&reg);
}

static void count_forget(void *userdata, const char *instance_id) {
        int *n = userdata;
        assert_string_equal(instance_id, "i-f");
        (*n)++;
}

/* What copies an entry (the fast path) hears of a changed directive and of the entry leaving. */
static void test_forget_hook(void **state) {
        Registry reg;
        Packed p;
        int forgotten = 0;
        assert_int_equal(registry_init(&reg, 10), 0);
        reg.forget = count_forget;
        reg.forget_userdata = &forgotten;
        mk(&p, "i-f", "b", NULL, 0);
        assert_int_equal(put(&reg, &p, "i-f", 1, 1, NULL, NULL), 0);
        assert_int_equal(forgotten, 0);
        registry_directive_changed(&reg, registry_get(&reg, "i-f"));
        assert_int_equal(forgotten, 1);
        registry_bury(&reg, "i-f");
        assert_int_equal(forgotten, 2);
        assert_null(registry_get(&reg, "i-f"));
        registry_done(&reg);
}

static void test_limit_and_growth(void **state) {
        Registry reg;
        Packed p;
        char id[32];
        assert_int_equal(registry_init(&reg, 500), 0);
        for (int i = 0; i < 500; i++) {
                snprintf(id, sizeof id, "i-%05d", i);
                mk(&p, id, "b", NULL, 0);
                assert_int_equal(put(&reg, &p, id, 1, 1, NULL, NULL), 0);
        }
        mk(&p, "i-overflow", "b", NULL, 0);
        assert_int_equal(put(&reg, &p, "i-overflow", 1, 1, NULL, NULL), -ENOSPC);
        assert_int_equal(reg.n, 500);
        for (int i = 0; i < 500; i++) {
                snprintf(id, sizeof id, "i-%05d", i);
                assert_non_null(registry_get(&reg, id));
        }
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

static int added, withdrawn;
static void count_changes(const NodeEntry *e, const NoticeRecord *n, bool add, void *userdata) {
        if (add)
                added++;
        else
                withdrawn++;
}

static void test_notices(void **state) {
        Registry reg;
        Packed p;
        NodeEntry *e;
        const char *ab[] = { "evt-a", "evt-b" }, *a_only[] = { "evt-a" };
        assert_int_equal(registry_init(&reg, 10), 0);

        mk(&p, "i-n", "b", ab, 2);
        assert_int_equal(put(&reg, &p, "i-n", 1, 1, &e, NULL), 0);
        assert_int_equal(registry_sync_notices(e, 5000, count_changes, NULL), 1);
        assert_int_equal(added, 2);
        assert_int_equal(registry_find_notice(e, "evt-a")->recorded_unix_ms, 5000);

        /* the same notices again: nothing new, first-recorded time kept */
        mk(&p, "i-n", "b", ab, 2);
        assert_int_equal(put(&reg, &p, "i-n", 2, 2, &e, NULL), 0);
        assert_int_equal(registry_sync_notices(e, 6000, count_changes, NULL), 0);
        assert_int_equal(added, 2);

        /* evt-b withdrawn (a maintenance event canceled) */
        mk(&p, "i-n", "b", a_only, 1);
        assert_int_equal(put(&reg, &p, "i-n", 3, 3, &e, NULL), 0);
        assert_int_equal(registry_sync_notices(e, 7000, count_changes, NULL), 1);
        assert_int_equal(withdrawn, 1);
        assert_int_equal(added, 2);
        assert_null(registry_find_notice(e, "evt-b"));
        assert_int_equal(registry_find_notice(e, "evt-a")->recorded_unix_ms, 5000);
        registry_done(&reg);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_duplicates_and_unchanged),
                cmocka_unit_test(test_pods_changed),
                cmocka_unit_test(test_limit_and_growth),
                cmocka_unit_test(test_forget_hook),
                cmocka_unit_test(test_notices),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
