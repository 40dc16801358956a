/* One VMM chunk: staged creation and a release that can be retried. */
#include "pool/vmm_chunk.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "cuda/driver.h"
#include "rpc/segment_desc.h"

egm_status_t egm__vmm_chunk_create(const egm_vmm_chunk_ctx_t *ctx, uint64_t size,
                                   egm_vmm_chunk_t *c)
{
    const egm_cuda_api_t *api = ctx->api;
    egm_status_t st;
    egm_cu_result_t rc;

    c->size = size;
    c->handle_types = ctx->prop->requested_handle_types;
    c->has_fabric = 0;
    c->base = NULL;
    rc = api->cuMemCreate(&c->handle, size, ctx->prop, 0);
    if ((st = egm__cuda_check(rc, "cuMemCreate")) != EGM_OK)
        goto err;
    c->stage = EGM_VMM_CHUNK_CREATED;
    rc = api->cuMemAddressReserve(&c->va, size, ctx->alignment, 0, 0);
    if ((st = egm__cuda_check(rc, "cuMemAddressReserve")) != EGM_OK)
        goto err;
    c->stage = EGM_VMM_CHUNK_RESERVED;
    rc = api->cuMemMap(c->va, size, 0, c->handle, 0);
    if ((st = egm__cuda_check(rc, "cuMemMap")) != EGM_OK)
        goto err;
    c->stage = EGM_VMM_CHUNK_MAPPED;
    rc = api->cuMemSetAccess(c->va, size, ctx->access, ctx->n_access);
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
    c->base = (void *)(uintptr_t)c->va;
    c->stage = EGM_VMM_CHUNK_READY;
    return EGM_OK;

err:;
    /* The creation error is what the caller needs; an unwind failure is
     * logged and leaves the chunk holding what remains. */
    char detail[256];
    snprintf(detail, sizeof(detail), "%s", egm_last_error());
    if (egm__vmm_chunk_release(api, c) != EGM_OK)
        egm_warn("vmm chunk: unwinding a failed creation: %s (kept for a later release)",
                 egm_last_error());
    return egm__set_error(st, "%s", detail);
}

egm_status_t egm__vmm_chunk_release(const egm_cuda_api_t *api, egm_vmm_chunk_t *c)
{
    egm_status_t st;
    if (c->stage >= EGM_VMM_CHUNK_MAPPED) {
        c->base = NULL;
        if ((st = egm__cuda_check(api->cuMemUnmap(c->va, c->size), "cuMemUnmap")) != EGM_OK)
            return st;
        c->stage = EGM_VMM_CHUNK_RESERVED;
    }
    if (c->stage == EGM_VMM_CHUNK_RESERVED) {
        st = egm__cuda_check(api->cuMemAddressFree(c->va, c->size), "cuMemAddressFree");
        if (st != EGM_OK)
            return st;
        c->va = 0;
        c->stage = EGM_VMM_CHUNK_CREATED;
    }
    if (c->stage == EGM_VMM_CHUNK_CREATED) {
        if ((st = egm__cuda_check(api->cuMemRelease(c->handle), "cuMemRelease")) != EGM_OK)
            return st;
        c->stage = EGM_VMM_CHUNK_EMPTY;
    }
    c->has_fabric = 0;
    return EGM_OK;
}

int egm__vmm_chunk_handle_kind(const egm_vmm_chunk_t *chunk)
{
    return chunk->has_fabric ? EGM_HANDLE_FABRIC : EGM_HANDLE_POSIX_FD;
}
