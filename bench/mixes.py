"""Realistic workload mixes for bench/optimum.py: NodePools and Deployments as Kubernetes objects.

Each mix is a list of NodePools (nodesmith.io/v1, Karpenter v1's schema) and of workloads
written the way EKS platform teams write them: web tiers, JVM services, batch CPU, GPU,
big-memory pods, mixed architectures, zonal HA, spot and on-demand. Sizes are in the issue's
table's ranges (40 to 5 000 pods); requests use the values teams actually pick (250m steps,
powers of two in memory).
"""

NODECLASS = {
    "apiVersion": "nodesmith.io/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "amiFamily": "AL2023",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": "nodesmith-node",
        "subnetSelectorTerms": [{"tags": {"nodesmith.io/discovery": "bench"}}],
        "securityGroupSelectorTerms": [{"tags": {"nodesmith.io/discovery": "bench"}}],
    },
}


def req(key, op, *values):
    return {"key": key, "operator": op, "values": list(values)}


def pool(name, capacity=("on-demand",), categories=("c", "m", "r"), arch=("amd64", "arm64"),
         extra=(), taints=(), weight=None):
    reqs = [req("nodesmith.io/capacity-type", "In", *capacity)]
    if categories:
        reqs.append(req("nodesmith.io/instance-category", "In", *categories))
        reqs.append(req("nodesmith.io/instance-generation", "Gt", "5"))
    reqs.append(req("kubernetes.io/arch", "In", *arch))
    reqs.extend(extra)
    spec = {"template": {"spec": {
        "nodeClassRef": {"group": "nodesmith.io", "kind": "EC2NodeClass", "name": "default"},
        "requirements": reqs}}}
    if taints:
        spec["template"]["spec"]["taints"] = list(taints)
    if weight is not None:
        spec["weight"] = weight
    return {"apiVersion": "nodesmith.io/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def deploy(name, replicas, cpu, memory, ns="default", gpu=None, selector=None, anti_host=False,
           spread_zone=False, spread_host=False, tolerations=None):
    labels = {"app": name}
    requests = {"cpu": cpu, "memory": memory}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    pod = {"containers": [{"name": name, "image": name, "resources": {"requests": requests}}]}
    if gpu:
        pod["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": str(gpu)}
    if selector:
        pod["nodeSelector"] = dict(selector)
    if anti_host:
        pod["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": labels}}]}}
    spreads = []
    if spread_zone:
        spreads.append({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": labels}})
    if spread_host:
        spreads.append({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": labels}})
    if spreads:
        pod["topologySpreadConstraints"] = spreads
    if tolerations:
        pod["tolerations"] = tolerations
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}


def daemonset(name, cpu, memory):
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": name, "image": name,
                                "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}}}


ARM = {"kubernetes.io/arch": "arm64"}
AMD = {"kubernetes.io/arch": "amd64"}
ON_DEMAND = {"nodesmith.io/capacity-type": "on-demand"}
GPU_TOL = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
DS = [daemonset("aws-node", "25m", "64Mi"), daemonset("kube-proxy", "100m", "128Mi")]


def microservices(n_deploy, replicas, seed):
    """n_deploy Deployments of the sizes a microservice platform runs, deterministically."""
    cpus = ["100m", "250m", "500m", "750m", "1", "1500m", "2"]
    mems = ["128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "3Gi", "4Gi", "6Gi", "8Gi"]
    x = seed
    out = []
    for i in range(n_deploy):
        x = (x * 1103515245 + 12345) % (1 << 31)
        c = cpus[x % len(cpus)]
        x = (x * 1103515245 + 12345) % (1 << 31)
        m = mems[x % len(mems)]
        out.append(deploy("svc-%02d" % i, replicas, c, m))
    return out


MIXES = [
    {"name": "web tier", "pools": [pool("default")], "workloads": [
        deploy("nginx", 150, "250m", "256Mi"), deploy("api", 100, "500m", "1Gi"),
        deploy("worker", 50, "1", "2Gi")]},
    {"name": "CPU-heavy services", "pools": [pool("default")], "workloads": [
        deploy("encoder", 40, "4", "4Gi"), deploy("render", 40, "2", "2Gi")]},
    {"name": "batch CPU", "pools": [pool("default")], "workloads": [
        deploy("batch-a", 300, "2", "2Gi"), deploy("batch-b", 100, "1", "512Mi")]},
    {"name": "big-memory pods", "pools": [pool("default")], "workloads": [
        deploy("cache", 20, "2", "64Gi"), deploy("analytics", 20, "4", "32Gi")]},
    {"name": "600 microservices", "pools": [pool("default")], "workloads": microservices(20, 30, 7)},
    {"name": "JVM services", "pools": [pool("default")], "workloads": [
        deploy("orders", 30, "1", "4Gi", anti_host=False), deploy("payments", 24, "2", "6Gi"),
        deploy("search", 16, "2", "8Gi", spread_zone=True), deploy("gateway", 24, "500m", "2Gi", spread_zone=True)]},
    {"name": "arm64 zonal", "pools": [pool("default")], "workloads": [
        deploy("edge", 60, "500m", "1Gi", selector=ARM, spread_zone=True),
        deploy("auth", 30, "1", "2Gi", selector=ARM, spread_zone=True)]},
    {"name": "zonal HA", "pools": [pool("default")], "workloads": [
        deploy("etcd-like", 6, "2", "8Gi", anti_host=True, spread_zone=True),
        deploy("ingress", 12, "1", "1Gi", anti_host=True),
        deploy("app", 60, "500m", "1Gi", spread_zone=True)]},
    {"name": "mixed arch", "pools": [pool("default")], "workloads": [
        deploy("legacy", 40, "1", "2Gi", selector=AMD), deploy("modern", 80, "500m", "1Gi", selector=ARM),
        deploy("any", 80, "750m", "1536Mi")]},
    {"name": "spot and on-demand", "pools": [pool("default", capacity=("spot", "on-demand"))], "workloads": [
        deploy("stateless", 120, "500m", "1Gi"), deploy("critical", 30, "1", "2Gi", selector=ON_DEMAND)]},
    {"name": "GPU inference", "pools": [
        pool("default"),
        pool("gpu", categories=(), arch=("amd64",), weight=50,
             extra=[req("nodesmith.io/instance-family", "In", "g5", "g6")],
             taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])], "workloads": [
        deploy("llm", 6, "8", "32Gi", gpu=1, tolerations=GPU_TOL),
        deploy("embed", 8, "4", "14Gi", gpu=1, tolerations=GPU_TOL),
        deploy("frontend", 40, "500m", "1Gi")]},
    {"name": "DaemonSets + web", "pools": [pool("default")], "workloads": DS + [
        deploy("nginx", 200, "250m", "512Mi"), deploy("api", 60, "1", "2Gi")]},
    {"name": "5 000-pod mix", "pools": [pool("default")], "large": True,
     "workloads": microservices(100, 50, 11)},
]
