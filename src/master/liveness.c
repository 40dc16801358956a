/* Liveness: client id -> last time heard from; mount, unmount and expiry.
 * `lock` guards the client map and every client in it. */
#include "master/liveness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"

typedef struct {
    egm_id_t id;
    uint64_t last_seen_ms;
    char host_id[EGM_HOST_ID_MAX]; /* from its pings, for local_first placement */
    uint32_t conns;                /* RPC connections bound to it (egm__liveness_connected) */
    int disconnected;              /* its last bound connection closed at disconnected_ms */
    uint64_t disconnected_ms;
} client_t;

struct egm_liveness {
    egm_segment_table_t *segments;
    egm_object_index_t *objects;
    pthread_mutex_t lock;
    egm_hashmap_t *clients; /* 16-byte id -> client_t */
    egm_liveness_stats_t stats;
};

static void id_key(egm_id_t id, uint8_t key[16])
{
    memcpy(key, &id.hi, 8);
    memcpy(key + 8, &id.lo, 8);
}

egm_status_t egm__liveness_create(egm_segment_table_t *segments, egm_object_index_t *objects,
                                  egm_liveness_t **liveness_p)
{
    egm_liveness_t *l;
    egm_status_t status;

    *liveness_p = NULL;
    l = egm_calloc(1, sizeof(*l), "master.liveness");
    if (l == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the client table");
    status = egm__hashmap_create(&l->clients);
    if (status != EGM_OK) {
        egm_free(l);
        return status;
    }
    pthread_mutex_init(&l->lock, NULL);
    l->segments = segments;
    l->objects = objects;
    *liveness_p = l;
    return EGM_OK;
}

void egm__liveness_destroy(egm_liveness_t *l)
{
    size_t iter = 0;
    const void *key;
    size_t key_len;
    void *value;

    if (l == NULL)
        return;
    while (egm__hashmap_next(l->clients, &iter, &key, &key_len, &value))
        egm_free(value);
    egm__hashmap_destroy(l->clients);
    pthread_mutex_destroy(&l->lock);
    egm_free(l);
}

static client_t *find_client(const egm_liveness_t *l, egm_id_t id)
{
    uint8_t key[16];
    id_key(id, key);
    return egm__hashmap_get(l->clients, key, sizeof(key));
}

int egm__liveness_is_known(egm_liveness_t *l, egm_id_t client)
{
    pthread_mutex_lock(&l->lock);
    int known = find_client(l, client) != NULL;
    pthread_mutex_unlock(&l->lock);
    return known;
}

size_t egm__liveness_client_count(egm_liveness_t *l)
{
    pthread_mutex_lock(&l->lock);
    size_t n = egm__hashmap_size(l->clients);
    pthread_mutex_unlock(&l->lock);
    return n;
}

/* Marks (or clears) every segment of `owner` unreachable; how many it has.
 * The segment table is only read: the caller holds the state lock, shared
 * at least. */
static size_t mark_segments(egm_liveness_t *l, egm_id_t owner, int unreachable)
{
    size_t n = egm__segment_table_count(l->segments), marked = 0;
    for (size_t i = 0; i < n; i++) {
        egm_segment_t *seg = egm__segment_table_at(l->segments, i);
        if (egm__id_equal(seg->desc.owner, owner)) {
            atomic_store_explicit(&seg->unreachable, unreachable, memory_order_relaxed);
            marked++;
        }
    }
    return marked;
}

/* With l->lock held: c was presumed gone and spoke again. Counted and said
 * for a provider (a client with segments) only. */
static void reconnected(egm_liveness_t *l, client_t *c)
{
    char id_text[EGM_ID_STRLEN];
    c->disconnected = 0;
    if (mark_segments(l, c->id, 0) == 0)
        return;
    l->stats.reconnects++;
    egm_info("client %s is back %llu ms after its connection closed: its segments serve again",
             egm__id_format(c->id, id_text),
             (unsigned long long)(c->last_seen_ms - c->disconnected_ms));
}

/* With l->lock held. */
static egm_status_t ping_locked(egm_liveness_t *l, egm_id_t id, uint64_t now_ms)
{
    client_t *c;
    uint8_t key[16];
    char id_text[EGM_ID_STRLEN];
    egm_status_t status;

    if (egm__id_is_nil(id))
        return egm__set_error(EGM_ERR_INVALID_ARG, "client: must not be nil");
    c = find_client(l, id);
    if (c != NULL) {
        c->last_seen_ms = now_ms;
        if (c->disconnected)
            reconnected(l, c); /* it is there after all */
        return EGM_OK;
    }
    c = egm_calloc(1, sizeof(*c), "master.client");
    if (c == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory registering a client");
    c->id = id;
    c->last_seen_ms = now_ms;
    id_key(id, key);
    status = egm__hashmap_put(l->clients, key, sizeof(key), c, NULL);
    if (status != EGM_OK) {
        egm_free(c);
        return status;
    }
    egm_debug("client %s registered", egm__id_format(id, id_text));
    return EGM_OK;
}

egm_status_t egm__liveness_ping(egm_liveness_t *l, egm_id_t id, uint64_t now_ms)
{
    pthread_mutex_lock(&l->lock);
    egm_status_t status = ping_locked(l, id, now_ms);
    pthread_mutex_unlock(&l->lock);
    return status;
}

egm_status_t egm__liveness_set_host_id(egm_liveness_t *l, egm_id_t client, const char *host_id)
{
    size_t len = host_id != NULL ? strnlen(host_id, EGM_HOST_ID_MAX) : 0;
    egm_status_t status = EGM_OK;

    if (len >= EGM_HOST_ID_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "host_id: longer than %d bytes",
                              EGM_HOST_ID_MAX - 1);
    pthread_mutex_lock(&l->lock);
    client_t *c = find_client(l, client);
    if (c == NULL) {
        status = egm__set_error(EGM_ERR_CLIENT_NOT_FOUND, "client: not registered");
    } else {
        memcpy(c->host_id, host_id != NULL ? host_id : "", len);
        c->host_id[len] = '\0';
    }
    pthread_mutex_unlock(&l->lock);
    return status;
}

const char *egm__liveness_host_id(egm_liveness_t *l, egm_id_t client, char buf[EGM_HOST_ID_MAX])
{
    pthread_mutex_lock(&l->lock);
    const client_t *c = find_client(l, client);
    memcpy(buf, c != NULL ? c->host_id : "", c != NULL ? sizeof(c->host_id) : 1);
    pthread_mutex_unlock(&l->lock);
    return buf;
}

egm_status_t egm__liveness_mount(egm_liveness_t *l, egm_id_t client,
                                 const egm_segment_params_t *params, uint64_t now_ms)
{
    egm_segment_params_t p = *params;
    egm_segment_t *seg;
    char id_text[EGM_ID_STRLEN];
    egm_status_t status;

    if (egm__id_is_nil(client))
        return egm__set_error(EGM_ERR_INVALID_ARG, "client: must not be nil");
    if (egm__id_is_nil(p.owner))
        p.owner = client;
    else if (!egm__id_equal(p.owner, client))
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment.owner: must be the calling client");
    /* Registered first, so that its segments expire with it whatever happens. */
    status = egm__liveness_ping(l, client, now_ms);
    if (status != EGM_OK)
        return status;
    status = egm__segment_table_mount(l->segments, &p, &seg);
    if (status != EGM_OK)
        return status;
    egm_info("mounted segment %s (%s, %llu bytes, tcp %s, shm %s)", seg->desc.name,
             egm__id_format(seg->desc.id, id_text), (unsigned long long)seg->desc.size,
             seg->desc.tcp_endpoint[0] ? seg->desc.tcp_endpoint : "-",
             seg->desc.shm_socket[0] ? seg->desc.shm_socket : "-");
    return EGM_OK;
}

static int compare_ids(const void *a, const void *b)
{
    const egm_id_t *x = a, *y = b;
    if (x->hi != y->hi)
        return x->hi < y->hi ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Every descriptor of a list is acceptable and no id appears twice. */
static egm_status_t check_all(egm_liveness_t *l, egm_id_t client, egm_segment_params_t *params,
                              size_t n)
{
    char id_text[EGM_ID_STRLEN];
    for (size_t i = 0; i < n; i++) {
        egm_segment_params_t *p = &params[i];
        if (egm__id_is_nil(p->owner))
            p->owner = client;
        else if (!egm__id_equal(p->owner, client))
            return egm__set_error(EGM_ERR_INVALID_ARG,
                                  "segments[%zu].owner: must be the calling client", i);
        egm_status_t status = egm__segment_table_check(l->segments, p);
        if (status != EGM_OK) {
            char detail[256];
            snprintf(detail, sizeof(detail), "%s", egm_last_error());
            return egm__set_error(status, "segments[%zu]: %s", i, detail);
        }
    }
    egm_id_t *ids = egm_malloc(n * sizeof(*ids), "master.mount_ids");
    if (ids == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory checking %zu segments", n);
    for (size_t i = 0; i < n; i++)
        ids[i] = params[i].id;
    qsort(ids, n, sizeof(*ids), compare_ids);
    egm_status_t status = EGM_OK;
    for (size_t i = 1; i < n && status == EGM_OK; i++)
        if (egm__id_equal(ids[i], ids[i - 1]))
            status = egm__set_error(EGM_ERR_INVALID_ARG, "segments: id %s appears twice",
                                    egm__id_format(ids[i], id_text));
    egm_free(ids);
    return status;
}

egm_status_t egm__liveness_mount_all(egm_liveness_t *l, egm_id_t client,
                                     egm_segment_params_t *params, size_t n, uint64_t now_ms)
{
    egm_status_t status;
    uint64_t bytes = 0;

    if (egm__id_is_nil(client))
        return egm__set_error(EGM_ERR_INVALID_ARG, "client: must not be nil");
    if ((status = check_all(l, client, params, n)) != EGM_OK)
        return status;
    if ((status = egm__liveness_ping(l, client, now_ms)) != EGM_OK)
        return status;
    for (size_t i = 0; i < n; i++) {
        egm_segment_t *seg;
        status = egm__segment_table_mount(l->segments, &params[i], &seg);
        if (status != EGM_OK) {
            for (size_t k = i; k-- > 0;)
                egm__segment_table_unpublish(l->segments,
                                             egm__segment_table_find(l->segments, params[k].id));
            return status;
        }
        bytes += seg->desc.size;
        egm_debug("mounted segment %s", seg->desc.name);
    }
    char id_text[EGM_ID_STRLEN];
    egm_info("mounted %zu segments of client %s at once (%llu bytes; first %s, tcp %s, shm %s)", n,
             egm__id_format(client, id_text), (unsigned long long)bytes, params[0].name,
             params[0].tcp_endpoint && params[0].tcp_endpoint[0] ? params[0].tcp_endpoint : "-",
             params[0].shm_socket && params[0].shm_socket[0] ? params[0].shm_socket : "-");
    return EGM_OK;
}

void egm__liveness_connected(egm_liveness_t *l, egm_id_t client, uint64_t now_ms)
{
    pthread_mutex_lock(&l->lock);
    client_t *c = find_client(l, client);
    if (c != NULL) {
        c->conns++;
        c->last_seen_ms = now_ms;
        if (c->disconnected)
            reconnected(l, c);
    }
    pthread_mutex_unlock(&l->lock);
}

void egm__liveness_disconnected(egm_liveness_t *l, egm_id_t client, uint64_t now_ms)
{
    char id_text[EGM_ID_STRLEN];
    pthread_mutex_lock(&l->lock);
    client_t *c = find_client(l, client);
    if (c != NULL && c->conns > 0)
        c->conns--;
    if (c != NULL && c->conns == 0 && !c->disconnected) {
        c->disconnected = 1;
        c->disconnected_ms = now_ms;
        size_t marked = mark_segments(l, client, 1);
        if (marked > 0) { /* a provider; a client without segments has nothing to lose */
            l->stats.disconnects++;
            egm_info("client %s: its connection to the master closed without a leaving ping: "
                     "its %zu segments take no new replica until it reconnects",
                     egm__id_format(client, id_text), marked);
        }
    }
    pthread_mutex_unlock(&l->lock);
}

/* Drops the replicas, then retires the id; returns objects deleted. */
static size_t unmount(egm_liveness_t *l, egm_segment_t *seg)
{
    size_t deleted = egm__objects_drop_segment(l->objects, seg);
    egm__segment_table_remove(l->segments, seg);
    return deleted;
}

egm_status_t egm__liveness_unmount(egm_liveness_t *l, egm_id_t client, egm_id_t segment,
                                   uint64_t now_ms)
{
    char id_text[EGM_ID_STRLEN];
    char name[EGM_SEGMENT_NAME_MAX];

    if (egm__id_is_nil(client))
        return egm__set_error(EGM_ERR_INVALID_ARG, "client: must not be nil");
    egm_segment_t *seg = egm__segment_table_find(l->segments, segment);
    if (seg == NULL)
        return egm__set_error(EGM_ERR_SEGMENT_NOT_FOUND, "segment %s is not mounted",
                              egm__id_format(segment, id_text));
    if (!egm__id_equal(seg->desc.owner, client))
        return egm__set_error(EGM_ERR_PERMISSION, "segment %s belongs to another client",
                              egm__id_format(segment, id_text));
    pthread_mutex_lock(&l->lock);
    client_t *c = find_client(l, client);
    if (c != NULL)
        c->last_seen_ms = now_ms;
    pthread_mutex_unlock(&l->lock);
    memcpy(name, seg->desc.name, sizeof(name));
    uint64_t replicas = seg->replica_count;
    size_t deleted = unmount(l, seg);
    pthread_mutex_lock(&l->lock);
    l->stats.segments_dropped[EGM_DROP_UNMOUNTED]++;
    pthread_mutex_unlock(&l->lock);
    egm_info("unmounted segment %s (%s): %llu replicas dropped, %zu objects deleted", name,
             egm__id_format(segment, id_text), (unsigned long long)replicas, deleted);
    return EGM_OK;
}

/* With l->lock held: unmounts every segment of c, then removes and frees c.
 * *segments_p, *deleted_p: segments unmounted, objects deleted; counted
 * under `why`. */
static void drop_client(egm_liveness_t *l, client_t *c, egm_drop_reason_t why, size_t *segments_p,
                        size_t *deleted_p)
{
    size_t segments = 0, deleted = 0;

    /* Backwards: a swap-remove only moves an entry already visited. */
    for (size_t i = egm__segment_table_count(l->segments); i-- > 0;) {
        egm_segment_t *seg = egm__segment_table_at(l->segments, i);
        if (!egm__id_equal(seg->desc.owner, c->id))
            continue;
        deleted += unmount(l, seg);
        segments++;
    }
    uint8_t own_key[16]; /* not the map's own copy, which the removal frees */
    id_key(c->id, own_key);
    egm__hashmap_remove(l->clients, own_key, sizeof(own_key));
    egm_free(c);
    l->stats.segments_dropped[why] += segments;
    *segments_p = segments;
    *deleted_p = deleted;
}

/* Whether `owner` has a segment mounted (the table is only read). */
static int owns_segments(const egm_liveness_t *l, egm_id_t owner)
{
    size_t n = egm__segment_table_count(l->segments);
    for (size_t i = 0; i < n; i++)
        if (egm__id_equal(egm__segment_table_at(l->segments, i)->desc.owner, owner))
            return 1;
    return 0;
}

size_t egm__liveness_expire_disconnected(egm_liveness_t *l, uint64_t now_ms, uint64_t grace_ms)
{
    size_t iter = 0, dropped = 0;
    const void *key;
    size_t key_len;
    void *value;
    char id_text[EGM_ID_STRLEN];

    if (grace_ms == 0)
        return 0; /* off: the TTL alone */
    pthread_mutex_lock(&l->lock);
    while (egm__hashmap_next(l->clients, &iter, &key, &key_len, &value)) {
        client_t *c = value;
        if (!c->disconnected || now_ms < c->disconnected_ms ||
            now_ms - c->disconnected_ms < grace_ms)
            continue;
        if (!owns_segments(l, c->id))
            continue; /* nothing to lose or to keep: the TTL unregisters it */
        egm_id_t id = c->id;
        uint64_t gone_ms = now_ms - c->disconnected_ms;
        size_t segments, deleted;
        drop_client(l, c, EGM_DROP_DISCONNECTED, &segments, &deleted);
        egm_info("client %s: connection closed %llu ms ago and not back: dropped, %zu segments "
                 "unmounted, %zu objects deleted",
                 egm__id_format(id, id_text), (unsigned long long)gone_ms, segments, deleted);
        dropped++;
    }
    pthread_mutex_unlock(&l->lock);
    return dropped;
}

void egm__liveness_stats(egm_liveness_t *l, egm_liveness_stats_t *stats_p)
{
    pthread_mutex_lock(&l->lock);
    *stats_p = l->stats;
    pthread_mutex_unlock(&l->lock);
}

size_t egm__liveness_expire(egm_liveness_t *l, uint64_t now_ms, uint64_t ttl_ms)
{
    size_t iter = 0, expired = 0;
    const void *key;
    size_t key_len;
    void *value;
    char id_text[EGM_ID_STRLEN];

    /* Held while segments are unmounted: lock order liveness -> object
     * shards -> space. */
    pthread_mutex_lock(&l->lock);
    while (egm__hashmap_next(l->clients, &iter, &key, &key_len, &value)) {
        client_t *c = value;
        if (now_ms < c->last_seen_ms || now_ms - c->last_seen_ms < ttl_ms)
            continue;
        egm_id_t id = c->id;
        uint64_t silent_ms = now_ms - c->last_seen_ms;
        size_t segments, deleted;
        drop_client(l, c, EGM_DROP_EXPIRED, &segments, &deleted);
        egm_info("client %s silent for %llu ms: expired, %zu segments unmounted, %zu objects "
                 "deleted",
                 egm__id_format(id, id_text), (unsigned long long)silent_ms, segments, deleted);
        expired++;
    }
    pthread_mutex_unlock(&l->lock);
    return expired;
}

egm_status_t egm__liveness_leave(egm_liveness_t *l, egm_id_t client)
{
    char id_text[EGM_ID_STRLEN];

    if (egm__id_is_nil(client))
        return egm__set_error(EGM_ERR_INVALID_ARG, "client: must not be nil");
    pthread_mutex_lock(&l->lock);
    client_t *c = find_client(l, client);
    if (c != NULL) {
        size_t segments, deleted;
        drop_client(l, c, EGM_DROP_LEFT, &segments, &deleted);
        egm_debug("client %s left: unregistered, %zu segments unmounted, %zu objects deleted",
                  egm__id_format(client, id_text), segments, deleted);
    }
    pthread_mutex_unlock(&l->lock);
    return EGM_OK;
}
