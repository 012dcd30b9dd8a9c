/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>

#include "aws-request.h"
#include "macro.h"

#define CONNECT_TIMEOUT_MS 5000u

char *aws_endpoint_url(const char *override, const char *service, const char *region) {
        char *u = NULL;
        if (!isempty(override)) {
                size_t n = strlen(override);
                if (asprintf(&u, "%s%s", override, override[n - 1] == '/' ? "" : "/") < 0)
                        return NULL;
                return u;
        }
        return asprintf(&u, "https://%s.%s.amazonaws.com/", service, region) < 0 ? NULL : u;
}

int aws_request_new(HttpClient *http, const AwsRequestSpec *spec, const AwsCredentials *creds,
                    HttpRequest **ret) {
        HttpRequest *req = NULL;
        int r;

        if (!http || !spec || !spec->url || !spec->sigv4 || !spec->content_type || !creds)
                return -EINVAL;
        r = http_request_new(http, "POST", spec->url, &req);
        if (r >= 0)
                r = http_request_set_body(req, spec->body ?: "", spec->body_len);
        if (r >= 0)
                r = http_request_add_header(req, "Content-Type", spec->content_type);
        if (r >= 0 && spec->target)
                r = http_request_add_header(req, "X-Amz-Target", spec->target);
        if (r >= 0)
                r = http_request_set_sigv4(req, spec->sigv4, creds->access_key_id,
                                           creds->secret_access_key, creds->session_token);
        if (r < 0) {
                http_request_free(req);
                return r;
        }
        uint64_t total_ms = spec->timeout_usec / USEC_PER_MSEC;
        http_request_set_timeouts(req, MIN(total_ms, CONNECT_TIMEOUT_MS), total_ms);
        http_request_set_max_body(req, spec->max_body);
        *ret = req;
        return 0;
}
