/* Object index: EGM_OBJECTS_SHARDS shards, each a hash map by key with its own
 * lists and mutex; each object one allocation holding its replicas and its
 * key. Replicas are also linked into their segment so that an unmount finds
 * them without scanning every object. COMPLETE objects are kept in
 * least-recently-used lists (unpinned, soft-pinned) that eviction walks from
 * the head, and leased objects in a list by lease grant that counts them.
 *
 * Locks: a shard's mutex guards its map, its lists, its counters and the
 * objects in it; `space` guards the segments' allocators and replica lists,
 * placement (rng, scratch arrays), the eviction totals and the futile-eviction
 * memo. Order: shard (several only in index order, by lock_all) -> space.
 * Nothing is locked while `space` is held. */
#include "master/object_index.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/slab_log.h"
#include "master/journal.h"
#include "master/key_table.h"
#include "master/placement.h"
#include "master/recent_frees.h"
#include "master/repair.h"
#include "master/slabs.h"

_Static_assert((EGM_OBJECTS_SHARDS & (EGM_OBJECTS_SHARDS - 1)) == 0 && EGM_OBJECTS_SHARDS <= 256,
               "EGM_OBJECTS_SHARDS: a power of two that fits egm_object_t.shard");
/* The master's memory per object (docs/master.md "Memory per object"): a
 * change that grows these should be one that was meant to. */
_Static_assert(sizeof(void *) != 8 ||
                   (sizeof(egm_replica_t) == 32 && offsetof(egm_object_t, replicas) == 72),
               "egm_object_t's header is 72 bytes and a replica 32 on 64-bit hosts");

/* The list an object's `link` is in. */
enum { LIST_NONE = 0, LIST_PENDING, LIST_LRU, LIST_SOFT };

typedef struct {
    egm_object_t *head; /* oldest */
    egm_object_t *tail;
    uint64_t count;
} object_list_t;

/* Segment space of an object force-removed under a live read lease: a reader
 * holding the lease (or a location cached under it) may still copy from it,
 * so it must not hold another object's bytes before the lease ends. */
typedef struct {
    egm_segment_t *segment;
    uint64_t offset;
    uint64_t length;
    uint64_t release_ms; /* the lease's expiry: freed by the first release at or after it */
    int repair;          /* a new replica being copied (repair.h), not a removed object's */
} held_extent_t;

/* A shard's live leases counted by when they end, in buckets of
 * lease_grain_ms (a timing wheel), so that no object keeps a place in a list
 * of leases (16 bytes of every object). Every lease lasts lease_ttl_ms and
 * the grain is at least lease_ttl_ms / LEASE_WHEEL_SPAN, so after a trim
 * every lease still live ends in one of the LEASE_WHEEL_SPAN + 2 buckets
 * after `trimmed`: bucket b counts the leases ending in ((b - 1) * grain,
 * b * grain], at count[b % LEASE_BUCKETS]. */
#define LEASE_WHEEL_SPAN 1024u
#define LEASE_BUCKETS 2048u
typedef struct {
    uint64_t trimmed; /* buckets up to this one are emptied (their leases ended) */
    uint64_t total;   /* the leases counted: sum of count[] */
    uint32_t count[LEASE_BUCKETS];
} lease_wheel_t;

typedef struct {
    pthread_mutex_t lock;
    egm_key_table_t by_key;
    object_list_t pending; /* by PutStart time */
    object_list_t lru;     /* COMPLETE, no pin, least recently used first */
    object_list_t soft;    /* COMPLETE, soft-pinned, least recently used first */
    lease_wheel_t leases;  /* live leases counted by when they end */
    uint64_t n_soft_pinned;
    uint64_t n_hard_pinned;
} shard_t;

struct egm_object_index {
    egm_segment_table_t *segments;
    egm_objects_params_t params;
    shard_t shards[EGM_OBJECTS_SHARDS];
    size_t n_shards_ready; /* shards whose lock and map exist (creation, destroy) */
    /* Appends to any shard's LRU lists, numbered (bump()): merging the
     * shards' lists by it gives the order of the single list of an unsharded
     * index (up to ties between appends at the same instant). */
    uint64_t lru_seq;
    uint64_t lease_grain_ms; /* of the shards' lease wheels: ceil(lease_ttl_ms / 1024), >= 1 */
    /* Bumped whenever an object enters the LRU lists (PutEnd). A
     * PutStart-triggered eviction that found nothing is not repeated until an
     * object it stepped over stops being protected (lease, residency) or an
     * object was committed since (a batch against a pool full of protected
     * objects stays linear). */
    uint64_t evictable_gen;

    pthread_mutex_t space; /* everything below */
    uint64_t evictions;
    uint64_t evicted_bytes;
    uint64_t eviction_runs;
    uint64_t discarded;
    atomic_uint_fast64_t no_space; /* PutStarts answered NO_SPACE (counted after the locks) */
    /* Replicas a commit refused: on a provider presumed gone (drop_unreachable) */
    atomic_uint_fast64_t unreachable_replicas;
    /* A PutStart-triggered eviction that could free nothing, and until when
     * nothing it stepped over stops being protected. */
    uint64_t futile_gen;
    uint64_t futile_until_ms;
    int futile_valid;
    /* Space of objects force-removed under a live read lease, still
     * allocated until the lease ends (egm__objects_release_held). */
    held_extent_t *held; /* in no order */
    size_t n_held;
    size_t held_cap;
    uint64_t held_bytes;      /* their segment space, allocator rounding included */
    uint64_t held_release_ms; /* the earliest release_ms (UINT64_MAX: none held) */
    egm_slab_table_t *slabs;  /* granted to writers (slabs.h) */
    uint64_t slab_grants;
    uint64_t slab_grants_early; /* answered before the standbys held them */
    uint64_t slab_expired;
    uint64_t commits;
    egm_placer_t *placer; /* placement over failure domains (placement.h) */
    /* enable_ha: where committed objects, their removal and reserved space
     * are told to the standbys (journal.h); NULL without. */
    egm_journal_t *journal;
    /* With journal: space freed that the standbys may not know is free yet
     * (recent_frees.h); guarded by `space`. */
    egm_recent_frees_t *recent_frees;
    egm_repair_queue_t *repair; /* objects that lost replicas with a segment (repair.h) */
};

/* ---- shards and locks -------------------------------------------------------- */

/* The shard of a key: the top bits of the hash its shard's map uses, whose
 * low bits pick the slot, so each shard's keys still spread over its map. The
 * hash is computed once per call and reused for the lookup. */
static unsigned shard_index(uint64_t hash)
{
    return (unsigned)(hash >> 60) & (EGM_OBJECTS_SHARDS - 1);
}

_Static_assert(EGM_OBJECTS_SHARDS <= 16, "shard_index takes 4 bits of the hash");

static shard_t *shard_of_key(egm_object_index_t *index, const char *key, size_t len,
                             uint64_t *hash_p)
{
    *hash_p = egm__key_hash(key, len);
    return &index->shards[shard_index(*hash_p)];
}

/* Fetches the cache lines of [p, p + bytes) ahead of a write. */
static void prefetch_lines(const void *p, size_t bytes)
{
    for (size_t off = 0; off < bytes; off += 64)
        __builtin_prefetch((const char *)p + off, 1);
}

static shard_t *shard_of(egm_object_index_t *index, const egm_object_t *obj)
{
    return &index->shards[obj->shard];
}

/* Every shard, in index order: the only way two shard locks are held. */
static void lock_all(egm_object_index_t *index)
{
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++)
        pthread_mutex_lock(&index->shards[s].lock);
}

static void unlock_all(egm_object_index_t *index)
{
    for (size_t s = EGM_OBJECTS_SHARDS; s-- > 0;)
        pthread_mutex_unlock(&index->shards[s].lock);
}

static void space_lock(egm_object_index_t *index)
{
    pthread_mutex_lock(&index->space);
}

static void space_unlock(egm_object_index_t *index)
{
    pthread_mutex_unlock(&index->space);
}

/* ---- lists ---------------------------------------------------------------- */

static void list_append(object_list_t *list, egm_object_t *obj)
{
    egm_object_link_t *l = &obj->link;
    l->next = NULL;
    l->prev = list->tail;
    if (list->tail != NULL)
        list->tail->link.next = obj;
    else
        list->head = obj;
    list->tail = obj;
    list->count++;
}

static void list_unlink(object_list_t *list, egm_object_t *obj)
{
    egm_object_link_t *l = &obj->link;
    if (l->prev != NULL)
        l->prev->link.next = l->next;
    else
        list->head = l->next;
    if (l->next != NULL)
        l->next->link.prev = l->prev;
    else
        list->tail = l->prev;
    l->prev = l->next = NULL;
    list->count--;
}

static object_list_t *list_named(shard_t *sh, int list)
{
    switch (list) {
    case LIST_PENDING:
        return &sh->pending;
    case LIST_LRU:
        return &sh->lru;
    case LIST_SOFT:
        return &sh->soft;
    default:
        return NULL;
    }
}

/* Increments a counter shared by the shards and returns the new value, with
 * a relaxed load and store, not a locked read-modify-write: one per key
 * operation, a locked instruction would wait for every store before it (the
 * list links of other objects, often cache misses) and so make the calls
 * markedly slower. Two shards bumping at the same instant may both get the
 * same value: for lru_seq their objects then tie (eviction breaks the tie by
 * shard), for evictable_gen the value changes anyway. Within one shard, whose
 * lock orders its bumps, the values always increase. */
static uint64_t bump(uint64_t *counter)
{
    uint64_t v = __atomic_load_n(counter, __ATOMIC_RELAXED) + 1;
    __atomic_store_n(counter, v, __ATOMIC_RELAXED);
    return v;
}

/* With obj's shard locked. */
static void move_to(egm_object_index_t *index, egm_object_t *obj, int list)
{
    shard_t *sh = shard_of(index, obj);
    object_list_t *from = list_named(sh, obj->list), *to = list_named(sh, list);
    if (from != NULL)
        list_unlink(from, obj);
    obj->list = (uint8_t)list;
    if (to != NULL) {
        if (list == LIST_LRU || list == LIST_SOFT)
            obj->lru_seq = bump(&index->lru_seq);
        list_append(to, obj);
    }
}

static int lease_live(const egm_object_t *obj, uint64_t now_ms)
{
    return now_ms < obj->lease_expiry_ms;
}

/* The wheel bucket of a lease ending at expiry_ms (0: never leased). */
static uint64_t lease_bucket(const egm_object_index_t *index, uint64_t expiry_ms)
{
    uint64_t g = index->lease_grain_ms;
    return expiry_ms / g + (expiry_ms % g != 0);
}

/* Whether a lease ending at expiry_ms is counted in sh's wheel: it ends
 * after the buckets trimmed. With the shard locked. */
static int lease_counted(const egm_object_index_t *index, const shard_t *sh, uint64_t expiry_ms)
{
    return lease_bucket(index, expiry_ms) > sh->leases.trimmed;
}

/* Counts (delta 1) or stops counting (-1) a lease ending at expiry_ms, which
 * lease_counted says is counted. With the shard locked. */
static void lease_count(const egm_object_index_t *index, shard_t *sh, uint64_t expiry_ms, int delta)
{
    uint64_t b = lease_bucket(index, expiry_ms);
    sh->leases.count[b % LEASE_BUCKETS] += (uint32_t)delta;
    sh->leases.total += (uint64_t)(int64_t)delta;
}

/* Leases that ended by now_ms (to within the grain: a bucket is emptied once
 * its last instant has passed) stop being counted. With the shard locked. */
static void trim_leases(const egm_object_index_t *index, shard_t *sh, uint64_t now_ms)
{
    lease_wheel_t *w = &sh->leases;
    uint64_t upto = now_ms / index->lease_grain_ms;
    if (upto <= w->trimmed)
        return;
    if (upto - w->trimmed >= LEASE_BUCKETS) {
        memset(w->count, 0, sizeof(w->count));
        w->total = 0;
    } else {
        for (uint64_t b = w->trimmed + 1; b <= upto; b++) {
            w->total -= w->count[b % LEASE_BUCKETS];
            w->count[b % LEASE_BUCKETS] = 0;
        }
    }
    w->trimmed = upto;
}

/* ---- creation ------------------------------------------------------------- */

void egm__objects_params_default(egm_objects_params_t *params)
{
    *params = (egm_objects_params_t){
        .lease_ttl_ms = 10000,
        .soft_pin_ttl_ms = EGM_MASTER_SOFT_PIN_TTL_MS,
        .pending_timeout_ms = EGM_MASTER_PENDING_TIMEOUT_MS,
        .eviction_high_watermark = EGM_MASTER_EVICTION_HIGH_WATERMARK,
        .eviction_ratio = EGM_MASTER_EVICTION_RATIO,
        .min_residency_ms = EGM_MASTER_MIN_RESIDENCY_MS,
        .placement = EGM_PLACEMENT_RANDOM,
    };
}
/* The master's params come from its config, whose table has checked every
 * value already; this guard is for the callers that fill them by hand (tests,
 * the fuzzer, tools), with the table's bounds and words. */
egm_status_t egm__objects_params_check(const egm_objects_params_t *p)
{
    if (p->lease_ttl_ms == 0)
        return egm__set_error(EGM_ERR_CONFIG, "default_kv_lease_ttl: must be > 0 ms");
    if (p->soft_pin_ttl_ms == 0 || p->soft_pin_ttl_ms > EGM_SETTINGS_SOFT_PIN_TTL_MAX_MS)
        return egm__set_error(
            EGM_ERR_CONFIG, "default_kv_soft_pin_ttl: %llu ms is out of range 1..%d (24 h)",
            (unsigned long long)p->soft_pin_ttl_ms, EGM_SETTINGS_SOFT_PIN_TTL_MAX_MS);
    if (p->pending_timeout_ms == 0)
        return egm__set_error(EGM_ERR_CONFIG, "put_start_discard_timeout_sec: must be > 0");
    if (!(p->eviction_high_watermark >= EGM_SETTINGS_RATIO_MIN &&
          p->eviction_high_watermark <= EGM_SETTINGS_RATIO_MAX))
        return egm__set_error(
            EGM_ERR_CONFIG, "eviction_high_watermark_ratio: %g is out of range %g..%g",
            p->eviction_high_watermark, EGM_SETTINGS_RATIO_MIN, EGM_SETTINGS_RATIO_MAX);
    if (!(p->eviction_ratio >= EGM_SETTINGS_RATIO_MIN &&
          p->eviction_ratio <= EGM_SETTINGS_RATIO_MAX))
        return egm__set_error(EGM_ERR_CONFIG, "eviction_ratio: %g is out of range %g..%g",
                              p->eviction_ratio, EGM_SETTINGS_RATIO_MIN, EGM_SETTINGS_RATIO_MAX);
    if (p->min_residency_ms > EGM_SETTINGS_MIN_RESIDENCY_MAX_MS)
        return egm__set_error(
            EGM_ERR_CONFIG, "eviction_min_residency_ms: %llu ms is out of range 0..%d (24 h)",
            (unsigned long long)p->min_residency_ms, EGM_SETTINGS_MIN_RESIDENCY_MAX_MS);
    const egm_config_key_t *placement = EGM_CONFIG_KEY(placement_strategy);
    if (egm__config_choice_word(placement, (int)p->placement) == NULL) {
        char words[128];
        return egm__set_error(EGM_ERR_CONFIG, "placement_strategy: %d is not one of %s",
                              (int)p->placement,
                              egm__config_choices_text(placement, words, sizeof(words)));
    }
    return EGM_OK;
}

egm_status_t egm__objects_create(egm_segment_table_t *segments, const egm_objects_params_t *params,
                                 egm_object_index_t **index_p)
{
    egm_object_index_t *index;
    egm_status_t status;

    *index_p = NULL;
    status = egm__objects_params_check(params);
    if (status != EGM_OK)
        return status;
    index = egm_calloc(1, sizeof(*index), "master.object_index");
    if (index == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the object index");
    /* Adaptive: critical sections are short (one key, one placement), so a
     * waiter spins briefly before it sleeps; RPC threads then rarely pay a
     * futex sleep and wake-up on a lock held for a few hundred ns. */
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&index->space, &attr);
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++) {
        status = egm__key_table_init(&index->shards[s].by_key);
        if (status != EGM_OK) {
            pthread_mutexattr_destroy(&attr);
            egm__objects_destroy(index);
            return status;
        }
        pthread_mutex_init(&index->shards[s].lock, &attr);
        index->n_shards_ready = s + 1;
    }
    pthread_mutexattr_destroy(&attr);
    index->segments = segments;
    index->params = *params;
    index->lease_grain_ms =
        params->lease_ttl_ms / LEASE_WHEEL_SPAN + (params->lease_ttl_ms % LEASE_WHEEL_SPAN != 0);
    if (index->lease_grain_ms == 0)
        index->lease_grain_ms = 1;
    index->held_release_ms = UINT64_MAX;
    status = egm__placer_create(&index->placer);
    if (status == EGM_OK)
        status = egm__slabs_create(&index->slabs);
    if (status == EGM_OK)
        status = egm__repair_queue_create(&index->repair);
    if (status != EGM_OK) {
        egm__objects_destroy(index);
        return status;
    }
    *index_p = index;
    return EGM_OK;
}

uint64_t egm__objects_lease_ttl_ms(const egm_object_index_t *index)
{
    return index->params.lease_ttl_ms;
}

static int key_ok(const char *key, size_t key_len)
{
    return key != NULL && key_len > 0 && key_len <= EGM_MASTER_KEY_MAX;
}

uint64_t egm__objects_key_hash(const char *key, size_t key_len)
{
    return egm__key_hash(key, key_len);
}

egm_status_t egm__objects_check_key(const char *key, size_t key_len)
{
    if (key == NULL || key_len == 0 || key_len > EGM_MASTER_KEY_MAX)
        return egm__set_error(EGM_ERR_INVALID_KEY, "key: length %zu, must be 1..%d bytes",
                              key ? key_len : 0, EGM_MASTER_KEY_MAX);
    return EGM_OK;
}

const egm_object_t *egm__objects_find(const egm_object_index_t *index, const char *key,
                                      size_t key_len)
{
    uint64_t hash = egm__key_hash(key, key_len);
    return egm__key_table_find(&index->shards[shard_index(hash)].by_key, key, key_len, hash);
}

static egm_object_t *find(const shard_t *sh, const char *key, size_t key_len, uint64_t hash)
{
    return egm__key_table_find(&sh->by_key, key, key_len, hash);
}

/* The shard of a checked key, locked, and the object under the key (NULL if
 * none). On EGM_OK the caller unlocks *sh_p; on an error nothing is locked. */
static egm_status_t lock_key(egm_object_index_t *index, const char *key, size_t key_len,
                             shard_t **sh_p, egm_object_t **obj_p)
{
    egm_status_t status = egm__objects_check_key(key, key_len);

    if (status != EGM_OK)
        return status;
    uint64_t hash;
    *sh_p = shard_of_key(index, key, key_len, &hash);
    pthread_mutex_lock(&(*sh_p)->lock);
    *obj_p = find(*sh_p, key, key_len, hash);
    return EGM_OK;
}

/* With `space` locked. */
static void replica_link(egm_replica_t *r)
{
    egm_segment_t *seg = r->segment;
    r->seg_prev = NULL;
    r->seg_next = seg->replicas;
    if (seg->replicas != NULL)
        seg->replicas->seg_prev = r;
    seg->replicas = r;
    seg->replica_count++;
}

/* With `space` locked. */
static void replica_unlink(egm_replica_t *r)
{
    egm_segment_t *seg = r->segment;
    if (r->seg_prev != NULL)
        r->seg_prev->seg_next = r->seg_next;
    else
        seg->replicas = r->seg_next;
    if (r->seg_next != NULL)
        r->seg_next->seg_prev = r->seg_prev;
    r->seg_prev = r->seg_next = NULL;
    seg->replica_count--;
}

/* Adds a replica of obj at `offset` of seg (allocated for it) and links it
 * into the segment's list. With `space` locked. */
static void replica_add(egm_object_t *obj, egm_segment_t *seg, uint64_t offset)
{
    uint32_t i = obj->n_replicas++;
    obj->replicas[i] = (egm_replica_t){.segment = seg, .offset_index = offset | i};
    replica_link(&obj->replicas[i]);
}

/* Frees [offset, offset + len) of seg and notes it among the ranges the
 * standbys may not know are free yet (recent_frees.h), as every free of
 * space a journal op described must. With `space` locked. */
static egm_status_t space_free(egm_object_index_t *index, egm_segment_t *seg, uint64_t offset,
                               uint64_t len)
{
    egm_status_t s = egm__allocator_free(seg->allocator, offset, len);
    if (s == EGM_OK)
        egm__recent_frees_add(index->recent_frees, seg, offset, len);
    return s;
}

/* Returns a live replica's space to its segment; the bytes freed. index
 * NULL: space placed in this hold of `space` and never journaled (nothing to
 * note). With the object's shard and `space` locked. */
static uint64_t release_replica(egm_object_index_t *index, egm_replica_t *r)
{
    uint64_t freed = 0, offset = egm__replica_offset(r), len = egm__replica_object(r)->size;
    replica_unlink(r);
    egm_status_t s = index != NULL ? space_free(index, r->segment, offset, len)
                                   : egm__allocator_free(r->segment->allocator, offset, len);
    if (s == EGM_OK)
        freed = egm__allocator_round(len);
    else if (s != EGM_ERR_NO_MEMORY) /* lost for lack of memory: the allocator said so */
        egm_error("segment %s: freeing [%llu, +%llu) failed: %s", r->segment->desc.name,
                  (unsigned long long)offset, (unsigned long long)len, egm_last_error());
    r->segment = NULL;
    return freed;
}

/* Returns every live replica's space to its segment; the bytes freed
 * (index NULL as release_replica). With the object's shard and `space`
 * locked. */
static uint64_t release_replicas(egm_object_index_t *index, egm_object_t *obj)
{
    uint64_t freed = 0;
    for (uint32_t i = 0; i < obj->n_replicas; i++)
        if (obj->replicas[i].segment != NULL)
            freed += release_replica(index, &obj->replicas[i]);
    obj->n_live = 0;
    return freed;
}

/* ---- held space ----------------------------------------------------------- */

/* Room for `more` held extents, so that holding them cannot fail halfway.
 * With `space` locked. */
static egm_status_t held_reserve(egm_object_index_t *index, size_t more)
{
    if (index->n_held + more <= index->held_cap)
        return EGM_OK;
    size_t cap = index->held_cap < 16 ? 16 : index->held_cap * 2;
    if (cap < index->n_held + more)
        cap = index->n_held + more;
    held_extent_t *held = egm_realloc(index->held, cap * sizeof(*held), "master.held_space");
    if (held == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY,
                              "out of memory keeping a leased object's space until its lease ends");
    index->held = held;
    index->held_cap = cap;
    return EGM_OK;
}

/* Moves obj's live replicas out of their segments' replica lists onto the
 * held list, still allocated, until release_ms (room reserved by
 * held_reserve). With the object's shard and `space` locked. */
static void hold_replicas(egm_object_index_t *index, egm_object_t *obj, uint64_t release_ms,
                          uint64_t now_ms)
{
    for (uint32_t i = 0; i < obj->n_replicas; i++) {
        egm_replica_t *r = &obj->replicas[i];
        if (r->segment == NULL)
            continue;
        replica_unlink(r);
        index->held[index->n_held++] = (held_extent_t){.segment = r->segment,
                                                       .offset = egm__replica_offset(r),
                                                       .length = obj->size,
                                                       .release_ms = release_ms};
        egm__journal_reserve(index->journal, r->segment->desc.id, egm__replica_offset(r), obj->size,
                             release_ms - now_ms);
        index->held_bytes += egm__allocator_round(obj->size);
        r->segment = NULL;
        if (release_ms < index->held_release_ms)
            index->held_release_ms = release_ms;
    }
    obj->n_live = 0;
}

/* Takes the held extents that `drop` picks off the list, freeing them first
 * when `free_them`; the bytes taken (when freeing, those freed: not a range
 * whose free found no memory, egm__allocator_free). With `space` locked. */
static uint64_t held_take(egm_object_index_t *index,
                          int (*drop)(const held_extent_t *, const void *), const void *arg,
                          int free_them)
{
    uint64_t taken = 0, freed = 0, next = UINT64_MAX;
    size_t k = 0;
    for (size_t i = 0; i < index->n_held; i++) {
        held_extent_t *h = &index->held[i];
        if (!drop(h, arg)) {
            if (h->release_ms < next)
                next = h->release_ms;
            index->held[k++] = *h;
            continue;
        }
        egm_status_t s = free_them ? space_free(index, h->segment, h->offset, h->length) : EGM_OK;
        if (s != EGM_OK && s != EGM_ERR_NO_MEMORY) /* lost: the allocator said so */
            egm_error("segment %s: freeing held [%llu, +%llu) failed: %s", h->segment->desc.name,
                      (unsigned long long)h->offset, (unsigned long long)h->length,
                      egm_last_error());
        taken += egm__allocator_round(h->length);
        if (s == EGM_OK)
            freed += egm__allocator_round(h->length);
    }
    index->n_held = k;
    index->held_bytes -= taken;
    index->held_release_ms = next;
    return freed;
}

static int held_expired(const held_extent_t *h, const void *now_ms)
{
    return h->release_ms <= *(const uint64_t *)now_ms;
}

static int held_in_segment(const held_extent_t *h, const void *segment)
{
    return h->segment == segment;
}

static int held_any(const held_extent_t *h, const void *arg)
{
    (void)h;
    (void)arg;
    return 1;
}

/* Frees the held extents whose lease has ended by now_ms; the bytes freed.
 * With `space` locked. */
static uint64_t release_held_locked(egm_object_index_t *index, uint64_t now_ms)
{
    if (now_ms < index->held_release_ms)
        return 0;
    return held_take(index, held_expired, &now_ms, 1);
}

/* Returns the slabs whose lease has ended by now_ms; the bytes freed. With
 * `space` locked. */
static uint64_t expire_slabs_locked(egm_object_index_t *index, uint64_t now_ms)
{
    if (now_ms < egm__slabs_next_expiry(index->slabs))
        return 0;
    size_t expired;
    uint64_t freed = egm__slabs_expire(index->slabs, now_ms, &expired);
    index->slab_expired += expired;
    return freed;
}

uint64_t egm__objects_expire_slabs(egm_object_index_t *index, uint64_t now_ms)
{
    space_lock(index);
    uint64_t freed = expire_slabs_locked(index, now_ms);
    space_unlock(index);
    if (freed > 0)
        egm_info("returned %llu bytes of slabs whose writer let their lease end",
                 (unsigned long long)freed);
    return freed;
}

uint64_t egm__objects_release_held(egm_object_index_t *index, uint64_t now_ms)
{
    space_lock(index);
    uint64_t freed = release_held_locked(index, now_ms);
    space_unlock(index);
    return freed;
}

/* The segment space obj's live replicas hold (allocator rounding included).
 * With its shard locked. */
static uint64_t object_bytes(const egm_object_t *obj)
{
    return egm__allocator_round(obj->size) * obj->n_live;
}

/* Takes an object without live replicas out of its shard and frees it. With
 * its shard locked; touches nothing `space` guards. */
static void object_forget(egm_object_index_t *index, egm_object_t *obj)
{
    shard_t *sh = shard_of(index, obj);
    if (obj->state == EGM_OBJECT_COMPLETE)
        egm__journal_object_gone(index->journal, egm__object_key(obj), obj->key_len);
    move_to(index, obj, LIST_NONE);
    if (lease_counted(index, sh, obj->lease_expiry_ms))
        lease_count(index, sh, obj->lease_expiry_ms, -1);
    sh->n_soft_pinned -= obj->soft_pin;
    sh->n_hard_pinned -= obj->hard_pin;
    egm__key_table_remove(&sh->by_key, obj);
    egm_free(obj);
}

/* With the object's shard and `space` locked. Returns the bytes freed. */
static uint64_t object_delete_locked(egm_object_index_t *index, egm_object_t *obj)
{
    uint64_t freed = release_replicas(index, obj);
    object_forget(index, obj);
    return freed;
}

/* With the object's shard locked (not `space`). */
static uint64_t object_delete(egm_object_index_t *index, egm_object_t *obj)
{
    space_lock(index);
    uint64_t freed = release_replicas(index, obj);
    space_unlock(index);
    object_forget(index, obj);
    return freed;
}

void egm__objects_destroy(egm_object_index_t *index)
{
    if (index == NULL)
        return;
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++) {
        egm_key_table_t *t = &index->shards[s].by_key;
        if (t->slots == NULL)
            continue;
        egm__key_table_settle(t);
        /* A removal may move a later object into slot i: look again. */
        for (size_t i = 0; i <= t->mask; i++)
            while (egm__key_table_at(t, i) != NULL)
                object_delete(index, egm__key_table_at(t, i));
        egm__key_table_cleanup(t);
    }
    held_take(index, held_any, NULL, 1); /* the segments outlive the index */
    if (index->slabs != NULL)
        egm__slabs_expire(index->slabs, UINT64_MAX, NULL);
    egm__slabs_destroy(index->slabs);
    egm__recent_frees_destroy(index->recent_frees);
    egm__repair_queue_destroy(index->repair);
    egm_free(index->held);
    for (size_t s = 0; s < index->n_shards_ready; s++)
        pthread_mutex_destroy(&index->shards[s].lock);
    pthread_mutex_destroy(&index->space);
    egm__placer_destroy(index->placer);
    egm_free(index);
}

static int pending_is_stale(const egm_object_index_t *index, const egm_object_t *obj,
                            uint64_t now_ms)
{
    return obj->state == EGM_OBJECT_PENDING && now_ms >= obj->put_start_ms &&
           now_ms - obj->put_start_ms >= index->params.pending_timeout_ms;
}

/* When obj's latest lease was granted; 0 when it never was. With its shard
 * locked. */
static uint64_t last_grant_ms(const egm_object_index_t *index, const egm_object_t *obj)
{
    uint64_t ttl = index->params.lease_ttl_ms;
    if (obj->lease_expiry_ms == 0)
        return 0;
    return obj->lease_expiry_ms > ttl ? obj->lease_expiry_ms - ttl : 0;
}

/* A COMPLETE object's recency: its PutEnd (or Commit), or its latest lease
 * grant when later. Every lease lasts lease_ttl_ms and is extended, never
 * shortened, so the latest grant is lease_expiry_ms - lease_ttl_ms: the
 * object need not keep it. 0 for a PENDING object. With its shard locked. */
static uint64_t last_access_ms(const egm_object_index_t *index, const egm_object_t *obj)
{
    if (obj->state != EGM_OBJECT_COMPLETE)
        return 0;
    uint64_t grant = last_grant_ms(index, obj);
    return grant > obj->commit_ms ? grant : obj->commit_ms;
}

/* What a reply needs of obj, copied (replicas only when asked: they are
 * another cache line). With its shard locked. */
static void fill_view(const egm_object_index_t *index, const egm_object_t *obj,
                      egm_object_view_t *v, int with_replicas)
{
    v->state = obj->state;
    v->size = obj->size;
    v->writer = obj->writer;
    v->lease_expiry_ms = obj->lease_expiry_ms;
    v->put_start_ms = obj->put_start_ms; /* the commit time once COMPLETE */
    v->last_access_ms = last_access_ms(index, obj);
    v->soft_pin = obj->soft_pin;
    v->hard_pin = obj->hard_pin;
    v->n_replicas = 0;
    for (uint32_t i = 0; with_replicas && i < obj->n_replicas; i++) {
        const egm_replica_t *r = &obj->replicas[i];
        if (r->segment == NULL)
            continue; /* dropped with its segment */
        v->replicas[v->n_replicas++] = (egm_replica_view_t){
            .segment = r->segment, .offset = egm__replica_offset(r), .length = obj->size};
    }
}

static void clear_view(egm_object_view_t *v)
{
    if (v != NULL)
        memset(v, 0, offsetof(egm_object_view_t, replicas)); /* n_replicas is 0 */
}

/* ---- placement ------------------------------------------------------------ */

/* Everything in this section runs with `space` locked (and the shard of the
 * object being placed). */

/* Allocates a replica of obj in seg (placement.h's try: 1 if placed). */
static int try_segment(void *arg, egm_segment_t *seg)
{
    egm_object_t *obj = arg;
    uint64_t offset;
    if (egm__allocator_alloc(seg->allocator, obj->size, &offset) != EGM_OK)
        return 0; /* full (or out of memory): the next segment is tried */
    replica_add(obj, seg, offset);
    return 1;
}

/* Places up to `want` replicas of obj, on distinct providers and, where the
 * segments allow, distinct hosts (placement.h): preferred segments first,
 * then the strategy's order. NO_SPACE when none was placed. */
static egm_status_t place_replicas(egm_object_index_t *index, egm_object_t *obj, uint32_t want,
                                   const egm_put_config_t *config)
{
    egm_segment_t *holding[EGM_MASTER_REPLICA_MAX];
    size_t n_holding = 0;
    for (uint32_t i = 0; i < obj->n_replicas && n_holding < EGM_MASTER_REPLICA_MAX; i++)
        if (obj->replicas[i].segment != NULL)
            holding[n_holding++] = obj->replicas[i].segment;
    egm_placement_request_t req = {.strategy = index->params.placement,
                                   .writer_host_id = config->writer_host_id,
                                   .preferred = config->preferred_segments,
                                   .n_preferred = config->n_preferred,
                                   .holding = holding,
                                   .n_holding = n_holding};
    uint32_t placed;
    uint32_t missing = want > obj->n_replicas ? want - obj->n_replicas : 0;
    egm_status_t status = egm__placement_choose(index->placer, index->segments, &req, missing,
                                                try_segment, obj, &placed);
    if (status != EGM_OK)
        return status;
    obj->n_live = obj->n_replicas;
    if (obj->n_replicas == 0)
        return egm__set_error(EGM_ERR_NO_SPACE, "no segment has %llu bytes free (%zu segments)",
                              (unsigned long long)obj->size,
                              egm__segment_table_count(index->segments));
    return EGM_OK;
}

static void usage(const egm_object_index_t *index, uint64_t *used_p, uint64_t *capacity_p,
                  uint64_t *largest_segment_p)
{
    uint64_t used = 0, capacity = 0, largest = 0;
    size_t n = egm__segment_table_count(index->segments);
    for (size_t i = 0; i < n; i++) {
        egm_allocator_stats_t s;
        egm__allocator_stats(egm__segment_table_at(index->segments, i)->allocator, &s);
        used += s.used;
        capacity += s.capacity;
        if (s.capacity > largest)
            largest = s.capacity;
    }
    *used_p = used;
    *capacity_p = capacity;
    if (largest_segment_p != NULL)
        *largest_segment_p = largest;
}

/* The high watermark when it limits what one object may hold: an object
 * above it of the capacity would start the background pass by itself, which
 * would evict it as soon as it could (0 and 1 leave objects alone: every
 * object is transient, or the pass is off). */
static int watermark_limits(const egm_object_index_t *index, double *hw_p)
{
    *hw_p = index->params.eviction_high_watermark;
    return *hw_p > 0.0 && *hw_p < 1.0;
}

static egm_status_t above_watermark(const egm_object_index_t *index, uint64_t bytes,
                                    uint64_t capacity)
{
    return egm__set_error(EGM_ERR_NO_SPACE,
                          "%llu bytes are more than eviction_high_watermark_ratio (%.2f) of the "
                          "capacity (%llu bytes): the store could keep the object only by "
                          "evicting it",
                          (unsigned long long)bytes, index->params.eviction_high_watermark,
                          (unsigned long long)capacity);
}

/* After placement, with `space` locked: keeps no more replicas than stay
 * under the high watermark of the capacity, and none (NO_SPACE) when one is
 * already above it. The segments holding the replicas usually answer without
 * summing every segment. */
static egm_status_t fit_watermark(egm_object_index_t *index, egm_object_t *obj)
{
    double hw;
    uint64_t rounded = egm__allocator_round(obj->size), held = 0, used, capacity;

    if (!watermark_limits(index, &hw) || obj->n_replicas == 0)
        return EGM_OK;
    for (uint32_t i = 0; i < obj->n_replicas; i++)
        held += obj->replicas[i].segment->desc.size;
    if ((double)rounded * (double)obj->n_replicas <= hw * (double)held)
        return EGM_OK;
    usage(index, &used, &capacity, NULL);
    double fit = hw * (double)capacity / (double)rounded;
    uint32_t keep = fit >= (double)obj->n_replicas ? obj->n_replicas : (uint32_t)fit;
    while (obj->n_replicas > keep)
        release_replica(NULL, &obj->replicas[--obj->n_replicas]); /* just placed */
    obj->n_live = obj->n_replicas;
    return keep > 0 ? EGM_OK : above_watermark(index, rounded, capacity);
}

/* An object eviction must leave alone at now_ms: under a live lease, or
 * within min_residency_ms of its PutEnd. *until_p (optional) is lowered to
 * when its protection ends. */
static int eviction_protected(const egm_object_index_t *index, const egm_object_t *obj,
                              uint64_t now_ms, uint64_t *until_p)
{
    uint64_t until = obj->commit_ms + index->params.min_residency_ms;
    if (obj->lease_expiry_ms > until)
        until = obj->lease_expiry_ms;
    if (now_ms >= until)
        return 0;
    if (until_p != NULL && until < *until_p)
        *until_p = until;
    return 1;
}

/* Whether the unprotected objects of the LRU lists hold at least `bytes`
 * (in any order: only the sum counts). When not, *sum_p is what they hold
 * and *until_p when the first protected one stops being so (UINT64_MAX: none
 * is protected). With every shard locked. */
static int evictable_at_least(egm_object_index_t *index, uint64_t bytes, uint64_t now_ms,
                              uint64_t *sum_p, uint64_t *until_p)
{
    uint64_t sum = 0;
    *until_p = UINT64_MAX;
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++) {
        const object_list_t *lists[2] = {&index->shards[s].lru, &index->shards[s].soft};
        for (int l = 0; l < 2; l++)
            for (const egm_object_t *o = lists[l]->head; o != NULL; o = o->link.next) {
                if (eviction_protected(index, o, now_ms, until_p))
                    continue;
                sum += object_bytes(o);
                if (sum >= bytes)
                    return 1;
            }
    }
    *sum_p = sum;
    return 0;
}

static egm_status_t only_protected(const egm_object_index_t *index, uint64_t size)
{
    return egm__set_error(EGM_ERR_NO_SPACE,
                          "no room for %llu bytes: what eviction could free is held by objects "
                          "under a read lease, within eviction_min_residency_ms (%llu ms) of "
                          "their PutEnd, hard-pinned or still being written",
                          (unsigned long long)size,
                          (unsigned long long)index->params.min_residency_ms);
}

/* The free space would hold one replica, but no segment has a free range
 * long enough (the free space is spread over segments, or cut up within
 * them), and eviction could not free any: saying that protected objects hold
 * the space would be wrong. */
static egm_status_t no_single_segment(const egm_object_index_t *index, uint64_t size,
                                      uint64_t free_bytes)
{
    uint64_t longest = 0;
    size_t n = egm__segment_table_count(index->segments);
    for (size_t i = 0; i < n; i++) {
        egm_allocator_stats_t s;
        egm__allocator_stats(egm__segment_table_at(index->segments, i)->allocator, &s);
        if (s.largest_free > longest)
            longest = s.largest_free;
    }
    return egm__set_error(EGM_ERR_NO_SPACE,
                          "no single segment has room for %llu bytes: %llu bytes are free in %zu "
                          "segments, at most %llu of them in one range, and nothing could be "
                          "evicted to make a longer one (the objects are under a read lease, "
                          "within eviction_min_residency_ms (%llu ms) of their PutEnd, "
                          "hard-pinned or still being written)",
                          (unsigned long long)size, (unsigned long long)free_bytes, n,
                          (unsigned long long)longest,
                          (unsigned long long)index->params.min_residency_ms);
}

/* Why a PutStart eviction cannot help: fragmentation when the free space
 * would hold one replica (`rounded` bytes), protected objects otherwise. */
static egm_status_t cannot_evict(const egm_object_index_t *index, uint64_t size, uint64_t rounded,
                                 uint64_t free_bytes)
{
    return rounded <= free_bytes ? no_single_segment(index, size, free_bytes)
                                 : only_protected(index, size);
}

/* A PutStart found no room: evict about eviction_ratio of capacity (at least
 * the object's replicas). Nothing is evicted, and the answer is NO_SPACE,
 * when the object is above the high watermark of the capacity, or when the
 * free space and the unprotected objects together are less than one replica
 * (evicting them would lose objects and still place nothing). When nothing
 * at all was evictable, no PutStart walks the lists again until something
 * stepped over stops being protected or an object is committed. OK when the
 * object could never fit in any segment (placement says so). With every
 * shard and `space` locked. */
static uint64_t evict_locked(egm_object_index_t *index, uint64_t bytes, uint64_t now_ms,
                             uint64_t *until_p);

static egm_status_t evict_for(egm_object_index_t *index, uint64_t size, uint32_t replicas,
                              uint64_t now_ms)
{
    uint64_t used, capacity, largest, until, evictable, rounded = egm__allocator_round(size);
    uint64_t gen = __atomic_load_n(&index->evictable_gen, __ATOMIC_RELAXED);
    double hw;

    usage(index, &used, &capacity, &largest);
    if (rounded == 0 || rounded > largest)
        return EGM_OK;
    if (watermark_limits(index, &hw) && (double)rounded > hw * (double)capacity)
        return above_watermark(index, rounded, capacity);
    uint64_t free_bytes = capacity - used;
    if (index->futile_valid && now_ms < index->futile_until_ms && index->futile_gen == gen)
        return cannot_evict(index, size, rounded, free_bytes);
    if (rounded > free_bytes &&
        !evictable_at_least(index, rounded - free_bytes, now_ms, &evictable, &until)) {
        if (evictable == 0)
            goto futile; /* as for any size, until something changes */
        return only_protected(index, size);
    }
    double share = index->params.eviction_ratio * (double)capacity;
    uint64_t target = share >= (double)UINT64_MAX ? UINT64_MAX : (uint64_t)share;
    uint64_t need = rounded > UINT64_MAX / replicas ? UINT64_MAX : rounded * replicas;
    if (target < need)
        target = need;
    until = UINT64_MAX;
    if (evict_locked(index, target, now_ms, &until) > 0)
        return EGM_OK;
futile:
    /* Nothing in the LRU lists was evictable, and nothing there becomes so
     * before `until` (the first protection stepped over ends; UINT64_MAX: the
     * lists hold nothing protected, so only a PutEnd can add to them): until
     * then, or an object is committed (evictable_gen), an eviction frees
     * nothing whatever the size or the free space. */
    index->futile_valid = 1;
    index->futile_until_ms = until;
    index->futile_gen = gen;
    return cannot_evict(index, size, rounded, free_bytes);
}

/* Returned by put_locked when the object fits nowhere and an eviction could
 * make room: the caller locks every shard and calls again with evict_ok. */
#define NEEDS_EVICTION 2

/* A new object for key with room for `slots` replicas (zeroed but for its
 * key), or NULL. */
static egm_object_t *object_new(const char *key, size_t key_len, uint32_t slots)
{
    egm_object_t *obj =
        egm_malloc(sizeof(*obj) + slots * sizeof(egm_replica_t) + key_len + 1, "master.object");
    if (obj == NULL) {
        egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for an object's record");
        return NULL;
    }
    if (!egm__key_table_can_hold(obj)) { /* never seen: user space is below 2^47 */
        egm_free(obj);
        egm__set_error(EGM_ERR_NO_MEMORY, "malloc gave an address above 2^48: the key table "
                                          "cannot hold it");
        return NULL;
    }
    memset(obj, 0, sizeof(*obj));
    obj->n_slots = (uint8_t)slots;
    char *obj_key = (char *)egm__object_key(obj);
    memcpy(obj_key, key, key_len);
    obj_key[key_len] = '\0';
    obj->key_len = (uint16_t)key_len;
    return obj;
}

/* Places obj's replicas (obj->size bytes, config->replica_num of them) as a
 * PutStart does: space held for a lease that has ended, and slabs whose lease
 * has, are freed rather than evicting for them or answering NO_SPACE; then
 * eviction when evict_ok (NEEDS_EVICTION otherwise); then the watermark. On
 * failure nothing stays placed. With `space` locked, and every shard when
 * evict_ok. */
static egm_status_t place_locked(egm_object_index_t *index, egm_object_t *obj,
                                 const egm_put_config_t *config, uint64_t now_ms, int evict_ok)
{
    uint32_t replica_num = config->replica_num;
    egm_status_t status = place_replicas(index, obj, replica_num, config);

    if (status == EGM_ERR_NO_SPACE &&
        release_held_locked(index, now_ms) + expire_slabs_locked(index, now_ms) > 0)
        status = place_replicas(index, obj, replica_num, config);
    if (status == EGM_ERR_NO_SPACE && egm__segment_table_count(index->segments) > 0) {
        if (!evict_ok)
            return NEEDS_EVICTION;
        status = evict_for(index, obj->size, replica_num, now_ms);
        if (status == EGM_OK)
            status = place_replicas(index, obj, replica_num, config);
    }
    if (status == EGM_OK)
        status = fit_watermark(index, obj);
    if (status == EGM_ERR_NO_SPACE)
        atomic_fetch_add_explicit(&index->no_space, 1, memory_order_relaxed);
    return status;
}

/* With sh (the key's shard) locked, and every shard when evict_ok. */
static egm_status_t put_locked(egm_object_index_t *index, shard_t *sh, egm_id_t client,
                               const char *key, size_t key_len, uint64_t hash, uint64_t size,
                               const egm_put_config_t *config, uint64_t now_ms, int evict_ok,
                               egm_object_view_t *view_p)
{
    uint32_t replica_num = config->replica_num;
    egm_status_t status;
    egm_object_t *obj = find(sh, key, key_len, hash);

    if (obj != NULL) {
        if (!pending_is_stale(index, obj, now_ms))
            return egm__set_error(EGM_ERR_EXISTS, "object already exists");
        /* Its writer gave up long ago (Mooncake lets a new put take it over). */
        egm_info("discarding a put started %llu ms ago to let a new one take its key",
                 (unsigned long long)(now_ms - obj->put_start_ms));
        space_lock(index);
        object_delete_locked(index, obj);
        index->discarded++;
        space_unlock(index);
    }

    if ((status = egm__key_table_reserve(&sh->by_key)) != EGM_OK)
        return status;
    obj = object_new(key, key_len, replica_num);
    if (obj == NULL)
        return EGM_ERR_NO_MEMORY; /* object_new said why */
    obj->state = EGM_OBJECT_PENDING;
    obj->size = size;
    obj->writer = client;
    obj->put_start_ms = now_ms;
    obj->hard_pin = config->hard_pin != 0;
    obj->soft_pin = config->soft_pin != 0 && !obj->hard_pin; /* a hard pin says more */
    obj->shard = (uint8_t)(sh - index->shards);
    space_lock(index);
    status = place_locked(index, obj, config, now_ms, evict_ok);
    if (status == EGM_OK)
        egm__key_table_insert(&sh->by_key, obj, hash);
    space_unlock(index);
    if (status != EGM_OK) {
        egm_free(obj); /* placed nothing */
        return status;
    }
    move_to(index, obj, LIST_PENDING);
    for (uint32_t i = 0; i < obj->n_replicas; i++) /* its writer copies there until its timeout */
        egm__journal_reserve(index->journal, obj->replicas[i].segment->desc.id,
                             egm__replica_offset(&obj->replicas[i]), size,
                             index->params.pending_timeout_ms);
    sh->n_soft_pinned += obj->soft_pin;
    sh->n_hard_pinned += obj->hard_pin;
    if (view_p != NULL)
        fill_view(index, obj, view_p, 1);
    return EGM_OK;
}

/* What a PutStart asks for, beyond its key. */
static egm_status_t put_check(uint64_t size, const egm_put_config_t *config)
{
    uint32_t replica_num = config->replica_num;
    if (size == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "size: must be > 0");
    if (replica_num == 0 || replica_num > EGM_MASTER_REPLICA_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "replica_num: %u, must be 1..%d", replica_num,
                              EGM_MASTER_REPLICA_MAX);
    if (config->n_preferred > EGM_MASTER_PREFERRED_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "preferred_segments: %zu names, at most %d",
                              config->n_preferred, EGM_MASTER_PREFERRED_MAX);
    return EGM_OK;
}

egm_status_t egm__objects_put_start_with(egm_object_index_t *index, egm_id_t client,
                                         const char *key, size_t key_len, uint64_t size,
                                         const egm_put_config_t *config, uint64_t now_ms,
                                         egm_object_view_t *view_p)
{
    egm_status_t status;

    clear_view(view_p);
    status = egm__objects_check_key(key, key_len);
    if (status != EGM_OK)
        return status;
    if ((status = put_check(size, config)) != EGM_OK)
        return status;
    uint64_t hash;
    shard_t *sh = shard_of_key(index, key, key_len, &hash);
    pthread_mutex_lock(&sh->lock);
    status = put_locked(index, sh, client, key, key_len, hash, size, config, now_ms, 0, view_p);
    pthread_mutex_unlock(&sh->lock);
    if (status != NEEDS_EVICTION)
        return status;
    /* Eviction picks from every shard. Another call may change this key or
     * free space meanwhile: put_locked starts over. */
    lock_all(index);
    status = put_locked(index, sh, client, key, key_len, hash, size, config, now_ms, 1, view_p);
    unlock_all(index);
    return status;
}

egm_status_t egm__objects_put_start(egm_object_index_t *index, egm_id_t client, const char *key,
                                    size_t key_len, uint64_t size, uint32_t replica_num,
                                    uint64_t now_ms, egm_object_view_t *view_p)
{
    egm_put_config_t config = {.replica_num = replica_num};
    return egm__objects_put_start_with(index, client, key, key_len, size, &config, now_ms, view_p);
}

/* ---- client-side allocation: slabs and commits ------------------------------ */

/* With `space` locked (and every shard when evict_ok). */
/* With `space` locked (and every shard when evict_ok). A placement with
 * fewer replicas than asked at probe->size, when min_size (rounded) is
 * smaller, is tried again at min_size: a provider with room for what the
 * call needs but not for a whole slab then still holds a replica. */
static egm_status_t slab_grant_locked(egm_object_index_t *index, egm_object_t *probe,
                                      egm_id_t client, int log, const egm_put_config_t *config,
                                      uint64_t min_size, uint64_t now_ms, int evict_ok,
                                      egm_slab_view_t *view_p, egm_slab_t **slab_p)
{
    egm_slab_extent_t extents[EGM_SLAB_EXTENTS_MAX];
    probe->n_replicas = probe->n_live = 0; /* a retry places afresh */
    egm_status_t status = place_locked(index, probe, config, now_ms, evict_ok);

    if (status == EGM_OK && probe->n_replicas < config->replica_num && probe->size > min_size) {
        release_replicas(NULL, probe); /* placed just now, never journaled */
        probe->n_replicas = probe->n_live = 0;
        probe->size = min_size;
        status = place_locked(index, probe, config, now_ms, evict_ok);
    }
    if (status != EGM_OK)
        return status;
    /* The placed replicas become the slab's extents: allocated, in no
     * segment's replica list (no object owns them yet). */
    for (uint32_t i = 0; i < probe->n_replicas; i++) {
        replica_unlink(&probe->replicas[i]);
        extents[i] = (egm_slab_extent_t){.segment = probe->replicas[i].segment,
                                         .base = egm__replica_offset(&probe->replicas[i])};
    }
    uint64_t lease_ms = index->params.pending_timeout_ms;
    egm_slab_t *slab;
    status = egm__slabs_add(index->slabs, client, probe->size, now_ms + lease_ms, extents,
                            probe->n_replicas, &slab);
    if (status != EGM_OK) {
        for (uint32_t i = 0; i < probe->n_replicas; i++)
            egm__allocator_free(extents[i].segment->allocator, extents[i].base, probe->size);
        probe->n_replicas = probe->n_live = 0;
        return status;
    }
    index->slab_grants++;
    /* Its grant's reply waits for the standbys: they know its log is kept
     * before the writer can write an entry. */
    slab->logged = slab->log_confirmed = log != 0;
    for (uint32_t i = 0; i < probe->n_replicas; i++)
        egm__journal_reserve(index->journal, extents[i].segment->desc.id, extents[i].base,
                             probe->size, lease_ms);
    egm__journal_slab(index->journal, slab, lease_ms);
    *slab_p = slab;
    view_p->id = slab->id;
    view_p->size = probe->size;
    view_p->lease_ms = lease_ms;
    view_p->n_extents = probe->n_replicas;
    for (uint32_t i = 0; i < probe->n_replicas; i++)
        view_p->extents[i] = (egm_replica_view_t){
            .segment = extents[i].segment, .offset = extents[i].base, .length = probe->size};
    return EGM_OK;
}

/* The most one slab holds: a sixteenth of the capacity (so that a writer
 * does not make the store evict for space it may never use), at least
 * min_size. With `space` locked. */
static uint64_t slab_cap(const egm_object_index_t *index, uint64_t min_size)
{
    uint64_t used, capacity;
    usage(index, &used, &capacity, NULL);
    uint64_t cap = egm__allocator_round(capacity / 16);
    return cap > min_size ? cap : min_size;
}

/* At the start of a hold of `space` for a grant that may be answered
 * before the standbys hold it (docs/ha.md "Grants the standbys do not hold
 * yet"): 1 when a standby is in sync (else nothing waits anyway), after
 * stamping the ranges freed in earlier holds with the journal's end now,
 * which covers their ops, and forgetting those the standbys confirmed. Ranges
 * freed later in this hold (by placement) stay unstamped: unconfirmed. */
static int early_settle_locked(egm_object_index_t *index)
{
    uint64_t end, confirmed;
    if (index->recent_frees == NULL || index->journal == NULL ||
        egm__journal_marks(index->journal, &end, &confirmed) == 0)
        return 0;
    egm__recent_frees_settle(index->recent_frees, end, confirmed);
    return 1;
}

/* Whether the slab just granted (not evicting) may be answered before the
 * standbys hold it: every extent on the writer's host (its copies are
 * memory copies, which end soon), none of their space freed by an op the
 * standbys have not confirmed (early_settle_locked before). If so its log
 * counts as kept only once they confirm its grant (egm__objects_slab_seen).
 * With `space` locked. */
static int early_grant_locked(egm_object_index_t *index, egm_slab_t *slab, const char *writer_host)
{
    if (slab->size > EGM_SLAB_EARLY_MAX_BYTES || writer_host == NULL || writer_host[0] == '\0')
        return 0;
    for (uint32_t e = 0; e < slab->n_extents; e++) {
        const egm_segment_t *seg = slab->extents[e].segment;
        if (strcmp(seg->desc.host_id, writer_host) != 0 ||
            egm__recent_frees_overlap(index->recent_frees, seg, slab->extents[e].base, slab->size))
            return 0;
    }
    slab->log_confirmed = 0;
    slab->log_pos = egm__journal_position(index->journal); /* its SLAB op */
    index->slab_grants_early++;
    return 1;
}

egm_status_t egm__objects_slab_grant(egm_object_index_t *index, egm_id_t client, uint64_t size,
                                     uint64_t min_size, int log, int early_ok,
                                     const egm_put_config_t *config, uint64_t now_ms,
                                     egm_slab_view_t *view_p)
{
    uint64_t min_rounded = egm__allocator_round(min_size);
    egm_status_t status;
    egm_slab_t *slab = NULL;

    memset(view_p, 0, sizeof(*view_p));
    if (egm__id_is_nil(client))
        return egm__set_error(EGM_ERR_INVALID_ARG, "client: must not be nil");
    if (min_size == 0 || min_rounded == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "min_size: %llu, must be 1..2^64-64",
                              (unsigned long long)min_size);
    if ((status = put_check(min_size, config)) != EGM_OK)
        return status;
    /* Placed as an object of the slab's size would be (no key, never in the
     * table): the same strategy, eviction and watermark. */
    egm_object_t *probe = egm_calloc(
        1, sizeof(*probe) + config->replica_num * sizeof(egm_replica_t), "master.slab_probe");
    if (probe == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory granting a slab");
    probe->n_slots = (uint8_t)config->replica_num;
    space_lock(index);
    early_ok = early_ok && log && early_settle_locked(index);
    uint64_t want = egm__allocator_round(size);
    uint64_t cap = slab_cap(index, min_rounded);
    /* want 0: size overflowed when rounded (more than anything can hold). */
    probe->size = want == 0 || want > cap ? cap : want < min_rounded ? min_rounded : want;
    status =
        slab_grant_locked(index, probe, client, log, config, min_rounded, now_ms, 0, view_p, &slab);
    if (status != EGM_OK && probe->size > min_rounded) {
        /* No room for all it wanted without evicting: only what it needs now,
         * as a PutStart of that object would get it. (Halvings of what it
         * wanted, tried here, left more of a full pool in slabs than their
         * writers used: the bench smoke's gets found objects of the same
         * phase evicted.) */
        probe->size = min_rounded;
        status = slab_grant_locked(index, probe, client, log, config, min_rounded, now_ms, 0,
                                   view_p, &slab);
    }
    /* Not one that evicted (below): the objects it evicts are freed now. */
    if (status == EGM_OK && early_ok)
        view_p->early = early_grant_locked(index, slab, config->writer_host_id);
    space_unlock(index);
    if (status == NEEDS_EVICTION) {
        lock_all(index);
        space_lock(index);
        status = slab_grant_locked(index, probe, client, log, config, min_rounded, now_ms, 1,
                                   view_p, &slab);
        space_unlock(index);
        unlock_all(index);
    }
    egm_free(probe);
    return status;
}

int egm__objects_slab_seen(egm_object_index_t *index, egm_id_t client, size_t n,
                           const uint64_t *ids, const uint64_t *seqs, const uint8_t *journaled,
                           uint64_t *wait_pos_p)
{
    int known = 1;
    *wait_pos_p = 0;
    space_lock(index);
    for (size_t i = 0; i < n; i++) {
        egm_slab_t *slab;
        if (seqs[i] == 0 || egm__slabs_find(index->slabs, ids[i], client, 0, &slab) != EGM_OK) {
            known = 0; /* no entry, or a slab gone: its log is not read */
            continue;
        }
        int first = slab->seen.prefix == 0 && slab->seen.n == 0;
        if (egm__seq_set_add(&slab->seen, seqs[i]) != EGM_OK)
            egm_log_ratelimited(EGM_LOG_WARN, 1, "slab %llu: %s", (unsigned long long)ids[i],
                                egm_last_error());
        if (journaled == NULL || !journaled[i])
            egm__journal_slab_seen(index->journal, ids[i], seqs[i]);
        /* Until the standbys confirmed the slab's first entry, they would not
         * read its log: Commits there wait (the first one included). One
         * granted with `log` is confirmed from its grant on, or, granted
         * before the standbys held it, once they confirm its grant (log_pos):
         * until then a Commit there waits for that, not for its own ops. */
        if (slab->log_confirmed)
            continue;
        if (slab->logged) {
            if (egm__journal_confirmed(index->journal, slab->log_pos))
                slab->log_confirmed = 1;
            else if (slab->log_pos > *wait_pos_p)
                *wait_pos_p = slab->log_pos;
            continue;
        }
        if (first)
            slab->log_pos = egm__journal_position(index->journal); /* 0: no standby */
        else if (egm__journal_confirmed(index->journal, slab->log_pos))
            slab->log_confirmed = 1;
        if (!slab->log_confirmed)
            known = 0;
    }
    space_unlock(index);
    return known;
}

egm_status_t egm__objects_slab_return(egm_object_index_t *index, egm_id_t client, uint64_t id,
                                      uint64_t now_ms)
{
    egm_slab_t *slab;

    space_lock(index);
    egm_status_t status = egm__slabs_find(index->slabs, id, client, now_ms, &slab);
    if (status == EGM_OK)
        egm__slabs_release(index->slabs, slab);
    space_unlock(index);
    return status;
}

/* Keys of objects that lost a replica, copied while their shards are
 * locked, queued for re-replication once they are not. */
typedef struct {
    char **keys;
    size_t n, cap;
} repair_keys_t;

static void repair_keys_add(repair_keys_t *k, const egm_object_t *obj)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 64;
        char **keys = egm_realloc(k->keys, cap * sizeof(*keys), "master.repair");
        if (keys == NULL) {
            egm_error("re-replication: out of memory listing an object that lost a replica");
            return;
        }
        k->keys = keys;
        k->cap = cap;
    }
    char *copy = egm_malloc(obj->key_len + 1u, "master.repair");
    if (copy == NULL) {
        egm_error("re-replication: out of memory listing an object that lost a replica");
        return;
    }
    memcpy(copy, egm__object_key(obj), obj->key_len + 1u);
    k->keys[k->n++] = copy;
}

/* Queues k's keys for re-replication and frees them; with no lock held
 * (repair.h's lock order). */
static void queue_repairs(egm_object_index_t *index, repair_keys_t *k)
{
    for (size_t i = 0; i < k->n; i++) {
        egm__repair_queue_add(index->repair, k->keys[i], strlen(k->keys[i]));
        egm_free(k->keys[i]);
    }
    egm_free(k->keys);
    k->keys = NULL;
    k->n = k->cap = 0;
}

/* A Commit's claims. They are made first, for every key in request order
 * (the order of the offsets a writer's bump allocator gave them) under one
 * hold of `space`, before the keys are taken shard by shard: in shard order
 * most claims would cut a hole in the slab's unclaimed space, which the keys
 * of the other shards then fill, and the slab's list of pieces, which every
 * claim searches and shifts, would grow to hundreds in a large Commit. A
 * claimed range is an allocation of every live extent that no object or
 * slab piece owns until its key is taken: then it becomes the object's
 * replicas, or goes back to the pool (the key exists, or no memory for the
 * object); claims of keys a batch never took (its done() stopped it) go
 * back at its end. */
typedef struct {
    uint32_t n;
    egm_slab_extent_t extents[EGM_SLAB_EXTENTS_MAX]; /* the live ones */
    uint32_t placed;                                 /* the slab's extents, lost ones included */
} commit_extents_t;

typedef struct {
    egm_status_t *status; /* per key: of its claim (EGM_INPROGRESS once taken) */
    uint32_t *which;      /* per key, claimed: its slab's extents in extents[] */
    commit_extents_t *extents;
    size_t n_extents;
    size_t cap_extents;
    repair_keys_t under; /* committed with fewer live replicas than placed */
} commit_plan_t;

static void commit_plan_cleanup(commit_plan_t *plan)
{
    egm_free(plan->status);
    egm_free(plan->extents);
}

/* Claims [offset, + rounded size) from the slab. With `space` locked. */
static egm_status_t claim_range(egm_slab_t *slab, uint64_t offset, uint64_t size)
{
    uint64_t rounded = egm__allocator_round(size);

    if (rounded == 0 || offset > slab->size || rounded > slab->size - offset)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "offsets: [%llu, +%llu) is past the end of slab %llu (%llu bytes)",
                              (unsigned long long)offset, (unsigned long long)size,
                              (unsigned long long)slab->id, (unsigned long long)slab->size);
    return egm__slabs_claim(slab, offset, rounded);
}

/* Room for one more extents record: EGM_ERR_NO_MEMORY otherwise. */
static egm_status_t plan_reserve(commit_plan_t *plan)
{
    if (plan->n_extents < plan->cap_extents)
        return EGM_OK;
    size_t cap = plan->cap_extents < 4 ? 4 : plan->cap_extents * 2;
    commit_extents_t *e = egm_realloc(plan->extents, cap * sizeof(*e), "master.batch");
    if (e == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for a commit's slabs");
    plan->extents = e;
    plan->cap_extents = cap;
    return EGM_OK;
}

/* Notes slab in b's degraded_slabs when an extent of it is lost (its
 * segment dropped: fewer live extents in e than placed) or on a provider
 * presumed gone. With `space` locked. */
static void note_degraded(const egm_objects_batch_t *b, const egm_slab_t *slab,
                          const commit_extents_t *e)
{
    if (b->degraded_slabs == NULL || b->degraded_max == 0)
        return;
    int degraded = e->n < e->placed;
    for (uint32_t x = 0; x < e->n && !degraded; x++)
        degraded = atomic_load_explicit(&e->extents[x].segment->unreachable, memory_order_relaxed);
    if (!degraded)
        return;
    size_t n = *b->n_degraded_p;
    for (size_t k = 0; k < n; k++)
        if (b->degraded_slabs[k] == slab->id)
            return;
    if (n == b->degraded_max) { /* keep the latest: the writer's open slab comes last */
        memmove(b->degraded_slabs, b->degraded_slabs + 1, (n - 1) * sizeof(*b->degraded_slabs));
        n--;
    }
    b->degraded_slabs[n] = slab->id;
    *b->n_degraded_p = n + 1;
}

/* Makes every valid key's claim, in request order. EGM_ERR_NO_MEMORY for
 * the scratch (nothing claimed). */
static egm_status_t commit_plan(egm_object_index_t *index, const egm_objects_batch_t *b,
                                commit_plan_t *plan)
{
    const egm_slab_t *last = NULL;

    plan->status =
        egm_malloc(b->n * (sizeof(*plan->status) + sizeof(*plan->which)), "master.batch");
    if (plan->status == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for a batch of %zu keys", b->n);
    plan->which = (uint32_t *)(plan->status + b->n);
    /* The keys of a call are mostly in one slab: it is looked up once per
     * run of keys naming it (no slab is released while `space` is held). */
    egm_slab_t *found = NULL;
    uint64_t found_id = 0; /* never a slab's id */
    space_lock(index);
    for (size_t i = 0; i < b->n; i++) {
        egm_slab_t *slab = NULL;
        egm_status_t s = EGM_OK;
        if (!key_ok(b->keys[i], b->key_lens[i]))
            s = EGM_ERR_INVALID_KEY; /* answered already, never taken */
        else if (b->sizes[i] == 0)
            s = egm__set_error(EGM_ERR_INVALID_ARG, "sizes: must be > 0");
        else if (found != NULL && b->slab_ids[i] == found_id)
            slab = found;
        else if ((s = egm__slabs_find(index->slabs, b->slab_ids[i], b->client, b->now_ms, &slab)) ==
                 EGM_OK) {
            found = slab;
            found_id = b->slab_ids[i];
        }
        if (s == EGM_OK && slab != last)
            s = plan_reserve(plan);
        if (s == EGM_OK)
            s = claim_range(slab, b->offsets[i], b->sizes[i]);
        if (s == EGM_OK && slab != last) {
            commit_extents_t *e = &plan->extents[plan->n_extents++];
            e->n = 0;
            e->placed = slab->n_extents;
            for (uint32_t x = 0; x < slab->n_extents; x++)
                if (slab->extents[x].segment != NULL)
                    e->extents[e->n++] = slab->extents[x];
            note_degraded(b, slab, e);
            last = slab;
        }
        if (s == EGM_OK)
            plan->which[i] = (uint32_t)(plan->n_extents - 1);
        plan->status[i] = s;
    }
    space_unlock(index);
    return EGM_OK;
}

/* Journals key i's log entry seen (SLAB_SEEN), and says so in the batch. */
static void journal_seen(egm_object_index_t *index, const egm_objects_batch_t *b, size_t i)
{
    egm__journal_slab_seen(index->journal, b->slab_ids[i], b->log_seqs[i]);
    if (b->log_journaled != NULL)
        b->log_journaled[i] = 1;
}

/* Gives key i's claimed range back to the pool. With `space` locked. */
static void commit_unclaim(egm_object_index_t *index, const commit_plan_t *plan,
                           const egm_objects_batch_t *b, size_t i)
{
    const commit_extents_t *e = &plan->extents[plan->which[i]];
    uint64_t rounded = egm__allocator_round(b->sizes[i]);
    if (b->log_seqs != NULL && b->log_seqs[i] != 0) /* before the range can be given again */
        journal_seen(index, b, i);
    for (uint32_t x = 0; x < e->n; x++)
        space_free(index, e->extents[x].segment, e->extents[x].base + b->offsets[i], rounded);
}

/* Claims of keys the batch never took (a done() that stopped it). */
static void commit_plan_finish(egm_object_index_t *index, commit_plan_t *plan,
                               const egm_objects_batch_t *b)
{
    size_t left = 0;
    for (size_t i = 0; i < b->n; i++)
        left += plan->status[i] == EGM_OK;
    if (left == 0)
        return;
    space_lock(index);
    for (size_t i = 0; i < b->n; i++)
        if (plan->status[i] == EGM_OK)
            commit_unclaim(index, plan, b, i);
    space_unlock(index);
}

/* With sh (the key's shard) locked; obj the object under the key (NULL:
 * none); key i's claim made by commit_plan. The extents it copied stay
 * mounted: unmounting a segment takes the master's lock exclusive. An extent
 * on a provider presumed gone (egm_segment_t.unreachable) gives its range
 * back rather than become a replica (drop_unreachable says why); with none
 * left the key is not committed (NOT_FOUND). */
static egm_status_t commit_locked(egm_object_index_t *index, shard_t *sh, const char *key,
                                  size_t key_len, uint64_t hash, egm_object_t *obj,
                                  const egm_objects_batch_t *b, size_t i, commit_plan_t *plan)
{
    const egm_put_config_t *config = b->config;
    uint64_t size = b->sizes[i];
    egm_status_t status = plan->status[i];

    if (status != EGM_OK)
        return status;                /* nothing was claimed */
    plan->status[i] = EGM_INPROGRESS; /* taken: its range is dealt with here */
    const commit_extents_t *e = &plan->extents[plan->which[i]];
    /* Read once: the flags may change meanwhile (another RPC thread). */
    int gone[EGM_SLAB_EXTENTS_MAX];
    uint32_t reachable = 0;
    for (uint32_t x = 0; x < e->n; x++) {
        gone[x] = atomic_load_explicit(&e->extents[x].segment->unreachable, memory_order_relaxed);
        reachable += !gone[x];
    }
    egm_object_t *created = NULL;
    status = egm__key_table_reserve(&sh->by_key);
    space_lock(index);
    if (status == EGM_OK && obj != NULL && pending_is_stale(index, obj, b->now_ms)) {
        object_delete_locked(index, obj); /* its writer gave up long ago */
        index->discarded++;
        obj = NULL;
    }
    if (status == EGM_OK && obj != NULL)
        status = egm__set_error(EGM_ERR_EXISTS, "object already exists");
    if (status == EGM_OK && reachable == 0) {
        atomic_fetch_add_explicit(&index->unreachable_replicas, e->n, memory_order_relaxed);
        status = egm__set_error(EGM_ERR_NOT_FOUND,
                                "every replica was on a provider that is gone: not committed");
    }
    /* An extent lost with its segment (or on a provider presumed gone) is a
     * replica the object was placed with and does not have: a dropped slot,
     * restored by re-replication as one dropped after the commit is. */
    uint32_t placed = e->placed > reachable ? e->placed : reachable;
    if (status == EGM_OK && (created = object_new(key, key_len, placed)) == NULL)
        status = EGM_ERR_NO_MEMORY; /* object_new said why */
    if (status != EGM_OK) {
        commit_unclaim(index, plan, b, i); /* the writer's bytes are not wanted */
        space_unlock(index);
        return status;
    }
    created->size = size; /* its replicas' length */
    uint64_t rounded = egm__allocator_round(size);
    for (uint32_t x = 0; x < e->n; x++)
        if (!gone[x]) /* a gone extent's range is freed once the object is journaled */
            replica_add(created, e->extents[x].segment, e->extents[x].base + b->offsets[i]);
    created->n_live = created->n_replicas;
    for (uint32_t k = created->n_replicas; k < placed; k++)
        created->replicas[k] = (egm_replica_t){.segment = NULL, .offset_index = k};
    created->n_replicas = (uint8_t)placed;
    index->commits++;
    space_unlock(index);
    if (reachable < e->n)
        atomic_fetch_add_explicit(&index->unreachable_replicas, e->n - reachable,
                                  memory_order_relaxed);
    obj = created;
    obj->state = EGM_OBJECT_COMPLETE;
    obj->size = size;
    obj->writer = b->client;
    obj->commit_ms = b->now_ms;
    obj->hard_pin = config != NULL && config->hard_pin != 0;
    obj->soft_pin = config != NULL && config->soft_pin != 0 && !obj->hard_pin;
    obj->shard = (uint8_t)(sh - index->shards);
    egm__key_table_insert(&sh->by_key, obj, hash);
    move_to(index, obj, obj->hard_pin ? LIST_NONE : obj->soft_pin ? LIST_SOFT : LIST_LRU);
    bump(&index->evictable_gen);
    sh->n_soft_pinned += obj->soft_pin;
    sh->n_hard_pinned += obj->hard_pin;
    egm__journal_object(index->journal, obj);
    /* Before the key can be removed (its shard is held): a new leader must
     * not adopt its log entry once it is gone, over whoever is given its
     * range next. */
    if (b->log_seqs != NULL && b->log_seqs[i] != 0)
        journal_seen(index, b, i);
    if (reachable < e->n) {
        /* After the op naming the object's replicas: until the standbys have
         * it, they would adopt the key's log entry on every extent, this
         * range included (recent_frees.h). */
        space_lock(index);
        for (uint32_t x = 0; x < e->n; x++)
            if (gone[x])
                space_free(index, e->extents[x].segment, e->extents[x].base + b->offsets[i],
                           rounded);
        space_unlock(index);
    }
    if (obj->n_live < obj->n_replicas)
        repair_keys_add(&plan->under, obj); /* queued once the shard is let go */
    return EGM_OK;
}

/* Whether obj (the object under a key, or NULL) is being written by `client`
 * (PutEnd, PutRevoke). With its shard locked. */
static egm_status_t check_writer(const egm_object_t *obj, egm_id_t client)
{
    if (obj == NULL)
        return egm__set_error(EGM_ERR_NOT_FOUND, "no put in progress for this key");
    if (!egm__id_equal(obj->writer, client))
        return egm__set_error(EGM_ERR_INVALID_ARG, "another client is writing this key");
    return EGM_OK;
}

/* The per-key calls below, each with the key's shard locked and obj the
 * object under the key (NULL: none): shared by the one-key functions and
 * egm__objects_batch. */

/* A commit keeps no replica on a segment whose provider is presumed gone
 * (egm_segment_t.unreachable): the bytes written there may be lost with it,
 * and acknowledging them would promise what the store cannot keep. Frees
 * those replicas' space (the provider may yet come back); NOT_FOUND naming
 * the reason when none is left (the caller deletes the object). With the
 * object's shard locked. */
static egm_status_t drop_unreachable(egm_object_index_t *index, egm_object_t *obj)
{
    uint32_t dropped = 0;
    space_lock(index);
    for (uint32_t i = 0; i < obj->n_replicas; i++) {
        egm_replica_t *r = &obj->replicas[i];
        if (r->segment == NULL ||
            !atomic_load_explicit(&r->segment->unreachable, memory_order_relaxed))
            continue;
        release_replica(index, r);
        obj->n_live--;
        dropped++;
    }
    space_unlock(index);
    if (dropped > 0)
        atomic_fetch_add_explicit(&index->unreachable_replicas, dropped, memory_order_relaxed);
    if (obj->n_live == 0)
        return egm__set_error(EGM_ERR_NOT_FOUND,
                              "every replica was on a provider that is gone: not committed");
    return EGM_OK;
}

/* An object left with fewer live replicas than placed (drop_unreachable)
 * goes to `under`, queued for re-replication once the shard is let go. */
static egm_status_t put_end_locked(egm_object_index_t *index, egm_object_t *obj, egm_id_t client,
                                   uint64_t now_ms, repair_keys_t *under)
{
    egm_status_t status = check_writer(obj, client);
    if (status == EGM_OK && obj->state != EGM_OBJECT_COMPLETE &&
        (status = drop_unreachable(index, obj)) != EGM_OK) {
        object_delete(index, obj);
        return status;
    }
    if (status == EGM_OK && obj->state != EGM_OBJECT_COMPLETE) {
        obj->state = EGM_OBJECT_COMPLETE;
        obj->commit_ms = now_ms; /* was its put_start_ms */
        move_to(index, obj, obj->hard_pin ? LIST_NONE : obj->soft_pin ? LIST_SOFT : LIST_LRU);
        bump(&index->evictable_gen);
        egm__journal_object(index->journal, obj);
        if (obj->n_live < obj->n_replicas)
            repair_keys_add(under, obj);
    }
    return status;
}

static egm_status_t put_revoke_locked(egm_object_index_t *index, egm_object_t *obj, egm_id_t client)
{
    egm_status_t status = check_writer(obj, client);
    if (status == EGM_OK && obj->state != EGM_OBJECT_PENDING)
        status = egm__set_error(EGM_ERR_INVALID_ARG, "object is committed; use Remove");
    if (status == EGM_OK)
        object_delete(index, obj);
    return status;
}

egm_status_t egm__objects_put_end(egm_object_index_t *index, egm_id_t client, const char *key,
                                  size_t key_len, uint64_t now_ms)
{
    shard_t *sh;
    egm_object_t *obj;
    egm_status_t status = lock_key(index, key, key_len, &sh, &obj);

    if (status != EGM_OK)
        return status;
    repair_keys_t under = {NULL, 0, 0};
    status = put_end_locked(index, obj, client, now_ms, &under);
    pthread_mutex_unlock(&sh->lock);
    queue_repairs(index, &under);
    return status;
}

egm_status_t egm__objects_put_revoke(egm_object_index_t *index, egm_id_t client, const char *key,
                                     size_t key_len)
{
    shard_t *sh;
    egm_object_t *obj;
    egm_status_t status = lock_key(index, key, key_len, &sh, &obj);

    if (status != EGM_OK)
        return status;
    status = put_revoke_locked(index, obj, client);
    pthread_mutex_unlock(&sh->lock);
    return status;
}

/* A lease granted: the lease extended, the object the most recently used
 * (which also refreshes a soft pin, as Mooncake's GrantLease does). With its
 * shard locked. */
static void grant_lease(egm_object_index_t *index, egm_object_t *obj, uint64_t now_ms)
{
    shard_t *sh = shard_of(index, obj);
    obj->repair_leased = 0;         /* a reader's lease (repair_start sets it again for its own) */
    trim_leases(index, sh, now_ms); /* first: the new lease's bucket is then on the wheel */
    uint64_t expiry = now_ms + index->params.lease_ttl_ms;
    if (expiry > obj->lease_expiry_ms) {
        if (lease_counted(index, sh, obj->lease_expiry_ms))
            lease_count(index, sh, obj->lease_expiry_ms, -1);
        obj->lease_expiry_ms = expiry;
        if (lease_counted(index, sh, expiry))
            lease_count(index, sh, expiry, 1);
    }
    if (obj->list == LIST_LRU || obj->list == LIST_SOFT)
        move_to(index, obj, obj->list);
}

/* GetReplicaList (not_ready: a PENDING object answers NOT_READY) and
 * ExistKey (it answers NOT_FOUND). */
/* not_ready: an object still being written answers NOT_READY (else
 * NOT_FOUND); with_replicas: the view holds its replicas. */
static egm_status_t read_leased_locked(egm_object_index_t *index, egm_object_t *obj,
                                       uint64_t now_ms, int not_ready, int with_replicas,
                                       egm_object_view_t *view_p)
{
    egm_status_t status = EGM_OK;
    if (obj == NULL || (!not_ready && obj->state != EGM_OBJECT_COMPLETE))
        status = egm__set_error(EGM_ERR_NOT_FOUND, "object not found");
    else if (obj->state != EGM_OBJECT_COMPLETE)
        status = egm__set_error(EGM_ERR_NOT_READY, "object is still being written");
    if (status == EGM_OK) {
        grant_lease(index, obj, now_ms);
        if (view_p != NULL)
            fill_view(index, obj, view_p, with_replicas);
    }
    return status;
}

static egm_status_t read_leased(egm_object_index_t *index, const char *key, size_t key_len,
                                uint64_t now_ms, int not_ready, egm_object_view_t *view_p)
{
    shard_t *sh;
    egm_object_t *obj;

    clear_view(view_p);
    egm_status_t status = lock_key(index, key, key_len, &sh, &obj);
    if (status != EGM_OK)
        return status;
    status = read_leased_locked(index, obj, now_ms, not_ready, not_ready, view_p);
    pthread_mutex_unlock(&sh->lock);
    return status;
}

egm_status_t egm__objects_get_replicas(egm_object_index_t *index, const char *key, size_t key_len,
                                       uint64_t now_ms, egm_object_view_t *view_p)
{
    return read_leased(index, key, key_len, now_ms, 1, view_p);
}

egm_status_t egm__objects_exist(egm_object_index_t *index, const char *key, size_t key_len,
                                uint64_t now_ms, egm_object_view_t *view_p)
{
    return read_leased(index, key, key_len, now_ms, 0, view_p);
}

egm_status_t egm__objects_stat(egm_object_index_t *index, const char *key, size_t key_len,
                               egm_object_view_t *view_p)
{
    shard_t *sh;
    egm_object_t *obj;

    clear_view(view_p);
    egm_status_t status = lock_key(index, key, key_len, &sh, &obj);
    if (status != EGM_OK)
        return status;
    if (obj == NULL)
        status = egm__set_error(EGM_ERR_NOT_FOUND, "no object with this key");
    else
        fill_view(index, obj, view_p, 1);
    pthread_mutex_unlock(&sh->lock);
    return status;
}

/* Deletes obj for a Remove: under a live lease (a forced one) its space is
 * held until the lease ends, otherwise freed at once. NO_MEMORY, and obj is
 * left as it was, when the held list cannot grow. With its shard and `space`
 * locked. */
static egm_status_t object_remove_locked(egm_object_index_t *index, egm_object_t *obj,
                                         uint64_t now_ms)
{
    if (lease_live(obj, now_ms)) {
        egm_status_t status = held_reserve(index, obj->n_live);
        if (status != EGM_OK)
            return status;
        hold_replicas(index, obj, obj->lease_expiry_ms, now_ms);
    }
    object_delete_locked(index, obj);
    return EGM_OK;
}

/* The slab of b->client whose log holds key i's removal entry, when the
 * entry's seq can lie in it (NULL: not this client's or gone, and nothing is
 * journaled of the entry here, nor by egm__objects_slab_seen; or a seq past
 * the slab's start, which describes nothing). With `space` locked. */
static egm_slab_t *removal_slab(egm_object_index_t *index, const egm_objects_batch_t *b, size_t i)
{
    egm_slab_t *slab;
    if (egm__slabs_find(index->slabs, b->slab_ids[i], b->client, b->now_ms, &slab) != EGM_OK ||
        egm__slab_log_at(slab->size, b->log_seqs[i]) == 0)
        return NULL;
    return slab;
}

/* Whether the removal entry of key i (b: egm_objects_batch_t), in the log of
 * slab, describes obj: obj has a replica where the entry says, and every
 * live replica lies on a provider that holds an extent of that slab (so the
 * entry outlives the object). With its shard and `space` locked. */
static int removal_placed(const egm_slab_t *slab, const egm_object_t *obj,
                          const egm_objects_batch_t *b, size_t i)
{
    int named = 0;
    for (uint32_t r = 0; r < obj->n_replicas; r++) {
        const egm_segment_t *seg = obj->replicas[r].segment;
        if (seg == NULL)
            continue;
        named |= egm__id_equal(seg->desc.id, b->removal_segments[i]) &&
                 egm__replica_offset(&obj->replicas[r]) == b->removal_offsets[i];
        int held = 0;
        for (uint32_t x = 0; x < slab->n_extents && !held; x++)
            held = slab->extents[x].segment != NULL &&
                   egm__id_equal(slab->extents[x].segment->desc.owner, seg->desc.owner);
        if (!held)
            return 0;
    }
    return named;
}

/* *grant_p is raised to the removed object's latest lease grant. b and i
 * (b NULL: none): the key's removal entry (egm_objects_batch_t), journaled
 * seen after the object's OBJECT_GONE and before its space can be handed out
 * again, under the same hold of `space`. */
static egm_status_t remove_locked(egm_object_index_t *index, egm_object_t *obj, int force,
                                  uint64_t now_ms, uint64_t *grant_p, const egm_objects_batch_t *b,
                                  size_t i)
{
    egm_status_t status = EGM_OK;
    if (obj == NULL)
        status = egm__set_error(EGM_ERR_NOT_FOUND, "object not found");
    else if (!force && obj->state == EGM_OBJECT_PENDING)
        status = egm__set_error(EGM_ERR_NOT_READY, "object is still being written");
    else if (!force && lease_live(obj, now_ms) && !obj->repair_leased)
        status = egm__set_error(EGM_ERR_HAS_LEASE, "object is under a read lease for %llu ms",
                                (unsigned long long)(obj->lease_expiry_ms - now_ms));
    if (status != EGM_OK)
        return status;
    uint64_t grant = last_grant_ms(index, obj);
    int logged = b != NULL && b->log_seqs != NULL && b->log_seqs[i] != 0;
    space_lock(index);
    const egm_slab_t *slab = logged ? removal_slab(index, b, i) : NULL;
    int placed = slab != NULL && b->removal_placed != NULL && removal_placed(slab, obj, b, i);
    status = object_remove_locked(index, obj, now_ms);
    if (status == EGM_OK && slab != NULL) {
        journal_seen(index, b, i);
        if (placed)
            b->removal_placed[i] = 1;
    }
    space_unlock(index);
    if (status != EGM_OK)
        return status;
    if (grant > *grant_p)
        *grant_p = grant;
    return EGM_OK;
}

egm_status_t egm__objects_remove(egm_object_index_t *index, const char *key, size_t key_len,
                                 int force, uint64_t now_ms, uint64_t *last_grant_ms_p)
{
    shard_t *sh;
    egm_object_t *obj;
    uint64_t grant = 0;
    egm_status_t status = lock_key(index, key, key_len, &sh, &obj);

    if (last_grant_ms_p != NULL)
        *last_grant_ms_p = 0;
    if (status != EGM_OK)
        return status;
    status = remove_locked(index, obj, force, now_ms, &grant, NULL, 0);
    pthread_mutex_unlock(&sh->lock);
    if (status == EGM_OK && last_grant_ms_p != NULL)
        *last_grant_ms_p = grant;
    return status;
}

/* ---- batches ---------------------------------------------------------------- */

/* Keys of one shard taken under one hold of its lock: their cache misses
 * overlap, and another thread waits at most this many keys for the lock. */
#define BATCH_RUN 32

/* What a list unlink of obj will write: its neighbours' links (each object's
 * links sit together after its timestamps). */
static void prefetch_neighbours(const egm_object_t *obj)
{
    const egm_object_t *nb[2] = {obj->link.prev, obj->link.next};
    for (int k = 0; k < 2; k++)
        if (nb[k] != NULL)
            prefetch_lines(&nb[k]->link, sizeof(nb[k]->link));
}

/* Whether a key before j in this run has hash[j]. */
static int hash_seen(const uint64_t *hash, size_t j)
{
    for (size_t k = 0; k < j; k++)
        if (hash[k] == hash[j])
            return 1;
    return 0;
}

/* One run of a shard's keys, with its lock held: the slots of every key are
 * fetched, then the objects they name, then the neighbours a lease or an LRU
 * move writes, and only then is each key's call made, in request order. */
static egm_status_t batch_run(egm_object_index_t *index, shard_t *sh, const egm_objects_batch_t *b,
                              const uint32_t *idx, const uint64_t *hash, size_t n,
                              uint64_t *grant_p, commit_plan_t *plan)
{
    const egm_key_table_t *t = &sh->by_key;
    egm_object_t *cand[BATCH_RUN];
    egm_object_view_t view;
    egm_status_t status = EGM_OK;
    int evicted = 0;

    for (size_t j = 0; j < n; j++)
        egm__key_table_prefetch(t, hash[j]);
    for (size_t j = 0; j < n; j++) {
        cand[j] = egm__key_table_candidate(t, hash[j]);
        if (cand[j] != NULL)
            prefetch_lines(cand[j], sizeof(*cand[j]) + sizeof(egm_replica_t) + 64);
    }
    for (size_t j = 0; j < n; j++) {
        size_t i = idx[j];
        egm_object_t *obj = cand[j];
        /* No slot that may hold the key: it is absent (a new key of a put
         * or commit), no need to probe again. */
        if (obj != NULL && (obj->key_len != b->key_lens[i] ||
                            memcmp(egm__object_key(obj), b->keys[i], b->key_lens[i]) != 0))
            obj = cand[j] = find(sh, b->keys[i], b->key_lens[i], hash[j]);
        if (obj != NULL && b->op != EGM_OBJECTS_PUT_REVOKE && b->op != EGM_OBJECTS_REMOVE &&
            b->op != EGM_OBJECTS_PUT_START && b->op != EGM_OBJECTS_COMMIT)
            prefetch_neighbours(obj);
    }
    for (size_t j = 0; j < n && status == EGM_OK; j++) {
        size_t i = idx[j];
        /* An earlier key of this run may have removed or committed the
         * object (the same key given twice: only a key of the same hash can
         * be it; a PutEnd deletes an object whose replicas are all on
         * providers presumed gone), or an eviction any object. */
        egm_object_t *obj =
            evicted || ((b->op == EGM_OBJECTS_PUT_REVOKE || b->op == EGM_OBJECTS_REMOVE ||
                         b->op == EGM_OBJECTS_COMMIT || b->op == EGM_OBJECTS_PUT_END) &&
                        hash_seen(hash, j))
                ? find(sh, b->keys[i], b->key_lens[i], hash[j])
                : cand[j];
        egm_status_t s;
        const egm_object_view_t *v = NULL;
        switch (b->op) {
        case EGM_OBJECTS_GET_REPLICAS:
        case EGM_OBJECTS_EXIST:
            clear_view(&view);
            s = read_leased_locked(index, obj, b->now_ms, b->op == EGM_OBJECTS_GET_REPLICAS,
                                   b->op == EGM_OBJECTS_GET_REPLICAS || b->with_replicas, &view);
            v = s == EGM_OK ? &view : NULL;
            break;
        case EGM_OBJECTS_PUT_START:
            clear_view(&view);
            s = put_check(b->sizes[i], b->config);
            if (s == EGM_OK)
                s = put_locked(index, sh, b->client, b->keys[i], b->key_lens[i], hash[j],
                               b->sizes[i], b->config, b->now_ms, 0, &view);
            if (s == NEEDS_EVICTION) {
                /* Eviction locks every shard, in order: this one is let go
                 * meanwhile, and what the run found may have gone. */
                pthread_mutex_unlock(&sh->lock);
                lock_all(index);
                s = put_locked(index, sh, b->client, b->keys[i], b->key_lens[i], hash[j],
                               b->sizes[i], b->config, b->now_ms, 1, &view);
                unlock_all(index);
                pthread_mutex_lock(&sh->lock);
                evicted = 1;
            }
            v = s == EGM_OK ? &view : NULL;
            break;
        case EGM_OBJECTS_PUT_END:
            s = put_end_locked(index, obj, b->client, b->now_ms, &plan->under);
            break;
        case EGM_OBJECTS_PUT_REVOKE:
            s = put_revoke_locked(index, obj, b->client);
            break;
        case EGM_OBJECTS_COMMIT:
            s = commit_locked(index, sh, b->keys[i], b->key_lens[i], hash[j], obj, b, i, plan);
            break;
        default:
            s = remove_locked(index, obj, b->force, b->now_ms, grant_p, b, i);
            break;
        }
        status = b->done(b->arg, i, s, v);
    }
    return status;
}

egm_status_t egm__objects_batch(egm_object_index_t *index, const egm_objects_batch_t *b)
{
    size_t start[EGM_OBJECTS_SHARDS + 1] = {0}, n = b->n;
    egm_status_t status = EGM_OK;
    uint64_t grant = 0;

    if (b->last_grant_ms_p != NULL)
        *b->last_grant_ms_p = 0;
    if (b->n_degraded_p != NULL)
        *b->n_degraded_p = 0;
    if (n == 0)
        return EGM_OK;
    /* Scratch: each key's hash, then the keys' indexes grouped by shard. */
    uint64_t *hash = egm_malloc(n * (2 * sizeof(uint64_t) + sizeof(uint32_t)), "master.batch");
    if (hash == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for a batch of %zu keys", n);
    uint64_t *run_hash = hash + n;
    uint32_t *order = (uint32_t *)(run_hash + n);
    for (size_t i = 0; i < n && status == EGM_OK; i++) {
        if (!key_ok(b->keys[i], b->key_lens[i])) {
            status = b->done(b->arg, i, egm__objects_check_key(b->keys[i], b->key_lens[i]), NULL);
            continue;
        }
        hash[i] = egm__key_hash(b->keys[i], b->key_lens[i]);
        start[shard_index(hash[i]) + 1]++;
    }
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++)
        start[s + 1] += start[s];
    size_t fill[EGM_OBJECTS_SHARDS];
    memcpy(fill, start, sizeof(fill));
    for (size_t i = 0; i < n && status == EGM_OK; i++)
        if (key_ok(b->keys[i], b->key_lens[i])) {
            size_t k = fill[shard_index(hash[i])]++;
            order[k] = (uint32_t)i;
            run_hash[k] = hash[i];
        }
    commit_plan_t plan = {0};
    if (status == EGM_OK && b->op == EGM_OBJECTS_COMMIT)
        status = commit_plan(index, b, &plan);
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS && status == EGM_OK; s++) {
        shard_t *sh = &index->shards[s];
        for (size_t k = start[s]; k < start[s + 1] && status == EGM_OK; k += BATCH_RUN) {
            size_t m = start[s + 1] - k < BATCH_RUN ? start[s + 1] - k : BATCH_RUN;
            pthread_mutex_lock(&sh->lock);
            status = batch_run(index, sh, b, order + k, run_hash + k, m, &grant, &plan);
            pthread_mutex_unlock(&sh->lock);
        }
    }
    if (plan.status != NULL) {
        commit_plan_finish(index, &plan, b);
        commit_plan_cleanup(&plan);
    }
    queue_repairs(index, &plan.under);
    egm_free(hash);
    if (b->last_grant_ms_p != NULL)
        *b->last_grant_ms_p = grant;
    return status;
}

static int cmp_replica_desc(const void *a, const void *b)
{
    const egm_replica_t *x = *(egm_replica_t *const *)a, *y = *(egm_replica_t *const *)b;
    if (x->segment != y->segment)
        return (uintptr_t)x->segment < (uintptr_t)y->segment ? -1 : 1;
    uint64_t xo = egm__replica_offset(x), yo = egm__replica_offset(y);
    return xo < yo ? 1 : xo > yo ? -1 : 0;
}

/* Frees the replicas of objs[0..n) highest offset first in each segment: each
 * freed range then joins the free range just above it, where hash order would
 * insert into the middle of the allocator's sorted range array every time
 * (O(n^2) moves for a full segment). With every shard and `space` locked. */
static void release_sorted(egm_object_index_t *index, egm_object_t **objs, size_t n)
{
    size_t total = 0, k = 0;
    for (size_t i = 0; i < n; i++)
        total += objs[i]->n_replicas;
    egm_replica_t **reps = egm_malloc((total ? total : 1) * sizeof(*reps), "master.remove_all");
    if (reps == NULL)
        return; /* object_delete_locked frees them in any order */
    for (size_t i = 0; i < n; i++)
        for (uint32_t r = 0; r < objs[i]->n_replicas; r++)
            if (objs[i]->replicas[r].segment != NULL)
                reps[k++] = &objs[i]->replicas[r];
    qsort(reps, k, sizeof(*reps), cmp_replica_desc);
    for (size_t i = 0; i < k; i++) {
        egm_replica_t *r = reps[i];
        egm_object_t *obj = egm__replica_object(r);
        release_replica(index, r);
        obj->n_live = 0;
    }
    egm_free(reps);
}

uint64_t egm__objects_remove_all(egm_object_index_t *index, int force, uint64_t now_ms,
                                 uint64_t *last_grant_ms_p)
{
    size_t cap = 0, n = 0, leased = 0;
    uint64_t removed = 0, grant = 0;

    lock_all(index);
    space_lock(index);
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++)
        cap += index->shards[s].by_key.count;
    egm_object_t **objs = egm_malloc((cap ? cap : 1) * sizeof(*objs), "master.remove_all");
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++) {
        egm_key_table_t *t = &index->shards[s].by_key;
        egm__key_table_settle(t); /* one table to scan, whose removals move slots back */
        for (size_t i = 0; i <= t->mask; i++) {
            egm_object_t *obj = egm__key_table_at(t, i);
            if (obj == NULL || (!force && (obj->state != EGM_OBJECT_COMPLETE ||
                                           (lease_live(obj, now_ms) && !obj->repair_leased))))
                continue;
            if (objs != NULL) {
                objs[n++] = obj; /* deleted below, after the sorted frees */
                leased += lease_live(obj, now_ms) ? obj->n_live : 0;
                continue;
            }
            /* Out of memory for the list: deleted now. The removal moves later
             * slots back, so slot i is looked at again (an object kept and moved
             * from the table's start to its end is looked at twice: kept twice). */
            uint64_t g = last_grant_ms(index, obj);
            if (object_remove_locked(index, obj, now_ms) != EGM_OK)
                continue; /* kept: no room to hold its space */
            if (g > grant)
                grant = g;
            removed++;
            i--;
        }
    }
    /* Objects under a live lease (force) keep their space until it ends;
     * without room to hold it (out of memory) they are not removed. */
    int can_hold = leased == 0 || held_reserve(index, leased) == EGM_OK;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        egm_object_t *obj = objs[i];
        if (lease_live(obj, now_ms)) {
            if (!can_hold)
                continue;
            hold_replicas(index, obj, obj->lease_expiry_ms, now_ms);
        }
        uint64_t g = last_grant_ms(index, obj);
        if (g > grant)
            grant = g;
        objs[k++] = obj;
    }
    if (!can_hold)
        egm_error("RemoveAll kept %zu replicas of objects under a read lease: %s", leased,
                  egm_last_error());
    n = k;
    if (n > 0)
        release_sorted(index, objs, n);
    for (size_t i = 0; i < n; i++)
        object_delete_locked(index, objs[i]);
    space_unlock(index);
    unlock_all(index);
    egm_free(objs);
    if (last_grant_ms_p != NULL)
        *last_grant_ms_p = grant;
    return removed + n;
}

size_t egm__objects_sweep_pending(egm_object_index_t *index, uint64_t now_ms)
{
    size_t discarded = 0;

    lock_all(index);
    space_lock(index);
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++) {
        shard_t *sh = &index->shards[s];
        while (sh->pending.head != NULL && pending_is_stale(index, sh->pending.head, now_ms)) {
            object_delete_locked(index, sh->pending.head);
            discarded++;
        }
    }
    index->discarded += discarded;
    space_unlock(index);
    unlock_all(index);
    if (discarded > 0)
        egm_info("discarded %zu puts unfinished after %llu ms", discarded,
                 (unsigned long long)index->params.pending_timeout_ms);
    return discarded;
}

/* ---- eviction ------------------------------------------------------------- */

static int soft_pin_holds(const egm_object_index_t *index, const egm_object_t *obj, uint64_t now_ms)
{
    uint64_t last = last_access_ms(index, obj);
    return obj->soft_pin && (now_ms < last || now_ms - last < index->params.soft_pin_ttl_ms);
}

/* With every shard and `space` locked. */
static uint64_t evict_one(egm_object_index_t *index, egm_object_t *obj)
{
    uint64_t freed = object_delete_locked(index, obj);
    index->evictions++;
    index->evicted_bytes += freed;
    return freed;
}

/* The shards' lists of one kind walked as one: cursor[s] is the next object
 * of shard s; the first of them in append order (lru_seq; a tie goes to the
 * lower shard) is the one the single list of an unsharded index would have
 * next. */
typedef struct {
    egm_object_t *cursor[EGM_OBJECTS_SHARDS];
} merged_list_t;

static void merged_start(egm_object_index_t *index, merged_list_t *m, int soft)
{
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++)
        m->cursor[s] = soft ? index->shards[s].soft.head : index->shards[s].lru.head;
}

static egm_object_t *merged_peek(const merged_list_t *m)
{
    egm_object_t *best = NULL;
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++)
        if (m->cursor[s] != NULL && (best == NULL || m->cursor[s]->lru_seq < best->lru_seq))
            best = m->cursor[s];
    return best;
}

/* Steps past obj (the one merged_peek gave), before it may be deleted. */
static void merged_advance(merged_list_t *m, const egm_object_t *obj)
{
    m->cursor[obj->shard] = obj->link.next;
}

/* With every shard and `space` locked. *until_p (optional) is lowered to
 * when the first protected object stepped over stops being protected. */
static uint64_t evict_locked(egm_object_index_t *index, uint64_t bytes, uint64_t now_ms,
                             uint64_t *until_p)
{
    uint64_t freed = 0, evicted = 0, soft_evicted = 0;
    merged_list_t lru, soft;

    if (bytes == 0)
        return 0;
    index->eviction_runs++;
    /* Unpinned objects and lapsed soft pins, merged by recency. Soft pins
     * share one TTL and the soft list is in recency order, so the lapsed ones
     * are its head: the merge stops taking from it at the first pin that
     * holds. Protected objects are stepped over (they were committed or read
     * within the residency or a lease TTL, so few of them are ahead of
     * anything evictable). */
    merged_start(index, &lru, 0);
    merged_start(index, &soft, 1);
    int soft_done = 0;
    while (freed < bytes) {
        egm_object_t *a = merged_peek(&lru), *b = soft_done ? NULL : merged_peek(&soft), *pick;
        if (b != NULL && soft_pin_holds(index, b, now_ms)) {
            soft_done = 1;
            b = NULL;
        }
        if (a != NULL && (b == NULL || last_access_ms(index, a) <= last_access_ms(index, b))) {
            pick = a;
            merged_advance(&lru, a);
        } else if (b != NULL) {
            pick = b;
            merged_advance(&soft, b);
        } else {
            break;
        }
        if (eviction_protected(index, pick, now_ms, until_p))
            continue;
        freed += evict_one(index, pick);
        evicted++;
    }
    /* Then soft-pinned objects, only because nothing else was left. */
    merged_start(index, &soft, 1);
    for (egm_object_t *b = merged_peek(&soft); b != NULL && freed < bytes; b = merged_peek(&soft)) {
        merged_advance(&soft, b);
        if (!eviction_protected(index, b, now_ms, until_p)) {
            freed += evict_one(index, b);
            evicted++;
            soft_evicted++;
        }
    }
    if (evicted > 0)
        egm_log_ratelimited(EGM_LOG_INFO, 1,
                            "evicted %llu objects (%llu soft-pinned), %llu bytes of %llu asked",
                            (unsigned long long)evicted, (unsigned long long)soft_evicted,
                            (unsigned long long)freed, (unsigned long long)bytes);
    else
        egm_log_ratelimited(EGM_LOG_DEBUG, 1,
                            "eviction of %llu bytes found nothing evictable (every object is "
                            "leased, within its residency, hard-pinned or being written)",
                            (unsigned long long)bytes);
    return freed;
}

uint64_t egm__objects_evict(egm_object_index_t *index, uint64_t bytes, uint64_t now_ms)
{
    lock_all(index);
    space_lock(index);
    uint64_t freed = evict_locked(index, bytes, now_ms, NULL);
    space_unlock(index);
    unlock_all(index);
    return freed;
}

uint64_t egm__objects_evict_if_needed(egm_object_index_t *index, uint64_t now_ms)
{
    uint64_t used, capacity, freed = 0;

    lock_all(index);
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++)
        trim_leases(index, &index->shards[s], now_ms);
    space_lock(index);
    usage(index, &used, &capacity, NULL);
    if (capacity > 0 && (double)used > index->params.eviction_high_watermark * (double)capacity) {
        double low = index->params.eviction_high_watermark - index->params.eviction_ratio;
        if (low < 0.0)
            low = 0.0;
        /* Unfinished puts and open slabs count as used above, but eviction
         * cannot free their space: the share finished objects may keep is
         * taken of what they leave, not of the capacity (which, with puts in
         * flight on most of the pool, would take every finished object). */
        egm_slabs_stats_t slabs;
        egm__slabs_stats(index->slabs, &slabs);
        uint64_t pending = slabs.unclaimed_bytes; /* open slabs: about to be written */
        for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++)
            for (const egm_object_t *o = index->shards[s].pending.head; o != NULL; o = o->link.next)
                pending += object_bytes(o);
        uint64_t finished = used > pending ? used - pending : 0;
        uint64_t room = capacity > pending ? capacity - pending : 0;
        uint64_t keep = (uint64_t)(low * (double)room);
        freed = evict_locked(index, finished > keep ? finished - keep : 0, now_ms, NULL);
    }
    space_unlock(index);
    unlock_all(index);
    return freed;
}

size_t egm__objects_drop_segment(egm_object_index_t *index, egm_segment_t *segment)
{
    size_t deleted = 0;
    repair_keys_t lost = {NULL, 0, 0};

    lock_all(index);
    space_lock(index);
    /* The segment's space goes away with it: nothing to free in its allocator.
     * Replicas of one object are on distinct segments, so deleting an object
     * here never touches this list again. */
    egm_replica_t *r = segment->replicas;
    while (r != NULL) {
        egm_replica_t *next = r->seg_next;
        egm_object_t *obj = egm__replica_object(r);
        replica_unlink(r);
        r->segment = NULL;
        obj->n_live--;
        if (obj->n_live == 0) {
            object_forget(index, obj); /* no live replica: nothing to free */
            deleted++;
        } else {
            repair_keys_add(&lost, obj);
        }
        r = next;
    }
    held_take(index, held_in_segment, segment, 0); /* its memory goes: no reader to protect */
    egm__slabs_drop_segment(index->slabs, segment);
    space_unlock(index);
    unlock_all(index);
    /* Queued once every lock is let go (repair.h's lock order). */
    if (lost.n > 0)
        egm_info("segment %s dropped: %zu objects kept fewer replicas than placed (queued for "
                 "re-replication), %zu lost their last one",
                 segment->desc.name, lost.n, deleted);
    for (size_t i = 0; i < lost.n; i++) {
        egm__repair_queue_add(index->repair, lost.keys[i], strlen(lost.keys[i]));
        egm_free(lost.keys[i]);
    }
    egm_free(lost.keys);
    return deleted;
}

/* ---- re-replication (repair.h) ---------------------------------------------- */

egm_repair_queue_t *egm__objects_repair_queue(egm_object_index_t *index)
{
    return index->repair;
}

/* A repair target being chosen (repair_try). */
typedef struct {
    uint64_t size;
    egm_segment_t *segment;
    uint64_t offset;
} repair_try_t;

static int repair_try(void *arg, egm_segment_t *seg)
{
    repair_try_t *t = arg;
    if (egm__allocator_alloc(seg->allocator, t->size, &t->offset) != EGM_OK)
        return 0;
    t->segment = seg;
    return 1;
}

/* Picks a segment for a new replica of obj and allocates it there: placement
 * over failure domains (placement.h) with obj's live replicas as holding, so
 * on another provider than every one of them (egm__repair_target_ok), in
 * another zone or on another host first, never on a provider presumed gone,
 * from a random segment on; NULL when none has room. With obj's shard and
 * `space` locked. */
static egm_segment_t *repair_place(egm_object_index_t *index, const egm_object_t *obj,
                                   uint64_t *offset_p)
{
    egm_segment_t *holders[EGM_MASTER_REPLICA_MAX];
    size_t n_holders = 0;
    for (uint32_t i = 0; i < obj->n_replicas; i++)
        if (obj->replicas[i].segment != NULL)
            holders[n_holders++] = obj->replicas[i].segment;
    egm_placement_request_t req = {
        .strategy = EGM_PLACEMENT_RANDOM, .holding = holders, .n_holding = n_holders};
    repair_try_t t = {.size = obj->size};
    uint32_t placed = 0;
    if (egm__placement_choose(index->placer, index->segments, &req, 1, repair_try, &t, &placed) !=
            EGM_OK ||
        placed == 0)
        return NULL;
    *offset_p = t.offset;
    return t.segment;
}

egm_status_t egm__objects_repair_start(egm_object_index_t *index, const char *key, size_t key_len,
                                       uint64_t now_ms, int over_readers, egm_repair_task_t *task)
{
    shard_t *sh;
    egm_object_t *obj;
    egm_status_t status = lock_key(index, key, key_len, &sh, &obj);

    if (status != EGM_OK)
        return status;
    if (obj == NULL)
        status = egm__set_error(EGM_ERR_NOT_FOUND, "not found");
    else if (obj->state != EGM_OBJECT_COMPLETE)
        status = egm__set_error(EGM_ERR_NOT_READY, "being put");
    else if (obj->n_live >= obj->n_replicas)
        status = egm__set_error(EGM_ERR_EXISTS, "every replica is live");
    else if (!over_readers && lease_live(obj, now_ms) && !obj->repair_leased)
        status = egm__set_error(EGM_ERR_BUSY, "a reader's lease is live");
    if (status != EGM_OK) {
        pthread_mutex_unlock(&sh->lock);
        return status;
    }
    uint64_t offset = 0, release_ms = now_ms + index->params.lease_ttl_ms, used, capacity;
    double hw;
    space_lock(index);
    /* A repair never takes the pool above the high watermark: restoring a
     * copy must not make the tick evict other objects. */
    usage(index, &used, &capacity, NULL);
    int full = watermark_limits(index, &hw) &&
               (double)(used + egm__allocator_round(obj->size)) > hw * (double)capacity;
    egm_segment_t *target = full ? NULL : repair_place(index, obj, &offset);
    if (full) {
        status = egm__set_error(EGM_ERR_NO_SPACE, "the pool is at its high watermark");
    } else if (target == NULL) {
        status = egm__set_error(EGM_ERR_NO_SPACE, "no other provider has room");
    } else if ((status = held_reserve(index, 1)) != EGM_OK) {
        egm__allocator_free(target->allocator, offset, obj->size);
    } else {
        /* Held until the commit, or the lease's end (repair.h). */
        index->held[index->n_held++] = (held_extent_t){.segment = target,
                                                       .offset = offset,
                                                       .length = obj->size,
                                                       .release_ms = release_ms,
                                                       .repair = 1};
        egm__journal_reserve(index->journal, target->desc.id, offset, obj->size,
                             release_ms - now_ms);
        index->held_bytes += egm__allocator_round(obj->size);
        if (release_ms < index->held_release_ms)
            index->held_release_ms = release_ms;
    }
    space_unlock(index);
    if (status == EGM_OK) {
        const egm_replica_t *src = NULL;
        for (uint32_t i = 0; i < obj->n_replicas && src == NULL; i++)
            if (obj->replicas[i].segment != NULL)
                src = &obj->replicas[i];
        /* The source's space is not reused while the lease lasts, whatever
         * happens to the object (docs/consistency.md). No reader is served by
         * this lease: unless one's is live too (a repair waits one lease TTL
         * for those to end first), a plain remove goes ahead and holds the
         * space, as it would without a repair. */
        int readers = lease_live(obj, now_ms) && !obj->repair_leased;
        grant_lease(index, obj, now_ms);
        obj->repair_leased = !readers;
        *task = (egm_repair_task_t){.size = obj->size,
                                    .source = src->segment,
                                    .source_offset = egm__replica_offset(src),
                                    .target = target,
                                    .target_offset = offset};
    }
    pthread_mutex_unlock(&sh->lock);
    return status;
}

typedef struct {
    const egm_segment_t *segment;
    uint64_t offset, length;
} extent_key_t;

static int held_is_repair(const held_extent_t *h, const void *arg)
{
    const extent_key_t *k = arg;
    return h->repair && h->segment == k->segment && h->offset == k->offset &&
           h->length == k->length;
}

/* Whether obj may take task's target as a new replica: the task's source is
 * still one of its live replicas (while the lease granted with the task
 * lasts, no other object can have a replica there: the space of a removed
 * one is held), it has a dropped slot, and no live replica on the target's
 * provider. With its shard locked. */
static egm_replica_t *repair_slot(const egm_object_t *obj, const egm_repair_task_t *task)
{
    egm_segment_t *holders[EGM_MASTER_REPLICA_MAX];
    size_t n_holders = 0;
    egm_replica_t *slot = NULL;
    int has_source = 0;

    if (obj->state != EGM_OBJECT_COMPLETE || obj->size != task->size)
        return NULL;
    for (uint32_t i = 0; i < obj->n_replicas; i++) {
        egm_replica_t *r = (egm_replica_t *)&obj->replicas[i];
        if (r->segment == NULL) {
            if (slot == NULL)
                slot = r;
            continue;
        }
        holders[n_holders++] = r->segment;
        if (r->segment == task->source && egm__replica_offset(r) == task->source_offset)
            has_source = 1;
    }
    if (!has_source || slot == NULL || !egm__repair_target_ok(task->target, holders, n_holders))
        return NULL;
    return slot;
}

egm_status_t egm__objects_repair_end(egm_object_index_t *index, const char *key, size_t key_len,
                                     const egm_repair_task_t *task, int copied, uint64_t now_ms,
                                     int *still_under_p)
{
    egm_status_t freeing;
    shard_t *sh = NULL;
    egm_object_t *obj = NULL;
    egm_status_t status = EGM_OK;

    *still_under_p = 0;
    if (egm__objects_check_key(key, key_len) == EGM_OK)
        lock_key(index, key, key_len, &sh, &obj);
    space_lock(index);
    size_t before = index->n_held;
    uint64_t release_ms = 0;
    extent_key_t k = {task->target, task->target_offset, task->size};
    for (size_t i = 0; task->target != NULL && i < index->n_held; i++)
        if (held_is_repair(&index->held[i], &k))
            release_ms = index->held[i].release_ms;
    egm_replica_t *slot = obj != NULL && task->target != NULL ? repair_slot(obj, task) : NULL;
    if (task->target == NULL)
        status = egm__set_error(EGM_ERR_SEGMENT_NOT_FOUND, "the target's segment is gone");
    else if (held_take(index, held_is_repair, &k, 0) == 0 || index->n_held + 1 != before)
        status = egm__set_error(EGM_ERR_NOT_FOUND, "no repair extent there (its lease ended?)");
    else if (!copied)
        status = egm__set_error(EGM_ERR_TRANSFER, "the copy failed");
    else if (now_ms >= release_ms)
        status = egm__set_error(EGM_ERR_LEASE_EXPIRED, "committed after the lease");
    else if (obj == NULL)
        status = egm__set_error(EGM_ERR_NOT_FOUND, "the object is gone");
    else if (slot == NULL)
        status = egm__set_error(EGM_ERR_INVALID_ARG, "the object changed since the grant");
    if (status == EGM_OK) {
        /* The dropped slot keeps its index in replicas[] (egm__replica_object). */
        *slot =
            (egm_replica_t){.segment = task->target,
                            .offset_index = task->target_offset | (uint64_t)(slot - obj->replicas)};
        replica_link(slot);
        obj->n_live++;
        egm__journal_object(index->journal, obj);
    } else if (index->n_held + 1 == before &&
               (freeing = space_free(index, task->target, task->target_offset, task->size)) !=
                   EGM_OK &&
               freeing != EGM_ERR_NO_MEMORY) { /* lost: the allocator said so */
        egm_error("segment %s: freeing a repair extent failed: %s", task->target->desc.name,
                  egm_last_error());
    }
    space_unlock(index);
    if (obj != NULL)
        *still_under_p = obj->state == EGM_OBJECT_COMPLETE && obj->n_live < obj->n_replicas;
    if (sh != NULL)
        pthread_mutex_unlock(&sh->lock);
    return status;
}

void egm__objects_stats(const egm_object_index_t *index, egm_object_index_stats_t *stats_p)
{
    egm_object_index_t *ix = (egm_object_index_t *)index; /* locks only */

    memset(stats_p, 0, sizeof(*stats_p));
    lock_all(ix);
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++) {
        const shard_t *sh = &ix->shards[s];
        stats_p->objects += sh->by_key.count;
        stats_p->growing_tables += sh->by_key.old != NULL;
        stats_p->pending += sh->pending.count;
        stats_p->soft_pinned += sh->n_soft_pinned;
        stats_p->hard_pinned += sh->n_hard_pinned;
        stats_p->leased += sh->leases.total;
    }
    space_lock(ix);
    stats_p->evictions_total = ix->evictions;
    stats_p->evicted_bytes_total = ix->evicted_bytes;
    stats_p->eviction_runs_total = ix->eviction_runs;
    stats_p->discarded_puts_total = ix->discarded;
    stats_p->no_space_total = atomic_load_explicit(&ix->no_space, memory_order_relaxed);
    usage(ix, &stats_p->used_bytes, &stats_p->capacity_bytes, NULL);
    stats_p->held_bytes = ix->held_bytes;
    stats_p->held_extents = ix->n_held;
    egm_slabs_stats_t slabs;
    egm__slabs_stats(ix->slabs, &slabs);
    stats_p->slabs = slabs.slabs;
    stats_p->slab_bytes = slabs.unclaimed_bytes;
    stats_p->slab_grants_total = ix->slab_grants;
    stats_p->slab_grants_early_total = ix->slab_grants_early;
    stats_p->slab_expired_total = ix->slab_expired;
    stats_p->commits_total = ix->commits;
    stats_p->unreachable_replicas_total =
        atomic_load_explicit(&ix->unreachable_replicas, memory_order_relaxed);
    space_unlock(ix);
    unlock_all(ix);
}

/* ---- consistency check (tests) ------------------------------------------- */

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return egm__set_error(EGM_ERR_INTERNAL, __VA_ARGS__);                                  \
    } while (0)

/* One list of a shard: its count, back links, every member's `list` field,
 * and the append order of LRU lists. */
static egm_status_t check_list(size_t s, const object_list_t *l, int list, const char *name,
                               uint64_t *walked_p)
{
    uint64_t n = 0;
    const egm_object_t *prev = NULL;
    for (egm_object_t *o = l->head; o != NULL; o = o->link.next) {
        CHECK(o->link.prev == prev, "shard %zu %s: broken back link", s, name);
        CHECK(o->shard == s, "shard %zu %s: an object of shard %u", s, name, o->shard);
        CHECK(o->list == list, "shard %zu %s: object %s is marked for another list", s, name,
              egm__object_key(o));
        CHECK((list != LIST_LRU && list != LIST_SOFT) || prev == NULL || prev->lru_seq < o->lru_seq,
              "shard %zu %s: not in append order at %s", s, name, egm__object_key(o));
        prev = o;
        n++;
    }
    CHECK(l->tail == prev, "shard %zu %s: tail is not the last object", s, name);
    CHECK(n == l->count, "shard %zu %s: %llu objects, count says %llu", s, name,
          (unsigned long long)n, (unsigned long long)l->count);
    *walked_p = n;
    return EGM_OK;
}

/* A shard's lease wheel against its objects' lease ends, counted again into
 * `recount` (LEASE_BUCKETS entries, zeroed) by check_shard. */
static egm_status_t check_leases(const egm_object_index_t *index, size_t s, const uint32_t *recount,
                                 uint64_t leased)
{
    const lease_wheel_t *w = &index->shards[s].leases;
    for (size_t b = 0; b < LEASE_BUCKETS; b++)
        CHECK(w->count[b] == recount[b], "shard %zu: lease bucket %zu counts %u, objects %u", s, b,
              w->count[b], recount[b]);
    CHECK(w->total == leased, "shard %zu: %llu leases counted, %llu objects leased", s,
          (unsigned long long)w->total, (unsigned long long)leased);
    return EGM_OK;
}

/* What check_shard learns from the objects of a shard's table. */
typedef struct {
    egm_object_index_t *index;
    size_t s;
    uint64_t in_list[4], leased, soft, hard, replicas;
    uint32_t recount[LEASE_BUCKETS];
} shard_walk_t;

/* One object of the shard (egm__key_table_each): nonzero, with the error
 * detail set, when something is wrong. */
static int check_object(void *arg, const egm_object_t *o)
{
    shard_walk_t *w = arg;
    egm_object_index_t *index = w->index;
    const shard_t *sh = &index->shards[w->s];
    size_t s = w->s;
    uint32_t live = 0;
    uint64_t hash = egm__key_hash(egm__object_key(o), o->key_len);
    unsigned want_shard = shard_index(hash);
    CHECK(o->shard == s && want_shard == s, "object %s: in shard %zu, hashes to %u",
          egm__object_key(o), s, want_shard);
    for (uint32_t i = 0; i < o->n_replicas; i++) {
        const egm_replica_t *r = &o->replicas[i];
        CHECK(egm__replica_object(r) == o, "object %s: replica %u points to another object",
              egm__object_key(o), i);
        if (r->segment == NULL)
            continue;
        live++;
        CHECK(egm__segment_table_find(index->segments, r->segment->desc.id) == r->segment,
              "object %s: replica %u is on a segment that is not mounted", egm__object_key(o), i);
        CHECK(egm__replica_offset(r) + o->size <= r->segment->desc.size,
              "object %s: replica %u beyond its segment", egm__object_key(o), i);
        for (uint32_t j = 0; j < i; j++)
            CHECK(o->replicas[j].segment != r->segment, "object %s: two replicas on one segment",
                  egm__object_key(o));
    }
    CHECK(live == o->n_live, "object %s: %u live replicas, n_live %u", egm__object_key(o), live,
          o->n_live);
    CHECK(live > 0, "object %s: no replica left, yet indexed", egm__object_key(o));
    int want = o->state == EGM_OBJECT_PENDING ? LIST_PENDING
               : o->hard_pin                  ? LIST_NONE
               : o->soft_pin                  ? LIST_SOFT
                                              : LIST_LRU;
    CHECK(o->list == want, "object %s: in list %d, its state says %d", egm__object_key(o), o->list,
          want);
    w->in_list[o->list]++;
    if (lease_counted(index, sh, o->lease_expiry_ms)) {
        uint64_t b = lease_bucket(index, o->lease_expiry_ms);
        CHECK(b - sh->leases.trimmed <= LEASE_WHEEL_SPAN + 2,
              "object %s: its lease ends past the lease wheel", egm__object_key(o));
        w->recount[b % LEASE_BUCKETS]++;
        w->leased++;
    }
    w->soft += o->soft_pin;
    w->hard += o->hard_pin;
    w->replicas += live;
    return 0;
}

static egm_status_t check_shard(egm_object_index_t *index, size_t s, uint64_t *replicas_p)
{
    const shard_t *sh = &index->shards[s];
    uint64_t walked;
    egm_status_t status;
    shard_walk_t w;

    memset(&w, 0, sizeof(w));
    w.index = index;
    w.s = s;
    if ((status = egm__key_table_check(&sh->by_key)) != EGM_OK)
        return egm__set_error(status, "shard %zu: %s", s, egm_last_error());
    if (egm__key_table_each(&sh->by_key, check_object, &w) != 0)
        return EGM_ERR_INTERNAL; /* check_object said why */
    *replicas_p += w.replicas;
    if ((status = check_list(s, &sh->pending, LIST_PENDING, "pending", &walked)) != EGM_OK)
        return status;
    CHECK(walked == w.in_list[LIST_PENDING], "shard %zu: pending list and map disagree", s);
    if ((status = check_list(s, &sh->lru, LIST_LRU, "lru", &walked)) != EGM_OK)
        return status;
    CHECK(walked == w.in_list[LIST_LRU], "shard %zu: lru list and map disagree", s);
    if ((status = check_list(s, &sh->soft, LIST_SOFT, "soft", &walked)) != EGM_OK)
        return status;
    CHECK(walked == w.in_list[LIST_SOFT], "shard %zu: soft list and map disagree", s);
    if ((status = check_leases(index, s, w.recount, w.leased)) != EGM_OK)
        return status;
    CHECK(w.soft == sh->n_soft_pinned && w.hard == sh->n_hard_pinned,
          "shard %zu: pin counters %llu/%llu, objects %llu/%llu", s,
          (unsigned long long)sh->n_soft_pinned, (unsigned long long)sh->n_hard_pinned,
          (unsigned long long)w.soft, (unsigned long long)w.hard);
    return EGM_OK;
}

static egm_status_t check_segment(const egm_object_index_t *index, const egm_segment_t *seg,
                                  uint64_t *replicas_p, size_t *held_p)
{
    egm_allocator_stats_t a;
    uint64_t n = 0, bytes = 0, held = 0, held_bytes = 0;
    const egm_replica_t *prev = NULL;

    for (const egm_replica_t *r = seg->replicas; r != NULL; r = r->seg_next) {
        const egm_object_t *o = egm__replica_object(r);
        CHECK(r->seg_prev == prev, "segment %s: broken back link", seg->desc.name);
        CHECK(r->segment == seg, "segment %s: lists a replica of another segment", seg->desc.name);
        CHECK(r >= o->replicas && r < o->replicas + o->n_replicas,
              "segment %s: a replica outside its object", seg->desc.name);
        bytes += egm__allocator_round(o->size);
        prev = r;
        n++;
    }
    CHECK(n == seg->replica_count, "segment %s: %llu replicas listed, replica_count %llu",
          seg->desc.name, (unsigned long long)n, (unsigned long long)seg->replica_count);
    for (size_t i = 0; i < index->n_held; i++) {
        const held_extent_t *h = &index->held[i];
        if (h->segment != seg)
            continue;
        CHECK(h->offset + h->length <= seg->desc.size, "segment %s: held space beyond its end",
              seg->desc.name);
        held_bytes += egm__allocator_round(h->length);
        held++;
    }
    egm_status_t status = egm__allocator_check(seg->allocator);
    if (status != EGM_OK)
        return status;
    uint64_t slab_bytes;
    size_t slab_pieces;
    egm__slabs_in(index->slabs, seg, &slab_bytes, &slab_pieces);
    egm__allocator_stats(seg->allocator, &a);
    /* The allocator does not record allocations: these are its tallies of
     * bytes and of allocations made, cut and freed, against what the index
     * placed (a range freed twice is refused; one freed in part, or a piece
     * never freed, shows here). Space whose free found no memory stays used. */
    CHECK(a.used == bytes + held_bytes + slab_bytes + a.lost &&
              a.allocations == n + held + slab_pieces,
          "segment %s: allocator has %llu bytes in %zu allocations, replicas %llu in %llu, "
          "held "
          "%llu in %llu, slabs %llu in %zu",
          seg->desc.name, (unsigned long long)a.used, a.allocations, (unsigned long long)bytes,
          (unsigned long long)n, (unsigned long long)held_bytes, (unsigned long long)held,
          (unsigned long long)slab_bytes, slab_pieces);
    *replicas_p += n;
    *held_p += held;
    return EGM_OK;
}

/* The held list against its totals. Every held extent is on a mounted
 * segment: check_segment found them all (one on a segment that is gone is
 * never dereferenced). */
static egm_status_t check_held(const egm_object_index_t *index, size_t on_segments)
{
    uint64_t bytes = 0, earliest = UINT64_MAX;
    CHECK(index->n_held <= index->held_cap, "held list: %zu extents, room for %zu", index->n_held,
          index->held_cap);
    CHECK(on_segments == index->n_held, "held list: %zu extents, %zu of them on mounted segments",
          index->n_held, on_segments);
    for (size_t i = 0; i < index->n_held; i++) {
        const held_extent_t *h = &index->held[i];
        bytes += egm__allocator_round(h->length);
        if (h->release_ms < earliest)
            earliest = h->release_ms;
    }
    CHECK(bytes == index->held_bytes, "held list: %llu bytes, held_bytes says %llu",
          (unsigned long long)bytes, (unsigned long long)index->held_bytes);
    CHECK(index->held_release_ms == earliest,
          "held list: earliest release at %llu ms, held_release_ms says %llu",
          (unsigned long long)earliest, (unsigned long long)index->held_release_ms);
    return EGM_OK;
}

egm_status_t egm__objects_check(egm_object_index_t *index)
{
    uint64_t by_objects = 0, by_segments = 0;
    size_t held_on_segments = 0;
    egm_status_t status = EGM_OK;

    lock_all(index);
    space_lock(index);
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS && status == EGM_OK; s++)
        status = check_shard(index, s, &by_objects);
    size_t n = egm__segment_table_count(index->segments);
    for (size_t i = 0; i < n && status == EGM_OK; i++)
        status = check_segment(index, egm__segment_table_at(index->segments, i), &by_segments,
                               &held_on_segments);
    if (status == EGM_OK && by_objects != by_segments)
        status =
            egm__set_error(EGM_ERR_INTERNAL, "%llu live replicas in objects, %llu in segment lists",
                           (unsigned long long)by_objects, (unsigned long long)by_segments);
    if (status == EGM_OK)
        status = check_held(index, held_on_segments);
    space_unlock(index);
    unlock_all(index);
    return status;
}

/* ---- master HA: snapshot and adoption (docs/ha.md "State handover") ---------- */

void egm__objects_set_journal(egm_object_index_t *index, egm_journal_t *journal)
{
    index->journal = journal;
    /* Without it no grant is answered before the standbys hold it. */
    if (journal != NULL && index->recent_frees == NULL &&
        egm__recent_frees_create(&index->recent_frees) != EGM_OK)
        egm_warn("master: %s: every SlabGrant waits for the standbys", egm_last_error());
    egm__slabs_set_journal(index->slabs, journal, index->recent_frees);
}

static uint64_t left_ms(uint64_t until_ms, uint64_t now_ms)
{
    return until_ms > now_ms ? until_ms - now_ms : 0;
}

typedef struct {
    egm_jbuf_t *b;
    uint64_t now_ms;
} snapshot_t;

static void snapshot_slab(void *arg, const egm_slab_t *slab)
{
    const snapshot_t *sn = arg;
    uint64_t left = left_ms(slab->expiry_ms, sn->now_ms);
    for (uint32_t x = 0; x < slab->n_extents; x++) {
        const egm_slab_extent_t *e = &slab->extents[x];
        for (size_t k = 0; e->segment != NULL && k < slab->n_pieces; k++)
            egm__jenc_reserve(sn->b, e->segment->desc.id, e->base + slab->pieces[k].off,
                              slab->pieces[k].len, left);
    }
    egm__jenc_slab(sn->b, slab, left);
}

void egm__objects_snapshot(egm_object_index_t *index, egm_jbuf_t *b, uint64_t now_ms)
{
    lock_all(index);
    space_lock(index);
    for (size_t s = 0; s < EGM_OBJECTS_SHARDS; s++) {
        egm_key_table_t *t = &index->shards[s].by_key;
        egm__key_table_settle(t);
        for (size_t i = 0; i <= t->mask; i++) {
            const egm_object_t *obj = egm__key_table_at(t, i);
            if (obj == NULL)
                continue;
            if (obj->state == EGM_OBJECT_COMPLETE) {
                egm__jenc_object(b, obj);
                continue;
            }
            uint64_t left = left_ms(obj->put_start_ms + index->params.pending_timeout_ms, now_ms);
            for (uint32_t r = 0; r < obj->n_replicas; r++)
                if (obj->replicas[r].segment != NULL)
                    egm__jenc_reserve(b, obj->replicas[r].segment->desc.id,
                                      egm__replica_offset(&obj->replicas[r]), obj->size, left);
        }
    }
    for (size_t i = 0; i < index->n_held; i++) {
        const held_extent_t *h = &index->held[i];
        egm__jenc_reserve(b, h->segment->desc.id, h->offset, h->length,
                          left_ms(h->release_ms, now_ms));
    }
    snapshot_t sn = {.b = b, .now_ms = now_ms};
    egm__slabs_each(index->slabs, snapshot_slab, &sn);
    space_unlock(index);
    unlock_all(index);
}

/* A range to take in a segment: an object's replica (obj < n) or a piece of
 * a held range. */
typedef struct {
    egm_segment_t *segment;
    uint64_t offset;
    uint64_t length; /* rounded */
    uint64_t until_ms;
    size_t obj; /* SIZE_MAX: a range */
    uint32_t replica;
} claim_t;

static int claim_compare(const void *a, const void *b)
{
    const claim_t *x = a, *y = b;
    if (x->segment != y->segment)
        return (uintptr_t)x->segment < (uintptr_t)y->segment ? -1 : 1;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    int x_obj = x->obj != SIZE_MAX, y_obj = y->obj != SIZE_MAX;
    return x_obj == y_obj ? 0 : x_obj ? -1 : 1;
}

typedef struct {
    claim_t *v;
    size_t n;
    size_t cap;
} claims_t;

static int claims_push(claims_t *c, claim_t x)
{
    if (c->n == c->cap) {
        size_t cap = c->cap < 64 ? 64 : c->cap * 2;
        claim_t *v = egm_realloc(c->v, cap * sizeof(*v), "master.adopt");
        if (v == NULL)
            return 0;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = x;
    return 1;
}

/* One segment's claims, sorted (objects' first at equal offsets): keeps the
 * object replicas that overlap none before them and the pieces of the
 * ranges that no kept replica covers (the union of the ranges, each piece
 * held until the latest until_ms of the ranges merged into it), in
 * ascending order into out; a replica not kept is counted in *skipped_p. */
static int plan_segment(const claim_t *c, size_t n, uint64_t capacity, claims_t *out,
                        size_t *skipped_p)
{
    claims_t objs = {0};
    uint64_t cursor = 0;
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        if (c[i].obj == SIZE_MAX)
            continue;
        /* Misaligned: the allocator refuses it, and it must not cut the ranges. */
        if (c[i].offset < cursor || c[i].offset % EGM_ALLOCATOR_ALIGN != 0 ||
            c[i].length > capacity || c[i].offset > capacity - c[i].length) {
            (*skipped_p)++;
            continue;
        }
        ok = claims_push(&objs, c[i]);
        cursor = c[i].offset + c[i].length;
    }
    /* The ranges' union minus the kept replicas, merged with them in order. */
    size_t j = 0;
    for (size_t i = 0; i < n && ok;) {
        if (c[i].obj != SIZE_MAX) {
            i++;
            continue;
        }
        uint64_t a = c[i].offset, b = a + c[i].length, until = c[i].until_ms;
        for (i++; i < n; i++) {
            if (c[i].obj != SIZE_MAX)
                continue;
            if (c[i].offset > b)
                break;
            if (c[i].offset + c[i].length > b)
                b = c[i].offset + c[i].length;
            if (c[i].until_ms > until)
                until = c[i].until_ms;
        }
        if (b > capacity)
            b = capacity;
        while (ok && a < b) {
            while (j < objs.n && objs.v[j].offset + objs.v[j].length <= a)
                ok = claims_push(out, objs.v[j++]);
            uint64_t stop = j < objs.n && objs.v[j].offset < b ? objs.v[j].offset : b;
            if (a < stop)
                ok = ok && claims_push(out, (claim_t){.segment = c[0].segment,
                                                      .offset = a,
                                                      .length = stop - a,
                                                      .until_ms = until,
                                                      .obj = SIZE_MAX});
            a = j < objs.n && objs.v[j].offset < b ? objs.v[j].offset + objs.v[j].length : b;
        }
    }
    while (ok && j < objs.n)
        ok = claims_push(out, objs.v[j++]);
    egm_free(objs.v);
    return ok;
}

/* Makes an adopted object; with every shard and `space` locked. */
static egm_status_t adopt_object(egm_object_index_t *index, const egm_adopt_object_t *a,
                                 const uint8_t *taken, uint64_t now_ms)
{
    uint64_t hash;
    shard_t *sh = shard_of_key(index, a->key, a->key_len, &hash);
    if (find(sh, a->key, a->key_len, hash) != NULL)
        return EGM_ERR_EXISTS;
    uint32_t placed = a->placed > a->n_replicas ? a->placed : a->n_replicas;
    egm_object_t *obj;
    if (egm__key_table_reserve(&sh->by_key) != EGM_OK ||
        (obj = object_new(a->key, a->key_len, placed)) == NULL)
        return EGM_ERR_NO_MEMORY; /* egm__key_table_reserve or object_new said why */
    for (uint32_t r = 0; r < a->n_replicas; r++)
        if (taken[r])
            replica_add(obj, a->segment[r], a->offset[r]);
    obj->n_live = obj->n_replicas;
    for (uint32_t k = obj->n_replicas; k < placed; k++) /* lost with their segments */
        obj->replicas[k] = (egm_replica_t){.segment = NULL, .offset_index = k};
    obj->n_replicas = (uint8_t)placed;
    obj->state = EGM_OBJECT_COMPLETE;
    obj->size = a->size;
    obj->writer = a->writer;
    obj->commit_ms = now_ms;
    obj->hard_pin = a->hard_pin != 0;
    obj->soft_pin = a->soft_pin != 0 && !obj->hard_pin;
    obj->shard = (uint8_t)(sh - index->shards);
    egm__key_table_insert(&sh->by_key, obj, hash);
    move_to(index, obj, obj->hard_pin ? LIST_NONE : obj->soft_pin ? LIST_SOFT : LIST_LRU);
    sh->n_soft_pinned += obj->soft_pin;
    sh->n_hard_pinned += obj->hard_pin;
    grant_lease(index, obj, now_ms);
    if (obj->n_live < obj->n_replicas)
        egm__repair_queue_add(index->repair, a->key, a->key_len);
    return EGM_OK;
}

/* Whether replica r of a lies on the segment of one before it. */
static int on_earlier_replica(const egm_adopt_object_t *a, uint32_t r)
{
    for (uint32_t q = 0; q < r; q++)
        if (a->segment[q] == a->segment[r])
            return 1;
    return 0;
}

egm_status_t egm__objects_adopt(egm_object_index_t *index, const egm_adopt_object_t *objects,
                                size_t n, const egm_adopt_range_t *ranges, size_t m,
                                uint64_t now_ms, size_t *adopted_p, size_t *skipped_p)
{
    claims_t all = {0}, plan = {0};
    uint8_t *taken = egm_calloc(n ? n : 1, EGM_MASTER_REPLICA_MAX, "master.adopt");
    egm_status_t status = EGM_OK;
    int ok = taken != NULL;

    *adopted_p = *skipped_p = 0;
    for (size_t i = 0; i < n && ok; i++)
        for (uint32_t r = 0; r < objects[i].n_replicas && r < EGM_MASTER_REPLICA_MAX && ok; r++)
            if (objects[i].segment[r] == NULL)
                continue;
            else if (on_earlier_replica(&objects[i], r)) /* one replica per segment */
                (*skipped_p)++;
            else
                ok = claims_push(&all, (claim_t){.segment = objects[i].segment[r],
                                                 .offset = objects[i].offset[r],
                                                 .length = egm__allocator_round(objects[i].size),
                                                 .obj = i,
                                                 .replica = r});
    for (size_t i = 0; i < m && ok; i++)
        if (ranges[i].segment != NULL && ranges[i].length > 0)
            ok = claims_push(&all, (claim_t){.segment = ranges[i].segment,
                                             .offset = ranges[i].offset,
                                             .length = egm__allocator_round(ranges[i].length),
                                             .until_ms = ranges[i].until_ms,
                                             .obj = SIZE_MAX});
    if (ok && all.n > 0)
        qsort(all.v, all.n, sizeof(*all.v), claim_compare);
    for (size_t g = 0; g < all.n && ok;) {
        size_t e = g;
        while (e < all.n && all.v[e].segment == all.v[g].segment)
            e++;
        egm_allocator_stats_t st;
        egm__allocator_stats(all.v[g].segment->allocator, &st);
        ok = plan_segment(&all.v[g], e - g, st.capacity, &plan, skipped_p);
        g = e;
    }
    lock_all(index);
    space_lock(index);
    size_t holds = 0;
    for (size_t i = 0; i < plan.n; i++)
        holds += plan.v[i].obj == SIZE_MAX;
    if (ok && holds > 0)
        ok = held_reserve(index, holds) == EGM_OK;
    for (size_t i = 0; i < plan.n && ok; i++) {
        claim_t *c = &plan.v[i];
        if (egm__allocator_take(c->segment->allocator, c->offset, c->length) != EGM_OK) {
            if (c->obj != SIZE_MAX)
                (*skipped_p)++;
            egm_warn("adopting [%llu, +%llu) of segment %s: %s", (unsigned long long)c->offset,
                     (unsigned long long)c->length, c->segment->desc.name, egm_last_error());
            continue;
        }
        if (c->obj != SIZE_MAX) {
            taken[c->obj * EGM_MASTER_REPLICA_MAX + c->replica] = 1;
            continue;
        }
        index->held[index->n_held++] = (held_extent_t){.segment = c->segment,
                                                       .offset = c->offset,
                                                       .length = c->length,
                                                       .release_ms = c->until_ms};
        index->held_bytes += egm__allocator_round(c->length); /* as taken */
        if (c->until_ms < index->held_release_ms)
            index->held_release_ms = c->until_ms;
    }
    for (size_t i = 0; i < n && ok; i++) {
        const uint8_t *t = &taken[i * EGM_MASTER_REPLICA_MAX];
        int any = 0;
        for (uint32_t r = 0; r < objects[i].n_replicas; r++)
            any |= t[r];
        if (!any) {
            if (objects[i].n_replicas > 0)
                (*skipped_p)++;
            continue;
        }
        status = adopt_object(index, &objects[i], t, now_ms);
        if (status == EGM_OK)
            (*adopted_p)++;
        else {
            for (uint32_t r = 0; r < objects[i].n_replicas; r++)
                if (t[r])
                    egm__allocator_free(objects[i].segment[r]->allocator, objects[i].offset[r],
                                        objects[i].size);
            (*skipped_p)++;
            ok = status == EGM_ERR_EXISTS; /* another record of the key was taken */
            status = ok ? EGM_OK : status;
        }
    }
    bump(&index->evictable_gen);
    space_unlock(index);
    unlock_all(index);
    egm_free(all.v);
    egm_free(plan.v);
    egm_free(taken);
    if (!ok && status == EGM_OK)
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory adopting %zu objects", n);
    return status;
}
