/* Client liveness and segment mounting: clients register by pinging (or by
 * mounting); a client silent for the TTL is expired, its segments unmounted
 * (ids retired) and every replica on them dropped; a client that says it is
 * leaving is dropped the same way at once.
 *
 * The client table has its own mutex, so pings, host ids and counts are
 * thread-safe. Mounting, unmounting and expiry change the segment table,
 * which is not locked here: their callers hold the master's lock exclusive. */
#ifndef EGM_MASTER_LIVENESS_H
#define EGM_MASTER_LIVENESS_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "master/object_index.h"
#include "master/segment_table.h"

typedef struct egm_liveness egm_liveness_t;

/* Why segments were dropped (egm_master_segments_dropped_total{reason}). */
typedef enum {
    EGM_DROP_UNMOUNTED = 0, /* UnmountSegment from its provider */
    EGM_DROP_LEFT,          /* its provider's leaving Ping */
    EGM_DROP_EXPIRED,       /* its provider silent for the TTL */
    EGM_DROP_DISCONNECTED,  /* its provider's connections closed and stayed closed for the grace */
    EGM_DROP_REASONS
} egm_drop_reason_t;

typedef struct {
    uint64_t segments_dropped[EGM_DROP_REASONS];
    uint64_t disconnects; /* providers whose last connection closed without a leaving Ping */
    uint64_t reconnects;  /* of those, back before being dropped */
} egm_liveness_stats_t;

egm_status_t egm__liveness_create(egm_segment_table_t *segments, egm_object_index_t *objects,
                                  egm_liveness_t **liveness_p);
void egm__liveness_destroy(egm_liveness_t *liveness);

/* Registers or refreshes a client. INVALID_ARG for the nil id ("client"). */
egm_status_t egm__liveness_ping(egm_liveness_t *liveness, egm_id_t client, uint64_t now_ms);
/* Records the host a registered client runs on (its pings carry it), for
 * local_first placement. INVALID_ARG ("host_id") when too long,
 * CLIENT_NOT_FOUND for an unknown client. */
egm_status_t egm__liveness_set_host_id(egm_liveness_t *liveness, egm_id_t client,
                                       const char *host_id);
/* Copies the client's host id into buf ("" when unknown); returns buf. */
const char *egm__liveness_host_id(egm_liveness_t *liveness, egm_id_t client,
                                  char buf[EGM_HOST_ID_MAX]);
/* Mounts a segment of `client` (registering the client). A nil params->owner
 * means the caller; another owner is INVALID_ARG. SEGMENT_EXISTS, or
 * INVALID_ARG naming the descriptor field (egm__segment_validate). */
egm_status_t egm__liveness_mount(egm_liveness_t *liveness, egm_id_t client,
                                 const egm_segment_params_t *params, uint64_t now_ms);
/* Mounts all of `n` segments or none: every descriptor is checked first
 * (owner, fields, ids unique within the list and free at the master), so a
 * refusal changes nothing; should an insertion still fail (out of memory) the
 * ones before it are taken back without retiring their ids. */
egm_status_t egm__liveness_mount_all(egm_liveness_t *liveness, egm_id_t client,
                                     egm_segment_params_t *params, size_t n, uint64_t now_ms);
/* SEGMENT_NOT_FOUND; PERMISSION unless `client` owns it. Drops the replicas on
 * it (objects left without one are deleted) and retires its id. */
egm_status_t egm__liveness_unmount(egm_liveness_t *liveness, egm_id_t client, egm_id_t segment,
                                   uint64_t now_ms);
/* Expires clients silent for ttl_ms or more; returns how many. */
size_t egm__liveness_expire(egm_liveness_t *liveness, uint64_t now_ms, uint64_t ttl_ms);
/* Unregisters a client that says it is leaving (its last ping), at once,
 * unmounting whatever segments it still has exactly as expiry does (a debug
 * line, not expiry's info line): it changes the segment table, so the caller
 * holds the master's lock exclusive. EGM_OK for an unknown client too
 * (nothing to drop); INVALID_ARG for the nil id. */
egm_status_t egm__liveness_leave(egm_liveness_t *liveness, egm_id_t client);
size_t egm__liveness_client_count(egm_liveness_t *liveness);

/* Fast failure detection (docs/master.md "Liveness"). An RPC connection was
 * bound to `client` (its first Ping or MountSegment on it): counted; a client
 * presumed gone is back (its segments serve again). No-op for an unknown
 * client. */
void egm__liveness_connected(egm_liveness_t *liveness, egm_id_t client, uint64_t now_ms);
/* A connection bound to `client` closed. When it was the client's last one,
 * the client is presumed gone: its segments are marked unreachable at once
 * (no replica is placed or committed there: egm_segment_t.unreachable), and
 * egm__liveness_expire_disconnected drops it unless it pings or binds a
 * connection again first. The segment table is only read: the caller holds
 * the master's lock shared at least. */
void egm__liveness_disconnected(egm_liveness_t *liveness, egm_id_t client, uint64_t now_ms);
/* Drops every client presumed gone for grace_ms or more that still owns
 * segments, exactly as expiry does; returns how many (0 when grace_ms is 0:
 * off). The caller holds the master's lock exclusive. */
size_t egm__liveness_expire_disconnected(egm_liveness_t *liveness, uint64_t now_ms,
                                         uint64_t grace_ms);
void egm__liveness_stats(egm_liveness_t *liveness, egm_liveness_stats_t *stats_p);
int egm__liveness_is_known(egm_liveness_t *liveness, egm_id_t client);

#endif
