/* bench data: buffers in host memory or in a GPU's HBM, and the byte pattern
 * every object carries so that every get can be checked byte for byte. HBM is
 * filled and checked through a pinned staging buffer, outside the timed calls. */
#include <stdio.h>
#include <string.h>
#include "common/alloc.h"
#include "common/log.h"
#include "cuda/driver.h"
#include "bench_data.h"

#define PATTERN_K 0x9E3779B97F4A7C15ull
#define POISON 0xA5

uint64_t egm__bdata_seed(uint64_t a, uint64_t b, uint64_t c)
{
    /* splitmix64 over the three parts */
    uint64_t x = a * 0xBF58476D1CE4E5B9ull ^ b * 0x94D049BB133111EBull ^ c * PATTERN_K;
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Bytes [8 * word, 8 * word + len) of the object with this seed. */
static void pattern_at(uint8_t *p, size_t len, uint64_t seed, uint64_t word)
{
    size_t n = len / 8;
    uint64_t x = (seed + word) * PATTERN_K;
    for (size_t j = 0; j < n; j++) {
        memcpy(p + 8 * j, &x, 8);
        x += PATTERN_K;
    }
    if (len % 8 != 0)
        memcpy(p + 8 * n, &x, len % 8);
}

static size_t first_diff(const uint8_t *p, const uint8_t *want, size_t len)
{
    size_t i = 0;
    while (i < len && p[i] == want[i])
        i++;
    return i;
}

/* Offset of the first wrong byte in p (bytes from word `word` on), or len. */
static size_t diff_at(const uint8_t *p, size_t len, uint64_t seed, uint64_t word)
{
    size_t n = len / 8;
    uint64_t x = (seed + word) * PATTERN_K;
    for (size_t j = 0; j < n; j += 64) {
        size_t end = n - j < 64 ? n : j + 64;
        uint64_t acc = 0, y = x;
        for (size_t k = j; k < end; k++) {
            uint64_t v;
            memcpy(&v, p + 8 * k, 8);
            acc |= v ^ y;
            y += PATTERN_K;
        }
        if (acc != 0) {
            for (size_t k = j; k < end; k++, x += PATTERN_K)
                if (memcmp(p + 8 * k, &x, 8) != 0)
                    return 8 * k + first_diff(p + 8 * k, (const uint8_t *)&x, 8);
        }
        x = y;
    }
    if (len % 8 != 0 && memcmp(p + 8 * n, &x, len % 8) != 0)
        return 8 * n + first_diff(p + 8 * n, (const uint8_t *)&x, len % 8);
    return len;
}

void egm__bdata_pattern(uint8_t *p, size_t len, uint64_t seed)
{
    pattern_at(p, len, seed, 0);
}

size_t egm__bdata_pattern_diff(const uint8_t *p, size_t len, uint64_t seed)
{
    return diff_at(p, len, seed, 0);
}

egm_status_t egm__bdata_mem_open(egm_bdata_mem_t *m, int gpu, int device)
{
    int count = 0;
    egm_status_t status;

    memset(m, 0, sizeof(*m));
    m->gpu = gpu;
    m->device = device;
    if (!gpu)
        return EGM_OK;
    status = egm__cuda_load(&m->cu);
    if (status == EGM_OK)
        status = egm__cuda_count_devices(&count);
    if (status != EGM_OK)
        return egm__set_error(status, "--memory gpu needs a GPU and its CUDA driver: %s",
                              egm_last_error());
    if (device >= count)
        return egm__set_error(EGM_ERR_INVALID_ARG, "--memory gpu:%d: this host has %d GPU(s)",
                              device, count);
    status = egm__cuda_use_device(device);
    if (status != EGM_OK)
        return status;
    egm_cu_device_t dev;
    if (m->cu->cuDeviceGet(&dev, device) == 0)
        m->cu->cuDeviceGetName(m->gpu_name, (int)sizeof(m->gpu_name), dev);
    m->cu->cuDriverGetVersion(&m->cuda_version);
    return EGM_OK;
}

egm_status_t egm__bdata_mem_thread(const egm_bdata_mem_t *m)
{
    return m->gpu ? egm__cuda_use_device(m->device) : EGM_OK;
}

egm_status_t egm__bdata_buf_alloc(const egm_bdata_mem_t *m, size_t len, egm_bdata_buf_t *b)
{
    b->ptr = NULL;
    b->len = 0;
    if (!m->gpu) {
        b->ptr = egm_malloc(len ? len : 1, "bench.buffer");
        if (b->ptr == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "a %zu-byte host buffer", len);
    } else {
        egm_cu_deviceptr_t d = 0;
        egm_status_t status = egm__cuda_check(m->cu->cuMemAlloc(&d, len ? len : 1), "cuMemAlloc");
        if (status != EGM_OK)
            return status;
        b->ptr = (uint8_t *)(uintptr_t)d;
    }
    b->len = len;
    return EGM_OK;
}

void egm__bdata_buf_free(const egm_bdata_mem_t *m, egm_bdata_buf_t *b)
{
    if (b->ptr != NULL && m->gpu)
        m->cu->cuMemFree((egm_cu_deviceptr_t)(uintptr_t)b->ptr);
    else
        egm_free(b->ptr);
    b->ptr = NULL;
    b->len = 0;
}

static egm_status_t staging_get(const egm_bdata_mem_t *m, egm_bdata_staging_t *s)
{
    if (s->host != NULL)
        return EGM_OK;
    void *p = NULL;
    egm_status_t status =
        egm__cuda_check(m->cu->cuMemAllocHost(&p, EGM_BDATA_STAGING), "cuMemAllocHost");
    if (status != EGM_OK)
        return status;
    s->host = p;
    s->len = EGM_BDATA_STAGING;
    return EGM_OK;
}

void egm__bdata_staging_free(const egm_bdata_mem_t *m, egm_bdata_staging_t *s)
{
    if (s->host != NULL)
        m->cu->cuMemFreeHost(s->host);
    s->host = NULL;
    s->len = 0;
}

static egm_cu_deviceptr_t dptr(const void *p)
{
    return (egm_cu_deviceptr_t)(uintptr_t)p;
}

egm_status_t egm__bdata_fill(const egm_bdata_mem_t *m, egm_bdata_staging_t *s,
                             const egm_bdata_buf_t *b, size_t at, size_t len, uint64_t seed)
{
    if (!m->gpu) {
        pattern_at(b->ptr + at, len, seed, 0);
        return EGM_OK;
    }
    egm_status_t status = staging_get(m, s);
    for (size_t off = 0; status == EGM_OK && off < len; off += s->len) {
        size_t n = len - off < s->len ? len - off : s->len;
        pattern_at(s->host, n, seed, off / 8);
        status = egm__cuda_check(m->cu->cuMemcpy(dptr(b->ptr + at + off), dptr(s->host), n),
                                 "cuMemcpy (fill)");
    }
    return status;
}

egm_status_t egm__bdata_poison(const egm_bdata_mem_t *m, const egm_bdata_buf_t *b, size_t at,
                               size_t len)
{
    if (!m->gpu) {
        memset(b->ptr + at, POISON, len);
        return EGM_OK;
    }
    egm_status_t status =
        egm__cuda_check(m->cu->cuMemsetD8(dptr(b->ptr + at), POISON, len), "cuMemsetD8");
    /* The memset may run on after it returns (device memory), and the store
     * copies on a stream of its own that does not wait for it. Only the legacy
     * stream is waited for: other clients' copies go on meanwhile. */
    if (status == EGM_OK)
        status = egm__cuda_check(m->cu->cuStreamSynchronize(NULL), "cuStreamSynchronize (poison)");
    return status;
}

egm_status_t egm__bdata_check(const egm_bdata_mem_t *m, egm_bdata_staging_t *s,
                              const egm_bdata_buf_t *b, size_t at, size_t len, uint64_t seed,
                              int *bad_p)
{
    size_t bad = len;
    *bad_p = 0;
    if (!m->gpu) {
        bad = diff_at(b->ptr + at, len, seed, 0);
    } else {
        egm_status_t status = staging_get(m, s);
        for (size_t off = 0; status == EGM_OK && bad == len && off < len; off += s->len) {
            size_t n = len - off < s->len ? len - off : s->len;
            status = egm__cuda_check(m->cu->cuMemcpy(dptr(s->host), dptr(b->ptr + at + off), n),
                                     "cuMemcpy (check)");
            size_t d = status == EGM_OK ? diff_at(s->host, n, seed, off / 8) : n;
            if (d < n)
                bad = off + d;
        }
        if (status != EGM_OK)
            return status;
    }
    if (bad < len) {
        *bad_p = 1;
        egm__set_error(EGM_ERR_TRANSFER, "wrong byte at offset %zu of %zu", bad, len);
    }
    return EGM_OK;
}
