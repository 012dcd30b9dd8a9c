/* SPDX-License-Identifier: Apache-2.0 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <fcntl.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "timestamp.h"
#include "aws-credentials.h"
#include "ec2-internal.h"
#include "fileio.h"
#include "log.h"
#include "macro.h"
#include "strbuf.h"

#define CREDENTIALS_FILE_MAX (1024u * 1024)
#define WEB_IDENTITY_TOKEN_MAX (64u * 1024)
#define STS_BODY_MAX (64u * 1024)
#define IMDS_BODY_MAX (16u * 1024)
#define IMDS_TOKEN_TTL "21600"
#define DEFAULT_REFRESH_MARGIN_USEC (5 * 60 * USEC_PER_SEC)
#define CREDENTIAL_FIELD_MAX 4096
#define CONTAINER_TOKEN_MAX (16u * 1024)
#define CONTAINER_ECS_HOST "http://169.254.170.2"

typedef enum ImdsStep {
        IMDS_STEP_TOKEN,
        IMDS_STEP_ROLE,
        IMDS_STEP_CREDENTIALS,
} ImdsStep;

typedef struct Waiter {
        aws_credentials_done_t done;
        void *userdata;
        struct Waiter *next;
} Waiter;

struct AwsCredentialProvider {
        sd_event *event;
        HttpClient *http;
        char *region, *sts_endpoint, *imds_endpoint;
        bool imds_disabled;
        uint64_t refresh_margin_usec;
        AwsCredentials static_creds;
        bool have_static;

        AwsCredentials cached;
        bool have_cached;
        AwsCredentialSource source;

        Waiter *waiters, **waiters_tail;
        HttpRequest *req; /* the fetch in flight */
        AwsCredentialSource fetching;
        ImdsStep imds_step;
        char *imds_token, *imds_role;
};

static const char *const source_names[_AWS_CREDENTIALS_SOURCE_MAX] = {
        [AWS_CREDENTIALS_NONE] = "none",
        [AWS_CREDENTIALS_STATIC] = "static",
        [AWS_CREDENTIALS_ENVIRONMENT] = "environment",
        [AWS_CREDENTIALS_WEB_IDENTITY] = "web-identity",
        [AWS_CREDENTIALS_SHARED_FILE] = "shared-credentials-file",
        [AWS_CREDENTIALS_IMDS] = "imds",
        [AWS_CREDENTIALS_CONTAINER] = "container",
};

const char *aws_credential_source_to_string(AwsCredentialSource s) {
        return s >= 0 && s < _AWS_CREDENTIALS_SOURCE_MAX ? source_names[s] : NULL;
}

static void free_secret(char **p) {
        if (*p) {
                explicit_bzero(*p, strlen(*p));
                free(*p);
                *p = NULL;
        }
}

void aws_credentials_done(AwsCredentials *c) {
        if (!c)
                return;
        free_secret(&c->access_key_id);
        free_secret(&c->secret_access_key);
        free_secret(&c->session_token);
        c->expiration = 0;
}

static int credentials_set(AwsCredentials *ret, const char *ak, const char *sk, const char *token,
                           int64_t expiration) {
        AwsCredentials n = { .expiration = expiration };
        if (isempty(ak) || isempty(sk))
                return -ENOKEY;
        if (strlen(ak) > CREDENTIAL_FIELD_MAX || strlen(sk) > CREDENTIAL_FIELD_MAX ||
            (token && strlen(token) > 4 * CREDENTIAL_FIELD_MAX))
                return -EMSGSIZE;
        n.access_key_id = strdup(ak);
        n.secret_access_key = strdup(sk);
        n.session_token = isempty(token) ? NULL : strdup(token);
        if (!n.access_key_id || !n.secret_access_key || (!isempty(token) && !n.session_token)) {
                aws_credentials_done(&n);
                return -ENOMEM;
        }
        aws_credentials_done(ret);
        *ret = n;
        return 0;
}

int aws_credentials_copy(const AwsCredentials *src, AwsCredentials *ret) {
        return credentials_set(ret, src->access_key_id, src->secret_access_key, src->session_token,
                               src->expiration);
}

/* ---- parsing ----------------------------------------------------------------------------- */

/* An expiration (RFC 3339) in epoch seconds. */
static int parse_expiration(const char *s, int64_t *ret) {
        int64_t usec;
        int r = timestamp_parse_rfc3339(s, 0, &usec);
        if (r < 0)
                return r;
        *ret = usec / (int64_t) USEC_PER_SEC;
        return 0;
}

static char *strip(char *s) {
        while (isspace((unsigned char) *s))
                s++;
        size_t n = strlen(s);
        while (n > 0 && isspace((unsigned char) s[n - 1]))
                s[--n] = 0;
        return s;
}

int aws_shared_credentials_parse(const char *text, const char *profile, AwsCredentials *ret) {
        _cleanup_free_ char *copy = NULL;
        char *ak = NULL, *sk = NULL, *token = NULL, *save = NULL;
        bool found = false, in = false;

        if (!text)
                return -EINVAL;
        if (isempty(profile))
                profile = "default";
        copy = strdup(text);
        if (!copy)
                return -ENOMEM;
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char *l = strip(line);
                if (*l == 0 || *l == '#' || *l == ';')
                        continue;
                if (*l == '[') {
                        char *end = strchr(l, ']');
                        if (!end)
                                return -EBADMSG;
                        *end = 0;
                        in = streq(strip(l + 1), profile);
                        found = found || in;
                        continue;
                }
                if (!in)
                        continue;
                char *eq = strchr(l, '=');
                if (!eq)
                        continue; /* nested blocks and stray lines are not credentials */
                *eq = 0;
                char *k = strip(l), *v = strip(eq + 1);
                if (streq(k, "aws_access_key_id"))
                        ak = v;
                else if (streq(k, "aws_secret_access_key"))
                        sk = v;
                else if (streq(k, "aws_session_token") ||
                         (streq(k, "aws_security_token") && !token))
                        token = v;
        }
        if (!found)
                return -ENOENT;
        int r = credentials_set(ret, ak, sk, token, 0);
        explicit_bzero(copy, strlen(text));
        return r;
}

int aws_shared_credentials_load(const char *path, const char *profile, AwsCredentials *ret) {
        _cleanup_free_ char *text = NULL;
        int r = read_file_bounded(path, CREDENTIALS_FILE_MAX, &text, NULL);
        if (r < 0)
                return r;
        r = aws_shared_credentials_parse(text, profile, ret);
        explicit_bzero(text, strlen(text));
        return r;
}

int aws_credentials_from_environment(AwsCredentials *ret) {
        const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
        const char *token = getenv("AWS_SESSION_TOKEN");
        if (isempty(ak) || isempty(sk))
                return -ENOKEY;
        return credentials_set(ret, ak, sk, token, 0);
}

static xmlNode *xml_find(xmlNode *n, const char *name) {
        for (; n; n = n->next) {
                if (n->type != XML_ELEMENT_NODE)
                        continue;
                if (xmlStrEqual(n->name, (const xmlChar *) name))
                        return n;
                xmlNode *c = xml_find(n->children, name);
                if (c)
                        return c;
        }
        return NULL;
}

static char *xml_child_text(xmlNode *parent, const char *name) {
        for (xmlNode *n = parent ? parent->children : NULL; n; n = n->next)
                if (n->type == XML_ELEMENT_NODE && xmlStrEqual(n->name, (const xmlChar *) name)) {
                        xmlChar *t = xmlNodeGetContent(n);
                        char *s = t ? strdup((const char *) t) : NULL;
                        xmlFree(t);
                        return s;
                }
        return NULL;
}

int aws_sts_parse_credentials(const char *xml, size_t len, AwsCredentials *ret) {
        xmlDoc *doc;
        int r;

        if (len > STS_BODY_MAX || len > INT32_MAX)
                return -EMSGSIZE;
        doc = ec2_xml_read(xml, len);
        if (!doc)
                return -EBADMSG;
        xmlNode *root = xmlDocGetRootElement(doc);
        xmlNode *err = xml_find(root, "Error");
        xmlNode *c = xml_find(root, "Credentials");
        if (err || !c) {
                xmlFreeDoc(doc);
                return err ? -EACCES : -EBADMSG;
        }
        _cleanup_free_ char *ak = xml_child_text(c, "AccessKeyId");
        char *sk = xml_child_text(c, "SecretAccessKey"), *token = xml_child_text(c, "SessionToken");
        _cleanup_free_ char *exp = xml_child_text(c, "Expiration");
        int64_t expiration = 0;
        r = exp ? parse_expiration(exp, &expiration) : -EBADMSG;
        if (r >= 0)
                r = credentials_set(ret, ak, sk, token, expiration);
        if (r == -ENOKEY)
                r = -EBADMSG;
        free_secret(&sk);
        free_secret(&token);
        xmlFreeDoc(doc);
        return r;
}

int aws_imds_parse_credentials(const char *json, AwsCredentials *ret) {
        cJSON *j = cJSON_Parse(json);
        int r;
        if (!j)
                return -EBADMSG;
        const char *code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "Code"));
        const char *ak = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "AccessKeyId"));
        const char *sk = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "SecretAccessKey"));
        const char *token = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "Token"));
        const char *exp = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "Expiration"));
        int64_t expiration = 0;
        if (code && !streq(code, "Success"))
                r = -EACCES;
        else if (!ak || !sk)
                r = -EBADMSG;
        else {
                r = exp ? parse_expiration(exp, &expiration) : 0;
                if (r >= 0)
                        r = credentials_set(ret, ak, sk, token, expiration);
        }
        cJSON_Delete(j);
        return r;
}

/* ---- the chain ---------------------------------------------------------------------------- */

static bool env_true(const char *name) {
        const char *v = getenv(name);
        return v && (strcasecmp(v, "true") == 0 || streq(v, "1"));
}

static int shared_file_path(char **ret) {
        const char *p = getenv("AWS_SHARED_CREDENTIALS_FILE"), *home = getenv("HOME");
        if (!isempty(p))
                return (*ret = strdup(p)) ? 0 : -ENOMEM;
        if (isempty(home))
                return -ENOENT;
        return asprintf(ret, "%s/.aws/credentials", home) < 0 ? -ENOMEM : 0;
}

static bool shared_file_usable(const char *path, const char *profile) {
        AwsCredentials c = {};
        int r = aws_shared_credentials_load(path, profile, &c);
        aws_credentials_done(&c);
        return r >= 0;
}

AwsCredentialSource aws_credentials_pick_source(bool imds_disabled, char **ret_path,
                                                char **ret_profile) {
        _cleanup_free_ char *path = NULL;
        const char *profile_env = getenv("AWS_PROFILE");
        const char *profile = isempty(profile_env) ? "default" : profile_env;
        bool web = !isempty(getenv("AWS_WEB_IDENTITY_TOKEN_FILE")) && !isempty(getenv("AWS_ROLE_ARN"));
        bool file = shared_file_path(&path) >= 0 && shared_file_usable(path, profile);
        AwsCredentialSource s;

        if (!isempty(getenv("AWS_ACCESS_KEY_ID")) && !isempty(getenv("AWS_SECRET_ACCESS_KEY")))
                s = AWS_CREDENTIALS_ENVIRONMENT;
        else if (file && !isempty(profile_env))
                s = AWS_CREDENTIALS_SHARED_FILE;
        else if (web)
                s = AWS_CREDENTIALS_WEB_IDENTITY;
        else if (file)
                s = AWS_CREDENTIALS_SHARED_FILE;
        else if (!isempty(getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI")) ||
                 !isempty(getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")))
                s = AWS_CREDENTIALS_CONTAINER;
        else if (!imds_disabled && !env_true("AWS_EC2_METADATA_DISABLED"))
                s = AWS_CREDENTIALS_IMDS;
        else
                s = AWS_CREDENTIALS_NONE;
        if (s == AWS_CREDENTIALS_SHARED_FILE) {
                if (ret_profile && !(*ret_profile = strdup(profile)))
                        return AWS_CREDENTIALS_NONE;
                if (ret_path)
                        *ret_path = TAKE_PTR(path);
        }
        return s;
}

/* ---- the provider -------------------------------------------------------------------------- */

static int dup_opt(char **dst, const char *src) {
        return free_and_strdup(dst, src);
}

int aws_credential_provider_new(sd_event *e, HttpClient *http, const AwsCredentialsConfig *config,
                                AwsCredentialProvider **ret) {
        AwsCredentialsConfig none = {};
        const AwsCredentialsConfig *cfg = config ?: &none;
        AwsCredentialProvider *p = calloc(1, sizeof *p);
        const char *v;
        int r;

        if (!p)
                return -ENOMEM;
        p->event = sd_event_ref(e);
        p->http = http;
        p->waiters_tail = &p->waiters;
        p->imds_disabled = cfg->imds_disabled;
        p->refresh_margin_usec = cfg->refresh_margin_usec ?: DEFAULT_REFRESH_MARGIN_USEC;
        r = dup_opt(&p->region, cfg->region ?: getenv("AWS_REGION") ?: "us-east-1");
        v = cfg->sts_endpoint ?: getenv("AWS_ENDPOINT_URL_STS");
        if (r >= 0 && !isempty(v))
                r = dup_opt(&p->sts_endpoint, v);
        else if (r >= 0 && asprintf(&p->sts_endpoint, "https://sts.%s.amazonaws.com/", p->region) < 0)
                r = -ENOMEM;
        v = cfg->imds_endpoint ?: getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
        if (r >= 0)
                r = dup_opt(&p->imds_endpoint, isempty(v) ? "http://169.254.169.254" : v);
        if (r >= 0 && cfg->static_access_key_id) {
                r = credentials_set(&p->static_creds, cfg->static_access_key_id,
                                    cfg->static_secret_access_key, cfg->static_session_token, 0);
                p->have_static = r >= 0;
        }
        if (r < 0) {
                aws_credential_provider_free(p);
                return r;
        }
        /* no trailing slash on the IMDS base */
        size_t n = strlen(p->imds_endpoint);
        while (n > 0 && p->imds_endpoint[n - 1] == '/')
                p->imds_endpoint[--n] = 0;
        *ret = p;
        return 0;
}

static void fetch_reset(AwsCredentialProvider *p) {
        if (p->req) {
                http_request_cancel(p->req);
                p->req = NULL;
        }
        free_secret(&p->imds_token);
        free(p->imds_role);
        p->imds_role = NULL;
        p->fetching = AWS_CREDENTIALS_NONE;
}

AwsCredentialProvider *aws_credential_provider_free(AwsCredentialProvider *p) {
        if (!p)
                return NULL;
        fetch_reset(p);
        while (p->waiters) {
                Waiter *w = p->waiters;
                p->waiters = w->next;
                free(w);
        }
        aws_credentials_done(&p->cached);
        aws_credentials_done(&p->static_creds);
        free(p->region);
        free(p->sts_endpoint);
        free(p->imds_endpoint);
        sd_event_unref(p->event);
        free(p);
        return NULL;
}

AwsCredentialSource aws_credentials_source(const AwsCredentialProvider *p) {
        return p->source;
}

void aws_credentials_invalidate(AwsCredentialProvider *p) {
        if (p->source == AWS_CREDENTIALS_STATIC)
                return;
        aws_credentials_done(&p->cached);
        p->have_cached = false;
}

static bool cached_fresh(AwsCredentialProvider *p, uint64_t margin_usec) {
        if (!p->have_cached)
                return false;
        if (p->cached.expiration == 0)
                return true;
        return (int64_t) time(NULL) + (int64_t) (margin_usec / USEC_PER_SEC) < p->cached.expiration;
}

/* Hand the result to everyone waiting. Waiters added by callbacks wait for the next fetch. */
static void finish(AwsCredentialProvider *p, int error) {
        Waiter *list = p->waiters;
        p->waiters = NULL;
        p->waiters_tail = &p->waiters;
        fetch_reset(p);
        if (error < 0 && cached_fresh(p, 0)) {
                log_warning_errno(error, "Refreshing AWS credentials (%s) failed, using the cached ones until they expire: %m",
                                  aws_credential_source_to_string(p->source));
                error = 0;
        } else if (error < 0)
                log_debug_errno(error, "No AWS credentials: %m");
        /* callbacks may free what they like but not the provider */
        AwsCredentials snapshot = {};
        if (error >= 0 && aws_credentials_copy(&p->cached, &snapshot) < 0)
                error = -ENOMEM;
        while (list) {
                Waiter *w = list;
                list = w->next;
                w->done(p, error, error >= 0 ? &snapshot : NULL, w->userdata);
                free(w);
        }
        aws_credentials_done(&snapshot);
}

static void cache(AwsCredentialProvider *p, AwsCredentialSource s, AwsCredentials *c) {
        aws_credentials_done(&p->cached);
        p->cached = *c;
        *c = (AwsCredentials) {};
        p->have_cached = true;
        p->source = s;
        log_debug("AWS credentials from %s (key %.4s…%s)", aws_credential_source_to_string(s),
                  p->cached.access_key_id, p->cached.expiration ? ", temporary" : "");
}

static int start_sts(AwsCredentialProvider *p);
static int imds_next(AwsCredentialProvider *p);

static void on_sts_done(HttpRequest *req, int error, long status, const char *body, size_t len,
                        void *userdata) {
        AwsCredentialProvider *p = userdata;
        AwsCredentials c = {};
        int r = error;

        p->req = NULL;
        if (r >= 0) {
                r = aws_sts_parse_credentials(body, len, &c);
                if (r >= 0 && status != 200)
                        r = -EBADMSG;
                if (r < 0)
                        log_warning_errno(r, "STS AssumeRoleWithWebIdentity failed with HTTP %ld: %m", status);
        } else
                log_warning_errno(r, "STS AssumeRoleWithWebIdentity request failed: %m");
        if (r >= 0)
                cache(p, AWS_CREDENTIALS_WEB_IDENTITY, &c);
        aws_credentials_done(&c);
        finish(p, r);
}

static int append_param(StrBuf *b, const char *k, const char *v) {
        _cleanup_free_ char *e = http_escape(v);
        if (!e)
                return -ENOMEM;
        return strbuf_printf(b, "%s%s=%s", b->len ? "&" : "", k, e);
}

static int start_sts(AwsCredentialProvider *p) {
        const char *token_file = getenv("AWS_WEB_IDENTITY_TOKEN_FILE");
        const char *role = getenv("AWS_ROLE_ARN"), *session = getenv("AWS_ROLE_SESSION_NAME");
        _cleanup_free_ char *token = NULL, *session_buf = NULL;
        StrBuf b;
        HttpRequest *req = NULL;
        int r;

        r = read_file_bounded(token_file, WEB_IDENTITY_TOKEN_MAX, &token, NULL);
        if (r < 0)
                return log_warning_errno(r, "Failed to read the web identity token %s: %m", token_file);
        char *t = strip(token);
        if (isempty(session)) {
                if (asprintf(&session_buf, "nodesmith-%ld", (long) time(NULL)) < 0)
                        return -ENOMEM;
                session = session_buf;
        }
        strbuf_init(&b, WEB_IDENTITY_TOKEN_MAX * 4);
        r = append_param(&b, "Action", "AssumeRoleWithWebIdentity");
        if (r >= 0)
                r = append_param(&b, "Version", "2011-06-15");
        if (r >= 0)
                r = append_param(&b, "RoleArn", role);
        if (r >= 0)
                r = append_param(&b, "RoleSessionName", session);
        if (r >= 0)
                r = append_param(&b, "WebIdentityToken", t);
        explicit_bzero(token, strlen(token));
        if (r >= 0)
                r = http_request_new(p->http, "POST", p->sts_endpoint, &req);
        if (r >= 0)
                r = http_request_add_header(req, "Content-Type", "application/x-www-form-urlencoded");
        if (r >= 0)
                r = http_request_add_header(req, "Accept", "text/xml");
        if (r >= 0)
                r = http_request_set_body(req, b.data, b.len);
        if (b.data)
                explicit_bzero(b.data, b.len);
        strbuf_done(&b);
        if (r < 0) {
                http_request_free(req);
                return r;
        }
        http_request_set_timeouts(req, 3000, 10000);
        http_request_set_max_body(req, STS_BODY_MAX);
        r = http_request_start(req, on_sts_done, p);
        if (r < 0)
                return r;
        p->req = req;
        return 0;
}

static void on_imds_done(HttpRequest *req, int error, long status, const char *body, size_t len,
                         void *userdata) {
        AwsCredentialProvider *p = userdata;
        int r = error;

        p->req = NULL;
        if (r >= 0 && status != 200)
                r = status == 404 ? -ENOENT : status == 401 || status == 403 ? -EACCES : -EIO;
        if (r < 0) {
                log_warning_errno(r, "IMDS credentials step %d failed (HTTP %ld): %m", (int) p->imds_step, status);
                return finish(p, r);
        }
        switch (p->imds_step) {
        case IMDS_STEP_TOKEN:
                free_secret(&p->imds_token);
                p->imds_token = strndup(body, len);
                if (!p->imds_token)
                        return finish(p, -ENOMEM);
                strip(p->imds_token);
                p->imds_step = IMDS_STEP_ROLE;
                break;
        case IMDS_STEP_ROLE: {
                size_t n = strcspn(body, "\r\n");
                free(p->imds_role);
                p->imds_role = strndup(body, n);
                if (!p->imds_role)
                        return finish(p, -ENOMEM);
                if (isempty(strip(p->imds_role)) || strchr(p->imds_role, '/'))
                        return finish(p, -ENOENT);
                p->imds_step = IMDS_STEP_CREDENTIALS;
                break;
        }
        case IMDS_STEP_CREDENTIALS: {
                AwsCredentials c = {};
                r = aws_imds_parse_credentials(body, &c);
                if (r >= 0)
                        cache(p, AWS_CREDENTIALS_IMDS, &c);
                aws_credentials_done(&c);
                return finish(p, r);
        }
        }
        r = imds_next(p);
        if (r < 0)
                finish(p, r);
}

static int imds_next(AwsCredentialProvider *p) {
        _cleanup_free_ char *url = NULL;
        HttpRequest *req = NULL;
        int r;

        switch (p->imds_step) {
        case IMDS_STEP_TOKEN:
                r = asprintf(&url, "%s/latest/api/token", p->imds_endpoint);
                break;
        case IMDS_STEP_ROLE:
                r = asprintf(&url, "%s/latest/meta-data/iam/security-credentials/", p->imds_endpoint);
                break;
        default:
                r = asprintf(&url, "%s/latest/meta-data/iam/security-credentials/%s", p->imds_endpoint,
                             p->imds_role);
                break;
        }
        if (r < 0)
                return -ENOMEM;
        r = http_request_new(p->http, p->imds_step == IMDS_STEP_TOKEN ? "PUT" : "GET", url, &req);
        if (r < 0)
                return r;
        if (p->imds_step == IMDS_STEP_TOKEN)
                r = http_request_add_header(req, "X-aws-ec2-metadata-token-ttl-seconds", IMDS_TOKEN_TTL);
        else
                r = http_request_add_header(req, "X-aws-ec2-metadata-token", p->imds_token);
        if (r < 0) {
                http_request_free(req);
                return r;
        }
        http_request_set_timeouts(req, 1000, 3000);
        http_request_set_max_body(req, IMDS_BODY_MAX);
        r = http_request_start(req, on_imds_done, p);
        if (r < 0)
                return r;
        p->req = req;
        return 0;
}

/* ---- container credentials (EKS Pod Identity, ECS) ------------------------------------------ */

/* The SDKs' rule: a plain-http FULL_URI must name a loopback address or the EKS Pod Identity
 * agent's (169.254.170.23, fd00:ec2::23); https may name any host. */
static bool container_url_allowed(const char *url) {
        static const char *const hosts[] = { "localhost", "[::1]", "169.254.170.2", "169.254.170.23", "[fd00:ec2::23]" };
        char host[256];
        if (strncmp(url, "https://", 8) == 0)
                return true;
        if (strncmp(url, "http://", 7) != 0)
                return false;
        const char *h = url + 7;
        size_t n = h[0] == '[' ? strcspn(h, "]") + 1 : strcspn(h, ":/");
        if (n >= sizeof host)
                return false;
        memcpy(host, h, n);
        host[n] = 0;
        if (strncmp(host, "127.", 4) == 0)
                return true;
        for (size_t i = 0; i < ELEMENTSOF(hosts); i++)
                if (streq(host, hosts[i]))
                        return true;
        return false;
}

static void on_container_done(HttpRequest *req, int error, long status, const char *body, size_t len,
                              void *userdata) {
        AwsCredentialProvider *p = userdata;
        AwsCredentials c = {};
        int r = error;
        p->req = NULL;
        if (r >= 0 && status != 200)
                r = status == 401 || status == 403 ? -EACCES : status == 404 ? -ENOENT : -EIO;
        if (r >= 0)
                r = aws_imds_parse_credentials(body, &c);
        if (r >= 0)
                cache(p, AWS_CREDENTIALS_CONTAINER, &c);
        else
                log_warning_errno(r, "Container credentials (HTTP %ld) failed: %m", status);
        aws_credentials_done(&c);
        finish(p, r);
}

static int start_container(AwsCredentialProvider *p) {
        const char *full = getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
        const char *rel = getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
        const char *token_file = getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
        _cleanup_free_ char *url = NULL, *token = NULL;
        HttpRequest *req = NULL;
        int r;

        if (!isempty(rel))
                r = asprintf(&url, CONTAINER_ECS_HOST "%s", rel) < 0 ? -ENOMEM : 0;
        else if (!container_url_allowed(full))
                return log_error_errno(EPERM, "AWS_CONTAINER_CREDENTIALS_FULL_URI %s: plain http only to a loopback "
                                       "address or the EKS Pod Identity agent's", full);
        else
                r = (url = strdup(full)) ? 0 : -ENOMEM;
        if (r < 0)
                return r;
        if (!isempty(token_file)) {
                r = read_file_trimmed(token_file, CONTAINER_TOKEN_MAX, &token);
                if (r < 0)
                        return log_warning_errno(r, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE %s: %m", token_file);
        } else if (!isempty(getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN")) &&
                   !(token = strdup(getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN"))))
                return -ENOMEM;
        r = http_request_new(p->http, "GET", url, &req);
        if (r >= 0 && token)
                r = http_request_add_header(req, "Authorization", token);
        if (token)
                explicit_bzero(token, strlen(token));
        if (r < 0) {
                http_request_free(req);
                return r;
        }
        http_request_set_timeouts(req, 1000, 5000);
        http_request_set_max_body(req, IMDS_BODY_MAX);
        r = http_request_start(req, on_container_done, p);
        if (r < 0)
                return r;
        p->req = req;
        return 0;
}

static int fetch(AwsCredentialProvider *p) {
        _cleanup_free_ char *path = NULL, *profile = NULL;
        AwsCredentials c = {};
        AwsCredentialSource s;
        int r;

        if (p->have_static) {
                r = aws_credentials_copy(&p->static_creds, &c);
                if (r >= 0)
                        cache(p, AWS_CREDENTIALS_STATIC, &c);
                aws_credentials_done(&c);
                return r < 0 ? r : 1;
        }
        s = aws_credentials_pick_source(p->imds_disabled, &path, &profile);
        switch (s) {
        case AWS_CREDENTIALS_ENVIRONMENT:
                r = aws_credentials_from_environment(&c);
                break;
        case AWS_CREDENTIALS_SHARED_FILE:
                r = aws_shared_credentials_load(path, profile, &c);
                break;
        case AWS_CREDENTIALS_WEB_IDENTITY:
                p->fetching = s;
                r = start_sts(p);
                return r < 0 ? r : 0;
        case AWS_CREDENTIALS_CONTAINER:
                p->fetching = s;
                r = start_container(p);
                return r < 0 ? r : 0;
        case AWS_CREDENTIALS_IMDS:
                p->fetching = s;
                p->imds_step = IMDS_STEP_TOKEN;
                r = imds_next(p);
                return r < 0 ? r : 0;
        default:
                return -ENOKEY;
        }
        if (r >= 0)
                cache(p, s, &c);
        aws_credentials_done(&c);
        return r < 0 ? r : 1;
}

int aws_credentials_get(AwsCredentialProvider *p, aws_credentials_done_t done, void *userdata) {
        int r;

        if (!p || !done)
                return -EINVAL;
        if (!p->waiters && cached_fresh(p, p->refresh_margin_usec)) {
                done(p, 0, &p->cached, userdata);
                return 0;
        }
        Waiter *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *w = (Waiter) { .done = done, .userdata = userdata };
        bool idle = !p->req && p->fetching == AWS_CREDENTIALS_NONE;
        *p->waiters_tail = w;
        p->waiters_tail = &w->next;
        if (!idle)
                return 0;
        r = fetch(p);
        if (r == 0)
                return 0; /* asynchronous */
        if (r > 0 || cached_fresh(p, 0)) {
                finish(p, 0);
                return 0;
        }
        /* nothing to wait for: withdraw and report */
        aws_credentials_cancel(p, done, userdata);
        fetch_reset(p);
        return r;
}

void aws_credentials_cancel(AwsCredentialProvider *p, aws_credentials_done_t done, void *userdata) {
        Waiter **pw = &p->waiters;
        while (*pw) {
                Waiter *w = *pw;
                if (w->done == done && w->userdata == userdata) {
                        *pw = w->next;
                        free(w);
                } else
                        pw = &w->next;
        }
        p->waiters_tail = &p->waiters;
        while (*p->waiters_tail)
                p->waiters_tail = &(*p->waiters_tail)->next;
}
