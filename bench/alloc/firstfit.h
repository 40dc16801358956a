/* The master's previous segment allocator (first fit over a sorted array of
 * free ranges), renamed ff_*: the baseline bench/alloc compares against. */
#ifndef EGM_BENCH_FIRSTFIT_H
#define EGM_BENCH_FIRSTFIT_H

#include "master/allocator.h"

typedef struct ff_allocator ff_allocator_t;

egm_status_t ff_allocator_create(uint64_t size, ff_allocator_t **allocator_p);
void ff_allocator_destroy(ff_allocator_t *allocator);
egm_status_t ff_allocator_alloc(ff_allocator_t *allocator, uint64_t len, uint64_t *offset_p);
egm_status_t ff_allocator_free(ff_allocator_t *allocator, uint64_t offset, uint64_t len);
void ff_allocator_stats(const ff_allocator_t *allocator, egm_allocator_stats_t *stats_p);
uint64_t ff_round(uint64_t len);

#endif
