/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agents/fastpath.h"
#include "wire.h"

#define TOKEN "0123456789abcdef0123"

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

/* The report an agent sends: an envelope around state bytes. */
static size_t report(uint8_t *buf, const char *token, const char *boot, uint64_t seq, const char *state) {
        WireEnvelope w = { .token = token, .instance_id = "i-1", .boot_id = boot, .sequence = seq };
        uint8_t *p = NULL;
        size_t len = 0;
        assert_int_equal(wire_pack_envelope(&w, (const uint8_t *) state, strlen(state), 4096, &p, &len), 0);
        memcpy(buf, p, len);
        free(p);
        return len;
}

/* The answer to a report, or -1 when it is left to the loop. */
static int answer(FastPath *f, const char *token, const char *boot, uint64_t seq, const char *state,
                  Nodesmith__V1__NodeDirective **ret) {
        uint8_t req[4096], reply[512];
        size_t len = report(req, token, boot, seq, state), rlen = 0;
        if (fast_path_answer(f, req, len, reply, sizeof reply, &rlen) <= 0)
                return -1;
        *ret = nodesmith__v1__node_directive__unpack(NULL, rlen, reply);
        assert_non_null(*ret);
        return 0;
}

typedef struct Seen {
        uint64_t n, sequence;
        bool keep;
        int calls;
} Seen;

static bool keep(const char *instance_id, const char *boot_id, uint64_t n, uint64_t sequence, uint64_t seen_usec,
                 int action, const char *reason, int64_t deadline_unix_ms, bool force, void *userdata) {
        Seen *s = userdata;
        assert_string_equal(instance_id, "i-1");
        assert_string_equal(boot_id, "boot-a");
        s->n += n;
        if (n)
                s->sequence = sequence;
        s->calls++;
        return s->keep;
}

static void test_unchanged_answered_else_loop(void **state) {
        FastPath *f = NULL;
        Nodesmith__V1__NodeDirective *d = NULL;
        NodeEntry e = { .instance_id = (char *) "i-1", .sequence = 10,
                        .state_len = 7, .action = NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN,
                        .reason = (char *) "expired", .deadline_unix_ms = 1234, .force = true };
        Seen seen = { .keep = true };

        registry_state_digest((const uint8_t *) "state-1", 7, e.state_digest);
        assert_int_equal(fast_path_new(TOKEN, 10000, 60 * 1000000ULL, &f), 0);
        /* nothing remembered: the loop answers */
        assert_int_equal(answer(f, TOKEN, "boot-a", 11, "state-1", &d), -1);

        fast_path_remember(f, &e, "boot-a", true, now_usec());
        assert_int_equal(fast_path_size(f), 1);
        assert_int_equal(answer(f, TOKEN, "boot-a", 11, "state-1", &d), 0);
        assert_int_equal(d->status, NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_OK);
        assert_int_equal(d->ack_sequence, 11);
        assert_int_equal(d->action, NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN);
        assert_string_equal(d->reason, "expired");
        assert_int_equal(d->deadline_unix_ms, 1234);
        assert_true(d->force);
        assert_true(d->attested);
        assert_int_equal(d->report_interval_ms, 10000);
        nodesmith__v1__node_directive__free_unpacked(d, NULL);

        /* all of these go to the loop: not newer, changed, another boot, a wrong token */
        assert_int_equal(answer(f, TOKEN, "boot-a", 11, "state-1", &d), -1);
        assert_int_equal(answer(f, TOKEN, "boot-a", 12, "state-2", &d), -1);
        assert_int_equal(answer(f, TOKEN, "boot-b", 12, "state-1", &d), -1);
        assert_int_equal(answer(f, "wrong-token-wrong-token", "boot-a", 12, "state-1", &d), -1);
        /* garbage */
        uint8_t junk[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff }, reply[64];
        size_t rlen;
        assert_int_equal(fast_path_answer(f, junk, sizeof junk, reply, sizeof reply, &rlen), 0);

        /* the loop takes back what was answered here: one report, sequence 11 */
        fast_path_sync(f, keep, &seen);
        assert_int_equal(seen.calls, 1);
        assert_int_equal(seen.n, 1);
        assert_int_equal(seen.sequence, 11);
        /* nothing answered since: a sync looks at no node */
        fast_path_sync(f, keep, &seen);
        assert_int_equal(seen.calls, 1);
        assert_int_equal(seen.n, 1);

        /* dropped (say, the directive changed): the loop answers again */
        seen.keep = false;
        fast_path_sync_one(f, "i-1", keep, &seen);
        assert_int_equal(fast_path_size(f), 0);
        assert_int_equal(answer(f, TOKEN, "boot-a", 13, "state-1", &d), -1);
        fast_path_free(f);
}

static void test_stale_goes_to_loop(void **state) {
        FastPath *f = NULL;
        Nodesmith__V1__NodeDirective *d = NULL;
        NodeEntry e = { .instance_id = (char *) "i-1", .sequence = 1, .state_len = 1 };

        registry_state_digest((const uint8_t *) "s", 1, e.state_digest);
        assert_int_equal(fast_path_new(TOKEN, 10000, 60 * 1000000ULL, &f), 0);
        /* last heard longer ago than stale-after: the loop re-checks (attestation binds live boots) */
        fast_path_remember(f, &e, "boot-a", false, now_usec() - 61 * 1000000ULL);
        assert_int_equal(answer(f, TOKEN, "boot-a", 2, "s", &d), -1);
        fast_path_remember(f, &e, "boot-a", false, now_usec());
        assert_int_equal(answer(f, TOKEN, "boot-a", 2, "s", &d), 0);
        assert_false(d->attested);
        nodesmith__v1__node_directive__free_unpacked(d, NULL);
        fast_path_free(f);
}

/* A changed directive (or a node leaving the registry): what was answered is taken back, the
 * copy is dropped whatever keep() says, and the next report goes to the loop. */
static void test_forget(void **state) {
        FastPath *f = NULL;
        Nodesmith__V1__NodeDirective *d = NULL;
        NodeEntry e = { .instance_id = (char *) "i-1", .sequence = 1, .state_len = 1 };
        Seen seen = { .keep = true };

        registry_state_digest((const uint8_t *) "s", 1, e.state_digest);
        assert_int_equal(fast_path_new(TOKEN, 10000, 60 * 1000000ULL, &f), 0);
        fast_path_remember(f, &e, "boot-a", false, now_usec());
        assert_int_equal(answer(f, TOKEN, "boot-a", 2, "s", &d), 0);
        nodesmith__v1__node_directive__free_unpacked(d, NULL);
        assert_int_equal(answer(f, TOKEN, "boot-a", 3, "s", &d), 0);
        nodesmith__v1__node_directive__free_unpacked(d, NULL);
        fast_path_forget(f, "i-1", keep, &seen);
        assert_int_equal(seen.calls, 1);
        assert_int_equal(seen.n, 2);
        assert_int_equal(seen.sequence, 3);
        assert_int_equal(fast_path_size(f), 0);
        assert_int_equal(answer(f, TOKEN, "boot-a", 4, "s", &d), -1);
        /* the dropped node is not in the next sync's list any more */
        fast_path_sync(f, keep, &seen);
        assert_int_equal(seen.calls, 1);
        fast_path_forget(f, "i-unknown", keep, &seen);
        assert_int_equal(seen.calls, 1);
        fast_path_free(f);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_forget),
                cmocka_unit_test(test_unchanged_answered_else_loop),
                cmocka_unit_test(test_stale_goes_to_loop),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
