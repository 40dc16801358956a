/* Put. With client-side allocation (slab_bytes > 0, slabs.h): the keys are
 * placed in this client's slabs (a SlabGrant only when they run out) -> copy
 * into every replica -> one Commit. Otherwise: PutStart (the master places
 * replicas) -> copy -> PutEnd, or PutRevoke for keys whose copy failed. One
 * RPC per phase per batch (per chunk of a pipelined one). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "client/client_int.h"
#include "client/parts.h"
#include "client/pipeline.h"
#include "client/slabs.h"
#include "common/alloc.h"
#include "common/log.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

typedef struct {
    size_t n;      /* keys sent to the master */
    size_t *index; /* position of each in the caller's arrays */
    const char **keys;
    uint64_t *sizes;
    int ahead; /* placed ahead of the copies of earlier chunks (pipelined) */
} put_plan_t;

egm_status_t egm__client_put_start(egm_client_t *client, size_t n, const char *const *keys,
                                   const uint64_t *sizes, const egm_replicate_config_t *rc,
                                   egm_keys_reply_t **reply_p)
{
    Egm__PutStartRequest req = EGM__PUT_START_REQUEST__INIT;
    Egm__ReplicateConfig cfg = EGM__REPLICATE_CONFIG__INIT;
    Egm__Id client_pb = EGM__ID__INIT;

    egm__id_to_pb(client->id, &client_pb);
    cfg.replica_num = (rc != NULL && rc->replica_num > 0) ? rc->replica_num : client->replica_num;
    if (rc != NULL) {
        cfg.with_soft_pin = rc->with_soft_pin != 0;
        cfg.with_hard_pin = rc->with_hard_pin != 0;
        cfg.n_preferred_segments = rc->preferred_segments_count;
        cfg.preferred_segments = (char **)rc->preferred_segments;
    }
    req.client = &client_pb;
    req.n_keys = n;
    req.keys = (char **)keys;
    req.n_sizes = n;
    req.sizes = (uint64_t *)sizes;
    req.config = &cfg;
    egm_status_t status = egm__client_keys_rpc(client, EGM_RPC_PUT_START, &req.base, n, reply_p);
    if (status == EGM_OK)
        for (size_t i = 0; i < (*reply_p)->n_results; i++)
            if ((*reply_p)->results[i].status == EGM_OK &&
                (*reply_p)->results[i].n_replicas < cfg.replica_num) {
                /* The master never doubles replicas up on one provider.
                 * Said once per process at info, then at debug. */
                static atomic_int said;
                egm_log_level_t lvl = atomic_exchange(&said, 1) == 0 ? EGM_LOG_INFO : EGM_LOG_DEBUG;
                egm_log_ratelimited(lvl, 1,
                                    "put: %u of %u replicas placed (fewer providers with room "
                                    "than replicas asked; egmstore stat KEY lists them)",
                                    (*reply_p)->results[i].n_replicas, cfg.replica_num);
                break;
            }
    return status;
}

static egm_status_t put_start(egm_client_t *client, const put_plan_t *plan,
                              const egm_replicate_config_t *rc, egm_keys_reply_t **reply_p)
{
    return egm__client_put_start(client, plan->n, plan->keys, plan->sizes, rc, reply_p);
}

egm_status_t egm__client_placed_segments(const egm_keys_reply_t *reply, const egm_key_result_t *res,
                                         const egm_segment_desc_t *descs, uint64_t size,
                                         const egm_segment_desc_t **segs)
{
    const egm_replica_desc_t *reps = egm__keys_reply_replicas(reply, res);

    if (res->n_replicas == 0)
        return egm__set_error(EGM_ERR_PROTOCOL, "master placed no replica");
    for (uint32_t r = 0; r < res->n_replicas; r++) {
        segs[r] = egm__segment_desc_find(descs, reply->n_segments, reps[r].segment);
        if (segs[r] == NULL || reps[r].length != size)
            return egm__set_error(EGM_ERR_PROTOCOL, "master sent an inconsistent replica");
    }
    return EGM_OK;
}

/* The copies of one key into each of its n_rep replicas (segs[r], at
 * at[r]), each part at its offset in the object. */
static void add_key_ops(egm_te_op_t *ops, size_t *n_ops, size_t *op_key, size_t j,
                        const egm_segment_desc_t *const *segs, const uint64_t *at, uint32_t n_rep,
                        const egm_parts_t *parts, size_t index)
{
    for (uint32_t r = 0; r < n_rep; r++) {
        uint64_t off = at[r];
        for (size_t p = egm__parts_first(parts, index); p < egm__parts_end(parts, index); p++) {
            if (parts->len[p] == 0)
                continue;
            ops[*n_ops] = (egm_te_op_t){.segment = segs[r],
                                        .offset = off,
                                        .local = parts->addr[p],
                                        .length = parts->len[p],
                                        .dir = EGM_TE_WRITE};
            op_key[(*n_ops)++] = j;
            off += parts->len[p];
        }
    }
}

/* Room for the copies of every key still OK in key_status, each to `rep(j)`
 * replicas (max_rep at most). */
static egm_status_t alloc_ops(const put_plan_t *plan, const egm_parts_t *parts,
                              const egm_status_t *key_status, uint32_t max_rep, egm_te_op_t **ops_p,
                              size_t **op_key_p)
{
    size_t cap = 0;
    *ops_p = NULL;
    *op_key_p = NULL;
    for (size_t j = 0; j < plan->n; j++)
        if (key_status[j] == EGM_OK)
            cap += max_rep * (egm__parts_end(parts, plan->index[j]) -
                              egm__parts_first(parts, plan->index[j]));
    if (cap == 0)
        return EGM_OK;
    *ops_p = egm_calloc(cap, sizeof(**ops_p), "client.put_ops");
    *op_key_p = egm_calloc(cap, sizeof(**op_key_p), "client.put_ops");
    if (*ops_p == NULL || *op_key_p == NULL) {
        egm_free(*ops_p);
        egm_free(*op_key_p);
        *ops_p = NULL;
        *op_key_p = NULL;
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory planning copies");
    }
    return EGM_OK;
}

/* Runs the copies; a key whose copy failed takes the copy's status. */
static void run_ops(egm_client_t *client, egm_te_op_t *ops, size_t n_ops, const size_t *op_key,
                    egm_status_t *key_status)
{
    if (n_ops == 0)
        return;
    uint64_t t0 = egm__now_ns();
    egm__te_transfer(client->te, ops, n_ops);
    egm__phase_add(&client->phases, EGM_OP_PUT, EGM_PHASE_TRANSFER, t0);
    for (size_t k = 0; k < n_ops; k++)
        if (ops[k].status != EGM_OK && key_status[op_key[k]] == EGM_OK)
            key_status[op_key[k]] = ops[k].status;
}

/* ---- placed by the master: PutStart -> copies -> PutEnd / PutRevoke ------- */

static egm_status_t master_place(egm_client_t *client, const put_plan_t *plan,
                                 const egm_replicate_config_t *rc, egm_status_t *key_status,
                                 void **placed_p)
{
    egm_keys_reply_t *reply = NULL;
    egm_status_t status = put_start(client, plan, rc, &reply);
    *placed_p = reply;
    for (size_t j = 0; status == EGM_OK && j < plan->n; j++) {
        key_status[j] = reply->results[j].status;
        if (key_status[j] != EGM_OK)
            egm__set_error(key_status[j], "\"%s\": %s", plan->keys[j],
                           egm_status_string(key_status[j]));
    }
    return status;
}

/* Copies every placed key into its replicas. */
static egm_status_t master_copy(egm_client_t *client, const put_plan_t *plan, void *placed,
                                const egm_parts_t *parts, egm_status_t *key_status)
{
    const egm_keys_reply_t *reply = placed;
    egm_segment_desc_t *descs = NULL;
    egm_te_op_t *ops = NULL;
    size_t *op_key = NULL, n_ops = 0;
    uint32_t max_rep = 0;
    egm_status_t status;

    for (size_t j = 0; j < plan->n; j++)
        if (key_status[j] == EGM_OK && reply->results[j].n_replicas > max_rep)
            max_rep = reply->results[j].n_replicas;
    if ((status = egm__client_reply_segments(reply, &descs)) != EGM_OK)
        return status;
    if ((status = alloc_ops(plan, parts, key_status, max_rep, &ops, &op_key)) != EGM_OK)
        goto out;
    for (size_t j = 0; j < plan->n; j++) {
        const egm_key_result_t *res = &reply->results[j];
        const egm_segment_desc_t *segs[EGM_KEYS_REPLY_MAX_REPLICAS];
        uint64_t at[EGM_KEYS_REPLY_MAX_REPLICAS];
        if (key_status[j] != EGM_OK)
            continue;
        key_status[j] = egm__client_placed_segments(reply, res, descs, plan->sizes[j], segs);
        if (key_status[j] != EGM_OK)
            continue;
        for (uint32_t r = 0; r < res->n_replicas; r++)
            at[r] = egm__keys_reply_replicas(reply, res)[r].offset;
        add_key_ops(ops, &n_ops, op_key, j, segs, at, res->n_replicas, parts, plan->index[j]);
    }
    run_ops(client, ops, n_ops, op_key, key_status);
out:
    egm_free(ops);
    egm_free(op_key);
    egm_free(descs);
    return status;
}

/* PutEnd for the keys whose copies all succeeded, PutRevoke for the others that
 * the master had placed; frees the PutStart reply. */
static void master_finish(egm_client_t *client, const put_plan_t *plan, void *placed,
                          const egm_replicate_config_t *rc, egm_status_t *key_status)
{
    egm_keys_reply_t *start = placed;
    const char **ok = egm_calloc(plan->n + 1, sizeof(*ok), "client.put_finish");
    const char **bad = egm_calloc(plan->n + 1, sizeof(*bad), "client.put_finish");
    size_t *ok_idx = egm_calloc(plan->n + 1, sizeof(*ok_idx), "client.put_finish");
    size_t n_ok = 0, n_bad = 0;
    egm_keys_reply_t *reply = NULL;

    (void)rc;
    if (ok == NULL || bad == NULL || ok_idx == NULL) {
        for (size_t j = 0; j < plan->n; j++)
            if (key_status[j] == EGM_OK)
                key_status[j] = EGM_ERR_NO_MEMORY;
        goto out;
    }
    for (size_t j = 0; j < plan->n; j++) {
        if (key_status[j] == EGM_OK) {
            ok_idx[n_ok] = j;
            ok[n_ok++] = plan->keys[j];
        } else if (start != NULL && start->results[j].status == EGM_OK) {
            bad[n_bad++] = plan->keys[j];
        }
    }
    if (n_bad > 0) {
        egm_status_t status = egm__client_keys_call(client, EGM_RPC_PUT_REVOKE, n_bad, bad,
                                                    EGM_KEYS_CALL_PLAIN, &reply);
        if (status != EGM_OK)
            egm_warn("PutRevoke of %zu keys failed: %s; the master discards them later", n_bad,
                     egm_last_error());
        egm__keys_reply_free(reply);
        reply = NULL;
    }
    if (n_ok > 0) {
        egm_status_t status =
            egm__client_keys_call(client, EGM_RPC_PUT_END, n_ok, ok, EGM_KEYS_CALL_PLAIN, &reply);
        for (size_t k = 0; k < n_ok; k++)
            key_status[ok_idx[k]] = status == EGM_OK ? reply->results[k].status : status;
        egm__keys_reply_free(reply);
    }
out:
    egm_free(ok);
    egm_free(bad);
    egm_free(ok_idx);
    egm__keys_reply_free(start);
}

/* ---- placed by the client in its slabs: copies -> Commit (slabs.h) -------- */

static egm_status_t slab_place(egm_client_t *client, const put_plan_t *plan,
                               const egm_replicate_config_t *rc, egm_status_t *key_status,
                               void **placed_p)
{
    egm_wslab_ref_t *refs = egm_calloc(plan->n, sizeof(*refs), "client.put_refs");
    *placed_p = refs;
    if (refs == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory placing a put");
    uint64_t t0 = egm__now_ns(), total = 0;
    for (size_t j = 0; j < plan->n; j++)
        total = total + plan->sizes[j] < total ? UINT64_MAX : total + plan->sizes[j];
    /* Copies that follow at once and end soon: a grant may be answered
     * before the master's standbys hold it. */
    int copy_now = !plan->ahead && total <= EGM_WSLAB_EARLY_CALL_MAX;
    egm__wslabs_reserve(client, rc, plan->n, plan->sizes, copy_now, refs, key_status);
    /* A grant answered so late that its slab's place_within_ms nearly ran
     * out (a loaded host), or one on a provider not reached over shared
     * memory: those keys are placed again in a slab whose grant the master
     * answers once its standbys hold it. */
    if (copy_now && egm__wslabs_unplace_late(client, plan->n, refs, key_status) > 0)
        for (size_t j = 0; j < plan->n; j++)
            if (key_status[j] == EGM_INPROGRESS)
                egm__wslabs_reserve(client, rc, 1, &plan->sizes[j], 0, &refs[j], &key_status[j]);
    egm__phase_add(&client->phases, EGM_OP_PUT, EGM_PHASE_PLACE, t0);
    return EGM_OK;
}

static egm_status_t slab_copy(egm_client_t *client, const put_plan_t *plan, void *placed,
                              const egm_parts_t *parts, egm_status_t *key_status)
{
    const egm_wslab_ref_t *refs = placed;
    egm_te_op_t *ops = NULL;
    size_t *op_key = NULL, n_ops = 0;
    egm_status_t status = alloc_ops(plan, parts, key_status, EGM_WSLAB_EXTENTS_MAX, &ops, &op_key);

    if (status != EGM_OK)
        return status;
    egm__wslabs_check_copy(client->slabs, plan->n, refs, key_status);
    for (size_t j = 0; j < plan->n; j++) {
        const egm_segment_desc_t *segs[EGM_WSLAB_EXTENTS_MAX];
        uint64_t at[EGM_WSLAB_EXTENTS_MAX];
        if (key_status[j] != EGM_OK || refs[j].slab == NULL)
            continue;
        uint32_t n_rep = egm__wslab_targets(&refs[j], segs, at);
        add_key_ops(ops, &n_ops, op_key, j, segs, at, n_rep, parts, plan->index[j]);
    }
    run_ops(client, ops, n_ops, op_key, key_status);
    /* A copy that failed may have met a provider that is gone: its slab
     * takes no more objects (the next put asks for another). */
    for (size_t k = 0; k < n_ops; k++)
        if (ops[k].status != EGM_OK)
            egm__wslabs_retire_ref(client->slabs, &refs[op_key[k]]);
    egm_free(ops);
    egm_free(op_key);
    return EGM_OK;
}

/* A per-key list of a request: sent whole (0 for the keys without a value)
 * when some key has a value, else not at all: its count. */
static size_t all_or_none(const uint64_t *v, size_t n)
{
    for (size_t i = 0; v != NULL && i < n; i++)
        if (v[i] != 0)
            return n;
    return 0;
}

/* One Commit (n keys, maybe none) carrying the slabs to return; its reply. */
static egm_status_t commit_rpc(egm_client_t *client, size_t n, const char **keys, uint64_t *sizes,
                               uint64_t *slab_ids, uint64_t *offsets, uint64_t *log_seqs,
                               uint64_t *torn_seqs, const egm_replicate_config_t *rc,
                               egm_keys_reply_t **reply_p)
{
    Egm__CommitRequest req = EGM__COMMIT_REQUEST__INIT;
    Egm__ReplicateConfig cfg = EGM__REPLICATE_CONFIG__INIT;
    Egm__Id client_pb = EGM__ID__INIT;
    uint64_t *returns = NULL;
    size_t n_returns = egm__wslabs_take_returns(client->slabs, &returns);

    egm__id_to_pb(client->id, &client_pb);
    if (rc != NULL) {
        cfg.with_soft_pin = rc->with_soft_pin != 0;
        cfg.with_hard_pin = rc->with_hard_pin != 0;
    }
    req.client = &client_pb;
    req.n_keys = req.n_sizes = req.n_slab_ids = req.n_offsets = n;
    req.keys = (char **)keys;
    req.sizes = sizes;
    req.slab_ids = slab_ids;
    req.offsets = offsets;
    req.n_log_seqs = all_or_none(log_seqs, n);
    req.log_seqs = log_seqs;
    req.n_torn_log_seqs = all_or_none(torn_seqs, n);
    req.torn_log_seqs = torn_seqs;
    req.config = &cfg;
    req.n_returned = n_returns;
    req.returned = returns;
    egm_status_t status = egm__client_keys_rpc(client, EGM_RPC_COMMIT, &req.base, n, reply_p);
    if (status != EGM_OK)
        egm__wslabs_unreturned(client->slabs, returns, n_returns);
    else
        egm_free(returns);
    return status;
}

void egm__client_return_slabs(egm_client_t *client)
{
    egm_keys_reply_t *reply = NULL;
    if (commit_rpc(client, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &reply) != EGM_OK)
        egm_debug("returning slabs: %s (the master frees them at their lease's end)",
                  egm_last_error());
    egm__keys_reply_free(reply);
}

/* Commits the keys whose copies all succeeded (one RPC); every reservation
 * ends; frees the refs. A key not committed leaves a hole in its slab that the
 * master frees with the slab. */
static void slab_finish(egm_client_t *client, const put_plan_t *plan, void *placed,
                        const egm_replicate_config_t *rc, egm_status_t *key_status)
{
    egm_wslab_ref_t *refs = placed;
    size_t n = plan->n, n_ok = 0;
    const char **keys = egm_calloc(n + 1, sizeof(*keys), "client.commit");
    uint64_t *num = egm_calloc(7 * (n + 1), sizeof(*num), "client.commit");
    size_t *idx = egm_calloc(n + 1, sizeof(*idx), "client.commit");
    egm_status_t *commit = egm_calloc(n + 1, sizeof(*commit), "client.commit");
    egm_keys_reply_t *reply = NULL;
    uint64_t sent_ms = egm__now_ms();

    if (refs == NULL)
        goto out;
    if (keys == NULL || num == NULL || idx == NULL || commit == NULL) {
        for (size_t j = 0; j < n; j++) {
            if (key_status[j] == EGM_OK)
                key_status[j] = EGM_ERR_NO_MEMORY;
            if (commit != NULL)
                commit[j] = EGM_INPROGRESS;
        }
        goto release;
    }
    uint64_t *sizes = num, *slab_ids = num + n + 1, *offsets = num + 2 * (n + 1);
    uint64_t *log_seqs = num + 3 * (n + 1), *key_seqs = num + 4 * (n + 1);
    uint64_t *torn_seqs = num + 5 * (n + 1), *key_torn = num + 6 * (n + 1);
    /* Each key's entry in its slab's log before the Commit that names it. */
    uint64_t t_log = egm__now_ns();
    egm__wslabs_log(client, n, refs, plan->keys, plan->sizes, rc, key_status, key_seqs, key_torn);
    egm__phase_add(&client->phases, EGM_OP_PUT, EGM_PHASE_LOG, t_log);
    for (size_t j = 0; j < n; j++) {
        commit[j] = EGM_INPROGRESS;
        if (key_status[j] != EGM_OK || refs[j].slab == NULL)
            continue;
        idx[n_ok] = j;
        keys[n_ok] = plan->keys[j];
        sizes[n_ok] = plan->sizes[j];
        slab_ids[n_ok] = egm__wslab_id(refs[j].slab);
        log_seqs[n_ok] = key_seqs[j];
        torn_seqs[n_ok] = key_torn[j];
        offsets[n_ok++] = refs[j].offset;
    }
    if (n_ok > 0) {
        uint64_t t0 = egm__now_ns();
        egm_status_t status = commit_rpc(client, n_ok, keys, sizes, slab_ids, offsets, log_seqs,
                                         torn_seqs, rc, &reply);
        egm__phase_add(&client->phases, EGM_OP_PUT, EGM_PHASE_RPC, t0);
        /* No answer: the master may be gone, or a new one: no slab is used
         * again (a new master would place other objects in their space). A
         * refusal leaves them. */
        if (egm__wslabs_unanswered(status))
            egm__wslabs_clear(client->slabs);
        if (status == EGM_OK) /* the next call places its objects in a whole slab */
            egm__wslabs_retire_ids(client->slabs, reply->degraded_slabs, reply->n_degraded_slabs);
        for (size_t k = 0; k < n_ok; k++) {
            egm_status_t s = status == EGM_OK ? reply->results[k].status : status;
            key_status[idx[k]] = s;
            commit[idx[k]] = status == EGM_OK ? s : EGM_INPROGRESS;
            if (s != EGM_OK)
                egm__set_error(s, "\"%s\": %s", keys[k], egm_status_string(s));
        }
        /* where each committed object lies, for its Remove */
        egm__wslabs_remember(client->slabs, n, refs, plan->keys, commit, key_seqs);
    }
release:
    if (commit != NULL) {
        egm__wslabs_release(client->slabs, n, refs, commit, sent_ms);
    } else {
        for (size_t j = 0; j < n; j++) /* released as not committed, one at a time */
            egm__wslabs_release(client->slabs, 1, &refs[j], &(egm_status_t){EGM_INPROGRESS},
                                sent_ms);
    }
out:
    egm__keys_reply_free(reply);
    egm_free(keys);
    egm_free(num);
    egm_free(idx);
    egm_free(commit);
    egm_free(refs);
}

/* ---- one batch, whole or pipelined -------------------------------------- */

/* Who places a put's keys: the master (PutStart) or this client (slabs). */
typedef struct {
    /* Places the keys of plan (key_status[j]: each key's refusal); what copy
     * and finish take. */
    egm_status_t (*place)(egm_client_t *client, const put_plan_t *plan,
                          const egm_replicate_config_t *rc, egm_status_t *key_status,
                          void **placed_p);
    egm_status_t (*copy)(egm_client_t *client, const put_plan_t *plan, void *placed,
                         const egm_parts_t *parts, egm_status_t *key_status);
    /* Publishes the keys still OK, gives back the others; frees placed. */
    void (*finish)(egm_client_t *client, const put_plan_t *plan, void *placed,
                   const egm_replicate_config_t *rc, egm_status_t *key_status);
} put_way_t;

static const put_way_t master_way = {master_place, master_copy, master_finish};
static const put_way_t slab_way = {slab_place, slab_copy, slab_finish};

/* Large batches run in chunks: a helper thread places each chunk ahead of the
 * copies, another publishes it behind them (pipeline.h), so the round trips
 * and the master's work overlap the copies. */
typedef struct {
    egm_client_t *client;
    const put_way_t *way;
    const put_plan_t *plan;
    const egm_chunk_plan_t *chunks;
    const egm_replicate_config_t *rc;
    egm_status_t *key_status;
} put_pipeline_t;

static put_plan_t chunk_plan(const put_pipeline_t *pp, size_t k)
{
    size_t first = egm__chunk_first(pp->chunks, k);
    return (put_plan_t){.n = egm__chunk_len(pp->chunks, k),
                        .index = pp->plan->index + first,
                        .keys = pp->plan->keys + first,
                        .sizes = pp->plan->sizes + first,
                        .ahead = 1};
}

static egm_status_t put_ahead(void *arg, size_t k, void **placed_p)
{
    put_pipeline_t *pp = arg;
    put_plan_t sub = chunk_plan(pp, k);
    return pp->way->place(pp->client, &sub, pp->rc,
                          pp->key_status + egm__chunk_first(pp->chunks, k), placed_p);
}

static void put_behind(void *arg, size_t k, void *placed)
{
    put_pipeline_t *pp = arg;
    put_plan_t sub = chunk_plan(pp, k);
    pp->way->finish(pp->client, &sub, placed, pp->rc,
                    pp->key_status + egm__chunk_first(pp->chunks, k));
}

/* What every copy worker of one pipelined put shares (pipeline.h). */
typedef struct {
    put_pipeline_t *pp;
    egm_pipeline_t *p;
    const egm_parts_t *parts;
} put_copy_t;

static egm_status_t put_copy_chunk(void *arg, size_t k)
{
    put_copy_t *c = arg;
    put_pipeline_t *pp = c->pp;
    put_plan_t sub = chunk_plan(pp, k);
    egm_status_t *chunk_status = pp->key_status + egm__chunk_first(pp->chunks, k);
    void *placed;
    egm_status_t st = egm__pipeline_wait(c->p, k, &placed, NULL);
    if (st == EGM_OK)
        st = pp->way->copy(pp->client, &sub, placed, c->parts, chunk_status);
    if (st == EGM_OK) {
        egm__pipeline_release(c->p, k, placed, 1); /* published behind */
        return EGM_OK;
    }
    char why[256];
    snprintf(why, sizeof(why), "%s", egm_last_error());
    /* What was placed (if the placing answered) is given back now. */
    for (size_t j = 0; j < sub.n; j++)
        chunk_status[j] = EGM_ERR_TRANSFER;
    if (placed != NULL)
        pp->way->finish(pp->client, &sub, placed, pp->rc, chunk_status);
    for (size_t j = 0; j < sub.n; j++)
        chunk_status[j] = st;
    egm__pipeline_release(c->p, k, NULL, 0);
    return egm__set_error(st, "%s", why);
}

/* Fills key_status for every key of plan; returns the failure of the lowest
 * chunk that failed as a whole. */
static egm_status_t put_pipelined(egm_client_t *client, const put_way_t *way,
                                  const put_plan_t *plan, const egm_chunk_plan_t *chunks,
                                  const egm_replicate_config_t *rc, const egm_parts_t *parts,
                                  egm_status_t *key_status)
{
    put_pipeline_t pp = {.client = client,
                         .way = way,
                         .plan = plan,
                         .chunks = chunks,
                         .rc = rc,
                         .key_status = key_status};
    size_t n_chunks = chunks->n_chunks;
    egm_pipeline_t *p;
    egm_status_t status =
        egm__pipeline_start(client->workers, "put", n_chunks, put_ahead, put_behind, &pp, &p);

    if (status != EGM_OK)
        return status;
    put_copy_t c = {.pp = &pp, .p = p, .parts = parts};
    status = egm__pipeline_copy(client->workers, n_chunks, put_copy_chunk, &c);
    egm__pipeline_finish(p);
    return status;
}

/* One batch in one go: place, copy, publish. */
static egm_status_t put_whole(egm_client_t *client, const put_way_t *way, const put_plan_t *plan,
                              const egm_replicate_config_t *rc, const egm_parts_t *parts,
                              egm_status_t *key_status)
{
    void *placed = NULL;
    egm_status_t status = way->place(client, plan, rc, key_status, &placed);
    if (status == EGM_OK)
        status = way->copy(client, plan, placed, parts, key_status);
    if (status != EGM_OK) {
        for (size_t j = 0; j < plan->n; j++)
            key_status[j] = EGM_ERR_TRANSFER;
    }
    if (placed != NULL || status == EGM_OK)
        way->finish(client, plan, placed, rc, key_status);
    if (status != EGM_OK)
        for (size_t j = 0; j < plan->n; j++)
            key_status[j] = status;
    return status;
}

/* How a put reads its buffers. */
typedef enum {
    PUT_COPY,      /* any memory: copied (egm_put) */
    PUT_ZERO_COPY, /* registered memory, read in place: acquired for the put's time */
} put_mode_t;

/* Validates key i of a batch and its parts (acquiring them for PUT_ZERO_COPY);
 * its object size out. */
static egm_status_t check_key(egm_client_t *client, const char *key, const egm_parts_t *parts,
                              size_t i, put_mode_t mode, int *acquired, uint64_t *size_p)
{
    egm_status_t status = egm__client_validate_key(key);
    size_t first = egm__parts_first(parts, i), end = egm__parts_end(parts, i);

    for (size_t p = first; p < end && status == EGM_OK; p++)
        if (parts->addr[p] == NULL && parts->len[p] > 0)
            status =
                egm__set_error(EGM_ERR_INVALID_ARG, "buffer %zu of \"%s\" is NULL", p - first, key);
    *size_p = egm__parts_total(parts, i);
    if (status == EGM_OK && (*size_p == 0 || *size_p == UINT64_MAX))
        status = egm__set_error(EGM_ERR_INVALID_ARG, "value of \"%s\" is %s", key,
                                *size_p == 0 ? "empty" : "more than 2^64 bytes");
    if (status == EGM_OK && mode == PUT_ZERO_COPY) /* an empty part adds nothing */
        status = egm__registry_acquire_n(client->registry, parts->addr + first, parts->len + first,
                                         end - first, 0, acquired + first);
    return status;
}

static egm_status_t put_batch_untimed(egm_client_t *client, size_t n, const char *const *keys,
                                      const egm_parts_t *parts, const egm_replicate_config_t *rc,
                                      put_mode_t mode, egm_status_t *results)
{
    put_plan_t plan = {0};
    egm_chunk_plan_t chunks = {0};
    egm_status_t *key_status = NULL;
    int *acquired = NULL;
    size_t n_parts = egm__parts_in(parts, n);
    egm_status_t status = EGM_OK;

    if (n == 0)
        return EGM_OK;
    plan.index = egm_calloc(n, sizeof(*plan.index), "client.put_plan");
    plan.keys = egm_calloc(n, sizeof(*plan.keys), "client.put_plan");
    plan.sizes = egm_calloc(n, sizeof(*plan.sizes), "client.put_plan");
    key_status = egm_calloc(n, sizeof(*key_status), "client.put_plan");
    acquired = egm_calloc(n_parts, sizeof(*acquired), "client.put_plan");
    if (!plan.index || !plan.keys || !plan.sizes || !key_status || !acquired) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory planning a put");
        for (size_t i = 0; i < n; i++) /* nothing stored: no key may read as OK */
            results[i] = status;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t size;
        results[i] = check_key(client, keys[i], parts, i, mode, acquired, &size);
        if (results[i] != EGM_OK)
            continue;
        plan.index[plan.n] = i;
        plan.keys[plan.n] = keys[i];
        plan.sizes[plan.n++] = size;
    }
    if (plan.n == 0)
        goto out;
    /* The chunks of a pipelined batch, each key weighed by its parts (a plan
     * that cannot be made runs the batch whole). */
    if (egm__parts_in(parts, n) >= EGM_PIPELINE_MIN_PARTS &&
        egm__chunk_plan(plan.n, parts, plan.index, 1, &chunks) != EGM_OK)
        memset(&chunks, 0, sizeof(chunks));
    const put_way_t *way = egm__wslabs_on(client->slabs) ? &slab_way : &master_way;
    if (chunks.first != NULL && egm__chunk_plan_pipelined(&chunks)) {
        /* A key the pipeline never reached (it failed to start, or stopped
         * before that chunk) keeps EGM_INPROGRESS: it takes the call's error. */
        for (size_t j = 0; j < plan.n; j++)
            key_status[j] = EGM_INPROGRESS;
        status = put_pipelined(client, way, &plan, &chunks, rc, parts, key_status);
        for (size_t j = 0; j < plan.n; j++)
            results[plan.index[j]] = key_status[j] != EGM_INPROGRESS ? key_status[j]
                                     : status != EGM_OK              ? status
                                                                     : EGM_ERR_INTERNAL;
        goto out;
    }
    status = put_whole(client, way, &plan, rc, parts, key_status);
    for (size_t j = 0; j < plan.n; j++)
        results[plan.index[j]] = key_status[j];
out:
    if (acquired != NULL)
        egm__registry_release_n(client->registry, parts->addr, acquired, n_parts);
    egm__chunk_plan_free(&chunks);
    egm_free(plan.index);
    egm_free(plan.keys);
    egm_free(plan.sizes);
    egm_free(key_status);
    egm_free(acquired);
    return status;
}

static egm_status_t put_batch(egm_client_t *client, size_t n, const char *const *keys,
                              const egm_parts_t *parts, const egm_replicate_config_t *rc,
                              put_mode_t mode, egm_status_t *results)
{
    uint64_t t0 = egm__now_ns();
    egm_status_t status = put_batch_untimed(client, n, keys, parts, rc, mode, results);
    egm__phase_add(&client->phases, EGM_OP_PUT, EGM_PHASE_CALL, t0);
    return status;
}

/* One buffer per key. */
static egm_status_t put_buffers(egm_client_t *client, size_t n, const char *const *keys,
                                const void *const *srcs, const size_t *lens,
                                const egm_replicate_config_t *rc, put_mode_t mode,
                                egm_status_t *results)
{
    egm_parts_t parts;

    if (client == NULL ||
        (n > 0 && (keys == NULL || srcs == NULL || lens == NULL || results == NULL)))
        return egm__parts_fail_all(results, n,
                                   egm__set_error(EGM_ERR_INVALID_ARG,
                                                  "client, keys, buffers, sizes and results "
                                                  "must not be NULL"));
    egm__parts_init(&parts, n, NULL, (void *const *)srcs, lens);
    return put_batch(client, n, keys, &parts, rc, mode, results);
}

egm_status_t egm_put(egm_client_t *client, const char *key, const void *data, size_t len,
                     const egm_replicate_config_t *rc)
{
    egm_status_t result;
    egm_status_t status = put_buffers(client, 1, &key, &data, &len, rc, PUT_COPY, &result);
    return status != EGM_OK ? status : result;
}

egm_status_t egm_put_from(egm_client_t *client, const char *key, const void *src, size_t len,
                          const egm_replicate_config_t *rc)
{
    egm_status_t result;
    egm_status_t status = put_buffers(client, 1, &key, &src, &len, rc, PUT_ZERO_COPY, &result);
    return status != EGM_OK ? status : result;
}

egm_status_t egm_batch_put_from(egm_client_t *client, size_t n, const char *const *keys,
                                const void *const *srcs, const size_t *lens,
                                const egm_replicate_config_t *rc, egm_status_t *results)
{
    return put_buffers(client, n, keys, srcs, lens, rc, PUT_ZERO_COPY, results);
}

egm_status_t egm_batch_put_from_parts(egm_client_t *client, size_t n, const char *const *keys,
                                      const size_t *part_counts, const void *const *part_addrs,
                                      const size_t *part_lens, const egm_replicate_config_t *rc,
                                      egm_status_t *results)
{
    egm_parts_t parts;
    egm_status_t status;

    if (client == NULL || (n > 0 && (keys == NULL || part_counts == NULL || part_addrs == NULL ||
                                     part_lens == NULL || results == NULL)))
        return egm__parts_fail_all(results, n,
                                   egm__set_error(EGM_ERR_INVALID_ARG,
                                                  "client, keys, part_counts, part_addrs, "
                                                  "part_lens and results must not be NULL"));
    status = egm__parts_init(&parts, n, part_counts, (void *const *)part_addrs, part_lens);
    if (status != EGM_OK)
        return egm__parts_fail_all(results, n, status);
    status = put_batch(client, n, keys, &parts, rc, PUT_ZERO_COPY, results);
    egm__parts_free(&parts);
    return status;
}
