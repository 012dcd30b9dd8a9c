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
#include "httpd.h"
#include "interruption/interruption.h"
#include "link.h"
#include "provision/provisioner.h"

/* The state a page is rendered from; any pointer but registry and agents may be NULL. */
typedef struct ApiView {
        const Registry *registry;
        const AgentMetrics *agents;
        const LinkServer *link;
        uint64_t http_requests;
        bool leading;
        uint64_t now_usec;             /* CLOCK_MONOTONIC */
        Provisioner *provisioner;
        Attestor *attest;
        ProxyDrains *proxy_drains;
        Interruption *interruption;
} ApiView;

int api_render(const ApiView *v, HttpPage page, char **ret, size_t *ret_len);
