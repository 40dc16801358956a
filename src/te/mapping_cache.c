/* nvlink mapping cache: import -> reserve -> map -> grant access, once per
 * segment id; reference counts keep a retired mapping alive until the copies
 * in flight on it finish. See mapping_cache.h for the contract. */
#include "te/mapping_cache.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "cuda/driver.h"
#include "te/te_int.h"

#define MAX_GRANT_DEVICES 64

typedef enum { MAPPING_IMPORTING, MAPPING_READY, MAPPING_FAILED } mapping_state_t;

struct egm_mapping {
    egm_id_t id;
    uint64_t size;         /* the descriptor's */
    uint64_t map_size;     /* size rounded up to the granularity */
    egm_cu_deviceptr_t va; /* 0 until mapped */
    egm_cu_mem_handle_t handle;
    mapping_state_t state;
    egm_status_t error; /* MAPPING_FAILED: why, for the waiters */
    char detail[256];
    uint64_t refs; /* the importer and the copies using it */
    int retired;   /* out of the table; the last reference unmaps */
};

struct egm_mapping_cache {
    const egm_cuda_api_t *api;
    int timeout_ms;
    pthread_mutex_t lock;
    pthread_cond_t changed; /* an import finished */
    egm_hashmap_t *by_id;   /* id -> egm_mapping_t*: importing or ready */
    egm_hashmap_t *retired; /* id -> marker: forgotten ids, never served again */
    uint64_t imports_total;
    uint64_t import_failures;
    uint64_t live;     /* mapped, including retired ones still referenced */
    const char *token; /* cluster token for fd brokers (the te's); NULL = none */
};

egm_status_t egm__mapping_cache_create(const egm_cuda_api_t *api, int timeout_ms, const char *token,
                                       egm_mapping_cache_t **cache_p)
{
    egm_status_t st;
    egm_mapping_cache_t *cache = egm_calloc(1, sizeof(*cache), "te.mapping_cache");
    if (cache == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "nvlink: out of memory");
    cache->api = api;
    cache->token = token;
    cache->timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
    if ((st = egm__hashmap_create(&cache->by_id)) != EGM_OK)
        goto err_cache;
    if ((st = egm__hashmap_create(&cache->retired)) != EGM_OK)
        goto err_map;
    pthread_mutex_init(&cache->lock, NULL);
    pthread_cond_init(&cache->changed, NULL);
    *cache_p = cache;
    return EGM_OK;

err_map:
    egm__hashmap_destroy(cache->by_id);
err_cache:
    egm_free(cache);
    return st;
}

/* Undo a mapping in reverse order of import -> reserve -> map -> access.
 * Cleanup failures are logged and the rest still runs: nothing else could
 * release these later. */
static void unmap(egm_mapping_cache_t *cache, egm_cu_deviceptr_t va, uint64_t map_size, int mapped,
                  egm_cu_mem_handle_t handle, int imported)
{
    const egm_cuda_api_t *api = cache->api;
    egm_cu_result_t rc;
    if (mapped && (rc = api->cuMemUnmap(va, map_size)) != EGM_CU_SUCCESS)
        egm_warn("nvlink: cuMemUnmap: %s", egm__cuda_error_name(rc));
    if (va != 0 && (rc = api->cuMemAddressFree(va, map_size)) != EGM_CU_SUCCESS)
        egm_warn("nvlink: cuMemAddressFree: %s", egm__cuda_error_name(rc));
    if (imported && (rc = api->cuMemRelease(handle)) != EGM_CU_SUCCESS)
        egm_warn("nvlink: cuMemRelease: %s", egm__cuda_error_name(rc));
}

static void mapping_free(egm_mapping_cache_t *cache, egm_mapping_t *m)
{
    if (m->state == MAPPING_READY)
        unmap(cache, m->va, m->map_size, 1, m->handle, 1);
    egm_free(m);
}

void egm__mapping_cache_destroy(egm_mapping_cache_t *cache)
{
    if (cache == NULL)
        return;
    size_t iter = 0;
    const void *key;
    size_t key_len;
    void *value;
    while (egm__hashmap_next(cache->by_id, &iter, &key, &key_len, &value)) {
        egm_mapping_t *m = value;
        if (m->refs > 0)
            egm_warn("nvlink: mapping destroyed with %" PRIu64 " copies in flight", m->refs);
        mapping_free(cache, m);
    }
    egm__hashmap_destroy(cache->by_id);
    egm__hashmap_destroy(cache->retired);
    pthread_cond_destroy(&cache->changed);
    pthread_mutex_destroy(&cache->lock);
    egm_free(cache);
}

static egm_status_t import_error(egm_cu_result_t rc, const char *call, const char *text)
{
    egm_status_t st = egm__cuda_check(rc, call);
    if (st == EGM_OK)
        return EGM_OK;
    char detail[256];
    snprintf(detail, sizeof(detail), "%s", egm_last_error());
    return egm__set_error(st, "nvlink: segment %s: %s", text, detail);
}

/* The segment's handle, imported into this process. */
static egm_status_t import_handle(egm_mapping_cache_t *cache, const egm_segment_desc_t *segment,
                                  const char *text, egm_cu_mem_handle_t *handle_p)
{
    egm_status_t st;
    egm_cu_result_t rc;

    if (segment->handle_kind == EGM_HANDLE_FABRIC) {
        if (segment->fabric_handle_len != EGM_CU_FABRIC_HANDLE_SIZE)
            return egm__set_error(
                EGM_ERR_INVALID_ARG, "nvlink: segment %s: fabric handle of %u bytes, expected %d",
                text, (unsigned)segment->fabric_handle_len, EGM_CU_FABRIC_HANDLE_SIZE);
        egm_cu_fabric_handle_t fabric;
        memcpy(fabric.data, segment->fabric_handle, sizeof(fabric.data));
        rc = cache->api->cuMemImportFromShareableHandle(handle_p, &fabric,
                                                        EGM_CU_MEM_HANDLE_TYPE_FABRIC);
        return import_error(rc, "cuMemImportFromShareableHandle(fabric)", text);
    }

    /* posix_fd: the provider exports a descriptor for this request only. */
    int fd = -1;
    uint64_t size = 0;
    st = egm__fd_broker_fetch(segment->shm_socket, segment->id, EGM_HANDLE_POSIX_FD, cache->token,
                              cache->timeout_ms, &fd, &size);
    if (st != EGM_OK)
        return st;
    if (size != segment->size) {
        close(fd);
        return egm__set_error(EGM_ERR_PROTOCOL,
                              "nvlink: segment %s: provider reports %" PRIu64
                              " bytes, the descriptor %" PRIu64,
                              text, size, segment->size);
    }
    rc = cache->api->cuMemImportFromShareableHandle(handle_p, (void *)(intptr_t)fd,
                                                    EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    /* The imported handle holds the memory; the descriptor is not needed. */
    close(fd);
    return import_error(rc, "cuMemImportFromShareableHandle(posix_fd)", text);
}

/* import -> reserve -> map -> grant every local GPU; on failure nothing is
 * left behind. */
static egm_status_t import_and_map_devices(egm_mapping_cache_t *cache,
                                           const egm_segment_desc_t *segment, egm_mapping_t *m,
                                           int ndev, const char *text)
{
    const egm_cuda_api_t *api = cache->api;
    egm_status_t st;
    egm_cu_result_t rc;
    egm_cu_deviceptr_t va = 0;
    int mapped = 0;

    egm_cu_mem_allocation_prop_t prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = EGM_CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = EGM_CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    rc = api->cuMemGetAllocationGranularity(&gran, &prop, EGM_CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if ((st = egm__cuda_check(rc, "cuMemGetAllocationGranularity")) != EGM_OK)
        return st;
    if (gran == 0 || segment->size > UINT64_MAX - gran)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "nvlink: segment %s: size %" PRIu64 " cannot be aligned to %zu", text,
                              segment->size, gran);
    uint64_t map_size = (segment->size + gran - 1) / gran * gran;

    egm_cu_mem_handle_t handle = 0;
    if ((st = import_handle(cache, segment, text, &handle)) != EGM_OK)
        return st;
    rc = api->cuMemAddressReserve(&va, map_size, gran, 0, 0);
    if ((st = egm__cuda_check(rc, "cuMemAddressReserve")) != EGM_OK) {
        va = 0;
        goto err;
    }
    /* A descriptor larger than the allocation behind the handle fails here,
     * so no copy can run past the provider's memory. */
    rc = api->cuMemMap(va, map_size, 0, handle, 0);
    if ((st = egm__cuda_check(rc, "cuMemMap")) != EGM_OK)
        goto err;
    mapped = 1;
    egm_cu_mem_access_desc_t access[MAX_GRANT_DEVICES];
    for (int d = 0; d < ndev; d++)
        access[d] = (egm_cu_mem_access_desc_t){
            .location = {.type = EGM_CU_MEM_LOCATION_TYPE_DEVICE, .id = d},
            .flags = EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    rc = api->cuMemSetAccess(va, map_size, access, (size_t)ndev);
    if ((st = egm__cuda_check(rc, "cuMemSetAccess")) != EGM_OK)
        goto err;

    m->va = va;
    m->map_size = map_size;
    m->handle = handle;
    return EGM_OK;

err:;
    char detail[256];
    snprintf(detail, sizeof(detail), "%s", egm_last_error());
    unmap(cache, va, map_size, mapped, handle, 1);
    return egm__set_error(st, "nvlink: segment %s: %s", text, detail);
}

/* Runs without the cache lock (an import takes milliseconds). The VMM calls
 * need no current context (checked on the H200), so none is touched: an
 * inference thread keeps its own, and no GPU gets a context it did not have. */
static egm_status_t import_and_map(egm_mapping_cache_t *cache, const egm_segment_desc_t *segment,
                                   egm_mapping_t *m)
{
    char text[EGM_ID_STRLEN];

    egm__id_format(segment->id, text);
    int ndev = egm__cuda_device_count();
    if (ndev <= 0)
        return egm__set_error(EGM_ERR_NO_CUDA, "nvlink: segment %s: no GPU to map it into", text);
    if (ndev > MAX_GRANT_DEVICES)
        ndev = MAX_GRANT_DEVICES;
    return import_and_map_devices(cache, segment, m, ndev, text);
}

static egm_status_t retired_error(egm_id_t id)
{
    char text[EGM_ID_STRLEN];
    return egm__set_error(EGM_ERR_SEGMENT_NOT_FOUND, "nvlink: segment %s was retired",
                          egm__id_format(id, text));
}

/* Drop one reference (cache lock held); returns the mapping when the caller
 * must free it (outside the lock). */
static egm_mapping_t *unref_locked(egm_mapping_cache_t *cache, egm_mapping_t *m)
{
    if (--m->refs > 0 || !m->retired)
        return NULL;
    if (m->state == MAPPING_READY)
        cache->live--;
    return m;
}

egm_status_t egm__mapping_acquire(egm_mapping_cache_t *cache, const egm_segment_desc_t *segment,
                                  egm_mapping_t **mapping_p, int *imported_p)
{
    egm_status_t st;
    char text[EGM_ID_STRLEN];
    egm_mapping_t *m, *dead = NULL;

    if (imported_p != NULL)
        *imported_p = 0;
    if (segment->handle_kind != EGM_HANDLE_POSIX_FD && segment->handle_kind != EGM_HANDLE_FABRIC)
        return egm__set_error(EGM_ERR_NOT_SUPPORTED,
                              "nvlink: segment %s is not CUDA VMM memory (handle kind %d)",
                              egm__id_format(segment->id, text), (int)segment->handle_kind);

    pthread_mutex_lock(&cache->lock);
    if (egm__hashmap_get(cache->retired, &segment->id, sizeof(segment->id)) != NULL) {
        pthread_mutex_unlock(&cache->lock);
        return retired_error(segment->id);
    }
    m = egm__hashmap_get(cache->by_id, &segment->id, sizeof(segment->id));
    if (m != NULL) {
        m->refs++;
        while (m->state == MAPPING_IMPORTING)
            pthread_cond_wait(&cache->changed, &cache->lock);
        goto check;
    }

    /* First use: publish an IMPORTING entry so that concurrent users (a
     * prewarm thread and a Get) wait for this import instead of repeating it. */
    m = egm_calloc(1, sizeof(*m), "te.mapping");
    if (m == NULL) {
        pthread_mutex_unlock(&cache->lock);
        return egm__set_error(EGM_ERR_NO_MEMORY, "nvlink: out of memory");
    }
    *m = (egm_mapping_t){
        .id = segment->id, .size = segment->size, .state = MAPPING_IMPORTING, .refs = 1};
    if ((st = egm__hashmap_put(cache->by_id, &m->id, sizeof(m->id), m, NULL)) != EGM_OK) {
        pthread_mutex_unlock(&cache->lock);
        egm_free(m);
        return st;
    }
    pthread_mutex_unlock(&cache->lock);

    st = import_and_map(cache, segment, m);

    pthread_mutex_lock(&cache->lock);
    if (st == EGM_OK) {
        m->state = MAPPING_READY;
        cache->imports_total++;
        cache->live++;
        if (imported_p != NULL)
            *imported_p = 1;
        egm_debug("nvlink: mapped segment %s (%" PRIu64 " bytes, %s) at 0x%" PRIx64,
                  egm__id_format(segment->id, text), segment->size,
                  segment->handle_kind == EGM_HANDLE_FABRIC ? "fabric" : "posix_fd", m->va);
    } else {
        m->state = MAPPING_FAILED;
        m->error = st;
        snprintf(m->detail, sizeof(m->detail), "%s", egm_last_error());
        cache->import_failures++;
        /* Out of the table so that the next acquire tries again. */
        if (!m->retired) {
            egm__hashmap_remove(cache->by_id, &m->id, sizeof(m->id));
            m->retired = 1;
        }
    }
    pthread_cond_broadcast(&cache->changed);

check:
    if (m->state == MAPPING_FAILED) {
        st = m->error;
        char detail[256];
        snprintf(detail, sizeof(detail), "%s", m->detail);
        dead = unref_locked(cache, m);
        pthread_mutex_unlock(&cache->lock);
        if (dead != NULL)
            mapping_free(cache, dead);
        return egm__set_error(st, "%s", detail);
    }
    if (m->retired) {
        /* Forgotten while we waited: this segment must not be used any more. */
        dead = unref_locked(cache, m);
        pthread_mutex_unlock(&cache->lock);
        if (dead != NULL)
            mapping_free(cache, dead);
        return retired_error(segment->id);
    }
    if (m->size != segment->size) {
        dead = unref_locked(cache, m);
        pthread_mutex_unlock(&cache->lock);
        if (dead != NULL)
            mapping_free(cache, dead);
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "nvlink: segment %s: descriptor size %" PRIu64
                              " differs from the mapped %" PRIu64,
                              egm__id_format(segment->id, text), segment->size, m->size);
    }
    pthread_mutex_unlock(&cache->lock);
    *mapping_p = m;
    return EGM_OK;
}

void egm__mapping_release(egm_mapping_cache_t *cache, egm_mapping_t *mapping)
{
    if (mapping == NULL)
        return;
    pthread_mutex_lock(&cache->lock);
    egm_mapping_t *dead = unref_locked(cache, mapping);
    pthread_mutex_unlock(&cache->lock);
    if (dead != NULL)
        mapping_free(cache, dead);
}

uint64_t egm__mapping_va(const egm_mapping_t *mapping)
{
    return mapping->va;
}

uint64_t egm__mapping_size(const egm_mapping_t *mapping)
{
    return mapping->size;
}

void egm__mapping_forget(egm_mapping_cache_t *cache, egm_id_t segment_id)
{
    egm_mapping_t *dead = NULL;

    pthread_mutex_lock(&cache->lock);
    /* The marker value only has to be non-NULL. A failed put (no memory)
     * still removes the mapping below; only re-import stays possible. */
    if (egm__hashmap_get(cache->retired, &segment_id, sizeof(segment_id)) == NULL &&
        egm__hashmap_put(cache->retired, &segment_id, sizeof(segment_id), cache, NULL) != EGM_OK)
        egm_warn("nvlink: cannot remember a retired segment: %s", egm_last_error());
    egm_mapping_t *m = egm__hashmap_remove(cache->by_id, &segment_id, sizeof(segment_id));
    if (m != NULL) {
        m->retired = 1;
        if (m->refs == 0) {
            if (m->state == MAPPING_READY)
                cache->live--;
            dead = m;
        }
    }
    pthread_mutex_unlock(&cache->lock);
    if (dead != NULL) {
        char text[EGM_ID_STRLEN];
        egm_debug("nvlink: unmapped retired segment %s", egm__id_format(segment_id, text));
        mapping_free(cache, dead);
    }
}

egm_status_t egm__mapping_cached_ids(egm_mapping_cache_t *cache, egm_id_t **ids_p, size_t *n_p)
{
    void *ids = NULL;
    pthread_mutex_lock(&cache->lock);
    egm_status_t st =
        egm__hashmap_copy_keys(cache->by_id, sizeof(egm_id_t), "nvlink mappings", &ids, n_p);
    pthread_mutex_unlock(&cache->lock);
    *ids_p = ids;
    return st;
}

int egm__mapping_known(egm_mapping_cache_t *cache, egm_id_t segment_id)
{
    pthread_mutex_lock(&cache->lock);
    int known = egm__hashmap_get(cache->by_id, &segment_id, sizeof(segment_id)) != NULL;
    pthread_mutex_unlock(&cache->lock);
    return known;
}

int egm__mapping_retired(egm_mapping_cache_t *cache, egm_id_t segment_id)
{
    pthread_mutex_lock(&cache->lock);
    int retired = egm__hashmap_get(cache->retired, &segment_id, sizeof(segment_id)) != NULL;
    pthread_mutex_unlock(&cache->lock);
    return retired;
}

void egm__mapping_cache_stats(egm_mapping_cache_t *cache, egm_mapping_stats_t *stats_p)
{
    memset(stats_p, 0, sizeof(*stats_p));
    if (cache == NULL)
        return;
    pthread_mutex_lock(&cache->lock);
    stats_p->imports_total = cache->imports_total;
    stats_p->mappings_live = cache->live;
    stats_p->import_failures = cache->import_failures;
    pthread_mutex_unlock(&cache->lock);
}
