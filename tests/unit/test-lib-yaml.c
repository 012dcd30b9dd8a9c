/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "yaml-json.h"

static void test_types(void **state) {
        const char *y = "a: 1\nb: 1.5\nc: \"1\"\nd: true\ne: ~\nf: 100m\ng: [x, 2]\nh:\n  i: null\n  j: '010'\n";
        cJSON *j = NULL;
        assert_int_equal(yaml_to_json(y, strlen(y), &j), 0);
        char *s = cJSON_PrintUnformatted(j);
        assert_string_equal(s, "{\"a\":1,\"b\":1.5,\"c\":\"1\",\"d\":true,\"e\":null,\"f\":\"100m\","
                               "\"g\":[\"x\",2],\"h\":{\"i\":null,\"j\":\"010\"}}");
        free(s);
        cJSON_Delete(j);
}

static void test_multi_document(void **state) {
        const char *y = "kind: A\n---\nkind: B\n---\n- 1\n";
        cJSON *j = NULL;
        assert_int_equal(yaml_documents_to_json(y, strlen(y), &j), 0);
        assert_int_equal(cJSON_GetArraySize(j), 3);
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 1), "kind")->valuestring, "B");
        cJSON_Delete(j);
        assert_int_equal(yaml_to_json(y, strlen(y), &j), 0);
        assert_string_equal(cJSON_GetObjectItem(j, "kind")->valuestring, "A");
        cJSON_Delete(j);
}

static void test_json_or_yaml(void **state) {
        cJSON *j = NULL;
        const char *js = "  {\"maxPods\": 29}\n";
        assert_int_equal(json_or_yaml_parse(js, strlen(js), &j), 0);
        assert_int_equal(cJSON_GetObjectItem(j, "maxPods")->valueint, 29);
        cJSON_Delete(j);
        const char *ys = "maxPods: 58\n";
        assert_int_equal(json_or_yaml_parse(ys, strlen(ys), &j), 0);
        assert_int_equal(cJSON_GetObjectItem(j, "maxPods")->valueint, 58);
        cJSON_Delete(j);
}

static void test_bad_and_bounded(void **state) {
        cJSON *j = NULL;
        log_set_max_level(LOG_EMERG);
        const char *bad = "a: [1, 2\nb: }\n";
        assert_int_equal(yaml_to_json(bad, strlen(bad), &j), -EBADMSG);
        /* "billion laughs": aliases multiply the nodes; the cap stops it */
        const char *bomb = "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                           "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                           "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
                           "g: [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n";
        assert_int_equal(yaml_to_json(bomb, strlen(bomb), &j), -E2BIG);
        size_t n = 200;
        char *deep = malloc(n * 2 + 2);
        memset(deep, '[', n);
        memset(deep + n, ']', n);
        deep[2 * n] = 0;
        assert_int_equal(yaml_to_json(deep, strlen(deep), &j), -E2BIG);
        free(deep);
        log_set_max_level(LOG_INFO);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_types),
                cmocka_unit_test(test_multi_document),
                cmocka_unit_test(test_json_or_yaml),
                cmocka_unit_test(test_bad_and_bounded),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
