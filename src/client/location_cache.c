/* Lease-cached locations: a map key -> location and a map segment id ->
 * descriptor, under one mutex (location_cache.h). */
#include "client/location_cache.h"

#include <pthread.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"

struct egm_location_cache {
    pthread_mutex_t lock;
    size_t capacity;
    uint64_t generation;      /* moved on by every clear */
    uint64_t swept_ms;        /* last search for expired entries of a full cache */
    egm_hashmap_t *locations; /* key -> egm_location_t* */
    egm_hashmap_t *segments;  /* egm_id_t -> egm_segment_desc_t* */
    egm_location_cache_stats_t stats;
};

egm_status_t egm__location_cache_create(size_t capacity, egm_location_cache_t **cache_p)
{
    egm_location_cache_t *c = egm_calloc(1, sizeof(*c), "client.location_cache");
    if (c == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "location cache: out of memory");
    c->capacity = capacity;
    egm_status_t st = egm__hashmap_create(&c->locations);
    if (st == EGM_OK)
        st = egm__hashmap_create(&c->segments);
    if (st != EGM_OK) {
        egm__hashmap_destroy(c->locations);
        egm_free(c);
        return st;
    }
    pthread_mutex_init(&c->lock, NULL);
    *cache_p = c;
    return EGM_OK;
}

static void free_values(egm_hashmap_t *map)
{
    size_t iter = 0;
    const void *key;
    size_t key_len;
    void *value;
    while (egm__hashmap_next(map, &iter, &key, &key_len, &value)) {
        egm__hashmap_remove(map, key, key_len);
        egm_free(value);
    }
}

void egm__location_cache_destroy(egm_location_cache_t *c)
{
    if (c == NULL)
        return;
    free_values(c->locations);
    free_values(c->segments);
    egm__hashmap_destroy(c->locations);
    egm__hashmap_destroy(c->segments);
    pthread_mutex_destroy(&c->lock);
    egm_free(c);
}

uint64_t egm__location_usable_until(const egm_location_t *loc)
{
    uint64_t span = loc->lease_ttl_ms < loc->bound_ms ? loc->lease_ttl_ms : loc->bound_ms;
    if (span <= EGM_LOCATION_MARGIN_MS)
        return 0;
    return loc->asked_ms + span - EGM_LOCATION_MARGIN_MS;
}

int egm__location_cache_get(egm_location_cache_t *c, const char *key, uint64_t now_ms,
                            egm_location_t *loc_p)
{
    if (c == NULL)
        return 0;
    size_t len = strlen(key);
    int hit = 0;
    pthread_mutex_lock(&c->lock);
    egm_location_t *loc = egm__hashmap_get(c->locations, key, len);
    if (loc != NULL && now_ms < egm__location_usable_until(loc)) {
        *loc_p = *loc;
        hit = 1;
    } else if (loc != NULL) {
        egm__hashmap_remove(c->locations, key, len);
        egm_free(loc);
    }
    if (hit)
        c->stats.hits++;
    else
        c->stats.misses++;
    pthread_mutex_unlock(&c->lock);
    return hit;
}

int egm__location_cache_segment(egm_location_cache_t *c, egm_id_t id, egm_segment_desc_t *desc_p)
{
    if (c == NULL)
        return 0;
    pthread_mutex_lock(&c->lock);
    const egm_segment_desc_t *d = egm__hashmap_get(c->segments, &id, sizeof(id));
    if (d != NULL)
        *desc_p = *d;
    pthread_mutex_unlock(&c->lock);
    return d != NULL;
}

/* Drops entries whose time is up. With the lock held. */
static void drop_expired(egm_location_cache_t *c, uint64_t now_ms)
{
    size_t iter = 0;
    const void *key;
    size_t key_len;
    void *value;
    while (egm__hashmap_next(c->locations, &iter, &key, &key_len, &value)) {
        if (now_ms >= egm__location_usable_until(value)) {
            egm__hashmap_remove(c->locations, key, key_len);
            egm_free(value);
        }
    }
}

uint64_t egm__location_cache_generation(egm_location_cache_t *c)
{
    if (c == NULL)
        return 0;
    pthread_mutex_lock(&c->lock);
    uint64_t g = c->generation;
    pthread_mutex_unlock(&c->lock);
    return g;
}

void egm__location_cache_put(egm_location_cache_t *c, const char *key, const egm_location_t *loc,
                             const egm_segment_desc_t *const *descs, uint64_t generation)
{
    if (c == NULL || loc->bound_ms == 0 || loc->n_replicas == 0 ||
        loc->n_replicas > EGM_LOCATION_MAX_REPLICAS)
        return;
    size_t len = strlen(key);
    pthread_mutex_lock(&c->lock);
    if (c->generation != generation) { /* cleared since it was asked */
        pthread_mutex_unlock(&c->lock);
        return;
    }
    if (egm__hashmap_size(c->locations) >= c->capacity &&
        loc->asked_ms >= c->swept_ms + EGM_LOCATION_SWEEP_MS) {
        drop_expired(c, loc->asked_ms);
        c->swept_ms = loc->asked_ms;
    }
    egm_location_t *copy = NULL;
    if (egm__hashmap_size(c->locations) < c->capacity)
        copy = egm_malloc(sizeof(*copy), "client.location_cache.entry");
    /* Every replica's segment must be known before the location may be used. */
    for (uint32_t r = 0; copy != NULL && r < loc->n_replicas; r++) {
        egm_id_t id = loc->replicas[r].segment;
        if (egm__hashmap_get(c->segments, &id, sizeof(id)) != NULL)
            continue;
        egm_segment_desc_t *d = egm_malloc(sizeof(*d), "client.location_cache.segment");
        if (d == NULL || egm__hashmap_put(c->segments, &id, sizeof(id), d, NULL) != EGM_OK) {
            egm_free(d);
            egm_free(copy);
            copy = NULL;
            break;
        }
        *d = *descs[r];
    }
    if (copy != NULL) {
        *copy = *loc;
        void *old = NULL;
        if (egm__hashmap_put(c->locations, key, len, copy, &old) != EGM_OK)
            egm_free(copy);
        egm_free(old);
    }
    c->stats.entries = egm__hashmap_size(c->locations);
    pthread_mutex_unlock(&c->lock);
}

void egm__location_cache_remember(egm_location_cache_t *c, size_t n, const char *const *keys,
                                  const egm_keys_reply_t *reply, const egm_segment_desc_t *descs,
                                  size_t n_descs, uint64_t asked_ms, uint64_t generation)
{
    if (c == NULL || reply->location_cache_ms == 0 || reply->n_results < n)
        return;
    for (size_t i = 0; i < n; i++) {
        const egm_key_result_t *res = &reply->results[i];
        if (res->status != EGM_OK || res->n_replicas == 0 ||
            res->n_replicas > EGM_LOCATION_MAX_REPLICAS)
            continue;
        egm_location_t loc = {.size = res->size,
                              .lease_ttl_ms = res->lease_ttl_ms,
                              .bound_ms = reply->location_cache_ms,
                              .asked_ms = asked_ms,
                              .n_replicas = res->n_replicas};
        const egm_segment_desc_t *segs[EGM_LOCATION_MAX_REPLICAS];
        const egm_replica_desc_t *reps = egm__keys_reply_replicas(reply, res);
        uint32_t r = 0;
        for (; r < res->n_replicas; r++) {
            loc.replicas[r] = reps[r];
            segs[r] = egm__segment_desc_find(descs, n_descs, reps[r].segment);
            if (segs[r] == NULL)
                break;
        }
        if (r == res->n_replicas)
            egm__location_cache_put(c, keys[i], &loc, segs, generation);
    }
}

void egm__location_cache_drop(egm_location_cache_t *c, const char *key)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    egm_location_t *loc = egm__hashmap_remove(c->locations, key, strlen(key));
    if (loc != NULL) {
        c->stats.invalidations++;
        egm_free(loc);
    }
    c->stats.entries = egm__hashmap_size(c->locations);
    pthread_mutex_unlock(&c->lock);
}

void egm__location_cache_clear(egm_location_cache_t *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    c->stats.invalidations += egm__hashmap_size(c->locations);
    free_values(c->locations);
    free_values(c->segments);
    c->stats.entries = 0;
    c->generation++;
    pthread_mutex_unlock(&c->lock);
}

void egm__location_cache_stats(egm_location_cache_t *c, egm_location_cache_stats_t *stats_p)
{
    memset(stats_p, 0, sizeof(*stats_p));
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    *stats_p = c->stats;
    stats_p->entries = egm__hashmap_size(c->locations);
    pthread_mutex_unlock(&c->lock);
}
