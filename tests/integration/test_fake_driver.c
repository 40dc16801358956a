/* Integration: the fake CUDA driver as libcuda.so.1 (tests/fake_libcuda) in real
 * processes, found through LD_LIBRARY_PATH=$EGM_FAKE_CUDA_DIR. A master and a
 * provider whose pool is HOST_NUMA VMM memory of the fake (fabric handles not
 * permitted, as on the H200 without IMEX, so segments travel as posix_fd
 * handles through the fd broker). The CLI round-trips bytes through that pool;
 * client processes (this executable re-run with --client) put from and get into
 * fake GPU memory over nvlink; every such process, and the provider after
 * SIGTERM, leaves no live CUDA object (EGM_FAKE_CUDA_REPORT). An injected CUDA
 * failure fails provider setup with its error name and leaves nothing behind;
 * malformed fake settings abort the process. */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "common/clock.h"
#include "common/process.h"
#include "common/slab_log.h"
#include "cuda/driver.h"
#include "support/cluster.h"
#include "support/fake_env.h"
#include "support/testutil.h"
#include "te/te.h"

#define CHILD_TIMEOUT_MS 60000
#define GPU_LEN ((size_t)(1u << 20) + 3)
#define CLI_LEN ((size_t)300 * 1024 + 17)

static egm_test_cluster_t cluster;
static char report_dir[64];
static int provider = -1;

/* ---- child: a library client with its buffer in fake GPU memory ---------- */

static int client_fail(const char *what, egm_status_t status)
{
    fprintf(stderr, "fake-driver client: %s: %s (%s)\n", what, egm_status_string(status),
            egm_last_error());
    return 1;
}

/* n single puts of 4 KiB from one registered host buffer (keys KEY-0..),
 * printing what they went through. */
static int host_puts(egm_client_t *client, const char *key, unsigned seed, size_t n)
{
    enum { LEN = 4096 };
    unsigned char *buf = malloc(LEN);
    egm_status_t st = buf != NULL ? egm_register_buffer(client, buf, LEN) : EGM_ERR_NO_MEMORY;
    if (st != EGM_OK) {
        client_fail("host buffer", st);
        free(buf);
        return 1;
    }
    egm_test_fill(buf, LEN, seed);
    for (size_t i = 0; i < n && st == EGM_OK; i++) {
        char k[128];
        snprintf(k, sizeof(k), "%s-%zu", key, i);
        st = egm_put_from(client, k, buf, LEN, NULL);
    }
    if (st != EGM_OK)
        client_fail("host put", st);
    egm_te_stats_t stats;
    egm__te_stats(client->te, &stats);
    printf("shm_bytes_written %" PRIu64 "\n", stats.bytes_written);
    egm_unregister_buffer(client, buf);
    free(buf);
    return st != EGM_OK;
}

/* --client MASTER PROTOCOL put|get KEY SEED LEN: exit 0 when the put succeeded
 * or the get returned exactly the bytes of SEED; prints the nvlink copy count.
 * --client MASTER PROTOCOL hostputs KEY SEED N: host_puts. */
static int client_main(int argc, char **argv)
{
    const egm_cuda_api_t *cu = NULL;
    egm_config_t *config = NULL;
    egm_client_t *client = NULL;
    egm_cu_deviceptr_t gpu = 0;
    egm_status_t st;
    int rc = 1;

    if (argc != 8)
        return 2;
    const char *op = argv[4], *key = argv[5];
    unsigned seed = (unsigned)strtoul(argv[6], NULL, 10);
    size_t len = (size_t)strtoull(argv[7], NULL, 10);
    unsigned char *host = malloc(len), *want = malloc(len);
    if (host == NULL || want == NULL)
        goto out;
    egm_test_fill(want, len, seed);
    if ((st = egm__cuda_load(&cu)) != EGM_OK || (st = egm__cuda_use_device(0)) != EGM_OK) {
        client_fail("cuda", st);
        goto out;
    }
    if ((st = egm_config_create(&config)) != EGM_OK ||
        (st = egm_config_set(config, "master_server_addr", argv[2])) != EGM_OK ||
        (st = egm_config_set(config, "protocol", argv[3])) != EGM_OK ||
        (st = egm_config_set(config, "local_hostname", "127.0.0.1")) != EGM_OK ||
        (st = egm_config_load_env(config)) != EGM_OK || /* EGMSTORE_AUTH_TOKEN */
        (st = egm_client_create(config, &client)) != EGM_OK) {
        client_fail("client", st);
        goto out;
    }
    if (strcmp(op, "hostputs") == 0) { /* len: how many */
        rc = host_puts(client, key, seed, len);
        goto out;
    }
    /* Setup returned with the pool mapped; registering the buffer readied its
     * GPU's copies: the first transfer does neither. */
    egm_te_stats_t stats;
    egm__te_stats(client->te, &stats);
    printf("mapped_at_setup %" PRIu64 "\n", stats.nvlink_mappings_live);
    if ((st = egm__cuda_check(cu->cuMemAlloc(&gpu, len), "cuMemAlloc")) != EGM_OK ||
        (st = egm_register_buffer(client, (void *)(uintptr_t)gpu, len)) != EGM_OK) {
        client_fail("gpu buffer", st);
        goto out;
    }
    egm__te_stats(client->te, &stats);
    printf("copy_devices %" PRIu64 " mapped %" PRIu64 "\n", stats.copy_devices,
           stats.nvlink_mappings_live);
    if (strcmp(op, "put") == 0) {
        st = egm__cuda_check(cu->cuMemcpy(gpu, (egm_cu_deviceptr_t)(uintptr_t)want, len), "H2D");
        if (st == EGM_OK)
            st = egm_put_from(client, key, (void *)(uintptr_t)gpu, len, NULL);
        if (st != EGM_OK)
            client_fail("put", st);
        rc = st != EGM_OK;
    } else {
        size_t got = 0;
        st = egm__cuda_check(cu->cuMemsetD8(gpu, 0, len), "cuMemsetD8");
        if (st == EGM_OK)
            st = egm_get_into(client, key, (void *)(uintptr_t)gpu, len, &got);
        if (st == EGM_OK)
            st =
                egm__cuda_check(cu->cuMemcpy((egm_cu_deviceptr_t)(uintptr_t)host, gpu, len), "D2H");
        if (st != EGM_OK)
            client_fail("get", st);
        else if (got != len || memcmp(host, want, len) != 0)
            fprintf(stderr, "fake-driver client: %s: %zu bytes back, content differs\n", key, got);
        else
            rc = 0;
    }
    egm__te_stats(client->te, &stats);
    printf("nvlink_copies %" PRIu64 "\n", stats.nvlink_copies);
    egm_unregister_buffer(client, (void *)(uintptr_t)gpu);
out:
    if (gpu != 0)
        cu->cuMemFree(gpu);
    egm_client_destroy(client);
    egm_config_destroy(config);
    free(host);
    free(want);
    return rc;
}

/* ---- parent helpers ------------------------------------------------------ */

/* The process that wrote `path` used the fake and released every CUDA object. */
static void assert_nothing_live(const char *path)
{
    const char *problem = egm_test_fake_report_problem(path);
    if (problem != NULL)
        fail_msg("%s", problem);
}

static void pid_report(char *path, size_t len, pid_t pid)
{
    snprintf(path, len, "%s/report-%d", report_dir, (int)pid);
}

/* What the last client process printed before its first transfer. */
static unsigned long long last_mapped_at_setup, last_copy_devices;
static char last_host_puts[256]; /* hostputs: what they went through */

/* Runs this executable as a client process; its nvlink copy count goes to
 * *copies_p and its report path to report. Returns the exit code. */
static int run_client(const egm_test_cluster_t *c, const char *protocol, const char *op,
                      const char *key, unsigned seed, size_t len, unsigned long long *copies_p,
                      char *report, size_t report_len)
{
    char seed_text[16], len_text[32], line[256];
    snprintf(seed_text, sizeof(seed_text), "%u", seed);
    snprintf(len_text, sizeof(len_text), "%zu", len);
    const char *argv[] = {egm__process_self_exe(),
                          "--client",
                          c->master_addr,
                          protocol,
                          op,
                          key,
                          seed_text,
                          len_text,
                          NULL};
    egm_process_t child;
    int code = -1;

    *copies_p = 0;
    last_mapped_at_setup = last_copy_devices = 0;
    if (egm__process_spawn((char *const *)argv, EGM_PROCESS_STDOUT_CAPTURE, &child) != EGM_OK)
        return -1;
    pid_report(report, report_len, child.pid);
    uint64_t deadline = egm__now_ms() + CHILD_TIMEOUT_MS;
    while (egm__now_ms() < deadline &&
           egm__process_read_line(&child, line, sizeof(line), CHILD_TIMEOUT_MS) == EGM_OK) {
        sscanf(line, "nvlink_copies %llu", copies_p);
        sscanf(line, "mapped_at_setup %llu", &last_mapped_at_setup);
        sscanf(line, "copy_devices %llu", &last_copy_devices);
        if (strncmp(line, "shm_bytes_written ", 18) == 0)
            snprintf(last_host_puts, sizeof(last_host_puts), "%s", line);
    }
    if (egm__process_wait(&child, 10000, &code) != EGM_OK)
        code = -1;
    egm__process_cleanup(&child);
    return code;
}

/* `egmstore get KEY FILE` and compare with the bytes of seed. */
static void cli_get_check(const char *key, const char *protocol, unsigned seed, size_t len)
{
    char path[128], out[4096];
    unsigned char *want = malloc(len), *back = malloc(len + 1);
    assert_non_null(want);
    assert_non_null(back);
    snprintf(path, sizeof(path), "%s/get.bin", report_dir);
    const char *get[] = {"get", key, path, "--protocol", protocol, NULL};
    int code = egm_test_cli(&cluster, get, NULL, 0, out, sizeof(out));
    if (code != 0)
        fail_msg("get %s: exit %d: %s", key, code, out);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(back, 1, len + 1, f), len);
    fclose(f);
    unlink(path);
    egm_test_fill(want, len, seed);
    assert_memory_equal(back, want, len);
    free(want);
    free(back);
}

/* ---- tests ---------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    if (egm_test_start_master(&cluster, NULL) != 0)
        return -1;
    const char *pool[] = {"--pool-memory", "host_numa", "--max-mr-size", "16MiB", NULL};
    provider = egm_test_start_provider(&cluster, "64MiB", pool);
    return provider < 0 ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    egm_test_cluster_stop(&cluster);
    return 0;
}

/* A host buffer reaches the VMM pool over tcp (auto); nvlink refuses host memory
 * (the CLI's buffer). */
static void test_cli_put_get_through_vmm_pool(void **state)
{
    (void)state;
    char out[4096];
    unsigned char *data = malloc(CLI_LEN);
    assert_non_null(data);
    egm_test_fill(data, CLI_LEN, 11);
    const char *put[] = {"put", "cli/a", "-", "--protocol", "auto", NULL};
    int code = egm_test_cli(&cluster, put, data, CLI_LEN, out, sizeof(out));
    if (code != 0)
        fail_msg("put: exit %d: %s", code, out);
    cli_get_check("cli/a", "auto", 11, CLI_LEN);

    const char *nv[] = {"get", "cli/a", "-", "--protocol", "nvlink", NULL};
    assert_int_not_equal(egm_test_cli(&cluster, nv, NULL, 0, out, sizeof(out)), 0);
    free(data);
}

/* GPU memory of one process -> pool -> GPU memory of another, over nvlink;
 * the same bytes read by the CLI over tcp; and CLI bytes into GPU memory. */
static void test_gpu_clients_over_nvlink(void **state)
{
    (void)state;
    char report[256], out[4096];
    unsigned long long copies = 0;

    assert_int_equal(run_client(&cluster, "nvlink", "put", "gpu/a", 21, GPU_LEN, &copies, report,
                                sizeof(report)),
                     0);
    assert_true(copies >= 1);
    /* Cold start: setup mapped the provider's 4 segments (64 MiB in 16 MiB
     * chunks) and register_buffer readied GPU 0's copies. */
    assert_int_equal(last_mapped_at_setup, 4);
    assert_int_equal(last_copy_devices, 1);
    assert_nothing_live(report);
    assert_true(egm_test_fake_report_value(report, "bytes_copied") >= (long long)GPU_LEN);

    assert_int_equal(run_client(&cluster, "nvlink", "get", "gpu/a", 21, GPU_LEN, &copies, report,
                                sizeof(report)),
                     0);
    assert_true(copies >= 1);
    assert_nothing_live(report);
    /* auto picks nvlink for a GPU buffer */
    assert_int_equal(
        run_client(&cluster, "auto", "get", "gpu/a", 21, GPU_LEN, &copies, report, sizeof(report)),
        0);
    assert_true(copies >= 1);
    assert_nothing_live(report);
    /* a wrong seed must fail: the comparison is real */
    assert_int_equal(run_client(&cluster, "nvlink", "get", "gpu/a", 22, GPU_LEN, &copies, report,
                                sizeof(report)),
                     1);

    cli_get_check("gpu/a", "tcp", 21, GPU_LEN);

    unsigned char *data = malloc(GPU_LEN);
    assert_non_null(data);
    egm_test_fill(data, GPU_LEN, 23);
    const char *put[] = {"put", "cli/b", "-", NULL};
    int code = egm_test_cli(&cluster, put, data, GPU_LEN, out, sizeof(out));
    if (code != 0)
        fail_msg("put: exit %d: %s", code, out);
    assert_int_equal(run_client(&cluster, "nvlink", "get", "cli/b", 23, GPU_LEN, &copies, report,
                                sizeof(report)),
                     0);
    assert_true(copies >= 1);
    assert_nothing_live(report);
    free(data);
}

/* Single puts from a registered host buffer over shared memory ask the
 * driver nothing per put: neither where their bytes come from (the registry
 * knows) nor where their slab-log entries do (a buffer of the client's own,
 * egm_te_op_t.local_is_host; docs/ha.md "Cost", runs 22-23). The queries of a
 * process of 1 put and one of 41 must be the same: setup and registration
 * ask, the puts may not. */
static void test_host_puts_ask_the_driver_nothing(void **state)
{
    (void)state;
    /* a pool of host memory, reached over shared memory (the VMM pool is not) */
    egm_test_cluster_t host_cluster;
    egm_test_cluster_init(&host_cluster);
    assert_int_equal(egm_test_start_master(&host_cluster, NULL), 0);
    assert_true(egm_test_start_provider(&host_cluster, "64MiB", NULL) >= 0);
    char report[256];
    unsigned long long copies = 0;
    long long queries[2];
    static const size_t puts[2] = {1, 41};

    for (int i = 0; i < 2; i++) {
        char key[32];
        snprintf(key, sizeof(key), "host/%zu", puts[i]);
        last_host_puts[0] = '\0';
        assert_int_equal(run_client(&host_cluster, "shm", "hostputs", key, 31, puts[i], &copies,
                                    report, sizeof(report)),
                         0);
        fprintf(stderr, "%zu host puts: %s\n", puts[i], last_host_puts);
        /* each put wrote its bytes and its slab-log entry over shm */
        unsigned long long written = 0;
        assert_int_equal(sscanf(last_host_puts, "shm_bytes_written %llu", &written), 1);
        assert_int_equal(written, puts[i] * (4096 + EGM_SLAB_LOG_ENTRY));
        assert_nothing_live(report);
        queries[i] = egm_test_fake_report_value(report, "pointer_queries");
        assert_true(queries[i] > 0); /* the count sees the registration's */
    }
    egm_test_cluster_stop(&host_cluster);
    if (queries[1] != queries[0])
        fail_msg("41 puts asked the driver %lld times, 1 put %lld: %lld per put", queries[1],
                 queries[0], (queries[1] - queries[0]) / 40);
}

/* EGM_FAKE_CUDA_FAIL reaches the driver: a provider whose third cuMemCreate
 * fails (the first is the refused fabric attempt) exits with the CUDA error name
 * and rolls every allocation back. cuMemCreate because only pool setup calls it:
 * the nth call of a function the prewarm threads also call (cuMemMap, importing
 * the other provider's segments) would depend on thread timing (prewarm is off
 * here besides, so that the cleanup calls below are the rollback's only).
 * With a second fault on the rollback: a release that fails once is kept and
 * retried before the process exits, leaving nothing; one that fails for good
 * leaves the memory to the process's exit, said so, and never frees what it
 * could not release. */
static void test_injected_failure_rolls_back(void **state)
{
    (void)state;
    static const struct {
        const char *fail;
        const char *says; /* besides the first error */
        int leaves;       /* the memory is abandoned to the exit */
    } runs[] = {
        {"cuMemCreate:3:CUDA_ERROR_OUT_OF_MEMORY", NULL, 0},
        {"cuMemCreate:3:CUDA_ERROR_OUT_OF_MEMORY,cuMemRelease:1:CUDA_ERROR_UNKNOWN",
         "kept for a retry", 0},
        {"cuMemCreate:3:CUDA_ERROR_OUT_OF_MEMORY,cuMemUnmap:1:CUDA_ERROR_UNKNOWN",
         "kept for a retry", 0},
        {"cuMemCreate:3:CUDA_ERROR_OUT_OF_MEMORY,cuMemAddressFree:0:CUDA_ERROR_UNKNOWN",
         "process's exit", 1},
    };
    size_t segments = egm_test_cluster_segments(&cluster);
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        char report[256], out[8192];
        snprintf(report, sizeof(report), "%s/failed-provider-%zu", report_dir, i);
        const char *saved = getenv("EGM_FAKE_CUDA_REPORT");
        char *keep = saved ? strdup(saved) : NULL;
        setenv("EGM_FAKE_CUDA_REPORT", report, 1);
        setenv("EGM_FAKE_CUDA_FAIL", runs[i].fail, 1);
        const char *args[] = {"provider",  "--pool-memory",
                              "host_numa", "--max-mr-size",
                              "16MiB",     "--global-segment-size",
                              "64MiB",     "--local-hostname",
                              "127.0.0.1", "--prewarm",
                              "false",     NULL};
        int code = egm_test_cli(&cluster, args, NULL, 0, out, sizeof(out));
        unsetenv("EGM_FAKE_CUDA_FAIL");
        if (keep != NULL)
            setenv("EGM_FAKE_CUDA_REPORT", keep, 1);
        else
            unsetenv("EGM_FAKE_CUDA_REPORT");
        free(keep);
        if (code == 0 || code >= 128)
            fail_msg("%s: exit %d (expected a clean failure): %s", runs[i].fail, code, out);
        if (strstr(out, "cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY") == NULL)
            fail_msg("%s: the error does not name the first failed call and its CUDA error: %s",
                     runs[i].fail, out);
        if (runs[i].says != NULL && strstr(out, runs[i].says) == NULL)
            fail_msg("%s: the output does not say \"%s\": %s", runs[i].fail, runs[i].says, out);
        if (!runs[i].leaves) {
            assert_nothing_live(report);
        } else if (egm_test_fake_report_value(report, "allocations") <= 0) {
            fail_msg("%s: the memory whose release failed for good was not kept: %s", runs[i].fail,
                     out);
        }
        assert_int_equal(egm_test_cluster_segments(&cluster), segments); /* nothing published */
    }
}

/* A typo in a fake setting must abort, not run with defaults. */
static void test_bad_settings_abort(void **state)
{
    (void)state;
    static const struct {
        const char *name, *value;
    } bad[] = {
        {"EGM_FAKE_CUDA_FAIL", "cuMemCreat:1:2"},
        {"EGM_FAKE_CUDA_FAIL", "cuMemCreate:x:2"},
        {"EGM_FAKE_CUDA_FAIL", "cuMemCreate:1:0"},
        {"EGM_FAKE_CUDA_FAIL", "cuMemCreate:1:2,"},
        {"EGM_FAKE_CUDA_FAIL", "cuMemCreate:1:CUDA_ERROR_NO_SUCH"},
        {"EGM_FAKE_CUDA_DEVICES", "17"},
        {"EGM_FAKE_CUDA_NUMA_NODES", "0"},
        {"EGM_FAKE_CUDA_GRANULARITY", "3000"},
        {"EGM_FAKE_CUDA_FABRIC", "no"},
    };
    char out[4096];
    const char *exist[] = {"exist", "some/key", NULL};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *saved = getenv(bad[i].name);
        char *keep = saved ? strdup(saved) : NULL;
        setenv(bad[i].name, bad[i].value, 1);
        int code = egm_test_cli(&cluster, exist, NULL, 0, out, sizeof(out));
        if (keep != NULL)
            setenv(bad[i].name, keep, 1);
        else
            unsetenv(bad[i].name);
        free(keep);
        if (code != 128 + SIGABRT || strstr(out, bad[i].name) == NULL)
            fail_msg("%s=%s: exit %d, expected an abort naming it: %s", bad[i].name, bad[i].value,
                     code, out);
    }
    /* The same command with valid settings runs (the key is absent: exit 1). */
    assert_int_equal(egm_test_cli(&cluster, exist, NULL, 0, out, sizeof(out)), 1);
}

/* Runs last: SIGTERM, and the provider released every CUDA object. */
static void test_provider_sigterm_leaves_nothing(void **state)
{
    (void)state;
    char report[256];
    egm_process_t *proc = &cluster.providers[provider];
    pid_report(report, sizeof(report), proc->pid);
    int code = -1;
    assert_int_equal(egm__process_signal(proc, SIGTERM), EGM_OK);
    assert_int_equal(egm__process_wait(proc, 15000, &code), EGM_OK);
    assert_int_equal(code, 0);
    assert_nothing_live(report);
}

/* A cluster with a token (master, host_numa pool provider): GPU memory over
 * nvlink works for a client with the token, whose posix_fd handles come from
 * the fd socket after the token; a client without it is refused. */
static void test_nvlink_with_cluster_token(void **state)
{
    (void)state;
    static const char token[] = "fake-driver-cluster-token-51c2";
    char report[256], saved[sizeof(cluster.master_addr)];
    unsigned long long copies = 0;
    egm_test_cluster_t tc;
    const char *mflags[] = {"--auth-token", token, NULL};
    const char *pflags[] = {"--pool-memory", "host_numa", "--max-mr-size", "16MiB", "--auth-token",
                            token,           NULL};
    assert_int_equal(egm_test_start_master(&tc, mflags), 0);
    assert_true(egm_test_start_provider(&tc, "32MiB", pflags) >= 0);

    memcpy(saved, cluster.master_addr, sizeof(saved)); /* run_client talks to cluster's */
    memcpy(cluster.master_addr, tc.master_addr, sizeof(saved));
    assert_int_equal(setenv("EGMSTORE_AUTH_TOKEN", token, 1), 0);
    int put = run_client(&cluster, "nvlink", "put", "tok/a", 31, GPU_LEN, &copies, report,
                         sizeof(report));
    unsigned long long put_copies = copies;
    int get = run_client(&cluster, "nvlink", "get", "tok/a", 31, GPU_LEN, &copies, report,
                         sizeof(report));
    unsigned long long get_copies = copies;
    unsetenv("EGMSTORE_AUTH_TOKEN");
    int refused = run_client(&cluster, "nvlink", "get", "tok/a", 31, GPU_LEN, &copies, report,
                             sizeof(report));
    memcpy(cluster.master_addr, saved, sizeof(saved));
    egm_test_cluster_stop(&tc);

    assert_int_equal(put, 0);
    assert_true(put_copies >= 1);
    assert_int_equal(get, 0);
    assert_true(get_copies >= 1);
    assert_int_equal(refused, 1);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--client") == 0)
        return client_main(argc, argv);

    int rc = egm_test_fake_env("test_fake_driver", report_dir, sizeof(report_dir));
    if (rc != 0)
        return rc;

    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cli_put_get_through_vmm_pool, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_gpu_clients_over_nvlink, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_host_puts_ask_the_driver_nothing, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_nvlink_with_cluster_token, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_injected_failure_rolls_back, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_bad_settings_abort, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_provider_sigterm_leaves_nothing, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, setup, teardown); /* the report folder goes at exit */
}
