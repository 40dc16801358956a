/* Tracked allocation: a 16-byte header before each block names its site record,
 * whose live counters tests read. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"

#define MAX_SITES 1024

typedef struct {
    const char *name; /* first pointer seen for this site text */
    uint64_t live;
    uint64_t bytes;
} site_t;

typedef struct {
    uint64_t size;
    site_t *site;
} header_t;

_Static_assert(sizeof(header_t) == 16, "header keeps 16-byte alignment");

static site_t sites[MAX_SITES];
static size_t n_sites;
static pthread_mutex_t sites_lock = PTHREAD_MUTEX_INITIALIZER;
static site_t overflow_site = {"(other sites)", 0, 0};
static uint64_t live_count, live_bytes;

static site_t *site_for(const char *name)
{
    size_t n = __atomic_load_n(&n_sites, __ATOMIC_ACQUIRE);
    if (name == NULL)
        name = "(unnamed)";
    for (size_t i = 0; i < n; i++)
        if (sites[i].name == name)
            return &sites[i];
    pthread_mutex_lock(&sites_lock);
    site_t *found = NULL;
    for (size_t i = 0; i < n_sites && found == NULL; i++)
        if (strcmp(sites[i].name, name) == 0)
            found = &sites[i];
    if (found == NULL && n_sites < MAX_SITES) {
        found = &sites[n_sites];
        found->name = name;
        __atomic_store_n(&n_sites, n_sites + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&sites_lock);
    return found != NULL ? found : &overflow_site;
}

static void account(site_t *site, int64_t count, int64_t bytes)
{
    __atomic_add_fetch(&site->live, (uint64_t)count, __ATOMIC_RELAXED);
    __atomic_add_fetch(&site->bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
    __atomic_add_fetch(&live_count, (uint64_t)count, __ATOMIC_RELAXED);
    __atomic_add_fetch(&live_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
}

static void *finish(header_t *h, size_t size, site_t *site)
{
    if (h == NULL)
        return NULL;
    h->size = size;
    h->site = site;
    account(site, 1, (int64_t)size);
    return h + 1;
}

void *egm_malloc(size_t size, const char *site)
{
    if (size > SIZE_MAX - sizeof(header_t))
        return NULL;
    return finish(malloc(sizeof(header_t) + size), size, site_for(site));
}

void *egm_calloc(size_t n, size_t size, const char *site)
{
    if (size != 0 && n > (SIZE_MAX - sizeof(header_t)) / size)
        return NULL;
    return finish(calloc(1, sizeof(header_t) + n * size), n * size, site_for(site));
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
    header_t *h = realloc(old, sizeof(header_t) + size);
    if (h == NULL)
        return NULL;
    h->size = size;
    account(s, 0, (int64_t)size - (int64_t)old_size);
    return h + 1;
}

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

void egm_free(void *ptr)
{
    if (ptr == NULL)
        return;
    header_t *h = (header_t *)ptr - 1;
    account(h->site, -1, -(int64_t)h->size);
    free(h);
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
    size_t n = __atomic_load_n(&n_sites, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++)
        if (strcmp(sites[i].name, site) == 0)
            return __atomic_load_n(&sites[i].live, __ATOMIC_RELAXED);
    return 0;
}

int egm__alloc_report(void)
{
    size_t n = __atomic_load_n(&n_sites, __ATOMIC_ACQUIRE);
    int reported = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t live = __atomic_load_n(&sites[i].live, __ATOMIC_RELAXED);
        if (live == 0)
            continue;
        fprintf(stderr, "live allocations: %-32s %8llu blocks %12llu bytes\n", sites[i].name,
                (unsigned long long)live,
                (unsigned long long)__atomic_load_n(&sites[i].bytes, __ATOMIC_RELAXED));
        reported++;
    }
    return reported;
}
