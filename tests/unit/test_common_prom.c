/* Prometheus text: HELP/TYPE lines with help escaped; samples with and without
 * labels, label values escaped; integers exact beyond 2^53; doubles in their
 * shortest round-trip text and NaN/+Inf; a table of rows in order; a histogram's cumulative
 * buckets, +Inf, _sum and a _count equal to +Inf; the text needed measured the same into any
 * buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/prom.h"

static void test_family_and_samples(void **state)
{
    (void)state;
    egm_textbuf_t t = egm__textbuf_growing("test.prom");
    egm__prom_family(&t, "egm_client_x_total", EGM_PROM_COUNTER, "a \\ and\na newline");
    egm__prom_sample_u64(&t, "egm_client_x_total", NULL, UINT64_MAX);
    egm__prom_sample_u64(&t, "egm_client_x_total",
                         (const char *const[]){"type", "put", "who", "a\"b\\c\nd", NULL}, 3);
    egm__prom_metric_u64(&t, "egm_client_y", EGM_PROM_GAUGE, "y", 9007199254740993ull);
    egm__prom_metric_double(&t, "egm_client_z_seconds", EGM_PROM_GAUGE, "z", 12.345);
    egm__prom_sample_double(&t, "egm_client_z_seconds", NULL, 0.1 + 0.2);
    egm__prom_sample_double(&t, "egm_client_z_seconds", NULL, NAN);
    egm__prom_sample_double(&t, "egm_client_z_seconds", NULL, -INFINITY);
    egm__prom_sample_double(&t, "egm_client_z_seconds", NULL, 3.0);
    assert_int_equal(t.status, EGM_OK);
    assert_string_equal(t.buf, "# HELP egm_client_x_total a \\\\ and\\na newline\n"
                               "# TYPE egm_client_x_total counter\n"
                               "egm_client_x_total 18446744073709551615\n"
                               "egm_client_x_total{type=\"put\",who=\"a\\\"b\\\\c\\nd\"} 3\n"
                               "# HELP egm_client_y y\n"
                               "# TYPE egm_client_y gauge\n"
                               "egm_client_y 9007199254740993\n"
                               "# HELP egm_client_z_seconds z\n"
                               "# TYPE egm_client_z_seconds gauge\n"
                               "egm_client_z_seconds 12.345\n"
                               "egm_client_z_seconds 0.30000000000000004\n"
                               "egm_client_z_seconds NaN\n"
                               "egm_client_z_seconds -Inf\n"
                               "egm_client_z_seconds 3\n");
    /* The same text measured into no buffer, and cut into a small one. */
    char small[16];
    egm_textbuf_t f = egm__textbuf(small, sizeof(small));
    egm__prom_family(&f, "egm_client_x_total", EGM_PROM_COUNTER, "a \\ and\na newline");
    egm_textbuf_t g = egm__textbuf_growing("test.prom");
    egm__prom_family(&g, "egm_client_x_total", EGM_PROM_COUNTER, "a \\ and\na newline");
    assert_int_equal(f.need, g.need);
    assert_memory_equal(small, g.buf, sizeof(small) - 1);
    assert_int_equal(small[sizeof(small) - 1], '\0');
    egm_free(g.buf);
    egm_free(t.buf);
}

static void test_rows(void **state)
{
    (void)state;
    const egm_prom_row_t rows[] = {
        {"egm_client_a_total", EGM_PROM_COUNTER, "a", 1},
        {"egm_client_b_bytes", EGM_PROM_GAUGE, "b", 2},
    };
    char buf[256];
    egm_textbuf_t t = egm__textbuf(buf, sizeof(buf));
    egm__prom_rows(&t, rows, 2);
    assert_string_equal(buf, "# HELP egm_client_a_total a\n# TYPE egm_client_a_total counter\n"
                             "egm_client_a_total 1\n"
                             "# HELP egm_client_b_bytes b\n# TYPE egm_client_b_bytes gauge\n"
                             "egm_client_b_bytes 2\n");
}

static void test_histogram(void **state)
{
    (void)state;
    static const char *const bounds[] = {"0.001", "0.1"};
    const uint64_t counts[] = {2, 0, 5}; /* per bucket; the last above every bound */
    egm_textbuf_t t = egm__textbuf_growing("test.prom");
    egm__prom_histogram(&t, "egm_master_d_seconds", (const char *const[]){"type", "get", NULL},
                        bounds, counts, 2, 1.5);
    egm__prom_histogram(&t, "egm_master_d_seconds", NULL, bounds, counts, 2, 0);
    assert_string_equal(t.buf, "egm_master_d_seconds_bucket{type=\"get\",le=\"0.001\"} 2\n"
                               "egm_master_d_seconds_bucket{type=\"get\",le=\"0.1\"} 2\n"
                               "egm_master_d_seconds_bucket{type=\"get\",le=\"+Inf\"} 7\n"
                               "egm_master_d_seconds_sum{type=\"get\"} 1.5\n"
                               "egm_master_d_seconds_count{type=\"get\"} 7\n"
                               "egm_master_d_seconds_bucket{le=\"0.001\"} 2\n"
                               "egm_master_d_seconds_bucket{le=\"0.1\"} 2\n"
                               "egm_master_d_seconds_bucket{le=\"+Inf\"} 7\n"
                               "egm_master_d_seconds_sum 0\n"
                               "egm_master_d_seconds_count 7\n");
    egm_free(t.buf);
}

/* The tests' check of docs/metrics.md's scheme (tests/support) refuses each kind of bad name. */
static void test_scheme_check(void **state)
{
    (void)state;
    char why[256];
    assert_null(egm_test_prom_scheme_problem("# HELP egm_client_a_bytes x\n"
                                             "# TYPE egm_client_a_bytes gauge\n"
                                             "egm_client_a_bytes 1\n"
                                             "# TYPE egm_client_b_seconds_total counter\n",
                                             "client", why, sizeof(why)));
    static const char *const bad[] = {
        "# TYPE egmstore_x gauge\n",         "# TYPE egm_master_x gauge\n",
        "# TYPE egm_client_x counter\n",     "# TYPE egm_client_x_total gauge\n",
        "# TYPE egm_client_bytes_x gauge\n", "# TYPE egm_client_Abc gauge\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_non_null(egm_test_prom_scheme_problem(bad[i], "client", why, sizeof(why)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_family_and_samples, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_histogram, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_scheme_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
