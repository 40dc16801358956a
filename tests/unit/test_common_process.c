/* Child processes: a shell child's lines are read in order and its exit code
 * comes back from wait; end of output, a prefix search, a line longer than the
 * buffer and a last line without a newline; a child that cannot be executed
 * exits 127; a signalled child reports 128 + signal; a sleeping child is killed
 * and reaped by cleanup; misuse answers INVALID_ARG. Every wait is bounded. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/process.h"

/* Generous: the machine is shared and noisy; no test depends on how fast. */
#define WAIT_MS 20000

static void spawn_sh(egm_process_t *proc, const char *script, egm_process_stdout_t out)
{
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
    assert_int_equal(egm__process_spawn(argv, out, proc), EGM_OK);
    assert_true(proc->pid > 0);
    if (out == EGM_PROCESS_STDOUT_CAPTURE)
        assert_true(proc->out_fd >= 0);
    else
        assert_int_equal(proc->out_fd, -1);
}

/* True when no process with this id exists any more (it was reaped). */
static int gone(pid_t pid)
{
    return kill(pid, 0) != 0 && errno == ESRCH;
}

static void test_lines_and_exit_code(void **state)
{
    (void)state;
    egm_process_t proc;
    char line[64];
    int code = -1;

    spawn_sh(&proc, "echo a; echo b; exit 3", EGM_PROCESS_STDOUT_CAPTURE);
    assert_int_equal(egm__process_read_line(&proc, line, sizeof(line), WAIT_MS), EGM_OK);
    assert_string_equal(line, "a");
    assert_int_equal(egm__process_read_line(&proc, line, sizeof(line), WAIT_MS), EGM_OK);
    assert_string_equal(line, "b");
    assert_int_equal(egm__process_read_line(&proc, line, sizeof(line), WAIT_MS),
                     EGM_ERR_UNREACHABLE);
    pid_t pid = proc.pid;
    assert_int_equal(egm__process_wait(&proc, WAIT_MS, &code), EGM_OK);
    assert_int_equal(code, 3);
    assert_int_equal(proc.pid, 0);
    assert_true(gone(pid));
    /* Once reaped, signal and wait refuse; cleanup still closes the pipe. */
    assert_int_equal(egm__process_signal(&proc, SIGTERM), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__process_wait(&proc, WAIT_MS, &code), EGM_ERR_INVALID_ARG);
    egm__process_cleanup(&proc);
    assert_int_equal(proc.out_fd, -1);
    egm__process_cleanup(&proc); /* twice is harmless */
}

static void test_wait_line_skips_to_prefix(void **state)
{
    (void)state;
    egm_process_t proc;
    char line[64];

    spawn_sh(&proc, "echo starting; echo 'port 4711'; echo 'ready port=4711'; echo after",
             EGM_PROCESS_STDOUT_CAPTURE);
    assert_int_equal(egm__process_wait_line(&proc, "ready", line, sizeof(line), WAIT_MS), EGM_OK);
    assert_string_equal(line, "ready port=4711");
    /* Lines after the match are still there. */
    assert_int_equal(egm__process_read_line(&proc, line, sizeof(line), WAIT_MS), EGM_OK);
    assert_string_equal(line, "after");
    /* A prefix that never comes ends at end of output, not at the deadline. */
    assert_int_equal(egm__process_wait_line(&proc, "never", line, sizeof(line), WAIT_MS),
                     EGM_ERR_UNREACHABLE);
    int code = -1;
    assert_int_equal(egm__process_wait(&proc, WAIT_MS, &code), EGM_OK);
    assert_int_equal(code, 0);
    egm__process_cleanup(&proc);
}

static void test_long_and_unterminated_lines(void **state)
{
    (void)state;
    egm_process_t proc;
    static char line[8192];
    char small[8];

    /* 5000 'x' then a newline: the first 4096 bytes come back as one line (the
     * buffer's size), the rest as the next. Then "truncated" into a small buffer,
     * then a last line without a newline, which must not be lost. */
    spawn_sh(&proc,
             "i=0; while [ $i -lt 500 ]; do printf xxxxxxxxxx; i=$((i+1)); done; echo; "
             "echo truncated; printf 'no newline'",
             EGM_PROCESS_STDOUT_CAPTURE);
    assert_int_equal(egm__process_read_line(&proc, line, sizeof(line), WAIT_MS), EGM_OK);
    assert_int_equal(strlen(line), sizeof(proc.buf));
    assert_int_equal(strspn(line, "x"), sizeof(proc.buf));
    assert_int_equal(egm__process_read_line(&proc, line, sizeof(line), WAIT_MS), EGM_OK);
    assert_int_equal(strlen(line), 5000 - sizeof(proc.buf));
    assert_int_equal(strspn(line, "x"), 5000 - sizeof(proc.buf));
    assert_int_equal(egm__process_read_line(&proc, small, sizeof(small), WAIT_MS), EGM_OK);
    assert_string_equal(small, "truncat");
    assert_int_equal(egm__process_read_line(&proc, line, sizeof(line), WAIT_MS), EGM_OK);
    assert_string_equal(line, "no newline");
    assert_int_equal(egm__process_read_line(&proc, line, sizeof(line), WAIT_MS),
                     EGM_ERR_UNREACHABLE);
    assert_int_equal(egm__process_read_line(&proc, line, 0, WAIT_MS), EGM_ERR_INVALID_ARG);
    egm__process_cleanup(&proc);
}

static void test_read_line_deadline(void **state)
{
    (void)state;
    egm_process_t proc;
    char line[64];

    /* The child prints nothing for far longer than the read waits. */
    spawn_sh(&proc, "exec sleep 600", EGM_PROCESS_STDOUT_CAPTURE);
    assert_int_equal(egm__process_read_line(&proc, line, sizeof(line), 20), EGM_ERR_TIMEOUT);
    assert_int_equal(egm__process_wait(&proc, 0, NULL), EGM_ERR_TIMEOUT);
    assert_true(proc.pid > 0);
    egm__process_cleanup(&proc);
}

static void test_cleanup_kills_sleeping_child(void **state)
{
    (void)state;
    egm_process_t proc;

    spawn_sh(&proc, "exec sleep 600", EGM_PROCESS_STDOUT_INHERIT);
    pid_t pid = proc.pid;
    assert_false(gone(pid));
    egm__process_cleanup(&proc);
    assert_int_equal(proc.pid, 0);
    assert_int_equal(proc.out_fd, -1);
    assert_true(gone(pid));
    /* Reaped by cleanup: nothing is left for us to wait for. */
    assert_int_equal(waitpid(pid, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

static void test_signal_reports_128_plus_signal(void **state)
{
    (void)state;
    egm_process_t proc;
    char line[64];
    int code = -1;

    /* exec: the signal goes to sleep itself, not to a shell waiting for it. The
     * line is printed first so that the signal is sent only once the child runs. */
    spawn_sh(&proc, "echo up; exec sleep 600", EGM_PROCESS_STDOUT_CAPTURE);
    assert_int_equal(egm__process_read_line(&proc, line, sizeof(line), WAIT_MS), EGM_OK);
    assert_string_equal(line, "up");
    assert_int_equal(egm__process_signal(&proc, SIGTERM), EGM_OK);
    assert_int_equal(egm__process_wait(&proc, WAIT_MS, &code), EGM_OK);
    assert_int_equal(code, 128 + SIGTERM);
    egm__process_cleanup(&proc);
}

static void test_exec_failure_exits_127(void **state)
{
    (void)state;
    egm_process_t proc;
    char *argv[] = {"/nonexistent/egm-no-such-program", NULL};
    int code = -1;

    assert_int_equal(egm__process_spawn(argv, EGM_PROCESS_STDOUT_CAPTURE, &proc), EGM_OK);
    char line[64];
    /* stderr is not captured: nothing arrives on stdout. */
    assert_int_equal(egm__process_read_line(&proc, line, sizeof(line), WAIT_MS),
                     EGM_ERR_UNREACHABLE);
    assert_int_equal(egm__process_wait(&proc, WAIT_MS, &code), EGM_OK);
    assert_int_equal(code, 127);
    egm__process_cleanup(&proc);
}

static void test_uncaptured_output(void **state)
{
    (void)state;
    egm_process_t proc;
    char line[64];
    int code = -1;

    spawn_sh(&proc, "exit 0", EGM_PROCESS_STDOUT_INHERIT);
    assert_int_equal(egm__process_read_line(&proc, line, sizeof(line), WAIT_MS),
                     EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__process_wait(&proc, WAIT_MS, &code), EGM_OK);
    assert_int_equal(code, 0);
    egm__process_cleanup(&proc);
}

static void test_self_exe(void **state)
{
    (void)state;
    const char *exe = egm__process_self_exe();
    assert_true(exe[0] == '/');
    const char *base = strrchr(exe, '/') + 1;
    assert_string_equal(base, "unit_test_common_process");
}

int main(void)
{
    /* A child killed by a test must not take this process down with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lines_and_exit_code, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_wait_line_skips_to_prefix, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_long_and_unterminated_lines, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_read_line_deadline, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_cleanup_kills_sleeping_child, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_signal_reports_128_plus_signal, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_exec_failure_exits_127, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_uncaptured_output, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_self_exe, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
