/* VMM pool: the planned chunks created on several threads, rolled back in
 * reverse on failure, released step by step (see vmm_pool.h). */
#include "pool/vmm_pool.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "cuda/driver.h"
#include "pool/pool_limits.h"

#define MAX_ACCESS 65 /* every GPU, plus the host */
#define MAX_THREADS 64

typedef struct {
    int id; /* NUMA node or device ordinal */
    egm_cu_mem_allocation_prop_t prop;
    uint64_t granularity;
    egm_cu_mem_access_desc_t access[MAX_ACCESS];
    size_t n_access;
} location_t;

struct egm_vmm_pool {
    const egm_cuda_api_t *api;
    egm_vmm_location_t kind;
    egm_vmm_handles_t handles;
    const char *key; /* config key of the locations, for errors */
    location_t *locs;
    size_t n_locs;
    egm_egm_plan_t *plan;
    egm_vmm_chunk_t *chunks; /* plan->chunk_count */
    size_t count;            /* READY chunks served (all of them once created) */
    uint64_t cleanup_failures;
    double setup_seconds;

    /* one creation run, shared by its threads */
    pthread_mutex_t lock;
    const egm_vmm_pool_params_t *params;
    size_t next;
    int failed;
    egm_status_t first_status;
    char first_error[512];
    uint64_t done_bytes;
    size_t done_chunks;
};

static const char *kind_name(egm_vmm_location_t kind)
{
    return kind == EGM_VMM_HOST_NUMA ? "host NUMA node" : "GPU";
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

static const char *handle_types_name(int types)
{
    if (types & EGM_CU_MEM_HANDLE_TYPE_FABRIC)
        return types & EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ? "fabric+posix_fd" : "fabric";
    return "posix_fd";
}

static egm_status_t validate(const egm_vmm_pool_params_t *p, int ndev)
{
    if (p->location != EGM_VMM_HOST_NUMA && p->location != EGM_VMM_DEVICE)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "pool_memory: location %d is neither host_numa nor device",
                              (int)p->location);
    if (p->handles < EGM_VMM_HANDLES_AUTO || p->handles > EGM_VMM_HANDLES_BOTH)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "egm_handle_type: %d is not auto|fabric|posix_fd|both",
                              (int)p->handles);
    if (p->location_count == 0 || p->locations == NULL)
        return egm__set_error(EGM_ERR_CONFIG, "egm_numa_nodes: no location selected");
    if (p->location == EGM_VMM_DEVICE && p->location_count != 1)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "pool_location: a device pool lives on exactly one GPU (%zu given)",
                              p->location_count);
    for (size_t i = 0; i < p->location_count; i++) {
        int id = p->locations[i];
        if (id < 0)
            return egm__set_error(EGM_ERR_INVALID_ARG, "pool_location: %d is negative", id);
        if (p->location == EGM_VMM_DEVICE && id >= ndev)
            return egm__set_error(EGM_ERR_INVALID_ARG, "pool_location: GPU %d of %d visible", id,
                                  ndev);
    }
    return EGM_OK;
}

/* Allocation properties, granularity and access list of every location for
 * the requested handle types. */
static egm_status_t prepare(egm_vmm_pool_t *pool, int handle_types, int ndev)
{
    for (size_t i = 0; i < pool->n_locs; i++) {
        location_t *l = &pool->locs[i];
        memset(&l->prop, 0, sizeof(l->prop));
        l->prop.type = EGM_CU_MEM_ALLOCATION_TYPE_PINNED;
        l->prop.requested_handle_types = handle_types;
        l->prop.location.type = pool->kind == EGM_VMM_HOST_NUMA ? EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA
                                                                : EGM_CU_MEM_LOCATION_TYPE_DEVICE;
        l->prop.location.id = l->id;
        size_t gran = 0;
        egm_cu_result_t rc = pool->api->cuMemGetAllocationGranularity(
            &gran, &l->prop, EGM_CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        egm_status_t st = egm__cuda_check(rc, "cuMemGetAllocationGranularity");
        if (st != EGM_OK) {
            char detail[256];
            snprintf(detail, sizeof(detail), "%s", egm_last_error());
            /* An id the driver calls invalid is a configuration mistake. */
            return egm__set_error(st == EGM_ERR_INVALID_ARG ? EGM_ERR_CONFIG : st,
                                  "%s: %s %d does not accept allocations: %s", pool->key,
                                  kind_name(pool->kind), l->id, detail);
        }
        if (gran == 0)
            return egm__set_error(EGM_ERR_INTERNAL,
                                  "vmm pool: the driver reports granularity 0 for %s %d",
                                  kind_name(pool->kind), l->id);
        l->granularity = gran;
        /* Every local GPU copies to and from the pool; the CPU too (tcp
         * server, own memcpy) when the memory is host DRAM. */
        l->n_access = 0;
        for (int d = 0; d < ndev; d++)
            l->access[l->n_access++] = (egm_cu_mem_access_desc_t){
                .location = {.type = EGM_CU_MEM_LOCATION_TYPE_DEVICE, .id = d},
                .flags = EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        if (pool->kind == EGM_VMM_HOST_NUMA)
            l->access[l->n_access++] = (egm_cu_mem_access_desc_t){
                .location = {.type = EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, .id = l->id},
                .flags = EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    }
    return EGM_OK;
}

static egm_status_t make_plan(egm_vmm_pool_t *pool, const egm_vmm_pool_params_t *p,
                              egm_egm_plan_t **plan_p)
{
    egm_egm_plan_node_in_t *in = egm_calloc(pool->n_locs, sizeof(*in), "pool.vmm.plan_in");
    if (in == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "vmm pool: out of memory planning");
    for (size_t i = 0; i < pool->n_locs; i++)
        in[i] = (egm_egm_plan_node_in_t){.node = pool->locs[i].id,
                                         .granularity = pool->locs[i].granularity};
    egm_egm_plan_params_t pp = {
        .nodes = in,
        .node_count = pool->n_locs,
        .allocator_alignment = p->allocator_alignment ? p->allocator_alignment : 1,
        .global_segment_size = p->total,
        .max_mr_size = p->max_chunk,
    };
    egm_status_t st = egm__egm_plan_compute(&pp, plan_p);
    egm_free(in);
    return st;
}

/* HOST_NUMA memory is pinned as it is created: a capacity beyond what the
 * host, or a node beyond what it can give, is refused before the first chunk
 * (the driver would take the memory from everything else first). */
static egm_status_t check_memory(const egm_vmm_pool_t *pool, const egm_vmm_pool_params_t *p)
{
    const egm_egm_plan_t *plan = pool->plan;
    char msg[384];
    egm_status_t st;

    if (pool->kind != EGM_VMM_HOST_NUMA)
        return EGM_OK;
    egm_pool_memory_check_t c = {.requested = plan->capacity,
                                 .available = egm__pool_limits_host_available(),
                                 .node = -1,
                                 .allow_overcommit = p->allow_overcommit};
    for (size_t i = 0;; i++) {
        if ((st = egm__pool_limits_check_memory(&c, msg, sizeof(msg))) != EGM_OK)
            return st;
        if (msg[0] != '\0')
            egm_warn(
                "%s: accepted (allow_overcommit=true); the pool fails when it fills beyond that",
                msg);
        if (i == plan->node_count)
            return EGM_OK;
        c.requested = plan->nodes[i].share;
        c.node = plan->nodes[i].node;
        c.available = egm__pool_limits_node_available(c.node);
    }
}

static void pool_free(egm_vmm_pool_t *pool)
{
    egm__egm_plan_free(pool->plan);
    egm_free(pool->chunks);
    egm_free(pool->locs);
    pthread_mutex_destroy(&pool->lock);
    egm_free(pool);
}

/* Loads the driver, validates, prepares every location and plans. */
static egm_status_t pool_open(const egm_vmm_pool_params_t *p, egm_vmm_pool_t **pool_p, int *ndev_p)
{
    const egm_cuda_api_t *api;
    egm_status_t st;

    *pool_p = NULL;
    if (p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "vmm pool: missing parameters");
    if ((st = egm__cuda_load(&api)) != EGM_OK)
        return st;
    int ndev = 0;
    if ((st = egm__cuda_count_devices(&ndev)) != EGM_OK)
        return st;
    if (ndev <= 0)
        return egm__set_error(EGM_ERR_NO_CUDA, "vmm pool: no CUDA device visible");
    if (ndev > MAX_ACCESS - 1)
        ndev = MAX_ACCESS - 1;
    if ((st = validate(p, ndev)) != EGM_OK)
        return st;

    egm_vmm_pool_t *pool = egm_calloc(1, sizeof(*pool), "pool.vmm");
    if (pool == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "vmm pool: out of memory");
    pthread_mutex_init(&pool->lock, NULL);
    pool->api = api;
    pool->kind = p->location;
    pool->handles = p->handles;
    pool->key = p->locations_key ? p->locations_key : "pool_location";
    pool->locs = egm_calloc(p->location_count, sizeof(*pool->locs), "pool.vmm.locations");
    if (pool->locs == NULL) {
        pool_free(pool);
        return egm__set_error(EGM_ERR_NO_MEMORY, "vmm pool: out of memory");
    }
    pool->n_locs = p->location_count;
    for (size_t i = 0; i < p->location_count; i++)
        pool->locs[i].id = p->locations[i];
    st = prepare(pool, handle_types_of(p->handles), ndev);
    if (st == EGM_OK)
        st = make_plan(pool, p, &pool->plan);
    if (st == EGM_OK)
        st = check_memory(pool, p);
    if (st != EGM_OK) {
        pool_free(pool);
        return st;
    }
    *pool_p = pool;
    *ndev_p = ndev;
    return EGM_OK;
}

egm_status_t egm__vmm_pool_plan(const egm_vmm_pool_params_t *params, egm_egm_plan_t **plan_p)
{
    egm_vmm_pool_t *pool;
    int ndev;
    egm_status_t st = pool_open(params, &pool, &ndev);
    if (st != EGM_OK)
        return st;
    *plan_p = pool->plan;
    pool->plan = NULL;
    pool_free(pool);
    return EGM_OK;
}

static const location_t *location_of(const egm_vmm_pool_t *pool, int id)
{
    for (size_t i = 0; i < pool->n_locs; i++)
        if (pool->locs[i].id == id)
            return &pool->locs[i];
    return NULL;
}

/* Chunk i of the plan, from EMPTY to READY; the error names it. */
static egm_status_t create_one(egm_vmm_pool_t *pool, size_t i)
{
    const egm_egm_plan_chunk_t *pc = &pool->plan->chunks[i];
    const location_t *l = location_of(pool, pc->node);
    egm_vmm_chunk_t *c = &pool->chunks[i];
    egm_vmm_chunk_ctx_t ctx = {.api = pool->api,
                               .prop = &l->prop,
                               .alignment = l->granularity,
                               .access = l->access,
                               .n_access = l->n_access};

    c->location = pc->node;
    c->device = pool->kind == EGM_VMM_DEVICE ? pc->node : -1;
    egm_status_t st = egm__vmm_chunk_create(&ctx, pc->size, c);
    if (st != EGM_OK) {
        char detail[256];
        snprintf(detail, sizeof(detail), "%s", egm_last_error());
        return egm__set_error(st, "vmm pool: chunk %zu of %zu (%" PRIu64 " bytes on %s %d): %s", i,
                              pool->plan->chunk_count, pc->size, kind_name(pool->kind), pc->node,
                              detail);
    }
    /* Names the range, so that a check of page placement (bench/gpu/scale.py reads
     * /proc/PID/numa_maps) can tell the chunks apart. */
    egm_debug("vmm pool: chunk %zu: %s %d, base %p, %" PRIu64 " bytes", i, kind_name(pool->kind),
              pc->node, c->base, pc->size);
    return EGM_OK;
}

/* Takes chunks in order until none is left or one failed. The caller runs it
 * too; egm_last_error() is per thread, so the first failure's text is kept. */
static void *worker_main(void *arg)
{
    egm_vmm_pool_t *pool = arg;
    const egm_vmm_pool_params_t *p = pool->params;
    pthread_mutex_lock(&pool->lock);
    while (!pool->failed && pool->next < pool->plan->chunk_count) {
        size_t i = pool->next++;
        pthread_mutex_unlock(&pool->lock);
        egm_status_t st = create_one(pool, i);
        pthread_mutex_lock(&pool->lock);
        if (st != EGM_OK) {
            if (!pool->failed) {
                pool->failed = 1;
                pool->first_status = st;
                snprintf(pool->first_error, sizeof(pool->first_error), "%s", egm_last_error());
            }
            break;
        }
        pool->done_bytes += pool->chunks[i].size;
        pool->done_chunks++;
        if (p->progress != NULL)
            p->progress(p->progress_arg, pool->done_bytes, pool->plan->capacity, pool->done_chunks,
                        pool->plan->chunk_count);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

static egm_status_t create_rest(egm_vmm_pool_t *pool, unsigned threads)
{
    pthread_t tids[MAX_THREADS];
    size_t started = 0;
    size_t left = pool->plan->chunk_count - pool->next;

    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    for (size_t t = 1; t < threads && t < left; t++) {
        if (pthread_create(&tids[started], NULL, worker_main, pool) != 0) {
            egm_warn("vmm pool: could not start allocation thread %zu: continuing with %zu", t,
                     started + 1);
            break;
        }
        started++;
    }
    worker_main(pool);
    for (size_t t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    if (pool->failed)
        return egm__set_error(pool->first_status, "%s", pool->first_error);
    return EGM_OK;
}

/* The first chunk, made by the caller: it shows whether the driver grants the
 * handle types asked for. auto falls back to posix_fd when fabric is refused
 * (no IMEX channel, or no fabric support), re-planning if the granularity
 * differs. */
static egm_status_t create_first(egm_vmm_pool_t *pool, const egm_vmm_pool_params_t *p, int ndev)
{
    egm_status_t st = create_one(pool, 0);
    if (st != EGM_OK && st == EGM_ERR_NOT_SUPPORTED && p->handles == EGM_VMM_HANDLES_AUTO &&
        (pool->locs[0].prop.requested_handle_types & EGM_CU_MEM_HANDLE_TYPE_FABRIC) &&
        pool->chunks[0].stage == EGM_VMM_CHUNK_EMPTY) {
        egm_warn("vmm pool: fabric handles refused (%s): using posix_fd handles, so the pool "
                 "serves consumers on this host only",
                 egm_last_error());
        if ((st = prepare(pool, EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, ndev)) != EGM_OK)
            return st;
        egm_egm_plan_t *plan = NULL;
        if ((st = make_plan(pool, p, &plan)) != EGM_OK)
            return st;
        if (plan->chunk_count != pool->plan->chunk_count) {
            egm_vmm_chunk_t *chunks = egm_calloc(plan->chunk_count, sizeof(*chunks), "pool.vmm");
            if (chunks == NULL) {
                egm__egm_plan_free(plan);
                return egm__set_error(EGM_ERR_NO_MEMORY, "vmm pool: out of memory");
            }
            egm_free(pool->chunks);
            pool->chunks = chunks;
        }
        egm__egm_plan_free(pool->plan);
        pool->plan = plan;
        st = create_one(pool, 0);
    }
    if (st == EGM_OK) {
        pool->next = 1;
        pool->done_bytes = pool->chunks[0].size;
        pool->done_chunks = 1;
        if (p->progress != NULL)
            p->progress(p->progress_arg, pool->done_bytes, pool->plan->capacity, 1,
                        pool->plan->chunk_count);
    }
    return st;
}

egm_status_t egm__vmm_pool_create(const egm_vmm_pool_params_t *params, egm_vmm_pool_t **pool_p)
{
    egm_vmm_pool_t *pool = NULL;
    int ndev = 0;
    uint64_t t0 = egm__now_ns();

    if (pool_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "vmm pool: missing parameters");
    *pool_p = NULL;
    egm_status_t st = pool_open(params, &pool, &ndev);
    if (st != EGM_OK) {
        egm_error("%s", egm_last_error());
        return st;
    }
    if (pool->plan->capacity != params->total)
        egm_info("vmm pool: global_segment_size %" PRIu64 " rounded down to %" PRIu64
                 " (alignment %" PRIu64 ")",
                 params->total, pool->plan->capacity, pool->plan->alignment);
    size_t n_chunks = pool->plan->chunk_count;
    pool->chunks = egm_calloc(n_chunks, sizeof(*pool->chunks), "pool.vmm.chunks");
    if (pool->chunks == NULL) {
        pool_free(pool);
        return egm__set_error(EGM_ERR_NO_MEMORY, "vmm pool: out of memory for %zu chunks",
                              n_chunks);
    }
    pool->params = params;
    st = create_first(pool, params, ndev);
    if (st == EGM_OK)
        st = create_rest(pool, params->threads);
    pool->params = NULL;
    if (st != EGM_OK) {
        char detail[768];
        snprintf(detail, sizeof(detail), "%s", egm_last_error());
        egm_error("%s", detail);
        /* Roll back in reverse; what cannot be released stays with the pool. */
        if (egm__vmm_pool_release(pool) != EGM_OK) {
            egm_error("vmm pool: rollback incomplete (%zu chunk(s) held): %s",
                      egm__vmm_pool_held(pool), egm_last_error());
            *pool_p = pool;
        } else {
            pool_free(pool);
        }
        return egm__set_error(st, "%s", detail);
    }
    pool->count = pool->plan->chunk_count;
    pool->setup_seconds = (double)(egm__now_ns() - t0) / 1e9;
    egm_info("vmm pool: %zu chunk(s), %" PRIu64 " bytes on %zu %s(s) (%s handles) in %.2f s",
             pool->count, pool->plan->capacity, pool->n_locs, kind_name(pool->kind),
             handle_types_name(pool->locs[0].prop.requested_handle_types), pool->setup_seconds);
    *pool_p = pool;
    return EGM_OK;
}

egm_status_t egm__vmm_pool_release(egm_vmm_pool_t *pool)
{
    egm_status_t first = EGM_OK;
    char first_error[512] = "";

    if (pool == NULL)
        return EGM_OK;
    pool->count = 0; /* nothing is servable from here on */
    for (size_t i = pool->plan->chunk_count; i-- > 0;) {
        egm_vmm_chunk_t *c = &pool->chunks[i];
        if (c->stage == EGM_VMM_CHUNK_EMPTY)
            continue;
        egm_status_t st = egm__vmm_chunk_release(pool->api, c);
        if (st != EGM_OK) {
            pool->cleanup_failures++;
            egm_warn("vmm pool: releasing chunk %zu (%s %d): %s; kept for a retry", i,
                     kind_name(pool->kind), c->location, egm_last_error());
            if (first == EGM_OK) {
                first = st;
                snprintf(first_error, sizeof(first_error), "chunk %zu: %s", i, egm_last_error());
            }
        }
    }
    if (first != EGM_OK)
        return egm__set_error(first, "vmm pool: %zu chunk(s) not released, first %s",
                              egm__vmm_pool_held(pool), first_error);
    return EGM_OK;
}

void egm__vmm_pool_forget(egm_vmm_pool_t *pool)
{
    if (pool != NULL)
        pool_free(pool);
}

void egm__vmm_pool_destroy(egm_vmm_pool_t *pool)
{
    if (pool == NULL)
        return;
    if (egm__vmm_pool_release(pool) != EGM_OK)
        egm_error("vmm pool: abandoning %zu chunk(s) to the process's exit: %s",
                  egm__vmm_pool_held(pool), egm_last_error());
    pool_free(pool);
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

const egm_egm_plan_t *egm__vmm_pool_plan_of(const egm_vmm_pool_t *pool)
{
    return pool ? pool->plan : NULL;
}

uint64_t egm__vmm_pool_granularity(const egm_vmm_pool_t *pool)
{
    return pool ? pool->locs[0].granularity : 0;
}

size_t egm__vmm_pool_held(const egm_vmm_pool_t *pool)
{
    size_t held = 0;
    if (pool == NULL || pool->count > 0)
        return 0;
    for (size_t i = 0; i < pool->plan->chunk_count; i++)
        held += pool->chunks[i].stage != EGM_VMM_CHUNK_EMPTY;
    return held;
}

uint64_t egm__vmm_pool_cleanup_failures(const egm_vmm_pool_t *pool)
{
    return pool ? pool->cleanup_failures : 0;
}

double egm__vmm_pool_setup_seconds(const egm_vmm_pool_t *pool)
{
    return pool ? pool->setup_seconds : 0.0;
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
