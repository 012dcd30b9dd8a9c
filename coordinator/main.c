/* SPDX-License-Identifier: Apache-2.0 */
/* nodesmith-coordinator: the cluster's model, its provisioning and disruption decisions. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "coordinator.h"
#include "daemon.h"
#include "log.h"

/* Descriptors the coordinator holds besides its agents' connections: its HTTP servers' clients,
 * the API server's watches, EC2 and SQS connections, NNG's and the loop's own. */
#define NOFILE_OWN 256

/* A fleet beyond the soft file limit would see its agents refused as they connect: raise it to
 * the hard one (as a Go program does) and say when even that is short of max-connections. */
static void raise_file_limit(const CoordConfig *cfg) {
        uint64_t before = 0, after = 0;
        int r = daemon_raise_nofile(&before, &after);
        if (r < 0) {
                log_warning_errno(r, "Failed to raise the file limit: %m");
                return;
        }
        if (after != before)
                log_info("File limit raised from %llu to %llu descriptors (the hard limit).",
                         (unsigned long long) before, (unsigned long long) after);
        if (after < cfg->max_connections + NOFILE_OWN)
                log_warning("The file limit (%llu descriptors) is below max-connections (%llu) plus %d for the "
                            "coordinator's own: agents beyond about %llu will not get a connection. Raise "
                            "LimitNOFILE= or the container runtime's nofile ulimit (docs/helm.md).",
                            (unsigned long long) after, (unsigned long long) cfg->max_connections, NOFILE_OWN,
                            (unsigned long long) (after > NOFILE_OWN ? after - NOFILE_OWN : 0));
}

/* The teardown after the loop has ended (NNG's sockets and HTTP servers closed, memory freed)
 * holds nothing of record: the Lease is released and the cluster's state is in the API server and
 * EC2. Its NNG calls can wait forever in NNG 1.5 (seen in one stop of seven with 6 000 agents
 * connected, the main thread waiting on a condition inside libnng; NNG's tracker has such hangs
 * of nng_close fixed after 1.5.2), so the teardown gets TEARDOWN_USEC and the process then exits
 * without finishing it. */
#define TEARDOWN_USEC (10 * USEC_PER_SEC)

static void *teardown_watchdog(void *arg) {
        struct timespec ts = { .tv_sec = TEARDOWN_USEC / USEC_PER_SEC };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
        log_warning("The teardown did not finish within %llu s (NNG's close); exiting without it.",
                    (unsigned long long) (TEARDOWN_USEC / USEC_PER_SEC));
        _exit(0);
        return NULL;
}

static void arm_teardown_watchdog(void) {
        pthread_attr_t attr;
        pthread_t t;
        if (pthread_attr_init(&attr) != 0)
                return;
        (void) pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, teardown_watchdog, NULL) != 0)
                log_warning("Cannot bound the teardown's time; it may wait on NNG.");
        (void) pthread_attr_destroy(&attr);
}

int main(int argc, char **argv) {
        daemon_block_signals(); /* first: before anything starts a thread */
        /* Every TLS connection to an agent holds mbedTLS's two record buffers (16 KiB and a bit,
         * calloc'ed) and NNG's two 16 KiB ones for its whole life. From the heap, calloc clears
         * them and every page is resident at once; mapped on their own they are fresh zero pages,
         * resident only as far as records fill them (an agent's report and its answer take a
         * page or two): 37 KiB -> 20 KiB per new agent connection. NNG's send buffer is a ring,
         * though: once 16 KiB of answers have gone through it (within 40 minutes at a 10 s
         * interval) all of it is resident (docs/benchmarks.md, "Long-lived connections"). */
        (void) mallopt(M_MMAP_THRESHOLD, 16 * 1024);

        _cleanup_(coordinator_freep) Coordinator *c = NULL;
        ConfigAction action;
        int r;

        log_set_ident("nodesmith-coordinator");
        r = coordinator_new(&c);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate: %m"), 1;

        ConfigSource src = { .default_file = "/etc/nodesmith/coordinator.conf",
                             .env_prefix = "NODESMITH_COORDINATOR" };
        ConfigError cfg_error = {};
        r = config_load(coord_options, coord_options_count, &c->cfg, &src, argc, argv, &action, &cfg_error);
        if (r < 0)
                return log_error_errno(r, "%s", cfg_error.message), 2;
        if (action == CONFIG_HELP) {
                config_help(coord_options, coord_options_count, "nodesmith-coordinator",
                            "Collects agent reports, decides what to launch and what to remove.",
                            stdout);
                return 0;
        }
        if (action == CONFIG_VERSION) {
                printf("nodesmith-coordinator %s\n", COORDINATOR_VERSION);
                return 0;
        }
        r = coordinator_validate(c);
        if (r < 0)
                return action == CONFIG_CHECK ? 1 : 2;
        if (action == CONFIG_CHECK) {
                config_print(coord_options, coord_options_count, &c->cfg, stdout);
                printf("# configuration OK\n");
                return 0;
        }
        raise_file_limit(&c->cfg);
        r = coordinator_start(c);
        if (r < 0)
                return 1;
        r = coordinator_run(c);
        arm_teardown_watchdog(); /* c is freed on return */
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m"), 1;
        return 0;
}
