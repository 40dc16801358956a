/* The fake-driver environment of the integration tests (tests/support/
 * fake_env.c) leaves nothing in /tmp: the report folder it makes, with what
 * the test and its child processes wrote there, is removed when the process
 * that made it exits, and not by a forked child that exits first. The report
 * check counts descriptors a process opened and kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/fake_env.h"

static char shim_dir[64]; /* stands in for EGM_FAKE_CUDA_DIR: holds an empty libcuda.so.1 */

static int dir_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(shim_dir, sizeof(shim_dir), "/tmp/egm-fake-shim-XXXXXX");
    if (mkdtemp(shim_dir) == NULL)
        return -1;
    write_file(shim_dir, "libcuda.so.1", "");
    return setenv("EGM_FAKE_CUDA_DIR", shim_dir, 1);
}

static int group_teardown(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof(path), "%s/libcuda.so.1", shim_dir);
    unlink(path);
    rmdir(shim_dir);
    return 0;
}

/* In a child: makes the report folder, fills it as a test run does (a report,
 * a file of the test's own, a subfolder), forks a grandchild that exits
 * normally, checks the folder survived that, and exits. The folder's name
 * comes back through fd. */
static int child_run(int fd)
{
    char dir[64];
    if (egm_test_fake_env("test_common_fake_env", dir, sizeof(dir)) != 0)
        return 10;
    if (write(fd, dir, sizeof(dir)) != (ssize_t)sizeof(dir))
        return 11;
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/nested", dir);
    if (mkdir(sub, 0700) != 0)
        return 12;
    write_file(dir, "report-1", "live_objects 0\n");
    write_file(sub, "get.bin", "bytes");
    pid_t grandchild = fork();
    if (grandchild == 0)
        exit(0); /* runs atexit handlers: must not remove its parent's folder */
    int status = 0;
    if (grandchild < 0 || waitpid(grandchild, &status, 0) != grandchild)
        return 13;
    if (!dir_exists(dir))
        return 14;
    exit(0);
}

static void test_report_folder_removed_at_exit(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        _exit(child_run(pfd[1]));
    }
    close(pfd[1]);
    char dir[64] = "";
    ssize_t n = read(pfd[0], dir, sizeof(dir));
    close(pfd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(n, sizeof(dir));
    assert_int_equal(strncmp(dir, "/tmp/egm-fake-", 14), 0);
    assert_false(dir_exists(dir));
}

/* A report is a problem when a counter is not 0, descriptors kept included,
 * or when a line is missing (an older shim). */
static void test_report_problems(void **state)
{
    (void)state;
    static const char good[] = "allocations 0\nimports 0\nreservations 0\nmappings 0\n"
                               "memory_objects 0\nfabric_names 0\ndevice_allocations 0\n"
                               "pinned_host 0\nhost_registrations 0\nstreams 0\nevents 0\n"
                               "modules 0\nlive_objects 0\nfds_opened_since_load 0\n"
                               "calls_total 12\n";
    char path[128], text[sizeof(good) + 64];
    snprintf(path, sizeof(path), "%s/report-x", shim_dir);
    write_file(shim_dir, "report-x", good);
    assert_null(egm_test_fake_report_problem(path));

    snprintf(text, sizeof(text), "%s", good);
    char *p = strstr(text, "fds_opened_since_load 0");
    p[strlen("fds_opened_since_load ")] = '2';
    write_file(shim_dir, "report-x", text);
    const char *why = egm_test_fake_report_problem(path);
    assert_non_null(why);
    assert_non_null(strstr(why, "fds_opened_since_load = 2"));

    snprintf(text, sizeof(text), "%s", good);
    p = strstr(text, "fds_opened_since_load 0\n");
    memmove(p, p + strlen("fds_opened_since_load 0\n"),
            strlen(p + strlen("fds_opened_since_load 0\n")) + 1);
    write_file(shim_dir, "report-x", text);
    assert_non_null(egm_test_fake_report_problem(path));
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_folder_removed_at_exit),
        cmocka_unit_test(test_report_problems),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
