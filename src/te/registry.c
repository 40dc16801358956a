/* Registered local buffers: a sorted array of disjoint ranges under one mutex.
 * Lookups are binary searches; registration is rare, so inserts shift. */
#include "te/registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "cuda/driver.h"

typedef struct {
    uintptr_t base;
    uintptr_t end; /* exclusive; base < end */
    uint64_t uses; /* transfers currently using the range */
    int device;    /* GPU ordinal, EGM_DEVICE_MAPPED_HOST, or -1 for other host memory */
    int read_only; /* host memory with a page this process may not write */
    int checked;   /* read_only is known: GPU memory, or asked at the first get into it */
} range_t;

struct egm_registry {
    pthread_mutex_t lock;
    range_t *ranges;
    size_t count;
    size_t cap;
};

egm_status_t egm__registry_create(egm_registry_t **registry_p)
{
    egm_registry_t *reg = egm_calloc(1, sizeof(*reg), "te.registry");
    if (reg == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "registry: out of memory");
    pthread_mutex_init(&reg->lock, NULL);
    *registry_p = reg;
    return EGM_OK;
}

void egm__registry_destroy(egm_registry_t *registry)
{
    if (registry == NULL)
        return;
    pthread_mutex_destroy(&registry->lock);
    egm_free(registry->ranges);
    egm_free(registry);
}

/* Index of the first range with base > addr (so the candidate holding addr is
 * the one before it). Caller holds the lock. */
static size_t upper_bound(const egm_registry_t *reg, uintptr_t addr)
{
    size_t lo = 0, hi = reg->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (reg->ranges[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The range containing [addr, addr+len), or NULL. Caller holds the lock. */
static range_t *find_containing(egm_registry_t *reg, uintptr_t addr, size_t len)
{
    size_t i = upper_bound(reg, addr);
    if (i == 0)
        return NULL;
    range_t *r = &reg->ranges[i - 1];
    if (addr >= r->end || len > r->end - addr)
        return NULL;
    return r;
}

/* Whether every page of host range [base, base + len) is mapped in this
 * process: msync refuses a range with a hole (ENOMEM) and touches nothing
 * with MS_ASYNC. Another refusal (none is expected) does not count against
 * the range. */
static int host_range_mapped(uintptr_t base, size_t len)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = base & ~(uintptr_t)(page > 0 ? page - 1 : 4095);
    return msync((void *)start, base + len - start, MS_ASYNC) == 0 || errno != ENOMEM;
}

/* Whether some page of host range [base, base + len) may not be written by
 * this process, from /proc/self/maps (its mappings in address order, each
 * with its permissions). No file says nothing against it. */
static int host_range_read_only(uintptr_t base, size_t len)
{
    FILE *maps = fopen("/proc/self/maps", "re");
    if (maps == NULL)
        return 0;
    uintptr_t at = base, end = base + len;
    int read_only = 0;
    char line[512];
    while (at < end && fgets(line, sizeof(line), maps) != NULL) {
        uintmax_t lo, hi;
        char perms[8];
        int whole = strchr(line, '\n') != NULL;
        if (sscanf(line, "%jx-%jx %7s", &lo, &hi, perms) == 3 && lo <= at && at < hi) {
            if (perms[1] != 'w')
                read_only = 1;
            at = (uintptr_t)hi;
        }
        /* the rest of a line longer than the buffer (a long path) */
        while (!whole && fgets(line, sizeof(line), maps) != NULL && strchr(line, '\n') == NULL)
            ;
    }
    fclose(maps);
    return read_only;
}

egm_status_t egm__registry_add(egm_registry_t *registry, void *addr, size_t len)
{
    uintptr_t base = (uintptr_t)addr;
    egm_status_t st = EGM_OK;

    if (registry == NULL || addr == NULL || len == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "register: addr and len must be non-zero");
    if (len > UINTPTR_MAX - base)
        return egm__set_error(EGM_ERR_INVALID_ARG, "register: range wraps the address space");
    /* Asked once here, outside the lock: transfers look it up for free. No
     * driver (or memory it does not know) means host memory. */
    int device = -1;
    if (egm__cuda_pointer_device(addr, &device) != EGM_OK)
        device = -1;
    if (device < 0 && egm__cuda_pointer_gpu_mapped_host(addr))
        device = EGM_DEVICE_MAPPED_HOST;
    /* A copy into or out of memory that is not there would kill the process
     * (a wrong pointer from Python, a freed buffer): refused here. */
    if (device < 0 && !host_range_mapped(base, len))
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "register: [%p, +%zu) is neither GPU memory nor host memory mapped "
                              "in this process",
                              addr, len);

    pthread_mutex_lock(&registry->lock);
    size_t i = upper_bound(registry, base);
    /* Disjoint sorted ranges: only the neighbours on either side can overlap. */
    if ((i > 0 && registry->ranges[i - 1].end > base) ||
        (i < registry->count && registry->ranges[i].base < base + len)) {
        st = egm__set_error(EGM_ERR_EXISTS, "register: [%p, +%zu) overlaps a registered range",
                            addr, len);
        goto out;
    }
    if (registry->count == registry->cap) {
        size_t cap = registry->cap ? registry->cap * 2 : 8;
        range_t *grown = egm_realloc(registry->ranges, cap * sizeof(*grown), "te.registry.ranges");
        if (grown == NULL) {
            st = egm__set_error(EGM_ERR_NO_MEMORY, "register: out of memory");
            goto out;
        }
        registry->ranges = grown;
        registry->cap = cap;
    }
    memmove(&registry->ranges[i + 1], &registry->ranges[i],
            (registry->count - i) * sizeof(range_t));
    registry->ranges[i] = (range_t){
        .base = base, .end = base + len, .uses = 0, .device = device, .checked = device >= 0};
    registry->count++;
out:
    pthread_mutex_unlock(&registry->lock);
    return st;
}

egm_status_t egm__registry_remove(egm_registry_t *registry, void *addr)
{
    uintptr_t base = (uintptr_t)addr;
    egm_status_t st = EGM_OK;

    if (registry == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "unregister: no registry");
    pthread_mutex_lock(&registry->lock);
    size_t i = upper_bound(registry, base);
    if (i == 0 || registry->ranges[i - 1].base != base) {
        st = egm__set_error(EGM_ERR_NOT_FOUND, "unregister: %p is not a registered range", addr);
        goto out;
    }
    if (registry->ranges[i - 1].uses > 0) {
        st = egm__set_error(EGM_ERR_BUSY, "unregister: %p is in use by %llu transfer(s)", addr,
                            (unsigned long long)registry->ranges[i - 1].uses);
        goto out;
    }
    memmove(&registry->ranges[i - 1], &registry->ranges[i],
            (registry->count - i) * sizeof(range_t));
    registry->count--;
out:
    pthread_mutex_unlock(&registry->lock);
    return st;
}

/* The registered range that holds all of [addr, +len), with the registry
 * locked on EGM_OK (the caller unlocks); on an error nothing is locked. */
static egm_status_t lock_containing(egm_registry_t *registry, const void *addr, size_t len,
                                    range_t **range_p)
{
    if (registry == NULL || addr == NULL)
        return egm__set_error(EGM_ERR_NOT_REGISTERED, "buffer %p: not registered", addr);
    pthread_mutex_lock(&registry->lock);
    *range_p = find_containing(registry, (uintptr_t)addr, len);
    if (*range_p == NULL) {
        pthread_mutex_unlock(&registry->lock);
        return egm__set_error(EGM_ERR_NOT_REGISTERED,
                              "buffer [%p, +%zu): not inside one registered range", addr, len);
    }
    return EGM_OK;
}

egm_status_t egm__registry_acquire(egm_registry_t *registry, const void *addr, size_t len)
{
    range_t *r;
    egm_status_t st = lock_containing(registry, addr, len, &r);

    if (st != EGM_OK)
        return st;
    r->uses++;
    pthread_mutex_unlock(&registry->lock);
    return EGM_OK;
}

/* Consecutive parts of a batch mostly lie in the same registered range (a KV
 * cache region): `last` is tried before the binary search. Caller holds the lock. */
static range_t *find_near(egm_registry_t *reg, range_t *last, uintptr_t addr, size_t len)
{
    if (last != NULL && addr >= last->base && addr < last->end && len <= last->end - addr)
        return last;
    return find_containing(reg, addr, len);
}

egm_status_t egm__registry_acquire_n(egm_registry_t *registry, void *const *addr, const size_t *len,
                                     size_t n, int for_write, int *acquired)
{
    range_t *r = NULL;
    egm_status_t st = EGM_OK;

    for (size_t i = 0; i < n; i++)
        acquired[i] = 0;
    if (registry == NULL)
        return egm__set_error(EGM_ERR_NOT_REGISTERED, "buffer %p: not registered",
                              n > 0 ? addr[0] : NULL);
    pthread_mutex_lock(&registry->lock);
    for (size_t i = 0; i < n; i++) {
        if (len[i] == 0)
            continue;
        r = addr[i] != NULL ? find_near(registry, r, (uintptr_t)addr[i], len[i]) : NULL;
        if (r == NULL) {
            st = egm__set_error(EGM_ERR_NOT_REGISTERED,
                                "buffer [%p, +%zu): not inside one registered range", addr[i],
                                len[i]);
            break;
        }
        if (for_write && !r->checked) { /* once per range: puts never ask */
            r->read_only = host_range_read_only(r->base, (size_t)(r->end - r->base));
            r->checked = 1;
        }
        if (for_write && r->read_only) {
            st = egm__set_error(EGM_ERR_INVALID_ARG,
                                "buffer [%p, +%zu) lies in registered range [%p, +%zu), which has "
                                "memory this process may not write: a get needs writable memory "
                                "(register writable memory, or unregister the range and register "
                                "it again once it is writable)",
                                addr[i], len[i], (void *)r->base, (size_t)(r->end - r->base));
            break;
        }
        r->uses++;
        acquired[i] = 1;
    }
    pthread_mutex_unlock(&registry->lock);
    return st;
}

void egm__registry_release_n(egm_registry_t *registry, void *const *addr, const int *acquired,
                             size_t n)
{
    range_t *r = NULL;

    if (registry == NULL)
        return;
    pthread_mutex_lock(&registry->lock);
    for (size_t i = 0; i < n; i++) {
        if (!acquired[i])
            continue;
        r = find_near(registry, r, (uintptr_t)addr[i], 0);
        if (r != NULL && r->uses > 0)
            r->uses--;
        else
            egm_warn("registry: release of %p without a matching acquire", addr[i]);
    }
    pthread_mutex_unlock(&registry->lock);
}

egm_status_t egm__registry_device_range(egm_registry_t *registry, const void *addr, size_t len,
                                        int *device_p, uintptr_t *base_p, uintptr_t *end_p)
{
    range_t *r;
    egm_status_t st = lock_containing(registry, addr, len, &r);

    if (st != EGM_OK)
        return st;
    *device_p = r->device;
    *base_p = r->base;
    *end_p = r->end;
    pthread_mutex_unlock(&registry->lock);
    return EGM_OK;
}

void egm__registry_release(egm_registry_t *registry, const void *addr)
{
    const int acquired = 1;
    if (addr != NULL)
        egm__registry_release_n(registry, (void *const *)&addr, &acquired, 1);
}

egm_status_t egm__registry_device(egm_registry_t *registry, const void *addr, size_t len,
                                  int *device_p)
{
    uintptr_t base, end;
    return egm__registry_device_range(registry, addr, len, device_p, &base, &end);
}
