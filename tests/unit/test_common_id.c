/* Ids: random ids are version-4 UUIDs, distinct, never nil; text form round-trips
 * and malformed text is refused; equality, nil and hash behave. Also the clock
 * helpers' monotonic relations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/clock.h"
#include "common/id.h"
#include "common/log.h"

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static void test_random_is_v4_and_formats(void **state)
{
    (void)state;
    for (int i = 0; i < 100; i++) {
        egm_id_t id = egm__id_random();
        assert_false(egm__id_is_nil(id));
        assert_int_equal((id.hi >> 12) & 0xf, 4);   /* version */
        assert_int_equal((id.lo >> 62) & 0x3, 0x2); /* variant 10xx */
        char text[EGM_ID_STRLEN];
        assert_ptr_equal(egm__id_format(id, text), text);
        assert_int_equal(strlen(text), 36);
        for (int j = 0; j < 36; j++) {
            if (j == 8 || j == 13 || j == 18 || j == 23)
                assert_int_equal(text[j], '-');
            else
                assert_true(is_hex(text[j]));
        }
        assert_int_equal(text[14], '4');
        assert_non_null(strchr("89ab", text[19]));
        egm_id_t back;
        assert_int_equal(egm__id_parse(text, &back), EGM_OK);
        assert_true(egm__id_equal(id, back));
    }
}

static void test_random_ids_differ(void **state)
{
    (void)state;
    egm_id_t ids[256];
    for (int i = 0; i < 256; i++)
        ids[i] = egm__id_random();
    for (int i = 0; i < 256; i++)
        for (int j = i + 1; j < 256; j++)
            assert_false(egm__id_equal(ids[i], ids[j]));
}

static void test_format_and_parse_known_value(void **state)
{
    (void)state;
    egm_id_t id = {0x0123456789abcdefull, 0xfedcba9876543210ull};
    char text[EGM_ID_STRLEN];
    assert_string_equal(egm__id_format(id, text), "01234567-89ab-cdef-fedc-ba9876543210");
    egm_id_t back;
    assert_int_equal(egm__id_parse("01234567-89AB-CDEF-FEDC-BA9876543210", &back), EGM_OK);
    assert_true(egm__id_equal(id, back));
    egm_id_t nil = {0, 0};
    assert_string_equal(egm__id_format(nil, text), "00000000-0000-0000-0000-000000000000");
    assert_true(egm__id_is_nil(nil));
}

static void test_parse_refuses_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "01234567-89ab-cdef-fedc-ba987654321",   /* short */
        "01234567-89ab-cdef-fedc-ba98765432100", /* long */
        "01234567_89ab-cdef-fedc-ba9876543210",  /* separator */
        "0123456789ab-cdef-fedc-ba9876543210-",  /* dash moved */
        "01234567-89ab-cdef-fedc-ba987654321g",  /* not hex */
        "01234567-89ab-cdef-fedc- a9876543210",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        egm_id_t id = {7, 7};
        if (egm__id_parse(bad[i], &id) != EGM_ERR_INVALID_ARG)
            fail_msg("\"%s\" accepted", bad[i]);
        assert_int_equal(id.hi, 7);
        assert_non_null(strstr(egm_last_error(), "id"));
    }
    egm_id_t id;
    assert_int_equal(egm__id_parse(NULL, &id), EGM_ERR_INVALID_ARG);
}

static void test_equal_and_hash(void **state)
{
    (void)state;
    egm_id_t a = {1, 2}, b = {1, 2}, c = {2, 1}, d = {1, 3};
    assert_true(egm__id_equal(a, b));
    assert_false(egm__id_equal(a, c));
    assert_false(egm__id_equal(a, d));
    assert_int_equal(egm__id_hash(a), egm__id_hash(b));
    assert_true(egm__id_hash(a) != egm__id_hash(c));
    assert_true(egm__id_hash(a) != egm__id_hash(d));
}

static void test_clock(void **state)
{
    (void)state;
    uint64_t ns0 = egm__now_ns(), ms0 = egm__now_ms();
    egm__sleep_ms(2);
    uint64_t ns1 = egm__now_ns(), ms1 = egm__now_ms();
    assert_true(ns1 - ns0 >= 2000000ull); /* slept at least that long */
    assert_true(ms1 >= ms0 + 2);
    /* Wall clock is after 2020-01-01 (a sanity bound, not a timing assertion). */
    assert_true(egm__wall_ms() > 1577836800000ull);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_random_is_v4_and_formats, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_random_ids_differ, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_format_and_parse_known_value, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_parse_refuses_malformed, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_equal_and_hash, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_clock, egm_test_setup_alloc, egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
