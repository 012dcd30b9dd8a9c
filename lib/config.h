/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One table of options per daemon serves the config file ("key = value", '#' comments), the
 * environment (PREFIX_KEY, dashes as underscores, upper case) and long flags (--key VALUE). The
 * precedence is flags > environment > file > defaults. */

typedef enum OptionType {
        OPTION_STRING,   /* char* (owned by the config struct) */
        OPTION_UINT,     /* uint64_t */
        OPTION_MSEC,     /* uint64_t milliseconds; "10s", "500ms", "2m", "1h", bare = seconds */
        OPTION_BOOL,     /* bool; a flag without value means true */
        OPTION_BYTES,    /* uint64_t; "4Mi", "512k", ... */
} OptionType;

typedef struct Option {
        const char *name;
        OptionType type;
        size_t offset;
        const char *def;   /* default, as text; NULL for none */
        const char *help;
} Option;

typedef enum ConfigAction {
        CONFIG_RUN,
        CONFIG_CHECK,      /* --check-config: validate, print the effective config, exit */
        CONFIG_HELP,
        CONFIG_VERSION,
        CONFIG_ONCE,       /* --once (the agent) */
} ConfigAction;

typedef struct ConfigSource {
        const char *default_file;  /* read if it exists and --config is not given */
        const char *env_prefix;    /* e.g. "NODESMITH_AGENT" */
        bool allow_once;
} ConfigSource;

/* Why config_load failed, naming the source (file:line, variable, flag). */
typedef struct ConfigError {
        char message[512];
} ConfigError;

/* Set every option to its default, then apply the file, the environment and argv. On failure
 * returns -errno and says why in *ret_error (when not NULL); nothing is logged. */
int config_load(const Option *opts, size_t n_opts, void *cfg, const ConfigSource *src, int argc,
                char **argv, ConfigAction *ret_action, ConfigError *ret_error);

/* Apply one "key = value" setting; used by config_load and by tests. */
int config_set(const Option *opts, size_t n_opts, void *cfg, const char *key, const char *value);

/* Free the strings the table owns in cfg. */
void config_free(const Option *opts, size_t n_opts, void *cfg);

void config_print(const Option *opts, size_t n_opts, const void *cfg, FILE *f);
void config_help(const Option *opts, size_t n_opts, const char *program, const char *summary,
                 FILE *f);

int parse_msec(const char *s, uint64_t *ret);
int parse_bool(const char *s, bool *ret);
