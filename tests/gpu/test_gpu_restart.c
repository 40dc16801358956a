/* GPU suite (label gpu; exit 77 without a CUDA driver): a provider with a
 * HOST_NUMA pool dies (SIGKILL) and a new one starts with the same
 * configuration. A client that mapped the old pool must never be served from
 * that mapping: old keys answer not found, new objects round-trip exactly, and
 * the new pool is imported under its new segment id. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <egmstore/egmstore.h>
#include "client/client_int.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/process.h"
#include "cuda/driver.h"
#include "rpc/proto_util.h"
#include "support/cluster.h"
#include "support/gpu_util.h"

#define LEN (1u << 20)

static const egm_cuda_api_t *cu;

static int fail(const char *what, egm_status_t status)
{
    fprintf(stderr, "test_gpu_restart: %s: %s (%s)\n", what, egm_status_string(status),
            egm_last_error());
    printf("test_gpu_restart: 0 passed, 1 failed\n");
    return 1;
}

static int wait_segments(egm_client_t *client, size_t want)
{
    uint64_t deadline = egm__now_ms() + 30000;
    while (egm_test_segment_count(client) != want && egm__now_ms() < deadline)
        egm__sleep_ms(100);
    return egm_test_segment_count(client) == want ? 0 : -1;
}

static egm_status_t put_pattern(egm_client_t *client, egm_cu_deviceptr_t hbm, unsigned char *host,
                                const char *key, unsigned seed)
{
    egm_test_fill(host, LEN, seed);
    egm_status_t st = egm__cuda_check(cu->cuMemcpy(hbm, (egm_cu_deviceptr_t)(uintptr_t)host, LEN),
                                      "cuMemcpy H2D");
    /* A copy from pageable memory may return before its DMA is done: the put
     * must find the buffer written (docs/gpu.md). */
    if (st == EGM_OK)
        st = egm__cuda_check(cu->cuCtxSynchronize(), "cuCtxSynchronize");
    return st != EGM_OK ? st : egm_put_from(client, key, (void *)(uintptr_t)hbm, LEN, NULL);
}

/* Get into HBM, copy back, compare with the pattern of seed. */
static egm_status_t get_check(egm_client_t *client, egm_cu_deviceptr_t hbm, unsigned char *host,
                              const char *key, unsigned seed)
{
    size_t got = 0;
    cu->cuMemsetD8(hbm, 0, LEN);
    egm_status_t st = egm_get_into(client, key, (void *)(uintptr_t)hbm, LEN, &got);
    if (st != EGM_OK)
        return st;
    unsigned char *want = malloc(LEN);
    st = egm__cuda_check(cu->cuMemcpy((egm_cu_deviceptr_t)(uintptr_t)host, hbm, LEN), "D2H");
    if (st == EGM_OK) {
        egm_test_fill(want, LEN, seed);
        if (got != LEN || memcmp(host, want, LEN) != 0)
            st = egm__set_error(EGM_ERR_TRANSFER, "%s: bytes differ", key);
    }
    free(want);
    return st;
}

int main(void)
{
    int load = egm_test_gpu_load("test_gpu_restart", &cu);
    if (load != 0)
        return load;
    egm_test_cluster_t cluster;
    const char *master_flags[] = {"--client-ttl", "2", NULL};
    const char *pool[] = {"--pool-memory", "host_numa", "--max-mr-size", "512MiB", NULL};
    if (egm_test_start_master(&cluster, master_flags) != 0)
        return fail("master", EGM_ERR_UNREACHABLE);
    int a = egm_test_start_provider(&cluster, "512MiB", pool);
    if (a < 0 || egm__cuda_use_device(0) != EGM_OK)
        return fail("provider A", EGM_ERR_UNREACHABLE);
    const char *pairs[] = {"ping_interval_ms=200", NULL};
    egm_client_t *client = egm_test_client(&cluster, "nvlink", pairs);
    egm_cu_deviceptr_t hbm = 0;
    unsigned char *host = malloc(LEN);
    egm_status_t st = EGM_OK;
    int rc = 1;
    if (client == NULL || host == NULL ||
        (st = egm__cuda_check(cu->cuMemAlloc(&hbm, LEN), "cuMemAlloc")) != EGM_OK ||
        (st = egm_register_buffer(client, (void *)(uintptr_t)hbm, LEN)) != EGM_OK) {
        fail("client", st);
        goto out;
    }
    if ((st = put_pattern(client, hbm, host, "before", 1)) != EGM_OK ||
        (st = get_check(client, hbm, host, "before", 1)) != EGM_OK) {
        fail("before restart", st);
        goto out;
    }
    egm_te_stats_t s1, s2;
    egm__te_stats(client->te, &s1);

    /* The provider dies without unmounting; the master expires it; a new one starts. */
    egm__process_signal(&cluster.providers[a], SIGKILL);
    egm__process_wait(&cluster.providers[a], 10000, NULL);
    if (wait_segments(client, 0) != 0 || egm_test_start_provider(&cluster, "512MiB", pool) < 0 ||
        wait_segments(client, 1) != 0) {
        fail("restart", EGM_ERR_TIMEOUT);
        goto out;
    }
    egm__sleep_ms(600); /* a few pings: the client hears that the old id retired */
    st = get_check(client, hbm, host, "before", 1);
    if (st != EGM_ERR_NOT_FOUND) {
        fail("old key after restart must be not found", st == EGM_OK ? EGM_ERR_INTERNAL : st);
        goto out;
    }
    if ((st = put_pattern(client, hbm, host, "after", 2)) != EGM_OK ||
        (st = get_check(client, hbm, host, "after", 2)) != EGM_OK) {
        fail("after restart", st);
        goto out;
    }
    egm__te_stats(client->te, &s2);
    printf("restart: imports %" PRIu64 " -> %" PRIu64 ", nvlink mappings live %" PRIu64
           " -> %" PRIu64 "\n",
           s1.nvlink_imports_total, s2.nvlink_imports_total, s1.nvlink_mappings_live,
           s2.nvlink_mappings_live);
    /* The new pool was imported under its new id; the old mapping is gone. */
    if (s2.nvlink_imports_total != s1.nvlink_imports_total + 1 || s2.nvlink_mappings_live != 1) {
        fail("mapping cache", EGM_ERR_INTERNAL);
        goto out;
    }
    rc = 0;
    printf("test_gpu_restart: 1 passed, 0 failed\n");
out:
    if (client != NULL && hbm != 0)
        egm_unregister_buffer(client, (void *)(uintptr_t)hbm);
    egm_client_destroy(client);
    egm_test_cluster_stop(&cluster);
    free(host);
    return rc;
}
