/* SPDX-License-Identifier: Apache-2.0 */

#include <math.h>
#include <stdio.h>
#include <yaml.h>

#include "grow.h"
#include "log.h"
#include "macro.h"
#include "yaml-json.h"

typedef struct Anchor {
        char *name;
        cJSON *value; /* owned by the tree being built; copied on use */
} Anchor;

typedef struct Ctx {
        yaml_parser_t parser;
        Anchor *anchors;
        size_t n_anchors, cap_anchors;
        size_t nodes;
        char *err;
        size_t errlen;
} Ctx;

static void set_error(Ctx *c, const char *fmt, size_t line, size_t col, const char *what) {
        if (!c->err || c->errlen == 0)
                return;
        snprintf(c->err, c->errlen, fmt, line, col, what ? what : "");
}

static void parser_error(Ctx *c) {
        const yaml_mark_t *m = c->parser.problem ? &c->parser.problem_mark : &c->parser.context_mark;
        set_error(c, "line %zu, column %zu: %s", m->line + 1, m->column + 1,
                  c->parser.problem ? c->parser.problem : "invalid YAML");
}

static int count_nodes(Ctx *c, const cJSON *j) {
        size_t n = 0;
        const cJSON *stack[YAML_JSON_MAX_DEPTH + 2];
        size_t sp = 0;
        stack[sp++] = j;
        while (sp > 0) {
                const cJSON *x = stack[--sp];
                n++;
                for (const cJSON *ch = x->child; ch; ch = ch->next) {
                        if (sp >= ELEMENTSOF(stack))
                                return -E2BIG;
                        if (ch->child)
                                stack[sp++] = ch;
                        else
                                n++;
                }
        }
        c->nodes += n;
        return c->nodes > YAML_JSON_MAX_NODES ? -E2BIG : 0;
}

static int anchor_add(Ctx *c, const char *name, cJSON *value) {
        if (!name)
                return 0;
        int r = GROW(c->anchors, c->cap_anchors, c->n_anchors + 1, (size_t) YAML_JSON_MAX_NODES);
        if (r < 0)
                return r;
        char *n = strdup(name);
        if (!n)
                return -ENOMEM;
        c->anchors[c->n_anchors++] = (Anchor) { n, value };
        return 0;
}

static cJSON *anchor_find(Ctx *c, const char *name) {
        /* the latest definition wins */
        for (size_t i = c->n_anchors; i-- > 0;)
                if (streq(c->anchors[i].name, name))
                        return c->anchors[i].value;
        return NULL;
}

static bool str_in(const char *s, const char *const *list) {
        for (; *list; list++)
                if (streq(s, *list))
                        return true;
        return false;
}

static cJSON *plain_scalar(const char *v, size_t len) {
        static const char *const nulls[] = { "~", "null", "Null", "NULL", NULL };
        static const char *const trues[] = { "true", "True", "TRUE", NULL };
        static const char *const falses[] = { "false", "False", "FALSE", NULL };
        if (len == 0 || str_in(v, nulls))
                return cJSON_CreateNull();
        if (str_in(v, trues))
                return cJSON_CreateTrue();
        if (str_in(v, falses))
                return cJSON_CreateFalse();
        char *end;
        /* integers: [-+]?[0-9]+, 0o[0-7]+, 0x[0-9a-fA-F]+ */
        if (v[0] == '0' && (v[1] == 'x' || v[1] == 'o') && v[2]) {
                errno = 0;
                unsigned long long x = strtoull(v + 2, &end, v[1] == 'x' ? 16 : 8);
                if (!*end && errno == 0)
                        return cJSON_CreateNumber((double) x);
                return cJSON_CreateString(v);
        }
        const char *p = v;
        if (*p == '-' || *p == '+')
                p++;
        if (*p >= '0' && *p <= '9') {
                bool digits_only = true, num = true;
                bool seen_dot = false, seen_e = false;
                for (const char *q = p; *q; q++) {
                        if (*q >= '0' && *q <= '9')
                                continue;
                        digits_only = false;
                        if (*q == '.' && !seen_dot && !seen_e)
                                seen_dot = true;
                        else if ((*q == 'e' || *q == 'E') && !seen_e) {
                                seen_e = true;
                                if (q[1] == '+' || q[1] == '-')
                                        q++;
                                if (!(q[1] >= '0' && q[1] <= '9'))
                                        num = false;
                        } else
                                num = false;
                }
                if (digits_only || num) {
                        errno = 0;
                        double d = strtod(v, &end);
                        if (!*end && errno == 0)
                                return cJSON_CreateNumber(d);
                }
        } else if (*p == '.' && p[1] >= '0' && p[1] <= '9') {
                double d = strtod(v, &end);
                if (!*end)
                        return cJSON_CreateNumber(d);
        }
        return cJSON_CreateString(v);
}

static int parse_node(Ctx *c, yaml_event_t *ev, unsigned depth, cJSON **ret);

static int next_event(Ctx *c, yaml_event_t *ev) {
        if (!yaml_parser_parse(&c->parser, ev)) {
                parser_error(c);
                return -EBADMSG;
        }
        return 0;
}

static int merge_into(cJSON *obj, const cJSON *src) {
        if (!cJSON_IsObject(src))
                return -EBADMSG;
        for (const cJSON *ch = src->child; ch; ch = ch->next) {
                if (cJSON_GetObjectItemCaseSensitive(obj, ch->string))
                        continue;
                cJSON *d = cJSON_Duplicate(ch, true);
                if (!d)
                        return -ENOMEM;
                cJSON_AddItemToObject(obj, ch->string, d);
        }
        return 0;
}

static int parse_mapping(Ctx *c, unsigned depth, cJSON *obj) {
        cJSON *merges = NULL; /* "<<" values, applied at the end: explicit keys win */
        int r = 0;
        for (;;) {
                yaml_event_t ev;
                r = next_event(c, &ev);
                if (r < 0)
                        break;
                if (ev.type == YAML_MAPPING_END_EVENT) {
                        yaml_event_delete(&ev);
                        break;
                }
                cJSON *key = NULL;
                r = parse_node(c, &ev, depth + 1, &key);
                yaml_event_delete(&ev);
                if (r < 0)
                        break;
                char kbuf[64];
                const char *k;
                if (cJSON_IsString(key))
                        k = key->valuestring;
                else if (cJSON_IsNumber(key)) {
                        snprintf(kbuf, sizeof(kbuf), "%.17g", key->valuedouble);
                        k = kbuf;
                } else if (cJSON_IsBool(key))
                        k = cJSON_IsTrue(key) ? "true" : "false";
                else if (cJSON_IsNull(key))
                        k = "null";
                else {
                        cJSON_Delete(key);
                        set_error(c, "line %zu, column %zu: %s", c->parser.mark.line + 1,
                                  c->parser.mark.column + 1, "complex mapping keys are not supported");
                        r = -EBADMSG;
                        break;
                }
                yaml_event_t vev;
                r = next_event(c, &vev);
                if (r < 0) {
                        cJSON_Delete(key);
                        break;
                }
                cJSON *val = NULL;
                r = parse_node(c, &vev, depth + 1, &val);
                yaml_event_delete(&vev);
                if (r < 0) {
                        cJSON_Delete(key);
                        break;
                }
                if (streq(k, "<<") && cJSON_IsString(key)) {
                        if (!merges)
                                merges = cJSON_CreateArray();
                        if (!merges) {
                                cJSON_Delete(key);
                                cJSON_Delete(val);
                                r = -ENOMEM;
                                break;
                        }
                        cJSON_AddItemToArray(merges, val);
                        cJSON_Delete(key);
                        continue;
                }
                /* duplicate keys: the last one wins, like most Kubernetes tooling */
                cJSON_DeleteItemFromObjectCaseSensitive(obj, k);
                cJSON_AddItemToObject(obj, k, val);
                cJSON_Delete(key);
        }
        if (r >= 0 && merges) {
                for (const cJSON *m = merges->child; m && r >= 0; m = m->next) {
                        if (cJSON_IsArray(m)) {
                                for (const cJSON *e = m->child; e && r >= 0; e = e->next)
                                        r = merge_into(obj, e);
                        } else
                                r = merge_into(obj, m);
                }
                if (r == -EBADMSG)
                        set_error(c, "line %zu, column %zu: %s", c->parser.mark.line + 1,
                                  c->parser.mark.column + 1, "a merge key (<<) needs a mapping");
        }
        cJSON_Delete(merges);
        return r;
}

static int parse_sequence(Ctx *c, unsigned depth, cJSON *arr) {
        for (;;) {
                yaml_event_t ev;
                int r = next_event(c, &ev);
                if (r < 0)
                        return r;
                if (ev.type == YAML_SEQUENCE_END_EVENT) {
                        yaml_event_delete(&ev);
                        return 0;
                }
                cJSON *item = NULL;
                r = parse_node(c, &ev, depth + 1, &item);
                yaml_event_delete(&ev);
                if (r < 0)
                        return r;
                cJSON_AddItemToArray(arr, item);
        }
}

static int parse_node(Ctx *c, yaml_event_t *ev, unsigned depth, cJSON **ret) {
        if (depth > YAML_JSON_MAX_DEPTH) {
                set_error(c, "line %zu, column %zu: %s", ev->start_mark.line + 1, ev->start_mark.column + 1,
                          "nested too deeply");
                return -E2BIG;
        }
        if (++c->nodes > YAML_JSON_MAX_NODES)
                return -E2BIG;
        cJSON *v = NULL;
        int r = 0;
        const char *anchor = NULL;
        switch (ev->type) {
        case YAML_SCALAR_EVENT: {
                const char *val = (const char *) ev->data.scalar.value;
                size_t len = ev->data.scalar.length;
                const char *tag = (const char *) ev->data.scalar.tag;
                anchor = (const char *) ev->data.scalar.anchor;
                if (strlen(val) != len) {
                        set_error(c, "line %zu, column %zu: %s", ev->start_mark.line + 1,
                                  ev->start_mark.column + 1, "NUL byte in a scalar");
                        return -EBADMSG;
                }
                if (tag && streq(tag, YAML_STR_TAG))
                        v = cJSON_CreateString(val);
                else if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
                        v = cJSON_CreateString(val);
                else
                        v = plain_scalar(val, len);
                if (!v)
                        return -ENOMEM;
                break;
        }
        case YAML_SEQUENCE_START_EVENT:
                anchor = (const char *) ev->data.sequence_start.anchor;
                v = cJSON_CreateArray();
                if (!v)
                        return -ENOMEM;
                r = parse_sequence(c, depth, v);
                break;
        case YAML_MAPPING_START_EVENT:
                anchor = (const char *) ev->data.mapping_start.anchor;
                v = cJSON_CreateObject();
                if (!v)
                        return -ENOMEM;
                r = parse_mapping(c, depth, v);
                break;
        case YAML_ALIAS_EVENT: {
                const char *name = (const char *) ev->data.alias.anchor;
                cJSON *a = anchor_find(c, name);
                if (!a) {
                        set_error(c, "line %zu, column %zu: unknown alias %s", ev->start_mark.line + 1,
                                  ev->start_mark.column + 1, name);
                        return -EBADMSG;
                }
                r = count_nodes(c, a);
                if (r < 0) {
                        set_error(c, "line %zu, column %zu: %s", ev->start_mark.line + 1,
                                  ev->start_mark.column + 1, "aliases expand beyond the size limit");
                        return r;
                }
                v = cJSON_Duplicate(a, true);
                if (!v)
                        return -ENOMEM;
                *ret = v;
                return 0;
        }
        default:
                set_error(c, "line %zu, column %zu: %s", ev->start_mark.line + 1, ev->start_mark.column + 1,
                          "unexpected YAML event");
                return -EBADMSG;
        }
        if (r < 0) {
                cJSON_Delete(v);
                return r;
        }
        if (anchor) {
                /* Keep a private copy: the value may be moved into a tree that is freed later. */
                cJSON *copy = cJSON_Duplicate(v, true);
                if (!copy || anchor_add(c, anchor, copy) < 0) {
                        cJSON_Delete(copy);
                        cJSON_Delete(v);
                        return -ENOMEM;
                }
        }
        *ret = v;
        return 0;
}

static int parse_stream(const char *text, size_t len, cJSON **ret, char *errbuf, size_t errlen) {
        char local[256];
        if (!errbuf || errlen == 0) {
                errbuf = local;
                errlen = sizeof(local);
        }
        if (errbuf && errlen)
                errbuf[0] = 0;
        if (!text || !ret)
                return -EINVAL;
        if (len > YAML_JSON_MAX_INPUT) {
                if (errbuf && errlen)
                        snprintf(errbuf, errlen, "input larger than %u bytes", YAML_JSON_MAX_INPUT);
                return -E2BIG;
        }
        Ctx c = { .err = errbuf, .errlen = errlen };
        if (!yaml_parser_initialize(&c.parser))
                return -ENOMEM;
        yaml_parser_set_input_string(&c.parser, (const unsigned char *) text, len);
        cJSON *docs = cJSON_CreateArray();
        int r = docs ? 0 : -ENOMEM;
        bool done = false;
        while (r >= 0 && !done) {
                yaml_event_t ev;
                r = next_event(&c, &ev);
                if (r < 0)
                        break;
                switch (ev.type) {
                case YAML_STREAM_END_EVENT:
                        done = true;
                        break;
                case YAML_DOCUMENT_START_EVENT: {
                        yaml_event_t node;
                        r = next_event(&c, &node);
                        if (r < 0)
                                break;
                        if (node.type == YAML_DOCUMENT_END_EVENT) {
                                yaml_event_delete(&node);
                                break;
                        }
                        cJSON *v = NULL;
                        r = parse_node(&c, &node, 0, &v);
                        yaml_event_delete(&node);
                        if (r < 0)
                                break;
                        yaml_event_t end;
                        r = next_event(&c, &end);
                        if (r < 0) {
                                cJSON_Delete(v);
                                break;
                        }
                        yaml_event_delete(&end);
                        /* anchors do not cross documents */
                        for (size_t i = 0; i < c.n_anchors; i++) {
                                free(c.anchors[i].name);
                                cJSON_Delete(c.anchors[i].value);
                        }
                        c.n_anchors = 0;
                        if (cJSON_IsNull(v))
                                cJSON_Delete(v); /* empty document */
                        else
                                cJSON_AddItemToArray(docs, v);
                        break;
                }
                default:
                        break;
                }
                yaml_event_delete(&ev);
        }
        for (size_t i = 0; i < c.n_anchors; i++) {
                free(c.anchors[i].name);
                cJSON_Delete(c.anchors[i].value);
        }
        free(c.anchors);
        yaml_parser_delete(&c.parser);
        if (r == -E2BIG && errbuf && errlen && !errbuf[0])
                snprintf(errbuf, errlen, "more than %u values", YAML_JSON_MAX_NODES);
        if (r < 0 && errbuf && errbuf[0])
                log_debug("YAML: %s", errbuf);
        if (r < 0) {
                cJSON_Delete(docs);
                return r;
        }
        *ret = docs;
        return 0;
}

int yaml_documents_to_json_error(const char *text, size_t len, cJSON **ret, char *errbuf, size_t errlen) {
        return parse_stream(text, len, ret, errbuf, errlen);
}

int yaml_documents_to_json(const char *text, size_t len, cJSON **ret) {
        return parse_stream(text, len, ret, NULL, 0);
}

static int first_document(cJSON *docs, cJSON **ret) {
        cJSON *one = cJSON_GetArraySize(docs) > 0 ? cJSON_DetachItemFromArray(docs, 0) : cJSON_CreateNull();
        cJSON_Delete(docs);
        if (!one)
                return -ENOMEM;
        *ret = one;
        return 0;
}

int yaml_to_json(const char *text, size_t len, cJSON **ret) {
        cJSON *docs;
        int r = parse_stream(text, len, &docs, NULL, 0);
        if (r < 0)
                return r;
        return first_document(docs, ret);
}

static bool looks_like_json(const char *text, size_t len) {
        size_t i = 0;
        while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
                i++;
        return i < len && (text[i] == '{' || text[i] == '[');
}

int json_or_yaml_parse(const char *text, size_t len, cJSON **ret) {
        if (!text || !ret)
                return -EINVAL;
        if (len > YAML_JSON_MAX_INPUT)
                return -E2BIG;
        if (looks_like_json(text, len)) {
                cJSON *j = cJSON_ParseWithLength(text, len);
                if (j) {
                        *ret = j;
                        return 0;
                }
        }
        cJSON *docs;
        int r = parse_stream(text, len, &docs, NULL, 0);
        if (r < 0)
                return r;
        return first_document(docs, ret);
}

int json_or_yaml_documents_error(const char *text, size_t len, cJSON **ret, char *errbuf, size_t errlen) {
        if (!text || !ret)
                return -EINVAL;
        if (len > YAML_JSON_MAX_INPUT) {
                if (errbuf && errlen)
                        snprintf(errbuf, errlen, "input larger than %u bytes", YAML_JSON_MAX_INPUT);
                return -E2BIG;
        }
        if (looks_like_json(text, len)) {
                cJSON *j = cJSON_ParseWithLength(text, len);
                if (j) {
                        if (cJSON_IsArray(j)) {
                                *ret = j;
                                return 0;
                        }
                        cJSON *a = cJSON_CreateArray();
                        if (!a) {
                                cJSON_Delete(j);
                                return -ENOMEM;
                        }
                        cJSON_AddItemToArray(a, j);
                        *ret = a;
                        return 0;
                }
        }
        return parse_stream(text, len, ret, errbuf, errlen);
}

/* ---- JSON to YAML --------------------------------------------------------------------------- */

typedef struct Out {
        char *buf;
        size_t len, cap;
        bool oom;
} Out;

static int out_write(void *data, unsigned char *buffer, size_t size) {
        Out *o = data;
        if (GROW(o->buf, o->cap, o->len + size + 1, (size_t) YAML_JSON_MAX_INPUT * 4) < 0) {
                o->oom = true;
                return 0;
        }
        memcpy(o->buf + o->len, buffer, size);
        o->len += size;
        o->buf[o->len] = 0;
        return 1;
}

static int emit(yaml_emitter_t *e, yaml_event_t *ev) {
        return yaml_emitter_emit(e, ev) ? 0 : -EIO;
}

static int emit_scalar(yaml_emitter_t *e, const char *v, bool quote) {
        yaml_event_t ev;
        if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *) v, (int) strlen(v), !quote, 1,
                                          quote ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_ANY_SCALAR_STYLE))
                return -ENOMEM;
        return emit(e, &ev);
}

static int emit_value(yaml_emitter_t *e, const cJSON *j, unsigned depth) {
        yaml_event_t ev;
        int r;
        if (depth > YAML_JSON_MAX_DEPTH)
                return -E2BIG;
        if (cJSON_IsObject(j)) {
                if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE))
                        return -ENOMEM;
                if ((r = emit(e, &ev)) < 0)
                        return r;
                for (const cJSON *c = j->child; c; c = c->next) {
                        cJSON *probe = plain_scalar(c->string, strlen(c->string));
                        bool q = !cJSON_IsString(probe) || strpbrk(c->string, ":#{}[],&*!|>'\"%@`") || !*c->string;
                        cJSON_Delete(probe);
                        if ((r = emit_scalar(e, c->string, q)) < 0 || (r = emit_value(e, c, depth + 1)) < 0)
                                return r;
                }
                if (!yaml_mapping_end_event_initialize(&ev))
                        return -ENOMEM;
                return emit(e, &ev);
        }
        if (cJSON_IsArray(j)) {
                if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                                          j->child ? YAML_BLOCK_SEQUENCE_STYLE : YAML_FLOW_SEQUENCE_STYLE))
                        return -ENOMEM;
                if ((r = emit(e, &ev)) < 0)
                        return r;
                for (const cJSON *c = j->child; c; c = c->next)
                        if ((r = emit_value(e, c, depth + 1)) < 0)
                                return r;
                if (!yaml_sequence_end_event_initialize(&ev))
                        return -ENOMEM;
                return emit(e, &ev);
        }
        if (cJSON_IsString(j)) {
                /* quote what a reader would take for something else */
                cJSON *probe = plain_scalar(j->valuestring, strlen(j->valuestring));
                bool q = !cJSON_IsString(probe);
                cJSON_Delete(probe);
                return emit_scalar(e, j->valuestring, q);
        }
        char num[64];
        if (cJSON_IsNumber(j)) {
                double d = j->valuedouble;
                if (d == (double) (long long) d && d > -1e15 && d < 1e15)
                        snprintf(num, sizeof(num), "%lld", (long long) d);
                else
                        snprintf(num, sizeof(num), "%.17g", d);
                return emit_scalar(e, num, false);
        }
        if (cJSON_IsBool(j))
                return emit_scalar(e, cJSON_IsTrue(j) ? "true" : "false", false);
        return emit_scalar(e, "null", false);
}

int json_to_yaml(const cJSON *j, bool documents, char **ret) {
        if (!j || !ret)
                return -EINVAL;
        yaml_emitter_t e;
        Out o = {};
        if (!yaml_emitter_initialize(&e))
                return -ENOMEM;
        yaml_emitter_set_output(&e, out_write, &o);
        yaml_emitter_set_unicode(&e, 1);
        yaml_emitter_set_width(&e, 4096);
        yaml_event_t ev;
        int r = 0;
        if (!yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING))
                r = -ENOMEM;
        else
                r = emit(&e, &ev);
        const cJSON *first = documents && cJSON_IsArray(j) ? j->child : j;
        bool implicit = true;
        for (const cJSON *d = first; d && r >= 0; d = documents && cJSON_IsArray(j) ? d->next : NULL) {
                if (!yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, implicit)) {
                        r = -ENOMEM;
                        break;
                }
                implicit = false; /* "---" between documents */
                if ((r = emit(&e, &ev)) < 0 || (r = emit_value(&e, d, 0)) < 0)
                        break;
                if (!yaml_document_end_event_initialize(&ev, 1)) {
                        r = -ENOMEM;
                        break;
                }
                r = emit(&e, &ev);
        }
        if (r >= 0) {
                if (!yaml_stream_end_event_initialize(&ev))
                        r = -ENOMEM;
                else
                        r = emit(&e, &ev);
        }
        if (r >= 0 && !yaml_emitter_flush(&e))
                r = -EIO;
        yaml_emitter_delete(&e);
        if (r >= 0 && o.oom)
                r = -ENOMEM;
        if (r < 0) {
                free(o.buf);
                return r;
        }
        if (!o.buf) {
                o.buf = strdup("");
                if (!o.buf)
                        return -ENOMEM;
        }
        *ret = o.buf;
        return 0;
}
