/* Known seqs of a slab's commit log (master/seq_set.h): in order they
 * extend the prefix; out of order they wait beside it and are absorbed once
 * the gap fills; duplicates and 0 change nothing; membership is exact,
 * checked against a plain bitmap over a shuffled run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "master/seq_set.h"

static void test_order_and_gaps(void **state)
{
    (void)state;
    egm_seq_set_t s = {0};
    assert_false(egm__seq_set_has(&s, 0));
    assert_false(egm__seq_set_has(&s, 1));
    assert_int_equal(egm__seq_set_add(&s, 0), EGM_OK);
    assert_int_equal(s.prefix, 0);
    assert_int_equal(egm__seq_set_add(&s, 1), EGM_OK);
    assert_int_equal(egm__seq_set_add(&s, 2), EGM_OK);
    assert_int_equal(s.prefix, 2);
    assert_int_equal(s.n, 0);
    assert_int_equal(egm__seq_set_add(&s, 5), EGM_OK);
    assert_int_equal(egm__seq_set_add(&s, 4), EGM_OK);
    assert_int_equal(egm__seq_set_add(&s, 4), EGM_OK); /* again */
    assert_int_equal(s.prefix, 2);
    assert_int_equal(s.n, 2);
    assert_true(egm__seq_set_has(&s, 4) && egm__seq_set_has(&s, 5));
    assert_false(egm__seq_set_has(&s, 3));
    assert_false(egm__seq_set_has(&s, 6));
    assert_int_equal(egm__seq_set_add(&s, 3), EGM_OK); /* fills the gap */
    assert_int_equal(s.prefix, 5);
    assert_int_equal(s.n, 0);
    egm__seq_set_free(&s);
    assert_int_equal(s.prefix, 0);
}

static void test_against_bitmap(void **state)
{
    (void)state;
    enum { N = 2000 };
    static uint64_t order[N];
    static unsigned char in[N + 2];
    egm_seq_set_t s = {0};
    srand(7);
    for (int i = 0; i < N; i++)
        order[i] = (uint64_t)i + 1;
    for (int i = N - 1; i > 0; i--) { /* mostly in order: swap near neighbours */
        int j = i - rand() % 8;
        if (j < 0)
            j = 0;
        uint64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    memset(in, 0, sizeof(in));
    for (int i = 0; i < N; i++) {
        if (rand() % 10 == 0)
            continue; /* some never come */
        assert_int_equal(egm__seq_set_add(&s, order[i]), EGM_OK);
        in[order[i]] = 1;
        if (i % 97 == 0)
            for (uint64_t q = 1; q <= N + 1; q++)
                if (egm__seq_set_has(&s, q) != in[q])
                    fail_msg("seq %llu: has %d, added %d", (unsigned long long)q,
                             egm__seq_set_has(&s, q), in[q]);
    }
    for (uint64_t q = 1; q <= N + 1; q++)
        assert_int_equal(egm__seq_set_has(&s, q), in[q]);
    for (size_t i = 1; i < s.n; i++)
        assert_true(s.extra[i - 1] < s.extra[i]);
    assert_true(s.n == 0 || s.extra[0] > s.prefix + 1);
    egm__seq_set_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_order_and_gaps, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_against_bitmap, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
