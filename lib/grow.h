/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Bounded growth of malloc'ed arrays: room for `need` elements, doubling the capacity so that
 * appends cost amortised O(1), never past `max` elements (the caller's bound on its input). */

#include <stddef.h>

/* *p has room for *cap elements of size bytes each. Makes room for need: -ENOBUFS when need is
 * above max (or the byte size overflows), -ENOMEM when the allocation fails; *p and *cap are
 * unchanged on failure. The new capacity is the largest of need, twice *cap and 8, capped at max. */
int grow_array(void **p, size_t *cap, size_t size, size_t need, size_t max);

/* GROW(array, cap, need, max): grow_array() for a typed pointer variable or member. */
#define GROW(array, cap, need, max)                                                          \
        ({                                                                                   \
                void *_g_p = (array);                                                        \
                int _g_r = grow_array(&_g_p, &(cap), sizeof *(array), (need), (max));        \
                if (_g_r >= 0)                                                               \
                        (array) = _g_p;                                                      \
                _g_r;                                                                        \
        })
