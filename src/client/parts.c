/* Batch buffers key by key (parts.h). */
#include "client/parts.h"
#include "common/alloc.h"
#include "common/log.h"

egm_status_t egm__parts_init(egm_parts_t *parts, size_t n, const size_t *counts, void *const *addr,
                             const size_t *len)
{
    *parts = (egm_parts_t){.addr = addr, .len = len};
    if (counts == NULL)
        return EGM_OK;
    parts->first = egm_calloc(n + 1, sizeof(*parts->first), "client.parts");
    if (parts->first == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory indexing %zu keys' parts", n);
    for (size_t i = 0; i < n; i++) {
        if (counts[i] == 0 || counts[i] > SIZE_MAX / 2 - parts->first[i]) {
            egm__parts_free(parts);
            return egm__set_error(EGM_ERR_INVALID_ARG,
                                  "part_counts[%zu] is %zu: every key needs 1 or more buffers "
                                  "and the batch fewer than %zu in all",
                                  i, counts[i], SIZE_MAX / 2);
        }
        parts->first[i + 1] = parts->first[i] + counts[i];
    }
    return EGM_OK;
}

void egm__parts_free(egm_parts_t *parts)
{
    egm_free(parts->first);
    parts->first = NULL;
}

uint64_t egm__parts_total(const egm_parts_t *parts, size_t i)
{
    uint64_t total = 0;
    for (size_t p = egm__parts_first(parts, i); p < egm__parts_end(parts, i); p++) {
        if (parts->len[p] > UINT64_MAX - total)
            return UINT64_MAX;
        total += parts->len[p];
    }
    return total;
}

egm_status_t egm__parts_fail_all(egm_status_t *results, size_t n, egm_status_t status)
{
    for (size_t i = 0; results != NULL && i < n; i++)
        results[i] = status;
    return status;
}
