/* GET-like copy from k rotating 16 MiB slots of a memfd mapping into one private buffer:
 * where does the copy leave the last-level cache? */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#define OBJ (16ull << 20)
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
int main(void)
{
    int fd = memfd_create("p", 0);
    size_t pool = 64 * OBJ;
    if (ftruncate(fd, pool))
        abort();
    uint8_t *p = mmap(NULL, pool, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    memset(p, 3, pool);
    uint8_t *buf = malloc(OBJ);
    memset(buf, 1, OBJ);
    int ks[] = {1, 2, 3, 4, 6, 8, 12, 16, 64};
    for (int dir = 0; dir < 2; dir++)
        for (unsigned j = 0; j < sizeof(ks) / sizeof(*ks); j++) {
            int k = ks[j];
            uint64_t lat[300];
            for (int it = 0; it < 300; it++) {
                uint8_t *s = p + (uint64_t)(it % k) * OBJ;
                uint64_t t0 = now();
                if (dir)
                    memcpy(s, buf, OBJ);
                else
                    memcpy(buf, s, OBJ);
                lat[it] = now() - t0;
            }
            qsort(lat, 300, 8, cmp);
            printf("%s k=%2d slots (%4d MiB): p50 %7.1f us %6.2f GB/s\n", dir ? "PUT" : "GET", k,
                   k * 16, lat[150] / 1e3, OBJ / (lat[150] / 1e9) / 1e9);
        }
    return 0;
}
