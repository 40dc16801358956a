/* Placement over failure domains (placement.h). */
#include "master/placement.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/log.h"

/* Segments one call may keep track of: holding + wanted. */
#define CHOSEN_MAX 64

typedef struct {
    double free_ratio;
    uint64_t tie; /* random: equal ratios in random order */
    size_t index;
} ranked_segment_t;

struct egm_placer {
    uint64_t rng;
    /* Counted over the segment set of generation `counted_gen` (an upper
     * bound of what a call can use: unreachable and excluded segments are
     * in): once a call's replicas cover that many zones, hosts or providers, no
     * candidate is left at that level, and the pass is skipped rather than
     * walking every segment for nothing (one host is the common case). */
    uint64_t counted_gen;
    int counted;
    size_t n_zones, n_hosts, n_providers;
    const egm_segment_t **sorted; /* scratch for counting */
    size_t sorted_cap;
    size_t *order; /* scratch: segment indexes in the strategy's order */
    size_t order_cap;
    ranked_segment_t *ranked; /* scratch: free_ratio_first */
    size_t ranked_cap;
};

egm_status_t egm__placer_create(egm_placer_t **placer_p)
{
    egm_placer_t *p = egm_calloc(1, sizeof(*p), "master.placement");
    *placer_p = NULL;
    if (p == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the placer");
    p->rng = egm__id_random().lo | 1;
    *placer_p = p;
    return EGM_OK;
}

void egm__placer_destroy(egm_placer_t *p)
{
    if (p == NULL)
        return;
    egm_free(p->order);
    egm_free(p->ranked);
    egm_free(p->sorted);
    egm_free(p);
}

uint64_t egm__placer_random(egm_placer_t *p)
{
    uint64_t x = p->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p->rng = x;
    return x;
}

static egm_status_t reserve_scratch(egm_placer_t *p, size_t n, int ranked)
{
    if (n > p->order_cap) {
        size_t cap = n < 64 ? 64 : n * 2;
        size_t *order = egm_realloc(p->order, cap * sizeof(*order), "master.placement");
        if (order == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory placing replicas");
        p->order = order;
        p->order_cap = cap;
    }
    if (ranked && n > p->ranked_cap) {
        size_t cap = n < 64 ? 64 : n * 2;
        ranked_segment_t *r = egm_realloc(p->ranked, cap * sizeof(*r), "master.placement");
        if (r == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory placing replicas");
        p->ranked = r;
        p->ranked_cap = cap;
    }
    return EGM_OK;
}

int egm__placement_same_provider(const egm_segment_t *a, const egm_segment_t *b)
{
    return a == b || egm__id_equal(a->desc.owner, b->desc.owner);
}

int egm__placement_same_host(const egm_segment_t *a, const egm_segment_t *b)
{
    /* A segment that names no host is on a host of its own provider's. */
    if (a->desc.host_id[0] == '\0' || b->desc.host_id[0] == '\0')
        return egm__placement_same_provider(a, b);
    return strcmp(a->desc.host_id, b->desc.host_id) == 0;
}

/* "pool" names the segment "pool" and the chunks "pool/0", "pool/1", ... */
static int name_matches(const char *segment_name, const char *wanted)
{
    size_t n = strlen(wanted);
    return n > 0 && strncmp(segment_name, wanted, n) == 0 &&
           (segment_name[n] == '\0' || segment_name[n] == '/');
}

static int cmp_ranked(const void *a, const void *b)
{
    const ranked_segment_t *x = a, *y = b;
    if (x->free_ratio != y->free_ratio)
        return x->free_ratio > y->free_ratio ? -1 : 1;
    return x->tie < y->tie ? -1 : x->tie > y->tie ? 1 : 0;
}

int egm__placement_same_zone(const egm_segment_t *a, const egm_segment_t *b)
{
    /* Without a zone on both sides, a host is its own zone. */
    if (a->desc.zone[0] == '\0' || b->desc.zone[0] == '\0')
        return egm__placement_same_host(a, b);
    return strcmp(a->desc.zone, b->desc.zone) == 0;
}

/* Zone order: named zones by name, then segments naming none by host
 * (cmp_host). Counts never fewer zones than there are. */
static int cmp_host(const void *a, const void *b);

static int cmp_zone(const void *a, const void *b)
{
    const egm_segment_t *x = *(const egm_segment_t *const *)a;
    const egm_segment_t *y = *(const egm_segment_t *const *)b;
    int xe = x->desc.zone[0] == '\0', ye = y->desc.zone[0] == '\0';
    if (xe != ye)
        return xe - ye;
    if (!xe)
        return strcmp(x->desc.zone, y->desc.zone);
    return cmp_host(a, b);
}

/* Host order: named hosts by name, then segments naming none by provider
 * (each such provider counts as a host of its own). */
static int cmp_host(const void *a, const void *b)
{
    const egm_segment_t *x = *(const egm_segment_t *const *)a;
    const egm_segment_t *y = *(const egm_segment_t *const *)b;
    int xe = x->desc.host_id[0] == '\0', ye = y->desc.host_id[0] == '\0';
    if (xe != ye)
        return xe - ye;
    if (!xe)
        return strcmp(x->desc.host_id, y->desc.host_id);
    return memcmp(&x->desc.owner, &y->desc.owner, sizeof(x->desc.owner));
}

static int cmp_owner(const void *a, const void *b)
{
    const egm_segment_t *x = *(const egm_segment_t *const *)a;
    const egm_segment_t *y = *(const egm_segment_t *const *)b;
    return memcmp(&x->desc.owner, &y->desc.owner, sizeof(x->desc.owner));
}

/* Distinct hosts and providers of the table (recounted when its segment set
 * changed): O(n log n) per change of the set, nothing per placement. */
static egm_status_t count_domains(egm_placer_t *p, egm_segment_table_t *table)
{
    uint64_t gen = egm__segment_table_generation(table);
    size_t n = egm__segment_table_count(table);
    if (p->counted && p->counted_gen == gen)
        return EGM_OK;
    if (n > p->sorted_cap) {
        size_t cap = n < 64 ? 64 : n * 2;
        const egm_segment_t **s = egm_realloc(p->sorted, cap * sizeof(*s), "master.placement");
        if (s == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory placing replicas");
        p->sorted = s;
        p->sorted_cap = cap;
    }
    for (size_t i = 0; i < n; i++)
        p->sorted[i] = egm__segment_table_at(table, i);
    p->n_zones = p->n_hosts = p->n_providers = 0;
    if (n > 0) {
        qsort(p->sorted, n, sizeof(*p->sorted), cmp_zone);
        p->n_zones = 1;
        for (size_t i = 1; i < n; i++)
            p->n_zones += cmp_zone(&p->sorted[i - 1], &p->sorted[i]) != 0;
        qsort(p->sorted, n, sizeof(*p->sorted), cmp_host);
        p->n_hosts = 1;
        for (size_t i = 1; i < n; i++)
            p->n_hosts += cmp_host(&p->sorted[i - 1], &p->sorted[i]) != 0;
        qsort(p->sorted, n, sizeof(*p->sorted), cmp_owner);
        p->n_providers = 1;
        for (size_t i = 1; i < n; i++)
            p->n_providers += cmp_owner(&p->sorted[i - 1], &p->sorted[i]) != 0;
    }
    p->counted = 1;
    p->counted_gen = gen;
    return EGM_OK;
}

/* One call's state. */
typedef struct {
    egm_placer_t *placer;
    egm_segment_table_t *table;
    const egm_placement_request_t *req;
    egm_placement_try_t try_fn;
    void *arg;
    uint32_t want, placed;
    egm_segment_t *chosen[CHOSEN_MAX]; /* holding, then accepted */
    size_t n_chosen;
    size_t n;                       /* segments */
    size_t drawn;                   /* random: order[0..drawn) is shuffled */
    size_t zones, hosts, providers; /* distinct among chosen */
} run_t;

/* Level of a candidate: 3 = in a zone no replica is in, 2 = in a zone one
 * is in but on a host none is on, 1 = only of a provider holding none, 0 =
 * not eligible. A configured zone outranks the host: two zones on one host
 * (a test, a misconfiguration) still count as two. *new_host_p: on a host
 * no replica is on. */
static int level_of(const run_t *r, const egm_segment_t *seg, int *new_host_p)
{
    *new_host_p = 0;
    if (atomic_load_explicit(&seg->unreachable, memory_order_relaxed))
        return 0; /* its provider's connections closed: presumed gone */
    for (size_t i = 0; i < r->req->n_exclude; i++)
        if (egm__id_equal(seg->desc.owner, r->req->exclude_providers[i]))
            return 0;
    int new_zone = 1, new_host = 1;
    for (size_t i = 0; i < r->n_chosen; i++) {
        if (egm__placement_same_provider(seg, r->chosen[i]))
            return 0;
        new_host &= !egm__placement_same_host(seg, r->chosen[i]);
        new_zone &= !egm__placement_same_zone(seg, r->chosen[i]);
    }
    *new_host_p = new_host;
    return new_zone ? 3 : new_host ? 2 : 1;
}

/* Tries seg when its level is at least min_level. */
static void consider(run_t *r, egm_segment_t *seg, int min_level)
{
    int new_host;
    if (r->placed >= r->want)
        return;
    int level = level_of(r, seg, &new_host);
    if (level < min_level || !r->try_fn(r->arg, seg))
        return;
    r->placed++;
    r->chosen[r->n_chosen++] = seg;
    r->providers++; /* level >= 1: a provider none was on */
    r->hosts += new_host;
    r->zones += level == 3;
}

/* Whether a pass at min_level can still find a candidate. */
static int level_open(const run_t *r, int min_level)
{
    if (r->placed >= r->want || r->providers >= r->placer->n_providers)
        return 0;
    if (min_level == 3)
        return r->zones < r->placer->n_zones;
    return min_level < 2 || r->hosts < r->placer->n_hosts;
}

/* The strategy's i-th segment (random: drawn lazily, a partial Fisher-Yates
 * shuffle, so that one replica among many segments costs a draw or two). */
static egm_segment_t *order_at(run_t *r, size_t i)
{
    size_t *order = r->placer->order;
    if (r->req->strategy == EGM_PLACEMENT_RANDOM) {
        while (r->drawn <= i) {
            size_t d = r->drawn, left = r->n - d;
            size_t j = d + (size_t)(egm__placer_random(r->placer) % left);
            size_t t = order[j];
            order[j] = order[d];
            order[d] = t;
            r->drawn++;
        }
    }
    return egm__segment_table_at(r->table, order[i]);
}

/* Fills the placer's order for local_first and free_ratio_first (random
 * draws as it goes). */
static void build_order(run_t *r, egm_placement_t strategy, const char *host)
{
    egm_placer_t *p = r->placer;
    size_t n = r->n;
    for (size_t i = 0; i < n; i++)
        p->order[i] = i;
    switch (strategy) {
    case EGM_PLACEMENT_RANDOM:
        break;
    case EGM_PLACEMENT_LOCAL_FIRST: {
        for (size_t i = 0; i + 1 < n; i++) {
            size_t j = i + (size_t)(egm__placer_random(p) % (n - i));
            size_t t = p->order[j];
            p->order[j] = p->order[i];
            p->order[i] = t;
        }
        /* The writer's host first, each part in random order. */
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            egm_segment_t *seg = egm__segment_table_at(r->table, p->order[i]);
            if (strcmp(seg->desc.host_id, host) == 0) {
                size_t t = p->order[i];
                memmove(&p->order[k + 1], &p->order[k], (i - k) * sizeof(*p->order));
                p->order[k++] = t;
            }
        }
        break;
    }
    case EGM_PLACEMENT_FREE_RATIO_FIRST:
        for (size_t i = 0; i < n; i++) {
            egm_allocator_stats_t s;
            egm__allocator_stats(egm__segment_table_at(r->table, i)->allocator, &s);
            p->ranked[i] = (ranked_segment_t){
                .free_ratio = s.capacity > 0 ? (double)s.free / (double)s.capacity : 0.0,
                .tie = egm__placer_random(p),
                .index = i,
            };
        }
        if (n > 1) /* with no segment the scratch is NULL: qsort's arguments must not be */
            qsort(p->ranked, n, sizeof(*p->ranked), cmp_ranked);
        for (size_t i = 0; i < n; i++)
            p->order[i] = p->ranked[i].index;
        break;
    }
}

egm_status_t egm__placement_choose(egm_placer_t *placer, egm_segment_table_t *table,
                                   const egm_placement_request_t *req, uint32_t want,
                                   egm_placement_try_t try_fn, void *arg, uint32_t *placed_p)
{
    egm_placement_t strategy = req->strategy;
    const char *host = req->writer_host_id;
    run_t r = {.placer = placer,
               .table = table,
               .req = req,
               .try_fn = try_fn,
               .arg = arg,
               .want = want,
               .n = egm__segment_table_count(table)};
    egm_status_t status;

    *placed_p = 0;
    if (req->n_holding + want > CHOSEN_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "placement: %zu replicas held + %u wanted, at "
                              "most %d",
                              req->n_holding, want, CHOSEN_MAX);
    for (size_t i = 0; i < req->n_holding; i++) {
        int new_zone = 1, new_host = 1, new_provider = 1;
        for (size_t k = 0; k < r.n_chosen; k++) {
            new_host &= !egm__placement_same_host(req->holding[i], r.chosen[k]);
            new_zone &= !egm__placement_same_zone(req->holding[i], r.chosen[k]);
            new_provider &= !egm__placement_same_provider(req->holding[i], r.chosen[k]);
        }
        r.zones += new_zone;
        r.hosts += new_host;
        r.providers += new_provider;
        r.chosen[r.n_chosen++] = req->holding[i];
    }
    if (strategy == EGM_PLACEMENT_LOCAL_FIRST && (host == NULL || host[0] == '\0'))
        strategy = EGM_PLACEMENT_RANDOM; /* writer's host unknown (no ping yet) */
    status = reserve_scratch(placer, r.n, strategy == EGM_PLACEMENT_FREE_RATIO_FIRST);
    if (status == EGM_OK)
        status = count_domains(placer, table);
    if (status != EGM_OK)
        return status;

    /* Preferred segments, in the request's order: a preference names where,
     * not how many per provider, so the provider rule still holds. */
    for (size_t p = 0; p < req->n_preferred && r.placed < want; p++) {
        const char *wanted = req->preferred[p];
        for (size_t i = 0; wanted != NULL && i < r.n && r.placed < want; i++) {
            egm_segment_t *seg = egm__segment_table_at(table, i);
            if (name_matches(seg->desc.name, wanted))
                consider(&r, seg, 1);
        }
    }
    if (r.placed >= want) {
        *placed_p = r.placed;
        return EGM_OK;
    }
    build_order(&r, strategy, host);
    /* order_at reads the strategy from the request (lazy random draws): a
     * local_first without the writer's host is random. */
    egm_placement_request_t local = *req;
    local.strategy = strategy;
    r.req = &local;
    for (int min_level = 3; min_level >= 1; min_level--)
        for (size_t i = 0; i < r.n && level_open(&r, min_level); i++)
            consider(&r, order_at(&r, i), min_level);
    *placed_p = r.placed;
    return EGM_OK;
}
