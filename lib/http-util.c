/* SPDX-License-Identifier: Apache-2.0 */
/* What lib/http.h offers the same whichever backend carries the requests. */
#include <stdlib.h>
#include <string.h>

#include "http.h"

char *http_escape(const char *s) {
        static const char hex[] = "0123456789ABCDEF";
        size_t n = strlen(s);
        char *o = malloc(n * 3 + 1), *p = o;
        if (!o)
                return NULL;
        for (; *s; s++) {
                unsigned char c = (unsigned char) *s;
                if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == '~')
                        *p++ = (char) c;
                else {
                        *p++ = '%';
                        *p++ = hex[c >> 4];
                        *p++ = hex[c & 15];
                }
        }
        *p = 0;
        return o;
}
