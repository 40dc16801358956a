/* Master range allocator: aligned results, NO_SPACE when full, no overlap over a
 * random trace (checked against a bitmap of 64-byte blocks), invalid frees
 * refused without damage, and full coalescing back to one free range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "master/allocator.h"

#define A EGM_ALLOCATOR_ALIGN

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    return x;
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
    egm__allocator_destroy(a);
    egm__allocator_destroy(NULL);
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
        if (i > 0) /* first fit from an empty segment packs them in order */
            assert_int_equal(off[i], off[i - 1] + egm__allocator_round(lens[i - 1]));
    }
    egm_allocator_stats_t st;
    egm__allocator_stats(a, &st);
    assert_int_equal(st.used, used);
    assert_int_equal(st.used, 1 * A + 1 * A + 1 * A + 2 * A + 4 * A);
    assert_int_equal(st.allocations, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(egm__allocator_free(a, off[i], lens[i]), EGM_OK);
    egm__allocator_stats(a, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.free_ranges, 1);
    assert_int_equal(egm__allocator_round(UINT64_MAX), 0);
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
    /* A freed block is reused (first fit: the lowest). */
    assert_int_equal(egm__allocator_alloc(a, A, &off), EGM_OK);
    assert_int_equal(off, offs[0]);
    assert_int_equal(egm__allocator_free(a, off, A), EGM_OK);

    /* Freeing the rest coalesces everything into one range. */
    for (int i = 1; i < 64; i += 2)
        assert_int_equal(egm__allocator_free(a, offs[i], A), EGM_OK);
    egm__allocator_stats(a, &st);
    assert_int_equal(st.free_ranges, 1);
    assert_int_equal(st.largest_free, 64 * A);
    assert_int_equal(egm__allocator_alloc(a, 64 * A, &off), EGM_OK);
    assert_int_equal(off, 0);
    assert_int_equal(egm__allocator_free(a, off, 64 * A), EGM_OK);
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
    assert_int_equal(egm__allocator_free(a, 8 * A, A), EGM_ERR_INVALID_ARG);      /* free space */
    assert_int_equal(egm__allocator_free(a, y, 3 * A), EGM_ERR_INVALID_ARG); /* runs into free */
    assert_int_equal(egm__allocator_free(a, x, 0), EGM_ERR_INVALID_ARG);
    egm__allocator_stats(a, &after);
    assert_memory_equal(&before, &after, sizeof(before));
    assert_int_equal(egm__allocator_free(a, x, 2 * A), EGM_OK);
    assert_int_equal(egm__allocator_free(a, x, 2 * A), EGM_ERR_INVALID_ARG); /* double free */
    assert_int_equal(egm__allocator_free(a, y, 2 * A), EGM_OK);
    egm__allocator_stats(a, &after);
    assert_int_equal(after.free_ranges, 1);
    assert_int_equal(after.used, 0);
    egm__allocator_destroy(a);
}

#define TRACE_BLOCKS 1024 /* 64 KiB: small enough that the trace fills it */
#define TRACE_OPS 20000
#define TRACE_SLOTS 512

typedef struct {
    uint64_t offset;
    uint64_t len;
    int live;
} slot_t;

static void test_random_trace_never_overlaps(void **state)
{
    (void)state;
    static uint8_t owner[TRACE_BLOCKS]; /* 1 = allocated */
    static slot_t slots[TRACE_SLOTS];
    egm_allocator_t *a;
    uint64_t used = 0;
    size_t live = 0, no_space = 0;

    memset(owner, 0, sizeof(owner));
    memset(slots, 0, sizeof(slots));
    assert_int_equal(egm__allocator_create(TRACE_BLOCKS * A, &a), EGM_OK);
    for (int op = 0; op < TRACE_OPS; op++) {
        size_t s = (size_t)(rnd() % TRACE_SLOTS);
        slot_t *slot = &slots[s];
        if (slot->live) {
            assert_int_equal(egm__allocator_free(a, slot->offset, slot->len), EGM_OK);
            for (uint64_t b = slot->offset / A; b < (slot->offset + slot->len + A - 1) / A; b++) {
                assert_int_equal(owner[b], 1);
                owner[b] = 0;
            }
            used -= egm__allocator_round(slot->len);
            slot->live = 0;
            live--;
            continue;
        }
        /* Mostly small objects, sometimes large ones. */
        uint64_t len = (rnd() % 8 == 0) ? 1 + rnd() % (64 * A) : 1 + rnd() % (4 * A);
        uint64_t off;
        egm_status_t st = egm__allocator_alloc(a, len, &off);
        if (st == EGM_ERR_NO_SPACE) {
            /* Refused only when no free run of blocks is long enough. */
            uint64_t run = 0, longest = 0;
            for (size_t b = 0; b < TRACE_BLOCKS; b++) {
                run = owner[b] ? 0 : run + 1;
                if (run > longest)
                    longest = run;
            }
            assert_true(longest * A < egm__allocator_round(len));
            no_space++;
            continue;
        }
        assert_int_equal(st, EGM_OK);
        assert_int_equal(off % A, 0);
        assert_true(off + len <= TRACE_BLOCKS * A);
        for (uint64_t b = off / A; b < (off + len + A - 1) / A; b++) {
            assert_int_equal(owner[b], 0); /* never hands out a block twice */
            owner[b] = 1;
        }
        used += egm__allocator_round(len);
        *slot = (slot_t){off, len, 1};
        live++;
        egm_allocator_stats_t st2;
        egm__allocator_stats(a, &st2);
        assert_int_equal(st2.used, used);
        assert_int_equal(st2.allocations, live);
        assert_true(st2.free_ranges <= live + 1);
    }
    assert_true(no_space > 0); /* the full-segment path was exercised */
    for (size_t s = 0; s < TRACE_SLOTS; s++)
        if (slots[s].live)
            assert_int_equal(egm__allocator_free(a, slots[s].offset, slots[s].len), EGM_OK);
    egm_allocator_stats_t st;
    egm__allocator_stats(a, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.allocations, 0);
    assert_int_equal(st.free_ranges, 1);
    assert_int_equal(st.largest_free, TRACE_BLOCKS * A);
    egm__allocator_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_rejects_tiny_segment),
        cmocka_unit_test(test_alignment_and_rounding),
        cmocka_unit_test(test_no_space_when_full),
        cmocka_unit_test(test_invalid_free_changes_nothing),
        cmocka_unit_test(test_random_trace_never_overlaps),
    };
    return cmocka_run_group_tests(tests, egm_test_setup_alloc, egm_test_teardown_alloc);
}
