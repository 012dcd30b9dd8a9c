/* SPDX-License-Identifier: Apache-2.0 */
/* Reading one value back from the Prometheus text a module renders, for unit tests. */
#pragma once

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "strbuf.h"

/* The value of the unlabelled metric name in what render(obj) writes (the test fails when it is
 * not there). */
#define METRIC_VALUE(render, obj, name)                                                             \
        ({                                                                                          \
                StrBuf _b;                                                                          \
                strbuf_init(&_b, 1 << 20);                                                          \
                render(obj, &_b);                                                                   \
                assert_int_equal(_b.error, 0);                                                      \
                unsigned long _v = metric_text_value(_b.data, name);                                \
                strbuf_done(&_b);                                                                   \
                _v;                                                                                 \
        })

static _unused_ unsigned long metric_text_value(const char *text, const char *name) {
        char key[160];
        snprintf(key, sizeof key, "\n%s ", name);
        const char *m = text ? strstr(text, key) : NULL;
        assert_non_null(m);
        return strtoul(m + strlen(key), NULL, 10);
}
