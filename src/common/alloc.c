/* Allocation through named sites. Built twice (CMakeLists.txt, docs/design.md
 * "Allocation tracking"):
 * - EGM_ALLOC_TRACKING=1 (egm_alloc_tracking: every test, debug and sanitizer
 *   builds): a 16-byte header before each block names its site record, whose
 *   live counters tests read. Sites are matched by text, so a site string need
 *   not outlive the call.
 * - EGM_ALLOC_TRACKING=0 (egm_alloc: the release build's products): plain
 *   malloc and free. Nothing is hashed or counted on the hot paths, and the
 *   egm__alloc_* queries are left undefined so that no product code can come to
 *   depend on them. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"

#ifndef EGM_ALLOC_TRACKING
#error "EGM_ALLOC_TRACKING must be 0 or 1 (CMakeLists.txt builds this file once for each)"
#endif

#if EGM_ALLOC_TRACKING
#include <pthread.h>

#define MAX_SITES 1024 /* power of two; the table holds at most MAX_SITES - 1 */

typedef struct {
    const char *name; /* private copy; published last, never changed after */
    uint64_t hash;
    uint64_t live;
    uint64_t bytes;
    uint64_t fail_next; /* allocations still to refuse (egm__alloc_fail_site) */
} site_t;

typedef struct {
    uint64_t size;
    site_t *site;
} header_t;

_Static_assert(sizeof(header_t) == 16, "header keeps 16-byte alignment");

/* Open addressing keyed by the site text: lookups read without the lock (names
 * are published with release stores and never move); inserts take the lock. */
static site_t sites[MAX_SITES];
static size_t n_sites;
static pthread_mutex_t sites_lock = PTHREAD_MUTEX_INITIALIZER;
static site_t overflow_site = {"(other sites)", 0, 0, 0, 0};

static uint64_t live_count, live_bytes;

static uint64_t hash_text(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

/* The slot holding `name`, or the empty slot where it belongs (NULL if full). */
static site_t *probe(const char *name, uint64_t h)
{
    for (size_t n = 0, i = h & (MAX_SITES - 1); n < MAX_SITES; n++, i = (i + 1) & (MAX_SITES - 1)) {
        const char *s = __atomic_load_n(&sites[i].name, __ATOMIC_ACQUIRE);
        if (s == NULL || (sites[i].hash == h && strcmp(s, name) == 0))
            return &sites[i];
    }
    return NULL;
}

static site_t *site_for(const char *name)
{
    if (name == NULL)
        name = "(unnamed)";
    uint64_t h = hash_text(name);
    site_t *site = probe(name, h);
    if (site != NULL && __atomic_load_n(&site->name, __ATOMIC_ACQUIRE) != NULL)
        return site;
    pthread_mutex_lock(&sites_lock);
    site = probe(name, h);
    if (site != NULL && __atomic_load_n(&site->name, __ATOMIC_ACQUIRE) == NULL) {
        char *copy = n_sites + 1 < MAX_SITES ? strdup(name) : NULL; /* lives until exit */
        if (copy != NULL) {
            site->hash = h;
            __atomic_store_n(&site->name, copy, __ATOMIC_RELEASE);
            n_sites++;
        } else {
            site = NULL;
        }
    }
    pthread_mutex_unlock(&sites_lock);
    return site != NULL ? site : &overflow_site;
}

/* What a call does to a site's count of live blocks. */
typedef enum {
    BLOCK_FREED = -1,
    BLOCK_RESIZED = 0, /* realloc: the same block, another size */
    BLOCK_ALLOCATED = 1,
} block_change_t;

static void account(site_t *site, block_change_t change, int64_t bytes)
{
    uint64_t count = (uint64_t)(int64_t)change; /* -1 wraps: the sums stay exact */
    __atomic_add_fetch(&site->live, count, __ATOMIC_RELAXED);
    __atomic_add_fetch(&site->bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
    __atomic_add_fetch(&live_count, count, __ATOMIC_RELAXED);
    __atomic_add_fetch(&live_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
}

/* Whether the site is to refuse this allocation (and one fewer after it). */
static int refused(site_t *site)
{
    uint64_t n = __atomic_load_n(&site->fail_next, __ATOMIC_RELAXED);
    while (n > 0)
        if (__atomic_compare_exchange_n(&site->fail_next, &n, n - 1, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            return 1;
    return 0;
}

static void *finish(header_t *h, size_t size, site_t *site)
{
    if (h == NULL)
        return NULL;
    h->size = size;
    h->site = site;
    account(site, BLOCK_ALLOCATED, (int64_t)size);
    return h + 1;
}

void *egm_malloc(size_t size, const char *site)
{
    site_t *s = site_for(site);
    if (size > SIZE_MAX - sizeof(header_t) || refused(s))
        return NULL;
    return finish(malloc(sizeof(header_t) + size), size, s);
}

void *egm_calloc(size_t n, size_t size, const char *site)
{
    site_t *s = site_for(site);
    if ((size != 0 && n > (SIZE_MAX - sizeof(header_t)) / size) || refused(s))
        return NULL;
    return finish(calloc(1, sizeof(header_t) + n * size), n * size, s);
}

void *egm_realloc(void *ptr, size_t size, const char *site)
{
    if (ptr == NULL)
        return egm_malloc(size, site);
    if (size > SIZE_MAX - sizeof(header_t))
        return NULL;
    header_t *old = (header_t *)ptr - 1;
    size_t old_size = old->size;
    site_t *s = old->site;
    if (refused(s))
        return NULL;
    header_t *h = realloc(old, sizeof(header_t) + size);
    if (h == NULL)
        return NULL;
    h->size = size;
    account(s, BLOCK_RESIZED, (int64_t)size - (int64_t)old_size);
    return h + 1;
}

void egm_free(void *ptr)
{
    if (ptr == NULL)
        return;
    header_t *h = (header_t *)ptr - 1;
    account(h->site, BLOCK_FREED, -(int64_t)h->size);
    free(h);
}

void egm__alloc_fail_site(const char *site, uint64_t n)
{
    site_t *s = site_for(site);
    if (s == &overflow_site) /* shared by every site the table had no room for */
        abort();
    __atomic_store_n(&s->fail_next, n, __ATOMIC_RELAXED);
}

uint64_t egm__alloc_live_count(void)
{
    return __atomic_load_n(&live_count, __ATOMIC_RELAXED);
}

uint64_t egm__alloc_live_bytes(void)
{
    return __atomic_load_n(&live_bytes, __ATOMIC_RELAXED);
}

uint64_t egm__alloc_live_count_site(const char *site)
{
    if (site == NULL)
        site = "(unnamed)";
    site_t *s = probe(site, hash_text(site));
    if (s == NULL || __atomic_load_n(&s->name, __ATOMIC_ACQUIRE) == NULL)
        return 0;
    return __atomic_load_n(&s->live, __ATOMIC_RELAXED);
}

int egm__alloc_report(void)
{
    int reported = 0;
    for (size_t i = 0; i < MAX_SITES; i++) {
        const char *name = __atomic_load_n(&sites[i].name, __ATOMIC_ACQUIRE);
        uint64_t live = name != NULL ? __atomic_load_n(&sites[i].live, __ATOMIC_RELAXED) : 0;
        if (live == 0)
            continue;
        fprintf(stderr, "live allocations: %-32s %8llu blocks %12llu bytes\n", name,
                (unsigned long long)live,
                (unsigned long long)__atomic_load_n(&sites[i].bytes, __ATOMIC_RELAXED));
        reported++;
    }
    uint64_t other = __atomic_load_n(&overflow_site.live, __ATOMIC_RELAXED);
    if (other > 0) {
        fprintf(stderr, "live allocations: %-32s %8llu blocks\n", overflow_site.name,
                (unsigned long long)other);
        reported++;
    }
    return reported;
}

#else /* !EGM_ALLOC_TRACKING */

/* Sizes no allocator can give are refused here, as the tracking build does,
 * rather than left to the allocator (a sanitizer's aborts instead of answering
 * NULL). */
#define SIZE_REFUSED(size) ((size) > (size_t)PTRDIFF_MAX)

void *egm_malloc(size_t size, const char *site)
{
    (void)site;
    return SIZE_REFUSED(size) ? NULL : malloc(size);
}

void *egm_calloc(size_t n, size_t size, const char *site)
{
    (void)site;
    if (size != 0 && (n > SIZE_MAX / size || SIZE_REFUSED(n * size)))
        return NULL;
    return calloc(n, size);
}

void *egm_realloc(void *ptr, size_t size, const char *site)
{
    (void)site;
    if (SIZE_REFUSED(size))
        return NULL;
    /* glibc's realloc(p, 0) frees p and answers NULL, which a caller reads as a
     * failure with p still valid; the tracking build answers a live 0-byte block. */
    return realloc(ptr, size > 0 ? size : 1);
}

void egm_free(void *ptr)
{
    free(ptr);
}

#endif /* EGM_ALLOC_TRACKING */

char *egm_strdup(const char *s, const char *site)
{
    return egm_strndup(s, strlen(s), site);
}

char *egm_strndup(const char *s, size_t n, const char *site)
{
    size_t len = strnlen(s, n);
    char *copy = egm_malloc(len + 1, site);
    if (copy != NULL) {
        memcpy(copy, s, len);
        copy[len] = '\0';
    }
    return copy;
}
