/* VMM pool: provider capacity as CUDA VMM allocations (cuMemCreate), in host
 * DRAM of one NUMA node (HOST_NUMA; EGM on Grace) or in one GPU's HBM (DEVICE).
 * One chunk = one allocation = one exportable handle = one segment. Each chunk
 * is mapped into this process (access for every local GPU, and for the host
 * when it is HOST_NUMA memory) so that the provider's own servers and copies
 * can use it. */
#ifndef EGM_POOL_VMM_POOL_H
#define EGM_POOL_VMM_POOL_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "cuda/cuda_api.h"

typedef enum {
    EGM_VMM_HOST_NUMA = 0, /* host memory of NUMA node `location_id` */
    EGM_VMM_DEVICE = 1,    /* memory of GPU `location_id` */
} egm_vmm_location_t;

typedef enum {
    EGM_VMM_HANDLES_AUTO = 0,     /* fabric + posix_fd; posix_fd alone (warning) if refused */
    EGM_VMM_HANDLES_FABRIC = 1,   /* fabric only */
    EGM_VMM_HANDLES_POSIX_FD = 2, /* posix_fd only (this host) */
    EGM_VMM_HANDLES_BOTH = 3,     /* fabric + posix_fd, both required */
} egm_vmm_handles_t;

typedef struct {
    egm_vmm_location_t location;
    int location_id; /* NUMA node id or device ordinal */
    egm_vmm_handles_t handles;
    uint64_t total;     /* rounded down to the granularity */
    uint64_t max_chunk; /* rounded down to the granularity; >= one granule */
} egm_vmm_pool_params_t;

typedef struct {
    void *base; /* this process's mapping */
    uint64_t size;
    egm_cu_mem_handle_t handle; /* the pool's; valid until destroy */
    int handle_types;           /* EGM_CU_MEM_HANDLE_TYPE_* bits the allocation has */
    int has_fabric;             /* fabric_handle holds the exported bytes */
    unsigned char fabric_handle[EGM_CU_FABRIC_HANDLE_SIZE];
    int device; /* DEVICE: the ordinal; HOST_NUMA: -1 (CPU may touch base) */
} egm_vmm_chunk_t;

typedef struct egm_vmm_pool egm_vmm_pool_t;

/* Creates every chunk (create -> reserve -> map -> set access -> export
 * fabric); any failure unwinds what was done and answers the CUDA error (name
 * in egm_last_error()). No driver -> EGM_ERR_NO_CUDA; total below one granule
 * -> INVALID_ARG naming global_segment_size; max_chunk below one granule ->
 * naming max_mr_size. */
egm_status_t egm__vmm_pool_create(const egm_vmm_pool_params_t *params, egm_vmm_pool_t **pool_p);
/* Unmaps, frees the address ranges and releases the allocations, in reverse.
 * Segments must have been withdrawn (consumers' imports keep their memory
 * alive on their side). NULL is a no-op. */
void egm__vmm_pool_destroy(egm_vmm_pool_t *pool);
size_t egm__vmm_pool_chunk_count(const egm_vmm_pool_t *pool);
const egm_vmm_chunk_t *egm__vmm_pool_chunk(const egm_vmm_pool_t *pool, size_t index);
/* Allocation granularity the pool used. */
uint64_t egm__vmm_pool_granularity(const egm_vmm_pool_t *pool);
/* The handle kind a segment of this chunk should be exposed as:
 * EGM_HANDLE_FABRIC when the chunk has one, else EGM_HANDLE_POSIX_FD (as an
 * int: te/segment.h's egm_handle_kind_t). */
int egm__vmm_chunk_handle_kind(const egm_vmm_chunk_t *chunk);
/* A fresh POSIX descriptor for the chunk (the caller closes it). */
egm_status_t egm__vmm_pool_export_fd(const egm_vmm_pool_t *pool, size_t index, int *fd_p);

#endif
