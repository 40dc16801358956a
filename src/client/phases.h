/* Where the wall time of puts and gets goes: the API calls, their master round
 * trips, their transfers, and a put's placing and logging in slabs, summed
 * over threads (a pipelined batch overlaps them, so the parts can add up to
 * more than the calls). What is left of a call after those is the client's
 * own work and the gaps between them. Reported as egm_client_{put,get}_*_seconds_total
 * (docs/metrics.md); bench/gpu/engine_workload.py prints the breakdown. */
#ifndef EGM_CLIENT_PHASES_H
#define EGM_CLIENT_PHASES_H

#include <stdatomic.h>
#include <stdint.h>
#include "common/clock.h"

typedef enum { EGM_OP_PUT, EGM_OP_GET, EGM_OP_KINDS } egm_op_kind_t;

typedef enum {
    EGM_PHASE_CALL,     /* the API call, entry to return */
    EGM_PHASE_RPC,      /* master calls made for it (PutStart/End/Revoke, Commit, GetReplicaList) */
    EGM_PHASE_TRANSFER, /* egm__te_transfer: routing, mapping lookups and the copies */
    EGM_PHASE_PLACE,    /* puts: placing objects in the client's slabs, SlabGrant calls included */
    EGM_PHASE_LOG,      /* puts: writing their slab-log entries, the slabs' lock included */
    EGM_PHASES
} egm_phase_t;

typedef struct {
    atomic_uint_fast64_t ns[EGM_OP_KINDS][EGM_PHASES];
    atomic_uint_fast64_t calls[EGM_OP_KINDS];
} egm_client_phases_t;

/* Adds the time since `since_ns` (egm__now_ns) to a phase. */
static inline void egm__phase_add(egm_client_phases_t *ph, egm_op_kind_t op, egm_phase_t phase,
                                  uint64_t since_ns)
{
    atomic_fetch_add_explicit(&ph->ns[op][phase], egm__now_ns() - since_ns, memory_order_relaxed);
    if (phase == EGM_PHASE_CALL)
        atomic_fetch_add_explicit(&ph->calls[op], 1, memory_order_relaxed);
}

static inline double egm__phase_seconds(egm_client_phases_t *ph, egm_op_kind_t op,
                                        egm_phase_t phase)
{
    return (double)atomic_load_explicit(&ph->ns[op][phase], memory_order_relaxed) / 1e9;
}

#endif
