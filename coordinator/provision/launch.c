/* SPDX-License-Identifier: Apache-2.0 */
/* Launching one planned node: subnets, security groups, AMI, instance profile, launch template, CreateFleet. */
#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agents/nodebind.h"
#include "agents/proxydrain.h"
#include "aws/aws-credentials.h"
#include "aws/ec2.h"
#include "aws/instanceprofile.h"
#include "catalog-ec2.h"
#include "fileio.h"
#include "http.h"
#include "kube.h"
#include "launchclass.h"
#include "log.h"
#include "macro.h"
#include "model/catalog.h"
#include "model/nodepool.h"
#include "model/userdata.h"
#include "provisioner-internal.h"
#include "solver/solver.h"

/* ---- launching ---------------------------------------------------------------------------- */


Resolved *provision_resolved_get(Provisioner *p, const char *node_class) {
        for (size_t i = 0; i < p->n_resolved; i++)
                if (streq(p->resolved[i]->node_class, strempty(node_class)))
                        return p->resolved[i];
        Resolved **n = realloc(p->resolved, (p->n_resolved + 1) * sizeof *n);
        if (!n)
                return NULL;
        p->resolved = n;
        Resolved *r = calloc(1, sizeof *r);
        if (!r || !(r->node_class = strdup(strempty(node_class)))) {
                free(r);
                return NULL;
        }
        p->resolved[p->n_resolved++] = r;
        return r;
}

void provision_resolved_reset(Resolved *r) {
        for (size_t i = 0; i < r->n_subnets; i++) {
                free(r->subnets[i].id);
                free(r->subnets[i].zone);
        }
        r->n_subnets = 0;
        for (size_t i = 0; r->sgs[i]; i++) {
                free(r->sgs[i]);
                r->sgs[i] = NULL;
        }
        for (int a = 0; a < 2; a++) {
                free(r->ami[a]);
                r->ami[a] = NULL;
        }
        free(r->profile);
        r->profile = NULL;
        r->resolved_usec = 0;
}

void provision_resolved_free(Resolved *r) {
        if (!r)
                return;
        provision_resolved_reset(r);
        for (char **v = r->net_subnets; v && *v; v++)
                free(*v);
        free(r->net_subnets);
        for (char **v = r->net_sgs; v && *v; v++)
                free(*v);
        free(r->net_sgs);
        for (int a = 0; a < 2; a++) {
                free(r->template_name[a]);
                free(r->template_hash[a]);
        }
        ec2_capacity_reservation_list_free(r->cr_list);
        free(r->reservations);
        free(r->node_class);
        free(r);
}

/* A launch's step failed: counted, reported, logged. */
static void launch_failed_record(Provisioner *p, Round *rd, size_t launch, const char *what, const Ec2Error *err) {
        if (rd->result && launch < rd->result->n_launches)
                if (p->ports.launch_failed)
                        p->ports.launch_failed(p->ports.userdata, rd, &rd->result->launches[launch], what,
                                               err ? err->code : NULL, err ? err->message : NULL);
        p->launch_errors++;
        /* EC2 throttled, failed or was unreachable past the client's retries: the pods still
         * wait, so the round ends asking for another, which tries the same plan (the same
         * ClientToken) rather than leaving them until some other event pokes a batch */
        if (err && ec2_error_kind_retryable(err->kind))
                rd->launched_nothing = true;
        provision_set_error(p, "%s: %s %s", what, err ? err->code : "", err ? err->message : "");
        log_warning("Launch step failed (%s): %s %s", what, err ? err->code : "", err ? err->message : "");
}

void provision_launch_failed(Provisioner *p, const char *what, const Ec2Error *err) {
        launch_failed_record(p, p->round, p->round->next, what, err);
        p->round->step = STEP_IDLE;
        p->round->next++;
        provision_round_next(p);
}

static const cJSON *class_terms(Provisioner *p, const char *node_class, const char *field) {
        const cJSON *nc = node_class && p->nodeclasses ? kube_watch_get(p->nodeclasses, NULL, node_class) : NULL;
        return jget(jget(nc, "spec"), field);
}

/* The filter for DescribeSubnets / DescribeSecurityGroups: the tag nodesmith.io/discovery=CLUSTER
 * without a node class; a class's one term of plain tags as EC2 filters; else none, and the
 * terms (ORed, with ids, names and "*" values) are matched on the answer. */
size_t provision_selector_filters(Provisioner *p, const char *node_class, const char *field, Ec2Filter *f,
                               char names[][160], const char *values[][2]) {
        const cJSON *terms = class_terms(p, node_class, field);
        const cJSON *first = cJSON_GetArrayItem(terms, 0), *tags = jget(first, "tags");
        size_t n = 0;
        const cJSON *t;
        bool plain = cJSON_GetArraySize(terms) == 1 && cJSON_GetArraySize(first) == 1 && cJSON_GetArraySize(tags) <= 4;
        cJSON_ArrayForEach(t, tags)
                plain = plain && cJSON_IsString(t) && !strpbrk(t->valuestring, "*?[");
        if (terms && !plain)
                return 0;
        cJSON_ArrayForEach(t, tags) {
                if (n >= 4 || !cJSON_IsString(t))
                        break;
                snprintf(names[n], 160, "tag:%s", t->string);
                values[n][0] = t->valuestring;
                f[n] = (Ec2Filter) { .name = names[n], .values = values[n], .n_values = 1 };
                n++;
        }
        if (n == 0) {
                snprintf(names[0], 160, "tag:nodesmith.io/discovery");
                values[0][0] = p->cfg.cluster_name;
                f[0] = (Ec2Filter) { .name = names[0], .values = values[0], .n_values = 1 };
                n = 1;
        }
        return n;
}


/* What DescribeSubnets and DescribeSecurityGroups found, kept for the node class. */
static void resolved_add_subnets(Resolved *res, const Ec2SubnetList *list, const cJSON *terms) {
        for (size_t i = 0; i < list->n && res->n_subnets < MAX_SUBNETS; i++) {
                if (!launchclass_terms_match(terms, list->items[i].id, NULL, list->items[i].vpc_id, list->items[i].tags,
                                             list->items[i].n_tags))
                        continue;
                res->subnets[res->n_subnets].id = strdup(list->items[i].id);
                res->subnets[res->n_subnets].zone = strdup(strempty(list->items[i].zone));
                res->subnets[res->n_subnets].free_ips = list->items[i].available_ips;
                res->n_subnets++;
        }
}

static void resolved_add_sgs(Resolved *res, const Ec2SecurityGroupList *list, const cJSON *terms) {
        size_t k = 0;
        for (size_t i = 0; i < list->n && k < MAX_SGS; i++)
                if (launchclass_terms_match(terms, list->items[i].id, list->items[i].name, list->items[i].vpc_id,
                                            list->items[i].tags, list->items[i].n_tags))
                        res->sgs[k++] = strdup(list->items[i].id);
}

/* Subnets and security groups of a node class, looked up before the first solve: the solver
 * must know which zones nodes can go to. */
typedef struct Prefetch {
        Provisioner *p;
        Resolved *res;
        char *node_class;
} Prefetch;

static void prefetch_done(Prefetch *pf, bool ok) {
        Provisioner *p = pf->p;
        pf->res->prefetching = false;
        if (ok)
                pf->res->resolved_usec = provision_now_usec(p);
        free(pf->node_class);
        free(pf);
        /* The round that waited for this look-up had closed its batch: solve now, with the
         * pods that came meanwhile, rather than after another idle window. */
        if (p->round) {
                provisioner_poke(p); /* a round under way: after it */
                return;
        }
        provision_batch_close(p);
        provision_round_start(p);
}

static void on_prefetch_sgs(Ec2Client *ec2, const Ec2Error *err, Ec2SecurityGroupList *list, void *userdata) {
        Prefetch *pf = userdata;
        if (!err)
                resolved_add_sgs(pf->res, list, class_terms(pf->p, isempty(pf->node_class) ? NULL : pf->node_class,
                                                              "securityGroupSelectorTerms"));
        else
                log_warning("DescribeSecurityGroups failed: %s %s", err->code, err->message);
        ec2_security_group_list_free(list);
        prefetch_done(pf, !err);
}

static void on_prefetch_subnets(Ec2Client *ec2, const Ec2Error *err, Ec2SubnetList *list, void *userdata) {
        Prefetch *pf = userdata;
        Resolved *res = pf->res;
        if (err) {
                log_warning("DescribeSubnets failed: %s %s", err->code, err->message);
                ec2_subnet_list_free(list);
                return prefetch_done(pf, false);
        }
        resolved_add_subnets(res, list, class_terms(pf->p, isempty(pf->node_class) ? NULL : pf->node_class,
                                                    "subnetSelectorTerms"));
        ec2_subnet_list_free(list);
        if (res->n_subnets == 0) {
                log_warning("No subnet matches the selector of EC2NodeClass %s.",
                            isempty(pf->node_class) ? "(default)" : pf->node_class);
                return prefetch_done(pf, false);
        }
        Ec2Filter f[4];
        char names[4][160];
        const char *values[4][2] = {};
        size_t nf = provision_selector_filters(pf->p, pf->node_class, "securityGroupSelectorTerms", f, names, values);
        if (ec2_describe_security_groups(pf->p->ec2, NULL, f, nf, on_prefetch_sgs, pf) < 0)
                prefetch_done(pf, false);
}

/* Returns true when a look-up was started (or is under way): solve after it. */
bool provision_prefetch(Provisioner *p, const char *node_class) {
        Resolved *res = provision_resolved_get(p, node_class);
        uint64_t now = provision_now_usec(p);
        if (!res || res->resolved_usec)
                return false;
        if (res->prefetching)
                return true;
        if (res->prefetch_usec && now - res->prefetch_usec < 30 * USEC_PER_SEC)
                return false; /* it failed lately: solve without knowing the zones */
        Prefetch *pf = calloc(1, sizeof *pf);
        if (!pf)
                return false;
        pf->p = p;
        pf->res = res;
        pf->node_class = strdup(strempty(node_class));
        provision_resolved_reset(res);
        Ec2Filter f[4];
        char names[4][160];
        const char *values[4][2] = {};
        size_t nf = provision_selector_filters(p, node_class, "subnetSelectorTerms", f, names, values);
        res->prefetch_usec = now;
        if (!pf->node_class || ec2_describe_subnets(p->ec2, NULL, f, nf, on_prefetch_subnets, pf) < 0) {
                free(pf->node_class);
                free(pf);
                return false;
        }
        res->prefetching = true;
        return true;
}

void provision_on_subnets(Ec2Client *ec2, const Ec2Error *err, Ec2SubnetList *list, void *userdata) {
        Provisioner *p = userdata;
        Round *rd = p->round;
        if (err) {
                ec2_subnet_list_free(list);
                return provision_launch_failed(p, "DescribeSubnets", err);
        }
        Resolved *res = rd->res;
        resolved_add_subnets(res, list, class_terms(p, isempty(res->node_class) ? NULL : res->node_class,
                                                    "subnetSelectorTerms"));
        ec2_subnet_list_free(list);
        if (res->n_subnets == 0) {
                Ec2Error e = { .kind = EC2_ERROR_NOT_FOUND };
                snprintf(e.code, sizeof e.code, "NoSubnets");
                snprintf(e.message, sizeof e.message, "no subnet matches the node class's selector");
                return provision_launch_failed(p, "DescribeSubnets", &e);
        }
        rd->step = STEP_SGS;
        provision_round_next(p);
}

void provision_on_sgs(Ec2Client *ec2, const Ec2Error *err, Ec2SecurityGroupList *list, void *userdata) {
        Provisioner *p = userdata;
        Round *rd = p->round;
        if (err) {
                ec2_security_group_list_free(list);
                return provision_launch_failed(p, "DescribeSecurityGroups", err);
        }
        resolved_add_sgs(rd->res, list, class_terms(p, isempty(rd->res->node_class) ? NULL : rd->res->node_class,
                                                    "securityGroupSelectorTerms"));
        ec2_security_group_list_free(list);
        if (!rd->res->sgs[0]) {
                Ec2Error e = { .kind = EC2_ERROR_NOT_FOUND };
                snprintf(e.code, sizeof e.code, "NoSecurityGroups");
                snprintf(e.message, sizeof e.message, "no security group matches the node class's selector");
                rd->res->resolved_usec = 0; /* looked up again next time */
                return provision_launch_failed(p, "DescribeSecurityGroups", &e);
        }
        rd->step = STEP_PROFILE;
        provision_round_next(p);
}

/* The node class's spec (NULL: none) and what it puts into a launch (in the round's arena). */
static LaunchClass *launch_class(Provisioner *p, Round *rd, const char *node_class, const cJSON **ret_spec) {
        const cJSON *spec = node_class ? jget(kube_watch_get(p->nodeclasses, NULL, node_class), "spec") : NULL;
        LaunchClass *lc = solver_arena_alloc(rd->arena, sizeof *lc);
        if (!lc || launchclass_from_spec(spec, lc) < 0)
                return NULL;
        if (ret_spec)
                *ret_spec = spec;
        return lc;
}

static void on_profile(const Ec2Error *err, void *userdata) {
        Provisioner *p = userdata;
        Round *rd = p->round;
        if (err) {
                /* not known to hold the role: made sure of again before the next launch */
                free(rd->res->profile);
                rd->res->profile = NULL;
                return provision_launch_failed(p, "instance profile (EC2NodeClass role)", err);
        }
        rd->step = rd->res->ami[rd->arch] ? STEP_TEMPLATE : STEP_AMI;
        provision_round_next(p);
}

/* The instance profile the class's nodes get: spec.instanceProfile as it is; for spec.role one
 * made and kept by nodesmith; no class: the coordinator's --instance-profile. Returns 1 when a
 * look-up was started (on_profile continues). */
int provision_profile_resolve(Provisioner *p, Round *rd, const char *node_class) {
        const ProvisionerConfig *cfg = &p->cfg;
        const cJSON *spec = NULL;
        LaunchClass *lc = launch_class(p, rd, node_class, &spec);
        if (!lc)
                return -ENOMEM;
        const char *role = lc->role, *named = lc->instance_profile;
        char name[160];
        if (!role) {
                rd->res->profile = strdup(named ?: strempty(cfg->instance_profile));
                return rd->res->profile ? 0 : -ENOMEM;
        }
        int r = launchclass_profile_name(cfg->cluster_name, cfg->region, node_class, name, sizeof name);
        if (r < 0)
                return r;
        rd->res->profile = strdup(name);
        if (!rd->res->profile)
                return -ENOMEM;
        InstanceProfileSpec ips = { .name = name, .role = role, .cluster = cfg->cluster_name, .region = cfg->region,
                                    .nodeclass = node_class, .tags = lc->tags, .n_tags = lc->n_tags };
        r = instance_profile_ensure(p->ec2, &ips, on_profile, p);
        if (r < 0) {
                free(rd->res->profile);
                rd->res->profile = NULL;
                return r;
        }
        return 1;
}

/* The image of the launch's architecture (amiterms.c), kept for the class's next launches. */
static void on_image(Provisioner *p, const Ec2Error *err, const char *what, char *id, void *userdata) {
        Round *rd = p->round;
        if (err)
                return provision_launch_failed(p, what, err);
        free(rd->res->ami[rd->arch]);
        rd->res->ami[rd->arch] = id;
        rd->res->image_checked_usec[rd->arch] = provision_now_usec(p);
        rd->res->resolved_usec = provision_now_usec(p);
        rd->step = STEP_TEMPLATE;
        provision_round_next(p);
}

int provision_ami_lookup(Provisioner *p, Round *rd, const char *node_class) {
        return provision_image_resolve(p, node_class, rd->arch, on_image, NULL);
}

void provision_on_template(Ec2Client *ec2, const Ec2Error *err, Ec2LaunchTemplate *t, void *userdata) {
        Provisioner *p = userdata;
        Round *rd = p->round;
        /* a template of that name already made earlier (by us, or by the leader before us) is
         * used by name: its name carries the content hash */
        if (err && !strstr(err->code, "AlreadyExists")) {
                ec2_launch_template_free(t);
                return provision_launch_failed(p, "CreateLaunchTemplate", err);
        }
        ec2_launch_template_free(t);
        rd->step = STEP_FLEET;
        provision_round_next(p);
}

/* A node launched into a capacity reservation is labelled as Karpenter labels it: capacity type
 * reserved, the reservation's id and type. Returns the new count of labels. */
static size_t launch_reservation_labels(SolverArena *a, const NodeReservation *cr, const SolverLaunch *l,
                                        const char **labels, size_t nl) {
        if (!cr)
                return nl;
        const SolverLabel add[] = {
                { "karpenter.sh/capacity-type", RESERVATION_CAPACITY_TYPE },
                { SOLVER_LABEL_CAPACITY_TYPE, RESERVATION_CAPACITY_TYPE },
                { RESERVATION_LABEL_ID, cr->id },
                { RESERVATION_LABEL_TYPE, cr->reservation_type },
        };
        for (size_t k = 0; k < ELEMENTSOF(add); k++) {
                bool have = false;
                for (size_t i = 0; i < l->n_labels && !have; i++)
                        have = streq(l->labels[i].key, add[k].key);
                if (!have)
                        labels[nl++] = solver_arena_printf(a, "%s=%s", add[k].key, add[k].value);
        }
        return nl;
}

int provision_template_for(Provisioner *p, Round *rd, const SolverLaunch *l, bool *ret_create,
                        Ec2LaunchTemplateSpec *spec, char **ret_userdata) {
        const SolverNodePool *pool = round_pool(rd, l->nodepool);
        Resolved *res = rd->res;
        const ProvisionerConfig *cfg = &p->cfg;
        _cleanup_free_ char *ud = NULL;

        /* labels and taints the node registers with: the pool's, and what the plan narrowed */
        size_t nl = l->n_labels, ntt = pool->n_taints + pool->n_startup_taints;
        const char **labels = solver_arena_alloc(rd->arena, (nl + 9) * sizeof *labels);
        const char **taints = solver_arena_alloc(rd->arena, (ntt + 1) * sizeof *taints);
        const NodeReservation *cr = round_reservation(rd, l->nodepool);
        if (!labels || !taints)
                return -ENOMEM;
        for (size_t i = 0; i < nl; i++) /* a reservation pool's nodes are its NodePool's */
                labels[i] = solver_arena_printf(rd->arena, "%s=%s", l->labels[i].key,
                                                streq(l->labels[i].key, SOLVER_LABEL_NODEPOOL) ? pool->name
                                                                                               : l->labels[i].value);
        nl = launch_reservation_labels(rd->arena, cr, l, labels, nl);
        /* what the node was made from, so that drift can be told later */
        char h[DISRUPTION_CLASS_HASH_SIZE];
        disruption_pool_hash(kube_watch_get(p->nodepools, NULL, pool->name), h);
        if (h[0])
                labels[nl++] = solver_arena_printf(rd->arena, "%s=%s", DISRUPTION_LABEL_POOL_HASH, h);
        /* the image it boots, so that a new image behind the same alias drifts it */
        if (res->ami[rd->arch])
                labels[nl++] = solver_arena_printf(rd->arena, "%s=%s", DISRUPTION_LABEL_IMAGE, res->ami[rd->arch]);
        if (pool->node_class) {
                disruption_class_hash(kube_watch_get(p->nodeclasses, NULL, pool->node_class), h);
                if (h[0])
                        labels[nl++] = solver_arena_printf(rd->arena, "%s=%s", DISRUPTION_LABEL_CLASS_HASH, h);
        }
        size_t k = 0;
        static const char *const eff[] = { "NoSchedule", "PreferNoSchedule", "NoExecute" };
        for (size_t i = 0; i < pool->n_taints; i++)
                taints[k++] = solver_arena_printf(rd->arena, "%s%s%s:%s", pool->taints[i].key,
                                                  pool->taints[i].value ? "=" : "", strempty(pool->taints[i].value),
                                                  eff[pool->taints[i].effect]);
        for (size_t i = 0; i < pool->n_startup_taints; i++)
                taints[k++] = solver_arena_printf(rd->arena, "%s%s%s:%s", pool->startup_taints[i].key,
                                                  pool->startup_taints[i].value ? "=" : "",
                                                  strempty(pool->startup_taints[i].value),
                                                  eff[pool->startup_taints[i].effect]);
        UserDataSpec uds = {
                .cluster_name = cfg->cluster_name,
                .api_server_endpoint = cfg->cluster_endpoint,
                .certificate_authority = cfg->cluster_ca,
                .cidr = cfg->cluster_cidr,
                .labels = labels,
                .taints = taints,
                .coordinator = cfg->agent_endpoint,
                .coordinator_ca_pem = p->agent_ca_pem,
                .tls_server_name = cfg->agent_tls_server_name,
                .token = cfg->token,
                .nodepool = pool->name,
        };
        const cJSON *class_spec = NULL;
        LaunchClass *lc = launch_class(p, rd, pool->node_class, &class_spec);
        if (!lc)
                return -ENOMEM;
        int r;
        uds.kubelet = lc->kubelet;
        uds.user_data = lc->user_data;
        uds.raid0 = lc->raid0;
        uds.agent_image = cfg->agent_image;
        if (streq(lc->ami_family, "Custom"))
                r = (ud = strdup(strempty(lc->user_data))) ? 0 : -ENOMEM; /* as given, as Karpenter does */
        else if (streq(lc->ami_family, "Bottlerocket")) {
                if (isempty(cfg->agent_image))
                        return log_warning_errno(-EINVAL, "EC2NodeClass %s is Bottlerocket: its nodes run nodesmith-agent as "
                                                          "a host container, and --agent-image names none.",
                                                 strempty(pool->node_class));
                r = userdata_render_bottlerocket(&uds, &ud);
        } else
                r = userdata_render(&uds, &ud);
        if (r < 0)
                return r;
        _cleanup_free_ char *class_json = class_spec ? cJSON_PrintUnformatted(class_spec) : NULL;

        /* The template's name carries a hash of what it holds: a change makes a new one. */
        char hash[65];
        StrBuf b;
        strbuf_init(&b, 1u << 20);
        strbuf_printf(&b, "%s|%s|%s|%s|%s|", strempty(res->ami[rd->arch]), ud, strempty(res->profile), strempty(class_json),
                      cr ? cr->id : "");
        for (size_t i = 0; res->sgs[i]; i++)
                strbuf_printf(&b, "%s,", res->sgs[i]);
        provisioner_digest(b.data ? b.data : "", b.len, hash, sizeof hash);
        strbuf_done(&b);
        char *name = solver_arena_printf(rd->arena, "nodesmith-%s-%s-%s-%.12s", cfg->cluster_name, pool->name,
                                         rd->arch ? "arm64" : "amd64", hash);
        if (!name)
                return -ENOMEM;
        *ret_create = !streq_ptr(res->template_name[rd->arch], name);
        r = free_and_strdup(&res->template_name[rd->arch], name);
        if (r < 0)
                return r;
        *spec = (Ec2LaunchTemplateSpec) {
                .name = name,
                .image_id = res->ami[rd->arch],
                .instance_profile_name = isempty(res->profile) ? NULL : res->profile,
                .security_group_ids = (const char *const *) res->sgs,
                .block_devices = lc->devices,
                .n_block_devices = lc->n_devices,
                .metadata_hop_limit = lc->hop_limit,
                .http_tokens = lc->http_tokens,
                .http_endpoint = lc->http_endpoint,
                .http_protocol_ipv6 = lc->http_protocol_ipv6,
                .detailed_monitoring = lc->detailed_monitoring,
                .enclave = lc->enclave,
                .associate_public_ip = lc->associate_public_ip,
                .ipv4_prefix_count = lc->ip_prefix_count,
                .tags = lc->tags,
                .n_tags = lc->n_tags,
                .interface_tags = lc->tags,
                .n_interface_tags = lc->n_tags,
                /* into the reservation planned; a class that selects reservations launches its
                 * other nodes outside any (an open reservation it did not select is not used,
                 * as in Karpenter) */
                .capacity_reservation_id = cr ? cr->id : NULL,
                .capacity_reservation_preference = !cr && lc->selects_reservations ? "none" : NULL,
                .client_token = solver_arena_printf(rd->arena, "%.32s", hash),
        };
        *ret_userdata = TAKE_PTR(ud);
        return 0;
}

/* One CreateFleet answered: the round goes on if it was waiting for a free slot, and ends when
 * this was the last answer it waited for. */
static void fleet_answered(Provisioner *p, Round *rd) {
        rd->fleets_in_flight--;
        if (rd->detached) {
                if (rd->fleets_in_flight == 0)
                        provision_detached_finish(p, rd);
                return;
        }
        if (rd->parked) {
                rd->parked = false;
                provision_round_next(p);
        }
}

/* Instance id (type, zone, lifecycle as EC2 gave it) launched for launch l: in flight with l's
 * pods nominated to it. */
static void fleet_instance_taken(Provisioner *p, Round *rd, const SolverLaunch *l, const Ec2FleetInstances *in,
                                 const char *id) {
        const SolverNodePool *pool = round_pool(rd, l->nodepool);
        const NodeReservation *cr = round_reservation(rd, l->nodepool);
        SolverCapacityType ct = streq_ptr(in->lifecycle, "spot") ? SOLVER_CAPACITY_SPOT : SOLVER_CAPACITY_ON_DEMAND;
        const char *ct_name = cr ? RESERVATION_CAPACITY_TYPE : solver_capacity_type_to_name(ct);

        if (cr)
                provision_reservation_used(p, pool->node_class, cr->id, false);
        if (p->ports.new_instance)
                p->ports.new_instance(p->ports.userdata, id);
        if (provision_inflight_add(p, id, pool->name, in->instance_type, in->zone, ct, provision_now_usec(p), l->n_pods) <= 0)
                return;
        if (cr)
                provision_inflight_find(p, id)->reservation_id = strdup(cr->id);
        provision_inflight_nominate(p, id, rd, l);
        p->instances_launched++;
        log_notice("Launched %s (%s %s in %s%s%s) for NodePool %s: %zu pod(s), $%.4f/h.", id,
                   strempty(in->instance_type), ct_name, strempty(in->zone), cr ? ", capacity reservation " : "",
                   cr ? cr->id : "", pool->name, l->n_pods, l->price);
        if (p->ports.launched)
                p->ports.launched(p->ports.userdata, id, in->instance_type, in->zone, ct_name, rd, l);

        /* tell the pods where they go, as kube-scheduler's nominations do */
        for (size_t i = 0; i < l->n_pods; i++) {
                const SolverPod *sp = &rd->snap.pods[l->pods[i]];
                char msg[256];
                snprintf(msg, sizeof msg, "Pod should schedule on instance %s (%s in %s), launched for NodePool %s", id,
                         strempty(in->instance_type), strempty(in->zone), pool->name);
                KubeEventInfo ev = { .api_version = "v1", .kind = "Pod", .object_namespace = sp->namespace_,
                                     .name = sp->name, .uid = provisioner_pod_uid(rd->pod_uids[l->pods[i]]), .reason = "Nominated",
                                     .message = msg, .component = "nodesmith-coordinator" };
                provision_event(p, &ev);
        }
        char msg[256];
        snprintf(msg, sizeof msg, "Launched %s (%s in %s) for %zu pod(s)", id, strempty(in->instance_type),
                 strempty(in->zone), l->n_pods);
        KubeEventInfo ev = { .api_version = "nodesmith.io/v1", .kind = "NodePool", .name = pool->name,
                             .reason = "Launched", .message = msg, .component = "nodesmith-coordinator" };
        provision_event(p, &ev);
        p->launches++;
        p->pods_nominated += l->n_pods;
        /* its Node may have registered before CreateFleet answered (a slow answer, a fast boot):
         * no Node event comes for it any more */
        const cJSON *node = node_of_instance(p->nodes, id);
        if (node)
                (void) provision_forget_registered(node, p);
}

static void on_fleet(Ec2Client *ec2, const Ec2Error *err, Ec2FleetResult *res, void *userdata) {
        FleetCall *call = userdata;
        Provisioner *p = call->p;
        Round *rd = call->rd;
        const SolverLaunch *l = &rd->result->launches[call->launch];
        const SolverNodePool *pool = round_pool(rd, l->nodepool);
        const NodeReservation *cr = round_reservation(rd, l->nodepool);

        if (err) {
                ec2_fleet_result_free(res);
                if (cr && err->kind == EC2_ERROR_INSUFFICIENT_CAPACITY) {
                        /* the reservation is used up (others launched into it): none of it is
                         * planned with until EC2 is asked again; the pods go elsewhere */
                        provision_reservation_used(p, pool->node_class, cr->id, true);
                        rd->launched_nothing = true;
                } else if (err->kind == EC2_ERROR_INSUFFICIENT_CAPACITY) {
                        for (size_t i = 0; i < l->n_offerings; i++)
                                provision_ice_mark(p, rd->snap.types[l->offerings[i].type].name, l->offerings[i].zone,
                                         l->offerings[i].capacity_type);
                        rd->launched_nothing = true;
                }
                /* every launch of the batch failed with it; counted and logged once */
                for (size_t k = 1; k < call->n_launches && p->ports.launch_failed; k++)
                        p->ports.launch_failed(p->ports.userdata, rd, &rd->result->launches[call->launches[k]],
                                               "CreateFleet", err->code, err->message);
                call->answered = true;
                launch_failed_record(p, rd, call->launch, "CreateFleet", err);
                return fleet_answered(p, rd);
        }
        size_t launched = ec2_fleet_result_count(res);
        call->answered = true;
        for (size_t i = 0; i < res->n_errors; i++) {
                const Ec2FleetError *fe = &res->errors[i];
                log_notice("CreateFleet for NodePool %s: %s on %s in %s (%s): %s", pool->name, strempty(fe->code),
                           strempty(fe->instance_type), strempty(fe->zone), strempty(fe->lifecycle),
                           strempty(fe->message));
                if (cr && fe->code && (streq(fe->code, "ReservationCapacityExceeded") ||
                                       strstr(fe->code, "InsufficientInstanceCapacity")))
                        provision_reservation_used(p, pool->node_class, cr->id, true);
                else if (fe->code && strstr(fe->code, "InsufficientInstanceCapacity")) {
                        int ct = fe->lifecycle ? solver_capacity_type_from_name(fe->lifecycle) : (int) l->capacity_type;
                        provision_ice_mark(p, fe->instance_type, fe->zone, ct >= 0 ? (SolverCapacityType) ct : l->capacity_type);
                }
        }
        /* the batch's launches take the instances in order: any instance EC2 gave holds any of
         * them (they have the same offerings); more instances than asked are not expected and
         * are left to the registration timeout like any instance no launch claims */
        size_t taken = 0;
        for (size_t i = 0; i < res->n_instances; i++)
                for (char **id = res->instances[i].instance_ids; id && *id; id++) {
                        if (taken >= call->n_launches) {
                                log_warning("CreateFleet for NodePool %s: instance %s beyond the %zu asked for.",
                                            pool->name, *id, call->n_launches);
                                continue;
                        }
                        fleet_instance_taken(p, rd, &rd->result->launches[call->launches[taken++]], &res->instances[i], *id);
                }
        /* partial fulfilment: the launches left without an instance failed; their pods stay
         * pending, nominated to nothing, and the next round (at once) plans them again without
         * the offerings that ran out */
        const char *code = res->n_errors ? res->errors[0].code : NULL, *message = res->n_errors ? res->errors[0].message : NULL;
        for (size_t k = taken; k < call->n_launches && p->ports.launch_failed; k++)
                p->ports.launch_failed(p->ports.userdata, rd, &rd->result->launches[call->launches[k]], "CreateFleet",
                                       code, message);
        if (taken < call->n_launches) {
                rd->launched_nothing = true;
                p->launch_errors++;
                if (taken == 0)
                        provision_set_error(p, "CreateFleet for NodePool %s launched nothing", pool->name);
                else
                        provision_set_error(p, "CreateFleet for NodePool %s launched %zu of %zu instance(s)", pool->name,
                                            taken, call->n_launches);
                if (taken > 0)
                        log_notice("CreateFleet for NodePool %s: %zu of %zu instance(s) launched; the pods of the "
                                   "other %zu node(s) are planned again.", pool->name, taken, call->n_launches,
                                   call->n_launches - taken);
        }
        ec2_fleet_result_free(res);
        /* a slow CreateFleet answer may come after the Node registered (and went Ready): its
         * events are not seen again, so look at the Nodes now */
        if (launched > 0)
                (void) kube_watch_foreach(p->nodes, provision_forget_registered, p);
        fleet_answered(p, rd);
}

/* Launches a and b are one fleet: the same NodePool and offerings, the same node labels (one
 * launch template), neither into a capacity reservation (its count is per instance) nor under a
 * consolidation's price cap (per replaced node). */
static bool launch_same_fleet(Provisioner *p, const Round *rd, const SolverLaunch *a, const SolverLaunch *b) {
        if (a->nodepool != b->nodepool || round_reservation(rd, a->nodepool) || a->capacity_type != b->capacity_type ||
            a->type != b->type || !streq_ptr(a->zone, b->zone) || a->n_offerings != b->n_offerings ||
            a->n_labels != b->n_labels)
                return false;
        for (size_t i = 0; i < a->n_offerings; i++) {
                const SolverLaunchOffering *x = &a->offerings[i], *y = &b->offerings[i];
                if (x->type != y->type || x->capacity_type != y->capacity_type || x->price != y->price ||
                    !streq_ptr(x->zone, y->zone))
                        return false;
        }
        for (size_t i = 0; i < a->n_labels; i++)
                if (!streq_ptr(a->labels[i].key, b->labels[i].key) || !streq_ptr(a->labels[i].value, b->labels[i].value))
                        return false;
        return provision_price_cap(p->registry, &rd->snap, b) <= 0;
}

/* Launch `launch` and the later launches of the round identical to it, not sent yet (into
 * out, launch first; at most FLEET_BATCH_MAX). */
static size_t fleet_batch(Provisioner *p, const Round *rd, size_t launch, size_t *out) {
        const SolverLaunch *l = &rd->result->launches[launch];
        size_t n = 0;
        out[n++] = launch;
        if (rd->price_cap > 0 || provision_price_cap(p->registry, &rd->snap, l) > 0)
                return n; /* a capped launch goes alone, whichever of the two is capped */
        for (size_t j = launch + 1; j < rd->result->n_launches && n < FLEET_BATCH_MAX; j++)
                if (!rd->sent[j] && launch_same_fleet(p, rd, l, &rd->result->launches[j]))
                        out[n++] = j;
        return n;
}

int provision_fleet_start(Provisioner *p, Round *rd, size_t launch) {
        const SolverLaunch *l = &rd->result->launches[launch];
        const SolverNodePool *pool = round_pool(rd, l->nodepool);
        Resolved *res = rd->res;
        Ec2FleetOverride ov[EC2_MAX_FLEET_OVERRIDES];
        size_t n = 0;
        const char *arch = provision_arch_of_type(&rd->snap.types[l->type]);

        /* ranked offerings of the plan's architecture, each in the zone's subnet with the most
         * free addresses */
        for (size_t i = 0; i < l->n_offerings && n < EC2_MAX_FLEET_OVERRIDES; i++) {
                const SolverLaunchOffering *o = &l->offerings[i];
                if (o->capacity_type != l->capacity_type || !streq(provision_arch_of_type(&rd->snap.types[o->type]), arch))
                        continue;
                /* a consolidation's replacement falls back only to offerings under its cap */
                if (!provision_price_cap_allows(rd->price_cap, o->price))
                        continue;
                const Subnet *best = NULL;
                for (size_t s = 0; s < res->n_subnets; s++)
                        if (streq(res->subnets[s].zone, o->zone) && (!best || res->subnets[s].free_ips > best->free_ips))
                                best = &res->subnets[s];
                if (!best)
                        continue;
                ov[n] = (Ec2FleetOverride) { .instance_type = rd->snap.types[o->type].name,
                                             .subnet_id = best->id,
                                             .availability_zone = o->zone,
                                             .priority = (double) n };
                n++;
        }
        if (n == 0) {
                rd->launched_nothing = true; /* solve again, now that the subnets' zones are known */
                return -ENOENT;
        }

        /* identical launches not sent yet go with this one: one CreateFleet for all of them */
        if (!rd->sent && !(rd->sent = calloc(rd->result->n_launches, sizeof *rd->sent)))
                return -ENOMEM;
        size_t *batch = solver_arena_alloc(rd->arena, FLEET_BATCH_MAX * sizeof *batch);
        if (!batch)
                return -ENOMEM;
        size_t n_batch = fleet_batch(p, rd, launch, batch);

        /* The ClientToken is derived from the plan (pool, each node's pods, offerings): a retry
         * of the same plan is the same fleet; a plan changed by capacity errors is a new one. */
        StrBuf b;
        strbuf_init(&b, 1u << 22);
        /* ... and by how many instances this coordinator has launched so far: once a plan's fleet
         * exists, the same pods planned again later (their node could not take them) must make
         * a new fleet, not get the old one back from EC2's idempotency */
        strbuf_printf(&b, "%s|%s|%llu|", p->cfg.cluster_name, pool->name, (unsigned long long) p->instances_launched);
        for (size_t k = 0; k < n_batch; k++) {
                const SolverLaunch *bl = &rd->result->launches[batch[k]];
                for (size_t i = 0; i < bl->n_pods; i++)
                        strbuf_printf(&b, "%s,", strempty(rd->pod_uids[bl->pods[i]]));
                strbuf_printf(&b, "|");
        }
        for (size_t i = 0; i < n; i++)
                strbuf_printf(&b, "%s/%s;", ov[i].instance_type, ov[i].availability_zone);
        char hash[65];
        provisioner_digest(b.data ? b.data : "", b.len, hash, sizeof hash);
        strbuf_done(&b);

        char token[48], name[128];
        snprintf(token, sizeof token, "nodesmith-%.32s", hash);
        snprintf(name, sizeof name, "nodesmith-%s-%s", p->cfg.cluster_name, pool->name);
        LaunchClass *lc = launch_class(p, rd, pool->node_class, NULL);
        if (!lc)
                return -ENOMEM;
        Ec2FleetSpec spec = {
                .context = lc->context,
                .extra_tags = lc->tags,
                .n_extra_tags = lc->n_tags,
                .launch_template_name = res->template_name[rd->arch],
                .overrides = ov,
                .n_overrides = n,
                .target_capacity = (unsigned) n_batch,
                .capacity_type = l->capacity_type == SOLVER_CAPACITY_SPOT ? EC2_CAPACITY_SPOT : EC2_CAPACITY_ON_DEMAND,
                .nodepool = pool->name,
                .name_tag = name,
                .client_token = token,
        };
        if (!provisioner_acting(p))
                return -ESTALE;
        if (!rd->fleet_calls && !(rd->fleet_calls = calloc(rd->result->n_launches, sizeof *rd->fleet_calls)))
                return -ENOMEM;
        rd->fleet_calls[launch] = (FleetCall) { .p = p, .launch = launch, .launches = batch, .n_launches = n_batch,
                                                .rd = rd };
        log_info("CreateFleet for NodePool %s: %zu override(s), %s first (%s), %zu instance(s), token %s, acting replica %s.",
                 pool->name, n, ov[0].instance_type, solver_capacity_type_to_name(l->capacity_type), n_batch, token,
                 provisioner_acting_as(p));
        int r = ec2_create_fleet(p->ec2, &spec, on_fleet, &rd->fleet_calls[launch]);
        if (r < 0)
                return r;
        for (size_t k = 0; k < n_batch; k++)
                rd->sent[batch[k]] = true;
        return r;
}
