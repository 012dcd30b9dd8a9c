/* SPDX-License-Identifier: Apache-2.0 */
/* Reading whole files under a size cap. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Read a whole file of at most max bytes into a NUL-terminated buffer. -EFBIG when larger,
 * -errno from open/read otherwise. ret_len may be NULL. */
int read_file_bounded(const char *path, size_t max, char **ret, size_t *ret_len);

/* The same, with trailing white space (newlines) removed: tokens, names, ids. */
int read_file_trimmed(const char *path, size_t max, char **ret);

/* A secret (a token, a private key): as read_file_bounded(), but -EPERM for a file that others
 * may read or write, or that its group may write (group read is let through: Kubernetes gives
 * Secret volumes 0440 under an fsGroup), and -EBADF for anything but a regular file. */
int read_secret_file(const char *path, size_t max, char **ret, size_t *ret_len);

/* Entries of a directory but the hidden ones ("." and ".." among them). -errno from opendir. */
int dir_count_entries(const char *path, uint64_t *ret);
