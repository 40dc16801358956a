/* Range allocator for one segment. Segments are remote memory, so every byte of
 * metadata lives here in the master's heap, and it keeps none per allocation:
 * with 100 million objects each byte per object is 100 MB. It records only the
 * free ranges (32 bytes each): in segregated size-class bins (32 classes per
 * power of two) with a two-level bitmap of non-empty bins (the first bin that
 * fits is found in O(1)), and in a treap by offset (a free finds its free
 * neighbours, to coalesce with them and to refuse a range that overlaps free
 * space, in O(log f) for f free ranges). The caller keeps where each of its
 * allocations lies (the master's objects do) and frees exactly those ranges.
 * Offsets and lengths are multiples of EGM_ALLOCATOR_ALIGN. Not thread-safe
 * (the master serialises calls on one segment). */
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
    /* Of `used`: ranges whose free failed for lack of memory (see
     * egm__allocator_free); they stay allocated while the segment is mounted. */
    uint64_t lost;
} egm_allocator_stats_t;

/* A segment of `size` bytes (>= EGM_ALLOCATOR_ALIGN) with everything free. */
egm_status_t egm__allocator_create(uint64_t size, egm_allocator_t **allocator_p);
void egm__allocator_destroy(egm_allocator_t *allocator);
/* `len` bytes (rounded up to the alignment) at an aligned *offset_p.
 * EGM_ERR_NO_SPACE exactly when no free range is long enough,
 * EGM_ERR_INVALID_ARG for len 0. Never needs memory. O(1) except when the only
 * ranges that fit share the request's size class and are not near its head:
 * then that one class is scanned; and O(log f) when it uses up a free range. */
egm_status_t egm__allocator_alloc(egm_allocator_t *allocator, uint64_t len, uint64_t *offset_p);
/* Returns a range from egm__allocator_alloc (same offset; len rounding to the
 * same length), or a piece cut by egm__allocator_split. O(log f). A range that
 * is misaligned, out of bounds or overlaps free space (a double free) is
 * EGM_ERR_INVALID_ARG and changes nothing. The allocator keeps no record of
 * allocations, so a range of allocated space that is not exactly one
 * allocation (a part of one, or two together) is not refused: its space
 * becomes free. Needs memory only when the range touches no free range (a
 * record for the new one; the records grow by doubling): if that fails, the
 * answer is EGM_ERR_NO_MEMORY and the range stays allocated, counted in the
 * stats' `lost` (and logged, at the 1st, 2nd, 4th, ... time): the caller
 * forgets the range as after a free, without counting it as freed, and never
 * frees it again (the space comes back when the segment is mounted again). */
egm_status_t egm__allocator_free(egm_allocator_t *allocator, uint64_t offset, uint64_t len);
/* Cuts the allocation at `offset` in two at `at` (aligned, after offset):
 * [offset, at) and [at, end) become two allocations, each freed on its own. A
 * slab granted whole is cut this way into the objects its writer commits.
 * Only the count of allocations changes (the allocator records none), so the
 * checks are that both are aligned and that blocks `offset` and `at` are
 * allocated space: EGM_ERR_INVALID_ARG (nothing changed) otherwise. Never
 * needs memory. */
egm_status_t egm__allocator_split(egm_allocator_t *allocator, uint64_t offset, uint64_t at);
/* Allocates exactly [offset, offset + round(len)): a range that must lie
 * inside one free range. A new master leader rebuilds its segments this way
 * from what its predecessor placed; a take in ascending offset order finds
 * its free range in O(1) (the free range after the last take is looked at
 * first), others in O(log f); one that leaves free space on both sides
 * inserts a record, O(log f). EGM_ERR_INVALID_ARG (nothing changed) when misaligned, outside the
 * segment or not all free, EGM_ERR_NO_MEMORY when it cuts a free range in two
 * and the master cannot grow its records. */
egm_status_t egm__allocator_take(egm_allocator_t *allocator, uint64_t offset, uint64_t len);
/* largest_free costs a walk of the top non-empty size class. */
void egm__allocator_stats(const egm_allocator_t *allocator, egm_allocator_stats_t *stats_p);
/* Rounded length an allocation of len occupies (0 on overflow). */
uint64_t egm__allocator_round(uint64_t len);
/* Walks every structure and checks it against the others (free ranges in
 * order, apart from each other (always coalesced) and inside the segment;
 * treap heap order; bins, bitmaps, spare records and counters agree).
 * EGM_ERR_INTERNAL naming the first broken invariant. O(f): for tests. */
egm_status_t egm__allocator_check(const egm_allocator_t *allocator);

#endif
