/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Shared between lib/kube.c and lib/kube-watch.c; not for other users. */

#include "http.h"
#include "kube.h"

int kube_config_copy(const KubeConfig *src, KubeConfig **ret);
/* The effective limits (defaults filled in). */
void kube_config_effective(const KubeConfig *src, KubeConfig *ret);

/* An HTTP request to the API server (absolute URL) with authentication, TLS, Accept and the
 * time-outs set; force_token re-reads the token file. */
int kube_client_http_request(KubeClient *c, const char *method, const char *url, bool force_token,
                             HttpRequest **ret);
sd_event *kube_client_event(const KubeClient *c);
uint32_t kube_client_random(KubeClient *c);

int kube_client_add_watch(KubeClient *c, KubeWatch *w);
void kube_client_remove_watch(KubeClient *c, KubeWatch *w);
/* The client goes away: stop all traffic, forget it. */
void kube_watch_detach(KubeWatch *w);

/* Fill resp from a finished HTTP exchange: parse the body (JSON), the Status, the errno. */
void kube_response_from_http(KubeResponse *resp, int error, long status, const char *body, size_t len);
