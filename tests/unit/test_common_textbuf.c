/* Text buffers: a fixed one keeps snprintf's contract (need counts the whole
 * text, the buffer stays NUL-terminated); a growing one holds the whole text,
 * has a buffer once written even when empty, and is tracked under its site. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/textbuf.h"

static void test_fixed_truncates_and_counts(void **state)
{
    (void)state;
    char buf[8];
    egm_textbuf_t t = egm__textbuf(buf, sizeof(buf));
    assert_string_equal(buf, "");
    egm__textbuf_printf(&t, "%s-%d", "abc", 12);
    assert_string_equal(buf, "abc-12");
    egm__textbuf_append(&t, "xyz", 3);
    assert_string_equal(buf, "abc-12x");
    egm__textbuf_printf(&t, "%s", "more");
    assert_int_equal(t.need, 13);
    assert_string_equal(buf, "abc-12x");
    assert_int_equal(t.status, EGM_OK);

    egm_textbuf_t none = egm__textbuf(NULL, 0); /* measuring only */
    egm__textbuf_printf(&none, "%d", 12345);
    egm__textbuf_append(&none, "ab", 2);
    assert_int_equal(none.need, 7);
}

static void test_growing_holds_everything(void **state)
{
    (void)state;
    egm_textbuf_t t = egm__textbuf_growing("test.textbuf");
    assert_null(t.buf);
    egm__textbuf_printf(&t, "%s", "");
    assert_non_null(t.buf); /* an empty text, not a missing one */
    assert_string_equal(t.buf, "");
    assert_int_equal(egm__alloc_live_count_site("test.textbuf"), 1);
    char line[100];
    memset(line, 'x', sizeof(line) - 1);
    line[sizeof(line) - 1] = '\0';
    for (int i = 0; i < 100; i++) {
        egm__textbuf_printf(&t, "%d:%s\n", i, line);
        egm__textbuf_append(&t, "ab", 2);
    }
    assert_int_equal(t.status, EGM_OK);
    assert_int_equal(strlen(t.buf), t.need);
    assert_true(t.len > t.need);
    assert_int_equal(strncmp(t.buf, "0:xxx", 5), 0);
    assert_int_equal(memcmp(t.buf + t.need - 5, "xx\nab", 5), 0);
    egm_free(t.buf);
    assert_int_equal(egm__alloc_live_count_site("test.textbuf"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fixed_truncates_and_counts, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_growing_holds_everything, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
