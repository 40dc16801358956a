/* The bounce buffer's plan (src/cuda/bounce_plan.h): adjacent far sides share
 * a run, runs keep the far side's alignment modulo 16, chunks never pass a
 * half, empty copies, refusals; and random batches carried out on a byte
 * model of the two halves (near -> half -> far and back) against the direct
 * copy, which fails for any plan that loses, overlaps or misplaces a byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "cuda/bounce_plan.h"

#define KIB (1ull << 10)
#define MIB (1ull << 20)

static int setup(void **state)
{
    uint64_t *live = test_malloc(sizeof(*live));
    *live = egm__alloc_live_count();
    *state = live;
    return 0;
}

static int teardown(void **state)
{
    uint64_t *live = *state;
    assert_int_equal(egm__alloc_live_count(), *live);
    test_free(live);
    return 0;
}

/* Every run lies in its chunk's half, runs of a chunk do not overlap, each
 * copy lies inside one run of its chunk at the far offset it has in the run,
 * and the chunks take the copies in order, all of them. */
static void check_plan(const egm_copy_desc_t *c, size_t n, int far_is_dst, uint64_t half,
                       const egm_bounce_plan_t *p)
{
    size_t next_copy = 0;
    for (size_t k = 0; k < p->n_chunks; k++) {
        const egm_bounce_chunk_t *ch = &p->chunks[k];
        assert_true(ch->first_copy >= next_copy);
        for (size_t i = next_copy; i < ch->first_copy; i++)
            assert_int_equal(c[i].len, 0); /* only empty copies before a chunk */
        next_copy = ch->first_copy + ch->n_copies;
        assert_true(ch->used <= half);
        for (size_t r = ch->first_run; r < ch->first_run + ch->n_runs; r++) {
            const egm_bounce_run_t *run = &p->runs[r];
            assert_true(run->off + run->len <= half);
            assert_int_equal(run->off % 16, run->far % 16);
            if (r > ch->first_run)
                assert_true(p->runs[r - 1].off + p->runs[r - 1].len <= run->off);
        }
        for (size_t i = ch->first_copy; i < next_copy; i++) {
            if (c[i].len == 0)
                continue;
            uint64_t far = far_is_dst ? c[i].dst : c[i].src;
            int inside = 0;
            for (size_t r = ch->first_run; r < ch->first_run + ch->n_runs; r++) {
                const egm_bounce_run_t *run = &p->runs[r];
                if (far >= run->far && far + c[i].len <= run->far + run->len) {
                    assert_int_equal(p->offs[i] - run->off, far - run->far);
                    inside = 1;
                }
            }
            assert_true(inside);
        }
    }
    for (size_t i = next_copy; i < n; i++)
        assert_int_equal(c[i].len, 0);
    if (p->n_chunks > 0)
        assert_int_equal(p->chunks[p->n_chunks - 1].first_run + p->chunks[p->n_chunks - 1].n_runs,
                         p->n_runs);
}

static void test_adjacent_pieces_make_one_run(void **state)
{
    (void)state;
    /* vLLM's put: 64 scattered 32 KiB pieces into one object, twice. */
    egm_copy_desc_t c[128];
    for (size_t i = 0; i < 128; i++)
        c[i] = (egm_copy_desc_t){.src = 0x100000000ull + (127 - i) * 1 * MIB,
                                 .dst = 0x7000000000ull + i * 32 * KIB,
                                 .len = 32 * KIB};
    egm_bounce_plan_t p;
    assert_int_equal(egm__bounce_plan(c, 128, 1, 8 * MIB, &p), EGM_OK);
    check_plan(c, 128, 1, 8 * MIB, &p);
    assert_int_equal(p.n_chunks, 1);
    assert_int_equal(p.n_runs, 1);
    assert_int_equal(p.runs[0].len, 4 * MIB);
    assert_int_equal(p.runs[0].far, 0x7000000000ull);
    for (size_t i = 0; i < 128; i++)
        assert_int_equal(p.offs[i], i * 32 * KIB);
    egm__bounce_plan_free(&p);

    /* The same from the far side as the source (a get). */
    for (size_t i = 0; i < 128; i++) {
        uint64_t t = c[i].src;
        c[i].src = c[i].dst;
        c[i].dst = t;
    }
    assert_int_equal(egm__bounce_plan(c, 128, 0, 8 * MIB, &p), EGM_OK);
    check_plan(c, 128, 0, 8 * MIB, &p);
    assert_int_equal(p.n_runs, 1);
    egm__bounce_plan_free(&p);
}

static void test_chunks_end_at_the_half(void **state)
{
    (void)state;
    /* 40 MiB of adjacent 512 KiB pieces in halves of 8 MiB: 5 chunks of 16. */
    enum { N = 80 };
    egm_copy_desc_t c[N];
    for (size_t i = 0; i < N; i++)
        c[i] = (egm_copy_desc_t){
            .src = 0x10000 + i * 1 * MIB, .dst = 0x900000000ull + i * 512 * KIB, .len = 512 * KIB};
    egm_bounce_plan_t p;
    assert_int_equal(egm__bounce_plan(c, N, 1, 8 * MIB, &p), EGM_OK);
    check_plan(c, N, 1, 8 * MIB, &p);
    assert_int_equal(p.n_chunks, 5);
    for (size_t k = 0; k < 5; k++) {
        assert_int_equal(p.chunks[k].first_copy, 16 * k);
        assert_int_equal(p.chunks[k].n_copies, 16);
        assert_int_equal(p.chunks[k].n_runs, 1);
        assert_int_equal(p.chunks[k].used, 8 * MIB);
        assert_int_equal(p.runs[k].far, 0x900000000ull + k * 8 * MIB);
    }
    egm__bounce_plan_free(&p);
}

static void test_gaps_start_runs_at_congruent_offsets(void **state)
{
    (void)state;
    /* Far sides with gaps and odd alignments: a run each, each at its far
     * address's remainder modulo 16 (with up to 15 bytes of padding). */
    egm_copy_desc_t c[4] = {
        {.src = 0x1000, .dst = 0x50003, .len = 100},
        {.src = 0x2000, .dst = 0x50067, .len = 29}, /* adjacent: the same run */
        {.src = 0x3000, .dst = 0x60009, .len = 7},
        {.src = 0x4000, .dst = 0x7000f, .len = 1},
    };
    egm_bounce_plan_t p;
    assert_int_equal(egm__bounce_plan(c, 4, 1, 4096, &p), EGM_OK);
    check_plan(c, 4, 1, 4096, &p);
    assert_int_equal(p.n_chunks, 1);
    assert_int_equal(p.n_runs, 3);
    assert_int_equal(p.offs[0], 3);
    assert_int_equal(p.offs[1], 103);
    assert_int_equal(p.offs[2], 137); /* 132 -> the next 9 mod 16 */
    assert_int_equal(p.offs[3], 159); /* 144 -> 15 mod 16 */
    egm__bounce_plan_free(&p);
}

static void test_empty_copies_and_refusals(void **state)
{
    (void)state;
    egm_copy_desc_t c[4] = {
        {.src = 0x1000, .dst = 0x9000, .len = 0},
        {.src = 0x1000, .dst = 0x9000, .len = 64},
        {.src = 0x2000, .dst = 0x9040, .len = 0},
        {.src = 0x3000, .dst = 0x9040, .len = 64},
    };
    egm_bounce_plan_t p;
    assert_int_equal(egm__bounce_plan(c, 4, 1, 1024, &p), EGM_OK);
    check_plan(c, 4, 1, 1024, &p);
    assert_int_equal(p.n_chunks, 1);
    assert_int_equal(p.chunks[0].first_copy, 1);
    assert_int_equal(p.chunks[0].n_copies, 3);
    assert_int_equal(p.n_runs, 1); /* an empty copy does not break a run */
    egm__bounce_plan_free(&p);

    assert_int_equal(egm__bounce_plan(c, 0, 1, 1024, &p), EGM_OK);
    assert_int_equal(p.n_chunks, 0);
    egm__bounce_plan_free(&p);

    /* A copy that cannot fit a half with its alignment padding. */
    c[1].len = 1024 - 14;
    assert_int_equal(egm__bounce_plan(c, 4, 1, 1024, &p), EGM_ERR_INVALID_ARG);
    assert_null(p.chunks);
    c[1].len = 1024 - 15;
    assert_int_equal(egm__bounce_plan(c, 4, 1, 1024, &p), EGM_OK);
    check_plan(c, 4, 1, 1024, &p);
    egm__bounce_plan_free(&p);
}

/* The plan carried out on bytes: each chunk's near pieces into a half, the
 * half's runs out to the far side (to_far), or the reverse; the result must
 * equal the direct copies. */
static void carry_out(const egm_copy_desc_t *c, size_t n, int far_is_dst, uint64_t half,
                      const egm_bounce_plan_t *p, uint8_t *mem, uint8_t *halves)
{
    for (size_t k = 0; k < p->n_chunks; k++) {
        const egm_bounce_chunk_t *ch = &p->chunks[k];
        uint8_t *h = halves + (k % 2) * half;
        memset(h, 0xEE, half); /* what a chunk before left there must not matter */
        if (far_is_dst) {
            for (size_t i = ch->first_copy; i < ch->first_copy + ch->n_copies; i++)
                memcpy(h + p->offs[i], mem + c[i].src, c[i].len);
            for (size_t r = ch->first_run; r < ch->first_run + ch->n_runs; r++)
                memcpy(mem + p->runs[r].far, h + p->runs[r].off, p->runs[r].len);
        } else {
            for (size_t r = ch->first_run; r < ch->first_run + ch->n_runs; r++)
                memcpy(h + p->runs[r].off, mem + p->runs[r].far, p->runs[r].len);
            for (size_t i = ch->first_copy; i < ch->first_copy + ch->n_copies; i++)
                memcpy(mem + c[i].dst, h + p->offs[i], c[i].len);
        }
    }
    (void)n;
}

static void test_random_batches_carry_the_same_bytes(void **state)
{
    (void)state;
    enum { MEM = 2 << 20, NEAR = 0, FAR = MEM / 2, MAXN = 200 };
    uint8_t *mem = malloc(MEM), *want = malloc(MEM), *halves = malloc(2 * 8192);
    assert_non_null(mem);
    assert_non_null(want);
    assert_non_null(halves);
    unsigned seed = 12345;
    for (int round = 0; round < 400; round++) {
        int far_is_dst = round % 2;
        uint64_t half = 512 + (uint64_t)(rand_r(&seed) % 7680);
        size_t n = (size_t)(rand_r(&seed) % MAXN);
        egm_copy_desc_t c[MAXN];
        /* far sides: consecutive with occasional gaps; near sides: scattered,
         * disjoint slots of 4 KiB. Lengths 0..min(2 KiB, half - 15). */
        uint64_t far = FAR + (uint64_t)(rand_r(&seed) % 64);
        for (size_t i = 0; i < n; i++) {
            uint64_t cap = half - 15 < 2048 ? half - 15 : 2048;
            uint64_t len = rand_r(&seed) % 5 == 0 ? 0 : (uint64_t)(rand_r(&seed) % (cap + 1));
            if (rand_r(&seed) % 4 == 0)
                far += 1 + (uint64_t)(rand_r(&seed) % 300);
            uint64_t near = NEAR + (uint64_t)((i * 37) % MAXN) * 4096 + rand_r(&seed) % 1024;
            c[i] = far_is_dst ? (egm_copy_desc_t){.dst = far, .src = near, .len = len}
                              : (egm_copy_desc_t){.dst = near, .src = far, .len = len};
            far += len;
        }
        assert_true(far < MEM);
        for (size_t b = 0; b < MEM; b++)
            mem[b] = (uint8_t)(b * 131 + (size_t)round);
        memcpy(want, mem, MEM);
        for (size_t i = 0; i < n; i++)
            memmove(want + c[i].dst, want + c[i].src, c[i].len);
        egm_bounce_plan_t p;
        assert_int_equal(egm__bounce_plan(c, n, far_is_dst, half, &p), EGM_OK);
        check_plan(c, n, far_is_dst, half, &p);
        carry_out(c, n, far_is_dst, half, &p, mem, halves);
        assert_memory_equal(mem, want, MEM);
        egm__bounce_plan_free(&p);
    }
    free(mem);
    free(want);
    free(halves);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_adjacent_pieces_make_one_run),         T(test_chunks_end_at_the_half),
        T(test_gaps_start_runs_at_congruent_offsets), T(test_empty_copies_and_refusals),
        T(test_random_batches_carry_the_same_bytes),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
