/* SPDX-License-Identifier: Apache-2.0 */
/* lib/http-nng.c, NNG's HTTP client behind lib/http.h (the agent): the shared cases of
 * http-backend-cases.h, keep-alive, and the SigV4 refusal. */
#include "http-backend-cases.h"

static void test_sigv4_refused(void **state) {
        Fixture *f = *state;
        HttpRequest *req = request(f, "GET", NULL, "/");
        assert_int_equal(http_request_set_sigv4(req, "aws:amz:us-east-1:ec2", "a", "b", NULL),
                         -EOPNOTSUPP);
        http_request_free(req);
}

/* A kept connection the server closed is retried once on a new one (docs/http.md). */
static void test_closed_keepalive_retried(void **state) {
        Fixture *f = *state;
        Canned c[] = { { .pieces = { "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst" } },
                       { .pieces = { "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond" } } };
        Server *s = server_start(c, 2);
        run(&f->res, request(f, "GET", s, "/a"));
        assert_string_equal(f->res.body, "first");
        usleep(100000); /* the server has closed the connection the client keeps */
        run(&f->res, request(f, "GET", s, "/b"));
        assert_int_equal(f->res.error, 0);
        assert_string_equal(f->res.body, "second");
        assert_non_null(strstr(s->last_request, "GET /b HTTP/1.1"));
        server_stop(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                HTTP_BACKEND_TESTS,
                cmocka_unit_test_setup_teardown(test_sigv4_refused, fixture_setup, fixture_teardown),
                cmocka_unit_test_setup_teardown(test_closed_keepalive_retried, fixture_setup,
                                                fixture_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
