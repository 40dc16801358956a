/* Planning of bounced runs (bounce_plan.h). */
#include "cuda/bounce_plan.h"

#include <inttypes.h>
#include <string.h>
#include "common/alloc.h"
#include "common/log.h"

#define ALIGN 16u

void egm__bounce_plan_free(egm_bounce_plan_t *plan)
{
    if (plan == NULL)
        return;
    egm_free(plan->chunks);
    egm_free(plan->runs);
    egm_free(plan->offs);
    memset(plan, 0, sizeof(*plan));
}

/* The first offset >= at that is congruent to far modulo ALIGN. */
static uint64_t congruent(uint64_t at, uint64_t far)
{
    uint64_t want = far & (ALIGN - 1);
    uint64_t off = (at & ~(uint64_t)(ALIGN - 1)) + want;
    return off >= at ? off : off + ALIGN;
}

egm_status_t egm__bounce_plan(const egm_copy_desc_t *copies, size_t n, int far_is_dst,
                              uint64_t half_bytes, egm_bounce_plan_t *plan)
{
    memset(plan, 0, sizeof(*plan));
    for (size_t i = 0; i < n; i++)
        if (copies[i].len > half_bytes || half_bytes - copies[i].len < ALIGN - 1)
            return egm__set_error(EGM_ERR_INVALID_ARG,
                                  "copier: copy %zu of %" PRIu64
                                  " bytes does not fit a bounce half of %" PRIu64 " bytes",
                                  i, copies[i].len, half_bytes);
    /* At most one chunk and one run per copy. */
    size_t cap = n > 0 ? n : 1;
    plan->chunks = egm_calloc(cap, sizeof(*plan->chunks), "cuda.bounce_plan");
    plan->runs = egm_calloc(cap, sizeof(*plan->runs), "cuda.bounce_plan");
    plan->offs = egm_calloc(cap, sizeof(*plan->offs), "cuda.bounce_plan");
    if (plan->chunks == NULL || plan->runs == NULL || plan->offs == NULL) {
        egm__bounce_plan_free(plan);
        return egm__set_error(EGM_ERR_NO_MEMORY, "copier: out of memory planning %zu copies", n);
    }
    egm_bounce_chunk_t *chunk = NULL;
    egm_bounce_run_t *run = NULL; /* the open run of the open chunk */
    for (size_t i = 0; i < n; i++) {
        uint64_t far = far_is_dst ? copies[i].dst : copies[i].src, len = copies[i].len;
        if (len == 0) {
            plan->offs[i] = chunk != NULL ? chunk->used : 0;
            if (chunk != NULL)
                chunk->n_copies++;
            continue;
        }
        /* Continues the open run when adjacent and the half has room. */
        if (run != NULL && run->far + run->len == far && chunk->used + len <= half_bytes) {
            plan->offs[i] = chunk->used;
            run->len += len;
            chunk->used += len;
            chunk->n_copies++;
            continue;
        }
        uint64_t off = chunk != NULL ? congruent(chunk->used, far) : 0;
        if (chunk == NULL || off > half_bytes || half_bytes - off < len) {
            chunk = &plan->chunks[plan->n_chunks++];
            *chunk = (egm_bounce_chunk_t){.first_copy = i, .first_run = plan->n_runs};
            off = congruent(0, far);
        }
        run = &plan->runs[plan->n_runs++];
        *run = (egm_bounce_run_t){.far = far, .off = off, .len = len};
        chunk->n_runs++;
        chunk->n_copies++;
        chunk->used = off + len;
        plan->offs[i] = off;
    }
    return EGM_OK;
}
