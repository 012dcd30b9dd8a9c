/* SPDX-License-Identifier: Apache-2.0 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "log.h"
#include "macro.h"
#include "yaml-json.h"

typedef struct Walk {
        yaml_document_t *doc;
        size_t nodes;
        int error;
} Walk;

static bool is_null(const char *s, size_t n) {
        return n == 0 || (n == 1 && s[0] == '~') || (n == 4 && (!strncmp(s, "null", 4) ||
                                                                 !strncmp(s, "Null", 4) ||
                                                                 !strncmp(s, "NULL", 4)));
}

static int bool_value(const char *s, size_t n) {
        if ((n == 4 && (!strncmp(s, "true", 4) || !strncmp(s, "True", 4) || !strncmp(s, "TRUE", 4))))
                return 1;
        if ((n == 5 && (!strncmp(s, "false", 5) || !strncmp(s, "False", 5) || !strncmp(s, "FALSE", 5))))
                return 0;
        return -1;
}

/* YAML 1.2 core schema numbers: [-+]?[0-9]+, 0o.., 0x.., floats, .inf, .nan */
static bool number_value(const char *s, size_t n, double *ret) {
        char buf[64];
        if (n == 0 || n >= sizeof buf)
                return false;
        memcpy(buf, s, n);
        buf[n] = 0;
        char *end;
        if (!strcmp(buf, ".inf") || !strcmp(buf, "+.inf") || !strcmp(buf, ".nan") || !strcmp(buf, "-.inf"))
                return false; /* not representable in JSON: keep as string */
        if (n > 2 && buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'o')) {
                errno = 0;
                unsigned long long v = strtoull(buf + 2, &end, buf[1] == 'x' ? 16 : 8);
                if (errno || *end)
                        return false;
                *ret = (double) v;
                return true;
        }
        const char *p = buf;
        if (*p == '-' || *p == '+')
                p++;
        if (!isdigit((unsigned char) *p) && !(*p == '.' && isdigit((unsigned char) p[1])))
                return false;
        for (const char *q = p; *q; q++)
                if (!isdigit((unsigned char) *q) && *q != '.' && *q != 'e' && *q != 'E' && *q != '-' && *q != '+')
                        return false;
        errno = 0;
        double v = strtod(buf, &end);
        if (errno || *end || !isfinite(v))
                return false;
        *ret = v;
        return true;
}

static cJSON *convert(Walk *w, yaml_node_t *node, unsigned depth) {
        if (!node || w->error)
                return NULL;
        if (depth > YAML_JSON_MAX_DEPTH || ++w->nodes > YAML_JSON_MAX_NODES) {
                w->error = -E2BIG;
                return NULL;
        }
        switch (node->type) {
        case YAML_SCALAR_NODE: {
                const char *s = (const char *) node->data.scalar.value;
                size_t n = node->data.scalar.length;
                if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
                        double d;
                        int b;
                        if (is_null(s, n))
                                return cJSON_CreateNull();
                        if ((b = bool_value(s, n)) >= 0)
                                return cJSON_CreateBool(b);
                        if (number_value(s, n, &d))
                                return cJSON_CreateNumber(d);
                }
                char *copy = strndup(s, n);
                if (!copy)
                        return NULL;
                cJSON *j = cJSON_CreateString(copy);
                free(copy);
                return j;
        }
        case YAML_SEQUENCE_NODE: {
                cJSON *a = cJSON_CreateArray();
                if (!a)
                        return NULL;
                for (yaml_node_item_t *i = node->data.sequence.items.start;
                     i < node->data.sequence.items.top; i++) {
                        cJSON *v = convert(w, yaml_document_get_node(w->doc, *i), depth + 1);
                        if (!v) {
                                cJSON_Delete(a);
                                return NULL;
                        }
                        cJSON_AddItemToArray(a, v);
                }
                return a;
        }
        case YAML_MAPPING_NODE: {
                cJSON *o = cJSON_CreateObject();
                if (!o)
                        return NULL;
                for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
                     p < node->data.mapping.pairs.top; p++) {
                        yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
                        if (!k || k->type != YAML_SCALAR_NODE) {
                                w->error = -EBADMSG; /* JSON keys are strings */
                                cJSON_Delete(o);
                                return NULL;
                        }
                        char *key = strndup((const char *) k->data.scalar.value, k->data.scalar.length);
                        cJSON *v = key ? convert(w, yaml_document_get_node(w->doc, p->value), depth + 1) : NULL;
                        if (!v) {
                                free(key);
                                cJSON_Delete(o);
                                return NULL;
                        }
                        /* a repeated key: the last one wins, as in most YAML loaders */
                        if (cJSON_GetObjectItemCaseSensitive(o, key))
                                cJSON_ReplaceItemInObjectCaseSensitive(o, key, v);
                        else
                                cJSON_AddItemToObject(o, key, v);
                        free(key);
                }
                return o;
        }
        default:
                return cJSON_CreateNull();
        }
}

static int load_all(const char *text, size_t len, bool all, cJSON **ret) {
        yaml_parser_t parser;
        int r = 0;

        if (len > YAML_JSON_MAX_INPUT)
                return -E2BIG;
        if (!yaml_parser_initialize(&parser))
                return -ENOMEM;
        yaml_parser_set_input_string(&parser, (const unsigned char *) text, len);

        cJSON *docs = cJSON_CreateArray();
        if (!docs) {
                yaml_parser_delete(&parser);
                return -ENOMEM;
        }
        size_t total = 0;
        for (;;) {
                yaml_document_t doc;
                if (!yaml_parser_load(&parser, &doc)) {
                        log_debug("YAML error at line %zu: %s", parser.problem_mark.line + 1,
                                  parser.problem ? parser.problem : "syntax error");
                        r = -EBADMSG;
                        break;
                }
                yaml_node_t *root = yaml_document_get_root_node(&doc);
                if (!root) { /* end of stream */
                        yaml_document_delete(&doc);
                        break;
                }
                Walk w = { .doc = &doc, .nodes = total };
                cJSON *j = convert(&w, root, 0);
                total = w.nodes;
                yaml_document_delete(&doc);
                if (!j) {
                        r = w.error < 0 ? w.error : -ENOMEM;
                        break;
                }
                cJSON_AddItemToArray(docs, j);
                if (!all)
                        break;
        }
        yaml_parser_delete(&parser);
        if (r < 0) {
                cJSON_Delete(docs);
                return r;
        }
        if (all) {
                *ret = docs;
                return 0;
        }
        cJSON *first = cJSON_DetachItemFromArray(docs, 0);
        cJSON_Delete(docs);
        *ret = first ? first : cJSON_CreateNull();
        return *ret ? 0 : -ENOMEM;
}

int yaml_to_json(const char *text, size_t len, cJSON **ret) {
        return load_all(text, len, false, ret);
}

int yaml_documents_to_json(const char *text, size_t len, cJSON **ret) {
        return load_all(text, len, true, ret);
}

int json_or_yaml_parse(const char *text, size_t len, cJSON **ret) {
        const char *p = text;
        while (p < text + len && isspace((unsigned char) *p))
                p++;
        if (p < text + len && (*p == '{' || *p == '[')) {
                const char *end = NULL;
                cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
                if (j) {
                        while (end && end < text + len && isspace((unsigned char) *end))
                                end++;
                        if (!end || end >= text + len || *end == 0) {
                                *ret = j;
                                return 0;
                        }
                        cJSON_Delete(j);
                }
                /* JSON-looking but not JSON: YAML flow style may still parse */
        }
        return yaml_to_json(text, len, ret);
}
