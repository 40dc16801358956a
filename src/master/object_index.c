/* Object index: a hash map by key; each object one allocation holding its
 * replicas and its key. Replicas are also linked into their segment so that an
 * unmount finds them without scanning every object. */
#include "master/object_index.h"

#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"

struct egm_object_index {
    egm_segment_table_t *segments;
    egm_hashmap_t *by_key;
    uint64_t lease_ttl_ms;
    egm_object_t *pending_head; /* oldest PutStart first */
    egm_object_t *pending_tail;
    uint64_t n_pending;
    uint64_t rng;
    size_t *order; /* scratch: segment indexes for a random placement */
    size_t order_cap;
};

egm_status_t egm__objects_create(egm_segment_table_t *segments, uint64_t lease_ttl_ms,
                                 egm_object_index_t **index_p)
{
    egm_object_index_t *index;
    egm_status_t status;

    *index_p = NULL;
    index = egm_calloc(1, sizeof(*index), "master.object_index");
    if (index == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the object index");
    status = egm__hashmap_create(&index->by_key);
    if (status != EGM_OK) {
        egm_free(index);
        return status;
    }
    index->segments = segments;
    index->lease_ttl_ms = lease_ttl_ms;
    index->rng = egm__id_random().lo | 1;
    *index_p = index;
    return EGM_OK;
}

uint64_t egm__objects_lease_ttl_ms(const egm_object_index_t *index)
{
    return index->lease_ttl_ms;
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

static void pending_unlink(egm_object_index_t *index, egm_object_t *obj)
{
    if (obj->pending_prev != NULL)
        obj->pending_prev->pending_next = obj->pending_next;
    else
        index->pending_head = obj->pending_next;
    if (obj->pending_next != NULL)
        obj->pending_next->pending_prev = obj->pending_prev;
    else
        index->pending_tail = obj->pending_prev;
    obj->pending_prev = obj->pending_next = NULL;
    index->n_pending--;
}

static void pending_append(egm_object_index_t *index, egm_object_t *obj)
{
    obj->pending_next = NULL;
    obj->pending_prev = index->pending_tail;
    if (index->pending_tail != NULL)
        index->pending_tail->pending_next = obj;
    else
        index->pending_head = obj;
    index->pending_tail = obj;
    index->n_pending++;
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

/* Returns every live replica's space to its segment. */
static void release_replicas(egm_object_t *obj)
{
    for (uint32_t i = 0; i < obj->n_replicas; i++) {
        egm_replica_t *r = &obj->replicas[i];
        if (r->segment == NULL)
            continue;
        replica_unlink(r);
        if (egm__allocator_free(r->segment->allocator, r->offset, r->length) != EGM_OK)
            egm_error("segment %s: freeing [%llu, +%llu) failed: %s", r->segment->name,
                      (unsigned long long)r->offset, (unsigned long long)r->length,
                      egm_last_error());
        r->segment = NULL;
    }
    obj->n_live = 0;
}

static void object_delete(egm_object_index_t *index, egm_object_t *obj)
{
    release_replicas(obj);
    if (obj->state == EGM_OBJECT_PENDING)
        pending_unlink(index, obj);
    egm__hashmap_remove(index->by_key, obj->key, obj->key_len);
    egm_free(obj);
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
    egm_free(index);
}

static int pending_is_stale(const egm_object_t *obj, uint64_t now_ms)
{
    return obj->state == EGM_OBJECT_PENDING && now_ms >= obj->put_start_ms &&
           now_ms - obj->put_start_ms >= EGM_MASTER_PENDING_TIMEOUT_MS;
}

/* Picks segments in random order (a partial Fisher-Yates shuffle of their
 * indexes) and allocates in each until `want` replicas are placed. */
static egm_status_t place_replicas(egm_object_index_t *index, egm_object_t *obj, uint32_t want)
{
    size_t n = egm__segment_table_count(index->segments);

    if (n > index->order_cap) {
        size_t cap = n < 64 ? 64 : n * 2;
        size_t *order = egm_realloc(index->order, cap * sizeof(*order), "master.placement");
        if (order == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory placing replicas");
        index->order = order;
        index->order_cap = cap;
    }
    for (size_t i = 0; i < n; i++)
        index->order[i] = i;
    obj->n_replicas = 0;
    for (size_t i = 0; i < n && obj->n_replicas < want; i++) {
        size_t j = i + (size_t)(next_random(index) % (n - i));
        size_t pick = index->order[j];
        index->order[j] = index->order[i];
        index->order[i] = pick;
        egm_segment_t *seg = egm__segment_table_at(index->segments, pick);
        uint64_t offset;
        if (egm__allocator_alloc(seg->allocator, obj->size, &offset) != EGM_OK)
            continue; /* full (or out of memory): try the next segment */
        egm_replica_t *r = &obj->replicas[obj->n_replicas++];
        *r = (egm_replica_t){.segment = seg, .object = obj, .offset = offset, .length = obj->size};
        replica_link(r);
    }
    obj->n_live = obj->n_replicas;
    if (obj->n_replicas == 0)
        return egm__set_error(EGM_ERR_NO_SPACE, "no segment has %llu bytes free (%zu segments)",
                              (unsigned long long)obj->size, n);
    return EGM_OK;
}

egm_status_t egm__objects_put_start(egm_object_index_t *index, egm_id_t client, const char *key,
                                    size_t key_len, uint64_t size, uint32_t replica_num,
                                    uint64_t now_ms, const egm_object_t **object_p)
{
    egm_object_t *obj;
    egm_status_t status;

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
    obj = find(index, key, key_len);
    if (obj != NULL) {
        if (!pending_is_stale(obj, now_ms))
            return egm__set_error(EGM_ERR_EXISTS, "object already exists");
        /* Its writer gave up long ago (Mooncake lets a new put take it over). */
        egm_info("discarding a put started %llu ms ago to let a new one take its key",
                 (unsigned long long)(now_ms - obj->put_start_ms));
        object_delete(index, obj);
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
    obj->key = (char *)&obj->replicas[replica_num];
    memcpy(obj->key, key, key_len);
    obj->key[key_len] = '\0';
    obj->key_len = key_len;
    status = place_replicas(index, obj, replica_num);
    if (status != EGM_OK)
        goto err_release;
    status = egm__hashmap_put(index->by_key, obj->key, obj->key_len, obj, NULL);
    if (status != EGM_OK)
        goto err_release;
    pending_append(index, obj);
    if (object_p != NULL)
        *object_p = obj;
    return EGM_OK;

err_release:
    release_replicas(obj);
    egm_free(obj);
    return status;
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
                                  size_t key_len)
{
    egm_object_t *obj = NULL;
    egm_status_t status = find_written(index, client, key, key_len, &obj);

    if (status != EGM_OK || obj->state == EGM_OBJECT_COMPLETE)
        return status;
    pending_unlink(index, obj);
    obj->state = EGM_OBJECT_COMPLETE;
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

static void extend_lease(const egm_object_index_t *index, egm_object_t *obj, uint64_t now_ms)
{
    uint64_t expiry = now_ms + index->lease_ttl_ms;
    if (expiry > obj->lease_expiry_ms)
        obj->lease_expiry_ms = expiry;
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
    extend_lease(index, obj, now_ms);
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
    extend_lease(index, obj, now_ms);
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
    if (!force && now_ms < obj->lease_expiry_ms)
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
        if (!force && (obj->state != EGM_OBJECT_COMPLETE || now_ms < obj->lease_expiry_ms))
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

    while (index->pending_head != NULL && pending_is_stale(index->pending_head, now_ms)) {
        object_delete(index, index->pending_head);
        discarded++;
    }
    if (discarded > 0)
        egm_info("discarded %zu puts unfinished after %u ms", discarded,
                 EGM_MASTER_PENDING_TIMEOUT_MS);
    return discarded;
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
    stats_p->objects = egm__hashmap_size(index->by_key);
    stats_p->pending = index->n_pending;
}
