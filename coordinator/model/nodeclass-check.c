/* SPDX-License-Identifier: Apache-2.0 */
/* Every EC2NodeClass field carried into launches or refused with its path and reason. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "nodeclass-check.h"
#include "quantity.h"
#include "toml.h"

typedef struct Check {
        const char *what;
        char **err;
} Check;

static int fail(Check *c, const char *path, const char *fmt, ...) _printf_(3, 4);
static int fail(Check *c, const char *path, const char *fmt, ...) {
        if (c->err && !*c->err) {
                char msg[600];
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(msg, sizeof msg, fmt, ap);
                va_end(ap);
                if (asprintf(c->err, "%s: %s: %s", c->what, path, msg) < 0)
                        *c->err = NULL;
        }
        return -EINVAL;
}

static const cJSON *get(const cJSON *o, const char *k) {
        return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static const char *str(const cJSON *o, const char *k) {
        const cJSON *v = get(o, k);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool in(const char *s, const char *const *set) {
        for (; s && *set; set++)
                if (streq(s, *set))
                        return true;
        return false;
}

/* A field nodesmith does not carry out: refused, with the reason. */
typedef struct Refused {
        const char *key, *why;
} Refused;

/* Every key of object o must be in known; a key in refused is refused with its reason. */
static int keys(Check *c, const cJSON *o, const char *path, const char *const *known, const Refused *refused) {
        char p[300];
        if (!o || cJSON_IsNull(o))
                return 0;
        if (!cJSON_IsObject(o))
                return fail(c, path, "must be an object");
        const cJSON *k;
        cJSON_ArrayForEach(k, o) {
                snprintf(p, sizeof p, "%s.%s", path, k->string);
                for (const Refused *r = refused; r && r->key; r++)
                        if (streq(k->string, r->key))
                                return fail(c, p, "is not supported: %s", r->why);
                if (!in(k->string, known))
                        return fail(c, p, "is not a field of Karpenter v1's EC2NodeClass");
        }
        return 0;
}

static int want_type(Check *c, const cJSON *v, const char *path, int type, const char *name) {
        if (!v || cJSON_IsNull(v) || (v->type & 0xff) == type || (type == cJSON_True && cJSON_IsBool(v)))
                return 0;
        return fail(c, path, "must be %s", name);
}

static int string_map(Check *c, const cJSON *m, const char *path, bool values_nonempty) {
        char p[300];
        if (!m)
                return 0;
        if (!cJSON_IsObject(m))
                return fail(c, path, "must be a map of strings");
        const cJSON *e;
        cJSON_ArrayForEach(e, m) {
                snprintf(p, sizeof p, "%s.%s", path, e->string);
                if (!cJSON_IsString(e))
                        return fail(c, p, "must be a string");
                if (!*e->string || (values_nonempty && !*e->valuestring))
                        return fail(c, p, "empty tag keys or values aren't supported");
        }
        return 0;
}

/* Selector terms: known keys of the kind, ids with their prefix, the exclusive ones alone. */
static int terms(Check *c, const cJSON *spec, const char *field, const char *const *known, const char *id_prefix,
                 const char *const *exclusive, bool required) {
        char path[200], p[300];
        const cJSON *t = get(spec, field), *term;
        snprintf(path, sizeof path, "spec.%s", field);
        if (!t || cJSON_IsNull(t)) {
                if (required)
                        return fail(c, path, "is required (at least one term)");
                return 0;
        }
        if (!cJSON_IsArray(t))
                return fail(c, path, "must be a list of terms");
        int n = cJSON_GetArraySize(t);
        if (required && n == 0)
                return fail(c, path, "%s cannot be empty", field);
        if (n > 30)
                return fail(c, path, "has more than 30 terms");
        size_t i = 0;
        cJSON_ArrayForEach(term, t) {
                snprintf(p, sizeof p, "%s[%zu]", path, i++);
                int r = keys(c, term, p, known, NULL);
                if (r < 0)
                        return r;
                if (cJSON_GetArraySize(term) == 0)
                        return fail(c, p, "expected at least one of the term's fields, got none");
                for (const char *const *x = exclusive; *x; x++)
                        if (get(term, *x) && cJSON_GetArraySize(term) > 1)
                                return fail(c, p, "'%s' is mutually exclusive, cannot be set with a combination of other fields",
                                            *x);
                const char *id = str(term, "id");
                if (get(term, "id") && (!id || strncmp(id, id_prefix, strlen(id_prefix)) != 0))
                        return fail(c, p, "id must look like %s…", id_prefix);
                char tp[320];
                snprintf(tp, sizeof tp, "%s.tags", p);
                r = string_map(c, get(term, "tags"), tp, true);
                if (r < 0)
                        return r;
                const cJSON *v;
                cJSON_ArrayForEach(v, term)
                        if (!streq(v->string, "tags") && !cJSON_IsString(v))
                                return fail(c, p, "%s must be a string", v->string);
        }
        return 0;
}

/* capacityReservationSelectorTerms as Karpenter validates them: id (cr-…) alone, or tags and/or
 * instanceMatchCriteria with an optional ownerID (12 digits). */
static int check_reservations(Check *c, const cJSON *spec) {
        static const char *const known[] = { "id", "ownerID", "tags", "instanceMatchCriteria", NULL };
        static const char *const exclusive[] = { "id", NULL }, *const criteria[] = { "open", "targeted", NULL };
        int r = terms(c, spec, "capacityReservationSelectorTerms", known, "cr-", exclusive, false);
        if (r < 0)
                return r;
        size_t i = 0;
        const cJSON *term;
        cJSON_ArrayForEach(term, get(spec, "capacityReservationSelectorTerms")) {
                char p[96];
                snprintf(p, sizeof p, "spec.capacityReservationSelectorTerms[%zu]", i++);
                const char *owner = str(term, "ownerID"), *match = str(term, "instanceMatchCriteria");
                if (!get(term, "id") && !get(term, "tags") && !get(term, "instanceMatchCriteria"))
                        return fail(c, p, "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']");
                if (owner && (strlen(owner) != 12 || strspn(owner, "0123456789") != 12))
                        return fail(c, p, "ownerID must be a 12-digit AWS account id");
                if (match && !in(match, criteria))
                        return fail(c, p, "instanceMatchCriteria must be open or targeted");
                const cJSON *v;
                cJSON_ArrayForEach(v, get(term, "tags"))
                        if (isempty(v->string) || isempty(v->valuestring))
                                return fail(c, p, "empty tag keys or values aren't supported");
        }
        return 0;
}

static const char *const families[] = { "AL2023", "AL2", "Bottlerocket", "Windows2019", "Windows2022", "Custom", NULL };

/* Families whose launches nodesmith cannot do, and why. */
static const char *family_refused(const char *family) {
        if (strncasecmp(family, "windows", 7) == 0)
                return "Windows nodes cannot run nodesmith-agent, which runs on Linux only (systemd, /proc, cgroups)";
        if (strcasecmp(family, "AL2") == 0)
                return "nodesmith writes nodeadm (AL2023) user data, and EKS publishes no AL2 AMI for Kubernetes 1.33 "
                       "and later; use AL2023, or Custom with your own user data";
        return NULL;
}

static int check_ami(Check *c, const cJSON *spec) {
        static const char *const known[] = { "alias", "tags", "id", "name", "owner", "ssmParameter", NULL };
        static const char *const exclusive[] = { "id", "alias", NULL };
        const char *family = str(spec, "amiFamily");
        int r = terms(c, spec, "amiSelectorTerms", known, "ami-", exclusive, true);
        if (r < 0)
                return r;
        if (get(spec, "amiFamily") && !family)
                return fail(c, "spec.amiFamily", "must be a string");
        if (family && !in(family, families))
                return fail(c, "spec.amiFamily", "\"%s\" is not one of AL2, AL2023, Bottlerocket, Custom, Windows2019, "
                            "Windows2022", family);
        const cJSON *terms_ = get(spec, "amiSelectorTerms"), *t;
        bool alias = false;
        cJSON_ArrayForEach(t, terms_)
                alias = alias || get(t, "alias");
        if (alias && cJSON_GetArraySize(terms_) != 1)
                return fail(c, "spec.amiSelectorTerms", "'alias' is mutually exclusive, cannot be set with a combination of "
                            "other amiSelectorTerms");
        if (!alias && !family)
                return fail(c, "spec.amiFamily", "is required when amiSelectorTerms has no alias");
        if (alias) {
                const char *a = str(cJSON_GetArrayItem(terms_, 0), "alias");
                const char *at = strchr(a, '@');
                if (!at || at == a || !at[1] || strlen(a) > 30)
                        return fail(c, "spec.amiSelectorTerms[0].alias", "'alias' is improperly formatted, must match the "
                                    "format 'family@version'");
                char fam[32];
                snprintf(fam, sizeof fam, "%.*s", (int) (at - a), a);
                static const char *const alias_families[] = { "al2", "al2023", "bottlerocket", "windows2019", "windows2022",
                                                              NULL };
                if (!in(fam, alias_families))
                        return fail(c, "spec.amiSelectorTerms[0].alias", "family is not supported, must be one of the "
                                    "following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022'");
                if (strncmp(fam, "windows", 7) == 0 && !streq(at + 1, "latest"))
                        return fail(c, "spec.amiSelectorTerms[0].alias", "windows families may only specify version 'latest'");
                if (family && !streq(family, "Custom") && strcasecmp(family, fam) != 0)
                        return fail(c, "spec.amiFamily", "if set, amiFamily must be the alias's family or 'Custom'");
                const char *why = family_refused(fam);
                if (why && !streq_ptr(family, "Custom"))
                        return fail(c, "spec.amiSelectorTerms[0].alias", "\"%s\" is not supported: %s", a, why);
        }
        const char *why = family ? family_refused(family) : NULL;
        if (why)
                return fail(c, "spec.amiFamily", "%s is not supported: %s", family, why);
        return 0;
}

const char *nodeclass_ami_family(const cJSON *spec) {
        static const struct {
                const char *alias, *family;
        } by_alias[] = { { "al2@", "AL2" }, { "al2023@", "AL2023" }, { "bottlerocket@", "Bottlerocket" },
                         { "windows2019@", "Windows2019" }, { "windows2022@", "Windows2022" } };
        const char *family = str(spec, "amiFamily");
        for (size_t i = 0; family && families[i]; i++)
                if (streq(family, families[i]))
                        return families[i];
        const char *alias = str(cJSON_GetArrayItem(get(spec, "amiSelectorTerms"), 0), "alias");
        for (size_t i = 0; alias && i < ELEMENTSOF(by_alias); i++)
                if (strncmp(alias, by_alias[i].alias, strlen(by_alias[i].alias)) == 0)
                        return by_alias[i].family;
        return "AL2023";
}

/* Bottlerocket (amiFamily, or a bottlerocket@ alias without one): its user data is TOML, merged
 * with nodesmith's (userdata-bottlerocket.c); it has no pods-per-core setting. */
static int check_bottlerocket(Check *c, const cJSON *spec) {
        if (!streq(nodeclass_ami_family(spec), "Bottlerocket"))
                return 0;
        if (get(get(spec, "kubelet"), "podsPerCore"))
                return fail(c, "spec.kubelet.podsPerCore", "is not supported with Bottlerocket, which has no such setting");
        const char *ud = str(spec, "userData");
        cJSON *j = NULL;
        _cleanup_free_ char *err = NULL;
        int r = ud ? toml_parse_json(ud, &j, &err) : 0;
        cJSON_Delete(j);
        if (r == -E2BIG)
                return fail(c, "spec.userData", "is longer than %d bytes", TOML_TEXT_MAX);
        if (r < 0)
                return fail(c, "spec.userData", "is not TOML, which Bottlerocket's user data is (%s)", err ? err : "unreadable");
        return 0;
}

static const char *const signals[] = { "memory.available", "nodefs.available", "nodefs.inodesFree",
                                       "imagefs.available", "imagefs.inodesFree", "pid.available", NULL };

static int eviction_map(Check *c, const cJSON *m, const char *path, bool durations) {
        char p[300];
        int r = string_map(c, m, path, true);
        if (r < 0)
                return r;
        const cJSON *e;
        cJSON_ArrayForEach(e, m) {
                snprintf(p, sizeof p, "%s[\"%s\"]", path, e->string);
                if (!in(e->string, signals))
                        return fail(c, p, "valid keys are memory.available, nodefs.available, nodefs.inodesFree, "
                                    "imagefs.available, imagefs.inodesFree and pid.available");
                const char *v = e->valuestring;
                size_t n = strlen(v);
                double pct;
                int64_t q;
                if (durations) {
                        if (n < 2 || !strchr("smh", v[n - 1]))
                                return fail(c, p, "\"%s\" is not a duration", v);
                } else if (n > 0 && v[n - 1] == '%') {
                        if (quantity_parse_percent(v, &pct) < 0 || pct < 0 || pct > 100)
                                return fail(c, p, "\"%s\" is not a percentage", v);
                } else if (quantity_parse(v, &q) < 0 || q < 0)
                        return fail(c, p, "\"%s\" is neither a quantity nor a percentage", v);
        }
        return 0;
}

static int reserved_map(Check *c, const cJSON *m, const char *path) {
        static const char *const res[] = { "cpu", "memory", "ephemeral-storage", "pid", NULL };
        char p[300];
        int r = string_map(c, m, path, true);
        if (r < 0)
                return r;
        const cJSON *e;
        cJSON_ArrayForEach(e, m) {
                int64_t q;
                snprintf(p, sizeof p, "%s.%s", path, e->string);
                if (!in(e->string, res))
                        return fail(c, p, "valid keys are cpu, memory, ephemeral-storage and pid");
                if (e->valuestring[0] == '-' || quantity_parse(e->valuestring, &q) < 0)
                        return fail(c, p, "\"%s\" is not a non-negative quantity", e->valuestring);
        }
        return 0;
}

static int int_range(Check *c, const cJSON *o, const char *k, const char *path, double lo, double hi) {
        const cJSON *v = get(o, k);
        if (!v || cJSON_IsNull(v))
                return 0;
        if (!cJSON_IsNumber(v) || v->valuedouble != (double) (long long) v->valuedouble)
                return fail(c, path, "must be an integer");
        if (v->valuedouble < lo || v->valuedouble > hi)
                return fail(c, path, "must be between %.0f and %.0f", lo, hi);
        return 0;
}

static int check_kubelet(Check *c, const cJSON *k) {
        static const char *const known[] = { "clusterDNS", "maxPods", "podsPerCore", "systemReserved", "kubeReserved",
                                             "evictionHard", "evictionSoft", "evictionSoftGracePeriod",
                                             "evictionMaxPodGracePeriod", "imageGCHighThresholdPercent",
                                             "imageGCLowThresholdPercent", "cpuCFSQuota", NULL };
        int r = keys(c, k, "spec.kubelet", known, NULL);
        if (r < 0 || !k)
                return r;
        const cJSON *dns = get(k, "clusterDNS"), *d;
        if (dns && !cJSON_IsArray(dns))
                return fail(c, "spec.kubelet.clusterDNS", "must be a list of addresses");
        cJSON_ArrayForEach(d, dns)
                if (!cJSON_IsString(d) || !*d->valuestring || strspn(d->valuestring, "0123456789abcdefABCDEF.:") !=
                                                                      strlen(d->valuestring))
                        return fail(c, "spec.kubelet.clusterDNS", "must be a list of IP addresses");
        if ((r = int_range(c, k, "maxPods", "spec.kubelet.maxPods", 0, 100000)) < 0 ||
            (r = int_range(c, k, "podsPerCore", "spec.kubelet.podsPerCore", 0, 100000)) < 0 ||
            (r = int_range(c, k, "evictionMaxPodGracePeriod", "spec.kubelet.evictionMaxPodGracePeriod", -1e9, 1e9)) < 0 ||
            (r = int_range(c, k, "imageGCHighThresholdPercent", "spec.kubelet.imageGCHighThresholdPercent", 0, 100)) < 0 ||
            (r = int_range(c, k, "imageGCLowThresholdPercent", "spec.kubelet.imageGCLowThresholdPercent", 0, 100)) < 0 ||
            (r = want_type(c, get(k, "cpuCFSQuota"), "spec.kubelet.cpuCFSQuota", cJSON_True, "true or false")) < 0 ||
            (r = reserved_map(c, get(k, "systemReserved"), "spec.kubelet.systemReserved")) < 0 ||
            (r = reserved_map(c, get(k, "kubeReserved"), "spec.kubelet.kubeReserved")) < 0 ||
            (r = eviction_map(c, get(k, "evictionHard"), "spec.kubelet.evictionHard", false)) < 0 ||
            (r = eviction_map(c, get(k, "evictionSoft"), "spec.kubelet.evictionSoft", false)) < 0 ||
            (r = eviction_map(c, get(k, "evictionSoftGracePeriod"), "spec.kubelet.evictionSoftGracePeriod", true)) < 0)
                return r;
        const cJSON *hi = get(k, "imageGCHighThresholdPercent"), *lo = get(k, "imageGCLowThresholdPercent");
        if (cJSON_IsNumber(hi) && cJSON_IsNumber(lo) && hi->valuedouble <= lo->valuedouble)
                return fail(c, "spec.kubelet", "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent");
        const cJSON *soft = get(k, "evictionSoft"), *grace = get(k, "evictionSoftGracePeriod"), *e;
        cJSON_ArrayForEach(e, soft)
                if (!get(grace, e->string))
                        return fail(c, "spec.kubelet", "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod");
        cJSON_ArrayForEach(e, grace)
                if (!get(soft, e->string))
                        return fail(c, "spec.kubelet", "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft");
        return 0;
}

static int check_devices(Check *c, const cJSON *bdm) {
        static const char *const known[] = { "deviceName", "ebs", "rootVolume", NULL };
        static const char *const ebs_known[] = { "deleteOnTermination", "encrypted", "iops", "kmsKeyID", "snapshotID",
                                                 "throughput", "volumeSize", "volumeType", "volumeInitializationRate", NULL };
        static const char *const types[] = { "standard", "io1", "io2", "gp2", "sc1", "st1", "gp3", NULL };
        char p[200], q[260];
        if (!bdm || cJSON_IsNull(bdm))
                return 0;
        if (!cJSON_IsArray(bdm))
                return fail(c, "spec.blockDeviceMappings", "must be a list");
        if (cJSON_GetArraySize(bdm) > 50)
                return fail(c, "spec.blockDeviceMappings", "has more than 50 entries");
        if (cJSON_GetArraySize(bdm) > 16)
                return fail(c, "spec.blockDeviceMappings", "more than 16 devices are not supported by nodesmith's launch "
                            "templates");
        size_t i = 0, roots = 0;
        const cJSON *d;
        cJSON_ArrayForEach(d, bdm) {
                snprintf(p, sizeof p, "spec.blockDeviceMappings[%zu]", i++);
                int r = keys(c, d, p, known, NULL);
                if (r < 0)
                        return r;
                const cJSON *ebs = get(d, "ebs");
                snprintf(q, sizeof q, "%s.ebs", p);
                if ((r = keys(c, ebs, q, ebs_known, NULL)) < 0)
                        return r;
                if (!str(d, "deviceName"))
                        return fail(c, p, "deviceName is required by EC2 (for example /dev/xvda)");
                if (!ebs)
                        return fail(c, q, "is required");
                if (!get(ebs, "snapshotID") && !get(ebs, "volumeSize"))
                        return fail(c, q, "snapshotID or volumeSize must be defined");
                const cJSON *size = get(ebs, "volumeSize");
                int64_t bytes;
                snprintf(q, sizeof q, "%s.ebs.volumeSize", p);
                if (size && (!cJSON_IsString(size) || quantity_parse(size->valuestring, &bytes) < 0 || bytes < (1LL << 30) ||
                             bytes > (64LL << 40) || !strpbrk(size->valuestring, "GT")))
                        return fail(c, q, "must be a size in Gi, G, Ti or T, from 1Gi to 64T");
                snprintf(q, sizeof q, "%s.ebs.volumeType", p);
                if (get(ebs, "volumeType") && !in(str(ebs, "volumeType"), types))
                        return fail(c, q, "must be one of standard, io1, io2, gp2, sc1, st1, gp3");
                snprintf(q, sizeof q, "%s.ebs.volumeInitializationRate", p);
                if ((r = int_range(c, ebs, "volumeInitializationRate", q, 100, 300)) < 0)
                        return r;
                if (get(ebs, "volumeInitializationRate") && !str(ebs, "snapshotID"))
                        return fail(c, q, "snapshotID must be set when volumeInitializationRate is set");
                snprintf(q, sizeof q, "%s.ebs.iops", p);
                if ((r = int_range(c, ebs, "iops", q, 100, 256000)) < 0)
                        return r;
                snprintf(q, sizeof q, "%s.ebs.throughput", p);
                if ((r = int_range(c, ebs, "throughput", q, 125, 2000)) < 0)
                        return r;
                snprintf(q, sizeof q, "%s.ebs", p);
                if ((r = want_type(c, get(ebs, "encrypted"), q, cJSON_True, "true or false for encrypted")) < 0 ||
                    (r = want_type(c, get(ebs, "deleteOnTermination"), q, cJSON_True,
                                   "true or false for deleteOnTermination")) < 0 ||
                    (r = want_type(c, get(d, "rootVolume"), p, cJSON_True, "true or false for rootVolume")) < 0)
                        return r;
                roots += cJSON_IsTrue(get(d, "rootVolume"));
        }
        if (roots > 1)
                return fail(c, "spec.blockDeviceMappings", "must have only one blockDeviceMappings with rootVolume");
        return 0;
}

static int check_metadata(Check *c, const cJSON *md) {
        static const char *const known[] = { "httpEndpoint", "httpProtocolIPv6", "httpPutResponseHopLimit", "httpTokens",
                                             NULL };
        static const char *const onoff[] = { "enabled", "disabled", NULL };
        static const char *const tokens[] = { "required", "optional", NULL };
        int r = keys(c, md, "spec.metadataOptions", known, NULL);
        if (r < 0 || !md)
                return r;
        if (get(md, "httpEndpoint") && !in(str(md, "httpEndpoint"), onoff))
                return fail(c, "spec.metadataOptions.httpEndpoint", "must be enabled or disabled");
        if (get(md, "httpProtocolIPv6") && !in(str(md, "httpProtocolIPv6"), onoff))
                return fail(c, "spec.metadataOptions.httpProtocolIPv6", "must be enabled or disabled");
        if (get(md, "httpTokens") && !in(str(md, "httpTokens"), tokens))
                return fail(c, "spec.metadataOptions.httpTokens", "must be required or optional");
        return int_range(c, md, "httpPutResponseHopLimit", "spec.metadataOptions.httpPutResponseHopLimit", 1, 64);
}

int nodeclass_check(const cJSON *spec, const char *what, char **ret_error) {
        Check c = { what, ret_error };
        static const char *const known[] = { "subnetSelectorTerms", "securityGroupSelectorTerms", "associatePublicIPAddress",
                                             "amiSelectorTerms", "amiFamily", "userData", "role", "instanceProfile", "tags",
                                             "kubelet", "blockDeviceMappings", "instanceStorePolicy", "detailedMonitoring",
                                             "metadataOptions", "enclaveOptions", "context", "ipPrefixCount",
                                             "capacityReservationSelectorTerms", NULL };
        static const char *const subnet_keys[] = { "tags", "id", NULL }, *const subnet_excl[] = { "id", NULL };
        static const char *const sg_keys[] = { "tags", "id", "name", "vpcID", NULL }, *const sg_excl[] = { "id", NULL };
        int r = keys(&c, spec, "spec", known, NULL);
        if (r < 0)
                return r;
        if ((r = int_range(&c, spec, "ipPrefixCount", "spec.ipPrefixCount", 0, 64)) < 0 ||
            (r = check_reservations(&c, spec)) < 0 ||
            (r = terms(&c, spec, "subnetSelectorTerms", subnet_keys, "subnet-", subnet_excl, true)) < 0 ||
            (r = terms(&c, spec, "securityGroupSelectorTerms", sg_keys, "sg-", sg_excl, true)) < 0 ||
            (r = check_ami(&c, spec)) < 0 || (r = check_bottlerocket(&c, spec)) < 0)
                return r;
        const char *role = str(spec, "role"), *profile = str(spec, "instanceProfile");
        if ((get(spec, "role") && (!role || !*role)) || (get(spec, "instanceProfile") && (!profile || !*profile)))
                return fail(&c, get(spec, "role") ? "spec.role" : "spec.instanceProfile", "must be a non-empty string");
        if (!role == !profile)
                return fail(&c, "spec", "must specify exactly one of ['role', 'instanceProfile']");
        if ((r = want_type(&c, get(spec, "userData"), "spec.userData", cJSON_String, "a string")) < 0 ||
            (r = want_type(&c, get(spec, "associatePublicIPAddress"), "spec.associatePublicIPAddress", cJSON_True,
                           "true or false")) < 0 ||
            (r = want_type(&c, get(spec, "detailedMonitoring"), "spec.detailedMonitoring", cJSON_True, "true or false")) < 0 ||
            (r = want_type(&c, get(spec, "context"), "spec.context", cJSON_String, "a string")) < 0 ||
            (r = string_map(&c, get(spec, "tags"), "spec.tags", false)) < 0)
                return r;
        const cJSON *t;
        cJSON_ArrayForEach(t, get(spec, "tags")) {
                static const char *const restricted[] = { "eks:eks-cluster-name", "karpenter.sh/nodepool",
                                                          "karpenter.sh/nodeclaim", "karpenter.k8s.aws/ec2nodeclass",
                                                          "nodesmith.io/cluster", "nodesmith.io/nodepool",
                                                          "nodesmith.io/ec2nodeclass", NULL };
                char p[300];
                snprintf(p, sizeof p, "spec.tags.%s", t->string);
                if (in(t->string, restricted) || strncmp(t->string, "kubernetes.io/cluster", 21) == 0)
                        return fail(&c, p, "tag contains a restricted tag (%s)", t->string);
        }
        if (cJSON_GetArraySize(get(spec, "tags")) > 40)
                return fail(&c, "spec.tags", "more than 40 tags leave no room for nodesmith's own (EC2 allows 50)");
        const cJSON *isp = get(spec, "instanceStorePolicy");
        if (isp && !cJSON_IsNull(isp) && !(cJSON_IsString(isp) && streq(isp->valuestring, "RAID0")))
                return fail(&c, "spec.instanceStorePolicy", "must be RAID0");
        static const char *const enclave_known[] = { "enabled", NULL };
        if ((r = keys(&c, get(spec, "enclaveOptions"), "spec.enclaveOptions", enclave_known, NULL)) < 0 ||
            (r = want_type(&c, get(get(spec, "enclaveOptions"), "enabled"), "spec.enclaveOptions.enabled", cJSON_True,
                           "true or false")) < 0 ||
            (r = check_kubelet(&c, get(spec, "kubelet"))) < 0 || (r = check_devices(&c, get(spec, "blockDeviceMappings"))) < 0 ||
            (r = check_metadata(&c, get(spec, "metadataOptions"))) < 0)
                return r;
        return 0;
}
