/* nvlink transport (consumer side): copies between local GPU memory and CUDA
 * VMM segments of other processes, mapped through the mapping cache, as GPU
 * copies (one egm__copier_run per device and batch); a pinned staging ring for
 * GPU memory that must go over shm or tcp (the conventional path); and the
 * prewarm threads that import segments before a transfer needs them.
 * Internal to the transfer engine. */
#ifndef EGM_TE_NVLINK_H
#define EGM_TE_NVLINK_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "cuda/copier.h"
#include "cuda/cuda_api.h"
#include "te/mapping_cache.h"
#include "te/te.h"

#define EGM_NVLINK_MAX_DEVICES 64
#define EGM_STAGING_SLOTS 4
#define EGM_STAGING_SLOT_BYTES (8u << 20)
#define EGM_PREWARM_DEFAULT_CONCURRENCY 2
#define EGM_PREWARM_MAX_CONCURRENCY 64

typedef struct egm_nvlink egm_nvlink_t;

typedef struct {
    int timeout_ms;        /* fd broker requests */
    int copy_low_priority; /* copier streams at the lowest priority */
    /* egm__copier_set_pressure of every copier (0 = no bound) */
    uint64_t copy_max_inflight_bytes;
    uint64_t copy_chunk_bytes;
    uint64_t copy_bounce_bytes; /* egm__copier_set_bounce of every copier (0 = none) */
    int prewarm_off;            /* egm__nvlink_prewarm does nothing */
    int prewarm_concurrency;    /* 0 = EGM_PREWARM_DEFAULT_CONCURRENCY */
    const char *auth_token;     /* for fd brokers (borrowed: outlives the nvlink object) */
} egm_nvlink_params_t;

typedef struct {
    egm_mapping_stats_t mappings;
    uint64_t prewarmed;        /* segments the prewarm threads imported */
    uint64_t nvlink_copies;    /* ops moved by GPU copies */
    uint64_t staged_bytes;     /* bytes that went through the staging ring */
    egm_copier_stats_t copier; /* summed over devices */
    uint64_t copiers;          /* devices whose copier exists (used or prepared) */
} egm_nvlink_stats_t;

egm_status_t egm__nvlink_create(const egm_cuda_api_t *api, const egm_nvlink_params_t *params,
                                egm_nvlink_t **nvlink_p);
/* Stops the prewarm threads; no transfer may run. Unmaps everything. */
void egm__nvlink_destroy(egm_nvlink_t *nvlink);

/* Moves every op (local memory on `device`, segment VMM) as GPU copies, one
 * copier run for all of them. Sets each op's status; returns the first
 * failure. Offsets were checked against the descriptors by the caller. */
egm_status_t egm__nvlink_run(egm_nvlink_t *nvlink, int device, int local_on_gpu,
                             egm_te_op_t *const *ops, size_t n);
/* Copy descriptors each run slot holds ready (a 256-key batch of 64 parts). */
#define EGM_NVLINK_WARM_DESCS 16384
/* Creates and warms `device`'s copier (stream, events, kernel module,
 * descriptor buffers) so that the first transfer does not pay for it. */
egm_status_t egm__nvlink_prepare_device(egm_nvlink_t *nvlink, int device);
/* One device-accessible copy on `device` (own VMM segments, staging hops). */
egm_status_t egm__nvlink_copy(egm_nvlink_t *nvlink, int device, uint64_t dst, uint64_t src,
                              size_t len);

/* A pinned host staging slot (EGM_STAGING_SLOT_BYTES; the ring is allocated on
 * first use, in `device`'s context); waits while all are taken. */
egm_status_t egm__staging_get(egm_nvlink_t *nvlink, int device, void **slot_p, size_t *len_p);
void egm__staging_put(egm_nvlink_t *nvlink, void *slot, uint64_t bytes_used);
/* Which way a staged copy moves its bytes. */
typedef enum {
    EGM_STAGING_FROM_GPU, /* GPU -> slot -> host side: a hop drains the slot */
    EGM_STAGING_TO_GPU,   /* host side -> slot -> GPU: a hop fills the slot */
} egm_staging_dir_t;
/* Moves a piece between a staging slot and the host side of a staged copy, in
 * the direction `dir` names. */
typedef egm_status_t (*egm_staging_hop_fn)(void *ctx, uint64_t off, void *slot, size_t n,
                                           egm_staging_dir_t dir);
/* `len` bytes between GPU memory at `gpu` (on `device`) and a host-only side
 * reached by `hop`, one staging slot at a time: the conventional path
 * (device <-> pinned host <-> wire/memory), kept as the baseline nvlink is
 * measured against. */
egm_status_t egm__staging_copy(egm_nvlink_t *nvlink, int device, uint64_t gpu, size_t len,
                               egm_staging_dir_t dir, egm_staging_hop_fn hop, void *ctx);

/* Queues segments for background import (copies the descriptors). Already
 * mapped, queued or retired ones are skipped; the caller filters out what is
 * not reachable over nvlink. */
void egm__nvlink_prewarm(egm_nvlink_t *nvlink, const egm_segment_desc_t *descs, size_t n);
/* Waits until the prewarm queue is empty and no import is running. */
void egm__nvlink_prewarm_drain(egm_nvlink_t *nvlink);

void egm__nvlink_stats(egm_nvlink_t *nvlink, egm_nvlink_stats_t *stats_p);

/* ---- prewarm threads (nvlink_prewarm.c) ----------------------------------- */
typedef struct egm_prewarm egm_prewarm_t;

egm_status_t egm__prewarm_create(egm_mapping_cache_t *cache, int concurrency,
                                 egm_prewarm_t **prewarm_p);
/* Drops what is still queued and joins the threads (an import in progress
 * finishes first). */
void egm__prewarm_destroy(egm_prewarm_t *prewarm);
void egm__prewarm_queue(egm_prewarm_t *prewarm, const egm_segment_desc_t *descs, size_t n);
void egm__prewarm_drain(egm_prewarm_t *prewarm);
uint64_t egm__prewarm_count(egm_prewarm_t *prewarm);

#endif
