/* The slab log entries a Commit names (commit_seqs.h). */
#include "master/commit_seqs.h"

#include "common/alloc.h"
#include "common/log.h"

egm_status_t egm__commit_seen_seqs(size_t n, const uint64_t *logged, size_t n_logged,
                                   const uint64_t *torn, size_t n_torn, const uint64_t **seen_p,
                                   uint64_t **owned_p)
{
    *seen_p = NULL;
    *owned_p = NULL;
    if (n_logged != 0 && n_logged != n)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "log_seqs: %zu values for %zu keys (one per key, or none)", n_logged,
                              n);
    if (n_torn != 0 && n_torn != n)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "torn_log_seqs: %zu values for %zu keys (one per key, or none)",
                              n_torn, n);
    if (n_torn == 0) {
        *seen_p = n_logged != 0 ? logged : NULL;
        return EGM_OK;
    }
    uint64_t *seen = egm_calloc(n + 1, sizeof(*seen), "master.commit_seqs");
    if (seen == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for a Commit's log seqs");
    for (size_t i = 0; i < n; i++) {
        uint64_t whole = n_logged != 0 ? logged[i] : 0, part = torn[i];
        if (whole != 0 && part != 0) {
            egm_free(seen);
            return egm__set_error(EGM_ERR_INVALID_ARG,
                                  "log_seqs, torn_log_seqs: key %zu names an entry in both (an "
                                  "entry is written whole or torn)",
                                  i);
        }
        seen[i] = whole != 0 ? whole : part;
    }
    *seen_p = *owned_p = seen;
    return EGM_OK;
}
