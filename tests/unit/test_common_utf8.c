/* UTF-8 sequences: every length decoded with its code point; the edges of
 * each form; overlong forms, surrogates, code points above U+10FFFF, stray
 * continuation bytes and sequences cut short (by the length or by a NUL)
 * refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/utf8.h"

/* The length egm__utf8_seq gives the n bytes s, and its code point. */
static size_t seq(const char *s, size_t n, uint32_t *cp_p)
{
    *cp_p = 0xdeadbeef;
    return egm__utf8_seq((const unsigned char *)s, n, cp_p);
}

static void test_well_formed(void **state)
{
    (void)state;
    static const struct {
        const char *bytes;
        size_t len;
        uint32_t cp;
    } ok[] = {
        {"a", 1, 'a'},
        {"\x7f", 1, 0x7f},
        {"\xc2\x80", 2, 0x80},
        {"\xc3\xa9", 2, 0xe9},
        {"\xdf\xbf", 2, 0x7ff},
        {"\xe0\xa0\x80", 3, 0x800},
        {"\xe2\x82\xac", 3, 0x20ac},
        {"\xed\x9f\xbf", 3, 0xd7ff},
        {"\xee\x80\x80", 3, 0xe000},
        {"\xef\xbb\xbf", 3, 0xfeff},
        {"\xf0\x90\x80\x80", 4, 0x10000},
        {"\xf0\x9f\x98\x80", 4, 0x1f600},
        {"\xf4\x8f\xbf\xbf", 4, 0x10ffff},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint32_t cp;
        assert_int_equal(seq(ok[i].bytes, ok[i].len, &cp), ok[i].len);
        assert_int_equal(cp, ok[i].cp);
        /* a longer buffer changes nothing; cp_p may be NULL */
        assert_int_equal(seq(ok[i].bytes, SIZE_MAX, &cp), ok[i].len);
        assert_int_equal(egm__utf8_seq((const unsigned char *)ok[i].bytes, ok[i].len, NULL),
                         ok[i].len);
    }
}

static void test_ill_formed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "\x80",             /* a continuation byte */
        "\xbf",             /* another */
        "\xc0\xaf",         /* overlong '/' */
        "\xc1\xbf",         /* overlong */
        "\xe0\x9f\xbf",     /* overlong U+07FF */
        "\xed\xa0\x80",     /* a surrogate (U+D800) */
        "\xed\xbf\xbf",     /* another (U+DFFF) */
        "\xf0\x8f\xbf\xbf", /* overlong U+FFFF */
        "\xf4\x90\x80\x80", /* U+110000 */
        "\xf5\x80\x80\x80", /* no such lead byte */
        "\xff",
        "\xc3"
        "a", /* a lead byte without its continuation */
        "\xe2\x82"
        "a",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint32_t cp;
        assert_int_equal(seq(bad[i], strlen(bad[i]), &cp), 0);
        assert_int_equal(cp, 0xdeadbeef); /* untouched */
    }
    uint32_t cp;
    assert_int_equal(seq("\xe2\x82\xac", 2, &cp), 0); /* cut short by n */
    assert_int_equal(seq("\xf0\x9f\x98\x80", 3, &cp), 0);
    assert_int_equal(seq("\xc3\xa9", 0, &cp), 0);
    assert_int_equal(seq("\xe2\x82", SIZE_MAX, &cp), 0); /* cut short by the NUL */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_well_formed, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_ill_formed, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
