/* One VMM chunk's life, step by step (DESIGN.md section 5): create the
 * allocation -> reserve an address range -> map -> grant access -> export
 * fabric. The stage reached is kept in the chunk, so that a release that fails
 * half way keeps ownership of what it could not release and a later call
 * continues from there (never freeing an address that is still mapped). */
#ifndef EGM_POOL_VMM_CHUNK_H
#define EGM_POOL_VMM_CHUNK_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "cuda/cuda_api.h"

typedef enum {
    EGM_VMM_CHUNK_EMPTY = 0,    /* owns nothing */
    EGM_VMM_CHUNK_CREATED = 1,  /* owns the allocation handle */
    EGM_VMM_CHUNK_RESERVED = 2, /* ... and an address range */
    EGM_VMM_CHUNK_MAPPED = 3,   /* ... mapped there */
    EGM_VMM_CHUNK_READY = 4,    /* access granted, fabric exported: servable */
} egm_vmm_chunk_stage_t;

typedef struct {
    void *base; /* this process's mapping (READY) */
    uint64_t size;
    egm_cu_mem_handle_t handle; /* the pool's; valid from CREATED */
    int handle_types;           /* EGM_CU_MEM_HANDLE_TYPE_* bits the allocation has */
    int has_fabric;             /* fabric_handle holds the exported bytes */
    unsigned char fabric_handle[EGM_CU_FABRIC_HANDLE_SIZE];
    int device;   /* DEVICE: the ordinal; HOST_NUMA: -1 (CPU may touch base) */
    int location; /* NUMA node id (HOST_NUMA) or device ordinal (DEVICE) */
    egm_vmm_chunk_stage_t stage;
    egm_cu_deviceptr_t va; /* the reserved range (from RESERVED) */
} egm_vmm_chunk_t;

/* What every chunk of one location shares. */
typedef struct {
    const egm_cuda_api_t *api;
    const egm_cu_mem_allocation_prop_t *prop;
    uint64_t alignment; /* of the reserved range */
    const egm_cu_mem_access_desc_t *access;
    size_t n_access;
} egm_vmm_chunk_ctx_t;

/* Takes an EMPTY chunk to READY. On failure answers the CUDA error (its name
 * and the failing call in egm_last_error()) after unwinding; should an unwind
 * step fail too, the chunk keeps the stage it could not undo and the caller
 * must release it later. */
egm_status_t egm__vmm_chunk_create(const egm_vmm_chunk_ctx_t *ctx, uint64_t size,
                                   egm_vmm_chunk_t *chunk);
/* Undoes the chunk's stages in reverse (unmap -> free the range -> release the
 * handle) down to EMPTY. Stops at the first step that fails, answering its
 * CUDA error and keeping the stage, so that calling again retries it. */
egm_status_t egm__vmm_chunk_release(const egm_cuda_api_t *api, egm_vmm_chunk_t *chunk);
/* The handle kind a segment of this chunk should be exposed as:
 * EGM_HANDLE_FABRIC when the chunk has one, else EGM_HANDLE_POSIX_FD (as an
 * int: rpc/segment_desc.h's egm_handle_kind_t). */
int egm__vmm_chunk_handle_kind(const egm_vmm_chunk_t *chunk);

#endif
