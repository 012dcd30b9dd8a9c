/* SPDX-License-Identifier: Apache-2.0 */
#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

#include "apiauth.h"
#include "json-util.h"
#include "log.h"

#define CACHE_SIZE 256
#define CACHE_USEC (10 * USEC_PER_SEC)
#define PATH_MAX_LEN 64
#define TOKEN_MAX 8192
#define SAR_PREFIX "/nodesmith"

typedef struct Verdict {
        uint8_t key[SHA256_DIGEST_LENGTH]; /* SHA-256 of token NUL path */
        int status;
        uint64_t until_usec;
} Verdict;

typedef struct Review Review;
struct Review {
        ApiAuth *auth;
        Review *next;
        uint8_t key[SHA256_DIGEST_LENGTH];
        char path[PATH_MAX_LEN + 1];
        uint64_t now_usec;
        KubeCall *call;
        api_auth_done_t done;
        void *userdata;
};

struct ApiAuth {
        KubeClient *kube;
        Verdict cache[CACHE_SIZE];
        size_t cache_next;
        Review *reviews;
        size_t in_flight;
        ApiAuthStats stats;
        uint64_t logged_usec[2];    /* refusals logged at most every 10 s: unknown token, forbidden */
};

static void log_refusal(ApiAuth *a, Review *r, int status, const char *user) {
        uint64_t *last = &a->logged_usec[status == 403];
        if (*last && r->now_usec - *last < CACHE_USEC)
                return;
        *last = r->now_usec;
        if (status == 403)
                log_warning("API: %s may not get /nodesmith%s (SubjectAccessReview): refused with 403.", user, r->path);
        else
                log_warning("API: a bearer token the API server does not know (TokenReview) was refused for %s.", r->path);
}

int api_auth_new(KubeClient *kube, ApiAuth **ret) {
        if (!kube)
                return -EINVAL;
        ApiAuth *a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        a->kube = kube;
        *ret = a;
        return 0;
}

static void finish(Review *r, int status) {
        ApiAuth *a = r->auth;
        for (Review **p = &a->reviews; *p; p = &(*p)->next)
                if (*p == r) {
                        *p = r->next;
                        break;
                }
        a->in_flight--;
        if (status != 503) { /* an unavailable API server is asked again next time */
                Verdict *v = &a->cache[a->cache_next++ % CACHE_SIZE];
                memcpy(v->key, r->key, sizeof v->key);
                v->status = status;
                v->until_usec = r->now_usec + CACHE_USEC;
        }
        r->done(status, r->userdata);
        free(r);
}

ApiAuth *api_auth_free(ApiAuth *a) {
        if (!a)
                return NULL;
        while (a->reviews) {
                Review *r = a->reviews;
                if (r->call)
                        kube_call_cancel(r->call);
                r->call = NULL;
                a->stats.unavailable++;
                finish(r, 503);
        }
        free(a);
        return NULL;
}

static void count(ApiAuth *a, int status) {
        switch (status) {
        case 200: a->stats.allowed++; break;
        case 401: a->stats.unauthenticated++; break;
        case 403: a->stats.forbidden++; break;
        default: a->stats.unavailable++; break;
        }
}

static void on_access_review(KubeResponse *resp, void *userdata) {
        Review *r = userdata;
        r->call = NULL;
        int status = resp->error < 0 ? 503
                     : cJSON_IsTrue(json_get(json_get(resp->object, "status"), "allowed")) ? 200
                                                                                          : 403;
        if (resp->error < 0)
                log_warning("SubjectAccessReview for %s failed: %s", r->path, strerror(-resp->error));
        else if (status == 403)
                log_refusal(r->auth, r, 403, strempty(json_str(json_get(resp->object, "spec"), "user")));
        count(r->auth, status);
        finish(r, status);
}

static void on_token_review(KubeResponse *resp, void *userdata) {
        Review *r = userdata;
        const cJSON *st = json_get(resp->object, "status");
        r->call = NULL;
        if (resp->error < 0) {
                log_warning("TokenReview failed: %s", strerror(-resp->error));
                count(r->auth, 503);
                finish(r, 503);
                return;
        }
        if (!cJSON_IsTrue(json_get(st, "authenticated"))) {
                log_refusal(r->auth, r, 401, NULL);
                count(r->auth, 401);
                finish(r, 401);
                return;
        }
        /* the user as authenticated, asked whether it may GET this path, under /nodesmith: the API
         * server's own /api/... is open to every authenticated user (system:discovery) */
        const cJSON *user = json_get(st, "user");
        char sar_path[sizeof SAR_PREFIX + PATH_MAX_LEN];
        snprintf(sar_path, sizeof sar_path, SAR_PREFIX "%s", r->path);
        cJSON *body = cJSON_CreateObject(), *spec = NULL, *na = NULL;
        if (body && cJSON_AddStringToObject(body, "apiVersion", "authorization.k8s.io/v1") &&
            cJSON_AddStringToObject(body, "kind", "SubjectAccessReview") && (spec = cJSON_AddObjectToObject(body, "spec")) &&
            cJSON_AddStringToObject(spec, "user", strempty(json_str(user, "username"))) &&
            cJSON_AddStringToObject(spec, "uid", strempty(json_str(user, "uid"))) &&
            (na = cJSON_AddObjectToObject(spec, "nonResourceAttributes")) &&
            cJSON_AddStringToObject(na, "path", sar_path) && cJSON_AddStringToObject(na, "verb", "get")) {
                const cJSON *g = json_get(user, "groups"), *x = json_get(user, "extra");
                if (cJSON_IsArray(g))
                        cJSON_AddItemToObject(spec, "groups", cJSON_Duplicate(g, true));
                if (cJSON_IsObject(x))
                        cJSON_AddItemToObject(spec, "extra", cJSON_Duplicate(x, true));
                if (kube_create(r->auth->kube, "/apis/authorization.k8s.io/v1/subjectaccessreviews", body,
                                on_access_review, r, &r->call) >= 0) {
                        cJSON_Delete(body);
                        return;
                }
        }
        cJSON_Delete(body);
        count(r->auth, 503);
        finish(r, 503);
}

void api_auth_check(ApiAuth *a, const char *authorization, const char *path, uint64_t now, api_auth_done_t done,
                    void *userdata) {
        const char *token = authorization && strncasecmp(authorization, "Bearer ", 7) == 0 ? authorization + 7 : NULL;
        size_t pl = strcspn(path, "?");
        if (!token || !*token || strlen(token) > TOKEN_MAX || pl > PATH_MAX_LEN) {
                a->stats.unauthenticated++;
                done(401, userdata);
                return;
        }
        uint8_t key[SHA256_DIGEST_LENGTH];
        EVP_MD_CTX *h = EVP_MD_CTX_new();
        if (!h || EVP_DigestInit_ex(h, EVP_sha256(), NULL) != 1 || EVP_DigestUpdate(h, token, strlen(token)) != 1 ||
            EVP_DigestUpdate(h, "", 1) != 1 || EVP_DigestUpdate(h, path, pl) != 1 ||
            EVP_DigestFinal_ex(h, key, NULL) != 1) {
                EVP_MD_CTX_free(h);
                a->stats.unavailable++;
                done(503, userdata);
                return;
        }
        EVP_MD_CTX_free(h);
        for (size_t i = 0; i < CACHE_SIZE; i++)
                if (a->cache[i].until_usec > now && memcmp(a->cache[i].key, key, sizeof key) == 0) {
                        a->stats.cache_hits++;
                        count(a, a->cache[i].status);
                        done(a->cache[i].status, userdata);
                        return;
                }
        Review *r = a->in_flight < API_AUTH_MAX_IN_FLIGHT ? calloc(1, sizeof *r) : NULL;
        if (!r) {
                a->stats.unavailable++;
                done(503, userdata);
                return;
        }
        *r = (Review) { .auth = a, .now_usec = now, .done = done, .userdata = userdata, .next = a->reviews };
        memcpy(r->key, key, sizeof key);
        memcpy(r->path, path, pl);
        a->reviews = r;
        a->in_flight++;

        cJSON *body = cJSON_CreateObject(), *spec = NULL;
        int k = -ENOMEM;
        if (body && cJSON_AddStringToObject(body, "apiVersion", "authentication.k8s.io/v1") &&
            cJSON_AddStringToObject(body, "kind", "TokenReview") && (spec = cJSON_AddObjectToObject(body, "spec")) &&
            cJSON_AddStringToObject(spec, "token", token))
                k = kube_create(a->kube, "/apis/authentication.k8s.io/v1/tokenreviews", body, on_token_review, r,
                                &r->call);
        if (body && spec) {
                cJSON *t = cJSON_GetObjectItemCaseSensitive(spec, "token");
                if (cJSON_IsString(t))
                        explicit_bzero(t->valuestring, strlen(t->valuestring));
        }
        cJSON_Delete(body);
        if (k < 0) {
                a->stats.unavailable++;
                finish(r, 503);
        }
}

void api_auth_stats(const ApiAuth *a, ApiAuthStats *ret) {
        *ret = a ? a->stats : (ApiAuthStats) {};
}
