/* bench data: the copy ceilings, measured in the same run as the store's
 * figures. Host: one thread's memcpy of each object size, and of a batch's
 * blocks to scattered places. GPU memory: cuMemcpy HBM -> pinned host (the
 * direction of a put) and back (a get), for each size and for the batch's
 * bytes in one contiguous copy (the link's rate). */
#include <stdio.h>
#include <string.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "cuda/driver.h"
#include "bench_data.h"

typedef struct {
    egm_bench_samples_t lat;
    uint64_t calls, busy_ns, errors;
    uint64_t deadline;
} series_t;

static int more(const egm_bdata_run_t *r, const series_t *s)
{
    if (r->o.iters > 0)
        return s->calls < r->o.iters;
    return s->calls < EGM_BDATA_MIN_CALLS || egm__now_ns() < s->deadline;
}

static void series_start(const egm_bdata_run_t *r, series_t *s)
{
    memset(s, 0, sizeof(*s));
    s->deadline = egm__now_ns() + (uint64_t)(r->o.seconds * 1e9);
}

static void series_add(series_t *s, uint64_t t0, uint64_t t1)
{
    s->calls++;
    s->busy_ns += t1 - t0;
    if (egm__bench_samples_add(&s->lat, t1 - t0) != EGM_OK)
        s->errors++;
}

static egm_status_t record(egm_bdata_run_t *r, series_t *s, const char *transport, const char *op,
                           uint64_t bytes, uint64_t batch, const char *note)
{
    egm_bdata_record_t rec;
    memset(&rec, 0, sizeof(rec));
    rec.workload = "ceiling";
    rec.system = "ceiling";
    rec.transport = transport;
    rec.op = op;
    rec.memory = r->mem.gpu ? "gpu" : "host";
    rec.bytes = bytes;
    rec.batch = batch;
    rec.clients = 1;
    rec.procs = 1;
    rec.zipf = -1;
    rec.read_ratio = -1;
    rec.calls = s->calls;
    rec.keys = s->calls * batch;
    rec.errors = s->errors;
    rec.seconds = (double)s->busy_ns / 1e9;
    rec.wall_seconds = rec.seconds;
    rec.note = note;
    egm__bench_latency(&s->lat, &rec.lat);
    egm__bench_quantiles(&s->lat, rec.samples_us, EGM_BDATA_QUANTILES);
    if (rec.seconds > 0) {
        rec.gbps = (double)s->calls * (double)(bytes * batch) / rec.seconds / 1e9;
        rec.ops_s = (double)s->calls / rec.seconds;
        rec.keys_s = (double)rec.keys / rec.seconds;
    }
    if (rec.lat.p50_us > 0)
        rec.gbps_p50 = (double)(bytes * batch) / rec.lat.p50_us / 1e3;
    egm__bench_samples_free(&s->lat);
    return egm__bdata_add_record(r, &rec);
}

static egm_status_t memcpy_size(egm_bdata_run_t *r, uint64_t bytes)
{
    series_t s;
    uint8_t *src = egm_malloc(bytes, "bench.ceiling"), *dst = egm_malloc(bytes, "bench.ceiling");
    egm_status_t status = EGM_OK;

    if (src == NULL || dst == NULL) {
        status =
            egm__set_error(EGM_ERR_NO_MEMORY, "two %llu-byte buffers", (unsigned long long)bytes);
        goto out;
    }
    egm__bdata_pattern(src, bytes, bytes);
    memset(dst, 0, bytes);
    for (series_start(r, &s); more(r, &s);) {
        uint64_t t0 = egm__now_ns();
        memcpy(dst, src, bytes);
        series_add(&s, t0, egm__now_ns());
    }
    if (egm__bdata_pattern_diff(dst, bytes, bytes) != bytes)
        s.errors++;
    status = record(r, &s, "memcpy", "copy", bytes, 1, NULL);
out:
    egm_free(src);
    egm_free(dst);
    return status;
}

/* A batch's blocks, each to its own scattered place, as a batch get lands them. */
static egm_status_t memcpy_batch(egm_bdata_run_t *r, uint64_t block_bytes)
{
    size_t block = (size_t)block_bytes, n = (size_t)egm__bdata_batch_keys(&r->o, block_bytes);
    series_t s;
    uint8_t *src = egm_malloc(n * block, "bench.ceiling"),
            *dst = egm_malloc(n * block, "bench.ceiling");
    size_t *perm = egm_malloc(n * sizeof(*perm), "bench.ceiling");
    egm_status_t status = EGM_OK;
    uint64_t x = 88172645463325252ull;

    if (src == NULL || dst == NULL || perm == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "the batch ceiling's buffers");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t j = (size_t)(x % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    egm__bdata_pattern(src, n * block, 7);
    memset(dst, 0, n * block);
    for (series_start(r, &s); more(r, &s);) {
        uint64_t t0 = egm__now_ns();
        for (size_t i = 0; i < n; i++)
            memcpy(dst + perm[i] * block, src + i * block, block);
        series_add(&s, t0, egm__now_ns());
    }
    status = record(r, &s, "memcpy", "copy", block, n, "blocks copied to scattered places");
out:
    egm_free(src);
    egm_free(dst);
    egm_free(perm);
    return status;
}

static egm_status_t cu_series(egm_bdata_run_t *r, egm_cu_deviceptr_t hbm, void *pinned,
                              uint64_t bytes, uint64_t batch, const char *note)
{
    const egm_cuda_api_t *cu = r->mem.cu;
    egm_cu_deviceptr_t host = (egm_cu_deviceptr_t)(uintptr_t)pinned;
    egm_status_t status = EGM_OK;
    uint64_t len = bytes * batch;

    for (int put = 1; put >= 0 && status == EGM_OK; put--) {
        series_t s;
        for (series_start(r, &s); more(r, &s);) {
            uint64_t t0 = egm__now_ns();
            egm_cu_result_t rc = put ? cu->cuMemcpy(host, hbm, len) : cu->cuMemcpy(hbm, host, len);
            series_add(&s, t0, egm__now_ns());
            if (rc != 0) {
                egm__cuda_check(rc, "cuMemcpy");
                egm_warn("bench: ceiling: %s", egm_last_error());
                s.errors++;
                break;
            }
        }
        status = record(r, &s, "cuMemcpy", put ? "put" : "get", bytes, batch, note);
    }
    return status;
}

static egm_status_t cuda_ceilings(egm_bdata_run_t *r)
{
    const egm_cuda_api_t *cu = r->mem.cu;
    const egm_bdata_opts_t *o = &r->o;
    egm_cu_deviceptr_t hbm = 0;
    void *pinned = NULL;
    uint64_t len = 0;
    int batch = (o->workloads & (1u << EGM_BDATA_BATCH)) != 0;
    int n_sizes = (o->workloads & (1u << EGM_BDATA_SINGLE)) ? o->n_sizes : 0;

    for (int i = 0; i < n_sizes; i++)
        if (o->sizes[i] > len)
            len = o->sizes[i];
    if (batch && o->keys * o->block > len)
        len = o->keys * o->block;
    if (len == 0)
        return EGM_OK;
    egm_status_t status = egm__cuda_check(cu->cuMemAlloc(&hbm, len), "cuMemAlloc");
    if (status == EGM_OK)
        status = egm__cuda_check(cu->cuMemAllocHost(&pinned, len), "cuMemAllocHost");
    for (int i = 0; status == EGM_OK && i < n_sizes; i++)
        status = cu_series(r, hbm, pinned, o->sizes[i], 1, NULL);
    /* Each batch block size's bytes in one copy (once per distinct total). */
    for (int b = 0; status == EGM_OK && batch && b < o->n_batch_blocks; b++) {
        uint64_t total = egm__bdata_batch_keys(o, o->batch_blocks[b]) * o->batch_blocks[b];
        int seen = 0;
        for (int e = 0; e < b; e++)
            seen |= egm__bdata_batch_keys(o, o->batch_blocks[e]) * o->batch_blocks[e] == total;
        if (!seen)
            status =
                cu_series(r, hbm, pinned, total, 1, "the bytes of a batch in one contiguous copy");
    }
    if (pinned != NULL)
        cu->cuMemFreeHost(pinned);
    if (hbm != 0)
        cu->cuMemFree(hbm);
    return status;
}

/* The sizes the workloads asked for move: --sizes (single), --block (the rest). */
static int size_used(const egm_bdata_opts_t *o, uint64_t bytes)
{
    if (o->workloads & (1u << EGM_BDATA_SINGLE))
        for (int i = 0; i < o->n_sizes; i++)
            if (o->sizes[i] == bytes)
                return 1;
    return 0;
}

egm_status_t egm__bdata_ceilings(egm_bdata_run_t *r)
{
    const egm_bdata_opts_t *o = &r->o;
    unsigned block_users = (1u << EGM_BDATA_MIXED) | (1u << EGM_BDATA_FULL);
    egm_status_t status = EGM_OK;
    for (int i = 0; status == EGM_OK && i < o->n_sizes; i++)
        if (o->workloads & (1u << EGM_BDATA_SINGLE))
            status = memcpy_size(r, o->sizes[i]);
    if (status == EGM_OK && (o->workloads & block_users) && !size_used(o, o->block))
        status = memcpy_size(r, o->block);
    for (int b = 0;
         status == EGM_OK && (o->workloads & (1u << EGM_BDATA_BATCH)) && b < o->n_batch_blocks; b++)
        status = memcpy_batch(r, o->batch_blocks[b]);
    if (status == EGM_OK && r->mem.gpu)
        status = cuda_ceilings(r);
    return status;
}
