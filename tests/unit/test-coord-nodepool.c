/* SPDX-License-Identifier: Apache-2.0 */
/* Kubernetes/Karpenter objects into solver structs, and Karpenter to nodesmith conversion. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/model/disruption-policy.h"
#include "coordinator/model/karpenter.h"
#include "coordinator/model/nodeclass-check.h"
#include "base64.h"
#include "coordinator/model/nodepool.h"
#include "coordinator/model/reservations.h"
#include "coordinator/model/toml.h"
#include "coordinator/model/userdata.h"
#include "yaml-json.h"

#define MI ((int64_t) 1024 * 1024)
#define GI (1024 * MI)

static cJSON *yaml(const char *text) {
        cJSON *j = NULL;
        assert_int_equal(yaml_documents_to_json(text, strlen(text), &j), 0);
        return j;
}

static NodepoolObjects *load(const char *text, char **ret_error) {
        NodepoolObjects *o = NULL;
        assert_int_equal(nodepool_objects_new(&o), 0);
        cJSON *j = yaml(text);
        char *err = NULL;
        int r = nodepool_objects_add(o, j, "test.yaml", &err);
        cJSON_Delete(j);
        if (r >= 0)
                r = nodepool_objects_finish(o, NULL, &err);
        if (ret_error)
                *ret_error = err;
        else {
                if (r < 0)
                        fail_msg("unexpected error: %s", err ? err : "?");
                free(err);
        }
        if (r < 0) {
                nodepool_objects_free(o);
                return NULL;
        }
        return o;
}

static void expect_error(const char *text, const char *msg) {
        char *err = NULL;
        NodepoolObjects *o = load(text, &err);
        assert_null(o);
        assert_non_null(err);
        if (!strstr(err, msg))
                fail_msg("\"%s\" lacks \"%s\"", err, msg);
        free(err);
}

static void test_nodepool(void **state) {
        NodepoolObjects *o = load("apiVersion: nodesmith.io/v1\n"
                                  "kind: NodePool\n"
                                  "metadata: {name: general}\n"
                                  "spec:\n"
                                  "  weight: 10\n"
                                  "  template:\n"
                                  "    metadata: {labels: {team: a}}\n"
                                  "    spec:\n"
                                  "      nodeClassRef: {group: nodesmith.io, kind: EC2NodeClass, name: default}\n"
                                  "      requirements:\n"
                                  "        - {key: node.kubernetes.io/instance-type, operator: Exists, minValues: 5}\n"
                                  "        - {key: nodesmith.io/instance-cpu, operator: Gt, values: ['3']}\n"
                                  "      taints: [{key: k, value: v, effect: NoSchedule}]\n"
                                  "      startupTaints: [{key: s, effect: NoExecute}]\n"
                                  "      expireAfter: 24h\n"
                                  "  limits: {cpu: 100, memory: 400Gi}\n"
                                  "  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 5m, budgets: [{nodes: '10%'}]}\n"
                                  "  headroom: {cpu: '4', memory: 8Gi, pods: 2}\n",
                                  NULL);
        assert_int_equal(o->n_pools, 1);
        const SolverNodePool *p = &o->pools[0];
        const NodePoolExtra *x = &o->extra[0];
        assert_string_equal(p->name, "general");
        assert_int_equal(p->weight, 10);
        assert_int_equal(p->n_labels, 1);
        assert_int_equal(p->n_requirements, 2);
        assert_int_equal(p->requirements[0].op, SOLVER_OP_EXISTS);
        assert_int_equal(p->requirements[0].min_values, 5);
        assert_int_equal(p->requirements[1].op, SOLVER_OP_GT);
        assert_int_equal(p->n_taints, 1);
        assert_int_equal(p->taints[0].effect, SOLVER_EFFECT_NO_SCHEDULE);
        assert_int_equal(p->n_startup_taints, 1);
        assert_int_equal(p->limits.v[SOLVER_RES_CPU], 100000);
        assert_int_equal(p->limits.v[SOLVER_RES_MEMORY], 400 * GI);
        assert_int_equal(p->limits.v[SOLVER_RES_PODS], -1);
        assert_int_equal(p->headroom.v[SOLVER_RES_CPU], 4000);
        assert_int_equal(p->headroom.v[SOLVER_RES_PODS], 2);
        assert_string_equal(x->node_class, "default");
        assert_int_equal(x->expire_after_s, 24 * 3600);
        assert_string_equal(x->consolidation_policy, "WhenEmpty");
        assert_int_equal(x->consolidate_after_s, 300);
        assert_int_equal(cJSON_GetArraySize(x->budgets), 1);
        nodepool_objects_free(o);
}

static void test_nodepool_errors(void **state) {
        const char *head = "apiVersion: nodesmith.io/v1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  template:\n    spec:\n";
        char buf[1024];
        snprintf(buf, sizeof(buf), "%s      requirements: [{key: a, operator: In, values: [x], minValues: 2}]\n", head);
        expect_error(buf, "NodePool np: spec.template.spec.requirements[0].minValues: is larger than the number of values");
        snprintf(buf, sizeof(buf), "%s      requirements: [{key: a, operator: Gt, values: [x]}]\n", head);
        expect_error(buf, "requirements[0].values: Gt needs exactly one integer value");
        snprintf(buf, sizeof(buf), "%s      requirements: [{key: a, operator: In}]\n", head);
        expect_error(buf, "requirements[0].values: In needs at least one value");
        snprintf(buf, sizeof(buf), "%s      taints: [{key: a, effect: Sometimes}]\n", head);
        expect_error(buf, "taints[0].effect: \"Sometimes\" is not NoSchedule");
        snprintf(buf, sizeof(buf), "%s      expireAfter: soon\n", head);
        expect_error(buf, "spec.template.spec.expireAfter: \"soon\" is not a duration");
        expect_error("apiVersion: nodesmith.io/v1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  template:\n"
                     "    metadata: {labels: {karpenter.sh/capacity-type: spot}}\n    spec: {}\n",
                     "is a well-known label");
        expect_error("apiVersion: nodesmith.io/v1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  weight: 500\n"
                     "  template: {spec: {}}\n",
                     "spec.weight: must be between 1 and 100");
        expect_error("apiVersion: nodesmith.io/v1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  template: {spec: {}}\n"
                     "  limits: {cpu: many}\n",
                     "spec.limits.cpu: \"many\" is not a quantity");
        expect_error("apiVersion: nodesmith.io/v1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  template: {spec: {}}\n"
                     "---\napiVersion: nodesmith.io/v1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  template: {spec: {}}\n",
                     "another NodePool has this name");
        expect_error("kind: Pod\nmetadata: {name: x}\n", "Pod default/x: spec: must be an object");
        expect_error("apiVersion: v1\nmetadata: {name: x}\n", "kind: is required");
}

static void test_pod_requests(void **state) {
        /* containers 100m + 200m (+ a sidecar 50m); init 500m runs next to the sidecar: 550m;
         * a limit-only container requests its limit; overhead adds */
        NodepoolObjects *o = load("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: n, labels: {app: x}}\n"
                                  "spec:\n"
                                  "  priority: 100\n"
                                  "  preemptionPolicy: Never\n"
                                  "  initContainers:\n"
                                  "    - {name: side, restartPolicy: Always, resources: {requests: {cpu: 50m}}}\n"
                                  "    - {name: init, resources: {requests: {cpu: 500m, memory: 1Gi}}}\n"
                                  "  containers:\n"
                                  "    - {name: a, resources: {requests: {cpu: 100m, memory: 100Mi}}}\n"
                                  "    - {name: b, resources: {limits: {cpu: 200m, memory: 200Mi, nvidia.com/gpu: 1}},\n"
                                  "       ports: [{containerPort: 80, hostPort: 8080}, {containerPort: 53, hostPort: 53, protocol: UDP}]}\n"
                                  "  overhead: {memory: 10Mi}\n",
                                  NULL);
        assert_int_equal(o->n_pods, 1);
        const SolverPod *p = &o->pods[0];
        assert_int_equal(p->requests.v[SOLVER_RES_CPU], 550);
        assert_int_equal(p->requests.v[SOLVER_RES_MEMORY], 1 * GI + 10 * MI);
        assert_int_equal(p->requests.v[SOLVER_RES_NVIDIA_GPU], 1);
        assert_int_equal(p->requests.v[SOLVER_RES_PODS], 1);
        assert_int_equal(p->priority, 100);
        assert_true(p->preempt_never);
        assert_int_equal(p->n_host_ports, 2);
        assert_int_equal(p->host_ports[0].port, 8080);
        assert_int_equal(p->host_ports[1].protocol, 1);
        assert_string_equal(p->namespace_, "n");
        nodepool_objects_free(o);
}

static void test_pod_scheduling_fields(void **state) {
        NodepoolObjects *o = load(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {app: web, pod-template-hash: abc}}\n"
                "spec:\n"
                "  nodeSelector: {kubernetes.io/arch: arm64}\n"
                "  tolerations: [{key: k, operator: Exists}, {operator: Exists}]\n"
                "  affinity:\n"
                "    nodeAffinity:\n"
                "      requiredDuringSchedulingIgnoredDuringExecution:\n"
                "        nodeSelectorTerms:\n"
                "          - matchExpressions: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]\n"
                "          - matchFields: [{key: metadata.name, operator: In, values: [node-1]}]\n"
                "      preferredDuringSchedulingIgnoredDuringExecution:\n"
                "        - weight: 20\n"
                "          preference: {matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}]}\n"
                "    podAntiAffinity:\n"
                "      requiredDuringSchedulingIgnoredDuringExecution:\n"
                "        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}\n"
                "      preferredDuringSchedulingIgnoredDuringExecution:\n"
                "        - weight: 5\n"
                "          podAffinityTerm: {topologyKey: topology.kubernetes.io/zone, namespaceSelector: {},\n"
                "                            labelSelector: {matchExpressions: [{key: app, operator: Exists}]}}\n"
                "  topologySpreadConstraints:\n"
                "    - {maxSkew: 2, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway,\n"
                "       minDomains: 3, labelSelector: {matchLabels: {app: web}}, matchLabelKeys: [pod-template-hash]}\n"
                "  containers: [{name: a}]\n",
                NULL);
        const SolverPod *p = &o->pods[0];
        assert_int_equal(p->n_node_selector, 1);
        assert_int_equal(p->n_tolerations, 2);
        assert_true(p->tolerations[1].exists);
        assert_int_equal(p->n_required_terms, 2);
        assert_string_equal(p->required_terms[1].reqs[0].key, SOLVER_LABEL_HOSTNAME);
        assert_int_equal(p->n_preferred_terms, 1);
        assert_int_equal(p->preferred_terms[0].weight, 20);
        assert_int_equal(p->n_anti_affinity, 1);
        assert_string_equal(p->anti_affinity[0].topology_key, SOLVER_LABEL_HOSTNAME);
        assert_int_equal(p->n_pref_anti_affinity, 1);
        assert_true(p->pref_anti_affinity[0].all_namespaces);
        assert_int_equal(p->n_spreads, 1);
        assert_true(p->spreads[0].schedule_anyway);
        assert_int_equal(p->spreads[0].min_domains, 3);
        /* matchLabelKeys added the pod's own pod-template-hash */
        assert_int_equal(p->spreads[0].selector.n_match_labels, 2);
        assert_string_equal(p->spreads[0].selector.match_labels[1].value, "abc");
        nodepool_objects_free(o);
}

static void test_workloads_and_volumes(void **state) {
        NodepoolObjects *o = load(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\n"
                "spec:\n  replicas: 3\n  template:\n    metadata: {labels: {app: web}}\n"
                "    spec:\n      containers: [{name: a, resources: {requests: {cpu: 250m}}}]\n"
                "      volumes: [{name: d, persistentVolumeClaim: {claimName: bound}}, {name: e, emptyDir: {}}]\n"
                "---\n"
                "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db, namespace: shop}\n"
                "spec:\n  replicas: 2\n  template:\n    spec:\n      priorityClassName: high\n      containers: [{name: a}]\n"
                "  volumeClaimTemplates: [{metadata: {name: data}, spec: {storageClassName: late}}]\n"
                "---\n"
                "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\n"
                "spec:\n  template:\n    spec:\n      containers: [{name: a, resources: {requests: {cpu: 100m}}}]\n"
                "---\n"
                "apiVersion: v1\nkind: List\nitems:\n"
                "  - {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: bound, namespace: shop}, spec: {volumeName: pv1}}\n"
                "  - apiVersion: v1\n    kind: PersistentVolume\n    metadata: {name: pv1}\n"
                "    spec: {nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: topology.kubernetes.io/zone,"
                " operator: In, values: [us-east-1b]}]}]}}}\n"
                "  - {apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {name: late}, volumeBindingMode: WaitForFirstConsumer}\n"
                "  - {apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, metadata: {name: high}, value: 1000}\n"
                "  - {apiVersion: v1, kind: ConfigMap, metadata: {name: ignored}}\n",
                NULL);
        assert_int_equal(o->n_pods, 5);
        assert_int_equal(o->n_daemonsets, 1);
        assert_string_equal(o->pods[0].name, "web-0");
        assert_string_equal(o->pods[2].name, "web-2");
        assert_string_equal(o->pods[0].owner, "Deployment/web");
        assert_int_equal(o->pods[1].requests.v[SOLVER_RES_CPU], 250);
        /* the bound claim pins the zone */
        assert_int_equal(o->pods[0].n_volume_zones, 1);
        assert_string_equal(o->pods[0].volume_zones[0], "us-east-1b");
        /* StatefulSet: per-replica WaitForFirstConsumer claims, priority from the class */
        assert_string_equal(o->pods[3].name, "db-0");
        assert_int_equal(o->pods[3].n_wffc_claims, 1);
        assert_string_equal(o->pods[3].wffc_claims[0], "shop/data-db-0");
        assert_string_equal(o->pods[4].wffc_claims[0], "shop/data-db-1");
        assert_int_equal(o->pods[3].priority, 1000);
        assert_int_equal(o->daemonsets[0].requests.v[SOLVER_RES_CPU], 100);
        /* the ConfigMap is noted, not an error */
        bool noted = false;
        for (size_t i = 0; i < o->n_notes; i++)
                noted |= strstr(o->notes[i], "ConfigMap") != NULL;
        assert_true(noted);
        nodepool_objects_free(o);
}

static void test_nodeclass_and_node(void **state) {
        NodepoolObjects *o = load(
                "apiVersion: nodesmith.io/v1\nkind: EC2NodeClass\nmetadata: {name: default}\n"
                "spec:\n  role: r\n  amiSelectorTerms: [{alias: al2023@latest}]\n"
                "  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{id: sg-1}]\n"
                "  metadataOptions: {httpTokens: required, httpPutResponseHopLimit: 2}\n"
                "  blockDeviceMappings: [{deviceName: /dev/xvda, rootVolume: true, ebs: {volumeSize: 80Gi}}]\n"
                "  kubelet: {maxPods: 110, kubeReserved: {cpu: 200m}, evictionHard: {memory.available: 500Mi}}\n"
                "---\n"
                "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels: {karpenter.sh/nodepool: general,"
                " topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: spot}\n"
                "spec: {unschedulable: true, taints: [{key: t, effect: NoSchedule}]}\n"
                "status: {allocatable: {cpu: 3920m, memory: 6Gi, pods: '58'}}\n",
                NULL);
        assert_int_equal(o->n_classes, 1);
        const NodeClass *nc = &o->classes[0];
        assert_string_equal(nc->ami_family, "AL2023");
        assert_int_equal(nc->root_volume_bytes, 80 * GI);
        assert_int_equal(nc->http_put_hop_limit, 2);
        assert_true(nc->http_tokens_required);
        assert_true(nc->has_kubelet);
        assert_int_equal(nc->kubelet.max_pods, 110);
        assert_true(nc->kubelet.has_kube_reserved_cpu);
        assert_int_equal(nc->kubelet.kube_reserved_cpu, 200);
        assert_int_equal(nc->kubelet.eviction_memory, 500 * MI);
        assert_int_equal(o->n_nodes, 1);
        const SolverNode *n = &o->nodes[0];
        assert_string_equal(n->nodepool, "general");
        assert_string_equal(n->zone, "us-east-1a");
        assert_int_equal(n->capacity_type, SOLVER_CAPACITY_SPOT);
        assert_true(n->unschedulable);
        assert_int_equal(n->allocatable.v[SOLVER_RES_CPU], 3920);
        nodepool_objects_free(o);

        expect_error("apiVersion: nodesmith.io/v1\nkind: EC2NodeClass\nmetadata: {name: x}\n"
                     "spec: {amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]}\n",
                     "EC2NodeClass x: spec: must specify exactly one of ['role', 'instanceProfile']");
        expect_error("apiVersion: nodesmith.io/v1\nkind: EC2NodeClass\nmetadata: {name: x}\n"
                     "spec: {role: r, subnetSelectorTerms: [], securityGroupSelectorTerms: [{id: sg-1}]}\n",
                     "spec.subnetSelectorTerms: subnetSelectorTerms cannot be empty");
        expect_error("apiVersion: v1\nkind: Node\nmetadata: {name: n}\n", "Node n: status.allocatable: is required");
}

static void test_durations(void **state) {
        int64_t v;
        assert_int_equal(nodepool_parse_duration("720h", &v), 0);
        assert_int_equal(v, 720 * 3600);
        assert_int_equal(nodepool_parse_duration("1h30m15s", &v), 0);
        assert_int_equal(v, 5415);
        assert_int_equal(nodepool_parse_duration("Never", &v), 0);
        assert_int_equal(v, -1);
        assert_int_equal(nodepool_parse_duration("1500ms", &v), 0);
        assert_int_equal(v, 1);
        assert_int_equal(nodepool_parse_duration("10", &v), -EINVAL);
        assert_int_equal(nodepool_parse_duration("5d", &v), -EINVAL);
}

static const cJSON *find_kind(const cJSON *arr, const char *kind) {
        const cJSON *o;
        cJSON_ArrayForEach(o, arr) {
                const cJSON *k = cJSON_GetObjectItem(o, "kind");
                if (cJSON_IsString(k) && strcmp(k->valuestring, kind) == 0)
                        return o;
        }
        return NULL;
}

static const char *jstr(const cJSON *o, const char *path) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", path);
        const cJSON *cur = o;
        for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && cur; k = strtok_r(NULL, ".", &save))
                cur = cJSON_GetObjectItem(cur, k);
        return cJSON_IsString(cur) ? cur->valuestring : NULL;
}

static void test_convert_v1beta1_with_kubelet(void **state) {
        cJSON *in = yaml("apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: np}\n"
                         "spec:\n  template:\n    metadata: {labels: {team: a}}\n"
                         "    spec:\n      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: nc}\n"
                         "      kubelet: {maxPods: 42}\n"
                         "      requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m7i]}]\n"
                         "  disruption: {consolidationPolicy: WhenUnderutilized, expireAfter: 48h}\n"
                         "---\n"
                         "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: nc}\n"
                         "spec: {role: r, amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{id: subnet-1}],"
                         " securityGroupSelectorTerms: [{id: sg-1}]}\n"
                         "---\n"
                         "apiVersion: v1\nkind: Service\nmetadata: {name: untouched}\n");
        cJSON *out = NULL;
        char **notes = NULL, *err = NULL;
        assert_int_equal(karpenter_convert(in, &out, &notes, &err), 0);
        assert_int_equal(cJSON_GetArraySize(out), 3);
        const cJSON *np = find_kind(out, "NodePool"), *nc = find_kind(out, "EC2NodeClass");
        assert_string_equal(jstr(np, "apiVersion"), "nodesmith.io/v1");
        assert_string_equal(jstr(np, "spec.disruption.consolidationPolicy"), "WhenEmptyOrUnderutilized");
        /* v1 requires consolidateAfter; WhenUnderutilized consolidated at once */
        assert_string_equal(jstr(np, "spec.disruption.consolidateAfter"), "0s");
        assert_string_equal(jstr(np, "spec.template.spec.expireAfter"), "48h");
        assert_null(jstr(np, "spec.disruption.expireAfter"));
        assert_string_equal(jstr(np, "spec.template.spec.nodeClassRef.group"), "nodesmith.io");
        assert_string_equal(jstr(np, "spec.template.metadata.labels.team"), "a");
        const cJSON *req = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(
                cJSON_GetObjectItem(np, "spec"), "template"), "spec"), "requirements"), 0);
        assert_string_equal(jstr(req, "key"), "nodesmith.io/instance-family");
        /* the v1beta1 kubelet block went to the EC2NodeClass converted with it */
        assert_string_equal(jstr(nc, "apiVersion"), "nodesmith.io/v1");
        assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(nc, "spec"), "kubelet"), "maxPods")->valueint, 42);
        assert_null(cJSON_GetObjectItem(np, "x-kubelet"));
        bool moved = false;
        for (char **n = notes; *n; n++)
                moved |= strstr(*n, "kubelet settings moved to EC2NodeClass nc") != NULL;
        assert_true(moved);
        assert_string_equal(jstr(find_kind(out, "Service"), "metadata.name"), "untouched");

        /* what comes out parses as nodesmith objects, also through YAML */
        char *text = NULL;
        assert_int_equal(json_to_yaml(out, true, &text), 0);
        cJSON *back = yaml(text);
        assert_true(cJSON_Compare(back, out, true));
        NodepoolObjects *o = NULL;
        assert_int_equal(nodepool_objects_new(&o), 0);
        int r = nodepool_objects_add(o, back, NULL, &err);
        if (r < 0)
                fail_msg("%s", err ? err : "?");
        assert_int_equal(o->n_pools, 1);
        assert_int_equal(o->n_classes, 1);
        assert_int_equal(o->classes[0].kubelet.max_pods, 42);
        nodepool_objects_free(o);
        cJSON_Delete(back);
        free(text);
        karpenter_notes_free(notes);
        cJSON_Delete(out);
        cJSON_Delete(in);
}

static void test_convert_provisioner(void **state) {
        /* consolidation on, an inline provider, a field with no equivalent */
        cJSON *in = yaml("apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\n"
                         "spec:\n  consolidation: {enabled: true}\n  ttlSecondsAfterEmpty: 60\n"
                         "  provider: {subnetSelector: {karpenter.sh/discovery: x}, securityGroupSelector: {aws-ids: sg-1},"
                         " instanceProfile: ip, launchTemplate: lt}\n"
                         "  requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]\n"
                         "  limits: {resources: {cpu: '64'}}\n"
                         "  weirdField: 1\n");
        cJSON *out = NULL;
        char **notes = NULL;
        assert_int_equal(karpenter_convert(in, &out, &notes, NULL), 0);
        const cJSON *np = find_kind(out, "NodePool"), *nc = find_kind(out, "EC2NodeClass");
        assert_non_null(np);
        assert_non_null(nc);
        assert_string_equal(jstr(np, "spec.disruption.consolidationPolicy"), "WhenEmptyOrUnderutilized");
        assert_string_equal(jstr(np, "spec.disruption.consolidateAfter"), "0s");
        assert_string_equal(jstr(np, "spec.template.spec.expireAfter"), "Never");
        assert_string_equal(jstr(np, "spec.template.spec.nodeClassRef.name"), "p");
        assert_string_equal(jstr(np, "spec.limits.cpu"), "64");
        assert_string_equal(jstr(nc, "spec.instanceProfile"), "ip");
        int seen = 0;
        for (char **n = notes; *n; n++) {
                seen += strstr(*n, "launchTemplate cannot be carried over") != NULL;
                seen += strstr(*n, "spec.weirdField cannot be carried over") != NULL;
                seen += strstr(*n, "consolidation.enabled wins over ttlSecondsAfterEmpty") != NULL;
        }
        assert_int_equal(seen, 3);
        karpenter_notes_free(notes);
        cJSON_Delete(out);
        cJSON_Delete(in);
}

static void test_yaml_anchors_and_emitter(void **state) {
        /* manifests written with anchors and merge keys parse like the expanded text */
        NodepoolObjects *o = load("apiVersion: v1\nkind: List\n"
                                  "x-res: &res {requests: {cpu: 300m, memory: 64Mi}}\n"
                                  "items:\n"
                                  "  - apiVersion: v1\n    kind: Pod\n    metadata: {name: a}\n"
                                  "    spec:\n      containers:\n        - &c {name: a, resources: *res}\n"
                                  "        - <<: *c\n          name: b\n",
                                  NULL);
        assert_int_equal(o->n_pods, 1);
        assert_int_equal(o->pods[0].requests.v[SOLVER_RES_CPU], 600);
        nodepool_objects_free(o);

        /* strings that would read back as something else are quoted */
        cJSON *j = cJSON_Parse("{\"a\": \"true\", \"b\": \"1.5\", \"c\": \"\", \"d\": \"null\", \"e\": \"plain\","
                               " \"f\": 2, \"g\": [], \"h\": \"0x10\", \"yes\": false}");
        char *text = NULL;
        assert_int_equal(json_to_yaml(j, false, &text), 0);
        assert_non_null(strstr(text, "a: \"true\""));
        assert_non_null(strstr(text, "e: plain"));
        assert_non_null(strstr(text, "f: 2"));
        cJSON *back = NULL;
        assert_int_equal(yaml_to_json(text, strlen(text), &back), 0);
        assert_true(cJSON_Compare(j, back, true));
        cJSON_Delete(back);
        free(text);
        cJSON_Delete(j);
}

#define NC_HEAD "apiVersion: nodesmith.io/v1\nkind: EC2NodeClass\nmetadata: {name: c}\n"
#define NC_BASE "spec:\n  role: r\n  amiSelectorTerms: [{alias: al2023@latest}]\n" \
        "  subnetSelectorTerms: [{id: subnet-1}]\n  securityGroupSelectorTerms: [{id: sg-1}]\n"
#define NP_HEAD "apiVersion: nodesmith.io/v1\nkind: NodePool\nmetadata: {name: p}\n" \
        "spec:\n  template:\n    spec:\n      nodeClassRef: {group: nodesmith.io, kind: EC2NodeClass, name: c}\n"

/* Karpenter v1 fields nodesmith does not carry out are refused, naming the field and why. */
static void test_karpenter_refusals(void **state) {
        expect_error(NC_HEAD "spec:\n  role: r\n  amiSelectorTerms: [{alias: windows2022@latest}]\n"
                     "  subnetSelectorTerms: [{id: subnet-1}]\n  securityGroupSelectorTerms: [{id: sg-1}]\n",
                     "spec.amiSelectorTerms[0].alias: \"windows2022@latest\" is not supported: Windows nodes cannot run "
                     "nodesmith-agent, which runs on Linux only");
        expect_error(NC_HEAD "spec:\n  role: r\n  amiSelectorTerms: [{id: ami-1}]\n  amiFamily: Windows2019\n"
                     "  subnetSelectorTerms: [{id: subnet-1}]\n  securityGroupSelectorTerms: [{id: sg-1}]\n",
                     "spec.amiFamily: Windows2019 is not supported: Windows nodes cannot run nodesmith-agent");
        /* capacityReservationSelectorTerms as Karpenter validates them */
        expect_error(NC_HEAD NC_BASE "  capacityReservationSelectorTerms: [{id: cr-1, tags: {a: b}}]\n",
                     "spec.capacityReservationSelectorTerms[0]: 'id' is mutually exclusive");
        expect_error(NC_HEAD NC_BASE "  capacityReservationSelectorTerms: [{ownerID: '123456789012'}]\n",
                     "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']");
        expect_error(NC_HEAD NC_BASE "  capacityReservationSelectorTerms: [{tags: {a: b}, ownerID: '12'}]\n",
                     "ownerID must be a 12-digit AWS account id");
        expect_error(NC_HEAD NC_BASE "  capacityReservationSelectorTerms: [{instanceMatchCriteria: any}]\n",
                     "instanceMatchCriteria must be open or targeted");
        expect_error(NC_HEAD NC_BASE "  capacityReservationSelectorTerms: [{id: odcr-1}]\n", "id must look like cr-");
        expect_error(NC_HEAD NC_BASE "  capacityReservationSelectorTerms: [{tags: {a: ''}}]\n",
                     "empty tag keys or values aren't supported");
        expect_error(NC_HEAD NC_BASE "  capacityReservationSelectorTerms: [{name: x}]\n",
                     "capacityReservationSelectorTerms[0].name");
        expect_error(NC_HEAD NC_BASE "  ipPrefixCount: 100\n", "spec.ipPrefixCount: must be between 0 and 64");
        expect_error(NC_HEAD NC_BASE "  userdata: x\n", "spec.userdata: is not a field of Karpenter v1's EC2NodeClass");
        expect_error(NC_HEAD NC_BASE "  kubelet: {evictionSoft: {memory.available: 1Gi}}\n",
                     "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod");
        expect_error(NC_HEAD NC_BASE "  kubelet: {evictionHard: {memory.free: 1Gi}}\n", "valid keys are memory.available");
        expect_error(NC_HEAD NC_BASE "  blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeSize: 20Gi, "
                     "volumeInitializationRate: 200}}]\n", "snapshotID must be set when volumeInitializationRate is set");
        expect_error(NC_HEAD NC_BASE "  blockDeviceMappings: [{deviceName: /dev/xvda, rootVolume: true, ebs: {volumeSize: 20Gi}},"
                     " {deviceName: /dev/xvdb, rootVolume: true, ebs: {volumeSize: 20Gi}}]\n",
                     "must have only one blockDeviceMappings with rootVolume");
        expect_error(NC_HEAD "spec:\n  role: r\n  amiSelectorTerms: [{id: ami-1, name: x}]\n  amiFamily: AL2023\n"
                     "  subnetSelectorTerms: [{id: subnet-1}]\n  securityGroupSelectorTerms: [{id: sg-1}]\n",
                     "'id' is mutually exclusive");
        /* static NodePools: Karpenter's rules, and nodesmith's dynamic-only fields */
        expect_error(NP_HEAD "  replicas: -1\n", "spec.replicas");
        expect_error(NP_HEAD "  replicas: 3\n  weight: 10\n", "spec.weight: is not supported on static NodePools");
        expect_error(NP_HEAD "  replicas: 3\n  limits: {cpu: 100}\n",
                     "spec.limits.cpu: only limits.nodes is supported on static NodePools");
        expect_error(NP_HEAD "  replicas: 3\n  headroom: {cpu: 1}\n", "spec.headroom: has no meaning on a static NodePool");
        expect_error(NP_HEAD "  replicas: 3\n  disruption: {churnGuard: 5m}\n",
                     "spec.disruption.churnGuard: has no meaning on a static NodePool");
        expect_error(NP_HEAD "  disruption: {consolidationThreshold: 3}\n",
                     "spec.disruption.consolidationThreshold: an integer goes with consolidationPolicy Balanced");
        expect_error(NP_HEAD "  limits: {nodes: -1}\n", "spec.limits.nodes: \"-1\" is out of range");
        expect_error(NP_HEAD "  limits: {nodes: few}\n", "spec.limits.nodes: \"few\" is not a quantity");
        expect_error(NP_HEAD "  weights: 3\n", "spec.weights: is not a field of Karpenter v1's NodePool");
}

/* spec.replicas makes a static NodePool; Karpenter's consolidation fields are accepted (and
 * ignored there, as Karpenter documents). */
static void test_static_nodepool(void **state) {
#define POOL(name, rest) "apiVersion: nodesmith.io/v1\nkind: NodePool\nmetadata: {name: " name "}\nspec:\n" rest \
        "  template:\n    spec:\n      nodeClassRef: {group: nodesmith.io, kind: EC2NodeClass, name: c}\n---\n"
        NodepoolObjects *o = load(POOL("fixed", "  replicas: 3\n  limits: {nodes: 4}\n"
                                       "  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s}\n")
                                  POOL("zero", "  replicas: 0\n") POOL("dynamic", "") NC_HEAD NC_BASE,
                                  NULL);
#undef POOL
        size_t seen = 0;
        for (size_t i = 0; i < o->n_pools; i++) {
                const SolverNodePool *p = &o->pools[i];
                bool fixed = streq(p->name, "fixed"), zero = streq(p->name, "zero");
                assert_int_equal(p->is_static, fixed || zero);
                assert_int_equal(p->replicas, fixed ? 3 : 0);
                assert_int_equal(p->has_node_limit, fixed);
                assert_int_equal(p->node_limit, fixed ? 4 : 0);
                seen++;
        }
        assert_int_equal(seen, 3);
        nodepool_objects_free(o);
}

/* Gte and Lte, percentage eviction thresholds, ephemeral reservations, RAID0, the root volume. */
static void test_karpenter_accepted(void **state) {
        NodepoolObjects *o = load(NP_HEAD "      requirements:\n"
                                  "        - {key: karpenter.k8s.aws/instance-cpu, operator: Gte, values: ['4']}\n"
                                  "        - {key: karpenter.k8s.aws/instance-cpu, operator: Lte, values: ['8']}\n"
                                  "---\n" NC_HEAD NC_BASE
                                  "  instanceStorePolicy: RAID0\n"
                                  "  blockDeviceMappings:\n"
                                  "    - {deviceName: /dev/xvda, ebs: {volumeSize: 40Gi}}\n"
                                  "    - {deviceName: /dev/xvdb, ebs: {volumeSize: 500Gi}}\n"
                                  "  kubelet: {evictionHard: {memory.available: 5%, nodefs.available: 15%},"
                                  " kubeReserved: {ephemeral-storage: 3Gi}}\n",
                                  NULL);
        const SolverNodePool *p = &o->pools[0];
        assert_int_equal(o->extra[0].balanced_k, 0);
        assert_int_equal(p->n_requirements, 2);
        assert_int_equal(p->requirements[0].op, SOLVER_OP_GT);
        assert_string_equal(p->requirements[0].values[0], "3");
        assert_int_equal(p->requirements[1].op, SOLVER_OP_LT);
        assert_string_equal(p->requirements[1].values[0], "9");
        const NodeClass *nc = &o->classes[0];
        /* AL2023: the kubelet's volume is the root device, not the bigger second one */
        assert_int_equal(nc->root_volume_bytes, 40 * GI);
        assert_true(nc->kubelet.has_eviction_memory_pct);
        assert_true(nc->kubelet.eviction_memory_pct == 5.0);
        assert_true(nc->kubelet.has_eviction_nodefs_pct);
        assert_true(nc->kubelet.has_kube_reserved_ephemeral);
        assert_int_equal(nc->kubelet.kube_reserved_ephemeral, 3 * GI);
        assert_true(nc->kubelet.instance_store_raid0);
        nodepool_objects_free(o);
        /* a bottlerocket@ alias without amiFamily: the kubelet's volume is Bottlerocket's data
         * volume /dev/xvdb */
        o = load(NP_HEAD "---\n" NC_HEAD "spec:\n  role: r\n  amiSelectorTerms: [{alias: bottlerocket@latest}]\n"
                 "  subnetSelectorTerms: [{id: subnet-1}]\n  securityGroupSelectorTerms: [{id: sg-1}]\n"
                 "  blockDeviceMappings:\n"
                 "    - {deviceName: /dev/xvda, ebs: {volumeSize: 4Gi}}\n"
                 "    - {deviceName: /dev/xvdb, ebs: {volumeSize: 60Gi}}\n",
                 NULL);
        assert_string_equal(o->classes[0].ami_family, "Bottlerocket");
        assert_int_equal(o->classes[0].root_volume_bytes, 60 * GI);
        nodepool_objects_free(o);

        /* the allocatable model takes them as the kubelet does */
        SolverKubelet k = { .has_eviction_memory_pct = true, .eviction_memory_pct = 5,
                            .has_eviction_nodefs_pct = true, .eviction_nodefs_pct = 15,
                            .has_kube_reserved_ephemeral = true, .kube_reserved_ephemeral = 3 * GI };
        SolverResources cap = { .v = { [SOLVER_RES_CPU] = 4000, [SOLVER_RES_MEMORY] = 16 * GI,
                                       [SOLVER_RES_EPHEMERAL] = 100 * GI } }, a;
        assert_int_equal(solver_kubelet_allocatable(&cap, 4, 15, &k, 0, &a), 0);
        int64_t pods = 4 * 14 + 2;
        assert_int_equal(a.v[SOLVER_RES_MEMORY], 16 * GI - (11 * pods + 255) * MI - (16 * GI) / 20);
        assert_int_equal(a.v[SOLVER_RES_EPHEMERAL], 100 * GI - 3 * GI - 15 * GI);

        o = load(NP_HEAD "  disruption: {consolidationPolicy: Balanced, consolidationThreshold: 3}\n---\n" NC_HEAD NC_BASE,
                 NULL);
        assert_string_equal(o->extra[0].consolidation_policy, "Balanced");
        assert_int_equal(o->extra[0].balanced_k, 3);
        nodepool_objects_free(o);
        /* limits.nodes: Karpenter's node count, beside the resource limits */
        o = load(NP_HEAD "  limits: {nodes: 3, cpu: '16'}\n---\n" NC_HEAD NC_BASE, NULL);
        assert_true(o->pools[0].has_node_limit);
        assert_int_equal(o->pools[0].node_limit, 3);
        assert_int_equal(o->pools[0].limits.v[SOLVER_RES_CPU], 16000);
        assert_int_equal(o->pools[0].limits.v[SOLVER_RES_PODS], -1);
        nodepool_objects_free(o);
        o = load(NP_HEAD "  limits: {nodes: '0'}\n---\n" NC_HEAD NC_BASE, NULL);
        assert_true(o->pools[0].has_node_limit);
        assert_int_equal(o->pools[0].node_limit, 0);
        assert_int_equal(o->pools[0].limits.v[SOLVER_RES_CPU], -1);
        nodepool_objects_free(o);
        o = load(NP_HEAD "  disruption: {consolidationPolicy: Balanced}\n---\n" NC_HEAD NC_BASE, NULL);
        assert_int_equal(o->extra[0].balanced_k, 2); /* Karpenter's BalancedK */
        nodepool_objects_free(o);
}

/* The class's userData goes before nodesmith's parts: a MIME document part by part (closed or,
 * as Karpenter's AL2023 example writes it, not), anything else as one part typed by its start. */
static void test_userdata_merge(void **state) {
        const char *labels[] = { "a=b", NULL };
        cJSON *kubelet = cJSON_Parse("{\"maxPods\": 42, \"clusterDNS\": [\"10.0.0.10\"]}");
        UserDataSpec s = { .cluster_name = "c", .api_server_endpoint = "https://k", .certificate_authority = "Q0E=",
                           .cidr = "10.100.0.0/16", .labels = labels, .coordinator = "tls+tcp://x:1",
                           .coordinator_ca_pem = "PEM", .token = "t", .nodepool = "p", .kubelet = kubelet,
                           .raid0 = true,
                           .user_data = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n"
                                        "--//\nContent-Type: application/node.eks.aws\n\nkind: NodeConfig\n\n"
                                        "--//\nContent-Type: text/x-shellscript\n\n#!/bin/bash\necho hi\n--//\n" };
        char *ud = NULL;
        assert_int_equal(userdata_render(&s, &ud), 0);
        const char *first = strstr(ud, "kind: NodeConfig"), *script = strstr(ud, "echo hi"),
                   *ours = strstr(ud, "\"apiVersion\":");
        assert_non_null(first);
        assert_non_null(script);
        assert_non_null(ours);
        assert_true(first < script && script < ours);
        assert_non_null(strstr(ud, "\"maxPods\":\t42"));
        assert_non_null(strstr(ud, "\"clusterDNS\":"));
        assert_non_null(strstr(ud, "\"strategy\":\t\"RAID0\""));
        /* graceful shutdown is the agent's: the kubelet's off, logind's delay raised and reloaded */
        assert_non_null(strstr(ud, "\"shutdownGracePeriod\":\t\"0s\""));
        assert_non_null(strstr(ud, "\"path\":\t\"/etc/systemd/logind.conf.d/50-nodesmith-shutdown.conf\""));
        assert_non_null(strstr(ud, "\"systemctl kill --signal=SIGHUP systemd-logind.service\""));
        free(ud);

        s.user_data = "#!/bin/bash\necho plain\n";
        assert_int_equal(userdata_render(&s, &ud), 0);
        assert_non_null(strstr(ud, "Content-Type: text/x-shellscript\nMIME-Version: 1.0\n\n#!/bin/bash\necho plain"));
        free(ud);

        s.user_data = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"B\"\n\nno part at all\n";
        assert_int_equal(userdata_render(&s, &ud), -EINVAL);
        cJSON_Delete(kubelet);
}

static const cJSON *at(const cJSON *j, const char *path) {
        char buf[256], *save = NULL;
        snprintf(buf, sizeof buf, "%s", path);
        for (char *k = strtok_r(buf, "/", &save); k && j; k = strtok_r(NULL, "/", &save))
                j = cJSON_GetObjectItemCaseSensitive(j, k);
        return j;
}

/* Bottlerocket: the user's TOML kept but where Karpenter overwrites it; the agent as a host
 * container. */
static void test_userdata_bottlerocket(void **state) {
        const char *labels[] = { "nodesmith.io/nodepool=p", "team=web", NULL };
        const char *taints[] = { "dedicated=web:NoSchedule", "gpu:NoExecute", NULL };
        cJSON *kubelet = cJSON_Parse("{\"maxPods\": 50, \"clusterDNS\": [\"10.0.0.10\"], \"imageGCHighThresholdPercent\": 85,"
                                     " \"evictionHard\": {\"memory.available\": \"5%\"}, \"cpuCFSQuota\": false}");
        UserDataSpec s = { .cluster_name = "c", .api_server_endpoint = "https://k", .certificate_authority = "Q0E=",
                           .labels = labels, .taints = taints, .coordinator = "tls+tcp://x:1",
                           .coordinator_ca_pem = "-----BEGIN CERTIFICATE-----\n", .token = "secret", .nodepool = "p",
                           .kubelet = kubelet, .raid0 = true, .agent_image = "registry.example/agent:1",
                           .user_data = "[settings.kubernetes]\ncluster-name = \"theirs\"\nkube-api-qps = 30\n"
                                        "[settings.kubernetes.node-labels]\nteam = \"db\"\nowner = \"me\"\n"
                                        "[settings.kubernetes.node-taints]\nold = [\"x:NoSchedule\"]\n"
                                        "[settings.kubernetes.eviction-hard]\n\"nodefs.available\" = \"10%\"\n"
                                        "[settings.autoscaling]\nshould-wait = true\n"
                                        "[settings.kernel]\nlockdown = \"integrity\"\n" };
        char *ud = NULL, *err = NULL;
        assert_int_equal(userdata_render_bottlerocket(&s, &ud), 0);
        cJSON *j = NULL;
        assert_int_equal(toml_parse_json(ud, &j, &err), 0);
        const cJSON *k = at(j, "settings/kubernetes");
        assert_string_equal(cJSON_GetStringValue(at(k, "cluster-name")), "c");       /* Karpenter's */
        assert_string_equal(cJSON_GetStringValue(at(k, "api-server")), "https://k");
        assert_int_equal(at(k, "kube-api-qps")->valueint, 30);                         /* the user's */
        assert_string_equal(cJSON_GetStringValue(at(j, "settings/kernel/lockdown")), "integrity");
        assert_string_equal(cJSON_GetStringValue(at(k, "node-labels/team")), "web");  /* merged, the pool's win */
        assert_string_equal(cJSON_GetStringValue(at(k, "node-labels/owner")), "me");
        assert_null(at(k, "node-taints/old"));                                           /* replaced */
        assert_string_equal(cJSON_GetStringValue(cJSON_GetArrayItem(at(k, "node-taints/dedicated"), 0)), "web:NoSchedule");
        assert_string_equal(cJSON_GetStringValue(cJSON_GetArrayItem(at(k, "node-taints/gpu"), 0)), ":NoExecute");
        assert_int_equal(at(k, "max-pods")->valueint, 50);
        assert_string_equal(cJSON_GetStringValue(at(k, "cluster-dns-ip")), "10.0.0.10");
        assert_string_equal(cJSON_GetStringValue(at(k, "image-gc-high-threshold-percent")), "85");
        assert_true(cJSON_IsFalse(at(k, "cpu-cfs-quota-enforced")));
        /* the class's evictionHard replaces the user's table, as Karpenter's does */
        assert_string_equal(cJSON_GetStringValue(at(k, "eviction-hard/memory.available")), "5%");
        assert_null(at(k, "eviction-hard/nodefs.available"));
        assert_true(cJSON_IsFalse(at(j, "settings/autoscaling/should-wait")));
        assert_non_null(at(j, "settings/bootstrap-commands/000-mount-instance-storage/commands"));
        const cJSON *hc = at(j, "settings/host-containers/nodesmith");
        assert_string_equal(cJSON_GetStringValue(at(hc, "source")), "registry.example/agent:1");
        assert_true(cJSON_IsTrue(at(hc, "superpowered")));
        char *conf = NULL;
        size_t n = 0;
        const char *b64 = cJSON_GetStringValue(at(hc, "user-data"));
        assert_int_equal(base64_decode(b64, strlen(b64), 0, (void **) &conf, &n), 0);
        assert_non_null(strstr(conf, "token = secret\nnodepool = p\nroot = /.bottlerocket/rootfs\n"));
        assert_non_null(strstr(conf, "-----BEGIN CERTIFICATE-----"));
        free(conf);
        cJSON_Delete(j);
        free(ud);

        s.user_data = "[settings.kubernetes\n";
        assert_int_equal(userdata_render_bottlerocket(&s, &ud), -EBADMSG);
        s.user_data = NULL;
        s.agent_image = NULL;
        assert_int_equal(userdata_render_bottlerocket(&s, &ud), -EINVAL);
        cJSON_Delete(kubelet);
}

static const NodeReservation *lookup(const char *node_class, size_t *ret_n, void *userdata) {
        static const NodeReservation rs[] = {
                { .id = "cr-a", .instance_type = "m5.large", .zone = "us-east-1b", .reservation_type = "default",
                  .state = "active", .available = 2 },
                { .id = "cr-used", .instance_type = "m5.large", .zone = "us-east-1a", .reservation_type = "default",
                  .state = "active", .available = 0 },
                { .id = "cr-block", .instance_type = "p5.48xlarge", .zone = "us-east-1a",
                  .reservation_type = "capacity-block", .state = "active", .available = 1 },
                { .id = "cr-old", .instance_type = "m5.large", .zone = "us-east-1a", .reservation_type = "default",
                  .state = "active", .end_date = 1000, .available = 3 },
        };
        *ret_n = streq(node_class, "c") ? ELEMENTSOF(rs) : 0;
        return *ret_n ? rs : NULL;
}

/* A NodePool admitting capacity type reserved gets one pool per usable reservation of its class,
 * just before it: the reservation's type and zone, on-demand offerings, at most the instances left. */
static void test_reservation_pools(void **state) {
        NodepoolObjects *o = load(NP_HEAD "      requirements:\n"
                                  "        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}\n"
                                  "---\napiVersion: nodesmith.io/v1\nkind: NodePool\nmetadata: {name: spot}\n"
                                  "spec:\n  template:\n    spec:\n"
                                  "      nodeClassRef: {group: nodesmith.io, kind: EC2NodeClass, name: c}\n"
                                  "      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]\n"
                                  "---\n" NC_HEAD NC_BASE "  capacityReservationSelectorTerms: [{tags: {team: ml}}]\n",
                                  NULL);
        SolverArena *a = NULL;
        assert_int_equal(solver_arena_new(&a), 0);
        SolverNodePool *pools;
        size_t n, *base;
        const NodeReservation **which;
        assert_int_equal(reservation_pools(a, o->pools, o->n_pools, lookup, NULL, 2000, &pools, &n, &base, &which), 0);
        assert_int_equal(n, o->n_pools + 1); /* cr-a only: cr-used is used up, cr-block a block, cr-old over */
        size_t k = 0;
        while (k < n && !which[k])
                k++;
        assert_true(k < n);
        const SolverNodePool *rp = &pools[k], *bp = &pools[k + 1];
        assert_string_equal(rp->name, "p/cr-a");
        assert_string_equal(bp->name, "p");
        assert_int_equal(base[k], base[k + 1]);
        assert_true(rp->has_node_limit);
        assert_int_equal(rp->node_limit, 2);
        bool type = false, zone = false, od = false;
        for (size_t i = 0; i < rp->n_requirements; i++) {
                const SolverRequirement *q = &rp->requirements[i];
                const char *key = solver_canonical_label_key(q->key);
                type |= streq(key, SOLVER_LABEL_INSTANCE_TYPE) && streq(q->values[0], "m5.large");
                zone |= streq(key, SOLVER_LABEL_ZONE) && streq(q->values[0], "us-east-1b");
                if (streq(key, SOLVER_LABEL_CAPACITY_TYPE)) {
                        assert_int_equal(q->n_values, 1);
                        od |= streq(q->values[0], "on-demand");
                }
        }
        assert_true(type && zone && od);
        bool id = false;
        for (size_t i = 0; i < rp->n_labels; i++)
                id |= streq(rp->labels[i].key, RESERVATION_LABEL_ID) && streq(rp->labels[i].value, "cr-a");
        assert_true(id);
        /* the spot-only pool admits no reserved capacity */
        for (size_t i = 0; i < n; i++)
                if (streq(pools[i].name, "spot"))
                        assert_false(reservation_pool_admits(&pools[i]));
        assert_non_null(reservation_refusal(&(NodeReservation) { .state = "active", .reservation_type = "capacity-block" }, 0));
        assert_true(reservation_price(1.0) < 1e-6);
        /* pods: reserved-only go where a reservation id exists, on-demand-only where none does,
         * spot-or-reserved splits (the reservation first), spot-only and bound pods unchanged */
        static const char *const spot_res[] = { "spot", "reserved" };
        const SolverRequirement q_sr = { "karpenter.sh/capacity-type", SOLVER_OP_IN, spot_res, 2, 0 };
        const SolverTerm t_sr = { &q_sr, 1 };
        SolverPod pods[4] = {
                { .name = "res", .node_selector = (SolverLabel[]) { { "karpenter.sh/capacity-type", "reserved" } },
                  .n_node_selector = 1 },
                { .name = "od", .node_selector = (SolverLabel[]) { { "karpenter.sh/capacity-type", "on-demand" } },
                  .n_node_selector = 1 },
                { .name = "spot-res", .required_terms = &t_sr, .n_required_terms = 1 },
                { .name = "bound", .node_name = "n1", .node_selector = (SolverLabel[]) { { "karpenter.sh/capacity-type", "reserved" } },
                  .n_node_selector = 1 },
        };
        const SolverPod *out = NULL;
        assert_int_equal(reservation_pods(a, pods, 4, &out), 0);
        assert_ptr_not_equal(out, pods);
        const SolverLabel in_res[] = { { "karpenter.sh/capacity-type", "reserved" }, { RESERVATION_LABEL_ID, "cr-a" } };
        const SolverLabel plain_od[] = { { "karpenter.sh/capacity-type", "on-demand" } };
        const SolverLabel spot[] = { { "karpenter.sh/capacity-type", "spot" } };
        /* a term matches labels when each of its requirements does */
#define TERM_OK(t, l) ({ bool _ok = true; for (size_t _i = 0; _i < (t)->n_reqs; _i++) _ok = _ok && \
                         solver_requirement_matches_labels(&(t)->reqs[_i], l, ELEMENTSOF(l)); _ok; })
        assert_int_equal(out[0].n_node_selector, 0);
        assert_int_equal(out[0].n_required_terms, 1);
        assert_true(TERM_OK(&out[0].required_terms[0], in_res));
        assert_false(TERM_OK(&out[0].required_terms[0], plain_od));
        assert_true(TERM_OK(&out[1].required_terms[0], plain_od));
        assert_false(TERM_OK(&out[1].required_terms[0], in_res));
        assert_int_equal(out[2].n_required_terms, 2);
        assert_true(TERM_OK(&out[2].required_terms[0], in_res));
        assert_true(TERM_OK(&out[2].required_terms[1], spot));
        assert_false(TERM_OK(&out[2].required_terms[0], plain_od) || TERM_OK(&out[2].required_terms[1], plain_od));
        assert_int_equal(out[3].n_node_selector, 1); /* bound: left alone */
#undef TERM_OK
        /* other terms do not drift a node by their text (Karpenter hashes them out): what they
         * select does */
        static const struct {
                const char *a, *b;
                bool same;
        } pairs[] = {
                { "{\"role\": \"r\", \"capacityReservationSelectorTerms\": [{\"id\": \"cr-1\"}]}",
                  "{\"role\": \"r\", \"capacityReservationSelectorTerms\": [{\"id\": \"cr-2\"}]}", true },
                { "{\"role\": \"r\", \"securityGroupSelectorTerms\": [{\"id\": \"sg-1\"}]}",
                  "{\"role\": \"r\", \"securityGroupSelectorTerms\": [{\"tags\": {\"a\": \"b\"}}]}", true },
                { "{\"role\": \"r\", \"subnetSelectorTerms\": [{\"id\": \"subnet-1\"}], \"ipPrefixCount\": 1}",
                  "{\"role\": \"r\", \"subnetSelectorTerms\": [{\"id\": \"subnet-2\"}]}", true },
                /* the family counts by its value, written either way */
                { "{\"role\": \"r\", \"amiSelectorTerms\": [{\"alias\": \"al2023@latest\"}]}",
                  "{\"role\": \"r\", \"amiFamily\": \"AL2023\", \"amiSelectorTerms\": [{\"id\": \"ami-1\"}]}", true },
                { "{\"role\": \"r\", \"amiSelectorTerms\": [{\"alias\": \"bottlerocket@latest\"}]}",
                  "{\"role\": \"r\", \"amiSelectorTerms\": [{\"alias\": \"al2023@latest\"}]}", false },
                { "{\"role\": \"r\", \"amiFamily\": \"Custom\", \"amiSelectorTerms\": [{\"id\": \"ami-1\"}]}",
                  "{\"role\": \"r\", \"amiFamily\": \"AL2023\", \"amiSelectorTerms\": [{\"id\": \"ami-1\"}]}", false },
                /* what is not a selector does */
                { "{\"role\": \"r\", \"userData\": \"x\"}", "{\"role\": \"r\", \"userData\": \"y\"}", false },
                { "{\"role\": \"r\", \"tags\": {\"a\": \"1\"}}", "{\"role\": \"r\"}", false },
        };
        for (size_t i = 0; i < ELEMENTSOF(pairs); i++) {
                char h1[DISRUPTION_CLASS_HASH_SIZE], h2[DISRUPTION_CLASS_HASH_SIZE], buf[512];
                snprintf(buf, sizeof buf, "{\"spec\": %s}", pairs[i].a);
                cJSON *c1 = cJSON_Parse(buf);
                snprintf(buf, sizeof buf, "{\"spec\": %s}", pairs[i].b);
                cJSON *c2 = cJSON_Parse(buf);
                disruption_class_hash(c1, h1);
                disruption_class_hash(c2, h2);
                assert_true(disruption_class_hash_current(h1));
                assert_int_equal(strlen(h1), 19);
                if (streq(h1, h2) != pairs[i].same)
                        fail_msg("class hash pair %zu: %s and %s", i, h1, h2);
                cJSON_Delete(c1);
                cJSON_Delete(c2);
        }
        /* an older coordinator's label (no version) is not compared */
        assert_false(disruption_class_hash_current("0123456789abcdef"));
        assert_false(disruption_class_hash_current(NULL));
        assert_false(disruption_class_hash_current("v2"));
        /* the family a class launches */
        cJSON *spec = cJSON_Parse("{\"amiSelectorTerms\": [{\"alias\": \"bottlerocket@v1.20.0\"}]}");
        assert_string_equal(nodeclass_ami_family(spec), "Bottlerocket");
        cJSON_Delete(spec);
        spec = cJSON_Parse("{\"amiSelectorTerms\": [{\"id\": \"ami-1\"}]}");
        assert_string_equal(nodeclass_ami_family(spec), "AL2023");
        cJSON_Delete(spec);
        solver_arena_free(a);
        nodepool_objects_free(o);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_nodepool),
                cmocka_unit_test(test_nodepool_errors),
                cmocka_unit_test(test_pod_requests),
                cmocka_unit_test(test_pod_scheduling_fields),
                cmocka_unit_test(test_workloads_and_volumes),
                cmocka_unit_test(test_nodeclass_and_node),
                cmocka_unit_test(test_durations),
                cmocka_unit_test(test_convert_v1beta1_with_kubelet),
                cmocka_unit_test(test_convert_provisioner),
                cmocka_unit_test(test_yaml_anchors_and_emitter),
                cmocka_unit_test(test_karpenter_refusals),
                cmocka_unit_test(test_karpenter_accepted),
                cmocka_unit_test(test_reservation_pools),
                cmocka_unit_test(test_static_nodepool),
                cmocka_unit_test(test_userdata_merge),
                cmocka_unit_test(test_userdata_bottlerocket),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
