/* Integration: `egmstore provider` with an EGM Store pool, as real processes
 * on the fake CUDA driver (libcuda.so.1 shim: 4 GPUs over 2 NUMA nodes).
 * - --plan-only prints the plan and allocates nothing;
 * - the provider's /health is healthy and /metrics describe the pool once it
 *   is published (6 segments at the master); SIGTERM withdraws everything and
 *   the process leaves no CUDA object;
 * - an injected CUDA failure during setup: exit 1 naming the call and error,
 *   nothing published, nothing left;
 * - a host-pool provider's /health and /metrics (no GPU involved). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "common/process.h"
#include "support/cluster.h"
#include "support/fake_env.h"
#include "support/http_get.h"

static egm_test_cluster_t cluster;
static char report_dir[64];

static const char *const egm_flags[] = {
    "--enable-egm-store-pool", "true", "--max-mr-size", "4MiB", "--provider-http-port", "0", NULL};

static void assert_nothing_live(pid_t pid)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/report-%d", report_dir, (int)pid);
    const char *problem = egm_test_fake_report_problem(path);
    if (problem != NULL)
        fail_msg("%s", problem);
}

/* Stops provider i with SIGTERM; answers its exit code. */
static int stop_provider(int i)
{
    int code = -1;
    assert_int_equal(egm__process_signal(&cluster.providers[i], SIGTERM), EGM_OK);
    assert_int_equal(egm__process_wait(&cluster.providers[i], 30000, &code), EGM_OK);
    return code;
}

static void test_plan_only(void **state)
{
    (void)state;
    static char out[8192];
    const char *args[] = {"provider",
                          "--plan-only",
                          "--enable-egm-store-pool",
                          "true",
                          "--global-segment-size",
                          "22MiB",
                          "--max-mr-size",
                          "4MiB",
                          NULL};
    assert_int_equal(egm_test_cli(&cluster, args, NULL, 0, out, sizeof(out)), 0);
    /* 11 units of 2 MiB over nodes 0 and 1: 12 MiB (3 chunks) and 10 MiB (3). */
    assert_non_null(strstr(out, "EGM pool plan: 22 MiB of 22 MiB requested, alignment 2 MiB"));
    assert_non_null(strstr(out, "0      2 MiB        12 MiB              3  3 x 4 MiB"));
    assert_non_null(
        strstr(out, "1      2 MiB        10 MiB              3  2 x 4 MiB + 1 x 2 MiB"));
    assert_non_null(strstr(out, "nothing allocated"));
    assert_int_equal(egm_test_cluster_segments(&cluster), 0);

    /* Mistakes are usage errors (exit 2) naming the key. */
    const char *bad[] = {"provider", "--plan-only",      "--enable-egm-store-pool",
                         "true",     "--egm-numa-nodes", "0,,1",
                         NULL};
    assert_int_equal(egm_test_cli(&cluster, bad, NULL, 0, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "egm_numa_nodes"));
    const char *tiny[] = {"provider", "--plan-only",           "--enable-egm-store-pool",
                          "true",     "--global-segment-size", "3MiB",
                          NULL};
    assert_int_equal(egm_test_cli(&cluster, tiny, NULL, 0, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "global_segment_size"));
}

static void test_health_metrics_and_teardown(void **state)
{
    (void)state;
    static char body[65536];
    int p = egm_test_start_provider(&cluster, "24MiB", egm_flags);
    assert_true(p >= 0);
    assert_non_null(strstr(cluster.provider_ready[p], "6 segments, 24.0 MiB EGM pool"));
    unsigned port = egm_test_ready_http_port(cluster.provider_ready[p]);
    assert_true(port > 0);

    assert_int_equal(egm_test_http_get(port, "/health", body, sizeof(body)), 200);
    assert_non_null(strstr(body, "{\"status\":\"healthy\",\"code\":0}"));
    assert_int_equal(egm_test_http_get(port, "/metrics", body, sizeof(body)), 200);
    static const char *const want[] = {"\negm_client_health 0\n",
                                       "\negm_client_pool_egm 1\n",
                                       "\negm_client_pool_chunks 6\n",
                                       "\negm_client_pool_numa_nodes 2\n",
                                       "\negm_client_pool_capacity_bytes 25165824\n",
                                       "\negm_client_pool_cleanup_pending 0\n",
                                       NULL};
    for (const char *const *w = want; *w; w++) {
        if (strstr(body, *w) == NULL)
            fail_msg("/metrics lacks %s", *w);
    }
    assert_int_equal(egm_test_http_get(port, "/nope", body, sizeof(body)), 404);
    assert_int_equal(egm_test_cluster_segments(&cluster), 6);

    /* Objects through the pool from a CLI process (host memory, tcp/shm). */
    static char out[4096];
    const char *put[] = {"put", "egm/k", "-", NULL};
    assert_int_equal(egm_test_cli(&cluster, put, "payload", 7, out, sizeof(out)), 0);
    const char *get[] = {"get", "egm/k", "-", "--log-level", "error", NULL};
    assert_int_equal(egm_test_cli(&cluster, get, NULL, 0, out, sizeof(out)), 0);
    assert_string_equal(out, "payload");

    pid_t pid = cluster.providers[p].pid;
    assert_int_equal(stop_provider(p), 0);
    assert_int_equal(egm_test_cluster_segments(&cluster), 0);
    assert_nothing_live(pid);
}

static void test_setup_failure(void **state)
{
    (void)state;
    static char out[8192];
    /* The 4th cuMemCreate: the fabric attempt is the 1st, then chunks 0..2. */
    setenv("EGM_FAKE_CUDA_FAIL", "cuMemCreate:4:CUDA_ERROR_OUT_OF_MEMORY", 1);
    const char *args[] = {
        "provider", "--enable-egm-store-pool", "true",      "--global-segment-size",
        "24MiB",    "--max-mr-size",           "4MiB",      "--egm-setup-threads",
        "1",        "--local-hostname",        "127.0.0.1", NULL};
    int code = egm_test_cli(&cluster, args, NULL, 0, out, sizeof(out));
    unsetenv("EGM_FAKE_CUDA_FAIL");
    assert_int_equal(code, 1);
    assert_non_null(strstr(out, "cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY"));
    assert_non_null(strstr(out, "chunk 2 of 6"));
    assert_int_equal(egm_test_cluster_segments(&cluster), 0);
}

static void test_host_pool_health(void **state)
{
    (void)state;
    static char body[65536];
    const char *flags[] = {"--provider-http-port", "0", NULL};
    int p = egm_test_start_provider(&cluster, "8MiB", flags);
    assert_true(p >= 0);
    unsigned port = egm_test_ready_http_port(cluster.provider_ready[p]);
    assert_int_equal(egm_test_http_get(port, "/health", body, sizeof(body)), 200);
    assert_int_equal(egm_test_http_get(port, "/metrics", body, sizeof(body)), 200);
    assert_non_null(strstr(body, "\negm_client_pool_egm 0\n"));
    assert_non_null(strstr(body, "\negm_client_pool_capacity_bytes 8388608\n"));
    assert_int_equal(stop_provider(p), 0);
    /* A provider whose HTTP port is taken fails to start, naming the key. */
    static char out[4096];
    char port_text[16];
    int q = egm_test_start_provider(&cluster, "8MiB", flags);
    assert_true(q >= 0);
    snprintf(port_text, sizeof(port_text), "%u",
             egm_test_ready_http_port(cluster.provider_ready[q]));
    const char *args[] = {"provider", "--provider-http-port", port_text, NULL};
    assert_int_equal(egm_test_cli(&cluster, args, NULL, 0, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "provider_http_port"));
    assert_int_equal(stop_provider(q), 0);
}

static int group_setup(void **state)
{
    (void)state;
    setenv("EGM_FAKE_CUDA_DEVICES", "4", 1);
    setenv("EGM_FAKE_CUDA_NUMA_NODES", "2", 1);
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
    int rc = egm_test_fake_env("test_provider_egm", report_dir, sizeof(report_dir));
    if (rc != 0)
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_only),
        cmocka_unit_test(test_health_metrics_and_teardown),
        cmocka_unit_test(test_setup_failure),
        cmocka_unit_test(test_host_pool_health),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
