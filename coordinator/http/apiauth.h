/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdint.h>

#include "kube.h"
#include "macro.h"

/* Who may read /api/v1 (docs/security.md, "the pod network"): as Kubernetes components
 * authenticate their own HTTP endpoints (kube-rbac-proxy, the kubelet's authn/authz webhooks).
 * The caller's bearer token goes to a TokenReview; an authenticated user then needs a
 * SubjectAccessReview allowing verb "get" on the non-resource path prefixed with /nodesmith
 * (/nodesmith/api/v1/nodes: the API server's own /api/... is granted to every authenticated user by
 * system:discovery; RBAC: packaging/kubernetes/rbac-api-reader.yaml). Verdicts are cached for 10 s by the SHA-256 of the token and the path, in a
 * bounded table; at most API_AUTH_MAX_IN_FLIGHT reviews run at once (more: 503). */

#define API_AUTH_MAX_IN_FLIGHT 64

typedef struct ApiAuth ApiAuth;

/* status: 200 allowed, 401 no or unknown token, 403 authenticated but not allowed, 503 the API
 * server could not be asked (or the auth is going away). */
typedef void (*api_auth_done_t)(int status, void *userdata);

/* kube is borrowed and must outlive the ApiAuth. */
int api_auth_new(KubeClient *kube, ApiAuth **ret);
/* Answers every review in flight with 503. */
ApiAuth *api_auth_free(ApiAuth *a);
DEFINE_TRIVIAL_CLEANUP_FUNC(ApiAuth *, api_auth_free);

/* authorization: the request's Authorization header (NULL: none). done() runs at once when the
 * answer is known (cache, no token) or later on the loop; exactly once either way. */
void api_auth_check(ApiAuth *a, const char *authorization, const char *path, uint64_t now_usec,
                    api_auth_done_t done, void *userdata);

typedef struct ApiAuthStats {
        uint64_t allowed, unauthenticated, forbidden, unavailable, cache_hits;
} ApiAuthStats;
void api_auth_stats(const ApiAuth *a, ApiAuthStats *ret);
