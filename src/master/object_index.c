/* Object index: a hash map by key; each object one allocation holding its
 * replicas and its key. Replicas are also linked into their segment so that an
 * unmount finds them without scanning every object. COMPLETE objects are kept
 * in least-recently-used lists (unpinned, soft-pinned) that eviction walks from
 * the head, and leased objects in a list by lease grant that counts them. */
#include "master/object_index.h"

#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"

/* The list an object's `link` is in. */
enum { LIST_NONE = 0, LIST_PENDING, LIST_LRU, LIST_SOFT };

typedef struct {
    egm_object_t *head; /* oldest */
    egm_object_t *tail;
    uint64_t count;
} object_list_t;

typedef struct {
    double free_ratio;
    uint64_t tie; /* random: equal ratios in random order */
    size_t index;
} ranked_segment_t;

struct egm_object_index {
    egm_segment_table_t *segments;
    egm_hashmap_t *by_key;
    egm_objects_params_t params;
    object_list_t pending; /* by PutStart time */
    object_list_t lru;     /* COMPLETE, no pin, least recently used first */
    object_list_t soft;    /* COMPLETE, soft-pinned, least recently used first */
    object_list_t leases;  /* by lease grant; expired ones trimmed from the head */
    uint64_t n_soft_pinned;
    uint64_t n_hard_pinned;
    uint64_t evictions;
    uint64_t evicted_bytes;
    uint64_t eviction_runs;
    uint64_t discarded;
    /* A PutStart-triggered eviction that found nothing is not repeated for the
     * next keys of the same instant unless an object became evictable since
     * (a batch against a pool full of leased objects stays linear). */
    uint64_t evictable_gen;
    uint64_t futile_gen;
    uint64_t futile_now_ms;
    int futile_valid;
    uint64_t rng;
    size_t *order; /* scratch: segment indexes for a placement */
    size_t order_cap;
    ranked_segment_t *ranked; /* scratch: free_ratio_first */
    size_t ranked_cap;
};

/* ---- lists ---------------------------------------------------------------- */

static egm_object_link_t *link_of(egm_object_t *obj, int lease)
{
    return lease ? &obj->lease_link : &obj->link;
}

static void list_append(object_list_t *list, egm_object_t *obj, int lease)
{
    egm_object_link_t *l = link_of(obj, lease);
    l->next = NULL;
    l->prev = list->tail;
    if (list->tail != NULL)
        link_of(list->tail, lease)->next = obj;
    else
        list->head = obj;
    list->tail = obj;
    list->count++;
}

static void list_unlink(object_list_t *list, egm_object_t *obj, int lease)
{
    egm_object_link_t *l = link_of(obj, lease);
    if (l->prev != NULL)
        link_of(l->prev, lease)->next = l->next;
    else
        list->head = l->next;
    if (l->next != NULL)
        link_of(l->next, lease)->prev = l->prev;
    else
        list->tail = l->prev;
    l->prev = l->next = NULL;
    list->count--;
}

static object_list_t *list_named(egm_object_index_t *index, int list)
{
    switch (list) {
    case LIST_PENDING:
        return &index->pending;
    case LIST_LRU:
        return &index->lru;
    case LIST_SOFT:
        return &index->soft;
    default:
        return NULL;
    }
}

static void move_to(egm_object_index_t *index, egm_object_t *obj, int list)
{
    object_list_t *from = list_named(index, obj->list), *to = list_named(index, list);
    if (from != NULL)
        list_unlink(from, obj, 0);
    obj->list = (uint8_t)list;
    if (to != NULL)
        list_append(to, obj, 0);
}

static int lease_live(const egm_object_t *obj, uint64_t now_ms)
{
    return now_ms < obj->lease_expiry_ms;
}

/* Leases are granted with one TTL, so expiry follows grant order: the expired
 * ones are at the head. */
static void trim_leases(egm_object_index_t *index, uint64_t now_ms)
{
    while (index->leases.head != NULL && !lease_live(index->leases.head, now_ms)) {
        egm_object_t *obj = index->leases.head;
        list_unlink(&index->leases, obj, 1);
        obj->in_lease_list = 0;
    }
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
        .placement = EGM_PLACEMENT_RANDOM,
    };
}

egm_status_t egm__objects_params_check(const egm_objects_params_t *p)
{
    if (p->lease_ttl_ms == 0)
        return egm__set_error(EGM_ERR_CONFIG, "default_kv_lease_ttl: must be > 0 ms");
    if (p->soft_pin_ttl_ms == 0 || p->soft_pin_ttl_ms > EGM_MASTER_SOFT_PIN_TTL_MAX_MS)
        return egm__set_error(
            EGM_ERR_CONFIG, "default_kv_soft_pin_ttl: %llu ms is out of range 1..%u (24 h)",
            (unsigned long long)p->soft_pin_ttl_ms, EGM_MASTER_SOFT_PIN_TTL_MAX_MS);
    if (p->pending_timeout_ms == 0)
        return egm__set_error(EGM_ERR_CONFIG, "put_start_discard_timeout_sec: must be > 0");
    if (!(p->eviction_high_watermark >= 0.0 && p->eviction_high_watermark <= 1.0))
        return egm__set_error(EGM_ERR_CONFIG,
                              "eviction_high_watermark_ratio: %g is out of range 0..1",
                              p->eviction_high_watermark);
    if (!(p->eviction_ratio >= 0.0 && p->eviction_ratio <= 1.0))
        return egm__set_error(EGM_ERR_CONFIG, "eviction_ratio: %g is out of range 0..1",
                              p->eviction_ratio);
    if (p->placement != EGM_PLACEMENT_RANDOM && p->placement != EGM_PLACEMENT_FREE_RATIO_FIRST &&
        p->placement != EGM_PLACEMENT_LOCAL_FIRST)
        return egm__set_error(EGM_ERR_CONFIG,
                              "placement_strategy: %d is not one of "
                              "random|free_ratio_first|local_first",
                              (int)p->placement);
    return EGM_OK;
}

egm_status_t egm__objects_create_with(egm_segment_table_t *segments,
                                      const egm_objects_params_t *params,
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
    status = egm__hashmap_create(&index->by_key);
    if (status != EGM_OK) {
        egm_free(index);
        return status;
    }
    index->segments = segments;
    index->params = *params;
    index->rng = egm__id_random().lo | 1;
    *index_p = index;
    return EGM_OK;
}

egm_status_t egm__objects_create(egm_segment_table_t *segments, uint64_t lease_ttl_ms,
                                 egm_object_index_t **index_p)
{
    egm_objects_params_t params;
    egm__objects_params_default(&params);
    params.lease_ttl_ms = lease_ttl_ms;
    return egm__objects_create_with(segments, &params, index_p);
}

uint64_t egm__objects_lease_ttl_ms(const egm_object_index_t *index)
{
    return index->params.lease_ttl_ms;
}

const egm_objects_params_t *egm__objects_params(const egm_object_index_t *index)
{
    return &index->params;
}

static uint64_t next_random(egm_object_index_t *index)
{
    uint64_t x = index->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    index->rng = x;
    return x;
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
    return egm__hashmap_get(index->by_key, key, key_len);
}

static egm_object_t *find(const egm_object_index_t *index, const char *key, size_t key_len)
{
    return egm__hashmap_get(index->by_key, key, key_len);
}

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

/* Returns every live replica's space to its segment; the bytes freed. */
static uint64_t release_replicas(egm_object_t *obj)
{
    uint64_t freed = 0;
    for (uint32_t i = 0; i < obj->n_replicas; i++) {
        egm_replica_t *r = &obj->replicas[i];
        if (r->segment == NULL)
            continue;
        replica_unlink(r);
        if (egm__allocator_free(r->segment->allocator, r->offset, r->length) != EGM_OK)
            egm_error("segment %s: freeing [%llu, +%llu) failed: %s", r->segment->name,
                      (unsigned long long)r->offset, (unsigned long long)r->length,
                      egm_last_error());
        else
            freed += egm__allocator_round(r->length);
        r->segment = NULL;
    }
    obj->n_live = 0;
    return freed;
}

static uint64_t object_delete(egm_object_index_t *index, egm_object_t *obj)
{
    uint64_t freed = release_replicas(obj);
    move_to(index, obj, LIST_NONE);
    if (obj->in_lease_list)
        list_unlink(&index->leases, obj, 1);
    index->n_soft_pinned -= obj->soft_pin;
    index->n_hard_pinned -= obj->hard_pin;
    egm__hashmap_remove(index->by_key, obj->key, obj->key_len);
    egm_free(obj);
    return freed;
}

void egm__objects_destroy(egm_object_index_t *index)
{
    size_t iter = 0;
    const void *key;
    size_t key_len;
    void *value;

    if (index == NULL)
        return;
    while (egm__hashmap_next(index->by_key, &iter, &key, &key_len, &value))
        object_delete(index, value);
    egm__hashmap_destroy(index->by_key);
    egm_free(index->order);
    egm_free(index->ranked);
    egm_free(index);
}

static int pending_is_stale(const egm_object_index_t *index, const egm_object_t *obj,
                            uint64_t now_ms)
{
    return obj->state == EGM_OBJECT_PENDING && now_ms >= obj->put_start_ms &&
           now_ms - obj->put_start_ms >= index->params.pending_timeout_ms;
}

/* ---- placement ------------------------------------------------------------ */

static egm_status_t reserve_scratch(egm_object_index_t *index, size_t n, int ranked)
{
    if (n > index->order_cap) {
        size_t cap = n < 64 ? 64 : n * 2;
        size_t *order = egm_realloc(index->order, cap * sizeof(*order), "master.placement");
        if (order == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory placing replicas");
        index->order = order;
        index->order_cap = cap;
    }
    if (ranked && n > index->ranked_cap) {
        size_t cap = n < 64 ? 64 : n * 2;
        ranked_segment_t *r = egm_realloc(index->ranked, cap * sizeof(*r), "master.placement");
        if (r == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory placing replicas");
        index->ranked = r;
        index->ranked_cap = cap;
    }
    return EGM_OK;
}

/* Allocates a replica of obj in seg unless obj already has one there; 1 if placed. */
static int try_segment(egm_object_t *obj, egm_segment_t *seg)
{
    uint64_t offset;
    for (uint32_t i = 0; i < obj->n_replicas; i++)
        if (obj->replicas[i].segment == seg)
            return 0;
    if (egm__allocator_alloc(seg->allocator, obj->size, &offset) != EGM_OK)
        return 0; /* full (or out of memory): the caller tries the next segment */
    egm_replica_t *r = &obj->replicas[obj->n_replicas++];
    *r = (egm_replica_t){.segment = seg, .object = obj, .offset = offset, .length = obj->size};
    replica_link(r);
    return 1;
}

/* "pool" names the segment "pool" and the chunks "pool/0", "pool/1", ... */
static int name_matches(const char *segment_name, const char *wanted)
{
    size_t n = strlen(wanted);
    return n > 0 && strncmp(segment_name, wanted, n) == 0 &&
           (segment_name[n] == '\0' || segment_name[n] == '/');
}

static int cmp_ranked(const void *a, const void *b)
{
    const ranked_segment_t *x = a, *y = b;
    if (x->free_ratio != y->free_ratio)
        return x->free_ratio > y->free_ratio ? -1 : 1;
    return x->tie < y->tie ? -1 : x->tie > y->tie ? 1 : 0;
}

static void shuffle(egm_object_index_t *index, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        size_t j = i + (size_t)(next_random(index) % (n - i));
        size_t t = index->order[j];
        index->order[j] = index->order[i];
        index->order[i] = t;
    }
}

/* Preferred segments first (in the request's order), then the strategy's
 * order, one replica per segment, until `want` are placed. */
static egm_status_t place_replicas(egm_object_index_t *index, egm_object_t *obj, uint32_t want,
                                   const egm_put_config_t *config)
{
    egm_segment_table_t *table = index->segments;
    size_t n = egm__segment_table_count(table);
    egm_placement_t strategy = index->params.placement;
    const char *host = config->writer_host_id;
    egm_status_t status;

    if (strategy == EGM_PLACEMENT_LOCAL_FIRST && (host == NULL || host[0] == '\0'))
        strategy = EGM_PLACEMENT_RANDOM; /* writer's host unknown (no ping yet) */
    status = reserve_scratch(index, n, strategy == EGM_PLACEMENT_FREE_RATIO_FIRST);
    if (status != EGM_OK)
        return status;
    for (size_t p = 0; p < config->n_preferred && obj->n_replicas < want; p++) {
        const char *wanted = config->preferred_segments[p];
        for (size_t i = 0; wanted != NULL && i < n && obj->n_replicas < want; i++) {
            egm_segment_t *seg = egm__segment_table_at(table, i);
            if (name_matches(seg->name, wanted))
                try_segment(obj, seg);
        }
    }
    switch (strategy) {
    case EGM_PLACEMENT_RANDOM:
        /* A partial Fisher-Yates shuffle, drawn as far as needed. */
        for (size_t i = 0; i < n; i++)
            index->order[i] = i;
        for (size_t i = 0; i < n && obj->n_replicas < want; i++) {
            size_t j = i + (size_t)(next_random(index) % (n - i));
            size_t pick = index->order[j];
            index->order[j] = index->order[i];
            index->order[i] = pick;
            try_segment(obj, egm__segment_table_at(table, pick));
        }
        break;
    case EGM_PLACEMENT_LOCAL_FIRST:
        for (size_t i = 0; i < n; i++)
            index->order[i] = i;
        shuffle(index, n);
        for (int local = 1; local >= 0; local--) {
            for (size_t i = 0; i < n && obj->n_replicas < want; i++) {
                egm_segment_t *seg = egm__segment_table_at(table, index->order[i]);
                if ((strcmp(seg->host_id, host) == 0) == local)
                    try_segment(obj, seg);
            }
        }
        break;
    case EGM_PLACEMENT_FREE_RATIO_FIRST:
        if (obj->n_replicas >= want)
            break;
        for (size_t i = 0; i < n; i++) {
            egm_allocator_stats_t s;
            egm__allocator_stats(egm__segment_table_at(table, i)->allocator, &s);
            index->ranked[i] = (ranked_segment_t){
                .free_ratio = s.capacity > 0 ? (double)s.free / (double)s.capacity : 0.0,
                .tie = next_random(index),
                .index = i,
            };
        }
        qsort(index->ranked, n, sizeof(*index->ranked), cmp_ranked);
        for (size_t i = 0; i < n && obj->n_replicas < want; i++)
            try_segment(obj, egm__segment_table_at(table, index->ranked[i].index));
        break;
    }
    obj->n_live = obj->n_replicas;
    if (obj->n_replicas == 0)
        return egm__set_error(EGM_ERR_NO_SPACE, "no segment has %llu bytes free (%zu segments)",
                              (unsigned long long)obj->size, n);
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

/* A PutStart found no room: evict about eviction_ratio of capacity (at least
 * the object's replicas) unless the object could never fit, or an eviction at
 * this same instant already found nothing and nothing became evictable since. */
static void evict_for(egm_object_index_t *index, uint64_t size, uint32_t replicas, uint64_t now_ms)
{
    uint64_t used, capacity, largest, rounded = egm__allocator_round(size);

    usage(index, &used, &capacity, &largest);
    if (rounded == 0 || rounded > largest)
        return;
    if (index->futile_valid && index->futile_now_ms == now_ms &&
        index->futile_gen == index->evictable_gen)
        return;
    double share = index->params.eviction_ratio * (double)capacity;
    uint64_t target = share >= (double)UINT64_MAX ? UINT64_MAX : (uint64_t)share;
    uint64_t need = rounded > UINT64_MAX / replicas ? UINT64_MAX : rounded * replicas;
    if (target < need)
        target = need;
    if (egm__objects_evict(index, target, now_ms) == 0) {
        index->futile_valid = 1;
        index->futile_now_ms = now_ms;
        index->futile_gen = index->evictable_gen;
    }
}

egm_status_t egm__objects_put_start_with(egm_object_index_t *index, egm_id_t client,
                                         const char *key, size_t key_len, uint64_t size,
                                         const egm_put_config_t *config, uint64_t now_ms,
                                         const egm_object_t **object_p)
{
    egm_object_t *obj;
    egm_status_t status;
    uint32_t replica_num = config->replica_num;

    if (object_p != NULL)
        *object_p = NULL;
    status = egm__objects_check_key(key, key_len);
    if (status != EGM_OK)
        return status;
    if (size == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "size: must be > 0");
    if (replica_num == 0 || replica_num > EGM_MASTER_REPLICA_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "replica_num: %u, must be 1..%d", replica_num,
                              EGM_MASTER_REPLICA_MAX);
    if (config->n_preferred > EGM_MASTER_PREFERRED_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "preferred_segments: %zu names, at most %d",
                              config->n_preferred, EGM_MASTER_PREFERRED_MAX);
    obj = find(index, key, key_len);
    if (obj != NULL) {
        if (!pending_is_stale(index, obj, now_ms))
            return egm__set_error(EGM_ERR_EXISTS, "object already exists");
        /* Its writer gave up long ago (Mooncake lets a new put take it over). */
        egm_info("discarding a put started %llu ms ago to let a new one take its key",
                 (unsigned long long)(now_ms - obj->put_start_ms));
        object_delete(index, obj);
        index->discarded++;
    }

    obj = egm_malloc(sizeof(*obj) + replica_num * sizeof(egm_replica_t) + key_len + 1,
                     "master.object");
    if (obj == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory indexing an object");
    memset(obj, 0, sizeof(*obj));
    obj->state = EGM_OBJECT_PENDING;
    obj->size = size;
    obj->writer = client;
    obj->put_start_ms = now_ms;
    obj->hard_pin = config->hard_pin != 0;
    obj->soft_pin = config->soft_pin != 0 && !obj->hard_pin; /* a hard pin says more */
    obj->key = (char *)&obj->replicas[replica_num];
    memcpy(obj->key, key, key_len);
    obj->key[key_len] = '\0';
    obj->key_len = key_len;
    status = place_replicas(index, obj, replica_num, config);
    if (status == EGM_ERR_NO_SPACE && egm__segment_table_count(index->segments) > 0) {
        evict_for(index, size, replica_num, now_ms);
        status = place_replicas(index, obj, replica_num, config);
    }
    if (status != EGM_OK)
        goto err_release;
    status = egm__hashmap_put(index->by_key, obj->key, obj->key_len, obj, NULL);
    if (status != EGM_OK)
        goto err_release;
    move_to(index, obj, LIST_PENDING);
    index->n_soft_pinned += obj->soft_pin;
    index->n_hard_pinned += obj->hard_pin;
    if (object_p != NULL)
        *object_p = obj;
    return EGM_OK;

err_release:
    release_replicas(obj);
    egm_free(obj);
    return status;
}

egm_status_t egm__objects_put_start(egm_object_index_t *index, egm_id_t client, const char *key,
                                    size_t key_len, uint64_t size, uint32_t replica_num,
                                    uint64_t now_ms, const egm_object_t **object_p)
{
    egm_put_config_t config = {.replica_num = replica_num};
    return egm__objects_put_start_with(index, client, key, key_len, size, &config, now_ms,
                                       object_p);
}

/* The object `client` is writing under key (PutEnd, PutRevoke). */
static egm_status_t find_written(egm_object_index_t *index, egm_id_t client, const char *key,
                                 size_t key_len, egm_object_t **obj_p)
{
    egm_status_t status = egm__objects_check_key(key, key_len);
    if (status != EGM_OK)
        return status;
    egm_object_t *obj = find(index, key, key_len);
    if (obj == NULL)
        return egm__set_error(EGM_ERR_NOT_FOUND, "no put in progress for this key");
    if (!egm__id_equal(obj->writer, client))
        return egm__set_error(EGM_ERR_INVALID_ARG, "another client is writing this key");
    *obj_p = obj;
    return EGM_OK;
}

egm_status_t egm__objects_put_end(egm_object_index_t *index, egm_id_t client, const char *key,
                                  size_t key_len, uint64_t now_ms)
{
    egm_object_t *obj = NULL;
    egm_status_t status = find_written(index, client, key, key_len, &obj);

    if (status != EGM_OK || obj->state == EGM_OBJECT_COMPLETE)
        return status;
    obj->state = EGM_OBJECT_COMPLETE;
    obj->last_access_ms = now_ms;
    move_to(index, obj, obj->hard_pin ? LIST_NONE : obj->soft_pin ? LIST_SOFT : LIST_LRU);
    index->evictable_gen++;
    return EGM_OK;
}

egm_status_t egm__objects_put_revoke(egm_object_index_t *index, egm_id_t client, const char *key,
                                     size_t key_len)
{
    egm_object_t *obj = NULL;
    egm_status_t status = find_written(index, client, key, key_len, &obj);

    if (status != EGM_OK)
        return status;
    if (obj->state != EGM_OBJECT_PENDING)
        return egm__set_error(EGM_ERR_INVALID_ARG, "object is committed; use Remove");
    object_delete(index, obj);
    return EGM_OK;
}

/* A lease granted: the lease extended, the object the most recently used
 * (which also refreshes a soft pin, as Mooncake's GrantLease does). */
static void grant_lease(egm_object_index_t *index, egm_object_t *obj, uint64_t now_ms)
{
    uint64_t expiry = now_ms + index->params.lease_ttl_ms;
    if (expiry > obj->lease_expiry_ms)
        obj->lease_expiry_ms = expiry;
    if (now_ms > obj->last_access_ms)
        obj->last_access_ms = now_ms;
    if (obj->list == LIST_LRU || obj->list == LIST_SOFT)
        move_to(index, obj, obj->list);
    if (obj->in_lease_list)
        list_unlink(&index->leases, obj, 1);
    list_append(&index->leases, obj, 1);
    obj->in_lease_list = 1;
    trim_leases(index, now_ms);
}

egm_status_t egm__objects_get_replicas(egm_object_index_t *index, const char *key, size_t key_len,
                                       uint64_t now_ms, const egm_object_t **object_p)
{
    egm_object_t *obj;
    egm_status_t status = egm__objects_check_key(key, key_len);

    *object_p = NULL;
    if (status != EGM_OK)
        return status;
    obj = find(index, key, key_len);
    if (obj == NULL)
        return egm__set_error(EGM_ERR_NOT_FOUND, "object not found");
    if (obj->state != EGM_OBJECT_COMPLETE)
        return egm__set_error(EGM_ERR_NOT_READY, "object is still being written");
    grant_lease(index, obj, now_ms);
    *object_p = obj;
    return EGM_OK;
}

egm_status_t egm__objects_exist(egm_object_index_t *index, const char *key, size_t key_len,
                                uint64_t now_ms, const egm_object_t **object_p)
{
    egm_object_t *obj;
    egm_status_t status = egm__objects_check_key(key, key_len);

    if (object_p != NULL)
        *object_p = NULL;
    if (status != EGM_OK)
        return status;
    obj = find(index, key, key_len);
    if (obj == NULL || obj->state != EGM_OBJECT_COMPLETE)
        return egm__set_error(EGM_ERR_NOT_FOUND, "object not found");
    grant_lease(index, obj, now_ms);
    if (object_p != NULL)
        *object_p = obj;
    return EGM_OK;
}

egm_status_t egm__objects_remove(egm_object_index_t *index, const char *key, size_t key_len,
                                 int force, uint64_t now_ms)
{
    egm_object_t *obj;
    egm_status_t status = egm__objects_check_key(key, key_len);

    if (status != EGM_OK)
        return status;
    obj = find(index, key, key_len);
    if (obj == NULL)
        return egm__set_error(EGM_ERR_NOT_FOUND, "object not found");
    if (!force && obj->state == EGM_OBJECT_PENDING)
        return egm__set_error(EGM_ERR_NOT_READY, "object is still being written");
    if (!force && lease_live(obj, now_ms))
        return egm__set_error(EGM_ERR_HAS_LEASE, "object is under a read lease for %llu ms",
                              (unsigned long long)(obj->lease_expiry_ms - now_ms));
    object_delete(index, obj);
    return EGM_OK;
}

static int cmp_replica_desc(const void *a, const void *b)
{
    const egm_replica_t *x = *(egm_replica_t *const *)a, *y = *(egm_replica_t *const *)b;
    if (x->segment != y->segment)
        return (uintptr_t)x->segment < (uintptr_t)y->segment ? -1 : 1;
    return x->offset < y->offset ? 1 : x->offset > y->offset ? -1 : 0;
}

/* Frees the replicas of objs[0..n) highest offset first in each segment: each
 * freed range then joins the free range just above it, where hash order would
 * insert into the middle of the allocator's sorted range array every time
 * (O(n^2) moves for a full segment). */
static void release_sorted(egm_object_t **objs, size_t n)
{
    size_t total = 0, k = 0;
    for (size_t i = 0; i < n; i++)
        total += objs[i]->n_replicas;
    egm_replica_t **reps = egm_malloc((total ? total : 1) * sizeof(*reps), "master.remove_all");
    if (reps == NULL)
        return; /* object_delete frees them in any order */
    for (size_t i = 0; i < n; i++)
        for (uint32_t r = 0; r < objs[i]->n_replicas; r++)
            if (objs[i]->replicas[r].segment != NULL)
                reps[k++] = &objs[i]->replicas[r];
    qsort(reps, k, sizeof(*reps), cmp_replica_desc);
    for (size_t i = 0; i < k; i++) {
        egm_replica_t *r = reps[i];
        replica_unlink(r);
        if (egm__allocator_free(r->segment->allocator, r->offset, r->length) != EGM_OK)
            egm_error("segment %s: freeing [%llu, +%llu) failed: %s", r->segment->name,
                      (unsigned long long)r->offset, (unsigned long long)r->length,
                      egm_last_error());
        r->segment = NULL;
        r->object->n_live = 0;
    }
    egm_free(reps);
}

uint64_t egm__objects_remove_all(egm_object_index_t *index, int force, uint64_t now_ms)
{
    size_t iter = 0, n = 0, cap = egm__hashmap_size(index->by_key);
    const void *key;
    size_t key_len;
    void *value;
    egm_object_t **objs = egm_malloc((cap ? cap : 1) * sizeof(*objs), "master.remove_all");
    uint64_t removed = 0;

    while (egm__hashmap_next(index->by_key, &iter, &key, &key_len, &value)) {
        egm_object_t *obj = value;
        if (!force && (obj->state != EGM_OBJECT_COMPLETE || lease_live(obj, now_ms)))
            continue;
        if (objs != NULL && n < cap) {
            objs[n++] = obj; /* deleted below, after the sorted frees */
            continue;
        }
        object_delete(index, obj);
        removed++;
    }
    if (n > 0)
        release_sorted(objs, n);
    for (size_t i = 0; i < n; i++)
        object_delete(index, objs[i]);
    egm_free(objs);
    return removed + n;
}

size_t egm__objects_sweep_pending(egm_object_index_t *index, uint64_t now_ms)
{
    size_t discarded = 0;

    while (index->pending.head != NULL && pending_is_stale(index, index->pending.head, now_ms)) {
        object_delete(index, index->pending.head);
        discarded++;
    }
    if (discarded > 0) {
        index->discarded += discarded;
        egm_info("discarded %zu puts unfinished after %llu ms", discarded,
                 (unsigned long long)index->params.pending_timeout_ms);
    }
    return discarded;
}

/* ---- eviction ------------------------------------------------------------- */

static int soft_pin_holds(const egm_object_index_t *index, const egm_object_t *obj, uint64_t now_ms)
{
    return obj->soft_pin && (now_ms < obj->last_access_ms ||
                             now_ms - obj->last_access_ms < index->params.soft_pin_ttl_ms);
}

static uint64_t evict_one(egm_object_index_t *index, egm_object_t *obj)
{
    uint64_t freed = object_delete(index, obj);
    index->evictions++;
    index->evicted_bytes += freed;
    return freed;
}

uint64_t egm__objects_evict(egm_object_index_t *index, uint64_t bytes, uint64_t now_ms)
{
    uint64_t freed = 0, evicted = 0, soft_evicted = 0;

    if (bytes == 0)
        return 0;
    index->eviction_runs++;
    /* Unpinned objects and lapsed soft pins, merged by recency. Soft pins
     * share one TTL and the soft list is in recency order, so the lapsed ones
     * are its head: the merge stops taking from it at the first pin that
     * holds. Leased objects are stepped over (they were used within one lease
     * TTL, so there are few of them ahead of anything evictable). */
    egm_object_t *a = index->lru.head, *b = index->soft.head;
    while (freed < bytes) {
        egm_object_t *pick;
        if (b != NULL && soft_pin_holds(index, b, now_ms))
            b = NULL;
        if (a != NULL && (b == NULL || a->last_access_ms <= b->last_access_ms)) {
            pick = a;
            a = a->link.next;
        } else if (b != NULL) {
            pick = b;
            b = b->link.next;
        } else {
            break;
        }
        if (lease_live(pick, now_ms))
            continue;
        freed += evict_one(index, pick);
        evicted++;
    }
    /* Then soft-pinned objects, only because nothing else was left. */
    for (b = index->soft.head; b != NULL && freed < bytes;) {
        egm_object_t *next = b->link.next;
        if (!lease_live(b, now_ms)) {
            freed += evict_one(index, b);
            evicted++;
            soft_evicted++;
        }
        b = next;
    }
    if (evicted > 0)
        egm_log_ratelimited(EGM_LOG_INFO, 1,
                            "evicted %llu objects (%llu soft-pinned), %llu bytes of %llu asked",
                            (unsigned long long)evicted, (unsigned long long)soft_evicted,
                            (unsigned long long)freed, (unsigned long long)bytes);
    else
        egm_log_ratelimited(EGM_LOG_DEBUG, 1,
                            "eviction of %llu bytes found nothing evictable (every object is "
                            "leased, hard-pinned or being written)",
                            (unsigned long long)bytes);
    return freed;
}

uint64_t egm__objects_evict_if_needed(egm_object_index_t *index, uint64_t now_ms)
{
    uint64_t used, capacity;

    trim_leases(index, now_ms);
    usage(index, &used, &capacity, NULL);
    if (capacity == 0 || (double)used <= index->params.eviction_high_watermark * (double)capacity)
        return 0;
    double low = index->params.eviction_high_watermark - index->params.eviction_ratio;
    if (low < 0.0)
        low = 0.0;
    uint64_t keep = (uint64_t)(low * (double)capacity);
    return egm__objects_evict(index, used > keep ? used - keep : 0, now_ms);
}

size_t egm__objects_drop_segment(egm_object_index_t *index, egm_segment_t *segment)
{
    size_t deleted = 0;
    egm_replica_t *r = segment->replicas;

    /* The segment's space goes away with it: nothing to free in its allocator.
     * Replicas of one object are on distinct segments, so deleting an object
     * here never touches this list again. */
    while (r != NULL) {
        egm_replica_t *next = r->seg_next;
        egm_object_t *obj = r->object;
        replica_unlink(r);
        r->segment = NULL;
        obj->n_live--;
        if (obj->n_live == 0) {
            object_delete(index, obj);
            deleted++;
        }
        r = next;
    }
    return deleted;
}

void egm__objects_stats(const egm_object_index_t *index, egm_object_index_stats_t *stats_p)
{
    *stats_p = (egm_object_index_stats_t){
        .objects = egm__hashmap_size(index->by_key),
        .pending = index->pending.count,
        .soft_pinned = index->n_soft_pinned,
        .hard_pinned = index->n_hard_pinned,
        .leased = index->leases.count,
        .evictions_total = index->evictions,
        .evicted_bytes_total = index->evicted_bytes,
        .eviction_runs_total = index->eviction_runs,
        .discarded_puts_total = index->discarded,
    };
    usage(index, &stats_p->used_bytes, &stats_p->capacity_bytes, NULL);
}
