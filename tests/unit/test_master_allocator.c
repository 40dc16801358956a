/* Master range allocator: aligned results, NO_SPACE exactly when no free range
 * fits, frees that overlap free space refused without damage, a 200k-op random trace checked
 * against a shadow map of 64-byte blocks (no overlap, stats and coalescing
 * exact), full coalescing after all frees, and stated utilisation for uniform
 * sizes (>= 99%) and a mixed-size steady state. Prints alloc+free throughput
 * (never asserted: the machine is noisy). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "master/allocator.h"

#define A EGM_ALLOCATOR_ALIGN
#define KiB (1024ull)
#define MiB (1024ull * 1024)
#define GiB (1024ull * 1024 * 1024)

static uint64_t rng_state;

static void seed(uint64_t s)
{
    rng_state = s * 0x9e3779b97f4a7c15ull + 1;
}

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    return x;
}

static void check(const egm_allocator_t *a)
{
    egm_status_t st = egm__allocator_check(a);
    if (st != EGM_OK)
        fail_msg("allocator check: %s", egm_last_error());
}

static void test_create_rejects_tiny_segment(void **state)
{
    (void)state;
    egm_allocator_t *a = (egm_allocator_t *)1;
    assert_int_equal(egm__allocator_create(0, &a), EGM_ERR_INVALID_ARG);
    assert_null(a);
    assert_int_equal(egm__allocator_create(A - 1, &a), EGM_ERR_INVALID_ARG);
    /* A size that is not a multiple of the alignment loses its tail. */
    assert_int_equal(egm__allocator_create(10 * A + 5, &a), EGM_OK);
    egm_allocator_stats_t st;
    egm__allocator_stats(a, &st);
    assert_int_equal(st.capacity, 10 * A);
    assert_int_equal(st.free, 10 * A);
    assert_int_equal(st.largest_free, 10 * A);
    assert_int_equal(st.free_ranges, 1);
    check(a);
    egm__allocator_destroy(a);
    egm__allocator_destroy(NULL);
    /* The largest segment the alignment allows has size classes for all of it. */
    assert_int_equal(egm__allocator_create(UINT64_MAX, &a), EGM_OK);
    uint64_t off;
    assert_int_equal(egm__allocator_alloc(a, UINT64_MAX - 2 * A + 1, &off), EGM_OK);
    assert_int_equal(off, 0);
    check(a);
    assert_int_equal(egm__allocator_free(a, off, UINT64_MAX - 2 * A + 1), EGM_OK);
    check(a);
    egm__allocator_destroy(a);
}

static void test_alignment_and_rounding(void **state)
{
    (void)state;
    egm_allocator_t *a;
    uint64_t off[5];
    const uint64_t lens[5] = {1, A - 1, A, A + 1, 3 * A + 7};
    uint64_t used = 0;

    assert_int_equal(egm__allocator_create(1 << 20, &a), EGM_OK);
    assert_int_equal(egm__allocator_alloc(a, 0, &off[0]), EGM_ERR_INVALID_ARG);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(egm__allocator_alloc(a, lens[i], &off[i]), EGM_OK);
        assert_int_equal(off[i] % A, 0);
        used += egm__allocator_round(lens[i]);
        if (i > 0) /* an empty segment is carved from its low end, in order */
            assert_int_equal(off[i], off[i - 1] + egm__allocator_round(lens[i - 1]));
    }
    egm_allocator_stats_t st;
    egm__allocator_stats(a, &st);
    assert_int_equal(st.used, used);
    assert_int_equal(st.used, 1 * A + 1 * A + 1 * A + 2 * A + 4 * A);
    assert_int_equal(st.allocations, 5);
    check(a);
    /* Any length that rounds to the allocation's frees it. */
    assert_int_equal(egm__allocator_free(a, off[4], 4 * A), EGM_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(egm__allocator_free(a, off[i], lens[i]), EGM_OK);
    egm__allocator_stats(a, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.free_ranges, 1);
    assert_int_equal(egm__allocator_round(UINT64_MAX), 0);
    check(a);
    egm__allocator_destroy(a);
}

static void test_no_space_when_full(void **state)
{
    (void)state;
    egm_allocator_t *a;
    uint64_t off, offs[64];

    assert_int_equal(egm__allocator_create(64 * A, &a), EGM_OK);
    assert_int_equal(egm__allocator_alloc(a, 64 * A + 1, &off), EGM_ERR_NO_SPACE);
    assert_int_equal(egm__allocator_alloc(a, UINT64_MAX, &off), EGM_ERR_NO_SPACE);
    for (int i = 0; i < 64; i++)
        assert_int_equal(egm__allocator_alloc(a, A, &offs[i]), EGM_OK);
    assert_int_equal(egm__allocator_alloc(a, 1, &off), EGM_ERR_NO_SPACE);
    egm_allocator_stats_t st;
    egm__allocator_stats(a, &st);
    assert_int_equal(st.free, 0);
    assert_int_equal(st.largest_free, 0);
    assert_int_equal(st.free_ranges, 0);

    /* Free every other block: 32 blocks free but none two long. */
    for (int i = 0; i < 64; i += 2)
        assert_int_equal(egm__allocator_free(a, offs[i], A), EGM_OK);
    egm__allocator_stats(a, &st);
    assert_int_equal(st.free, 32 * A);
    assert_int_equal(st.largest_free, A);
    assert_int_equal(st.free_ranges, 32);
    assert_int_equal(egm__allocator_alloc(a, A + 1, &off), EGM_ERR_NO_SPACE);
    /* A freed block is reused. */
    assert_int_equal(egm__allocator_alloc(a, A, &off), EGM_OK);
    assert_int_equal(off % (2 * A), 0);
    assert_int_equal(egm__allocator_free(a, off, A), EGM_OK);
    check(a);

    /* Freeing the rest coalesces everything into one range. */
    for (int i = 1; i < 64; i += 2)
        assert_int_equal(egm__allocator_free(a, offs[i], A), EGM_OK);
    egm__allocator_stats(a, &st);
    assert_int_equal(st.free_ranges, 1);
    assert_int_equal(st.largest_free, 64 * A);
    assert_int_equal(egm__allocator_alloc(a, 64 * A, &off), EGM_OK);
    assert_int_equal(off, 0);
    assert_int_equal(egm__allocator_free(a, off, 64 * A), EGM_OK);
    check(a);
    egm__allocator_destroy(a);
}

static void test_invalid_free_changes_nothing(void **state)
{
    (void)state;
    egm_allocator_t *a;
    uint64_t x, y;
    egm_allocator_stats_t before, after;

    assert_int_equal(egm__allocator_create(16 * A, &a), EGM_OK);
    /* Nothing allocated yet. */
    assert_int_equal(egm__allocator_free(a, 0, A), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__allocator_alloc(a, 2 * A, &x), EGM_OK);
    assert_int_equal(egm__allocator_alloc(a, 2 * A, &y), EGM_OK);
    egm__allocator_stats(a, &before);
    assert_int_equal(egm__allocator_free(a, x + 1, A), EGM_ERR_INVALID_ARG);      /* misaligned */
    assert_int_equal(egm__allocator_free(a, 16 * A, A), EGM_ERR_INVALID_ARG);     /* past end */
    assert_int_equal(egm__allocator_free(a, 15 * A, 2 * A), EGM_ERR_INVALID_ARG); /* crosses end */
    assert_int_equal(egm__allocator_free(a, UINT64_MAX - A + 1, A), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__allocator_free(a, 0, UINT64_MAX), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__allocator_free(a, 8 * A, A), EGM_ERR_INVALID_ARG); /* free space */
    assert_int_equal(egm__allocator_free(a, y, 3 * A), EGM_ERR_INVALID_ARG); /* runs into free */
    assert_int_equal(egm__allocator_free(a, x, 0), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__allocator_free(a, x + A, 4 * A), EGM_ERR_INVALID_ARG); /* into free */
    egm__allocator_stats(a, &after);
    assert_memory_equal(&before, &after, sizeof(before));
    check(a);
    assert_int_equal(egm__allocator_free(a, x, 2 * A), EGM_OK);
    egm__allocator_stats(a, &before);
    assert_int_equal(egm__allocator_free(a, x, 2 * A), EGM_ERR_INVALID_ARG); /* double free */
    egm__allocator_stats(a, &after);
    assert_memory_equal(&before, &after, sizeof(before));
    assert_int_equal(egm__allocator_free(a, y, 2 * A), EGM_OK);
    assert_int_equal(egm__allocator_free(a, y, 2 * A), EGM_ERR_INVALID_ARG); /* after coalescing */
    egm__allocator_stats(a, &after);
    assert_int_equal(after.free_ranges, 1);
    assert_int_equal(after.used, 0);
    check(a);
    egm__allocator_destroy(a);
}

/* Allocations are not recorded: a range over allocated space only is freed
 * whole even when it is not one allocation, and a range with free space
 * inside it (a hole between two allocations) is refused. */
static void test_free_checks_free_space_only(void **state)
{
    (void)state;
    egm_allocator_t *a;
    uint64_t x, y, z;
    egm_allocator_stats_t before, after;

    assert_int_equal(egm__allocator_create(16 * A, &a), EGM_OK);
    assert_int_equal(egm__allocator_alloc(a, 2 * A, &x), EGM_OK);
    assert_int_equal(egm__allocator_alloc(a, 2 * A, &y), EGM_OK);
    assert_int_equal(egm__allocator_alloc(a, 2 * A, &z), EGM_OK);
    assert_int_equal(egm__allocator_free(a, y, 2 * A), EGM_OK); /* a hole between x and z */
    egm__allocator_stats(a, &before);
    assert_int_equal(before.free_ranges, 2);
    assert_int_equal(egm__allocator_free(a, x, 6 * A), EGM_ERR_INVALID_ARG);     /* over the hole */
    assert_int_equal(egm__allocator_free(a, x + A, 2 * A), EGM_ERR_INVALID_ARG); /* into it */
    assert_int_equal(egm__allocator_free(a, y + A, 2 * A), EGM_ERR_INVALID_ARG); /* out of it */
    egm__allocator_stats(a, &after);
    assert_memory_equal(&before, &after, sizeof(before));
    check(a);
    /* Half of x, then the other half: each coalesces with its free neighbour. */
    assert_int_equal(egm__allocator_free(a, x + A, A), EGM_OK);
    check(a);
    assert_int_equal(egm__allocator_free(a, x, A), EGM_OK);
    check(a);
    egm__allocator_stats(a, &after);
    assert_int_equal(after.used, 2 * A);
    assert_int_equal(after.free_ranges, 2); /* [0, 4) and [6, 16) */
    assert_int_equal(after.largest_free, 10 * A);
    assert_int_equal(egm__allocator_free(a, z, 2 * A), EGM_OK);
    egm__allocator_stats(a, &after);
    assert_int_equal(after.used, 0);
    assert_int_equal(after.free_ranges, 1);
    check(a);
    egm__allocator_destroy(a);
}

/* A free that needs a record for a new free range and cannot get one (the
 * records' array cannot grow): the range stays allocated, counted as lost,
 * and the free answers NO_MEMORY (the caller forgets the range without
 * counting it as freed); frees that
 * join a neighbour need no record and go on working, and a record let go is
 * used again. */
static void test_free_without_memory_loses_the_range(void **state)
{
    (void)state;
    egm_allocator_t *a;
    uint64_t off[64];
    egm_allocator_stats_t st;

    assert_int_equal(egm__allocator_create(64 * A, &a), EGM_OK);
    for (int i = 0; i < 64; i++) {
        assert_int_equal(egm__allocator_alloc(a, A, &off[i]), EGM_OK);
        assert_int_equal(off[i], (uint64_t)i * A);
    }
    /* Blocks 0, 2, ..., 30 free: 16 ranges, all the records of the first array. */
    for (int i = 0; i < 32; i += 2)
        assert_int_equal(egm__allocator_free(a, off[i], A), EGM_OK);
    egm__alloc_fail_site("master.allocator_spans", UINT64_MAX);
    assert_int_equal(egm__allocator_free(a, off[33], A), EGM_ERR_NO_MEMORY); /* alone: lost */
    egm__allocator_stats(a, &st);
    assert_int_equal(st.lost, A);
    assert_int_equal(st.used, 48 * A); /* still allocated */
    assert_int_equal(st.allocations, 47);
    assert_int_equal(st.free_ranges, 16);
    check(a);
    assert_int_equal(egm__allocator_free(a, off[31], A), EGM_OK); /* joins 30 */
    assert_int_equal(egm__allocator_free(a, off[1], A), EGM_OK);  /* joins 0 and 2 */
    egm__allocator_stats(a, &st);
    assert_int_equal(st.used, 46 * A);
    assert_int_equal(st.free_ranges, 15);
    assert_int_equal(egm__allocator_free(a, off[35], A), EGM_OK);            /* the record let go */
    assert_int_equal(egm__allocator_free(a, off[37], A), EGM_ERR_NO_MEMORY); /* none left: lost */
    egm__allocator_stats(a, &st);
    assert_int_equal(st.used, 45 * A);
    assert_int_equal(st.lost, 2 * A);
    assert_int_equal(st.free_ranges, 16);
    check(a);
    egm__alloc_fail_site("master.allocator_spans", 0);
    assert_int_equal(egm__allocator_free(a, off[39], A), EGM_OK); /* grows again */
    egm__allocator_stats(a, &st);
    assert_int_equal(st.used, 44 * A);
    assert_int_equal(st.free_ranges, 17);
    assert_int_equal(st.lost, 2 * A);
    check(a);
    egm__allocator_destroy(a);
}

/* A new leader rebuilds a segment from the ranges its predecessor placed:
 * takes in ascending order (the usual case), out of order, and the ones that
 * are not all free (or misaligned, or outside) change nothing; every taken
 * range is then an allocation of its own, freed alone. */
static void test_take_exact_ranges(void **state)
{
    (void)state;
    egm_allocator_t *a;
    egm_allocator_stats_t before, after;

    assert_int_equal(egm__allocator_create(64 * A, &a), EGM_OK);
    assert_int_equal(egm__allocator_take(a, 0, 2 * A), EGM_OK);      /* at the start */
    assert_int_equal(egm__allocator_take(a, 4 * A, A + 1), EGM_OK);  /* rounded to 2 blocks */
    assert_int_equal(egm__allocator_take(a, 6 * A, 3 * A), EGM_OK);  /* right after it */
    assert_int_equal(egm__allocator_take(a, 60 * A, 4 * A), EGM_OK); /* at the end */
    assert_int_equal(egm__allocator_take(a, 20 * A, A), EGM_OK);     /* out of order */
    check(a);
    egm__allocator_stats(a, &before);
    assert_int_equal(before.used, 12 * A);
    assert_int_equal(before.allocations, 5);
    assert_int_equal(before.free_ranges, 3); /* [2,4) [9,20) [21,60) */
    assert_int_equal(egm__allocator_take(a, 5 * A, A), EGM_ERR_INVALID_ARG);      /* used */
    assert_int_equal(egm__allocator_take(a, 3 * A, 2 * A), EGM_ERR_INVALID_ARG);  /* half used */
    assert_int_equal(egm__allocator_take(a, 19 * A, 2 * A), EGM_ERR_INVALID_ARG); /* spans two */
    assert_int_equal(egm__allocator_take(a, 10 * A + 1, A), EGM_ERR_INVALID_ARG); /* misaligned */
    assert_int_equal(egm__allocator_take(a, 63 * A, 2 * A), EGM_ERR_INVALID_ARG); /* past the end */
    assert_int_equal(egm__allocator_take(a, 30 * A, 0), EGM_ERR_INVALID_ARG);     /* empty */
    egm__allocator_stats(a, &after);
    assert_memory_equal(&before, &after, sizeof(before));
    /* Allocation goes on around the taken ranges. */
    uint64_t x;
    assert_int_equal(egm__allocator_alloc(a, 39 * A, &x), EGM_OK);
    assert_int_equal(x, 21 * A);
    assert_int_equal(egm__allocator_free(a, 4 * A, A + 1), EGM_OK);
    assert_int_equal(egm__allocator_free(a, 0, 2 * A), EGM_OK);
    assert_int_equal(egm__allocator_free(a, 6 * A, 3 * A), EGM_OK);
    assert_int_equal(egm__allocator_free(a, 20 * A, A), EGM_OK);
    assert_int_equal(egm__allocator_free(a, 60 * A, 4 * A), EGM_OK);
    assert_int_equal(egm__allocator_free(a, x, 39 * A), EGM_OK);
    check(a);
    egm__allocator_stats(a, &after);
    assert_int_equal(after.used, 0);
    assert_int_equal(after.free_ranges, 1);
    egm__allocator_destroy(a);
}

/* A slab granted whole is cut into objects: each piece is then its own
 * allocation (freed alone, coalescing with its free neighbours), and a split
 * that is misaligned, empty, or at free space changes nothing. */
static void test_split_cuts_one_allocation(void **state)
{
    (void)state;
    egm_allocator_t *a;
    uint64_t x, y;
    egm_allocator_stats_t before, after;

    assert_int_equal(egm__allocator_create(16 * A, &a), EGM_OK);
    assert_int_equal(egm__allocator_alloc(a, 8 * A, &x), EGM_OK);
    assert_int_equal(egm__allocator_alloc(a, 2 * A, &y), EGM_OK);
    egm__allocator_stats(a, &before);
    assert_int_equal(egm__allocator_split(a, x, x), EGM_ERR_INVALID_ARG);           /* empty head */
    assert_int_equal(egm__allocator_split(a, x, x + A + 1), EGM_ERR_INVALID_ARG);   /* misaligned */
    assert_int_equal(egm__allocator_split(a, x + 1, x + A), EGM_ERR_INVALID_ARG);   /* misaligned */
    assert_int_equal(egm__allocator_split(a, x, x + 12 * A), EGM_ERR_INVALID_ARG);  /* at free */
    assert_int_equal(egm__allocator_split(a, 12 * A, 13 * A), EGM_ERR_INVALID_ARG); /* free */
    assert_int_equal(egm__allocator_split(a, x, 16 * A), EGM_ERR_INVALID_ARG);      /* past end */
    egm__allocator_stats(a, &after);
    assert_memory_equal(&before, &after, sizeof(before));
    /* [x, +8) -> [x, +3) [x+3, +1) [x+4, +4) */
    assert_int_equal(egm__allocator_split(a, x, x + 4 * A), EGM_OK);
    assert_int_equal(egm__allocator_split(a, x, x + 3 * A), EGM_OK);
    check(a);
    egm__allocator_stats(a, &after);
    assert_int_equal(after.allocations, before.allocations + 2);
    assert_int_equal(after.used, before.used);
    assert_int_equal(egm__allocator_free(a, x + 3 * A, A), EGM_OK);
    assert_int_equal(egm__allocator_free(a, x + 4 * A, 4 * A), EGM_OK);
    check(a);
    egm__allocator_stats(a, &after);
    assert_int_equal(after.used, before.used - 5 * A);
    assert_int_equal(egm__allocator_free(a, x, 3 * A), EGM_OK);
    assert_int_equal(egm__allocator_free(a, y, 2 * A), EGM_OK);
    egm__allocator_stats(a, &after);
    assert_int_equal(after.used, 0);
    assert_int_equal(after.free_ranges, 1);
    assert_int_equal(after.allocations, 0);
    check(a);
    egm__allocator_destroy(a);
}

/* A request whose only fitting range shares its size class, behind more than a
 * few shorter ranges of that class, is still served: NO_SPACE means no range
 * fits. 1000 blocks is in a class 16 blocks wide ([992, 1008)). */
static void test_fit_found_inside_own_class(void **state)
{
    (void)state;
    egm_allocator_t *a;
    uint64_t holes[33], seps[33], off;
    const uint64_t n = 1000 * A;

    assert_int_equal(egm__allocator_create(64 * MiB, &a), EGM_OK);
    /* Hole 0 is 1001 blocks; holes 1..32 are 999 (shorter than the request);
     * separators keep them apart. Freed last, the short ones head the list. */
    for (int i = 0; i < 33; i++) {
        assert_int_equal(egm__allocator_alloc(a, i == 0 ? n + A : n - A, &holes[i]), EGM_OK);
        assert_int_equal(egm__allocator_alloc(a, A, &seps[i]), EGM_OK);
    }
    uint64_t rest, rest_len;
    egm_allocator_stats_t st;
    egm__allocator_stats(a, &st);
    rest_len = st.free;
    assert_int_equal(egm__allocator_alloc(a, rest_len, &rest), EGM_OK); /* no tail range */
    for (int i = 0; i < 33; i++)
        assert_int_equal(egm__allocator_free(a, holes[i], i == 0 ? n + A : n - A), EGM_OK);
    egm__allocator_stats(a, &st);
    assert_int_equal(st.free_ranges, 33);
    assert_int_equal(st.largest_free, n + A);
    check(a);

    assert_int_equal(egm__allocator_alloc(a, n + 2 * A, &off), EGM_ERR_NO_SPACE);
    assert_int_equal(egm__allocator_alloc(a, n, &off), EGM_OK);
    assert_int_equal(off, holes[0]);
    egm__allocator_stats(a, &st);
    assert_int_equal(st.largest_free, n - A);
    assert_int_equal(egm__allocator_alloc(a, n, &off), EGM_ERR_NO_SPACE);
    check(a);
    assert_int_equal(egm__allocator_free(a, holes[0], n), EGM_OK);
    for (int i = 0; i < 33; i++)
        assert_int_equal(egm__allocator_free(a, seps[i], A), EGM_OK);
    assert_int_equal(egm__allocator_free(a, rest, rest_len), EGM_OK);
    egm__allocator_stats(a, &st);
    assert_int_equal(st.free_ranges, 1);
    assert_int_equal(st.largest_free, 64 * MiB);
    check(a);
    egm__allocator_destroy(a);
}

#define TRACE_BLOCKS 65536 /* 4 MiB: small enough that the trace fills it */
#define TRACE_OPS 200000
#define TRACE_SLOTS 512
#define TRACE_CHECK_EVERY 997

typedef struct {
    uint64_t offset;
    uint64_t len;
    int live;
} slot_t;

static uint64_t trace_len(void)
{
    /* Mostly small objects, some medium and large ones, a few huge. */
    uint64_t r = rnd() % 100;
    if (r < 50)
        return 1 + rnd() % (4 * A);
    if (r < 80)
        return 1 + rnd() % (64 * A);
    if (r < 95)
        return 1 + rnd() % (1024 * A);
    return 1 + rnd() % (8192 * A);
}

/* Shadow map against the allocator's stats. */
static void compare_shadow(const egm_allocator_t *a, const uint8_t *owner, uint64_t used,
                           size_t live)
{
    uint64_t run = 0, longest = 0;
    size_t runs = 0;
    for (size_t b = 0; b < TRACE_BLOCKS; b++) {
        if (owner[b]) {
            run = 0;
            continue;
        }
        if (run++ == 0)
            runs++;
        if (run > longest)
            longest = run;
    }
    egm_allocator_stats_t st;
    egm__allocator_stats(a, &st);
    assert_int_equal(st.capacity, TRACE_BLOCKS * A);
    assert_int_equal(st.used, used);
    assert_int_equal(st.used + st.free, st.capacity);
    assert_int_equal(st.allocations, live);
    assert_int_equal(st.largest_free, longest * A);
    assert_int_equal(st.free_ranges, runs); /* every free neighbour coalesced */
    check(a);
}

static void test_random_trace_against_shadow(void **state)
{
    (void)state;
    static uint8_t owner[TRACE_BLOCKS]; /* 1 = allocated */
    static slot_t slots[TRACE_SLOTS];
    egm_allocator_t *a;
    uint64_t used = 0;
    size_t live = 0, no_space = 0, allocs = 0, frees = 0;

    seed(6);
    memset(owner, 0, sizeof(owner));
    memset(slots, 0, sizeof(slots));
    assert_int_equal(egm__allocator_create(TRACE_BLOCKS * A, &a), EGM_OK);
    for (int op = 0; op < TRACE_OPS; op++) {
        if (op % TRACE_CHECK_EVERY == 0)
            compare_shadow(a, owner, used, live);
        slot_t *slot = &slots[rnd() % TRACE_SLOTS];
        if (slot->live) {
            /* Now and then a wrong free first: refused, nothing changes. */
            if (rnd() % 16 == 0) {
                egm_allocator_stats_t before, after;
                uint64_t first = slot->offset / A;
                uint64_t end = (slot->offset + slot->len + A - 1) / A, hole = end;
                while (hole < TRACE_BLOCKS && owner[hole])
                    hole++;
                egm__allocator_stats(a, &before);
                assert_int_equal(egm__allocator_free(a, slot->offset + 1, slot->len),
                                 EGM_ERR_INVALID_ARG); /* misaligned */
                if (hole < TRACE_BLOCKS) {             /* on to the next free block */
                    assert_int_equal(egm__allocator_free(a, slot->offset, (hole + 1 - first) * A),
                                     EGM_ERR_INVALID_ARG);
                    assert_int_equal(egm__allocator_free(a, hole * A, A), EGM_ERR_INVALID_ARG);
                }
                egm__allocator_stats(a, &after);
                assert_memory_equal(&before, &after, sizeof(before));
            }
            assert_int_equal(egm__allocator_free(a, slot->offset, slot->len), EGM_OK);
            for (uint64_t b = slot->offset / A; b < (slot->offset + slot->len + A - 1) / A; b++) {
                assert_int_equal(owner[b], 1);
                owner[b] = 0;
            }
            used -= egm__allocator_round(slot->len);
            /* A second free of it overlaps free space now. */
            if (rnd() % 16 == 0)
                assert_int_equal(egm__allocator_free(a, slot->offset, slot->len),
                                 EGM_ERR_INVALID_ARG);
            slot->live = 0;
            live--;
            frees++;
            continue;
        }
        uint64_t len = trace_len(), off;
        egm_status_t st = egm__allocator_alloc(a, len, &off);
        if (st == EGM_ERR_NO_SPACE) {
            /* Refused only when no free range is long enough (largest_free is
             * itself checked against the shadow map). */
            egm_allocator_stats_t s;
            egm__allocator_stats(a, &s);
            assert_true(s.largest_free < egm__allocator_round(len));
            no_space++;
            continue;
        }
        assert_int_equal(st, EGM_OK);
        assert_int_equal(off % A, 0);
        assert_true(off < TRACE_BLOCKS * A && len <= TRACE_BLOCKS * A - off);
        for (uint64_t b = off / A; b < (off + len + A - 1) / A; b++) {
            assert_int_equal(owner[b], 0); /* never hands out a block twice */
            owner[b] = 1;
        }
        used += egm__allocator_round(len);
        *slot = (slot_t){off, len, 1};
        live++;
        allocs++;
    }
    compare_shadow(a, owner, used, live);
    printf("trace: %d ops, %zu allocations, %zu frees, %zu refused for space\n", TRACE_OPS, allocs,
           frees, no_space);
    assert_true(no_space > 1000 && allocs > 50000); /* both paths exercised */
    for (size_t s = 0; s < TRACE_SLOTS; s++)
        if (slots[s].live)
            assert_int_equal(egm__allocator_free(a, slots[s].offset, slots[s].len), EGM_OK);
    egm_allocator_stats_t st;
    egm__allocator_stats(a, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.allocations, 0);
    assert_int_equal(st.free_ranges, 1);
    assert_int_equal(st.largest_free, TRACE_BLOCKS * A);
    check(a);
    egm__allocator_destroy(a);
}

/* Uniform sizes: filled until NO_SPACE the segment is >= 99% used, and still
 * after freeing a random half and filling again (holes are reused exactly). */
static void test_uniform_utilisation(void **state)
{
    (void)state;
    const uint64_t sizes[] = {64, 1000, 4 * KiB + 1, 100000, MiB, 3 * MiB + 17, 16 * MiB - 1};
    enum { MAX_OBJECTS = 70000 };
    uint64_t *offs = egm_malloc(MAX_OBJECTS * sizeof(*offs), "test.offs");

    assert_non_null(offs);
    seed(7);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        const uint64_t len = sizes[k];
        /* At most 64k objects, at least 64. */
        uint64_t seg = len * 64000 < GiB ? len * 64000 : GiB;
        egm_allocator_t *a;
        egm_allocator_stats_t st;
        size_t n = 0;
        assert_int_equal(egm__allocator_create(seg, &a), EGM_OK);
        for (int round = 0; round < 3; round++) {
            while (egm__allocator_alloc(a, len, &offs[n]) == EGM_OK) {
                n++;
                assert_true(n < MAX_OBJECTS);
            }
            egm__allocator_stats(a, &st);
            double util = (double)st.used / (double)st.capacity;
            printf("uniform %llu B in %llu MiB, round %d: %zu objects, utilisation %.4f\n",
                   (unsigned long long)len, (unsigned long long)(seg / MiB), round, n, util);
            assert_true(util >= 0.99);
            assert_true(st.largest_free < egm__allocator_round(len));
            check(a);
            /* Free a random half. */
            for (size_t i = 0; i < n;) {
                if (rnd() % 2 == 0) {
                    i++;
                    continue;
                }
                assert_int_equal(egm__allocator_free(a, offs[i], len), EGM_OK);
                offs[i] = offs[--n];
            }
        }
        for (size_t i = 0; i < n; i++)
            assert_int_equal(egm__allocator_free(a, offs[i], len), EGM_OK);
        egm__allocator_stats(a, &st);
        assert_int_equal(st.free_ranges, 1);
        egm__allocator_destroy(a);
    }
    egm_free(offs);
}

/* Mixed sizes at steady state, the way the master runs a full segment: a new
 * object that does not fit makes room by evicting random live objects until
 * it does. Sizes are log-uniform from 4 KiB to 1 MiB (any byte count).
 * Measured: utilisation when a request is first refused, and occupancy after
 * each placement. */
#define MIXED_SEGMENT (1 * GiB)
#define MIXED_WARMUP 20000
#define MIXED_REQUESTS 100000
#define MIXED_MAX_LIVE 16384

typedef struct {
    uint64_t offset, len;
} live_t;

static uint64_t mixed_len(void)
{
    uint64_t lo = 4 * KiB << (rnd() % 8);
    return lo + rnd() % lo;
}

static void test_mixed_steady_state_utilisation(void **state)
{
    (void)state;
    live_t *live = egm_malloc(MIXED_MAX_LIVE * sizeof(*live), "test.live");
    egm_allocator_t *a;
    egm_allocator_stats_t st;
    size_t n = 0, refused = 0;
    double refusal_sum = 0, refusal_min = 1, occupancy_sum = 0;
    uint64_t evicted = 0, placed = 0;

    assert_non_null(live);
    seed(8);
    assert_int_equal(egm__allocator_create(MIXED_SEGMENT, &a), EGM_OK);
    for (int r = 0; r < MIXED_WARMUP + MIXED_REQUESTS; r++) {
        uint64_t len = mixed_len(), off;
        int first = 1;
        while (egm__allocator_alloc(a, len, &off) != EGM_OK) {
            assert_true(n > 0); /* an empty segment fits any of these */
            if (first && r >= MIXED_WARMUP) {
                egm__allocator_stats(a, &st);
                double util = (double)st.used / (double)st.capacity;
                refusal_sum += util;
                if (util < refusal_min)
                    refusal_min = util;
                refused++;
            }
            first = 0;
            size_t v = (size_t)(rnd() % n);
            assert_int_equal(egm__allocator_free(a, live[v].offset, live[v].len), EGM_OK);
            if (r >= MIXED_WARMUP)
                evicted += egm__allocator_round(live[v].len);
            live[v] = live[--n];
        }
        assert_true(n < MIXED_MAX_LIVE);
        live[n++] = (live_t){off, len};
        if (r >= MIXED_WARMUP) {
            placed += egm__allocator_round(len);
            egm__allocator_stats(a, &st);
            occupancy_sum += (double)st.used / (double)st.capacity;
        }
        if (r % 10000 == 0)
            check(a);
    }
    egm__allocator_stats(a, &st);
    double refusal_mean = refusal_sum / (double)refused;
    double occupancy = occupancy_sum / MIXED_REQUESTS;
    printf("mixed 4 KiB..1 MiB in 1 GiB, %d requests at steady state: %zu refused; utilisation "
           "at refusal mean %.4f min %.4f; occupancy mean %.4f; bytes evicted per byte placed "
           "%.3f; %zu live, %zu free ranges\n",
           MIXED_REQUESTS, refused, refusal_mean, refusal_min, occupancy,
           (double)evicted / (double)placed, n, st.free_ranges);
    assert_true(refused > 1000); /* it really ran full */
    /* Measured (this seed, and seeds 1..13 in bench/alloc): refusal mean
     * 0.936..0.942, min 0.834..0.858, occupancy 0.924..0.929; the old first-fit
     * allocator got 0.915 mean. Size alone would refuse a request of at most
     * 1 MiB only above 99.9%, so the rest is fragmentation left by random
     * eviction. Floors sit ~2 points under the measurements. */
    assert_true(refusal_mean >= 0.92);
    assert_true(refusal_min >= 0.80);
    assert_true(occupancy >= 0.90);
    check(a);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(egm__allocator_free(a, live[i].offset, live[i].len), EGM_OK);
    egm__allocator_stats(a, &st);
    assert_int_equal(st.free_ranges, 1);
    assert_int_equal(st.largest_free, MIXED_SEGMENT);
    egm__allocator_destroy(a);
    egm_free(live);
}

/* 1M alloc+free pairs on a 1 GiB segment holding ~4k mixed objects. Printed,
 * not asserted. */
#define SPEED_PAIRS 1000000
#define SPEED_LIVE 4096

static void test_throughput_printed(void **state)
{
    (void)state;
    live_t *live = egm_malloc(SPEED_LIVE * sizeof(*live), "test.live");
    egm_allocator_t *a;
    struct timespec t0, t1;

    assert_non_null(live);
    seed(9);
    assert_int_equal(egm__allocator_create(GiB, &a), EGM_OK);
    for (size_t i = 0; i < SPEED_LIVE; i++) {
        live[i].len = 1 + rnd() % (256 * KiB);
        assert_int_equal(egm__allocator_alloc(a, live[i].len, &live[i].offset), EGM_OK);
    }
    size_t failed = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < SPEED_PAIRS; i++) {
        live_t *v = &live[rnd() % SPEED_LIVE];
        if (egm__allocator_free(a, v->offset, v->len) != EGM_OK)
            fail();
        v->len = 1 + rnd() % (256 * KiB);
        while (egm__allocator_alloc(a, v->len, &v->offset) != EGM_OK) {
            v->len /= 2; /* the segment is about half full: rare */
            failed++;
            assert_true(v->len > 0);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("throughput: %d alloc+free pairs in %.3f s: %.0f pairs/s, %.1f ns per op "
           "(%zu retries)\n",
           SPEED_PAIRS, s, SPEED_PAIRS / s, s * 1e9 / (2.0 * SPEED_PAIRS), failed);
    check(a);
    for (size_t i = 0; i < SPEED_LIVE; i++)
        assert_int_equal(egm__allocator_free(a, live[i].offset, live[i].len), EGM_OK);
    egm_allocator_stats_t st;
    egm__allocator_stats(a, &st);
    assert_int_equal(st.free_ranges, 1);
    egm__allocator_destroy(a);
    egm_free(live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_rejects_tiny_segment),
        cmocka_unit_test(test_alignment_and_rounding),
        cmocka_unit_test(test_no_space_when_full),
        cmocka_unit_test(test_invalid_free_changes_nothing),
        cmocka_unit_test(test_free_checks_free_space_only),
        cmocka_unit_test(test_free_without_memory_loses_the_range),
        cmocka_unit_test(test_split_cuts_one_allocation),
        cmocka_unit_test(test_fit_found_inside_own_class),
        cmocka_unit_test(test_take_exact_ranges),
        cmocka_unit_test(test_random_trace_against_shadow),
        cmocka_unit_test(test_uniform_utilisation),
        cmocka_unit_test(test_mixed_steady_state_utilisation),
        cmocka_unit_test(test_throughput_printed),
    };
    return cmocka_run_group_tests(tests, egm_test_setup_alloc, egm_test_teardown_alloc);
}
