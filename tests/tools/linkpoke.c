/* SPDX-License-Identifier: Apache-2.0 */
/* linkpoke: speaks the agent link by hand, for tests. Sends one kind of message and prints what
 * came back: "status=STATUS_OK action=ACTION_RUN ..." or "timeout".
 *   linkpoke URL MODE [--token T] [--instance-id I] [--size N] [--ca F --server-name N]
 * MODE: report | garbage | oversized | version | truncated */
#include <getopt.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nodesmith.pb-c.h"
#include "wire.h"

static int fail(const char *what, int r) {
        fprintf(stderr, "linkpoke: %s: %s\n", what, nng_strerror(r));
        return 2;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "token", required_argument, NULL, 't' },
                { "instance-id", required_argument, NULL, 'i' },
                { "size", required_argument, NULL, 's' },
                { "ca", required_argument, NULL, 'c' },
                { "server-name", required_argument, NULL, 'n' },
                { "timeout", required_argument, NULL, 'T' },
                {}
        };
        const char *token = "", *instance = "i-poke", *ca = NULL, *server_name = "localhost";
        size_t size = 64;
        int timeout_ms = 3000, c, r;

        while ((c = getopt_long(argc, argv, "", opts, NULL)) >= 0)
                switch (c) {
                case 't': token = optarg; break;
                case 'i': instance = optarg; break;
                case 's': size = strtoull(optarg, NULL, 10); break;
                case 'c': ca = optarg; break;
                case 'n': server_name = optarg; break;
                case 'T': timeout_ms = atoi(optarg); break;
                default: return 2;
                }
        if (argc - optind != 2) {
                fprintf(stderr, "usage: linkpoke URL report|garbage|oversized|version|truncated [options]\n");
                return 2;
        }
        const char *url = argv[optind], *mode = argv[optind + 1];

        nng_socket s;
        nng_dialer d;
        if ((r = nng_req0_open(&s)) != 0)
                return fail("open", r);
        nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, timeout_ms);
        nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, timeout_ms);
        nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 1 << 20);
        if ((r = nng_dialer_create(&d, s, url)) != 0)
                return fail("dialer", r);
        if (strncmp(url, "tls+", 4) == 0) {
                nng_tls_config *cfg;
                nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT);
                if (ca) {
                        nng_tls_config_ca_file(cfg, ca);
                        nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED);
                } else
                        nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE);
                nng_tls_config_server_name(cfg, server_name);
                nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
                nng_tls_config_free(cfg);
        }
        if ((r = nng_dialer_start(d, 0)) != 0)
                return fail("dial", r);

        uint8_t *buf = NULL;
        size_t len = 0;
        if (strcmp(mode, "report") == 0 || strcmp(mode, "version") == 0 ||
            strcmp(mode, "truncated") == 0) {
                Nodesmith__V1__NodeState st = NODESMITH__V1__NODE_STATE__INIT;
                Nodesmith__V1__Identity id = NODESMITH__V1__IDENTITY__INIT;
                Nodesmith__V1__Resources cap = NODESMITH__V1__RESOURCES__INIT;
                cap.cpu_millis = 2000;
                cap.memory_bytes = 4LL << 30;
                cap.pods = 29;
                id.instance_id = (char *) instance;
                id.node_name = (char *) instance;
                id.boot_id = (char *) "poke";
                st.identity = &id;
                st.capacity = &cap;
                st.allocatable = &cap;
                WireEnvelope w = {
                        .protocol_version = strcmp(mode, "version") == 0 ? 99 : 0,
                        .token = token,
                        .instance_id = instance,
                        .boot_id = "poke",
                        .sequence = (uint64_t) time(NULL),
                };
                if (wire_pack_report(&w, &st, 1 << 20, &buf, &len) < 0)
                        return 2;
                if (strcmp(mode, "truncated") == 0)
                        len = len / 2;
        } else if (strcmp(mode, "garbage") == 0 || strcmp(mode, "oversized") == 0) {
                len = size;
                buf = malloc(len ? len : 1);
                srandom(42);
                for (size_t i = 0; i < len; i++)
                        buf[i] = (uint8_t) random();
                if (len > 0)
                        buf[0] = 0xff; /* never a valid first tag */
        } else {
                fprintf(stderr, "linkpoke: unknown mode %s\n", mode);
                return 2;
        }

        if ((r = nng_send(s, buf, len, 0)) != 0)
                return fail("send", r);
        free(buf);
        nng_msg *msg;
        r = nng_recvmsg(s, &msg, 0);
        if (r == NNG_ETIMEDOUT) {
                /* the coordinator dropped the message (and maybe the connection): done; NNG may
                 * still be tearing the pipe down, which we need not wait for */
                printf("timeout\n");
                fflush(stdout);
                _exit(0);
        }
        if (r != 0)
                return fail("recv", r);
        Nodesmith__V1__NodeDirective *dir =
                nodesmith__v1__node_directive__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
        if (!dir) {
                printf("unreadable-reply\n");
                return 1;
        }
        printf("status=%s action=%s interval=%u error=%s\n",
               protobuf_c_enum_descriptor_get_value(&nodesmith__v1__node_directive__status__descriptor,
                                                    dir->status)->name,
               protobuf_c_enum_descriptor_get_value(&nodesmith__v1__node_directive__action__descriptor,
                                                    dir->action)->name,
               dir->report_interval_ms, dir->error);
        nodesmith__v1__node_directive__free_unpacked(dir, NULL);
        nng_msg_free(msg);
        nng_close(s);
        return 0;
}
