/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/pkcs7.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/attest.h"

/* Documents and signatures are made here with OpenSSL, as IMDS makes them: PKCS7 signedData,
 * SHA-256, an RSA-2048 key, the document attached, no certificate inside, base64 in 64-column
 * lines without armour. The test CA stands for AWS's regional certificate. */

typedef struct Signer {
        EVP_PKEY *key;
        X509 *cert;
        char *pem; /* the certificate, PEM */
} Signer;

static Signer aws, rogue;

#define ID "i-0123456789abcdef0"
#define BOOT "3f1c1e8e-0a4b-4cbe-9f43-7a2f8d6c1b10"
#define PENDING 1700000000 /* 2023-11-14T22:13:20Z */
#define SEC 1000000ULL

static void signer_make(Signer *s, const char *cn) {
        s->key = EVP_RSA_gen(2048);
        assert_non_null(s->key);
        s->cert = X509_new();
        assert_non_null(s->cert);
        ASN1_INTEGER_set(X509_get_serialNumber(s->cert), 1);
        X509_gmtime_adj(X509_getm_notBefore(s->cert), -3600);
        X509_gmtime_adj(X509_getm_notAfter(s->cert), 3600L * 24 * 365);
        X509_set_pubkey(s->cert, s->key);
        X509_NAME *n = X509_get_subject_name(s->cert);
        X509_NAME_add_entry_by_txt(n, "O", MBSTRING_ASC, (const unsigned char *) "nodesmith test", -1, -1, 0);
        X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *) cn, -1, -1, 0);
        X509_set_issuer_name(s->cert, n);
        assert_true(X509_sign(s->cert, s->key, EVP_sha256()) > 0);
        BIO *b = BIO_new(BIO_s_mem());
        PEM_write_bio_X509(b, s->cert);
        char *p;
        long len = BIO_get_mem_data(b, &p);
        s->pem = strndup(p, (size_t) len);
        BIO_free(b);
}

static void signer_free(Signer *s) {
        EVP_PKEY_free(s->key);
        X509_free(s->cert);
        free(s->pem);
}

/* base64 of the DER PKCS7 over doc; flags: PKCS7_DETACHED to leave the content out, 0 to embed
 * the signer's certificate too (a forger's trick that must not help). */
static char *sign(const Signer *s, const char *doc, int extra_flags) {
        BIO *in = BIO_new_mem_buf(doc, (int) strlen(doc));
        PKCS7 *p7 = PKCS7_sign(s->cert, s->key, NULL, in, PKCS7_BINARY | extra_flags);
        assert_non_null(p7);
        BIO *b64 = BIO_new(BIO_f_base64()), *mem = BIO_new(BIO_s_mem());
        BIO_push(b64, mem);
        i2d_PKCS7_bio(b64, p7);
        (void) BIO_flush(b64);
        char *p;
        long len = BIO_get_mem_data(mem, &p);
        char *out = strndup(p, (size_t) len);
        BIO_free_all(b64);
        BIO_free(in);
        PKCS7_free(p7);
        return out;
}

static char *document(const char *id, const char *region, const char *pending) {
        char *d = NULL;
        assert_true(asprintf(&d,
                             "{\n  \"accountId\" : \"123456789012\",\n  \"architecture\" : \"x86_64\",\n"
                             "  \"availabilityZone\" : \"%sa\",\n  \"imageId\" : \"ami-0abcdef1234567890\",\n"
                             "  \"instanceId\" : \"%s\",\n  \"instanceType\" : \"m5.large\",\n"
                             "  \"pendingTime\" : \"%s\",\n  \"privateIp\" : \"10.0.1.23\",\n"
                             "  \"region\" : \"%s\",\n  \"version\" : \"2017-09-30\"\n}",
                             region, id, pending, region) > 0);
        return d;
}

static AttestTrust *trust_of(const Signer *s) {
        AttestTrust *t = NULL;
        assert_int_equal(attest_trust_from_pem(s->pem, strlen(s->pem), &t), 0);
        return t;
}

static int setup(void **state) {
        (void) state;
        signer_make(&aws, "test regional certificate");
        signer_make(&rogue, "someone else");
        return 0;
}

static int teardown(void **state) {
        (void) state;
        signer_free(&aws);
        signer_free(&rogue);
        return 0;
}

/* ---- trust ---------------------------------------------------------------------------------- */

static void test_trust(void **state) {
        (void) state;
        AttestTrust *t = NULL;
        /* the shipped bundle: AWS's published certificates, comments between them */
        assert_int_equal(attest_trust_from_file("data/aws-identity-rsa2048.pem", &t), 0);
        assert_true(attest_trust_count(t) >= 9);
        t = attest_trust_free(t);
        /* two certificates with text around them */
        char *two = NULL;
        assert_true(asprintf(&two, "# test\n%s\nsome words\n%s# end\n", aws.pem, rogue.pem) > 0);
        assert_int_equal(attest_trust_from_pem(two, strlen(two), &t), 0);
        assert_int_equal(attest_trust_count(t), 2);
        t = attest_trust_free(t);
        free(two);
        assert_int_equal(attest_trust_from_pem("no certificate here\n", 20, &t), -ENOKEY);
        assert_int_equal(attest_trust_from_file("/nonexistent/attest.pem", &t), -ENOENT);
}

/* ---- the signature --------------------------------------------------------------------------- */

static int verify(const AttestTrust *t, const char *doc, const char *sig) {
        return attest_verify_signature(t, (const uint8_t *) doc, strlen(doc), (const uint8_t *) sig,
                                       strlen(sig));
}

static void test_signature(void **state) {
        (void) state;
        AttestTrust *t = trust_of(&aws);
        char *doc = document(ID, "us-east-1", "2023-11-14T22:13:20Z");
        char *good = sign(&aws, doc, PKCS7_NOCERTS);
        assert_int_equal(verify(t, doc, good), 0);

        /* armour as the documentation's procedure adds it */
        char *armoured = NULL;
        assert_true(asprintf(&armoured, "-----BEGIN PKCS7-----\n%s-----END PKCS7-----\n", good) > 0);
        assert_int_equal(verify(t, doc, armoured), 0);

        /* a detached signature over the same document */
        char *detached = sign(&aws, doc, PKCS7_NOCERTS | PKCS7_DETACHED);
        assert_int_equal(verify(t, doc, detached), 0);

        /* the document changed after signing: one character of the instance id */
        char *other = document("i-0123456789abcdef1", "us-east-1", "2023-11-14T22:13:20Z");
        assert_int_equal(verify(t, other, good), -EKEYREJECTED);
        assert_int_equal(verify(t, other, detached), -EKEYREJECTED);

        /* forged: signed by a key the coordinator does not trust, with or without the forger's
         * certificate inside the message */
        char *forged = sign(&rogue, doc, PKCS7_NOCERTS);
        char *forged_with_cert = sign(&rogue, doc, 0);
        assert_int_equal(verify(t, doc, forged), -EKEYREJECTED);
        assert_int_equal(verify(t, doc, forged_with_cert), -EKEYREJECTED);
        AttestTrust *t2 = trust_of(&rogue);
        assert_int_equal(verify(t2, doc, forged_with_cert), 0); /* the same bytes, had it been trusted */
        attest_trust_free(t2);

        /* unreadable */
        assert_int_equal(verify(t, doc, "not base64 at all!"), -EBADMSG);
        assert_int_equal(verify(t, doc, "aGVsbG8gd29ybGQ="), -EBADMSG);
        assert_int_equal(verify(t, doc, ""), -EBADMSG);
        char *cut = strdup(good);
        cut[strlen(cut) / 2] = 0;
        size_t k = strlen(cut);
        while (k % 4)
                cut[--k] = 0;
        assert_int_equal(verify(t, doc, cut), -EBADMSG);
        /* limits */
        char *big = malloc(ATTEST_MAX_SIGNATURE + 2);
        memset(big, 'A', ATTEST_MAX_SIGNATURE + 1);
        big[ATTEST_MAX_SIGNATURE + 1] = 0;
        assert_int_equal(verify(t, doc, big), -EBADMSG);

        free(big);
        free(cut);
        free(forged);
        free(forged_with_cert);
        free(other);
        free(detached);
        free(armoured);
        free(good);
        free(doc);
        attest_trust_free(t);
}

/* ---- the document ---------------------------------------------------------------------------- */

static int parse(const char *s, AttestDocument *d) {
        return attest_document_parse((const uint8_t *) s, strlen(s), d);
}

static void test_document(void **state) {
        (void) state;
        AttestDocument d;
        char *doc = document(ID, "eu-west-1", "2023-11-14T22:13:20Z");
        assert_int_equal(parse(doc, &d), 0);
        assert_string_equal(d.instance_id, ID);
        assert_string_equal(d.region, "eu-west-1");
        assert_string_equal(d.account_id, "123456789012");
        assert_int_equal(d.pending_time, PENDING);
        free(doc);
        doc = document(ID, "eu-west-1", "2023-11-14T22:13:20.123Z");
        assert_int_equal(parse(doc, &d), 0);
        assert_int_equal(d.pending_time, PENDING);
        free(doc);

        const char *bad[] = {
                "", "[]", "null", "{", "\"x\"",
                "{\"region\":\"us-east-1\",\"pendingTime\":\"2023-11-14T22:13:20Z\"}",
                "{\"instanceId\":\"i-1\",\"pendingTime\":\"2023-11-14T22:13:20Z\"}",
                "{\"instanceId\":\"i-1\",\"region\":\"us-east-1\"}",
                "{\"instanceId\":5,\"region\":\"us-east-1\",\"pendingTime\":\"2023-11-14T22:13:20Z\"}",
                "{\"instanceId\":\"\",\"region\":\"us-east-1\",\"pendingTime\":\"2023-11-14T22:13:20Z\"}",
                "{\"instanceId\":\"i-1\",\"region\":\"us-east-1\",\"pendingTime\":\"2023-11-14 22:13:20\"}",
                "{\"instanceId\":\"i-1\",\"region\":\"us-east-1\",\"pendingTime\":\"2023-11-14T22:13:20+01:00\"}",
                "{\"instanceId\":\"i-1\",\"region\":\"us-east-1\",\"pendingTime\":\"2023-13-14T22:13:20Z\"}",
                "{\"instanceId\":\"i-1\",\"region\":\"us-east-1\",\"pendingTime\":\"2023-11-14T22:13:20.Z\"}",
                "{\"instanceId\":\"i-1\",\"region\":\"us-east-1\",\"pendingTime\":\"1969-11-14T22:13:20Z\"}",
                "{\"instanceId\":\"i-1\",\"region\":\"us-east-1\",\"pendingTime\":\"2023-11-14T22:13:20Z\","
                "\"accountId\":7}",
                "{\"instanceId\":\"i-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0\","
                "\"region\":\"us-east-1\",\"pendingTime\":\"2023-11-14T22:13:20Z\"}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
                d.pending_time = -1;
                assert_int_equal(parse(bad[i], &d), -EBADMSG);
                assert_int_equal(d.pending_time, -1); /* written only on success */
        }
        char *huge = malloc(ATTEST_MAX_DOCUMENT + 10);
        memset(huge, ' ', ATTEST_MAX_DOCUMENT + 9);
        const char *head = "{\"instanceId\":\"i-1\",\"region\":\"r\",\"pendingTime\":\"2023-11-14T22:13:20Z\"";
        memcpy(huge, head, strlen(head)); /* a valid object but for its size and its end */
        huge[ATTEST_MAX_DOCUMENT + 8] = '}';
        huge[ATTEST_MAX_DOCUMENT + 9] = 0;
        assert_int_equal(parse(huge, &d), -EBADMSG);
        free(huge);
}

static void test_facts(void **state) {
        (void) state;
        AttestDocument d = { .instance_id = ID, .region = "us-east-1", .pending_time = PENDING };
        AttestFacts f = { .found = true, .state = "running", .cluster = "prod", .launch_time = PENDING };
        assert_int_equal(attest_check_facts(&d, &f, "prod"), ATTEST_REASON_NONE);
        strcpy(f.state, "pending");
        assert_int_equal(attest_check_facts(&d, &f, "prod"), ATTEST_REASON_NONE);
        strcpy(f.state, "terminated");
        assert_int_equal(attest_check_facts(&d, &f, "prod"), ATTEST_REASON_NOT_RUNNING);
        strcpy(f.state, "stopped");
        assert_int_equal(attest_check_facts(&d, &f, "prod"), ATTEST_REASON_NOT_RUNNING);
        strcpy(f.state, "running");
        assert_int_equal(attest_check_facts(&d, &f, "staging"), ATTEST_REASON_UNTAGGED);
        f.cluster[0] = 0;
        assert_int_equal(attest_check_facts(&d, &f, "prod"), ATTEST_REASON_UNTAGGED);
        assert_int_equal(attest_check_facts(&d, &f, ""), ATTEST_REASON_UNTAGGED);
        strcpy(f.cluster, "prod");
        f.launch_time = PENDING + 3600; /* stopped and started since: a new pendingTime */
        assert_int_equal(attest_check_facts(&d, &f, "prod"), ATTEST_REASON_STALE_DOCUMENT);
        f.found = false;
        assert_int_equal(attest_check_facts(&d, &f, "prod"), ATTEST_REASON_UNKNOWN_INSTANCE);
}

/* ---- the attestor, with EC2 played by the test ------------------------------------------------ */

typedef struct FakeEc2 {
        unsigned calls;
        char last[ATTEST_ID_MAX + 1];
        int fail;          /* < 0: the describe call cannot start */
} FakeEc2;

static int fake_describe(Attestor *a, const char *instance_id, void *userdata) {
        (void) a;
        FakeEc2 *f = userdata;
        if (f->fail < 0)
                return f->fail;
        f->calls++;
        snprintf(f->last, sizeof f->last, "%s", instance_id);
        return 0;
}

typedef struct Report {
        char *doc, *sig;
        Nodesmith__V1__Identity id;
} Report;

static void report_make(Report *r, const Signer *s, const char *doc_id, const char *region,
                        const char *pending) {
        r->doc = document(doc_id, region, pending);
        r->sig = sign(s, r->doc, PKCS7_NOCERTS);
        nodesmith__v1__identity__init(&r->id);
        r->id.identity_document = (ProtobufCBinaryData) { strlen(r->doc), (uint8_t *) r->doc };
        r->id.identity_rsa2048 = (ProtobufCBinaryData) { strlen(r->sig), (uint8_t *) r->sig };
}

static void report_done(Report *r) {
        free(r->doc);
        free(r->sig);
}

static Attestor *attestor(FakeEc2 *ec2, size_t max_entries, size_t max_in_flight) {
        Attestor *a = NULL;
        AttestConfig cfg = { .mode = ATTEST_REQUIRED, .region = "us-east-1", .cluster = "prod",
                             .cache_usec = 30 * SEC, .error_usec = 5 * SEC,
                             .max_entries = max_entries, .max_in_flight = max_in_flight };
        assert_int_equal(attestor_new(&cfg, trust_of(&aws), &a), 0);
        attestor_set_describe(a, fake_describe, ec2);
        return a;
}

/* An attestor in required mode and a valid report of instance ID. */
static Attestor *attestor_with_report(FakeEc2 *ec2, Report *r) {
        report_make(r, &aws, ID, "us-east-1", "2023-11-14T22:13:20Z");
        return attestor(ec2, 0, 0);
}

static const AttestFacts running = { .found = true, .state = "running", .cluster = "prod",
                                     .launch_time = PENDING };

static AttestVerdict check(Attestor *a, const char *id, const char *boot, const char *bound,
                           const Report *r, uint64_t now, AttestReason *why) {
        return attestor_check(a, id, boot, bound, r ? &r->id : NULL, now, why);
}

static void test_attestor_accepts(void **state) {
        (void) state;
        FakeEc2 ec2 = {};
        Report r;
        AttestReason why;
        Attestor *a = attestor_with_report(&ec2, &r);

        /* first: EC2 is asked, the verdict waits; asking again does not ask EC2 twice */
        assert_int_equal(check(a, ID, BOOT, NULL, &r, 1 * SEC, &why), ATTEST_PENDING);
        assert_int_equal(check(a, ID, BOOT, NULL, &r, 1 * SEC, &why), ATTEST_PENDING);
        assert_int_equal(ec2.calls, 1);
        assert_string_equal(ec2.last, ID);
        assert_false(attestor_accepted(a, ID, BOOT));
        attestor_described(a, ID, 0, &running, 2 * SEC);
        assert_int_equal(check(a, ID, BOOT, NULL, &r, 2 * SEC, &why), ATTEST_ACCEPT);
        assert_int_equal(why, ATTEST_REASON_NONE);
        assert_true(attestor_accepted(a, ID, BOOT));
        assert_false(attestor_accepted(a, ID, "another-boot"));
        /* the answer is cached for a bounded time, then asked again */
        assert_int_equal(check(a, ID, BOOT, BOOT, &r, 20 * SEC, &why), ATTEST_ACCEPT);
        assert_int_equal(ec2.calls, 1);
        assert_int_equal(check(a, ID, BOOT, BOOT, &r, 40 * SEC, &why), ATTEST_PENDING);
        assert_int_equal(ec2.calls, 2);
        attestor_described(a, ID, 0, &running, 41 * SEC);
        assert_int_equal(check(a, ID, BOOT, BOOT, &r, 41 * SEC, &why), ATTEST_ACCEPT);
        const AttestStats *s = attestor_stats(a);
        assert_int_equal(s->accepted, 1); /* one boot */
        assert_int_equal(s->lookups, 2);
        assert_int_equal(s->pending, 3);

        report_done(&r);
        attestor_free(a);
}

static void test_attestor_refuses(void **state) {
        (void) state;
        FakeEc2 ec2 = {};
        Attestor *a = attestor(&ec2, 0, 0);
        Report good, forged, other, west, stale;
        AttestReason why;
        report_make(&good, &aws, ID, "us-east-1", "2023-11-14T22:13:20Z");
        report_make(&forged, &rogue, ID, "us-east-1", "2023-11-14T22:13:20Z");
        report_make(&other, &aws, "i-0fedcba9876543210", "us-east-1", "2023-11-14T22:13:20Z");
        report_make(&west, &aws, ID, "us-west-2", "2023-11-14T22:13:20Z");
        report_make(&stale, &aws, ID, "us-east-1", "2023-11-13T08:00:00Z");

        /* refused before EC2 is asked */
        assert_int_equal(check(a, ID, BOOT, NULL, NULL, 1, &why), ATTEST_REFUSE);
        assert_int_equal(why, ATTEST_REASON_NO_DOCUMENT);
        assert_int_equal(check(a, ID, BOOT, NULL, &forged, 1, &why), ATTEST_REFUSE);
        assert_int_equal(why, ATTEST_REASON_BAD_SIGNATURE);
        assert_int_equal(check(a, ID, BOOT, NULL, &other, 1, &why), ATTEST_REFUSE);
        assert_int_equal(why, ATTEST_REASON_INSTANCE_MISMATCH);
        assert_int_equal(check(a, ID, BOOT, NULL, &west, 1, &why), ATTEST_REFUSE);
        assert_int_equal(why, ATTEST_REASON_REGION_MISMATCH);
        /* the same valid document from a second boot while the first agent is alive */
        assert_int_equal(check(a, ID, "second-boot", BOOT, &good, 1, &why), ATTEST_REFUSE);
        assert_int_equal(why, ATTEST_REASON_REPLAY);
        Report swapped = good;
        swapped.id.identity_rsa2048 = forged.id.identity_rsa2048;
        assert_int_equal(check(a, ID, BOOT, NULL, &swapped, 1, &why), ATTEST_REFUSE);
        assert_int_equal(why, ATTEST_REASON_BAD_SIGNATURE);
        Report garbage = good;
        garbage.id.identity_rsa2048 = (ProtobufCBinaryData) { 4, (uint8_t *) "AAAA" };
        assert_int_equal(check(a, ID, BOOT, NULL, &garbage, 1, &why), ATTEST_REFUSE);
        assert_int_equal(why, ATTEST_REASON_MALFORMED);
        assert_int_equal(ec2.calls, 0);

        /* what EC2 says */
        struct {
                AttestFacts facts;
                int error;
                AttestReason expect;
        } cases[] = {
                { { .found = true, .state = "running", .cluster = "", .launch_time = PENDING }, 0,
                  ATTEST_REASON_UNTAGGED },
                { { .found = true, .state = "running", .cluster = "staging", .launch_time = PENDING }, 0,
                  ATTEST_REASON_UNTAGGED },
                { { .found = true, .state = "terminated", .cluster = "prod", .launch_time = PENDING }, 0,
                  ATTEST_REASON_NOT_RUNNING },
                { { .found = true, .state = "shutting-down", .cluster = "prod", .launch_time = PENDING }, 0,
                  ATTEST_REASON_NOT_RUNNING },
                { { .found = false }, -ENOENT, ATTEST_REASON_UNKNOWN_INSTANCE },
                { { .found = true, .state = "running", .cluster = "prod", .launch_time = PENDING + 60 }, 0,
                  ATTEST_REASON_STALE_DOCUMENT },
        };
        uint64_t now = 100 * SEC;
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
                now += 60 * SEC; /* past the cache: EC2 is asked each time */
                assert_int_equal(check(a, ID, BOOT, NULL, &good, now, &why), ATTEST_PENDING);
                attestor_described(a, ID, cases[i].error, &cases[i].facts, now);
                assert_int_equal(check(a, ID, BOOT, NULL, &good, now, &why), ATTEST_REFUSE);
                assert_int_equal(why, cases[i].expect);
                assert_false(attestor_accepted(a, ID, BOOT));
        }
        /* a document of an earlier boot of the instance (pendingTime before the last start) */
        now += 60 * SEC;
        assert_int_equal(check(a, ID, BOOT, NULL, &stale, now, &why), ATTEST_PENDING);
        attestor_described(a, ID, 0, &running, now);
        assert_int_equal(check(a, ID, BOOT, NULL, &stale, now, &why), ATTEST_REFUSE);
        assert_int_equal(why, ATTEST_REASON_STALE_DOCUMENT);
        assert_int_equal(check(a, ID, BOOT, NULL, &good, now, &why), ATTEST_ACCEPT);

        const AttestStats *s = attestor_stats(a);
        assert_int_equal(s->refused[ATTEST_REASON_BAD_SIGNATURE], 2);
        assert_int_equal(s->refused[ATTEST_REASON_REPLAY], 1);
        assert_int_equal(s->refused[ATTEST_REASON_UNTAGGED], 2);
        assert_int_equal(s->refused[ATTEST_REASON_STALE_DOCUMENT], 2);
        assert_int_equal(s->refused[ATTEST_REASON_UNKNOWN_INSTANCE], 1);
        assert_int_equal(s->accepted, 1);

        report_done(&good);
        report_done(&forged);
        report_done(&other);
        report_done(&west);
        report_done(&stale);
        attestor_free(a);
}

static void test_attestor_ec2_failures(void **state) {
        (void) state;
        FakeEc2 ec2 = {};
        Report r;
        AttestReason why;
        Attestor *a = attestor_with_report(&ec2, &r);

        /* EC2 failed: refused for a short while, then asked again */
        assert_int_equal(check(a, ID, BOOT, NULL, &r, 1 * SEC, &why), ATTEST_PENDING);
        attestor_described(a, ID, -EIO, NULL, 1 * SEC);
        assert_int_equal(check(a, ID, BOOT, NULL, &r, 2 * SEC, &why), ATTEST_REFUSE);
        assert_int_equal(why, ATTEST_REASON_EC2_UNAVAILABLE);
        assert_int_equal(ec2.calls, 1);
        assert_int_equal(check(a, ID, BOOT, NULL, &r, 7 * SEC, &why), ATTEST_PENDING);
        assert_int_equal(ec2.calls, 2);
        attestor_described(a, ID, 0, &running, 7 * SEC);
        assert_int_equal(check(a, ID, BOOT, NULL, &r, 7 * SEC, &why), ATTEST_ACCEPT);
        /* the call cannot even start */
        ec2.fail = -ENOMEM;
        assert_int_equal(check(a, "i-0000000000000000a", BOOT, NULL, &r, 8 * SEC, &why), ATTEST_REFUSE);
        assert_int_equal(why, ATTEST_REASON_INSTANCE_MISMATCH); /* the document is checked first */
        Report r2;
        report_make(&r2, &aws, "i-0000000000000000a", "us-east-1", "2023-11-14T22:13:20Z");
        assert_int_equal(check(a, "i-0000000000000000a", BOOT, NULL, &r2, 8 * SEC, &why), ATTEST_REFUSE);
        assert_int_equal(why, ATTEST_REASON_EC2_UNAVAILABLE);
        assert_int_equal(attestor_stats(a)->lookup_errors, 2);
        report_done(&r2);
        report_done(&r);
        attestor_free(a);
}

static void test_attestor_bounds(void **state) {
        (void) state;
        FakeEc2 ec2 = {};
        Attestor *a = attestor(&ec2, 3, 2); /* 3 instances remembered, 2 lookups at once */
        Report r[4];
        AttestReason why;
        const char *ids[4] = { "i-00000000000000001", "i-00000000000000002", "i-00000000000000003",
                               "i-00000000000000004" };
        for (int i = 0; i < 4; i++)
                report_make(&r[i], &aws, ids[i], "us-east-1", "2023-11-14T22:13:20Z");

        assert_int_equal(check(a, ids[0], BOOT, NULL, &r[0], 1, &why), ATTEST_PENDING);
        assert_int_equal(check(a, ids[1], BOOT, NULL, &r[1], 2, &why), ATTEST_PENDING);
        assert_int_equal(ec2.calls, 2);
        /* two in flight: the third waits without a lookup of its own */
        assert_int_equal(check(a, ids[2], BOOT, NULL, &r[2], 3, &why), ATTEST_PENDING);
        assert_int_equal(ec2.calls, 2);
        attestor_described(a, ids[0], 0, &running, 4);
        assert_int_equal(check(a, ids[2], BOOT, NULL, &r[2], 5, &why), ATTEST_PENDING);
        assert_int_equal(ec2.calls, 3);
        attestor_described(a, ids[1], 0, &running, 6);
        attestor_described(a, ids[2], 0, &running, 6);
        for (int i = 0; i < 3; i++)
                assert_int_equal(check(a, ids[i], BOOT, NULL, &r[i], 7 + i, &why), ATTEST_ACCEPT);
        /* a fourth instance takes the place of the least recently used (the first) */
        assert_int_equal(check(a, ids[3], BOOT, NULL, &r[3], 20, &why), ATTEST_PENDING);
        assert_false(attestor_accepted(a, ids[0], BOOT));
        assert_true(attestor_accepted(a, ids[1], BOOT));
        /* an answer for an instance no longer remembered changes nothing */
        attestor_described(a, ids[0], 0, &running, 21);
        assert_false(attestor_accepted(a, ids[0], BOOT));
        for (int i = 0; i < 4; i++)
                report_done(&r[i]);
        attestor_free(a);
}

static void test_names(void **state) {
        (void) state;
        AttestMode m;
        assert_int_equal(attest_mode_from_string("required", &m), 0);
        assert_int_equal(m, ATTEST_REQUIRED);
        assert_int_equal(attest_mode_from_string("warn", &m), 0);
        assert_int_equal(m, ATTEST_WARN);
        assert_int_equal(attest_mode_from_string("off", &m), 0);
        assert_int_equal(m, ATTEST_OFF);
        assert_int_equal(attest_mode_from_string("strict", &m), -EINVAL);
        assert_int_equal(attest_mode_from_string(NULL, &m), -EINVAL);
        for (int r = 0; r < _ATTEST_REASON_MAX; r++) {
                assert_non_null(attest_reason_to_string(r));
                assert_string_not_equal(attest_reason_to_string(r), "unknown");
                assert_true(strlen(attest_reason_describe(r)) > 5);
        }
        assert_string_equal(attest_reason_to_string(ATTEST_REASON_REPLAY), "replay");
        assert_string_equal(attest_reason_to_string(_ATTEST_REASON_MAX), "unknown");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_names),
                cmocka_unit_test(test_trust),
                cmocka_unit_test(test_signature),
                cmocka_unit_test(test_document),
                cmocka_unit_test(test_facts),
                cmocka_unit_test(test_attestor_accepts),
                cmocka_unit_test(test_attestor_refuses),
                cmocka_unit_test(test_attestor_ec2_failures),
                cmocka_unit_test(test_attestor_bounds),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
