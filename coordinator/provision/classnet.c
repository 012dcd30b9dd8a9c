/* SPDX-License-Identifier: Apache-2.0 */
/* Subnet and security-group drift, as Karpenter's drift has it: every --image-refresh the
 * subnets and security groups each EC2NodeClass's selector terms match now are looked up again
 * (the terms unchanged, the EC2 side may have changed: a subnet or group re-tagged, a new one
 * tagged), and so are this cluster's running instances. A node has drifted when its instance's
 * subnet is not among its class's subnets, or when its instance's security groups are not
 * exactly its class's. A class that matches none (a look-up failed, or nothing matches) tells no
 * drift. A change also makes the next launch resolve the class again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launchclass.h"
#include "log.h"
#include "macro.h"
#include "provisioner-internal.h"

typedef struct NetLookup {
        Provisioner *p;
        char *node_class;
        char **subnets; /* NULL-terminated, the subnets matched */
} NetLookup;

static void strv_free(char **v) {
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

static bool strv_contains(char *const *v, const char *s) {
        for (size_t i = 0; v && v[i]; i++)
                if (streq(v[i], s))
                        return true;
        return false;
}

static size_t strv_length(char *const *v) {
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

/* The same ids, in any order (both without repeats). */
static bool strv_same_set(char *const *a, char *const *b) {
        size_t n = strv_length(a);
        if (n != strv_length(b))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!strv_contains(b, a[i]))
                        return false;
        return true;
}

static int strv_push(char ***v, size_t *n, const char *s) {
        char **m = realloc(*v, (*n + 2) * sizeof *m);
        if (!m)
                return -ENOMEM;
        *v = m;
        if (!(m[*n] = strdup(s))) {
                m[*n] = NULL;
                return -ENOMEM;
        }
        m[++*n] = NULL;
        return 0;
}

static const cJSON *terms_of(Provisioner *p, const char *node_class, const char *field) {
        const cJSON *nc = !isempty(node_class) && p->nodeclasses ? kube_watch_get(p->nodeclasses, NULL, node_class) : NULL;
        return jget(jget(nc, "spec"), field);
}

static NetLookup *net_lookup_free(NetLookup *l) {
        if (!l)
                return NULL;
        Resolved *res = (Resolved *) provisioner_resolved_find(l->p, l->node_class);
        if (res)
                res->net_checking = false;
        strv_free(l->subnets);
        free(l->node_class);
        free(l);
        return NULL;
}

/* Whether what the launches use (res->subnets, res->sgs) differs from what matches now. */
static bool launch_inputs_differ(const Resolved *res) {
        if (res->resolved_usec == 0)
                return false;
        for (size_t i = 0; i < res->n_subnets; i++)
                if (!strv_contains(res->net_subnets, res->subnets[i].id))
                        return true;
        return res->n_subnets != strv_length(res->net_subnets) || !strv_same_set(res->sgs, res->net_sgs);
}

static void on_sgs(Ec2Client *ec2, const Ec2Error *err, Ec2SecurityGroupList *list, void *userdata) {
        NetLookup *l = userdata;
        Resolved *res = (Resolved *) provisioner_resolved_find(l->p, l->node_class);
        const cJSON *terms = terms_of(l->p, l->node_class, "securityGroupSelectorTerms");
        char **sgs = NULL;
        size_t n = 0;
        int r = 0;
        if (err)
                log_warning("EC2NodeClass %s: looking its security groups up again failed: %s %s",
                            isempty(l->node_class) ? "(default)" : l->node_class, err->code, err->message);
        for (size_t i = 0; !err && r >= 0 && i < list->n && n < MAX_SGS; i++)
                if (launchclass_terms_match(terms, list->items[i].id, list->items[i].name, list->items[i].vpc_id,
                                            list->items[i].tags, list->items[i].n_tags))
                        r = strv_push(&sgs, &n, list->items[i].id);
        ec2_security_group_list_free(list);
        if (!err && r >= 0 && res) {
                strv_free(res->net_subnets);
                strv_free(res->net_sgs);
                res->net_subnets = TAKE_PTR(l->subnets);
                res->net_sgs = TAKE_PTR(sgs);
                if (launch_inputs_differ(res)) {
                        log_notice("EC2NodeClass %s: its subnets or security groups changed in EC2; resolved again "
                                   "before the next launch, and nodes outside them drift.",
                                   isempty(l->node_class) ? "(default)" : l->node_class);
                        res->resolved_usec = 0;
                }
        }
        strv_free(sgs);
        net_lookup_free(l);
}

static void on_subnets(Ec2Client *ec2, const Ec2Error *err, Ec2SubnetList *list, void *userdata) {
        NetLookup *l = userdata;
        const cJSON *terms = terms_of(l->p, l->node_class, "subnetSelectorTerms");
        size_t n = 0;
        int r = 0;
        if (err) {
                log_warning("EC2NodeClass %s: looking its subnets up again failed: %s %s",
                            isempty(l->node_class) ? "(default)" : l->node_class, err->code, err->message);
                ec2_subnet_list_free(list);
                net_lookup_free(l);
                return;
        }
        for (size_t i = 0; r >= 0 && i < list->n && n < MAX_SUBNETS; i++)
                if (launchclass_terms_match(terms, list->items[i].id, NULL, list->items[i].vpc_id, list->items[i].tags,
                                            list->items[i].n_tags))
                        r = strv_push(&l->subnets, &n, list->items[i].id);
        ec2_subnet_list_free(list);
        Ec2Filter f[4];
        char names[4][160];
        const char *values[4][2] = {};
        size_t nf = provision_selector_filters(l->p, isempty(l->node_class) ? NULL : l->node_class,
                                               "securityGroupSelectorTerms", f, names, values);
        if (r < 0 || ec2_describe_security_groups(l->p->ec2, NULL, f, nf, on_sgs, l) < 0)
                net_lookup_free(l);
}

static void on_instances(Ec2Client *ec2, const Ec2Error *err, Ec2InstanceList *list, void *userdata) {
        Provisioner *p = userdata;
        p->seeing_instances = false;
        if (err) {
                log_warning("Listing this cluster's instances for drift failed: %s %s", err->code, err->message);
                ec2_instance_list_free(list);
                return;
        }
        ec2_instance_list_free(p->seen_instances);
        p->seen_instances = list;
}

/* Every class a NodePool names is looked at, launched from lately or not (after a restart,
 * before any launch, its nodes may have drifted too). */
static int class_of_pool(const cJSON *pool, void *userdata) {
        const char *nc = jstr(jget(jget(jget(jget(pool, "spec"), "template"), "spec"), "nodeClassRef"), "name");
        if (nc && !provision_resolved_get(userdata, nc))
                return -ENOMEM;
        return 0;
}

void provisioner_networks_refresh(Provisioner *p) {
        static const char *const states[] = { "running", NULL };
        uint64_t now = provisioner_now(p), every = p->cfg.image_refresh_ms * USEC_PER_MSEC;
        if (!p->leading || every == 0 || now - p->networks_checked_usec < every)
                return;
        p->networks_checked_usec = now;
        if (!p->seeing_instances && ec2_describe_cluster_instances(p->ec2, states, NULL, 0, on_instances, p) >= 0)
                p->seeing_instances = true;
        if (p->nodepools)
                (void) kube_watch_foreach(p->nodepools, class_of_pool, p);
        for (size_t i = 0; i < p->n_resolved; i++) {
                Resolved *res = p->resolved[i];
                if (res->net_checking)
                        continue;
                NetLookup *l = calloc(1, sizeof *l);
                if (!l || !(l->node_class = strdup(res->node_class))) {
                        free(l);
                        return;
                }
                l->p = p;
                Ec2Filter f[4];
                char names[4][160];
                const char *values[4][2] = {};
                size_t nf = provision_selector_filters(p, isempty(res->node_class) ? NULL : res->node_class,
                                                       "subnetSelectorTerms", f, names, values);
                if (ec2_describe_subnets(p->ec2, NULL, f, nf, on_subnets, l) < 0) {
                        free(l->node_class);
                        free(l);
                        continue;
                }
                res->net_checking = true;
        }
}

static void join(char *const *v, char *buf, size_t size) {
        size_t k = 0;
        buf[0] = 0;
        for (size_t i = 0; v && v[i] && k < size; i++)
                k += (size_t) snprintf(buf + k, size - k, "%s%s", i ? "," : "", v[i]);
}

bool provisioner_network_drifted(Provisioner *p, const char *node_class, const char *instance_id, char *why,
                                 size_t size) {
        const Resolved *res = provisioner_resolved_find(p, strempty(node_class));
        const Ec2Instance *in = NULL;
        for (size_t i = 0; p->seen_instances && instance_id && i < p->seen_instances->n && !in; i++)
                if (streq_ptr(p->seen_instances->items[i].id, instance_id))
                        in = &p->seen_instances->items[i];
        if (!res || !in)
                return false;
        const char *name = isempty(node_class) ? "(default)" : node_class;
        if (res->net_subnets && res->net_subnets[0] && in->subnet_id && !strv_contains(res->net_subnets, in->subnet_id)) {
                snprintf(why, size, "its subnet %s no longer matches EC2NodeClass %s's subnetSelectorTerms",
                         in->subnet_id, name);
                return true;
        }
        if (res->net_sgs && res->net_sgs[0] && in->security_groups[0] &&
            !strv_same_set(in->security_groups, res->net_sgs)) {
                char have[160], want[160];
                join(in->security_groups, have, sizeof have);
                join(res->net_sgs, want, sizeof want);
                snprintf(why, size, "its security groups (%s) are not those EC2NodeClass %s selects now (%s)", have,
                         name, want);
                return true;
        }
        return false;
}
