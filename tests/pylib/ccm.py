"""The AWS cloud controller manager (k8s.io/cloud-provider-aws, built by `make aws-tools`) for
tests on the real control plane (tests/pylib/cluster.py), against moto's EC2 behind
tests/fakes/ec2proxy.py; docs/testing-aws.md.

    ccm = CloudControllerManager(workdir, cluster, ec2_endpoint, network, cluster_name).start()
    ccm.proc, ccm.imds        # nsharness.Proc of the CCM and of its IMDS (AWS's metadata mock)
    ccm.stop()

It runs as the ServiceAccount and RBAC of the module's own examples/existing-cluster/base
manifests (applied from Go's module cache as published), with a token per controller as those
manifests configure it, controllers cloud-node and cloud-node-lifecycle, node monitor period 1 s.
Its cloud config sets Region, VPC, SubnetID and KubernetesClusterID (instances found by name
must carry kubernetes.io/cluster/<cluster_name>) and overrides every AWS endpoint it could call
to 127.0.0.1: EC2, ELB, ELBv2 and KMS to the proxy, IMDS to an amazon-ec2-metadata-mock standing
in for the control plane host's. Credentials: the stack's test keys."""
import json
import os
import ssl
import subprocess
import urllib.request

from nsharness import BUILD, ROOT, Proc, free_port, wait_for

REGION = "us-east-1"
ACCESS_KEY, SECRET_KEY = "AKIAIOSFODNN7EXAMPLE", "dummy-secret"
RBAC = ("service-account.yaml", "cluster-role.yaml", "cluster-role-binding.yaml",
        "apiserver-authentication-reader-role-binding.yaml")


def binaries(build=BUILD):
    """(CCM, metadata mock) paths; SystemExit naming `make aws-tools` when one is missing."""
    paths = (os.path.join(build, "ccm-aws", "aws-cloud-controller-manager"),
             os.path.join(build, "ec2-metadata-mock", "ec2-metadata-mock"))
    for b in paths:
        if not os.access(b, os.X_OK):
            raise SystemExit(f"{b} not built: run make aws-tools")
    return paths


def module_dir():
    """The CCM module's directory in Go's module cache, as tools/ccm-aws/go.mod pins it."""
    go = os.environ.get("GO") or subprocess.run(["bash", os.path.join(ROOT, "bootstrap", "go.sh")],
                                                capture_output=True, text=True, check=True,
                                                timeout=30).stdout.strip()
    out = subprocess.run([go, "mod", "download", "-json", "k8s.io/cloud-provider-aws"],
                         cwd=os.path.join(ROOT, "tools", "ccm-aws"), capture_output=True,
                         text=True, timeout=120, check=True,
                         env=dict(os.environ, GOFLAGS="-mod=readonly", GOTOOLCHAIN="local")).stdout
    return json.loads(out)["Dir"]


def cloud_config(path, network, cluster_name, ec2_url, imds_url):
    overrides = [("EC2", ec2_url), ("Elastic Load Balancing", ec2_url),
                 ("Elastic Load Balancing v2", ec2_url), ("KMS", ec2_url), ("ec2imds", imds_url)]
    subnet = next(iter(network["subnets"].values()))
    with open(path, "w") as f:
        f.write(f"[Global]\nRegion = {REGION}\nVPC = {network['vpc']}\nSubnetID = {subnet}\n"
                f"KubernetesClusterID = {cluster_name}\nDisableSecurityGroupIngress = true\n")
        for i, (service, url) in enumerate(overrides, 1):
            f.write(f'\n[ServiceOverride "{i}"]\nService = {service}\nRegion = {REGION}\n'
                    f"URL = {url}\nSigningRegion = {REGION}\n")
    return path


class CloudControllerManager:
    def __init__(self, workdir, cluster, ec2_endpoint, network, cluster_name, build=BUILD):
        self.workdir = workdir
        self.cluster = cluster
        self.ec2_endpoint = ec2_endpoint
        self.network = network
        self.cluster_name = cluster_name
        self.build = build
        self.proc = self.imds = None
        self.port = None

    def log(self):
        with open(self.proc.log_path, errors="replace") as f:
            return f.read()

    def start(self, timeout=90):
        ccm, aemm = binaries(self.build)
        c, d = self.cluster, self.workdir
        base = os.path.join(module_dir(), "examples", "existing-cluster", "base")
        for f in RBAC:
            c.kubectl("apply", "-f", os.path.join(base, f))
        kubeconfig = c.service_account_kubeconfig("kube-system", "cloud-controller-manager")
        imds_port, self.port = free_port(), free_port()
        self.imds = Proc("aemm-control-plane", [aemm, "--hostname", "127.0.0.1", "--port",
                                                str(imds_port)], d, env={"HOME": d})
        conf = cloud_config(os.path.join(d, "cloud.conf"), self.network, self.cluster_name,
                            self.ec2_endpoint, f"http://127.0.0.1:{imds_port}")
        self.proc = Proc("aws-cloud-controller-manager", [
            ccm, "--cloud-provider=aws", f"--cloud-config={conf}", f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={self.port}",
            f"--cert-dir={os.path.join(d, 'ccm-certs')}", "--use-service-account-credentials=true",
            "--configure-cloud-routes=false", "--controllers=cloud-node,cloud-node-lifecycle",
            "--leader-elect=false", "--node-monitor-period=1s", "--v=2"], d, env={
                "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_REGION": REGION, "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "HOME": d})
        insecure = ssl._create_unverified_context()  # its serving certificate is self-signed

        def healthy():
            if not self.proc.alive():
                raise AssertionError("the CCM exited: " + self.log()[-3000:])
            with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/healthz", timeout=5,
                                        context=insecure) as r:
                return r.status == 200
        wait_for("the cloud controller manager's /healthz", healthy, timeout, 0.3)
        return self

    def stop(self):
        """Exit codes (CCM, metadata mock); a signal's is negative."""
        return tuple(p.stop(timeout=15) if p else None for p in (self.proc, self.imds))
