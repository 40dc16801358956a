/* The JSON reader: etcd gateway answers read by member and element; int64 from
 * numbers and from strings, with overflow refused; string escapes decoded
 * (surrogate pairs joined, a lone surrogate as U+FFFD); every text the
 * writer (common/json.h) produces reads back as the same bytes; malformed
 * texts, trailing text and nesting beyond the limit refused with the byte
 * where it went wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/json.h"
#include "common/json_read.h"
#include "common/log.h"
#include <egmstore/status.h>

static egm_status_t parse(const char *text, egm_json_doc_t *doc)
{
    return egm__json_parse(text, strlen(text), doc);
}

static void test_etcd_range_answer(void **state)
{
    (void)state;
    const char *text =
        "{\"header\":{\"cluster_id\":\"324952591200643719\",\"revision\":\"42\"},"
        "\"kvs\":[{\"key\":\"bGVhZGVy\",\"create_revision\":\"40\",\"mod_revision\":\"41\","
        "\"version\":\"2\",\"value\":\"bTE=\",\"lease\":\"7587869437386523658\"},"
        "{\"key\":\"eA==\",\"value\":\"\"}],\"count\":\"2\",\"more\":false}";
    egm_json_doc_t d;
    assert_int_equal(parse(text, &d), EGM_OK);
    int64_t v = 0;
    int header = egm__json_member(&d, 0, "header");
    assert_true(egm__json_get_int64(&d, egm__json_member(&d, header, "revision"), &v));
    assert_int_equal(v, 42);
    assert_true(egm__json_get_int64(&d, egm__json_member(&d, header, "cluster_id"), &v));
    assert_int_equal(v, 324952591200643719LL);
    int kvs = egm__json_member(&d, 0, "kvs");
    assert_int_equal(d.toks[kvs].count, 2);
    int kv0 = egm__json_element(&d, kvs, 0), kv1 = egm__json_element(&d, kvs, 1);
    assert_true(egm__json_get_int64(&d, egm__json_member(&d, kv0, "lease"), &v));
    assert_int_equal(v, 7587869437386523658LL);
    char buf[32];
    assert_int_equal(egm__json_get_string(&d, egm__json_member(&d, kv0, "value"), buf, 32), 4);
    assert_string_equal(buf, "bTE=");
    assert_int_equal(egm__json_get_string(&d, egm__json_member(&d, kv1, "key"), buf, 32), 4);
    assert_string_equal(buf, "eA==");
    assert_int_equal(egm__json_element(&d, kvs, 2), -1);
    assert_int_equal(egm__json_member(&d, 0, "absent"), -1);
    assert_int_equal(egm__json_member(&d, kvs, "key"), -1); /* not an object */
    assert_false(egm__json_is_true(&d, egm__json_member(&d, 0, "more")));
    assert_int_equal(egm__json_member(&d, 0, "count") > 0, 1);
    egm__json_doc_cleanup(&d);
}

static void test_numbers(void **state)
{
    (void)state;
    egm_json_doc_t d;
    assert_int_equal(parse("[0, -1, 9223372036854775807, -9223372036854775808, "
                           "9223372036854775808, \"12\", \"1x\", 1.5, 2e3, true, null, \"\"]",
                           &d),
                     EGM_OK);
    int64_t v;
    int64_t want[] = {0, -1, INT64_MAX, INT64_MIN};
    for (uint32_t i = 0; i < 4; i++) {
        assert_true(egm__json_get_int64(&d, egm__json_element(&d, 0, i), &v));
        assert_true(v == want[i]);
    }
    assert_false(egm__json_get_int64(&d, egm__json_element(&d, 0, 4), &v)); /* overflow */
    assert_true(egm__json_get_int64(&d, egm__json_element(&d, 0, 5), &v));
    assert_int_equal(v, 12);
    for (uint32_t i = 6; i < 12; i++)
        assert_false(egm__json_get_int64(&d, egm__json_element(&d, 0, i), &v));
    assert_true(egm__json_is_true(&d, egm__json_element(&d, 0, 9)));
    assert_false(egm__json_is_true(&d, egm__json_element(&d, 0, 10)));
    assert_false(egm__json_get_int64(&d, -1, &v));
    assert_false(egm__json_get_int64(&d, 99, &v));
    egm__json_doc_cleanup(&d);
}

static void test_string_escapes(void **state)
{
    (void)state;
    egm_json_doc_t d;
    assert_int_equal(
        parse("{\"e\":\"a\\\"b\\\\c\\/d\\n\\t\\u00e9\\u20ac\\ud83d\\ude00\\udc00x\"}", &d), EGM_OK);
    char buf[64];
    int e = egm__json_member(&d, 0, "e");
    const char want[] = "a\"b\\c/d\n\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xef\xbf\xbdx";
    assert_int_equal(egm__json_get_string(&d, e, buf, sizeof(buf)), sizeof(want) - 1);
    assert_string_equal(buf, want);
    assert_int_equal(egm__json_get_string(&d, e, buf, 5), -1);           /* too small */
    assert_int_equal(egm__json_get_string(&d, 0, buf, sizeof(buf)), -1); /* not a string */
    egm__json_doc_cleanup(&d);
}

/* What the escaper writes, the reader gives back: every valid UTF-8 text and
 * every control character. */
static void test_writer_round_trip(void **state)
{
    (void)state;
    char text[256];
    for (int i = 0; i < 127; i++)
        text[i] = (char)(i + 1);
    memcpy(text + 127, "\xc3\xa9\xf0\x9f\x98\x80", 6);
    size_t len = 133;
    egm_textbuf_t t = egm__textbuf_growing("test.json_read");
    egm__textbuf_append(&t, "[", 1);
    egm__json_string(&t, text, len);
    egm__textbuf_append(&t, "]", 1);
    assert_int_equal(t.status, EGM_OK);
    egm_json_doc_t d;
    assert_int_equal(egm__json_parse(t.buf, t.need, &d), EGM_OK);
    char back[256];
    assert_int_equal(egm__json_get_string(&d, egm__json_element(&d, 0, 0), back, sizeof(back)),
                     len);
    assert_memory_equal(back, text, len);
    egm__json_doc_cleanup(&d);
    egm_free(t.buf);
}

static void refused(const char *text, const char *where)
{
    egm_json_doc_t d;
    assert_int_equal(parse(text, &d), EGM_ERR_PROTOCOL);
    if (strstr(egm_last_error(), where) == NULL)
        fail_msg("%s: got \"%s\", want \"%s\"", text, egm_last_error(), where);
    assert_null(d.toks);
    egm__json_doc_cleanup(&d);
}

static void test_malformed(void **state)
{
    (void)state;
    refused("", "unexpected end");
    refused("{", "expected a member name");
    refused("{\"a\" 1}", "expected ':'");
    refused("{\"a\":1,}", "expected a member name");
    refused("[1,]", "unexpected character");
    refused("[1 2]", "expected ',' or ']'");
    refused("\"abc", "unterminated string");
    refused("\"a\\qb\"", "bad escape");
    refused("\"a\\u12g4\"", "bad \\u escape");
    refused("\"tab\there\"", "control character");
    refused("01", "text after the value");
    refused("-", "bad number");
    refused("1.", "bad fraction");
    refused("1e", "bad exponent");
    refused("tru", "unexpected character");
    refused("{} x", "text after the value");
    refused("\"a\\", "unterminated string");

    char deep[2 * EGM_JSON_DEPTH_MAX + 8];
    size_t n = 0;
    for (int i = 0; i <= EGM_JSON_DEPTH_MAX; i++)
        deep[n++] = '[';
    for (int i = 0; i <= EGM_JSON_DEPTH_MAX; i++)
        deep[n++] = ']';
    deep[n] = '\0';
    refused(deep, "nesting too deep");
    /* One level less is fine. */
    egm_json_doc_t d;
    assert_int_equal(egm__json_parse(deep + 1, n - 2, &d), EGM_OK);
    assert_int_equal(d.n, EGM_JSON_DEPTH_MAX);
    egm__json_doc_cleanup(&d);
}

static void test_skips_nested_members(void **state)
{
    (void)state;
    egm_json_doc_t d;
    assert_int_equal(parse(" {\"a\":{\"x\":[1,{\"y\":2}],\"z\":{}},\"b\":[],\"c\":\"ok\"} ", &d),
                     EGM_OK);
    char buf[8];
    assert_int_equal(egm__json_get_string(&d, egm__json_member(&d, 0, "c"), buf, 8), 2);
    assert_string_equal(buf, "ok");
    int b = egm__json_member(&d, 0, "b");
    assert_int_equal(d.toks[b].type, EGM_JSON_ARRAY);
    assert_int_equal(d.toks[b].count, 0);
    int64_t v;
    int x = egm__json_member(&d, egm__json_member(&d, 0, "a"), "x");
    assert_true(
        egm__json_get_int64(&d, egm__json_member(&d, egm__json_element(&d, x, 1), "y"), &v));
    assert_int_equal(v, 2);
    egm__json_doc_cleanup(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_etcd_range_answer, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_numbers, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_string_escapes, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_writer_round_trip, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_malformed, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_skips_nested_members, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
