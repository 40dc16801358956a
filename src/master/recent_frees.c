/* Space freed that the standbys may not know is free yet (recent_frees.h). */
#include "master/recent_frees.h"

#include "common/alloc.h"
#include "common/log.h"

typedef struct {
    const struct egm_segment *seg;
    uint64_t offset, end;
    uint64_t pos; /* 0: noted since the last settle */
} recent_free_t;

struct egm_recent_frees {
    size_t n;
    /* Past EGM_RECENT_FREES_MAX: everything freed before counts as fresh
     * until the journal position wide_pos is confirmed (0: unstamped). */
    int wide;
    uint64_t wide_pos;
    recent_free_t v[EGM_RECENT_FREES_MAX];
};

egm_status_t egm__recent_frees_create(egm_recent_frees_t **frees_p)
{
    *frees_p = egm_calloc(1, sizeof(**frees_p), "master.recent_frees");
    return *frees_p != NULL ? EGM_OK
                            : egm__set_error(EGM_ERR_NO_MEMORY,
                                             "out of memory for the list of recently freed space");
}

void egm__recent_frees_destroy(egm_recent_frees_t *frees)
{
    egm_free(frees);
}

void egm__recent_frees_add(egm_recent_frees_t *frees, const struct egm_segment *seg,
                           uint64_t offset, uint64_t len)
{
    if (frees == NULL || len == 0)
        return;
    if (frees->n == EGM_RECENT_FREES_MAX) {
        /* The ranges held are all covered by the mark; so is this one. */
        frees->n = 0;
        frees->wide = 1;
        frees->wide_pos = 0;
        return;
    }
    if (frees->wide && frees->wide_pos == 0)
        return; /* covered by the unstamped mark */
    frees->v[frees->n++] =
        (recent_free_t){.seg = seg, .offset = offset, .end = offset + len, .pos = 0};
}

void egm__recent_frees_settle(egm_recent_frees_t *frees, uint64_t end, uint64_t confirmed)
{
    if (frees->wide) {
        if (frees->wide_pos == 0)
            frees->wide_pos = end;
        if (frees->wide_pos <= confirmed)
            frees->wide = 0;
    }
    size_t k = 0;
    for (size_t i = 0; i < frees->n; i++) {
        recent_free_t *f = &frees->v[i];
        if (f->pos == 0)
            f->pos = end;
        if (f->pos > confirmed)
            frees->v[k++] = *f;
    }
    frees->n = k;
}

int egm__recent_frees_overlap(const egm_recent_frees_t *frees, const struct egm_segment *seg,
                              uint64_t offset, uint64_t len)
{
    if (frees->wide)
        return 1;
    for (size_t i = 0; i < frees->n; i++) {
        const recent_free_t *f = &frees->v[i];
        if (f->seg == seg && f->offset < offset + len && offset < f->end)
            return 1;
    }
    return 0;
}
