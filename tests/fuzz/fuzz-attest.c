/* SPDX-License-Identifier: Apache-2.0 */
/* Attestation input from agents: the instance identity document (JSON) and its rsa2048
 * signature (base64 of a DER PKCS7), checked against AWS's shipped certificates. The first
 * byte picks the parser; for the signature, the rest is split at the first NUL into document and
 * signature. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agents/attest.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static AttestTrust *trust;
        static bool loaded;
        if (!loaded) {
                log_set_max_level(LOG_EMERG);
                (void) attest_trust_from_file("data/aws-identity-rsa2048.pem", &trust);
                loaded = true;
        }
        if (size < 1)
                return 0;
        const uint8_t *body = data + 1;
        size_t len = size - 1;
        if (data[0] % 2 == 0) {
                AttestDocument d;
                if (attest_document_parse(body, len, &d) == 0 &&
                    (strlen(d.instance_id) > ATTEST_ID_MAX || strlen(d.region) > ATTEST_ID_MAX))
                        abort();
                return 0;
        }
        const uint8_t *nul = memchr(body, 0, len);
        size_t doc_len = nul ? (size_t) (nul - body) : len / 2;
        const uint8_t *sig = nul ? nul + 1 : body + doc_len;
        size_t sig_len = len - (size_t) (sig - body);
        int r = attest_verify_signature(trust, body, doc_len, sig, sig_len);
        /* nothing but AWS's keys signs: random input never verifies */
        if (r == 0)
                abort();
        return 0;
}
