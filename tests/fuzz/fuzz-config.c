/* SPDX-License-Identifier: Apache-2.0 */
/* Configuration text: the daemons' config file ("key = value", comments; through config_load
 * with --config, as a daemon reads it) and the kubelet config (JSON or YAML) the agent reads
 * for allocatable. The first byte picks the parser. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent/capacity.h"
#include "config.h"
#include "coordinator/coordinator.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        log_set_max_level(LOG_EMERG);
        const char *text = (const char *) data + 1;
        size_t len = size - 1;
        if (data[0] & 1) {
                KubeletSettings k = {};
                (void) kubelet_config_parse(text, len, &k);
                free(k.root_dir);
                return 0;
        }
        int fd = memfd_create("nodesmith-config", MFD_CLOEXEC);
        if (fd < 0)
                return 0;
        if (write(fd, text, len) != (ssize_t) len) {
                close(fd);
                return 0;
        }
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        char *argv[] = { (char *) "nodesmith-coordinator", (char *) "--config", path, NULL };
        CoordConfig cfg = {};
        ConfigAction action;
        ConfigSource src = { .env_prefix = "NODESMITH_FUZZ_UNSET" };
        (void) config_load(coord_options, coord_options_count, &cfg, &src, 3, argv, &action, NULL);
        config_free(coord_options, coord_options_count, &cfg);
        close(fd);
        return 0;
}
