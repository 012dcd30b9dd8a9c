/* SPDX-License-Identifier: Apache-2.0 */
/* Bounded whole-file reads; counting a directory's entries. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "macro.h"

static int read_stream_bounded(FILE *f, size_t max, char **ret, size_t *ret_len) {
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

int read_file_bounded(const char *path, size_t max, char **ret, size_t *ret_len) {
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        return read_stream_bounded(f, max, ret, ret_len);
}

int read_secret_file(const char *path, size_t max, char **ret, size_t *ret_len) {
        struct stat st;
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        int r = fstat(fd, &st) < 0                         ? -errno
                : !S_ISREG(st.st_mode)                     ? -EBADF
                : (st.st_mode & (S_IWGRP | S_IRWXO)) != 0 ? -EPERM
                                                           : 0;
        if (r < 0) {
                close(fd);
                return r;
        }
        _cleanup_fclose_ FILE *f = fdopen(fd, "re");
        if (!f) {
                close(fd);
                return -errno;
        }
        return read_stream_bounded(f, max, ret, ret_len);
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

int dir_count_entries(const char *path, uint64_t *ret) {
        DIR *d = opendir(path);
        if (!d)
                return -errno;
        uint64_t n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(d);
        *ret = n;
        return 0;
}
