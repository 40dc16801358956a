/* nvlink transport: GPU copies between local memory and mapped VMM segments,
 * one copier per device (created on first use), the pinned staging ring of the
 * conventional path, and the prewarm threads. See nvlink.h. */
#include "te/nvlink.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "cuda/driver.h"
#include "te/te_int.h"
#include "te/transport.h"

/* Ops per copier run kept on the stack; larger batches allocate. */
#define STACK_COPIES 32

struct egm_nvlink {
    const egm_cuda_api_t *api;
    egm_nvlink_params_t params;
    egm_mapping_cache_t *cache;

    pthread_mutex_t copiers_lock;
    egm_copier_t *copiers[EGM_NVLINK_MAX_DEVICES];

    pthread_mutex_t staging_lock;
    pthread_cond_t staging_free;
    void *slots[EGM_STAGING_SLOTS]; /* NULL until the ring is allocated */
    int slot_busy[EGM_STAGING_SLOTS];
    int staging_ready;
    int staging_device; /* whose context allocated the ring (and frees it) */

    pthread_mutex_t prewarm_lock; /* threads start on the first prewarm */
    egm_prewarm_t *prewarm;

    atomic_uint_fast64_t nvlink_copies;
    atomic_uint_fast64_t staged_bytes;
};

/* Makes `device`'s primary context current on this thread, saving the one the
 * caller had (an inference engine's thread must get its own back); leave
 * restores it. Only pinned host memory needs this: the VMM calls and the
 * copier do without (the copier switches by itself). */
static egm_status_t ctx_enter(const egm_cuda_api_t *api, int device, egm_cu_context_t *saved_p)
{
    *saved_p = NULL;
    egm_cu_result_t rc = api->cuCtxGetCurrent(saved_p);
    if (rc != EGM_CU_SUCCESS)
        *saved_p = NULL;
    return egm__cuda_use_device(device);
}

static void ctx_leave(const egm_cuda_api_t *api, egm_cu_context_t saved)
{
    egm_cu_context_t now = NULL;
    if (api->cuCtxGetCurrent(&now) == EGM_CU_SUCCESS && now == saved)
        return;
    egm_cu_result_t rc = api->cuCtxSetCurrent(saved);
    if (rc != EGM_CU_SUCCESS)
        egm_warn("nvlink: restoring the caller's CUDA context: %s", egm__cuda_error_name(rc));
}

egm_status_t egm__nvlink_create(const egm_cuda_api_t *api, const egm_nvlink_params_t *params,
                                egm_nvlink_t **nvlink_p)
{
    egm_status_t st;
    egm_nvlink_t *nv = egm_calloc(1, sizeof(*nv), "te.nvlink");
    if (nv == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "nvlink: out of memory");
    nv->api = api;
    nv->params = *params;
    if (nv->params.prewarm_concurrency <= 0)
        nv->params.prewarm_concurrency = EGM_PREWARM_DEFAULT_CONCURRENCY;
    if (nv->params.prewarm_concurrency > EGM_PREWARM_MAX_CONCURRENCY)
        nv->params.prewarm_concurrency = EGM_PREWARM_MAX_CONCURRENCY;
    if ((st = egm__mapping_cache_create(api, params->timeout_ms, params->auth_token, &nv->cache)) !=
        EGM_OK) {
        egm_free(nv);
        return st;
    }
    pthread_mutex_init(&nv->copiers_lock, NULL);
    pthread_mutex_init(&nv->staging_lock, NULL);
    pthread_cond_init(&nv->staging_free, NULL);
    pthread_mutex_init(&nv->prewarm_lock, NULL);
    *nvlink_p = nv;
    return EGM_OK;
}

void egm__nvlink_destroy(egm_nvlink_t *nv)
{
    if (nv == NULL)
        return;
    /* Prewarm threads use the cache: stop them first. */
    egm__prewarm_destroy(nv->prewarm);
    for (int d = 0; d < EGM_NVLINK_MAX_DEVICES; d++)
        egm__copier_destroy(nv->copiers[d]);
    if (nv->staging_ready) {
        egm_cu_context_t saved;
        if (ctx_enter(nv->api, nv->staging_device, &saved) != EGM_OK)
            egm_warn("nvlink: freeing the staging ring: %s", egm_last_error());
        for (int i = 0; i < EGM_STAGING_SLOTS; i++) {
            egm_cu_result_t rc = nv->api->cuMemFreeHost(nv->slots[i]);
            if (rc != EGM_CU_SUCCESS)
                egm_warn("nvlink: cuMemFreeHost: %s", egm__cuda_error_name(rc));
        }
        ctx_leave(nv->api, saved);
    }
    egm__mapping_cache_destroy(nv->cache);
    pthread_mutex_destroy(&nv->prewarm_lock);
    pthread_cond_destroy(&nv->staging_free);
    pthread_mutex_destroy(&nv->staging_lock);
    pthread_mutex_destroy(&nv->copiers_lock);
    egm_free(nv);
}

static egm_status_t get_copier(egm_nvlink_t *nv, int device, egm_copier_t **copier_p)
{
    egm_status_t st = EGM_OK;
    if (device < 0 || device >= EGM_NVLINK_MAX_DEVICES)
        return egm__set_error(EGM_ERR_INVALID_ARG, "nvlink: device %d out of range 0..%d", device,
                              EGM_NVLINK_MAX_DEVICES - 1);
    pthread_mutex_lock(&nv->copiers_lock);
    if (nv->copiers[device] == NULL) {
        st = egm__copier_create(device, nv->params.copy_low_priority, &nv->copiers[device]);
        if (st == EGM_OK) {
            egm__copier_set_pressure(nv->copiers[device], nv->params.copy_max_inflight_bytes,
                                     nv->params.copy_chunk_bytes);
            egm__copier_set_bounce(nv->copiers[device], nv->params.copy_bounce_bytes);
        }
    }
    *copier_p = nv->copiers[device];
    pthread_mutex_unlock(&nv->copiers_lock);
    return st;
}

/* Copies on `device`'s copier (which makes its context current for the run
 * and gives the caller's back). */
static egm_status_t run_copies(egm_nvlink_t *nv, int device, const egm_copy_desc_t *copies,
                               size_t n, egm_copy_sides_t sides)
{
    egm_copier_t *copier = NULL;
    egm_status_t st = get_copier(nv, device, &copier);
    if (st != EGM_OK)
        return st;
    return egm__copier_run_sides(copier, copies, n, sides);
}

egm_status_t egm__nvlink_prepare_device(egm_nvlink_t *nv, int device)
{
    egm_copier_t *copier = NULL;
    egm_status_t st = get_copier(nv, device, &copier);
    return st == EGM_OK ? egm__copier_warm(copier, EGM_NVLINK_WARM_DESCS) : st;
}

egm_status_t egm__nvlink_copy(egm_nvlink_t *nv, int device, uint64_t dst, uint64_t src, size_t len)
{
    egm_copy_desc_t copy = {.dst = dst, .src = src, .len = len};
    return run_copies(nv, device, &copy, 1, EGM_COPY_SIDES_ANY);
}

egm_status_t egm__nvlink_run(egm_nvlink_t *nv, int device, int local_on_gpu,
                             egm_te_op_t *const *ops, size_t n)
{
    egm_copy_desc_t stack_copies[STACK_COPIES];
    egm_mapping_t *stack_maps[STACK_COPIES];
    egm_copy_desc_t *copies = stack_copies;
    egm_mapping_t **maps = stack_maps;
    egm_status_t st, first = EGM_OK;
    char detail[256] = "";

    if (n == 0)
        return EGM_OK;
    if (n > STACK_COPIES) {
        copies = egm_malloc(n * sizeof(*copies), "te.nvlink.copies");
        maps = egm_calloc(n, sizeof(*maps), "te.nvlink.maps");
        if (copies == NULL || maps == NULL) {
            egm_free(copies);
            egm_free(maps);
            st = egm__set_error(EGM_ERR_NO_MEMORY, "nvlink: out of memory for %zu copies", n);
            for (size_t i = 0; i < n; i++)
                ops[i]->status = st;
            return st;
        }
    }

    /* A reference on every op's mapping keeps it mapped until its copy is
     * done, even if the segment is retired meanwhile. */
    size_t m = 0;
    /* Consecutive ops of one segment (the parts of an object) share the
     * reference the first of them took: maps[i] NULL for the others. */
    size_t reads = 0; /* among the copies: for the copier's sides */
    const egm_segment_desc_t *held_segment = NULL;
    egm_mapping_t *held = NULL;
    for (size_t i = 0; i < n; i++) {
        egm_te_op_t *op = ops[i];
        maps[i] = NULL;
        if (op->segment == held_segment) {
            st = EGM_OK;
        } else {
            st = egm__mapping_get(nv->cache, op->segment, &maps[i], NULL);
            held_segment = st == EGM_OK ? op->segment : NULL;
            held = maps[i];
        }
        if (st == EGM_OK && (op->offset > egm__mapping_size(held) ||
                             op->length > egm__mapping_size(held) - op->offset))
            st = egm__set_error(EGM_ERR_INVALID_ARG,
                                "nvlink: [%" PRIu64 ", +%zu) outside the mapped %" PRIu64 " bytes",
                                op->offset, op->length, egm__mapping_size(held));
        op->status = st;
        if (st != EGM_OK) {
            if (first == EGM_OK) {
                first = st;
                snprintf(detail, sizeof(detail), "%s", egm_last_error());
            }
            continue;
        }
        reads += op->dir == EGM_TE_READ;
        uint64_t remote = egm__mapping_va(held) + op->offset;
        uint64_t local = (uint64_t)(uintptr_t)op->local;
        copies[m++] = op->dir == EGM_TE_READ
                          ? (egm_copy_desc_t){.dst = local, .src = remote, .len = op->length}
                          : (egm_copy_desc_t){.dst = remote, .src = local, .len = op->length};
    }

    if (m > 0) {
        /* The remote side is a pool mapping: host memory for an EGM pool (a
         * pool in GPU memory bounces correctly, for no gain). */
        egm_copy_sides_t sides = !local_on_gpu ? EGM_COPY_SIDES_ANY
                                 : reads == m  ? EGM_COPY_HOST_TO_DEVICE
                                 : reads == 0  ? EGM_COPY_DEVICE_TO_HOST
                                               : EGM_COPY_SIDES_ANY;
        st = run_copies(nv, device, copies, m, sides);
        if (st == EGM_OK) {
            atomic_fetch_add_explicit(&nv->nvlink_copies, m, memory_order_relaxed);
        } else {
            /* The copier cannot say which copy failed: all of them did. */
            if (first == EGM_OK) {
                first = st;
                snprintf(detail, sizeof(detail), "%s", egm_last_error());
            }
            for (size_t i = 0; i < n; i++)
                if (ops[i]->status == EGM_OK)
                    ops[i]->status = st;
        }
    }
    for (size_t i = 0; i < n; i++)
        egm__mapping_put(nv->cache, maps[i]);
    if (copies != stack_copies) {
        egm_free(copies);
        egm_free(maps);
    }
    if (first != EGM_OK)
        egm__set_error(first, "%s", detail);
    return first;
}

/* ---- staging ring ---------------------------------------------------------- */

/* All slots at once, on first use: a process that never stages pins nothing.
 * Pinned memory needs a context: that of the GPU staging through it, which
 * the process uses anyway (under unified addressing every GPU reaches it). */
static egm_status_t staging_alloc(egm_nvlink_t *nv, int device)
{
    egm_status_t st;
    egm_cu_context_t saved;
    if ((st = ctx_enter(nv->api, device, &saved)) != EGM_OK) {
        ctx_leave(nv->api, saved);
        return st;
    }
    for (int i = 0; i < EGM_STAGING_SLOTS; i++) {
        egm_cu_result_t rc = nv->api->cuMemAllocHost(&nv->slots[i], EGM_STAGING_SLOT_BYTES);
        if ((st = egm__cuda_check(rc, "cuMemAllocHost")) != EGM_OK) {
            nv->slots[i] = NULL;
            while (i-- > 0) {
                nv->api->cuMemFreeHost(nv->slots[i]);
                nv->slots[i] = NULL;
            }
            ctx_leave(nv->api, saved);
            return st;
        }
    }
    ctx_leave(nv->api, saved);
    nv->staging_ready = 1;
    nv->staging_device = device;
    egm_debug("nvlink: staging ring of %d x %u bytes pinned", EGM_STAGING_SLOTS,
              EGM_STAGING_SLOT_BYTES);
    return EGM_OK;
}

egm_status_t egm__staging_get(egm_nvlink_t *nv, int device, void **slot_p, size_t *len_p)
{
    egm_status_t st = EGM_OK;
    pthread_mutex_lock(&nv->staging_lock);
    if (!nv->staging_ready && (st = staging_alloc(nv, device)) != EGM_OK) {
        pthread_mutex_unlock(&nv->staging_lock);
        return st;
    }
    for (;;) {
        for (int i = 0; i < EGM_STAGING_SLOTS; i++) {
            if (!nv->slot_busy[i]) {
                nv->slot_busy[i] = 1;
                *slot_p = nv->slots[i];
                *len_p = EGM_STAGING_SLOT_BYTES;
                pthread_mutex_unlock(&nv->staging_lock);
                return EGM_OK;
            }
        }
        pthread_cond_wait(&nv->staging_free, &nv->staging_lock);
    }
}

void egm__staging_put(egm_nvlink_t *nv, void *slot, uint64_t bytes_used)
{
    atomic_fetch_add_explicit(&nv->staged_bytes, bytes_used, memory_order_relaxed);
    pthread_mutex_lock(&nv->staging_lock);
    for (int i = 0; i < EGM_STAGING_SLOTS; i++)
        if (nv->slots[i] == slot)
            nv->slot_busy[i] = 0;
    pthread_cond_signal(&nv->staging_free);
    pthread_mutex_unlock(&nv->staging_lock);
}

egm_status_t egm__staging_copy(egm_nvlink_t *nv, int device, uint64_t gpu, size_t len,
                               egm_staging_dir_t dir, egm_staging_hop_fn hop, void *ctx)
{
    void *slot;
    size_t cap;
    egm_status_t st = egm__staging_get(nv, device, &slot, &cap);
    if (st != EGM_OK)
        return st;
    uint64_t pinned = (uint64_t)(uintptr_t)slot;
    size_t done = 0;
    while (done < len && st == EGM_OK) {
        size_t n = len - done < cap ? len - done : cap;
        if (dir == EGM_STAGING_TO_GPU) {
            st = hop(ctx, done, slot, n, dir);
            if (st == EGM_OK)
                st = egm__nvlink_copy(nv, device, gpu + done, pinned, n);
        } else {
            st = egm__nvlink_copy(nv, device, pinned, gpu + done, n);
            if (st == EGM_OK)
                st = hop(ctx, done, slot, n, dir);
        }
        if (st == EGM_OK)
            done += n;
    }
    egm__staging_put(nv, slot, done);
    return st;
}

/* ---- prewarm --------------------------------------------------------------- */

void egm__nvlink_prewarm(egm_nvlink_t *nv, const egm_segment_desc_t *descs, size_t n)
{
    if (nv->params.prewarm_off || n == 0)
        return;
    pthread_mutex_lock(&nv->prewarm_lock);
    if (nv->prewarm == NULL &&
        egm__prewarm_create(nv->cache, nv->params.prewarm_concurrency, &nv->prewarm) != EGM_OK) {
        egm_debug("nvlink: prewarm unavailable: %s", egm_last_error());
        nv->prewarm = NULL;
    }
    egm_prewarm_t *prewarm = nv->prewarm;
    pthread_mutex_unlock(&nv->prewarm_lock);
    if (prewarm != NULL)
        egm__prewarm_queue(prewarm, descs, n);
}

void egm__nvlink_prewarm_drain(egm_nvlink_t *nv)
{
    pthread_mutex_lock(&nv->prewarm_lock);
    egm_prewarm_t *prewarm = nv->prewarm;
    pthread_mutex_unlock(&nv->prewarm_lock);
    if (prewarm != NULL)
        egm__prewarm_drain(prewarm);
}

void egm__nvlink_stats(egm_nvlink_t *nv, egm_nvlink_stats_t *stats_p)
{
    memset(stats_p, 0, sizeof(*stats_p));
    if (nv == NULL)
        return;
    egm__mapping_cache_stats(nv->cache, &stats_p->mappings);
    pthread_mutex_lock(&nv->prewarm_lock);
    stats_p->prewarmed = nv->prewarm ? egm__prewarm_count(nv->prewarm) : 0;
    pthread_mutex_unlock(&nv->prewarm_lock);
    stats_p->nvlink_copies = atomic_load_explicit(&nv->nvlink_copies, memory_order_relaxed);
    stats_p->staged_bytes = atomic_load_explicit(&nv->staged_bytes, memory_order_relaxed);
    pthread_mutex_lock(&nv->copiers_lock);
    for (int d = 0; d < EGM_NVLINK_MAX_DEVICES; d++) {
        if (nv->copiers[d] == NULL)
            continue;
        egm_copier_stats_t cs;
        egm__copier_stats(nv->copiers[d], &cs);
        stats_p->copiers++;
        stats_p->copier.copies += cs.copies;
        stats_p->copier.bytes += cs.bytes;
        stats_p->copier.kernel_launches += cs.kernel_launches;
        stats_p->copier.engine_copies += cs.engine_copies;
        stats_p->copier.batch_api_calls += cs.batch_api_calls;
        stats_p->copier.groups += cs.groups;
        stats_p->copier.chunks += cs.chunks;
        stats_p->copier.run_ns += cs.run_ns;
        stats_p->copier.bounced_runs += cs.bounced_runs;
        if (cs.max_group_bytes > stats_p->copier.max_group_bytes)
            stats_p->copier.max_group_bytes = cs.max_group_bytes;
    }
    pthread_mutex_unlock(&nv->copiers_lock);
}

/* ---- the nvlink transport (transport.h) --------------------------------------
 * Its state is the engine's nvlink object (NULL without a driver or a GPU),
 * which the engine creates and destroys: the staging ring and the GPU copies
 * serve the other transports too. */

static egm_status_t nvlink_open(const egm_te_env_t *env, void **state_p)
{
    *state_p = env->nvlink;
    return EGM_OK;
}

static const char *nvlink_unavailable(void *state)
{
    return state == NULL ? "no CUDA driver or GPU in this process" : NULL;
}

static const char *nvlink_obstacle(const egm_te_env_t *env, void *state,
                                   const egm_segment_desc_t *segment, int device, char *why,
                                   size_t why_cap)
{
    (void)why, (void)why_cap;
    if (state == NULL)
        return nvlink_unavailable(state);
    if (device < 0 && device != EGM_DEVICE_MAPPED_HOST)
        return "the local buffer is host memory that is neither GPU memory nor registered pinned "
               "memory";
    if (segment->handle_kind != EGM_HANDLE_POSIX_FD && segment->handle_kind != EGM_HANDLE_FABRIC)
        return "the segment is not CUDA VMM memory";
    if (segment->handle_kind == EGM_HANDLE_POSIX_FD &&
        (strcmp(segment->host_id, env->host_id) != 0 || segment->shm_socket[0] == '\0'))
        return "its posix_fd handle can only be imported on its own host";
    return NULL;
}

static int nvlink_retired(void *state, egm_id_t segment_id)
{
    egm_nvlink_t *nv = state;
    return nv != NULL && egm__mapping_retired(nv->cache, segment_id);
}

static egm_status_t nvlink_transfer_batch(const egm_te_env_t *env, void *state, int device,
                                          egm_te_op_t *const *ops, size_t n)
{
    (void)env;
    /* Pinned host memory is copied by GPU 0's copier (every GPU of the
     * process reaches it and the mapping). */
    return egm__nvlink_run(state, device == EGM_DEVICE_MAPPED_HOST ? 0 : device,
                           device != EGM_DEVICE_MAPPED_HOST, ops, n);
}

static void nvlink_prepare(const egm_te_env_t *env, void *state, const egm_segment_desc_t *segment)
{
    /* Any GPU will do for the check: the mapping serves them all. */
    if (state != NULL && nvlink_obstacle(env, state, segment, 0, NULL, 0) == NULL)
        egm__nvlink_prewarm(state, segment, 1);
}

static void nvlink_prepare_wait(void *state)
{
    if (state != NULL)
        egm__nvlink_prewarm_drain(state);
}

static void nvlink_forget(void *state, egm_id_t segment_id)
{
    egm_nvlink_t *nv = state;
    if (nv != NULL)
        egm__mapping_unlink(nv->cache, segment_id);
}

static egm_status_t nvlink_cached_ids(void *state, egm_id_t **ids_p, size_t *n_p)
{
    egm_nvlink_t *nv = state;
    *ids_p = NULL;
    *n_p = 0;
    return nv != NULL ? egm__mapping_cached_ids(nv->cache, ids_p, n_p) : EGM_OK;
}

static void nvlink_stats(void *state, egm_te_stats_t *stats_p)
{
    if (state == NULL)
        return;
    egm_nvlink_stats_t ns;
    egm__nvlink_stats(state, &ns);
    stats_p->nvlink_imports_total = ns.mappings.imports_total;
    stats_p->nvlink_mappings_live = ns.mappings.mappings_live;
    stats_p->nvlink_import_failures = ns.mappings.import_failures;
    stats_p->prewarmed = ns.prewarmed;
    stats_p->nvlink_copies = ns.nvlink_copies;
    stats_p->copy_kernel_launches = ns.copier.kernel_launches;
    stats_p->copy_engine_copies = ns.copier.engine_copies;
    stats_p->copy_batch_calls = ns.copier.batch_api_calls;
    stats_p->copy_bounced_runs = ns.copier.bounced_runs;
    stats_p->copy_groups = ns.copier.groups;
    stats_p->copy_chunks = ns.copier.chunks;
    stats_p->copy_max_group_bytes = ns.copier.max_group_bytes;
    stats_p->copy_run_ns = ns.copier.run_ns;
    stats_p->copy_devices = ns.copiers;
    stats_p->staged_bytes = ns.staged_bytes;
    stats_p->mappings_live += ns.mappings.mappings_live;
}

const egm_transport_ops_t egm__transport_nvlink = {
    .name = "nvlink",
    .protocol = EGM_PROTOCOL_NVLINK,
    .open = nvlink_open,
    .unavailable = nvlink_unavailable,
    .obstacle = nvlink_obstacle,
    .retired = nvlink_retired,
    .transfer_batch = nvlink_transfer_batch,
    .prepare = nvlink_prepare,
    .prepare_wait = nvlink_prepare_wait,
    .forget = nvlink_forget,
    .cached_ids = nvlink_cached_ids,
    .stats = nvlink_stats,
};
