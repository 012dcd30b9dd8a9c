/* SPDX-License-Identifier: Apache-2.0 */
/* The image an EC2NodeClass's amiSelectorTerms resolve to for one architecture, as Karpenter
 * resolves them: an alias (al2023@latest, al2023@vYYYYMMDD: the SSM parameter AWS publishes);
 * else each term in turn (an id; an ssmParameter holding an id; a name, tags and owner), the
 * newest available image of the architecture among them (terms are ORed). No terms:
 * al2023@latest. Used for a launch (launch.c) and, every --image-refresh, to tell drift
 * (images.c): a node whose image is not the one the terms give now has drifted. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launchclass.h"
#include "log.h"
#include "macro.h"
#include "provisioner-internal.h"

typedef struct ImageQuery {
        Provisioner *p;
        char *node_class;          /* NULL: no class */
        int arch;                  /* 0 amd64, 1 arm64 */
        size_t term;               /* the term looked up now */
        char *best;                /* the newest image of the terms so far */
        int64_t best_date;
        provision_image_done_t done;
        void *userdata;
} ImageQuery;

static ImageQuery *image_query_free(ImageQuery *q) {
        if (!q)
                return NULL;
        free(q->node_class);
        free(q->best);
        free(q);
        return NULL;
}

static const cJSON *query_terms(ImageQuery *q) {
        const cJSON *nc = q->node_class && q->p->nodeclasses ? kube_watch_get(q->p->nodeclasses, NULL, q->node_class) : NULL;
        return jget(jget(nc, "spec"), "amiSelectorTerms");
}

/* Ends the query: done() takes id. */
static void query_finish(ImageQuery *q, const Ec2Error *err, const char *what, char *id) {
        q->done(q->p, err, what, id, q->userdata);
        image_query_free(q);
}

static void query_fail(ImageQuery *q, const char *what, int r, const char *code, const char *message) {
        Ec2Error e = { .kind = r == -ENOENT ? EC2_ERROR_NOT_FOUND : EC2_ERROR_OTHER, .error = r };
        snprintf(e.code, sizeof e.code, "%s", code);
        snprintf(e.message, sizeof e.message, "%s", message);
        query_finish(q, &e, what, NULL);
}

static int query_term(ImageQuery *q);

static void on_alias(Ec2Client *ec2, const Ec2Error *err, char *value, void *userdata) {
        ImageQuery *q = userdata;
        if (err) {
                free(value);
                return query_finish(q, err, "GetParameter (EKS AMI)", NULL);
        }
        query_finish(q, NULL, NULL, value);
}

/* One term's images: the newest available one of the architecture competes with the other
 * terms'; after the last term the newest of all is the image. */
static void on_images(Ec2Client *ec2, const Ec2Error *err, Ec2ImageList *list, void *userdata) {
        ImageQuery *q = userdata;
        static const char what[] = "DescribeImages (amiSelectorTerms)";
        const char *arch = q->arch ? "arm64" : "x86_64";
        if (err) {
                ec2_image_list_free(list);
                return query_finish(q, err, what, NULL);
        }
        const Ec2Image *img = NULL;
        for (size_t i = 0; list && i < list->n && !img; i++)
                if (streq_ptr(list->items[i].architecture, arch) &&
                    (!list->items[i].state || streq(list->items[i].state, "available")))
                        img = &list->items[i];
        if (img && (!q->best || img->creation_date > q->best_date)) {
                free(q->best);
                q->best = strdup(img->id);
                q->best_date = img->creation_date;
        }
        ec2_image_list_free(list);
        if (++q->term < (size_t) cJSON_GetArraySize(query_terms(q))) {
                int r = query_term(q);
                if (r < 0)
                        query_fail(q, what, r, "Local", strerror(-r));
                return;
        }
        char *id = TAKE_PTR(q->best);
        if (!id) {
                char msg[128];
                snprintf(msg, sizeof msg, "no available %s image matches the EC2NodeClass's amiSelectorTerms", arch);
                return query_fail(q, what, -ENOENT, "NoMatchingImage", msg);
        }
        query_finish(q, NULL, NULL, id);
}

/* An ssmParameter term's image id, then that image (its architecture and state). */
static void on_term_parameter(Ec2Client *ec2, const Ec2Error *err, char *value, void *userdata) {
        ImageQuery *q = userdata;
        if (err) {
                free(value);
                return query_finish(q, err, "GetParameter (amiSelectorTerms ssmParameter)", NULL);
        }
        const char *ids[2] = { value, NULL };
        int r = ec2_describe_images(q->p->ec2, ids, NULL, NULL, 0, on_images, q);
        free(value);
        if (r < 0)
                query_fail(q, "DescribeImages (amiSelectorTerms)", r, "Local", strerror(-r));
}

/* Starts the look-up of term q->term (the query continues in a callback). */
static int query_term(ImageQuery *q) {
        const cJSON *t = cJSON_GetArrayItem(query_terms(q), (int) q->term);
        const char *arch = q->arch ? "arm64" : "x86_64";
        if (!t)
                return -ENOENT;
        if (jstr(t, "ssmParameter"))
                return ec2_ssm_get_parameter(q->p->ec2, jstr(t, "ssmParameter"), on_term_parameter, q);
        const char *ids[2] = { jstr(t, "id"), NULL }, *owners[2] = { jstr(t, "owner"), NULL }, *archv[1] = { arch };
        Ec2Filter f[EC2_MAX_FILTERS];
        char names[EC2_MAX_FILTERS][160];
        const char *values[EC2_MAX_FILTERS][1];
        size_t nf = 0;
        f[nf++] = (Ec2Filter) { .name = "architecture", .values = archv, .n_values = 1 };
        if (jstr(t, "name")) {
                values[nf][0] = jstr(t, "name");
                f[nf] = (Ec2Filter) { .name = "name", .values = values[nf], .n_values = 1 };
                nf++;
        }
        const cJSON *tag;
        cJSON_ArrayForEach(tag, jget(t, "tags")) {
                if (!cJSON_IsString(tag) || nf >= ELEMENTSOF(f))
                        return -E2BIG;
                snprintf(names[nf], sizeof names[nf], "tag:%s", tag->string);
                values[nf][0] = tag->valuestring;
                f[nf] = (Ec2Filter) { .name = names[nf], .values = values[nf], .n_values = 1 };
                nf++;
        }
        return ec2_describe_images(q->p->ec2, ids[0] ? ids : NULL, owners[0] ? owners : NULL, f, nf, on_images, q);
}

int provision_image_resolve(Provisioner *p, const char *node_class, int arch, provision_image_done_t done,
                            void *userdata) {
        ImageQuery *q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        *q = (ImageQuery) { .p = p, .arch = arch, .done = done, .userdata = userdata };
        if (!isempty(node_class) && !(q->node_class = strdup(node_class))) {
                image_query_free(q);
                return -ENOMEM;
        }
        const cJSON *first = cJSON_GetArrayItem(query_terms(q), 0);
        const char *alias = jstr(first, "alias");
        int r;
        if (!first || alias) {
                char ssm[256];
                r = launchclass_alias_parameter(alias, p->cfg.kubernetes_version, arch ? "arm64" : "x86_64", ssm,
                                                sizeof ssm);
                if (r >= 0)
                        r = ec2_ssm_get_parameter(p->ec2, ssm, on_alias, q);
        } else
                r = query_term(q);
        if (r < 0)
                image_query_free(q);
        return r;
}
