// SPDX-License-Identifier: Apache-2.0
// TOML to and from cJSON through toml++ (toml.h says how types map). The one C++ file of the
// coordinator: Debian packages no C TOML library; toml++ is the maintained one. Nothing here
// throws past the C boundary.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "toml.h"

static cJSON *node_to_json(const toml::node &n);

static cJSON *table_to_json(const toml::table &t) {
        cJSON *o = cJSON_CreateObject();
        for (auto &&[k, v] : t) {
                cJSON *c = o ? node_to_json(v) : nullptr;
                if (!c) {
                        cJSON_Delete(o);
                        return nullptr;
                }
                cJSON_AddItemToObject(o, std::string(k.str()).c_str(), c);
        }
        return o;
}

static cJSON *node_to_json(const toml::node &n) {
        if (auto t = n.as_table())
                return table_to_json(*t);
        if (auto a = n.as_array()) {
                cJSON *arr = cJSON_CreateArray();
                for (auto &&e : *a) {
                        cJSON *c = arr ? node_to_json(e) : nullptr;
                        if (!c) {
                                cJSON_Delete(arr);
                                return nullptr;
                        }
                        cJSON_AddItemToArray(arr, c);
                }
                return arr;
        }
        if (auto s = n.as_string())
                return cJSON_CreateString(s->get().c_str());
        if (auto i = n.as_integer())
                return cJSON_CreateNumber((double) i->get());
        if (auto f = n.as_floating_point())
                return cJSON_CreateNumber(f->get());
        if (auto b = n.as_boolean())
                return cJSON_CreateBool(b->get());
        std::ostringstream os; // dates and times: their TOML text
        n.visit([&os](auto &&v) { os << v; });
        return cJSON_CreateString(os.str().c_str());
}

static bool json_to_table(const cJSON *o, toml::table &t);
static bool json_to_array(const cJSON *a, toml::array &arr);

static bool integral(double v) {
        return std::floor(v) == v && std::fabs(v) < 9e15;
}

/* The TOML value of c, handed to put(); false for what TOML cannot hold (null). */
template <typename Put> static bool json_value(const cJSON *c, Put &&put) {
        if (cJSON_IsObject(c)) {
                toml::table t;
                if (!json_to_table(c, t))
                        return false;
                put(std::move(t));
        } else if (cJSON_IsArray(c)) {
                toml::array a;
                if (!json_to_array(c, a))
                        return false;
                put(std::move(a));
        } else if (cJSON_IsString(c))
                put(std::string(c->valuestring));
        else if (cJSON_IsBool(c))
                put((bool) cJSON_IsTrue(c));
        else if (cJSON_IsNumber(c) && integral(c->valuedouble))
                put((int64_t) c->valuedouble);
        else if (cJSON_IsNumber(c))
                put(c->valuedouble);
        else
                return false;
        return true;
}

static bool json_to_array(const cJSON *a, toml::array &arr) {
        for (const cJSON *c = a->child; c; c = c->next)
                if (!json_value(c, [&arr](auto &&v) { arr.push_back(std::forward<decltype(v)>(v)); }))
                        return false;
        return true;
}

static bool json_to_table(const cJSON *o, toml::table &t) {
        for (const cJSON *c = o->child; c; c = c->next) {
                std::string_view k(c->string ? c->string : "");
                if (!cJSON_IsNull(c) &&
                    !json_value(c, [&t, k](auto &&v) { t.insert_or_assign(k, std::forward<decltype(v)>(v)); }))
                        return false;
        }
        return true;
}

extern "C" int toml_parse_json(const char *text, cJSON **ret, char **ret_error) {
        if (!text || !ret)
                return -EINVAL;
        if (strlen(text) > TOML_TEXT_MAX)
                return -E2BIG;
        try {
                toml::table t = toml::parse(std::string_view(text));
                cJSON *j = table_to_json(t);
                if (!j)
                        return -ENOMEM;
                *ret = j;
                return 0;
        } catch (const toml::parse_error &e) {
                if (ret_error) {
                        char *m = nullptr;
                        if (asprintf(&m, "line %u, column %u: %.*s", (unsigned) e.source().begin.line,
                                     (unsigned) e.source().begin.column, (int) e.description().size(),
                                     e.description().data()) < 0)
                                m = nullptr;
                        *ret_error = m;
                }
                return -EBADMSG;
        } catch (const std::bad_alloc &) {
                return -ENOMEM;
        } catch (...) {
                return -EINVAL;
        }
}

extern "C" int toml_format_json(const cJSON *root, char **ret) {
        if (!cJSON_IsObject(root) || !ret)
                return -EINVAL;
        try {
                toml::table t;
                if (!json_to_table(root, t))
                        return -EINVAL;
                std::ostringstream os;
                os << toml::toml_formatter(t) << "\n";
                char *s = strdup(os.str().c_str());
                if (!s)
                        return -ENOMEM;
                *ret = s;
                return 0;
        } catch (const std::bad_alloc &) {
                return -ENOMEM;
        } catch (...) {
                return -EINVAL;
        }
}
