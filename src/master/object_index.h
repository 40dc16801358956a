/* The object index: key -> object {state, size, replicas, writer, lease, pins}.
 *
 * PutStart places replicas (PENDING) -> PutEnd by the writer (COMPLETE, visible)
 * or PutRevoke (gone). GetReplicaList and ExistKey grant or extend a read lease
 * during which Remove refuses (HAS_LEASE) unless forced. A PENDING object older
 * than put_start_discard_timeout is discarded by egm__objects_sweep_pending
 * and may be taken over by a new PutStart.
 *
 * Eviction (docs/master.md "Eviction, leases and pins"): COMPLETE objects sit
 * in one of two lists in least-recently-used order, recency being the last
 * lease granted (or PutEnd when never read): unpinned ones, and soft-pinned
 * ones. Hard-pinned objects are in neither and are never evicted; PENDING ones
 * neither. An object is protected from eviction while under a live lease and
 * for min_residency_ms after its PutEnd (a put that answered OK stays
 * readable at least that long); a PutStart that only protected objects could
 * make room for answers NO_SPACE, and so does one whose replicas alone are
 * above the high watermark (the background pass would evict it). An eviction
 * walks the lists from their heads, so it costs the objects it evicts plus the
 * protected ones it steps over. Every call takes `now_ms` (monotonic) so that
 * tests control time.
 *
 * Concurrency (docs/master.md "Concurrency"): the index is split into
 * EGM_OBJECTS_SHARDS shards by a hash of the key, each with its own mutex, map,
 * lists and counters; a `space` mutex guards what the shards share (segment
 * allocators, segment replica lists, placement, eviction totals). Every
 * function here is thread-safe: a per-key call locks its key's shard (then
 * `space` when it allocates or frees), a call over every object locks every
 * shard in order, then `space`. Callers never see an object: per-key calls copy
 * what they answer into an egm_object_view_t under the shard lock. The segment
 * table is not locked here: segments must not be mounted or unmounted during a
 * call other than egm__objects_drop_segment (the master's rwlock, held
 * exclusive for those). */
#ifndef EGM_MASTER_OBJECT_INDEX_H
#define EGM_MASTER_OBJECT_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "common/settings.h" /* egm_placement_t: the placement_strategy key's words */
#include "master/segment_table.h"

#define EGM_MASTER_KEY_MAX 4096
#define EGM_MASTER_REPLICA_MAX 16
#define EGM_MASTER_PREFERRED_MAX 256 /* preferred segment names in one request */
/* Defaults of the master's keys (src/common/config.c holds the same values). */
#define EGM_MASTER_PENDING_TIMEOUT_MS 30000u /* put_start_discard_timeout_sec */
#define EGM_MASTER_SOFT_PIN_TTL_MS 1800000u  /* default_kv_soft_pin_ttl: 30 min */
#define EGM_MASTER_EVICTION_HIGH_WATERMARK 0.90
#define EGM_MASTER_EVICTION_RATIO 0.05
#define EGM_MASTER_MIN_RESIDENCY_MS 10000u /* eviction_min_residency_ms */

typedef enum {
    EGM_OBJECT_PENDING = 0,
    EGM_OBJECT_COMPLETE = 1,
} egm_object_state_t;

/* A replica: where one copy of an object lies. Its length is the object's
 * size (egm_object_t.size) and the object holding it is found from its place
 * in the object's replicas[] (egm__replica_object), so neither is stored:
 * a replica is 32 bytes, and with 100 million objects every byte of the
 * record is 100 MB of the master's memory. */
typedef struct egm_replica {
    egm_segment_t *segment; /* NULL once dropped (its segment was unmounted) */
    /* The offset in the segment (a multiple of EGM_OBJECT_ALIGN) with the
     * replica's index in its object's replicas[] in the low bits that the
     * alignment leaves free: egm__replica_offset, egm__replica_object. */
    uint64_t offset_index;
    struct egm_replica *seg_prev; /* list of the replicas in `segment` */
    struct egm_replica *seg_next;
} egm_replica_t;

typedef struct egm_object_link {
    struct egm_object *prev;
    struct egm_object *next;
} egm_object_link_t;

/* One allocation per object: this header (72 bytes), its replicas, its key;
 * with one replica and a 60-byte key, 165 bytes, which malloc serves from
 * its 176-byte chunks. The small fields are packed into the header's last 8
 * bytes. Not kept, because they follow from what is: the key's hash (the
 * shard table's slot has it), each replica's length and object, the last
 * access (egm__objects_last_access: leases all last lease_ttl_ms, so the
 * latest grant is lease_expiry_ms - lease_ttl_ms), and a place in a list of
 * leases (the shard counts its live leases by when they end). */
typedef struct egm_object {
    uint64_t size;
    egm_id_t writer;
    uint64_t lease_expiry_ms; /* 0 = never leased */
    union {
        uint64_t put_start_ms; /* PENDING: discarded pending_timeout_ms after it */
        uint64_t commit_ms;    /* COMPLETE: PutEnd or Commit; not evicted before
                                  commit_ms + min_residency_ms */
    };
    uint64_t lru_seq;          /* order of appends to the LRU lists, over every shard */
    egm_object_link_t link;    /* PENDING (oldest first), unpinned or soft-pinned LRU */
    uint16_t key_len;          /* of the key (egm__object_key), NUL-terminated; <= 4096 */
    uint8_t state : 1;         /* egm_object_state_t */
    uint8_t soft_pin : 1;      /* put with_soft_pin: kept until last access + soft pin TTL */
    uint8_t hard_pin : 1;      /* put with_hard_pin: never evicted */
    uint8_t list : 2;          /* which list `link` is in (object_index.c) */
    uint8_t repair_leased : 1; /* its lease is only re-replication's (repair.h): a plain
                                * remove does not answer HAS_LEASE, it holds the space */
    uint8_t shard;             /* index of the shard holding it */
    uint8_t n_replicas;        /* replicas placed, in replicas[0..n) */
    uint8_t n_live;            /* replicas whose segment is still mounted */
    uint8_t n_slots;           /* replicas[] allocated; the key follows them */
    egm_replica_t replicas[];
} egm_object_t;

_Static_assert(EGM_MASTER_KEY_MAX <= UINT16_MAX, "egm_object_t.key_len is 16 bits");
_Static_assert(EGM_OBJECT_ALIGN >= EGM_MASTER_REPLICA_MAX &&
                   (EGM_OBJECT_ALIGN & (EGM_OBJECT_ALIGN - 1)) == 0,
               "a replica's index fits in the low bits of its aligned offset");

/* The key of obj: key_len bytes and a NUL inside its allocation, after the replicas. */
static inline const char *egm__object_key(const egm_object_t *obj)
{
    return (const char *)&obj->replicas[obj->n_slots];
}

/* Where replica r lies in its segment. */
static inline uint64_t egm__replica_offset(const egm_replica_t *r)
{
    return r->offset_index & ~(uint64_t)(EGM_OBJECT_ALIGN - 1);
}

/* The object whose replicas[] holds r. */
static inline egm_object_t *egm__replica_object(const egm_replica_t *r)
{
    const egm_replica_t *first = r - (r->offset_index & (EGM_OBJECT_ALIGN - 1));
    return (egm_object_t *)((char *)first - offsetof(egm_object_t, replicas));
}

typedef struct egm_object_index egm_object_index_t;

#define EGM_OBJECTS_SHARDS 16 /* a power of two */

/* An object's replica as copied out of the index. `segment` stays valid only
 * while segments cannot be unmounted (the master's lock, held shared). */
typedef struct {
    egm_segment_t *segment;
    uint64_t offset;
    uint64_t length;
} egm_replica_view_t;

/* A copy of an object, taken under its shard's lock: what a reply needs,
 * without a pointer into the index. */
typedef struct {
    egm_object_state_t state;
    uint64_t size;
    egm_id_t writer;
    uint64_t lease_expiry_ms;
    uint64_t put_start_ms;   /* PENDING: its PutStart; COMPLETE: its PutEnd or Commit */
    uint64_t last_access_ms; /* COMPLETE: its PutEnd or Commit, or its latest lease grant */
    uint8_t soft_pin;
    uint8_t hard_pin;
    uint32_t n_replicas; /* replicas still on a mounted segment, in replicas[0..n) */
    egm_replica_view_t replicas[EGM_MASTER_REPLICA_MAX];
} egm_object_view_t;

typedef struct {
    uint64_t lease_ttl_ms;          /* default_kv_lease_ttl */
    uint64_t soft_pin_ttl_ms;       /* default_kv_soft_pin_ttl */
    uint64_t pending_timeout_ms;    /* put_start_discard_timeout_sec * 1000 */
    double eviction_high_watermark; /* eviction_high_watermark_ratio, 0..1 */
    double eviction_ratio;          /* eviction_ratio, 0..1 */
    uint64_t min_residency_ms; /* eviction_min_residency_ms: no eviction this soon after PutEnd */
    egm_placement_t placement; /* placement_strategy */
} egm_objects_params_t;

/* What a PutStart asks for (ReplicateConfig plus the writer's host). */
typedef struct {
    uint32_t replica_num; /* 1..EGM_MASTER_REPLICA_MAX */
    int soft_pin;
    int hard_pin;
    /* Segment names tried first, in this order (best effort): a name matches
     * a segment named exactly so, or every segment named "NAME/..." (the
     * chunks of one pool). Unknown names are skipped. */
    const char *const *preferred_segments;
    size_t n_preferred;
    const char *writer_host_id; /* for local_first; NULL or "" = unknown */
} egm_put_config_t;

typedef struct {
    uint64_t objects; /* keys, PENDING included */
    uint64_t pending;
    uint64_t soft_pinned;    /* objects put with a soft pin (active or lapsed) */
    uint64_t hard_pinned;    /* objects put with a hard pin */
    uint64_t leased;         /* under a live lease as of the latest lease granted or tick (to within
                                lease_ttl_ms / 1024: the shards count leases by when they end) */
    uint64_t used_bytes;     /* allocated in all segments (allocator rounding included) */
    uint64_t capacity_bytes; /* of all mounted segments */
    uint64_t evictions_total;         /* objects evicted since start */
    uint64_t evicted_bytes_total;     /* segment space they freed (every replica) */
    uint64_t eviction_runs_total;     /* evictions started (watermark or a PutStart without room) */
    uint64_t discarded_puts_total;    /* PENDING objects discarded after the timeout */
    uint64_t no_space_total;          /* PutStarts answered NO_SPACE */
    uint64_t held_bytes;              /* of used_bytes: removed under a lease, freed when it ends */
    uint64_t held_extents;            /* the replicas whose space that is */
    uint64_t slabs;                   /* granted to writers, not yet returned (slabs.h) */
    uint64_t slab_bytes;              /* of used_bytes: their space not yet committed */
    uint64_t slab_grants_total;       /* slabs granted since start */
    uint64_t slab_grants_early_total; /* of them, answered before the standbys held them */
    uint64_t slab_expired_total; /* slabs whose lease ended before their writer returned them */
    uint64_t commits_total;      /* objects committed from slabs */
    /* replicas a PutEnd or Commit dropped: on a provider presumed gone */
    uint64_t unreachable_replicas_total;
    uint64_t growing_tables; /* shards whose key table is moving its objects to a larger one */
} egm_object_index_stats_t;

/* Defaults of every parameter (the config keys' defaults). */
void egm__objects_params_default(egm_objects_params_t *params);
/* EGM_ERR_CONFIG naming the config key when a value is out of the range the
 * config table gives it (common/settings.h's bounds). egm__objects_create
 * calls it: its params come from the master's config, already in range, but
 * also from tests, the fuzzer and other callers that fill them by hand. */
egm_status_t egm__objects_params_check(const egm_objects_params_t *params);
egm_status_t egm__objects_create(egm_segment_table_t *segments, const egm_objects_params_t *params,
                                 egm_object_index_t **index_p);
/* Frees every object and returns its space to the segments. */
void egm__objects_destroy(egm_object_index_t *index);
uint64_t egm__objects_lease_ttl_ms(const egm_object_index_t *index);

/* EGM_ERR_INVALID_KEY unless 1..EGM_MASTER_KEY_MAX bytes. */
egm_status_t egm__objects_check_key(const char *key, size_t key_len);
/* The hash the index files a key under: its shard is the top 4 bits, its
 * slot in the shard's table the low bits. For tests that need keys that
 * collide. */
uint64_t egm__objects_key_hash(const char *key, size_t key_len);

/* Places config->replica_num (1..EGM_MASTER_REPLICA_MAX) replicas of `size`
 * bytes on distinct providers (placement.h: zones and hosts first): the
 * preferred ones first (in order), then in the placement strategy's order;
 * none on a provider presumed gone; fewer when fewer providers have room, but at
 * least one, and no more than keep their total under the high watermark of
 * the capacity. When none has room, frees the held space whose lease has
 * ended (egm__objects_release_held) and tries again, then evicts
 * (egm__objects_evict) and tries once more, unless the unprotected objects
 * plus the free space are too few to make room (then nothing is evicted).
 * EXISTS if the key is present (a PENDING
 * one older than the timeout is discarded first), INVALID_ARG for size 0 or a
 * bad replica_num, INVALID_KEY, NO_SPACE when no segment can hold it, when
 * only protected objects could make room, or when one replica is above
 * eviction_high_watermark x capacity. *view_p (optional) receives the new
 * object on success; it is zeroed otherwise. Placement first runs under the
 * key's shard lock only; an eviction locks every shard (and places again
 * first, in case another call freed space meanwhile). */
egm_status_t egm__objects_put_start_with(egm_object_index_t *index, egm_id_t client,
                                         const char *key, size_t key_len, uint64_t size,
                                         const egm_put_config_t *config, uint64_t now_ms,
                                         egm_object_view_t *view_p);
/* The same with only replica_num (no pin, no preference). */
egm_status_t egm__objects_put_start(egm_object_index_t *index, egm_id_t client, const char *key,
                                    size_t key_len, uint64_t size, uint32_t replica_num,
                                    uint64_t now_ms, egm_object_view_t *view_p);
/* PENDING -> COMPLETE, most recently used as of now_ms and not evicted before
 * now_ms + min_residency_ms. Replicas on a segment whose provider is presumed
 * gone (egm_segment_t.unreachable) are dropped first; with none left the put
 * is deleted and NOT_FOUND answered (a slab Commit does the same per extent).
 * NOT_FOUND if absent, INVALID_ARG if another client is the writer. A
 * repeated PutEnd by the writer answers OK (a retried RPC). */
egm_status_t egm__objects_put_end(egm_object_index_t *index, egm_id_t client, const char *key,
                                  size_t key_len, uint64_t now_ms);
/* Frees a PENDING object's space; the key is gone. NOT_FOUND if absent,
 * INVALID_ARG if COMPLETE or another client's. */
egm_status_t egm__objects_put_revoke(egm_object_index_t *index, egm_id_t client, const char *key,
                                     size_t key_len);
/* COMPLETE: *view_p (optional) and the lease extended to now + ttl (the
 * object becomes the most recently used; a soft pin is refreshed). PENDING:
 * NOT_READY. Absent: NOT_FOUND. *view_p is zeroed unless OK. */
egm_status_t egm__objects_get_replicas(egm_object_index_t *index, const char *key, size_t key_len,
                                       uint64_t now_ms, egm_object_view_t *view_p);
/* COMPLETE: OK and the lease refreshed as by GetReplicaList (as Mooncake
 * does); else NOT_FOUND. *view_p (optional) without replicas. */
egm_status_t egm__objects_exist(egm_object_index_t *index, const char *key, size_t key_len,
                                uint64_t now_ms, egm_object_view_t *view_p);
/* Any state: *view_p, without granting a lease or touching the LRU order
 * (StatKey). INVALID_KEY, NOT_FOUND. */
egm_status_t egm__objects_stat(egm_object_index_t *index, const char *key, size_t key_len,
                               egm_object_view_t *view_p);
/* NOT_FOUND; NOT_READY for PENDING and HAS_LEASE under a live lease, unless
 * force. Pins do not protect against Remove. The key is gone at once; the
 * space of an object removed (forced) under a live lease is *held*: it stays
 * allocated, counted as used, until the lease ends (egm__objects_release_held
 * frees it then), so that a reader holding the lease, or a location cached
 * under it, never reads another object's bytes from it. Otherwise the space
 * is freed at once. NO_MEMORY (nothing removed) when the held list cannot
 * grow. *last_grant_ms_p (optional): when the removed object's latest lease
 * was granted (its lease expiry minus
 * lease_ttl_ms, whether or not the lease is still live), 0 when it was never
 * leased (or leased at time 0); 0 on any error. */
egm_status_t egm__objects_remove(egm_object_index_t *index, const char *key, size_t key_len,
                                 int force, uint64_t now_ms, uint64_t *last_grant_ms_p);
/* Client-side allocation (slabs.h; docs/master.md "Client-side allocation").
 * A slab is placed as an object of its size with config's replica_num and
 * preferred segments would be (placement strategy, held space freed, expired
 * slabs returned, watermark), and granted to `client` for pending_timeout_ms:
 * the client may write into it for that long, and what it has not committed
 * by then returns to the pool. Its size: `size` (rounded up to
 * EGM_OBJECT_ALIGN; at most a sixteenth of the capacity, at least min_size)
 * when that fits without evicting, else min_size, evicting for it as a
 * PutStart of a min_size object would (the same NO_SPACE answers). log: the
 * client keeps the slab's commit log (SlabGrant `log`): journaled with the
 * slab, so that a new leader reads that log even before an entry was
 * noted. early_ok (with log; the caller checked that its fence is far
 * enough: slabs.h EGM_SLAB_EARLY_*): the grant may be answered before the
 * standbys hold it when it evicted nothing and takes no space whose free
 * they have not confirmed (view early = 1; recent_frees.h); Commits into
 * it then wait for its grant's confirmation (egm__objects_slab_seen). */
typedef struct {
    uint64_t id;
    uint64_t size;
    uint64_t lease_ms; /* from now */
    int early;         /* answered before the standbys hold it */
    uint32_t n_extents;
    egm_replica_view_t extents[EGM_MASTER_REPLICA_MAX]; /* offset: the extent's base */
} egm_slab_view_t;

egm_status_t egm__objects_slab_grant(egm_object_index_t *index, egm_id_t client, uint64_t size,
                                     uint64_t min_size, int log, int early_ok,
                                     const egm_put_config_t *config, uint64_t now_ms,
                                     egm_slab_view_t *view_p);
/* The commit log entries (common/slab_log.h) seqs[0..n) of slabs ids[i] of
 * `client` were committed or refused (seq 0: none): noted in each slab that
 * is still recorded, expired or not (and journaled, but where journaled[i]
 * says the Commit's batch did: NULL, none did), so that a new leader
 * reads its log past them; a new leader reads only the logs of slabs granted
 * with `log` or with an entry noted. 1 when every key had an entry in a slab
 * granted with `log`, or whose first entry noted the standbys confirmed (a
 * Commit may then be answered before they confirm it: they know the slab's
 * log is kept). *wait_pos_p: 0, or the journal position of the grant of a
 * slab answered before the standbys held it (the latest such), which they
 * have not confirmed yet: the Commit is answered once they do. */
int egm__objects_slab_seen(egm_object_index_t *index, egm_id_t client, size_t n,
                           const uint64_t *ids, const uint64_t *seqs, const uint8_t *journaled,
                           uint64_t *wait_pos_p);
/* Returns the space `client` did not commit in slab `id` (the slab is
 * forgotten). EGM_ERR_NOT_FOUND as egm__slabs_find says. */
egm_status_t egm__objects_slab_return(egm_object_index_t *index, egm_id_t client, uint64_t id,
                                      uint64_t now_ms);
/* Returns every slab whose lease ended at or before now_ms (the master's
 * tick). Bytes freed. Locks only `space`. */
uint64_t egm__objects_expire_slabs(egm_object_index_t *index, uint64_t now_ms);

/* A batch of one per-key call (the ones above but StatKey) over n keys: each
 * key answered through done(arg, i, status, view), view being what
 * egm__objects_put_start_with, _get_replicas or _exist return on OK (NULL
 * otherwise).
 * done runs under the key's shard lock: it copies what it keeps and calls
 * nothing here; a status other than OK from it stops the batch (keys not
 * yet taken are not answered) and is returned. Keys are taken shard by
 * shard, in request order within a shard, up to 32 per hold of its lock,
 * their slots, objects and list neighbours fetched ahead so that the cache
 * misses of the keys overlap; each key's call is that of the one-key
 * function (the same leases, pins and answers). Objects of one batch
 * therefore take their LRU places in that order, not in request order (they
 * are used at one instant). A PutStart that must evict lets its shard go
 * while it locks every shard, as the one-key call does. EGM_ERR_NO_MEMORY for
 * the scratch. */
typedef enum {
    EGM_OBJECTS_PUT_START,
    EGM_OBJECTS_GET_REPLICAS,
    EGM_OBJECTS_EXIST,
    EGM_OBJECTS_PUT_END,
    EGM_OBJECTS_PUT_REVOKE,
    EGM_OBJECTS_REMOVE,
    /* Commit: key i, sizes[i] bytes, already written at offsets[i] of slab
     * slab_ids[i] (granted to `client`, lease live) is claimed from the slab
     * and becomes COMPLETE at once, with config's pins. A key that exists
     * (EXISTS, as PutStart answers) gives its range back to the pool. The
     * ranges of every key are claimed first, in request order, under one
     * hold of `space` (a writer's offsets grow with the request order, so
     * each claim takes the head of the slab's unclaimed space); a range
     * whose key the batch never takes (done() stopped it) goes back to the
     * pool at its end. */
    EGM_OBJECTS_COMMIT,
} egm_objects_op_t;

typedef struct {
    egm_objects_op_t op;
    egm_id_t client;                /* PutStart, PutEnd, PutRevoke: the writer */
    const uint64_t *sizes;          /* PutStart, Commit: per key */
    const egm_put_config_t *config; /* PutStart; Commit (its pins) */
    const uint64_t *slab_ids;       /* Commit, Remove (with log_seqs): per key */
    const uint64_t *offsets;        /* Commit: per key, in its slab */
    /* Commit, Remove (optional): per key, its entry in the slab's commit log (0:
     * none); a key refused after its claim is journaled SLAB_SEEN before
     * the claimed range is freed (a new leader must not adopt that entry
     * over whoever is given the range next). */
    const uint64_t *log_seqs;
    /* Commit (optional, with log_seqs): set to 1 for each key whose entry
     * the batch journaled as seen (committed, or refused after its claim):
     * egm__objects_slab_seen need not journal it again. */
    uint8_t *log_journaled;
    int force; /* Remove */
    /* Remove (optional, with slab_ids and log_seqs: docs/ha.md "Removes the
     * pool describes"): per key, its removal entry in the commit log of
     * slab slab_ids[i] of `client`, which says that a replica of the key's
     * object lies at removal_offsets[i] of segment removal_segments[i]. A key
     * removed is journaled SLAB_SEEN right after its OBJECT_GONE, before its
     * space is freed (log_journaled set), and removal_placed[i] set to 1 when
     * the object had a replica there and every live replica lay on a provider
     * of one of the slab's extents (the entry is then as durable as the
     * object): a new leader that reads the entry drops the object. */
    const egm_id_t *removal_segments;
    const uint64_t *removal_offsets;
    uint8_t *removal_placed;
    int with_replicas; /* Exist: the view holds the replicas (GetReplicas: always) */
    uint64_t now_ms;
    size_t n;
    const char *const *keys;
    const size_t *key_lens;
    egm_status_t (*done)(void *arg, size_t i, egm_status_t status, const egm_object_view_t *view);
    void *arg;
    /* Remove (optional): set to the latest lease grant over the keys the
     * batch removed, as egm__objects_remove reports it (0: none ever leased). */
    uint64_t *last_grant_ms_p;
    /* Commit (optional): the ids of the slabs its keys name that lost an
     * extent (its segment dropped, or its provider presumed gone), each once,
     * for the writer to place nothing more there: the last degraded_max of
     * them in request order (a writer's open slab is its latest); *n_degraded_p
     * (required with degraded_slabs) their count. */
    uint64_t *degraded_slabs;
    size_t degraded_max;
    size_t *n_degraded_p;
} egm_objects_batch_t;

egm_status_t egm__objects_batch(egm_object_index_t *index, const egm_objects_batch_t *b);

/* Every COMPLETE object without a live lease; with force every object
 * (PENDING ones too; the space of leased ones held as by
 * egm__objects_remove, and one whose space cannot be held for lack of memory
 * is kept). Returns the number removed. *last_grant_ms_p
 * (optional): the latest lease grant over the removed objects, as
 * egm__objects_remove reports it (0 when none was ever leased). */
uint64_t egm__objects_remove_all(egm_object_index_t *index, int force, uint64_t now_ms,
                                 uint64_t *last_grant_ms_p);
/* Frees the held space (egm__objects_remove) whose lease ended at or before
 * now_ms; the master's tick calls it, and a PutStart that finds no room
 * (before it evicts). Returns the bytes freed (allocator rounding
 * included). Locks only `space`. */
uint64_t egm__objects_release_held(egm_object_index_t *index, uint64_t now_ms);
/* Discards PENDING objects started pending_timeout_ms or more ago. */
size_t egm__objects_sweep_pending(egm_object_index_t *index, uint64_t now_ms);
/* Evicts COMPLETE objects, least recently used first, until `bytes` of
 * segment space are freed or nothing evictable is left: first unpinned
 * objects and those whose soft pin lapsed, then soft-pinned ones; never one
 * under a live lease, within min_residency_ms of its PutEnd, hard-pinned or
 * PENDING. Returns the bytes freed. */
uint64_t egm__objects_evict(egm_object_index_t *index, uint64_t bytes, uint64_t now_ms);
/* Background eviction (the master's tick): when used / capacity (PENDING
 * objects' space included) is above the high watermark, evicts COMPLETE
 * objects until they fill at most (watermark - eviction_ratio) of the space
 * that PENDING objects leave: with no put in flight, down to that share of
 * capacity; space held by unfinished puts, which eviction cannot free, does
 * not make it take every finished object. Returns the bytes freed. */
uint64_t egm__objects_evict_if_needed(egm_object_index_t *index, uint64_t now_ms);
/* Drops every replica placed in `segment` (about to be unmounted), and its
 * held space (the memory goes with the segment: no reader left to protect);
 * objects left without replicas are deleted. Returns the number of objects
 * deleted. */
size_t egm__objects_drop_segment(egm_object_index_t *index, egm_segment_t *segment);

/* Re-replication (master/repair.h: the queue and what calls these). */
struct egm_repair_queue;
struct egm_repair_task_s;
/* The index's queue of objects that lost replicas with a dropped segment
 * (egm__objects_drop_segment queues every object left with fewer live
 * replicas than it was placed with and at least one). */
struct egm_repair_queue *egm__objects_repair_queue(egm_object_index_t *index);
/* For a COMPLETE object with fewer live replicas than placed: allocates an
 * extent of its size on a segment of a provider that holds none of its
 * replicas (egm__repair_target_ok), holds it until now_ms + lease_ttl_ms (the
 * held list; counted as used), grants the object a read lease and fills
 * *task (source: its first live replica). NOT_FOUND (absent), NOT_READY
 * (PENDING), EXISTS (every replica live), NO_SPACE (no such segment with
 * room), NO_MEMORY, INVALID_KEY, and BUSY while a reader's lease is live
 * unless over_readers: the repair's lease would lengthen it, and a plain
 * remove answers HAS_LEASE for a reader's lease only. */
egm_status_t egm__objects_repair_start(egm_object_index_t *index, const char *key, size_t key_len,
                                       uint64_t now_ms, int over_readers,
                                       struct egm_repair_task_s *task);
/* Ends a task: takes its target extent off the held list and makes it a
 * replica of the key's object (in a dropped replica's slot) when copied, the
 * lease has not ended, and the object still has the task's source as a live
 * replica, a dropped slot and no live replica on the target's provider;
 * otherwise frees the extent (if it was still held) and answers why:
 * SEGMENT_NOT_FOUND, NOT_FOUND, TRANSFER (!copied), LEASE_EXPIRED,
 * INVALID_ARG (the object changed). *still_under_p: the key's object still
 * has fewer live replicas than placed. */
egm_status_t egm__objects_repair_end(egm_object_index_t *index, const char *key, size_t key_len,
                                     const struct egm_repair_task_s *task, int copied,
                                     uint64_t now_ms, int *still_under_p);

/* ---- master HA: the state a new leader takes over (docs/ha.md) ---------- */
struct egm_journal;
struct egm_jbuf;
/* Where this index tells its changes (journal.h); NULL: nowhere. Set before
 * any other thread uses the index. */
void egm__objects_set_journal(egm_object_index_t *index, struct egm_journal *journal);
/* Appends to b (an egm_jbuf_t) the journal ops that describe the index as
 * of now_ms: every COMPLETE object, and every range in use without one
 * (PENDING objects' replicas, slabs, held space) with how long it stays in
 * use. Locks every shard and `space`. */
void egm__objects_snapshot(egm_object_index_t *index, struct egm_jbuf *b, uint64_t now_ms);

/* An object, or a range in use, as the previous leader had it. */
typedef struct {
    const char *key;
    size_t key_len;
    uint64_t size;
    egm_id_t writer;
    uint8_t soft_pin, hard_pin;
    uint8_t placed; /* replicas it was placed with (>= n_replicas: the rest were lost) */
    uint32_t n_replicas;
    egm_segment_t *segment[EGM_MASTER_REPLICA_MAX]; /* NULL: a segment no longer mounted */
    uint64_t offset[EGM_MASTER_REPLICA_MAX];
} egm_adopt_object_t;

typedef struct {
    egm_segment_t *segment;
    uint64_t offset;
    uint64_t length;
    uint64_t until_ms; /* now_ms's clock */
} egm_adopt_range_t;

/* Takes over a previous leader's objects and ranges into this index, which
 * holds none yet (its segments are mounted and empty): each object becomes
 * COMPLETE at exactly its replicas' places, committed and leased as of
 * now_ms (a reader of the previous leader may still hold a lease on it, so
 * it is not removed without force nor evicted for lease_ttl_ms); objects
 * left with fewer live replicas than placed are queued for re-replication;
 * each range is held (used, as a removed object's space under a lease)
 * until its until_ms wherever no object lies. A replica overlapping one
 * taken before is skipped (an object left without any is dropped), each
 * counted in *skipped_p. EGM_ERR_NO_MEMORY (what was adopted stays). */
egm_status_t egm__objects_adopt(egm_object_index_t *index, const egm_adopt_object_t *objects,
                                size_t n, const egm_adopt_range_t *ranges, size_t m,
                                uint64_t now_ms, size_t *adopted_p, size_t *skipped_p);

/* The object itself, without any lock: only for a caller that no other
 * thread can race (tests; the master's lock held exclusive). */
const egm_object_t *egm__objects_find(const egm_object_index_t *index, const char *key,
                                      size_t key_len);
/* Counters and usage; O(segments + shards). */
void egm__objects_stats(const egm_object_index_t *index, egm_object_index_stats_t *stats_p);
/* Walks every object, list and mounted segment and checks them against each
 * other (not while a Commit runs: the ranges it claimed belong to no object
 * until its keys are taken): shards, lists and counters agree; every live replica is on a mounted
 * segment, in its replica list, within its bounds, one per segment; each
 * segment's allocator holds exactly its replicas' bytes plus its held
 * space; every held extent is on a mounted segment and the held totals
 * agree. EGM_ERR_INTERNAL naming the first broken invariant.
 * O(objects + segments x held extents): for tests. */
egm_status_t egm__objects_check(egm_object_index_t *index);

#endif
