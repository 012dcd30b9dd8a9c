/* SPDX-License-Identifier: Apache-2.0 */
/* EC2 XML answers (libxml2, matched by local name so any namespace works) and SSM JSON. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <libxml/parser.h>
#include <stdio.h>
#include <stdlib.h>

#include "timestamp.h"
#include "aws-credentials.h"
#include "ec2-internal.h"
#include "macro.h"

/* ---- strv ------------------------------------------------------------------------------ */

char **ec2_strv_free(char **l) {
        for (size_t i = 0; l && l[i]; i++)
                free(l[i]);
        free(l);
        return NULL;
}

size_t ec2_strv_length(char *const *l) {
        size_t n = 0;
        while (l && l[n])
                n++;
        return n;
}

int ec2_strv_push(char ***l, size_t *n, const char *s) {
        char **m = realloc(*l, (*n + 2) * sizeof(char *));
        if (!m)
                return -ENOMEM;
        *l = m;
        m[*n] = strdup(s);
        if (!m[*n]) {
                m[*n] = NULL;
                return -ENOMEM;
        }
        m[++*n] = NULL;
        return 0;
}

/* ---- XML helpers ------------------------------------------------------------------------ */

xmlNode *ec2_xml_child(xmlNode *parent, const char *name) {
        for (xmlNode *n = parent ? parent->children : NULL; n; n = n->next)
                if (n->type == XML_ELEMENT_NODE && xmlStrEqual(n->name, (const xmlChar *) name))
                        return n;
        return NULL;
}

char *ec2_xml_text(xmlNode *parent, const char *name) {
        xmlNode *n = name ? ec2_xml_child(parent, name) : parent;
        if (!n)
                return NULL;
        xmlChar *t = xmlNodeGetContent(n);
        if (!t)
                return NULL;
        char *s = strdup((const char *) t);
        xmlFree(t);
        return s;
}

static xmlNode *find_element(xmlNode *n, const char *name) {
        for (; n; n = n->next) {
                if (n->type != XML_ELEMENT_NODE)
                        continue;
                if (xmlStrEqual(n->name, (const xmlChar *) name))
                        return n;
                xmlNode *f = find_element(n->children, name);
                if (f)
                        return f;
        }
        return NULL;
}

char *ec2_parse_iam_role(xmlDoc *doc) {
        xmlNode *n = find_element(xmlDocGetRootElement(doc), "RoleName");
        return n ? ec2_xml_text(n, NULL) : NULL;
}

/* Text of a path of children, e.g. "placement/availabilityZone". */
static char *text_path(xmlNode *n, const char *path) {
        char buf[128];
        const char *p = path;
        while (n && p) {
                const char *slash = strchr(p, '/');
                size_t len = slash ? (size_t) (slash - p) : strlen(p);
                if (len >= sizeof buf)
                        return NULL;
                memcpy(buf, p, len);
                buf[len] = 0;
                n = ec2_xml_child(n, buf);
                p = slash ? slash + 1 : NULL;
        }
        return n ? ec2_xml_text(n, NULL) : NULL;
}

static uint64_t u64_path(xmlNode *n, const char *path) {
        _cleanup_free_ char *s = text_path(n, path);
        char *end;
        if (isempty(s))
                return 0;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        return errno || (*end && *end != '.') ? 0 : (uint64_t) v;
}

static bool bool_path(xmlNode *n, const char *path) {
        _cleanup_free_ char *s = text_path(n, path);
        return streq_ptr(s, "true");
}

static int64_t time_path(xmlNode *n, const char *path) {
        _cleanup_free_ char *s = text_path(n, path);
        int64_t usec;
        return s && timestamp_parse_rfc3339(s, 0, &usec) >= 0 ? usec / (int64_t) USEC_PER_SEC : 0;
}

#define FOREACH_ITEM(item, set) \
        for (xmlNode *item = (set) ? (set)->children : NULL; item; item = item->next) \
                if (item->type == XML_ELEMENT_NODE && xmlStrEqual(item->name, (const xmlChar *) "item"))

/* Grow a {items, n} list by one zeroed slot, under a cap. */
#define LIST_PUSH(list, max, ret)                                                        \
        ({                                                                              \
                int _r = 0;                                                             \
                if ((list)->n >= (max))                                                 \
                        _r = -ENOBUFS;                                                  \
                else {                                                                  \
                        __typeof__((list)->items) _m =                                  \
                                realloc((list)->items, ((list)->n + 1) * sizeof(*(list)->items)); \
                        if (!_m)                                                        \
                                _r = -ENOMEM;                                           \
                        else {                                                          \
                                (list)->items = _m;                                     \
                                memset(&_m[(list)->n], 0, sizeof(*_m));                 \
                                (ret) = &_m[(list)->n++];                               \
                        }                                                               \
                }                                                                       \
                _r;                                                                     \
        })

/* Each <item> of the answer's set `name` into a new zeroed element of list (a {items, n} list
 * of max elements at most), filled in by parse(item, element); the first error stops it. */
#define PARSE_SET(doc, name, list, max, parse)                                                   \
        ({                                                                                      \
                int _ps_r = 0;                                                                  \
                FOREACH_ITEM(_ps_item, root_set(doc, name)) {                                   \
                        __typeof__((list)->items) _ps_x = NULL;                                 \
                        if ((_ps_r = LIST_PUSH(list, max, _ps_x)) < 0 || (_ps_r = parse(_ps_item, _ps_x)) < 0) \
                                break;                                                          \
                }                                                                               \
                _ps_r;                                                                          \
        })

/* Frees a {items, n} list (from PARSE_SET): clear(element) for each element, then the list.
 * Accepts NULL; returns NULL. */
#define LIST_FREE(l, clear)                                                                     \
        ({                                                                                      \
                if (l) {                                                                        \
                        for (size_t _lf_i = 0; _lf_i < (l)->n; _lf_i++)                         \
                                clear(&(l)->items[_lf_i]);                                      \
                        free((l)->items);                                                       \
                        free(l);                                                                \
                }                                                                               \
                (__typeof__(l)) NULL;                                                           \
        })

static xmlNode *root_set(xmlDoc *doc, const char *name) {
        return ec2_xml_child(xmlDocGetRootElement(doc), name);
}

int ec2_json_error(const char *body, long status, Ec2Error *e) {
        cJSON *j = cJSON_Parse(body);
        const char *type = NULL, *msg = NULL;
        if (j) {
                type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "__type"));
                msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "message")) ?:
                      cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "Message"));
        }
        if (type && strchr(type, '#'))
                type = strchr(type, '#') + 1;
        *e = (Ec2Error) { .status = status };
        snprintf(e->code, sizeof e->code, "%s", type ?: "");
        snprintf(e->message, sizeof e->message, "%s", msg ?: "");
        e->kind = ec2_error_kind_from_code(e->code, status);
        e->error = ec2_error_kind_to_errno(e->kind);
        cJSON_Delete(j);
        return j ? 0 : -EBADMSG;
}

/* An AWS answer never carries a DTD: one is refused the moment the parser meets it (before any
 * entity is declared, let alone expanded), and libxml2's default limits on text and depth hold
 * (no XML_PARSE_HUGE). */
static void refuse_dtd(void *userdata, const xmlChar *name, const xmlChar *external_id, const xmlChar *system_id) {
        xmlStopParser(userdata);
}

xmlDoc *ec2_xml_read(const char *body, size_t len) {
        if (len == 0 || len > EC2_BODY_MAX)
                return NULL;
        xmlParserCtxt *ctxt = xmlNewParserCtxt();
        if (!ctxt)
                return NULL;
        ctxt->sax->internalSubset = refuse_dtd;
        ctxt->sax->externalSubset = refuse_dtd;
        xmlDoc *doc = xmlCtxtReadMemory(ctxt, body, (int) len, NULL, NULL,
                                        XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |
                                                XML_PARSE_NOBLANKS);
        /* stopped at a DTD: libxml2 may still hand back what it had built (no root element) */
        if (doc && (!ctxt->wellFormed || ctxt->errNo != XML_ERR_OK || doc->intSubset || doc->extSubset ||
                    !xmlDocGetRootElement(doc))) {
                xmlFreeDoc(doc);
                doc = NULL;
        }
        xmlFreeParserCtxt(ctxt);
        return doc;
}

int ec2_xml_parse(const char *body, size_t len, long status, xmlDoc **ret, Ec2Error *e) {
        xmlDoc *doc;

        *e = (Ec2Error) { .status = status };
        if (len > EC2_BODY_MAX)
                return -EFBIG;
        doc = len ? ec2_xml_read(body, len) : NULL;
        if (!doc) {
                if (status >= 200 && status < 300)
                        return -EBADMSG;
                /* an error without a readable body (a proxy, a load balancer) */
                snprintf(e->code, sizeof e->code, "HTTP%ld", status);
                e->kind = ec2_error_kind_from_code(NULL, status);
                e->error = ec2_error_kind_to_errno(e->kind);
                return -EPROTO;
        }
        xmlNode *root = xmlDocGetRootElement(doc);
        xmlNode *errors = ec2_xml_child(root, "Errors");
        xmlNode *err = errors ? ec2_xml_child(errors, "Error") : NULL;
        if (!err && root && xmlStrEqual(root->name, (const xmlChar *) "ErrorResponse"))
                err = ec2_xml_child(root, "Error"); /* STS/IAM style */
        if (err || status < 200 || status >= 300) {
                _cleanup_free_ char *code = err ? ec2_xml_text(err, "Code") : NULL;
                _cleanup_free_ char *msg = err ? ec2_xml_text(err, "Message") : NULL;
                _cleanup_free_ char *rid = ec2_xml_text(root, "RequestID") ?: ec2_xml_text(root, "RequestId");
                snprintf(e->code, sizeof e->code, "%s", code ?: "");
                if (!code)
                        snprintf(e->code, sizeof e->code, "HTTP%ld", status);
                snprintf(e->message, sizeof e->message, "%s", strempty(msg));
                snprintf(e->request_id, sizeof e->request_id, "%s", strempty(rid));
                e->kind = ec2_error_kind_from_code(code, status);
                e->error = ec2_error_kind_to_errno(e->kind);
                xmlFreeDoc(doc);
                return -EPROTO;
        }
        *ret = doc;
        return 0;
}

char *ec2_xml_next_token(xmlDoc *doc) {
        char *t = ec2_xml_text(xmlDocGetRootElement(doc), "nextToken");
        if (t && !*t) {
                free(t);
                return NULL;
        }
        return t;
}

/* The end of an item that carries tags: -EBADMSG when it lacks a field it must have (complete
 * false), else its tagSet into *ret (EC2 allows 50; any beyond are ignored). */
static int parse_tags(xmlNode *n, bool complete, Ec2Tag **ret, size_t *ret_n) {
        if (!complete)
                return -EBADMSG;
        xmlNode *set = ec2_xml_child(n, "tagSet");
        struct {
                Ec2Tag *items;
                size_t n;
        } l = { *ret, *ret_n };
        int r = 0;
        FOREACH_ITEM(item, set) {
                Ec2Tag *t = NULL;
                if (LIST_PUSH(&l, 50u, t) < 0)
                        break;
                t->key = ec2_xml_text(item, "key");
                t->value = ec2_xml_text(item, "value");
                if (!t->key || (!t->value && !(t->value = strdup("")))) {
                        r = -ENOMEM;
                        break;
                }
        }
        *ret = l.items;
        *ret_n = l.n;
        return r;
}

static void tags_free(Ec2Tag *t, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(t[i].key);
                free(t[i].value);
        }
        free(t);
}

/* ---- DescribeInstanceTypes ------------------------------------------------------------ */

int ec2_parse_instance_types(xmlDoc *doc, Ec2InstanceTypeList *list, size_t max) {
        xmlNode *set = root_set(doc, "instanceTypeSet");
        FOREACH_ITEM(item, set) {
                Ec2InstanceType *t = NULL;
                size_t n_arch = 0;
                int r = LIST_PUSH(list, max, t);
                if (r < 0)
                        return r;
                t->name = ec2_xml_text(item, "instanceType");
                if (!t->name)
                        return -EBADMSG;
                t->vcpus = (unsigned) u64_path(item, "vCpuInfo/defaultVCpus");
                t->memory_mib = u64_path(item, "memoryInfo/sizeInMiB");
                xmlNode *proc = ec2_xml_child(item, "processorInfo");
                FOREACH_ITEM(a, ec2_xml_child(proc, "supportedArchitectures")) {
                        _cleanup_free_ char *s = ec2_xml_text(a, NULL);
                        if (s && ec2_strv_push(&t->architectures, &n_arch, s) < 0)
                                return -ENOMEM;
                }
                xmlNode *gpus = ec2_xml_child(ec2_xml_child(item, "gpuInfo"), "gpus");
                FOREACH_ITEM(g, gpus) {
                        Ec2Gpu *m = realloc(t->gpus, (t->n_gpus + 1) * sizeof *m);
                        if (!m)
                                return -ENOMEM;
                        t->gpus = m;
                        m[t->n_gpus++] = (Ec2Gpu) {
                                .name = ec2_xml_text(g, "name"),
                                .manufacturer = ec2_xml_text(g, "manufacturer"),
                                .count = (unsigned) u64_path(g, "count"),
                                .memory_mib = u64_path(g, "memoryInfo/sizeInMiB"),
                        };
                }
                /* pods get addresses on the default network card's interfaces only (the EKS
                 * max-pods calculation, and Karpenter's): a multi-card type's total overcounts */
                t->max_enis = (unsigned) u64_path(item, "networkInfo/maximumNetworkInterfaces");
                uint64_t default_card = u64_path(item, "networkInfo/defaultNetworkCardIndex");
                FOREACH_ITEM(card, ec2_xml_child(ec2_xml_child(item, "networkInfo"), "networkCards"))
                        if (u64_path(card, "networkCardIndex") == default_card &&
                            u64_path(card, "maximumNetworkInterfaces") > 0)
                                t->max_enis = (unsigned) u64_path(card, "maximumNetworkInterfaces");
                t->ipv4_per_eni = (unsigned) u64_path(item, "networkInfo/ipv4AddressesPerInterface");
                t->network_performance = text_path(item, "networkInfo/networkPerformance");
                t->hypervisor = ec2_xml_text(item, "hypervisor");
                t->bare_metal = bool_path(item, "bareMetal");
                t->current_generation = bool_path(item, "currentGeneration");
                FOREACH_ITEM(u, ec2_xml_child(item, "supportedUsageClasses")) {
                        _cleanup_free_ char *s = ec2_xml_text(u, NULL);
                        if (streq_ptr(s, "spot"))
                                t->spot_supported = true;
                        else if (streq_ptr(s, "on-demand"))
                                t->on_demand_supported = true;
                }
                if (bool_path(item, "instanceStorageSupported"))
                        t->instance_storage_gb = u64_path(item, "instanceStorageInfo/totalSizeInGB");
        }
        return 0;
}

static void instance_type_clear(Ec2InstanceType *t) {
        free(t->name);
        ec2_strv_free(t->architectures);
        for (size_t g = 0; g < t->n_gpus; g++) {
                free(t->gpus[g].name);
                free(t->gpus[g].manufacturer);
        }
        free(t->gpus);
        free(t->hypervisor);
        free(t->network_performance);
}

Ec2InstanceTypeList *ec2_instance_type_list_free(Ec2InstanceTypeList *l) {
        return LIST_FREE(l, instance_type_clear);
}

/* ---- offerings, spot prices -------------------------------------------------------------- */

static int offering_item(xmlNode *item, Ec2Offering *o) {
        o->instance_type = ec2_xml_text(item, "instanceType");
        o->zone = ec2_xml_text(item, "location");
        return o->instance_type && o->zone ? 0 : -EBADMSG;
}

int ec2_parse_offerings(xmlDoc *doc, Ec2OfferingList *list, size_t max) {
        return PARSE_SET(doc, "instanceTypeOfferingSet", list, max, offering_item);
}

static void offering_clear(Ec2Offering *t) {
        free(t->instance_type);
        free(t->zone);
}

Ec2OfferingList *ec2_offering_list_free(Ec2OfferingList *l) {
        return LIST_FREE(l, offering_clear);
}

static int spot_price_item(xmlNode *item, Ec2SpotPrice *p) {
        _cleanup_free_ char *price = ec2_xml_text(item, "spotPrice");
        char *end = NULL;
        p->instance_type = ec2_xml_text(item, "instanceType");
        p->zone = ec2_xml_text(item, "availabilityZone");
        p->timestamp = time_path(item, "timestamp");
        p->price = price ? strtod(price, &end) : -1;
        return p->instance_type && p->zone && price && !*end && p->price >= 0 ? 0 : -EBADMSG;
}

int ec2_parse_spot_prices(xmlDoc *doc, Ec2SpotPriceList *list, size_t max) {
        return PARSE_SET(doc, "spotPriceHistorySet", list, max, spot_price_item);
}

static int spot_cmp(const void *a, const void *b) {
        const Ec2SpotPrice *x = a, *y = b;
        int c = strcmp(x->instance_type, y->instance_type);
        if (c == 0)
                c = strcmp(x->zone, y->zone);
        if (c == 0) /* newest first within a pool */
                c = (x->timestamp < y->timestamp) - (x->timestamp > y->timestamp);
        return c;
}

void ec2_spot_prices_latest(Ec2SpotPriceList *l) {
        size_t w = 0;
        if (!l || l->n == 0)
                return;
        qsort(l->items, l->n, sizeof *l->items, spot_cmp);
        for (size_t i = 0; i < l->n; i++) {
                if (w > 0 && streq(l->items[w - 1].instance_type, l->items[i].instance_type) &&
                    streq(l->items[w - 1].zone, l->items[i].zone)) {
                        free(l->items[i].instance_type);
                        free(l->items[i].zone);
                        continue;
                }
                l->items[w++] = l->items[i];
        }
        l->n = w;
}

static void spot_price_clear(Ec2SpotPrice *t) {
        free(t->instance_type);
        free(t->zone);
}

Ec2SpotPriceList *ec2_spot_price_list_free(Ec2SpotPriceList *l) {
        return LIST_FREE(l, spot_price_clear);
}

/* ---- subnets, security groups, images ------------------------------------------------------ */

static int subnet_item(xmlNode *item, Ec2Subnet *s) {
        s->id = ec2_xml_text(item, "subnetId");
        s->vpc_id = ec2_xml_text(item, "vpcId");
        s->zone = ec2_xml_text(item, "availabilityZone");
        s->zone_id = ec2_xml_text(item, "availabilityZoneId");
        s->cidr = ec2_xml_text(item, "cidrBlock");
        s->available_ips = u64_path(item, "availableIpAddressCount");
        return parse_tags(item, s->id && s->zone, &s->tags, &s->n_tags);
}

int ec2_parse_subnets(xmlDoc *doc, Ec2SubnetList *list, size_t max) {
        return PARSE_SET(doc, "subnetSet", list, max, subnet_item);
}

static void subnet_clear(Ec2Subnet *s) {
        free(s->id);
        free(s->vpc_id);
        free(s->zone);
        free(s->zone_id);
        free(s->cidr);
        tags_free(s->tags, s->n_tags);
}

Ec2SubnetList *ec2_subnet_list_free(Ec2SubnetList *l) {
        return LIST_FREE(l, subnet_clear);
}

static int security_group_item(xmlNode *item, Ec2SecurityGroup *g) {
        g->id = ec2_xml_text(item, "groupId");
        g->name = ec2_xml_text(item, "groupName");
        g->vpc_id = ec2_xml_text(item, "vpcId");
        return parse_tags(item, g->id, &g->tags, &g->n_tags);
}

int ec2_parse_security_groups(xmlDoc *doc, Ec2SecurityGroupList *list, size_t max) {
        return PARSE_SET(doc, "securityGroupInfo", list, max, security_group_item);
}

static void security_group_clear(Ec2SecurityGroup *g) {
        free(g->id);
        free(g->name);
        free(g->vpc_id);
        tags_free(g->tags, g->n_tags);
}

Ec2SecurityGroupList *ec2_security_group_list_free(Ec2SecurityGroupList *l) {
        return LIST_FREE(l, security_group_clear);
}

static int image_item(xmlNode *item, Ec2Image *i) {
        i->id = ec2_xml_text(item, "imageId");
        i->name = ec2_xml_text(item, "name");
        i->architecture = ec2_xml_text(item, "architecture");
        i->state = ec2_xml_text(item, "imageState");
        i->owner_id = ec2_xml_text(item, "imageOwnerId");
        i->creation_date = time_path(item, "creationDate");
        return parse_tags(item, i->id, &i->tags, &i->n_tags);
}

int ec2_parse_images(xmlDoc *doc, Ec2ImageList *list, size_t max) {
        return PARSE_SET(doc, "imagesSet", list, max, image_item);
}

static int image_cmp(const void *a, const void *b) {
        const Ec2Image *x = a, *y = b;
        if (x->creation_date != y->creation_date)
                return x->creation_date < y->creation_date ? 1 : -1;
        return strcmp(x->id, y->id);
}

void ec2_images_sort(Ec2ImageList *l) {
        if (l && l->n > 1)
                qsort(l->items, l->n, sizeof *l->items, image_cmp);
}

static void image_clear(Ec2Image *i) {
        free(i->id);
        free(i->name);
        free(i->architecture);
        free(i->state);
        free(i->owner_id);
        tags_free(i->tags, i->n_tags);
}

Ec2ImageList *ec2_image_list_free(Ec2ImageList *l) {
        return LIST_FREE(l, image_clear);
}

/* ---- capacity reservations --------------------------------------------------------------- */

static int reservation_item(xmlNode *item, Ec2CapacityReservation *cr) {
        cr->id = ec2_xml_text(item, "capacityReservationId");
        cr->owner_id = ec2_xml_text(item, "ownerId");
        cr->instance_type = ec2_xml_text(item, "instanceType");
        cr->zone = ec2_xml_text(item, "availabilityZone");
        cr->zone_id = ec2_xml_text(item, "availabilityZoneId");
        cr->platform = ec2_xml_text(item, "instancePlatform");
        cr->tenancy = ec2_xml_text(item, "tenancy");
        cr->state = ec2_xml_text(item, "state");
        cr->match_criteria = ec2_xml_text(item, "instanceMatchCriteria");
        cr->reservation_type = ec2_xml_text(item, "reservationType");
        if (!cr->reservation_type) /* EC2 leaves it out for On-Demand Capacity Reservations */
                cr->reservation_type = strdup("default");
        cr->total = u64_path(item, "totalInstanceCount");
        cr->available = u64_path(item, "availableInstanceCount");
        cr->end_date = time_path(item, "endDate");
        return parse_tags(item, cr->id && cr->instance_type && cr->zone && cr->state && cr->reservation_type, &cr->tags,
                          &cr->n_tags);
}

int ec2_parse_capacity_reservations(xmlDoc *doc, Ec2CapacityReservationList *list, size_t max) {
        return PARSE_SET(doc, "capacityReservationSet", list, max, reservation_item);
}

static void reservation_clear(Ec2CapacityReservation *cr) {
        free(cr->id);
        free(cr->owner_id);
        free(cr->instance_type);
        free(cr->zone);
        free(cr->zone_id);
        free(cr->platform);
        free(cr->tenancy);
        free(cr->state);
        free(cr->match_criteria);
        free(cr->reservation_type);
        tags_free(cr->tags, cr->n_tags);
}

Ec2CapacityReservationList *ec2_capacity_reservation_list_free(Ec2CapacityReservationList *l) {
        return LIST_FREE(l, reservation_clear);
}

/* ---- instances ----------------------------------------------------------------------- */

int ec2_parse_instances(xmlDoc *doc, Ec2InstanceList *list, size_t max) {
        FOREACH_ITEM(res, root_set(doc, "reservationSet")) {
                FOREACH_ITEM(item, ec2_xml_child(res, "instancesSet")) {
                        Ec2Instance *i = NULL;
                        int r = LIST_PUSH(list, max, i);
                        if (r < 0)
                                return r;
                        i->id = ec2_xml_text(item, "instanceId");
                        i->instance_type = ec2_xml_text(item, "instanceType");
                        i->zone = text_path(item, "placement/availabilityZone");
                        i->state = text_path(item, "instanceState/name");
                        i->lifecycle = ec2_xml_text(item, "instanceLifecycle");
                        if (!i->lifecycle)
                                i->lifecycle = strdup("on-demand");
                        i->private_ip = ec2_xml_text(item, "privateIpAddress");
                        i->image_id = ec2_xml_text(item, "imageId");
                        i->subnet_id = ec2_xml_text(item, "subnetId");
                        i->capacity_reservation_id = ec2_xml_text(item, "capacityReservationId");
                        i->launch_time = time_path(item, "launchTime");
                        size_t g = 0;
                        FOREACH_ITEM(grp, ec2_xml_child(item, "groupSet"))
                                if (g < EC2_MAX_INSTANCE_SGS && (i->security_groups[g] = ec2_xml_text(grp, "groupId")))
                                        g++;
                        r = parse_tags(item, i->id && i->state && i->lifecycle, &i->tags, &i->n_tags);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

const char *ec2_instance_tag(const Ec2Instance *i, const char *key) {
        for (size_t k = 0; i && k < i->n_tags; k++)
                if (streq(i->tags[k].key, key))
                        return i->tags[k].value;
        return NULL;
}

static void instance_clear(Ec2Instance *i) {
        free(i->id);
        free(i->instance_type);
        free(i->zone);
        free(i->state);
        free(i->lifecycle);
        free(i->private_ip);
        free(i->image_id);
        free(i->subnet_id);
        free(i->capacity_reservation_id);
        for (size_t g = 0; i->security_groups[g]; g++)
                free(i->security_groups[g]);
        tags_free(i->tags, i->n_tags);
}

Ec2InstanceList *ec2_instance_list_free(Ec2InstanceList *l) {
        return LIST_FREE(l, instance_clear);
}

int ec2_parse_terminated(xmlDoc *doc, char ***ret) {
        char **ids = NULL;
        size_t n = 0;
        FOREACH_ITEM(item, root_set(doc, "instancesSet")) {
                _cleanup_free_ char *id = ec2_xml_text(item, "instanceId");
                if (id && ec2_strv_push(&ids, &n, id) < 0) {
                        ec2_strv_free(ids);
                        return -ENOMEM;
                }
        }
        if (!ids && !(ids = calloc(1, sizeof(char *))))
                return -ENOMEM;
        *ret = ids;
        return 0;
}

/* ---- CreateFleet ------------------------------------------------------------------------ */

static void lt_overrides(xmlNode *item, char **type, char **zone, char **subnet) {
        xmlNode *o = ec2_xml_child(ec2_xml_child(item, "launchTemplateAndOverrides"), "overrides");
        *type = ec2_xml_text(o, "instanceType");
        *zone = ec2_xml_text(o, "availabilityZone");
        *subnet = ec2_xml_text(o, "subnetId");
}

int ec2_parse_create_fleet(xmlDoc *doc, Ec2FleetResult **ret) {
        xmlNode *root = xmlDocGetRootElement(doc);
        Ec2FleetResult *f = calloc(1, sizeof *f);
        struct {
                Ec2FleetInstances *items;
                size_t n;
        } inst = {};
        struct {
                Ec2FleetError *items;
                size_t n;
        } errs = {};
        int r = 0;

        if (!f)
                return -ENOMEM;
        f->fleet_id = ec2_xml_text(root, "fleetId");
        FOREACH_ITEM(item, ec2_xml_child(root, "fleetInstanceSet")) {
                Ec2FleetInstances *x = NULL;
                size_t n = 0;
                r = LIST_PUSH(&inst, 1000u, x);
                if (r < 0)
                        break;
                lt_overrides(item, &x->instance_type, &x->zone, &x->subnet_id);
                char *t = ec2_xml_text(item, "instanceType");
                if (t) {
                        free(x->instance_type);
                        x->instance_type = t;
                }
                x->lifecycle = ec2_xml_text(item, "lifecycle");
                FOREACH_ITEM(id, ec2_xml_child(item, "instanceIds")) {
                        _cleanup_free_ char *s = ec2_xml_text(id, NULL);
                        if (s && (r = ec2_strv_push(&x->instance_ids, &n, s)) < 0)
                                break;
                }
                if (r >= 0 && !x->instance_ids && !(x->instance_ids = calloc(1, sizeof(char *))))
                        r = -ENOMEM;
                if (r < 0)
                        break;
        }
        FOREACH_ITEM(item, r < 0 ? NULL : ec2_xml_child(root, "errorSet")) {
                Ec2FleetError *e = NULL;
                r = LIST_PUSH(&errs, 1000u, e);
                if (r < 0)
                        break;
                lt_overrides(item, &e->instance_type, &e->zone, &e->subnet_id);
                e->code = ec2_xml_text(item, "errorCode");
                e->message = ec2_xml_text(item, "errorMessage");
                e->lifecycle = ec2_xml_text(item, "lifecycle");
        }
        f->instances = inst.items;
        f->n_instances = inst.n;
        f->errors = errs.items;
        f->n_errors = errs.n;
        if (r >= 0 && !f->fleet_id)
                r = -EBADMSG;
        if (r < 0) {
                ec2_fleet_result_free(f);
                return r;
        }
        *ret = f;
        return 0;
}

size_t ec2_fleet_result_count(const Ec2FleetResult *f) {
        size_t n = 0;
        for (size_t i = 0; f && i < f->n_instances; i++)
                n += ec2_strv_length(f->instances[i].instance_ids);
        return n;
}

Ec2FleetResult *ec2_fleet_result_free(Ec2FleetResult *f) {
        if (!f)
                return NULL;
        for (size_t i = 0; i < f->n_instances; i++) {
                Ec2FleetInstances *x = &f->instances[i];
                ec2_strv_free(x->instance_ids);
                free(x->instance_type);
                free(x->lifecycle);
                free(x->zone);
                free(x->subnet_id);
        }
        for (size_t i = 0; i < f->n_errors; i++) {
                Ec2FleetError *e = &f->errors[i];
                free(e->code);
                free(e->message);
                free(e->lifecycle);
                free(e->instance_type);
                free(e->zone);
                free(e->subnet_id);
        }
        free(f->instances);
        free(f->errors);
        free(f->fleet_id);
        free(f);
        return NULL;
}

/* ---- launch templates, SSM --------------------------------------------------------------- */

int ec2_parse_launch_template(xmlDoc *doc, Ec2LaunchTemplate **ret) {
        xmlNode *lt = ec2_xml_child(xmlDocGetRootElement(doc), "launchTemplate");
        Ec2LaunchTemplate *t;
        if (!lt)
                return -EBADMSG;
        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->id = ec2_xml_text(lt, "launchTemplateId");
        t->name = ec2_xml_text(lt, "launchTemplateName");
        t->version = (int64_t) u64_path(lt, "latestVersionNumber");
        if (!t->id || !t->name) {
                ec2_launch_template_free(t);
                return -EBADMSG;
        }
        *ret = t;
        return 0;
}

Ec2LaunchTemplate *ec2_launch_template_free(Ec2LaunchTemplate *t) {
        if (!t)
                return NULL;
        free(t->id);
        free(t->name);
        free(t);
        return NULL;
}

int ec2_parse_ssm_parameter(const char *body, char **ret_value) {
        cJSON *j = cJSON_Parse(body);
        if (!j)
                return -EBADMSG;
        const char *v = cJSON_GetStringValue(
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "Parameter"), "Value"));
        char *s = v ? strdup(v) : NULL;
        cJSON_Delete(j);
        if (!v)
                return -EBADMSG;
        if (!s)
                return -ENOMEM;
        *ret_value = s;
        return 0;
}

Ec2TerminateResult *ec2_terminate_result_free(Ec2TerminateResult *t) {
        if (!t)
                return NULL;
        ec2_strv_free(t->terminated);
        ec2_strv_free(t->refused);
        free(t);
        return NULL;
}
