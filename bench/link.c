/* SPDX-License-Identifier: Apache-2.0 */
/* bench/link: how many agent reports per second one coordinator answers. Simulates N agents,
 * each a REQ context that sends a realistic report (P pods), waits for the directive and sends
 * the next one at once, for S seconds. Prints one JSON line.
 *   link URL [--agents N] [--pods P] [--seconds S] [--token T] [--ca FILE] [--sockets K]
 *            [--change-rate F]   fraction of reports whose node state changed (default 0)
 *            [--pace-ms M]       each agent waits M ms after a reply before its next report
 *                                (default 0: at once)
 *            [--interval-ms M]   each agent sends one report every M ms, as a real agent does
 *                                with its report interval: each agent registers as soon as its
 *                                connection is up and then reports every M ms from that moment
 *                                (a reply later than the next slot sends at once). The warm-up
 *                                (the dials with their TLS handshakes and the registrations, then
 *                                one whole interval) is reported apart ("warmup") from the
 *                                measured --seconds that follow. Excludes --pace-ms.
 *            [--id-offset N]     simulated agent i is node N+i (instance id, boot id, node name):
 *                                several client processes against one coordinator each take their
 *                                own range
 *            [--trace FILE]      every reply slower than 20 ms: "SENT_UNIX_MS LATENCY_MS" lines
 *            [--wait-stdin]      after the JSON, keep the connections open until stdin ends
 *            [--histogram]       the JSON also carries the reply-time histogram (0.1 ms buckets:
 *                                [[upper_edge_ms, count], ...], non-empty buckets only), so that a
 *                                driver adds the histograms of several client processes up
 * Besides the rate, the JSON has the time from each report sent to its reply: the worst
 * ("max_reply_ms", and when it came, "max_reply_at_unix_ms"), the median and the 99th percentile
 * (to 0.1 ms up to 10 s) and how many took over 100 ms: what a stall of the coordinator's loop
 * costs the agents. */
#include <getopt.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/supplemental/util/platform.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "nodesmith.pb-c.h"
#include "wire.h"

typedef struct Sim {
        nng_ctx ctx;
        nng_aio *aio;
        uint8_t *state[2];   /* two packed NodeStates: the usual one and a changed one */
        size_t state_len[2];
        char iid[32], boot[48];
        uint64_t seq;
        int variant;
        unsigned rng;
        bool sending, sleeping;
        uint64_t sent_ns;
        uint64_t due_ns;     /* --interval-ms: when the next report is due (0: registered, not
                              * on its schedule yet) */
        atomic_bool stop;
} Sim;

static atomic_ullong replies, errors, refused, timeouts;
static atomic_ullong max_reply_ns, max_reply_at_unix_ms, slow_replies; /* slow: over 100 ms */
/* reply times in 0.1 ms buckets up to 10 s; the last bucket holds everything slower */
#define HIST_BUCKETS 100001
#define HIST_BUCKET_NS 100000ull
static atomic_ullong latency_hist[HIST_BUCKETS];
static int pace_ms, interval_ms;
static unsigned long long dial_retries;
#define TRACE_MAX 200000
#define TRACE_MIN_NS 20000000ull
static struct { uint64_t sent_unix_ms; uint32_t latency_us; } trace[TRACE_MAX];
static atomic_size_t n_trace;
static bool tracing;

static uint64_t unix_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static void record_latency(uint64_t ns) {
        unsigned long long cur = atomic_load(&max_reply_ns);
        while (ns > cur && !atomic_compare_exchange_weak(&max_reply_ns, &cur, ns))
                ;
        if (ns >= cur)
                atomic_store(&max_reply_at_unix_ms, (unsigned long long) time(NULL) * 1000ull);
        if (ns > 100000000ull)
                atomic_fetch_add(&slow_replies, 1);
        if (tracing && ns > TRACE_MIN_NS) {
                size_t i = atomic_fetch_add(&n_trace, 1);
                if (i < TRACE_MAX) {
                        trace[i].sent_unix_ms = unix_ms() - ns / 1000000u;
                        trace[i].latency_us = (uint32_t) (ns / 1000u);
                }
        }
        uint64_t b = ns / HIST_BUCKET_NS;
        atomic_fetch_add(&latency_hist[b < HIST_BUCKETS - 1 ? b : HIST_BUCKETS - 1], 1);
}

/* The upper edge of the 0.1 ms bucket holding the q-th quantile, in ms. */
static double latency_quantile_ms(double q) {
        unsigned long long total = 0, seen = 0;
        for (int i = 0; i < HIST_BUCKETS; i++)
                total += atomic_load(&latency_hist[i]);
        for (int i = 0; i < HIST_BUCKETS; i++) {
                seen += atomic_load(&latency_hist[i]);
                if (total && (double) seen >= q * (double) total)
                        return (double) (i + 1) * (double) HIST_BUCKET_NS / 1e6;
        }
        return 0;
}

static void latency_reset(void) {
        atomic_store(&max_reply_ns, 0);
        atomic_store(&slow_replies, 0);
        for (int i = 0; i < HIST_BUCKETS; i++)
                atomic_store(&latency_hist[i], 0);
}

static void print_histogram(FILE *f) {
        bool first = true;
        fputs("[", f);
        for (int i = 0; i < HIST_BUCKETS; i++) {
                unsigned long long n = atomic_load(&latency_hist[i]);
                if (!n)
                        continue;
                fprintf(f, "%s[%.1f, %llu]", first ? "" : ", ", (double) (i + 1) * (double) HIST_BUCKET_NS / 1e6, n);
                first = false;
        }
        fputs("]", f);
}
static double change_rate; /* fraction of reports whose state changed since the last one */
static const char *bench_token = "";
static size_t report_bytes;

static void send_next(Sim *s) {
        nng_msg *m;
        uint8_t *buf = NULL;
        size_t len = 0;
        /* Every report is new (sequence + 1); some carry a changed state. */
        s->seq++;
        if (change_rate > 0 && (double) rand_r(&s->rng) / RAND_MAX < change_rate)
                s->variant ^= 1;
        WireEnvelope w = { .token = bench_token, .instance_id = s->iid, .boot_id = s->boot,
                           .sequence = s->seq, .sent_unix_ms = (int64_t) time(NULL) * 1000,
                           .report_interval_ms = 10000 };
        if (wire_pack_envelope(&w, s->state[s->variant], s->state_len[s->variant], 64u << 20, &buf, &len) < 0)
                abort();
        report_bytes = len;
        nng_msg_alloc(&m, 0);
        nng_msg_append(m, buf, len);
        free(buf);
        nng_aio_set_msg(s->aio, m);
        nng_aio_set_timeout(s->aio, 5000);
        s->sending = true;
        s->sent_ns = now_ns();
        nng_ctx_send(s->ctx, s->aio);
}

static void on_aio(void *arg) {
        Sim *s = arg;
        int r = nng_aio_result(s->aio);
        if (s->sleeping) { /* the pause between reports is over */
                s->sleeping = false;
                if (!atomic_load(&s->stop))
                        send_next(s);
                return;
        }
        if (r != 0) {
                if (r == NNG_ECLOSED || r == NNG_ECANCELED || atomic_load(&s->stop))
                        return;
                if (r == NNG_ETIMEDOUT)
                        atomic_fetch_add(&timeouts, 1); /* a reply that never came */
                else
                        atomic_fetch_add(&errors, 1);
        } else if (!s->sending) {
                nng_msg *m = nng_aio_get_msg(s->aio);
                if (!m) { /* seen with NNG 1.5.2 under load at 10 000 agents: counted, not read */
                        atomic_fetch_add(&errors, 1);
                        goto next;
                }
                Nodesmith__V1__NodeDirective *d =
                        nodesmith__v1__node_directive__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
                record_latency(now_ns() - s->sent_ns);
                if (d && d->status == NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_OK)
                        atomic_fetch_add(&replies, 1);
                else
                        atomic_fetch_add(&refused, 1);
                if (d)
                        nodesmith__v1__node_directive__free_unpacked(d, NULL);
                nng_msg_free(m);
        }
next:
        if (atomic_load(&s->stop))
                return;
        if (s->sending && r == 0) {
                s->sending = false;
                nng_aio_set_timeout(s->aio, 5000);
                nng_ctx_recv(s->ctx, s->aio);
                return;
        }
        if (s->sending && r != 0) /* the message is still ours after a failed send */
                nng_msg_free(nng_aio_get_msg(s->aio));
        if (interval_ms > 0) {
                /* the next slot of this agent's schedule; a late reply sends at once */
                uint64_t now = now_ns();
                if (s->due_ns == 0) /* registered: its schedule starts there, as an agent's does */
                        s->due_ns = s->sent_ns;
                s->due_ns += (uint64_t) interval_ms * 1000000ull;
                if (s->due_ns <= now) {
                        s->due_ns = now;
                        send_next(s);
                        return;
                }
                s->sleeping = true;
                nng_aio_set_timeout(s->aio, NNG_DURATION_INFINITE); /* else it caps the sleep */
                nng_sleep_aio((nng_duration) ((s->due_ns - now + 999999ull) / 1000000ull), s->aio);
                return;
        }
        if (pace_ms > 0) {
                s->sleeping = true;
                nng_sleep_aio(pace_ms, s->aio);
                return;
        }
        send_next(s);
}

/* The packed NodeState of simulated node idx (variant 1: one pod's phase differs). */
static uint8_t *make_state(int idx, int pods, int variant, size_t *len) {
        Nodesmith__V1__NodeState rep = NODESMITH__V1__NODE_STATE__INIT;
        Nodesmith__V1__Identity id = NODESMITH__V1__IDENTITY__INIT;
        Nodesmith__V1__Resources cap = NODESMITH__V1__RESOURCES__INIT, alloc = cap, req = cap;
        Nodesmith__V1__DrainStatus drain = NODESMITH__V1__DRAIN_STATUS__INIT;
        char iid[32], name[64], boot[40];
        snprintf(iid, sizeof iid, "i-%017x", idx);
        snprintf(name, sizeof name, "ip-10-0-%d-%d.ec2.internal", idx / 250, idx % 250);
        snprintf(boot, sizeof boot, "6b1c3c2e-0000-4000-8000-%012x", idx);
        id.instance_id = iid;
        id.node_name = name;
        id.boot_id = boot;
        id.instance_type = (char *) "m6i.2xlarge";
        id.zone = (char *) "us-east-1a";
        id.region = (char *) "us-east-1";
        id.arch = (char *) "amd64";
        id.nodepool = (char *) "default";
        id.agent_version = (char *) "0.1.0";
        id.capacity_type = NODESMITH__V1__CAPACITY_TYPE__CAPACITY_TYPE_SPOT;
        cap.cpu_millis = 8000;
        cap.memory_bytes = 32LL << 30;
        cap.pods = 58;
        alloc.cpu_millis = 7910;
        alloc.memory_bytes = 30LL << 30;
        alloc.pods = 58;
        Nodesmith__V1__Pod *pp = calloc((size_t) pods, sizeof *pp);
        Nodesmith__V1__Pod **pv = calloc((size_t) pods, sizeof *pv);
        Nodesmith__V1__Resources *pr = calloc((size_t) pods, sizeof *pr);
        char (*names)[64] = calloc((size_t) pods, 64), (*uids)[48] = calloc((size_t) pods, 48);
        for (int i = 0; i < pods; i++) {
                nodesmith__v1__pod__init(&pp[i]);
                nodesmith__v1__resources__init(&pr[i]);
                snprintf(names[i], 64, "web-7d9c8b6f5d-%05d", i);
                snprintf(uids[i], 48, "0f9a7c52-%04x-4c1e-9d7a-%012x", i, idx);
                pp[i].namespace_ = (char *) "default";
                pp[i].name = names[i];
                pp[i].uid = uids[i];
                pp[i].owner_kind = (char *) "ReplicaSet";
                pp[i].owner_name = (char *) "web-7d9c8b6f5d";
                pp[i].phase = (char *) "Running";
                pr[i].cpu_millis = 250;
                pr[i].memory_bytes = 512LL << 20;
                pp[i].requests = &pr[i];
                pv[i] = &pp[i];
                req.cpu_millis += 250;
                req.memory_bytes += 512LL << 20;
        }
        rep.identity = &id;
        rep.capacity = &cap;
        rep.allocatable = &alloc;
        rep.requested = &req;
        rep.drain = &drain;
        rep.n_pods = (size_t) pods;
        rep.pods = pv;
        /* a changed state: one pod's phase differs */
        if (variant && pods > 0)
                pp[0].phase = (char *) "Pending";
        *len = nodesmith__v1__node_state__get_packed_size(&rep);
        uint8_t *buf = malloc(*len);
        nodesmith__v1__node_state__pack(&rep, buf);
        free(pp);
        free(pv);
        free(pr);
        free(names);
        free(uids);
        return buf;
}

/* Dials the coordinator on sock and waits for the connection (over TLS, its handshake). One TLS
 * configuration serves every dial: one per dial parsed the CA again for each connection and kept
 * it (the client held ~180 KiB per connection), which a simulator of thousands of agents on the
 * coordinator's machine cannot spend (a real agent has one connection). */
static int dial_one(nng_socket *sock, const char *url, const char *ca) {
        static nng_tls_config *cfg;
        nng_dialer d;
        nng_req0_open(sock);
        nng_socket_set_ms(*sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
        nng_dialer_create(&d, *sock, url);
        if (strncmp(url, "tls+", 4) == 0) {
                if (!cfg) {
                        nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT);
                        nng_tls_config_ca_file(cfg, ca);
                        nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED);
                        nng_tls_config_server_name(cfg, "localhost");
                }
                nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg); /* the dialer holds its own reference */
        }
        return nng_dialer_start(d, 0);
}

static double seconds_since(const struct timespec *t0) {
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        return (double) (t1.tv_sec - t0->tv_sec) + (double) (t1.tv_nsec - t0->tv_nsec) / 1e9;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "agents", required_argument, NULL, 'a' }, { "pods", required_argument, NULL, 'p' },
                { "seconds", required_argument, NULL, 's' }, { "token", required_argument, NULL, 't' },
                { "ca", required_argument, NULL, 'c' }, { "sockets", required_argument, NULL, 'k' },
                { "change-rate", required_argument, NULL, 'r' },
                { "pace-ms", required_argument, NULL, 'm' },
                { "interval-ms", required_argument, NULL, 'i' },
                { "id-offset", required_argument, NULL, 'o' },
                { "histogram", no_argument, NULL, 'H' },
                { "wait-stdin", no_argument, NULL, 'W' },
                { "trace", required_argument, NULL, 'T' },
                {}
        };
        int agents = 200, pods = 20, sockets = 0, id_offset = 0, c;
        bool histogram = false, wait_stdin = false;
        double seconds = 5;
        const char *token = "", *ca = NULL, *trace_file = NULL;
        while ((c = getopt_long(argc, argv, "", opts, NULL)) >= 0)
                switch (c) {
                case 'a': agents = atoi(optarg); break;
                case 'p': pods = atoi(optarg); break;
                case 's': seconds = atof(optarg); break;
                case 't': token = optarg; break;
                case 'c': ca = optarg; break;
                case 'k': sockets = atoi(optarg); break;
                case 'r': change_rate = atof(optarg); break;
                case 'm': pace_ms = atoi(optarg); break;
                case 'i': interval_ms = atoi(optarg); break;
                case 'o': id_offset = atoi(optarg); break;
                case 'H': histogram = true; break;
                case 'W': wait_stdin = true; break;
                case 'T': trace_file = optarg; break;
                default: return 2;
                }
        if (sockets <= 0 || sockets > agents)
                sockets = agents; /* like real agents: one socket (one pipe) each */
        if (optind >= argc || agents < 1) {
                fprintf(stderr, "usage: link URL [--agents N] [--pods P] [--seconds S] [--token T] [--ca F]\n");
                return 2;
        }
        if (id_offset < 0 || interval_ms < 0 || pace_ms < 0) {
                fprintf(stderr, "link: --id-offset, --interval-ms and --pace-ms take a number >= 0\n");
                return 2;
        }
        if (interval_ms > 0 && pace_ms > 0) {
                fprintf(stderr, "link: --interval-ms and --pace-ms exclude each other\n");
                return 2;
        }
        /* one descriptor per socket and a few: as many as the hard limit allows */
        struct rlimit nofile;
        if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
                nofile.rlim_cur = nofile.rlim_max;
                (void) setrlimit(RLIMIT_NOFILE, &nofile);
        }
        const char *url = argv[optind];
        Sim *sims = calloc((size_t) agents, sizeof *sims);
        for (int i = 0; i < agents; i++) {
                int idx = id_offset + i;
                sims[i].state[0] = make_state(idx, pods, 0, &sims[i].state_len[0]);
                sims[i].state[1] = make_state(idx, pods, 1, &sims[i].state_len[1]);
                snprintf(sims[i].iid, sizeof sims[i].iid, "i-%017x", idx);
                snprintf(sims[i].boot, sizeof sims[i].boot, "6b1c3c2e-0000-4000-8000-%012x", idx);
                sims[i].rng = (unsigned) idx * 2654435761u + 1;
                /* newer than any earlier run against the same coordinator */
                sims[i].seq = unix_ms() * 1000u; /* as an agent: its wall clock in microseconds */
        }
        bench_token = token;
        /* The dials, one after the other (over TLS, one handshake at a time). With --interval-ms
         * each agent registers as soon as its socket is up, as a real agent does, so that a
         * connection is never left unauthenticated for long (the coordinator closes those). */
        nng_socket *socks = calloc((size_t) sockets, sizeof *socks);
        struct timespec tw;
        clock_gettime(CLOCK_MONOTONIC, &tw);
        for (int k = 0; k < sockets; k++) {
                /* a connection the coordinator refused (its caps on connections that have not
                 * authenticated yet) is dialled again after 100 ms, as an agent's dialer does */
                int r;
                for (int attempt = 0; (r = dial_one(&socks[k], url, ca)) != 0; attempt++) {
                        nng_close(socks[k]);
                        if (attempt == 50) {
                                fprintf(stderr, "dial %s (socket %d of %d): %s\n", url, k + 1, sockets, nng_strerror(r));
                                return 1;
                        }
                        dial_retries++;
                        nng_msleep(100);
                }
                for (int i = k; i < agents; i += sockets) {
                        nng_ctx_open(&sims[i].ctx, socks[k]);
                        nng_aio_alloc(&sims[i].aio, on_aio, &sims[i]);
                        if (interval_ms > 0)
                                send_next(&sims[i]);
                }
        }
        double dial_s = seconds_since(&tw);
        double register_s = 0, reg_p50 = 0, reg_p99 = 0, reg_max = 0;
        unsigned long long reg_replies = 0;
        if (interval_ms > 0) {
                /* every registration answered (or failed), for at most 60 s more */
                for (int w = 0; w < 600 && atomic_load(&replies) + atomic_load(&refused) + atomic_load(&errors) +
                                                   atomic_load(&timeouts) < (unsigned long long) agents; w++)
                        nng_msleep(100);
                register_s = seconds_since(&tw);
                reg_replies = atomic_load(&replies);
                reg_p50 = latency_quantile_ms(0.5);
                reg_p99 = latency_quantile_ms(0.99);
                reg_max = (double) atomic_load(&max_reply_ns) / 1e6;
                latency_reset();
                /* each agent reports every interval from its registration on (the dials spread
                 * them over the interval); a first whole interval passes before the measurement */
                nng_msleep((nng_duration) interval_ms);
        } else {
                /* warm up: every agent registers once */
                for (int i = 0; i < agents; i++)
                        send_next(&sims[i]);
                nng_msleep(500);
        }
        unsigned long long r0 = atomic_load(&replies);
        /* latencies count from here: the registrations are not the steady state */
        latency_reset();
        tracing = trace_file != NULL;
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        nng_msleep((nng_duration) (seconds * 1000));
        unsigned long long r1 = atomic_load(&replies);
        double dt = seconds_since(&t0);
        for (int i = 0; i < agents; i++)
                atomic_store(&sims[i].stop, true);
        printf("{\"agents\": %d, \"id_offset\": %d, \"pods_per_report\": %d, \"change_rate\": %.3f, \"report_bytes\": %zu, "
               "\"seconds\": %.2f, \"replies\": %llu, \"reports_per_second\": %.0f, \"errors\": %llu, \"refused\": %llu, "
               "\"timeouts\": %llu, \"pace_ms\": %d, \"interval_ms\": %d, \"max_reply_ms\": %.1f, "
               "\"max_reply_at_unix_ms\": %llu, \"p50_reply_ms_upper\": %.1f, \"p99_reply_ms_upper\": %.1f, "
               "\"slow_replies\": %llu, \"warmup\": {\"dial_seconds\": %.2f, \"dial_retries\": %llu, \"dial_and_register_seconds\": %.2f, "
               "\"registered\": %llu, \"p50_ms\": %.1f, \"p99_ms\": %.1f, \"max_ms\": %.1f}",
               agents, id_offset, pods, change_rate, report_bytes, dt, r1 - r0, (double) (r1 - r0) / dt,
               atomic_load(&errors), atomic_load(&refused), atomic_load(&timeouts), pace_ms, interval_ms,
               (double) atomic_load(&max_reply_ns) / 1e6, atomic_load(&max_reply_at_unix_ms),
               latency_quantile_ms(0.5), latency_quantile_ms(0.99), atomic_load(&slow_replies), dial_s, dial_retries, register_s,
               reg_replies, reg_p50, reg_p99, reg_max);
        if (histogram) {
                fputs(", \"histogram\": ", stdout);
                print_histogram(stdout);
        }
        fputs("}\n", stdout);
        fflush(stdout);
        if (trace_file) {
                FILE *f = fopen(trace_file, "we");
                size_t n = atomic_load(&n_trace);
                n = n < TRACE_MAX ? n : TRACE_MAX;
                for (size_t i = 0; f && i < n; i++)
                        fprintf(f, "%llu %.1f\n", (unsigned long long) trace[i].sent_unix_ms,
                                trace[i].latency_us / 1000.0);
                if (f)
                        fclose(f);
        }
        /* --wait-stdin: the connections stay open until stdin ends, so that a driver can stop the
         * coordinator first (the side that closes first keeps the TIME_WAIT entries: the
         * coordinator's are all on its one port, ours would hold thousands of local ports) */
        if (wait_stdin) {
                char b[256];
                while (fread(b, 1, sizeof b, stdin) > 0)
                        ;
        }
        /* Tearing down hundreds of TLS pipes takes NNG a while and measures nothing. */
        _exit(0);
}
