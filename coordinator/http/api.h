/* SPDX-License-Identifier: Apache-2.0 */
/* What the HTTP endpoints answer, rendered from a view of the coordinator's state. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agents/attest.h"
#include "agents/proxydrain.h"
#include "agents/registry.h"
#include "agents/server.h"
#include "disruption/disruption.h"
#include "apiauth.h"
#include "httpd.h"
#include "interruption/interruption.h"
#include "link.h"
#include "provision/provisioner.h"

/* The state a page is rendered from; any pointer but registry and agents may be NULL. */
typedef struct ApiView {
        const Registry *registry;
        const AgentMetrics *agents;
        LinkServer *link;
        uint64_t http_requests;
        bool leading;
        uint64_t now_usec;             /* CLOCK_MONOTONIC */
        Provisioner *provisioner;
        Attestor *attest;
        ProxyDrains *proxy_drains;
        Interruption *interruption;
        Disruption *disruption;
        ApiAuth *api_auth;             /* NULL when /api/v1 is open */
        /* More /metrics lines from the rest of the process (NULL: none). */
        void *userdata;
        void (*more_metrics)(void *userdata, StrBuf *b);
} ApiView;

/* "spot", "on-demand" or "". */
const char *capacity_type_name(Nodesmith__V1__CapacityType t);

int api_render(const ApiView *v, HttpPage page, char **ret, size_t *ret_len);
