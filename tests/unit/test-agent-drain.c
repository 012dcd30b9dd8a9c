/* SPDX-License-Identifier: Apache-2.0 */
/* The drain's pure pieces: what a pod is (requests, owner, flags), which pods a drain evicts
 * and in what order, grace caps, back-off, drain-on and the drain decision. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drain.h"
#include "kubenode.h"

#define KIND(k) NODESMITH__V1__NOTICE__KIND__KIND_##k

static PodInfo parse(const char *json) {
        cJSON *j = cJSON_Parse(json);
        PodInfo p;
        assert_non_null(j);
        assert_int_equal(pod_info_parse(j, &p), 0);
        cJSON_Delete(j);
        return p;
}

static void test_pod_requests(void **state) {
        /* containers summed; the largest init container wins when it is bigger; overhead added */
        PodInfo p = parse("{\"metadata\":{\"name\":\"a\",\"namespace\":\"n\",\"uid\":\"u1\"},"
                          "\"spec\":{\"containers\":[{\"resources\":{\"requests\":{\"cpu\":\"250m\",\"memory\":\"64Mi\"}}},"
                          "{\"resources\":{\"requests\":{\"cpu\":\"1\",\"memory\":\"1Gi\",\"nvidia.com/gpu\":\"1\"}}}],"
                          "\"initContainers\":[{\"resources\":{\"requests\":{\"cpu\":\"2\",\"memory\":\"10Mi\"}}}],"
                          "\"overhead\":{\"cpu\":\"10m\"}},\"status\":{\"phase\":\"Running\"}}");
        assert_int_equal(p.requests.cpu_millis, 2010);
        assert_int_equal(p.requests.memory_bytes, (64 << 20) + (1 << 30));
        assert_int_equal(p.requests.gpus, 1);
        assert_int_equal(p.requests.pods, 1);
        assert_string_equal(p.phase, "Running");
        assert_int_equal(p.grace_seconds, 30);

        /* a sidecar (init container restartPolicy Always) adds to the sum; limits stand in for
         * missing requests */
        p = parse("{\"metadata\":{\"name\":\"b\",\"namespace\":\"n\"},\"spec\":{"
                  "\"initContainers\":[{\"restartPolicy\":\"Always\",\"resources\":{\"requests\":{\"cpu\":\"100m\"}}}],"
                  "\"containers\":[{\"resources\":{\"limits\":{\"cpu\":\"300m\"}}}],"
                  "\"terminationGracePeriodSeconds\":90}}");
        assert_int_equal(p.requests.cpu_millis, 400);
        assert_int_equal(p.grace_seconds, 90);
        assert_string_equal(p.phase, "Pending");

        /* no name: refused */
        cJSON *j = cJSON_Parse("{\"metadata\":{\"namespace\":\"n\"}}");
        PodInfo q;
        assert_int_equal(pod_info_parse(j, &q), -EBADMSG);
        cJSON_Delete(j);
}

static void test_pod_flags(void **state) {
        PodInfo p = parse("{\"metadata\":{\"name\":\"ds-x\",\"namespace\":\"kube-system\",\"ownerReferences\":["
                          "{\"kind\":\"Thing\",\"name\":\"t\"},"
                          "{\"kind\":\"DaemonSet\",\"name\":\"ds\",\"controller\":true}],"
                          "\"annotations\":{\"karpenter.sh/do-not-disrupt\":\"true\","
                          "\"controller.kubernetes.io/pod-deletion-cost\":\"-5\"},"
                          "\"deletionTimestamp\":\"2025-01-01T00:00:00Z\"},"
                          "\"spec\":{\"priority\":2000001000,\"priorityClassName\":\"system-node-critical\"}}");
        assert_true(p.daemonset);
        assert_string_equal(p.owner_kind, "DaemonSet");
        assert_string_equal(p.owner_name, "ds");
        assert_true(p.do_not_disrupt);
        assert_true(p.terminating);
        assert_true(p.critical);
        assert_int_equal(p.priority, 2000001000);
        assert_int_equal(p.deletion_cost, -5);
        assert_false(p.mirror);

        p = parse("{\"metadata\":{\"name\":\"m\",\"namespace\":\"kube-system\",\"annotations\":{"
                  "\"kubernetes.io/config.mirror\":\"abc\",\"nodesmith.io/do-not-disrupt\":\"false\"},"
                  "\"ownerReferences\":[{\"kind\":\"Node\",\"name\":\"n1\",\"controller\":true}]}}");
        assert_true(p.mirror);
        assert_false(p.daemonset);
        assert_false(p.do_not_disrupt);
        assert_false(p.critical);
}

static void test_requested_skips_finished(void **state) {
        PodInfo v[3] = {};
        v[0].requests = (NodeResources) { .cpu_millis = 100, .pods = 1 };
        strcpy(v[0].phase, "Running");
        v[1].requests = (NodeResources) { .cpu_millis = 1000, .pods = 1 };
        strcpy(v[1].phase, "Succeeded");
        v[2].requests = (NodeResources) { .cpu_millis = 10, .pods = 1 };
        strcpy(v[2].phase, "Pending");
        v[2].terminating = true; /* still holds its resources */
        NodeResources r;
        pod_infos_requested(v, 3, &r);
        assert_int_equal(r.cpu_millis, 110);
        assert_int_equal(r.pods, 2);
}

static void test_pod_class(void **state) {
        PodInfo p = {};
        strcpy(p.phase, "Running");
        assert_int_equal(drain_pod_class(&p, false), DRAIN_POD_EVICT);
        p.do_not_disrupt = true;
        assert_int_equal(drain_pod_class(&p, false), DRAIN_POD_HOLD);
        assert_int_equal(drain_pod_class(&p, true), DRAIN_POD_EVICT);
        p.terminating = true;
        assert_int_equal(drain_pod_class(&p, true), DRAIN_POD_TERMINATING);
        strcpy(p.phase, "Failed");
        assert_int_equal(drain_pod_class(&p, true), DRAIN_POD_SKIP_FINISHED);
        p.mirror = true;
        assert_int_equal(drain_pod_class(&p, true), DRAIN_POD_SKIP_MIRROR);
        p.daemonset = true;
        assert_int_equal(drain_pod_class(&p, true), DRAIN_POD_SKIP_DAEMONSET);
}

static void test_order(void **state) {
        PodInfo a = { .priority = 0 }, b = { .priority = 0 }, c = { .critical = true, .priority = -10 };
        strcpy(a.namespace, "x");
        strcpy(a.name, "a");
        strcpy(b.namespace, "x");
        strcpy(b.name, "b");
        /* critical pods go last whatever their priority */
        assert_true(drain_pod_order(&a, &c) < 0);
        assert_true(drain_pod_order(&c, &b) > 0);
        /* then lower priority first, then lower deletion cost, then the name */
        assert_true(drain_pod_order(&a, &b) < 0);
        b.deletion_cost = -1;
        assert_true(drain_pod_order(&b, &a) < 0);
        a.priority = -1;
        assert_true(drain_pod_order(&a, &b) < 0);
}

static void test_grace(void **state) {
        /* no deadline: the pod's own */
        assert_int_equal(drain_grace_seconds(30, 0, 1000, 5000), -1);
        /* the pod's own grace fits: left alone */
        assert_int_equal(drain_grace_seconds(30, 120000, 0, 5000), -1);
        /* spot: 120 s from the notice, 100 s gone, 5 s margin: 15 s */
        assert_int_equal(drain_grace_seconds(30, 120000, 100000, 5000), 15);
        /* at or past the deadline: 1 s, never 0 (0 would mean "force now") */
        assert_int_equal(drain_grace_seconds(30, 120000, 119000, 5000), 1);
        assert_int_equal(drain_grace_seconds(30, 120000, 500000, 5000), 1);
        assert_int_equal(drain_grace_seconds(0, 120000, 500000, 5000), -1);
}

static void test_backoff(void **state) {
        for (uint32_t rnd = 0; rnd < 2000; rnd += 7) {
                uint64_t a = drain_backoff_ms(1, 1000, 5000, rnd);
                assert_true(a >= 750 && a <= 1000);
                uint64_t b = drain_backoff_ms(2, 1000, 5000, rnd);
                assert_true(b >= 1500 && b <= 2000);
                uint64_t c = drain_backoff_ms(30, 1000, 5000, rnd);
                assert_true(c >= 3750 && c <= 5000);
        }
        /* jitter really varies */
        assert_true(drain_backoff_ms(3, 1000, 5000, 0) != drain_backoff_ms(3, 1000, 5000, 999));
}

static void test_drain_on(void **state) {
        uint32_t m;
        uint32_t always = (1u << KIND(SHUTDOWN)) | (1u << KIND(NODE_DELETED));
        assert_int_equal(drain_on_parse("spot,maintenance", &m), 0);
        assert_int_equal(m, always | (1u << KIND(SPOT_INTERRUPTION)) | (1u << KIND(MAINTENANCE)));
        assert_int_equal(drain_on_parse("none", &m), 0);
        assert_int_equal(m, always);
        assert_int_equal(drain_on_parse("rebalance", &m), 0);
        assert_int_equal(m, always | (1u << KIND(REBALANCE)));
        assert_int_equal(drain_on_parse("spot,,", &m), -EINVAL);
        assert_int_equal(drain_on_parse("spot,typo", &m), -EINVAL);
}

static void test_decide(void **state) {
        DrainRequest r;
        DrainInputs in = { .now_ms = 10000, .wait_ms = 2000, .connected = true };

        /* nothing to do */
        assert_int_equal(drain_decide(&in, &r), 0);

        /* the coordinator drains */
        in.coordinator_drain = true;
        in.coordinator_reason = "consolidation";
        in.coordinator_deadline_ms = 0;
        assert_int_equal(drain_decide(&in, &r), 1);
        assert_string_equal(r.reason, "consolidation");
        assert_false(r.force);
        assert_false(r.local);

        /* a spot notice it has not seen yet tightens the deadline and forces */
        in.has_trigger = true;
        in.trigger = (DrainRequest) { .reason = "spot-interruption", .deadline_unix_ms = 130000, .force = true };
        in.trigger_seen_ms = 9000;
        assert_int_equal(drain_decide(&in, &r), 1);
        assert_int_equal(r.deadline_unix_ms, 130000);
        assert_true(r.force);

        /* connected and within the wait: the coordinator gets its chance */
        in.coordinator_drain = false;
        assert_int_equal(drain_decide(&in, &r), 0);
        /* slower than the wait: the agent drains on its own */
        in.now_ms = 11500;
        assert_int_equal(drain_decide(&in, &r), 1);
        assert_true(r.local);
        assert_string_equal(r.reason, "spot-interruption");
        /* unreachable: at once */
        in.now_ms = 9001;
        in.connected = false;
        assert_int_equal(drain_decide(&in, &r), 1);
        /* the coordinator saw it and said run: its word wins */
        in.coordinator_saw_trigger = true;
        assert_int_equal(drain_decide(&in, &r), 0);
}

static void test_finalizer_and_taint(void **state) {
        cJSON *n = cJSON_Parse("{\"metadata\":{\"name\":\"n1\",\"finalizers\":[\"a\",\"nodesmith.io/termination\"],"
                               "\"deletionTimestamp\":\"2025-03-01T10:00:00.5Z\"},"
                               "\"spec\":{\"taints\":[{\"key\":\"nodesmith.io/disrupted\",\"effect\":\"NoSchedule\"}]}}");
        assert_true(node_has_finalizer(n, KUBE_NODE_FINALIZER));
        assert_false(node_has_finalizer(n, "other"));
        assert_true(node_has_taint(n, KUBE_NODE_TAINT));
        assert_false(node_has_taint(n, "node.kubernetes.io/unschedulable"));
        assert_int_equal(kube_parse_rfc3339_ms("2025-03-01T10:00:00.5Z"), INT64_C(1740823200500));
        assert_int_equal(kube_parse_rfc3339_ms("garbage"), 0);
        cJSON_Delete(n);
}

static cJSON *node_patch(const char *node_json, bool on, int expect) {
        cJSON *n = cJSON_Parse(node_json);
        char *body = (char *) "unset";
        assert_non_null(n);
        assert_int_equal(drain_node_patch(n, on, &body), expect);
        cJSON_Delete(n);
        if (expect <= 0) {
                if (expect == 0)
                        assert_null(body);
                return NULL;
        }
        cJSON *p = cJSON_Parse(body);
        free(body);
        assert_non_null(p);
        return p;
}

static const char *patch_str(const cJSON *p, const char *a, const char *b, const char *c) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, a), b);
        if (c)
                v = cJSON_GetObjectItemCaseSensitive(v, c);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void test_node_patch(void **state) {
        /* schedulable, someone else's taint: ours added to theirs, cordoned, annotated, guarded */
        cJSON *p = node_patch("{\"metadata\":{\"name\":\"n1\",\"resourceVersion\":\"7\"},"
                              "\"spec\":{\"taints\":[{\"key\":\"a\",\"effect\":\"NoSchedule\"}]}}", true, 1);
        const cJSON *spec = cJSON_GetObjectItemCaseSensitive(p, "spec");
        assert_string_equal(patch_str(p, "metadata", "resourceVersion", NULL), "7");
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "unschedulable")));
        assert_string_equal(patch_str(p, "metadata", "annotations", KUBE_NODE_CORDONED_ANNOTATION), "true");
        const cJSON *taints = cJSON_GetObjectItemCaseSensitive(spec, "taints");
        assert_int_equal(cJSON_GetArraySize(taints), 2);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(taints, 0), "key")), "a");
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(taints, 1), "key")), KUBE_NODE_TAINT);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(taints, 1), "effect")), "NoSchedule");
        cJSON_Delete(p);

        /* cordoned by someone else and tainted already: nothing to do */
        node_patch("{\"metadata\":{\"name\":\"n1\",\"resourceVersion\":\"8\"},\"spec\":{\"unschedulable\":true,"
                   "\"taints\":[{\"key\":\"nodesmith.io/disrupted\",\"effect\":\"NoSchedule\"}]}}", true, 0);

        /* undo what nodesmith did: uncordon, annotation and taint off, the other taint kept */
        p = node_patch("{\"metadata\":{\"name\":\"n1\",\"resourceVersion\":\"9\","
                       "\"annotations\":{\"nodesmith.io/drain-cordoned\":\"true\"}},\"spec\":{\"unschedulable\":true,"
                       "\"taints\":[{\"key\":\"a\",\"effect\":\"NoSchedule\"},"
                       "{\"key\":\"nodesmith.io/disrupted\",\"effect\":\"NoSchedule\"}]}}", false, 1);
        spec = cJSON_GetObjectItemCaseSensitive(p, "spec");
        assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(spec, "unschedulable")));
        assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "metadata"), "annotations"),
                KUBE_NODE_CORDONED_ANNOTATION)));
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(spec, "taints")), 1);
        cJSON_Delete(p);

        /* cordoned by someone else: the taint goes, the cordon stays */
        p = node_patch("{\"metadata\":{\"name\":\"n1\",\"resourceVersion\":\"10\"},\"spec\":{\"unschedulable\":true,"
                       "\"taints\":[{\"key\":\"nodesmith.io/disrupted\",\"effect\":\"NoSchedule\"}]}}", false, 1);
        spec = cJSON_GetObjectItemCaseSensitive(p, "spec");
        assert_null(cJSON_GetObjectItemCaseSensitive(spec, "unschedulable"));
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(spec, "taints")), 0);
        cJSON_Delete(p);

        /* no resourceVersion to guard the patch with */
        node_patch("{\"metadata\":{\"name\":\"n1\"},\"spec\":{}}", true, -ENOENT);

        /* the node's own identity may not touch taints (NodeRestriction): cordon only, the
         * Node's taints left out of the patch altogether, and nothing to do once cordoned */
        cJSON *n = cJSON_Parse("{\"metadata\":{\"name\":\"n1\",\"resourceVersion\":\"11\"},\"spec\":{"
                               "\"taints\":[{\"key\":\"a\",\"effect\":\"NoSchedule\"}]}}");
        char *body = NULL;
        assert_int_equal(drain_node_patch_with(n, true, false, &body), 1);
        p = cJSON_Parse(body);
        free(body);
        spec = cJSON_GetObjectItemCaseSensitive(p, "spec");
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "unschedulable")));
        assert_null(cJSON_GetObjectItemCaseSensitive(spec, "taints"));
        cJSON_Delete(p);
        cJSON_Delete(n);
        n = cJSON_Parse("{\"metadata\":{\"name\":\"n1\",\"resourceVersion\":\"12\"},\"spec\":{\"unschedulable\":true}}");
        body = (char *) "unset";
        assert_int_equal(drain_node_patch_with(n, true, false, &body), 0);
        assert_null(body);
        cJSON_Delete(n);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pod_requests),
                cmocka_unit_test(test_pod_flags),
                cmocka_unit_test(test_requested_skips_finished),
                cmocka_unit_test(test_pod_class),
                cmocka_unit_test(test_order),
                cmocka_unit_test(test_grace),
                cmocka_unit_test(test_backoff),
                cmocka_unit_test(test_drain_on),
                cmocka_unit_test(test_decide),
                cmocka_unit_test(test_finalizer_and_taint),
                cmocka_unit_test(test_node_patch),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
