/* The release products' allocator (egm_alloc, EGM_ALLOC_TRACKING=0): plain
 * malloc underneath, with the tracked build's contract (site ignored, NULL on
 * overflow and for sizes above PTRDIFF_MAX, even under a sanitizer, realloc keeps the data and
 * never frees on a 0-byte request, strdup and strndup copy); and no tracking linked in at all.
 * Built with the EGM_ALLOC_TRACKING property OFF (tests/CMakeLists.txt), unlike every other test.
 */
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"

/* Weak: NULL unless the tracking variant was linked. */
extern uint64_t egm__alloc_live_count(void) __attribute__((weak));
extern int egm__alloc_report(void) __attribute__((weak));

static void test_no_tracking_linked(void **state)
{
    (void)state;
    assert_null(egm__alloc_live_count);
    assert_null(egm__alloc_report);
    /* A block is malloc's own (no header before it): libc can size and free it. */
    void *p = egm_malloc(100, "test.plain");
    assert_non_null(p);
    assert_true(malloc_usable_size(p) >= 100);
    free(p);
}

static void test_contract(void **state)
{
    (void)state;
    char *a = egm_malloc(10, "test.plain");
    assert_non_null(a);
    memcpy(a, "0123456789", 10);
    a = egm_realloc(a, 100000, "test.plain");
    assert_non_null(a);
    assert_memory_equal(a, "0123456789", 10);
    a = egm_realloc(a, 0, "test.plain"); /* a live block, not a free */
    assert_non_null(a);
    egm_free(a);
    unsigned char *c = egm_calloc(8, 4, "test.plain");
    assert_non_null(c);
    for (int i = 0; i < 32; i++)
        assert_int_equal(c[i], 0);
    egm_free(c);
    char *r = egm_realloc(NULL, 4, "test.plain");
    assert_non_null(r);
    egm_free(r);
    char *s = egm_strdup("segment", "test.plain");
    assert_string_equal(s, "segment");
    char *t = egm_strndup("segment", 3, "test.plain");
    assert_string_equal(t, "seg");
    egm_free(s);
    egm_free(t);
    egm_free(NULL);
    void *z = egm_malloc(0, NULL); /* glibc: a unique block */
    assert_non_null(z);
    egm_free(z);
}

static void test_overflow_refused(void **state)
{
    (void)state;
    assert_null(egm_malloc(SIZE_MAX, "test.huge"));
    assert_null(egm_malloc((size_t)PTRDIFF_MAX + 1, "test.huge")); /* refused before malloc */
    assert_null(egm_calloc(SIZE_MAX / 2, 4, "test.huge"));
    void *p = egm_malloc(8, "test.huge");
    assert_null(egm_realloc(p, SIZE_MAX, "test.huge"));
    egm_free(p); /* still valid */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_tracking_linked),
        cmocka_unit_test(test_contract),
        cmocka_unit_test(test_overflow_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
