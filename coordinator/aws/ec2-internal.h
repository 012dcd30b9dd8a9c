/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The EC2 client's pure pieces (request bodies, answer parsing, backoff), shared by ec2.c and
 * its unit tests. Nothing here does I/O. */

#include <libxml/tree.h>

#include "ec2.h"
#include "strbuf.h"

#define EC2_API_VERSION "2016-11-15"
#define EC2_QUERY_MAX (256u * 1024)  /* a request body */
#define EC2_BODY_MAX (16u * 1024 * 1024) /* an answer (a DescribeInstanceTypes page is ~3 MB) */

/* ---- form-encoded Query API bodies ----------------------------------------------------- */
int ec2_query_init(StrBuf *b, const char *action);
int ec2_query_add(StrBuf *b, const char *key, const char *value);
int ec2_query_addf(StrBuf *b, const char *value, const char *keyfmt, ...) _printf_(3, 4);
int ec2_query_add_list(StrBuf *b, const char *prefix, const char *const *values);
int ec2_query_add_filters(StrBuf *b, unsigned first, const Ec2Filter *filters, size_t n);
int ec2_query_add_tags(StrBuf *b, const char *prefix, const Ec2Tag *tags, size_t n);

int ec2_build_create_fleet(const Ec2FleetSpec *spec, const char *cluster, StrBuf *b);
int ec2_build_create_launch_template(const Ec2LaunchTemplateSpec *spec, const char *cluster,
                                     StrBuf *b);
/* An IAM instance-profile request (Version 2010-05-08). */
int ec2_build_iam(const Ec2IamRequest *req, StrBuf *b);
int ec2_build_spot_prices(const char *const *types, int64_t start_time, StrBuf *b);
int ec2_build_cluster_instances(const char *cluster, const char *const *states,
                                const Ec2Filter *filters, size_t n_filters, StrBuf *b);
/* SSM GetParameter JSON body. */
char *ec2_build_ssm_get_parameter(const char *name);

/* ---- answers ------------------------------------------------------------------------- */
/* Parse an answer; an error document fills *ret_error (kind from code and status) and returns
 * -EPROTO; an unreadable one -EBADMSG. */
/* Any AWS XML answer (EC2, STS): NULL when unreadable or when it carries a DTD. */
xmlDoc *ec2_xml_read(const char *body, size_t len);
int ec2_xml_parse(const char *body, size_t len, long status, xmlDoc **ret, Ec2Error *ret_error);
xmlNode *ec2_xml_child(xmlNode *parent, const char *name);
char *ec2_xml_text(xmlNode *parent, const char *name); /* child's text, strdup'd, or NULL */
/* NextToken of a Describe* page (strdup'd) or NULL. */
char *ec2_xml_next_token(xmlDoc *doc);
/* SSM (JSON 1.1) error bodies: {"__type": "...#Code", "message": "..."}. */
int ec2_json_error(const char *body, long status, Ec2Error *ret);

/* Page parsers: append to *list (items bounded by max_items: -ENOBUFS beyond). */
int ec2_parse_instance_types(xmlDoc *doc, Ec2InstanceTypeList *list, size_t max_items);
int ec2_parse_offerings(xmlDoc *doc, Ec2OfferingList *list, size_t max_items);
int ec2_parse_spot_prices(xmlDoc *doc, Ec2SpotPriceList *list, size_t max_items);
int ec2_parse_subnets(xmlDoc *doc, Ec2SubnetList *list, size_t max_items);
int ec2_parse_security_groups(xmlDoc *doc, Ec2SecurityGroupList *list, size_t max_items);
int ec2_parse_images(xmlDoc *doc, Ec2ImageList *list, size_t max_items);
int ec2_parse_instances(xmlDoc *doc, Ec2InstanceList *list, size_t max_items);
int ec2_parse_capacity_reservations(xmlDoc *doc, Ec2CapacityReservationList *list, size_t max_items);
int ec2_parse_create_fleet(xmlDoc *doc, Ec2FleetResult **ret);
int ec2_parse_launch_template(xmlDoc *doc, Ec2LaunchTemplate **ret);
/* Ids TerminateInstances accepted (instancesSet/item/instanceId), NULL-terminated. */
int ec2_parse_terminated(xmlDoc *doc, char ***ret);
/* The first RoleName anywhere in an IAM answer (strdup'd), or NULL. */
char *ec2_parse_iam_role(xmlDoc *doc);
int ec2_parse_ssm_parameter(const char *body, char **ret_value);

/* Keep the newest record per (type, zone), sorted by type then zone. */
void ec2_spot_prices_latest(Ec2SpotPriceList *l);
/* Newest first by creation date. */
void ec2_images_sort(Ec2ImageList *l);

/* ---- retries --------------------------------------------------------------------------- */
/* Delay before attempt number `attempt` (2 = the first retry): half of min(cap, base·2^(attempt-2))
 * plus a random share of the other half, rnd in [0, UINT32_MAX]. */
uint64_t ec2_backoff_usec(unsigned attempt, uint64_t base, uint64_t cap, uint32_t rnd);

char **ec2_strv_free(char **l);
int ec2_strv_push(char ***l, size_t *n, const char *s);
size_t ec2_strv_length(char *const *l);
