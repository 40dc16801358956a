/* shm transport (consumer side): segments on this host are mapped once, from
 * the memfd their provider's fd broker hands out, and cached by segment id.
 * Reads are plain memcpy. A write first populates the pages it covers where
 * this process has not mapped them yet (prefault.h), so that the copy does not
 * take a fault per page, and copies with streaming stores (stream_copy.h). The
 * mappings are a segment reference table (segref.h): forget unlinks one, and
 * its last reference unmaps it. Its only interface is its ops table,
 * egm__transport_shm (transport.h). */
#include "te/te_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/sock.h"
#include "te/prefault.h"
#include "te/stream_copy.h"
#include "te/transport.h"

#define BROKER_CLIENT_TIMEOUT_MS 5000

/* A segment mapped here: an object of the cache's segment reference table. */
typedef struct {
    egm_segref_t ref; /* ref.id: the segment's */
    void *base;
    uint64_t size;
    egm_prefault_t *prefault; /* blocks mapped in this process; NULL: none tracked */
} mapping_t;

typedef struct egm_shm_cache {
    egm_segref_table_t *mappings; /* of mapping_t; live: mapped, unlinked ones in use included */
    const char *token;            /* cluster token for fd brokers (the te's) */
} egm_shm_cache_t;

/* The segref table's free function: the last reference unmaps. */
static void mapping_free(void *ctx, egm_segref_t *ref)
{
    (void)ctx;
    mapping_t *m = (mapping_t *)ref;
    munmap(m->base, m->size);
    egm__prefault_destroy(m->prefault);
    egm_free(m);
}

static egm_status_t shm_cache_open(const egm_te_env_t *env, void **state_p)
{
    egm_status_t st;
    egm_shm_cache_t *cache = egm_calloc(1, sizeof(*cache), "te.shm");
    if (cache == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "shm: out of memory");
    if ((st = egm__segref_create("shm mapping", mapping_free, NULL, &cache->mappings)) != EGM_OK) {
        egm_free(cache);
        return st;
    }
    cache->token = env->auth_token;
    *state_p = cache;
    return EGM_OK;
}

/* No transfer may be running. Unmaps everything. */
static void shm_cache_close(void *state)
{
    egm_shm_cache_t *cache = state;
    if (cache == NULL)
        return;
    egm__segref_destroy(cache->mappings);
    egm_free(cache);
}

/* Ask the segment's fd broker for its memfd and map it. Slow (a connection and
 * an mmap), so it runs outside the cache lock. */
static egm_status_t map_segment(egm_shm_cache_t *cache, const egm_segment_desc_t *segment,
                                void **base_p)
{
    egm_status_t st;
    char text[EGM_ID_STRLEN];
    int memfd = -1;

    egm__id_format(segment->id, text);
    uint64_t size = 0;
    if ((st = egm__fd_broker_fetch(segment->shm_socket, segment->id, EGM_HANDLE_MEMFD, cache->token,
                                   BROKER_CLIENT_TIMEOUT_MS, &memfd, &size)) != EGM_OK) {
        char detail[256];
        snprintf(detail, sizeof(detail), "%s", egm_last_error());
        return egm__set_error(st, "shm: %s", detail);
    }
    /* The descriptor is the authority: a size that disagrees with it would let
     * a copy run past the file (SIGBUS), so both must match the descriptor's. */
    struct stat stbuf;
    if (fstat(memfd, &stbuf) != 0) {
        st = egm__set_error(egm__status_from_errno(errno), "shm: fstat: %s", strerror(errno));
        goto err_fd;
    }
    if (size != segment->size || (uint64_t)stbuf.st_size != segment->size) {
        st = egm__set_error(EGM_ERR_PROTOCOL,
                            "shm: segment %s: size %" PRIu64 " (file %" PRIu64
                            ") differs from the descriptor's %" PRIu64,
                            text, size, (uint64_t)stbuf.st_size, segment->size);
        goto err_fd;
    }
    /* An unsealed file could be truncated under our mapping by its provider,
     * and every copy would then fault (SIGBUS) in this process. */
    int seals = fcntl(memfd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        st = egm__set_error(EGM_ERR_PERMISSION,
                            "shm: segment %s: the provider's memfd is not sealed against "
                            "shrinking",
                            text);
        goto err_fd;
    }
    void *base = mmap(NULL, segment->size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (base == MAP_FAILED) {
        st = egm__set_error(egm__status_from_errno(errno), "shm: mmap segment %s: %s", text,
                            strerror(errno));
        goto err_fd;
    }
    close(memfd);
    *base_p = base;
    return EGM_OK;

err_fd:
    close(memfd);
    return st;
}

/* A reference on the segment's mapping, mapping it on first use. */
static egm_status_t mapping_get(egm_shm_cache_t *cache, const egm_segment_desc_t *segment,
                                mapping_t **mapping_p)
{
    egm_status_t st;
    char text[EGM_ID_STRLEN];
    mapping_t *m;

    while ((m = (mapping_t *)egm__segref_get(cache->mappings, segment->id)) == NULL) {
        void *base = NULL;
        if ((st = map_segment(cache, segment, &base)) != EGM_OK) {
            egm_warn("%s", egm_last_error());
            return st;
        }
        mapping_t *fresh = egm_calloc(1, sizeof(*fresh), "te.shm.mapping");
        if (fresh == NULL) {
            munmap(base, segment->size);
            return egm__set_error(EGM_ERR_NO_MEMORY, "shm: out of memory");
        }
        *fresh = (mapping_t){.ref.id = segment->id, .base = base, .size = segment->size};
        /* Without the bitmap (out of memory) writes just fault page by page. */
        if (egm__prefault_create(segment->size, &fresh->prefault) != EGM_OK)
            fresh->prefault = NULL;
        st = egm__segref_link(cache->mappings, &fresh->ref, 1);
        if (st == EGM_OK) {
            egm_debug("shm: mapped segment %s (%" PRIu64 " bytes) from %s",
                      egm__id_format(segment->id, text), segment->size, segment->shm_socket);
            m = fresh;
            break;
        }
        mapping_free(NULL, &fresh->ref);
        /* Another thread mapped it meanwhile: use that one. */
        if (st != EGM_ERR_SEGMENT_EXISTS)
            return st;
    }
    egm_status_t size_st =
        egm__segref_check_size(cache->mappings, &m->ref, "shm", segment->size, m->size);
    if (size_st != EGM_OK)
        return size_st;
    *mapping_p = m;
    return EGM_OK;
}

/* Same host, a memfd and its broker's socket: mapped here on first use. */
static const char *shm_obstacle(const egm_te_env_t *env, void *state,
                                const egm_segment_desc_t *segment, int device, char *why,
                                size_t why_cap)
{
    (void)state, (void)device;
    if (strcmp(segment->host_id, env->host_id) != 0) {
        if (why == NULL)
            return "another host";
        snprintf(why, why_cap, "the segment is on host \"%s\", not this host (\"%s\")",
                 segment->host_id, env->host_id);
        return why;
    }
    if (segment->shm_socket[0] == '\0' || segment->handle_kind != EGM_HANDLE_MEMFD) {
        if (why == NULL)
            return "no shm socket";
        snprintf(why, why_cap, "the segment has no shm socket (handle kind %d)",
                 (int)segment->handle_kind);
        return why;
    }
    return NULL;
}

/* Copy between host memory and the segment, mapping it first if needed.
 * Bounds were checked by the engine and are checked again here. */
static egm_status_t shm_transfer(const egm_te_env_t *env, void *state, const egm_te_op_t *op,
                                 int device)
{
    (void)env, (void)device;
    egm_shm_cache_t *cache = state;
    uint64_t offset = op->offset;
    size_t length = op->length;
    void *local = op->local;
    mapping_t *m = NULL;
    egm_status_t st = mapping_get(cache, op->segment, &m);
    if (st != EGM_OK)
        return st;
    if (offset > m->size || length > m->size - offset) {
        egm__segref_put(cache->mappings, &m->ref);
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "shm: [%" PRIu64 ", +%zu) outside the segment's %" PRIu64 " bytes",
                              offset, length, m->size);
    }
    uint8_t *remote = (uint8_t *)m->base + offset;
    if (op->dir == EGM_TE_READ) {
        memcpy(local, remote, length);
        egm__prefault_mark(m->prefault, offset, length);
    } else {
        /* Only large writes: a small one faults its few pages once, while its
         * partly covered 64 KiB blocks never get marked and would cost an
         * madvise on every write (review: 4 KiB puts 5-7x slower). */
        if (length >= EGM_PREFAULT_MIN_WRITE)
            egm__prefault_write(m->prefault, m->base, offset, length);
        egm__stream_copy(remote, local, length);
    }
    egm__segref_put(cache->mappings, &m->ref);
    return EGM_OK;
}

/* Unlinks the mapping; the last transfer using it unmaps. */
static void shm_forget(void *state, egm_id_t segment_id)
{
    egm_shm_cache_t *cache = state;
    egm__segref_unlink(cache->mappings, segment_id, 0);
}

/* Unmaps this process's pages of [offset, offset + length) of a cached
 * mapping (the segment keeps the bytes); nothing when it is not mapped. */
static void shm_release_pages(void *state, egm_id_t segment_id, uint64_t offset, uint64_t length)
{
    egm_shm_cache_t *cache = state;
    mapping_t *m = (mapping_t *)egm__segref_get(cache->mappings, segment_id);
    if (m == NULL)
        return;
    if (offset < m->size && length > 0) {
        /* Whole pages around the range: on a shared mapping MADV_DONTNEED only
         * drops this process's entries, the bytes stay in the memfd. The
         * prefault marks may then be stale: a hint, the next write faults. */
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        uint64_t end = length > m->size - offset ? m->size : offset + length;
        uint64_t start = offset / page * page;
        end = (end + page - 1) / page * page;
        if (end > m->size)
            end = m->size;
        (void)madvise((char *)m->base + start, (size_t)(end - start), MADV_DONTNEED);
    }
    egm__segref_put(cache->mappings, &m->ref);
}

static egm_status_t shm_cached_ids(void *state, egm_id_t **ids_p, size_t *n_p)
{
    egm_shm_cache_t *cache = state;
    return egm__segref_ids(cache->mappings, ids_p, n_p);
}

static void shm_stats(void *state, egm_te_stats_t *stats_p)
{
    egm_shm_cache_t *cache = state;
    stats_p->mappings_live += egm__segref_live(cache->mappings);
}

const egm_transport_ops_t egm__transport_shm = {
    .name = "shm",
    .protocol = EGM_PROTOCOL_SHM,
    .host_memory_only = 1,
    .open = shm_cache_open,
    .close = shm_cache_close,
    .obstacle = shm_obstacle,
    .transfer = shm_transfer,
    .forget = shm_forget,
    .release_pages = shm_release_pages,
    .cached_ids = shm_cached_ids,
    .stats = shm_stats,
};
