/* SPDX-License-Identifier: Apache-2.0 */
/* User data for a node nodesmith launches. */
#pragma once

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* User data for an AL2023 EKS node launched by nodesmith: a MIME multipart document holding the
 * NodeConfig (node.eks.aws/v1alpha1, part type application/node.eks.aws) that nodeadm reads, and
 * a cloud-config part that writes the agent's configuration (/etc/nodesmith/agent.conf, ca.crt,
 * token; mode 0600). The same layout as bootstrap/userdata/al2023-userdata.py, which documents
 * it; both are checked against each other by the tests. */

typedef struct UserDataSpec {
        const char *cluster_name;
        const char *api_server_endpoint;   /* https://... */
        const char *certificate_authority; /* the cluster CA, base64 (as EKS gives it) */
        const char *cidr;                  /* service CIDR */
        int max_pods;                      /* 0: nodeadm's default */
        const char *const *labels;         /* "key=value", NULL-terminated; may be NULL */
        const char *const *taints;         /* "key[=value]:Effect", NULL-terminated; may be NULL */
        const char *coordinator;           /* tls+tcp://HOST:PORT */
        const char *coordinator_ca_pem;
        const char *tls_server_name;       /* may be NULL */
        const char *token;
        const char *nodepool;
        const char *extra_settings;        /* more agent.conf lines ("key = value\n"), may be NULL */
        const cJSON *kubelet;              /* EC2NodeClass spec.kubelet (KubeletConfiguration field
                                            * names): merged into the NodeConfig's kubelet config */
        const char *user_data;             /* EC2NodeClass spec.userData: MIME parts (or the whole
                                            * text as one part) put before nodesmith's, as Karpenter
                                            * does on AL2023 */
        bool raid0;                        /* instanceStorePolicy RAID0: nodeadm's localStorage */
        const char *agent_image;           /* Bottlerocket: the agent's host container image */
} UserDataSpec;

#define USER_DATA_MAX (16 * 1024) /* EC2's limit, before base64 */

/* The document, malloc'ed. -EINVAL names nothing; values with newlines or '#' are refused. */
int userdata_render(const UserDataSpec *spec, char **ret);

/* Whether the agent's settings can go into user data (no newline or '#' in a value). */
bool userdata_spec_safe(const UserDataSpec *spec);

/* Bottlerocket (userdata-bottlerocket.c): TOML settings, spec->user_data (TOML) merged as
 * Karpenter merges it, the agent as a host container of spec->agent_image. -EBADMSG: the
 * user's TOML does not parse. */
int userdata_render_bottlerocket(const UserDataSpec *spec, char **ret);
