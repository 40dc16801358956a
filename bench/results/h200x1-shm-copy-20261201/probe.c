/* Standalone probe: where does a 16 MiB copy out of / into a memfd shared
 * mapping lose against memcpy between two private buffers? */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define OBJ (16ull << 20)
static uint64_t POOL = 1ull << 30;
static int ITERS = 200;

static uint64_t now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
static long minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}
static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void *priv(uint64_t len, int huge)
{
    void *p =
        mmap(NULL, len + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    p = (void *)(((uintptr_t)p + (2 << 20) - 1) & ~(uintptr_t)((2 << 20) - 1));
    madvise(p, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset(p, 1, len);
    return p;
}

static void *shared(uint64_t len, int huge, int *fd_p)
{
    int fd = memfd_create("probe", MFD_CLOEXEC);
    if (ftruncate(fd, (off_t)len) != 0)
        abort();
    /* provider's mapping, not touched; then the "client's" mapping, 2 MiB aligned */
    void *prov = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    void *r = mmap(NULL, len + (2 << 20), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uintptr_t a = ((uintptr_t)r + (2 << 20) - 1) & ~(uintptr_t)((2 << 20) - 1);
    void *p = mmap((void *)a, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (huge) {
        madvise(prov, len, MADV_HUGEPAGE);
        madvise(p, len, MADV_HUGEPAGE);
    }
    memset(p, 1, len); /* the bench's warm pass */
    (void)prov;
    *fd_p = fd;
    return p;
}

/* mode: 0 nothing between calls; 1 poison dst (get-like); 2 fill src (put-like) */
static void series(const char *name, uint8_t *src, uint64_t src_stride, int src_n, uint8_t *dst,
                   uint64_t dst_stride, int dst_n, int mode)
{
    uint64_t *t = calloc(ITERS, sizeof(*t));
    long f0 = minflt();
    for (int i = 0; i < ITERS; i++) {
        uint8_t *s = src + (uint64_t)(i % src_n) * src_stride;
        uint8_t *d = dst + (uint64_t)(i % dst_n) * dst_stride;
        if (mode == 1)
            memset(d, 0xa5, OBJ);
        if (mode == 2)
            memset(s, (int)i, OBJ);
        uint64_t t0 = now();
        memcpy(d, s, OBJ);
        t[i] = now() - t0;
    }
    long f1 = minflt();
    qsort(t, ITERS, sizeof(*t), cmp);
    printf("%-58s p50 %7.1f us  %6.2f GB/s  faults/call %.1f\n", name, t[ITERS / 2] / 1e3,
           OBJ / (t[ITERS / 2] / 1e9) / 1e9, (double)(f1 - f0) / ITERS);
    fflush(stdout);
    free(t);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        ITERS = atoi(argv[1]);
    int nslots = (int)(POOL / OBJ);
    int fd, fdh;
    for (int huge = 0; huge <= 1; huge++) {
        printf("== private buffers %s\n", huge ? "MADV_HUGEPAGE" : "MADV_NOHUGEPAGE");
        uint8_t *a = priv(OBJ, huge), *b = priv(OBJ, huge);
        uint8_t *ppool = priv(POOL, huge);
        series("ceiling: private->private same bufs", a, 0, 1, b, 0, 1, 0);
        series("private pool rotating -> private dst", ppool, OBJ, nslots, b, 0, 1, 0);
        series("private pool rotating -> private dst, poison", ppool, OBJ, nslots, b, 0, 1, 1);
        series("private src, fill -> private pool rotating", a, 0, 1, ppool, OBJ, nslots, 2);
        munmap(ppool, POOL);
        for (int sh = 0; sh <= 1; sh++) {
            uint8_t *spool = shared(POOL, sh, sh ? &fdh : &fd);
            printf("-- memfd pool %s (client buffers %s)\n", sh ? "MADV_HUGEPAGE" : "4k",
                   huge ? "huge" : "4k");
            series("GET memfd same slot -> private dst", spool, 0, 1, b, 0, 1, 0);
            series("GET memfd rotating -> private dst", spool, OBJ, nslots, b, 0, 1, 0);
            series("GET memfd rotating -> private dst, poison (bench)", spool, OBJ, nslots, b, 0, 1,
                   1);
            series("PUT private src -> memfd same slot", a, 0, 1, spool, 0, 1, 0);
            series("PUT private src -> memfd rotating", a, 0, 1, spool, OBJ, nslots, 0);
            series("PUT private src, fill -> memfd rotating (bench)", a, 0, 1, spool, OBJ, nslots,
                   2);
            munmap(spool, POOL);
            close(sh ? fdh : fd);
        }
        munmap(a, OBJ);
        munmap(b, OBJ);
    }
    /* first touch costs: a fresh client mapping of already allocated pages */
    {
        uint8_t *b = priv(OBJ, 0);
        int f = memfd_create("probe2", MFD_CLOEXEC);
        if (ftruncate(f, (off_t)POOL) != 0)
            abort();
        uint8_t *p1 = mmap(NULL, POOL, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        uint64_t t0 = now();
        long f0 = minflt();
        for (uint64_t o = 0; o < POOL; o += OBJ)
            memset(p1 + o, 7, OBJ);
        printf(
            "first write of fresh memfd pages (alloc+zero+fault): %.1f us per 16 MiB, faults %ld\n",
            (now() - t0) / 1e3 / nslots, (minflt() - f0) / nslots);
        uint8_t *p2 = mmap(NULL, POOL, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        t0 = now();
        f0 = minflt();
        for (uint64_t o = 0; o < POOL; o += OBJ)
            memcpy(b, p2 + o, OBJ);
        printf("GET through a fresh mapping (minor faults): %.1f us per 16 MiB, faults %ld\n",
               (now() - t0) / 1e3 / nslots, (minflt() - f0) / nslots);
        uint8_t *p3 = mmap(NULL, POOL, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        t0 = now();
        f0 = minflt();
        for (uint64_t o = 0; o < POOL; o += OBJ)
            memcpy(p3 + o, b, OBJ);
        printf("PUT through a fresh mapping (minor faults): %.1f us per 16 MiB, faults %ld\n",
               (now() - t0) / 1e3 / nslots, (minflt() - f0) / nslots);
        uint8_t *p4 = mmap(NULL, POOL, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        t0 = now();
        int rc = madvise(p4, POOL, MADV_POPULATE_WRITE);
        printf("MADV_POPULATE_WRITE of a fresh mapping of 1 GiB: rc %d, %.1f ms\n", rc,
               (now() - t0) / 1e6);
        t0 = now();
        for (uint64_t o = 0; o < POOL; o += OBJ)
            memcpy(b, p4 + o, OBJ);
        printf("GET after populate: %.1f us per 16 MiB\n", (now() - t0) / 1e3 / nslots);
    }
    return 0;
}
