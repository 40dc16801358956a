/* The master's state and RPC dispatch, shared by master.c and the tests (which
 * drive the handlers without sockets, with their own clock). */
#ifndef EGM_MASTER_MASTER_INT_H
#define EGM_MASTER_MASTER_INT_H

#include <pthread.h>
#include <stdatomic.h>
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
    uint64_t disconnect_grace_ms; /* a provider whose connections closed is dropped after this */
    uint64_t location_cache_ms;   /* told to clients by Ping (docs/consistency.md) */
    /* Until when (now_ms's clock) a location cached of some force-removed
     * object may still be used: a force remove's caller waits until then. */
    _Atomic uint64_t force_wait_until_ms;
    egm_id_t master_id; /* random per start: clients see a restart */
    /* When this master began serving (now_ms's clock): its start, or with
     * enable_ha its election. Ping tells clients how long ago, which shortens
     * a provider's remount fence (client/liveness.c remount_fence). */
    _Atomic uint64_t serving_since_ms;
    uint64_t (*now_ms)(void); /* monotonic clock; tests replace it */
    /* Set by the master process (and the concurrency test); NULL where tests
     * drive the handlers on one thread. Per-key RPCs hold it shared: the
     * object index and liveness lock what they change. Changes of the segment
     * set and walks over everything (those RPCs, the tick, the admin HTTP
     * reads) hold it exclusive, so segments named by a shared holder stay
     * mounted. Each RPC's mode is in the command table (egm_master_lock_t). Lock
     * order: this -> liveness -> one object shard (every shard only in
     * index order) -> the index's space lock (docs/master.md "Concurrency").
     * `metrics` counts and times every request. */
    pthread_rwlock_t *lock;
    struct egm_master_metrics *metrics;
    /* enable_ha: requests are served only while this master leads (checked
     * per request against the election's fence); NULL = always. */
    const struct egm_election *election;
    /* enable_ha: the epoch this master serves as leader once it has taken
     * over its predecessor's state (0: none yet); requests are served only
     * while the election's epoch is this one. */
    _Atomic int64_t serving_epoch;
    /* enable_ha: the standby's copy of the leader's state (HaApply), and the
     * leader's journal of changes for its standbys; NULL without. */
    struct egm_mirror *mirror;
    struct egm_journal *journal;
    /* How long a request waits for the standbys in sync to confirm the
     * changes it made before it is answered UNREACHABLE. */
    uint64_t journal_wait_ms;
    /* Commits answered before the standbys confirmed them: their slab logs
     * describe them (docs/ha.md "Commits the pool describes"). */
    _Atomic uint64_t commits_described;
    /* Removes answered so: their removal entries in a slab log describe
     * them (docs/ha.md "Removes the pool describes"). */
    _Atomic uint64_t removes_described;
    /* Objects of a standby's copy that removal entries in the slab logs took
     * when this master took over (egm__mirror_install). */
    _Atomic uint64_t takeover_removals;
    /* Objects found in put entries of the slab logs then that its copy
     * lacked: Commits it never received, answered or not (docs/ha.md
     * "Commits the pool describes"); counted before egm__objects_adopt's
     * skips. */
    _Atomic uint64_t takeover_puts;
    /* ha_early_grants: a SlabGrant may be answered before the standbys
     * hold it (docs/ha.md "Grants the standbys do not hold yet"). */
    int early_grants;
    /* egm__now_ms until which a writer granted a slab before the standbys
     * held it may still copy into it (slabs.h EGM_SLAB_EARLY_*): a leader
     * that resigns waits for it first. */
    _Atomic uint64_t early_copies_until_ms;
} egm_master_state_t;

/* Initializes a state lock: writers first (a waiting exclusive holder stops
 * new shared ones), never taken shared twice by one thread. */
egm_status_t egm__master_lock_init(pthread_rwlock_t *lock);
typedef struct {
    egm_objects_params_t objects; /* the object index's: leases, pins, eviction, placement */
    uint64_t client_ttl_ms;       /* a client silent this long is expired */
    /* A provider whose every connection closed without a leaving Ping is
     * dropped after this long unless it comes back (0 = off: the TTL only). */
    uint64_t disconnect_grace_ms;
    uint64_t location_cache_ms; /* how long clients may use a cached location */
} egm_master_state_params_t;
/* params->objects: from egm__objects_params_default, then changed as wanted. */
egm_status_t egm__master_state_init(egm_master_state_t *state,
                                    const egm_master_state_params_t *params);
void egm__master_state_cleanup(egm_master_state_t *state);
/* Periodic work: expires silent clients, discards stale PENDING objects,
 * evicts when usage is above the high watermark. Holds state->lock
 * exclusive (when set). */
void egm__master_state_tick(egm_master_state_t *state, uint64_t now_ms);

struct ProtobufCMessage;

/* One request being handled: what a handler of the command table reads and
 * fills. */
typedef struct {
    uint16_t type;
    /* The request, decoded as its type's request message (rpc/command.h)
     * before the handler runs; freed after it. */
    const struct ProtobufCMessage *request;
    egm_rpc_reply_t *reply; /* the reply payload the handler packs */
    /* Set by the handler: answered with an error status inside a normal
     * reply (counted as a failure by the metrics). */
    int failed;
    /* Set by the handler: every change it made is described in the pool (a
     * Commit whose keys all have their slab log entry and were all
     * committed: docs/ha.md "Commits the pool describes"; a Remove whose
     * keys all have their removal entry in the slab that held them: "Removes
     * the pool describes"), so it is answered
     * without waiting for the standbys; wait_pos: unless an earlier change
     * it depends on is not confirmed yet (the grant of a slab answered
     * before the standbys held it): then once it is. */
    int described;
    uint64_t wait_pos;
    /* Set by the handler: a SlabGrant answered before the standbys hold it
     * (docs/ha.md "Grants the standbys do not hold yet"). */
    int early_grant;
} egm_master_call_t;

typedef egm_status_t (*egm_master_handler_t)(egm_master_state_t *st, egm_master_call_t *call);

/* How a command holds st->lock: shared when it reads or changes objects and
 * clients one key or one client at a time, exclusive when it changes the set
 * of segments or walks every object. */
typedef enum {
    EGM_MASTER_LOCK_SHARED,
    EGM_MASTER_LOCK_EXCLUSIVE,
} egm_master_lock_t;

/* The lock mode of a command whose mode depends on what it asks: read from
 * the request, decoded as the command's message, before any lock is taken. */
typedef egm_master_lock_t (*egm_master_lock_fn)(const struct ProtobufCMessage *request);

/* A row of the master's command table (handlers.c): for each request type of
 * rpc/command.h's EGM_RPC_COMMANDS, its handler and lock mode. A handler runs
 * under the lock its row names and never trades it for another. */
typedef struct {
    uint16_t type;
    egm_master_handler_t handler;
    egm_master_lock_t lock;      /* the mode, unless lock_for is set */
    egm_master_lock_fn lock_for; /* NULL: `lock` for every request */
} egm_master_command_t;

/* The master's row for `type`, NULL for a type it does not serve (unknown,
 * or a session frame the RPC server answers). Thread-safe (constant data). */
const egm_master_command_t *egm__master_command(uint16_t type);
/* How `cmd` holds st->lock for `request` (decoded as its message): its
 * lock_for's answer, else its lock. Thread-safe. */
egm_master_lock_t egm__master_command_lock(const egm_master_command_t *cmd,
                                           const struct ProtobufCMessage *request);

/* The RPC server's hook for a closed connection bound to a client
 * (arg: egm_master_state_t *): egm__liveness_disconnected under st->lock
 * shared. Thread-safe. */
void egm__master_connection_closed(void *arg, const uint8_t peer[16]);

/* StatKey (inspect.c): an object's size, state, replicas, lease and pins,
 * read-only (no lease granted). */
egm_status_t egm__master_handle_stat_key(egm_master_state_t *st, egm_master_call_t *call);

/* RepairGrant, RepairCommit (repair.c): re-replication's work and its
 * commits (docs/rereplication.md). */
egm_status_t egm__master_handle_repair_grant(egm_master_state_t *st, egm_master_call_t *call);
egm_status_t egm__master_handle_repair_commit(egm_master_state_t *st, egm_master_call_t *call);

/* The RPC handler for every type (arg: egm_master_state_t *); see server.h.
 * Decodes the request as its type's message, takes st->lock (when set; shared
 * or exclusive by the command table) and records st->metrics around the
 * handler. Thread-safe. */
egm_status_t egm__master_handle(void *arg, uint16_t type, const uint8_t *payload, size_t len,
                                egm_rpc_reply_t *reply);

#endif
