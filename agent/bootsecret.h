/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* The per-boot secret the coordinator issued (proto: NodeDirective.boot_secret) kept in a file, so
 * an agent restarted within the same kernel boot goes on presenting it instead of being refused
 * until its node counts as stale. The file holds "BOOT-ID HEX-SECRET\n", mode 0600, in a
 * directory of mode 0700; a file of another boot, or one others may read, is not used. */

#define BOOT_SECRET_SIZE 32

/* 0 with ret filled; -ENOENT: none; -ESTALE: another boot's; -EPERM: others may read it;
 * -EBADMSG: unreadable. */
int boot_secret_load(const char *path, const char *boot_id, uint8_t ret[BOOT_SECRET_SIZE]);
/* Written to a temporary file and renamed over path. */
int boot_secret_save(const char *path, const char *boot_id, const uint8_t secret[BOOT_SECRET_SIZE]);
