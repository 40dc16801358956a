/* Space freed that the standby masters may not know is free yet: the ranges
 * a SlabGrant answered before the standbys hold it must not take
 * (docs/ha.md "Grants the standbys do not hold yet"). A standby that took
 * over still believing such a range held an object, or a slab whose log it
 * reads, would serve or adopt the bytes the early grant's writer put there.
 *
 * Every free of segment space is noted here while the master has a journal
 * (egm__recent_frees_add). The op that tells the standbys of a free (an
 * OBJECT_GONE, a SLAB_GONE, a SLAB_SEEN before a refused claim's free, the
 * RESERVE of held space) is journaled before the free or in the same hold of
 * the index's `space` lock, so a range noted in an earlier hold is covered
 * by the journal's end at the start of the current one:
 * egm__recent_frees_settle, called then, stamps the ranges noted since its
 * last call with that end and forgets those the standbys confirmed. Holds at most
 * EGM_RECENT_FREES_MAX ranges; past that it notes that everything freed so far must be confirmed
 * (the whole pool counts as freshly freed until then). No memory is allocated after create. Not
 * thread-safe: the object index calls it with `space` locked. */
#ifndef EGM_MASTER_RECENT_FREES_H
#define EGM_MASTER_RECENT_FREES_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

#define EGM_RECENT_FREES_MAX 1024

struct egm_segment;
typedef struct egm_recent_frees egm_recent_frees_t;

egm_status_t egm__recent_frees_create(egm_recent_frees_t **frees_p);
void egm__recent_frees_destroy(egm_recent_frees_t *frees); /* NULL: no-op */

/* [offset, offset + len) of seg was freed (NULL frees: no-op). */
void egm__recent_frees_add(egm_recent_frees_t *frees, const struct egm_segment *seg,
                           uint64_t offset, uint64_t len);
/* Stamps the ranges noted since the last call with end (the journal's end
 * now) and forgets every range stamped at or before confirmed (what every
 * standby in sync acknowledged). */
void egm__recent_frees_settle(egm_recent_frees_t *frees, uint64_t end, uint64_t confirmed);
/* 1 when a range held (stamped and not confirmed at the last settle, or
 * noted since) overlaps [offset, offset + len) of seg, or the list
 * overflowed and that is not confirmed yet. */
int egm__recent_frees_overlap(const egm_recent_frees_t *frees, const struct egm_segment *seg,
                              uint64_t offset, uint64_t len);

#endif
