/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's drains for nodes whose agent is silent (coordinator/agents/proxydrain.c),
 * driven through proxydrain.h with the Kubernetes client replaced at its seam (kube-seam.h,
 * tests/unit/test-coord-proxydrain.wrap): a Node being deleted that no agent speaks for, and a
 * node told to drain whose agent fell silent, are tainted, cordoned and drained with evictions
 * through the Eviction API; a PodDisruptionBudget's 429 is retried until it allows the eviction,
 * DaemonSet pods stay, and a live agent keeps its drain to itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent-report.h"
#include "coordinator/agents/proxydrain.h"
#include "kube-seam.h"
#include "kubenode.h"
#include "log.h"
#include "metric-text.h"

#define NODES "/api/v1/nodes"
#define PODS "/api/v1/pods"

typedef struct Fx {
        ProxyDrainsConfig cfg;
        sd_event *event;
        KubeConfig *config;
        KubeClient *kube;
        KubeWatch *nodes, *nodepools;
        Registry registry;
        ProxyDrains *pd;
} Fx;

static void on_watch(KubeWatch *w, const KubeWatchEvent *ev, void *userdata) {
}

static int setup(void **state) {
        Fx *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(sd_event_new(&f->event), 0);
        world_init(f->event);
        /* a real client on a closed port: whatever slipped past the seam fails here, locally */
        assert_int_equal(kube_config_new("http://127.0.0.1:1", &f->config), 0);
        assert_int_equal(kube_client_new(f->event, f->config, &f->kube), 0);
        assert_int_equal(kube_watch_new(f->kube, NODES, NULL, on_watch, NULL, &f->nodes), 0);
        assert_int_equal(kube_watch_new(f->kube, "/apis/nodesmith.io/v1/nodepools", NULL, on_watch, NULL, &f->nodepools), 0);
        assert_int_equal(registry_init(&f->registry, 100), 0);
        f->cfg = (ProxyDrainsConfig) { .report_interval_ms = 100, .agent_silent_intervals = 2,
                                       .termination_grace_ms = 600000, .max_proxy_drains = 4 };
        log_set_max_level(getenv("TEST_LOG") ? LOG_DEBUG : LOG_ERR);
        *state = f;
        return 0;
}

/* The drains, with the test's changes to the configuration. */
static void start(Fx *f) {
        assert_int_equal(proxy_drains_new(f->event, &f->cfg, &f->registry, f->kube, f->nodes, f->nodepools, &f->pd), 0);
}

static int teardown(void **state) {
        Fx *f = *state;
        proxy_drains_free(f->pd);
        kube_watch_free(f->nodes);
        kube_watch_free(f->nodepools);
        world_done();
        registry_done(&f->registry);
        kube_client_free(f->kube);
        kube_config_free(f->config);
        sd_event_unref(f->event);
        free(f);
        return 0;
}

/* A Node of instance id; deleting: its deletionTimestamp is a minute old, and it carries the
 * termination finalizer. */
static void put_node(const char *name, const char *id, bool deleting) {
        char json[1024], ts[32];
        time_t t = time(NULL) - 60;
        struct tm tm;
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
        snprintf(json, sizeof json,
                 "{\"metadata\":{\"name\":\"%s\",\"uid\":\"uid-%s\",\"labels\":{\"nodesmith.io/nodepool\":\"default\"},"
                 "\"finalizers\":[\"nodesmith.io/termination\"]%s%s%s},"
                 "\"spec\":{\"providerID\":\"aws:///us-east-1a/%s\"},"
                 "\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"Unknown\"}]}}",
                 name, name, deleting ? ",\"deletionTimestamp\":\"" : "", deleting ? ts : "", deleting ? "\"" : "", id);
        world_put(NODES, json);
}

/* A running pod bound to node, owned by a ReplicaSet (or, daemonset, a DaemonSet). */
static void put_pod(const char *ns, const char *name, const char *node, bool daemonset) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\",\"uid\":\"uid-%s\","
                 "\"ownerReferences\":[{\"kind\":\"%s\",\"name\":\"owner\",\"controller\":true}]},"
                 "\"spec\":{\"nodeName\":\"%s\",\"terminationGracePeriodSeconds\":5,"
                 "\"containers\":[{\"name\":\"c\",\"resources\":{\"requests\":{\"cpu\":\"100m\"}}}]},"
                 "\"status\":{\"phase\":\"Running\"}}",
                 name, ns, name, daemonset ? "DaemonSet" : "ReplicaSet", node);
        world_put(PODS, json);
}

/* The value of one of its metrics (without labels). */
static unsigned long metric(Fx *f, const char *name) {
        return METRIC_VALUE(proxy_drains_metrics, f->pd, name);
}

typedef struct Wait {
        Fx *f;
        const char *node;
        NodeEntry *reporting; /* an agent that keeps reporting meanwhile (NULL: none) */
} Wait;

/* The provisioner's housekeeping runs a pass now and then; here every loop turn. */
static bool drained(void *userdata) {
        Wait *w = userdata;
        proxy_drains_pass(w->f->pd, 0);
        return proxy_drains_drained(w->f->pd, w->node);
}

static bool settled(void *userdata) {
        Wait *w = userdata;
        if (w->reporting)
                (void) sd_event_now(w->f->event, CLOCK_MONOTONIC, &w->reporting->heard_usec);
        proxy_drains_pass(w->f->pd, 0);
        return false; /* runs the loop for the time given */
}

/* The index of the first recorded write that starts with prefix (SIZE_MAX: none). */
static size_t write_index(const char *prefix) {
        for (size_t i = 0; i < world.n_writes; i++)
                if (strncmp(world.writes[i], prefix, strlen(prefix)) == 0)
                        return i;
        return SIZE_MAX;
}

/* A Node being deleted that no agent reports for: the coordinator drains it itself. Its pods
 * are evicted (never deleted), the one whose PDB refuses twice is evicted on the third try, the
 * DaemonSet's pod stays; the Node is tainted and cordoned before the first eviction. */
static void test_orphan_node_drained_through_evictions(void **state) {
        Fx *f = *state;
        start(f);
        put_node("n1", "i-0000000000000001", true);
        put_pod("app", "web-1", "n1", false);
        put_pod("app", "web-2", "n1", false);
        put_pod("kube-system", "ds-1", "n1", true);
        put_pod("app", "elsewhere", "n2", false);
        world_refuse_evictions("app", "web-2", 2);

        assert_true(world_run_until(drained, &(Wait) { f, "n1" }, 30000));

        assert_int_equal(world_count("EVICT app/web-1"), 1);
        assert_int_equal(world_count("EVICT app/web-2"), 3); /* 429, 429, then accepted */
        assert_int_equal(world.evictions_refused, 2);
        assert_int_equal(world.evictions_accepted, 2);
        assert_int_equal(world_count("EVICT kube-system/ds-1"), 0);
        assert_int_equal(world_count("EVICT app/elsewhere"), 0);
        assert_int_equal(world_count("DELETE"), 0);
        assert_non_null(world_get(PODS, "kube-system", "ds-1"));
        assert_null(world_get(PODS, "app", "web-2"));

        /* tainted and cordoned first, through a patch guarded by the Node's resourceVersion */
        size_t patch = write_index("PATCH /api/v1/nodes/n1 ");
        assert_true(patch < write_index("EVICT "));
        const cJSON *node = world_get(NODES, NULL, "n1");
        assert_true(node_has_taint(node, KUBE_NODE_TAINT));
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(node, "spec"), "unschedulable")));
        /* said to people: a Warning Event on the Node */
        assert_non_null(world_find("EVENT Node/n1 NodesmithCoordinatorDrain"));

        assert_int_equal(metric(f, "nodesmith_proxy_drains_started_total"), 1);
        assert_int_equal(metric(f, "nodesmith_proxy_drain_pods_evicted_total"), 2);
        assert_int_equal(metric(f, "nodesmith_proxy_drains_drained"), 1);
}

/* A node told to drain whose agent stopped reporting: the coordinator drains it; once the agent
 * reports again it takes the drain over and the coordinator stops at once. */
static void test_silent_agent_drained_then_handed_over(void **state) {
        Fx *f = *state;
        uint64_t now = 0;
        start(f);
        put_node("n2", "i-0000000000000002", false);
        put_pod("app", "api-1", "n2", false);
        put_pod("app", "api-2", "n2", false);
        world_refuse_evictions("app", "api-2", 1000); /* the PDB never allows it */
        assert_true(sd_event_now(f->event, CLOCK_MONOTONIC, &now) >= 0);
        NodeEntry *e = agent_report_put(&f->registry, "i-0000000000000002", "n2", false, now);
        e->action = NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN;
        e->reason = strdup("consolidation");
        assert_non_null(e->reason);

        /* the agent is alive: the drain is its own */
        world_run_until(settled, &(Wait) { f, "n2", e }, 300);
        assert_int_equal(world_count("EVICT "), 0);
        assert_int_equal(metric(f, "nodesmith_proxy_drains_started_total"), 0);

        /* silent for more than two report intervals: the coordinator drains */
        e->last_seen_usec = e->heard_usec = now - 10 * USEC_PER_SEC;
        world_run_until(settled, &(Wait) { f, "n2" }, 3500);
        assert_int_equal(metric(f, "nodesmith_proxy_drains_started_total"), 1);
        assert_int_equal(world_count("EVICT app/api-1"), 1);
        assert_true(world_count("EVICT app/api-2") >= 2); /* refused, retried after a backoff */
        assert_null(world_get(PODS, "app", "api-1"));
        assert_non_null(world_get(PODS, "app", "api-2")); /* the PDB holds it */
        assert_false(proxy_drains_drained(f->pd, "n2"));
        assert_true(metric(f, "nodesmith_proxy_drains_active") == 1);

        /* the agent reports again: it carries on; the coordinator's drain ends, nothing undone */
        size_t evictions = world_count("EVICT ");
        assert_true(sd_event_now(f->event, CLOCK_MONOTONIC, &now) >= 0);
        e = agent_report_put(&f->registry, "i-0000000000000002", "n2", false, now);
        proxy_drains_agent_reported(f->pd, e);
        assert_int_equal(metric(f, "nodesmith_proxy_drains_active"), 0);
        world_run_until(settled, &(Wait) { f, "n2", e }, 1500);
        assert_int_equal(world_count("EVICT "), evictions);
        assert_true(node_has_taint(world_get(NODES, NULL, "n2"), KUBE_NODE_TAINT));
        assert_non_null(world_find("EVENT Node/n2 NodesmithDrainHandedOver"));
}

/* Beyond max-proxy-drains a Node being deleted waits its turn, tainted and cordoned at once so
 * that the pods evicted meanwhile do not land on it; its pods stay until a slot frees. */
static void test_waiting_node_precordoned(void **state) {
        Fx *f = *state;
        f->cfg.max_proxy_drains = 1;
        start(f);
        put_node("n3", "i-0000000000000003", true);
        put_node("n4", "i-0000000000000004", true);
        put_pod("app", "a-1", "n3", false);
        put_pod("app", "b-1", "n4", false);
        world_refuse_evictions("app", "a-1", 1000);
        world_refuse_evictions("app", "b-1", 1000);
        world_run_until(settled, &(Wait) { f, NULL }, 1500);

        assert_int_equal(metric(f, "nodesmith_proxy_drains_started_total"), 1);
        assert_int_equal(metric(f, "nodesmith_proxy_drains_waiting"), 1);
        assert_int_equal(metric(f, "nodesmith_proxy_drains_precordoned_total"), 1);
        /* both tainted and cordoned; only the one draining sees evictions */
        for (const char *const *n = (const char *const[]) { "n3", "n4", NULL }; *n; n++) {
                const cJSON *node = world_get(NODES, NULL, *n);
                assert_true(node_has_taint(node, KUBE_NODE_TAINT));
                assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(node, "spec"), "unschedulable")));
        }
        bool n3_drains = world_count("EVICT app/a-1") > 0;
        assert_true(n3_drains != (world_count("EVICT app/b-1") > 0));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_orphan_node_drained_through_evictions, setup, teardown),
                cmocka_unit_test_setup_teardown(test_silent_agent_drained_then_handed_over, setup, teardown),
                cmocka_unit_test_setup_teardown(test_waiting_node_precordoned, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
