/* Tracked allocation: per-site and global live counts and bytes follow malloc,
 * calloc, realloc, strdup and free; sites are matched by text, not pointer;
 * blocks keep 16-byte alignment; overflowing sizes are refused; counting is
 * exact under concurrent threads. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"

static void test_counts_follow_malloc_and_free(void **state)
{
    (void)state;
    uint64_t count0 = egm__alloc_live_count(), bytes0 = egm__alloc_live_bytes();
    void *a = egm_malloc(100, "test.a");
    void *b = egm_malloc(28, "test.a");
    void *c = egm_calloc(4, 8, "test.c");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_int_equal(egm__alloc_live_count(), count0 + 3);
    assert_int_equal(egm__alloc_live_bytes(), bytes0 + 160);
    assert_int_equal(egm__alloc_live_count_site("test.a"), 2);
    assert_int_equal(egm__alloc_live_count_site("test.c"), 1);
    assert_int_equal(egm__alloc_live_count_site("test.never"), 0);
    for (int i = 0; i < 32; i++)
        assert_int_equal(((unsigned char *)c)[i], 0);
    memset(a, 0xab, 100); /* the whole block is usable */
    egm_free(a);
    assert_int_equal(egm__alloc_live_count_site("test.a"), 1);
    assert_int_equal(egm__alloc_live_bytes(), bytes0 + 60);
    egm_free(b);
    egm_free(c);
    egm_free(NULL);
    assert_int_equal(egm__alloc_live_count_site("test.a"), 0);
    assert_int_equal(egm__alloc_live_bytes(), bytes0);
    assert_int_equal(egm__alloc_live_count(), count0);
}

static void test_site_matched_by_text(void **state)
{
    (void)state;
    /* Two different pointers with the same text: one site. */
    char name1[] = "test.text";
    char name2[sizeof(name1)];
    memcpy(name2, name1, sizeof(name1));
    void *a = egm_malloc(8, name1);
    void *b = egm_malloc(8, name2);
    assert_int_equal(egm__alloc_live_count_site("test.text"), 2);
    egm_free(a);
    egm_free(b);
    assert_int_equal(egm__alloc_live_count_site("test.text"), 0);
    /* A NULL site is counted too. */
    void *n = egm_malloc(8, NULL);
    assert_int_equal(egm__alloc_live_count_site(NULL), 1);
    egm_free(n);
    assert_int_equal(egm__alloc_live_count_site(NULL), 0);
}

static void test_realloc_keeps_site_and_data(void **state)
{
    (void)state;
    uint64_t bytes0 = egm__alloc_live_bytes();
    char *p = egm_realloc(NULL, 10, "test.re");
    assert_non_null(p);
    assert_int_equal(egm__alloc_live_count_site("test.re"), 1);
    memcpy(p, "0123456789", 10);
    p = egm_realloc(p, 100000, "test.other");
    assert_non_null(p);
    assert_memory_equal(p, "0123456789", 10);
    assert_int_equal(egm__alloc_live_count_site("test.re"), 1);
    assert_int_equal(egm__alloc_live_count_site("test.other"), 0);
    assert_int_equal(egm__alloc_live_bytes(), bytes0 + 100000);
    p = egm_realloc(p, 4, "test.re");
    assert_memory_equal(p, "0123", 4);
    assert_int_equal(egm__alloc_live_bytes(), bytes0 + 4);
    egm_free(p);
    assert_int_equal(egm__alloc_live_bytes(), bytes0);
}

static void test_strdup(void **state)
{
    (void)state;
    char *s = egm_strdup("segment", "test.str");
    assert_string_equal(s, "segment");
    char *t = egm_strndup("segment", 3, "test.str");
    assert_string_equal(t, "seg");
    char *u = egm_strndup("ab", 10, "test.str");
    assert_string_equal(u, "ab");
    assert_int_equal(egm__alloc_live_count_site("test.str"), 3);
    egm_free(s);
    egm_free(t);
    egm_free(u);
    assert_int_equal(egm__alloc_live_count_site("test.str"), 0);
}

static void test_alignment(void **state)
{
    (void)state;
    void *blocks[64];
    for (size_t i = 0; i < 64; i++) {
        blocks[i] =
            i % 2 ? egm_malloc(i * 7 + 1, "test.align") : egm_calloc(i + 1, 3, "test.align");
        assert_non_null(blocks[i]);
        assert_int_equal((uintptr_t)blocks[i] % 16, 0);
    }
    void *r = egm_realloc(blocks[0], 333, "test.align");
    assert_int_equal((uintptr_t)r % 16, 0);
    blocks[0] = r;
    for (size_t i = 0; i < 64; i++)
        egm_free(blocks[i]);
}

static void test_overflow_refused(void **state)
{
    (void)state;
    uint64_t count0 = egm__alloc_live_count();
    assert_null(egm_malloc(SIZE_MAX, "test.huge"));
    assert_null(egm_malloc(SIZE_MAX - 8, "test.huge"));
    assert_null(egm_calloc(SIZE_MAX / 2, 4, "test.huge"));
    void *p = egm_malloc(8, "test.huge");
    assert_null(egm_realloc(p, SIZE_MAX, "test.huge"));
    assert_int_equal(egm__alloc_live_count_site("test.huge"), 1); /* p still valid */
    egm_free(p);
    assert_int_equal(egm__alloc_live_count(), count0);
}

static void test_report_lists_live_sites(void **state)
{
    (void)state;
    int before = egm__alloc_report();
    void *p = egm_malloc(1, "test.report");
    assert_int_equal(egm__alloc_report(), before + 1);
    egm_free(p);
    assert_int_equal(egm__alloc_report(), before);
}

#define THREADS 4
#define ROUNDS 2000

static void *churn(void *arg)
{
    char site[32];
    snprintf(site, sizeof(site), "test.thread.%d", (int)(intptr_t)arg);
    void *keep[16] = {0};
    for (int i = 0; i < ROUNDS; i++) {
        int k = i % 16;
        egm_free(keep[k]);
        keep[k] = egm_malloc((size_t)(i % 50) + 1, (i & 1) ? site : "test.thread.shared");
    }
    for (int k = 0; k < 16; k++)
        egm_free(keep[k]);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    uint64_t bytes0 = egm__alloc_live_bytes();
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(egm__alloc_live_count_site("test.thread.shared"), 0);
    assert_int_equal(egm__alloc_live_count_site("test.thread.0"), 0);
    assert_int_equal(egm__alloc_live_bytes(), bytes0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_counts_follow_malloc_and_free, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_site_matched_by_text, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_realloc_keeps_site_and_data, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_strdup, egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_alignment, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_overflow_refused, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_report_lists_live_sites, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_threads, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
