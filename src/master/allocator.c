/* Range allocator: spans in address order, free spans in size-class bins found
 * through bitmaps, allocations in a hash by offset. Lengths and offsets are
 * kept in blocks of EGM_ALLOCATOR_ALIGN bytes. */
#include "master/allocator.h"

#include <string.h>
#include "common/alloc.h"
#include "common/log.h"

#define NIL UINT32_MAX
/* link_prev of a span that is in no bin says which it is (span_state). */
#define LINK_USED (UINT32_MAX - 1u)
#define LINK_UNUSED (UINT32_MAX - 2u)
/* Span indexes stay below the markers. */
#define MAX_SPANS (UINT32_MAX - 2u)

/* Size classes (TLSF's mapping): lengths below 2 * SL_COUNT blocks have a class
 * each; above, every power of two is cut into SL_COUNT classes, so a class
 * spans at most 1/32 of its lower bound and a good fit wastes little. */
#define SL_BITS 5
#define SL_COUNT (1u << SL_BITS)
/* Blocks fit in 58 bits (64-byte alignment), so classes stay below
 * class_floor(2^58) = 1728. */
#define BITMAP_WORDS 28
/* Spans of the request's own class looked at before taking a larger class:
 * a near-exact fit there keeps large ranges whole. */
#define PROBE 8

enum { SPAN_UNUSED = 0, SPAN_FREE = 1, SPAN_USED = 2 };

/* 32 bytes: one per allocation, so with 100 million objects each byte is
 * 100 MB of the master's memory. A span's state is not stored: link_prev
 * holds it for spans in no bin (LINK_USED, LINK_UNUSED), and a free span's
 * class is class_floor(len), its length not changing while it is binned. */
typedef struct {
    uint64_t off;        /* blocks */
    uint64_t len;        /* blocks, > 0 */
    uint32_t prev, next; /* neighbours in address order: the boundary tags */
    /* SPAN_FREE: the bin list. SPAN_USED: link_next chains the hash bucket,
     * link_prev is LINK_USED. SPAN_UNUSED: link_next chains the pool of spare
     * records, link_prev is LINK_UNUSED. */
    uint32_t link_prev, link_next;
} span_t;

_Static_assert(sizeof(span_t) == 32, "span_t: 32 bytes");

static int span_state(const span_t *s)
{
    return s->link_prev == LINK_USED     ? SPAN_USED
           : s->link_prev == LINK_UNUSED ? SPAN_UNUSED
                                         : SPAN_FREE;
}

struct egm_allocator {
    uint64_t capacity; /* bytes */
    uint64_t blocks;
    uint64_t used; /* blocks */
    size_t allocations;
    size_t free_ranges;
    span_t *spans; /* grown only by alloc, so free never needs memory */
    uint32_t n_spans, cap_spans;
    uint32_t spare;     /* SPAN_UNUSED records below n_spans */
    uint32_t n_spare;   /* how many */
    uint32_t first;     /* the span at offset 0 */
    uint32_t take_hint; /* a span (any state) where egm__allocator_take looks first */
    uint32_t *buckets;  /* allocations by offset */
    unsigned bucket_bits;
    uint32_t *bins; /* head of each class's free list */
    unsigned n_classes;
    uint64_t summary;              /* bit w: bitmap[w] != 0 */
    uint64_t bitmap[BITMAP_WORDS]; /* bit c: bins[c] not empty */
};

static unsigned log2_floor(uint64_t n)
{
    return 63u - (unsigned)__builtin_clzll(n);
}

/* Class holding free spans of n blocks (n >= 1). */
static unsigned class_floor(uint64_t n)
{
    if (n < 2 * SL_COUNT)
        return (unsigned)n;
    unsigned fl = log2_floor(n);
    return SL_COUNT + ((fl - SL_BITS) << SL_BITS) + (unsigned)((n >> (fl - SL_BITS)) - SL_COUNT);
}

/* Lowest class whose every span is at least n blocks. */
static unsigned class_up(uint64_t n)
{
    if (n < 2 * SL_COUNT)
        return (unsigned)n;
    return class_floor(n + (1ull << (log2_floor(n) - SL_BITS)) - 1);
}

static void bitmap_set(egm_allocator_t *a, unsigned c)
{
    a->bitmap[c >> 6] |= 1ull << (c & 63);
    a->summary |= 1ull << (c >> 6);
}

static void bitmap_clear(egm_allocator_t *a, unsigned c)
{
    a->bitmap[c >> 6] &= ~(1ull << (c & 63));
    if (a->bitmap[c >> 6] == 0)
        a->summary &= ~(1ull << (c >> 6));
}

/* First non-empty class >= c, or NIL. */
static uint32_t bitmap_find(const egm_allocator_t *a, unsigned c)
{
    unsigned w = c >> 6;

    if (c >= a->n_classes)
        return NIL;
    uint64_t m = a->bitmap[w] & (~0ull << (c & 63));
    if (m != 0)
        return (w << 6) + (unsigned)__builtin_ctzll(m);
    uint64_t s = w + 1 < 64 ? a->summary & (~0ull << (w + 1)) : 0;
    if (s == 0)
        return NIL;
    w = (unsigned)__builtin_ctzll(s);
    return (w << 6) + (unsigned)__builtin_ctzll(a->bitmap[w]);
}

static void bin_insert(egm_allocator_t *a, uint32_t i)
{
    span_t *s = &a->spans[i];
    unsigned c = class_floor(s->len);

    s->link_prev = NIL;
    s->link_next = a->bins[c];
    if (s->link_next != NIL)
        a->spans[s->link_next].link_prev = i;
    else
        bitmap_set(a, c);
    a->bins[c] = i;
}

static void bin_remove(egm_allocator_t *a, uint32_t i)
{
    span_t *s = &a->spans[i];
    unsigned c = class_floor(s->len);

    if (s->link_prev != NIL)
        a->spans[s->link_prev].link_next = s->link_next;
    else
        a->bins[c] = s->link_next;
    if (s->link_next != NIL)
        a->spans[s->link_next].link_prev = s->link_prev;
    if (a->bins[c] == NIL)
        bitmap_clear(a, c);
}

static uint32_t bucket_of(const egm_allocator_t *a, uint64_t off)
{
    /* Fibonacci hashing: the top bits of the product mix every offset bit. */
    return (uint32_t)((off * 0x9e3779b97f4a7c15ull) >> (64 - a->bucket_bits));
}

static void hash_insert(egm_allocator_t *a, uint32_t i)
{
    uint32_t b = bucket_of(a, a->spans[i].off);

    a->spans[i].link_prev = LINK_USED;
    a->spans[i].link_next = a->buckets[b];
    a->buckets[b] = i;
}

/* The allocation at `off`, or NIL; *link_p is where the hash points to it. */
static uint32_t hash_find(egm_allocator_t *a, uint64_t off, uint32_t **link_p)
{
    uint32_t *link = &a->buckets[bucket_of(a, off)];

    while (*link != NIL && a->spans[*link].off != off)
        link = &a->spans[*link].link_next;
    *link_p = link;
    return *link;
}

static void span_release(egm_allocator_t *a, uint32_t i)
{
    a->spans[i].link_prev = LINK_UNUSED;
    a->spans[i].link_next = a->spare;
    a->spare = i;
    a->n_spare++;
}

/* Room for n more spans and n more allocations in the hash, so that what
 * follows cannot fail half way. */
static egm_status_t reserve_n(egm_allocator_t *a, uint32_t n)
{
    while ((uint64_t)a->n_spare + (a->cap_spans - a->n_spans) < n) {
        if (a->cap_spans >= MAX_SPANS)
            return egm__set_error(EGM_ERR_NO_MEMORY, "segment has %u spans, the most it can track",
                                  a->cap_spans);
        uint32_t cap = a->cap_spans > MAX_SPANS / 2 ? MAX_SPANS : a->cap_spans * 2;
        span_t *spans =
            egm_realloc(a->spans, (size_t)cap * sizeof(*spans), "master.allocator_spans");
        if (spans == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory growing allocator spans to %u",
                                  cap);
        a->spans = spans;
        a->cap_spans = cap;
    }
    while (a->allocations + n > (1ull << a->bucket_bits) && a->bucket_bits < 32) {
        unsigned bits = a->bucket_bits + 1;
        uint32_t *buckets = egm_malloc(sizeof(*buckets) << bits, "master.allocator_hash");
        if (buckets == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory growing the allocation hash");
        memset(buckets, 0xff, sizeof(*buckets) << bits); /* every bucket NIL */
        egm_free(a->buckets);
        a->buckets = buckets;
        a->bucket_bits = bits;
        for (uint32_t i = 0; i < a->n_spans; i++)
            if (span_state(&a->spans[i]) == SPAN_USED)
                hash_insert(a, i);
    }
    return EGM_OK;
}

static egm_status_t reserve(egm_allocator_t *a)
{
    return reserve_n(a, 1);
}

egm_status_t egm__allocator_reserve(egm_allocator_t *a, uint32_t n)
{
    return reserve_n(a, n);
}

static uint32_t span_take(egm_allocator_t *a)
{
    uint32_t i = a->spare;

    if (i != NIL) {
        a->spare = a->spans[i].link_next;
        a->n_spare--;
    } else
        i = a->n_spans++;
    return i;
}

uint64_t egm__allocator_round(uint64_t len)
{
    if (len > UINT64_MAX - (EGM_ALLOCATOR_ALIGN - 1))
        return 0;
    return (len + EGM_ALLOCATOR_ALIGN - 1) & ~(uint64_t)(EGM_ALLOCATOR_ALIGN - 1);
}

#define INITIAL_SPANS 16
#define INITIAL_BUCKET_BITS 4

egm_status_t egm__allocator_create(uint64_t size, egm_allocator_t **allocator_p)
{
    egm_allocator_t *a;
    uint64_t capacity = size & ~(uint64_t)(EGM_ALLOCATOR_ALIGN - 1);

    *allocator_p = NULL;
    if (capacity == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment size %llu is below %u bytes",
                              (unsigned long long)size, EGM_ALLOCATOR_ALIGN);
    a = egm_calloc(1, sizeof(*a), "master.allocator");
    if (a == NULL)
        goto err_nomem;
    a->capacity = capacity;
    a->blocks = capacity / EGM_ALLOCATOR_ALIGN;
    a->n_classes = class_floor(a->blocks) + 1;
    a->bins = egm_malloc(a->n_classes * sizeof(*a->bins), "master.allocator_bins");
    if (a->bins == NULL)
        goto err_free;
    memset(a->bins, 0xff, a->n_classes * sizeof(*a->bins));
    a->bucket_bits = INITIAL_BUCKET_BITS;
    a->buckets = egm_malloc(sizeof(*a->buckets) << a->bucket_bits, "master.allocator_hash");
    if (a->buckets == NULL)
        goto err_free_bins;
    memset(a->buckets, 0xff, sizeof(*a->buckets) << a->bucket_bits);
    a->spans = egm_malloc(INITIAL_SPANS * sizeof(*a->spans), "master.allocator_spans");
    if (a->spans == NULL)
        goto err_free_buckets;
    a->cap_spans = INITIAL_SPANS;
    a->spare = NIL;
    a->n_spans = 1;
    a->first = 0;
    a->spans[0] = (span_t){.off = 0, .len = a->blocks, .prev = NIL, .next = NIL};
    bin_insert(a, 0);
    a->free_ranges = 1;
    *allocator_p = a;
    return EGM_OK;

err_free_buckets:
    egm_free(a->buckets);
err_free_bins:
    egm_free(a->bins);
err_free:
    egm_free(a);
err_nomem:
    return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating a segment allocator");
}

void egm__allocator_destroy(egm_allocator_t *allocator)
{
    if (allocator == NULL)
        return;
    egm_free(allocator->spans);
    egm_free(allocator->buckets);
    egm_free(allocator->bins);
    egm_free(allocator);
}

/* A free span of at least n blocks, or NIL when none is that long. */
static uint32_t pick(const egm_allocator_t *a, uint64_t n)
{
    unsigned c = class_floor(n);
    uint32_t i = c < a->n_classes ? a->bins[c] : NIL;

    /* Near-exact fits first: spans of this class are within 1/32 of n. */
    for (int probe = 0; i != NIL && probe < PROBE; probe++, i = a->spans[i].link_next)
        if (a->spans[i].len >= n)
            return i;
    uint32_t up = bitmap_find(a, class_up(n));
    if (up != NIL)
        return a->bins[up];
    /* Only this class may still hold a span long enough: look at the rest of
     * it, so NO_SPACE means no free range fits. */
    for (; i != NIL; i = a->spans[i].link_next)
        if (a->spans[i].len >= n)
            return i;
    return NIL;
}

egm_status_t egm__allocator_alloc(egm_allocator_t *a, uint64_t len, uint64_t *offset_p)
{
    uint64_t need = egm__allocator_round(len);
    egm_status_t status;

    if (len == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "allocation length must be > 0");
    if (need == 0 || need / EGM_ALLOCATOR_ALIGN > a->blocks - a->used)
        return egm__set_error(EGM_ERR_NO_SPACE, "no free range of %llu bytes (%llu free)",
                              (unsigned long long)len,
                              (unsigned long long)((a->blocks - a->used) * EGM_ALLOCATOR_ALIGN));
    uint64_t n = need / EGM_ALLOCATOR_ALIGN;
    uint32_t i = pick(a, n);
    if (i == NIL) {
        egm_allocator_stats_t st;
        egm__allocator_stats(a, &st);
        return egm__set_error(EGM_ERR_NO_SPACE, "no free range of %llu bytes (largest %llu)",
                              (unsigned long long)len, (unsigned long long)st.largest_free);
    }
    status = reserve(a); /* may move spans: index i stays valid */
    if (status != EGM_OK)
        return status;

    span_t *s = &a->spans[i];
    bin_remove(a, i);
    if (s->len == n) {
        a->free_ranges--;
        hash_insert(a, i);
    } else {
        /* The allocation takes the low end; the rest stays free in place. */
        uint32_t u = span_take(a);
        s = &a->spans[i];
        a->spans[u] = (span_t){.off = s->off, .len = n, .prev = s->prev, .next = i};
        if (s->prev != NIL)
            a->spans[s->prev].next = u;
        else
            a->first = u;
        s->prev = u;
        s->off += n;
        s->len -= n;
        bin_insert(a, i);
        hash_insert(a, u);
        i = u;
    }
    a->used += n;
    a->allocations++;
    *offset_p = a->spans[i].off * EGM_ALLOCATOR_ALIGN;
    return EGM_OK;
}

egm_status_t egm__allocator_free(egm_allocator_t *a, uint64_t offset, uint64_t len)
{
    uint64_t size = egm__allocator_round(len);
    uint32_t *link;

    if (len == 0 || size == 0 || offset % EGM_ALLOCATOR_ALIGN != 0 || offset >= a->capacity ||
        size > a->capacity - offset)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "free of [%llu, +%llu) is misaligned or outside the segment",
                              (unsigned long long)offset, (unsigned long long)len);
    uint32_t i = hash_find(a, offset / EGM_ALLOCATOR_ALIGN, &link);
    if (i == NIL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "free of [%llu, +%llu): no allocation there",
                              (unsigned long long)offset, (unsigned long long)len);
    span_t *s = &a->spans[i];
    if (s->len != size / EGM_ALLOCATOR_ALIGN)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "free of [%llu, +%llu): the allocation there is %llu bytes",
                              (unsigned long long)offset, (unsigned long long)len,
                              (unsigned long long)(s->len * EGM_ALLOCATOR_ALIGN));

    *link = s->link_next; /* out of the hash */
    a->used -= s->len;
    a->allocations--;
    a->free_ranges++;
    uint32_t p = s->prev;
    if (p != NIL && span_state(&a->spans[p]) == SPAN_FREE) {
        /* Absorbed by the free range before it. */
        span_t *ps = &a->spans[p];
        bin_remove(a, p);
        ps->len += s->len;
        ps->next = s->next;
        if (s->next != NIL)
            a->spans[s->next].prev = p;
        span_release(a, i);
        a->free_ranges--;
        i = p;
        s = ps;
    }
    uint32_t q = s->next;
    if (q != NIL && span_state(&a->spans[q]) == SPAN_FREE) {
        /* Absorbs the free range after it. */
        span_t *qs = &a->spans[q];
        bin_remove(a, q);
        s->len += qs->len;
        s->next = qs->next;
        if (qs->next != NIL)
            a->spans[qs->next].prev = i;
        span_release(a, q);
        a->free_ranges--;
    }
    bin_insert(a, i);
    return EGM_OK;
}

egm_status_t egm__allocator_split(egm_allocator_t *a, uint64_t offset, uint64_t at)
{
    uint32_t *link;

    if (offset % EGM_ALLOCATOR_ALIGN != 0 || at % EGM_ALLOCATOR_ALIGN != 0 || at <= offset ||
        offset >= a->capacity)
        return egm__set_error(EGM_ERR_INVALID_ARG, "split of [%llu, ...) at %llu: misaligned",
                              (unsigned long long)offset, (unsigned long long)at);
    uint32_t i = hash_find(a, offset / EGM_ALLOCATOR_ALIGN, &link);
    if (i == NIL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "split at %llu: no allocation at %llu",
                              (unsigned long long)at, (unsigned long long)offset);
    uint64_t cut = at / EGM_ALLOCATOR_ALIGN - a->spans[i].off;
    if (cut >= a->spans[i].len)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "split at %llu: outside the allocation [%llu, +%llu)",
                              (unsigned long long)at, (unsigned long long)offset,
                              (unsigned long long)(a->spans[i].len * EGM_ALLOCATOR_ALIGN));
    egm_status_t status = reserve(a); /* may move spans: index i stays valid */
    if (status != EGM_OK)
        return status;
    uint32_t u = span_take(a);
    span_t *s = &a->spans[i];
    a->spans[u] = (span_t){.off = s->off + cut, .len = s->len - cut, .prev = i, .next = s->next};
    if (s->next != NIL)
        a->spans[s->next].prev = u;
    s->next = u;
    s->len = cut;
    hash_insert(a, u);
    a->allocations++;
    return EGM_OK;
}

/* The free span holding block b, or NIL. */
static uint32_t free_span_at(const egm_allocator_t *a, uint64_t b)
{
    uint32_t h = a->take_hint;
    if (h < a->n_spans && span_state(&a->spans[h]) == SPAN_FREE && a->spans[h].off <= b &&
        b < a->spans[h].off + a->spans[h].len)
        return h;
    for (uint32_t i = a->first; i != NIL; i = a->spans[i].next) {
        const span_t *s = &a->spans[i];
        if (b < s->off + s->len)
            return span_state(s) == SPAN_FREE ? i : NIL;
    }
    return NIL;
}

egm_status_t egm__allocator_take(egm_allocator_t *a, uint64_t offset, uint64_t len)
{
    uint64_t size = egm__allocator_round(len);
    if (len == 0 || size == 0 || offset % EGM_ALLOCATOR_ALIGN != 0 || offset >= a->capacity ||
        size > a->capacity - offset)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "take of [%llu, +%llu): misaligned or outside the segment",
                              (unsigned long long)offset, (unsigned long long)len);
    uint64_t b = offset / EGM_ALLOCATOR_ALIGN, n = size / EGM_ALLOCATOR_ALIGN;
    uint32_t i = free_span_at(a, b);
    if (i == NIL || b + n > a->spans[i].off + a->spans[i].len)
        return egm__set_error(EGM_ERR_INVALID_ARG, "take of [%llu, +%llu): not all free",
                              (unsigned long long)offset, (unsigned long long)len);
    egm_status_t status = reserve_n(a, 2); /* may move spans: indexes stay valid */
    if (status != EGM_OK)
        return status;
    bin_remove(a, i);
    a->free_ranges--;
    span_t *s = &a->spans[i];
    uint64_t head = b - s->off, tail = s->off + s->len - (b + n);
    if (head > 0) { /* the free part before stays in i */
        uint32_t u = span_take(a);
        s = &a->spans[i];
        a->spans[u] = (span_t){.off = b, .len = s->len - head, .prev = i, .next = s->next};
        if (s->next != NIL)
            a->spans[s->next].prev = u;
        s->next = u;
        s->len = head;
        bin_insert(a, i);
        a->free_ranges++;
        i = u;
        s = &a->spans[i];
    }
    if (tail > 0) { /* the free part after: a span of its own */
        uint32_t u = span_take(a);
        s = &a->spans[i];
        a->spans[u] = (span_t){.off = b + n, .len = tail, .prev = i, .next = s->next};
        if (s->next != NIL)
            a->spans[s->next].prev = u;
        s->next = u;
        s->len = n;
        bin_insert(a, u);
        a->free_ranges++;
        a->take_hint = u;
    }
    hash_insert(a, i);
    a->used += n;
    a->allocations++;
    return EGM_OK;
}

void egm__allocator_stats(const egm_allocator_t *a, egm_allocator_stats_t *stats_p)
{
    uint64_t largest = 0;

    if (a->summary != 0) {
        /* Every span of the top class beats every other span: walk that one. */
        unsigned w = log2_floor(a->summary);
        unsigned c = (w << 6) + log2_floor(a->bitmap[w]);
        for (uint32_t i = a->bins[c]; i != NIL; i = a->spans[i].link_next)
            if (a->spans[i].len > largest)
                largest = a->spans[i].len;
    }
    stats_p->capacity = a->capacity;
    stats_p->used = a->used * EGM_ALLOCATOR_ALIGN;
    stats_p->free = a->capacity - stats_p->used;
    stats_p->largest_free = largest * EGM_ALLOCATOR_ALIGN;
    stats_p->free_ranges = a->free_ranges;
    stats_p->allocations = a->allocations;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return egm__set_error(EGM_ERR_INTERNAL, __VA_ARGS__);                                  \
    } while (0)

egm_status_t egm__allocator_check(const egm_allocator_t *a)
{
    uint64_t off = 0, used = 0;
    size_t n_free = 0, n_used = 0, n_unused = 0, walked = 0;
    uint32_t prev = NIL;

    CHECK(a->first < a->n_spans && a->spans[a->first].prev == NIL, "first span %u is wrong",
          a->first);
    for (uint32_t i = a->first; i != NIL; prev = i, i = a->spans[i].next) {
        const span_t *s = &a->spans[i];
        CHECK(i < a->n_spans && ++walked <= a->n_spans, "address list broken at span %u", i);
        CHECK(s->prev == prev, "span %u: prev %u, expected %u", i, s->prev, prev);
        CHECK(s->off == off && s->len > 0 && s->len <= a->blocks - off,
              "span %u [%llu, +%llu) does not follow block %llu", i, (unsigned long long)s->off,
              (unsigned long long)s->len, (unsigned long long)off);
        off += s->len;
        if (span_state(s) == SPAN_FREE) {
            CHECK(prev == NIL || span_state(&a->spans[prev]) != SPAN_FREE,
                  "free span %u not coalesced with its predecessor", i);
            n_free++;
        } else {
            CHECK(span_state(s) == SPAN_USED, "span %u in the address list is unused", i);
            uint32_t j = a->buckets[bucket_of(a, s->off)];
            while (j != NIL && j != i)
                j = a->spans[j].link_next;
            CHECK(j == i, "allocation span %u missing from the hash", i);
            used += s->len;
            n_used++;
        }
    }
    CHECK(off == a->blocks, "spans cover %llu of %llu blocks", (unsigned long long)off,
          (unsigned long long)a->blocks);
    CHECK(used == a->used && n_used == a->allocations && n_free == a->free_ranges,
          "counters disagree: used %llu/%llu allocations %zu/%zu free ranges %zu/%zu",
          (unsigned long long)used, (unsigned long long)a->used, n_used, a->allocations, n_free,
          a->free_ranges);

    size_t in_bins = 0;
    for (unsigned c = 0; c < a->n_classes; c++) {
        int bit = (a->bitmap[c >> 6] >> (c & 63)) & 1;
        CHECK(bit == (a->bins[c] != NIL), "bitmap bit of class %u is %d", c, bit);
        uint32_t p = NIL;
        for (uint32_t i = a->bins[c]; i != NIL; p = i, i = a->spans[i].link_next) {
            CHECK(i < a->n_spans && ++in_bins <= n_free, "bin %u broken at span %u", c, i);
            CHECK(span_state(&a->spans[i]) == SPAN_FREE && class_floor(a->spans[i].len) == c &&
                      a->spans[i].link_prev == p,
                  "span %u in bin %u is not a free span of that class", i, c);
        }
    }
    CHECK(in_bins == n_free, "bins hold %zu spans, %zu are free", in_bins, n_free);
    for (unsigned w = 0; w < BITMAP_WORDS; w++)
        CHECK(((a->summary >> w) & 1) == (a->bitmap[w] != 0), "summary bit %u is wrong", w);

    size_t hashed = 0;
    for (uint64_t b = 0; b < (1ull << a->bucket_bits); b++)
        for (uint32_t i = a->buckets[b]; i != NIL; i = a->spans[i].link_next) {
            CHECK(i < a->n_spans && ++hashed <= n_used, "hash bucket %llu broken",
                  (unsigned long long)b);
            CHECK(span_state(&a->spans[i]) == SPAN_USED && bucket_of(a, a->spans[i].off) == b,
                  "span %u in hash bucket %llu does not belong there", i, (unsigned long long)b);
        }
    CHECK(hashed == n_used, "hash holds %zu allocations, %zu exist", hashed, n_used);
    for (uint32_t i = a->spare; i != NIL; i = a->spans[i].link_next) {
        CHECK(i < a->n_spans && span_state(&a->spans[i]) == SPAN_UNUSED && ++n_unused <= a->n_spans,
              "spare list broken at span %u", i);
    }
    CHECK(n_unused == a->n_spare, "%zu spare spans listed, %u counted", n_unused, a->n_spare);
    CHECK(n_free + n_used + n_unused == a->n_spans, "%zu spans are neither in use nor spare",
          a->n_spans - n_free - n_used - n_unused);
    return EGM_OK;
}
