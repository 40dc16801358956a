/* VMM pool: provider capacity as CUDA VMM allocations (cuMemCreate), in host
 * DRAM of one or more NUMA nodes (HOST_NUMA; EGM on Grace) or in one GPU's HBM
 * (DEVICE). The capacity is cut by the planner (pool/egm_plan.h): one chunk =
 * one allocation = one exportable handle = one segment, no chunk crossing a
 * node. Each chunk is mapped into this process (access for every local GPU,
 * and for the host when it is HOST_NUMA memory) so that the provider's own
 * servers and copies can use it.
 *
 * Setup allocates the chunks on several threads with progress; a failure rolls
 * back in reverse. Release is transactional per step (pool/vmm_chunk.h): what
 * a failed step could not release stays owned by the pool, and the next
 * release retries it. */
#ifndef EGM_POOL_VMM_POOL_H
#define EGM_POOL_VMM_POOL_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "cuda/cuda_api.h"
#include "pool/egm_plan.h"
#include "pool/vmm_chunk.h"

typedef enum {
    EGM_VMM_HOST_NUMA = 0, /* host memory of the NUMA nodes `locations` */
    EGM_VMM_DEVICE = 1,    /* memory of GPU `locations[0]` */
} egm_vmm_location_t;

typedef enum {
    EGM_VMM_HANDLES_AUTO = 0,     /* fabric + posix_fd; posix_fd alone (warning) if refused */
    EGM_VMM_HANDLES_FABRIC = 1,   /* fabric only */
    EGM_VMM_HANDLES_POSIX_FD = 2, /* posix_fd only (this host) */
    EGM_VMM_HANDLES_BOTH = 3,     /* fabric + posix_fd, both required */
} egm_vmm_handles_t;

/* Setup progress: bytes and chunks allocated so far. Called from the
 * allocating threads, one call at a time, after each chunk. */
typedef void (*egm_vmm_progress_fn)(void *arg, uint64_t done_bytes, uint64_t total_bytes,
                                    size_t done_chunks, size_t total_chunks);

typedef struct {
    egm_vmm_location_t location;
    /* HOST_NUMA: node ids, sorted and unique; DEVICE: exactly one ordinal. */
    const int *locations;
    size_t location_count;
    egm_vmm_handles_t handles;
    uint64_t total;               /* global_segment_size over all locations */
    uint64_t max_chunk;           /* max_mr_size */
    uint64_t allocator_alignment; /* the master allocator's; 0 = none */
    unsigned threads;             /* allocating threads; 0 or 1 = the caller's only */
    const char *locations_key;    /* the config key naming locations, for errors */
    int allow_overcommit;         /* HOST_NUMA: accept more than the memory available */
    egm_vmm_progress_fn progress; /* optional */
    void *progress_arg;
} egm_vmm_pool_params_t;

typedef struct egm_vmm_pool egm_vmm_pool_t;

/* The plan a creation would follow (free with egm__egm_plan_free): validates
 * the parameters, asks the driver for every location's granularity and checks
 * the plan against the memory available, and allocates nothing. Errors as
 * egm__vmm_pool_create's validation. */
egm_status_t egm__vmm_pool_plan(const egm_vmm_pool_params_t *params, egm_egm_plan_t **plan_p);

/* Plans and creates every chunk. Errors: no driver -> EGM_ERR_NO_CUDA; bad
 * parameters -> INVALID_ARG/CONFIG naming the key (pool_memory,
 * pool_location, egm_numa_nodes, egm_handle_type, global_segment_size,
 * max_mr_size); HOST_NUMA memory above what the host (MemAvailable) or a
 * node's share above what the node can give (pool/pool_limits.h), unless
 * allow_overcommit -> EGM_ERR_CONFIG naming global_segment_size, before
 * anything is allocated (DEVICE memory is not checked: the driver refuses it
 * at the chunk that does not fit, and the pool rolls back; CUDA handles hold
 * no file descriptor, so the descriptor limit is not checked either); a
 * driver failure -> its status, with the CUDA call, error
 * name, chunk and location in egm_last_error(). On failure everything is
 * rolled back in reverse and *pool_p is NULL, unless a rollback step failed
 * too: then *pool_p is the pool holding what could not be released, to be
 * retried with egm__vmm_pool_release and freed with egm__vmm_pool_destroy. */
egm_status_t egm__vmm_pool_create(const egm_vmm_pool_params_t *params, egm_vmm_pool_t **pool_p);
/* Releases every chunk in reverse (unmap -> free the range -> release the
 * handle). Segments must have been withdrawn first. A step that fails keeps
 * its chunk (egm__vmm_pool_held counts it) and the first error is answered;
 * calling again retries from there. EGM_OK once the pool holds nothing. */
egm_status_t egm__vmm_pool_release(egm_vmm_pool_t *pool);
/* Releases, then frees the pool. Should a release step still fail, what it
 * holds is abandoned to the process's exit (logged): never freed while it may
 * be mapped. NULL is a no-op. */
void egm__vmm_pool_destroy(egm_vmm_pool_t *pool);

/* Frees the pool's bookkeeping and leaves every CUDA resource it holds to the
 * process's exit (for memory that may still be named elsewhere). NULL is a
 * no-op. */
void egm__vmm_pool_forget(egm_vmm_pool_t *pool);

/* Chunks created (the plan's count once creation succeeded); chunk i is READY
 * until the pool is released. */
size_t egm__vmm_pool_chunk_count(const egm_vmm_pool_t *pool);
const egm_vmm_chunk_t *egm__vmm_pool_chunk(const egm_vmm_pool_t *pool, size_t index);
/* The plan followed. */
const egm_egm_plan_t *egm__vmm_pool_plan_of(const egm_vmm_pool_t *pool);
/* Allocation granularity of the first location. */
uint64_t egm__vmm_pool_granularity(const egm_vmm_pool_t *pool);
/* Chunks still owning CUDA resources after a release was asked for (0 when
 * none was, or when everything was released). */
size_t egm__vmm_pool_held(const egm_vmm_pool_t *pool);
/* Release steps that failed over the pool's life. */
uint64_t egm__vmm_pool_cleanup_failures(const egm_vmm_pool_t *pool);
/* Wall time of the creation (planning and allocation). */
double egm__vmm_pool_setup_seconds(const egm_vmm_pool_t *pool);
/* A fresh POSIX descriptor for chunk `index` (the caller closes it). */
egm_status_t egm__vmm_pool_export_fd(const egm_vmm_pool_t *pool, size_t index, int *fd_p);

#endif
