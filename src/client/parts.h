/* The caller's buffers of a batch, key by key: one buffer per key (put_from,
 * get_into) or several whose concatenation is the object (the *_parts
 * scatter-gather forms). A view may start at any key of the batch (pipeline
 * chunks); part indices stay those of the caller's arrays. */
#ifndef EGM_CLIENT_PARTS_H
#define EGM_CLIENT_PARTS_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

typedef struct {
    size_t key0;       /* first key of this view */
    size_t *first;     /* first part of every key of the batch; NULL: one part each */
    void *const *addr; /* every part of the batch */
    const size_t *len;
} egm_parts_t;

/* counts NULL: key i's only part is addr[i]. Else first[] is computed (freed
 * with egm__parts_free); a count of 0 or a part count overflow is refused
 * naming the key. */
egm_status_t egm__parts_init(egm_parts_t *parts, size_t n, const size_t *counts, void *const *addr,
                             const size_t *len);
void egm__parts_free(egm_parts_t *parts);

/* The same parts seen from key `key` of this view on. */
static inline egm_parts_t egm__parts_from(const egm_parts_t *parts, size_t key)
{
    egm_parts_t view = *parts;
    view.key0 += key;
    return view;
}

/* Parts of key i of the view: [egm__parts_first, egm__parts_end). */
static inline size_t egm__parts_first(const egm_parts_t *parts, size_t i)
{
    return parts->first ? parts->first[parts->key0 + i] : parts->key0 + i;
}

static inline size_t egm__parts_end(const egm_parts_t *parts, size_t i)
{
    return parts->first ? parts->first[parts->key0 + i + 1] : parts->key0 + i + 1;
}

/* Parts of the view's first n keys. */
static inline size_t egm__parts_in(const egm_parts_t *parts, size_t n)
{
    return n > 0 ? egm__parts_end(parts, n - 1) - egm__parts_first(parts, 0) : 0;
}

/* A batch refused as a whole: every results[i] (if results) is status; returns status. */
egm_status_t egm__parts_fail_all(egm_status_t *results, size_t n, egm_status_t status);

/* Sum of key i's part lengths; UINT64_MAX if it overflows. */
uint64_t egm__parts_total(const egm_parts_t *parts, size_t i);

#endif
