/* EGM pool planner: alignment (lcm), rounding, the even split with the
 * remainder on lower node ids, chunking under max_mr_size, Mooncake's
 * 600 MiB -> 592 MiB example, errors that name the key, sizes near 2^64,
 * the egm_numa_nodes parser and the printed table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "pool/egm_plan.h"

#define KIB (1ull << 10)
#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define TIB (1ull << 40)

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

static egm_egm_plan_params_t params_of(const egm_egm_plan_node_in_t *nodes, size_t n,
                                       uint64_t allocator_alignment, uint64_t total,
                                       uint64_t max_mr)
{
    egm_egm_plan_params_t p = {
        .nodes = nodes,
        .node_count = n,
        .allocator_alignment = allocator_alignment,
        .global_segment_size = total,
        .max_mr_size = max_mr,
    };
    return p;
}

/* Everything a plan promises, whatever its inputs. */
static void check_invariants(const egm_egm_plan_params_t *p, const egm_egm_plan_t *plan)
{
    assert_int_equal(plan->alignment % p->allocator_alignment, 0);
    for (size_t i = 0; i < p->node_count; i++)
        assert_int_equal(plan->alignment % p->nodes[i].granularity, 0);
    assert_int_equal(plan->requested, p->global_segment_size);
    assert_int_equal(plan->capacity % plan->alignment, 0);
    assert_true(plan->capacity <= p->global_segment_size);
    assert_true(p->global_segment_size - plan->capacity < plan->alignment);
    assert_int_equal(plan->max_chunk % plan->alignment, 0);
    assert_true(plan->max_chunk <= p->max_mr_size);
    assert_true(p->max_mr_size - plan->max_chunk < plan->alignment);
    assert_int_equal(plan->node_count, p->node_count);

    uint64_t sum = 0;
    size_t next_chunk = 0;
    for (size_t i = 0; i < plan->node_count; i++) {
        const egm_egm_plan_node_t *n = &plan->nodes[i];
        assert_int_equal(n->node, p->nodes[i].node);
        assert_int_equal(n->granularity, p->nodes[i].granularity);
        assert_true(n->share >= plan->alignment);
        assert_int_equal(n->share % plan->alignment, 0);
        /* Even split: shares differ by at most one unit, lower ids larger. */
        assert_true(n->share <= plan->nodes[0].share);
        assert_true(plan->nodes[0].share - n->share <= plan->alignment);
        if (i > 0)
            assert_true(n->share <= plan->nodes[i - 1].share);
        assert_int_equal(n->first_chunk, next_chunk);
        assert_true(n->chunk_count >= 1);
        uint64_t off = 0;
        for (size_t k = 0; k < n->chunk_count; k++) {
            const egm_egm_plan_chunk_t *c = &plan->chunks[n->first_chunk + k];
            assert_int_equal(c->node, n->node);
            assert_int_equal(c->offset, off);
            assert_true(c->size > 0);
            assert_true(c->size <= plan->max_chunk);
            assert_true(c->size <= p->max_mr_size);
            assert_int_equal(c->size % plan->alignment, 0);
            if (k + 1 < n->chunk_count)
                assert_int_equal(c->size, plan->max_chunk); /* only the last is smaller */
            assert_true(c->size <= n->share - off);         /* never crosses the node */
            off += c->size;
        }
        assert_int_equal(off, n->share);
        sum += n->share;
        next_chunk += n->chunk_count;
    }
    assert_int_equal(next_chunk, plan->chunk_count);
    assert_int_equal(sum, plan->capacity);
}

static void expect_error(const egm_egm_plan_params_t *p, egm_status_t want, const char *needle1,
                         const char *needle2)
{
    egm_egm_plan_t *plan = (egm_egm_plan_t *)0x1;
    assert_int_equal(egm__egm_plan_compute(p, &plan), want);
    assert_null(plan);
    const char *msg = egm_last_error();
    assert_non_null(msg);
    if (strstr(msg, needle1) == NULL || (needle2 != NULL && strstr(msg, needle2) == NULL))
        fail_msg("error \"%s\" lacks \"%s\" / \"%s\"", msg, needle1, needle2 ? needle2 : "");
}

/* Mooncake: alignment lcm(16 MiB slab, 2 MiB granularity) = 16 MiB; 600 MiB
 * requested became 592 MiB in 4 x 144 MiB + 1 x 16 MiB. 592 MiB is 37 units
 * and 144 MiB is 9 units, so that is one node with max_mr_size in
 * [144, 160) MiB: any split over 2+ nodes would give each node its own last
 * chunk. Our rules reproduce it exactly. */
static void test_mooncake_600_mib_example(void **state)
{
    (void)state;
    const egm_egm_plan_node_in_t nodes[] = {{0, 2 * MIB}};
    const uint64_t max_mrs[] = {144 * MIB, 150 * MIB, 160 * MIB - 1};
    for (size_t m = 0; m < 3; m++) {
        egm_egm_plan_params_t p = params_of(nodes, 1, 16 * MIB, 600 * MIB, max_mrs[m]);
        egm_egm_plan_t *plan = NULL;
        assert_int_equal(egm__egm_plan_compute(&p, &plan), EGM_OK);
        check_invariants(&p, plan);
        assert_int_equal(plan->alignment, 16 * MIB);
        assert_int_equal(plan->capacity, 592 * MIB);
        assert_int_equal(plan->max_chunk, 144 * MIB);
        assert_int_equal(plan->chunk_count, 5);
        for (size_t i = 0; i < 4; i++) {
            assert_int_equal(plan->chunks[i].size, 144 * MIB);
            assert_int_equal(plan->chunks[i].offset, i * 144 * MIB);
        }
        assert_int_equal(plan->chunks[4].size, 16 * MIB);
        assert_int_equal(plan->chunks[4].offset, 576 * MIB);
        egm__egm_plan_free(plan);
    }
}

/* 10 units over 3 nodes: 4, 3, 3 (the remainder goes to the lowest id). */
static void test_uneven_split_three_nodes(void **state)
{
    (void)state;
    const egm_egm_plan_node_in_t nodes[] = {{0, 2 * MIB}, {2, 2 * MIB}, {5, 2 * MIB}};
    egm_egm_plan_params_t p = params_of(nodes, 3, 64, 21 * MIB, 4 * MIB);
    egm_egm_plan_t *plan = NULL;
    assert_int_equal(egm__egm_plan_compute(&p, &plan), EGM_OK);
    check_invariants(&p, plan);
    assert_int_equal(plan->alignment, 2 * MIB);
    assert_int_equal(plan->capacity, 20 * MIB);
    assert_int_equal(plan->nodes[0].share, 8 * MIB);
    assert_int_equal(plan->nodes[1].share, 6 * MIB);
    assert_int_equal(plan->nodes[2].share, 6 * MIB);
    const egm_egm_plan_chunk_t want[] = {
        {0, 0, 4 * MIB},       {0, 4 * MIB, 4 * MIB}, {2, 0, 4 * MIB},
        {2, 4 * MIB, 2 * MIB}, {5, 0, 4 * MIB},       {5, 4 * MIB, 2 * MIB},
    };
    assert_int_equal(plan->chunk_count, 6);
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(plan->chunks[i].node, want[i].node);
        assert_int_equal(plan->chunks[i].offset, want[i].offset);
        assert_int_equal(plan->chunks[i].size, want[i].size);
    }
    egm__egm_plan_free(plan);

    /* 11 units: 4, 4, 3. */
    p.global_segment_size = 22 * MIB;
    assert_int_equal(egm__egm_plan_compute(&p, &plan), EGM_OK);
    check_invariants(&p, plan);
    assert_int_equal(plan->nodes[0].share, 8 * MIB);
    assert_int_equal(plan->nodes[1].share, 8 * MIB);
    assert_int_equal(plan->nodes[2].share, 6 * MIB);
    egm__egm_plan_free(plan);
}

/* Below one unit per node nothing useful fits: an error naming
 * global_segment_size and the minimum; exactly the minimum works. */
static void test_tiny_capacity(void **state)
{
    (void)state;
    const egm_egm_plan_node_in_t nodes[] = {{0, 2 * MIB}, {1, 2 * MIB}, {2, 2 * MIB}};
    egm_egm_plan_params_t p = params_of(nodes, 3, 64, 6 * MIB - 1, 1 * GIB);
    expect_error(&p, EGM_ERR_CONFIG, "global_segment_size", "6 MiB");
    p.global_segment_size = 0;
    expect_error(&p, EGM_ERR_CONFIG, "global_segment_size", "6 MiB");
    p.node_count = 1;
    p.global_segment_size = 2 * MIB - 1;
    expect_error(&p, EGM_ERR_CONFIG, "global_segment_size", "2 MiB");

    p.node_count = 3;
    p.global_segment_size = 6 * MIB;
    egm_egm_plan_t *plan = NULL;
    assert_int_equal(egm__egm_plan_compute(&p, &plan), EGM_OK);
    check_invariants(&p, plan);
    assert_int_equal(plan->chunk_count, 3);
    egm__egm_plan_free(plan);
}

static void test_max_mr_size_below_alignment(void **state)
{
    (void)state;
    const egm_egm_plan_node_in_t nodes[] = {{0, 2 * MIB}};
    egm_egm_plan_params_t p = params_of(nodes, 1, 16 * MIB, 1 * GIB, 16 * MIB - 1);
    expect_error(&p, EGM_ERR_CONFIG, "max_mr_size", "16 MiB");

    /* Just above one unit rounds down to one unit: 64 chunks of 16 MiB. */
    p.max_mr_size = 31 * MIB;
    egm_egm_plan_t *plan = NULL;
    assert_int_equal(egm__egm_plan_compute(&p, &plan), EGM_OK);
    check_invariants(&p, plan);
    assert_int_equal(plan->max_chunk, 16 * MIB);
    assert_int_equal(plan->chunk_count, 64);
    egm__egm_plan_free(plan);
}

/* 480 TiB over 8 nodes: 60 TiB each in 1 GiB chunks; then totals at the top
 * of the 64-bit range, where a careless offset + max_chunk would wrap. */
static void test_huge_capacities(void **state)
{
    (void)state;
    egm_egm_plan_node_in_t nodes[8];
    for (int i = 0; i < 8; i++)
        nodes[i] = (egm_egm_plan_node_in_t){i, 2 * MIB};
    egm_egm_plan_params_t p = params_of(nodes, 8, 16 * MIB, 480 * TIB, 1 * GIB);
    egm_egm_plan_t *plan = NULL;
    assert_int_equal(egm__egm_plan_compute(&p, &plan), EGM_OK);
    check_invariants(&p, plan);
    assert_int_equal(plan->capacity, 480 * TIB);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(plan->nodes[i].share, 60 * TIB);
        assert_int_equal(plan->nodes[i].chunk_count, 60 * 1024);
    }
    assert_int_equal(plan->chunk_count, 8 * 60 * 1024);
    egm__egm_plan_free(plan);

    p.global_segment_size = UINT64_MAX;
    p.max_mr_size = 1ull << 50;
    assert_int_equal(egm__egm_plan_compute(&p, &plan), EGM_OK);
    check_invariants(&p, plan);
    assert_int_equal(plan->capacity, UINT64_MAX / (16 * MIB) * (16 * MIB));
    egm__egm_plan_free(plan);

    /* One chunk as large as the whole 64-bit capacity. */
    p.node_count = 1;
    p.max_mr_size = UINT64_MAX;
    assert_int_equal(egm__egm_plan_compute(&p, &plan), EGM_OK);
    check_invariants(&p, plan);
    assert_int_equal(plan->chunk_count, 1);
    assert_int_equal(plan->chunks[0].size, plan->capacity);
    egm__egm_plan_free(plan);

    /* Too many chunks is a max_mr_size error, not a 4M-entry allocation. */
    p.node_count = 8;
    p.global_segment_size = 8 * TIB;
    p.max_mr_size = 2 * MIB;
    p.allocator_alignment = 64;
    expect_error(&p, EGM_ERR_CONFIG, "max_mr_size", "chunks");
}

/* Granularities that are not powers of two: lcm, not max. */
static void test_lcm_odd_granularities(void **state)
{
    (void)state;
    const egm_egm_plan_node_in_t nodes[] = {{0, 3 * 4 * KIB}, {1, 5 * 4 * KIB}, {3, 4 * KIB}};
    egm_egm_plan_params_t p = params_of(nodes, 3, 64, 100 * MIB, 1 * MIB);
    egm_egm_plan_t *plan = NULL;
    assert_int_equal(egm__egm_plan_compute(&p, &plan), EGM_OK);
    check_invariants(&p, plan);
    assert_int_equal(plan->alignment, 15 * 4 * KIB);  /* 61440 */
    assert_int_equal(plan->max_chunk, 17 * 61440ull); /* 1 MiB rounded down */
    egm__egm_plan_free(plan);

    /* 6 * 9 * 14: each pair shares a factor; lcm(6, 9, 14, 4) = 252. */
    const egm_egm_plan_node_in_t odd[] = {{0, 6}, {1, 9}, {2, 14}};
    p = params_of(odd, 3, 4, 10000, 1000);
    assert_int_equal(egm__egm_plan_compute(&p, &plan), EGM_OK);
    check_invariants(&p, plan);
    assert_int_equal(plan->alignment, 252);
    assert_int_equal(plan->capacity, 39 * 252);
    egm__egm_plan_free(plan);

    /* lcm(3, 2^63) does not fit in 64 bits. */
    const egm_egm_plan_node_in_t big[] = {{0, 1ull << 63}};
    p = params_of(big, 1, 3, UINT64_MAX, UINT64_MAX);
    expect_error(&p, EGM_ERR_CONFIG, "exceeds 64 bits", NULL);

    /* alignment x node count beyond 64 bits. */
    const egm_egm_plan_node_in_t five[] = {
        {0, 1ull << 62}, {1, 1ull << 62}, {2, 1ull << 62}, {3, 1ull << 62}, {4, 1ull << 62}};
    p = params_of(five, 5, 64, UINT64_MAX, UINT64_MAX);
    expect_error(&p, EGM_ERR_CONFIG, "global_segment_size", "64 bits");
}

static void test_bad_node_input(void **state)
{
    (void)state;
    const egm_egm_plan_node_in_t one[] = {{0, 2 * MIB}};
    egm_egm_plan_params_t p = params_of(one, 0, 64, 1 * GIB, 1 * GIB);
    expect_error(&p, EGM_ERR_CONFIG, "egm_numa_nodes", "accepted");

    const egm_egm_plan_node_in_t unsorted[] = {{1, 2 * MIB}, {0, 2 * MIB}};
    p = params_of(unsorted, 2, 64, 1 * GIB, 1 * GIB);
    expect_error(&p, EGM_ERR_CONFIG, "egm_numa_nodes", "sorted");
    const egm_egm_plan_node_in_t dup[] = {{1, 2 * MIB}, {1, 2 * MIB}};
    p = params_of(dup, 2, 64, 1 * GIB, 1 * GIB);
    expect_error(&p, EGM_ERR_CONFIG, "egm_numa_nodes", "unique");
    const egm_egm_plan_node_in_t neg[] = {{-1, 2 * MIB}};
    p = params_of(neg, 1, 64, 1 * GIB, 1 * GIB);
    expect_error(&p, EGM_ERR_CONFIG, "egm_numa_nodes", "accepted");
    const egm_egm_plan_node_in_t zero_gran[] = {{0, 0}};
    p = params_of(zero_gran, 1, 64, 1 * GIB, 1 * GIB);
    expect_error(&p, EGM_ERR_INVALID_ARG, "granularity", NULL);
    p = params_of(one, 1, 0, 1 * GIB, 1 * GIB);
    expect_error(&p, EGM_ERR_INVALID_ARG, "alignment", NULL);
}

/* Bounded pseudo-random inputs (fixed seed): every accepted plan keeps the
 * invariants; the only refusals are the documented minimums. */
static void test_random_plans_keep_invariants(void **state)
{
    (void)state;
    static const uint64_t grans[] = {4 * KIB, 2 * MIB, 12 * KIB, 192 * KIB, 512 * MIB};
    static const uint64_t allocs[] = {64, 4 * KIB, 16 * MIB};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int ok = 0;
    for (int iter = 0; iter < 300; iter++) {
        egm_egm_plan_node_in_t nodes[8];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 1 + (size_t)((x >> 33) % 8);
        int id = 0;
        for (size_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            id += 1 + (int)((x >> 40) % 3);
            nodes[i] = (egm_egm_plan_node_in_t){id, grans[(x >> 20) % 5]};
        }
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t total = (x >> 28); /* up to 64 GiB */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t max_mr = (total / 512) + (x >> 34);
        egm_egm_plan_params_t p = params_of(nodes, n, allocs[(x >> 10) % 3], total, max_mr);
        egm_egm_plan_t *plan = NULL;
        egm_status_t st = egm__egm_plan_compute(&p, &plan);
        if (st == EGM_OK) {
            check_invariants(&p, plan);
            egm__egm_plan_free(plan);
            ok++;
        } else {
            assert_int_equal(st, EGM_ERR_CONFIG);
            assert_null(plan);
            const char *msg = egm_last_error();
            assert_true(strstr(msg, "global_segment_size") != NULL ||
                        strstr(msg, "max_mr_size") != NULL);
        }
    }
    assert_true(ok > 100); /* the sweep mostly builds plans */
}

static void test_parse_nodes_valid(void **state)
{
    (void)state;
    int is_auto = -1, *nodes = NULL;
    size_t count = 99;
    assert_int_equal(egm__egm_plan_parse_nodes("auto", &is_auto, &nodes, &count), EGM_OK);
    assert_int_equal(is_auto, 1);
    assert_null(nodes);
    assert_int_equal(count, 0);

    static const struct {
        const char *text;
        size_t count;
        int ids[4];
    } cases[] = {
        {"0", 1, {0}},          {"3,1,2,1", 3, {1, 2, 3}},
        {" 0 , 1 ", 2, {0, 1}}, {"1023,0,1023", 2, {0, 1023}},
        {"007", 1, {7}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        assert_int_equal(egm__egm_plan_parse_nodes(cases[c].text, &is_auto, &nodes, &count),
                         EGM_OK);
        assert_int_equal(is_auto, 0);
        assert_int_equal(count, cases[c].count);
        for (size_t i = 0; i < count; i++)
            assert_int_equal(nodes[i], cases[c].ids[i]);
        egm_free(nodes);
    }
}

static void test_parse_nodes_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "1,,2", "-1",  "x",      "",  "1,",  ",1",    "99999999999999999999", "1024", "+1", "1 2",
        "0x1",  "1.5", "auto,1", " ", "1;2", "autox",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int is_auto = -1, *nodes = (int *)0x1;
        size_t count = 99;
        assert_int_equal(egm__egm_plan_parse_nodes(bad[i], &is_auto, &nodes, &count),
                         EGM_ERR_CONFIG);
        assert_null(nodes);
        assert_int_equal(count, 0);
        assert_int_equal(is_auto, 0);
        const char *msg = egm_last_error();
        if (strstr(msg, "egm_numa_nodes") == NULL || strstr(msg, "accepted: auto or") == NULL)
            fail_msg("\"%s\": error \"%s\" lacks the key or the accepted form", bad[i], msg);
    }
}

static void test_format_table(void **state)
{
    (void)state;
    const egm_egm_plan_node_in_t nodes[] = {{0, 2 * MIB}, {1, 2 * MIB}};
    egm_egm_plan_params_t p = params_of(nodes, 2, 16 * MIB, 600 * MIB, 144 * MIB);
    egm_egm_plan_t *plan = NULL;
    assert_int_equal(egm__egm_plan_compute(&p, &plan), EGM_OK);
    char buf[1024];
    size_t need = egm__egm_plan_format(plan, buf, sizeof buf);
    assert_int_equal(need, strlen(buf));
    /* 37 units: node 0 gets 19 (304 MiB = 2 x 144 + 16), node 1 gets 18. */
    const char *want[] = {
        "592 MiB of 600 MiB requested",
        "alignment 16 MiB",
        "max chunk 144 MiB",
        "304 MiB",
        "2 x 144 MiB + 1 x 16 MiB",
        "288 MiB",
        "total",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (strstr(buf, want[i]) == NULL)
            fail_msg("table lacks \"%s\":\n%s", want[i], buf);
    assert_non_null(strstr(buf, "2 x 144 MiB\n")); /* node 1: exact chunks, no remainder */

    /* snprintf contract: truncated but terminated, same length reported. */
    char small[10];
    assert_int_equal(egm__egm_plan_format(plan, small, sizeof small), need);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_memory_equal(small, buf, sizeof small - 1);
    assert_int_equal(egm__egm_plan_format(plan, NULL, 0), need);
    egm__egm_plan_free(plan);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_mooncake_600_mib_example),
        T(test_uneven_split_three_nodes),
        T(test_tiny_capacity),
        T(test_max_mr_size_below_alignment),
        T(test_huge_capacities),
        T(test_lcm_odd_granularities),
        T(test_bad_node_input),
        T(test_random_plans_keep_invariants),
        T(test_parse_nodes_valid),
        T(test_parse_nodes_malformed),
        T(test_format_table),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
