/* GPU suite (label gpu; exit 77 without a CUDA driver): the EGM Store pool on
 * the real driver. A provider process sets up an EGM pool (egm_numa_nodes=auto,
 * HOST_NUMA memory, 4 chunks on 4 threads); its /health turns healthy and its
 * /metrics describe the pool; this process puts from GPU0's HBM and gets into
 * the last GPU's HBM over nvlink, bytes verified there; SIGTERM withdraws the
 * pool (exit 0, nothing left at the master). --plan-only is printed first. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <egmstore/egmstore.h>
#include "client/client_int.h"
#include "common/process.h"
#include "cuda/driver.h"
#include "support/cluster.h"
#include "support/http_get.h"

#define SKIP 77
static const size_t sizes[] = {4096, 1 << 20, 64 << 20, 256 << 20};
static const egm_cuda_api_t *cu;

static int fail(const char *what)
{
    fprintf(stderr, "test_gpu_egm_pool: %s (%s)\n", what, egm_last_error());
    return 1;
}

static int hbm_fill(egm_cu_deviceptr_t ptr, size_t len, unsigned seed)
{
    unsigned char *host = malloc(len);
    if (host == NULL)
        return -1;
    egm_test_fill(host, len, seed);
    int rc = cu->cuMemcpy(ptr, (egm_cu_deviceptr_t)(uintptr_t)host, len) == EGM_CU_SUCCESS ? 0 : -1;
    free(host);
    return rc;
}

static int hbm_matches(egm_cu_deviceptr_t ptr, size_t len, unsigned seed)
{
    unsigned char *host = malloc(len), *want = malloc(len);
    int ok = host && want &&
             cu->cuMemcpy((egm_cu_deviceptr_t)(uintptr_t)host, ptr, len) == EGM_CU_SUCCESS;
    if (ok) {
        egm_test_fill(want, len, seed);
        ok = memcmp(host, want, len) == 0;
    }
    free(host);
    free(want);
    return ok;
}

static size_t master_segments(egm_client_t *client)
{
    Egm__ListSegmentsReply *reply = NULL;
    if (egm__client_list_segments(client, &reply) != EGM_OK)
        return (size_t)-1;
    size_t n = reply->n_segments;
    egm__rpc_msg_free(&reply->base);
    return n;
}

static int check_endpoints(unsigned port)
{
    static char body[64 * 1024];
    int code = egm_test_http_get(port, "/health", body, sizeof(body));
    printf("/health -> %d %s", code, body);
    if (code != 200 || strstr(body, "\"status\":\"healthy\"") == NULL)
        return fail("/health is not 200 healthy");
    code = egm_test_http_get(port, "/metrics", body, sizeof(body));
    const char *want[] = {"\negmstore_pool_egm 1\n", "\negmstore_pool_chunks 4\n",
                          "\negmstore_pool_capacity_bytes 2147483648\n", NULL};
    for (const char **w = want; *w; w++)
        if (code != 200 || strstr(body, *w) == NULL) {
            fprintf(stderr, "/metrics lacks %s", *w);
            return fail("/metrics");
        }
    const char *nodes = strstr(body, "\negmstore_pool_numa_nodes ");
    const char *secs = strstr(body, "\negmstore_pool_setup_seconds ");
    printf("metrics: numa nodes %ld, setup %.3f s\n", nodes ? strtol(nodes + 26, NULL, 10) : -1,
           secs ? strtod(secs + 29, NULL) : -1.0);
    return 0;
}

int main(void)
{
    if (egm__cuda_load(&cu) != EGM_OK) {
        printf("test_gpu_egm_pool: skipped: %s\n", egm_last_error());
        return SKIP;
    }
    int ndev = egm__cuda_device_count();
    egm_test_cluster_t cluster;
    if (egm_test_start_master(&cluster, NULL) != 0)
        return fail("master");
    static char out[16384];
    const char *plan[] = {"provider",
                          "--plan-only",
                          "--enable-egm-store-pool",
                          "true",
                          "--global-segment-size",
                          "2GiB",
                          "--max-mr-size",
                          "512MiB",
                          NULL};
    int code = egm_test_cli(&cluster, plan, NULL, 0, out, sizeof(out));
    printf("provider --plan-only (exit %d):\n%s", code, out);
    int rc = 1;
    egm_client_t *client = NULL;
    const char *pool[] = {"--enable-egm-store-pool",
                          "true",
                          "--max-mr-size",
                          "512MiB",
                          "--egm-setup-threads",
                          "4",
                          "--provider-http-port",
                          "0",
                          NULL};
    int provider = egm_test_start_provider(&cluster, "2GiB", pool);
    if (code != 0 || strstr(out, "nothing allocated") == NULL || provider < 0) {
        fail("plan or provider");
        goto out;
    }
    printf("%s\n", cluster.provider_ready[provider]);
    if (check_endpoints(egm_test_ready_http_port(cluster.provider_ready[provider])) != 0)
        goto out;

    egm_config_t *config = NULL;
    if (egm__cuda_use_device(0) != EGM_OK || egm_config_create(&config) != EGM_OK ||
        egm_config_set(config, "master_server_addr", cluster.master_addr) != EGM_OK ||
        egm_config_set(config, "protocol", "nvlink") != EGM_OK ||
        egm_client_create(config, &client) != EGM_OK) {
        egm_config_destroy(config);
        fail("client");
        goto out;
    }
    egm_config_destroy(config);
    int get_dev = ndev - 1;
    size_t max = sizes[sizeof(sizes) / sizeof(sizes[0]) - 1];
    egm_cu_deviceptr_t src = 0, dst = 0;
    if (cu->cuMemAlloc(&src, max) != EGM_CU_SUCCESS || egm__cuda_use_device(get_dev) != EGM_OK ||
        cu->cuMemAlloc(&dst, max) != EGM_CU_SUCCESS ||
        egm_register_buffer(client, (void *)(uintptr_t)src, max) != EGM_OK ||
        egm_register_buffer(client, (void *)(uintptr_t)dst, max) != EGM_OK) {
        fail("HBM buffers");
        goto out;
    }
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        char key[64];
        size_t got = 0;
        snprintf(key, sizeof(key), "egm-gpu/%zu", sizes[s]);
        if (egm__cuda_use_device(0) != EGM_OK || hbm_fill(src, sizes[s], 7u + (unsigned)s) != 0 ||
            egm_put_from(client, key, (void *)(uintptr_t)src, sizes[s], NULL) != EGM_OK ||
            egm_get_into(client, key, (void *)(uintptr_t)dst, max, &got) != EGM_OK ||
            got != sizes[s] || egm__cuda_use_device(get_dev) != EGM_OK ||
            !hbm_matches(dst, got, 7u + (unsigned)s)) {
            fail(key);
            goto out;
        }
    }
    egm_te_stats_t st;
    egm__te_stats(client->te, &st);
    printf("put from GPU 0, get into GPU %d: %zu objects verified, %" PRIu64
           " nvlink copies, %" PRIu64 " imports\n",
           get_dev, sizeof(sizes) / sizeof(sizes[0]), st.nvlink_copies, st.nvlink_imports_total);
    if (st.nvlink_copies < 2 * sizeof(sizes) / sizeof(sizes[0])) {
        fail("expected every transfer over nvlink");
        goto out;
    }
    if (master_segments(client) != 4) {
        fail("master should list the pool's 4 segments");
        goto out;
    }
    /* SIGTERM: the pool is withdrawn and the provider exits 0. */
    egm__process_signal(&cluster.providers[provider], SIGTERM);
    code = -1;
    if (egm__process_wait(&cluster.providers[provider], 60000, &code) != EGM_OK || code != 0) {
        fprintf(stderr, "provider exit %d\n", code);
        fail("provider teardown");
        goto out;
    }
    if (master_segments(client) != 0) {
        fail("segments left at the master after teardown");
        goto out;
    }
    printf("provider withdrew the pool and exited 0\n");
    egm_unregister_buffer(client, (void *)(uintptr_t)src);
    egm_unregister_buffer(client, (void *)(uintptr_t)dst);
    cu->cuMemFree(src);
    cu->cuMemFree(dst);
    rc = 0;
out:
    egm_client_destroy(client);
    egm_test_cluster_stop(&cluster);
    printf("test_gpu_egm_pool: %s\n", rc == 0 ? "1 passed, 0 failed" : "0 passed, 1 failed");
    return rc;
}
