/* Range allocator for one segment. Segments are remote memory, so every byte of
 * metadata lives here in the master's heap: a span record per free range and per
 * allocation, linked in address order (boundary tags, so a free coalesces with
 * both neighbours in O(1)), free spans in segregated size-class bins (32 classes
 * per power of two) with a two-level bitmap of non-empty bins (the first bin
 * that fits is found in O(1)), allocations in a hash table by offset (a free is
 * checked against the exact allocation in O(1)). Offsets and lengths are
 * multiples of EGM_ALLOCATOR_ALIGN. Not thread-safe (the master serialises
 * calls on one segment). */
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
 * EGM_ERR_NO_SPACE exactly when no free range is long enough,
 * EGM_ERR_INVALID_ARG for len 0, EGM_ERR_NO_MEMORY when the master cannot grow
 * its metadata (nothing changed). O(1) except when the only ranges that fit
 * share the request's size class and are not near its head: then that one
 * class is scanned. */
egm_status_t egm__allocator_alloc(egm_allocator_t *allocator, uint64_t len, uint64_t *offset_p);
/* Returns a range from egm__allocator_alloc (same offset; len rounding to the
 * same length). O(1) and never needs memory. A range that is not exactly one
 * allocation (misaligned, out of bounds, free space, a part of or more than
 * one allocation, a double free) is EGM_ERR_INVALID_ARG and changes nothing. */
egm_status_t egm__allocator_free(egm_allocator_t *allocator, uint64_t offset, uint64_t len);
/* Cuts the allocation at `offset` (exactly one, as for egm__allocator_free)
 * in two at `at` (aligned, strictly inside it): [offset, at) and [at, end)
 * become two allocations, each freed on its own. A slab granted whole is cut
 * this way into the objects its writer commits. EGM_ERR_INVALID_ARG (nothing
 * changed) when offset is not an allocation or `at` is not inside it,
 * EGM_ERR_NO_MEMORY when the master cannot grow its metadata. */
egm_status_t egm__allocator_split(egm_allocator_t *allocator, uint64_t offset, uint64_t at);
/* Allocates exactly [offset, offset + round(len)): a range that must lie
 * inside one free range. A new master leader rebuilds its segments this way
 * from what its predecessor placed (master/adopt.c); takes in ascending
 * offset order cost O(1) each (the free range after the last take is looked
 * at first), others walk the segment's ranges. EGM_ERR_INVALID_ARG (nothing
 * changed) when misaligned, outside the segment or not all free,
 * EGM_ERR_NO_MEMORY when the master cannot grow its metadata. */
egm_status_t egm__allocator_take(egm_allocator_t *allocator, uint64_t offset, uint64_t len);
/* Grows the metadata so that the next n splits (or allocations) cannot fail
 * for lack of memory. EGM_ERR_NO_MEMORY (nothing else changed). */
egm_status_t egm__allocator_reserve(egm_allocator_t *allocator, uint32_t n);
/* largest_free costs a walk of the top non-empty size class. */
void egm__allocator_stats(const egm_allocator_t *allocator, egm_allocator_stats_t *stats_p);
/* Rounded length an allocation of len occupies (0 on overflow). */
uint64_t egm__allocator_round(uint64_t len);
/* Walks every structure and checks it against the others (spans tile the
 * segment, free neighbours are always coalesced, bins, bitmaps, hash and
 * counters agree). EGM_ERR_INTERNAL naming the first broken invariant. O(n):
 * for tests. */
egm_status_t egm__allocator_check(const egm_allocator_t *allocator);

#endif
