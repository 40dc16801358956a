/* JSON strings: printable ASCII and valid UTF-8 as they are; quote and
 * backslash escaped; control characters, DEL and bytes outside valid UTF-8
 * (overlong, surrogates, beyond U+10FFFF, truncated) as \u00XX; NUL inside a
 * key; NULL as ""; the same text into a fixed or a growing buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/json.h"

static void check(const char *text, size_t len, const char *want)
{
    char buf[256];
    egm_textbuf_t t = egm__textbuf(buf, sizeof(buf));
    egm__json_string(&t, text, len);
    assert_string_equal(buf, want);
    assert_int_equal(t.need, strlen(want));
}

static void test_escapes(void **state)
{
    (void)state;
    check("plain key", 9, "\"plain key\"");
    check("a\"b\\c", 5, "\"a\\\"b\\\\c\"");
    check("tab\there\n", 9, "\"tab\\u0009here\\u000a\"");
    check("del\x7f", 4, "\"del\\u007f\"");
    check("nul\0in", 6, "\"nul\\u0000in\"");
    check("", 0, "\"\"");
    check(NULL, 0, "\"\"");
}

static void test_utf8(void **state)
{
    (void)state;
    check("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14,
          "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
    check("\xc0\xaf", 2, "\"\\u00c0\\u00af\"");                       /* overlong '/' */
    check("\xed\xa0\x80", 3, "\"\\u00ed\\u00a0\\u0080\"");            /* a surrogate */
    check("\xf4\x90\x80\x80", 4, "\"\\u00f4\\u0090\\u0080\\u0080\""); /* > U+10FFFF */
    check("\xe2\x82", 2, "\"\\u00e2\\u0082\"");                       /* truncated */
    check("\xff"
          "a",
          2, "\"\\u00ffa\"");
}

static void test_cstring_and_growing(void **state)
{
    (void)state;
    char buf[16];
    egm_textbuf_t t = egm__textbuf(buf, sizeof(buf));
    egm__json_cstring(&t, NULL);
    assert_string_equal(buf, "\"\"");
    t = egm__textbuf(buf, sizeof(buf));
    egm__json_cstring(&t, "a\"b");
    assert_string_equal(buf, "\"a\\\"b\"");

    char long_text[3000];
    for (size_t i = 0; i < sizeof(long_text) - 1; i++)
        long_text[i] = i % 3 == 0 ? '"' : 'k';
    long_text[sizeof(long_text) - 1] = '\0';
    egm_textbuf_t g = egm__textbuf_growing("test.json");
    egm__json_cstring(&g, long_text);
    egm_textbuf_t measure = egm__textbuf(NULL, 0);
    egm__json_cstring(&measure, long_text);
    assert_int_equal(g.status, EGM_OK);
    assert_int_equal(g.need, measure.need);
    assert_int_equal(g.need, 2 + 2999 + 1000); /* quotes, text, a backslash per '"' */
    assert_int_equal(strlen(g.buf), g.need);
    assert_memory_equal(g.buf, "\"\\\"kk\\\"", 7);
    egm_free(g.buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_escapes, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_utf8, egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_cstring_and_growing, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
