/* egm-gpu-bench: Put/Get between HBM and a pool another process owns, through
 * the store's client library, next to the raw copy ceiling measured in the same
 * run. Writes one JSON document; no figure is asserted here.
 *
 *   egm-gpu-bench --master HOST:PORT [--device N] [--out FILE] [--quick]
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <egmstore/egmstore.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "cuda/driver.h"

#define MAX_SAMPLES 4096

typedef struct {
    const egm_cuda_api_t *cu;
    egm_client_t *client;
    int device;
    egm_cu_deviceptr_t hbm;
    size_t hbm_len;
    void *pinned;
    FILE *out;
    int first_record;
} bench_t;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_us(uint64_t *ns, size_t n, double p)
{
    qsort(ns, n, sizeof(*ns), cmp_u64);
    return (double)ns[(size_t)(p * (double)(n - 1) + 0.5)] / 1000.0;
}

static void record(bench_t *b, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void record(bench_t *b, const char *name, const char *fmt, ...)
{
    va_list ap;
    fprintf(b->out, "%s\n    {\"name\": \"%s\", ", b->first_record ? "" : ",", name);
    va_start(ap, fmt);
    vfprintf(b->out, fmt, ap);
    va_end(ap);
    fprintf(b->out, "}");
    fflush(b->out);
    b->first_record = 0;
}

static int check(egm_status_t status, const char *what)
{
    if (status == EGM_OK)
        return 0;
    fprintf(stderr, "egm-gpu-bench: %s: %s (%s)\n", what, egm_status_string(status),
            egm_last_error());
    return -1;
}

/* Raw ceiling: cuMemcpy between HBM and pinned host memory, the same link the
 * pool copies cross. */
static int raw_ceiling(bench_t *b)
{
    const size_t sizes[] = {4096, 65536, 1 << 20, 16 << 20, 256 << 20};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t len = sizes[s];
        int iters = len <= 65536 ? 1000 : len <= (16 << 20) ? 50 : 6;
        for (int dir = 0; dir < 2; dir++) {
            uint64_t ns[MAX_SAMPLES];
            egm_cu_deviceptr_t host = (egm_cu_deviceptr_t)(uintptr_t)b->pinned;
            for (int i = 0; i < iters; i++) {
                uint64_t t0 = egm__now_ns();
                egm_cu_result_t rc = dir == 0 ? b->cu->cuMemcpy(host, b->hbm, len)
                                              : b->cu->cuMemcpy(b->hbm, host, len);
                ns[i] = egm__now_ns() - t0;
                if (check(egm__cuda_check(rc, "cuMemcpy"), "raw copy") != 0)
                    return -1;
            }
            double p50 = pct_us(ns, (size_t)iters, 0.5);
            record(b, dir == 0 ? "raw_hbm_to_host" : "raw_host_to_hbm",
                   "\"bytes\": %zu, \"iters\": %d, \"p50_us\": %.2f, \"p99_us\": %.2f, "
                   "\"gbps_p50\": %.2f",
                   len, iters, p50, pct_us(ns, (size_t)iters, 0.99), (double)len / p50 / 1e3);
        }
    }
    return 0;
}

static int single_objects(bench_t *b)
{
    const size_t sizes[] = {4096, 65536, 1 << 20, 16 << 20, 64 << 20, 256 << 20};
    char key[64];
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t len = sizes[s];
        int iters = len <= 65536 ? 1000 : len <= (1 << 20) ? 200 : len <= (16 << 20) ? 40 : 8;
        uint64_t put_ns[MAX_SAMPLES], get_ns[MAX_SAMPLES];
        void *buf = (void *)(uintptr_t)b->hbm;
        for (int i = 0; i < iters; i++) {
            snprintf(key, sizeof(key), "bench/%zu/%d", len, i);
            uint64_t t0 = egm__now_ns();
            egm_status_t st = egm_put_from(b->client, key, buf, len, NULL);
            put_ns[i] = egm__now_ns() - t0;
            if (check(st, "put_from") != 0)
                return -1;
        }
        for (int i = 0; i < iters; i++) {
            size_t got = 0;
            snprintf(key, sizeof(key), "bench/%zu/%d", len, i);
            uint64_t t0 = egm__now_ns();
            egm_status_t st = egm_get_into(b->client, key, buf, len, &got);
            get_ns[i] = egm__now_ns() - t0;
            if (check(st, "get_into") != 0)
                return -1;
        }
        if (len == 4096) {
            /* The master round trip alone (ExistKey refreshes the lease, as
             * GetReplicaList does): Get minus this is the client's copy and work. */
            uint64_t ex_ns[MAX_SAMPLES];
            for (int i = 0; i < iters; i++) {
                snprintf(key, sizeof(key), "bench/%zu/%d", len, i);
                uint64_t t0 = egm__now_ns();
                egm_status_t st = egm_exist(b->client, key);
                ex_ns[i] = egm__now_ns() - t0;
                if (check(st, "exist") != 0)
                    return -1;
            }
            record(b, "exist_rpc", "\"iters\": %d, \"p50_us\": %.2f, \"p99_us\": %.2f", iters,
                   pct_us(ex_ns, (size_t)iters, 0.5), pct_us(ex_ns, (size_t)iters, 0.99));
        }
        double put50 = pct_us(put_ns, (size_t)iters, 0.5);
        double get50 = pct_us(get_ns, (size_t)iters, 0.5);
        record(b, "put_single",
               "\"bytes\": %zu, \"iters\": %d, \"p50_us\": %.2f, \"p99_us\": %.2f, "
               "\"gbps_p50\": %.2f",
               len, iters, put50, pct_us(put_ns, (size_t)iters, 0.99), (double)len / put50 / 1e3);
        record(b, "get_single",
               "\"bytes\": %zu, \"iters\": %d, \"p50_us\": %.2f, \"p99_us\": %.2f, "
               "\"gbps_p50\": %.2f",
               len, iters, get50, pct_us(get_ns, (size_t)iters, 0.99), (double)len / get50 / 1e3);
        uint64_t removed;
        if (check(egm_remove_all(b->client, 1, &removed), "remove_all") != 0)
            return -1;
    }
    return 0;
}

/* 8192 blocks of 64 KiB, fetched into scattered places of HBM in one batch. */
static int batch_get(bench_t *b, size_t n_blocks)
{
    const size_t block = 64 << 10, chunk = 8192; /* one call: large batches pipeline */
    char(*names)[32] = malloc(n_blocks * sizeof(*names));
    const char **keys = malloc(n_blocks * sizeof(*keys));
    void **ptrs = malloc(n_blocks * sizeof(*ptrs));
    size_t *lens = malloc(n_blocks * sizeof(*lens)), *sizes = malloc(n_blocks * sizeof(*sizes));
    egm_status_t *results = malloc(n_blocks * sizeof(*results));
    size_t *perm = malloc(n_blocks * sizeof(*perm));
    int rc = -1;

    if (!names || !keys || !ptrs || !lens || !sizes || !results || !perm)
        goto out;
    for (size_t i = 0; i < n_blocks; i++)
        perm[i] = i;
    srand(7);
    for (size_t i = n_blocks - 1; i > 0; i--) {
        size_t j = (size_t)rand() % (i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < n_blocks; i++) {
        snprintf(names[i], sizeof(names[i]), "blk/%zu", i);
        keys[i] = names[i];
        ptrs[i] = (void *)(uintptr_t)(b->hbm + perm[i] * block);
        lens[i] = block;
    }
    uint64_t t0 = egm__now_ns();
    for (size_t i = 0; i < n_blocks; i += chunk) {
        size_t n = n_blocks - i < chunk ? n_blocks - i : chunk;
        if (check(egm_batch_put_from(b->client, n, keys + i, (const void *const *)ptrs + i,
                                     lens + i, NULL, results + i),
                  "batch_put_from") != 0)
            goto out;
    }
    double put_s = (double)(egm__now_ns() - t0) / 1e9;
    for (size_t i = 0; i < n_blocks; i++)
        if (check(results[i], "batch_put_from key") != 0)
            goto out;
    uint64_t ns[8];
    int reps = 5;
    for (int r = 0; r < reps; r++) {
        t0 = egm__now_ns();
        if (check(egm_batch_get_into(b->client, n_blocks, keys, ptrs, lens, sizes, results),
                  "batch_get_into") != 0)
            goto out;
        ns[r] = egm__now_ns() - t0;
        for (size_t i = 0; i < n_blocks; i++)
            if (check(results[i], "batch_get_into key") != 0)
                goto out;
    }
    double p50 = pct_us(ns, (size_t)reps, 0.5);
    record(b, "batch_get",
           "\"blocks\": %zu, \"block_bytes\": %zu, \"reps\": %d, \"p50_us\": %.1f, "
           "\"gbps_p50\": %.2f, \"batch_put_gbps\": %.2f",
           n_blocks, block, reps, p50, (double)(n_blocks * block) / p50 / 1e3,
           (double)(n_blocks * block) / put_s / 1e9);
    uint64_t removed;
    rc = check(egm_remove_all(b->client, 1, &removed), "remove_all");
out:
    free(names);
    free(keys);
    free(ptrs);
    free(lens);
    free(sizes);
    free(results);
    free(perm);
    return rc;
}

static egm_client_t *make_client(const char *master, int prewarm)
{
    egm_config_t *config = NULL;
    egm_client_t *client = NULL;
    if (egm_config_create(&config) != EGM_OK ||
        egm_config_set(config, "master_server_addr", master) != EGM_OK ||
        egm_config_set(config, "prewarm", prewarm ? "true" : "false") != EGM_OK ||
        egm_config_set(config, "log_level", "warn") != EGM_OK ||
        check(egm_client_create(config, &client), "client create") != 0)
        client = NULL;
    egm_config_destroy(config);
    return client;
}

/* First Get after the client learns of a segment: cold import+map without
 * prewarm, mapping ready with it. */
static int first_get(bench_t *b, const char *master)
{
    const size_t len = 4096;
    if (check(egm_put_from(b->client, "first/key", (void *)(uintptr_t)b->hbm, len, NULL), "put") !=
        0)
        return -1;
    for (int prewarm = 0; prewarm < 2; prewarm++) {
        egm_client_t *c = make_client(master, prewarm);
        if (c == NULL ||
            check(egm_register_buffer(c, (void *)(uintptr_t)b->hbm, b->hbm_len), "register") != 0)
            return -1;
        if (prewarm)
            egm__sleep_ms(2000); /* the client learns of the pool and maps it meanwhile */
        size_t got;
        uint64_t t0 = egm__now_ns();
        egm_status_t st = egm_get_into(c, "first/key", (void *)(uintptr_t)b->hbm, len, &got);
        uint64_t first = egm__now_ns() - t0;
        t0 = egm__now_ns();
        egm_status_t st2 = egm_get_into(c, "first/key", (void *)(uintptr_t)b->hbm, len, &got);
        uint64_t second = egm__now_ns() - t0;
        egm_unregister_buffer(c, (void *)(uintptr_t)b->hbm);
        egm_client_destroy(c);
        if (check(st, "first get") != 0 || check(st2, "second get") != 0)
            return -1;
        record(b, prewarm ? "first_get_prewarm" : "first_get_cold",
               "\"bytes\": %zu, \"first_us\": %.1f, \"second_us\": %.1f", len, (double)first / 1e3,
               (double)second / 1e3);
    }
    return egm_remove(b->client, "first/key", 1) == EGM_OK ? 0 : -1;
}

int main(int argc, char **argv)
{
    bench_t b = {.device = 0, .out = stdout, .first_record = 1};
    const char *master = "127.0.0.1:50051", *out_path = NULL;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--master") == 0 && i + 1 < argc)
            master = argv[++i];
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            b.device = atoi(argv[++i]);
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            out_path = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else {
            fprintf(stderr, "usage: egm-gpu-bench --master HOST:PORT [--device N] [--out FILE] "
                            "[--quick]\n");
            return 2;
        }
    }
    if (check(egm__cuda_load(&b.cu), "CUDA") != 0)
        return 77;
    if (check(egm__cuda_use_device(b.device), "device") != 0)
        return 1;
    size_t n_blocks = quick ? 1024 : 8192;
    b.hbm_len = (size_t)512 << 20;
    if (check(egm__cuda_check(b.cu->cuMemAlloc(&b.hbm, b.hbm_len), "cuMemAlloc"), "HBM") != 0 ||
        check(egm__cuda_check(b.cu->cuMemAllocHost(&b.pinned, 256 << 20), "cuMemAllocHost"),
              "pinned") != 0)
        return 1;
    b.cu->cuMemsetD8(b.hbm, 0x5a, b.hbm_len);
    b.client = make_client(master, 1);
    if (b.client == NULL ||
        check(egm_register_buffer(b.client, (void *)(uintptr_t)b.hbm, b.hbm_len), "register") != 0)
        return 1;
    if (out_path != NULL && (b.out = fopen(out_path, "w")) == NULL) {
        perror(out_path);
        return 1;
    }
    char name[256] = "";
    int driver = 0;
    egm_cu_device_t dev;
    b.cu->cuDeviceGet(&dev, b.device);
    b.cu->cuDeviceGetName(name, sizeof(name), dev);
    b.cu->cuDriverGetVersion(&driver);
    struct utsname uts;
    uname(&uts);
    fprintf(b.out,
            "{\n  \"bench\": \"egm-gpu-bench\", \"gpu\": \"%s\", \"device\": %d, "
            "\"cuda_driver\": %d, \"host\": \"%s\", \"kernel\": \"%s\", \"unix_ms\": %" PRIu64
            ",\n  \"results\": [",
            name, b.device, driver, uts.nodename, uts.release, egm__wall_ms());
    int rc = raw_ceiling(&b);
    if (rc == 0)
        rc = single_objects(&b);
    if (rc == 0)
        rc = batch_get(&b, n_blocks);
    if (rc == 0)
        rc = first_get(&b, master);
    fprintf(b.out, "\n  ],\n  \"ok\": %s\n}\n", rc == 0 ? "true" : "false");
    if (b.out != stdout)
        fclose(b.out);
    egm_unregister_buffer(b.client, (void *)(uintptr_t)b.hbm);
    egm_client_destroy(b.client);
    b.cu->cuMemFree(b.hbm);
    b.cu->cuMemFreeHost(b.pinned);
    return rc == 0 ? 0 : 1;
}
