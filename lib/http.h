/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP client interface on the loop (two backends: libcurl, NNG). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

/* HTTP client on the sd-event loop, with two backends behind the same calls (docs/http.md):
 * lib/http-curl.c, libcurl's multi interface driven by the loop's sockets and a timer (the
 * coordinator and nodesmithctl: AWS APIs with SigV4, connection reuse), and lib/http-nng.c, NNG's
 * HTTP client on the mbedTLS NNG already carries (the agent, which then maps neither libcurl nor
 * OpenSSL). Every request has connect and total time-outs and a cap on the body it accepts;
 * callbacks run on the loop. */

typedef struct HttpClient HttpClient;
typedef struct HttpRequest HttpRequest;

/* Called once per started request, on the loop. error < 0 is a transport failure (status 0);
 * otherwise status is the HTTP status and body the (NUL-terminated) response. The request is
 * freed after the callback returns. */
typedef void (*http_done_t)(HttpRequest *req, int error, long status, const char *body, size_t len,
                            void *userdata);
/* Streaming responses (watches): each piece of body as it arrives. Returning < 0 aborts the
 * request (done is then called with that error). Nothing is buffered for done. */
typedef int (*http_chunk_t)(HttpRequest *req, const char *data, size_t len, void *userdata);

int http_client_new(sd_event *e, HttpClient **ret);
/* Aborts whatever is still in flight; their callbacks are not called. */
HttpClient *http_client_free(HttpClient *c);
size_t http_client_in_flight(const HttpClient *c);

int http_request_new(HttpClient *c, const char *method, const char *url, HttpRequest **ret);
/* Frees a request that was never started. */
HttpRequest *http_request_free(HttpRequest *r);
int http_request_add_header(HttpRequest *r, const char *name, const char *value);
int http_request_set_body(HttpRequest *r, const void *body, size_t len); /* copies */
void http_request_set_timeouts(HttpRequest *r, uint64_t connect_ms, uint64_t total_ms);
void http_request_set_max_body(HttpRequest *r, size_t max);
/* ca_file/ca_pem: trust these instead of the system store; cert/key: client certificate. */
int http_request_set_tls(HttpRequest *r, const char *ca_file, const char *ca_pem, size_t ca_pem_len,
                         const char *cert_file, const char *key_file, bool skip_verify);
/* The name the server's certificate must carry, where the URL's host is not it (kubeconfig's
 * tls-server-name). NNG's mbedTLS matches DNS names only, so an https:// URL with an address
 * needs one. */
int http_request_set_server_name(HttpRequest *r, const char *name);
/* AWS Signature Version 4 by libcurl (CURLOPT_AWS_SIGV4), e.g. provider "aws:amz:us-east-1:ec2".
 * -EOPNOTSUPP on the NNG backend. */
int http_request_set_sigv4(HttpRequest *r, const char *provider, const char *access_key,
                           const char *secret_key, const char *session_token);
void http_request_set_stream(HttpRequest *r, http_chunk_t chunk);
/* Takes ownership of r; done is called exactly once unless the request is cancelled. */
int http_request_start(HttpRequest *r, http_done_t done, void *userdata);
/* Abort a started request; its callback is not called and it is freed. */
void http_request_cancel(HttpRequest *r);
/* A response header, valid inside the done callback (or a chunk callback). */
const char *http_request_header(HttpRequest *r, const char *name);
const char *http_request_url(const HttpRequest *r);
void *http_request_userdata(const HttpRequest *r);

/* Percent-encode s for a URL query value (RFC 3986 unreserved kept). */
char *http_escape(const char *s);
