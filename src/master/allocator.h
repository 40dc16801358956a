/* Range allocator for one segment: an ordered list of free ranges, first fit,
 * neighbours coalesced on free. Offsets and lengths are multiples of
 * EGM_ALLOCATOR_ALIGN. O(free ranges) per call. Not thread-safe (the master
 * runs on one thread). */
#ifndef EGM_MASTER_ALLOCATOR_H
#define EGM_MASTER_ALLOCATOR_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "rpc/frame.h"

#define EGM_ALLOCATOR_ALIGN EGM_OBJECT_ALIGN

typedef struct egm_allocator egm_allocator_t;

typedef struct {
    uint64_t capacity;     /* segment size rounded down to the alignment */
    uint64_t used;         /* bytes handed out (after rounding up) */
    uint64_t free;         /* capacity - used */
    uint64_t largest_free; /* longest free range */
    size_t free_ranges;
    size_t allocations;
} egm_allocator_stats_t;

/* A segment of `size` bytes (>= EGM_ALLOCATOR_ALIGN) with everything free. */
egm_status_t egm__allocator_create(uint64_t size, egm_allocator_t **allocator_p);
void egm__allocator_destroy(egm_allocator_t *allocator);
/* `len` bytes (rounded up to the alignment) at an aligned *offset_p.
 * EGM_ERR_NO_SPACE when no free range is long enough, EGM_ERR_INVALID_ARG for
 * len 0. */
egm_status_t egm__allocator_alloc(egm_allocator_t *allocator, uint64_t len, uint64_t *offset_p);
/* Returns a range from egm__allocator_alloc (same offset and len). Never needs
 * memory. A range that is not allocated (misaligned, out of bounds, or
 * overlapping free space) is EGM_ERR_INVALID_ARG and changes nothing. */
egm_status_t egm__allocator_free(egm_allocator_t *allocator, uint64_t offset, uint64_t len);
void egm__allocator_stats(const egm_allocator_t *allocator, egm_allocator_stats_t *stats_p);
/* Rounded length an allocation of len occupies (0 on overflow). */
uint64_t egm__allocator_round(uint64_t len);

#endif
