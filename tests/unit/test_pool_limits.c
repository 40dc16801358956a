/* Pool limits: the memory and descriptor checks as pure functions of their
 * numbers (messages naming the key, the sizes and the way out; overcommit
 * accepts memory, never descriptors), the meminfo readers over files of both
 * forms, a node's figures ignored when the nodes do not add up to the host,
 * the open-descriptor count, the soft limit raised to the hard one, and the
 * host pool refusing before it creates any chunk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/log.h"
#include "pool/host_pool.h"
#include "pool/pool_limits.h"

#define GIB (1ull << 30)

static void test_memory_within_available_is_ok(void **state)
{
    (void)state;
    char msg[384] = "x";
    egm_pool_memory_check_t c = {.requested = 8 * GIB, .available = 8 * GIB, .node = -1};
    assert_int_equal(egm__pool_limits_check_memory(&c, msg, sizeof(msg)), EGM_OK);
    assert_string_equal(msg, "");
    c.available = EGM_POOL_LIMITS_UNKNOWN;
    c.requested = UINT64_MAX - 1;
    assert_int_equal(egm__pool_limits_check_memory(&c, msg, sizeof(msg)), EGM_OK);
    assert_string_equal(msg, "");
}

static void test_memory_above_available_is_refused(void **state)
{
    (void)state;
    char msg[384];
    egm_pool_memory_check_t c = {
        .requested = 64 * GIB, .available = 22 * GIB + GIB / 10, .node = -1};
    assert_int_equal(egm__pool_limits_check_memory(&c, msg, sizeof(msg)), EGM_ERR_CONFIG);
    assert_string_equal(egm_last_error(),
                        "global_segment_size: 64.0 GiB is more than this host's available memory "
                        "(22.1 GiB MemAvailable); lower it or set allow_overcommit=true");
    /* msg: the diagnosis without the way out (the caller's warning adds its own). */
    assert_string_equal(msg, "global_segment_size: 64.0 GiB is more than this host's available "
                             "memory (22.1 GiB MemAvailable)");
    /* One byte over is over. */
    c.requested = c.available + 1;
    assert_int_equal(egm__pool_limits_check_memory(&c, NULL, 0), EGM_ERR_CONFIG);
}

static void test_memory_of_a_node_names_it(void **state)
{
    (void)state;
    egm_pool_memory_check_t c = {.requested = 40 * GIB, .available = 30 * GIB, .node = 3};
    assert_int_equal(egm__pool_limits_check_memory(&c, NULL, 0), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "global_segment_size: 40.0 GiB on NUMA node 3"));
    assert_non_null(strstr(egm_last_error(), "30.0 GiB MemFree + Inactive(file)"));
    assert_non_null(strstr(egm_last_error(), "allow_overcommit=true"));
}

static void test_overcommit_accepts_memory_and_says_so(void **state)
{
    (void)state;
    char msg[384];
    egm__set_error(EGM_ERR_INTERNAL, "before");
    egm_pool_memory_check_t c = {
        .requested = 64 * GIB, .available = 22 * GIB, .node = -1, .allow_overcommit = 1};
    assert_int_equal(egm__pool_limits_check_memory(&c, msg, sizeof(msg)), EGM_OK);
    assert_non_null(strstr(msg, "64.0 GiB is more than this host's available memory"));
    assert_string_equal(egm_last_error(), "before"); /* success leaves no error behind */
}

static void test_fds_within_limit_are_ok(void **state)
{
    (void)state;
    egm_pool_fd_check_t c = {.chunks = 100, .chunk_size = GIB, .fds_open = 10, .fd_limit = 1024};
    assert_int_equal(egm__pool_limits_fds_needed(&c), 100 + 10 + EGM_POOL_LIMITS_FD_RESERVE);
    assert_int_equal(egm__pool_limits_check_fds(&c), EGM_OK);
    c.fd_limit = egm__pool_limits_fds_needed(&c);
    assert_int_equal(egm__pool_limits_check_fds(&c), EGM_OK);
    c.chunks = 1ull << 40;
    c.fd_limit = EGM_POOL_LIMITS_UNKNOWN; /* unlimited */
    assert_int_equal(egm__pool_limits_check_fds(&c), EGM_OK);
}

static void test_fds_above_limit_are_refused(void **state)
{
    (void)state;
    /* 100 TiB in 1 GiB chunks under the usual 1024. */
    egm_pool_fd_check_t c = {.chunks = 102400, .chunk_size = GIB, .fds_open = 3, .fd_limit = 1024};
    assert_int_equal(egm__pool_limits_check_fds(&c), EGM_ERR_CONFIG);
    char want[256];
    snprintf(want, sizeof(want),
             "global_segment_size: 102400 chunks of max_mr_size 1.0 GiB need %u file descriptors",
             102400 + 3 + EGM_POOL_LIMITS_FD_RESERVE);
    assert_non_null(strstr(egm_last_error(), want));
    assert_non_null(strstr(egm_last_error(), "the limit is 1024 (ulimit -n)"));
    /* One over is over; the sum saturates instead of wrapping. */
    c.fd_limit = egm__pool_limits_fds_needed(&c) - 1;
    assert_int_equal(egm__pool_limits_check_fds(&c), EGM_ERR_CONFIG);
    c.chunks = UINT64_MAX;
    assert_int_equal(egm__pool_limits_fds_needed(&c), UINT64_MAX);
    assert_int_equal(egm__pool_limits_check_fds(&c), EGM_ERR_CONFIG);
}

/* The running test's temporary directory (make_tmpdir): removed by
 * teardown_tmpdir with everything in it, whether the test got to its end or
 * not. */
static char tmpdir[64];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/egm-limits-XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    return remove(path);
}

/* 0 when tmpdir is gone (or was never made). */
static int remove_tree(void)
{
    if (tmpdir[0] == '\0')
        return 0;
    if (nftw(tmpdir, remove_entry, 8, FTW_DEPTH | FTW_PHYS) != 0)
        return -1;
    tmpdir[0] = '\0';
    return 0;
}

/* The directory goes first: the allocation check fails by a cmocka assert,
 * which does not come back. */
static int teardown_tmpdir(void **state)
{
    int removed = remove_tree() == 0;
    int rc = egm_test_teardown_alloc(state);
    return removed ? rc : -1;
}

static void test_read_meminfo_forms(void **state)
{
    (void)state;
    char path[128];
    uint64_t v = 0;
    make_tmpdir();
    snprintf(path, sizeof(path), "%s/meminfo", tmpdir);
    write_file(path, "MemTotal:       131961788 kB\n"
                     "MemFree:        130628400 kB\n"
                     "MemAvailable:   131435168 kB\n"
                     "HugePages_Total:       0\n");
    assert_int_equal(egm__pool_limits_read_meminfo(path, "MemAvailable", &v), EGM_OK);
    assert_int_equal(v, 131435168ull * 1024);
    assert_int_equal(egm__pool_limits_read_meminfo(path, "MemFree", &v), EGM_OK);
    assert_int_equal(v, 130628400ull * 1024);
    /* A count without unit is taken as it is. */
    assert_int_equal(egm__pool_limits_read_meminfo(path, "HugePages_Total", &v), EGM_OK);
    assert_int_equal(v, 0);
    /* "Free" is not "MemFree": whole names only. */
    assert_int_equal(egm__pool_limits_read_meminfo(path, "Free", &v), EGM_ERR_IO);
    assert_int_equal(egm__pool_limits_read_meminfo(path, "Cached", &v), EGM_ERR_IO);
    assert_non_null(strstr(egm_last_error(), "no Cached line"));

    write_file(path, "Node 1 MemTotal:       4811728 kB\n"
                     "Node 1 MemFree:         3478192 kB\n"
                     "Node 1 Inactive(file):   947868 kB\n");
    assert_int_equal(egm__pool_limits_read_meminfo(path, "MemFree", &v), EGM_OK);
    assert_int_equal(v, 3478192ull * 1024);
    assert_int_equal(egm__pool_limits_read_meminfo(path, "Inactive(file)", &v), EGM_OK);
    assert_int_equal(v, 947868ull * 1024);

    write_file(path, "MemAvailable: lots kB\n");
    assert_int_equal(egm__pool_limits_read_meminfo(path, "MemAvailable", &v), EGM_ERR_IO);
    assert_non_null(strstr(egm_last_error(), "malformed"));
    write_file(path, "MemAvailable: 99999999999999999999 kB\n");
    assert_int_equal(egm__pool_limits_read_meminfo(path, "MemAvailable", &v), EGM_ERR_IO);
    assert_int_equal(remove_tree(), 0);
    assert_int_equal(egm__pool_limits_read_meminfo(path, "MemAvailable", &v), EGM_ERR_IO);
}

static void write_node(int node, uint64_t total_kb, uint64_t free_kb, uint64_t inactive_kb)
{
    char path[128], text[256];
    snprintf(path, sizeof(path), "%s/nodes/node%d", tmpdir, node);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/nodes/node%d/meminfo", tmpdir, node);
    snprintf(text, sizeof(text),
             "Node %d MemTotal: %llu kB\nNode %d MemFree: %llu kB\n"
             "Node %d Inactive(file): %llu kB\n",
             node, (unsigned long long)total_kb, node, (unsigned long long)free_kb, node,
             (unsigned long long)inactive_kb);
    write_file(path, text);
}

static void test_node_available(void **state)
{
    (void)state;
    char root[128], host[128];
    make_tmpdir();
    snprintf(root, sizeof(root), "%s/nodes", tmpdir);
    snprintf(host, sizeof(host), "%s/meminfo", tmpdir);
    assert_int_equal(mkdir(root, 0700), 0);
    write_node(0, 1000000, 600000, 100000);
    write_node(1, 1000000, 200000, 50000);
    write_file(host, "MemTotal: 2000000 kB\nMemAvailable: 900000 kB\n");
    /* MemFree + Inactive(file) of the node. */
    assert_int_equal(egm__pool_limits_node_available_in(root, host, 0), 700000ull * 1024);
    assert_int_equal(egm__pool_limits_node_available_in(root, host, 1), 250000ull * 1024);
    assert_int_equal(egm__pool_limits_node_available_in(root, host, 2), EGM_POOL_LIMITS_UNKNOWN);
    assert_int_equal(egm__pool_limits_node_available_in(root, host, -1), EGM_POOL_LIMITS_UNKNOWN);
    /* The H200 VM: one node of 4.6 GiB on a 126 GiB host (memory hot-added to
     * the node as it is used): its figures are not a limit. */
    write_file(host, "MemTotal: 131961788 kB\n");
    assert_int_equal(egm__pool_limits_node_available_in(root, host, 0), EGM_POOL_LIMITS_UNKNOWN);
}

static void test_fds_open_counts_this_process(void **state)
{
    (void)state;
    uint64_t before = egm__pool_limits_fds_open();
    /* egm_test_count_fds counts its own directory descriptor too. */
    assert_int_equal(before, (uint64_t)egm_test_count_fds() - 1);
    int fd = dup(0);
    assert_true(fd >= 0);
    assert_int_equal(egm__pool_limits_fds_open(), before + 1);
    close(fd);
}

static void test_fd_limit_raises_soft_to_hard(void **state)
{
    (void)state;
    struct rlimit saved, rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    if (saved.rlim_max == RLIM_INFINITY || saved.rlim_max < 256)
        EGM_SKIP("RLIMIT_NOFILE hard limit %llu: nothing to raise to",
                 (unsigned long long)saved.rlim_max);
    rl = saved;
    rl.rlim_cur = 128;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);

    /* Within the soft limit: left as it is. */
    assert_int_equal(egm__pool_limits_fd_limit(100), 128);
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_int_equal(rl.rlim_cur, 128);
    /* Above it: raised to the hard limit, which is answered. */
    assert_int_equal(egm__pool_limits_fd_limit(200), saved.rlim_max);
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_int_equal(rl.rlim_cur, saved.rlim_max);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

/* The host pool refuses before it creates anything: no descriptor opened. */
static void test_host_pool_refuses_before_allocating(void **state)
{
    (void)state;
    uint64_t avail = egm__pool_limits_host_available();
    if (avail == EGM_POOL_LIMITS_UNKNOWN)
        EGM_SKIP("no MemAvailable in /proc/meminfo");
    egm_host_pool_t *pool = NULL;
    int fds = egm_test_count_fds();
    uint64_t over = (avail / 4096 + 1024) * 4096;
    assert_int_equal(egm__host_pool_create(over, 1ull << 40, 0, &pool), EGM_ERR_CONFIG);
    assert_null(pool);
    assert_non_null(strstr(egm_last_error(), "global_segment_size"));
    assert_non_null(strstr(egm_last_error(), "MemAvailable"));
    assert_int_equal(egm_test_count_fds(), fds);
    assert_int_equal(egm__host_pool_check(over, 1ull << 40, 0, NULL), EGM_ERR_CONFIG);
    /* With overcommit the check passes (nothing created here: the pool would
     * be sparse, but a test allocates nothing large). */
    uint64_t chunks = 0;
    assert_int_equal(egm__host_pool_check(over, 1ull << 40, 1, &chunks), EGM_OK);
    assert_int_equal(chunks, over / (1ull << 40) + (over % (1ull << 40) != 0));

    /* Descriptors: more chunks than the soft and hard limit allow. */
    struct rlimit saved, rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    if (saved.rlim_max == RLIM_INFINITY || saved.rlim_max > (1u << 20))
        EGM_SKIP("RLIMIT_NOFILE hard limit %llu is too large to pass with small chunks",
                 (unsigned long long)saved.rlim_max);
    uint64_t n = (uint64_t)saved.rlim_max + 1;
    assert_int_equal(egm__host_pool_create(n * 4096, 4096, 1, &pool), EGM_ERR_CONFIG);
    assert_null(pool);
    assert_non_null(strstr(egm_last_error(), "file descriptors"));
    assert_non_null(strstr(egm_last_error(), "(ulimit -n)"));
    assert_int_equal(egm_test_count_fds(), fds);
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_memory_within_available_is_ok, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_memory_above_available_is_refused,
                                        egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_memory_of_a_node_names_it, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_overcommit_accepts_memory_and_says_so,
                                        egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_fds_within_limit_are_ok, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_fds_above_limit_are_refused, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_read_meminfo_forms, egm_test_setup_alloc,
                                        teardown_tmpdir),
        cmocka_unit_test_setup_teardown(test_node_available, egm_test_setup_alloc, teardown_tmpdir),
        cmocka_unit_test_setup_teardown(test_fds_open_counts_this_process, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_fd_limit_raises_soft_to_hard, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_host_pool_refuses_before_allocating,
                                        egm_test_setup_alloc, egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
