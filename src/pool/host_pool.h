/* Host pool: provider capacity in CPU memory, as memfd-backed chunks (one chunk
 * = one segment), shareable with consumers on the same host. */
#ifndef EGM_POOL_HOST_POOL_H
#define EGM_POOL_HOST_POOL_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

typedef struct {
    void *base;
    uint64_t size;
    int memfd;
} egm_pool_chunk_t;

typedef struct egm_host_pool egm_host_pool_t;

/* Whether the machine can hold such a pool (pool/pool_limits.h), allocating
 * nothing: total 0 or too small, or max_chunk not a multiple of 4 KiB ->
 * EGM_ERR_INVALID_ARG naming the key; more than MemAvailable -> EGM_ERR_CONFIG
 * unless allow_overcommit (then a warning); more chunks (one memfd each) than
 * RLIMIT_NOFILE allows, after raising the soft limit to the hard one ->
 * EGM_ERR_CONFIG whatever allow_overcommit says. *chunks_p (optional): the
 * chunk count. */
egm_status_t egm__host_pool_check(uint64_t total, uint64_t max_chunk, int allow_overcommit,
                                  uint64_t *chunks_p);
/* total rounded down to 4 KiB; chunks of at most max_chunk (a multiple of 4 KiB).
 * Checked first with egm__host_pool_check (its errors); nothing is allocated
 * when it refuses. */
egm_status_t egm__host_pool_create(uint64_t total, uint64_t max_chunk, int allow_overcommit,
                                   egm_host_pool_t **pool_p);
void egm__host_pool_destroy(egm_host_pool_t *pool);
size_t egm__host_pool_chunk_count(const egm_host_pool_t *pool);
const egm_pool_chunk_t *egm__host_pool_chunk(const egm_host_pool_t *pool, size_t index);

#endif
