/* SPDX-License-Identifier: Apache-2.0 */
/* catalogprobe: builds the instance catalog from live EC2 (coordinator/provision/catalog-ec2.h) and prints
 * a summary, for tests and for looking at an endpoint.
 *
 *   catalogprobe [--ec2-endpoint URL] [--region R] [--prices TABLE.json] [--fallback CATALOG.json]
 *                [--max-attempts N] [--type T]... [--all] [--verbose]
 *
 * Credentials come from the standard chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, …; set
 * AWS_EC2_METADATA_DISABLED=true off EC2). Prints one JSON object:
 *   {"ok", "error": {"errno", "message"}, "elapsedMs", "region", "types": N, "zones": [...],
 *    "gpuTypes": N, "spotZonePrices": N, "stats": {"requests", "retries"},
 *    "instanceTypes": {NAME: {"arch", "vcpu", "memoryMiB", "gpuCount", "gpuName",
 *                             "gpuManufacturer", "gpuMemoryMiB", "zones": [...],
 *                             "onDemand": USD, "spot": {ZONE: USD}}}}
 * with instanceTypes for the --type names (all types with --all). Exit 0 on success, 1 when the
 * build failed, 2 on bad usage. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aws/aws-credentials.h"
#include "coordinator/provision/catalog-ec2.h"
#include "aws/ec2.h"
#include "log.h"

#define MAX_TYPES 64

static struct {
        sd_event *event;
        Ec2Client *ec2;
        int exit_code;
        bool finished, all;
        uint64_t started;
        const char *types[MAX_TYPES];
        size_t n_types;
} P = { .exit_code = 1 };

static uint64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static const char *label(const SolverInstanceType *t, const char *key) {
        for (size_t i = 0; i < t->n_labels; i++)
                if (streq(t->labels[i].key, key))
                        return t->labels[i].value;
        return NULL;
}

static bool wanted(const char *name) {
        if (P.all)
                return true;
        for (size_t i = 0; i < P.n_types; i++)
                if (streq(P.types[i], name))
                        return true;
        return false;
}

static void add_label_number(cJSON *o, const char *k, const SolverInstanceType *t, const char *key) {
        const char *v = label(t, key);
        if (v)
                cJSON_AddNumberToObject(o, k, strtod(v, NULL));
}

static cJSON *type_json(const SolverInstanceType *t) {
        cJSON *o = cJSON_CreateObject(), *zones = cJSON_CreateArray(), *spot = cJSON_CreateObject();
        const char *s;
        cJSON_AddStringToObject(o, "arch", strempty(label(t, "kubernetes.io/arch")));
        add_label_number(o, "vcpu", t, "nodesmith.io/instance-cpu");
        add_label_number(o, "memoryMiB", t, "nodesmith.io/instance-memory");
        add_label_number(o, "gpuCount", t, "nodesmith.io/instance-gpu-count");
        if ((s = label(t, "nodesmith.io/instance-gpu-name")))
                cJSON_AddStringToObject(o, "gpuName", s);
        if ((s = label(t, "nodesmith.io/instance-gpu-manufacturer")))
                cJSON_AddStringToObject(o, "gpuManufacturer", s);
        add_label_number(o, "gpuMemoryMiB", t, "nodesmith.io/instance-gpu-memory");
        if ((s = label(t, "nodesmith.io/instance-cpu-manufacturer")))
                cJSON_AddStringToObject(o, "cpuManufacturer", s);
        cJSON_AddNumberToObject(o, "neuron", (double) t->capacity.v[SOLVER_RES_NEURON]);
        double od = -1;
        for (size_t i = 0; i < t->n_offerings; i++) {
                const SolverOffering *f = &t->offerings[i];
                if (f->capacity_type == SOLVER_CAPACITY_ON_DEMAND) {
                        cJSON_AddItemToArray(zones, cJSON_CreateString(f->zone));
                        if (od < 0 || f->price < od)
                                od = f->price;
                } else if (f->capacity_type == SOLVER_CAPACITY_SPOT)
                        cJSON_AddNumberToObject(spot, f->zone, f->price);
        }
        cJSON_AddItemToObject(o, "zones", zones);
        cJSON_AddNumberToObject(o, "onDemand", od);
        cJSON_AddItemToObject(o, "spot", spot);
        return o;
}

static void on_done(int error, Catalog *c, void *userdata) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", error >= 0);
        if (error < 0) {
                cJSON *e = cJSON_AddObjectToObject(o, "error");
                cJSON_AddNumberToObject(e, "errno", error);
                cJSON_AddStringToObject(e, "message", strerror(-error));
        }
        cJSON_AddNumberToObject(o, "elapsedMs", (double) (mono_ms() - P.started));
        const Ec2Stats *s = ec2_client_stats(P.ec2);
        cJSON *j = cJSON_AddObjectToObject(o, "stats");
        cJSON_AddNumberToObject(j, "requests", (double) s->requests);
        cJSON_AddNumberToObject(j, "retries", (double) s->retries);
        if (c) {
                size_t n, gpu = 0, spot = 0;
                const SolverInstanceType *t = catalog_types(c, &n);
                cJSON *zones = cJSON_CreateArray(), *types = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "region", catalog_region(c));
                cJSON_AddNumberToObject(o, "types", (double) n);
                for (size_t i = 0; i < n; i++) {
                        const char *g = label(&t[i], "nodesmith.io/instance-gpu-count");
                        if (g && !streq(g, "0"))
                                gpu++;
                        for (size_t k = 0; k < t[i].n_offerings; k++) {
                                const SolverOffering *f = &t[i].offerings[k];
                                if (f->capacity_type == SOLVER_CAPACITY_SPOT)
                                        spot++;
                                bool seen = false;
                                const cJSON *z;
                                cJSON_ArrayForEach(z, zones)
                                        if (streq(z->valuestring, f->zone))
                                                seen = true;
                                if (!seen)
                                        cJSON_AddItemToArray(zones, cJSON_CreateString(f->zone));
                        }
                        if (wanted(t[i].name))
                                cJSON_AddItemToObject(types, t[i].name, type_json(&t[i]));
                }
                cJSON_AddItemToObject(o, "zones", zones);
                cJSON_AddNumberToObject(o, "gpuTypes", (double) gpu);
                cJSON_AddNumberToObject(o, "spotZonePrices", (double) spot);
                cJSON_AddItemToObject(o, "instanceTypes", types);
                catalog_free(c);
        }
        char *out = cJSON_PrintUnformatted(o);
        if (out)
                printf("%s\n", out);
        fflush(stdout);
        free(out);
        cJSON_Delete(o);
        P.exit_code = error < 0 ? 1 : 0;
        P.finished = true;
        (void) sd_event_exit(P.event, 0);
}

static int usage(void) {
        fprintf(stderr, "usage: catalogprobe [--ec2-endpoint URL] [--region R] [--prices FILE] [--fallback FILE]\n"
                        "                    [--max-attempts N] [--type T]... [--all] [--verbose]\n");
        return 2;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "ec2-endpoint", required_argument, NULL, 'e' }, { "region", required_argument, NULL, 'r' },
                { "prices", required_argument, NULL, 'p' },       { "fallback", required_argument, NULL, 'f' },
                { "max-attempts", required_argument, NULL, 'm' }, { "type", required_argument, NULL, 't' },
                { "all", no_argument, NULL, 'a' },                { "verbose", no_argument, NULL, 'v' },
                {}
        };
        Ec2Config cfg = { .region = "us-east-1" };
        AwsCredentialsConfig ccfg = {};
        const char *prices = NULL, *fallback_path = NULL;
        HttpClient *http = NULL;
        AwsCredentialProvider *creds = NULL;
        _cleanup_(catalog_freep) Catalog *fallback = NULL;
        int c, r;

        log_set_max_level(LOG_WARNING);
        while ((c = getopt_long(argc, argv, "e:r:p:f:m:t:av", opts, NULL)) >= 0) {
                switch (c) {
                case 'e': cfg.ec2_endpoint = optarg; break;
                case 'r': cfg.region = optarg; break;
                case 'p': prices = optarg; break;
                case 'f': fallback_path = optarg; break;
                case 'm': cfg.max_attempts = (unsigned) atoi(optarg); break;
                case 't':
                        if (P.n_types >= MAX_TYPES)
                                return usage();
                        P.types[P.n_types++] = optarg;
                        break;
                case 'a': P.all = true; break;
                case 'v': log_set_max_level(LOG_DEBUG); break;
                default: return usage();
                }
        }
        if (optind != argc)
                return usage();
        ccfg.region = cfg.region;
        if (fallback_path) {
                _cleanup_free_ char *err = NULL;
                r = catalog_load_file(fallback_path, &fallback, &err);
                if (r < 0) {
                        fprintf(stderr, "catalogprobe: %s: %s\n", fallback_path, err ? err : strerror(-r));
                        return 2;
                }
        }

        r = sd_event_default(&P.event);
        if (r >= 0)
                r = http_client_new(P.event, &http);
        if (r >= 0)
                r = aws_credential_provider_new(P.event, http, &ccfg, &creds);
        if (r >= 0)
                r = ec2_client_new(P.event, http, creds, &cfg, &P.ec2);
        if (r < 0) {
                fprintf(stderr, "catalogprobe: setup failed: %s\n", strerror(-r));
                return 1;
        }
        P.started = mono_ms();
        r = catalog_ec2_build(P.ec2, cfg.region, fallback, prices, on_done, NULL);
        if (r < 0) {
                fprintf(stderr, "catalogprobe: could not start: %s\n", strerror(-r));
                P.exit_code = 2;
        } else if (!P.finished)
                (void) sd_event_loop(P.event);

        P.ec2 = ec2_client_free(P.ec2);
        creds = aws_credential_provider_free(creds);
        http = http_client_free(http);
        sd_event_unref(P.event);
        return P.exit_code;
}
