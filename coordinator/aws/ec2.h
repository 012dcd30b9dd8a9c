/* SPDX-License-Identifier: Apache-2.0 */
/* The EC2 and SSM client on the loop: retries, pages, typed answers. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "aws-credentials.h"
#include "http.h"

/* EC2 (Query API, Version 2016-11-15, XML answers) and SSM (JSON 1.1) for the coordinator, on
 * the sd-event loop. Every request is signed by libcurl (CURLOPT_AWS_SIGV4) with credentials
 * from the standard chain (aws-credentials.h). Describe* calls follow NextToken up to a cap;
 * throttling (RequestLimitExceeded, Throttling…), 5xx answers and transport failures are retried
 * with exponential backoff and jitter up to a bound; everything else is a typed error.
 *
 * Every call is asynchronous: it returns < 0 only when it could not be started (the callback is
 * then never called); otherwise the callback runs exactly once, on the loop, unless the client
 * is freed first. The callback takes ownership of `result` (NULL on failure) and frees it with
 * the free function named at the call. */

#define EC2_CLUSTER_TAG "nodesmith.io/cluster"
#define EC2_NODEPOOL_TAG "nodesmith.io/nodepool"
/* what EKS, Karpenter and the AWS cloud controller manager read: kubernetes.io/cluster/NAME=owned */
#define EC2_KUBERNETES_CLUSTER_TAG_PREFIX "kubernetes.io/cluster/"
#define EC2_EKS_CLUSTER_NAME_TAG "eks:eks-cluster-name"
#define EC2_MAX_FLEET_OVERRIDES 60
#define EC2_MAX_FILTERS 16
#define EC2_MAX_FILTER_VALUES 64

typedef struct Ec2Client Ec2Client;

typedef struct Ec2Config {
        const char *region;        /* required, e.g. "us-east-1" */
        const char *ec2_endpoint;  /* NULL: https://ec2.REGION.amazonaws.com/ */
        const char *ssm_endpoint;  /* NULL: https://ssm.REGION.amazonaws.com/ */
        const char *iam_endpoint;  /* NULL: https://iam.amazonaws.com/ (signed for us-east-1) */
        const char *cluster_name;  /* the value of nodesmith.io/cluster; required to terminate */
        unsigned max_attempts;     /* per request, first try included; 0: 8 */
        uint64_t backoff_base_usec;/* 0: 200 ms */
        uint64_t backoff_max_usec; /* 0: 20 s */
        unsigned max_pages;        /* per Describe* call; 0: 200 */
        size_t max_items;          /* per Describe* call; 0: 100000 */
        uint64_t timeout_usec;     /* per HTTP attempt; 0: 30 s */
} Ec2Config;

typedef enum Ec2ErrorKind {
        EC2_ERROR_NONE,
        EC2_ERROR_THROTTLED,             /* RequestLimitExceeded, Throttling… (after retries) */
        EC2_ERROR_INSUFFICIENT_CAPACITY, /* InsufficientInstanceCapacity and relatives */
        EC2_ERROR_INVALID_PARAMETER,     /* InvalidParameterValue, InvalidParameter…, Missing… */
        EC2_ERROR_NOT_FOUND,             /* Invalid*.NotFound, ParameterNotFound */
        EC2_ERROR_UNAUTHORIZED,          /* UnauthorizedOperation, AccessDenied */
        EC2_ERROR_AUTH_FAILURE,          /* AuthFailure, SignatureDoesNotMatch, bad key */
        EC2_ERROR_IDEMPOTENT_MISMATCH,   /* IdempotentParameterMismatch */
        EC2_ERROR_SERVER,                /* 5xx (after retries) */
        EC2_ERROR_TRANSPORT,             /* connection, time-out (after retries) */
        EC2_ERROR_PROTOCOL,              /* an answer we could not read, or over a cap */
        EC2_ERROR_CREDENTIALS,           /* no credentials from the chain */
        EC2_ERROR_OTHER,
        _EC2_ERROR_MAX,
} Ec2ErrorKind;

typedef struct Ec2Error {
        Ec2ErrorKind kind;
        int error;           /* -errno equivalent, < 0 */
        long status;         /* HTTP status of the last attempt, 0 for transport failures */
        unsigned attempts;   /* HTTP attempts made for the failing request */
        char code[96];       /* AWS error code, e.g. "InsufficientInstanceCapacity" */
        char message[512];
        char request_id[80];
} Ec2Error;

const char *ec2_error_kind_to_string(Ec2ErrorKind k);
/* The kind and -errno for an AWS error code and HTTP status. */
Ec2ErrorKind ec2_error_kind_from_code(const char *code, long status);
int ec2_error_kind_to_errno(Ec2ErrorKind k);
bool ec2_error_kind_retryable(Ec2ErrorKind k);

typedef struct Ec2Tag {
        char *key, *value;
} Ec2Tag;

typedef struct Ec2Filter {
        const char *name;              /* e.g. "tag:nodesmith.io/cluster", "instance-state-name" */
        const char *const *values;     /* n_values entries */
        size_t n_values;
} Ec2Filter;

/* Statistics over the client's life, for metrics. */
typedef struct Ec2Stats {
        uint64_t requests;      /* HTTP attempts */
        uint64_t retries;       /* attempts after the first */
        uint64_t throttled;     /* throttling answers seen */
        uint64_t errors;        /* calls that ended in an error */
} Ec2Stats;

int ec2_client_new(sd_event *e, HttpClient *http, AwsCredentialProvider *creds,
                   const Ec2Config *config, Ec2Client **ret);
/* Cancels everything in flight; no callback runs afterwards. */
Ec2Client *ec2_client_free(Ec2Client *c);
size_t ec2_client_in_flight(const Ec2Client *c);
const Ec2Stats *ec2_client_stats(const Ec2Client *c);
const char *ec2_client_cluster(const Ec2Client *c);

/* ---- DescribeInstanceTypes --------------------------------------------------------------- */

typedef struct Ec2Gpu {
        char *name, *manufacturer;
        unsigned count;
        uint64_t memory_mib; /* per GPU */
} Ec2Gpu;

typedef struct Ec2InstanceType {
        char *name;
        unsigned vcpus;
        uint64_t memory_mib;
        char **architectures; /* NULL-terminated: "x86_64", "arm64", "i386", "x86_64_mac" */
        Ec2Gpu *gpus;
        size_t n_gpus;
        unsigned max_enis, ipv4_per_eni;
        char *hypervisor;     /* "nitro", "xen", NULL for bare metal */
        bool bare_metal, current_generation, spot_supported, on_demand_supported;
        uint64_t instance_storage_gb; /* 0: none */
        char *network_performance;
} Ec2InstanceType;

typedef struct Ec2InstanceTypeList {
        Ec2InstanceType *items;
        size_t n;
} Ec2InstanceTypeList;
Ec2InstanceTypeList *ec2_instance_type_list_free(Ec2InstanceTypeList *l);

typedef void (*ec2_instance_types_done_t)(Ec2Client *c, const Ec2Error *error,
                                          Ec2InstanceTypeList *result, void *userdata);
/* names: NULL-terminated, or NULL for the whole catalogue. */
int ec2_describe_instance_types(Ec2Client *c, const char *const *names, const Ec2Filter *filters,
                                size_t n_filters, ec2_instance_types_done_t done, void *userdata);

/* ---- DescribeInstanceTypeOfferings (location-type availability-zone) ----------------------- */

typedef struct Ec2Offering {
        char *instance_type, *zone;
} Ec2Offering;
typedef struct Ec2OfferingList {
        Ec2Offering *items;
        size_t n;
} Ec2OfferingList;
Ec2OfferingList *ec2_offering_list_free(Ec2OfferingList *l);
typedef void (*ec2_offerings_done_t)(Ec2Client *c, const Ec2Error *error, Ec2OfferingList *result,
                                     void *userdata);
int ec2_describe_instance_type_offerings(Ec2Client *c, const Ec2Filter *filters, size_t n_filters,
                                         ec2_offerings_done_t done, void *userdata);

/* ---- DescribeSpotPriceHistory (Linux/UNIX; the latest record per type and zone) ------------ */

typedef struct Ec2SpotPrice {
        char *instance_type, *zone;
        double price;      /* USD per hour */
        int64_t timestamp; /* seconds since the epoch */
} Ec2SpotPrice;
typedef struct Ec2SpotPriceList {
        Ec2SpotPrice *items;
        size_t n;
} Ec2SpotPriceList;
Ec2SpotPriceList *ec2_spot_price_list_free(Ec2SpotPriceList *l);
typedef void (*ec2_spot_prices_done_t)(Ec2Client *c, const Ec2Error *error,
                                       Ec2SpotPriceList *result, void *userdata);
/* types: NULL-terminated or NULL (all); start_time: seconds since the epoch, 0 = now. */
int ec2_describe_spot_prices(Ec2Client *c, const char *const *types, int64_t start_time,
                             ec2_spot_prices_done_t done, void *userdata);

/* ---- DescribeSubnets / DescribeSecurityGroups ----------------------------------------------- */

typedef struct Ec2Subnet {
        char *id, *vpc_id, *zone, *zone_id, *cidr;
        uint64_t available_ips;
        Ec2Tag *tags;
        size_t n_tags;
} Ec2Subnet;
typedef struct Ec2SubnetList {
        Ec2Subnet *items;
        size_t n;
} Ec2SubnetList;
Ec2SubnetList *ec2_subnet_list_free(Ec2SubnetList *l);
typedef void (*ec2_subnets_done_t)(Ec2Client *c, const Ec2Error *error, Ec2SubnetList *result,
                                   void *userdata);
/* ids: NULL-terminated or NULL. */
int ec2_describe_subnets(Ec2Client *c, const char *const *ids, const Ec2Filter *filters,
                         size_t n_filters, ec2_subnets_done_t done, void *userdata);

typedef struct Ec2SecurityGroup {
        char *id, *name, *vpc_id;
        Ec2Tag *tags;
        size_t n_tags;
} Ec2SecurityGroup;
typedef struct Ec2SecurityGroupList {
        Ec2SecurityGroup *items;
        size_t n;
} Ec2SecurityGroupList;
Ec2SecurityGroupList *ec2_security_group_list_free(Ec2SecurityGroupList *l);
typedef void (*ec2_security_groups_done_t)(Ec2Client *c, const Ec2Error *error,
                                           Ec2SecurityGroupList *result, void *userdata);
int ec2_describe_security_groups(Ec2Client *c, const char *const *ids, const Ec2Filter *filters,
                                 size_t n_filters, ec2_security_groups_done_t done, void *userdata);

/* ---- DescribeImages ---------------------------------------------------------------------- */

typedef struct Ec2Image {
        char *id, *name, *architecture, *state, *owner_id;
        int64_t creation_date; /* seconds since the epoch */
        Ec2Tag *tags;
        size_t n_tags;
} Ec2Image;
typedef struct Ec2ImageList {
        Ec2Image *items; /* newest first */
        size_t n;
} Ec2ImageList;
Ec2ImageList *ec2_image_list_free(Ec2ImageList *l);
typedef void (*ec2_images_done_t)(Ec2Client *c, const Ec2Error *error, Ec2ImageList *result,
                                  void *userdata);
/* ids / owners: NULL-terminated or NULL; filters e.g. name, architecture, tag:K. The answer is
 * sorted newest first, so items[0] is the image to use. */
int ec2_describe_images(Ec2Client *c, const char *const *ids, const char *const *owners,
                        const Ec2Filter *filters, size_t n_filters, ec2_images_done_t done,
                        void *userdata);

/* ---- DescribeCapacityReservations ---------------------------------------------------------- */

typedef struct Ec2CapacityReservation {
        char *id, *owner_id, *instance_type, *zone, *zone_id, *platform, *tenancy;
        char *state;             /* active, expired, cancelled, pending, failed, scheduled, ... */
        char *match_criteria;    /* open, targeted */
        char *reservation_type;  /* default, capacity-block ("default" when EC2 leaves it out) */
        uint64_t total, available;
        int64_t end_date;        /* seconds since the epoch; 0: none (unlimited) */
        Ec2Tag *tags;
        size_t n_tags;
} Ec2CapacityReservation;
typedef struct Ec2CapacityReservationList {
        Ec2CapacityReservation *items;
        size_t n;
} Ec2CapacityReservationList;
Ec2CapacityReservationList *ec2_capacity_reservation_list_free(Ec2CapacityReservationList *l);
typedef void (*ec2_capacity_reservations_done_t)(Ec2Client *c, const Ec2Error *error,
                                                 Ec2CapacityReservationList *result, void *userdata);
/* ids: NULL-terminated or NULL (then MaxResults 1000 and NextToken pages, as EC2 allows only
 * without ids); filters e.g. state, owner-id, tag:K, tag-key, instance-match-criteria. An
 * unknown id is EC2_ERROR_NOT_FOUND. */
int ec2_describe_capacity_reservations(Ec2Client *c, const char *const *ids, const Ec2Filter *filters,
                                       size_t n_filters, ec2_capacity_reservations_done_t done,
                                       void *userdata);

/* ---- SSM GetParameter -------------------------------------------------------------------- */

typedef void (*ec2_ssm_parameter_done_t)(Ec2Client *c, const Ec2Error *error, char *value,
                                         void *userdata);
/* The callback takes the value (free()). E.g.
 * /aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id */
int ec2_ssm_get_parameter(Ec2Client *c, const char *name, ec2_ssm_parameter_done_t done,
                          void *userdata);

/* ---- IAM instance profiles (Query API 2010-05-08) ---------------------------------------- */

typedef struct Ec2IamRequest {
        const char *action;   /* GetInstanceProfile, CreateInstanceProfile, AddRoleToInstanceProfile,
                               * RemoveRoleFromInstanceProfile */
        const char *profile;  /* InstanceProfileName, required */
        const char *role;     /* RoleName (Add/Remove) */
        const char *path;     /* Path (Create), may be NULL */
        const Ec2Tag *tags;   /* Tags (Create) */
        size_t n_tags;
} Ec2IamRequest;
/* role_name: the role the profile holds (GetInstanceProfile), NULL otherwise; the callback
 * takes it (free()). A profile or role that does not exist is EC2_ERROR_NOT_FOUND
 * (NoSuchEntity). */
typedef void (*ec2_iam_done_t)(Ec2Client *c, const Ec2Error *error, char *role_name, void *userdata);
int ec2_iam_instance_profile(Ec2Client *c, const Ec2IamRequest *req, ec2_iam_done_t done, void *userdata);

/* ---- CreateLaunchTemplate ---------------------------------------------------------------- */

typedef struct Ec2BlockDevice {
        const char *device_name;  /* "/dev/xvda" */
        uint64_t volume_size_gib; /* 0: the AMI's */
        const char *volume_type;  /* "gp3" */
        unsigned iops, throughput; /* 0: unset */
        bool encrypted, delete_on_termination;
        bool leave_encrypted, leave_delete_on_termination; /* true: not sent (EC2's default) */
        const char *kms_key_id, *snapshot_id; /* NULL: unset */
        unsigned initialization_rate;     /* VolumeInitializationRate (MiB/s); 0: unset */
} Ec2BlockDevice;

typedef struct Ec2LaunchTemplateSpec {
        const char *name;                  /* required */
        const char *image_id;              /* required */
        const char *instance_profile_name; /* or _arn; at most one */
        const char *instance_profile_arn;
        const char *const *security_group_ids; /* NULL-terminated */
        const char *user_data;             /* plain text; base64-encoded here */
        const Ec2BlockDevice *block_devices;
        size_t n_block_devices;
        unsigned metadata_hop_limit;       /* 0: 1 */
        const char *http_tokens;           /* NULL: "required" */
        const char *http_endpoint;         /* NULL: "enabled" */
        const char *http_protocol_ipv6;    /* NULL: not sent */
        bool detailed_monitoring;          /* Monitoring.Enabled */
        bool enclave;                      /* EnclaveOptions.Enabled */
        int associate_public_ip;           /* -1/0: the subnet's default; 1 true, 2 false */
        unsigned ipv4_prefix_count;        /* Ipv4PrefixCount; 0: none. With either of these two
                                            * one network interface, device 0, carries the groups */
        const Ec2Tag *tags;                /* on the launch template itself */
        size_t n_tags;
        const Ec2Tag *interface_tags;      /* on the network interfaces it launches */
        size_t n_interface_tags;
        /* CapacityReservationSpecification: the reservation its instances launch into
         * (CapacityReservationTarget), or the preference ("none": outside any reservation, so
         * that an open reservation the class did not select is not used); at most one. */
        const char *capacity_reservation_id;
        const char *capacity_reservation_preference;
        const char *client_token;          /* caller's; may be NULL */
} Ec2LaunchTemplateSpec;

typedef struct Ec2LaunchTemplate {
        char *id, *name;
        int64_t version;
} Ec2LaunchTemplate;
Ec2LaunchTemplate *ec2_launch_template_free(Ec2LaunchTemplate *t);
typedef void (*ec2_launch_template_done_t)(Ec2Client *c, const Ec2Error *error,
                                           Ec2LaunchTemplate *result, void *userdata);
int ec2_create_launch_template(Ec2Client *c, const Ec2LaunchTemplateSpec *spec,
                               ec2_launch_template_done_t done, void *userdata);

/* ---- CreateFleet (type instant) ------------------------------------------------------------ */

typedef enum Ec2CapacityType {
        EC2_CAPACITY_ON_DEMAND,
        EC2_CAPACITY_SPOT,
} Ec2CapacityType;

typedef struct Ec2FleetOverride {
        const char *instance_type;
        const char *subnet_id;         /* optional */
        const char *availability_zone; /* optional */
        double priority;               /* < 0: unset */
        const char *max_price;         /* optional, decimal string */
} Ec2FleetOverride;

typedef struct Ec2FleetSpec {
        const char *launch_template_id;   /* one of id / name */
        const char *launch_template_name;
        const char *launch_template_version; /* NULL: "$Latest" */
        const Ec2FleetOverride *overrides;
        size_t n_overrides;               /* 1..EC2_MAX_FLEET_OVERRIDES */
        unsigned target_capacity;
        Ec2CapacityType capacity_type;
        const char *nodepool;             /* tag nodesmith.io/nodepool */
        const char *name_tag;             /* tag Name; NULL: none */
        const Ec2Tag *extra_tags;         /* on the instance, its volumes and the fleet */
        size_t n_extra_tags;
        const char *client_token;         /* caller-provided, required */
        const char *context;              /* Context (reserved EC2 field), may be NULL */
} Ec2FleetSpec;

typedef struct Ec2FleetInstances {
        char **instance_ids;   /* NULL-terminated */
        char *instance_type, *lifecycle, *zone, *subnet_id;
} Ec2FleetInstances;
typedef struct Ec2FleetError {
        char *code, *message, *lifecycle, *instance_type, *zone, *subnet_id;
} Ec2FleetError;
typedef struct Ec2FleetResult {
        char *fleet_id;
        Ec2FleetInstances *instances;
        size_t n_instances;
        Ec2FleetError *errors;
        size_t n_errors;
} Ec2FleetResult;
Ec2FleetResult *ec2_fleet_result_free(Ec2FleetResult *f);
size_t ec2_fleet_result_count(const Ec2FleetResult *f); /* instance ids launched */
typedef void (*ec2_fleet_done_t)(Ec2Client *c, const Ec2Error *error, Ec2FleetResult *result,
                                 void *userdata);
int ec2_create_fleet(Ec2Client *c, const Ec2FleetSpec *spec, ec2_fleet_done_t done,
                     void *userdata);

/* ---- DescribeInstances ------------------------------------------------------------------- */

#define EC2_MAX_INSTANCE_SGS 16
typedef struct Ec2Instance {
        char *id, *instance_type, *zone, *state, *lifecycle /* "spot" or "on-demand" */;
        char *private_ip, *image_id, *subnet_id;
        char *capacity_reservation_id;  /* the reservation it runs in, or NULL */
        char *security_groups[EC2_MAX_INSTANCE_SGS + 1]; /* groupSet's ids, NULL-terminated */
        int64_t launch_time;
        Ec2Tag *tags;
        size_t n_tags;
} Ec2Instance;
typedef struct Ec2InstanceList {
        Ec2Instance *items;
        size_t n;
} Ec2InstanceList;
Ec2InstanceList *ec2_instance_list_free(Ec2InstanceList *l);
const char *ec2_instance_tag(const Ec2Instance *i, const char *key);
typedef void (*ec2_instances_done_t)(Ec2Client *c, const Ec2Error *error, Ec2InstanceList *result,
                                     void *userdata);
/* The configured cluster's instances (tag:nodesmith.io/cluster), in the given states (NULL:
 * pending, running, stopping, stopped, shutting-down), plus extra filters. */
int ec2_describe_cluster_instances(Ec2Client *c, const char *const *states,
                                   const Ec2Filter *filters, size_t n_filters,
                                   ec2_instances_done_t done, void *userdata);
/* By id, with no cluster filter (for checks such as agent attestation). */
int ec2_describe_instances_by_id(Ec2Client *c, const char *const *ids, ec2_instances_done_t done,
                                 void *userdata);

/* ---- TerminateInstances ------------------------------------------------------------------ */

typedef struct Ec2TerminateResult {
        char **terminated; /* NULL-terminated: ids EC2 accepted for termination */
        char **refused;    /* NULL-terminated: ids without this cluster's tag, or not found */
} Ec2TerminateResult;
Ec2TerminateResult *ec2_terminate_result_free(Ec2TerminateResult *t);
typedef void (*ec2_terminate_done_t)(Ec2Client *c, const Ec2Error *error,
                                     Ec2TerminateResult *result, void *userdata);
/* Describes the ids first and terminates only those carrying nodesmith.io/cluster = the
 * configured cluster; the others are refused, never terminated. ids: NULL-terminated, ≤ 1000. */
int ec2_terminate_instances(Ec2Client *c, const char *const *ids, ec2_terminate_done_t done,
                            void *userdata);

/* ---- CreateTags -------------------------------------------------------------------------- */

typedef void (*ec2_done_t)(Ec2Client *c, const Ec2Error *error, void *userdata);
int ec2_create_tags(Ec2Client *c, const char *const *resource_ids, const Ec2Tag *tags,
                    size_t n_tags, ec2_done_t done, void *userdata);
