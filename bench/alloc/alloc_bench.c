/* Segment allocator benchmark: the master's allocator (src/master/allocator.c)
 * against its first-fit predecessor (firstfit.c), on the same seeded traces.
 *   steady: a 1 GiB segment kept full with log-uniform 4 KiB..1 MiB objects;
 *           a request that does not fit evicts random objects until it does.
 *           Utilisation when a request is first refused, mean occupancy.
 *   speed:  alloc+free pairs per second with L live objects (1..256 KiB) in a
 *           segment about half full.
 * Build and run: bench/alloc/run.sh [build-dir [seed [steady-only]]]. Output:
 * one JSON object. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench/alloc/firstfit.h"
#include "common/alloc.h"

#define KiB (1024ull)
#define GiB (1024ull * 1024 * 1024)

typedef struct {
    const char *name;
    egm_status_t (*create)(uint64_t, void **);
    void (*destroy)(void *);
    egm_status_t (*alloc)(void *, uint64_t, uint64_t *);
    egm_status_t (*free)(void *, uint64_t, uint64_t);
    void (*stats)(const void *, egm_allocator_stats_t *);
} impl_t;

static egm_status_t bins_create(uint64_t s, void **a)
{
    return egm__allocator_create(s, (egm_allocator_t **)a);
}
static void bins_destroy(void *a)
{
    egm__allocator_destroy(a);
}
static egm_status_t bins_alloc(void *a, uint64_t l, uint64_t *o)
{
    return egm__allocator_alloc(a, l, o);
}
static egm_status_t bins_free(void *a, uint64_t o, uint64_t l)
{
    return egm__allocator_free(a, o, l);
}
static void bins_stats(const void *a, egm_allocator_stats_t *s)
{
    egm__allocator_stats(a, s);
}
static egm_status_t ff_create(uint64_t s, void **a)
{
    return ff_allocator_create(s, (ff_allocator_t **)a);
}
static void ff_destroy(void *a)
{
    ff_allocator_destroy(a);
}
static egm_status_t ff_alloc(void *a, uint64_t l, uint64_t *o)
{
    return ff_allocator_alloc(a, l, o);
}
static egm_status_t ff_free(void *a, uint64_t o, uint64_t l)
{
    return ff_allocator_free(a, o, l);
}
static void ff_stats(const void *a, egm_allocator_stats_t *s)
{
    ff_allocator_stats(a, s);
}

static const impl_t impls[] = {
    {"size_class_bins", bins_create, bins_destroy, bins_alloc, bins_free, bins_stats},
    {"first_fit_array", ff_create, ff_destroy, ff_alloc, ff_free, ff_stats},
};

static uint64_t rng_state, steady_seed = 1;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    return x;
}

typedef struct {
    uint64_t offset, len;
} live_t;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "alloc_bench: %s\n", what);
    exit(1);
}

static void steady(const impl_t *im, int first)
{
    enum { WARMUP = 20000, REQUESTS = 100000, MAX_LIVE = 1 << 16 };
    live_t *live = malloc(MAX_LIVE * sizeof(*live));
    void *a;
    egm_allocator_stats_t st;
    size_t n = 0, refused = 0;
    double rsum = 0, rmin = 1, occ = 0, t0;
    uint64_t evicted = 0, placed = 0;

    rng_state = steady_seed * 0x2545f4914f6cdd1dull;
    if (live == NULL || im->create(GiB, &a) != EGM_OK)
        die("setup");
    t0 = now();
    for (int r = 0; r < WARMUP + REQUESTS; r++) {
        uint64_t lo = 4 * KiB << (rnd() % 8), len = lo + rnd() % lo, off;
        int first_try = 1;
        while (im->alloc(a, len, &off) != EGM_OK) {
            if (n == 0)
                die("empty segment refused");
            if (first_try && r >= WARMUP) {
                im->stats(a, &st);
                double u = (double)st.used / (double)st.capacity;
                rsum += u;
                rmin = u < rmin ? u : rmin;
                refused++;
            }
            first_try = 0;
            size_t v = (size_t)(rnd() % n);
            if (im->free(a, live[v].offset, live[v].len) != EGM_OK)
                die("free");
            if (r >= WARMUP)
                evicted += live[v].len;
            live[v] = live[--n];
        }
        live[n++] = (live_t){off, len};
        if (r >= WARMUP) {
            placed += len;
            im->stats(a, &st);
            occ += (double)st.used / (double)st.capacity;
        }
    }
    double t = now() - t0;
    im->stats(a, &st);
    printf("%s    \"%s_steady\": {\"requests\": %d, \"refused\": %zu, \"util_at_refusal_mean\": "
           "%.4f, \"util_at_refusal_min\": %.4f, \"occupancy_mean\": %.4f, "
           "\"evicted_per_placed\": %.3f, \"free_ranges\": %zu, \"seconds\": %.3f}",
           first ? "" : ",\n", im->name, REQUESTS, refused, rsum / (double)refused, rmin,
           occ / REQUESTS, (double)evicted / (double)placed, st.free_ranges, t);
    im->destroy(a);
    free(live);
}

static void speed(const impl_t *im, size_t n_live)
{
    enum { PAIRS = 1000000 };
    live_t *live = malloc(n_live * sizeof(*live));
    void *a;
    /* About half full: mean object 128 KiB. */
    uint64_t seg = n_live * 256 * KiB;

    rng_state = 0x9e3779b97f4a7c15ull;
    if (live == NULL || im->create(seg, &a) != EGM_OK)
        die("setup");
    for (size_t i = 0; i < n_live; i++) {
        live[i].len = 1 + rnd() % (256 * KiB);
        if (im->alloc(a, live[i].len, &live[i].offset) != EGM_OK)
            die("fill");
    }
    size_t retries = 0;
    double t0 = now();
    for (size_t i = 0; i < PAIRS; i++) {
        live_t *v = &live[rnd() % n_live];
        if (im->free(a, v->offset, v->len) != EGM_OK)
            die("free");
        v->len = 1 + rnd() % (256 * KiB);
        while (im->alloc(a, v->len, &v->offset) != EGM_OK) {
            v->len = v->len / 2 + 1;
            retries++;
        }
    }
    double t = now() - t0;
    egm_allocator_stats_t st;
    im->stats(a, &st);
    printf(",\n    \"%s_speed_%zu_live\": {\"pairs\": %d, \"pairs_per_s\": %.0f, \"ns_per_op\": "
           "%.1f, \"free_ranges\": %zu, \"retries\": %zu}",
           im->name, n_live, PAIRS, PAIRS / t, t * 1e9 / (2.0 * PAIRS), st.free_ranges, retries);
    im->destroy(a);
    free(live);
}

int main(int argc, char **argv)
{
    static const size_t lives[] = {1024, 16384, 131072};

    if (argc > 1)
        steady_seed = strtoull(argv[1], NULL, 0) | 1;
    printf("{\n    \"seed\": %llu,\n", (unsigned long long)steady_seed);
    for (size_t i = 0; i < sizeof(impls) / sizeof(impls[0]); i++)
        steady(&impls[i], i == 0);
    if (argc > 2) {
        printf("\n}\n");
        return 0;
    }
    for (size_t k = 0; k < sizeof(lives) / sizeof(lives[0]); k++)
        for (size_t i = 0; i < sizeof(impls) / sizeof(impls[0]); i++)
            speed(&impls[i], lives[k]);
    printf("\n}\n");
    return egm__alloc_live_count() == 0 ? 0 : 1;
}
