/* shm transport (consumer side): segments on this host are mapped once, from
 * the memfd their provider's fd broker hands out, and cached by segment id.
 * Reads are plain memcpy. A write first populates the pages it covers where
 * this process has not mapped them yet (prefault.h), so that the copy does not
 * take a fault per page, and copies with streaming stores (stream_copy.h). A
 * forgotten mapping is unmapped by its last user. Its only interface is its
 * ops table, egm__transport_shm (transport.h). */
#include "te/te_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/sock.h"
#include "te/prefault.h"
#include "te/stream_copy.h"
#include "te/transport.h"

#define BROKER_CLIENT_TIMEOUT_MS 5000

typedef struct {
    egm_id_t id;
    void *base;
    uint64_t size;
    egm_prefault_t *prefault; /* blocks mapped in this process; NULL: none tracked */
    uint64_t uses;            /* transfers using the mapping now */
    int forgotten;            /* out of the cache; the last user unmaps */
} mapping_t;

typedef struct egm_shm_cache {
    pthread_mutex_t lock;
    egm_hashmap_t *by_id; /* id bytes -> mapping_t* */
    uint64_t live;        /* mapped, including forgotten ones still in use */
    const char *token;    /* cluster token for fd brokers (the te's) */
} egm_shm_cache_t;

static egm_status_t shm_cache_open(const egm_te_env_t *env, void **state_p)
{
    egm_status_t st;
    egm_shm_cache_t *cache = egm_calloc(1, sizeof(*cache), "te.shm");
    if (cache == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "shm: out of memory");
    if ((st = egm__hashmap_create(&cache->by_id)) != EGM_OK) {
        egm_free(cache);
        return st;
    }
    pthread_mutex_init(&cache->lock, NULL);
    cache->token = env->auth_token;
    *state_p = cache;
    return EGM_OK;
}

static void mapping_free(mapping_t *m)
{
    munmap(m->base, m->size);
    egm__prefault_destroy(m->prefault);
    egm_free(m);
}

/* No transfer may be running. Unmaps everything. */
static void shm_cache_close(void *state)
{
    egm_shm_cache_t *cache = state;
    if (cache == NULL)
        return;
    size_t iter = 0;
    const void *key;
    size_t key_len;
    void *value;
    while (egm__hashmap_next(cache->by_id, &iter, &key, &key_len, &value))
        mapping_free(value);
    egm__hashmap_destroy(cache->by_id);
    pthread_mutex_destroy(&cache->lock);
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

/* A use reference on the segment's mapping, mapping it on first use. */
static egm_status_t mapping_get(egm_shm_cache_t *cache, const egm_segment_desc_t *segment,
                                mapping_t **mapping_p)
{
    egm_status_t st;
    char text[EGM_ID_STRLEN];

    pthread_mutex_lock(&cache->lock);
    mapping_t *m = egm__hashmap_get(cache->by_id, &segment->id, sizeof(segment->id));
    if (m != NULL)
        goto found;
    pthread_mutex_unlock(&cache->lock);

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
    *fresh = (mapping_t){.id = segment->id, .base = base, .size = segment->size};
    /* Without the bitmap (out of memory) writes just fault page by page. */
    if (egm__prefault_create(segment->size, &fresh->prefault) != EGM_OK)
        fresh->prefault = NULL;

    pthread_mutex_lock(&cache->lock);
    /* Another thread may have mapped it meanwhile: keep one mapping. */
    m = egm__hashmap_get(cache->by_id, &segment->id, sizeof(segment->id));
    if (m != NULL) {
        mapping_free(fresh);
        goto found;
    }
    st = egm__hashmap_put(cache->by_id, &fresh->id, sizeof(fresh->id), fresh, NULL);
    if (st != EGM_OK) {
        pthread_mutex_unlock(&cache->lock);
        mapping_free(fresh);
        return st;
    }
    cache->live++;
    m = fresh;
    egm_debug("shm: mapped segment %s (%" PRIu64 " bytes) from %s",
              egm__id_format(segment->id, text), segment->size, segment->shm_socket);

found:
    if (m->size != segment->size) {
        pthread_mutex_unlock(&cache->lock);
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "shm: segment %s: descriptor size %" PRIu64
                              " differs from the mapped %" PRIu64,
                              egm__id_format(segment->id, text), segment->size, m->size);
    }
    m->uses++;
    pthread_mutex_unlock(&cache->lock);
    *mapping_p = m;
    return EGM_OK;
}

static void mapping_put(egm_shm_cache_t *cache, mapping_t *m)
{
    pthread_mutex_lock(&cache->lock);
    int last = --m->uses == 0 && m->forgotten;
    if (last)
        cache->live--;
    pthread_mutex_unlock(&cache->lock);
    if (last)
        mapping_free(m);
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
        mapping_put(cache, m);
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
    mapping_put(cache, m);
    return EGM_OK;
}

/* Drops the mapping; the unmap waits for the last transfer using it. */
static void shm_forget(void *state, egm_id_t segment_id)
{
    egm_shm_cache_t *cache = state;
    pthread_mutex_lock(&cache->lock);
    mapping_t *m = egm__hashmap_remove(cache->by_id, &segment_id, sizeof(segment_id));
    int now = m != NULL && m->uses == 0;
    if (m != NULL) {
        m->forgotten = 1;
        if (now)
            cache->live--;
    }
    pthread_mutex_unlock(&cache->lock);
    if (now)
        mapping_free(m);
}

/* Unmaps this process's pages of [offset, offset + length) of a cached
 * mapping (the segment keeps the bytes); nothing when it is not mapped. */
static void shm_release_pages(void *state, egm_id_t segment_id, uint64_t offset, uint64_t length)
{
    egm_shm_cache_t *cache = state;
    pthread_mutex_lock(&cache->lock);
    mapping_t *m = egm__hashmap_get(cache->by_id, &segment_id, sizeof(segment_id));
    if (m != NULL && offset < m->size && length > 0) {
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
    pthread_mutex_unlock(&cache->lock);
}

static egm_status_t shm_cached_ids(void *state, egm_id_t **ids_p, size_t *n_p)
{
    egm_shm_cache_t *cache = state;
    void *ids = NULL;
    pthread_mutex_lock(&cache->lock);
    egm_status_t st =
        egm__hashmap_copy_keys(cache->by_id, sizeof(egm_id_t), "shm mappings", &ids, n_p);
    pthread_mutex_unlock(&cache->lock);
    *ids_p = ids;
    return st;
}

static void shm_stats(void *state, egm_te_stats_t *stats_p)
{
    egm_shm_cache_t *cache = state;
    pthread_mutex_lock(&cache->lock);
    stats_p->mappings_live += cache->live;
    pthread_mutex_unlock(&cache->lock);
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
