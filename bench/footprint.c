/* SPDX-License-Identifier: Apache-2.0 */
/* bench/footprint: the resident memory a process pays for the libraries the agent uses before it
 * does any work of its own, one layer at a time, for bench/bench_link.py's agent footprint:
 *   footprint LEVEL [URL]   then sleeps until killed
 *   LEVEL 0: nothing (glibc, the loader, and the libraries mapped)
 *   LEVEL 1: + an sd-event loop (libsystemd)
 *   LEVEL 2: + an NNG REQ socket dialling URL (NNG's threads)
 * It links what the agent links (NNG and its mbedTLS, libsystemd; no libcurl: docs/http.md), so
 * the libraries are mapped at every level, as in the agent; a level only adds their
 * initialisation and use. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <stdlib.h>
#include <systemd/sd-event.h>
#include <unistd.h>

int main(int argc, char **argv) {
        int level = argc > 1 ? atoi(argv[1]) : 0;
        sd_event *e = NULL;
        nng_socket s;

        if (level >= 1 && sd_event_default(&e) < 0)
                return 1;
        if (level >= 2) {
                if (argc < 3 || nng_req0_open(&s) != 0 || nng_dial(s, argv[2], NULL, NNG_FLAG_NONBLOCK) != 0)
                        return 1;
        }
        printf("ready\n");
        fflush(stdout);
        for (;;)
                pause();
}
