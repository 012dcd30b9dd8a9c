/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "aws-credentials.h"
#include "http.h"

/* What every AWS client of the coordinator (EC2, SSM, SQS) shares: the endpoint URL and one
 * signed POST. Signing is libcurl's (CURLOPT_AWS_SIGV4). */

/* override (with a '/' appended when missing), else https://SERVICE.REGION.amazonaws.com/. */
char *aws_endpoint_url(const char *override, const char *service, const char *region);

typedef struct AwsRequestSpec {
        const char *url;
        const char *sigv4;          /* "aws:amz:REGION:SERVICE" */
        const char *content_type;   /* e.g. "application/x-amz-json-1.0" */
        const char *target;         /* X-Amz-Target, or NULL (Query API) */
        const void *body;
        size_t body_len;
        uint64_t timeout_usec;      /* the whole request; connecting takes at most 5 s of it */
        size_t max_body;            /* largest answer accepted */
} AwsRequestSpec;

/* A POST signed with creds, ready for http_request_start(). */
int aws_request_new(HttpClient *http, const AwsRequestSpec *spec, const AwsCredentials *creds,
                    HttpRequest **ret);
