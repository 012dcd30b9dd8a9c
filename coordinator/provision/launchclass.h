/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What an EC2NodeClass puts into a launch: the launch template's pieces (block devices,
 * metadata options, monitoring, public address, tags), the instance profile, and the kubelet
 * settings and user data the node boots with. The spec was checked by nodepool_parse_nodeclass()
 * first; strings point into it and live as long as it does. */

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "aws/ec2.h"

#define LAUNCHCLASS_MAX_DEVICES 16
#define LAUNCHCLASS_MAX_TAGS 40

typedef struct LaunchClass {
        const char *ami_family;          /* amiFamily, else the alias's family, else AL2023 */
        const char *instance_profile;    /* spec.instanceProfile, or NULL */
        const char *role;                /* spec.role, or NULL */
        Ec2BlockDevice devices[LAUNCHCLASS_MAX_DEVICES];
        size_t n_devices;
        unsigned hop_limit;
        const char *http_tokens, *http_endpoint, *http_protocol_ipv6;
        bool detailed_monitoring;
        bool enclave;                    /* enclaveOptions.enabled */
        const char *context;             /* spec.context: CreateFleet's Context */
        int associate_public_ip;         /* 0 unset, 1 true, 2 false (Ec2LaunchTemplateSpec's) */
        unsigned ip_prefix_count;        /* ipPrefixCount */
        Ec2Tag tags[LAUNCHCLASS_MAX_TAGS];
        size_t n_tags;
        const cJSON *kubelet;            /* spec.kubelet: KubeletConfiguration fields, or NULL */
        const char *user_data;           /* spec.userData, or NULL */
        bool raid0;                      /* instanceStorePolicy: RAID0 */
        bool selects_reservations;       /* capacityReservationSelectorTerms given */
} LaunchClass;

/* spec: the EC2NodeClass's spec (NULL: Karpenter's defaults for AL2023). */
int launchclass_from_spec(const cJSON *spec, LaunchClass *ret);

/* Whether a subnet or security group (id, name, VPC, tags) matches selector terms as Karpenter
 * reads them: terms ORed; within a term id, name, vpcID and every tag ANDed; names and tag
 * values may hold wildcards ("*", "*Public*"). No terms (NULL): true. */
bool launchclass_terms_match(const cJSON *terms, const char *id, const char *name, const char *vpc, const Ec2Tag *tags,
                             size_t n_tags);

/* The SSM parameter AWS publishes the image of an alias under (al2023@latest, al2023@vYYYYMMDD,
 * bottlerocket@VERSION) for Kubernetes k8s and arch (x86_64, arm64); -EINVAL for no alias. */
int launchclass_alias_parameter(const char *alias, const char *k8s, const char *arch, char *buf, size_t size);

/* The instance profile kept for a role: "<cluster>_<16 hex of sha256(region/nodeclass)>". */
int launchclass_profile_name(const char *cluster, const char *region, const char *nodeclass, char *buf,
                             size_t size);
