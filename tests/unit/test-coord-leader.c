/* SPDX-License-Identifier: Apache-2.0 */
/* Leader election against a scripted API server: the Kubernetes calls are wrapped
 * (test-coord-leader.wrap), answered or left hanging by the test, on a real sd-event loop with a
 * short Lease (600 ms: renew deadline 400 ms, retry 80 ms). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "leader.h"
#include "macro.h"

#define LEASE_USEC (600 * USEC_PER_MSEC)

/* The one call in flight, as the leader sent it. */
typedef struct Pending {
        bool active;
        const char *verb; /* "get", "create", "replace" */
        kube_done_t cb;
        void *userdata;
        cJSON *body;
        uint64_t sent_usec;
} Pending;

static Pending pending;
static unsigned cancels, calls;
static int dummy_call;

static uint64_t mono(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

static int record(const char *verb, const cJSON *body, kube_done_t cb, void *userdata, KubeCall **ret_call) {
        assert_false(pending.active); /* one request at a time */
        cJSON_Delete(pending.body);
        pending = (Pending) { .active = true, .verb = verb, .cb = cb, .userdata = userdata,
                              .body = body ? cJSON_Duplicate(body, true) : NULL, .sent_usec = mono() };
        calls++;
        if (ret_call)
                *ret_call = (KubeCall *) &dummy_call;
        return 0;
}

int __wrap_kube_get(KubeClient *c, const char *path, kube_done_t cb, void *userdata, KubeCall **ret_call);
int __wrap_kube_get(KubeClient *c, const char *path, kube_done_t cb, void *userdata, KubeCall **ret_call) {
        return record("get", NULL, cb, userdata, ret_call);
}
int __wrap_kube_create(KubeClient *c, const char *path, const cJSON *body, kube_done_t cb, void *userdata,
                       KubeCall **ret_call);
int __wrap_kube_create(KubeClient *c, const char *path, const cJSON *body, kube_done_t cb, void *userdata,
                       KubeCall **ret_call) {
        return record("create", body, cb, userdata, ret_call);
}
int __wrap_kube_replace(KubeClient *c, const char *path, const cJSON *body, kube_done_t cb, void *userdata,
                        KubeCall **ret_call);
int __wrap_kube_replace(KubeClient *c, const char *path, const cJSON *body, kube_done_t cb, void *userdata,
                        KubeCall **ret_call) {
        return record("replace", body, cb, userdata, ret_call);
}
void __wrap_kube_call_cancel(KubeCall *k);
void __wrap_kube_call_cancel(KubeCall *k) {
        assert_ptr_equal(k, &dummy_call);
        assert_true(pending.active);
        pending.active = false;
        cancels++;
}

/* Answers the call in flight: error 0 with `object`, or -errno. */
static void answer(int error, cJSON *object) {
        assert_true(pending.active);
        pending.active = false;
        KubeResponse resp = { .error = error, .http_status = error ? 500 : 200, .object = object };
        pending.cb(&resp, pending.userdata);
        cJSON_Delete(resp.object);
}

/* What the server stores for a write: the body, with a resourceVersion. */
static char held_rv[16]; /* the resourceVersion stored() gave last */

static cJSON *stored(void) {
        static int rv = 1;
        cJSON *o = cJSON_Duplicate(pending.body, true);
        cJSON *md = cJSON_GetObjectItem(o, "metadata");
        char s[16];
        snprintf(s, sizeof s, "%d", ++rv);
        cJSON_DeleteItemFromObject(md, "resourceVersion");
        cJSON_AddStringToObject(md, "resourceVersion", s);
        memcpy(held_rv, s, sizeof held_rv);
        return o;
}

static cJSON *lease_of(const char *holder, const char *renew_time, const char *rv) {
        char buf[512];
        snprintf(buf, sizeof buf,
                 "{\"metadata\":{\"name\":\"l\",\"namespace\":\"ns\",\"resourceVersion\":\"%s\"},"
                 "\"spec\":{\"holderIdentity\":\"%s\",\"leaseDurationSeconds\":1,\"renewTime\":\"%s\"}}",
                 rv, holder, renew_time);
        return cJSON_Parse(buf);
}

typedef struct Changes {
        int n;
        bool last;
        uint64_t last_usec;
} Changes;

static void on_change(Leader *l, bool leading, void *userdata) {
        Changes *c = userdata;
        c->n++;
        c->last = leading;
        c->last_usec = mono();
}

/* Runs the loop until a call is in flight or `usec` passed. */
static bool run_until_call(sd_event *e, uint64_t usec) {
        uint64_t end = mono() + usec;
        while (!pending.active && mono() < end)
                assert_true(sd_event_run(e, 10 * USEC_PER_MSEC) >= 0);
        return pending.active;
}

static void run_for(sd_event *e, uint64_t usec) {
        uint64_t end = mono() + usec;
        while (mono() < end)
                assert_true(sd_event_run(e, 10 * USEC_PER_MSEC) >= 0);
}

static Leader *start(sd_event **e, Changes *ch, const char *identity) {
        LeaderConfig cfg = { .namespace = "ns", .name = "l", .identity = identity, .lease_usec = LEASE_USEC };
        Leader *l = NULL;
        assert_int_equal(sd_event_new(e), 0);
        assert_int_equal(leader_new(*e, NULL, &cfg, on_change, ch, &l), 0);
        assert_int_equal(leader_renew_deadline_usec(l), 400 * USEC_PER_MSEC);
        pending = (Pending) {};
        cancels = calls = 0;
        return l;
}

static void acquire(sd_event *e, Leader *l, Changes *ch) {
        assert_true(run_until_call(e, USEC_PER_SEC));
        assert_string_equal(pending.verb, "get");
        answer(-ENOENT, NULL);
        assert_true(pending.active);
        assert_string_equal(pending.verb, "create");
        answer(0, stored());
        assert_true(leader_is_leading(l));
        assert_int_equal(ch->n, 1);
        assert_true(ch->last);
}

/* A Lease nobody holds is created and held; renewals keep it. */
static void test_acquire_and_renew(void **state) {
        sd_event *e;
        Changes ch = {};
        Leader *l = start(&e, &ch, "a");
        acquire(e, l, &ch);
        for (int i = 0; i < 5; i++) {
                assert_true(run_until_call(e, USEC_PER_SEC));
                assert_string_equal(pending.verb, "get");
                cJSON *cur = stored();
                answer(0, cur ? cJSON_Duplicate(cur, true) : NULL);
                cJSON_Delete(cur);
                assert_true(pending.active);
                assert_string_equal(pending.verb, "replace");
                answer(0, stored());
        }
        assert_true(leader_is_leading(l));
        assert_int_equal(ch.n, 1);
        leader_free(l);
        sd_event_unref(e);
        cJSON_Delete(pending.body);
        pending.body = NULL;
}

/* An API server that stops answering: the leader steps down at its renew deadline (400 ms after
 * its last renewal was sent), with the hanging request cancelled, before anyone else could take
 * the Lease (600 ms after seeing that renewal). */
static void test_steps_down_at_renew_deadline(void **state) {
        sd_event *e;
        Changes ch = {};
        Leader *l = start(&e, &ch, "a");
        assert_true(run_until_call(e, USEC_PER_SEC));
        answer(-ENOENT, NULL);
        uint64_t sent = pending.sent_usec;
        answer(0, stored());
        assert_true(leader_is_leading(l));
        /* the next read hangs */
        assert_true(run_until_call(e, USEC_PER_SEC));
        assert_string_equal(pending.verb, "get");
        run_for(e, 500 * USEC_PER_MSEC);
        assert_false(leader_is_leading(l));
        assert_int_equal(ch.n, 2);
        assert_false(ch.last);
        uint64_t after = ch.last_usec - sent;
        assert_true(after >= 400 * USEC_PER_MSEC);
        assert_true(after < LEASE_USEC);
        assert_true(cancels >= 1);
        leader_free(l);
        sd_event_unref(e);
        cJSON_Delete(pending.body);
        pending.body = NULL;
}

/* Throttled (every call fails, as 429 after its retries): the same step-down, no later. */
static void test_steps_down_when_throttled(void **state) {
        sd_event *e;
        Changes ch = {};
        Leader *l = start(&e, &ch, "a");
        acquire(e, l, &ch);
        uint64_t t0 = mono();
        while (leader_is_leading(l) && mono() - t0 < 2 * USEC_PER_SEC) {
                if (run_until_call(e, 50 * USEC_PER_MSEC))
                        answer(-EAGAIN, NULL);
        }
        assert_false(leader_is_leading(l));
        assert_int_equal(ch.n, 2);
        assert_true(mono() - t0 < LEASE_USEC);
        leader_free(l);
        sd_event_unref(e);
        cJSON_Delete(pending.body);
        pending.body = NULL;
}

/* Someone else holds the Lease with a renewTime far in the past (a skewed clock, or a holder
 * whose renewals we see late): the candidate waits a whole lease duration of seeing it unchanged,
 * by its own clock, and takes it over only then; a change of the record restarts that wait. */
static void test_takeover_waits_for_observed_expiry(void **state) {
        sd_event *e;
        Changes ch = {};
        Leader *l = start(&e, &ch, "b");
        uint64_t t0 = mono();
        int rv = 10;
        bool renewed_once = false;
        while (mono() - t0 < 3 * USEC_PER_SEC) {
                if (!run_until_call(e, 100 * USEC_PER_MSEC))
                        continue;
                if (streq(pending.verb, "replace"))
                        break;
                char rvs[16];
                /* the holder renews once, 300 ms in: the wait starts again from there */
                if (!renewed_once && mono() - t0 > 300 * USEC_PER_MSEC) {
                        renewed_once = true;
                        rv++;
                }
                snprintf(rvs, sizeof rvs, "%d", rv);
                answer(0, lease_of("a", rv == 10 ? "2001-01-01T00:00:00.000000Z" : "2001-01-01T00:00:01.000000Z", rvs));
        }
        assert_true(pending.active);
        assert_string_equal(pending.verb, "replace");
        /* leaseDurationSeconds is 1 in the record: at least 1 s after the renewal was seen */
        assert_true(mono() - t0 >= 1300 * USEC_PER_MSEC);
        const cJSON *spec = cJSON_GetObjectItem(pending.body, "spec");
        assert_string_equal(cJSON_GetObjectItem(spec, "holderIdentity")->valuestring, "b");
        answer(0, stored());
        assert_true(leader_is_leading(l));
        leader_free(l);
        sd_event_unref(e);
        cJSON_Delete(pending.body);
        pending.body = NULL;
}

static void on_released(Leader *l, bool ok, void *userdata) {
        int *n = userdata;
        *n = ok ? 1 : -1;
}

/* A clean shutdown hands the Lease over: leading stops at once (before the write), the Lease is
 * written without a holder and with a 1 s duration over the one held (its resourceVersion), and
 * nothing is sent after it. */
static void test_release_hands_over(void **state) {
        sd_event *e;
        Changes ch = {};
        Leader *l = start(&e, &ch, "a");
        acquire(e, l, &ch);
        /* a renewal in flight is given up for the release */
        assert_true(run_until_call(e, USEC_PER_SEC));
        assert_string_equal(pending.verb, "get");
        int released = 0;
        unsigned before = cancels;
        assert_int_equal(leader_release(l, on_released, &released), 1);
        assert_int_equal(cancels, before + 1);
        assert_false(leader_is_leading(l));
        assert_int_equal(ch.n, 2);
        assert_false(ch.last);
        assert_true(pending.active);
        assert_string_equal(pending.verb, "replace");
        const cJSON *spec = cJSON_GetObjectItem(pending.body, "spec");
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(spec, "holderIdentity")), "");
        assert_int_equal((int) cJSON_GetNumberValue(cJSON_GetObjectItem(spec, "leaseDurationSeconds")), 1);
        assert_non_null(cJSON_GetStringValue(cJSON_GetObjectItem(spec, "renewTime")));
        /* written over the Lease as our last write stored it */
        const char *want_rv = cJSON_GetStringValue(
                cJSON_GetObjectItem(cJSON_GetObjectItem(pending.body, "metadata"), "resourceVersion"));
        assert_non_null(want_rv);
        assert_string_equal(want_rv, held_rv);
        answer(0, stored());
        assert_int_equal(released, 1);
        unsigned n = calls;
        run_for(e, 300 * USEC_PER_MSEC);
        assert_int_equal(calls, n); /* no read or renewal after the release */
        assert_false(leader_is_leading(l));
        leader_free(l);
        sd_event_unref(e);
        cJSON_Delete(pending.body);
        pending.body = NULL;
}

/* A replica that does not hold the Lease has nothing to release: no write, done not called, and
 * it stops looking. */
static void test_release_without_lease(void **state) {
        sd_event *e;
        Changes ch = {};
        Leader *l = start(&e, &ch, "b");
        assert_true(run_until_call(e, USEC_PER_SEC));
        assert_string_equal(pending.verb, "get");
        int released = 0;
        assert_int_equal(leader_release(l, on_released, &released), 0);
        assert_false(pending.active); /* the read was given up */
        assert_int_equal(cancels, 1);
        unsigned n = calls;
        run_for(e, 300 * USEC_PER_MSEC);
        assert_int_equal(calls, n);
        assert_int_equal(released, 0);
        assert_int_equal(ch.n, 0);
        leader_free(l);
        sd_event_unref(e);
        cJSON_Delete(pending.body);
        pending.body = NULL;
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_acquire_and_renew),
                cmocka_unit_test(test_steps_down_at_renew_deadline),
                cmocka_unit_test(test_steps_down_when_throttled),
                cmocka_unit_test(test_takeover_waits_for_observed_expiry),
                cmocka_unit_test(test_release_hands_over),
                cmocka_unit_test(test_release_without_lease),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
