/* Lease-cached locations (docs/consistency.md): where an object lies, as a
 * GetReplicaList or an ExistKey asked for locations answered it, kept by the
 * client so that a Get of the same key soon after makes no round trip to the
 * master. Two stores: an entry per key (single lookups, small GetReplicaList
 * answers), and the last few batch lookups kept whole.
 *
 * A location is used only while both of these hold on this client's monotonic
 * clock, counted from when its request was SENT (so never later than the
 * master's own count from when it granted the lease):
 *   - the read lease it came with is live (the master neither evicts the
 *     object nor reuses its space meanwhile, and a non-force Remove refuses it);
 *   - the cache bound has not passed (location_cache_ms, which the master
 *     sends with every keys answer; a force Remove waits that long before it
 *     returns, so no Get that starts after it reads the old value).
 * A Get that fails on a cached location drops it and asks the master. Entries
 * (and every kept lookup) are dropped by this client's own removes, and all of
 * them when the master restarts or cannot be reached. Thread-safe. */
#ifndef EGM_CLIENT_LOCATION_CACHE_H
#define EGM_CLIENT_LOCATION_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "rpc/keys_reply.h"
#include "rpc/segment_desc.h"

/* Replicas an entry keeps (the master places at most 16; more are not cached). */
#define EGM_LOCATION_MAX_REPLICAS 16
/* A cached location is used only up to this long before its lease or bound
 * ends: the copy that follows must finish inside the lease. */
#define EGM_LOCATION_MARGIN_MS 100
/* A full cache looks for expired entries at most this often. */
#define EGM_LOCATION_SWEEP_MS 100

typedef struct {
    uint64_t size;
    uint64_t lease_ttl_ms; /* as granted */
    uint64_t bound_ms;     /* the master's location_cache_ms, from the same reply */
    uint64_t asked_ms;     /* when the GetReplicaList was sent (egm__now_ms) */
    uint32_t n_replicas;
    egm_replica_desc_t replicas[EGM_LOCATION_MAX_REPLICAS];
} egm_location_t;

typedef struct {
    uint64_t hits;
    uint64_t misses;        /* absent, or past its lease or bound */
    uint64_t invalidations; /* entries and kept lookups dropped by removes, restarts and failed
                               gets */
    uint64_t entries;       /* now */
} egm_location_cache_stats_t;

typedef struct egm_location_cache egm_location_cache_t;

/* capacity: entries at most (an insert into a full cache first drops expired
 * entries, at most every EGM_LOCATION_SWEEP_MS, then is skipped). */
egm_status_t egm__location_cache_create(size_t capacity, egm_location_cache_t **cache_p);
void egm__location_cache_destroy(egm_location_cache_t *cache);
/* 1 and *loc_p when key has an entry usable at now_ms; 0 otherwise (an expired
 * entry is dropped). */
int egm__location_cache_get(egm_location_cache_t *cache, const char *key, uint64_t now_ms,
                            egm_location_t *loc_p);
/* The descriptor of a segment some cached location names; 0 when unknown. */
int egm__location_cache_segment(egm_location_cache_t *cache, egm_id_t id,
                                egm_segment_desc_t *desc_p);
/* The cache's generation: a clear moves it on. Taken before a GetReplicaList
 * is sent and handed to egm__location_cache_put, it keeps a location asked
 * before a clear (a master restart seen meanwhile) out of the cache. */
uint64_t egm__location_cache_generation(egm_location_cache_t *cache);
/* Records key's location (a COMPLETE object's GetReplicaList result) and the
 * descriptors of its replicas' segments (descs[i] for replicas[i]), unless the
 * cache was cleared since `generation` or the bound is 0. */
void egm__location_cache_put(egm_location_cache_t *cache, const char *key,
                             const egm_location_t *loc, const egm_segment_desc_t *const *descs,
                             uint64_t generation);
/* ExistKey asks for locations for batches of at most this many keys: the get of
 * a larger batch runs pipelined, its round trips hidden behind its copies, and
 * the replicas would only make the lookup slower (docs/consistency.md). */
#define EGM_LOOKUP_LOCATIONS_MAX 256
/* Keeps a batch ExistKey's answer whole (n >= 2 keys, its locations asked for),
 * as engines look a batch up just before they read it: keys[i] answered
 * reply->results[i], its segments among descs (n_descs). Copied (keys,
 * results, replicas, descriptors: a few memcpys, no per-key insert); the
 * last EGM_LOOKUPS_KEPT are kept, until their bound passes, any key of the
 * cache is dropped, or the cache is cleared. Skipped when the cache was
 * cleared since `generation` or the bound is 0. */
#define EGM_LOOKUPS_KEPT 4
void egm__location_cache_keep_lookup(egm_location_cache_t *cache, size_t n, const char *const *keys,
                                     const egm_keys_reply_t *reply, const egm_segment_desc_t *descs,
                                     size_t n_descs, uint64_t asked_ms, uint64_t generation);
/* A reply for keys[0..n) made from what the cache holds, when every key has a
 * location usable now: found in order in one kept lookup (a batch: a walk
 * that starts at the lookup's key `hint` when that is keys[0], else at its
 * first key; one key: only at `hint`, and not at all with
 * EGM_LOCATION_NO_HINT); else each in the per-key entries. One block (as egm__keys_reply_free frees
 * it), the descriptors of the segments it names (*descs_p, egm_malloc'ed,
 * *n_descs_p of them) and the oldest ask among the locations (*asked_ms_p),
 * from which each key's lease_ttl_ms is counted. 0 when a key has none (or
 * out of memory): nothing to free. */
#define EGM_LOCATION_NO_HINT SIZE_MAX
int egm__location_cache_reply(egm_location_cache_t *cache, size_t n, const char *const *keys,
                              size_t hint, uint64_t now_ms, egm_keys_reply_t **reply_p,
                              egm_segment_desc_t **descs_p, size_t *n_descs_p,
                              uint64_t *asked_ms_p);
/* Records the locations of a reply's keys that answered OK with replicas
 * (GetReplicaList, or ExistKey asked for locations): keys[i]'s is
 * reply->results[i], its segments among descs (n_descs, the reply's decoded
 * segments), asked at asked_ms under `generation`. A key whose replicas name a
 * segment not in descs, or that has more than EGM_LOCATION_MAX_REPLICAS, is
 * skipped; so is the whole reply when its cache bound is 0. */
void egm__location_cache_remember(egm_location_cache_t *cache, size_t n, const char *const *keys,
                                  const egm_keys_reply_t *reply, const egm_segment_desc_t *descs,
                                  size_t n_descs, uint64_t asked_ms, uint64_t generation);
/* Drops key's entry, and every kept lookup (whichever held it). */
void egm__location_cache_drop(egm_location_cache_t *cache, const char *key);
void egm__location_cache_clear(egm_location_cache_t *cache);
void egm__location_cache_stats(egm_location_cache_t *cache, egm_location_cache_stats_t *stats_p);

/* Until when (egm__now_ms) loc may be used: its ask time plus the shorter of
 * its lease and its bound, less the margin. */
uint64_t egm__location_usable_until(const egm_location_t *loc);

#endif
