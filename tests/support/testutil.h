/* Small helpers shared by the unit tests. */
#ifndef EGM_TEST_TESTUTIL_H
#define EGM_TEST_TESTUTIL_H

#include <stddef.h>

/* Open descriptors of this process (entries of /proc/self/fd, without . and ..). */
int egm_test_count_fds(void);
/* len random bytes from getrandom(); fails the running cmocka test if it cannot. */
void egm_test_fill_random(void *buf, size_t len);

/* cmocka fixtures: the test's tracked allocations must return to where they
 * were before it ran. */
int egm_test_setup_alloc(void **state);
int egm_test_teardown_alloc(void **state);

/* The first metric family of Prometheus text (its "# TYPE" lines) whose name
 * breaks docs/metrics.md's scheme for `component` ("master" or "client"):
 * egm_<component>_ then [a-z0-9_]; _total on counters only; a unit word
 * (_bytes, _seconds) only last, before _total. NULL when every name follows
 * it; else a description in why. */
const char *egm_test_prom_scheme_problem(const char *text, const char *component, char *why,
                                         size_t len);

/* Skips the running cmocka test, saying why (printf format): prints the line
 * "EGM-SKIP: <test>: <reason>" that scripts/test-skips.py lists at the end of
 * `make test` (a skipped case otherwise reads as a pass: the executable exits
 * 0), then cmocka's skip(). Use it instead of a bare skip(). Needs <cmocka.h>. */
#define EGM_SKIP(...)                                                                              \
    do {                                                                                           \
        egm_test_skip_note(__func__, __VA_ARGS__);                                                 \
        skip();                                                                                    \
    } while (0)
/* Prints "EGM-SKIP: <test>: <reason>" on stdout (and flushes it): for EGM_SKIP,
 * and for a whole test that exits 77, with its own name as `test`. */
void egm_test_skip_note(const char *test, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
