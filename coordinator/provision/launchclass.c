/* SPDX-License-Identifier: Apache-2.0 */
/* What an EC2NodeClass gives a launch: volumes, metadata options, tags, the instance profile. */
#include <fnmatch.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "launchclass.h"
#include "macro.h"
#include "model/nodeclass-check.h"
#include "quantity.h"

static const cJSON *jget(const cJSON *o, const char *k) {
        return o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static const char *jstr(const cJSON *o, const char *k) {
        const cJSON *v = jget(o, k);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Karpenter's default volumes when the class names none: AL2023 and AL2 a 20 GiB gp3 root,
 * Bottlerocket a 4 GiB OS volume and a 20 GiB data volume; all encrypted. */
static void default_devices(LaunchClass *lc) {
        bool br = streq(lc->ami_family, "Bottlerocket");
        lc->devices[lc->n_devices++] = (Ec2BlockDevice) { .device_name = "/dev/xvda", .volume_size_gib = br ? 4 : 20,
                                                          .volume_type = "gp3", .encrypted = true,
                                                          .delete_on_termination = true };
        if (br)
                lc->devices[lc->n_devices++] = (Ec2BlockDevice) { .device_name = "/dev/xvdb", .volume_size_gib = 20,
                                                                  .volume_type = "gp3", .encrypted = true,
                                                                  .delete_on_termination = true };
}

static int device_from_json(const cJSON *d, Ec2BlockDevice *ret) {
        const cJSON *ebs = jget(d, "ebs");
        Ec2BlockDevice bd = { .device_name = jstr(d, "deviceName"), .volume_type = jstr(ebs, "volumeType"),
                              .kms_key_id = jstr(ebs, "kmsKeyID"), .snapshot_id = jstr(ebs, "snapshotID"),
                              .leave_encrypted = !cJSON_IsBool(jget(ebs, "encrypted")),
                              .encrypted = cJSON_IsTrue(jget(ebs, "encrypted")),
                              .leave_delete_on_termination = !cJSON_IsBool(jget(ebs, "deleteOnTermination")),
                              .delete_on_termination = cJSON_IsTrue(jget(ebs, "deleteOnTermination")) };
        if (!bd.device_name)
                return -EINVAL;
        const cJSON *size = jget(ebs, "volumeSize");
        if (size) {
                int64_t bytes;
                if (cJSON_IsString(size)) {
                        if (quantity_parse(size->valuestring, &bytes) < 0 || bytes <= 0)
                                return -EINVAL;
                } else if (cJSON_IsNumber(size) && size->valuedouble > 0)
                        bytes = (int64_t) size->valuedouble;
                else
                        return -EINVAL;
                bd.volume_size_gib = (uint64_t) ((bytes + (1LL << 30) - 1) >> 30);
        }
        const cJSON *iops = jget(ebs, "iops"), *tp = jget(ebs, "throughput"), *rate = jget(ebs, "volumeInitializationRate");
        if (cJSON_IsNumber(rate))
                bd.initialization_rate = (unsigned) rate->valuedouble;
        if (cJSON_IsNumber(iops))
                bd.iops = (unsigned) iops->valuedouble;
        if (cJSON_IsNumber(tp))
                bd.throughput = (unsigned) tp->valuedouble;
        *ret = bd;
        return 0;
}

int launchclass_from_spec(const cJSON *spec, LaunchClass *lc) {
        *lc = (LaunchClass) { .ami_family = nodeclass_ami_family(spec), .hop_limit = 1 };
        lc->instance_profile = jstr(spec, "instanceProfile");
        lc->role = jstr(spec, "role");
        const cJSON *d;
        cJSON_ArrayForEach(d, jget(spec, "blockDeviceMappings")) {
                if (lc->n_devices >= LAUNCHCLASS_MAX_DEVICES)
                        return -E2BIG;
                int r = device_from_json(d, &lc->devices[lc->n_devices]);
                if (r < 0)
                        return r;
                lc->n_devices++;
        }
        if (lc->n_devices == 0 && !streq(lc->ami_family, "Custom"))
                default_devices(lc);
        const cJSON *md = jget(spec, "metadataOptions");
        const cJSON *hop = jget(md, "httpPutResponseHopLimit");
        if (cJSON_IsNumber(hop))
                lc->hop_limit = (unsigned) hop->valuedouble;
        lc->http_tokens = jstr(md, "httpTokens");
        lc->http_endpoint = jstr(md, "httpEndpoint");
        lc->http_protocol_ipv6 = jstr(md, "httpProtocolIPv6");
        lc->detailed_monitoring = cJSON_IsTrue(jget(spec, "detailedMonitoring"));
        lc->enclave = cJSON_IsTrue(jget(jget(spec, "enclaveOptions"), "enabled"));
        lc->context = jstr(spec, "context");
        const cJSON *prefixes = jget(spec, "ipPrefixCount");
        if (cJSON_IsNumber(prefixes))
                lc->ip_prefix_count = (unsigned) prefixes->valuedouble;
        const cJSON *pub = jget(spec, "associatePublicIPAddress");
        if (cJSON_IsBool(pub))
                lc->associate_public_ip = cJSON_IsTrue(pub) ? 1 : 2;
        const cJSON *t;
        cJSON_ArrayForEach(t, jget(spec, "tags")) {
                if (!cJSON_IsString(t))
                        return -EINVAL;
                if (lc->n_tags >= LAUNCHCLASS_MAX_TAGS)
                        return -E2BIG;
                lc->tags[lc->n_tags++] = (Ec2Tag) { t->string, t->valuestring };
        }
        lc->kubelet = cJSON_IsObject(jget(spec, "kubelet")) ? jget(spec, "kubelet") : NULL;
        lc->user_data = jstr(spec, "userData");
        lc->raid0 = streq_ptr(jstr(spec, "instanceStorePolicy"), "RAID0");
        lc->selects_reservations = cJSON_GetArraySize(jget(spec, "capacityReservationSelectorTerms")) > 0;
        return 0;
}

static const char *tag_value(const Ec2Tag *tags, size_t n, const char *key) {
        for (size_t i = 0; i < n; i++)
                if (streq_ptr(tags[i].key, key))
                        return strempty(tags[i].value);
        return NULL;
}

/* Karpenter's selectors take wildcards ("*Public*") in names and tag values. */
static bool glob(const char *pattern, const char *s) {
        return s && fnmatch(pattern, s, 0) == 0;
}

bool launchclass_terms_match(const cJSON *terms, const char *id, const char *name, const char *vpc, const Ec2Tag *tags,
                             size_t n_tags) {
        const cJSON *t;
        if (!cJSON_IsArray(terms) || cJSON_GetArraySize(terms) == 0)
                return true;
        cJSON_ArrayForEach(t, terms) {
                bool ok = true;
                if (jstr(t, "id"))
                        ok = streq_ptr(id, jstr(t, "id"));
                if (ok && jstr(t, "name"))
                        ok = glob(jstr(t, "name"), name);
                if (ok && jstr(t, "vpcID"))
                        ok = streq_ptr(vpc, jstr(t, "vpcID"));
                const cJSON *tag;
                cJSON_ArrayForEach(tag, jget(t, "tags")) {
                        const char *v = tag_value(tags, n_tags, tag->string);
                        ok = ok && cJSON_IsString(tag) && glob(tag->valuestring, v);
                }
                if (ok)
                        return true;
        }
        return false;
}

int launchclass_alias_parameter(const char *alias, const char *k8s, const char *arch, char *buf, size_t size) {
        const char *at = alias ? strchr(alias, '@') : NULL;
        const char *ver = at ? at + 1 : "latest";
        int k;
        if (alias && !at)
                return -EINVAL;
        if (alias && strncmp(alias, "bottlerocket@", 13) == 0) /* amiFamily Custom with this alias */
                k = snprintf(buf, size, "/aws/service/bottlerocket/aws-k8s-%s/%s/%s/image_id", k8s, arch, ver);
        else if (streq(ver, "latest"))
                k = snprintf(buf, size, "/aws/service/eks/optimized-ami/%s/amazon-linux-2023/%s/standard/recommended/image_id",
                             k8s, arch);
        else
                k = snprintf(buf, size, "/aws/service/eks/optimized-ami/%s/amazon-linux-2023/%s/standard/"
                                        "amazon-eks-node-al2023-%s-standard-%s-%s/image_id", k8s, arch, arch, k8s, ver);
        return k < 0 || (size_t) k >= size ? -ENOBUFS : 0;
}

int launchclass_profile_name(const char *cluster, const char *region, const char *nodeclass, char *buf,
                             size_t size) {
        char in[512];
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned n = 0;
        int k = snprintf(in, sizeof in, "%s/%s", strempty(region), strempty(nodeclass));
        if (k < 0 || (size_t) k >= sizeof in || !EVP_Digest(in, (size_t) k, md, &n, EVP_sha256(), NULL) || n < 8)
                return -EINVAL;
        /* IAM names are at most 128 characters of [\w+=,.@-] */
        k = snprintf(buf, size, "%.100s_%02x%02x%02x%02x%02x%02x%02x%02x", strempty(cluster), md[0], md[1], md[2],
                     md[3], md[4], md[5], md[6], md[7]);
        return k < 0 || (size_t) k >= size ? -ENOBUFS : 0;
}
