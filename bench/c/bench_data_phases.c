/* bench data: the phases one level (clients x procs) runs, in order, and why
 * one is skipped (its objects do not fit the pool, or its buffers the memory
 * allowed). The parent and its --procs children compute the same list from
 * the same options, so that phase i means the same thing to both. */
#include <stdio.h>
#include <string.h>
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/log.h"
#include "bench_data.h"

static const char *const workload_names[] = {"single", "batch", "mixed", "full"};
static const char *const op_names[] = {"put", "get", "mixed"};
static const char *const proto_names[] = {"shm", "tcp", "nvlink"};

const char *egm__bdata_workload_name(egm_bdata_workload_t w)
{
    return workload_names[w];
}

const char *egm__bdata_op_name(egm_bdata_op_t op)
{
    return op_names[op];
}

const char *egm__bdata_proto_name(egm_bdata_proto_t p)
{
    return proto_names[p];
}

const char *egm__bdata_transport(const egm_bdata_run_t *r)
{
    if (!r->mem.gpu || r->proto == EGM_BDATA_NVLINK)
        return proto_names[r->proto];
    return r->proto == EGM_BDATA_TCP ? "tcp-staging" : "shm-staging";
}

const egm_bdata_ops_t *egm__bdata_ops(const egm_bdata_phase_t *ph)
{
    switch (ph->workload) {
    case EGM_BDATA_SINGLE:
        return ph->op == EGM_BDATA_PUT ? &egm__bdata_single_put : &egm__bdata_single_get;
    case EGM_BDATA_BATCH:
        return ph->op == EGM_BDATA_PUT ? &egm__bdata_batch_put : &egm__bdata_batch_get;
    case EGM_BDATA_MIXED:
        return &egm__bdata_mixed;
    default:
        return &egm__bdata_full;
    }
}

typedef struct {
    const egm_bdata_opts_t *o;
    int total; /* clients in every process */
    egm_bdata_phase_t *v;
    size_t n, cap;
} list_t;

static egm_bdata_phase_t *add(list_t *l, egm_bdata_workload_t w, egm_bdata_op_t op, uint64_t bytes,
                              size_t batch)
{
    egm_bdata_phase_t *v = egm__bench_reserve(l->v, l->n, &l->cap, sizeof(*v), 32, "bench.phases");
    if (v == NULL)
        return NULL;
    l->v = v;
    egm_bdata_phase_t *ph = &l->v[l->n];
    memset(ph, 0, sizeof(*ph));
    ph->workload = w;
    ph->op = op;
    ph->bytes = bytes;
    ph->batch = batch;
    ph->index = (int)l->n++;
    return ph;
}

/* Host memory a phase holds: each client's source and destination (plus its
 * pinned staging with GPU memory) and the pool (memfd or HOST_NUMA). */
static void check_memory(const list_t *l, egm_bdata_phase_t *ph, uint64_t per_client)
{
    const egm_bdata_opts_t *o = l->o;
    uint64_t host = (uint64_t)l->total * (o->gpu ? EGM_BDATA_STAGING : 2 * per_client);
    char a[32], b[32];
    if (ph->skip[0] == '\0' && host + o->pool_size > o->max_memory)
        snprintf(ph->skip, sizeof(ph->skip),
                 "%d clients' buffers (%s) and the pool need more than --max-memory %s", l->total,
                 egm__format_size(host, a, sizeof(a)),
                 egm__format_size(o->max_memory, b, sizeof(b)));
}

static void check_pool(const list_t *l, egm_bdata_phase_t *ph, uint64_t need)
{
    char a[32], b[32];
    double room = EGM_BDATA_POOL_SHARE * (double)l->o->pool_size;
    if (ph->skip[0] == '\0' && (double)need > room)
        snprintf(ph->skip, sizeof(ph->skip), "needs %s of the pool, more than %.0f%% of %s",
                 egm__format_size(need, a, sizeof(a)), EGM_BDATA_POOL_SHARE * 100,
                 egm__format_size(l->o->pool_size, b, sizeof(b)));
}

/* Calls of a single phase back to back: --run, no more than its objects, and
 * its buffer slots within 64 MiB (host) or 256 MiB (GPU) per buffer. */
static size_t single_run(const egm_bdata_opts_t *o, size_t slots, uint64_t bytes)
{
    uint64_t cap = (o->gpu ? 256ull : 64ull) << 20;
    uint64_t run = o->run < slots ? o->run : slots;
    if (run * bytes > cap)
        run = cap / bytes;
    return run > 0 ? (size_t)run : 1;
}

static int add_single(list_t *l)
{
    const egm_bdata_opts_t *o = l->o;
    for (int s = 0; s < o->n_sizes; s++) {
        uint64_t bytes = o->sizes[s];
        double fit = EGM_BDATA_POOL_SHARE * (double)o->pool_size / ((double)l->total * bytes);
        size_t slots =
            o->iters > 0 && o->iters < EGM_BDATA_MAX_SLOTS ? (size_t)o->iters : EGM_BDATA_MAX_SLOTS;
        if (fit < (double)slots)
            slots = (size_t)fit;
        for (int op = EGM_BDATA_PUT; op <= EGM_BDATA_GET; op++) {
            egm_bdata_phase_t *ph = add(l, EGM_BDATA_SINGLE, (egm_bdata_op_t)op, bytes, 1);
            if (ph == NULL)
                return -1;
            ph->slots = slots;
            ph->run = single_run(o, slots, bytes);
            check_pool(l, ph, (uint64_t)l->total * bytes);
            check_memory(l, ph, bytes * ph->run);
        }
    }
    return 0;
}

uint64_t egm__bdata_batch_keys(const egm_bdata_opts_t *o, uint64_t block)
{
    uint64_t fit = o->keys * o->block / block;
    return fit < 1 ? 1 : fit < o->keys ? fit : o->keys;
}

static int add_batch(list_t *l)
{
    const egm_bdata_opts_t *o = l->o;
    for (int b = 0; b < o->n_batch_blocks; b++) {
        uint64_t block = o->batch_blocks[b], keys = egm__bdata_batch_keys(o, block);
        for (int op = EGM_BDATA_PUT; op <= EGM_BDATA_GET; op++) {
            egm_bdata_phase_t *ph = add(l, EGM_BDATA_BATCH, (egm_bdata_op_t)op, block, keys);
            if (ph == NULL)
                return -1;
            check_pool(l, ph, (uint64_t)l->total * keys * block);
            check_memory(l, ph, keys * block);
        }
    }
    return 0;
}

static int add_mixed(list_t *l)
{
    const egm_bdata_opts_t *o = l->o;
    for (int d = 0; d < o->n_dists; d++) {
        egm_bdata_phase_t *ph = add(l, EGM_BDATA_MIXED, EGM_BDATA_MIXED_OP, o->block, 1);
        if (ph == NULL)
            return -1;
        ph->zipf = o->zipf[d];
        ph->read_ratio = o->read_ratio;
        check_pool(l, ph, (o->keys + (uint64_t)l->total * EGM_BDATA_RING) * o->block);
        check_memory(l, ph, o->block);
    }
    return 0;
}

static int add_full(list_t *l)
{
    const egm_bdata_opts_t *o = l->o;
    egm_bdata_phase_t *ph = add(l, EGM_BDATA_FULL, EGM_BDATA_PUT, o->block, 1);
    if (ph == NULL)
        return -1;
    /* A pool of a few objects per client would measure nothing but eviction runs. */
    check_pool(l, ph, (uint64_t)l->total * EGM_BDATA_RING * 4 * o->block);
    check_memory(l, ph, o->block);
    return 0;
}

egm_status_t egm__bdata_phases(const egm_bdata_opts_t *o, int clients, int procs,
                               egm_bdata_phase_t **phases_p, size_t *n_p)
{
    static int (*const adders[EGM_BDATA_N_WORKLOADS])(list_t *) = {add_single, add_batch, add_mixed,
                                                                   add_full};
    list_t l = {.o = o, .total = clients * procs};

    for (int w = 0; w < EGM_BDATA_N_WORKLOADS; w++)
        if ((o->workloads & (1u << w)) && adders[w](&l) != 0) {
            egm_free(l.v);
            return egm__set_error(EGM_ERR_NO_MEMORY, "the phase list");
        }
    *phases_p = l.v;
    *n_p = l.n;
    return EGM_OK;
}
