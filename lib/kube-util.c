/* SPDX-License-Identifier: Apache-2.0 */
/* The Kubernetes client's pure pieces: paths, queries, selectors, Status, Retry-After, backoff,
 * line framing of watch streams, finalizer patches, base64. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "http.h"
#include "kube.h"
#include "strbuf.h"
#include "timestamp.h"

/* ---- paths and queries ------------------------------------------------------------------- */

static int add_segment(StrBuf *b, const char *seg) {
        if (isempty(seg) || strchr(seg, '/') || streq(seg, ".") || streq(seg, ".."))
                return -EINVAL;
        _cleanup_free_ char *e = http_escape(seg);
        if (!e)
                return -ENOMEM;
        return strbuf_printf(b, "/%s", e);
}

int kube_path(const char *group_version, const char *ns, const char *resource, const char *name,
              const char *subresource, char **ret) {
        StrBuf b;
        int r;

        if (isempty(group_version) || isempty(resource))
                return -EINVAL;
        strbuf_init(&b, 4096);
        if (strchr(group_version, '/')) {
                const char *slash = strchr(group_version, '/');
                if (slash == group_version || !slash[1] || strchr(slash + 1, '/'))
                        return -EINVAL;
                r = strbuf_printf(&b, "/apis/%s", group_version);
        } else
                r = strbuf_printf(&b, "/api/%s", group_version);
        if (r >= 0 && ns) {
                r = strbuf_printf(&b, "/namespaces");
                if (r >= 0)
                        r = add_segment(&b, ns);
        }
        if (r >= 0)
                r = add_segment(&b, resource);
        if (r >= 0 && name)
                r = add_segment(&b, name);
        if (r >= 0 && subresource) {
                if (!name)
                        r = -EINVAL;
                else
                        r = add_segment(&b, subresource);
        }
        if (r < 0) {
                strbuf_done(&b);
                return r;
        }
        *ret = b.data;
        return 0;
}

static int add_param(StrBuf *b, bool *first, const char *key, const char *value) {
        _cleanup_free_ char *e = http_escape(value);
        if (!e)
                return -ENOMEM;
        int r = strbuf_printf(b, "%c%s=%s", *first ? '?' : '&', key, e);
        *first = false;
        return r;
}

int kube_url(const char *server, const char *path, const KubeQuery *q, char **ret) {
        StrBuf b;
        bool first;
        int r;
        char num[32];

        if (isempty(server) || isempty(path) || path[0] != '/')
                return -EINVAL;
        strbuf_init(&b, 64 * 1024);
        size_t sl = strlen(server);
        while (sl > 0 && server[sl - 1] == '/')
                sl--;
        r = strbuf_append(&b, server, sl);
        if (r >= 0)
                r = strbuf_printf(&b, "%s", path);
        first = !strchr(path, '?');
        if (q) {
                const KubeListOptions *o = q->list;
                if (r >= 0 && o && !isempty(o->label_selector))
                        r = add_param(&b, &first, "labelSelector", o->label_selector);
                if (r >= 0 && o && !isempty(o->field_selector))
                        r = add_param(&b, &first, "fieldSelector", o->field_selector);
                if (r >= 0 && q->watch) {
                        r = add_param(&b, &first, "watch", "1");
                        if (r >= 0)
                                r = add_param(&b, &first, "allowWatchBookmarks", "true");
                } else if (r >= 0 && o && o->limit > 0) {
                        snprintf(num, sizeof num, "%u", o->limit);
                        r = add_param(&b, &first, "limit", num);
                }
                if (r >= 0 && !isempty(q->cont))
                        r = add_param(&b, &first, "continue", q->cont);
                else if (r >= 0 && !isempty(q->resource_version))
                        r = add_param(&b, &first, "resourceVersion", q->resource_version);
                if (r >= 0 && q->timeout_seconds > 0) {
                        snprintf(num, sizeof num, "%u", q->timeout_seconds);
                        r = add_param(&b, &first, "timeoutSeconds", num);
                }
        }
        if (r < 0) {
                strbuf_done(&b);
                return r;
        }
        *ret = b.data;
        return 0;
}

/* Label keys: [prefix/]name, prefix a DNS subdomain (<= 253), name <= 63 of [A-Za-z0-9-_.]
 * beginning and ending alphanumeric. Values: empty or like a name. */
static bool label_name_ok(const char *s, size_t n) {
        if (n == 0 || n > 63 || !isalnum((unsigned char) s[0]) || !isalnum((unsigned char) s[n - 1]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char) s[i]) && !strchr("-_.", s[i]))
                        return false;
        return true;
}

static bool label_key_ok(const char *k) {
        const char *slash = strchr(k, '/');
        if (slash) {
                size_t pl = (size_t) (slash - k);
                if (pl == 0 || pl > 253)
                        return false;
                for (size_t i = 0; i < pl; i++)
                        if (!(islower((unsigned char) k[i]) || isdigit((unsigned char) k[i]) ||
                              k[i] == '-' || k[i] == '.'))
                                return false;
                k = slash + 1;
        }
        return label_name_ok(k, strlen(k));
}

int kube_selector_add(char **selector, const char *key, const char *op, const char *value) {
        bool negate = key && key[0] == '!';
        _cleanup_free_ char *n = NULL;

        if (!key || !label_key_ok(key + negate))
                return -EINVAL;
        if (op) {
                if (negate || !(streq(op, "=") || streq(op, "==") || streq(op, "!=")) || !value)
                        return -EINVAL;
                if (*value && !label_name_ok(value, strlen(value)))
                        return -EINVAL;
        }
        if (asprintf(&n, "%s%s%s%s%s", strempty(*selector), isempty(*selector) ? "" : ",", key,
                     strempty(op), op ? value : "") < 0)
                return -ENOMEM;
        free(*selector);
        *selector = TAKE_PTR(n);
        return 0;
}

/* ---- Status -------------------------------------------------------------------------------- */

static void copy_str(char *dst, size_t size, const cJSON *j) {
        if (cJSON_IsString(j) && j->valuestring)
                snprintf(dst, size, "%s", j->valuestring);
}

int kube_status_parse(const cJSON *j, KubeStatus *ret) {
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "kind");
        KubeStatus st = {};

        if (!cJSON_IsObject(j) || !cJSON_IsString(kind) || !streq(kind->valuestring, "Status"))
                return -EINVAL;
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(j, "code");
        if (cJSON_IsNumber(code) && code->valuedouble >= 0 && code->valuedouble < 1000)
                st.code = code->valueint;
        copy_str(st.status, sizeof st.status, cJSON_GetObjectItemCaseSensitive(j, "status"));
        copy_str(st.reason, sizeof st.reason, cJSON_GetObjectItemCaseSensitive(j, "reason"));
        copy_str(st.message, sizeof st.message, cJSON_GetObjectItemCaseSensitive(j, "message"));
        const cJSON *details = cJSON_GetObjectItemCaseSensitive(j, "details");
        const cJSON *ra = cJSON_GetObjectItemCaseSensitive(details, "retryAfterSeconds");
        if (cJSON_IsNumber(ra) && ra->valuedouble > 0 && ra->valuedouble < 86400)
                st.retry_after = (unsigned) ra->valueint;
        const cJSON *causes = cJSON_GetObjectItemCaseSensitive(details, "causes"), *c;
        cJSON_ArrayForEach(c, causes) {
                const cJSON *reason = cJSON_GetObjectItemCaseSensitive(c, "reason");
                if (!cJSON_IsString(reason))
                        reason = cJSON_GetObjectItemCaseSensitive(c, "type");
                if (!cJSON_IsString(reason))
                        continue;
                copy_str(st.cause, sizeof st.cause, reason);
                copy_str(st.cause_message, sizeof st.cause_message,
                         cJSON_GetObjectItemCaseSensitive(c, "message"));
                break;
        }
        *ret = st;
        return 0;
}

int kube_http_errno(long s, const KubeStatus *st) {
        if (s >= 200 && s < 300)
                return 0;
        switch (s) {
        case 400:
        case 422:
                return -EINVAL;
        case 401:
                return -EPERM;
        case 403:
                return -EACCES;
        case 404:
                return -ENOENT;
        case 405:
                return -EOPNOTSUPP;
        case 409:
                return st && streq(st->reason, "AlreadyExists") ? -EEXIST : -EBUSY;
        case 410:
                return -ESTALE;
        case 413:
                return -EFBIG;
        case 415:
                return -EPROTONOSUPPORT;
        case 429:
                return -EAGAIN;
        }
        if (s >= 500 && s < 600)
                return -EIO;
        return -EPROTO;
}

int kube_parse_retry_after(const char *v, int64_t now_sec, uint64_t *ret_usec) {
        uint64_t usec;

        if (isempty(v))
                return -EINVAL;
        while (*v == ' ' || *v == '\t')
                v++;
        if (isdigit((unsigned char) *v)) {
                char *end;
                errno = 0;
                unsigned long long s = strtoull(v, &end, 10);
                while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')
                        end++;
                if (*end || errno == ERANGE)
                        return -EINVAL;
                usec = s > KUBE_MAX_RETRY_AFTER_USEC / USEC_PER_SEC ? KUBE_MAX_RETRY_AFTER_USEC
                                                                      : s * USEC_PER_SEC;
        } else {
                /* an HTTP-date (RFC 9110 §5.6.7: IMF-fixdate, the form servers send) */
                int64_t when;
                if (timestamp_parse_http_date(v, &when) < 0)
                        return -EINVAL;
                int64_t d = when / (int64_t) USEC_PER_SEC - now_sec;
                usec = d <= 0 ? 0 : (uint64_t) d > KUBE_MAX_RETRY_AFTER_USEC / USEC_PER_SEC
                                            ? KUBE_MAX_RETRY_AFTER_USEC
                                            : (uint64_t) d * USEC_PER_SEC;
        }
        *ret_usec = usec;
        return 0;
}

uint64_t kube_backoff_usec(unsigned n, uint64_t base, uint64_t max, uint32_t rnd) {
        uint64_t d = base;
        for (unsigned i = 1; i < n && d < max; i++)
                d *= 2;
        d = MIN(d, max);
        uint64_t half = d / 2;
        return half + (half ? (uint64_t) rnd % (d - half + 1) : 0);
}

/* ---- line framing ------------------------------------------------------------------------ */

void kube_lines_init(KubeLines *l, size_t max_line) {
        *l = (KubeLines) { .max_line = max_line,
                           .max_buffered = MAX(8 * max_line, (size_t) 16 * 1024 * 1024) };
}

void kube_lines_done(KubeLines *l) {
        free(l->data);
        *l = (KubeLines) { .max_line = l->max_line, .max_buffered = l->max_buffered };
}

int kube_lines_feed(KubeLines *l, const char *data, size_t len) {
        if (l->start > 0 && (l->start == l->len || l->start > l->size / 2)) {
                memmove(l->data, l->data + l->start, l->len - l->start);
                l->len -= l->start;
                l->start = 0;
        }
        if (len > l->max_buffered || l->len - l->start + len > l->max_buffered)
                return -ENOBUFS;
        /* what is buffered stays within max_buffered past start (checked above) */
        int r = GROW(l->data, l->size, MAX(l->len + len + 1, (size_t) 4096),
                     MAX(l->start + l->max_buffered + 1, (size_t) 4096));
        if (r < 0)
                return r;
        memcpy(l->data + l->len, data, len);
        size_t old = l->len;
        l->len += len;
        l->data[l->len] = 0;
        /* the unfinished tail: from the last newline (in the new or the old bytes) */
        const char *nl = memrchr(l->data + old, '\n', len);
        size_t tail;
        if (nl)
                tail = l->len - (size_t) (nl - l->data) - 1;
        else {
                const char *pn = memrchr(l->data + l->start, '\n', old - l->start);
                tail = l->len - (pn ? (size_t) (pn - l->data) + 1 : l->start);
        }
        if (tail > l->max_line)
                return -EFBIG;
        return 0;
}

bool kube_lines_next(KubeLines *l, char **ret_line, size_t *ret_len) {
        for (;;) {
                if (l->start >= l->len)
                        return false;
                char *p = l->data + l->start;
                char *nl = memchr(p, '\n', l->len - l->start);
                if (!nl)
                        return false;
                size_t n = (size_t) (nl - p);
                l->start += n + 1;
                if (n > 0 && p[n - 1] == '\r')
                        n--;
                p[n] = 0;
                if (n == 0)
                        continue;
                if (n > l->max_line)
                        continue; /* feed() refuses these; defensive */
                *ret_line = p;
                *ret_len = n;
                return true;
        }
}

/* ---- objects ------------------------------------------------------------------------------- */

const char *kube_object_meta(const cJSON *obj, const char *field) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, field);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

int kube_object_key(const cJSON *obj, char **ret) {
        const char *name = kube_object_meta(obj, "name"), *ns = kube_object_meta(obj, "namespace");
        char *k;
        if (isempty(name))
                return -EBADMSG;
        if (asprintf(&k, "%s/%s", strempty(ns), name) < 0)
                return -ENOMEM;
        *ret = k;
        return 0;
}

int kube_finalizer_remove_patch(const cJSON *obj, const char *finalizer, char **ret) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
        const cJSON *fins = cJSON_GetObjectItemCaseSensitive(m, "finalizers"), *f;
        int i = 0, found = -1;

        cJSON_ArrayForEach(f, fins) {
                if (cJSON_IsString(f) && streq(f->valuestring, finalizer)) {
                        found = i;
                        break;
                }
                i++;
        }
        if (found < 0)
                return -ENOENT;
        cJSON *p = cJSON_CreateArray();
        char path[64];
        snprintf(path, sizeof path, "/metadata/finalizers/%d", found);
        cJSON *t = cJSON_CreateObject(), *rm = cJSON_CreateObject();
        if (!p || !t || !rm) {
                cJSON_Delete(p);
                cJSON_Delete(t);
                cJSON_Delete(rm);
                return -ENOMEM;
        }
        cJSON_AddItemToArray(p, t);
        cJSON_AddItemToArray(p, rm);
        if (!cJSON_AddStringToObject(t, "op", "test") || !cJSON_AddStringToObject(t, "path", path) ||
            !cJSON_AddStringToObject(t, "value", finalizer) ||
            !cJSON_AddStringToObject(rm, "op", "remove") ||
            !cJSON_AddStringToObject(rm, "path", path)) {
                cJSON_Delete(p);
                return -ENOMEM;
        }
        char *s = cJSON_PrintUnformatted(p);
        cJSON_Delete(p);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

/* Fields nothing in nodesmith reads, dropped from what watches keep: a pod's cJSON tree costs
 * about five times its JSON, and on a busy node most of it is these. */
static void delete_all(cJSON *obj, const char *const *names, size_t n) {
        for (size_t i = 0; i < n; i++)
                cJSON_DeleteItemFromObjectCaseSensitive(obj, names[i]);
}

void kube_object_trim(cJSON *obj, bool pod) {
        static const char *const status_lists[] = { "containerStatuses", "initContainerStatuses",
                                                     "ephemeralContainerStatuses" };
        static const char *const container_fields[] = {
                "env", "envFrom", "command", "args", "volumeMounts", "volumeDevices", "livenessProbe",
                "readinessProbe", "startupProbe", "lifecycle", "securityContext", "image",
                "imagePullPolicy", "terminationMessagePath", "terminationMessagePolicy", "workingDir",
                "stdin", "stdinOnce", "tty", "resizePolicy"
        };
        static const char *const container_lists[] = { "containers", "initContainers", "ephemeralContainers" };
        cJSON *c;

        if (!cJSON_IsObject(obj))
                return;
        cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "managedFields");
        if (!pod)
                return;
        delete_all(cJSON_GetObjectItemCaseSensitive(obj, "status"), status_lists, ELEMENTSOF(status_lists));
        cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
        for (size_t i = 0; i < ELEMENTSOF(container_lists); i++)
                cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(spec, container_lists[i]))
                        if (cJSON_IsObject(c))
                                delete_all(c, container_fields, ELEMENTSOF(container_fields));
}
