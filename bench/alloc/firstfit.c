/* The master's previous allocator (commit cfe16b1), kept only to compare against:
 * free ranges sorted by offset in one array, first fit, O(free ranges). */
#include "firstfit.h"

#include <string.h>
#include "common/alloc.h"
#include "common/log.h"

typedef struct {
    uint64_t offset;
    uint64_t length;
} free_range_t;

struct ff_allocator {
    uint64_t capacity;
    uint64_t used;
    size_t allocations;
    free_range_t *ranges; /* sorted by offset, never adjacent (always coalesced) */
    size_t n_ranges;
    size_t cap_ranges;
    /* Longest free range, exact while largest_valid: lets a full segment refuse
     * at once instead of scanning. */
    uint64_t largest;
    int largest_valid;
};

#define INITIAL_RANGES 8

uint64_t ff_round(uint64_t len)
{
    if (len > UINT64_MAX - (EGM_ALLOCATOR_ALIGN - 1))
        return 0;
    return (len + EGM_ALLOCATOR_ALIGN - 1) & ~(uint64_t)(EGM_ALLOCATOR_ALIGN - 1);
}

egm_status_t ff_allocator_create(uint64_t size, ff_allocator_t **allocator_p)
{
    ff_allocator_t *a;
    uint64_t capacity = size & ~(uint64_t)(EGM_ALLOCATOR_ALIGN - 1);

    *allocator_p = NULL;
    if (capacity == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment size %llu is below %u bytes",
                              (unsigned long long)size, EGM_ALLOCATOR_ALIGN);
    a = egm_calloc(1, sizeof(*a), "bench.ff_allocator");
    if (a == NULL)
        goto err_nomem;
    a->ranges = egm_calloc(INITIAL_RANGES, sizeof(*a->ranges), "bench.ff_allocator_ranges");
    if (a->ranges == NULL)
        goto err_free;
    a->cap_ranges = INITIAL_RANGES;
    a->capacity = capacity;
    a->ranges[0] = (free_range_t){0, capacity};
    a->n_ranges = 1;
    a->largest = capacity;
    a->largest_valid = 1;
    *allocator_p = a;
    return EGM_OK;

err_free:
    egm_free(a);
err_nomem:
    return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating a segment allocator");
}

void ff_allocator_destroy(ff_allocator_t *allocator)
{
    if (allocator == NULL)
        return;
    egm_free(allocator->ranges);
    egm_free(allocator);
}

/* Free ranges never outnumber allocations + 1, so reserving that much here
 * means ff_allocator_free never needs memory. */
static egm_status_t reserve_ranges(ff_allocator_t *a, size_t need)
{
    if (need <= a->cap_ranges)
        return EGM_OK;
    size_t cap = a->cap_ranges * 2;
    if (cap < need)
        cap = need;
    free_range_t *ranges =
        egm_realloc(a->ranges, cap * sizeof(*ranges), "bench.ff_allocator_ranges");
    if (ranges == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory growing a free-range list");
    a->ranges = ranges;
    a->cap_ranges = cap;
    return EGM_OK;
}

static void remove_range(ff_allocator_t *a, size_t i)
{
    memmove(&a->ranges[i], &a->ranges[i + 1], (a->n_ranges - i - 1) * sizeof(*a->ranges));
    a->n_ranges--;
}

egm_status_t ff_allocator_alloc(ff_allocator_t *a, uint64_t len, uint64_t *offset_p)
{
    uint64_t need = ff_round(len);
    uint64_t largest = 0;
    egm_status_t status;

    if (len == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "allocation length must be > 0");
    if (need == 0 || need > a->capacity - a->used || (a->largest_valid && a->largest < need))
        return egm__set_error(EGM_ERR_NO_SPACE, "no free range of %llu bytes",
                              (unsigned long long)len);
    status = reserve_ranges(a, a->allocations + 2);
    if (status != EGM_OK)
        return status;

    for (size_t i = 0; i < a->n_ranges; i++) {
        free_range_t *r = &a->ranges[i];
        if (r->length < need) {
            if (r->length > largest)
                largest = r->length;
            continue;
        }
        if (a->largest_valid && r->length == a->largest)
            a->largest_valid = 0; /* the longest range may have been the one cut */
        *offset_p = r->offset;
        r->offset += need;
        r->length -= need;
        if (r->length == 0)
            remove_range(a, i);
        a->used += need;
        a->allocations++;
        return EGM_OK;
    }
    /* A full scan found nothing: it also measured the longest range. */
    a->largest = largest;
    a->largest_valid = 1;
    return egm__set_error(EGM_ERR_NO_SPACE, "no free range of %llu bytes (largest %llu)",
                          (unsigned long long)len, (unsigned long long)largest);
}

/* Index of the first free range with offset > `offset` (binary search). */
static size_t upper_bound(const ff_allocator_t *a, uint64_t offset)
{
    size_t lo = 0, hi = a->n_ranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->ranges[mid].offset <= offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

egm_status_t ff_allocator_free(ff_allocator_t *a, uint64_t offset, uint64_t len)
{
    uint64_t size = ff_round(len);

    if (len == 0 || size == 0 || offset % EGM_ALLOCATOR_ALIGN != 0 || offset > a->capacity ||
        size > a->capacity - offset || size > a->used || a->allocations == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "free of [%llu, +%llu) is not an allocation",
                              (unsigned long long)offset, (unsigned long long)len);
    size_t i = upper_bound(a, offset); /* ranges[i - 1] starts at or before offset */
    int touch_prev = 0, touch_next = 0;
    if (i > 0) {
        const free_range_t *prev = &a->ranges[i - 1];
        if (prev->offset + prev->length > offset)
            goto err_overlap;
        touch_prev = prev->offset + prev->length == offset;
    }
    if (i < a->n_ranges) {
        const free_range_t *next = &a->ranges[i];
        if (offset + size > next->offset)
            goto err_overlap;
        touch_next = offset + size == next->offset;
    }

    uint64_t merged;
    if (touch_prev && touch_next) {
        a->ranges[i - 1].length += size + a->ranges[i].length;
        merged = a->ranges[i - 1].length;
        remove_range(a, i);
    } else if (touch_prev) {
        a->ranges[i - 1].length += size;
        merged = a->ranges[i - 1].length;
    } else if (touch_next) {
        a->ranges[i].offset = offset;
        a->ranges[i].length += size;
        merged = a->ranges[i].length;
    } else {
        /* Room is guaranteed by reserve_ranges at allocation time. */
        memmove(&a->ranges[i + 1], &a->ranges[i], (a->n_ranges - i) * sizeof(*a->ranges));
        a->ranges[i] = (free_range_t){offset, size};
        a->n_ranges++;
        merged = size;
    }
    a->used -= size;
    a->allocations--;
    if (a->largest_valid && merged > a->largest)
        a->largest = merged;
    return EGM_OK;

err_overlap:
    return egm__set_error(EGM_ERR_INVALID_ARG, "free of [%llu, +%llu) overlaps free space",
                          (unsigned long long)offset, (unsigned long long)len);
}

void ff_allocator_stats(const ff_allocator_t *a, egm_allocator_stats_t *stats_p)
{
    uint64_t largest = a->largest;

    if (!a->largest_valid) {
        largest = 0;
        for (size_t i = 0; i < a->n_ranges; i++)
            if (a->ranges[i].length > largest)
                largest = a->ranges[i].length;
    }
    stats_p->capacity = a->capacity;
    stats_p->used = a->used;
    stats_p->free = a->capacity - a->used;
    stats_p->largest_free = largest;
    stats_p->free_ranges = a->n_ranges;
    stats_p->allocations = a->allocations;
}
