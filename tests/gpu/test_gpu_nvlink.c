/* GPU suite (label gpu; exit 77 without a CUDA driver): a provider process with
 * a HOST_NUMA pool; this process puts from GPU0's HBM; a second client process
 * on GPU1 (GPU0 when there is one GPU) gets into its HBM; bytes verified there;
 * the getter's mapping cache imports each segment once however many gets. An
 * object put from two HBM buffers (scatter-gather, like a KV block's K and V)
 * is read back into two other buffers. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <egmstore/egmstore.h>
#include "client/client_int.h"
#include "common/process.h"
#include "cuda/driver.h"
#include "support/cluster.h"
#include "support/gpu_util.h"

static const size_t sizes[] = {4096, 65536 + 16, 1 << 20, 64 << 20};
#define BATCH 256
#define BATCH_BLOCK (64 << 10)
/* the scatter-gather object: part lengths and pattern seeds */
static const size_t sg_lens[2] = {40000, 30000 + 16};
#define SG_SEED 5000

static const egm_cuda_api_t *cu;

static int fail(const char *what, egm_status_t status)
{
    fprintf(stderr, "test_gpu_nvlink: %s: %s (%s)\n", what, egm_status_string(status),
            egm_last_error());
    return 1;
}

/* HBM buffer of len bytes holding the pattern of `seed` (or zero when seed < 0). */
static egm_status_t hbm_buffer(size_t len, int seed, egm_cu_deviceptr_t *ptr_p)
{
    egm_status_t st = egm__cuda_check(cu->cuMemAlloc(ptr_p, len), "cuMemAlloc");
    if (st != EGM_OK)
        return st;
    if (seed < 0)
        return egm__cuda_check(cu->cuMemsetD8(*ptr_p, 0, len), "cuMemsetD8");
    return egm_test_hbm_fill(*ptr_p, len, (unsigned)seed);
}

/* The second process: get everything into this GPU's HBM and verify it there. */
static int getter(const char *master, int device)
{
    egm_client_t *client = egm_test_gpu_client(master, device);
    if (client == NULL)
        return fail("getter client", EGM_ERR_UNREACHABLE);
    size_t max = sizes[sizeof(sizes) / sizeof(sizes[0]) - 1];
    egm_cu_deviceptr_t dst;
    if (hbm_buffer(max > BATCH * BATCH_BLOCK ? max : BATCH * BATCH_BLOCK, -1, &dst) != EGM_OK ||
        egm_register_buffer(client, (void *)(uintptr_t)dst, max) != EGM_OK)
        return fail("getter buffer", EGM_ERR_NO_MEMORY);
    char key[64];
    for (int round = 0; round < 3; round++) {
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            size_t got = 0;
            snprintf(key, sizeof(key), "gpu/%zu", sizes[s]);
            egm_status_t st = egm_get_into(client, key, (void *)(uintptr_t)dst, max, &got);
            if (st != EGM_OK)
                return fail(key, st);
            if (got != sizes[s] || !egm_test_hbm_matches(dst, got, (unsigned)s + 1)) {
                fprintf(stderr, "test_gpu_nvlink: %s: bytes differ in GPU %d\n", key, device);
                return 1;
            }
        }
    }
    char names[BATCH][32];
    const char *keys[BATCH];
    void *dsts[BATCH];
    size_t caps[BATCH], lens[BATCH];
    egm_status_t results[BATCH];
    for (int i = 0; i < BATCH; i++) {
        snprintf(names[i], sizeof(names[i]), "gpu/batch/%d", i);
        keys[i] = names[i];
        dsts[i] = (void *)(uintptr_t)(dst + (size_t)(BATCH - 1 - i) * BATCH_BLOCK); /* scattered */
        caps[i] = BATCH_BLOCK;
    }
    egm_status_t st = egm_batch_get_into(client, BATCH, keys, dsts, caps, lens, results);
    if (st != EGM_OK)
        return fail("batch get", st);
    int wrong = 0;
    for (int i = 0; i < BATCH; i++) {
        if (results[i] != EGM_OK)
            return fail(keys[i], results[i]);
        if (!egm_test_hbm_matches((egm_cu_deviceptr_t)(uintptr_t)dsts[i], BATCH_BLOCK,
                                  1000u + (unsigned)i)) {
            egm_test_hbm_explain(keys[i], (egm_cu_deviceptr_t)(uintptr_t)dsts[i], BATCH_BLOCK,
                                 1000u + (unsigned)i);
            wrong++;
        }
    }
    if (wrong > 0) {
        fprintf(stderr, "test_gpu_nvlink: %d of %d batch objects read back wrong\n", wrong, BATCH);
        return 1;
    }
    /* The scatter-gather object into two places of this GPU, second part first. */
    const char *sg_key = "gpu/sg";
    size_t sg_count = 2, sg_size = 0;
    void *sg_dsts[2] = {(void *)(uintptr_t)(dst + BATCH_BLOCK), (void *)(uintptr_t)(dst)};
    st = egm_batch_get_into_parts(client, 1, &sg_key, &sg_count, sg_dsts, sg_lens, &sg_size,
                                  results);
    if (st != EGM_OK || results[0] != EGM_OK)
        return fail("scatter-gather get", st != EGM_OK ? st : results[0]);
    for (int p = 0; p < 2; p++)
        if (sg_size != sg_lens[0] + sg_lens[1] ||
            !egm_test_hbm_matches((egm_cu_deviceptr_t)(uintptr_t)sg_dsts[p], sg_lens[p],
                                  SG_SEED + (unsigned)p))
            return fail("scatter-gather bytes", EGM_ERR_TRANSFER);
    egm_te_stats_t stats;
    egm__te_stats(client->te, &stats);
    size_t gets = 3 * sizeof(sizes) / sizeof(sizes[0]) + BATCH + 1;
    printf("getter on GPU %d: %zu gets verified by nvlink (%" PRIu64 " GPU copies), %" PRIu64
           " imports, %" PRIu64 " kernel launches\n",
           device, gets, stats.nvlink_copies, stats.nvlink_imports_total,
           stats.copy_kernel_launches);
    /* Mappings are reused: one import per segment of the pool (2 x 512 MiB), not per get. */
    if (stats.nvlink_imports_total == 0 || stats.nvlink_imports_total > 2 ||
        stats.nvlink_copies < gets) {
        fprintf(stderr, "test_gpu_nvlink: expected <= 2 imports and %zu nvlink copies\n", gets);
        return 1;
    }
    egm_unregister_buffer(client, (void *)(uintptr_t)dst);
    egm_client_destroy(client);
    return 0;
}

int main(int argc, char **argv)
{
    int load = egm_test_gpu_load("test_gpu_nvlink", &cu);
    if (load != 0)
        return load;
    egm_status_t st = EGM_OK;
    if (argc == 4 && strcmp(argv[1], "--getter") == 0)
        return getter(argv[2], atoi(argv[3]));

    int get_device = egm__cuda_device_count() > 1 ? 1 : 0;
    egm_test_cluster_t cluster;
    const char *pool[] = {"--pool-memory", "host_numa", "--max-mr-size", "512MiB", NULL};
    if (egm_test_start_master(&cluster, NULL) != 0 ||
        egm_test_start_provider(&cluster, "1GiB", pool) < 0)
        return fail("cluster", EGM_ERR_UNREACHABLE);

    int rc = 1;
    egm_client_t *client = egm_test_gpu_client(cluster.master_addr, 0);
    if (client == NULL) {
        fail("putter client", EGM_ERR_UNREACHABLE);
        goto out;
    }
    char key[64];
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        egm_cu_deviceptr_t src;
        if (hbm_buffer(sizes[s], (int)s + 1, &src) != EGM_OK ||
            egm_register_buffer(client, (void *)(uintptr_t)src, sizes[s]) != EGM_OK) {
            fail("putter buffer", EGM_ERR_NO_MEMORY);
            goto out;
        }
        snprintf(key, sizeof(key), "gpu/%zu", sizes[s]);
        st = egm_put_from(client, key, (void *)(uintptr_t)src, sizes[s], NULL);
        egm_unregister_buffer(client, (void *)(uintptr_t)src);
        cu->cuMemFree(src);
        if (st != EGM_OK) {
            fail(key, st);
            goto out;
        }
    }
    for (int i = 0; i < BATCH; i++) {
        egm_cu_deviceptr_t src;
        snprintf(key, sizeof(key), "gpu/batch/%d", i);
        if (hbm_buffer(BATCH_BLOCK, 1000 + i, &src) != EGM_OK ||
            egm_register_buffer(client, (void *)(uintptr_t)src, BATCH_BLOCK) != EGM_OK ||
            egm_put_from(client, key, (void *)(uintptr_t)src, BATCH_BLOCK, NULL) != EGM_OK) {
            fail(key, EGM_ERR_TRANSFER);
            goto out;
        }
        egm_unregister_buffer(client, (void *)(uintptr_t)src);
        cu->cuMemFree(src);
    }
    { /* the putter reads its own objects back first (same process, same mapping) */
        egm_cu_deviceptr_t back;
        int bad = 0;
        if (hbm_buffer(BATCH_BLOCK, -1, &back) == EGM_OK &&
            egm_register_buffer(client, (void *)(uintptr_t)back, BATCH_BLOCK) == EGM_OK) {
            for (int i = 0; i < BATCH; i++) {
                size_t got = 0;
                snprintf(key, sizeof(key), "gpu/batch/%d", i);
                cu->cuMemsetD8(back, 0, BATCH_BLOCK);
                if (egm_get_into(client, key, (void *)(uintptr_t)back, BATCH_BLOCK, &got) !=
                        EGM_OK ||
                    !egm_test_hbm_matches(back, BATCH_BLOCK, 1000u + (unsigned)i)) {
                    egm_test_hbm_explain(key, back, BATCH_BLOCK, 1000u + (unsigned)i);
                    bad++;
                }
            }
            egm_unregister_buffer(client, (void *)(uintptr_t)back);
            cu->cuMemFree(back);
        } else {
            bad = BATCH;
        }
        if (bad > 0) {
            fprintf(stderr, "test_gpu_nvlink: putter readback: %d of %d wrong\n", bad, BATCH);
            goto out;
        }
    }
    egm_cu_deviceptr_t sg_src[2];
    const void *sg_addrs[2];
    size_t sg_count = 2;
    const char *sg_key = "gpu/sg";
    egm_status_t sg_result = EGM_ERR_TRANSFER;
    for (int p = 0; p < 2; p++) {
        if (hbm_buffer(sg_lens[p], SG_SEED + p, &sg_src[p]) != EGM_OK ||
            egm_register_buffer(client, (void *)(uintptr_t)sg_src[p], sg_lens[p]) != EGM_OK) {
            fail("scatter-gather buffer", EGM_ERR_NO_MEMORY);
            goto out;
        }
        sg_addrs[p] = (const void *)(uintptr_t)sg_src[p];
    }
    st = egm_batch_put_from_parts(client, 1, &sg_key, &sg_count, sg_addrs, sg_lens, NULL,
                                  &sg_result);
    for (int p = 0; p < 2; p++) {
        egm_unregister_buffer(client, (void *)(uintptr_t)sg_src[p]);
        cu->cuMemFree(sg_src[p]);
    }
    if (st != EGM_OK || sg_result != EGM_OK) {
        fail("scatter-gather put", st != EGM_OK ? st : sg_result);
        goto out;
    }
    printf("putter on GPU 0: %zu objects stored from HBM\n",
           sizeof(sizes) / sizeof(sizes[0]) + BATCH + 1);

    char device_text[8];
    snprintf(device_text, sizeof(device_text), "%d", get_device);
    char *gargv[] = {(char *)egm__process_self_exe(), "--getter", cluster.master_addr, device_text,
                     NULL};
    egm_process_t proc;
    int code = -1;
    if (egm__process_spawn(gargv, EGM_PROCESS_STDOUT_INHERIT, &proc) == EGM_OK &&
        egm__process_wait(&proc, 300000, &code) == EGM_OK && code == 0)
        rc = 0;
    else
        fprintf(stderr, "test_gpu_nvlink: getter process failed (exit %d)\n", code);
    egm__process_cleanup(&proc);
out:
    egm_client_destroy(client);
    egm_test_cluster_stop(&cluster);
    printf("test_gpu_nvlink: %s\n", rc == 0 ? "1 passed, 0 failed" : "0 passed, 1 failed");
    return rc;
}
