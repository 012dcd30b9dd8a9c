/* SPDX-License-Identifier: Apache-2.0 */
/* The connection guard's idle rule (lib/link-guard.c), on a real NNG REP socket over
 * tcp://127.0.0.1 and raw TCP peers that speak the SP header and then send what each case needs:
 * a peer whose bytes keep arriving (but that the server has not turned into a request) is not
 * idle; one that falls silent is closed after idle_timeout; one that trickles bytes without a
 * request is closed after the grace of 5 idle timeouts; a request stamped after the sweep read
 * the clock is fresh; the auth timeout is unchanged. And the handshake sweep: connections already
 * shut down do not fill the caps on unauthenticated ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "link-guard.h"
#include "macro.h"

#define IDLE_USEC (400 * 1000ULL)
#define AUTH_USEC (400 * 1000ULL)

typedef struct Fixture {
        nng_socket sock;
        LinkGuard *guard;
        uint16_t port; /* host order */
        _Atomic uint32_t last_pipe;
} Fixture;

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

static void sleep_usec(uint64_t usec) {
        struct timespec ts = { .tv_sec = (time_t) (usec / 1000000), .tv_nsec = (long) (usec % 1000000) * 1000 };
        nanosleep(&ts, NULL);
}

static void on_added(nng_pipe p, nng_pipe_ev ev, void *userdata) {
        Fixture *f = userdata;
        f->last_pipe = nng_pipe_id(p);
}

static int setup(void **state) {
        static Fixture f;
        memset(&f, 0, sizeof f);
        LinkLimits limits = { .auth_timeout_usec = AUTH_USEC, .idle_timeout_usec = IDLE_USEC };
        nng_listener l;
        nng_sockaddr sa;

        assert_int_equal(nng_rep0_open(&f.sock), 0);
        assert_int_equal(link_guard_new(&limits, &f.guard), 0);
        assert_int_equal(link_guard_attach(f.guard, f.sock), 0);
        assert_int_equal(nng_pipe_notify(f.sock, NNG_PIPE_EV_ADD_POST, on_added, &f), 0);
        assert_int_equal(nng_listener_create(&l, f.sock, "tcp://127.0.0.1:0"), 0);
        assert_int_equal(nng_listener_start(l, 0), 0);
        assert_int_equal(nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa), 0);
        link_guard_set_port(f.guard, sa.s_in.sa_port);
        f.port = ntohs(sa.s_in.sa_port);
        *state = &f;
        return 0;
}

static int teardown(void **state) {
        Fixture *f = *state;
        nng_close(f->sock);
        link_guard_free(f->guard);
        return 0;
}

/* A TCP peer past the SP header (a REQ0 peer): the server has made it a pipe. */
static int peer_connect(Fixture *f, nng_pipe *ret_pipe) {
        static const uint8_t hdr[8] = { 0, 'S', 'P', 0, 0, 0x30, 0, 0 }; /* REQ0 */
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(f->port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        uint8_t got[8];
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        f->last_pipe = 0;
        assert_true(fd >= 0);
        assert_int_equal(connect(fd, (struct sockaddr *) &a, sizeof a), 0);
        assert_int_equal(write(fd, hdr, sizeof hdr), (ssize_t) sizeof hdr);
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        assert_int_equal(poll(&pfd, 1, 5000), 1);
        assert_int_equal(read(fd, got, sizeof got), (ssize_t) sizeof got);
        for (unsigned i = 0; i < 500 && !f->last_pipe; i++)
                sleep_usec(10 * 1000);
        assert_int_not_equal(f->last_pipe, 0);
        *ret_pipe = (nng_pipe) { .id = f->last_pipe };
        return fd;
}

/* Whether the server closed the connection (end of stream or reset). */
static bool peer_closed(int fd) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        uint8_t b[64];
        if (poll(&pfd, 1, 0) != 1)
                return false;
        ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
        return n == 0 || (n < 0 && errno != EAGAIN);
}

/* Sweeps every 100 ms for usec; when trickle, the peer sends one byte of a request that never
 * completes before each sweep. Returns when the connection was closed (µs after start), or 0. */
static uint64_t sweep_for(Fixture *f, int fd, uint64_t usec, bool trickle) {
        static const uint8_t len[8] = { 0, 0, 0, 0, 0, 0, 0x10, 0 }; /* a 4 KiB request, never sent whole */
        uint64_t start = now_usec();
        unsigned sent = 0;
        while (now_usec() - start < usec) {
                if (trickle)
                        (void) !send(fd, sent < sizeof len ? &len[sent] : (const uint8_t *) "x", 1, MSG_NOSIGNAL);
                sent++;
                sleep_usec(100 * 1000);
                (void) link_guard_sweep(f->guard, now_usec());
                if (peer_closed(fd))
                        return MAX(now_usec() - start, 1u);
        }
        return 0;
}

static void test_arriving_bytes_are_not_idleness(void **state) {
        Fixture *f = *state;
        nng_pipe pipe;
        LinkGuardStats st;
        int fd = peer_connect(f, &pipe);

        link_guard_seen(f->guard, pipe, true, now_usec()); /* its first request was accepted */
        /* bytes keep arriving for 2.5 idle timeouts without a request being received: kept */
        assert_int_equal(sweep_for(f, fd, 5 * IDLE_USEC / 2, true), 0);
        link_guard_stats(f->guard, &st);
        assert_int_equal(st.closed_idle, 0);
        assert_true(st.idle_deferred >= 1);
        /* the bytes stop: closed after one idle timeout (and a sweep or two) */
        uint64_t closed = sweep_for(f, fd, 4 * IDLE_USEC, false);
        assert_true(closed >= IDLE_USEC - 200 * 1000);
        assert_true(closed > 0);
        link_guard_stats(f->guard, &st);
        assert_int_equal(st.closed_idle, 1);
        close(fd);
}

static void test_trickle_without_request_closed_after_grace(void **state) {
        Fixture *f = *state;
        nng_pipe pipe;
        LinkGuardStats st;
        int fd = peer_connect(f, &pipe);
        uint64_t start = now_usec();

        link_guard_seen(f->guard, pipe, true, start);
        /* kept past idle_timeout while bytes arrive, but not beyond 5 idle timeouts */
        uint64_t closed = sweep_for(f, fd, 10 * IDLE_USEC, true);
        assert_true(closed > 0);
        assert_true(closed > 4 * IDLE_USEC);
        link_guard_stats(f->guard, &st);
        assert_int_equal(st.closed_idle, 1);
        assert_true(st.idle_deferred >= 1);
        close(fd);
}

static void test_request_received_restarts_the_clock(void **state) {
        Fixture *f = *state;
        nng_pipe pipe;
        LinkGuardStats st;
        int fd = peer_connect(f, &pipe);

        link_guard_seen(f->guard, pipe, true, now_usec());
        /* a request received now and then (and bytes between): kept beyond the grace */
        for (unsigned i = 0; i < 4; i++) {
                assert_int_equal(sweep_for(f, fd, 2 * IDLE_USEC, true), 0);
                link_guard_seen(f->guard, pipe, true, now_usec());
        }
        link_guard_stats(f->guard, &st);
        assert_int_equal(st.closed_idle, 0);
        close(fd);
}

static void test_silent_peer_closed_after_idle_timeout(void **state) {
        Fixture *f = *state;
        nng_pipe pipe;
        LinkGuardStats st;
        int fd = peer_connect(f, &pipe);

        sleep_usec(50 * 1000); /* its last bytes (the SP header) well before its request was received */
        link_guard_seen(f->guard, pipe, true, now_usec());
        uint64_t closed = sweep_for(f, fd, 4 * IDLE_USEC, false);
        assert_true(closed > 0);
        assert_true(closed < 3 * IDLE_USEC);
        link_guard_stats(f->guard, &st);
        assert_int_equal(st.closed_idle, 1);
        assert_int_equal(st.idle_deferred, 0);
        close(fd);
}

static void test_request_stamped_after_the_sweeps_clock_is_fresh(void **state) {
        Fixture *f = *state;
        nng_pipe pipe;
        LinkGuardStats st;
        int fd = peer_connect(f, &pipe);
        uint64_t now = now_usec();

        /* a request received by one of NNG's threads just after the sweep read the clock */
        link_guard_seen(f->guard, pipe, true, now + 1000);
        assert_int_equal(link_guard_sweep(f->guard, now), 0);
        assert_false(peer_closed(fd));
        link_guard_stats(f->guard, &st);
        assert_int_equal(st.closed_idle, 0);
        close(fd);
}

static void test_trickle_does_not_delay_auth_timeout(void **state) {
        Fixture *f = *state;
        nng_pipe pipe;
        LinkGuardStats st;
        int fd = peer_connect(f, &pipe);

        /* never authenticated: closed after auth_timeout whatever arrives */
        uint64_t closed = sweep_for(f, fd, 4 * AUTH_USEC, true);
        assert_true(closed > 0);
        assert_true(closed < 3 * AUTH_USEC);
        link_guard_stats(f->guard, &st);
        assert_int_equal(st.closed_auth_timeout, 1);
        assert_int_equal(st.idle_deferred, 0);
        close(fd);
}

/* Connections to the port that are not pipes, held by this process as NNG holds those it has not
 * read yet: ones already shut down (FIN sent, the peer still open) do not take the places of
 * max_unauthenticated, so a new connection beyond them is kept, not shut down as over the cap.
 * A plain listening socket stands in for NNG's (the sweep looks only at the descriptors). */
static void test_shut_down_connections_do_not_fill_the_caps(void **state) {
        enum { CAP = 4 };
        LinkLimits limits = { .max_unauthenticated = CAP, .auth_timeout_usec = 60 * 1000000ULL };
        _cleanup_(link_guard_freep) LinkGuard *g = NULL;
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t al = sizeof a;
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), client[CAP + 2], server[CAP + 2];
        LinkGuardStats st;
        (void) state;

        assert_true(lfd >= 0);
        assert_int_equal(bind(lfd, (struct sockaddr *) &a, sizeof a), 0);
        assert_int_equal(listen(lfd, 16), 0);
        assert_int_equal(getsockname(lfd, (struct sockaddr *) &a, &al), 0);
        assert_int_equal(link_guard_new(&limits, &g), 0);
        link_guard_set_port(g, a.sin_port);
        for (int i = 0; i < CAP + 2; i++) {
                client[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                assert_int_equal(connect(client[i], (struct sockaddr *) &a, sizeof a), 0);
                server[i] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                assert_true(server[i] >= 0);
        }
        /* the first CAP + 1 were shut down and are still held: FIN_WAIT2, their peers open */
        for (int i = 0; i <= CAP; i++)
                assert_int_equal(shutdown(server[i], SHUT_RDWR), 0);
        sleep_usec(100 * 1000);
        (void) link_guard_sweep(g, now_usec());
        link_guard_stats(g, &st);
        assert_int_equal(st.handshakes, 1); /* the last one, still in its handshake */
        assert_int_equal(st.handshakes_closing, CAP + 1);
        assert_int_equal(st.handshakes_closed_limit, 0);
        assert_false(peer_closed(client[CAP + 1]));

        /* a second sweep: the same; the live one is not shut down as beyond the cap */
        (void) link_guard_sweep(g, now_usec());
        link_guard_stats(g, &st);
        assert_int_equal(st.handshakes, 1);
        assert_int_equal(st.handshakes_closed_limit, 0);
        assert_false(peer_closed(client[CAP + 1]));

        /* the cap still holds for live connections: CAP + 1 of them, the youngest is shut down */
        int more[CAP], smore[CAP];
        for (int i = 0; i < CAP; i++) {
                more[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                assert_int_equal(connect(more[i], (struct sockaddr *) &a, sizeof a), 0);
                smore[i] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                assert_true(smore[i] >= 0);
        }
        (void) link_guard_sweep(g, now_usec());
        link_guard_stats(g, &st);
        assert_int_equal(st.handshakes, CAP);
        assert_int_equal(st.handshakes_closed_limit, 1);
        assert_false(peer_closed(client[CAP + 1])); /* the oldest keeps its place */

        for (int i = 0; i < CAP; i++) {
                close(more[i]);
                close(smore[i]);
        }
        for (int i = 0; i < CAP + 2; i++) {
                close(client[i]);
                close(server[i]);
        }
        close(lfd);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_arriving_bytes_are_not_idleness, setup, teardown),
                cmocka_unit_test_setup_teardown(test_trickle_without_request_closed_after_grace, setup, teardown),
                cmocka_unit_test_setup_teardown(test_request_received_restarts_the_clock, setup, teardown),
                cmocka_unit_test_setup_teardown(test_silent_peer_closed_after_idle_timeout, setup, teardown),
                cmocka_unit_test_setup_teardown(test_request_stamped_after_the_sweeps_clock_is_fresh, setup, teardown),
                cmocka_unit_test_setup_teardown(test_trickle_does_not_delay_auth_timeout, setup, teardown),
                cmocka_unit_test(test_shut_down_connections_do_not_fill_the_caps),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
