/* VMM pool: one cuMemCreate allocation per chunk, mapped into this process and
 * exportable to consumers. Creation unwinds in reverse on any failure. */
#include "pool/vmm_pool.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "cuda/driver.h"
#include "te/segment.h"

#define MAX_ACCESS 65 /* every GPU, plus the host */

struct egm_vmm_pool {
    const egm_cuda_api_t *api;
    egm_vmm_pool_params_t params;
    egm_cu_mem_allocation_prop_t prop;
    uint64_t granularity;
    egm_cu_mem_access_desc_t access[MAX_ACCESS];
    size_t n_access;
    egm_vmm_chunk_t *chunks;
    size_t count;
};

static const char *location_name(const egm_vmm_pool_params_t *p)
{
    return p->location == EGM_VMM_HOST_NUMA ? "host NUMA node" : "GPU";
}

/* Chunk teardown in reverse order of creation. `stage`: how far it got
 * (1 created, 2 reserved, 3 mapped). Failures are logged: nothing could
 * release these later. */
static void chunk_unwind(egm_vmm_pool_t *pool, egm_vmm_chunk_t *c, egm_cu_deviceptr_t va, int stage)
{
    const egm_cuda_api_t *api = pool->api;
    egm_cu_result_t rc;
    if (stage >= 3 && (rc = api->cuMemUnmap(va, c->size)) != EGM_CU_SUCCESS)
        egm_warn("vmm pool: cuMemUnmap: %s", egm__cuda_error_name(rc));
    if (stage >= 2 && (rc = api->cuMemAddressFree(va, c->size)) != EGM_CU_SUCCESS)
        egm_warn("vmm pool: cuMemAddressFree: %s", egm__cuda_error_name(rc));
    if (stage >= 1 && (rc = api->cuMemRelease(c->handle)) != EGM_CU_SUCCESS)
        egm_warn("vmm pool: cuMemRelease: %s", egm__cuda_error_name(rc));
    memset(c, 0, sizeof(*c));
}

static egm_status_t chunk_create(egm_vmm_pool_t *pool, uint64_t size, egm_vmm_chunk_t *c)
{
    const egm_cuda_api_t *api = pool->api;
    egm_status_t st;
    egm_cu_result_t rc;
    egm_cu_deviceptr_t va = 0;
    int stage = 0;

    memset(c, 0, sizeof(*c));
    c->size = size;
    c->handle_types = pool->prop.requested_handle_types;
    c->device = pool->params.location == EGM_VMM_DEVICE ? pool->params.location_id : -1;

    rc = api->cuMemCreate(&c->handle, size, &pool->prop, 0);
    if ((st = egm__cuda_check(rc, "cuMemCreate")) != EGM_OK)
        goto err;
    stage = 1;
    rc = api->cuMemAddressReserve(&va, size, pool->granularity, 0, 0);
    if ((st = egm__cuda_check(rc, "cuMemAddressReserve")) != EGM_OK)
        goto err;
    stage = 2;
    rc = api->cuMemMap(va, size, 0, c->handle, 0);
    if ((st = egm__cuda_check(rc, "cuMemMap")) != EGM_OK)
        goto err;
    stage = 3;
    rc = api->cuMemSetAccess(va, size, pool->access, pool->n_access);
    if ((st = egm__cuda_check(rc, "cuMemSetAccess")) != EGM_OK)
        goto err;
    if (c->handle_types & EGM_CU_MEM_HANDLE_TYPE_FABRIC) {
        egm_cu_fabric_handle_t fabric;
        rc =
            api->cuMemExportToShareableHandle(&fabric, c->handle, EGM_CU_MEM_HANDLE_TYPE_FABRIC, 0);
        if ((st = egm__cuda_check(rc, "cuMemExportToShareableHandle(fabric)")) != EGM_OK)
            goto err;
        memcpy(c->fabric_handle, fabric.data, sizeof(c->fabric_handle));
        c->has_fabric = 1;
    }
    c->base = (void *)(uintptr_t)va;
    return EGM_OK;

err:
    chunk_unwind(pool, c, va, stage);
    return st;
}

/* Allocation properties and granularity for the requested handle types. */
static egm_status_t prepare(egm_vmm_pool_t *pool, int handle_types)
{
    memset(&pool->prop, 0, sizeof(pool->prop));
    pool->prop.type = EGM_CU_MEM_ALLOCATION_TYPE_PINNED;
    pool->prop.requested_handle_types = handle_types;
    pool->prop.location.type = pool->params.location == EGM_VMM_HOST_NUMA
                                   ? EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA
                                   : EGM_CU_MEM_LOCATION_TYPE_DEVICE;
    pool->prop.location.id = pool->params.location_id;
    size_t gran = 0;
    egm_cu_result_t rc = pool->api->cuMemGetAllocationGranularity(
        &gran, &pool->prop, EGM_CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    egm_status_t st = egm__cuda_check(rc, "cuMemGetAllocationGranularity");
    if (st != EGM_OK)
        return st;
    if (gran == 0)
        return egm__set_error(EGM_ERR_INTERNAL, "vmm pool: the driver reports granularity 0");
    pool->granularity = gran;
    return EGM_OK;
}

static int handle_types_of(egm_vmm_handles_t handles)
{
    switch (handles) {
    case EGM_VMM_HANDLES_FABRIC:
        return EGM_CU_MEM_HANDLE_TYPE_FABRIC;
    case EGM_VMM_HANDLES_POSIX_FD:
        return EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    case EGM_VMM_HANDLES_AUTO:
    case EGM_VMM_HANDLES_BOTH:
        break;
    }
    return EGM_CU_MEM_HANDLE_TYPE_FABRIC | EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

static egm_status_t create_chunks(egm_vmm_pool_t *pool)
{
    egm_status_t st;
    const egm_vmm_pool_params_t *p = &pool->params;
    uint64_t g = pool->granularity;

    uint64_t total = p->total / g * g;
    uint64_t max_chunk = p->max_chunk / g * g;
    if (total == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "global_segment_size: %" PRIu64
                              " bytes is below one allocation granule (%" PRIu64 " bytes)",
                              p->total, g);
    if (max_chunk == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "max_mr_size: %" PRIu64
                              " bytes is below one allocation granule (%" PRIu64 " bytes)",
                              p->max_chunk, g);
    if (total != p->total)
        egm_info("vmm pool: global_segment_size %" PRIu64 " rounded down to %" PRIu64
                 " (granularity %" PRIu64 ")",
                 p->total, total, g);

    uint64_t n = total / max_chunk + (total % max_chunk != 0);
    pool->chunks = egm_calloc(n, sizeof(*pool->chunks), "pool.vmm.chunks");
    if (pool->chunks == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "vmm pool: out of memory for %" PRIu64 " chunks",
                              n);
    uint64_t left = total;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t size = left < max_chunk ? left : max_chunk;
        st = chunk_create(pool, size, &pool->chunks[i]);
        /* auto: a driver without fabric support (or without an IMEX channel)
         * refuses the first chunk; the pool then serves this host only. */
        if (st == EGM_ERR_NOT_SUPPORTED && i == 0 && p->handles == EGM_VMM_HANDLES_AUTO &&
            (pool->prop.requested_handle_types & EGM_CU_MEM_HANDLE_TYPE_FABRIC)) {
            egm_warn("vmm pool: fabric handles refused (%s): using posix_fd handles, so the pool "
                     "serves consumers on this host only",
                     egm_last_error());
            if ((st = prepare(pool, EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) != EGM_OK)
                return st;
            if (pool->granularity != g) {
                /* The plan was cut for another granularity: start over. */
                egm_free(pool->chunks);
                pool->chunks = NULL;
                return create_chunks(pool);
            }
            st = chunk_create(pool, size, &pool->chunks[i]);
        }
        if (st != EGM_OK) {
            char detail[256];
            snprintf(detail, sizeof(detail), "%s", egm_last_error());
            return egm__set_error(
                st, "vmm pool: chunk %" PRIu64 " of %" PRIu64 " (%" PRIu64 " bytes on %s %d): %s",
                i, n, size, location_name(p), p->location_id, detail);
        }
        pool->count++;
        left -= size;
    }
    return EGM_OK;
}

egm_status_t egm__vmm_pool_create(const egm_vmm_pool_params_t *params, egm_vmm_pool_t **pool_p)
{
    egm_status_t st;
    const egm_cuda_api_t *api;

    if (params == NULL || pool_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "vmm pool: missing parameters");
    if (params->location != EGM_VMM_HOST_NUMA && params->location != EGM_VMM_DEVICE)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "pool_memory: location %d is neither "
                              "host_numa nor device",
                              (int)params->location);
    if (params->handles < EGM_VMM_HANDLES_AUTO || params->handles > EGM_VMM_HANDLES_BOTH)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "egm_handle_type: %d is not "
                              "auto|fabric|posix_fd|both",
                              (int)params->handles);
    if (params->location_id < 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "pool_location: %d is negative",
                              params->location_id);
    if ((st = egm__cuda_load(&api)) != EGM_OK)
        return st;
    int ndev = egm__cuda_device_count();
    if (ndev <= 0)
        return egm__set_error(EGM_ERR_NO_CUDA, "vmm pool: no CUDA device visible");
    if (ndev > MAX_ACCESS - 1)
        ndev = MAX_ACCESS - 1;
    if (params->location == EGM_VMM_DEVICE && params->location_id >= ndev)
        return egm__set_error(EGM_ERR_INVALID_ARG, "pool_location: GPU %d of %d visible",
                              params->location_id, ndev);

    egm_vmm_pool_t *pool = egm_calloc(1, sizeof(*pool), "pool.vmm");
    if (pool == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "vmm pool: out of memory");
    pool->api = api;
    pool->params = *params;
    /* Every local GPU copies to and from the pool; the CPU too (tcp server,
     * own memcpy) when the memory is host DRAM. */
    for (int d = 0; d < ndev; d++)
        pool->access[pool->n_access++] = (egm_cu_mem_access_desc_t){
            .location = {.type = EGM_CU_MEM_LOCATION_TYPE_DEVICE, .id = d},
            .flags = EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (params->location == EGM_VMM_HOST_NUMA)
        pool->access[pool->n_access++] = (egm_cu_mem_access_desc_t){
            .location = {.type = EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, .id = params->location_id},
            .flags = EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

    /* The VMM calls need no current context (checked on the H200): none is
     * made, so a pool on host memory creates no context on any GPU. */
    st = prepare(pool, handle_types_of(params->handles));
    if (st == EGM_OK)
        st = create_chunks(pool);
    if (st != EGM_OK) {
        egm_error("%s", egm_last_error());
        egm__vmm_pool_destroy(pool);
        return st;
    }
    egm_info(
        "vmm pool: %zu chunk(s), %" PRIu64 " bytes on %s %d (%s handles)", pool->count,
        params->total / pool->granularity * pool->granularity, location_name(params),
        params->location_id,
        (pool->prop.requested_handle_types & EGM_CU_MEM_HANDLE_TYPE_FABRIC)
            ? ((pool->prop.requested_handle_types & EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                   ? "fabric+posix_fd"
                   : "fabric")
            : "posix_fd");
    *pool_p = pool;
    return EGM_OK;
}

void egm__vmm_pool_destroy(egm_vmm_pool_t *pool)
{
    if (pool == NULL)
        return;
    while (pool->count > 0) {
        egm_vmm_chunk_t *c = &pool->chunks[--pool->count];
        chunk_unwind(pool, c, (egm_cu_deviceptr_t)(uintptr_t)c->base, 3);
    }
    egm_free(pool->chunks);
    egm_free(pool);
}

size_t egm__vmm_pool_chunk_count(const egm_vmm_pool_t *pool)
{
    return pool ? pool->count : 0;
}

const egm_vmm_chunk_t *egm__vmm_pool_chunk(const egm_vmm_pool_t *pool, size_t index)
{
    if (pool == NULL || index >= pool->count)
        return NULL;
    return &pool->chunks[index];
}

uint64_t egm__vmm_pool_granularity(const egm_vmm_pool_t *pool)
{
    return pool ? pool->granularity : 0;
}

int egm__vmm_chunk_handle_kind(const egm_vmm_chunk_t *chunk)
{
    return chunk->has_fabric ? EGM_HANDLE_FABRIC : EGM_HANDLE_POSIX_FD;
}

egm_status_t egm__vmm_pool_export_fd(const egm_vmm_pool_t *pool, size_t index, int *fd_p)
{
    const egm_vmm_chunk_t *c = egm__vmm_pool_chunk(pool, index);
    if (c == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "vmm pool: no chunk %zu", index);
    if (!(c->handle_types & EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return egm__set_error(EGM_ERR_NOT_SUPPORTED,
                              "vmm pool: chunk %zu was created without posix_fd handles", index);
    int fd = -1;
    egm_cu_result_t rc = pool->api->cuMemExportToShareableHandle(
        &fd, c->handle, EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    egm_status_t st = egm__cuda_check(rc, "cuMemExportToShareableHandle(posix_fd)");
    if (st != EGM_OK)
        return st;
    *fd_p = fd;
    return EGM_OK;
}
