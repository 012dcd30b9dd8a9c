/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "macro.h"
#include "nodesmith.pb-c.h"
#include "strbuf.h"

/* Agent attestation with the EC2 instance identity document (strong mode, docs/attestation.md).
 *
 * The agent sends IMDS dynamic/instance-identity/document and its rsa2048 signature (PKCS7
 * signedData, SHA-256, RSA-2048) in its Identity. The coordinator:
 *   1. verifies the signature with AWS's regional certificates as the only trusted signers
 *      (PKCS7_verify, certificates inside the message ignored, no chain to a root), and that the
 *      signed content is exactly the document sent;
 *   2. reads the document: its instanceId must be the reporting instance, its region ours;
 *   3. refuses a second agent boot for an instance whose agent is alive (replay);
 *   4. asks EC2 (DescribeInstances, asynchronously, the answer cached per instance for a bounded
 *      time in a bounded table): the instance exists, is pending or running, carries this
 *      cluster's nodesmith.io/cluster tag, and its LaunchTime equals the document's pendingTime
 *      (a document from an earlier boot of a stopped-and-started instance, or from another
 *      instance, is stale).
 * Nothing here blocks: until EC2 has answered, the verdict is "pending". */

#define ATTEST_MAX_DOCUMENT 16384
#define ATTEST_MAX_SIGNATURE 16384
#define ATTEST_ID_MAX 64

typedef enum AttestMode {
        ATTEST_OFF,       /* nothing checked */
        ATTEST_WARN,      /* checked, refusals logged and counted, reports accepted anyway */
        ATTEST_REQUIRED,  /* a report is accepted only from an attested agent boot */
        _ATTEST_MODE_MAX,
} AttestMode;

typedef enum AttestReason {
        ATTEST_REASON_NONE,              /* not refused */
        ATTEST_REASON_NO_DOCUMENT,       /* no document or no rsa2048 signature */
        ATTEST_REASON_MALFORMED,         /* unreadable signature or document */
        ATTEST_REASON_BAD_SIGNATURE,     /* not signed by a trusted certificate, or not this document */
        ATTEST_REASON_INSTANCE_MISMATCH, /* the document names another instance */
        ATTEST_REASON_REGION_MISMATCH,   /* the document is from another region */
        ATTEST_REASON_REPLAY,            /* another boot of the agent holds this instance */
        ATTEST_REASON_UNKNOWN_INSTANCE,  /* EC2 does not know the instance */
        ATTEST_REASON_NOT_RUNNING,       /* the instance is not pending or running */
        ATTEST_REASON_UNTAGGED,          /* the instance lacks this cluster's tag */
        ATTEST_REASON_STALE_DOCUMENT,    /* pendingTime differs from the instance's LaunchTime */
        ATTEST_REASON_EC2_UNAVAILABLE,   /* EC2 could not be asked; the agent retries */
        _ATTEST_REASON_MAX,
} AttestReason;

typedef enum AttestVerdict {
        ATTEST_ACCEPT,
        ATTEST_PENDING,   /* EC2 has not answered yet: ask again shortly */
        ATTEST_REFUSE,
} AttestVerdict;

const char *attest_mode_to_string(AttestMode m);
int attest_mode_from_string(const char *s, AttestMode *ret);
/* Metric label: "bad_signature", "replay", ... */
const char *attest_reason_to_string(AttestReason r);
/* Log text: "the signature is not from a trusted certificate", ... */
const char *attest_reason_describe(AttestReason r);

/* ---- the pieces, pure ----------------------------------------------------------------------- */

typedef struct AttestTrust AttestTrust;
/* Every certificate in a PEM bundle (text around them is ignored); -ENOKEY if there is none. */
int attest_trust_from_pem(const char *pem, size_t len, AttestTrust **ret);
int attest_trust_from_file(const char *path, AttestTrust **ret);
size_t attest_trust_count(const AttestTrust *t);
AttestTrust *attest_trust_free(AttestTrust *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(AttestTrust *, attest_trust_free);

/* The rsa2048 item (base64 of a DER PKCS7, line breaks allowed, PEM armour tolerated) signs
 * exactly doc, by one of the trusted certificates. 0; -EBADMSG: unreadable; -EKEYREJECTED: not
 * signed by a trusted certificate, or signs other content. */
int attest_verify_signature(const AttestTrust *t, const uint8_t *doc, size_t doc_len,
                            const uint8_t *sig, size_t sig_len);

typedef struct AttestDocument {
        char instance_id[ATTEST_ID_MAX + 1];
        char region[ATTEST_ID_MAX + 1];
        char account_id[ATTEST_ID_MAX + 1];
        int64_t pending_time;    /* seconds since the epoch */
} AttestDocument;
/* A JSON object with string instanceId, region and pendingTime (YYYY-MM-DDTHH:MM:SS[.fff]Z);
 * -EBADMSG otherwise. */
int attest_document_parse(const uint8_t *doc, size_t len, AttestDocument *ret);

/* What EC2 says of an instance. */
typedef struct AttestFacts {
        bool found;
        char state[24];          /* pending, running, stopping, ... */
        char cluster[128];       /* its nodesmith.io/cluster tag; "" when absent */
        int64_t launch_time;     /* seconds since the epoch */
} AttestFacts;
AttestReason attest_check_facts(const AttestDocument *d, const AttestFacts *f, const char *cluster);

/* ---- the attestor: verdicts, the EC2 cache, metrics ------------------------------------------ */

typedef struct AttestConfig {
        AttestMode mode;
        const char *region;      /* documents must name it */
        const char *cluster;     /* the nodesmith.io/cluster value instances must carry */
        uint64_t cache_usec;     /* an EC2 answer is used this long (0: 30 s) */
        uint64_t error_usec;     /* an EC2 failure is remembered this long (0: 5 s) */
        size_t max_entries;      /* instances remembered (0: 4096) */
        size_t max_in_flight;    /* DescribeInstances at once (0: 32) */
} AttestConfig;

typedef struct Attestor Attestor;

/* Starts a DescribeInstances of one instance; the answer comes back through
 * attestor_described(). < 0: not started (the verdict stays pending). */
typedef int (*attest_describe_t)(Attestor *a, const char *instance_id, void *userdata);

typedef struct AttestStats {
        uint64_t accepted;                       /* agent boots accepted */
        uint64_t pending;                        /* reports answered "pending" */
        uint64_t refused[_ATTEST_REASON_MAX];    /* reports refused (or, in warn mode, let in) */
        uint64_t lookups, lookup_errors;         /* DescribeInstances calls and failures */
} AttestStats;

/* Takes ownership of trust. */
int attestor_new(const AttestConfig *cfg, AttestTrust *trust, Attestor **ret);
Attestor *attestor_free(Attestor *a);
DEFINE_TRIVIAL_CLEANUP_FUNC(Attestor *, attestor_free);
void attestor_set_describe(Attestor *a, attest_describe_t fn, void *userdata);
AttestMode attestor_mode(const Attestor *a);
const AttestStats *attestor_stats(const Attestor *a);

/* The report of instance_id from agent boot boot_id, with the identity its state carries.
 * bound_boot: the boot id of another agent alive under this instance id (NULL: none). Logs a
 * refusal (at most once a minute per instance and reason) and counts it. */
AttestVerdict attestor_check(Attestor *a, const char *instance_id, const char *boot_id,
                             const char *bound_boot, const Nodesmith__V1__Identity *identity,
                             uint64_t now_usec, AttestReason *ret_reason);
/* Whether this boot of the instance was already accepted (warn mode checks until it is). */
bool attestor_accepted(const Attestor *a, const char *instance_id, const char *boot_id);
/* EC2's answer for one instance: facts when error == 0; error -ENOENT: no such instance;
 * other < 0: EC2 could not answer. */
void attestor_described(Attestor *a, const char *instance_id, int error, const AttestFacts *facts,
                        uint64_t now_usec);

/* Prometheus lines: nodesmith_attestation_*; nothing when a is NULL (attestation off). */
void attestor_metrics(const Attestor *a, StrBuf *b);

/* DescribeInstances through the coordinator's EC2 client for this region (credentials from the
 * standard chain; ec2_endpoint NULL: the region's). */
int attestor_use_ec2(Attestor *a, sd_event *e, const char *region, const char *ec2_endpoint,
                     const char *cluster);
