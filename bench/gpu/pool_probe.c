/* egm-pool-probe: what one GPU copy costs by host memory kind and placement,
 * without the store, to tell the store's own overhead from the platform's.
 * The same copies a Get or Put makes (pool <-> HBM), through the store's own
 * pieces (the VMM pool of a provider, a second mapping imported from its POSIX
 * fd as a client's mapping cache makes, the copier), against the
 * cuMemAllocHost ceiling that `egmstore bench data` reports:
 *   memory   pinned (cuMemAllocHost), vmm (the provider's HOST_NUMA mapping),
 *            import (the same memory imported from its fd and mapped again)
 *   place    fixed (one offset every call, as the ceiling) or random (a new
 *            offset in the whole region every call, as keys of a pool are)
 *   how      cuMemcpy (synchronous) or copier (cuMemcpyAsync/kernel + event)
 * and a batch of N x 64 KiB blocks at random places through the copier.
 * Prints one line per series and writes a JSON document; asserts nothing.
 *
 *   egm-pool-probe [--device N] [--node N] [--region BYTES] [--out FILE] [--quick]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "cuda/copier.h"
#include "cuda/driver.h"
#include "pool/vmm_pool.h"

#define MAX_ITERS 400
#define MAX_REGIONS 64
#define BATCH_BLOCK ((uint64_t)64 << 10)

typedef struct {
    const char *name;
    egm_cu_deviceptr_t base[MAX_REGIONS];
    uint64_t size[MAX_REGIONS];
    size_t n;
} region_t;

typedef struct {
    const egm_cuda_api_t *cu;
    egm_copier_t *copier;
    egm_cu_deviceptr_t hbm;
    uint64_t hbm_len;
    FILE *out;
    int first;
    int quick;
    uint64_t rng;
} probe_t;

static uint64_t next_rand(probe_t *p)
{
    p->rng ^= p->rng << 13;
    p->rng ^= p->rng >> 7;
    p->rng ^= p->rng << 17;
    return p->rng;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A place for `len` bytes in the region: its first byte (fixed) or a random
 * one aligned to min(len, 64 KiB) in a random chunk. */
static egm_cu_deviceptr_t place(probe_t *p, const region_t *r, uint64_t len, int random)
{
    if (!random)
        return r->base[0];
    size_t k = (size_t)(next_rand(p) % r->n);
    uint64_t align = len < BATCH_BLOCK ? len : BATCH_BLOCK;
    uint64_t slots = (r->size[k] - len) / align + 1;
    return r->base[k] + (next_rand(p) % slots) * align;
}

static void emit(probe_t *p, const char *memory, const char *placement, const char *how,
                 const char *op, uint64_t bytes, uint64_t batch, uint64_t *ns, int n, int errors)
{
    qsort(ns, (size_t)n, sizeof(*ns), cmp_u64);
    double p50 = (double)ns[n / 2] / 1e3, p99 = (double)ns[(n * 99) / 100] / 1e3;
    double gbps = (double)(bytes * batch) / p50 / 1e3;
    printf("%-7s %-6s %-8s %-3s %10" PRIu64 " x %-5" PRIu64 " p50 %9.1f us  p99 %9.1f us  "
           "%6.2f GB/s%s\n",
           memory, placement, how, op, bytes, batch, p50, p99, gbps, errors ? "  ERRORS" : "");
    fprintf(p->out,
            "%s\n    {\"memory\": \"%s\", \"placement\": \"%s\", \"how\": \"%s\", \"op\": \"%s\", "
            "\"bytes\": %" PRIu64 ", \"batch\": %" PRIu64 ", \"calls\": %d, \"p50_us\": %.2f, "
            "\"p99_us\": %.2f, \"gbps_p50\": %.3f, \"errors\": %d}",
            p->first ? "" : ",", memory, placement, how, op, bytes, batch, n, p50, p99, gbps,
            errors);
    p->first = 0;
    fflush(stdout);
}

/* One series of single copies of `len` bytes between HBM and the region. */
static void single(probe_t *p, const region_t *r, uint64_t len, int random, int copier, int put)
{
    static uint64_t ns[MAX_ITERS];
    int iters = len >= ((uint64_t)64 << 20) ? 40 : len >= ((uint64_t)16 << 20) ? 100 : 300;
    if (p->quick)
        iters = 10;
    int errors = 0;
    for (int i = -3; i < iters; i++) { /* 3 warm-up calls */
        egm_cu_deviceptr_t host = place(p, r, len, random);
        egm_cu_deviceptr_t dst = put ? host : p->hbm, src = put ? p->hbm : host;
        uint64_t t0 = egm__now_ns();
        if (copier) {
            egm_copy_desc_t d = {.dst = dst, .src = src, .len = len};
            errors += egm__copier_run(p->copier, &d, 1) != EGM_OK;
        } else {
            errors += p->cu->cuMemcpy(dst, src, len) != EGM_CU_SUCCESS;
        }
        uint64_t t1 = egm__now_ns();
        if (i >= 0)
            ns[i] = t1 - t0;
    }
    emit(p, r->name, random ? "random" : "fixed", copier ? "copier" : "cuMemcpy",
         put ? "put" : "get", len, 1, ns, iters, errors);
}

/* n blocks of 64 KiB at random places of the region <-> consecutive HBM, one
 * copier run (the gather kernel, or cuMemcpyBatchAsync when `engines`). */
static void batch(probe_t *p, const region_t *r, size_t n, int put, int engines)
{
    static uint64_t ns[MAX_ITERS];
    egm_copy_desc_t *d = egm_malloc(n * sizeof(*d), "probe.batch");
    if (d == NULL)
        return;
    int iters = p->quick ? 3 : 30, errors = 0;
    egm__copier_set_kernel_threshold(p->copier, engines ? (size_t)-1 : 32, (size_t)512 << 10);
    for (int i = -2; i < iters; i++) {
        for (size_t k = 0; k < n; k++) {
            egm_cu_deviceptr_t host = place(p, r, BATCH_BLOCK, 1);
            egm_cu_deviceptr_t dev = p->hbm + k * BATCH_BLOCK;
            d[k] = put ? (egm_copy_desc_t){.dst = host, .src = dev, .len = BATCH_BLOCK}
                       : (egm_copy_desc_t){.dst = dev, .src = host, .len = BATCH_BLOCK};
        }
        uint64_t t0 = egm__now_ns();
        errors += egm__copier_run(p->copier, d, n) != EGM_OK;
        uint64_t t1 = egm__now_ns();
        if (i >= 0)
            ns[i] = t1 - t0;
    }
    egm__copier_set_kernel_threshold(p->copier, 32, (size_t)512 << 10);
    emit(p, r->name, "random", engines ? "batchapi" : "kernel", put ? "put" : "get", BATCH_BLOCK, n,
         ns, iters, errors);
    egm_free(d);
}

/* The provider's chunks imported from their fds and mapped again, as the
 * client's mapping cache does (src/te/mapping_cache.c). */
static int import_region(probe_t *p, egm_vmm_pool_t *pool, int device, region_t *r)
{
    const egm_cuda_api_t *cu = p->cu;
    r->name = "import";
    r->n = 0;
    for (size_t k = 0; k < egm__vmm_pool_chunk_count(pool) && k < MAX_REGIONS; k++) {
        const egm_vmm_chunk_t *c = egm__vmm_pool_chunk(pool, k);
        int fd = -1;
        egm_cu_mem_handle_t h = 0;
        egm_cu_deviceptr_t va = 0;
        if (egm__vmm_pool_export_fd(pool, k, &fd) != EGM_OK ||
            cu->cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                               EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
                EGM_CU_SUCCESS ||
            cu->cuMemAddressReserve(&va, c->size, (size_t)2 << 20, 0, 0) != EGM_CU_SUCCESS ||
            cu->cuMemMap(va, c->size, 0, h, 0) != EGM_CU_SUCCESS) {
            fprintf(stderr, "pool-probe: importing chunk %zu failed\n", k);
            if (fd >= 0)
                close(fd);
            return -1;
        }
        close(fd);
        egm_cu_mem_access_desc_t access = {
            .location = {.type = EGM_CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
            .flags = EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        if (cu->cuMemSetAccess(va, c->size, &access, 1) != EGM_CU_SUCCESS) {
            fprintf(stderr, "pool-probe: cuMemSetAccess on the import of chunk %zu failed\n", k);
            return -1;
        }
        r->base[r->n] = va;
        r->size[r->n++] = c->size;
    }
    return 0;
}

static void run_memory(probe_t *p, const region_t *r)
{
    static const uint64_t sizes[] = {4096, 65536, 1 << 20, 16 << 20, 64 << 20};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
        for (int put = 0; put <= 1; put++) {
            single(p, r, sizes[s], 0, 0, put);
            single(p, r, sizes[s], 1, 0, put);
            single(p, r, sizes[s], 1, 1, put);
        }
    for (int put = 0; put <= 1; put++) {
        batch(p, r, p->quick ? 64 : 8192, put, 0);
        batch(p, r, p->quick ? 64 : 8192, put, 1);
    }
}

int main(int argc, char **argv)
{
    int device = 0, node = 0;
    uint64_t region = (uint64_t)4 << 30;
    const char *out_path = "pool-probe.json";
    probe_t p = {.rng = 88172645463325252ull, .first = 1};

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            device = atoi(argv[++i]);
        else if (strcmp(argv[i], "--node") == 0 && i + 1 < argc)
            node = atoi(argv[++i]);
        else if (strcmp(argv[i], "--region") == 0 && i + 1 < argc)
            region = strtoull(argv[++i], NULL, 0);
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            out_path = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0)
            p.quick = 1;
        else {
            fprintf(stderr, "usage: egm-pool-probe [--device N] [--node N] [--region BYTES] "
                            "[--out FILE] [--quick]\n");
            return 2;
        }
    }
    if (egm__cuda_load(&p.cu) != EGM_OK || egm__cuda_use_device(device) != EGM_OK) {
        fprintf(stderr, "pool-probe: %s\n", egm_last_error());
        return 1;
    }
    const egm_cuda_api_t *cu = p.cu;
    p.hbm_len = (uint64_t)8192 * BATCH_BLOCK;
    void *pinned = NULL;
    if (cu->cuMemAlloc(&p.hbm, p.hbm_len) != EGM_CU_SUCCESS ||
        cu->cuMemAllocHost(&pinned, region) != EGM_CU_SUCCESS ||
        egm__copier_create(device, 0, &p.copier) != EGM_OK) {
        fprintf(stderr, "pool-probe: HBM, pinned or copier setup failed: %s\n", egm_last_error());
        return 1;
    }
    memset(pinned, 0x5a, region);
    egm_vmm_pool_params_t params = {
        .location = EGM_VMM_HOST_NUMA,
        .locations = &node,
        .location_count = 1,
        .handles = EGM_VMM_HANDLES_POSIX_FD,
        .total = region,
        .max_chunk = (uint64_t)1 << 30,
        .threads = 4,
        .locations_key = "--node",
    };
    egm_vmm_pool_t *pool = NULL;
    if (egm__vmm_pool_create(&params, &pool) != EGM_OK) {
        fprintf(stderr, "pool-probe: VMM pool: %s\n", egm_last_error());
        return 1;
    }
    p.out = fopen(out_path, "w");
    if (p.out == NULL) {
        perror(out_path);
        return 1;
    }
    fprintf(p.out,
            "{\"tool\": \"egm-pool-probe\", \"device\": %d, \"node\": %d, "
            "\"region_bytes\": %" PRIu64 ", \"results\": [",
            device, node, region);

    region_t pin = {.name = "pinned", .n = 1};
    pin.base[0] = (egm_cu_deviceptr_t)(uintptr_t)pinned;
    pin.size[0] = region;
    region_t vmm = {.name = "vmm"};
    for (size_t k = 0; k < egm__vmm_pool_chunk_count(pool) && k < MAX_REGIONS; k++) {
        const egm_vmm_chunk_t *c = egm__vmm_pool_chunk(pool, k);
        vmm.base[vmm.n] = c->va;
        vmm.size[vmm.n++] = c->size;
    }
    region_t imp;
    if (import_region(&p, pool, device, &imp) != 0)
        return 1;
    run_memory(&p, &pin);
    run_memory(&p, &vmm);
    run_memory(&p, &imp);
    fprintf(p.out, "\n]}\n");
    fclose(p.out);
    return 0;
}
