/* nvlink mapping cache: import -> reserve -> map -> grant access, once per
 * segment id. The mappings are a segment reference table (segref.h): forget
 * unlinks and retires the id, and the last reference (a copy in flight)
 * unmaps. See mapping_cache.h for the contract. */
#include "te/mapping_cache.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "cuda/driver.h"
#include "te/segref.h"
#include "te/te_int.h"

#define MAX_GRANT_DEVICES 64

typedef enum { MAPPING_IMPORTING, MAPPING_READY, MAPPING_FAILED } mapping_state_t;

struct egm_mapping {
    egm_segref_t ref;      /* ref.id: the segment's */
    uint64_t size;         /* the descriptor's */
    uint64_t map_size;     /* size rounded up to the granularity */
    egm_cu_deviceptr_t va; /* 0 until mapped */
    egm_cu_mem_handle_t handle;
    atomic_int state;   /* mapping_state_t; set under the cache lock */
    egm_status_t error; /* MAPPING_FAILED: why, for the waiters */
    char detail[256];
};

struct egm_mapping_cache {
    const egm_cuda_api_t *api;
    int timeout_ms;
    pthread_mutex_t lock;         /* import states and the counters */
    pthread_cond_t changed;       /* an import finished */
    egm_segref_table_t *mappings; /* of egm_mapping_t: importing or ready; retired ids */
    uint64_t imports_total;
    uint64_t import_failures;
    atomic_uint_fast64_t live; /* mapped, including retired ones still referenced */
    const char *token;         /* cluster token for fd brokers (the te's); NULL = none */
};

static void mapping_free(void *ctx, egm_segref_t *ref);

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
    if ((st = egm__segref_create("nvlink mapping", mapping_free, cache, &cache->mappings)) !=
        EGM_OK)
        goto err_cache;
    pthread_mutex_init(&cache->lock, NULL);
    pthread_cond_init(&cache->changed, NULL);
    *cache_p = cache;
    return EGM_OK;

err_cache:
    egm_free(cache);
    return st;
}

/* Undo a mapping in reverse order of import -> reserve -> map -> access.
 * Cleanup failures are logged and the rest still runs: nothing else could
 * release these later. */
/* What an import holds so far, for unmap(): the VA reservation is held when va != 0. */
#define HELD_HANDLE 1u /* the imported handle */
#define HELD_MAP 2u    /* the handle mapped at va */

static void unmap(egm_mapping_cache_t *cache, egm_cu_deviceptr_t va, uint64_t map_size,
                  egm_cu_mem_handle_t handle, unsigned held)
{
    const egm_cuda_api_t *api = cache->api;
    egm_cu_result_t rc;
    if ((held & HELD_MAP) && (rc = api->cuMemUnmap(va, map_size)) != EGM_CU_SUCCESS)
        egm_warn("nvlink: cuMemUnmap: %s", egm__cuda_error_name(rc));
    if (va != 0 && (rc = api->cuMemAddressFree(va, map_size)) != EGM_CU_SUCCESS)
        egm_warn("nvlink: cuMemAddressFree: %s", egm__cuda_error_name(rc));
    if ((held & HELD_HANDLE) && (rc = api->cuMemRelease(handle)) != EGM_CU_SUCCESS)
        egm_warn("nvlink: cuMemRelease: %s", egm__cuda_error_name(rc));
}

/* The segref table's free function: the last reference unmaps. */
static void mapping_free(void *ctx, egm_segref_t *ref)
{
    egm_mapping_cache_t *cache = ctx;
    egm_mapping_t *m = (egm_mapping_t *)ref;
    if (atomic_load(&m->state) == MAPPING_READY) {
        atomic_fetch_sub_explicit(&cache->live, 1, memory_order_relaxed);
        unmap(cache, m->va, m->map_size, m->handle, HELD_HANDLE | HELD_MAP);
    }
    egm_free(m);
}

void egm__mapping_cache_destroy(egm_mapping_cache_t *cache)
{
    if (cache == NULL)
        return;
    egm__segref_destroy(cache->mappings);
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
    unsigned held = HELD_HANDLE; /* err: is reached only once the handle is imported */

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
    held |= HELD_MAP;
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
    unmap(cache, va, map_size, handle, held);
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

/* First use: link an IMPORTING mapping so that concurrent users (a prewarm
 * thread and a Get) wait for this import instead of repeating it, then import
 * outside every lock. A failed import is unlinked, so that the next acquire
 * tries again. EGM_ERR_SEGMENT_EXISTS: another thread linked one first. */
static egm_status_t import_first(egm_mapping_cache_t *cache, const egm_segment_desc_t *segment,
                                 egm_mapping_t **mapping_p, int *imported_p)
{
    char text[EGM_ID_STRLEN];
    egm_mapping_t *m = egm_calloc(1, sizeof(*m), "te.mapping");
    if (m == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "nvlink: out of memory");
    m->ref.id = segment->id;
    m->size = segment->size;
    atomic_init(&m->state, MAPPING_IMPORTING);
    egm_status_t st = egm__segref_link(cache->mappings, &m->ref, 1);
    if (st != EGM_OK) {
        egm_free(m);
        return st == EGM_ERR_SEGMENT_NOT_FOUND ? retired_error(segment->id) : st;
    }

    st = import_and_map(cache, segment, m);
    /* Failed: out of the table before anyone sees it fail, so that a later
     * acquire imports afresh; the waiters hold their references. */
    if (st != EGM_OK)
        egm__segref_unlink(cache->mappings, segment->id, 0);

    pthread_mutex_lock(&cache->lock);
    if (st == EGM_OK) {
        cache->imports_total++;
        atomic_fetch_add_explicit(&cache->live, 1, memory_order_relaxed);
        atomic_store(&m->state, MAPPING_READY);
        if (imported_p != NULL)
            *imported_p = 1;
        egm_debug("nvlink: mapped segment %s (%" PRIu64 " bytes, %s) at 0x%" PRIx64,
                  egm__id_format(segment->id, text), segment->size,
                  segment->handle_kind == EGM_HANDLE_FABRIC ? "fabric" : "posix_fd", m->va);
    } else {
        m->error = st;
        snprintf(m->detail, sizeof(m->detail), "%s", egm_last_error());
        cache->import_failures++;
        atomic_store(&m->state, MAPPING_FAILED);
    }
    pthread_cond_broadcast(&cache->changed);
    pthread_mutex_unlock(&cache->lock);
    *mapping_p = m;
    return EGM_OK;
}

egm_status_t egm__mapping_get(egm_mapping_cache_t *cache, const egm_segment_desc_t *segment,
                              egm_mapping_t **mapping_p, int *imported_p)
{
    egm_status_t st;
    char text[EGM_ID_STRLEN];
    egm_mapping_t *m;

    if (imported_p != NULL)
        *imported_p = 0;
    if (segment->handle_kind != EGM_HANDLE_POSIX_FD && segment->handle_kind != EGM_HANDLE_FABRIC)
        return egm__set_error(EGM_ERR_NOT_SUPPORTED,
                              "nvlink: segment %s is not CUDA VMM memory (handle kind %d)",
                              egm__id_format(segment->id, text), (int)segment->handle_kind);

    while ((m = (egm_mapping_t *)egm__segref_get(cache->mappings, segment->id)) == NULL) {
        st = import_first(cache, segment, &m, imported_p);
        if (st == EGM_OK)
            break;
        if (st != EGM_ERR_SEGMENT_EXISTS)
            return st;
    }
    /* Ready is the common case: no lock. Else wait for the importer. */
    if (atomic_load(&m->state) == MAPPING_IMPORTING) {
        pthread_mutex_lock(&cache->lock);
        while (atomic_load(&m->state) == MAPPING_IMPORTING)
            pthread_cond_wait(&cache->changed, &cache->lock);
        pthread_mutex_unlock(&cache->lock);
    }

    if (atomic_load(&m->state) == MAPPING_FAILED) {
        st = m->error;
        char detail[256];
        snprintf(detail, sizeof(detail), "%s", m->detail);
        egm__segref_put(cache->mappings, &m->ref);
        return egm__set_error(st, "%s", detail);
    }
    if (!egm__segref_linked(&m->ref)) {
        /* Forgotten while we waited: this segment must not be used any more. */
        egm__segref_put(cache->mappings, &m->ref);
        return retired_error(segment->id);
    }
    st = egm__segref_check_size(cache->mappings, &m->ref, "nvlink", segment->size, m->size);
    if (st != EGM_OK)
        return st;
    *mapping_p = m;
    return EGM_OK;
}

void egm__mapping_put(egm_mapping_cache_t *cache, egm_mapping_t *mapping)
{
    if (mapping != NULL)
        egm__segref_put(cache->mappings, &mapping->ref);
}

uint64_t egm__mapping_va(const egm_mapping_t *mapping)
{
    return mapping->va;
}

uint64_t egm__mapping_size(const egm_mapping_t *mapping)
{
    return mapping->size;
}

void egm__mapping_unlink(egm_mapping_cache_t *cache, egm_id_t segment_id)
{
    egm__segref_unlink(cache->mappings, segment_id, EGM_SEGREF_RETIRE);
}

egm_status_t egm__mapping_cached_ids(egm_mapping_cache_t *cache, egm_id_t **ids_p, size_t *n_p)
{
    return egm__segref_ids(cache->mappings, ids_p, n_p);
}

int egm__mapping_known(egm_mapping_cache_t *cache, egm_id_t segment_id)
{
    return egm__segref_has(cache->mappings, segment_id);
}

int egm__mapping_retired(egm_mapping_cache_t *cache, egm_id_t segment_id)
{
    return egm__segref_retired(cache->mappings, segment_id);
}

void egm__mapping_cache_stats(egm_mapping_cache_t *cache, egm_mapping_stats_t *stats_p)
{
    memset(stats_p, 0, sizeof(*stats_p));
    if (cache == NULL)
        return;
    pthread_mutex_lock(&cache->lock);
    stats_p->imports_total = cache->imports_total;
    stats_p->import_failures = cache->import_failures;
    pthread_mutex_unlock(&cache->lock);
    stats_p->mappings_live = atomic_load_explicit(&cache->live, memory_order_relaxed);
}
