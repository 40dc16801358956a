/* Mounted segments by id, each with its descriptor, its allocator and the
 * replicas placed in it; and the retired ids with a view number, so that
 * clients learn which ids to forget (DESIGN.md section 3). */
#ifndef EGM_MASTER_SEGMENT_TABLE_H
#define EGM_MASTER_SEGMENT_TABLE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "master/allocator.h"
#include "rpc/keys_reply.h"
#include "rpc/segment_desc.h"

/* A segment's size, and all mounted segments' together: the totals the master
 * keeps are sums of sizes (1 PiB a segment, 2^62 bytes in all). */
#define EGM_SEGMENT_SIZE_MAX (1ull << 50)
#define EGM_CAPACITY_MAX (1ull << 62)

#define EGM_MASTER_RETIRED_HISTORY 4096

struct egm_replica; /* object_index.h */

typedef struct {
    egm_id_t id;
    egm_id_t owner;
    uint64_t size;
    const char *name;
    const char *host_id;      /* NULL = "" */
    const char *zone;         /* NULL = "" */
    const char *tcp_endpoint; /* NULL = "" */
    const char *shm_socket;   /* NULL = "" */
    int handle_kind;
    const uint8_t *fabric_handle;
    size_t fabric_handle_len;
} egm_segment_params_t;

typedef struct egm_segment {
    /* What clients receive in replies (rpc/segment_desc.h); never changes
     * while the segment is mounted. */
    egm_segment_desc_t desc;
    /* desc as a SegmentDesc's wire bytes, packed once at mount: every reply
     * naming the segment copies them (egm_keys_reply_msg_t.packed_segments). */
    egm_pb_slice_t desc_pb;

    /* Guarded by the object index's `space` lock (object_index.h). */
    egm_allocator_t *allocator;
    uint64_t replica_count;       /* replicas (= objects) placed here */
    struct egm_replica *replicas; /* their list, maintained by object_index.c */
    size_t index;                 /* position in the table's dense array */
    /* 1 while its provider is presumed gone: every connection it held to the
     * master closed without a leaving Ping (liveness.h). No replica is placed
     * or committed here meanwhile; set and cleared by liveness, read by
     * placement and commits, on any thread (the segment stays mounted while
     * the state lock is held). */
    atomic_int unreachable;
} egm_segment_t;

typedef struct egm_segment_table egm_segment_table_t;

/* history: how many retired ids are remembered (0 = EGM_MASTER_RETIRED_HISTORY). */
egm_status_t egm__segment_table_create(size_t history, egm_segment_table_t **table_p);
/* Frees every segment (their replica lists must be empty or abandoned). */
void egm__segment_table_destroy(egm_segment_table_t *table);

/* EGM_ERR_INVALID_ARG naming the field ("segment.id", "segment.size", ...):
 * nil id or owner, size < EGM_ALLOCATOR_ALIGN, empty name, then the rules of
 * every descriptor (rpc/segment_desc.h: strings, shm_socket, handle), which
 * the clients' egm__segment_desc_from_pb applies too (fuzz/fuzz_segment_desc.c
 * checks it), so every descriptor the master hands out decodes at the clients. */
egm_status_t egm__segment_validate(const egm_segment_params_t *params);
/* Validates and checks the id is free: EGM_ERR_SEGMENT_EXISTS for an id
 * mounted now or remembered as retired (ids are never reused). */
egm_status_t egm__segment_table_check(const egm_segment_table_t *table,
                                      const egm_segment_params_t *params);
/* Checks (egm__segment_table_check), then adds. */
egm_status_t egm__segment_table_mount(egm_segment_table_t *table,
                                      const egm_segment_params_t *params,
                                      egm_segment_t **segment_p);
egm_segment_t *egm__segment_table_find(const egm_segment_table_t *table, egm_id_t id);
size_t egm__segment_table_count(const egm_segment_table_t *table);
/* The mount parameters a SegmentDesc from the wire asks for (a MountSegment's,
 * or one kept by a standby's mirror): pointers into d, unchecked
 * (egm__segment_table_check checks them). */
egm_segment_params_t egm__segment_params_from_pb(const Egm__SegmentDesc *d);
/* i < count; order changes when segments are removed. */
egm_segment_t *egm__segment_table_at(const egm_segment_table_t *table, size_t i);
/* Removes and frees the segment, retires its id and bumps the view. The caller
 * has already dropped the replicas placed in it. */
void egm__segment_table_remove(egm_segment_table_t *table, egm_segment_t *segment);
struct egm_journal;
/* Where mounts and removals are told (master/journal.h); NULL: nowhere. */
void egm__segment_table_set_journal(egm_segment_table_t *table, struct egm_journal *journal);
/* Takes back a segment mounted in this same reactor turn (no replica, no
 * client has seen it): removed and freed without retiring its id or bumping
 * the view, so a retry may mount it again. */
void egm__segment_table_unpublish(egm_segment_table_t *table, egm_segment_t *segment);

/* Changes whenever a segment is mounted or removed (placement caches what it
 * counts of the segment set under it). */
uint64_t egm__segment_table_generation(const egm_segment_table_t *table);
/* Current view: the number of ids retired since the table was created. */
uint64_t egm__segment_table_view(const egm_segment_table_t *table);
/* Ids retired after `since` (oldest first) into an egm_malloc'ed array (NULL
 * when none). *reset_p = 1 and no ids when `since` is in the future or older
 * than the history: the caller must then forget every segment it knows. */
egm_status_t egm__segment_table_retired_since(const egm_segment_table_t *table, uint64_t since,
                                              egm_id_t **ids_p, size_t *n_p, int *reset_p);

#endif
