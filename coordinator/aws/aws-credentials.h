/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "http.h"

/* AWS credentials from the standard chain, in the order the AWS SDKs use:
 *   1. environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN;
 *   2. web identity (IRSA): AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN
 *      [+ AWS_ROLE_SESSION_NAME] → STS AssumeRoleWithWebIdentity (unsigned);
 *   3. shared credentials file: AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, profile
 *      AWS_PROFILE (or "default"). An explicitly set AWS_PROFILE moves this before 2;
 *   4. IMDS role: IMDSv2 token, iam/security-credentials/ROLE (the coordinator's own node).
 * Temporary credentials (2, 4) are refreshed before they expire. Secrets are never logged. */

typedef struct AwsCredentials {
        char *access_key_id;
        char *secret_access_key;
        char *session_token;  /* NULL for long-term keys */
        int64_t expiration;   /* seconds since the epoch, 0: does not expire */
} AwsCredentials;

void aws_credentials_done(AwsCredentials *c); /* frees and wipes the fields */
int aws_credentials_copy(const AwsCredentials *src, AwsCredentials *ret);

typedef enum AwsCredentialSource {
        AWS_CREDENTIALS_NONE,
        AWS_CREDENTIALS_STATIC,       /* given to the provider explicitly */
        AWS_CREDENTIALS_ENVIRONMENT,
        AWS_CREDENTIALS_WEB_IDENTITY,
        AWS_CREDENTIALS_SHARED_FILE,
        AWS_CREDENTIALS_IMDS,
        AWS_CREDENTIALS_CONTAINER,    /* EKS Pod Identity, ECS: $AWS_CONTAINER_CREDENTIALS_FULL_URI */
        _AWS_CREDENTIALS_SOURCE_MAX,
} AwsCredentialSource;
const char *aws_credential_source_to_string(AwsCredentialSource s);

typedef struct AwsCredentialsConfig {
        const char *region;          /* for the regional STS endpoint */
        const char *sts_endpoint;    /* NULL: $AWS_ENDPOINT_URL_STS, else https://sts.REGION.amazonaws.com/ */
        const char *imds_endpoint;   /* NULL: $AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254 */
        bool imds_disabled;          /* also $AWS_EC2_METADATA_DISABLED=true */
        const char *static_access_key_id; /* if set: only these (tests, tools) */
        const char *static_secret_access_key;
        const char *static_session_token;
        uint64_t refresh_margin_usec; /* refresh this long before expiry; 0: 5 min */
} AwsCredentialsConfig;

typedef struct AwsCredentialProvider AwsCredentialProvider;

/* error < 0: no credentials (the chain found nothing, or the fetch failed). creds is valid
 * only during the callback. */
typedef void (*aws_credentials_done_t)(AwsCredentialProvider *p, int error,
                                       const AwsCredentials *creds, void *userdata);

int aws_credential_provider_new(sd_event *e, HttpClient *http, const AwsCredentialsConfig *config,
                                AwsCredentialProvider **ret);
AwsCredentialProvider *aws_credential_provider_free(AwsCredentialProvider *p);
/* Valid credentials: from the cache when they are not about to expire (the callback then runs
 * before this returns), otherwise after a fetch (concurrent callers share one fetch). Returns
 * < 0 only if nothing could be started; the callback is then not called. A pending callback can
 * be withdrawn with aws_credentials_cancel(p, done, userdata). */
int aws_credentials_get(AwsCredentialProvider *p, aws_credentials_done_t done, void *userdata);
void aws_credentials_cancel(AwsCredentialProvider *p, aws_credentials_done_t done, void *userdata);
/* Forget the cache (e.g. after an AuthFailure with expiring credentials). */
void aws_credentials_invalidate(AwsCredentialProvider *p);
AwsCredentialSource aws_credentials_source(const AwsCredentialProvider *p);

/* ---- pieces, exposed for tests ---------------------------------------------------------- */

/* Which source the chain picks now, from the environment and the files it names (HOME too).
 * For the shared file, *ret_path gets the file and *ret_profile the profile. IMDS is the last
 * resort unless disabled (then NONE). */
AwsCredentialSource aws_credentials_pick_source(bool imds_disabled, char **ret_path,
                                                char **ret_profile);
int aws_credentials_from_environment(AwsCredentials *ret);
/* INI text of a shared credentials file: "[profile]" sections, "key = value" lines, '#' and ';'
 * comments. -ENOENT when the profile is missing, -ENOKEY when it lacks a key pair. */
int aws_shared_credentials_parse(const char *text, const char *profile, AwsCredentials *ret);
int aws_shared_credentials_load(const char *path, const char *profile, AwsCredentials *ret);
/* STS AssumeRoleWithWebIdentity answer (XML) or error body; -EACCES / -EBADMSG. */
int aws_sts_parse_credentials(const char *xml, size_t len, AwsCredentials *ret);
/* IMDS iam/security-credentials/ROLE answer (JSON). */
int aws_imds_parse_credentials(const char *json, AwsCredentials *ret);
