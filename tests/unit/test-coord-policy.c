/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "agents/policy.h"

#define K(x) NODESMITH__V1__NOTICE__KIND__KIND_##x

static void set_notices(NodeEntry *e, const NoticeRecord *n, size_t count) {
        free(e->notices);
        e->notices = count ? calloc(count, sizeof *n) : NULL;
        if (count)
                memcpy(e->notices, n, count * sizeof *n);
        e->n_notices = count;
}

static void test_parse(void **state) {
        NoticePolicy p;
        assert_int_equal(notice_policy_parse("spot,maintenance", &p), 0);
        assert_true(p & (1u << K(SPOT_INTERRUPTION)));
        assert_true(p & (1u << K(MAINTENANCE)));
        assert_false(p & (1u << K(REBALANCE)));
        assert_true(p & (1u << K(SHUTDOWN))); /* always */
        assert_int_equal(notice_policy_parse("none", &p), 0);
        assert_false(p & (1u << K(SPOT_INTERRUPTION)));
        assert_true(p & (1u << K(NODE_DELETED)));
        assert_int_equal(notice_policy_parse("spot,reboot", &p), -EINVAL);
}

static void test_directive(void **state) {
        NodeEntry e = {};
        NoticePolicy p;
        assert_int_equal(notice_policy_parse("spot,maintenance", &p), 0);

        /* a rebalance recommendation alone: report only */
        NoticeRecord rebalance = { .event_id = "rebalance@1", .kind = K(REBALANCE) };
        set_notices(&e, &rebalance, 1);
        assert_false(directive_from_notices(&e, p));
        assert_int_equal(e.action, NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_RUN);

        /* maintenance in a week and a spot notice in two minutes: the spot deadline wins */
        NoticeRecord two[] = {
                { .event_id = "instance-event-1", .kind = K(MAINTENANCE), .deadline_unix_ms = 604800000 },
                { .event_id = "terminate@t", .kind = K(SPOT_INTERRUPTION), .deadline_unix_ms = 120000 },
        };
        set_notices(&e, two, 2);
        assert_true(directive_from_notices(&e, p));
        assert_int_equal(e.action, NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN);
        assert_string_equal(e.reason, "spot-interruption");
        assert_int_equal(e.deadline_unix_ms, 120000);
        assert_true(e.force);
        assert_false(directive_from_notices(&e, p)); /* same again: no change */

        /* every notice gone: the drain they asked for is withdrawn */
        set_notices(&e, NULL, 0);
        assert_true(directive_from_notices(&e, p));
        assert_int_equal(e.action, NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_RUN);
        assert_null(e.reason);

        /* a drain decided for another reason is not withdrawn by the absence of notices */
        e.action = NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN;
        e.reason = strdup("consolidation");
        assert_false(directive_from_notices(&e, p));
        assert_string_equal(e.reason, "consolidation");
        free(e.reason);
        free(e.notices);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse),
                cmocka_unit_test(test_directive),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
