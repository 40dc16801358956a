/* Internals of the store client shared by its files and by the tools. */
#ifndef EGM_CLIENT_CLIENT_INT_H
#define EGM_CLIENT_CLIENT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <egmstore/client.h>
#include "client/location_cache.h"
#include "client/phases.h"
#include "common/id.h"
#include "common/workers.h"
#include "pool/host_pool.h"
#include "pool/vmm_pool.h"
#include "rpc/client.h"
#include "rpc/keys_reply.h"
#include "te/registry.h"
#include "rpc/segment_desc.h"
#include "te/te.h"
#include "egmstore.pb-c.h"

/* Capacity this client contributes: one segment per pool chunk, published
 * at the master all together once every chunk is ready. */
typedef struct {
    egm_host_pool_t *pool;        /* pool_memory = host */
    egm_vmm_pool_t *vmm;          /* pool_memory = host_numa | device, or the EGM pool */
    egm_segment_desc_t *segments; /* one per chunk */
    int *exposed;                 /* segment i served by the transfer engine */
    int *mounted;                 /* segment i mounted at the master */
    size_t count;
    int egm;           /* an EGM Store pool (enable_egm_store_pool) */
    size_t numa_nodes; /* NUMA nodes (or the GPU) the pool spans */
    uint64_t capacity; /* bytes published */
    double setup_seconds;
    /* teardown */
    int cleanup_pending;       /* a step failed; the next close retries */
    uint64_t cleanup_failures; /* steps that failed, over the client's life */
    /* remount (the ping thread, under cap_lock) */
    int live; /* published, not being torn down: a new master gets it again */
} egm_capacity_t;

/* What health and metrics report of the capacity, copied under the client's
 * lock after every change (other threads read it, e.g. a provider's HTTP
 * server). */
typedef struct {
    int egm;
    uint64_t capacity;
    size_t chunks;
    size_t numa_nodes;
    double setup_seconds;
    uint64_t cleanup_failures;
    int cleanup_pending;
} egm_capacity_view_t;

struct egm_client {
    egm_config_t *config;
    egm_id_t id;
    egm_rpc_client_t *master;
    struct egm_master_leader *leader; /* master_server_addr etcd://: finds the master */
    egm_te_t *te;
    egm_registry_t *registry;
    egm_capacity_t capacity;
    int rpc_timeout_ms;
    uint32_t replica_num;

    /* liveness: a thread pings the master and applies retired segment ids */
    pthread_t ping_thread;
    int ping_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stopping;
    uint64_t view;
    int master_reachable;
    int ready;                         /* set up; cleared once closed (under lock) */
    egm_capacity_view_t capacity_view; /* under lock */

    /* master restarts (liveness.c): the ping thread notices a new master id,
     * a view reset, its own segments retired or the master not knowing it,
     * and resynchronises: drops mappings of segments the master does not list
     * and remounts its own under new ids. */
    pthread_mutex_t cap_lock; /* capacity: remount (ping thread) vs mount/unmount */
    egm_id_t master_id;       /* as of the last ping; nil before (ping thread) */
    egm_id_t resync_from;     /* master id when the pending restart was seen (ping thread) */
    unsigned resync_reasons;  /* EGM_RESYNC_* bits waiting (ping thread) */
    int resync_pending;       /* under lock: health reports master_unreachable */
    uint64_t master_restarts; /* under lock: new master ids seen */
    /* Under lock: times the ping thread lost the master, and how long until it
     * was reachable (and resynchronised) again: a failover as this client saw
     * it. lost_at: now_ms of the first failed ping of the outage going on. */
    uint64_t master_outages, master_outage_ms_total, master_last_outage_ms, master_lost_at_ms;
    uint64_t remounts;         /* under lock: segments mounted again */
    uint64_t remount_failures; /* under lock: resync attempts that failed */
    /* The longest location_cache_ms a master told (ping thread): a remount
     * waits it out (liveness.c remount_fence). */
    atomic_uint_fast64_t cache_bound_max_ms;
    int remount_fenced; /* ping thread: the fence of the pending resync was waited;
                         * cleared by a new loss (liveness.c remount_fence) */
    /* How long the master had served (PingReply serving_ms) when its last
     * answer came, and when that was (now_ms): ping thread. */
    uint64_t master_serving_ms, master_serving_seen_ms;

    egm_client_phases_t phases;      /* where put and get time goes (phases.h) */
    egm_location_cache_t *locations; /* lease-cached locations; NULL when off */
    struct egm_wslabs *slabs;        /* client-side allocation (slabs.h) */
    egm_workers_t *workers;          /* pipelined calls' helper threads (pipeline.h) */
};

/* Threads a client keeps for pipelined calls: four per call in flight
 * (pipeline.h), for up to 16 calls at once; more calls make their own. */
#define EGM_CLIENT_WORKERS_MAX 64
/* Keys one request to the master may carry (the master refuses more). */
#define EGM_BATCH_KEYS_PER_CALL 65536

/* Why a resync is pending. */
#define EGM_RESYNC_RESTART 1u        /* the master's id changed */
#define EGM_RESYNC_VIEW_RESET 2u     /* the master cannot say which ids were retired */
#define EGM_RESYNC_OWN_RETIRED 4u    /* the master retired our segments (it expired us) */
#define EGM_RESYNC_UNKNOWN_CLIENT 8u /* the master answered CLIENT_NOT_FOUND */

/* Capacity (capacity.c). The configuration is checked before anything is
 * contacted or allocated. Mount: allocate -> register with the transfer
 * engine -> mount at the master (all segments in one request) -> ready; a
 * failure rolls back in reverse. Unmount: unmount -> unregister -> release,
 * resumable (see egm_client_close); EGM_OK once nothing is held. */
egm_status_t egm__capacity_check_config(const egm_config_t *config);
/* The plan the config's CUDA pool would follow (`provider --plan-only`):
 * driver queries only, nothing allocated. Free with egm__egm_plan_free. */
egm_status_t egm__capacity_plan(const egm_config_t *config, egm_egm_plan_t **plan_p);
egm_status_t egm__capacity_mount(egm_client_t *client, uint64_t total, uint64_t max_chunk);
egm_status_t egm__capacity_unmount(egm_client_t *client);
/* Frees what a failed unmount still holds, abandoning CUDA memory to the
 * process's exit. */
void egm__capacity_abandon(egm_client_t *client);
/* Copies the capacity's state into capacity_view (takes the lock). */
void egm__capacity_publish(egm_client_t *client);
/* 1 when one of ids names a segment this client contributes. */
int egm__capacity_owns_any(egm_client_t *client, const egm_id_t *ids, size_t n);
/* After a master restart (or expiry): every contributed segment whose id is
 * not in `listed` (the master's segments, sorted by egm__capacity_id_compare)
 * is withdrawn from the transfer engine, exposed again under a new random id
 * (same memory) and mounted. Nothing is allocated or freed. Does nothing
 * while the capacity is being set up or torn down. *remounted_p: segments
 * mounted by this call. A failure leaves the rest for the next call. */
egm_status_t egm__capacity_remount(egm_client_t *client, const egm_id_t *listed, size_t n_listed,
                                   size_t *remounted_p);
/* qsort/bsearch order of egm_id_t. */
int egm__capacity_id_compare(const void *a, const void *b);

/* Liveness (liveness.c). Stop ends the ping thread, then tells the master
 * that this client leaves (a last ping: it unregisters it at once). */
egm_status_t egm__liveness_start(egm_client_t *client);
void egm__liveness_stop(egm_client_t *client);

/* Master calls shared by the object files (master_call.c). Replies are
 * decoded by rpc/keys_reply.h into flat arrays; free with egm__keys_reply_free. */
#define EGM_KEYS_CALL_PLAIN 0u
/* Remove: also leased or pinned objects (the request's force). */
#define EGM_KEYS_CALL_FORCE 1u
/* ExistKey: the replicas answered too (the request's locations). */
#define EGM_KEYS_CALL_LOCATIONS 2u
egm_status_t egm__client_keys_call(egm_client_t *client, uint16_t type, size_t n,
                                   const char *const *keys, unsigned flags,
                                   egm_keys_reply_t **reply_p);
/* Sends req (a request whose answer is a KeysReply for n keys) and decodes the
 * answer; a whole-request refusal or a result count other than n fails. */
egm_status_t egm__client_keys_rpc(egm_client_t *client, uint16_t type, const ProtobufCMessage *req,
                                  size_t n, egm_keys_reply_t **reply_p);
/* Checks a reply has one result per key. */
egm_status_t egm__client_check_reply(const egm_keys_reply_t *reply, size_t n);
/* Decodes every segment of a reply into an egm_malloc'ed array. */
egm_status_t egm__client_reply_segments(const egm_keys_reply_t *reply,
                                        egm_segment_desc_t **descs_p);
egm_status_t egm__client_validate_key(const char *key);
/* PutStart for n keys of the given sizes (put.c): the master places each
 * key's replicas. rc NULL: the client's replica_num, no pins. */
egm_status_t egm__client_put_start(egm_client_t *client, size_t n, const char *const *keys,
                                   const uint64_t *sizes, const egm_replicate_config_t *rc,
                                   egm_keys_reply_t **reply_p);

/* Returns the slabs this client is done with (a Commit without keys; put.c). */
void egm__client_return_slabs(egm_client_t *client);

/* The replicas the master placed for one key of a PutStart reply (res, an
 * object of `size` bytes), checked (put.c): at least one, each in a segment
 * the reply describes (descs, from egm__client_reply_segments) and `size`
 * bytes long. segs[r] (room for res->n_replicas, at most
 * EGM_KEYS_REPLY_MAX_REPLICAS) gets replica r's segment. EGM_OK, or
 * EGM_ERR_PROTOCOL naming what is wrong. */
egm_status_t egm__client_placed_segments(const egm_keys_reply_t *reply, const egm_key_result_t *res,
                                         const egm_segment_desc_t *descs, uint64_t size,
                                         const egm_segment_desc_t **segs);

/* Streaming put (put_stream.c), for objects not held in memory whole (the
 * `egmstore put` of a large file or of stdin). `read` fills exactly `len`
 * bytes of buf with the object's next bytes, or answers an error it has set
 * (egm__set_error) naming what failed. */
typedef egm_status_t (*egm_put_read_fn)(void *ctx, void *buf, size_t len);

#define EGM_PUT_STREAM_PART ((size_t)8 << 20) /* default part: one bounce buffer */

typedef struct {
    size_t part_size;                 /* bytes read and written at a time; 0: EGM_PUT_STREAM_PART */
    const egm_replicate_config_t *rc; /* NULL: the client's replica_num, no pins */
    /* After each part, drop this process's pages of the range just written
     * (egm__te_release_pages; the mapping stays): the pool pages written then
     * leave its resident set, which would otherwise grow by the whole object
     * over shm (pool memory shared with the provider, but counted as the
     * process's). For one-shot tools; a long-lived client keeps them. */
    int release_pages;
} egm_put_stream_params_t;

/* Stores `size` bytes under `key` without holding them whole: PutStart(size),
 * before anything is read (a refusal for want of space is NO_SPACE naming both
 * numbers when the size is more than the whole pool, or than its largest
 * segment, since a replica lies in one segment) -> for each part: read it into
 * one bounce buffer and write it to every replica at (replica offset + part
 * offset) through the transfer engine -> PutEnd. A failed read, copy or PutEnd
 * revokes the put (PutRevoke): the key never becomes visible half-written.
 * Memory: one part. params NULL: defaults. INVALID_KEY, INVALID_ARG (size 0,
 * read_part NULL), NO_SPACE, EXISTS, the reader's error, TRANSFER or the copy's. */
egm_status_t egm__put_stream(egm_client_t *client, const char *key, uint64_t size,
                             egm_put_read_fn read_part, void *ctx,
                             const egm_put_stream_params_t *params);
/* The pool as the master lists it: capacity of all segments, of the largest
 * one, and how many (put_stream.c). */
egm_status_t egm__client_pool_capacity(egm_client_t *client, uint64_t *total_p, uint64_t *largest_p,
                                       size_t *segments_p);

/* Every segment the master lists, with its usage (`egmstore ls`, the pool's
 * capacity, liveness); free with egm__rpc_msg_free. A reply whose status is
 * an error is freed and that error answered ("listing segments: ..."):
 * *reply_p is set only with EGM_OK. */
egm_status_t egm__client_list_segments(egm_client_t *client, Egm__ListSegmentsReply **reply_p);

#endif
