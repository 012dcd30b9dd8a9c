/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's HTTP endpoints: /healthz, /readyz, /metrics, /api/v1/{nodes,provisioning,
 * disruption}, served on NNG's HTTP server, answered on the loop. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

typedef enum HttpPage {
        HTTP_PAGE_METRICS,        /* /metrics (Prometheus text) */
        HTTP_PAGE_NODES,          /* /api/v1/nodes */
        HTTP_PAGE_PROVISIONING,   /* /api/v1/provisioning */
        HTTP_PAGE_DISRUPTION,     /* /api/v1/disruption */
        _HTTP_PAGE_MAX,
} HttpPage;

/* Where the answers come from; called on the loop. */
typedef struct HttpPorts {
        void *userdata;
        bool (*ready)(void *userdata);   /* /readyz: 200 or 503 */
        /* The page's body, malloc'ed; -errno gives a 500. */
        int (*render)(void *userdata, HttpPage page, char **ret, size_t *ret_len);
} HttpPorts;

typedef struct HttpServer HttpServer;
typedef struct ApiAuth ApiAuth;

/* What one HTTP listener serves: health and metrics (open), and/or /api/v1 (authenticated through
 * auth unless NULL: apiauth.h). */
#define HTTP_SERVE_HEALTH 1u
#define HTTP_SERVE_API 2u

int http_server_new(sd_event *e, const char *url, unsigned roles, ApiAuth *auth, const HttpPorts *ports,
                    HttpServer **ret);
HttpServer *http_server_free(HttpServer *h);
/* Requests answered so far. */
uint64_t http_server_requests(const HttpServer *h);
