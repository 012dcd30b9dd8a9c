/* SPDX-License-Identifier: Apache-2.0 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "macro.h"
#include "quantity.h"

#define CONFIG_LINE_MAX 4096
#define CONFIG_FILE_MAX (1024 * 1024)

int parse_bool(const char *s, bool *ret) {
        static const char *const yes[] = { "1", "yes", "true", "on", "y" };
        static const char *const no[] = { "0", "no", "false", "off", "n" };
        for (size_t i = 0; i < ELEMENTSOF(yes); i++)
                if (strcasecmp(s, yes[i]) == 0) {
                        *ret = true;
                        return 0;
                }
        for (size_t i = 0; i < ELEMENTSOF(no); i++)
                if (strcasecmp(s, no[i]) == 0) {
                        *ret = false;
                        return 0;
                }
        return -EINVAL;
}

int parse_msec(const char *s, uint64_t *ret) {
        if (isempty(s))
                return -EINVAL;
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (errno != 0 || end == s || v < 0 || v > 1e12)
                return -EINVAL;
        double mult;
        if (*end == 0 || streq(end, "s"))
                mult = 1000;
        else if (streq(end, "ms"))
                mult = 1;
        else if (streq(end, "us"))
                mult = 0.001;
        else if (streq(end, "m") || streq(end, "min"))
                mult = 60000;
        else if (streq(end, "h"))
                mult = 3600000;
        else
                return -EINVAL;
        *ret = (uint64_t) (v * mult + 0.5);
        return 0;
}

static const Option *find_option(const Option *opts, size_t n, const char *key) {
        for (size_t i = 0; i < n; i++)
                if (streq(opts[i].name, key))
                        return &opts[i];
        return NULL;
}

static int option_apply(const Option *o, void *cfg, const char *value) {
        char *base = (char *) cfg + o->offset;
        int r;

        switch (o->type) {
        case OPTION_STRING:
                return free_and_strdup((char **) base, value);
        case OPTION_UINT: {
                char *end;
                errno = 0;
                unsigned long long v = strtoull(value, &end, 10);
                if (errno != 0 || end == value || *end != 0 || value[0] == '-')
                        return -EINVAL;
                *(uint64_t *) base = v;
                return 0;
        }
        case OPTION_MSEC:
                return parse_msec(value, (uint64_t *) base);
        case OPTION_BOOL:
                return parse_bool(value, (bool *) base);
        case OPTION_BYTES: {
                int64_t v;
                r = quantity_parse(value, &v);
                if (r < 0)
                        return r;
                if (v < 0)
                        return -EINVAL;
                *(uint64_t *) base = (uint64_t) v;
                return 0;
        }
        }
        return -EINVAL;
}

int config_set(const Option *opts, size_t n, void *cfg, const char *key, const char *value) {
        const Option *o = find_option(opts, n, key);
        if (!o)
                return -ENOENT;
        return option_apply(o, cfg, value);
}

static char *strip(char *s) {
        while (isspace((unsigned char) *s))
                s++;
        size_t l = strlen(s);
        while (l > 0 && isspace((unsigned char) s[l - 1]))
                s[--l] = 0;
        /* allow "quoted values" */
        if (l >= 2 && ((s[0] == '"' && s[l - 1] == '"') || (s[0] == '\'' && s[l - 1] == '\''))) {
                s[l - 1] = 0;
                s++;
        }
        return s;
}

/* Says why in err (when given) and returns -error: the daemon logs it, lib/ does not. */
_printf_(3, 4) static int config_fail(ConfigError *err, int error, const char *fmt, ...) {
        int saved = errno;
        if (err) {
                va_list ap;
                va_start(ap, fmt);
                (void) vsnprintf(err->message, sizeof err->message, fmt, ap);
                va_end(ap);
        }
        errno = saved;
        return -abs(error);
}

static int load_file(const Option *opts, size_t n, void *cfg, const char *path, bool must_exist,
                     ConfigError *err) {
        _cleanup_(fclosep_) FILE *f = fopen(path, "re");
        if (!f) {
                if (errno == ENOENT && !must_exist)
                        return 0;
                return config_fail(err, errno, "Failed to open config file %s: %s", path, strerror(errno));
        }
        char line[CONFIG_LINE_MAX];
        unsigned lineno = 0;
        size_t total = 0;
        while (fgets(line, sizeof line, f)) {
                lineno++;
                total += strlen(line);
                if (total > CONFIG_FILE_MAX)
                        return config_fail(err, EFBIG, "%s: file larger than %d bytes.", path,
                                               CONFIG_FILE_MAX);
                if (!strchr(line, '\n') && !feof(f))
                        return config_fail(err, EINVAL, "%s:%u: line too long.", path, lineno);
                char *s = strip(line);
                if (*s == 0 || *s == '#' || *s == ';')
                        continue;
                char *eq = strchr(s, '=');
                if (!eq)
                        return config_fail(err, EINVAL, "%s:%u: expected 'key = value'.", path, lineno);
                *eq = 0;
                char *key = strip(s), *value = strip(eq + 1);
                int r = config_set(opts, n, cfg, key, value);
                if (r == -ENOENT)
                        return config_fail(err, EINVAL, "%s:%u: unknown setting '%s'.", path, lineno, key);
                if (r < 0)
                        return config_fail(err, r, "%s:%u: invalid value '%s' for '%s'.", path, lineno,
                                               value, key);
        }
        if (ferror(f))
                return config_fail(err, EIO, "Failed to read %s.", path);
        return 0;
}

static void env_name(const char *prefix, const char *key, char *buf, size_t size) {
        snprintf(buf, size, "%s_%s", prefix, key);
        for (char *p = buf; *p; p++)
                *p = *p == '-' ? '_' : (char) toupper((unsigned char) *p);
}

int config_load(const Option *opts, size_t n, void *cfg, const ConfigSource *src, int argc,
                char **argv, ConfigAction *ret_action, ConfigError *err) {
        ConfigAction action = CONFIG_RUN;
        const char *file = NULL;
        int r;

        for (size_t i = 0; i < n; i++)
                if (opts[i].def) {
                        r = option_apply(&opts[i], cfg, opts[i].def);
                        if (r < 0)
                                return config_fail(err, r, "Bad built-in default for %s.", opts[i].name);
                }

        /* First pass: --config, --help, --version, --check-config, --once. */
        for (int i = 1; i < argc; i++) {
                if (streq(argv[i], "--config") || streq(argv[i], "-c")) {
                        if (i + 1 >= argc)
                                return config_fail(err, EINVAL, "--config needs a file.");
                        file = argv[++i];
                } else if (strncmp(argv[i], "--config=", 9) == 0)
                        file = argv[i] + 9;
                else if (streq(argv[i], "--help") || streq(argv[i], "-h"))
                        action = CONFIG_HELP;
                else if (streq(argv[i], "--version"))
                        action = CONFIG_VERSION;
        }
        if (action == CONFIG_HELP || action == CONFIG_VERSION) {
                *ret_action = action;
                return 0;
        }

        if (file)
                r = load_file(opts, n, cfg, file, true, err);
        else if (src->default_file)
                r = load_file(opts, n, cfg, src->default_file, false, err);
        else
                r = 0;
        if (r < 0)
                return r;

        if (src->env_prefix)
                for (size_t i = 0; i < n; i++) {
                        char name[128];
                        env_name(src->env_prefix, opts[i].name, name, sizeof name);
                        const char *v = getenv(name);
                        if (!v)
                                continue;
                        r = option_apply(&opts[i], cfg, v);
                        if (r < 0)
                                return config_fail(err, r, "Invalid value '%s' in $%s.", v, name);
                }

        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (streq(a, "--config") || streq(a, "-c")) {
                        i++;
                        continue;
                }
                if (strncmp(a, "--config=", 9) == 0)
                        continue;
                if (streq(a, "--check-config") || streq(a, "-n")) {
                        action = CONFIG_CHECK;
                        continue;
                }
                if (src->allow_once && streq(a, "--once")) {
                        action = CONFIG_ONCE;
                        continue;
                }
                if (strncmp(a, "--", 2) != 0)
                        return config_fail(err, EINVAL, "Unexpected argument '%s'.", a);

                char key[128];
                const char *value = NULL;
                const char *eq = strchr(a + 2, '=');
                size_t kl = eq ? (size_t) (eq - a - 2) : strlen(a + 2);
                if (kl == 0 || kl >= sizeof key)
                        return config_fail(err, EINVAL, "Bad option '%s'.", a);
                memcpy(key, a + 2, kl);
                key[kl] = 0;
                const Option *o = find_option(opts, n, key);
                if (!o)
                        return config_fail(err, EINVAL, "Unknown option '--%s'. See --help.", key);
                if (eq)
                        value = eq + 1;
                else if (o->type == OPTION_BOOL) {
                        /* "--flag" alone means yes; "--flag no" is taken only if it is a bool */
                        bool dummy;
                        if (i + 1 < argc && parse_bool(argv[i + 1], &dummy) >= 0)
                                value = argv[++i];
                        else
                                value = "true";
                }
                else if (i + 1 < argc)
                        value = argv[++i];
                else
                        return config_fail(err, EINVAL, "Option '--%s' needs a value.", key);
                r = option_apply(o, cfg, value);
                if (r < 0)
                        return config_fail(err, r, "Invalid value '%s' for --%s.", value, key);
        }

        *ret_action = action;
        return 0;
}

void config_free(const Option *opts, size_t n, void *cfg) {
        for (size_t i = 0; i < n; i++)
                if (opts[i].type == OPTION_STRING) {
                        char **p = (char **) ((char *) cfg + opts[i].offset);
                        free(*p);
                        *p = NULL;
                }
}

void config_print(const Option *opts, size_t n, const void *cfg, FILE *f) {
        for (size_t i = 0; i < n; i++) {
                const char *base = (const char *) cfg + opts[i].offset;
                switch (opts[i].type) {
                case OPTION_STRING: {
                        const char *s = *(char *const *) base;
                        /* never echo secrets */
                        bool secret = strstr(opts[i].name, "token") && !strstr(opts[i].name, "file");
                        fprintf(f, "%s = %s\n", opts[i].name,
                                !s ? "" : secret && *s ? "(set)" : s);
                        break;
                }
                case OPTION_UINT:
                case OPTION_BYTES:
                        fprintf(f, "%s = %llu\n", opts[i].name,
                                (unsigned long long) *(const uint64_t *) base);
                        break;
                case OPTION_MSEC:
                        fprintf(f, "%s = %llums\n", opts[i].name,
                                (unsigned long long) *(const uint64_t *) base);
                        break;
                case OPTION_BOOL:
                        fprintf(f, "%s = %s\n", opts[i].name, *(const bool *) base ? "yes" : "no");
                        break;
                }
        }
}

void config_help(const Option *opts, size_t n, const char *program, const char *summary, FILE *f) {
        fprintf(f, "Usage: %s [OPTIONS]\n%s\n\nOptions (also 'key = value' in the config file):\n",
                program, summary);
        fprintf(f, "  %-28s %s\n", "--config FILE", "read settings from FILE");
        fprintf(f, "  %-28s %s\n", "--check-config, -n", "validate the configuration and exit");
        for (size_t i = 0; i < n; i++) {
                char left[64];
                snprintf(left, sizeof left, "--%s%s", opts[i].name,
                         opts[i].type == OPTION_BOOL ? "" : " VALUE");
                fprintf(f, "  %-28s %s%s%s%s\n", left, opts[i].help, opts[i].def ? " [" : "",
                        opts[i].def ? opts[i].def : "", opts[i].def ? "]" : "");
        }
        fprintf(f, "  %-28s %s\n", "--help", "show this help");
        fprintf(f, "  %-28s %s\n", "--version", "show the version");
}
