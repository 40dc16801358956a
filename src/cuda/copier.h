/* GPU copies for one device: its own non-blocking stream, events for
 * completion, copy engines for large single copies, one gather/scatter kernel
 * launch for batches of many blocks (cuMemcpyBatchAsync when the build had no
 * nvcc). Pointers are device-accessible addresses: HBM, or pool memory mapped
 * into this device (nvlink mapping cache), or pinned host memory. */
#ifndef EGM_CUDA_COPIER_H
#define EGM_CUDA_COPIER_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

typedef struct {
    uint64_t dst;
    uint64_t src;
    uint64_t len;
} egm_copy_desc_t;

typedef struct egm_copier egm_copier_t;

/* Where a run's copies lie, as the caller knows it: a bounced run
 * (egm__copier_set_bounce) needs one side in this copier's GPU memory and the
 * other in host memory. */
typedef enum {
    EGM_COPY_SIDES_ANY = 0,      /* unknown, or mixed: never bounced */
    EGM_COPY_DEVICE_TO_HOST = 1, /* every src in this GPU's memory, every dst host memory */
    EGM_COPY_HOST_TO_DEVICE = 2, /* every src host memory, every dst this GPU's memory */
} egm_copy_sides_t;

typedef struct {
    uint64_t copies;
    uint64_t bytes;
    uint64_t kernel_launches;
    uint64_t engine_copies;
    uint64_t batch_api_calls;
    /* Groups of copies issued and waited for: one per run, more when the
     * in-flight bound splits a run. */
    uint64_t groups;
    /* Pieces the copies cut at the chunk size (or the in-flight bound) became;
     * copies that needed no cut are not counted. */
    uint64_t chunks;
    uint64_t max_group_bytes; /* largest group issued */
    /* Wall time of egm__copier_run calls, from entry to the copies' end (summed
     * over threads: runs of several threads overlap). */
    uint64_t run_ns;
    uint64_t bounced_runs; /* runs that went through the bounce buffer */
} egm_copier_stats_t;

/* Copier on `device` (primary context, a stream of the lowest priority when
 * `low_priority`). */
egm_status_t egm__copier_create(int device, int low_priority, egm_copier_t **copier_p);
void egm__copier_destroy(egm_copier_t *copier);
/* Runs n copies and waits for them. Batches of >= kernel_min_blocks blocks each
 * <= kernel_max_block bytes use the kernel; the rest use copy engines.
 * Thread-safe: runs are issued one at a time onto the copier's stream, and
 * (without pressure bounds) each thread waits for its own run outside the
 * copier's lock, so that runs of several threads follow each other on the GPU
 * without a gap; with bounds, a run is waited for before the next is issued. */
egm_status_t egm__copier_run(egm_copier_t *copier, const egm_copy_desc_t *copies, size_t n);
/* egm__copier_run of copies whose sides the caller knows: a kernel-sized run
 * (as above) of at least 16 MiB whose host side lies in spans of 1 MiB or more
 * on average goes through the bounce buffer when there is one. */
egm_status_t egm__copier_run_sides(egm_copier_t *copier, const egm_copy_desc_t *copies, size_t n,
                                   egm_copy_sides_t sides);
/* GPU memory for bounced runs (bounce_plan.h; configuration key
 * nvlink_bounce_buffer): allocated on the first run that uses it, in two
 * halves; 0 = none (the default). Set before the first bounced run: a later
 * call changes nothing. */
void egm__copier_set_bounce(egm_copier_t *copier, uint64_t bytes);
/* Does now what a first run would otherwise do: every slot's completion event
 * and, when the kernel is built in, a pinned descriptor buffer of `descs`
 * entries (at most the per-launch bound). Thread-safe. */
egm_status_t egm__copier_warm(egm_copier_t *copier, size_t descs);
/* Switch-over point between per-copy engines and the kernel (measured on H200;
 * tunable for benchmarks). */
void egm__copier_set_kernel_threshold(egm_copier_t *copier, size_t min_blocks,
                                      size_t max_block_bytes);
/* Bounds on the pressure a run puts on the GPU (configuration keys
 * nvlink_max_inflight_bytes, nvlink_chunk_size; docs/configuration.md).
 * chunk_bytes > 0: a copy longer than that is cut into pieces of at most
 * chunk_bytes (one copy-engine call or batch entry each). max_inflight_bytes
 * > 0: a run is issued in groups of at most that many bytes, each waited for
 * before the next is issued (copies longer than the bound are cut to it).
 * 0 = no bound. The path (kernel, batch call, engines) is chosen from the
 * run's copies as given, before any cut. */
void egm__copier_set_pressure(egm_copier_t *copier, uint64_t max_inflight_bytes,
                              uint64_t chunk_bytes);
void egm__copier_stats(const egm_copier_t *copier, egm_copier_stats_t *stats_p);
/* 1 when the kernels were built into this library (nvcc was present). */
int egm__copier_has_kernels(void);

#endif
