/* The master's state and RPC dispatch, shared by master.c and the tests (which
 * drive the handlers without sockets, with their own clock). */
#ifndef EGM_MASTER_MASTER_INT_H
#define EGM_MASTER_MASTER_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "master/liveness.h"
#include "master/object_index.h"
#include "master/segment_table.h"
#include "rpc/server.h"

#define EGM_MASTER_MAX_KEYS 65536 /* keys in one request */
#define EGM_MASTER_TICK_MS 1000   /* period of expiry and the pending sweep */

typedef struct {
    egm_segment_table_t *segments;
    egm_object_index_t *objects;
    egm_liveness_t *liveness;
    uint64_t client_ttl_ms;
    egm_id_t master_id;       /* random per start: clients see a restart */
    uint64_t (*now_ms)(void); /* monotonic clock; tests replace it */
    /* Set by the master process (and the concurrency test); NULL where tests
     * drive the handlers on one thread. Per-key RPCs (PutStart, PutEnd,
     * PutRevoke, GetReplicaList, ExistKey, Remove, StatKey, Ping) hold it
     * shared: the object index and liveness lock what they change. Changes of
     * the segment set and walks over everything (Mount/UnmountSegment,
     * RemoveAll, ListSegments, the tick, the admin HTTP reads) hold it
     * exclusive, so segments named by a shared holder stay mounted. Lock
     * order: this -> liveness -> one object shard (every shard only in
     * index order) -> the index's space lock (docs/master.md "Concurrency").
     * `metrics` counts and times every request. */
    pthread_rwlock_t *lock;
    struct egm_master_metrics *metrics;
} egm_master_state_t;

/* Initializes a state lock: writers first (a waiting exclusive holder stops
 * new shared ones), never taken shared twice by one thread. */
egm_status_t egm__master_lock_init(pthread_rwlock_t *lock);
/* The object index's defaults (egm__objects_params_default) with lease_ttl_ms. */
egm_status_t egm__master_state_init(egm_master_state_t *state, uint64_t lease_ttl_ms,
                                    uint64_t client_ttl_ms);
/* With every object index parameter (leases, pins, eviction, placement). */
egm_status_t egm__master_state_init_with(egm_master_state_t *state,
                                         const egm_objects_params_t *objects,
                                         uint64_t client_ttl_ms);
void egm__master_state_cleanup(egm_master_state_t *state);
/* Periodic work: expires silent clients, discards stale PENDING objects,
 * evicts when usage is above the high watermark. Holds state->lock
 * exclusive (when set). */
void egm__master_state_tick(egm_master_state_t *state, uint64_t now_ms);

/* StatKey (inspect.c): an object's size, state, replicas, lease and pins,
 * read-only (no lease granted). */
egm_status_t egm__master_handle_stat_key(egm_master_state_t *st, const uint8_t *payload, size_t len,
                                         egm_rpc_reply_t *reply);

/* The RPC handler for every type (arg: egm_master_state_t *); see server.h.
 * Takes st->lock (when set; shared or exclusive by type, see above) and
 * records st->metrics around the handler. Thread-safe. */
egm_status_t egm__master_handle(void *arg, uint16_t type, const uint8_t *payload, size_t len,
                                egm_rpc_reply_t *reply);

#endif
