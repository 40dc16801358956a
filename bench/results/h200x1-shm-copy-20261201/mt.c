/* one 16 MiB copy split over N threads, source rotating over a 1 GiB memfd pool */
#define _GNU_SOURCE
#include <pthread.h>
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
typedef struct {
    pthread_barrier_t *go, *done;
    uint8_t **s, **d;
    int idx, n;
    volatile int *stop;
} arg_t;
static void *th(void *p)
{
    arg_t *a = p;
    for (;;) {
        pthread_barrier_wait(a->go);
        if (*a->stop)
            return NULL;
        size_t part = OBJ / a->n;
        memcpy(*a->d + a->idx * part, *a->s + a->idx * part, part);
        pthread_barrier_wait(a->done);
    }
}
int main(void)
{
    int fd = memfd_create("p", 0);
    if (ftruncate(fd, POOL))
        abort();
    uint8_t *pool = mmap(NULL, POOL, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    memset(pool, 3, POOL);
    uint8_t *buf = malloc(OBJ);
    memset(buf, 1, OBJ);
    int nslots = POOL / OBJ;
    for (int n = 1; n <= 8; n *= 2)
        for (int dir = 0; dir < 2; dir++) {
            pthread_barrier_t go, done;
            pthread_barrier_init(&go, NULL, n);
            pthread_barrier_init(&done, NULL, n);
            volatile int stop = 0;
            uint8_t *s, *d;
            arg_t a[8];
            pthread_t t[8];
            for (int i = 1; i < n; i++) {
                a[i] = (arg_t){&go, &done, &s, &d, i, n, &stop};
                pthread_create(&t[i], NULL, th, &a[i]);
            }
            uint64_t lat[200];
            for (int it = 0; it < 200; it++) {
                uint8_t *slot = pool + (uint64_t)(it % nslots) * OBJ;
                s = dir ? buf : slot;
                d = dir ? slot : buf;
                uint64_t t0 = now();
                if (n > 1)
                    pthread_barrier_wait(&go);
                size_t part = OBJ / n;
                memcpy(d, s, part);
                if (n > 1)
                    pthread_barrier_wait(&done);
                lat[it] = now() - t0;
            }
            stop = 1;
            if (n > 1)
                pthread_barrier_wait(&go);
            for (int i = 1; i < n; i++)
                pthread_join(t[i], NULL);
            qsort(lat, 200, 8, cmp);
            printf("%s threads %d: p50 %.1f us %.2f GB/s\n", dir ? "PUT" : "GET", n, lat[100] / 1e3,
                   OBJ / (lat[100] / 1e9) / 1e9);
        }
    return 0;
}
