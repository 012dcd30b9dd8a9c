/* SPDX-License-Identifier: Apache-2.0 */
/* bench/nngrep: the ceiling of bench/link. A REP server that does nothing per report but answer
 * one fixed NodeDirective (status OK), so that bench/link's clients count its replies: what is
 * left is NNG's own cost per message (REP socket, TCP or TLS pipe) and the clients'.
 *   nngrep URL [--mode poll|aio] [--contexts N] [--cert FILE --key FILE] [--max-message BYTES]
 * --mode poll (default): the coordinator's loop: NNG_OPT_RECVFD polled, drained with
 *   NNG_FLAG_NONBLOCK, one thread.
 * --mode aio: N REP contexts (default 64), each answering from its aio callback in NNG's threads.
 * Runs until killed. */
#include <errno.h>
#include <getopt.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/supplemental/util/platform.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nodesmith.pb-c.h"

static uint8_t reply[64];
static size_t reply_len;

typedef struct Ctx {
        nng_ctx ctx;
        nng_aio *aio;
        bool sending;
} Ctx;

static void on_ctx(void *arg) {
        Ctx *c = arg;
        int r = nng_aio_result(c->aio);
        if (r == NNG_ECLOSED)
                return;
        if (!c->sending && r == 0) {
                nng_msg *m = nng_aio_get_msg(c->aio);
                nng_msg_clear(m);
                if (nng_msg_append(m, reply, reply_len) == 0) {
                        nng_aio_set_msg(c->aio, m);
                        c->sending = true;
                        nng_ctx_send(c->ctx, c->aio);
                        return;
                }
                nng_msg_free(m);
        } else if (c->sending && r != 0)
                nng_msg_free(nng_aio_get_msg(c->aio));
        c->sending = false;
        nng_ctx_recv(c->ctx, c->aio);
}

static char *slurp(const char *path) {
        static char bufs[2][64 * 1024];
        static int k;
        char *b = bufs[k++ & 1];
        FILE *f = path ? fopen(path, "re") : NULL;
        size_t n = f ? fread(b, 1, sizeof bufs[0] - 1, f) : 0;
        if (f)
                fclose(f);
        b[n] = 0;
        return b;
}

static int serve_poll(nng_socket s) {
        int fd, r = nng_socket_get_int(s, NNG_OPT_RECVFD, &fd);
        if (r != 0)
                return r;
        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, -1) < 0 && errno != EINTR)
                        return NNG_EINTERNAL;
                for (unsigned i = 0; i < 256; i++) {
                        nng_msg *m;
                        r = nng_recvmsg(s, &m, NNG_FLAG_NONBLOCK);
                        if (r != 0)
                                break;
                        nng_msg_clear(m);
                        r = nng_msg_append(m, reply, reply_len);
                        if (r == 0)
                                r = nng_sendmsg(s, m, NNG_FLAG_NONBLOCK);
                        if (r == NNG_EAGAIN)
                                r = nng_sendmsg(s, m, 0);
                        if (r != 0)
                                nng_msg_free(m);
                }
        }
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "mode", required_argument, NULL, 'm' }, { "contexts", required_argument, NULL, 'n' },
                { "cert", required_argument, NULL, 'c' }, { "key", required_argument, NULL, 'k' },
                { "max-message", required_argument, NULL, 'x' },
                {}
        };
        const char *mode = "poll", *cert = NULL, *key = NULL;
        int contexts = 64, c, r;
        size_t max_msg = 4u << 20;
        while ((c = getopt_long(argc, argv, "", opts, NULL)) >= 0)
                switch (c) {
                case 'm': mode = optarg; break;
                case 'n': contexts = atoi(optarg); break;
                case 'c': cert = optarg; break;
                case 'k': key = optarg; break;
                case 'x': max_msg = (size_t) atol(optarg); break;
                default: return 2;
                }
        if (optind >= argc || contexts < 1) {
                fprintf(stderr, "usage: nngrep URL [--mode poll|aio] [--contexts N] [--cert F --key F]\n");
                return 2;
        }
        const char *url = argv[optind];

        Nodesmith__V1__NodeDirective d = NODESMITH__V1__NODE_DIRECTIVE__INIT;
        d.protocol_version = NODESMITH__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
        d.status = NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_OK;
        d.report_interval_ms = 10000;
        d.now_unix_ms = 1;
        reply_len = nodesmith__v1__node_directive__pack(&d, reply);

        nng_socket s;
        nng_listener l;
        if ((r = nng_rep0_open(&s)) != 0 || (r = nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, max_msg)) != 0 ||
            (r = nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 20)) != 0 || (r = nng_listener_create(&l, s, url)) != 0)
                goto fail;
        if (strncmp(url, "tls+", 4) == 0) {
                nng_tls_config *cfg;
                if ((r = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_SERVER)) != 0 ||
                    (r = nng_tls_config_own_cert(cfg, slurp(cert), slurp(key), NULL)) != 0 ||
                    (r = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg)) != 0)
                        goto fail;
                nng_tls_config_free(cfg);
        }
        if ((r = nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, max_msg)) != 0 || (r = nng_listener_start(l, 0)) != 0)
                goto fail;
        fprintf(stderr, "nngrep: %s mode on %s\n", mode, url);
        if (strcmp(mode, "aio") == 0) {
                Ctx *cs = calloc((size_t) contexts, sizeof *cs);
                for (int i = 0; i < contexts; i++) {
                        if ((r = nng_ctx_open(&cs[i].ctx, s)) != 0 || (r = nng_aio_alloc(&cs[i].aio, on_ctx, &cs[i])) != 0)
                                goto fail;
                        nng_ctx_recv(cs[i].ctx, cs[i].aio);
                }
                for (;;)
                        nng_msleep(1000);
        }
        r = serve_poll(s);
fail:
        fprintf(stderr, "nngrep: %s\n", nng_strerror(r));
        return 1;
}
