/* Lease-cached locations: a map key -> location and a map segment id ->
 * descriptor, under one mutex (location_cache.h). */
#include "client/location_cache.h"

#include <pthread.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"

/* A batch ExistKey's answer, kept whole: one allocation holding the keys, the
 * results, their replicas and the segments' descriptors. */
typedef struct {
    uint64_t asked_ms;
    uint64_t bound_ms;
    size_t n;
    const char **keys;
    egm_key_result_t *results;
    egm_replica_desc_t *replicas;
    egm_segment_desc_t *descs;
    size_t n_descs;
} lookup_t;

struct egm_location_cache {
    pthread_mutex_t lock;
    size_t capacity;
    uint64_t generation;      /* moved on by every clear */
    uint64_t swept_ms;        /* last search for expired entries of a full cache */
    egm_hashmap_t *locations; /* key -> egm_location_t* */
    egm_hashmap_t *segments;  /* egm_id_t -> egm_segment_desc_t* */
    lookup_t *lookups[EGM_LOOKUPS_KEPT];
    size_t next_lookup; /* the slot the next kept lookup takes */
    egm_location_cache_stats_t stats;
};

/* With the lock held. How many there were. */
static size_t drop_lookups(egm_location_cache_t *c)
{
    size_t n = 0;
    for (size_t i = 0; i < EGM_LOOKUPS_KEPT; i++) {
        n += c->lookups[i] != NULL;
        egm_free(c->lookups[i]);
        c->lookups[i] = NULL;
    }
    return n;
}

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
    (void)drop_lookups(c);
    egm__hashmap_destroy(c->locations);
    egm__hashmap_destroy(c->segments);
    pthread_mutex_destroy(&c->lock);
    egm_free(c);
}

static uint64_t usable_until(uint64_t asked_ms, uint64_t lease_ttl_ms, uint64_t bound_ms)
{
    uint64_t span = lease_ttl_ms < bound_ms ? lease_ttl_ms : bound_ms;
    if (span <= EGM_LOCATION_MARGIN_MS)
        return 0;
    return asked_ms + span - EGM_LOCATION_MARGIN_MS;
}

uint64_t egm__location_usable_until(const egm_location_t *loc)
{
    return usable_until(loc->asked_ms, loc->lease_ttl_ms, loc->bound_ms);
}

/* egm__location_cache_get with the lock held. */
static int get_locked(egm_location_cache_t *c, const char *key, uint64_t now_ms,
                      egm_location_t *loc_p)
{
    size_t len = strlen(key);
    int hit = 0;
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
    return hit;
}

int egm__location_cache_get(egm_location_cache_t *c, const char *key, uint64_t now_ms,
                            egm_location_t *loc_p)
{
    if (c == NULL)
        return 0;
    pthread_mutex_lock(&c->lock);
    int hit = get_locked(c, key, now_ms, loc_p);
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

void egm__location_cache_keep_lookup(egm_location_cache_t *c, size_t n, const char *const *keys,
                                     const egm_keys_reply_t *reply, const egm_segment_desc_t *descs,
                                     size_t n_descs, uint64_t asked_ms, uint64_t generation)
{
    if (c == NULL || n < 2 || reply->location_cache_ms == 0 || reply->n_results < n)
        return;
    size_t n_reps = 0, key_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        n_reps += reply->results[i].n_replicas;
        key_bytes += strlen(keys[i]) + 1;
    }
    if (n_reps == 0 || n_reps > reply->n_replicas)
        return; /* nothing usable (every key missed, or a master without locations) */
    lookup_t *l =
        egm_malloc(sizeof(*l) + n * sizeof(*l->keys) + n * sizeof(*l->results) +
                       n_reps * sizeof(*l->replicas) + n_descs * sizeof(*l->descs) + key_bytes,
                   "client.location_cache.lookup");
    if (l == NULL)
        return;
    *l = (lookup_t){
        .asked_ms = asked_ms, .bound_ms = reply->location_cache_ms, .n = n, .n_descs = n_descs};
    l->results = (egm_key_result_t *)(l + 1);
    l->replicas = (egm_replica_desc_t *)(l->results + n);
    l->descs = (egm_segment_desc_t *)(l->replicas + n_reps);
    l->keys = (const char **)(l->descs + n_descs);
    char *text = (char *)(l->keys + n);
    if (n_descs > 0)
        memcpy(l->descs, descs, n_descs * sizeof(*descs));
    for (size_t i = 0, at = 0; i < n; i++) {
        const egm_key_result_t *res = &reply->results[i];
        l->results[i] = *res;
        l->results[i].replica_first = (uint32_t)at;
        memcpy(&l->replicas[at], egm__keys_reply_replicas(reply, res),
               res->n_replicas * sizeof(*l->replicas));
        at += res->n_replicas;
        size_t len = strlen(keys[i]) + 1;
        memcpy(text, keys[i], len);
        l->keys[i] = text;
        text += len;
    }
    pthread_mutex_lock(&c->lock);
    if (c->generation == generation) {
        egm_free(c->lookups[c->next_lookup]);
        c->lookups[c->next_lookup] = l;
        c->next_lookup = (c->next_lookup + 1) % EGM_LOOKUPS_KEPT;
        l = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    egm_free(l); /* cleared since it was asked */
}

/* Where one key of a reply made from the cache lies. */
typedef struct {
    uint64_t size;
    uint64_t asked_ms;
    uint64_t lease_ttl_ms;
    uint32_t n_replicas;
    const egm_replica_desc_t *replicas;
} found_t;

/* keys[0..n) in order in lookup l (from its key `hint` when that is keys[0]),
 * each usable at now_ms with its segments known: 1 and found[i]. */
static int match_lookup(const lookup_t *l, size_t n, const char *const *keys, size_t hint,
                        uint64_t now_ms, found_t *found)
{
    int at_hint = hint < l->n && strcmp(l->keys[hint], keys[0]) == 0;
    if (n == 1 && !at_hint)
        return 0; /* one key is looked for at its hint only, never by a walk */
    size_t j = at_hint ? hint : 0;
    if (now_ms >= usable_until(l->asked_ms, l->bound_ms, l->bound_ms))
        return 0;
    for (size_t i = 0; i < n; i++, j++) {
        while (j < l->n && strcmp(l->keys[j], keys[i]) != 0)
            j++;
        if (j == l->n)
            return 0;
        const egm_key_result_t *res = &l->results[j];
        if (res->status != EGM_OK || res->n_replicas == 0 ||
            res->n_replicas > EGM_LOCATION_MAX_REPLICAS ||
            now_ms >= usable_until(l->asked_ms, res->lease_ttl_ms, l->bound_ms))
            return 0;
        found[i] = (found_t){.size = res->size,
                             .asked_ms = l->asked_ms,
                             .lease_ttl_ms = res->lease_ttl_ms,
                             .n_replicas = res->n_replicas,
                             .replicas = &l->replicas[res->replica_first]};
        for (uint32_t r = 0; r < res->n_replicas; r++)
            if (egm__segment_desc_find(l->descs, l->n_descs, found[i].replicas[r].segment) == NULL)
                return 0;
    }
    return 1;
}

/* Where a key's own entry says it lies (its replicas stay in *loc). */
static found_t found_entry(const egm_location_t *loc)
{
    return (found_t){.size = loc->size,
                     .asked_ms = loc->asked_ms,
                     .lease_ttl_ms = loc->lease_ttl_ms,
                     .n_replicas = loc->n_replicas,
                     .replicas = loc->replicas};
}

/* The reply of n found keys, and their segments' descriptors (from lookup l,
 * or from the cache's segments when l is NULL). With the lock held. */
static int build_reply(egm_location_cache_t *c, const lookup_t *l, size_t n, const found_t *found,
                       egm_keys_reply_t **reply_p, egm_segment_desc_t **descs_p, size_t *n_descs_p,
                       uint64_t *asked_ms_p)
{
    size_t n_reps = 0, n_descs = 0;
    uint64_t asked_ms = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        n_reps += found[i].n_replicas;
        if (found[i].asked_ms < asked_ms)
            asked_ms = found[i].asked_ms;
    }
    egm_keys_reply_t *reply = egm_calloc(
        1, sizeof(*reply) + n * sizeof(egm_key_result_t) + n_reps * sizeof(egm_replica_desc_t),
        "client.location_cache.reply");
    egm_segment_desc_t *descs = egm_calloc(n_reps, sizeof(*descs), "client.location_cache.reply");
    if (reply == NULL || descs == NULL)
        goto fail;
    reply->status = EGM_OK;
    reply->n_results = n;
    reply->results = (egm_key_result_t *)(reply + 1);
    reply->n_replicas = n_reps;
    reply->replicas = (egm_replica_desc_t *)(reply->results + n);
    for (size_t i = 0, at = 0; i < n; i++) {
        /* The lease as seen from the oldest ask of the batch. */
        reply->results[i] = (egm_key_result_t){.status = EGM_OK,
                                               .n_replicas = found[i].n_replicas,
                                               .replica_first = (uint32_t)at,
                                               .size = found[i].size,
                                               .lease_ttl_ms = found[i].asked_ms +
                                                               found[i].lease_ttl_ms - asked_ms};
        for (uint32_t r = 0; r < found[i].n_replicas; r++, at++) {
            egm_id_t id = found[i].replicas[r].segment;
            reply->replicas[at] = found[i].replicas[r];
            if (egm__segment_desc_find(descs, n_descs, id) != NULL)
                continue;
            const egm_segment_desc_t *d = l != NULL
                                              ? egm__segment_desc_find(l->descs, l->n_descs, id)
                                              : egm__hashmap_get(c->segments, &id, sizeof(id));
            if (d == NULL)
                goto fail;
            descs[n_descs++] = *d;
        }
    }
    *reply_p = reply;
    *descs_p = descs;
    *n_descs_p = n_descs;
    *asked_ms_p = asked_ms;
    return 1;
fail:
    egm_free(reply);
    egm_free(descs);
    return 0;
}

int egm__location_cache_reply(egm_location_cache_t *c, size_t n, const char *const *keys,
                              size_t hint, uint64_t now_ms, egm_keys_reply_t **reply_p,
                              egm_segment_desc_t **descs_p, size_t *n_descs_p, uint64_t *asked_ms_p)
{
    if (c == NULL || n == 0)
        return 0;
    if (n == 1 && hint == EGM_LOCATION_NO_HINT) {
        /* One key from its own entry, under one hold of the lock (a one-key
         * get is the call engines make most; 8 threads share the lock). */
        egm_location_t loc;
        int made = 0;
        pthread_mutex_lock(&c->lock);
        if (get_locked(c, keys[0], now_ms, &loc)) {
            found_t found = found_entry(&loc);
            made = build_reply(c, NULL, 1, &found, reply_p, descs_p, n_descs_p, asked_ms_p);
        }
        pthread_mutex_unlock(&c->lock);
        return made;
    }
    /* Nothing is allocated until something may fill it: a kept lookup, or a
     * first key with its own entry (a batch mostly misses on its first key). */
    found_t *found = NULL;
    egm_location_t *locs = NULL;
    int made = 0;
    pthread_mutex_lock(&c->lock);
    /* A kept lookup, the newest first (one key only at its hint). */
    for (size_t k = 1; (n >= 2 || hint != EGM_LOCATION_NO_HINT) && k <= EGM_LOOKUPS_KEPT && !made;
         k++) {
        const lookup_t *l = c->lookups[(c->next_lookup + EGM_LOOKUPS_KEPT - k) % EGM_LOOKUPS_KEPT];
        if (l == NULL)
            continue;
        if (found == NULL &&
            (found = egm_calloc(n, sizeof(*found), "client.location_cache.reply")) == NULL)
            break;
        if (match_lookup(l, n, keys, hint, now_ms, found))
            made = build_reply(c, l, n, found, reply_p, descs_p, n_descs_p, asked_ms_p);
    }
    if (made)
        c->stats.hits += n;
    pthread_mutex_unlock(&c->lock);
    if (made)
        goto out;
    /* Else every key's own entry. */
    egm_location_t first;
    if (!egm__location_cache_get(c, keys[0], now_ms, &first))
        goto out;
    if (found == NULL)
        found = egm_calloc(n, sizeof(*found), "client.location_cache.reply");
    locs = egm_calloc(n, sizeof(*locs), "client.location_cache.reply");
    if (found == NULL || locs == NULL)
        goto out;
    locs[0] = first;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && !egm__location_cache_get(c, keys[i], now_ms, &locs[i]))
            goto out;
        found[i] = found_entry(&locs[i]);
    }
    pthread_mutex_lock(&c->lock);
    made = build_reply(c, NULL, n, found, reply_p, descs_p, n_descs_p, asked_ms_p);
    pthread_mutex_unlock(&c->lock);
out:
    egm_free(locs);
    egm_free(found);
    return made;
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
    /* Every kept lookup goes, whichever held the key. A lookup still in flight
     * may be kept after this drop (a drop does not move the generation): safe,
     * as that lookup's lease covers what it answers, and a force remove waits
     * out every lease its objects were granted (docs/consistency.md). */
    c->stats.invalidations += drop_lookups(c);
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
    c->stats.invalidations += drop_lookups(c);
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
