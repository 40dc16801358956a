/* The seqs of a slab's commit log (common/slab_log.h) that a master knows
 * were committed or refused: every seq up to `prefix`, and the few beyond it
 * that came out of order. A new leader reads a slab's log past what this
 * says it knows. Not thread-safe. */
#ifndef EGM_MASTER_SEQ_SET_H
#define EGM_MASTER_SEQ_SET_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

typedef struct {
    uint64_t prefix; /* 1..prefix are in */
    uint64_t *extra; /* sorted, each > prefix + 1 */
    size_t n, cap;
} egm_seq_set_t;

/* Adds seq (0 is ignored); EGM_ERR_NO_MEMORY leaves the set as it was. */
egm_status_t egm__seq_set_add(egm_seq_set_t *s, uint64_t seq);
int egm__seq_set_has(const egm_seq_set_t *s, uint64_t seq);
void egm__seq_set_free(egm_seq_set_t *s);

#endif
