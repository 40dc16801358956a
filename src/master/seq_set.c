/* Known seqs of a slab's commit log (seq_set.h). */
#include "master/seq_set.h"

#include <string.h>
#include "common/alloc.h"
#include "common/log.h"

/* Where seq is or would go in extra. */
static size_t lower_bound(const egm_seq_set_t *s, uint64_t seq)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->extra[mid] < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

egm_status_t egm__seq_set_add(egm_seq_set_t *s, uint64_t seq)
{
    if (seq == 0 || egm__seq_set_has(s, seq))
        return EGM_OK;
    if (seq == s->prefix + 1) {
        s->prefix = seq;
        size_t k = 0; /* absorb what now follows the prefix */
        while (k < s->n && s->extra[k] == s->prefix + 1)
            s->prefix = s->extra[k++];
        if (k > 0) { /* extra may be NULL when empty */
            memmove(s->extra, s->extra + k, (s->n - k) * sizeof(*s->extra));
            s->n -= k;
        }
        return EGM_OK;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap < 16 ? 16 : s->cap * 2;
        uint64_t *extra = egm_realloc(s->extra, cap * sizeof(*extra), "master.seq_set");
        if (extra == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory noting a slab log seq");
        s->extra = extra;
        s->cap = cap;
    }
    size_t at = lower_bound(s, seq);
    memmove(s->extra + at + 1, s->extra + at, (s->n - at) * sizeof(*s->extra));
    s->extra[at] = seq;
    s->n++;
    return EGM_OK;
}

int egm__seq_set_has(const egm_seq_set_t *s, uint64_t seq)
{
    if (seq == 0 || seq <= s->prefix)
        return seq != 0;
    size_t at = lower_bound(s, seq);
    return at < s->n && s->extra[at] == seq;
}

void egm__seq_set_free(egm_seq_set_t *s)
{
    egm_free(s->extra);
    memset(s, 0, sizeof(*s));
}
