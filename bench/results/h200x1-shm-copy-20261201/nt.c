/* PUT-like: hot 16 MiB source (refilled before each call) into rotating slots of a 1 GiB
 * memfd mapping: glibc memcpy against SSE2 non-temporal stores. */
#define _GNU_SOURCE
#include <emmintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#define OBJ (16ull << 20)
#define POOL (1ull << 30)
static uint64_t now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ull + t.tv_nsec;
}
static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
static void nt_copy(void *dst, const void *src, size_t n)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > n)
        head = n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i)),
                b = _mm_loadu_si128((const __m128i *)(s + i + 16)),
                c = _mm_loadu_si128((const __m128i *)(s + i + 32)),
                e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    _mm_sfence();
    memcpy(d + i, s + i, n - i);
}
int main(int argc, char **argv)
{
    int it = argc > 1 ? atoi(argv[1]) : 200;
    int fd = memfd_create("p", 0);
    if (ftruncate(fd, POOL))
        abort();
    uint8_t *pool = mmap(NULL, POOL, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    memset(pool, 3, POOL);
    uint8_t *buf = malloc(OBJ);
    memset(buf, 1, OBJ);
    int n = POOL / OBJ;
    uint64_t *lat = calloc(it, 8);
    for (int rep = 0; rep < 2; rep++)
        for (int mode = 0; mode < 4; mode++) {
            for (int i = 0; i < it; i++) {
                uint8_t *slot = pool + (uint64_t)(i % n) * OBJ;
                memset(buf, i, OBJ);
                uint64_t t0 = now();
                if (mode == 0)
                    memcpy(slot, buf, OBJ);
                else if (mode == 1)
                    nt_copy(slot, buf, OBJ);
                else if (mode == 2)
                    memcpy(buf, slot, OBJ);
                else
                    nt_copy(buf, slot, OBJ);
                lat[i] = now() - t0;
                if (memcmp(slot + OBJ - 64, buf + OBJ - 64, 64))
                    abort();
            }
            qsort(lat, it, 8, cmp);
            const char *nm[] = {"PUT memcpy", "PUT nt-store", "GET memcpy", "GET nt-store"};
            printf("%-14s p50 %7.1f us %6.2f GB/s\n", nm[mode], lat[it / 2] / 1e3,
                   OBJ / (lat[it / 2] / 1e9) / 1e9);
        }
    /* ceiling like the bench: same two buffers */
    uint8_t *b2 = malloc(OBJ);
    memset(b2, 0, OBJ);
    for (int i = 0; i < it; i++) {
        uint64_t t0 = now();
        memcpy(b2, buf, OBJ);
        lat[i] = now() - t0;
    }
    qsort(lat, it, 8, cmp);
    printf("%-14s p50 %7.1f us %6.2f GB/s\n", "ceiling", lat[it / 2] / 1e3,
           OBJ / (lat[it / 2] / 1e9) / 1e9);
    return 0;
}
