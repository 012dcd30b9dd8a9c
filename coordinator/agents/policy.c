/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>

#include "policy.h"

#define K(x) NODESMITH__V1__NOTICE__KIND__KIND_##x

static const struct {
        const char *name;
        int kind;
        const char *reason;
        bool force; /* the node goes away whatever: do-not-disrupt pods are evicted too */
} kinds[] = {
        { "spot", K(SPOT_INTERRUPTION), "spot-interruption", true },
        { "rebalance", K(REBALANCE), "rebalance-recommendation", false },
        { "maintenance", K(MAINTENANCE), "scheduled-maintenance", true },
        { "shutdown", K(SHUTDOWN), "shutdown", true },
        { "node-deleted", K(NODE_DELETED), "node-deleted", true },
};

static NoticePolicy always(void) {
        return (1u << K(SHUTDOWN)) | (1u << K(NODE_DELETED));
}

int notice_policy_parse(const char *s, NoticePolicy *ret) {
        NoticePolicy p = always();
        if (!s)
                return -EINVAL;
        if (streq(s, "none") || *s == 0) {
                *ret = p;
                return 0;
        }
        const char *w = s;
        while (*w) {
                size_t n = strcspn(w, ",");
                bool found = false;
                for (size_t i = 0; i < ELEMENTSOF(kinds); i++)
                        if (strlen(kinds[i].name) == n && strncmp(kinds[i].name, w, n) == 0) {
                                p |= 1u << kinds[i].kind;
                                found = true;
                        }
                if (!found)
                        return -EINVAL;
                w += n;
                if (*w == ',')
                        w++;
        }
        *ret = p;
        return 0;
}

static bool is_notice_reason(const char *reason) {
        for (size_t i = 0; i < ELEMENTSOF(kinds); i++)
                if (streq_ptr(reason, kinds[i].reason))
                        return true;
        return false;
}

bool directive_from_notices(NodeEntry *e, NoticePolicy policy) {
        const NoticeRecord *best = NULL;
        size_t best_k = 0;

        /* the notice that leaves the least time wins (no deadline counts as last) */
        for (size_t i = 0; i < e->n_notices; i++) {
                const NoticeRecord *n = &e->notices[i];
                if (n->kind < 0 || n->kind >= 32 || !(policy & (1u << n->kind)))
                        continue;
                size_t k;
                for (k = 0; k < ELEMENTSOF(kinds) && kinds[k].kind != n->kind; k++)
                        ;
                if (k == ELEMENTSOF(kinds))
                        continue;
                if (!best || (n->deadline_unix_ms > 0 &&
                              (best->deadline_unix_ms == 0 || n->deadline_unix_ms < best->deadline_unix_ms))) {
                        best = n;
                        best_k = k;
                }
        }

        if (best) {
                bool changed = e->action != NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN ||
                               !streq_ptr(e->reason, kinds[best_k].reason) ||
                               e->deadline_unix_ms != best->deadline_unix_ms || e->force != kinds[best_k].force;
                if (!changed)
                        return false;
                /* a drain already under way for another reason keeps going, now with the notice's
                 * (tighter) deadline and force */
                char *reason = strdup(kinds[best_k].reason);
                if (!reason)
                        return false;
                free(e->reason);
                e->reason = reason;
                e->action = NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN;
                e->deadline_unix_ms = best->deadline_unix_ms;
                e->force = kinds[best_k].force;
                return true;
        }
        if (e->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN && is_notice_reason(e->reason)) {
                /* the notice was withdrawn (maintenance canceled, shutdown cancelled) */
                e->action = NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_RUN;
                free(e->reason);
                e->reason = NULL;
                e->deadline_unix_ms = 0;
                e->force = false;
                return true;
        }
        return false;
}
