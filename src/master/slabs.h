/* Slabs: pool space granted whole to one writing client, which places its
 * objects in it itself and publishes them with one Commit per call
 * (docs/master.md "Client-side allocation").
 *
 * A slab is one extent of the same size on each of 1..EGM_MASTER_REPLICA_MAX
 * distinct segments (one per replica), each an allocation of its segment's
 * allocator, so watermark, eviction and every usage figure count it as used.
 * The client places an object at the same offset in every extent; a commit
 * claims [offset, offset + rounded size) of the slab: the range is cut out
 * of the slab's unclaimed pieces (egm__allocator_split in every extent) and
 * becomes the object's replicas, freed with the object like any other. What
 * was never claimed returns to the allocators when the client retires the
 * slab or when its lease ends (egm__slabs_expire): a client that died gives
 * its space back after that lease, and a commit after it is refused.
 *
 * Pieces are kept relative to the slab, sorted, each one allocation in every
 * live extent: claims in the order of the client's bump allocator keep one
 * piece (the tail), and a claim inside a piece cuts it in two.
 *
 * Not thread-safe: the object index calls it with its `space` lock held.
 * Everything a new master leader needs to never reuse space a slab still
 * covers is in egm_slab_t (owner, extents, pieces, expiry). */
#ifndef EGM_MASTER_SLABS_H
#define EGM_MASTER_SLABS_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "master/recent_frees.h"
#include "master/segment_table.h"
#include "master/seq_set.h"

#define EGM_SLAB_EXTENTS_MAX 16 /* = EGM_MASTER_REPLICA_MAX */
/* Unclaimed pieces one slab may be cut into: claims in the writer's order
 * keep one; each copy that failed (never committed) leaves a hole. A claim
 * that would cut more is refused, so that a claim stays cheap under the
 * master's `space` lock whatever a client sends. */
#define EGM_SLAB_PIECES_MAX 4096

/* A grant answered before the standby masters hold it (docs/ha.md "Grants
 * the standbys do not hold yet"): its writer starts copies into the slab only
 * within EGM_SLAB_EARLY_PLACE_MS of sending the request, until a Commit there
 * is answered (KeysReply.place_within_ms); a leader answers so only while its
 * fence is more than that plus EGM_SLAB_EARLY_COPY_MS away, so that those
 * copies end before another master can lead; and only for slabs of at most
 * EGM_SLAB_EARLY_MAX_BYTES, whose copies take well under that. */
#define EGM_SLAB_EARLY_PLACE_MS 600
#define EGM_SLAB_EARLY_COPY_MS 400
#define EGM_SLAB_EARLY_MAX_BYTES (64ull << 20)

/* Whether a leader whose fence is at fence_ms (egm__election_fence_ms: 0
 * when it does not lead) may answer a grant early at now_ms: the writer's
 * copies, started within EGM_SLAB_EARLY_PLACE_MS and taking at most
 * EGM_SLAB_EARLY_COPY_MS, end before the fence. */
int egm__slab_early_fence_ok(uint64_t fence_ms, uint64_t now_ms);

typedef struct {
    egm_segment_t *segment; /* NULL once its segment was dropped */
    uint64_t base;          /* offset of the extent in the segment */
} egm_slab_extent_t;

typedef struct {
    uint64_t off; /* from the slab's start */
    uint64_t len;
} egm_slab_piece_t;

typedef struct egm_slab {
    uint64_t id; /* never 0, never reused by this master, random from its start */
    egm_id_t owner;
    uint64_t size;      /* of each extent, a multiple of EGM_ALLOCATOR_ALIGN */
    uint64_t expiry_ms; /* the lease: unclaimed space returns at this time */
    uint32_t n_extents;
    uint32_t n_live; /* extents whose segment is still mounted */
    egm_slab_extent_t extents[EGM_SLAB_EXTENTS_MAX];
    egm_slab_piece_t *pieces; /* unclaimed, sorted by off */
    size_t n_pieces;
    size_t cap_pieces;
    uint64_t unclaimed; /* their bytes */
    egm_seq_set_t seen; /* its commit log's entries committed or refused (common/slab_log.h) */
    /* Granted for a client that keeps its log (SlabGrant `log`): journaled
     * so, its grant confirmed before the client could write an entry, the
     * standbys read its log at a takeover from the first entry on. */
    int logged;
    /* Whether the standbys know its log is kept (they then read it): from
     * its grant when logged, else once they confirmed its first entry noted
     * (log_pos: that entry's journal position). */
    uint64_t log_pos;
    int log_confirmed;
} egm_slab_t;

typedef struct egm_slab_table egm_slab_table_t;

egm_status_t egm__slabs_create(egm_slab_table_t **table_p);
struct egm_journal;
/* A slab released (returned, expired) is journaled SLAB_GONE there, and its
 * space noted in recent (both NULL: no HA). */
void egm__slabs_set_journal(egm_slab_table_t *table, struct egm_journal *journal,
                            egm_recent_frees_t *recent);
/* Frees the records only (the allocators go with their segments). */
void egm__slabs_destroy(egm_slab_table_t *table);

/* Records a slab whose extents are already allocated (each exactly `size`
 * bytes at extents[i].base); the slab out (the table's: valid until it is
 * released). EGM_ERR_NO_MEMORY (nothing recorded: the caller frees the
 * extents). */
egm_status_t egm__slabs_add(egm_slab_table_t *table, egm_id_t owner, uint64_t size,
                            uint64_t expiry_ms, const egm_slab_extent_t *extents, uint32_t n,
                            egm_slab_t **slab_p);
/* The slab `id` of `owner` live at now_ms. EGM_ERR_NOT_FOUND naming why
 * (unknown or returned, expired, another client's, every segment gone). */
egm_status_t egm__slabs_find(egm_slab_table_t *table, uint64_t id, egm_id_t owner, uint64_t now_ms,
                             egm_slab_t **slab_p);
/* Cuts [off, off + len) (len rounded by the caller) out of the slab's
 * unclaimed space: afterwards it is one allocation in each live extent, no
 * longer the slab's. EGM_ERR_INVALID_ARG when the range is not wholly inside
 * one unclaimed piece (misaligned, past the slab, claimed before) or would
 * leave more than EGM_SLAB_PIECES_MAX pieces, EGM_ERR_NO_MEMORY (nothing
 * changed). */
egm_status_t egm__slabs_claim(egm_slab_t *slab, uint64_t off, uint64_t len);
/* Frees the slab's unclaimed space and forgets it; the bytes freed (every
 * extent). */
uint64_t egm__slabs_release(egm_slab_table_t *table, egm_slab_t *slab);
/* Releases every slab whose lease ended at or before now_ms; bytes freed,
 * and how many slabs in *expired_p (may be NULL). */
uint64_t egm__slabs_expire(egm_slab_table_t *table, uint64_t now_ms, size_t *expired_p);
/* The earliest expiry of a slab (UINT64_MAX: none). */
uint64_t egm__slabs_next_expiry(const egm_slab_table_t *table);
/* Forgets the extents on `segment` (being unmounted); a slab left with none
 * is dropped. */
void egm__slabs_drop_segment(egm_slab_table_t *table, const egm_segment_t *segment);

/* Calls fn for every slab (the table must not change meanwhile). */
void egm__slabs_each(const egm_slab_table_t *table, void (*fn)(void *arg, const egm_slab_t *slab),
                     void *arg);

typedef struct {
    size_t slabs;
    uint64_t unclaimed_bytes; /* every live extent's unclaimed pieces */
} egm_slabs_stats_t;

void egm__slabs_stats(const egm_slab_table_t *table, egm_slabs_stats_t *stats_p);
/* The unclaimed bytes the slabs hold in `segment` and how many allocations
 * they are (for egm__objects_check). */
void egm__slabs_in(const egm_slab_table_t *table, const egm_segment_t *segment, uint64_t *bytes_p,
                   size_t *pieces_p);

#endif
