/* How a run of small copies between this GPU's memory and host memory goes
 * through a bounce buffer in GPU memory (copier.c, "bounced" runs): the near
 * side (GPU memory, scattered pieces) is gathered into, or scattered from, the
 * buffer by the copy kernel at HBM speed, and the far side (host memory: an
 * EGM pool) moves as long contiguous runs on the copy engines, which reach
 * more of the link than the kernel's own PCIe accesses (docs/gpu.md). The
 * buffer has two halves; the copies are cut into chunks of at most one half,
 * in order, so that the kernel works on one half while the engines drain or
 * fill the other.
 *
 * Pure planning: no CUDA. */
#ifndef EGM_CUDA_BOUNCE_PLAN_H
#define EGM_CUDA_BOUNCE_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "cuda/copier.h"

/* One contiguous span of the far side and where it lies in its chunk's half. */
typedef struct {
    uint64_t far; /* far-side address */
    uint64_t off; /* offset in the half */
    uint64_t len;
} egm_bounce_run_t;

typedef struct {
    size_t first_copy, n_copies; /* copies[first_copy .. +n_copies) */
    size_t first_run, n_runs;    /* runs[first_run .. +n_runs) */
    uint64_t used;               /* bytes of the half up to its last run's end */
} egm_bounce_chunk_t;

typedef struct {
    egm_bounce_chunk_t *chunks;
    size_t n_chunks;
    egm_bounce_run_t *runs;
    size_t n_runs;
    uint64_t *offs; /* per copy: its offset in its chunk's half */
} egm_bounce_plan_t;

/* The plan of n copies whose far side is each copy's dst (far_is_dst) or src,
 * in chunks of at most half_bytes. Consecutive copies whose far sides are
 * adjacent share a run; each run starts in the half at an offset congruent to
 * its far address modulo 16, so that the kernel's accesses keep the alignment
 * of a direct copy. Empty copies take no room. Every copy must fit a half
 * (len + 15 <= half_bytes): EGM_ERR_INVALID_ARG otherwise. */
egm_status_t egm__bounce_plan(const egm_copy_desc_t *copies, size_t n, int far_is_dst,
                              uint64_t half_bytes, egm_bounce_plan_t *plan);
void egm__bounce_plan_free(egm_bounce_plan_t *plan);

#endif
