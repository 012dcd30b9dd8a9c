/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Kubernetes API client on the sd-event loop (libcurl multi through lib/http.h, cJSON).
 *
 * Everything is asynchronous and single-threaded: an operation returns at once (< 0 when it
 * could not even be started; its callback is then never called) and its callback runs later,
 * exactly once, from the loop, never from inside libcurl. Requests that meet 429, 5xx or a
 * connection failure are retried with exponential backoff and jitter, honouring Retry-After, up
 * to a number of attempts and an overall deadline; other 4xx answers are returned at once with
 * the server's Status. A 401 with a token file re-reads the file and tries once more.
 *
 * Errors are -errno: 400/422 -EINVAL, 401 -EPERM, 403 -EACCES, 404 -ENOENT, 405 -EOPNOTSUPP,
 * 409 AlreadyExists -EEXIST, 409 Conflict -EBUSY, 410 -ESTALE, 413 -EFBIG, 415 -EPROTONOSUPPORT,
 * 429 (after the retries) -EAGAIN, 5xx -EIO, other 4xx -EPROTO; transport errors as
 * the HTTP backend (lib/http.h); an unparsable body -EBADMSG. The Status text stays in KubeResponse.status.
 *
 * A client must not be freed from inside one of its callbacks; watches and calls may be. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include <cjson/cJSON.h>

#include "macro.h"

#define KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

#define KUBE_DEFAULT_MAX_BODY (32u * 1024 * 1024) /* one response (one list page) */
#define KUBE_DEFAULT_MAX_EVENT (4u * 1024 * 1024) /* one watch event (one line) */
#define KUBE_DEFAULT_MAX_ITEMS 200000u            /* items of one list, objects in one watch */
#define KUBE_DEFAULT_PAGE_SIZE 500u
#define KUBE_DEFAULT_MAX_ATTEMPTS 8u
#define KUBE_DEFAULT_TIMEOUT_USEC (30 * USEC_PER_SEC)     /* one HTTP attempt */
#define KUBE_DEFAULT_DEADLINE_USEC (120 * USEC_PER_SEC)   /* all attempts of one request */
#define KUBE_DEFAULT_BACKOFF_BASE_USEC (250 * USEC_PER_MSEC)
#define KUBE_DEFAULT_BACKOFF_MAX_USEC (30 * USEC_PER_SEC)
#define KUBE_MAX_RETRY_AFTER_USEC (300 * USEC_PER_SEC)
#define KUBE_MAX_TOKEN_SIZE (64u * 1024)
#define KUBE_CLIENT_MAX_WATCHES 1024u /* watches one client runs at once */
#define KUBE_MAX_KUBECONFIG_SIZE (4u * 1024 * 1024)

/* ---- configuration ------------------------------------------------------------------------ */

struct KubeExec;

typedef struct KubeConfig {
        char *server;     /* "https://10.0.0.1:443", "http://127.0.0.1:8080" (no trailing /) */
        char *token;      /* a static bearer token */
        char *token_file; /* a bearer token, re-read whenever the file changes (rotation) */
        char *ca_file;
        char *tls_server_name; /* the name the server's certificate must carry, if not the URL's */
        char *ca_data; /* PEM */
        size_t ca_data_len;
        char *cert_file, *key_file; /* client certificate and key */
        char *cert_data, *key_data; /* the same as PEM in memory */
        size_t cert_data_len, key_data_len;
        char *namespace; /* the service account's or the context's namespace, or NULL */
        struct KubeExec *exec; /* an exec credential plugin (lib/kube-exec.h): its token, renewed
                                * before it expires and after a 401 */
        bool insecure_skip_verify;

        /* Limits and retry policy; 0 means the KUBE_DEFAULT_* value. */
        size_t max_body, max_event, max_items;
        unsigned max_attempts;
        uint64_t timeout_usec, deadline_usec, backoff_base_usec, backoff_max_usec;
} KubeConfig;

/* A plain server URL (http or https), nothing else set. */
int kube_config_new(const char *server, KubeConfig **ret);
/* In-cluster: $KUBERNETES_SERVICE_HOST/$KUBERNETES_SERVICE_PORT and sa_dir/{token,ca.crt,
 * namespace} (sa_dir NULL: KUBE_SA_DIR). -ENXIO when not in a cluster. The certificate is checked
 * against kubernetes.default.svc, a name every API server's certificate carries, not against the
 * service address (NNG's mbedTLS matches DNS names only). */
int kube_config_in_cluster(const char *sa_dir, KubeConfig **ret);
/* A kubeconfig (YAML or JSON): the context (NULL: current-context) picks the cluster (server,
 * certificate-authority[-data], insecure-skip-tls-verify, tls-server-name) and the user (token, tokenFile,
 * client-certificate[-data], client-key[-data]) and the namespace. Relative file names are
 * relative to base_dir (the kubeconfig's directory). exec and auth-provider users are
 * -EOPNOTSUPP; a missing context, cluster or user -ENOENT; bad base64 -EBADMSG. */
int kube_config_from_kubeconfig(const char *path, const char *context, KubeConfig **ret);
int kube_config_parse_kubeconfig(const char *text, size_t len, const char *base_dir,
                                 const char *context, KubeConfig **ret);
KubeConfig *kube_config_free(KubeConfig *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(KubeConfig *, kube_config_free);

/* ---- results -------------------------------------------------------------------------------- */

/* A metav1.Status as the server sent it (truncated to these sizes). */
typedef struct KubeStatus {
        int code;             /* "code", else the HTTP status */
        char status[16];      /* "Failure", "Success" */
        char reason[64];      /* "NotFound", "TooManyRequests", "Expired", ... */
        char message[1024];
        char cause[64];       /* the first details.causes[].reason (e.g. "DisruptionBudget") */
        char cause_message[256];
        unsigned retry_after; /* details.retryAfterSeconds */
} KubeStatus;

typedef struct KubeResponse {
        int error;          /* 0 or -errno */
        long http_status;   /* the last answer's; 0 when none came */
        unsigned attempts;  /* HTTP requests made (pages of a list summed) */
        bool has_status;    /* the body was a Status: see status */
        KubeStatus status;
        cJSON *object;      /* the body (for a list, see kube_list); NULL when not JSON */
} KubeResponse;

/* The callback may keep resp->object by taking it: cJSON *o = TAKE_PTR(resp->object). */
typedef void (*kube_done_t)(KubeResponse *resp, void *userdata);

typedef struct KubeClient KubeClient;
typedef struct KubeCall KubeCall;

int kube_client_new(sd_event *e, const KubeConfig *config, KubeClient **ret);
/* Cancels calls and stops watches' traffic; their callbacks are not called. Watches must still
 * be freed by their owners (before or after). */
KubeClient *kube_client_free(KubeClient *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(KubeClient *, kube_client_free);
const KubeConfig *kube_client_config(const KubeClient *c);
/* Calls in flight or waiting to retry. */
size_t kube_client_pending(const KubeClient *c);
/* Cancel every call started with this userdata (e.g. when its owner goes away); returns how
 * many. Their callbacks are not called. */
size_t kube_client_cancel(KubeClient *c, void *userdata);

/* ---- operations ----------------------------------------------------------------------------- */
/* path: an API path ("/api/v1/nodes/n1", see kube_path()), optionally with a query. ret_call
 * (optional) receives a handle valid until the callback runs, for kube_call_cancel(). */

int kube_get(KubeClient *c, const char *path, kube_done_t cb, void *userdata, KubeCall **ret_call);
/* POST a new object to a collection; PUT a whole object (with metadata.resourceVersion for
 * an optimistic update: 409 -EBUSY on a conflict). */
int kube_create(KubeClient *c, const char *path, const cJSON *body, kube_done_t cb, void *userdata,
                KubeCall **ret_call);
int kube_replace(KubeClient *c, const char *path, const cJSON *body, kube_done_t cb,
                 void *userdata, KubeCall **ret_call);

typedef enum KubePatchType {
        KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json (built-in kinds) */
        KUBE_PATCH_MERGE,     /* application/merge-patch+json (RFC 7386) */
        KUBE_PATCH_JSON,      /* application/json-patch+json (RFC 6902; a failed test: 422) */
} KubePatchType;
int kube_patch(KubeClient *c, const char *path, KubePatchType type, const char *body,
               kube_done_t cb, void *userdata, KubeCall **ret_call);
/* Strategic merge {"spec":{"unschedulable":true|null}} on /api/v1/nodes/NAME. */
int kube_cordon(KubeClient *c, const char *node, bool cordon, kube_done_t cb, void *userdata,
                KubeCall **ret_call);

typedef struct KubeDeleteOptions {
        int64_t grace_seconds;          /* < 0: the object's default */
        const char *uid;                /* preconditions: 409 -EBUSY when they do not match */
        const char *resource_version;
        const char *propagation_policy; /* "Background", "Foreground", "Orphan" or NULL */
} KubeDeleteOptions;
#define KUBE_DELETE_OPTIONS_INIT { .grace_seconds = -1 }
/* Success is 200 (the object, deletionTimestamp set when finalizers keep it, or a Status) or
 * 202; both are error 0. opts may be NULL. */
int kube_delete(KubeClient *c, const char *path, const KubeDeleteOptions *opts, kube_done_t cb,
                void *userdata, KubeCall **ret_call);

typedef struct KubeListOptions {
        const char *label_selector; /* "app=web,tier!=db" (see kube_selector_add()) */
        const char *field_selector; /* "spec.nodeName=n1" */
        unsigned limit;             /* page size; 0: KUBE_DEFAULT_PAGE_SIZE */
        const char *resource_version; /* for the first page; NULL: most recent */
        bool trim; /* kube_object_trim() each page's items as it arrives (pods: a path in /pods) */
} KubeListOptions;
/* Every page, continued until done: resp->object is {"kind":"…List","metadata":
 * {"resourceVersion":RV},"items":[...]} with all the items. An expired continue token (410)
 * restarts the list once from the start. More than max_items items: -E2BIG. */
int kube_list(KubeClient *c, const char *path, const KubeListOptions *opts, kube_done_t cb,
              void *userdata, KubeCall **ret_call);

typedef enum KubeEvictResult {
        KUBE_EVICT_ACCEPTED,      /* 200/201: the pod is being deleted */
        KUBE_EVICT_BLOCKED,       /* 429 DisruptionBudget: try again later (status.retry_after) */
        KUBE_EVICT_MULTIPLE_PDBS, /* 500: more than one PodDisruptionBudget matches */
        KUBE_EVICT_NOT_FOUND,     /* 404: the pod is gone */
        KUBE_EVICT_FAILED,        /* anything else: resp->error and resp->status */
} KubeEvictResult;
const char *kube_evict_result_to_string(KubeEvictResult r);
typedef void (*kube_evict_done_t)(KubeEvictResult result, KubeResponse *resp, void *userdata);
/* POST /api/v1/namespaces/NS/pods/NAME/eviction (policy/v1) with opts as its deleteOptions (NULL:
 * the pod's grace period, no preconditions). A PDB refusal and the multiple-PDB 500 are answers,
 * not retried; other 429/5xx are. Preconditions the pod no longer meets (another client evicted
 * it since that resourceVersion, or it is a new pod of the same name) answer 409: FAILED. */
int kube_evict(KubeClient *c, const char *ns, const char *name, const KubeDeleteOptions *opts,
               kube_evict_done_t cb, void *userdata, KubeCall **ret_call);

typedef struct KubeEventInfo {
        const char *namespace;   /* NULL: the object's, or "default" for cluster-scoped ones */
        const char *api_version; /* of the involved object, e.g. "v1" */
        const char *kind;        /* "Node", "Pod", ... */
        const char *object_namespace;
        const char *name;
        const char *uid;
        const char *type;        /* "Normal" (NULL) or "Warning" */
        const char *reason;      /* "Cordoned", "Draining", ... (CamelCase) */
        const char *message;     /* cut to 1024 bytes */
        const char *component;   /* source.component and reportingComponent */
        const char *host;        /* source.host and reportingInstance (optional) */
} KubeEventInfo;
/* A core/v1 Event (count 1, first and last timestamp now). */
int kube_event_create(KubeClient *c, const KubeEventInfo *info, kube_done_t cb, void *userdata,
                      KubeCall **ret_call);

/* Cancel a call before its callback ran (the callback is not called). */
void kube_call_cancel(KubeCall *k);

/* ---- watch: list + watch, like an informer -------------------------------------------------- */

typedef enum KubeWatchEventType {
        KUBE_WATCH_ADDED,
        KUBE_WATCH_MODIFIED,
        KUBE_WATCH_DELETED,
        KUBE_WATCH_SYNCED, /* a (re)list is complete and delivered; the cache is current */
        KUBE_WATCH_ERROR,  /* a list or watch failed; retried with backoff (informational) */
} KubeWatchEventType;

typedef struct KubeWatchEvent {
        KubeWatchEventType type;
        const cJSON *object; /* ADDED, MODIFIED: the new state; DELETED: the last state */
        const cJSON *old;    /* MODIFIED: the state before (from the cache), else NULL */
        int error;           /* ERROR: -errno */
        const KubeStatus *status; /* ERROR: the Status, when there was one */
} KubeWatchEvent;

typedef struct KubeWatch KubeWatch;
typedef void (*kube_watch_event_t)(KubeWatch *w, const KubeWatchEvent *ev, void *userdata);

typedef struct KubeWatchStats {
        unsigned lists;      /* complete (re)lists */
        unsigned relists;    /* caused by 410 Gone / Expired */
        unsigned watches;    /* watch requests started */
        unsigned events;     /* ADDED/MODIFIED/DELETED events received on watch streams */
        unsigned bookmarks;
        unsigned errors;
        char resource_version[64];
} KubeWatchStats;

/* Lists path (paginated) and delivers ADDED for every object and SYNCED, then watches from the
 * list's resourceVersion with bookmarks, resumes from the last seen resourceVersion when a
 * stream ends, relists on 410 (delivering the difference: ADDED, MODIFIED, DELETED, then SYNCED).
 * The objects are kept (key "namespace/name"); callbacks may free the watch. */
int kube_watch_new(KubeClient *c, const char *path, const KubeListOptions *opts,
                   kube_watch_event_t cb, void *userdata, KubeWatch **ret);
KubeWatch *kube_watch_free(KubeWatch *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(KubeWatch *, kube_watch_free);
bool kube_watch_synced(const KubeWatch *w);
size_t kube_watch_size(const KubeWatch *w);
/* ns is NULL or "" for cluster-scoped objects. Valid until the next event is delivered. */
const cJSON *kube_watch_get(const KubeWatch *w, const char *ns, const char *name);
/* fn returns < 0 to stop; that value is returned. */
int kube_watch_foreach(const KubeWatch *w, int (*fn)(const cJSON *obj, void *userdata),
                       void *userdata);
void kube_watch_stats(const KubeWatch *w, KubeWatchStats *ret);

/* ---- building blocks (exported for callers and tests) --------------------------------------- */

/* "/api/v1/namespaces/NS/pods/NAME/eviction" or "/apis/GROUP/VERSION/...": group_version is
 * "v1" (core) or "apps/v1"; ns, name and subresource may be NULL. Names must be non-empty and
 * without '/' (-EINVAL); they are percent-escaped. */
int kube_path(const char *group_version, const char *ns, const char *resource, const char *name,
              const char *subresource, char **ret);
/* server + path + query: list options, watch=1 and allowWatchBookmarks, resourceVersion,
 * continue, timeoutSeconds (each appended when set; values escaped). */
typedef struct KubeQuery {
        const KubeListOptions *list;
        bool watch;
        const char *resource_version;
        const char *cont;
        unsigned timeout_seconds;
} KubeQuery;
int kube_url(const char *server, const char *path, const KubeQuery *q, char **ret);
/* Append "key op value" to a selector (",".join); op is "=", "!=", or NULL for "key exists"
 * ("!" prefix on key for "does not exist"). Keys and values are checked against Kubernetes'
 * label syntax (-EINVAL). */
int kube_selector_add(char **selector, const char *key, const char *op, const char *value);

/* Parse a Status from JSON; -EINVAL when j is not a Status. */
int kube_status_parse(const cJSON *j, KubeStatus *ret);
/* HTTP status (+ the Status's reason, may be NULL) to -errno; 0 for 2xx. */
int kube_http_errno(long http_status, const KubeStatus *st);
/* Retry-After: delta-seconds or an HTTP-date (relative to now_sec, seconds since the epoch).
 * Capped at KUBE_MAX_RETRY_AFTER_USEC. -EINVAL when unparsable. */
int kube_parse_retry_after(const char *value, int64_t now_sec, uint64_t *ret_usec);
/* The delay before attempt n+1 (n >= 1) after a failure: base·2^(n-1) capped at max, with
 * jitter in [d/2, d]; rnd is a random 32-bit value. */
uint64_t kube_backoff_usec(unsigned n, uint64_t base, uint64_t max, uint32_t rnd);

/* Newline-delimited stream framing with a cap on one line. */
typedef struct KubeLines {
        char *data;
        size_t start, len, size; /* unread bytes are data[start..len) */
        size_t max_line, max_buffered;
} KubeLines;
void kube_lines_init(KubeLines *l, size_t max_line);
void kube_lines_done(KubeLines *l);
/* -EFBIG when an unfinished line exceeds max_line, -ENOBUFS when too much is queued. */
int kube_lines_feed(KubeLines *l, const char *data, size_t len);
/* The next complete line (without "\n" or "\r\n"; NUL-terminated in place; empty lines are
 * skipped); false when there is none yet. Valid until the next feed. */
bool kube_lines_next(KubeLines *l, char **ret_line, size_t *ret_len);

/* A JSON patch removing one finalizer from obj, guarded by a test op on its index:
 * [{"op":"test","path":"/metadata/finalizers/I","value":F},{"op":"remove",...}]. -ENOENT when
 * obj does not carry it. */
int kube_finalizer_remove_patch(const cJSON *obj, const char *finalizer, char **ret);
/* metadata.namespace + "/" + metadata.name ("/name" for cluster-scoped). */
int kube_object_key(const cJSON *obj, char **ret);
/* What a watch keeps of an object: metadata.managedFields dropped; of a pod (pod true) also its
 * containers' statuses and the container fields nothing here reads (env, command, probes,
 * image, mounts, ...). Resources, ports, restartPolicy and everything scheduling reads stay. */
void kube_object_trim(cJSON *obj, bool pod);
const char *kube_object_meta(const cJSON *obj, const char *field); /* metadata.FIELD string */
