/* The object index: key -> object {state, size, replicas, writer, lease}.
 *
 * PutStart places replicas (PENDING) -> PutEnd by the writer (COMPLETE, visible)
 * or PutRevoke (gone). GetReplicaList and ExistKey grant or extend a read lease
 * during which Remove refuses (HAS_LEASE) unless forced. A PENDING object older
 * than EGM_MASTER_PENDING_TIMEOUT_MS is discarded by egm__objects_sweep_pending
 * and may be taken over by a new PutStart. Every call takes `now_ms` (monotonic)
 * so that tests control time. */
#ifndef EGM_MASTER_OBJECT_INDEX_H
#define EGM_MASTER_OBJECT_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "master/segment_table.h"

#define EGM_MASTER_KEY_MAX 4096
#define EGM_MASTER_REPLICA_MAX 16
#define EGM_MASTER_PENDING_TIMEOUT_MS 30000u

typedef enum {
    EGM_OBJECT_PENDING = 0,
    EGM_OBJECT_COMPLETE = 1,
} egm_object_state_t;

typedef struct egm_replica {
    egm_segment_t *segment; /* NULL once dropped (its segment was unmounted) */
    struct egm_object *object;
    uint64_t offset;
    uint64_t length;
    struct egm_replica *seg_prev; /* list of the replicas in `segment` */
    struct egm_replica *seg_next;
} egm_replica_t;

typedef struct egm_object {
    egm_object_state_t state;
    uint64_t size;
    egm_id_t writer;
    uint64_t lease_expiry_ms; /* 0 = never leased */
    uint64_t put_start_ms;
    struct egm_object *pending_prev; /* PENDING objects, oldest first */
    struct egm_object *pending_next;
    uint32_t n_replicas; /* slots in replicas[] */
    uint32_t n_live;     /* replicas whose segment is still mounted */
    char *key;           /* NUL-terminated, inside this allocation */
    size_t key_len;
    egm_replica_t replicas[];
} egm_object_t;

typedef struct egm_object_index egm_object_index_t;

typedef struct {
    uint64_t objects;
    uint64_t pending;
} egm_object_index_stats_t;

/* lease_ttl_ms: the read lease GetReplicaList and ExistKey grant. */
egm_status_t egm__objects_create(egm_segment_table_t *segments, uint64_t lease_ttl_ms,
                                 egm_object_index_t **index_p);
/* Frees every object and returns its space to the segments. */
void egm__objects_destroy(egm_object_index_t *index);
uint64_t egm__objects_lease_ttl_ms(const egm_object_index_t *index);

/* EGM_ERR_INVALID_KEY unless 1..EGM_MASTER_KEY_MAX bytes. */
egm_status_t egm__objects_check_key(const char *key, size_t key_len);

/* Places `replica_num` (1..EGM_MASTER_REPLICA_MAX) replicas of `size` bytes on
 * distinct segments chosen at random among those with room; fewer when fewer
 * segments have room, but at least one. EXISTS if the key is present (a PENDING
 * one older than the timeout is discarded first), INVALID_ARG for size 0 or a
 * bad replica_num, INVALID_KEY, NO_SPACE when no segment can hold it.
 * *object_p (optional) stays valid until the next call that changes the index. */
egm_status_t egm__objects_put_start(egm_object_index_t *index, egm_id_t client, const char *key,
                                    size_t key_len, uint64_t size, uint32_t replica_num,
                                    uint64_t now_ms, const egm_object_t **object_p);
/* PENDING -> COMPLETE. NOT_FOUND if absent, INVALID_ARG if another client is
 * the writer. A repeated PutEnd by the writer answers OK (a retried RPC). */
egm_status_t egm__objects_put_end(egm_object_index_t *index, egm_id_t client, const char *key,
                                  size_t key_len);
/* Frees a PENDING object's space; the key is gone. NOT_FOUND if absent,
 * INVALID_ARG if COMPLETE or another client's. */
egm_status_t egm__objects_put_revoke(egm_object_index_t *index, egm_id_t client, const char *key,
                                     size_t key_len);
/* COMPLETE: *object_p and the lease extended to now + ttl. PENDING: NOT_READY.
 * Absent: NOT_FOUND. */
egm_status_t egm__objects_get_replicas(egm_object_index_t *index, const char *key, size_t key_len,
                                       uint64_t now_ms, const egm_object_t **object_p);
/* COMPLETE: OK and the lease refreshed (as Mooncake does); else NOT_FOUND. */
egm_status_t egm__objects_exist(egm_object_index_t *index, const char *key, size_t key_len,
                                uint64_t now_ms, const egm_object_t **object_p);
/* NOT_FOUND; NOT_READY for PENDING and HAS_LEASE under a live lease, unless force. */
egm_status_t egm__objects_remove(egm_object_index_t *index, const char *key, size_t key_len,
                                 int force, uint64_t now_ms);
/* Every COMPLETE object without a live lease; with force every object
 * (PENDING ones too). Returns the number removed. */
uint64_t egm__objects_remove_all(egm_object_index_t *index, int force, uint64_t now_ms);
/* Discards PENDING objects started EGM_MASTER_PENDING_TIMEOUT_MS or more ago. */
size_t egm__objects_sweep_pending(egm_object_index_t *index, uint64_t now_ms);
/* Drops every replica placed in `segment` (about to be unmounted); objects left
 * without replicas are deleted. Returns the number of objects deleted. */
size_t egm__objects_drop_segment(egm_object_index_t *index, egm_segment_t *segment);

const egm_object_t *egm__objects_find(const egm_object_index_t *index, const char *key,
                                      size_t key_len);
void egm__objects_stats(const egm_object_index_t *index, egm_object_index_stats_t *stats_p);

#endif
