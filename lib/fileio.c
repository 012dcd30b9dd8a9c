/* SPDX-License-Identifier: Apache-2.0 */
/* Bounded whole-file reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "macro.h"

int read_file_bounded(const char *path, size_t max, char **ret, size_t *ret_len) {
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        _cleanup_free_ char *buf = malloc(max + 1);
        if (!buf)
                return -ENOMEM;
        size_t n = fread(buf, 1, max + 1, f);
        if (ferror(f))
                return -EIO;
        if (n > max)
                return -EFBIG;
        buf[n] = 0;
        *ret = TAKE_PTR(buf);
        if (ret_len)
                *ret_len = n;
        return 0;
}

int read_file_trimmed(const char *path, size_t max, char **ret) {
        size_t n;
        char *buf;
        int r = read_file_bounded(path, max, &buf, &n);
        if (r < 0)
                return r;
        while (n > 0 && strchr(" \t\r\n", buf[n - 1]))
                n--;
        buf[n] = 0;
        *ret = buf;
        return 0;
}
