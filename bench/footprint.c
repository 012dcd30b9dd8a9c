/* SPDX-License-Identifier: Apache-2.0 */
/* bench/footprint: the resident memory a process pays for the libraries the agent uses before it
 * does any work of its own, one layer at a time, for bench/bench_link.py's agent footprint:
 *   footprint LEVEL [URL]   then sleeps until killed
 *   LEVEL 0: nothing (glibc and the loader)
 *   LEVEL 1: + curl_global_init() (libcurl and what it pulls in)
 *   LEVEL 2: + an sd-event loop (libsystemd)
 *   LEVEL 3: + an NNG REQ socket dialling URL (NNG's threads)
 * The binary links all of them, so the libraries are mapped at every level, as in the agent; a
 * level only adds their initialisation and use. Built by hand with -DFOOTPRINT_NO_CURL, it shows
 * the same without libcurl:
 *   cc -O2 -pthread -DFOOTPRINT_NO_CURL -o footprint-nocurl bench/footprint.c -lnng -lsystemd */
#ifndef FOOTPRINT_NO_CURL
#include <curl/curl.h>
#endif
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

#ifndef FOOTPRINT_NO_CURL
        if (level >= 1 && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                return 1;
#endif
        if (level >= 2 && sd_event_default(&e) < 0)
                return 1;
        if (level >= 3) {
                if (argc < 3 || nng_req0_open(&s) != 0 || nng_dial(s, argv[2], NULL, NNG_FLAG_NONBLOCK) != 0)
                        return 1;
        }
        printf("ready\n");
        fflush(stdout);
        for (;;)
                pause();
}
