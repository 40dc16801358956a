/* Host pool: provider capacity as memfd-backed shared mappings, one memfd per
 * chunk so that each chunk can be handed to a consumer as one segment. */
#include "pool/host_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "pool/pool_limits.h"

#define POOL_ALIGN 4096u

struct egm_host_pool {
    egm_pool_chunk_t *chunks;
    size_t count;
};

static void chunk_release(egm_pool_chunk_t *chunk)
{
    if (chunk->base != NULL && chunk->base != MAP_FAILED)
        munmap(chunk->base, chunk->size);
    if (chunk->memfd >= 0)
        close(chunk->memfd);
    chunk->base = NULL;
    chunk->memfd = -1;
}

static egm_status_t chunk_create(uint64_t size, egm_pool_chunk_t *chunk)
{
    egm_status_t st;

    chunk->base = NULL;
    chunk->size = size;
    chunk->memfd = memfd_create("egmstore-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (chunk->memfd < 0)
        return egm__set_error(egm__status_from_errno(errno), "host pool: memfd_create: %s",
                              strerror(errno));
    if (ftruncate(chunk->memfd, (off_t)size) != 0) {
        st = egm__set_error(egm__status_from_errno(errno), "host pool: ftruncate(%" PRIu64 "): %s",
                            size, strerror(errno));
        goto err_close;
    }
    /* Consumers receive this fd: sealing the size means none of them can
     * truncate the pool's pages away (which would SIGBUS every user). */
    if (fcntl(chunk->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        st = egm__set_error(egm__status_from_errno(errno), "host pool: seal memfd: %s",
                            strerror(errno));
        goto err_close;
    }
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, chunk->memfd, 0);
    if (base == MAP_FAILED) {
        st = egm__set_error(egm__status_from_errno(errno), "host pool: mmap(%" PRIu64 "): %s", size,
                            strerror(errno));
        goto err_close;
    }
    chunk->base = base;
    return EGM_OK;

err_close:
    close(chunk->memfd);
    chunk->memfd = -1;
    return st;
}

egm_status_t egm__host_pool_check(uint64_t total, uint64_t max_chunk, int allow_overcommit,
                                  uint64_t *chunks_p)
{
    uint64_t rounded = total / POOL_ALIGN * POOL_ALIGN;
    if (rounded == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "global_segment_size: %" PRIu64 " bytes is below the 4 KiB minimum",
                              total);
    if (max_chunk < POOL_ALIGN || max_chunk % POOL_ALIGN != 0)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "max_mr_size: %" PRIu64 " is not a non-zero multiple of 4 KiB",
                              max_chunk);
    uint64_t n = rounded / max_chunk + (rounded % max_chunk != 0);

    /* memfd pages are taken as they are written: without this check a
     * capacity the host does not have is accepted and fails when it fills. */
    char msg[384];
    egm_pool_memory_check_t mem = {.requested = rounded,
                                   .available = egm__pool_limits_host_available(),
                                   .node = -1,
                                   .allow_overcommit = allow_overcommit};
    egm_status_t st = egm__pool_limits_check_memory(&mem, msg, sizeof(msg));
    if (st != EGM_OK)
        return st;
    if (msg[0] != '\0')
        egm_warn("%s: accepted (allow_overcommit=true); the pool fails when it fills beyond that",
                 msg);

    /* Each chunk keeps its memfd open for the pool's life. */
    egm_pool_fd_check_t fds = {.chunks = n,
                               .chunk_size = n > 1 ? max_chunk : rounded,
                               .fds_open = egm__pool_limits_fds_open()};
    fds.fd_limit = egm__pool_limits_fd_limit(egm__pool_limits_fds_needed(&fds));
    if ((st = egm__pool_limits_check_fds(&fds)) != EGM_OK)
        return st;
    if (chunks_p != NULL)
        *chunks_p = n;
    return EGM_OK;
}

egm_status_t egm__host_pool_create(uint64_t total, uint64_t max_chunk, int allow_overcommit,
                                   egm_host_pool_t **pool_p)
{
    egm_status_t st;
    egm_host_pool_t *pool;
    uint64_t n = 0;

    if ((st = egm__host_pool_check(total, max_chunk, allow_overcommit, &n)) != EGM_OK)
        return st;
    uint64_t rounded = total / POOL_ALIGN * POOL_ALIGN;
    if (rounded != total)
        egm_info("host pool: global_segment_size %" PRIu64 " rounded down to %" PRIu64, total,
                 rounded);

    pool = egm_calloc(1, sizeof(*pool), "pool.host");
    if (pool == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "host pool: out of memory");
    pool->chunks = egm_calloc(n, sizeof(*pool->chunks), "pool.host.chunks");
    if (pool->chunks == NULL) {
        st =
            egm__set_error(EGM_ERR_NO_MEMORY, "host pool: out of memory for %" PRIu64 " chunks", n);
        goto err_pool;
    }

    uint64_t left = rounded;
    for (size_t i = 0; i < n; i++) {
        uint64_t size = left < max_chunk ? left : max_chunk;
        st = chunk_create(size, &pool->chunks[i]);
        if (st != EGM_OK) {
            egm_error("host pool: chunk %zu of %" PRIu64 " failed: %s", i, n, egm_last_error());
            goto err_chunks;
        }
        pool->count++;
        left -= size;
    }
    *pool_p = pool;
    return EGM_OK;

err_chunks:
    while (pool->count > 0)
        chunk_release(&pool->chunks[--pool->count]);
    egm_free(pool->chunks);
err_pool:
    egm_free(pool);
    return st;
}

void egm__host_pool_destroy(egm_host_pool_t *pool)
{
    if (pool == NULL)
        return;
    while (pool->count > 0)
        chunk_release(&pool->chunks[--pool->count]);
    egm_free(pool->chunks);
    egm_free(pool);
}

size_t egm__host_pool_chunk_count(const egm_host_pool_t *pool)
{
    return pool ? pool->count : 0;
}

const egm_pool_chunk_t *egm__host_pool_chunk(const egm_host_pool_t *pool, size_t index)
{
    if (pool == NULL || index >= pool->count)
        return NULL;
    return &pool->chunks[index];
}
