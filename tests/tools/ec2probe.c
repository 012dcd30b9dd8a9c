/* SPDX-License-Identifier: Apache-2.0 */
/* ec2probe: coordinator/aws/ec2.h from the command line, for tests and for poking at an endpoint.
 *
 *   ec2probe [OPTIONS] COMMAND ARGS...
 * OPTIONS:  --endpoint URL --ssm-endpoint URL --sts-endpoint URL --imds-endpoint URL
 *           --region R --cluster NAME --access-key K --secret-key S [--session-token T]
 *           --max-attempts N --backoff-base MS --backoff-max MS --max-pages N --max-items N
 *           --tag K=V (filters; create-tags: the tags) --id ID --owner O --name N --arch A
 *           --state S --type T
 *           launch templates: --image AMI --sg ID --profile NAME --user-data TEXT --hop-limit N
 *                             --volume-size GIB
 *           fleets: --lt-id ID | --lt-name NAME, --version V, --capacity-type spot|on-demand,
 *                   --count N, --nodepool P, --override TYPE[,SUBNET[,ZONE[,PRIORITY[,MAXPRICE]]]]
 *           --token CLIENT-TOKEN --verbose
 * COMMANDS: credentials | instance-types [TYPE...] | offerings | spot-prices TYPE...
 *           | subnets | security-groups | images | ssm-parameter NAME
 *           | create-launch-template | create-fleet | instances | terminate ID...
 *           | create-tags ID...
 *
 * Prints one JSON object: {"ok": bool, "error": {"kind", "code", "message", "errno",
 * "status", "attempts"}, "stats": {"requests", "retries", "throttled"}, "elapsedMs", "result"}
 * and exits 0 on success, 1 on an API error, 2 on bad usage. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aws/aws-credentials.h"
#include "aws/ec2.h"
#include "log.h"

#define MAX_ARGS 64

static struct {
        sd_event *event;
        Ec2Client *ec2;
        AwsCredentialProvider *creds;
        int exit_code;
        bool finished;
        uint64_t started;
        const char *tag_keys[MAX_ARGS], *tag_values[MAX_ARGS];
        size_t n_tags;
        const char *ids[MAX_ARGS + 1], *owners[MAX_ARGS + 1], *sgs[MAX_ARGS + 1];
        size_t n_ids, n_owners, n_sgs;
        const char *name, *arch, *state, *type, *image, *profile, *user_data, *lt_id, *lt_name;
        const char *version, *nodepool, *token;
        unsigned hop_limit, count;
        uint64_t volume_size;
        Ec2CapacityType capacity_type;
        Ec2FleetOverride overrides[EC2_MAX_FLEET_OVERRIDES + 1];
        char *override_bufs[EC2_MAX_FLEET_OVERRIDES + 1];
        size_t n_overrides;
} P = { .exit_code = 1, .count = 1 };

static uint64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static cJSON *strv_json(char *const *l) {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; l && l[i]; i++)
                cJSON_AddItemToArray(a, cJSON_CreateString(l[i]));
        return a;
}

static cJSON *tags_json(const Ec2Tag *t, size_t n) {
        cJSON *o = cJSON_CreateObject();
        for (size_t i = 0; i < n; i++)
                cJSON_AddStringToObject(o, t[i].key, t[i].value);
        return o;
}

static void finish(const Ec2Error *e, cJSON *result) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", !e);
        if (e) {
                cJSON *j = cJSON_AddObjectToObject(o, "error");
                cJSON_AddStringToObject(j, "kind", ec2_error_kind_to_string(e->kind));
                cJSON_AddStringToObject(j, "code", e->code);
                cJSON_AddStringToObject(j, "message", e->message);
                cJSON_AddNumberToObject(j, "errno", e->error);
                cJSON_AddNumberToObject(j, "status", (double) e->status);
                cJSON_AddNumberToObject(j, "attempts", e->attempts);
        }
        if (P.ec2) {
                const Ec2Stats *s = ec2_client_stats(P.ec2);
                cJSON *j = cJSON_AddObjectToObject(o, "stats");
                cJSON_AddNumberToObject(j, "requests", (double) s->requests);
                cJSON_AddNumberToObject(j, "retries", (double) s->retries);
                cJSON_AddNumberToObject(j, "throttled", (double) s->throttled);
        }
        cJSON_AddNumberToObject(o, "elapsedMs", (double) (mono_ms() - P.started));
        if (result)
                cJSON_AddItemToObject(o, "result", result);
        char *s = cJSON_PrintUnformatted(o);
        printf("%s\n", s);
        fflush(stdout);
        free(s);
        cJSON_Delete(o);
        P.exit_code = e ? 1 : 0;
        P.finished = true;
        (void) sd_event_exit(P.event, 0);
}

static void on_types(Ec2Client *c, const Ec2Error *e, Ec2InstanceTypeList *l, void *u) {
        cJSON *a = e ? NULL : cJSON_CreateArray();
        for (size_t i = 0; l && i < l->n; i++) {
                Ec2InstanceType *t = &l->items[i];
                cJSON *o = cJSON_CreateObject(), *g = cJSON_CreateArray();
                cJSON_AddStringToObject(o, "name", t->name);
                cJSON_AddNumberToObject(o, "vcpus", t->vcpus);
                cJSON_AddNumberToObject(o, "memoryMiB", (double) t->memory_mib);
                cJSON_AddItemToObject(o, "architectures", strv_json(t->architectures));
                for (size_t k = 0; k < t->n_gpus; k++) {
                        cJSON *x = cJSON_CreateObject();
                        cJSON_AddStringToObject(x, "name", t->gpus[k].name);
                        cJSON_AddStringToObject(x, "manufacturer", t->gpus[k].manufacturer);
                        cJSON_AddNumberToObject(x, "count", t->gpus[k].count);
                        cJSON_AddNumberToObject(x, "memoryMiB", (double) t->gpus[k].memory_mib);
                        cJSON_AddItemToArray(g, x);
                }
                cJSON_AddItemToObject(o, "gpus", g);
                cJSON_AddNumberToObject(o, "maxEnis", t->max_enis);
                cJSON_AddNumberToObject(o, "ipv4PerEni", t->ipv4_per_eni);
                cJSON_AddStringToObject(o, "hypervisor", strempty(t->hypervisor));
                cJSON_AddBoolToObject(o, "bareMetal", t->bare_metal);
                cJSON_AddBoolToObject(o, "spot", t->spot_supported);
                cJSON_AddNumberToObject(o, "instanceStorageGB", (double) t->instance_storage_gb);
                cJSON_AddStringToObject(o, "networkPerformance", strempty(t->network_performance));
                cJSON_AddItemToArray(a, o);
        }
        ec2_instance_type_list_free(l);
        finish(e, a);
}

static void on_offerings(Ec2Client *c, const Ec2Error *e, Ec2OfferingList *l, void *u) {
        cJSON *a = e ? NULL : cJSON_CreateArray();
        for (size_t i = 0; l && i < l->n; i++) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "type", l->items[i].instance_type);
                cJSON_AddStringToObject(o, "zone", l->items[i].zone);
                cJSON_AddItemToArray(a, o);
        }
        ec2_offering_list_free(l);
        finish(e, a);
}

static void on_spot(Ec2Client *c, const Ec2Error *e, Ec2SpotPriceList *l, void *u) {
        cJSON *a = e ? NULL : cJSON_CreateArray();
        for (size_t i = 0; l && i < l->n; i++) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "type", l->items[i].instance_type);
                cJSON_AddStringToObject(o, "zone", l->items[i].zone);
                cJSON_AddNumberToObject(o, "price", l->items[i].price);
                cJSON_AddNumberToObject(o, "timestamp", (double) l->items[i].timestamp);
                cJSON_AddItemToArray(a, o);
        }
        ec2_spot_price_list_free(l);
        finish(e, a);
}

static void on_subnets(Ec2Client *c, const Ec2Error *e, Ec2SubnetList *l, void *u) {
        cJSON *a = e ? NULL : cJSON_CreateArray();
        for (size_t i = 0; l && i < l->n; i++) {
                Ec2Subnet *s = &l->items[i];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "id", s->id);
                cJSON_AddStringToObject(o, "vpc", strempty(s->vpc_id));
                cJSON_AddStringToObject(o, "zone", s->zone);
                cJSON_AddStringToObject(o, "zoneId", strempty(s->zone_id));
                cJSON_AddNumberToObject(o, "availableIps", (double) s->available_ips);
                cJSON_AddItemToObject(o, "tags", tags_json(s->tags, s->n_tags));
                cJSON_AddItemToArray(a, o);
        }
        ec2_subnet_list_free(l);
        finish(e, a);
}

static void on_sgs(Ec2Client *c, const Ec2Error *e, Ec2SecurityGroupList *l, void *u) {
        cJSON *a = e ? NULL : cJSON_CreateArray();
        for (size_t i = 0; l && i < l->n; i++) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "id", l->items[i].id);
                cJSON_AddStringToObject(o, "name", strempty(l->items[i].name));
                cJSON_AddItemToObject(o, "tags", tags_json(l->items[i].tags, l->items[i].n_tags));
                cJSON_AddItemToArray(a, o);
        }
        ec2_security_group_list_free(l);
        finish(e, a);
}

static void on_images(Ec2Client *c, const Ec2Error *e, Ec2ImageList *l, void *u) {
        cJSON *a = e ? NULL : cJSON_CreateArray();
        for (size_t i = 0; l && i < l->n; i++) {
                Ec2Image *m = &l->items[i];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "id", m->id);
                cJSON_AddStringToObject(o, "name", strempty(m->name));
                cJSON_AddStringToObject(o, "architecture", strempty(m->architecture));
                cJSON_AddNumberToObject(o, "created", (double) m->creation_date);
                cJSON_AddItemToArray(a, o);
        }
        ec2_image_list_free(l);
        finish(e, a);
}

static void on_ssm(Ec2Client *c, const Ec2Error *e, char *value, void *u) {
        finish(e, value ? cJSON_CreateString(value) : NULL);
        free(value);
}

static void on_lt(Ec2Client *c, const Ec2Error *e, Ec2LaunchTemplate *t, void *u) {
        cJSON *o = NULL;
        if (t) {
                o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "id", t->id);
                cJSON_AddStringToObject(o, "name", t->name);
                cJSON_AddNumberToObject(o, "version", (double) t->version);
        }
        ec2_launch_template_free(t);
        finish(e, o);
}

static void on_fleet(Ec2Client *c, const Ec2Error *e, Ec2FleetResult *f, void *u) {
        cJSON *o = NULL;
        if (f) {
                cJSON *in = cJSON_CreateArray(), *er = cJSON_CreateArray();
                o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "fleetId", f->fleet_id);
                for (size_t i = 0; i < f->n_instances; i++) {
                        Ec2FleetInstances *x = &f->instances[i];
                        cJSON *j = cJSON_CreateObject();
                        cJSON_AddItemToObject(j, "ids", strv_json(x->instance_ids));
                        cJSON_AddStringToObject(j, "type", strempty(x->instance_type));
                        cJSON_AddStringToObject(j, "lifecycle", strempty(x->lifecycle));
                        cJSON_AddStringToObject(j, "zone", strempty(x->zone));
                        cJSON_AddStringToObject(j, "subnet", strempty(x->subnet_id));
                        cJSON_AddItemToArray(in, j);
                }
                for (size_t i = 0; i < f->n_errors; i++) {
                        Ec2FleetError *x = &f->errors[i];
                        cJSON *j = cJSON_CreateObject();
                        cJSON_AddStringToObject(j, "code", strempty(x->code));
                        cJSON_AddStringToObject(j, "message", strempty(x->message));
                        cJSON_AddStringToObject(j, "type", strempty(x->instance_type));
                        cJSON_AddStringToObject(j, "subnet", strempty(x->subnet_id));
                        cJSON_AddStringToObject(j, "zone", strempty(x->zone));
                        cJSON_AddStringToObject(j, "lifecycle", strempty(x->lifecycle));
                        cJSON_AddItemToArray(er, j);
                }
                cJSON_AddItemToObject(o, "instances", in);
                cJSON_AddItemToObject(o, "errors", er);
                cJSON_AddNumberToObject(o, "launched", (double) ec2_fleet_result_count(f));
        }
        ec2_fleet_result_free(f);
        finish(e, o);
}

static void on_instances(Ec2Client *c, const Ec2Error *e, Ec2InstanceList *l, void *u) {
        cJSON *a = e ? NULL : cJSON_CreateArray();
        for (size_t i = 0; l && i < l->n; i++) {
                Ec2Instance *x = &l->items[i];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "id", x->id);
                cJSON_AddStringToObject(o, "type", strempty(x->instance_type));
                cJSON_AddStringToObject(o, "zone", strempty(x->zone));
                cJSON_AddStringToObject(o, "state", x->state);
                cJSON_AddStringToObject(o, "lifecycle", x->lifecycle);
                cJSON_AddStringToObject(o, "privateIp", strempty(x->private_ip));
                cJSON_AddNumberToObject(o, "launchTime", (double) x->launch_time);
                cJSON_AddItemToObject(o, "tags", tags_json(x->tags, x->n_tags));
                cJSON_AddItemToArray(a, o);
        }
        ec2_instance_list_free(l);
        finish(e, a);
}

static void on_terminate(Ec2Client *c, const Ec2Error *e, Ec2TerminateResult *t, void *u) {
        cJSON *o = NULL;
        if (t) {
                o = cJSON_CreateObject();
                cJSON_AddItemToObject(o, "terminated", strv_json(t->terminated));
                cJSON_AddItemToObject(o, "refused", strv_json(t->refused));
        }
        ec2_terminate_result_free(t);
        finish(e, o);
}

static void on_done(Ec2Client *c, const Ec2Error *e, void *u) {
        finish(e, NULL);
}

static void on_creds(AwsCredentialProvider *p, int error, const AwsCredentials *creds, void *u) {
        cJSON *o = NULL;
        Ec2Error e = { .kind = EC2_ERROR_CREDENTIALS, .error = error };
        if (error >= 0) {
                o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "source", aws_credential_source_to_string(aws_credentials_source(p)));
                cJSON_AddStringToObject(o, "accessKeyId", creds->access_key_id);
                cJSON_AddBoolToObject(o, "sessionToken", creds->session_token != NULL);
                cJSON_AddNumberToObject(o, "expiration", (double) creds->expiration);
        } else
                snprintf(e.message, sizeof e.message, "%s", strerror(-error));
        finish(error < 0 ? &e : NULL, o);
}

static int usage(void) {
        fprintf(stderr, "usage: ec2probe [OPTIONS] COMMAND ARGS... (see the head of tests/tools/ec2probe.c)\n");
        return 2;
}

static Ec2Filter filters[EC2_MAX_FILTERS];
static char *filter_names[EC2_MAX_FILTERS];
static const char *filter_values[EC2_MAX_FILTERS][1];

static size_t build_filters(void) {
        size_t n = 0;
        for (size_t i = 0; i < P.n_tags && n < EC2_MAX_FILTERS; i++, n++) {
                if (asprintf(&filter_names[n], "tag:%s", P.tag_keys[i]) < 0)
                        return 0;
                filter_values[n][0] = P.tag_values[i];
                filters[n] = (Ec2Filter) { filter_names[n], filter_values[n], 1 };
        }
        const struct {
                const char *name, *value;
        } extra[] = { { "name", P.name }, { "architecture", P.arch }, { "instance-type", P.type } };
        for (size_t i = 0; i < ELEMENTSOF(extra) && n < EC2_MAX_FILTERS; i++)
                if (extra[i].value) {
                        filter_values[n][0] = extra[i].value;
                        filters[n] = (Ec2Filter) { extra[i].name, filter_values[n], 1 };
                        n++;
                }
        return n;
}

static int add_override(const char *spec) {
        if (P.n_overrides >= EC2_MAX_FLEET_OVERRIDES + 1)
                return -E2BIG;
        char *b = strdup(spec), *save = NULL;
        if (!b)
                return -ENOMEM;
        P.override_bufs[P.n_overrides] = b;
        Ec2FleetOverride *o = &P.overrides[P.n_overrides++];
        *o = (Ec2FleetOverride) { .priority = -1 };
        char *f[5] = {};
        size_t k = 0;
        for (char *t = strsep(&b, ","); t && k < 5; t = strsep(&b, ","))
                f[k++] = t;
        (void) save;
        o->instance_type = f[0];
        o->subnet_id = isempty(f[1]) ? NULL : f[1];
        o->availability_zone = isempty(f[2]) ? NULL : f[2];
        if (!isempty(f[3]))
                o->priority = strtod(f[3], NULL);
        o->max_price = isempty(f[4]) ? NULL : f[4];
        return 0;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "endpoint", required_argument, NULL, 'e' },  { "ssm-endpoint", required_argument, NULL, 'S' },
                { "sts-endpoint", required_argument, NULL, 1 }, { "imds-endpoint", required_argument, NULL, 2 },
                { "region", required_argument, NULL, 'r' },    { "cluster", required_argument, NULL, 'c' },
                { "access-key", required_argument, NULL, 3 },  { "secret-key", required_argument, NULL, 4 },
                { "session-token", required_argument, NULL, 5 }, { "max-attempts", required_argument, NULL, 6 },
                { "backoff-base", required_argument, NULL, 7 }, { "backoff-max", required_argument, NULL, 8 },
                { "max-pages", required_argument, NULL, 9 },   { "max-items", required_argument, NULL, 10 },
                { "tag", required_argument, NULL, 't' },       { "id", required_argument, NULL, 11 },
                { "owner", required_argument, NULL, 12 },      { "name", required_argument, NULL, 13 },
                { "arch", required_argument, NULL, 14 },       { "state", required_argument, NULL, 15 },
                { "type", required_argument, NULL, 16 },       { "image", required_argument, NULL, 17 },
                { "sg", required_argument, NULL, 18 },         { "profile", required_argument, NULL, 19 },
                { "user-data", required_argument, NULL, 20 },  { "hop-limit", required_argument, NULL, 21 },
                { "volume-size", required_argument, NULL, 22 }, { "lt-id", required_argument, NULL, 23 },
                { "lt-name", required_argument, NULL, 24 },    { "version", required_argument, NULL, 25 },
                { "capacity-type", required_argument, NULL, 26 }, { "count", required_argument, NULL, 27 },
                { "nodepool", required_argument, NULL, 28 },   { "override", required_argument, NULL, 29 },
                { "token", required_argument, NULL, 30 },      { "no-imds", no_argument, NULL, 31 },
                { "verbose", no_argument, NULL, 'v' },         {}
        };
        Ec2Config cfg = { .region = "us-east-1" };
        AwsCredentialsConfig ccfg = {};
        HttpClient *http = NULL;
        int c, r;

        log_set_max_level(LOG_WARNING);
        while ((c = getopt_long(argc, argv, "e:S:r:c:t:v", opts, NULL)) >= 0) {
                switch (c) {
                case 'e': cfg.ec2_endpoint = optarg; break;
                case 'S': cfg.ssm_endpoint = optarg; break;
                case 1: ccfg.sts_endpoint = optarg; break;
                case 2: ccfg.imds_endpoint = optarg; break;
                case 'r': cfg.region = optarg; break;
                case 'c': cfg.cluster_name = optarg; break;
                case 3: ccfg.static_access_key_id = optarg; break;
                case 4: ccfg.static_secret_access_key = optarg; break;
                case 5: ccfg.static_session_token = optarg; break;
                case 6: cfg.max_attempts = (unsigned) atoi(optarg); break;
                case 7: cfg.backoff_base_usec = strtoull(optarg, NULL, 10) * USEC_PER_MSEC; break;
                case 8: cfg.backoff_max_usec = strtoull(optarg, NULL, 10) * USEC_PER_MSEC; break;
                case 9: cfg.max_pages = (unsigned) atoi(optarg); break;
                case 10: cfg.max_items = strtoull(optarg, NULL, 10); break;
                case 't': {
                        char *eq = strchr(optarg, '=');
                        if (!eq || P.n_tags >= MAX_ARGS)
                                return usage();
                        *eq = 0;
                        P.tag_keys[P.n_tags] = optarg;
                        P.tag_values[P.n_tags++] = eq + 1;
                        break;
                }
                case 11: if (P.n_ids < MAX_ARGS) P.ids[P.n_ids++] = optarg; break;
                case 12: if (P.n_owners < MAX_ARGS) P.owners[P.n_owners++] = optarg; break;
                case 13: P.name = optarg; break;
                case 14: P.arch = optarg; break;
                case 15: P.state = optarg; break;
                case 16: P.type = optarg; break;
                case 17: P.image = optarg; break;
                case 18: if (P.n_sgs < MAX_ARGS) P.sgs[P.n_sgs++] = optarg; break;
                case 19: P.profile = optarg; break;
                case 20: P.user_data = optarg; break;
                case 21: P.hop_limit = (unsigned) atoi(optarg); break;
                case 22: P.volume_size = strtoull(optarg, NULL, 10); break;
                case 23: P.lt_id = optarg; break;
                case 24: P.lt_name = optarg; break;
                case 25: P.version = optarg; break;
                case 26:
                        if (streq(optarg, "spot"))
                                P.capacity_type = EC2_CAPACITY_SPOT;
                        else if (streq(optarg, "on-demand"))
                                P.capacity_type = EC2_CAPACITY_ON_DEMAND;
                        else
                                return usage();
                        break;
                case 27: P.count = (unsigned) atoi(optarg); break;
                case 28: P.nodepool = optarg; break;
                case 29: if (add_override(optarg) < 0) return usage(); break;
                case 30: P.token = optarg; break;
                case 31: ccfg.imds_disabled = true; break;
                case 'v': log_set_max_level(LOG_DEBUG); break;
                default: return usage();
        }
        }
        if (optind >= argc)
                return usage();
        const char *cmd = argv[optind];
        char **args = argv + optind + 1;
        ccfg.region = cfg.region;

        r = sd_event_default(&P.event);
        if (r >= 0)
                r = http_client_new(P.event, &http);
        if (r >= 0)
                r = aws_credential_provider_new(P.event, http, &ccfg, &P.creds);
        if (r >= 0)
                r = ec2_client_new(P.event, http, P.creds, &cfg, &P.ec2);
        if (r < 0) {
                fprintf(stderr, "ec2probe: setup failed: %s\n", strerror(-r));
                return 1;
        }
        P.started = mono_ms();
        size_t nf = build_filters();
        const char *const *ids = P.n_ids ? P.ids : NULL;

        if (streq(cmd, "credentials"))
                r = aws_credentials_get(P.creds, on_creds, NULL);
        else if (streq(cmd, "instance-types"))
                r = ec2_describe_instance_types(P.ec2, *args ? (const char *const *) args : NULL,
                                                NULL, 0, on_types, NULL);
        else if (streq(cmd, "offerings"))
                r = ec2_describe_instance_type_offerings(P.ec2, filters, nf, on_offerings, NULL);
        else if (streq(cmd, "spot-prices"))
                r = ec2_describe_spot_prices(P.ec2, *args ? (const char *const *) args : NULL, 0, on_spot, NULL);
        else if (streq(cmd, "subnets"))
                r = ec2_describe_subnets(P.ec2, ids, filters, nf, on_subnets, NULL);
        else if (streq(cmd, "security-groups"))
                r = ec2_describe_security_groups(P.ec2, ids, filters, nf, on_sgs, NULL);
        else if (streq(cmd, "images"))
                r = ec2_describe_images(P.ec2, ids, P.n_owners ? P.owners : NULL, filters, nf, on_images, NULL);
        else if (streq(cmd, "ssm-parameter") && args[0])
                r = ec2_ssm_get_parameter(P.ec2, args[0], on_ssm, NULL);
        else if (streq(cmd, "create-launch-template")) {
                Ec2BlockDevice bd = { .device_name = "/dev/xvda", .volume_size_gib = P.volume_size,
                                      .volume_type = "gp3", .encrypted = true,
                                      .delete_on_termination = true };
                Ec2Tag tags[MAX_ARGS];
                for (size_t i = 0; i < P.n_tags; i++)
                        tags[i] = (Ec2Tag) { (char *) P.tag_keys[i], (char *) P.tag_values[i] };
                Ec2LaunchTemplateSpec s = {
                        .name = P.name, .image_id = P.image, .instance_profile_name = P.profile,
                        .security_group_ids = P.n_sgs ? P.sgs : NULL, .user_data = P.user_data,
                        .block_devices = &bd, .n_block_devices = 1, .metadata_hop_limit = P.hop_limit,
                        .tags = tags, .n_tags = P.n_tags, .client_token = P.token,
                };
                r = ec2_create_launch_template(P.ec2, &s, on_lt, NULL);
        } else if (streq(cmd, "create-fleet")) {
                Ec2FleetSpec s = {
                        .launch_template_id = P.lt_id, .launch_template_name = P.lt_name,
                        .launch_template_version = P.version, .overrides = P.overrides,
                        .n_overrides = P.n_overrides, .target_capacity = P.count,
                        .capacity_type = P.capacity_type, .nodepool = P.nodepool,
                        .name_tag = P.name, .client_token = P.token,
                };
                r = ec2_create_fleet(P.ec2, &s, on_fleet, NULL);
        } else if (streq(cmd, "instances")) {
                const char *states[] = { P.state, NULL };
                r = ec2_describe_cluster_instances(P.ec2, P.state ? states : NULL, filters, nf,
                                                   on_instances, NULL);
        } else if (streq(cmd, "terminate"))
                r = ec2_terminate_instances(P.ec2, (const char *const *) args, on_terminate, NULL);
        else if (streq(cmd, "create-tags")) {
                Ec2Tag tags[MAX_ARGS];
                for (size_t i = 0; i < P.n_tags; i++)
                        tags[i] = (Ec2Tag) { (char *) P.tag_keys[i], (char *) P.tag_values[i] };
                r = ec2_create_tags(P.ec2, (const char *const *) args, tags, P.n_tags, on_done, NULL);
        } else
                return usage();
        if (r < 0) {
                Ec2Error e = { .kind = streq(cmd, "credentials") ? EC2_ERROR_CREDENTIALS
                                                                 : EC2_ERROR_INVALID_PARAMETER,
                               .error = r };
                snprintf(e.message, sizeof e.message, "refused before sending: %s", strerror(-r));
                finish(&e, NULL);
                P.exit_code = 2;
        } else if (!P.finished)
                (void) sd_event_loop(P.event);

        for (size_t i = 0; i < EC2_MAX_FILTERS; i++)
                free(filter_names[i]);
        for (size_t i = 0; i < P.n_overrides; i++)
                free(P.override_bufs[i]);
        P.ec2 = ec2_client_free(P.ec2);
        P.creds = aws_credential_provider_free(P.creds);
        http = http_client_free(http);
        sd_event_unref(P.event);
        return P.exit_code;
}
