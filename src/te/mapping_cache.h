/* nvlink mapping cache (consumer side): CUDA VMM segments of other processes,
 * imported and mapped into this process once and cached by segment id.
 *
 * First use of a segment imports its handle (posix_fd: fetched from the
 * provider's fd broker, same host only; fabric: the descriptor's 64 bytes),
 * reserves granularity-aligned VA, maps it and grants read/write access to
 * every local GPU. Later uses take a reference on the cached mapping. The
 * mappings are a segment reference table (segref.h): forget unlinks the
 * mapping and retires the id for good (EGM_SEGREF_RETIRE): no later acquire
 * can reach it (nor import it again), and the last reference held by a copy in
 * flight unmaps and releases it. Ids are never reused, so a provider that comes
 * back with a new pool at the same addresses can never be served from an old
 * mapping. Thread-safe; concurrent first uses of one segment import it once. */
#ifndef EGM_TE_MAPPING_CACHE_H
#define EGM_TE_MAPPING_CACHE_H

#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "cuda/cuda_api.h"
#include "rpc/segment_desc.h"

typedef struct egm_mapping_cache egm_mapping_cache_t;
typedef struct egm_mapping egm_mapping_t;

typedef struct {
    uint64_t imports_total; /* handles imported (one per segment mapped) */
    uint64_t mappings_live; /* mapped now, including retired ones still in use */
    uint64_t import_failures;
} egm_mapping_stats_t;

/* `api` is the loaded driver; broker requests time out after timeout_ms. */
/* token: the cluster token presented to fd brokers (borrowed: outlives the cache; NULL = none). */
egm_status_t egm__mapping_cache_create(const egm_cuda_api_t *api, int timeout_ms, const char *token,
                                       egm_mapping_cache_t **cache_p);
/* No copy may hold a mapping. Unmaps and releases everything. */
void egm__mapping_cache_destroy(egm_mapping_cache_t *cache);

/* A reference on the segment's mapping, importing it first if needed
 * (*imported_p, may be NULL, says whether this call did). Retired id ->
 * SEGMENT_NOT_FOUND; not a VMM segment -> NOT_SUPPORTED; driver failures keep
 * the CUDA error name in egm_last_error(). A failed import leaves nothing
 * behind and is tried again by the next get. */
egm_status_t egm__mapping_get(egm_mapping_cache_t *cache, const egm_segment_desc_t *segment,
                              egm_mapping_t **mapping_p, int *imported_p);
void egm__mapping_put(egm_mapping_cache_t *cache, egm_mapping_t *mapping);
/* Device address of the segment's first byte, and its size (the descriptor's). */
uint64_t egm__mapping_va(const egm_mapping_t *mapping);
uint64_t egm__mapping_size(const egm_mapping_t *mapping);

/* Unlinks the mapping and retires the id (see above). Unknown ids are retired
 * too. */
void egm__mapping_unlink(egm_mapping_cache_t *cache, egm_id_t segment_id);
/* Ids mapped or being imported now (egm_malloc'ed; NULL when none). */
egm_status_t egm__mapping_cached_ids(egm_mapping_cache_t *cache, egm_id_t **ids_p, size_t *n_p);
/* 1 when the segment is mapped and ready, or being imported now. */
int egm__mapping_known(egm_mapping_cache_t *cache, egm_id_t segment_id);
/* 1 when the id was retired. */
int egm__mapping_retired(egm_mapping_cache_t *cache, egm_id_t segment_id);
void egm__mapping_cache_stats(egm_mapping_cache_t *cache, egm_mapping_stats_t *stats_p);

#endif
