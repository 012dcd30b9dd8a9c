/* SPDX-License-Identifier: Apache-2.0 */
/* Bounded, amortised growth of malloc'ed arrays (grow.h). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "grow.h"
#include "macro.h"

int grow_array(void **p, size_t *cap, size_t size, size_t need, size_t max) {
        if (need <= *cap)
                return 0;
        if (size == 0 || need > max || need > SIZE_MAX / size)
                return -ENOBUFS;
        size_t n = MAX(need, (size_t) 8);
        if (*cap <= SIZE_MAX / 2)
                n = MAX(n, *cap * 2);
        n = MIN(n, max);
        n = MIN(n, SIZE_MAX / size);
        void *q = realloc(*p, n * size);
        if (!q)
                return -ENOMEM;
        *p = q;
        *cap = n;
        return 0;
}
