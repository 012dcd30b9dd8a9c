/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootsecret.h"
#include "fileio.h"
#include "macro.h"

#define LINE_MAX_LEN 256

int boot_secret_load(const char *path, const char *boot_id, uint8_t ret[BOOT_SECRET_SIZE]) {
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        int r = read_secret_file(path, LINE_MAX_LEN, &text, &len);
        if (r < 0)
                return r;
        char *sp = strchr(text, ' ');
        if (!sp)
                return -EBADMSG;
        *sp = 0;
        if (!streq(text, boot_id))
                r = -ESTALE;
        const char *hex = sp + 1;
        uint8_t out[BOOT_SECRET_SIZE];
        for (size_t i = 0; r >= 0 && i < BOOT_SECRET_SIZE; i++) {
                unsigned v;
                if (sscanf(hex + 2 * i, "%2x", &v) != 1)
                        r = -EBADMSG;
                out[i] = (uint8_t) v;
        }
        if (r >= 0)
                memcpy(ret, out, sizeof out);
        explicit_bzero(out, sizeof out);
        explicit_bzero(text, len);
        return r;
}

int boot_secret_save(const char *path, const char *boot_id, const uint8_t secret[BOOT_SECRET_SIZE]) {
        char dir[4096], tmp[4200], line[LINE_MAX_LEN];
        int n = snprintf(line, sizeof line, "%s ", boot_id);
        if (n < 0 || (size_t) n + 2 * BOOT_SECRET_SIZE + 2 > sizeof line || strlen(path) >= sizeof dir)
                return -ENAMETOOLONG;
        for (size_t i = 0; i < BOOT_SECRET_SIZE; i++)
                n += snprintf(line + n, sizeof line - (size_t) n, "%02x", secret[i]);
        line[n++] = '\n';

        /* the directory 0700, its parents as they are or 0755 (under a test root: made) */
        strcpy(dir, path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = 0;
                for (char *p = strchr(dir + 1, '/'); p; p = strchr(p + 1, '/')) {
                        *p = 0;
                        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        *p = '/';
                }
                if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                        return -errno;
        }
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        int r = fd < 0 ? -errno : 0;
        if (r == 0 && (fchmod(fd, 0600) < 0 || write(fd, line, (size_t) n) != n))
                r = -errno ?: -EIO;
        if (fd >= 0 && close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0)
                (void) unlink(tmp);
        explicit_bzero(line, sizeof line);
        return r;
}
