/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "instanceprofile.h"
#include "log.h"
#include "macro.h"

#define MAX_TAGS 50

typedef struct Ensure {
        char *name, *role, *path, *other; /* other: a role held that is not the class's */
        Ec2Tag tags[MAX_TAGS];
        size_t n_tags;
        char *tag_storage[2 * MAX_TAGS];
        instance_profile_done_t done;
        void *userdata;
} Ensure;

static void ensure_free(Ensure *e) {
        if (!e)
                return;
        free(e->name);
        free(e->role);
        free(e->path);
        free(e->other);
        for (size_t i = 0; i < ELEMENTSOF(e->tag_storage); i++)
                free(e->tag_storage[i]);
        free(e);
}

static void finish(Ensure *e, const Ec2Error *err) {
        e->done(err, e->userdata);
        ensure_free(e);
}

static int step(Ec2Client *c, Ensure *e, const char *action);

static void on_answer(Ec2Client *c, const Ec2Error *err, char *role, void *userdata);

static void start(Ec2Client *c, Ensure *e, const char *action) {
        int r = step(c, e, action);
        if (r < 0) {
                Ec2Error x = { .kind = EC2_ERROR_OTHER, .error = r };
                snprintf(x.code, sizeof x.code, "Local");
                snprintf(x.message, sizeof x.message, "%s for instance profile %s: %s", action, e->name, strerror(-r));
                finish(e, &x);
        }
}

typedef struct Call {
        Ensure *e;
        const char *action;
} Call;

static int step(Ec2Client *c, Ensure *e, const char *action) {
        Call *call = malloc(sizeof *call);
        if (!call)
                return -ENOMEM;
        *call = (Call) { e, action };
        bool create = streq(action, "CreateInstanceProfile");
        const char *role = streq(action, "AddRoleToInstanceProfile")        ? e->role
                           : streq(action, "RemoveRoleFromInstanceProfile") ? e->other
                                                                            : NULL;
        Ec2IamRequest q = { .action = action, .profile = e->name, .role = role,
                            .path = create ? e->path : NULL, .tags = create ? e->tags : NULL,
                            .n_tags = create ? e->n_tags : 0 };
        int r = ec2_iam_instance_profile(c, &q, on_answer, call);
        if (r < 0)
                free(call);
        return r;
}

static void on_answer(Ec2Client *c, const Ec2Error *err, char *role, void *userdata) {
        Call *call = userdata;
        Ensure *e = call->e;
        const char *action = call->action;
        free(call);
        _cleanup_free_ char *held = role;

        if (streq(action, "GetInstanceProfile")) {
                if (err && err->kind == EC2_ERROR_NOT_FOUND)
                        return start(c, e, "CreateInstanceProfile");
                if (err)
                        return finish(e, err);
                if (streq_ptr(held, e->role))
                        return finish(e, NULL);
                if (held) {
                        /* one role per profile: the class names another one now */
                        log_info("Instance profile %s holds role %s; putting %s in its place.", e->name, held, e->role);
                        free(e->other);
                        e->other = TAKE_PTR(held);
                        return start(c, e, "RemoveRoleFromInstanceProfile");
                }
                return start(c, e, "AddRoleToInstanceProfile");
        }
        if (streq(action, "CreateInstanceProfile")) {
                if (err && !strstr(err->code, "EntityAlreadyExists"))
                        return finish(e, err);
                log_info("Created instance profile %s (%s).", e->name, e->path);
                return start(c, e, "AddRoleToInstanceProfile");
        }
        if (streq(action, "RemoveRoleFromInstanceProfile")) {
                if (err && err->kind != EC2_ERROR_NOT_FOUND)
                        return finish(e, err);
                return start(c, e, "GetInstanceProfile"); /* now empty: adds ours */
        }
        /* AddRoleToInstanceProfile */
        if (err && !strstr(err->code, "LimitExceeded"))
                return finish(e, err);
        if (err)
                return start(c, e, "GetInstanceProfile"); /* raced with another writer: look again */
        log_info("Instance profile %s holds role %s.", e->name, e->role);
        finish(e, NULL);
}

static int add_tag(Ensure *e, const char *k, const char *v) {
        if (e->n_tags >= MAX_TAGS)
                return -E2BIG;
        size_t i = 2 * e->n_tags;
        e->tag_storage[i] = strdup(k);
        e->tag_storage[i + 1] = strdup(strempty(v));
        if (!e->tag_storage[i] || !e->tag_storage[i + 1])
                return -ENOMEM;
        e->tags[e->n_tags++] = (Ec2Tag) { e->tag_storage[i], e->tag_storage[i + 1] };
        return 0;
}

int instance_profile_ensure(Ec2Client *ec2, const InstanceProfileSpec *s, instance_profile_done_t done,
                            void *userdata) {
        if (!ec2 || !s || isempty(s->name) || isempty(s->role) || isempty(s->cluster) || !done)
                return -EINVAL;
        Ensure *e = calloc(1, sizeof *e);
        if (!e)
                return -ENOMEM;
        e->done = done;
        e->userdata = userdata;
        const char *slash = strrchr(s->role, '/'); /* AddRoleToInstanceProfile takes the name only */
        e->name = strdup(s->name);
        e->role = strdup(slash ? slash + 1 : s->role);
        int r = asprintf(&e->path, "/nodesmith/%s/%s/", strempty(s->region), s->cluster) < 0 ? -ENOMEM : 0;
        char owned[300];
        snprintf(owned, sizeof owned, "kubernetes.io/cluster/%s", s->cluster);
        if (r >= 0 && (!e->name || !e->role))
                r = -ENOMEM;
        for (size_t i = 0; r >= 0 && i < s->n_tags; i++)
                r = add_tag(e, s->tags[i].key, s->tags[i].value);
        if (r >= 0)
                r = add_tag(e, EC2_CLUSTER_TAG, s->cluster);
        if (r >= 0)
                r = add_tag(e, owned, "owned");
        if (r >= 0)
                r = add_tag(e, "nodesmith.io/ec2nodeclass", s->nodeclass);
        if (r >= 0)
                r = add_tag(e, "topology.kubernetes.io/region", s->region);
        if (r >= 0)
                r = step(ec2, e, "GetInstanceProfile");
        if (r < 0)
                ensure_free(e);
        return r;
}
