/* Small helpers shared by the unit tests (see testutil.h). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
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

/* A unit word inside name that is neither last nor followed only by _total. */
static int unit_misplaced(const char *name, size_t len, const char *unit)
{
    size_t ulen = strlen(unit);
    for (const char *p = name; (p = strstr(p, unit)) != NULL && p < name + len; p += ulen) {
        const char *rest = p + ulen;
        size_t rlen = len - (size_t)(rest - name);
        if (!(rlen == 0 || (rlen == 6 && strncmp(rest, "_total", 6) == 0)))
            return 1;
    }
    return 0;
}

const char *egm_test_prom_scheme_problem(const char *text, const char *component, char *why,
                                         size_t len)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "egm_%s_", component);
    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t llen = end != NULL ? (size_t)(end - line) : strlen(line);
        if (llen > 7 && strncmp(line, "# TYPE ", 7) == 0) {
            const char *name = line + 7;
            size_t nlen = strcspn(name, " \n");
            const char *type = name + nlen + 1;
            int counter = strncmp(type, "counter", 7) == 0;
            int total = nlen > 6 && strncmp(name + nlen - 6, "_total", 6) == 0;
            const char *problem = NULL;
            if (strncmp(name, prefix, strlen(prefix)) != 0)
                problem = "does not start with the component's prefix";
            else if (strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") < nlen)
                problem = "has a character outside [a-z0-9_]";
            else if (counter != total)
                problem = counter ? "is a counter without _total" : "ends in _total, not a counter";
            else if (unit_misplaced(name, nlen, "_bytes") || unit_misplaced(name, nlen, "_seconds"))
                problem = "has its unit word elsewhere than last";
            if (problem != NULL) {
                snprintf(why, len, "%.*s %s (%s)", (int)nlen, name, problem, prefix);
                return why;
            }
        }
        line = end != NULL ? end + 1 : NULL;
    }
    return NULL;
}
