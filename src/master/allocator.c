/* Range allocator: free spans only, in size-class bins found through bitmaps
 * and in a treap by offset. Lengths and offsets are kept in blocks of
 * EGM_ALLOCATOR_ALIGN bytes. */
#include "master/allocator.h"

#include <string.h>
#include "common/alloc.h"
#include "common/log.h"

#define NIL UINT32_MAX
/* link_prev of a record on the spare list. */
#define LINK_UNUSED (UINT32_MAX - 1u)
/* Span indexes stay below the markers. */
#define MAX_SPANS (UINT32_MAX - 1u)

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

/* 32 bytes, one per free range (never one per allocation). */
typedef struct {
    uint64_t off;         /* blocks */
    uint64_t len;         /* blocks, > 0 */
    uint32_t left, right; /* the treap by offset */
    /* Free: the bin list. Spare: link_prev is LINK_UNUSED, link_next chains
     * the spare records. */
    uint32_t link_prev, link_next;
} span_t;

_Static_assert(sizeof(span_t) == 32, "span_t: 32 bytes");

struct egm_allocator {
    uint64_t capacity; /* bytes */
    uint64_t blocks;
    uint64_t used; /* blocks */
    size_t allocations;
    size_t free_ranges;
    uint64_t lost;        /* blocks whose free found no memory for a record */
    uint64_t lost_ranges; /* how many such frees */
    span_t *spans;
    uint32_t n_spans, cap_spans;
    uint32_t spare;     /* spare records below n_spans */
    uint32_t n_spare;   /* how many */
    uint32_t root;      /* of the treap of free spans by offset */
    uint32_t take_hint; /* a free span where egm__allocator_take looks first */
    uint32_t *bins;     /* head of each class's free list */
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

/* The treap's heap order: a fixed pseudo-random priority per record index
 * (splitmix64's finaliser), higher nearer the root, ties broken by index.
 * Expected depth O(log n) whatever order ranges are freed in. */
static uint64_t priority(uint32_t i)
{
    uint64_t x = (uint64_t)i + 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return ((x ^ (x >> 31)) & ~0xffffffffull) | i;
}

/* Cuts treap t into the spans before block `off` (*l) and the others (*r). */
static void treap_split(span_t *sp, uint32_t t, uint64_t off, uint32_t *l, uint32_t *r)
{
    while (t != NIL) {
        if (sp[t].off < off) {
            *l = t;
            l = &sp[t].right;
            t = sp[t].right;
        } else {
            *r = t;
            r = &sp[t].left;
            t = sp[t].left;
        }
    }
    *l = *r = NIL;
}

/* Joins treaps l and r, every span of l before every span of r. */
static uint32_t treap_merge(span_t *sp, uint32_t l, uint32_t r)
{
    uint32_t root, *link = &root;

    while (l != NIL && r != NIL) {
        if (priority(l) > priority(r)) {
            *link = l;
            link = &sp[l].right;
            l = sp[l].right;
        } else {
            *link = r;
            link = &sp[r].left;
            r = sp[r].left;
        }
    }
    *link = l != NIL ? l : r;
    return root;
}

static void treap_insert(egm_allocator_t *a, uint32_t i)
{
    span_t *sp = a->spans;
    uint32_t *link = &a->root;
    uint64_t p = priority(i);

    while (*link != NIL && priority(*link) > p)
        link = sp[i].off < sp[*link].off ? &sp[*link].left : &sp[*link].right;
    treap_split(sp, *link, sp[i].off, &sp[i].left, &sp[i].right);
    *link = i;
}

static void treap_remove(egm_allocator_t *a, uint32_t i)
{
    span_t *sp = a->spans;
    uint32_t *link = &a->root;

    while (*link != i)
        link = sp[i].off < sp[*link].off ? &sp[*link].left : &sp[*link].right;
    *link = treap_merge(sp, sp[i].left, sp[i].right);
}

/* In one descent: the last free span starting at or before block b (*p_p)
 * and the first starting after it (*q_p), NIL where there is none. */
static void treap_around(const egm_allocator_t *a, uint64_t b, uint32_t *p_p, uint32_t *q_p)
{
    uint32_t t = a->root, p = NIL, q = NIL;

    while (t != NIL) {
        if (a->spans[t].off <= b) {
            p = t;
            t = a->spans[t].right;
        } else {
            q = t;
            t = a->spans[t].left;
        }
    }
    *p_p = p;
    *q_p = q;
}

/* The last free span starting at or before block b, or NIL. */
static uint32_t treap_at_or_before(const egm_allocator_t *a, uint64_t b)
{
    uint32_t p, q;
    treap_around(a, b, &p, &q);
    return p;
}

/* Whether block b lies in free space. */
static int block_free(const egm_allocator_t *a, uint64_t b)
{
    uint32_t p = treap_at_or_before(a, b);
    return p != NIL && b < a->spans[p].off + a->spans[p].len;
}

/* Room for n more free spans, so that what follows cannot fail half way. */
static egm_status_t reserve_n(egm_allocator_t *a, uint32_t n)
{
    while ((uint64_t)a->n_spare + (a->cap_spans - a->n_spans) < n) {
        if (a->cap_spans >= MAX_SPANS)
            return egm__set_error(EGM_ERR_NO_MEMORY,
                                  "segment has %u free ranges, the most it can track",
                                  a->cap_spans);
        uint32_t cap = a->cap_spans > MAX_SPANS / 2 ? MAX_SPANS : a->cap_spans * 2;
        span_t *spans =
            egm_realloc(a->spans, (size_t)cap * sizeof(*spans), "master.allocator_spans");
        if (spans == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY,
                                  "out of memory growing allocator free ranges to %u", cap);
        a->spans = spans;
        a->cap_spans = cap;
    }
    return EGM_OK;
}

/* A record for a new free span [off, +len), in the treap and its bin. The
 * caller reserved it. */
static uint32_t span_add(egm_allocator_t *a, uint64_t off, uint64_t len)
{
    uint32_t i = a->spare;

    if (i != NIL) {
        a->spare = a->spans[i].link_next;
        a->n_spare--;
    } else
        i = a->n_spans++;
    a->spans[i] = (span_t){.off = off, .len = len, .left = NIL, .right = NIL};
    treap_insert(a, i);
    bin_insert(a, i);
    a->free_ranges++;
    return i;
}

/* Span i, out of its bin already, is no longer free space. */
static void span_drop(egm_allocator_t *a, uint32_t i)
{
    treap_remove(a, i);
    a->spans[i].link_prev = LINK_UNUSED;
    a->spans[i].link_next = a->spare;
    a->spare = i;
    a->n_spare++;
    a->free_ranges--;
    if (a->take_hint == i)
        a->take_hint = NIL;
}

uint64_t egm__allocator_round(uint64_t len)
{
    if (len > UINT64_MAX - (EGM_ALLOCATOR_ALIGN - 1))
        return 0;
    return (len + EGM_ALLOCATOR_ALIGN - 1) & ~(uint64_t)(EGM_ALLOCATOR_ALIGN - 1);
}

#define INITIAL_SPANS 16

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
    a->spans = egm_malloc(INITIAL_SPANS * sizeof(*a->spans), "master.allocator_spans");
    if (a->spans == NULL)
        goto err_free_bins;
    a->cap_spans = INITIAL_SPANS;
    a->spare = NIL;
    a->root = NIL;
    a->take_hint = NIL;
    span_add(a, 0, a->blocks);
    *allocator_p = a;
    return EGM_OK;

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
    span_t *s = &a->spans[i];
    *offset_p = s->off * EGM_ALLOCATOR_ALIGN;
    bin_remove(a, i);
    if (s->len == n)
        span_drop(a, i);
    else {
        /* The allocation takes the low end; the rest stays free in place (its
         * place in the treap does not change: nothing lies between). */
        s->off += n;
        s->len -= n;
        bin_insert(a, i);
    }
    a->used += n;
    a->allocations++;
    return EGM_OK;
}

/* Blocks [*b_p, +*n_p) of a range given in bytes, or INVALID_ARG naming `what`
 * when it is empty, misaligned or outside the segment. */
static egm_status_t blocks_of(const egm_allocator_t *a, const char *what, uint64_t offset,
                              uint64_t len, uint64_t *b_p, uint64_t *n_p)
{
    uint64_t size = egm__allocator_round(len);

    if (len == 0 || size == 0 || offset % EGM_ALLOCATOR_ALIGN != 0 || offset >= a->capacity ||
        size > a->capacity - offset)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "%s of [%llu, +%llu): empty, misaligned or outside the segment", what,
                              (unsigned long long)offset, (unsigned long long)len);
    *b_p = offset / EGM_ALLOCATOR_ALIGN;
    *n_p = size / EGM_ALLOCATOR_ALIGN;
    return EGM_OK;
}

egm_status_t egm__allocator_free(egm_allocator_t *a, uint64_t offset, uint64_t len)
{
    uint64_t b, n;
    egm_status_t status = blocks_of(a, "free", offset, len, &b, &n);

    if (status != EGM_OK)
        return status;
    /* The free spans on either side: neither may overlap the range. */
    uint32_t p, q;
    treap_around(a, b, &p, &q);
    int join_p = 0, join_q = 0;
    if (p != NIL) {
        if (a->spans[p].off + a->spans[p].len > b)
            return egm__set_error(EGM_ERR_INVALID_ARG, "free of [%llu, +%llu): already free",
                                  (unsigned long long)offset, (unsigned long long)len);
        join_p = a->spans[p].off + a->spans[p].len == b;
    }
    if (q != NIL) {
        if (a->spans[q].off < b + n)
            return egm__set_error(EGM_ERR_INVALID_ARG,
                                  "free of [%llu, +%llu): runs into free space at %llu",
                                  (unsigned long long)offset, (unsigned long long)len,
                                  (unsigned long long)(a->spans[q].off * EGM_ALLOCATOR_ALIGN));
        join_q = a->spans[q].off == b + n;
    }
    if (!join_p && !join_q) {
        /* A free range of its own: the one case that needs a record. */
        if (reserve_n(a, 1) != EGM_OK) {
            a->lost += n;
            a->lost_ranges++;
            if ((a->lost_ranges & (a->lost_ranges - 1)) == 0) /* the 1st, 2nd, 4th, ... */
                egm_error("allocator: [%llu, +%llu) stays allocated (%llu ranges, %llu bytes lost "
                          "in this segment): %s",
                          (unsigned long long)offset, (unsigned long long)len,
                          (unsigned long long)a->lost_ranges,
                          (unsigned long long)(a->lost * EGM_ALLOCATOR_ALIGN), egm_last_error());
            if (a->allocations > 0)
                a->allocations--;
            return egm__set_error(EGM_ERR_NO_MEMORY,
                                  "free of [%llu, +%llu): no memory for a free range record; the "
                                  "range is lost until the segment is mounted again",
                                  (unsigned long long)offset, (unsigned long long)len);
        }
        span_add(a, b, n);
    } else if (join_p && join_q) {
        /* Joins the free ranges on both sides into the one before. */
        uint64_t more = n + a->spans[q].len;
        bin_remove(a, q);
        span_drop(a, q);
        bin_remove(a, p);
        a->spans[p].len += more;
        bin_insert(a, p);
    } else if (join_p) {
        bin_remove(a, p);
        a->spans[p].len += n;
        bin_insert(a, p);
    } else {
        /* The free range after it starts earlier (nothing free lies between). */
        bin_remove(a, q);
        a->spans[q].off = b;
        a->spans[q].len += n;
        bin_insert(a, q);
    }
    a->used -= n;
    if (a->allocations > 0)
        a->allocations--;
    return EGM_OK;
}

egm_status_t egm__allocator_split(egm_allocator_t *a, uint64_t offset, uint64_t at)
{
    uint64_t b, n;

    if (at <= offset ||
        blocks_of(a, "split", offset, at - offset + EGM_ALLOCATOR_ALIGN, &b, &n) != EGM_OK ||
        at % EGM_ALLOCATOR_ALIGN != 0)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "split of [%llu, ...) at %llu: misaligned or outside the segment",
                              (unsigned long long)offset, (unsigned long long)at);
    if (block_free(a, b) || block_free(a, b + n - 1))
        return egm__set_error(EGM_ERR_INVALID_ARG, "split of [%llu, ...) at %llu: free space",
                              (unsigned long long)offset, (unsigned long long)at);
    a->allocations++;
    return EGM_OK;
}

egm_status_t egm__allocator_take(egm_allocator_t *a, uint64_t offset, uint64_t len)
{
    uint64_t b, n;
    egm_status_t status = blocks_of(a, "take", offset, len, &b, &n);

    if (status != EGM_OK)
        return status;
    uint32_t i = a->take_hint;
    if (i == NIL || a->spans[i].off > b || b >= a->spans[i].off + a->spans[i].len)
        i = treap_at_or_before(a, b);
    if (i == NIL || b + n > a->spans[i].off + a->spans[i].len)
        return egm__set_error(EGM_ERR_INVALID_ARG, "take of [%llu, +%llu): not all free",
                              (unsigned long long)offset, (unsigned long long)len);
    span_t *s = &a->spans[i];
    uint64_t head = b - s->off, tail = s->off + s->len - (b + n);
    if (head > 0 && tail > 0) {
        status = reserve_n(a, 1); /* may move spans: indexes stay valid */
        if (status != EGM_OK)
            return status;
        s = &a->spans[i];
    }
    bin_remove(a, i);
    if (head == 0 && tail == 0) {
        span_drop(a, i);
    } else if (head == 0) {
        /* The free part after keeps the record (and its place in the treap). */
        s->off = b + n;
        s->len = tail;
        bin_insert(a, i);
        a->take_hint = i;
    } else {
        s->len = head;
        bin_insert(a, i);
        if (tail > 0)
            a->take_hint = span_add(a, b + n, tail);
    }
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
    stats_p->lost = a->lost * EGM_ALLOCATOR_ALIGN;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return egm__set_error(EGM_ERR_INTERNAL, __VA_ARGS__);                                  \
    } while (0)

typedef struct {
    int any;      /* a span was visited in order */
    uint64_t end; /* of the last span visited in order, in blocks */
    uint64_t free;
    size_t visited;
} walk_t;

/* In order through subtree t: spans in address order, apart (coalesced),
 * inside the segment, in heap order. */
static egm_status_t check_treap(const egm_allocator_t *a, uint32_t t, uint64_t lo, uint64_t hi,
                                unsigned depth, walk_t *w)
{
    if (t == NIL)
        return EGM_OK;
    const span_t *s = &a->spans[t];
    CHECK(t < a->n_spans && ++w->visited <= a->free_ranges && depth < 4096,
          "treap broken at span %u", t);
    CHECK(s->link_prev != LINK_UNUSED && s->off >= lo && s->off < hi,
          "span %u at block %llu is out of treap order", t, (unsigned long long)s->off);
    CHECK((s->left == NIL || priority(s->left) < priority(t)) &&
              (s->right == NIL || priority(s->right) < priority(t)),
          "span %u is out of heap order", t);
    egm_status_t status = check_treap(a, s->left, lo, s->off, depth + 1, w);
    if (status != EGM_OK)
        return status;
    CHECK(s->len > 0 && s->len <= a->blocks - s->off, "span %u [%llu, +%llu) is outside", t,
          (unsigned long long)s->off, (unsigned long long)s->len);
    CHECK(!w->any || s->off > w->end,
          "free span %u at block %llu overlaps or touches the one before", t,
          (unsigned long long)s->off);
    w->any = 1;
    w->end = s->off + s->len;
    w->free += s->len;
    return check_treap(a, s->right, s->off + 1, hi, depth + 1, w);
}

egm_status_t egm__allocator_check(const egm_allocator_t *a)
{
    walk_t w = {0};
    size_t n_unused = 0;

    egm_status_t status = check_treap(a, a->root, 0, a->blocks, 0, &w);
    if (status != EGM_OK)
        return status;
    CHECK(w.visited == a->free_ranges, "treap holds %zu free spans, %zu counted", w.visited,
          a->free_ranges);
    CHECK(w.free == a->blocks - a->used, "free spans cover %llu blocks, %llu are not used",
          (unsigned long long)w.free, (unsigned long long)(a->blocks - a->used));

    size_t in_bins = 0;
    for (unsigned c = 0; c < a->n_classes; c++) {
        int bit = (a->bitmap[c >> 6] >> (c & 63)) & 1;
        CHECK(bit == (a->bins[c] != NIL), "bitmap bit of class %u is %d", c, bit);
        uint32_t p = NIL;
        for (uint32_t i = a->bins[c]; i != NIL; p = i, i = a->spans[i].link_next) {
            CHECK(i < a->n_spans && ++in_bins <= a->free_ranges, "bin %u broken at span %u", c, i);
            CHECK(class_floor(a->spans[i].len) == c && a->spans[i].link_prev == p,
                  "span %u in bin %u is not a free span of that class", i, c);
        }
    }
    CHECK(in_bins == a->free_ranges, "bins hold %zu spans, %zu are free", in_bins, a->free_ranges);
    for (unsigned w2 = 0; w2 < BITMAP_WORDS; w2++)
        CHECK(((a->summary >> w2) & 1) == (a->bitmap[w2] != 0), "summary bit %u is wrong", w2);
    for (uint32_t i = a->spare; i != NIL; i = a->spans[i].link_next) {
        CHECK(i < a->n_spans && a->spans[i].link_prev == LINK_UNUSED && ++n_unused <= a->n_spans,
              "spare list broken at span %u", i);
    }
    CHECK(n_unused == a->n_spare, "%zu spare spans listed, %u counted", n_unused, a->n_spare);
    CHECK(a->free_ranges + n_unused == a->n_spans, "%zu spans are neither free nor spare",
          a->n_spans - a->free_ranges - n_unused);
    CHECK(a->take_hint == NIL ||
              (a->take_hint < a->n_spans && a->spans[a->take_hint].link_prev != LINK_UNUSED),
          "take hint %u is not a free span", a->take_hint);
    return EGM_OK;
}
