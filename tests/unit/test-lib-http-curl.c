/* SPDX-License-Identifier: Apache-2.0 */
/* lib/http-curl.c, the libcurl backend of lib/http.h (coordinator, nodesmithctl): the shared
 * cases of http-backend-cases.h, and SigV4 signing, which only this backend offers. */
#include "http-backend-cases.h"

static void test_sigv4_signs(void **state) {
        Fixture *f = *state;
        Server *s = server_start(&(Canned) { .pieces = {
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok" } }, 1);
        HttpRequest *req = request(f, "POST", s, "/");
        assert_int_equal(http_request_set_body(req, "Action=DescribeRegions", 22), 0);
        assert_int_equal(http_request_set_sigv4(req, "aws:amz:us-east-1:ec2", "AKIDEXAMPLE",
                                                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "tok"), 0);
        run(&f->res, req);
        assert_int_equal(f->res.status, 200);
        assert_non_null(strstr(s->last_request, "Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"));
        assert_non_null(strstr(s->last_request, "/us-east-1/ec2/aws4_request"));
        assert_non_null(strcasestr(s->last_request, "X-Amz-Security-Token: tok"));
        server_stop(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                HTTP_BACKEND_TESTS,
                cmocka_unit_test_setup_teardown(test_sigv4_signs, fixture_setup, fixture_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
