/* SPDX-License-Identifier: Apache-2.0 */
#include <cjson/cJSON.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/pkcs7.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attest.h"
#include "base64.h"
#include "aws/aws-credentials.h"
#include "aws/ec2.h"
#include "fileio.h"
#include "http.h"
#include "log.h"
#include "strbuf.h"
#include "timestamp.h"

#define TRUST_FILE_MAX (1024 * 1024)
#define LOG_EVERY_USEC (60 * USEC_PER_SEC)

static const char *const mode_names[_ATTEST_MODE_MAX] = {
        [ATTEST_OFF] = "off",
        [ATTEST_WARN] = "warn",
        [ATTEST_REQUIRED] = "required",
};

const char *attest_mode_to_string(AttestMode m) {
        return m >= 0 && m < _ATTEST_MODE_MAX ? mode_names[m] : "unknown";
}

int attest_mode_from_string(const char *s, AttestMode *ret) {
        for (int i = 0; i < _ATTEST_MODE_MAX; i++)
                if (s && streq(s, mode_names[i])) {
                        *ret = i;
                        return 0;
                }
        return -EINVAL;
}

static const struct {
        const char *label, *text;
} reasons[_ATTEST_REASON_MAX] = {
        [ATTEST_REASON_NONE] = { "none", "accepted" },
        [ATTEST_REASON_NO_DOCUMENT] = { "no_document", "no instance identity document with its rsa2048 signature" },
        [ATTEST_REASON_MALFORMED] = { "malformed", "unreadable identity document or rsa2048 signature" },
        [ATTEST_REASON_BAD_SIGNATURE] = { "bad_signature",
                                          "the rsa2048 signature is not from a trusted AWS certificate or does not sign this document" },
        [ATTEST_REASON_INSTANCE_MISMATCH] = { "instance_mismatch", "the identity document is another instance's" },
        [ATTEST_REASON_REGION_MISMATCH] = { "region_mismatch", "the identity document is from another region" },
        [ATTEST_REASON_REPLAY] = { "replay", "another agent boot holds this instance (replayed document)" },
        [ATTEST_REASON_UNKNOWN_INSTANCE] = { "unknown_instance", "EC2 does not know this instance" },
        [ATTEST_REASON_NOT_RUNNING] = { "not_running", "the instance is not pending or running" },
        [ATTEST_REASON_UNTAGGED] = { "untagged", "the instance does not carry this cluster's nodesmith.io/cluster tag" },
        [ATTEST_REASON_STALE_DOCUMENT] = { "stale_document",
                                           "the document's pendingTime is not the instance's launch time (an earlier boot's document)" },
        [ATTEST_REASON_EC2_UNAVAILABLE] = { "ec2_unavailable", "EC2 could not be asked about the instance" },
};

const char *attest_reason_to_string(AttestReason r) {
        return r >= 0 && r < _ATTEST_REASON_MAX ? reasons[r].label : "unknown";
}

const char *attest_reason_describe(AttestReason r) {
        return r >= 0 && r < _ATTEST_REASON_MAX ? reasons[r].text : "unknown";
}

/* ---- trust: the regional certificates ---------------------------------------------------------- */

struct AttestTrust {
        STACK_OF(X509) *certs;
};

AttestTrust *attest_trust_free(AttestTrust *t) {
        if (!t)
                return NULL;
        sk_X509_pop_free(t->certs, X509_free);
        free(t);
        return NULL;
}

int attest_trust_from_pem(const char *pem, size_t len, AttestTrust **ret) {
        if (!pem || len > TRUST_FILE_MAX)
                return -EINVAL;
        _cleanup_(attest_trust_freep) AttestTrust *t = calloc(1, sizeof *t);
        if (!t || !(t->certs = sk_X509_new_null()))
                return -ENOMEM;
        BIO *b = BIO_new_mem_buf(pem, (int) len);
        if (!b)
                return -ENOMEM;
        X509 *x;
        while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)))
                if (!sk_X509_push(t->certs, x)) {
                        X509_free(x);
                        BIO_free(b);
                        return -ENOMEM;
                }
        BIO_free(b);
        ERR_clear_error(); /* the end of the bundle reads as an error */
        if (sk_X509_num(t->certs) == 0)
                return -ENOKEY;
        *ret = TAKE_PTR(t);
        return 0;
}

int attest_trust_from_file(const char *path, AttestTrust **ret) {
        _cleanup_free_ char *pem = NULL;
        size_t len = 0;
        int r = read_file_bounded(path, TRUST_FILE_MAX, &pem, &len);
        if (r < 0)
                return r;
        return attest_trust_from_pem(pem, len, ret);
}

size_t attest_trust_count(const AttestTrust *t) {
        return t ? (size_t) sk_X509_num(t->certs) : 0;
}

/* ---- the signature ---------------------------------------------------------------------------- */

int attest_verify_signature(const AttestTrust *t, const uint8_t *doc, size_t doc_len,
                            const uint8_t *sig, size_t sig_len) {
        _cleanup_free_ void *der = NULL;
        size_t der_len = 0;
        int r;

        if (!t || !doc || doc_len == 0 || doc_len > ATTEST_MAX_DOCUMENT || !sig || sig_len == 0 ||
            sig_len > ATTEST_MAX_SIGNATURE)
                return -EBADMSG;
        /* base64 with line breaks, "-----" armour lines skipped */
        r = base64_decode((const char *) sig, sig_len, BASE64_SKIP_ARMOUR, &der, &der_len);
        if (r < 0)
                return r;
        const unsigned char *p = der;
        PKCS7 *p7 = d2i_PKCS7(NULL, &p, (long) der_len);
        if (!p7 || p != der + der_len || !PKCS7_type_is_signed(p7)) {
                PKCS7_free(p7);
                ERR_clear_error();
                return -EBADMSG;
        }
        bool detached = PKCS7_get_detached(p7);
        BIO *in = detached ? BIO_new_mem_buf(doc, (int) doc_len) : NULL;
        BIO *out = BIO_new(BIO_s_mem());
        if ((detached && !in) || !out) {
                r = -ENOMEM;
                goto done;
        }
        /* AWS's procedure: the regional certificate is the only signer trusted, certificates
         * carried in the message are ignored, and no chain to a root is built. */
        if (PKCS7_verify(p7, t->certs, NULL, in, out,
                         PKCS7_NOVERIFY | PKCS7_NOINTERN | PKCS7_NOCHAIN | PKCS7_BINARY) != 1) {
                r = -EKEYREJECTED;
                goto done;
        }
        if (!detached) {
                /* the content signed must be the document sent, byte for byte */
                char *signed_doc = NULL;
                long n = BIO_get_mem_data(out, &signed_doc);
                if (n < 0 || (size_t) n != doc_len || memcmp(signed_doc, doc, doc_len) != 0) {
                        r = -EKEYREJECTED;
                        goto done;
                }
        }
        r = 0;
done:
        ERR_clear_error();
        BIO_free(in);
        BIO_free(out);
        PKCS7_free(p7);
        return r;
}

/* ---- the document ----------------------------------------------------------------------------- */

/* pendingTime: RFC 3339 in UTC, to epoch seconds. */
static int parse_time(const char *s, int64_t *ret) {
        int64_t usec;
        int r = timestamp_parse_rfc3339(s, TIMESTAMP_UTC_ONLY, &usec);
        if (r < 0)
                return -EBADMSG;
        *ret = usec / (int64_t) USEC_PER_SEC;
        return 0;
}

static int copy_string(const cJSON *o, const char *key, char *buf, size_t size) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        if (!cJSON_IsString(v) || isempty(v->valuestring) || strlen(v->valuestring) >= size)
                return -EBADMSG;
        strcpy(buf, v->valuestring);
        return 0;
}

int attest_document_parse(const uint8_t *doc, size_t len, AttestDocument *ret) {
        AttestDocument d = {};
        char when[64];
        if (!doc || len == 0 || len > ATTEST_MAX_DOCUMENT)
                return -EBADMSG;
        cJSON *o = cJSON_ParseWithLength((const char *) doc, len);
        int r = cJSON_IsObject(o) ? 0 : -EBADMSG;
        if (r >= 0)
                r = copy_string(o, "instanceId", d.instance_id, sizeof d.instance_id);
        if (r >= 0)
                r = copy_string(o, "region", d.region, sizeof d.region);
        if (r >= 0)
                r = copy_string(o, "pendingTime", when, sizeof when);
        if (r >= 0)
                r = parse_time(when, &d.pending_time);
        if (r >= 0 && cJSON_GetObjectItemCaseSensitive(o, "accountId"))
                r = copy_string(o, "accountId", d.account_id, sizeof d.account_id);
        cJSON_Delete(o);
        if (r < 0)
                return r;
        *ret = d;
        return 0;
}

AttestReason attest_check_facts(const AttestDocument *d, const AttestFacts *f, const char *cluster) {
        if (!f->found)
                return ATTEST_REASON_UNKNOWN_INSTANCE;
        if (!streq(f->state, "pending") && !streq(f->state, "running"))
                return ATTEST_REASON_NOT_RUNNING;
        if (isempty(cluster) || !streq(f->cluster, cluster))
                return ATTEST_REASON_UNTAGGED;
        if (f->launch_time != d->pending_time)
                return ATTEST_REASON_STALE_DOCUMENT;
        return ATTEST_REASON_NONE;
}

/* ---- the attestor ----------------------------------------------------------------------------- */

typedef enum Lookup {
        LOOKUP_NONE,
        LOOKUP_IN_FLIGHT,
        LOOKUP_DONE,
        LOOKUP_FAILED,
} Lookup;

typedef struct Entry {
        char instance_id[ATTEST_ID_MAX + 1];
        Lookup lookup;
        AttestFacts facts;
        uint64_t answered_usec;
        char accepted_boot[ATTEST_ID_MAX + 1];   /* the agent boot last accepted */
        AttestReason logged;                     /* the refusal last logged, and when */
        uint64_t logged_usec;
        uint64_t used_usec;
} Entry;

/* A DescribeInstances in flight: what its callback needs. */
typedef struct Flight {
        Attestor *a;
        char instance_id[ATTEST_ID_MAX + 1];
        bool used;
} Flight;

struct Attestor {
        AttestConfig cfg;
        char *region, *cluster;
        AttestTrust *trust;
        Entry *entries;
        size_t n_entries;
        Flight *flights;
        Flight *starting;        /* the lookup being started, for the describe function */
        attest_describe_t describe;
        void *describe_userdata;
        AttestStats stats;
        /* the EC2 side, when attestor_use_ec2() set it up */
        sd_event *event;
        HttpClient *http;
        AwsCredentialProvider *creds;
        Ec2Client *ec2;
};

int attestor_new(const AttestConfig *cfg, AttestTrust *trust, Attestor **ret) {
        _cleanup_(attestor_freep) Attestor *a = calloc(1, sizeof *a);
        if (!a) {
                attest_trust_free(trust);
                return -ENOMEM;
        }
        a->trust = trust;
        a->cfg = *cfg;
        if (!a->cfg.cache_usec)
                a->cfg.cache_usec = 30 * USEC_PER_SEC;
        if (!a->cfg.error_usec)
                a->cfg.error_usec = 5 * USEC_PER_SEC;
        if (!a->cfg.max_entries)
                a->cfg.max_entries = 4096;
        if (!a->cfg.max_in_flight)
                a->cfg.max_in_flight = 32;
        a->region = strdup(strempty(cfg->region));
        a->cluster = strdup(strempty(cfg->cluster));
        a->entries = calloc(a->cfg.max_entries, sizeof *a->entries);
        a->flights = calloc(a->cfg.max_in_flight, sizeof *a->flights);
        if (!a->region || !a->cluster || !a->entries || !a->flights)
                return -ENOMEM;
        a->cfg.region = a->region;
        a->cfg.cluster = a->cluster;
        *ret = TAKE_PTR(a);
        return 0;
}

Attestor *attestor_free(Attestor *a) {
        if (!a)
                return NULL;
        ec2_client_free(a->ec2); /* cancels the lookups in flight: no callback afterwards */
        aws_credential_provider_free(a->creds);
        http_client_free(a->http);
        sd_event_unref(a->event);
        attest_trust_free(a->trust);
        free(a->entries);
        free(a->flights);
        free(a->region);
        free(a->cluster);
        free(a);
        return NULL;
}

void attestor_set_describe(Attestor *a, attest_describe_t fn, void *userdata) {
        a->describe = fn;
        a->describe_userdata = userdata;
}

AttestMode attestor_mode(const Attestor *a) {
        return a ? a->cfg.mode : ATTEST_OFF;
}

const AttestStats *attestor_stats(const Attestor *a) {
        return &a->stats;
}

static Entry *entry_find(const Attestor *a, const char *id) {
        for (size_t i = 0; i < a->n_entries; i++)
                if (streq(a->entries[i].instance_id, id))
                        return &a->entries[i];
        return NULL;
}

/* A new entry; when the table is full, the least recently used one not waiting for EC2 goes. */
static Entry *entry_add(Attestor *a, const char *id, uint64_t now) {
        Entry *e = NULL;
        if (a->n_entries < a->cfg.max_entries)
                e = &a->entries[a->n_entries++];
        else
                for (size_t i = 0; i < a->n_entries; i++) {
                        Entry *x = &a->entries[i];
                        if (x->lookup != LOOKUP_IN_FLIGHT && (!e || x->used_usec < e->used_usec))
                                e = x;
                }
        if (!e)
                return NULL;
        *e = (Entry) { .used_usec = now };
        snprintf(e->instance_id, sizeof e->instance_id, "%s", id);
        return e;
}

bool attestor_accepted(const Attestor *a, const char *instance_id, const char *boot_id) {
        const Entry *e = a ? entry_find(a, strempty(instance_id)) : NULL;
        return e && !isempty(boot_id) && streq(e->accepted_boot, boot_id);
}

static void log_refusal(Attestor *a, Entry *e, const char *instance_id, const char *boot_id,
                        AttestReason why, uint64_t now) {
        if (e) {
                if (e->logged == why && now - e->logged_usec < LOG_EVERY_USEC)
                        return;
                e->logged = why;
                e->logged_usec = now;
        }
        /* the boot id only in part: the whole of it is not for the journal */
        log_warning("Attestation %s for %s (agent boot %.8s...): %s%s [%s].",
                    a->cfg.mode == ATTEST_REQUIRED ? "refused" : "failed (warn mode: report accepted)",
                    instance_id, isempty(boot_id) ? "-" : boot_id, attest_reason_describe(why),
                    why == ATTEST_REASON_EC2_UNAVAILABLE ? "; the agent will retry" : "",
                    attest_reason_to_string(why));
}

static AttestVerdict refuse(Attestor *a, Entry *e, const char *instance_id, const char *boot_id,
                            AttestReason why, uint64_t now, AttestReason *ret_reason) {
        a->stats.refused[why]++;
        log_refusal(a, e, instance_id, boot_id, why, now);
        *ret_reason = why;
        return ATTEST_REFUSE;
}

static bool answer_fresh(const Attestor *a, const Entry *e, uint64_t now) {
        return (e->lookup == LOOKUP_DONE && now - e->answered_usec < a->cfg.cache_usec) ||
               (e->lookup == LOOKUP_FAILED && now - e->answered_usec < a->cfg.error_usec);
}

static int lookup_start(Attestor *a, Entry *e, uint64_t now) {
        Flight *f = NULL;
        if (!a->describe)
                return -ENOTCONN;
        for (size_t i = 0; i < a->cfg.max_in_flight && !f; i++)
                if (!a->flights[i].used)
                        f = &a->flights[i];
        if (!f)
                return -EBUSY; /* the next report asks again */
        *f = (Flight) { .a = a, .used = true };
        snprintf(f->instance_id, sizeof f->instance_id, "%s", e->instance_id);
        e->lookup = LOOKUP_IN_FLIGHT;
        a->stats.lookups++;
        a->starting = f;
        int r = a->describe(a, e->instance_id, a->describe_userdata); /* may answer at once */
        a->starting = NULL;
        if (r < 0) {
                f->used = false;
                e->lookup = LOOKUP_FAILED;
                e->answered_usec = now;
                a->stats.lookup_errors++;
                log_warning_errno(r, "Attestation: cannot ask EC2 about %s: %m", e->instance_id);
        }
        return r;
}

AttestVerdict attestor_check(Attestor *a, const char *instance_id, const char *boot_id,
                             const char *bound_boot, const Nodesmith__V1__Identity *identity,
                             uint64_t now, AttestReason *ret_reason) {
        AttestDocument doc;
        *ret_reason = ATTEST_REASON_NONE;
        if (!instance_id || strlen(instance_id) > ATTEST_ID_MAX || strlen(strempty(boot_id)) > ATTEST_ID_MAX)
                return refuse(a, NULL, strempty(instance_id), boot_id, ATTEST_REASON_MALFORMED, now, ret_reason);

        Entry *e = entry_find(a, instance_id);
        if (!e)
                e = entry_add(a, instance_id, now); /* NULL when full of lookups: still checked */
        if (e)
                e->used_usec = now;

        if (!identity || identity->identity_document.len == 0 || identity->identity_rsa2048.len == 0)
                return refuse(a, e, instance_id, boot_id, ATTEST_REASON_NO_DOCUMENT, now, ret_reason);
        int r = attest_verify_signature(a->trust, identity->identity_document.data,
                                        identity->identity_document.len,
                                        identity->identity_rsa2048.data, identity->identity_rsa2048.len);
        if (r == -EBADMSG)
                return refuse(a, e, instance_id, boot_id, ATTEST_REASON_MALFORMED, now, ret_reason);
        if (r < 0)
                return refuse(a, e, instance_id, boot_id, ATTEST_REASON_BAD_SIGNATURE, now, ret_reason);
        if (attest_document_parse(identity->identity_document.data, identity->identity_document.len, &doc) < 0)
                return refuse(a, e, instance_id, boot_id, ATTEST_REASON_MALFORMED, now, ret_reason);
        if (!streq(doc.instance_id, instance_id))
                return refuse(a, e, instance_id, boot_id, ATTEST_REASON_INSTANCE_MISMATCH, now, ret_reason);
        if (!streq(doc.region, a->cfg.region))
                return refuse(a, e, instance_id, boot_id, ATTEST_REASON_REGION_MISMATCH, now, ret_reason);
        if (!isempty(bound_boot) && !streq(bound_boot, strempty(boot_id)))
                return refuse(a, e, instance_id, boot_id, ATTEST_REASON_REPLAY, now, ret_reason);

        /* EC2's word on the instance: a fresh answer, else ask */
        if (!e) {
                a->stats.pending++;
                return ATTEST_PENDING;
        }
        if (!answer_fresh(a, e, now) && e->lookup != LOOKUP_IN_FLIGHT)
                (void) lookup_start(a, e, now);
        if (!answer_fresh(a, e, now)) {
                a->stats.pending++;
                return ATTEST_PENDING;
        }
        if (e->lookup == LOOKUP_FAILED)
                return refuse(a, e, instance_id, boot_id, ATTEST_REASON_EC2_UNAVAILABLE, now, ret_reason);
        AttestReason why = attest_check_facts(&doc, &e->facts, a->cfg.cluster);
        if (why != ATTEST_REASON_NONE)
                return refuse(a, e, instance_id, boot_id, why, now, ret_reason);

        if (!streq(e->accepted_boot, strempty(boot_id))) {
                a->stats.accepted++;
                snprintf(e->accepted_boot, sizeof e->accepted_boot, "%s", strempty(boot_id));
                e->logged = ATTEST_REASON_NONE;
                log_info("Attestation accepted for %s (agent boot %.8s...): signed identity document, "
                         "instance %s with this cluster's tag, launched %lld.",
                         instance_id, isempty(boot_id) ? "-" : boot_id, e->facts.state,
                         (long long) e->facts.launch_time);
        }
        return ATTEST_ACCEPT;
}

void attestor_described(Attestor *a, const char *instance_id, int error, const AttestFacts *facts,
                        uint64_t now) {
        for (size_t i = 0; i < a->cfg.max_in_flight; i++)
                if (a->flights[i].used && streq(a->flights[i].instance_id, instance_id))
                        a->flights[i].used = false;
        Entry *e = entry_find(a, instance_id);
        if (!e)
                return;
        e->answered_usec = now;
        if (error == -ENOENT) {
                e->lookup = LOOKUP_DONE;
                e->facts = (AttestFacts) { .found = false };
        } else if (error < 0 || !facts) {
                e->lookup = LOOKUP_FAILED;
                a->stats.lookup_errors++;
        } else {
                e->lookup = LOOKUP_DONE;
                e->facts = *facts;
        }
}

void attestor_metrics(const Attestor *a, StrBuf *b) {
        if (!a)
                return;
        strbuf_printf(b, "# HELP nodesmith_attestation_mode Agent attestation mode (1 for the one in use).\n"
                         "# TYPE nodesmith_attestation_mode gauge\n");
        for (int m = 0; m < _ATTEST_MODE_MAX; m++)
                strbuf_printf(b, "nodesmith_attestation_mode{mode=\"%s\"} %d\n", mode_names[m],
                              m == (int) a->cfg.mode);
        strbuf_printf(b, "# HELP nodesmith_attestation_accepted_total Agent boots whose attestation was accepted.\n"
                         "# TYPE nodesmith_attestation_accepted_total counter\n"
                         "nodesmith_attestation_accepted_total %llu\n",
                      (unsigned long long) a->stats.accepted);
        strbuf_printf(b, "# HELP nodesmith_attestation_pending_total Reports answered while EC2 was being asked.\n"
                         "# TYPE nodesmith_attestation_pending_total counter\n"
                         "nodesmith_attestation_pending_total %llu\n",
                      (unsigned long long) a->stats.pending);
        strbuf_printf(b, "# HELP nodesmith_attestation_refused_total Reports whose attestation failed, by reason "
                         "(refused in required mode, let in with a warning in warn mode).\n"
                         "# TYPE nodesmith_attestation_refused_total counter\n");
        for (int r = ATTEST_REASON_NONE + 1; r < _ATTEST_REASON_MAX; r++)
                strbuf_printf(b, "nodesmith_attestation_refused_total{reason=\"%s\"} %llu\n",
                              reasons[r].label, (unsigned long long) a->stats.refused[r]);
        strbuf_printf(b, "# HELP nodesmith_attestation_ec2_lookups_total DescribeInstances calls made for attestation, "
                         "by result.\n# TYPE nodesmith_attestation_ec2_lookups_total counter\n"
                         "nodesmith_attestation_ec2_lookups_total{result=\"started\"} %llu\n"
                         "nodesmith_attestation_ec2_lookups_total{result=\"failed\"} %llu\n",
                      (unsigned long long) a->stats.lookups, (unsigned long long) a->stats.lookup_errors);
}

/* ---- DescribeInstances ------------------------------------------------------------------------ */

static void facts_from_instance(const Ec2Instance *i, AttestFacts *f) {
        *f = (AttestFacts) { .found = true, .launch_time = i->launch_time };
        snprintf(f->state, sizeof f->state, "%s", strempty(i->state));
        snprintf(f->cluster, sizeof f->cluster, "%s", strempty(ec2_instance_tag(i, EC2_CLUSTER_TAG)));
}

static void on_described(Ec2Client *c, const Ec2Error *error, Ec2InstanceList *result, void *userdata) {
        Flight *fl = userdata;
        Attestor *a = fl->a;
        char id[ATTEST_ID_MAX + 1];
        uint64_t now = 0;
        AttestFacts facts;
        int r = -ENOENT;

        snprintf(id, sizeof id, "%s", fl->instance_id);
        (void) sd_event_now(a->event, CLOCK_MONOTONIC, &now);
        if (error && error->kind != EC2_ERROR_NOT_FOUND && error->kind != EC2_ERROR_INVALID_PARAMETER) {
                log_warning("Attestation: DescribeInstances %s failed: %s %s (%s).", id,
                            ec2_error_kind_to_string(error->kind), error->code, error->message);
                r = error->error < 0 ? error->error : -EIO;
        } else
                for (size_t i = 0; result && i < result->n; i++)
                        if (streq_ptr(result->items[i].id, id)) {
                                facts_from_instance(&result->items[i], &facts);
                                r = 0;
                                break;
                        }
        ec2_instance_list_free(result);
        attestor_described(a, id, r, r == 0 ? &facts : NULL, now);
}

static int describe_ec2(Attestor *a, const char *instance_id, void *userdata) {
        const char *ids[] = { instance_id, NULL };
        return ec2_describe_instances_by_id(a->ec2, ids, on_described, a->starting);
}

int attestor_use_ec2(Attestor *a, sd_event *e, const char *region, const char *ec2_endpoint,
                     const char *cluster) {
        int r = http_client_new(e, &a->http);
        if (r < 0)
                return r;
        AwsCredentialsConfig acc = { .region = region };
        r = aws_credential_provider_new(e, a->http, &acc, &a->creds);
        if (r < 0)
                return r;
        Ec2Config ec = { .region = region, .ec2_endpoint = ec2_endpoint, .cluster_name = cluster,
                         .max_attempts = 3, .timeout_usec = 10 * USEC_PER_SEC };
        r = ec2_client_new(e, a->http, a->creds, &ec, &a->ec2);
        if (r < 0)
                return r;
        a->event = sd_event_ref(e);
        attestor_set_describe(a, describe_ec2, NULL);
        return 0;
}
