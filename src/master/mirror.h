/* A standby master's copy of the leader's state: what the leader's journal
 * (master/journal.h) sent it, kept as the ops themselves (the segments by id,
 * the objects by key, the ranges in use with their end), and taken over when
 * this master is elected (egm__mirror_install). docs/ha.md "State handover".
 *
 * It also keeps the slabs granted to writers (their extents and the seqs of
 * their commit logs the leader confirmed it knows: common/slab_log.h), so
 * that taking over reads each open slab's log past them and adopts the
 * objects the leader committed without waiting for this standby
 * (docs/ha.md "Commits the pool describes").
 *
 * Batches arrive in the order the leader sent them, each naming the leader's
 * epoch and its place in the leader's journal [from, to): a batch of an older
 * epoch, or one that does not follow the last one applied, is refused (the
 * leader then starts over with a snapshot, a batch with `reset`).
 * Thread-safe. */
#ifndef EGM_MASTER_MIRROR_H
#define EGM_MASTER_MIRROR_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "master/liveness.h"
#include "master/object_index.h"
#include "master/segment_table.h"
#include "rpc/pool_reader.h"

typedef struct egm_mirror egm_mirror_t;

egm_status_t egm__mirror_create(egm_mirror_t **m_p);
void egm__mirror_destroy(egm_mirror_t *m);

/* Applies one batch of ops (now_ms: this master's clock, for the ranges'
 * ends). reset: everything kept is dropped first (a snapshot's first batch).
 * EGM_ERR_PERMISSION for an epoch older than the one followed,
 * EGM_ERR_INVALID_ARG for a batch out of order (naming both places) or an op
 * that does not decode (nothing after it applied; the mirror must be reset),
 * EGM_ERR_NO_MEMORY. */
egm_status_t egm__mirror_apply(egm_mirror_t *m, int64_t epoch, int reset, uint64_t from,
                               uint64_t to, const uint8_t *ops, size_t len, uint64_t now_ms);

typedef struct {
    int64_t epoch; /* of the leader followed; 0: none yet */
    uint64_t position;
    uint64_t segments;
    uint64_t objects;
    uint64_t ranges;
    uint64_t slabs;
    uint64_t batches_total;
    uint64_t last_batch_ms; /* now_ms of the last batch applied; 0: none */
} egm_mirror_stats_t;

void egm__mirror_stats(egm_mirror_t *m, egm_mirror_stats_t *stats_p);

/* Takes the mirror over (this master was elected; the caller holds the
 * master's lock exclusive and serves nothing yet): mounts its segments
 * through liveness (registering their owners as of now_ms), reads the log
 * of every slab it holds (its end, even past its lease, comes as SLAB_GONE
 * before its space is reused) that was granted with `log` or has an entry
 * known (otherwise a writer's first entry is confirmed before it is
 * answered) through
 * reader (from one extent whose segment is mounted and reads; the next one
 * if a read fails; a provider a read failed on is not asked again) past
 * the seqs it knows, up to the first entry that does not decode, and adopts
 * its objects, the ranges still in use and the objects those logs describe
 * whose key it does not hold into objects (egm__objects_adopt). The mirror
 * is emptied. *objects_p, *skipped_p: objects adopted, and replicas or
 * objects that could not be; *recovered_p: of the adopted, those found in
 * slab logs; *removed_p: objects of the mirror that removal entries in those
 * logs took (docs/ha.md "Removes the pool describes"). */
egm_status_t egm__mirror_install(egm_mirror_t *m, egm_liveness_t *liveness,
                                 egm_segment_table_t *segments, egm_object_index_t *objects,
                                 const egm_pool_reader_t *reader, uint64_t now_ms,
                                 size_t *objects_p, size_t *skipped_p, size_t *recovered_p,
                                 size_t *removed_p);

#endif
