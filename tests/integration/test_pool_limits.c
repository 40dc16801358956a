/* Integration: `egmstore provider` refuses capacity the machine does not have,
 * before it allocates anything (issue 15), as real processes:
 * - a memfd pool above MemAvailable: a non-zero exit naming
 *   global_segment_size, both sizes and allow_overcommit; nothing mounted at
 *   the master; --plan-only (host and host_numa pools) says the same, exit 2;
 * - allow_overcommit=true accepts it, with a warning (the pool is sparse: no
 *   memory is taken);
 * - more chunks (one memfd each) than RLIMIT_NOFILE allows, with the hard limit
 *   as low as the soft one: refused with the numbers instead of "Too many open
 *   files" half way; overcommit does not change that;
 * - a soft limit below a sufficient hard limit is raised, and says so. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/clock.h"
#include "pool/pool_limits.h"
#include "support/cluster.h"
#include "support/fake_env.h"
#include "support/testutil.h"

#define RUN_TIMEOUT_MS 20000
#define READY "egmstore provider ready"

static egm_test_cluster_t cluster;
static char report_dir[64];

typedef struct {
    int code;  /* exit code, 128 + signal */
    int ready; /* printed its ready line (then stopped with SIGTERM) */
    char out[16384];
} run_t;

static run_t run; /* the last provider run's */

/* Runs `egmstore provider ARGS --master ADDR` with RLIMIT_NOFILE soft/hard
 * (0: inherited) set in the child before exec, collecting stdout+stderr. A
 * provider that gets ready is stopped with SIGTERM. Every wait is bounded. */
static void run_provider(const char *const *args, rlim_t soft, rlim_t hard, run_t *r)
{
    const char *argv[40];
    int n = 0, pipefd[2];
    argv[n++] = egm_test_bin();
    argv[n++] = "provider";
    for (const char *const *a = args; *a != NULL && n < 34; a++)
        argv[n++] = *a;
    argv[n++] = "--master";
    argv[n++] = cluster.master_addr;
    argv[n++] = "--local-hostname";
    argv[n++] = "127.0.0.1";
    argv[n] = NULL;

    memset(r, 0, sizeof(*r));
    r->code = -1;
    assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (soft > 0) {
            struct rlimit rl = {.rlim_cur = soft, .rlim_max = hard};
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
                _exit(126);
        }
        dup2(pipefd[1], STDOUT_FILENO);
        dup2(pipefd[1], STDERR_FILENO);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    size_t len = 0;
    uint64_t deadline = egm__now_ms() + RUN_TIMEOUT_MS;
    for (;;) {
        uint64_t now = egm__now_ms();
        if (now >= deadline)
            break;
        struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
        int rc = poll(&pfd, 1, (int)(deadline - now));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            break;
        ssize_t got = read(pipefd[0], r->out + len, sizeof(r->out) - 1 - len);
        if (got <= 0)
            break;
        len += (size_t)got;
        r->out[len] = '\0';
        if (!r->ready && strstr(r->out, READY) != NULL) {
            r->ready = 1;
            kill(pid, SIGTERM); /* keep reading: its last lines, then EOF */
        }
        if (len == sizeof(r->out) - 1)
            break;
    }
    close(pipefd[0]);
    int status = 0;
    for (int i = 0; i < 200; i++) { /* 10 s */
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            r->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            return;
        }
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    fail_msg("provider did not exit; its output:\n%s", r->out);
}

static void expect_in(const run_t *r, const char *text)
{
    if (strstr(r->out, text) == NULL)
        fail_msg("expected \"%s\" in the provider's output (exit %d):\n%s", text, r->code, r->out);
}

static void expect_not_in(const run_t *r, const char *text)
{
    if (strstr(r->out, text) != NULL)
        fail_msg("unexpected \"%s\" in the provider's output (exit %d):\n%s", text, r->code,
                 r->out);
}

/* Twice this host's MemAvailable (and 1 GiB), in bytes: refused however the
 * figure moves while the test runs. */
static void size_over_available(char *buf, size_t len)
{
    uint64_t avail = egm__pool_limits_host_available();
    if (avail == EGM_POOL_LIMITS_UNKNOWN)
        EGM_SKIP("no MemAvailable in /proc/meminfo");
    snprintf(buf, len, "%llu", (unsigned long long)(2 * avail + (1ull << 30)));
}

static void test_memory_above_available_refused(void **state)
{
    (void)state;
    char size[32];
    run_t *r = &run;
    size_over_available(size, sizeof(size));
    /* One chunk: without the check this sparse pool would be accepted. */
    const char *args[] = {"--global-segment-size", size, "--max-mr-size", "1TiB", NULL};
    run_provider(args, 0, 0, r);
    assert_int_not_equal(r->code, 0);
    assert_false(r->ready);
    expect_in(r, "global_segment_size: ");
    expect_in(r, "is more than this host's available memory (");
    expect_in(r, " MemAvailable); lower it or set allow_overcommit=true");
    assert_int_equal(egm_test_cluster_segments(&cluster), 0);

    /* --plan-only of a memfd pool: the same check, a usage error. */
    const char *plan[] = {"--plan-only", "--global-segment-size", size, "--max-mr-size", "1TiB",
                          NULL};
    run_provider(plan, 0, 0, r);
    assert_int_equal(r->code, 2);
    expect_in(r, "is more than this host's available memory (");
    /* ... and of a HOST_NUMA pool on the fake driver, after its plan. */
    const char *numa[] = {"--plan-only", "--pool-memory", "host_numa", "--global-segment-size",
                          size,          "--max-mr-size", "1TiB",      NULL};
    run_provider(numa, 0, 0, r);
    assert_int_equal(r->code, 2);
    expect_in(r, "is more than this host's available memory (");
    expect_not_in(r, "nothing allocated");
}

static void test_overcommit_accepts_memory(void **state)
{
    (void)state;
    char size[32];
    run_t *r = &run;
    size_over_available(size, sizeof(size));
    const char *args[] = {
        "--global-segment-size", size, "--max-mr-size", "1TiB", "--allow-overcommit", "true", NULL};
    run_provider(args, 0, 0, r);
    assert_true(r->ready);
    assert_int_equal(r->code, 0); /* stopped by SIGTERM, cleanly */
    expect_in(r, "is more than this host's available memory (");
    expect_in(r, "accepted (allow_overcommit=true)");
    expect_in(r, READY ": 1 segments");
}

static void test_fd_limit_refused(void **state)
{
    (void)state;
    run_t *r = &run;
    /* 200 chunks of 4 KiB, each a memfd, under a hard limit of 128. */
    const char *args[] = {"--global-segment-size",
                          "800KiB",
                          "--max-mr-size",
                          "4KiB",
                          "--allow-overcommit",
                          "true",
                          NULL};
    run_provider(args, 128, 128, r);
    assert_int_not_equal(r->code, 0);
    assert_false(r->ready);
    expect_in(r, "global_segment_size: 200 chunks of max_mr_size 4.0 KiB need ");
    expect_in(r, " file descriptors (one per chunk, ");
    expect_in(r, "the limit is 128 (ulimit -n)");
    expect_not_in(r, "Too many open files");
    assert_int_equal(egm_test_cluster_segments(&cluster), 0);
}

static void test_soft_fd_limit_raised(void **state)
{
    (void)state;
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 1024)
        EGM_SKIP("RLIMIT_NOFILE hard limit %llu is below 1024", (unsigned long long)rl.rlim_max);
    run_t *r = &run;
    const char *args[] = {"--global-segment-size", "800KiB", "--max-mr-size", "4KiB", NULL};
    run_provider(args, 128, 1024, r);
    assert_true(r->ready);
    assert_int_equal(r->code, 0);
    expect_in(r, "raised the soft limit (ulimit -n) from 128 to the hard limit 1024");
    expect_in(r, READY ": 200 segments");
}

static int group_setup(void **state)
{
    (void)state;
    setenv("EGM_FAKE_CUDA_DEVICES", "1", 1);
    setenv("EGM_FAKE_CUDA_NUMA_NODES", "1", 1);
    return egm_test_start_master(&cluster, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    egm_test_cluster_stop(&cluster);
    return 0;
}

int main(void)
{
    int rc = egm_test_fake_env("test_pool_limits", report_dir, sizeof(report_dir));
    if (rc != 0)
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_above_available_refused),
        cmocka_unit_test(test_overcommit_accepts_memory),
        cmocka_unit_test(test_fd_limit_refused),
        cmocka_unit_test(test_soft_fd_limit_raised),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
