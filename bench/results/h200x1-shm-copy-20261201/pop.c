/* A client's fresh mapping of pages that exist: what does the first write of 16 MiB cost,
 * plain (write faults), after MADV_POPULATE_READ, after MADV_POPULATE_WRITE? */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif
#define OBJ (16ull << 20)
#define POOL (1ull << 30)
static uint64_t now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ull + t.tv_nsec;
}
static long flt(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_minflt;
}
int main(void)
{
    int fd = memfd_create("p", 0);
    if (ftruncate(fd, POOL))
        abort();
    uint8_t *prov = mmap(NULL, POOL, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    memset(prov, 3, POOL);
    uint8_t *buf = malloc(OBJ);
    memset(buf, 1, OBJ);
    int n = POOL / OBJ;
    for (int rep = 0; rep < 2; rep++)
        for (int mode = 0; mode < 5; mode++) {
            uint8_t *m = mmap(NULL, POOL, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            uint64_t tp = 0, tc = 0;
            long f0 = flt();
            int rc = 0;
            for (int i = 0; i < n; i++) {
                uint8_t *s = m + (uint64_t)i * OBJ;
                uint64_t t0 = now();
                if (mode == 1)
                    rc |= madvise(s, OBJ, MADV_POPULATE_READ);
                if (mode == 2)
                    rc |= madvise(s, OBJ, MADV_POPULATE_WRITE);
                uint64_t t1 = now();
                if (mode == 3)
                    memcpy(buf, s, OBJ);
                else if (mode == 4) {
                    madvise(s, OBJ, MADV_POPULATE_READ);
                    t1 = now();
                    memcpy(buf, s, OBJ);
                } else
                    memcpy(s, buf, OBJ);
                uint64_t t2 = now();
                tp += t1 - t0;
                tc += t2 - t1;
            }
            const char *name[] = {"PUT plain", "PUT after POPULATE_READ",
                                  "PUT after POPULATE_WRITE", "GET plain",
                                  "GET after POPULATE_READ"};
            printf("%-26s rc %d: populate %7.1f us + copy %7.1f us per 16 MiB, faults/16MiB %ld\n",
                   name[mode], rc, tp / 1e3 / n, tc / 1e3 / n, (flt() - f0) / n);
            /* steady */
            munmap(m, POOL);
        }
    uint8_t *m = mmap(NULL, POOL, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    memset(m, 1, POOL);
    uint64_t t0 = now();
    for (int i = 0; i < n; i++)
        memcpy(m + (uint64_t)i * OBJ, buf, OBJ);
    printf("PUT steady (mapped): %.1f us\n", (now() - t0) / 1e3 / n);
    t0 = now();
    for (int i = 0; i < n; i++)
        madvise(m + (uint64_t)i * OBJ, OBJ, MADV_POPULATE_READ);
    printf("POPULATE_READ of an already populated 16 MiB: %.1f us\n", (now() - t0) / 1e3 / n);
    return 0;
}
