/* SPDX-License-Identifier: Apache-2.0 */
/* Request bodies for the EC2 Query API (form-encoded, Version 2016-11-15) and SSM (JSON). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "base64.h"
#include "ec2-internal.h"
#include "http.h"
#include "macro.h"

int ec2_query_add(StrBuf *b, const char *key, const char *value) {
        _cleanup_free_ char *k = http_escape(key), *v = http_escape(value ?: "");
        if (!k || !v)
                return -ENOMEM;
        return strbuf_printf(b, "%s%s=%s", b->len ? "&" : "", k, v);
}

int ec2_query_init(StrBuf *b, const char *action) {
        int r;
        strbuf_init(b, EC2_QUERY_MAX);
        r = ec2_query_add(b, "Action", action);
        if (r >= 0)
                r = ec2_query_add(b, "Version", EC2_API_VERSION);
        return r;
}

int ec2_query_addf(StrBuf *b, const char *value, const char *keyfmt, ...) {
        char key[256];
        va_list ap;
        va_start(ap, keyfmt);
        int n = vsnprintf(key, sizeof key, keyfmt, ap);
        va_end(ap);
        if (n < 0 || (size_t) n >= sizeof key)
                return -ENAMETOOLONG;
        return ec2_query_add(b, key, value);
}

int ec2_query_add_list(StrBuf *b, const char *prefix, const char *const *values) {
        size_t i = 0;
        for (; values && values[i]; i++) {
                if (i >= 1000)
                        return -E2BIG;
                int r = ec2_query_addf(b, values[i], "%s.%zu", prefix, i + 1);
                if (r < 0)
                        return r;
        }
        return 0;
}

int ec2_query_add_filters(StrBuf *b, unsigned first, const Ec2Filter *filters, size_t n) {
        if (n + first > EC2_MAX_FILTERS + 1)
                return -E2BIG;
        for (size_t i = 0; i < n; i++) {
                const Ec2Filter *f = &filters[i];
                unsigned k = first + (unsigned) i;
                int r;
                if (isempty(f->name) || f->n_values == 0 || f->n_values > EC2_MAX_FILTER_VALUES)
                        return -EINVAL;
                r = ec2_query_addf(b, f->name, "Filter.%u.Name", k);
                for (size_t j = 0; r >= 0 && j < f->n_values; j++)
                        r = ec2_query_addf(b, f->values[j], "Filter.%u.Value.%zu", k, j + 1);
                if (r < 0)
                        return r;
        }
        return 0;
}

int ec2_query_add_tags(StrBuf *b, const char *prefix, const Ec2Tag *tags, size_t n) {
        for (size_t i = 0; i < n; i++) {
                int r;
                if (isempty(tags[i].key) || strlen(tags[i].key) > 128 ||
                    strlen(strempty(tags[i].value)) > 256)
                        return -EINVAL;
                r = ec2_query_addf(b, tags[i].key, "%s.%zu.Key", prefix, i + 1);
                if (r >= 0)
                        r = ec2_query_addf(b, strempty(tags[i].value), "%s.%zu.Value", prefix, i + 1);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The tags nodesmith puts on what it launches: cluster, the cluster as EKS and its cloud
 * controller manager know it (kubernetes.io/cluster/NAME=owned: the CCM finds an instance by its
 * private DNS name only among instances carrying it, and deletes a NotReady Node whose instance
 * it cannot find; eks:eks-cluster-name), nodepool, Name, then the caller's. owned_key is the
 * caller's buffer for the kubernetes.io/cluster/NAME key. */
static int fleet_tags(const Ec2FleetSpec *s, const char *cluster, char *owned_key, size_t owned_size,
                      Ec2Tag *out, size_t max, size_t *ret_n) {
        size_t n = 0;
        if ((size_t) snprintf(owned_key, owned_size, "%s%s", EC2_KUBERNETES_CLUSTER_TAG_PREFIX, cluster) >=
            owned_size)
                return -EINVAL;
        out[n++] = (Ec2Tag) { (char *) EC2_CLUSTER_TAG, (char *) cluster };
        out[n++] = (Ec2Tag) { owned_key, (char *) "owned" };
        out[n++] = (Ec2Tag) { (char *) EC2_EKS_CLUSTER_NAME_TAG, (char *) cluster };
        if (!isempty(s->nodepool))
                out[n++] = (Ec2Tag) { (char *) EC2_NODEPOOL_TAG, (char *) s->nodepool };
        if (!isempty(s->name_tag))
                out[n++] = (Ec2Tag) { (char *) "Name", (char *) s->name_tag };
        for (size_t i = 0; i < s->n_extra_tags; i++) {
                if (n >= max)
                        return -E2BIG;
                if (streq_ptr(s->extra_tags[i].key, EC2_CLUSTER_TAG) ||
                    streq_ptr(s->extra_tags[i].key, EC2_EKS_CLUSTER_NAME_TAG) ||
                    strncmp(strempty(s->extra_tags[i].key), EC2_KUBERNETES_CLUSTER_TAG_PREFIX,
                            strlen(EC2_KUBERNETES_CLUSTER_TAG_PREFIX)) == 0)
                        return -EINVAL; /* the cluster tags are ours to set */
                out[n++] = s->extra_tags[i];
        }
        *ret_n = n;
        return 0;
}

int ec2_build_create_fleet(const Ec2FleetSpec *s, const char *cluster, StrBuf *b) {
        Ec2Tag tags[50];
        char owned_key[128 + 1]; /* EC2 tag keys: at most 128 characters */
        size_t n_tags = 0;
        char num[32];
        int r;

        if (!s || isempty(cluster) || isempty(s->client_token) || strlen(s->client_token) > 64 ||
            s->n_overrides == 0 || s->n_overrides > EC2_MAX_FLEET_OVERRIDES ||
            s->target_capacity == 0 || !s->overrides ||
            isempty(s->launch_template_id) == isempty(s->launch_template_name))
                return -EINVAL;
        r = fleet_tags(s, cluster, owned_key, sizeof owned_key, tags, ELEMENTSOF(tags), &n_tags);
        if (r < 0)
                return r;
        r = ec2_query_init(b, "CreateFleet");
        if (r >= 0)
                r = ec2_query_add(b, "Type", "instant");
        if (r >= 0)
                r = ec2_query_add(b, "ClientToken", s->client_token);
        if (r >= 0 && !isempty(s->context))
                r = ec2_query_add(b, "Context", s->context);
        if (r >= 0 && !isempty(s->launch_template_id))
                r = ec2_query_add(b, "LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateId",
                                  s->launch_template_id);
        if (r >= 0 && !isempty(s->launch_template_name))
                r = ec2_query_add(b, "LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName",
                                  s->launch_template_name);
        if (r >= 0)
                r = ec2_query_add(b, "LaunchTemplateConfigs.1.LaunchTemplateSpecification.Version",
                                  s->launch_template_version ?: "$Latest");
        for (size_t i = 0; r >= 0 && i < s->n_overrides; i++) {
                const Ec2FleetOverride *o = &s->overrides[i];
                size_t k = i + 1;
                if (isempty(o->instance_type))
                        return -EINVAL;
                r = ec2_query_addf(b, o->instance_type, "LaunchTemplateConfigs.1.Overrides.%zu.InstanceType", k);
                if (r >= 0 && !isempty(o->subnet_id))
                        r = ec2_query_addf(b, o->subnet_id, "LaunchTemplateConfigs.1.Overrides.%zu.SubnetId", k);
                if (r >= 0 && !isempty(o->availability_zone))
                        r = ec2_query_addf(b, o->availability_zone,
                                           "LaunchTemplateConfigs.1.Overrides.%zu.AvailabilityZone", k);
                if (r >= 0 && o->priority >= 0 && isfinite(o->priority)) {
                        snprintf(num, sizeof num, "%g", o->priority);
                        r = ec2_query_addf(b, num, "LaunchTemplateConfigs.1.Overrides.%zu.Priority", k);
                }
                if (r >= 0 && !isempty(o->max_price))
                        r = ec2_query_addf(b, o->max_price, "LaunchTemplateConfigs.1.Overrides.%zu.MaxPrice", k);
        }
        snprintf(num, sizeof num, "%u", s->target_capacity);
        if (r >= 0)
                r = ec2_query_add(b, "TargetCapacitySpecification.TotalTargetCapacity", num);
        if (r >= 0)
                r = ec2_query_add(b, "TargetCapacitySpecification.DefaultTargetCapacityType",
                                  s->capacity_type == EC2_CAPACITY_SPOT ? "spot" : "on-demand");
        if (r >= 0)
                r = ec2_query_add(b, "SpotOptions.AllocationStrategy", "price-capacity-optimized");
        if (r >= 0)
                r = ec2_query_add(b, "OnDemandOptions.AllocationStrategy", "lowest-price");
        if (r >= 0)
                r = ec2_query_add(b, "TagSpecification.1.ResourceType", "instance");
        if (r >= 0)
                r = ec2_query_add_tags(b, "TagSpecification.1.Tag", tags, n_tags);
        if (r >= 0)
                r = ec2_query_add(b, "TagSpecification.2.ResourceType", "fleet");
        if (r >= 0)
                r = ec2_query_add_tags(b, "TagSpecification.2.Tag", tags, n_tags);
        if (r >= 0)
                r = ec2_query_add(b, "TagSpecification.3.ResourceType", "volume");
        if (r >= 0)
                r = ec2_query_add_tags(b, "TagSpecification.3.Tag", tags, n_tags);
        return r < 0 ? r : b->error;
}

int ec2_build_create_launch_template(const Ec2LaunchTemplateSpec *s, const char *cluster,
                                     StrBuf *b) {
        char num[32];
        int r;

        if (!s || isempty(s->name) || strlen(s->name) < 3 || strlen(s->name) > 128 ||
            isempty(s->image_id) || (s->instance_profile_name && s->instance_profile_arn) ||
            s->n_block_devices > 16 || (s->client_token && strlen(s->client_token) > 64) ||
            /* a targeted reservation, or (preference none) no reservation at all: EC2 refuses both */
            (!isempty(s->capacity_reservation_id) && !isempty(s->capacity_reservation_preference)))
                return -EINVAL;
        r = ec2_query_init(b, "CreateLaunchTemplate");
        if (r >= 0)
                r = ec2_query_add(b, "LaunchTemplateName", s->name);
        if (r >= 0 && !isempty(s->client_token))
                r = ec2_query_add(b, "ClientToken", s->client_token);
        if (r >= 0)
                r = ec2_query_add(b, "LaunchTemplateData.ImageId", s->image_id);
        if (r >= 0 && !isempty(s->instance_profile_name))
                r = ec2_query_add(b, "LaunchTemplateData.IamInstanceProfile.Name", s->instance_profile_name);
        if (r >= 0 && !isempty(s->instance_profile_arn))
                r = ec2_query_add(b, "LaunchTemplateData.IamInstanceProfile.Arn", s->instance_profile_arn);
        if (r >= 0 && (s->associate_public_ip > 0 || s->ipv4_prefix_count > 0)) {
                /* the groups go on the interface when the interface is given */
                r = ec2_query_add(b, "LaunchTemplateData.NetworkInterface.1.DeviceIndex", "0");
                if (r >= 0 && s->associate_public_ip > 0)
                        r = ec2_query_add(b, "LaunchTemplateData.NetworkInterface.1.AssociatePublicIpAddress",
                                          s->associate_public_ip == 1 ? "true" : "false");
                if (r >= 0 && s->ipv4_prefix_count > 0) {
                        snprintf(num, sizeof num, "%u", s->ipv4_prefix_count);
                        r = ec2_query_add(b, "LaunchTemplateData.NetworkInterface.1.Ipv4PrefixCount", num);
                }
                if (r >= 0)
                        r = ec2_query_add_list(b, "LaunchTemplateData.NetworkInterface.1.SecurityGroupId",
                                               s->security_group_ids);
        } else if (r >= 0)
                r = ec2_query_add_list(b, "LaunchTemplateData.SecurityGroupId", s->security_group_ids);
        if (r >= 0 && s->detailed_monitoring)
                r = ec2_query_add(b, "LaunchTemplateData.Monitoring.Enabled", "true");
        if (r >= 0 && s->enclave)
                r = ec2_query_add(b, "LaunchTemplateData.EnclaveOptions.Enabled", "true");
        if (r >= 0 && !isempty(s->capacity_reservation_id))
                r = ec2_query_add(b, "LaunchTemplateData.CapacityReservationSpecification.CapacityReservationTarget."
                                     "CapacityReservationId", s->capacity_reservation_id);
        if (r >= 0 && !isempty(s->capacity_reservation_preference))
                r = ec2_query_add(b, "LaunchTemplateData.CapacityReservationSpecification.CapacityReservationPreference",
                                  s->capacity_reservation_preference);
        if (r >= 0 && s->n_interface_tags > 0) {
                if (s->n_interface_tags > 50)
                        return -E2BIG;
                r = ec2_query_add(b, "LaunchTemplateData.TagSpecification.1.ResourceType", "network-interface");
                if (r >= 0)
                        r = ec2_query_add_tags(b, "LaunchTemplateData.TagSpecification.1.Tag", s->interface_tags,
                                               s->n_interface_tags);
        }
        if (r >= 0 && s->user_data) {
                _cleanup_free_ char *u = NULL;
                /* EC2's limit is on user data before encoding */
                r = base64_encode(s->user_data, strlen(s->user_data), 16 * 1024, &u);
                if (r < 0)
                        return r == -E2BIG ? -EMSGSIZE : r;
                r = ec2_query_add(b, "LaunchTemplateData.UserData", u);
        }
        for (size_t i = 0; r >= 0 && i < s->n_block_devices; i++) {
                const Ec2BlockDevice *d = &s->block_devices[i];
                const char *p = "LaunchTemplateData.BlockDeviceMapping";
                size_t k = i + 1;
                if (isempty(d->device_name))
                        return -EINVAL;
                r = ec2_query_addf(b, d->device_name, "%s.%zu.DeviceName", p, k);
                if (r >= 0 && d->volume_size_gib) {
                        snprintf(num, sizeof num, "%" PRIu64, d->volume_size_gib);
                        r = ec2_query_addf(b, num, "%s.%zu.Ebs.VolumeSize", p, k);
                }
                if (r >= 0 && !isempty(d->volume_type))
                        r = ec2_query_addf(b, d->volume_type, "%s.%zu.Ebs.VolumeType", p, k);
                if (r >= 0 && d->iops) {
                        snprintf(num, sizeof num, "%u", d->iops);
                        r = ec2_query_addf(b, num, "%s.%zu.Ebs.Iops", p, k);
                }
                if (r >= 0 && d->throughput) {
                        snprintf(num, sizeof num, "%u", d->throughput);
                        r = ec2_query_addf(b, num, "%s.%zu.Ebs.Throughput", p, k);
                }
                if (r >= 0 && !d->leave_encrypted)
                        r = ec2_query_addf(b, d->encrypted ? "true" : "false", "%s.%zu.Ebs.Encrypted", p, k);
                if (r >= 0 && !d->leave_delete_on_termination)
                        r = ec2_query_addf(b, d->delete_on_termination ? "true" : "false",
                                           "%s.%zu.Ebs.DeleteOnTermination", p, k);
                if (r >= 0 && !isempty(d->kms_key_id))
                        r = ec2_query_addf(b, d->kms_key_id, "%s.%zu.Ebs.KmsKeyId", p, k);
                if (r >= 0 && !isempty(d->snapshot_id))
                        r = ec2_query_addf(b, d->snapshot_id, "%s.%zu.Ebs.SnapshotId", p, k);
                if (r >= 0 && d->initialization_rate) {
                        snprintf(num, sizeof num, "%u", d->initialization_rate);
                        r = ec2_query_addf(b, num, "%s.%zu.Ebs.VolumeInitializationRate", p, k);
                }
        }
        snprintf(num, sizeof num, "%u", s->metadata_hop_limit ?: 1);
        if (r >= 0)
                r = ec2_query_add(b, "LaunchTemplateData.MetadataOptions.HttpTokens", s->http_tokens ?: "required");
        if (r >= 0)
                r = ec2_query_add(b, "LaunchTemplateData.MetadataOptions.HttpPutResponseHopLimit", num);
        if (r >= 0)
                r = ec2_query_add(b, "LaunchTemplateData.MetadataOptions.HttpEndpoint", s->http_endpoint ?: "enabled");
        if (r >= 0 && s->http_protocol_ipv6)
                r = ec2_query_add(b, "LaunchTemplateData.MetadataOptions.HttpProtocolIpv6", s->http_protocol_ipv6);
        if (r >= 0) {
                Ec2Tag tags[51];
                size_t n = 0;
                if (!isempty(cluster))
                        tags[n++] = (Ec2Tag) { (char *) EC2_CLUSTER_TAG, (char *) cluster };
                if (s->n_tags > 50)
                        return -E2BIG;
                for (size_t i = 0; i < s->n_tags; i++)
                        if (!streq_ptr(s->tags[i].key, EC2_CLUSTER_TAG))
                                tags[n++] = s->tags[i];
                r = ec2_query_add(b, "TagSpecification.1.ResourceType", "launch-template");
                if (r >= 0)
                        r = ec2_query_add_tags(b, "TagSpecification.1.Tag", tags, n);
        }
        return r < 0 ? r : b->error;
}

int ec2_build_iam(const Ec2IamRequest *q, StrBuf *b) {
        static const char *const actions[] = { "GetInstanceProfile", "CreateInstanceProfile",
                                               "AddRoleToInstanceProfile", "RemoveRoleFromInstanceProfile" };
        bool known = false;
        strbuf_init(b, EC2_QUERY_MAX);
        for (size_t i = 0; q && i < ELEMENTSOF(actions); i++)
                known = known || streq_ptr(q->action, actions[i]);
        if (!known || isempty(q->profile) || strlen(q->profile) > 128 || q->n_tags > 50 ||
            (q->role && strlen(q->role) > 64) || (q->path && strlen(q->path) > 512))
                return -EINVAL;
        int r = ec2_query_add(b, "Action", q->action);
        if (r >= 0)
                r = ec2_query_add(b, "Version", "2010-05-08");
        if (r >= 0)
                r = ec2_query_add(b, "InstanceProfileName", q->profile);
        if (r >= 0 && q->role)
                r = ec2_query_add(b, "RoleName", q->role);
        if (r >= 0 && q->path)
                r = ec2_query_add(b, "Path", q->path);
        if (r >= 0)
                r = ec2_query_add_tags(b, "Tags.member", q->tags, q->n_tags);
        return r < 0 ? r : b->error;
}

int ec2_build_spot_prices(const char *const *types, int64_t start_time, StrBuf *b) {
        char ts[32];
        struct tm tm;
        time_t t = start_time > 0 ? (time_t) start_time : time(NULL);
        int r;

        if (!gmtime_r(&t, &tm))
                return -EINVAL;
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
        r = ec2_query_init(b, "DescribeSpotPriceHistory");
        if (r >= 0)
                r = ec2_query_add_list(b, "InstanceType", types);
        if (r >= 0)
                r = ec2_query_add(b, "ProductDescription.1", "Linux/UNIX");
        if (r >= 0)
                r = ec2_query_add(b, "StartTime", ts); /* the price in effect at that moment */
        if (r >= 0)
                r = ec2_query_add(b, "MaxResults", "1000");
        return r < 0 ? r : b->error;
}

int ec2_build_cluster_instances(const char *cluster, const char *const *states,
                                const Ec2Filter *filters, size_t n_filters, StrBuf *b) {
        static const char *const default_states[] = { "pending", "running", "stopping", "stopped",
                                                      "shutting-down", NULL };
        const char *cv[] = { cluster, NULL };
        Ec2Filter f[2] = {
                { .name = "tag:" EC2_CLUSTER_TAG, .values = cv, .n_values = 1 },
                { .name = "instance-state-name", .values = states ?: default_states },
        };
        int r;

        if (isempty(cluster))
                return -EINVAL;
        while (f[1].values[f[1].n_values])
                f[1].n_values++;
        r = ec2_query_init(b, "DescribeInstances");
        if (r >= 0)
                r = ec2_query_add_filters(b, 1, f, 2);
        if (r >= 0)
                r = ec2_query_add_filters(b, 3, filters, n_filters);
        if (r >= 0)
                r = ec2_query_add(b, "MaxResults", "1000");
        return r < 0 ? r : b->error;
}

char *ec2_build_ssm_get_parameter(const char *name) {
        cJSON *j = cJSON_CreateObject();
        char *s = NULL;
        if (j && cJSON_AddStringToObject(j, "Name", name) && cJSON_AddFalseToObject(j, "WithDecryption"))
                s = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        return s;
}
