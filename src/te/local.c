/* local transport: this process's own segments (a client that contributes
 * capacity reading or writing its own memory). Host memory is copied by the
 * CPU, own VMM memory by one GPU copy; the rest goes through the staging ring. */
#include <inttypes.h>
#include <string.h>

#include "common/log.h"
#include "te/nvlink.h"
#include "te/transport.h"

static const char *local_obstacle(const egm_te_env_t *env, void *state,
                                  const egm_segment_desc_t *segment, int device, char *why,
                                  size_t why_cap)
{
    (void)state, (void)device, (void)why, (void)why_cap;
    if (!egm__id_equal(segment->owner, env->client_id))
        return "not this process's segment";
    egm_exposed_t *seg = egm__exposed_get(env->exposed, segment->id);
    if (seg == NULL)
        return "not exposed by this process";
    egm__exposed_put(env->exposed, seg);
    return NULL;
}

/* Host memory the CPU copies: ctx is its first byte. */
static egm_status_t hop_memory(void *ctx, uint64_t off, void *slot, size_t n, egm_staging_dir_t dir)
{
    uint8_t *mem = (uint8_t *)ctx + off;
    if (dir == EGM_STAGING_TO_GPU)
        memcpy(slot, mem, n);
    else
        memcpy(mem, slot, n);
    return EGM_OK;
}

static egm_status_t local_transfer(const egm_te_env_t *env, void *state, const egm_te_op_t *op,
                                   int device)
{
    (void)state;
    char text[EGM_ID_STRLEN];
    egm_exposed_t *seg = egm__exposed_get(env->exposed, op->segment->id);
    if (seg == NULL)
        return egm__set_error(EGM_ERR_SEGMENT_NOT_FOUND, "transfer: segment %s was withdrawn",
                              egm__id_format(op->segment->id, text));
    egm_status_t st = EGM_OK;
    if (op->offset > seg->size || op->length > seg->size - op->offset) {
        st = egm__set_error(
            EGM_ERR_INVALID_ARG,
            "transfer: [%" PRIu64 ", +%zu) beyond own segment %s of %" PRIu64 " bytes", op->offset,
            op->length, egm__id_format(op->segment->id, text), seg->size);
        goto out;
    }
    uint8_t *mem = (uint8_t *)seg->base + op->offset;
    int vmm = seg->kind == EGM_HANDLE_POSIX_FD || seg->kind == EGM_HANDLE_FABRIC;
    if (device < 0 && seg->host_accessible) {
        if (op->dir == EGM_TE_READ)
            memcpy(op->local, mem, op->length);
        else
            memcpy(mem, op->local, op->length);
    } else if (device >= 0 && vmm) {
        /* Our own VMM mapping is open to every local GPU: one GPU copy. */
        uint64_t local = (uint64_t)(uintptr_t)op->local, remote = (uint64_t)(uintptr_t)mem;
        st = op->dir == EGM_TE_READ
                 ? egm__nvlink_copy(env->nvlink, device, local, remote, op->length)
                 : egm__nvlink_copy(env->nvlink, device, remote, local, op->length);
    } else if (device >= 0) {
        /* GPU buffer, memfd pool: pageable memory, staged. */
        st = egm__staging_copy(env->nvlink, device, (uint64_t)(uintptr_t)op->local, op->length,
                               op->dir == EGM_TE_READ ? EGM_STAGING_TO_GPU : EGM_STAGING_FROM_GPU,
                               hop_memory, mem);
    } else if (env->nvlink != NULL && seg->device >= 0) {
        /* Host buffer, own GPU memory: staged on the segment's GPU. */
        st = egm__staging_copy(env->nvlink, seg->device, (uint64_t)(uintptr_t)mem, op->length,
                               op->dir == EGM_TE_WRITE ? EGM_STAGING_TO_GPU : EGM_STAGING_FROM_GPU,
                               hop_memory, op->local);
    } else {
        st = egm__set_error(EGM_ERR_NOT_SUPPORTED,
                            "transfer: own segment %s is not host-accessible and there is no GPU",
                            egm__id_format(op->segment->id, text));
    }
out:
    egm__exposed_put(env->exposed, seg);
    return st;
}

const egm_transport_ops_t egm__transport_local = {
    .name = "local",
    .protocol = EGM_PROTOCOL_AUTO,
    .own_memory = 1,
    .obstacle = local_obstacle,
    .transfer = local_transfer,
};
