/* Per-device copier: one non-blocking stream and three ways to move a batch:
 * the gather/scatter kernel (many blocks up to 512 KiB, one launch), the
 * driver's cuMemcpyBatchAsync (any other batch of two or more), or one
 * cuMemcpyAsync (a single copy: large single objects). DESIGN.md 4 has the numbers.
 * A kernel batch between this GPU's memory and host memory whose host side
 * lies in long contiguous runs goes through a bounce buffer in GPU memory
 * instead (bounce_plan.h): the kernel gathers or scatters at HBM speed and
 * the copy engines move the runs, on a second stream, chunk by chunk.
 * A run is issued under the copier's lock into one of a few slots (an event
 * and the kernel's pinned descriptors) and waited for outside it, so runs
 * from several threads queue on the stream back to back: the GPU starts the
 * next one as soon as the last ends, not when its thread has been woken.
 * Optional pressure bounds cut long copies into chunks and issue a run in
 * groups of bounded bytes, each waited for under the lock
 * (egm__copier_set_pressure). */
#include "cuda/copier.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "cuda/bounce_plan.h"
#include "cuda/driver.h"
#include "cuda/kernels.h"

#ifndef EGM_HAVE_KERNELS
#define EGM_HAVE_KERNELS 0
#endif

/* Switch-over defaults. On the H200 (docs/gpu.md) the kernel beats one call
 * per block from about 4 blocks of <= 64 KiB (32 x 4 KiB: 15 us vs 91 us) and
 * runs at ~51 GB/s; from blocks of 1 MiB cuMemcpyBatchAsync (copy engines)
 * beats it by ~6%, so larger blocks leave the kernel above 512 KiB. */
#define DEFAULT_MIN_BLOCKS 32
#define DEFAULT_MAX_BLOCK ((size_t)512 << 10)
/* The kernel gets blocks cut into pieces, one CTA each: at most PIECE_MAX so
 * that a few large blocks still spread over every SM, and smaller (down to
 * PIECE_MIN) when a batch is too small to give TARGET_CTAS pieces otherwise,
 * since one CTA moves one piece at PCIe latency. Powers of two >= 16: cuts
 * keep 16-byte alignment. */
#ifndef KERNEL_PIECE_MAX
#define KERNEL_PIECE_MAX ((uint64_t)256 << 10)
#endif
#ifndef KERNEL_PIECE_MIN
#define KERNEL_PIECE_MIN ((uint64_t)16 << 10)
#endif
#ifndef KERNEL_TARGET_CTAS
#define KERNEL_TARGET_CTAS 1024
#endif
#ifndef KERNEL_THREADS
#define KERNEL_THREADS 256
#endif
/* Descriptors per launch (the pinned buffer never grows past this, 1.5 MiB);
 * bigger batches take several launches. */
#define KERNEL_MAX_DESCS ((size_t)1 << 16)
#define KERNEL_MIN_DESCS ((size_t)256)
/* Runs issued and not yet waited for, at most (more threads wait for a slot). */
#define COPIER_SLOTS 4
/* Bounced runs (measured on the H200, 32 KiB pieces, HBM <-> an EGM pool: the
 * kernel alone 52 / 50 GB/s put / get, bounced in chunks of 8 MiB 53-55 / 53-55,
 * in chunks of 2 MiB no better than the kernel): chunks of a quarter of the run
 * within these bounds, runs of at least 4 chunks, host-side spans of at least
 * BOUNCE_MIN_SPAN on average (each is one engine copy). */
#define BOUNCE_MIN_CHUNK ((uint64_t)4 << 20)
#define BOUNCE_MIN_TOTAL (4 * BOUNCE_MIN_CHUNK)
#define BOUNCE_MIN_SPAN ((uint64_t)1 << 20)
/* Each half starts at a multiple of this (the kernel's widest access). */
#define BOUNCE_ALIGN ((uint64_t)256)

/* One run in flight: its completion event and the descriptors its kernel
 * reads, reused only once the run's thread has waited for the event. */
typedef struct {
    egm_cu_event_t event;   /* created on first use */
    egm_copy_desc_t *descs; /* pinned */
    size_t descs_cap;
    int busy;
} copier_slot_t;

struct egm_copier {
    const egm_cuda_api_t *api;
    int device;
    egm_cu_context_t ctx;
    egm_cu_stream_t stream;
    egm_cu_event_t event;
    egm_cu_module_t module;
    egm_cu_function_t kernel; /* NULL: no kernel on this device */
    int priority;             /* of its streams (the least when made low_priority) */

    pthread_mutex_t lock; /* one issue at a time; guards everything below */
    pthread_cond_t slot_free;
    copier_slot_t slots[COPIER_SLOTS];
    egm_copy_desc_t *descs; /* pinned host memory the kernel reads (bounded runs) */
    size_t descs_cap;
    uint64_t *batch; /* cuMemcpyBatchAsync arguments: dsts | srcs | sizes */
    size_t batch_cap;
    size_t min_blocks;
    size_t max_block;
    uint64_t max_inflight;  /* 0 = unbounded */
    uint64_t chunk;         /* 0 = copies whole */
    egm_copy_desc_t *group; /* one group's pieces, when copies are cut or bounded */
    size_t group_cap;
    /* Bounced runs: the buffer (two halves), the far side's stream and the
     * events between the two streams; made on a first bounced run. */
    uint64_t bounce_bytes;     /* egm__copier_set_bounce; 0 = off */
    egm_cu_deviceptr_t bounce; /* 0: not made (yet) */
    egm_cu_stream_t far_stream;
    egm_cu_event_t bounce_start; /* the main stream's work before a run */
    egm_cu_event_t filled[2];    /* a half holds its chunk */
    egm_cu_event_t drained[2];   /* a half's chunk has left it */

    atomic_uint_fast64_t copies;
    atomic_uint_fast64_t bytes;
    atomic_uint_fast64_t kernel_launches;
    atomic_uint_fast64_t engine_copies;
    atomic_uint_fast64_t batch_api_calls;
    atomic_uint_fast64_t groups;
    atomic_uint_fast64_t chunks;
    atomic_uint_fast64_t max_group_bytes;
    atomic_uint_fast64_t run_ns;
    atomic_uint_fast64_t bounced_runs;
};

_Static_assert(sizeof(size_t) == sizeof(uint64_t), "batch sizes share the uint64_t scratch");

int egm__copier_has_kernels(void)
{
    return EGM_HAVE_KERNELS && egm__kernels_fatbin_size > 0;
}

/* Makes the copier's context current for this call; *saved_p is the caller's. */
static egm_status_t enter(const egm_copier_t *c, egm_cu_context_t *saved_p)
{
    egm_cu_context_t now = NULL;
    if (c->api->cuCtxGetCurrent(&now) != EGM_CU_SUCCESS)
        now = NULL;
    *saved_p = now;
    if (now == c->ctx)
        return EGM_OK;
    return egm__cuda_check(c->api->cuCtxSetCurrent(c->ctx), "cuCtxSetCurrent");
}

static void leave(const egm_copier_t *c, egm_cu_context_t saved)
{
    if (saved == c->ctx)
        return;
    egm_cu_result_t rc = c->api->cuCtxSetCurrent(saved);
    if (rc != EGM_CU_SUCCESS)
        egm_warn("copier: restoring the caller's CUDA context: %s", egm__cuda_error_name(rc));
}

/* The kernel of this device, or none (then batches use the other paths). */
static void load_kernel(egm_copier_t *c)
{
    if (!egm__copier_has_kernels())
        return;
    egm_cu_result_t rc = c->api->cuModuleLoadData(&c->module, egm__kernels_fatbin);
    if (rc != EGM_CU_SUCCESS) {
        /* E.g. a GPU older than sm_90: the fatbin has no code for it. */
        c->module = NULL;
        egm_warn("copier: device %d cannot load the copy kernels (cuModuleLoadData: %s); "
                 "batches use %s",
                 c->device, egm__cuda_error_name(rc),
                 c->api->cuMemcpyBatchAsync ? "cuMemcpyBatchAsync" : "one copy per block");
        return;
    }
    rc = c->api->cuModuleGetFunction(&c->kernel, c->module, EGM_KERNEL_COPY_BLOCKS);
    if (rc != EGM_CU_SUCCESS) {
        egm_warn("copier: device %d: cuModuleGetFunction(%s): %s; batches do without it", c->device,
                 EGM_KERNEL_COPY_BLOCKS, egm__cuda_error_name(rc));
        c->kernel = NULL;
        rc = c->api->cuModuleUnload(c->module);
        if (rc != EGM_CU_SUCCESS)
            egm_warn("copier: cuModuleUnload: %s", egm__cuda_error_name(rc));
        c->module = NULL;
    }
}

egm_status_t egm__copier_create(int device, int low_priority, egm_copier_t **copier_p)
{
    const egm_cuda_api_t *api;
    egm_cu_context_t saved = NULL;
    egm_status_t st;
    egm_cu_result_t rc;

    if (copier_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "copier: copier_p is NULL");
    *copier_p = NULL;
    if ((st = egm__cuda_load(&api)) != EGM_OK)
        return st;
    egm_copier_t *c = egm_calloc(1, sizeof(*c), "cuda.copier");
    if (c == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "copier: out of memory");
    c->api = api;
    c->device = device;
    c->min_blocks = DEFAULT_MIN_BLOCKS;
    c->max_block = DEFAULT_MAX_BLOCK;

    if (api->cuCtxGetCurrent(&saved) != EGM_CU_SUCCESS)
        saved = NULL;
    if ((st = egm__cuda_use_device(device)) != EGM_OK)
        goto err_free;
    if ((st = egm__cuda_check(api->cuCtxGetCurrent(&c->ctx), "cuCtxGetCurrent")) != EGM_OK)
        goto err_restore;

    int priority = 0;
    if (low_priority) {
        int least = 0, greatest = 0;
        rc = api->cuCtxGetStreamPriorityRange(&least, &greatest);
        if ((st = egm__cuda_check(rc, "cuCtxGetStreamPriorityRange")) != EGM_OK)
            goto err_restore;
        priority = least;
    }
    c->priority = priority;
    rc = api->cuStreamCreateWithPriority(&c->stream, EGM_CU_STREAM_NON_BLOCKING, priority);
    if ((st = egm__cuda_check(rc, "cuStreamCreateWithPriority")) != EGM_OK)
        goto err_restore;
    rc = api->cuEventCreate(&c->event, EGM_CU_EVENT_DISABLE_TIMING);
    if ((st = egm__cuda_check(rc, "cuEventCreate")) != EGM_OK)
        goto err_stream;
    load_kernel(c);

    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->slot_free, NULL);
    leave(c, saved);
    egm_debug("copier: device %d, %s priority stream, %s for batches", device,
              low_priority ? "low" : "default",
              c->kernel                 ? "kernel"
              : api->cuMemcpyBatchAsync ? "cuMemcpyBatchAsync"
                                        : "engines");
    *copier_p = c;
    return EGM_OK;

err_stream:
    rc = api->cuStreamDestroy(c->stream);
    if (rc != EGM_CU_SUCCESS)
        egm_warn("copier: cuStreamDestroy: %s", egm__cuda_error_name(rc));
err_restore:
    rc = api->cuCtxSetCurrent(saved);
    if (rc != EGM_CU_SUCCESS)
        egm_warn("copier: restoring the caller's CUDA context: %s", egm__cuda_error_name(rc));
err_free:
    egm_free(c);
    return st;
}

#define BOUNCE_EVENTS 5

/* The bounced runs' events, for making and freeing them together. */
static void bounce_events(egm_copier_t *c, egm_cu_event_t *events[BOUNCE_EVENTS])
{
    events[0] = &c->bounce_start;
    events[1] = &c->filled[0];
    events[2] = &c->filled[1];
    events[3] = &c->drained[0];
    events[4] = &c->drained[1];
}

/* What bounce_make made (in the copier's context, entered by the caller). */
static void bounce_free(egm_copier_t *c)
{
    const egm_cuda_api_t *api = c->api;
    egm_cu_result_t rc;
    egm_cu_event_t *events[BOUNCE_EVENTS];
    bounce_events(c, events);
    for (size_t i = 0; i < BOUNCE_EVENTS; i++) {
        if (*events[i] != NULL && (rc = api->cuEventDestroy(*events[i])) != EGM_CU_SUCCESS)
            egm_warn("copier: cuEventDestroy: %s", egm__cuda_error_name(rc));
        *events[i] = NULL;
    }
    if (c->far_stream != NULL && (rc = api->cuStreamDestroy(c->far_stream)) != EGM_CU_SUCCESS)
        egm_warn("copier: cuStreamDestroy: %s", egm__cuda_error_name(rc));
    c->far_stream = NULL;
    if (c->bounce != 0 && (rc = api->cuMemFree(c->bounce)) != EGM_CU_SUCCESS)
        egm_warn("copier: cuMemFree(bounce buffer): %s", egm__cuda_error_name(rc));
    c->bounce = 0;
}

/* The bounce buffer, its stream (of the main stream's priority) and events,
 * on a first bounced run (context entered, lock held). A failure leaves
 * nothing behind and turns bouncing off for this copier: its runs go on
 * through the kernel. 1 when ready. */
static int bounce_make(egm_copier_t *c)
{
    const egm_cuda_api_t *api = c->api;
    if (c->bounce != 0)
        return 1;
    egm_status_t st =
        egm__cuda_check(api->cuMemAlloc(&c->bounce, c->bounce_bytes), "cuMemAlloc(bounce buffer)");
    if (st != EGM_OK)
        c->bounce = 0;
    if (st == EGM_OK) {
        st = egm__cuda_check(api->cuStreamCreateWithPriority(
                                 &c->far_stream, EGM_CU_STREAM_NON_BLOCKING, c->priority),
                             "cuStreamCreateWithPriority");
        if (st != EGM_OK)
            c->far_stream = NULL;
    }
    egm_cu_event_t *events[BOUNCE_EVENTS];
    bounce_events(c, events);
    for (size_t i = 0; st == EGM_OK && i < BOUNCE_EVENTS; i++) {
        st = egm__cuda_check(api->cuEventCreate(events[i], EGM_CU_EVENT_DISABLE_TIMING),
                             "cuEventCreate");
        if (st != EGM_OK)
            *events[i] = NULL;
    }
    if (st == EGM_OK)
        return 1;
    egm_warn("copier: device %d: no bounce buffer of %" PRIu64
             " bytes (%s): batches of small pieces use the kernel alone",
             c->device, c->bounce_bytes, egm_last_error());
    bounce_free(c);
    c->bounce_bytes = 0;
    return 0;
}

void egm__copier_destroy(egm_copier_t *c)
{
    egm_cu_context_t saved;
    egm_cu_result_t rc;
    if (c == NULL)
        return;
    const egm_cuda_api_t *api = c->api;
    /* A run waited for outside the lock still uses its slot (event, descriptors)
     * and re-takes the lock to give it back: wait for every one. */
    pthread_mutex_lock(&c->lock);
    for (;;) {
        int busy = 0;
        for (int i = 0; i < COPIER_SLOTS; i++)
            busy |= c->slots[i].busy;
        if (!busy)
            break;
        pthread_cond_wait(&c->slot_free, &c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    if (enter(c, &saved) != EGM_OK)
        egm_warn("copier: device %d: %s", c->device, egm_last_error());
    if (c->module != NULL && (rc = api->cuModuleUnload(c->module)) != EGM_CU_SUCCESS)
        egm_warn("copier: cuModuleUnload: %s", egm__cuda_error_name(rc));
    if (c->descs != NULL && (rc = api->cuMemFreeHost(c->descs)) != EGM_CU_SUCCESS)
        egm_warn("copier: cuMemFreeHost: %s", egm__cuda_error_name(rc));
    for (int i = 0; i < COPIER_SLOTS; i++) {
        copier_slot_t *slot = &c->slots[i];
        if (slot->descs != NULL && (rc = api->cuMemFreeHost(slot->descs)) != EGM_CU_SUCCESS)
            egm_warn("copier: cuMemFreeHost: %s", egm__cuda_error_name(rc));
        if (slot->event != NULL && (rc = api->cuEventDestroy(slot->event)) != EGM_CU_SUCCESS)
            egm_warn("copier: cuEventDestroy: %s", egm__cuda_error_name(rc));
    }
    bounce_free(c);
    if ((rc = api->cuEventDestroy(c->event)) != EGM_CU_SUCCESS)
        egm_warn("copier: cuEventDestroy: %s", egm__cuda_error_name(rc));
    if ((rc = api->cuStreamDestroy(c->stream)) != EGM_CU_SUCCESS)
        egm_warn("copier: cuStreamDestroy: %s", egm__cuda_error_name(rc));
    leave(c, saved);
    pthread_cond_destroy(&c->slot_free);
    pthread_mutex_destroy(&c->lock);
    egm_free(c->group);
    egm_free(c->batch);
    egm_free(c);
}

void egm__copier_set_kernel_threshold(egm_copier_t *c, size_t min_blocks, size_t max_block_bytes)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    c->min_blocks = min_blocks;
    c->max_block = max_block_bytes;
    pthread_mutex_unlock(&c->lock);
}

void egm__copier_set_pressure(egm_copier_t *c, uint64_t max_inflight_bytes, uint64_t chunk_bytes)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    c->max_inflight = max_inflight_bytes;
    c->chunk = chunk_bytes;
    pthread_mutex_unlock(&c->lock);
}

void egm__copier_set_bounce(egm_copier_t *c, uint64_t bytes)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    if (c->bounce == 0) /* once made, the buffer stays as it is */
        c->bounce_bytes = bytes & ~(uint64_t)(2 * BOUNCE_ALIGN - 1);
    pthread_mutex_unlock(&c->lock);
}

void egm__copier_stats(const egm_copier_t *c, egm_copier_stats_t *stats_p)
{
    if (stats_p == NULL)
        return;
    memset(stats_p, 0, sizeof(*stats_p));
    if (c == NULL)
        return;
    stats_p->copies = atomic_load_explicit(&c->copies, memory_order_relaxed);
    stats_p->bytes = atomic_load_explicit(&c->bytes, memory_order_relaxed);
    stats_p->kernel_launches = atomic_load_explicit(&c->kernel_launches, memory_order_relaxed);
    stats_p->engine_copies = atomic_load_explicit(&c->engine_copies, memory_order_relaxed);
    stats_p->batch_api_calls = atomic_load_explicit(&c->batch_api_calls, memory_order_relaxed);
    stats_p->groups = atomic_load_explicit(&c->groups, memory_order_relaxed);
    stats_p->chunks = atomic_load_explicit(&c->chunks, memory_order_relaxed);
    stats_p->max_group_bytes = atomic_load_explicit(&c->max_group_bytes, memory_order_relaxed);
    stats_p->run_ns = atomic_load_explicit(&c->run_ns, memory_order_relaxed);
    stats_p->bounced_runs = atomic_load_explicit(&c->bounced_runs, memory_order_relaxed);
}

/* Waits for everything issued on the stream so far. */
static egm_status_t wait_stream(egm_copier_t *c)
{
    egm_status_t st = egm__cuda_check(c->api->cuEventRecord(c->event, c->stream), "cuEventRecord");
    if (st != EGM_OK)
        return st;
    return egm__cuda_check(c->api->cuEventSynchronize(c->event), "cuEventSynchronize");
}

/* After a failed issue: what was queued must finish before the caller may
 * reuse its buffers; the first error is the one reported. */
static void drain_after_error(egm_copier_t *c)
{
    egm_cu_result_t rc = c->api->cuStreamSynchronize(c->stream);
    if (rc != EGM_CU_SUCCESS)
        egm_debug("copier: cuStreamSynchronize after a failed copy: %s", egm__cuda_error_name(rc));
}

/* A pinned descriptor buffer (*descs_p, *cap_p) of at least `need` entries
 * (at most KERNEL_MAX_DESCS); the old one is freed when it grows. */
static egm_status_t ensure_descs(egm_copier_t *c, egm_copy_desc_t **descs_p, size_t *cap_p,
                                 size_t need)
{
    if (*cap_p >= need)
        return EGM_OK;
    size_t cap = *cap_p ? *cap_p : KERNEL_MIN_DESCS;
    while (cap < need)
        cap *= 2;
    if (cap > KERNEL_MAX_DESCS)
        cap = KERNEL_MAX_DESCS;
    void *p = NULL;
    egm_status_t st = egm__cuda_check(c->api->cuMemAllocHost(&p, cap * sizeof(egm_copy_desc_t)),
                                      "cuMemAllocHost(copy descriptors)");
    if (st != EGM_OK)
        return st;
    if (*descs_p != NULL) {
        egm_cu_result_t rc = c->api->cuMemFreeHost(*descs_p);
        if (rc != EGM_CU_SUCCESS)
            egm_warn("copier: cuMemFreeHost: %s", egm__cuda_error_name(rc));
    }
    *descs_p = p;
    *cap_p = cap;
    return EGM_OK;
}

static uint64_t piece_size(uint64_t total)
{
    uint64_t piece = KERNEL_PIECE_MAX;
    while (piece > KERNEL_PIECE_MIN && total / piece < KERNEL_TARGET_CTAS)
        piece /= 2;
    return piece;
}

static uint64_t count_pieces(const egm_copy_desc_t *copies, size_t n, uint64_t piece)
{
    uint64_t pieces = 0;
    for (size_t i = 0; i < n; i++)
        pieces += (copies[i].len + piece - 1) / piece;
    return pieces;
}

/* Every copy through the kernel: descriptors (cut into pieces) written into
 * the pinned buffer *descs_p, one launch per buffer-full, one CTA per piece;
 * issued, not waited for (but for the launches before the last, whose buffer
 * the next one refills). */
static egm_status_t issue_kernel(egm_copier_t *c, const egm_copy_desc_t *copies, size_t n,
                                 uint64_t total, egm_copy_desc_t **descs_p, size_t *cap_p,
                                 uint64_t *launches_p)
{
    uint64_t piece = piece_size(total);
    uint64_t pieces = count_pieces(copies, n, piece);
    egm_status_t st =
        ensure_descs(c, descs_p, cap_p, pieces < KERNEL_MAX_DESCS ? pieces : KERNEL_MAX_DESCS);
    if (st != EGM_OK)
        return st;
    size_t i = 0;
    uint64_t offset = 0; /* into copies[i] */
    while (i < n) {
        size_t count = 0;
        while (i < n && count < *cap_p) {
            uint64_t left = copies[i].len - offset;
            if (left == 0) {
                i++;
                offset = 0;
                continue;
            }
            uint64_t len = left < piece ? left : piece;
            (*descs_p)[count++] = (egm_copy_desc_t){
                .dst = copies[i].dst + offset, .src = copies[i].src + offset, .len = len};
            offset += len;
        }
        /* Past the copies this round finished (and empty ones): i < n below
         * means a copy still has bytes, so a run whose pieces exactly fill
         * the buffer ends with this launch, waited for by the caller. */
        while (i < n && copies[i].len == offset) {
            i++;
            offset = 0;
        }
        if (count == 0)
            break; /* only empty copies were left */
        const egm_copy_desc_t *descs = *descs_p;
        uint32_t count32 = (uint32_t)count;
        void *params[] = {&descs, &count32};
        egm_cu_result_t rc = c->api->cuLaunchKernel(
            c->kernel, (unsigned)count, 1, 1, KERNEL_THREADS, 1, 1, 0, c->stream, params, NULL);
        if ((st = egm__cuda_check(rc, "cuLaunchKernel(" EGM_KERNEL_COPY_BLOCKS ")")) != EGM_OK) {
            drain_after_error(c);
            return st;
        }
        (*launches_p)++;
        /* The next round refills the buffer this launch reads. */
        if (i < n && (st = wait_stream(c)) != EGM_OK)
            return st;
    }
    return EGM_OK;
}

/* One driver call for the whole batch (batches the kernel does not take),
 * issued. */
static egm_status_t issue_batch(egm_copier_t *c, const egm_copy_desc_t *copies, size_t n,
                                size_t nonzero)
{
    if (c->batch_cap < nonzero) {
        uint64_t *grown =
            egm_realloc(c->batch, 3 * nonzero * sizeof(uint64_t), "cuda.copier.batch");
        if (grown == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "copier: out of memory for %zu copies",
                                  nonzero);
        c->batch = grown;
        c->batch_cap = nonzero;
    }
    egm_cu_deviceptr_t *dsts = c->batch;
    egm_cu_deviceptr_t *srcs = c->batch + nonzero;
    size_t *sizes = (size_t *)(c->batch + 2 * nonzero);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (copies[i].len == 0)
            continue;
        dsts[k] = copies[i].dst;
        srcs[k] = copies[i].src;
        sizes[k] = copies[i].len;
        k++;
    }
    /* One attribute for every copy: stream order, no location hints. */
    egm_cu_memcpy_attributes_t attrs;
    memset(&attrs, 0, sizeof(attrs));
    attrs.src_access_order = EGM_CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t attr_idx = 0;
    egm_cu_result_t rc =
        c->api->cuMemcpyBatchAsync(dsts, srcs, sizes, k, &attrs, &attr_idx, 1, c->stream);
    egm_status_t st = egm__cuda_check(rc, "cuMemcpyBatchAsync");
    if (st != EGM_OK)
        drain_after_error(c);
    return st;
}

/* One copy-engine call per copy, issued. */
static egm_status_t issue_engines(egm_copier_t *c, const egm_copy_desc_t *copies, size_t n,
                                  uint64_t *issued_p)
{
    for (size_t i = 0; i < n; i++) {
        if (copies[i].len == 0)
            continue;
        egm_cu_result_t rc =
            c->api->cuMemcpyAsync(copies[i].dst, copies[i].src, copies[i].len, c->stream);
        egm_status_t st = egm__cuda_check(rc, "cuMemcpyAsync");
        if (st != EGM_OK) {
            drain_after_error(c);
            return st;
        }
        (*issued_p)++;
    }
    return EGM_OK;
}

/* The size of the halves a bounced run of `total` bytes uses: a quarter of
 * it, within [BOUNCE_MIN_CHUNK, half the buffer]. */
static uint64_t bounce_half(const egm_copier_t *c, uint64_t total)
{
    uint64_t half = (total / 4 + BOUNCE_ALIGN - 1) & ~(BOUNCE_ALIGN - 1);
    if (half < BOUNCE_MIN_CHUNK)
        half = BOUNCE_MIN_CHUNK;
    if (half > c->bounce_bytes / 2)
        half = c->bounce_bytes / 2;
    return half;
}

/* Whether the run goes through the bounce buffer: kernel-sized pieces
 * between this GPU's memory and host memory (sides), enough bytes for the
 * chunks to overlap, host-side spans long enough for the engines, and its
 * pieces within one descriptor buffer. */
static int bounce_fits(const egm_copier_t *c, const egm_copy_desc_t *copies, size_t n,
                       egm_copy_sides_t sides, uint64_t total, uint64_t longest)
{
    if (sides == EGM_COPY_SIDES_ANY || c->bounce_bytes / 2 < BOUNCE_MIN_CHUNK ||
        total < BOUNCE_MIN_TOTAL || c->max_inflight > 0 || c->chunk > 0)
        return 0;
    int far_is_dst = sides == EGM_COPY_DEVICE_TO_HOST;
    uint64_t spans = 0, end = 0;
    for (size_t i = 0; i < n; i++) {
        if (copies[i].len == 0)
            continue;
        uint64_t far = far_is_dst ? copies[i].dst : copies[i].src;
        if (spans == 0 || far != end)
            spans++;
        end = far + copies[i].len;
    }
    if (spans * BOUNCE_MIN_SPAN > total)
        return 0;
    uint64_t half = bounce_half(c, total);
    /* a copy with its alignment padding within a half (the kernel's blocks
     * can be raised past a half: egm__copier_set_kernel_threshold) */
    return longest + 15 <= half && count_pieces(copies, n, piece_size(half)) <= KERNEL_MAX_DESCS;
}

/* A bounced run, issued (docs in bounce_plan.h): chunk k in half k % 2. To
 * the host: the kernel gathers chunk k into its half on the main stream, then
 * the far stream moves its spans out; from the host: the far stream brings
 * the spans in, then the kernel scatters them. A half is refilled only once
 * the chunk before in it has left (the drained events); the far stream starts
 * after the main stream's earlier work (runs before this one may still use
 * the buffer), and the main stream ends after the far stream's last copy, so
 * that the slot's event covers the whole run. */
static egm_status_t issue_bounce(egm_copier_t *c, const egm_copy_desc_t *copies, size_t n,
                                 egm_copy_sides_t sides, uint64_t total, egm_copy_desc_t **descs_p,
                                 size_t *cap_p, uint64_t *launches_p, uint64_t *engine_p)
{
    const egm_cuda_api_t *api = c->api;
    int to_host = sides == EGM_COPY_DEVICE_TO_HOST;
    uint64_t half = bounce_half(c, total), piece = piece_size(half);
    egm_bounce_plan_t plan;
    size_t *first_desc = NULL;
    egm_status_t st = egm__bounce_plan(copies, n, to_host, half, &plan);
    if (st != EGM_OK)
        return st;
    first_desc = egm_calloc(plan.n_chunks + 1, sizeof(*first_desc), "cuda.copier.bounce");
    if (first_desc == NULL) {
        st = egm__set_error(EGM_ERR_NO_MEMORY, "copier: out of memory for a bounced run");
        goto out;
    }
    if ((st = ensure_descs(c, descs_p, cap_p, count_pieces(copies, n, piece))) != EGM_OK)
        goto out;
    /* The kernel's pieces, chunk after chunk: near side <-> its place in the half. */
    size_t d = 0;
    for (size_t k = 0; k < plan.n_chunks; k++) {
        const egm_bounce_chunk_t *ch = &plan.chunks[k];
        uint64_t base = c->bounce + (k % 2) * (c->bounce_bytes / 2);
        first_desc[k] = d;
        for (size_t i = ch->first_copy; i < ch->first_copy + ch->n_copies; i++) {
            uint64_t near = to_host ? copies[i].src : copies[i].dst;
            uint64_t at = base + plan.offs[i];
            for (uint64_t o = 0; o < copies[i].len; o += piece) {
                uint64_t len = copies[i].len - o < piece ? copies[i].len - o : piece;
                (*descs_p)[d++] =
                    to_host ? (egm_copy_desc_t){.dst = at + o, .src = near + o, .len = len}
                            : (egm_copy_desc_t){.dst = near + o, .src = at + o, .len = len};
            }
        }
    }
    first_desc[plan.n_chunks] = d;

    egm_cu_stream_t kernel_stream = c->stream, far = c->far_stream;
    st = egm__cuda_check(api->cuEventRecord(c->bounce_start, kernel_stream), "cuEventRecord");
    if (st == EGM_OK)
        st = egm__cuda_check(api->cuStreamWaitEvent(far, c->bounce_start, 0), "cuStreamWaitEvent");
    for (size_t k = 0; k < plan.n_chunks && st == EGM_OK; k++) {
        const egm_bounce_chunk_t *ch = &plan.chunks[k];
        int h = (int)(k % 2);
        uint64_t base = c->bounce + (uint64_t)h * (c->bounce_bytes / 2);
        /* first: the stream that fills the half; second: the one that empties it */
        egm_cu_stream_t first = to_host ? kernel_stream : far;
        egm_cu_stream_t second = to_host ? far : kernel_stream;
        if (k >= 2)
            st = egm__cuda_check(api->cuStreamWaitEvent(first, c->drained[h], 0),
                                 "cuStreamWaitEvent");
        for (int step = 0; step < 2 && st == EGM_OK; step++) {
            int kernel_step = to_host ? step == 0 : step == 1;
            egm_cu_stream_t on = step == 0 ? first : second;
            if (step == 1)
                st = egm__cuda_check(api->cuStreamWaitEvent(second, c->filled[h], 0),
                                     "cuStreamWaitEvent");
            if (st == EGM_OK && kernel_step) {
                const egm_copy_desc_t *descs = *descs_p + first_desc[k];
                uint32_t count = (uint32_t)(first_desc[k + 1] - first_desc[k]);
                void *params[] = {&descs, &count};
                if (count > 0) {
                    st = egm__cuda_check(api->cuLaunchKernel(c->kernel, count, 1, 1, KERNEL_THREADS,
                                                             1, 1, 0, on, params, NULL),
                                         "cuLaunchKernel(" EGM_KERNEL_COPY_BLOCKS ")");
                    if (st == EGM_OK)
                        (*launches_p)++;
                }
            } else if (st == EGM_OK) {
                for (size_t r = ch->first_run; r < ch->first_run + ch->n_runs && st == EGM_OK;
                     r++) {
                    const egm_bounce_run_t *run = &plan.runs[r];
                    st = egm__cuda_check(
                        to_host ? api->cuMemcpyAsync(run->far, base + run->off, run->len, on)
                                : api->cuMemcpyAsync(base + run->off, run->far, run->len, on),
                        "cuMemcpyAsync");
                    if (st == EGM_OK)
                        (*engine_p)++;
                }
            }
            if (st == EGM_OK)
                st = egm__cuda_check(
                    api->cuEventRecord(step == 0 ? c->filled[h] : c->drained[h], on),
                    "cuEventRecord");
        }
    }
    /* To the host the far stream copies last: the main stream waits for it. */
    if (st == EGM_OK && to_host && plan.n_chunks > 0)
        st = egm__cuda_check(
            api->cuStreamWaitEvent(kernel_stream, c->drained[(plan.n_chunks - 1) % 2], 0),
            "cuStreamWaitEvent");
    if (st != EGM_OK) {
        egm_cu_result_t rc = api->cuStreamSynchronize(far);
        if (rc != EGM_CU_SUCCESS)
            egm_debug("copier: cuStreamSynchronize(far) after a failed copy: %s",
                      egm__cuda_error_name(rc));
        drain_after_error(c);
    }
out:
    egm_free(first_desc);
    egm__bounce_plan_free(&plan);
    return st;
}

/* How a run's copies move, chosen from the run as the caller gave it. */
typedef enum { PATH_KERNEL, PATH_BATCH, PATH_ENGINES, PATH_BOUNCE } copy_path_t;

/* One group of copies through `path`, issued on the stream (kernel
 * descriptors in *descs_p), counted once issued. */
static egm_status_t issue_group(egm_copier_t *c, copy_path_t path, const egm_copy_desc_t *copies,
                                size_t n, size_t nonzero, uint64_t bytes, egm_copy_sides_t sides,
                                egm_copy_desc_t **descs_p, size_t *cap_p)
{
    egm_status_t st;
    uint64_t launches = 0, issued = 0;
    switch (path) {
    case PATH_BOUNCE:
        st = issue_bounce(c, copies, n, sides, bytes, descs_p, cap_p, &launches, &issued);
        atomic_fetch_add_explicit(&c->kernel_launches, launches, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->engine_copies, issued, memory_order_relaxed);
        if (st == EGM_OK)
            atomic_fetch_add_explicit(&c->bounced_runs, 1, memory_order_relaxed);
        break;
    case PATH_KERNEL:
        st = issue_kernel(c, copies, n, bytes, descs_p, cap_p, &launches);
        atomic_fetch_add_explicit(&c->kernel_launches, launches, memory_order_relaxed);
        break;
    case PATH_BATCH:
        st = issue_batch(c, copies, n, nonzero);
        if (st == EGM_OK)
            atomic_fetch_add_explicit(&c->batch_api_calls, 1, memory_order_relaxed);
        break;
    default:
        st = issue_engines(c, copies, n, &issued);
        atomic_fetch_add_explicit(&c->engine_copies, issued, memory_order_relaxed);
        break;
    }
    if (st != EGM_OK)
        return st;
    atomic_fetch_add_explicit(&c->groups, 1, memory_order_relaxed);
    /* Written under the copier's lock only: a plain compare suffices. */
    if (bytes > atomic_load_explicit(&c->max_group_bytes, memory_order_relaxed))
        atomic_store_explicit(&c->max_group_bytes, bytes, memory_order_relaxed);
    return EGM_OK;
}

/* One group issued and waited for, under the lock (bounded runs). */
static egm_status_t run_group(egm_copier_t *c, copy_path_t path, const egm_copy_desc_t *copies,
                              size_t n, size_t nonzero, uint64_t bytes)
{
    egm_status_t st = issue_group(c, path, copies, n, nonzero, bytes, EGM_COPY_SIDES_ANY, &c->descs,
                                  &c->descs_cap);
    return st != EGM_OK ? st : wait_stream(c);
}

static egm_status_t group_reserve(egm_copier_t *c, size_t need)
{
    if (c->group_cap >= need)
        return EGM_OK;
    size_t cap = c->group_cap ? 2 * c->group_cap : 64;
    while (cap < need)
        cap *= 2;
    egm_copy_desc_t *grown = egm_realloc(c->group, cap * sizeof(*grown), "cuda.copier.group");
    if (grown == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "copier: out of memory for %zu pieces", cap);
    c->group = grown;
    c->group_cap = cap;
    return EGM_OK;
}

/* The run under the pressure bounds: copies cut into pieces of at most `cut`
 * bytes, gathered into groups of at most max_inflight bytes (all in one group
 * when unbounded); a group ends before a piece that would overflow it, so
 * copies are cut only at `cut`. Each group is waited for before the next. */
static egm_status_t run_bounded(egm_copier_t *c, copy_path_t path, const egm_copy_desc_t *copies,
                                size_t n, uint64_t cut)
{
    uint64_t bound = c->max_inflight;
    size_t i = 0;
    uint64_t offset = 0; /* into copies[i] */
    while (i < n) {
        size_t k = 0;
        uint64_t bytes = 0, pieces_of_cut = 0;
        while (i < n) {
            uint64_t left = copies[i].len - offset;
            if (left == 0) {
                i++;
                offset = 0;
                continue;
            }
            uint64_t len = left < cut ? left : cut;
            if (bound > 0 && bytes + len > bound)
                break; /* k > 0 here: a piece alone never exceeds the bound */
            egm_status_t st = group_reserve(c, k + 1);
            if (st != EGM_OK)
                return st;
            c->group[k++] = (egm_copy_desc_t){
                .dst = copies[i].dst + offset, .src = copies[i].src + offset, .len = len};
            if (copies[i].len > cut)
                pieces_of_cut++;
            bytes += len;
            offset += len;
        }
        if (k == 0)
            break; /* only empty copies were left */
        egm_status_t st = run_group(c, path, c->group, k, k, bytes);
        if (st != EGM_OK)
            return st;
        atomic_fetch_add_explicit(&c->chunks, pieces_of_cut, memory_order_relaxed);
    }
    return EGM_OK;
}

/* A free slot, its event created on first use; waits (releasing the lock)
 * while every slot has a run in flight. Called with the lock held. */
static egm_status_t take_slot(egm_copier_t *c, copier_slot_t **slot_p)
{
    for (;;) {
        for (int i = 0; i < COPIER_SLOTS; i++) {
            copier_slot_t *slot = &c->slots[i];
            if (slot->busy)
                continue;
            if (slot->event == NULL) {
                egm_cu_result_t rc =
                    c->api->cuEventCreate(&slot->event, EGM_CU_EVENT_DISABLE_TIMING);
                egm_status_t st = egm__cuda_check(rc, "cuEventCreate");
                if (st != EGM_OK) {
                    slot->event = NULL;
                    return st;
                }
            }
            slot->busy = 1;
            *slot_p = slot;
            return EGM_OK;
        }
        pthread_cond_wait(&c->slot_free, &c->lock);
    }
}

static void give_slot(egm_copier_t *c, copier_slot_t *slot)
{
    slot->busy = 0;
    pthread_cond_broadcast(&c->slot_free); /* runs waiting for a slot, and destroy */
}

/* Issues the group into a slot under the lock (held on entry), then releases
 * the lock and waits for the slot's event: another thread's run can be queued
 * behind this one while it is on the GPU. Returns with the lock released. */
static egm_status_t run_in_slot(egm_copier_t *c, copy_path_t path, const egm_copy_desc_t *copies,
                                size_t n, size_t nonzero, uint64_t total, egm_copy_sides_t sides)
{
    copier_slot_t *slot = NULL;
    egm_status_t st = take_slot(c, &slot);
    if (st == EGM_OK)
        st = issue_group(c, path, copies, n, nonzero, total, sides, &slot->descs, &slot->descs_cap);
    if (st == EGM_OK) {
        st = egm__cuda_check(c->api->cuEventRecord(slot->event, c->stream), "cuEventRecord");
        if (st != EGM_OK)
            drain_after_error(c); /* the slot's descriptors may still be read */
    }
    if (st != EGM_OK) {
        if (slot != NULL)
            give_slot(c, slot);
        pthread_mutex_unlock(&c->lock);
        return st;
    }
    pthread_mutex_unlock(&c->lock);
    st = egm__cuda_check(c->api->cuEventSynchronize(slot->event), "cuEventSynchronize");
    pthread_mutex_lock(&c->lock);
    if (st != EGM_OK)
        drain_after_error(c); /* the kernel may still read the slot's descriptors */
    give_slot(c, slot);
    pthread_mutex_unlock(&c->lock);
    return st;
}

static egm_status_t run(egm_copier_t *c, const egm_copy_desc_t *copies, size_t n,
                        egm_copy_sides_t sides)
{
    if (c == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "copier: copier is NULL");
    if (n == 0)
        return EGM_OK;
    if (copies == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "copier: copies is NULL for %zu copies", n);

    pthread_mutex_lock(&c->lock);
    egm_status_t st = EGM_OK;
    uint64_t total = 0, longest = 0;
    size_t nonzero = 0;
    int all_small = 1;
    for (size_t i = 0; i < n; i++) {
        const egm_copy_desc_t *d = &copies[i];
        if (d->len == 0)
            continue;
        if (d->dst == 0 || d->src == 0) {
            st = egm__set_error(EGM_ERR_INVALID_ARG, "copier: copies[%zu].%s is 0", i,
                                d->dst == 0 ? "dst" : "src");
            goto out;
        }
        if (d->dst + d->len < d->dst || d->src + d->len < d->src) {
            st = egm__set_error(EGM_ERR_INVALID_ARG,
                                "copier: copies[%zu].len %" PRIu64 " wraps the address space", i,
                                d->len);
            goto out;
        }
        nonzero++;
        total += d->len;
        if (d->len > longest)
            longest = d->len;
        if (d->len > c->max_block)
            all_small = 0;
    }
    if (nonzero == 0)
        goto done;

    copy_path_t path;
    if (c->kernel != NULL && n >= c->min_blocks && all_small)
        path = PATH_KERNEL;
    else if (nonzero > 1 && c->api->cuMemcpyBatchAsync != NULL)
        /* One driver call beats one cuMemcpyAsync per block from 2 blocks
         * up (H200), with or without the kernel. */
        path = PATH_BATCH;
    else
        path = PATH_ENGINES;
    /* The largest piece: the chunk size, and never more than the bound. */
    uint64_t cut = c->chunk;
    if (c->max_inflight > 0 && (cut == 0 || cut > c->max_inflight))
        cut = c->max_inflight;

    egm_cu_context_t saved;
    if ((st = enter(c, &saved)) != EGM_OK)
        goto out;
    if (path == PATH_KERNEL && bounce_fits(c, copies, n, sides, total, longest) && bounce_make(c))
        path = PATH_BOUNCE; /* unbounded, within one descriptor buffer: the branch below */
    if (c->max_inflight == 0 && (cut == 0 || longest <= cut) &&
        (path != PATH_KERNEL || count_pieces(copies, n, piece_size(total)) <= KERNEL_MAX_DESCS)) {
        /* Unbounded, one launch at most: issued here, waited for unlocked. */
        st = run_in_slot(c, path, copies, n, nonzero, total, sides);
        leave(c, saved);
        if (st != EGM_OK)
            goto unlocked;
        atomic_fetch_add_explicit(&c->copies, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->bytes, total, memory_order_relaxed);
        return EGM_OK;
    }
    /* Nothing to cut and within the bound: the copies go as they are. */
    if (cut == 0 || (longest <= cut && (c->max_inflight == 0 || total <= c->max_inflight)))
        st = run_group(c, path, copies, n, nonzero, total);
    else
        st = run_bounded(c, path, copies, n, cut);
    leave(c, saved);
    if (st != EGM_OK)
        goto out;
done:
    atomic_fetch_add_explicit(&c->copies, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->bytes, total, memory_order_relaxed);
out:
    pthread_mutex_unlock(&c->lock);
unlocked:
    return st;
}

egm_status_t egm__copier_warm(egm_copier_t *c, size_t descs)
{
    egm_cu_context_t saved;
    egm_status_t st;

    if (c == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "copier: copier is NULL");
    if (descs > KERNEL_MAX_DESCS)
        descs = KERNEL_MAX_DESCS;
    pthread_mutex_lock(&c->lock);
    if ((st = enter(c, &saved)) != EGM_OK) {
        pthread_mutex_unlock(&c->lock);
        return st;
    }
    for (int i = 0; i < COPIER_SLOTS && st == EGM_OK; i++) {
        copier_slot_t *slot = &c->slots[i];
        if (slot->busy)
            continue; /* in use: it has what it needs */
        if (slot->event == NULL) {
            st = egm__cuda_check(c->api->cuEventCreate(&slot->event, EGM_CU_EVENT_DISABLE_TIMING),
                                 "cuEventCreate");
            if (st != EGM_OK)
                slot->event = NULL;
        }
        if (st == EGM_OK && c->kernel != NULL)
            st = ensure_descs(c, &slot->descs, &slot->descs_cap, descs);
    }
    leave(c, saved);
    pthread_mutex_unlock(&c->lock);
    return st;
}

egm_status_t egm__copier_run(egm_copier_t *c, const egm_copy_desc_t *copies, size_t n)
{
    return egm__copier_run_sides(c, copies, n, EGM_COPY_SIDES_ANY);
}

egm_status_t egm__copier_run_sides(egm_copier_t *c, const egm_copy_desc_t *copies, size_t n,
                                   egm_copy_sides_t sides)
{
    uint64_t t0 = egm__now_ns();
    egm_status_t st = run(c, copies, n, sides);
    if (c != NULL)
        atomic_fetch_add_explicit(&c->run_ns, egm__now_ns() - t0, memory_order_relaxed);
    return st;
}
