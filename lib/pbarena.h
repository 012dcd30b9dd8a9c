/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

/* A region allocator for protobuf-c: a message unpacked into it is released at once by
 * pb_arena_free(), without walking it. Unpacking an agent report costs one or two mallocs instead
 * of one per string and sub-message. */
typedef struct PbArena PbArena;

/* size_hint: expected bytes (a few times the packed length is right). */
PbArena *pb_arena_new(size_t size_hint);
PbArena *pb_arena_free(PbArena *a);
ProtobufCAllocator *pb_arena_allocator(PbArena *a);
/* Forget everything allocated, keeping the largest chunk for reuse. */
void pb_arena_reset(PbArena *a);
size_t pb_arena_used(const PbArena *a);
/* As pb_arena_reset(), but a kept chunk larger than max_keep goes too: one large message does
 * not pin its memory for good. */
void pb_arena_trim(PbArena *a, size_t max_keep);
