#!/bin/sh
# Entry point of the nodesmith-agent Bottlerocket host container.
#
# Bottlerocket writes the host container's user-data (settings.host-containers.nodesmith.
# user-data, base64 in the settings, decoded here) to /.bottlerocket/host-containers/current/
# user-data. It holds agent.conf ("key = value" lines) followed by the coordinator's CA
# certificate in PEM; this splits the two into a private directory, points tls-ca at the CA and
# runs the agent. Extra arguments go to the agent (e.g. --check-config).
set -eu
user_data=${NODESMITH_USER_DATA:-/.bottlerocket/host-containers/current/user-data}
run_dir=${NODESMITH_RUN_DIR:-/run/nodesmith}

if [ ! -s "$user_data" ]; then
    echo "nodesmith-agent: no user-data at $user_data (set settings.host-containers.nodesmith.user-data)" >&2
    exit 2
fi
umask 077
mkdir -p "$run_dir"
awk -v conf="$run_dir/agent.conf" -v ca="$run_dir/ca.crt" '
    /^-----BEGIN CERTIFICATE-----/ { pem = 1 }
    { if (pem) print > ca; else print > conf }
    /^-----END CERTIFICATE-----/   { pem = 0 }
' "$user_data"
if [ -s "$run_dir/ca.crt" ]; then
    printf 'tls-ca = %s\n' "$run_dir/ca.crt" >> "$run_dir/agent.conf"
fi
# The agent acts as its node: the kubelet's own kubeconfig (docs/security.md). Its files (the
# cluster CA, the aws-iam-authenticator exec plugin) are host paths: seen here under the host's
# root file system.
host_root=${NODESMITH_HOST_ROOT:-/.bottlerocket/rootfs}
kubelet_kubeconfig=$host_root/etc/kubernetes/kubelet/kubeconfig
if [ -s "$kubelet_kubeconfig" ]; then
    sed -E "s#^([[:space:]]*(certificate-authority|command|client-certificate|client-key):[[:space:]]*\"?)/#\1$host_root/#" \
        "$kubelet_kubeconfig" > "$run_dir/kubelet-kubeconfig"
    printf 'kubeconfig = %s\n' "$run_dir/kubelet-kubeconfig" >> "$run_dir/agent.conf"
else
    echo "nodesmith-agent: no kubelet kubeconfig at $kubelet_kubeconfig; the agent cannot drain" >&2
fi
exec nodesmith-agent --config "$run_dir/agent.conf" "$@"
