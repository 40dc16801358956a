/* Status codes: every value has a distinct name, a description and the Mooncake
 * ErrorCode the team agreed on; unknown values are answered, not crashed on;
 * errno conversion and the thread-local last error. */
#include <errno.h>
#include <pthread.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/log.h"

static const struct {
    int status;
    const char *name;
    int mooncake;
} expected[] = {
    {EGM_OK, "OK", 0},
    {EGM_INPROGRESS, "INPROGRESS", 0},
    {EGM_ERR_INTERNAL, "INTERNAL", -1},
    {EGM_ERR_INVALID_ARG, "INVALID_ARG", -600},
    {EGM_ERR_NO_MEMORY, "NO_MEMORY", -1},
    {EGM_ERR_NOT_FOUND, "NOT_FOUND", -704},
    {EGM_ERR_EXISTS, "EXISTS", -705},
    {EGM_ERR_NO_SPACE, "NO_SPACE", -200},
    {EGM_ERR_HAS_LEASE, "HAS_LEASE", -706},
    {EGM_ERR_LEASE_EXPIRED, "LEASE_EXPIRED", -707},
    {EGM_ERR_TIMEOUT, "TIMEOUT", -901},
    {EGM_ERR_IO, "IO", -800},
    {EGM_ERR_PROTOCOL, "PROTOCOL", -900},
    {EGM_ERR_UNREACHABLE, "UNREACHABLE", -900},
    {EGM_ERR_NOT_SUPPORTED, "NOT_SUPPORTED", -1012},
    {EGM_ERR_SEGMENT_NOT_FOUND, "SEGMENT_NOT_FOUND", -101},
    {EGM_ERR_SEGMENT_EXISTS, "SEGMENT_EXISTS", -102},
    {EGM_ERR_CLIENT_NOT_FOUND, "CLIENT_NOT_FOUND", -103},
    {EGM_ERR_TRANSFER, "TRANSFER", -800},
    {EGM_ERR_BUFFER_TOO_SMALL, "BUFFER_TOO_SMALL", -10},
    {EGM_ERR_NOT_READY, "NOT_READY", -703},
    {EGM_ERR_PERMISSION, "PERMISSION", -601},
    {EGM_ERR_NO_CUDA, "NO_CUDA", -1012},
    {EGM_ERR_INVALID_KEY, "INVALID_KEY", -400},
    {EGM_ERR_BUSY, "BUSY", -714},
    {EGM_ERR_CLOSED, "CLOSED", -1010},
    {EGM_ERR_VERSION, "VERSION", -300},
    {EGM_ERR_CONFIG, "CONFIG", -600},
    {EGM_ERR_NOT_REGISTERED, "NOT_REGISTERED", -600},
};
#define N_EXPECTED (sizeof(expected) / sizeof(expected[0]))

static void test_every_value_has_name_text_and_mooncake_code(void **state)
{
    (void)state;
    /* The table covers the whole range: OK, INPROGRESS and -1..EGM_STATUS_MIN. */
    assert_int_equal(N_EXPECTED, 2 - EGM_STATUS_MIN);
    for (size_t i = 0; i < N_EXPECTED; i++) {
        assert_string_equal(egm_status_name(expected[i].status), expected[i].name);
        assert_int_equal(egm_status_to_mooncake(expected[i].status), expected[i].mooncake);
        const char *text = egm_status_string(expected[i].status);
        assert_non_null(text);
        assert_true(strlen(text) > 0);
        assert_string_not_equal(text, "unknown status");
    }
}

static void test_names_are_distinct(void **state)
{
    (void)state;
    for (int a = EGM_STATUS_MIN; a <= EGM_INPROGRESS; a++)
        for (int b = a + 1; b <= EGM_INPROGRESS; b++)
            assert_string_not_equal(egm_status_name(a), egm_status_name(b));
}

static void test_unknown_values(void **state)
{
    (void)state;
    int unknown[] = {2, 100, EGM_STATUS_MIN - 1, -1000, INT32_MIN};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        assert_string_equal(egm_status_name(unknown[i]), "UNKNOWN");
        assert_string_equal(egm_status_string(unknown[i]), "unknown status");
        assert_int_equal(egm_status_to_mooncake(unknown[i]), -1);
    }
}

static void test_status_from_errno(void **state)
{
    (void)state;
    assert_int_equal(egm__status_from_errno(0), EGM_OK);
    assert_int_equal(egm__status_from_errno(ENOMEM), EGM_ERR_NO_MEMORY);
    assert_int_equal(egm__status_from_errno(ETIMEDOUT), EGM_ERR_TIMEOUT);
    assert_int_equal(egm__status_from_errno(ECONNREFUSED), EGM_ERR_UNREACHABLE);
    assert_int_equal(egm__status_from_errno(ECONNRESET), EGM_ERR_UNREACHABLE);
    assert_int_equal(egm__status_from_errno(EPIPE), EGM_ERR_UNREACHABLE);
    assert_int_equal(egm__status_from_errno(EACCES), EGM_ERR_PERMISSION);
    assert_int_equal(egm__status_from_errno(EPERM), EGM_ERR_PERMISSION);
    assert_int_equal(egm__status_from_errno(EIO), EGM_ERR_IO);
    assert_int_equal(egm__status_from_errno(ENOSPC), EGM_ERR_IO);
}

static void *other_thread(void *arg)
{
    (void)arg;
    /* A fresh thread starts with an empty detail and its own copy. */
    int empty = egm_last_error()[0] == '\0';
    egm__set_error(EGM_ERR_IO, "thread detail");
    return (void *)(intptr_t)empty;
}

static void test_last_error_is_thread_local(void **state)
{
    (void)state;
    assert_int_equal(egm__set_error(EGM_ERR_CONFIG, "key %s value %d", "port", 7), EGM_ERR_CONFIG);
    assert_string_equal(egm_last_error(), "key port value 7");
    pthread_t t;
    void *ret;
    assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
    assert_int_equal(pthread_join(t, &ret), 0);
    assert_int_equal((intptr_t)ret, 1);
    assert_string_equal(egm_last_error(), "key port value 7");
    /* The previous detail may be an argument of the next one. */
    egm__set_error(EGM_ERR_CONFIG, "file.ini:3: %s", egm_last_error());
    assert_string_equal(egm_last_error(), "file.ini:3: key port value 7");
    egm__clear_error();
    assert_string_equal(egm_last_error(), "");
}

static void test_ratelimit(void **state)
{
    (void)state;
    uint64_t rl = 0;
    int allowed = 0;
    /* 1000 calls take far less than a second, but a second boundary may fall in
     * between: at most two windows' worth pass. */
    for (int i = 0; i < 1000; i++)
        allowed += egm__log_ratelimit(&rl, 5);
    assert_true(allowed >= 5);
    assert_true(allowed <= 10);
}

/* Runs one egm_info/egm_debug pair with stderr sent into a pipe; returns what came. */
static void capture_log(char *out, size_t len)
{
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_int_equal(dup2(pipefd[1], STDERR_FILENO), STDERR_FILENO);
    egm__log_set_component("master");
    egm__log_set_level(EGM_LOG_INFO);
    egm_info("stored %d bytes", 42);
    egm_debug("not printed at info");
    assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
    close(saved);
    close(pipefd[1]);
    ssize_t n = read(pipefd[0], out, len - 1);
    close(pipefd[0]);
    assert_true(n > 0);
    out[n] = '\0';
}

static void test_log_line_format(void **state)
{
    (void)state;
    char line[4096];
    capture_log(line, sizeof(line));
    regex_t re;
    assert_int_equal(regcomp(&re,
                             "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
                             "I master [0-9]+:[0-9]+ test_common_status\\.c:[0-9]+ "
                             "stored 42 bytes\n$",
                             REG_EXTENDED),
                     0);
    int match = regexec(&re, line, 0, NULL, 0);
    regfree(&re);
    if (match != 0)
        fail_msg("unexpected log output: %s", line);
    egm__log_set_component("egmstore");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_value_has_name_text_and_mooncake_code,
                                        egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_names_are_distinct, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_unknown_values, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_status_from_errno, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_last_error_is_thread_local, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_ratelimit, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_log_line_format, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
