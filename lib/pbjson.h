/* SPDX-License-Identifier: Apache-2.0 */
/* protobuf-c messages rendered as JSON. */
#pragma once

#include <cjson/cJSON.h>
#include <protobuf-c/protobuf-c.h>

/* Any protobuf-c message as JSON, through its descriptor: proto3 JSON field names (lowerCamel),
 * enum values by name, bytes as base64 omitted unless with_bytes, default-valued scalars
 * omitted, 64-bit integers as JSON numbers (exact below 2^53, which every field here is). */
int pb_to_json(const ProtobufCMessage *m, bool with_bytes, cJSON **ret);
