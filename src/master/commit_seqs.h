/* The slab log entries a Commit names (docs/ha.md "Commits the pool
 * describes"): per key, `log_seqs` (an entry written whole, in every extent:
 * the Commit needs no wait for the standbys) or `torn_log_seqs` (an entry
 * whose write failed on some extent). The master notes both seen: a new
 * leader reading the slab's log skips them, so it never adopts an entry of a
 * key that was since removed over bytes written later in its range. Only
 * whole entries describe their key. */
#ifndef EGM_MASTER_COMMIT_SEQS_H
#define EGM_MASTER_COMMIT_SEQS_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

/* Checks the two lists against n keys (each: one value per key, or none; no
 * key names both) and answers in *seen_p the seq to note seen per key (0:
 * none), or NULL when the Commit names no entry: `logged` itself when no
 * entry is torn (the usual Commit: nothing allocated), else an array in
 * *owned_p (egm_free it; NULL otherwise). */
egm_status_t egm__commit_seen_seqs(size_t n, const uint64_t *logged, size_t n_logged,
                                   const uint64_t *torn, size_t n_torn, const uint64_t **seen_p,
                                   uint64_t **owned_p);

#endif
