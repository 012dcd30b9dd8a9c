/* SPDX-License-Identifier: Apache-2.0 */
/* Any protobuf-c message as JSON, through its descriptor. */
#include <ctype.h>
#include <stdbool.h>

#include "macro.h"
#include "pbjson.h"

static void camel(const char *name, char *buf, size_t size) {
        size_t j = 0;
        bool up = false;
        for (size_t i = 0; name[i] && j + 1 < size; i++) {
                if (name[i] == '_') {
                        up = true;
                        continue;
                }
                buf[j++] = up ? (char) toupper((unsigned char) name[i]) : name[i];
                up = false;
        }
        buf[j] = 0;
}

static cJSON *scalar_to_json(const ProtobufCFieldDescriptor *f, const void *p, bool with_bytes) {
        switch (f->type) {
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
                return cJSON_CreateNumber(*(const int32_t *) p);
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
                return cJSON_CreateNumber(*(const uint32_t *) p);
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
                return cJSON_CreateNumber((double) *(const int64_t *) p);
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
                return cJSON_CreateNumber((double) *(const uint64_t *) p);
        case PROTOBUF_C_TYPE_FLOAT:
                return cJSON_CreateNumber(*(const float *) p);
        case PROTOBUF_C_TYPE_DOUBLE:
                return cJSON_CreateNumber(*(const double *) p);
        case PROTOBUF_C_TYPE_BOOL:
                return cJSON_CreateBool(*(const protobuf_c_boolean *) p);
        case PROTOBUF_C_TYPE_ENUM: {
                const ProtobufCEnumValue *v =
                        protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *) p);
                return v ? cJSON_CreateString(v->name) : cJSON_CreateNumber(*(const int *) p);
        }
        case PROTOBUF_C_TYPE_STRING:
                return cJSON_CreateString(*(char *const *) p ? *(char *const *) p : "");
        case PROTOBUF_C_TYPE_BYTES: {
                const ProtobufCBinaryData *b = p;
                if (!with_bytes)
                        return cJSON_CreateNumber((double) b->len);
                /* plain text bytes (documents) are shown as text; they are JSON themselves */
                char *s = strndup((const char *) b->data, b->len);
                cJSON *j = cJSON_CreateString(s ? s : "");
                free(s);
                return j;
        }
        case PROTOBUF_C_TYPE_MESSAGE: {
                cJSON *j = NULL;
                const ProtobufCMessage *m = *(ProtobufCMessage *const *) p;
                if (!m)
                        return cJSON_CreateNull();
                if (pb_to_json(m, with_bytes, &j) < 0)
                        return NULL;
                return j;
        }
        }
        return NULL;
}

static size_t scalar_size(const ProtobufCFieldDescriptor *f) {
        switch (f->type) {
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
        case PROTOBUF_C_TYPE_FLOAT:
        case PROTOBUF_C_TYPE_ENUM:
                return 4;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
        case PROTOBUF_C_TYPE_DOUBLE:
                return 8;
        case PROTOBUF_C_TYPE_BOOL:
                return sizeof(protobuf_c_boolean);
        case PROTOBUF_C_TYPE_STRING:
        case PROTOBUF_C_TYPE_MESSAGE:
                return sizeof(void *);
        case PROTOBUF_C_TYPE_BYTES:
                return sizeof(ProtobufCBinaryData);
        }
        return 0;
}

static bool is_default(const ProtobufCFieldDescriptor *f, const void *p) {
        switch (f->type) {
        case PROTOBUF_C_TYPE_STRING:
                return isempty(*(char *const *) p);
        case PROTOBUF_C_TYPE_MESSAGE:
                return *(void *const *) p == NULL;
        case PROTOBUF_C_TYPE_BYTES:
                return ((const ProtobufCBinaryData *) p)->len == 0;
        case PROTOBUF_C_TYPE_BOOL:
                return !*(const protobuf_c_boolean *) p;
        case PROTOBUF_C_TYPE_FLOAT:
                return *(const float *) p == 0;
        case PROTOBUF_C_TYPE_DOUBLE:
                return *(const double *) p == 0;
        default: {
                size_t n = scalar_size(f);
                const uint8_t *b = p;
                for (size_t i = 0; i < n; i++)
                        if (b[i])
                                return false;
                return true;
        }
        }
}

int pb_to_json(const ProtobufCMessage *m, bool with_bytes, cJSON **ret) {
        const ProtobufCMessageDescriptor *d = m->descriptor;
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return -ENOMEM;

        for (unsigned i = 0; i < d->n_fields; i++) {
                const ProtobufCFieldDescriptor *f = &d->fields[i];
                const char *base = (const char *) m + f->offset;
                char name[128];
                camel(f->name, name, sizeof name);
                cJSON *v;

                if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                        size_t n = *(const size_t *) ((const char *) m + f->quantifier_offset);
                        if (n == 0)
                                continue;
                        v = cJSON_CreateArray();
                        if (!v)
                                goto oom;
                        const char *arr = *(char *const *) base;
                        size_t sz = scalar_size(f);
                        for (size_t k = 0; k < n; k++) {
                                cJSON *e = scalar_to_json(f, arr + k * sz, with_bytes);
                                if (!e) {
                                        cJSON_Delete(v);
                                        goto oom;
                                }
                                cJSON_AddItemToArray(v, e);
                        }
                } else {
                        if (is_default(f, base))
                                continue;
                        v = scalar_to_json(f, base, with_bytes);
                        if (!v)
                                goto oom;
                }
                cJSON_AddItemToObject(o, name, v);
        }
        *ret = o;
        return 0;
oom:
        cJSON_Delete(o);
        return -ENOMEM;
}
