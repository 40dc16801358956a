/* Small helpers shared by the unit tests (see testutil.h). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/random.h>
#include <cmocka.h>
#include "common/alloc.h"
#include "support/testutil.h"

static uint64_t live_at_start;

int egm_test_setup_alloc(void **state)
{
    (void)state;
    live_at_start = egm__alloc_live_count();
    return 0;
}

int egm_test_teardown_alloc(void **state)
{
    (void)state;
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

int egm_test_count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

void egm_test_fill_random(void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len > 65536 ? 65536 : len, 0);
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

void egm_test_skip_note(const char *test, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("EGM-SKIP: %s: ", test);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}
