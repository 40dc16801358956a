/* Slabs granted to writing clients: records, claims, expiry (slabs.h). */
#include "master/slabs.h"

#include <string.h>
#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/id.h"
#include "common/log.h"
#include "master/journal.h"

struct egm_slab_table {
    egm_hashmap_t *by_id; /* uint64_t id -> egm_slab_t */
    uint64_t next_id;
    struct egm_journal *journal; /* NULL: no HA */
    egm_recent_frees_t *recent;  /* NULL: no HA */
};

void egm__slabs_set_journal(egm_slab_table_t *t, struct egm_journal *journal,
                            egm_recent_frees_t *recent)
{
    t->journal = journal;
    t->recent = recent;
}

egm_status_t egm__slabs_create(egm_slab_table_t **table_p)
{
    egm_slab_table_t *t = egm_calloc(1, sizeof(*t), "master.slabs");

    *table_p = NULL;
    if (t == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the slab table");
    egm_status_t status = egm__hashmap_create(&t->by_id);
    if (status != EGM_OK) {
        egm_free(t);
        return status;
    }
    /* Ids start at random: a client that held slabs of a master that
     * restarted never names one of the new master's by chance. */
    t->next_id = egm__id_random().lo | 1;
    *table_p = t;
    return EGM_OK;
}

static void slab_free(egm_slab_t *slab)
{
    egm__seq_set_free(&slab->seen);
    egm_free(slab->pieces);
    egm_free(slab);
}

void egm__slabs_destroy(egm_slab_table_t *t)
{
    size_t iter = 0;
    void *value;

    if (t == NULL)
        return;
    while (egm__hashmap_next(t->by_id, &iter, NULL, NULL, &value))
        slab_free(value);
    egm__hashmap_destroy(t->by_id);
    egm_free(t);
}

egm_status_t egm__slabs_add(egm_slab_table_t *t, egm_id_t owner, uint64_t size, uint64_t expiry_ms,
                            const egm_slab_extent_t *extents, uint32_t n, egm_slab_t **slab_p)
{
    egm_slab_t *slab = egm_calloc(1, sizeof(*slab), "master.slab");

    if (slab == NULL || n == 0 || n > EGM_SLAB_EXTENTS_MAX)
        goto nomem;
    slab->pieces = egm_malloc(4 * sizeof(*slab->pieces), "master.slab");
    if (slab->pieces == NULL)
        goto nomem;
    slab->cap_pieces = 4;
    slab->pieces[0] = (egm_slab_piece_t){.off = 0, .len = size};
    slab->n_pieces = 1;
    slab->unclaimed = size;
    slab->id = t->next_id;
    slab->owner = owner;
    slab->size = size;
    slab->expiry_ms = expiry_ms;
    slab->n_extents = slab->n_live = n;
    memcpy(slab->extents, extents, n * sizeof(*extents));
    if (egm__hashmap_put(t->by_id, &slab->id, sizeof(slab->id), slab, NULL) != EGM_OK)
        goto nomem;
    t->next_id = t->next_id + 1 != 0 ? t->next_id + 1 : 1;
    *slab_p = slab;
    return EGM_OK;
nomem:
    if (slab != NULL)
        slab_free(slab);
    return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory recording a slab");
}

egm_status_t egm__slabs_find(egm_slab_table_t *t, uint64_t id, egm_id_t owner, uint64_t now_ms,
                             egm_slab_t **slab_p)
{
    egm_slab_t *slab = egm__hashmap_get(t->by_id, &id, sizeof(id));

    *slab_p = NULL;
    if (slab == NULL || !egm__id_equal(slab->owner, owner))
        return egm__set_error(EGM_ERR_NOT_FOUND,
                              "slab %llu: not granted to this client, or already returned "
                              "(its lease ended, or every segment it was on is gone)",
                              (unsigned long long)id);
    if (now_ms >= slab->expiry_ms)
        return egm__set_error(EGM_ERR_NOT_FOUND, "slab %llu: its lease ended %llu ms ago",
                              (unsigned long long)id,
                              (unsigned long long)(now_ms - slab->expiry_ms));
    *slab_p = slab;
    return EGM_OK;
}

/* The piece holding offset off, or n_pieces. */
static size_t piece_at(const egm_slab_t *slab, uint64_t off)
{
    size_t lo = 0, hi = slab->n_pieces;
    while (lo < hi) { /* first piece starting after off */
        size_t mid = lo + (hi - lo) / 2;
        if (slab->pieces[mid].off <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return slab->n_pieces;
    const egm_slab_piece_t *p = &slab->pieces[lo - 1];
    return off - p->off < p->len ? lo - 1 : slab->n_pieces;
}

egm_status_t egm__slabs_claim(egm_slab_t *slab, uint64_t off, uint64_t len)
{
    size_t k = off % EGM_ALLOCATOR_ALIGN == 0 && len > 0 && len % EGM_ALLOCATOR_ALIGN == 0
                   ? piece_at(slab, off)
                   : slab->n_pieces;

    if (k == slab->n_pieces || len > slab->pieces[k].off + slab->pieces[k].len - off)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "offsets: [%llu, +%llu) is not unclaimed space of slab %llu "
                              "(%llu bytes; misaligned, past its end, or claimed before)",
                              (unsigned long long)off, (unsigned long long)len,
                              (unsigned long long)slab->id, (unsigned long long)slab->size);
    egm_slab_piece_t p = slab->pieces[k];
    int head = off > p.off, tail = off + len < p.off + p.len;
    size_t grow = (size_t)head + (size_t)tail; /* pieces left: head, tail, both or none */
    if (slab->n_pieces - 1 + grow > EGM_SLAB_PIECES_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "offsets: slab %llu is cut into %zu pieces already, the most a "
                              "slab may have (commit in the order of the offsets)",
                              (unsigned long long)slab->id, slab->n_pieces);
    if (slab->n_pieces - 1 + grow > slab->cap_pieces) {
        size_t cap = slab->cap_pieces * 2;
        egm_slab_piece_t *pieces = egm_realloc(slab->pieces, cap * sizeof(*pieces), "master.slab");
        if (pieces == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory claiming slab space");
        slab->pieces = pieces;
        slab->cap_pieces = cap;
    }
    /* The cuts need no memory (the allocator records no allocations). */
    for (uint32_t e = 0; e < slab->n_extents; e++) {
        egm_segment_t *seg = slab->extents[e].segment;
        uint64_t base = slab->extents[e].base;
        egm_status_t status = EGM_OK;
        if (seg == NULL)
            continue;
        if (head)
            status = egm__allocator_split(seg->allocator, base + p.off, base + off);
        if (status == EGM_OK && tail)
            status = egm__allocator_split(seg->allocator, base + off, base + off + len);
        if (status != EGM_OK) /* the pieces and the allocators disagree: a bug */
            egm_error("slab %llu extent %u: %s", (unsigned long long)slab->id, e, egm_last_error());
    }
    egm_slab_piece_t left = {.off = p.off, .len = off - p.off};
    egm_slab_piece_t right = {.off = off + len, .len = p.off + p.len - off - len};
    size_t after = slab->n_pieces - k - 1;
    memmove(&slab->pieces[k + grow], &slab->pieces[k + 1], after * sizeof(*slab->pieces));
    size_t at = k;
    if (head)
        slab->pieces[at++] = left;
    if (tail)
        slab->pieces[at] = right;
    slab->n_pieces = slab->n_pieces - 1 + grow;
    slab->unclaimed -= len;
    return EGM_OK;
}

uint64_t egm__slabs_release(egm_slab_table_t *t, egm_slab_t *slab)
{
    uint64_t freed = 0;

    for (uint32_t e = 0; e < slab->n_extents; e++) {
        egm_segment_t *seg = slab->extents[e].segment;
        for (size_t k = 0; seg != NULL && k < slab->n_pieces; k++) {
            const egm_slab_piece_t *p = &slab->pieces[k];
            uint64_t at = slab->extents[e].base + p->off;
            egm_status_t s = egm__allocator_free(seg->allocator, at, p->len);
            if (s == EGM_OK) {
                freed += p->len;
                /* SLAB_GONE follows in this hold of `space` (recent_frees.h) */
                egm__recent_frees_add(t->recent, seg, at, p->len);
            } else if (s != EGM_ERR_NO_MEMORY) /* lost: the allocator said so */
                egm_error("slab %llu: %s", (unsigned long long)slab->id, egm_last_error());
        }
    }
    egm__journal_slab_gone(t->journal, slab->id);
    egm__hashmap_remove(t->by_id, &slab->id, sizeof(slab->id));
    slab_free(slab);
    return freed;
}

uint64_t egm__slabs_expire(egm_slab_table_t *t, uint64_t now_ms, size_t *expired_p)
{
    size_t iter = 0, expired = 0;
    void *value;
    uint64_t freed = 0;

    while (egm__hashmap_next(t->by_id, &iter, NULL, NULL, &value)) {
        egm_slab_t *slab = value;
        if (now_ms >= slab->expiry_ms) {
            freed += egm__slabs_release(t, slab);
            expired++;
        }
    }
    if (expired_p != NULL)
        *expired_p = expired;
    return freed;
}

uint64_t egm__slabs_next_expiry(const egm_slab_table_t *t)
{
    size_t iter = 0;
    void *value;
    uint64_t next = UINT64_MAX;

    while (egm__hashmap_next(t->by_id, &iter, NULL, NULL, &value))
        if (((egm_slab_t *)value)->expiry_ms < next)
            next = ((egm_slab_t *)value)->expiry_ms;
    return next;
}

void egm__slabs_drop_segment(egm_slab_table_t *t, const egm_segment_t *segment)
{
    size_t iter = 0;
    void *value;

    while (egm__hashmap_next(t->by_id, &iter, NULL, NULL, &value)) {
        egm_slab_t *slab = value;
        for (uint32_t e = 0; e < slab->n_extents; e++)
            if (slab->extents[e].segment == segment) {
                slab->extents[e].segment = NULL;
                slab->n_live--;
            }
        if (slab->n_live == 0)
            egm__slabs_release(t, slab); /* frees nothing: its segments are gone */
    }
}

void egm__slabs_stats(const egm_slab_table_t *t, egm_slabs_stats_t *stats_p)
{
    size_t iter = 0;
    void *value;

    memset(stats_p, 0, sizeof(*stats_p));
    while (egm__hashmap_next(t->by_id, &iter, NULL, NULL, &value)) {
        const egm_slab_t *slab = value;
        stats_p->slabs++;
        stats_p->unclaimed_bytes += slab->unclaimed * slab->n_live;
    }
}

void egm__slabs_in(const egm_slab_table_t *t, const egm_segment_t *segment, uint64_t *bytes_p,
                   size_t *pieces_p)
{
    size_t iter = 0;
    void *value;

    *bytes_p = 0;
    *pieces_p = 0;
    while (egm__hashmap_next(t->by_id, &iter, NULL, NULL, &value)) {
        const egm_slab_t *slab = value;
        for (uint32_t e = 0; e < slab->n_extents; e++)
            if (slab->extents[e].segment == segment) {
                *bytes_p += slab->unclaimed;
                *pieces_p += slab->n_pieces;
            }
    }
}

void egm__slabs_each(const egm_slab_table_t *t, void (*fn)(void *arg, const egm_slab_t *slab),
                     void *arg)
{
    size_t iter = 0;
    void *value;
    while (egm__hashmap_next(t->by_id, &iter, NULL, NULL, &value))
        fn(arg, value);
}

int egm__slab_early_fence_ok(uint64_t fence_ms, uint64_t now_ms)
{
    return fence_ms > now_ms + EGM_SLAB_EARLY_PLACE_MS + EGM_SLAB_EARLY_COPY_MS;
}
