/* RPC handlers and the master's command table (at the end). The table's
 * dispatch decodes a request as its type's message; a handler validates every
 * field from the wire, calls the modules and encodes the reply. A payload that
 * does not decode, or a request that is malformed as a whole (too many keys,
 * sizes not matching keys, a bad replica_num), is answered with an error
 * status (the server sends an ErrorReply naming the field); per-key problems
 * go in per-key results. */
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "ha/election.h"
#include "master/commit_seqs.h"
#include "master/journal.h"
#include "master/master_int.h"
#include "master/metrics.h"
#include "master/mirror.h"
#include "master/slabs.h"
#include "rpc/frame.h"
#include "rpc/keys_reply.h"
#include "rpc/proto_util.h"
#include "rpc/server.h"

static egm_status_t pack_reply(const ProtobufCMessage *msg, egm_master_call_t *call)
{
    return egm__pb_pack(msg, &call->reply->buf, &call->reply->len);
}

static size_t key_length(const char *key)
{
    /* One past the limit is enough to reject it. */
    return key != NULL ? strnlen(key, EGM_MASTER_KEY_MAX + 1) : 0;
}

/* ---- KeysReply building ------------------------------------------------ */

/* Per-key results, copied from the index under the key's shard lock: the
 * reply never reads an object, which another thread may change or delete once
 * that lock is released. They are the encoder's input (rpc/keys_reply.h):
 * replicas sit in the call's replica array, each with the segment it names
 * (segs[]); segments stay mounted while the handler runs (unmounting takes
 * the state lock exclusive). */
typedef struct {
    egm_key_result_t *out; /* one per key */
    egm_replica_desc_t *reps;
    const egm_segment_t **segs; /* segs[i]: the segment reps[i] names */
    size_t n_reps, cap_reps;
} outcomes_t;

static egm_status_t outcomes_init(outcomes_t *o, size_t n_keys)
{
    memset(o, 0, sizeof(*o));
    o->out = egm_calloc(n_keys ? n_keys : 1, sizeof(*o->out), "master.outcomes");
    if (o->out == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for %zu keys", n_keys);
    return EGM_OK;
}

static void outcomes_cleanup(outcomes_t *o)
{
    egm_free(o->out);
    egm_free(o->reps);
    egm_free(o->segs);
}

static egm_status_t outcomes_reserve(outcomes_t *o, size_t n)
{
    if (o->n_reps + n <= o->cap_reps)
        return EGM_OK;
    size_t cap = o->cap_reps ? o->cap_reps * 2 : 64;
    while (cap < o->n_reps + n)
        cap *= 2;
    egm_replica_desc_t *reps = egm_realloc(o->reps, cap * sizeof(*reps), "master.outcomes");
    if (reps != NULL)
        o->reps = reps;
    const egm_segment_t **segs = egm_realloc(o->segs, cap * sizeof(*segs), "master.outcomes");
    if (segs != NULL)
        o->segs = segs;
    if (reps == NULL || segs == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for the replicas of a reply");
    o->cap_reps = cap;
    return EGM_OK;
}

/* Key i answered OK with the object in view: its size, the lease granted
 * (0 = none) and, when with_replicas, its replicas go in the reply. */
static egm_status_t outcomes_record(outcomes_t *o, size_t i, const egm_object_view_t *view,
                                    int with_replicas, uint64_t lease_ttl_ms)
{
    egm_key_result_t *k = &o->out[i];
    k->size = view->size;
    k->lease_ttl_ms = lease_ttl_ms;
    k->replica_first = (uint32_t)o->n_reps;
    k->n_replicas = 0;
    if (!with_replicas || view->n_replicas == 0)
        return EGM_OK;
    egm_status_t status = outcomes_reserve(o, view->n_replicas);
    if (status != EGM_OK)
        return status;
    for (uint32_t r = 0; r < view->n_replicas; r++) {
        const egm_replica_view_t *rep = &view->replicas[r];
        o->reps[o->n_reps + r] = (egm_replica_desc_t){
            .segment = rep->segment->desc.id, .offset = rep->offset, .length = rep->length};
        o->segs[o->n_reps + r] = rep->segment;
    }
    o->n_reps += view->n_replicas;
    k->n_replicas = view->n_replicas;
    return EGM_OK;
}

/* The segments one reply names, each once: an open-addressing set local to
 * the call (segments are shared by every RPC thread, so nothing is marked on
 * them). */
typedef struct {
    const egm_segment_t **slots;
    size_t mask;
} segment_set_t;

static egm_status_t segment_set_init(segment_set_t *set, size_t max)
{
    size_t cap = 16;
    while (cap < 2 * max)
        cap *= 2;
    set->mask = cap - 1;
    set->slots = egm_calloc(cap, sizeof(*set->slots), "master.reply");
    return set->slots != NULL ? EGM_OK : EGM_ERR_NO_MEMORY;
}

/* 1 when seg was not in the set (and is now). */
static int segment_set_add(segment_set_t *set, const egm_segment_t *seg)
{
    size_t i = (size_t)(((uintptr_t)seg >> 4) * 0x9e3779b97f4a7c15ull >> 17) & set->mask;
    while (set->slots[i] != NULL) {
        if (set->slots[i] == seg)
            return 0;
        i = (i + 1) & set->mask;
    }
    set->slots[i] = seg;
    return 1;
}

/* Raises *at to until unless it is already later. */
static void raise_to(_Atomic uint64_t *at, uint64_t until)
{
    uint64_t seen = atomic_load(at);
    while (until > seen && !atomic_compare_exchange_weak(at, &seen, until))
        ;
}

/* After a force remove of objects whose latest lease was granted at
 * last_grant_ms (0: none): how long its caller waits before it returns, so
 * that every location a client cached of them has run out
 * (docs/consistency.md). The watermark covers every force remove so far: a
 * second remover answered NOT_FOUND waits for the first one's objects too. */
static uint64_t force_wait_ms(egm_master_state_t *st, uint64_t last_grant_ms, uint64_t now_ms)
{
    if (last_grant_ms != 0)
        raise_to(&st->force_wait_until_ms, last_grant_ms + st->location_cache_ms);
    uint64_t until = atomic_load(&st->force_wait_until_ms);
    return until > now_ms ? until - now_ms : 0;
}

/* What a KeysReply carries besides its keys' results (0 / none: left out). */
typedef struct {
    uint64_t wait_ms;               /* force Remove */
    uint64_t slab_id;               /* SlabGrant */
    const uint64_t *degraded_slabs; /* Commit */
    size_t n_degraded_slabs;
    const char *error;        /* SlabGrant refused: why */
    uint64_t place_within_ms; /* SlabGrant answered before the standbys hold it */
} keys_reply_extra_t;

/* One KeyResult per key; the replicas recorded in the outcomes (GetReplicaList,
 * PutStart) name segments, whose descriptors follow, once each, in the order
 * the replicas first name them. */
static egm_status_t send_keys_reply(egm_master_state_t *st, const outcomes_t *oc, size_t n,
                                    const keys_reply_extra_t *extra, egm_rpc_reply_t *reply)
{
    size_t max_segs = egm__segment_table_count(st->segments);
    const egm_pb_slice_t **descs = NULL;
    segment_set_t seen = {NULL, 0};
    size_t n_segs = 0;
    egm_status_t status;

    if (max_segs > oc->n_reps)
        max_segs = oc->n_reps; /* no more distinct segments than replicas */
    if (max_segs > 0) {
        descs = egm_calloc(max_segs, sizeof(*descs), "master.reply");
        if (descs == NULL || segment_set_init(&seen, max_segs) != EGM_OK) {
            status =
                egm__set_error(EGM_ERR_NO_MEMORY, "out of memory building a reply for %zu keys", n);
            goto out;
        }
    }
    for (size_t r = 0; r < oc->n_reps; r++)
        if (n_segs < max_segs && segment_set_add(&seen, oc->segs[r]))
            descs[n_segs++] = &oc->segs[r]->desc_pb;
    egm_keys_reply_msg_t msg = {.status = EGM_OK,
                                .n_results = n,
                                .results = oc->out,
                                .replicas = oc->reps,
                                .n_segments = n_segs,
                                .packed_segments = descs,
                                .location_cache_ms = st->location_cache_ms,
                                .wait_ms = extra->wait_ms,
                                .slab_id = extra->slab_id,
                                .n_degraded_slabs = extra->n_degraded_slabs,
                                .degraded_slabs = extra->degraded_slabs,
                                .error = extra->error,
                                .place_within_ms = extra->place_within_ms};
    status = egm__keys_reply_encode(&msg, &reply->buf, &reply->len);
out:
    egm_free(descs);
    egm_free(seen.slots);
    return status;
}

/* ---- object calls -------------------------------------------------------- */

static egm_status_t check_key_count(size_t n)
{
    if (n > EGM_MASTER_MAX_KEYS)
        return egm__set_error(EGM_ERR_INVALID_ARG, "keys: %zu, at most %d per request", n,
                              EGM_MASTER_MAX_KEYS);
    return EGM_OK;
}

/* egm__objects_batch's answer for key i, under its shard lock. */
typedef struct {
    outcomes_t *oc;
    int with_replicas;
    uint64_t lease_ttl_ms;
} keys_batch_t;

static egm_status_t keys_done(void *arg, size_t i, egm_status_t s, const egm_object_view_t *view)
{
    keys_batch_t *kb = arg;
    kb->oc->out[i].status = s;
    if (s == EGM_OK && view != NULL) /* GetReplicaList, ExistKey */
        return outcomes_record(kb->oc, i, view, kb->with_replicas, kb->lease_ttl_ms);
    return EGM_OK;
}

/* Runs b over its keys, each answered into kb's outcomes (keys_done): the
 * keys' lengths are measured here. */
static egm_status_t run_batch(egm_master_state_t *st, egm_objects_batch_t *b, keys_batch_t *kb)
{
    size_t *lens = egm_malloc((b->n ? b->n : 1) * sizeof(*lens), "master.keys");
    if (lens == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for %zu keys", b->n);
    for (size_t i = 0; i < b->n; i++)
        lens[i] = key_length(b->keys[i]);
    b->key_lens = lens;
    b->done = keys_done;
    b->arg = kb;
    egm_status_t status = egm__objects_batch(st->objects, b);
    egm_free(lens);
    b->key_lens = NULL;
    return status;
}

/* What PutStart and Commit ask of every request: a key count the master
 * takes, one size per key, a client. */
static egm_status_t check_put_request(size_t n_keys, size_t n_sizes, egm_id_t client)
{
    egm_status_t status = check_key_count(n_keys);
    if (status != EGM_OK)
        return status;
    if (n_sizes != n_keys)
        return egm__set_error(EGM_ERR_INVALID_ARG, "sizes: %zu values for %zu keys", n_sizes,
                              n_keys);
    if (egm__id_is_nil(client))
        return egm__set_error(EGM_ERR_INVALID_ARG, "client: must not be nil");
    return EGM_OK;
}

/* A request's ReplicateConfig (NULL: the defaults) as the index takes it;
 * replica_num 0 is 1. EGM_ERR_INVALID_ARG naming the field. */
static egm_status_t put_config(const Egm__ReplicateConfig *pb, egm_put_config_t *config)
{
    memset(config, 0, sizeof(*config));
    config->replica_num = pb != NULL && pb->replica_num > 0 ? pb->replica_num : 1;
    if (config->replica_num > EGM_MASTER_REPLICA_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "config.replica_num: %u, must be 0..%d",
                              config->replica_num, EGM_MASTER_REPLICA_MAX);
    if (pb == NULL)
        return EGM_OK;
    config->soft_pin = pb->with_soft_pin;
    config->hard_pin = pb->with_hard_pin;
    config->n_preferred = pb->n_preferred_segments;
    config->preferred_segments = (const char *const *)pb->preferred_segments;
    if (config->n_preferred > EGM_MASTER_PREFERRED_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "config.preferred_segments: %zu names, at most %d",
                              config->n_preferred, EGM_MASTER_PREFERRED_MAX);
    return EGM_OK;
}

static egm_status_t handle_put_start(egm_master_state_t *st, egm_master_call_t *call)
{
    const Egm__PutStartRequest *req = (const Egm__PutStartRequest *)call->request;
    egm_id_t client = egm__id_from_pb(req->client);
    outcomes_t oc = {0};
    egm_put_config_t config;
    egm_status_t status = check_put_request(req->n_keys, req->n_sizes, client);

    if (status == EGM_OK)
        status = put_config(req->config, &config);
    if (status != EGM_OK)
        return status;
    char host_id[EGM_HOST_ID_MAX];
    config.writer_host_id = egm__liveness_host_id(st->liveness, client, host_id);
    /* One replica per key is reserved ahead (see handle_keys). */
    if ((status = outcomes_init(&oc, req->n_keys)) == EGM_OK)
        status = outcomes_reserve(&oc, req->n_keys);
    keys_batch_t kb = {.oc = &oc, .with_replicas = 1};
    egm_objects_batch_t b = {.op = EGM_OBJECTS_PUT_START,
                             .client = client,
                             .sizes = req->sizes,
                             .config = &config,
                             .now_ms = st->now_ms(),
                             .n = req->n_keys,
                             .keys = (const char *const *)req->keys};
    if (status == EGM_OK)
        status = run_batch(st, &b, &kb);
    if (status == EGM_OK)
        status = send_keys_reply(st, &oc, req->n_keys, &(keys_reply_extra_t){0}, call->reply);
    outcomes_cleanup(&oc);
    return status;
}

/* A Remove's removal entries (KeysRequest log_*: docs/ha.md "Removes the
 * pool describes"), per key. */
typedef struct {
    const uint64_t *seen; /* the entry to note seen (commit_seqs.h), NULL: none */
    uint64_t *seen_owned;
    uint64_t *slab_ids; /* log_slab for each key */
    egm_id_t *segments; /* where each entry says its object lies */
    uint8_t *journaled; /* the batch journaled it seen */
    uint8_t *placed;    /* the entry describes the object removed */
} removal_entries_t;

static void removal_entries_free(removal_entries_t *rm)
{
    egm_free(rm->seen_owned);
    egm_free(rm->slab_ids);
    egm_free(rm->segments);
    egm_free(rm->journaled);
    egm_free(rm->placed);
}

/* Readies b to journal each key's removal entry seen, and to say whether the
 * object lay where its entry says (none named: nothing to do). */
static egm_status_t removal_entries(removal_entries_t *rm, const Egm__KeysRequest *req,
                                    egm_objects_batch_t *b)
{
    if (req->n_log_seqs == 0 && req->n_torn_log_seqs == 0)
        return EGM_OK;
    if (req->log_slab == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "log_slab: 0 with log_seqs or torn_log_seqs (the slab whose log "
                              "holds the removal entries must be named)");
    if (req->n_log_segments != req->n_keys || req->n_log_offsets != req->n_keys)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "log_segments, log_offsets: %zu and %zu values for %zu keys (one "
                              "each per key with removal entries)",
                              req->n_log_segments, req->n_log_offsets, req->n_keys);
    egm_status_t status =
        egm__commit_seen_seqs(req->n_keys, req->log_seqs, req->n_log_seqs, req->torn_log_seqs,
                              req->n_torn_log_seqs, &rm->seen, &rm->seen_owned);
    if (status != EGM_OK)
        return status;
    size_t n = req->n_keys ? req->n_keys : 1;
    rm->slab_ids = egm_malloc(n * sizeof(*rm->slab_ids), "master.remove_log");
    rm->segments = egm_calloc(n, sizeof(*rm->segments), "master.remove_log");
    rm->journaled = egm_calloc(n, 1, "master.remove_log");
    rm->placed = egm_calloc(n, 1, "master.remove_log");
    if (rm->slab_ids == NULL || rm->segments == NULL || rm->journaled == NULL || rm->placed == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for a Remove of %zu keys",
                              req->n_keys);
    for (size_t i = 0; i < req->n_keys; i++) {
        rm->slab_ids[i] = req->log_slab;
        rm->segments[i] = egm__id_from_pb(req->log_segments[i]);
    }
    b->slab_ids = rm->slab_ids;
    b->log_seqs = rm->seen;
    b->log_journaled = rm->journaled;
    b->removal_segments = rm->segments;
    b->removal_offsets = req->log_offsets;
    b->removal_placed = rm->placed;
    return EGM_OK;
}

/* After the batch: every entry noted seen (a new leader reads the log past
 * it); whether the Remove may be answered before the standbys hold it: every
 * key removed, each with a whole entry that describes its object, in a log
 * the standbys know is kept (*wait_pos_p as egm__objects_slab_seen says),
 * and not forced (a force remove may hold a leased object's space: that
 * waits as before). */
static int removal_described(egm_master_state_t *st, const removal_entries_t *rm,
                             const Egm__KeysRequest *req, const egm_objects_batch_t *b,
                             const outcomes_t *oc, uint64_t *wait_pos_p)
{
    int known = egm__objects_slab_seen(st->objects, b->client, req->n_keys, rm->slab_ids, rm->seen,
                                       rm->journaled, wait_pos_p);
    int described = known && !req->force && req->n_log_seqs == req->n_keys;
    for (size_t i = 0; i < req->n_keys && described; i++)
        described = req->log_seqs[i] != 0 && rm->placed[i] && oc->out[i].status == EGM_OK;
    return described;
}

/* PutEnd, PutRevoke, GetReplicaList, ExistKey, Remove: one KeysRequest, one
 * batch call of the index. */
static egm_status_t handle_keys(egm_master_state_t *st, egm_master_call_t *call)
{
    const Egm__KeysRequest *req = (const Egm__KeysRequest *)call->request;
    outcomes_t oc = {0};
    uint64_t last_grant_ms = 0;
    egm_status_t status;
    uint16_t type = call->type;
    /* ExistKey asked for locations answers them as GetReplicaList does (the
     * client caches them for the Get that usually follows). */
    keys_batch_t kb = {.oc = &oc,
                       .with_replicas = type == EGM_RPC_GET_REPLICA_LIST ||
                                        (type == EGM_RPC_EXIST_KEY && req->locations)};
    egm_objects_batch_t b = {.keys = (const char *const *)req->keys, .n = req->n_keys};
    removal_entries_t rm = {0};

    b.client = egm__id_from_pb(req->client);
    if ((status = check_key_count(req->n_keys)) != EGM_OK)
        goto out;
    if ((type == EGM_RPC_PUT_END || type == EGM_RPC_PUT_REVOKE) && egm__id_is_nil(b.client)) {
        status = egm__set_error(EGM_ERR_INVALID_ARG, "client: must not be nil");
        goto out;
    }
    if ((status = outcomes_init(&oc, req->n_keys)) != EGM_OK)
        goto out;
    /* One replica per key is reserved ahead, so that the answers recorded
     * under a shard lock seldom allocate. */
    if (kb.with_replicas && (status = outcomes_reserve(&oc, req->n_keys)) != EGM_OK)
        goto out;
    b.now_ms = st->now_ms();
    b.force = req->force;
    switch (type) {
    case EGM_RPC_PUT_END:
        b.op = EGM_OBJECTS_PUT_END;
        break;
    case EGM_RPC_PUT_REVOKE:
        b.op = EGM_OBJECTS_PUT_REVOKE;
        break;
    case EGM_RPC_GET_REPLICA_LIST:
        b.op = EGM_OBJECTS_GET_REPLICAS;
        kb.lease_ttl_ms = egm__objects_lease_ttl_ms(st->objects);
        break;
    case EGM_RPC_EXIST_KEY:
        b.op = EGM_OBJECTS_EXIST;
        b.with_replicas = kb.with_replicas;
        kb.lease_ttl_ms = egm__objects_lease_ttl_ms(st->objects);
        break;
    default:
        b.op = EGM_OBJECTS_REMOVE;
        b.last_grant_ms_p = &last_grant_ms;
        break;
    }
    if (b.op == EGM_OBJECTS_REMOVE && (status = removal_entries(&rm, req, &b)) != EGM_OK)
        goto out;
    status = run_batch(st, &b, &kb);
    if (status == EGM_OK && rm.seen != NULL)
        call->described = removal_described(st, &rm, req, &b, &oc, &call->wait_pos);
    uint64_t wait_ms =
        b.op == EGM_OBJECTS_REMOVE && b.force ? force_wait_ms(st, last_grant_ms, st->now_ms()) : 0;
    if (status == EGM_OK)
        status = send_keys_reply(st, &oc, req->n_keys, &(keys_reply_extra_t){.wait_ms = wait_ms},
                                 call->reply);
out:
    removal_entries_free(&rm);
    outcomes_cleanup(&oc);
    return status;
}

/* ---- client-side allocation ------------------------------------------------ */

/* Slabs a client says it is done with (SlabGrant, Commit): their uncommitted
 * space goes back. One already gone (its lease ended) is no error. */
static egm_status_t return_slabs(egm_master_state_t *st, egm_id_t client, const uint64_t *ids,
                                 size_t n)
{
    if (n > EGM_MASTER_MAX_KEYS)
        return egm__set_error(EGM_ERR_INVALID_ARG, "returned: %zu slabs, at most %d", n,
                              EGM_MASTER_MAX_KEYS);
    for (size_t i = 0; i < n; i++)
        egm__objects_slab_return(st->objects, client, ids[i], st->now_ms());
    return EGM_OK;
}

/* Whether a SlabGrant may be answered before the standbys hold it (slabs.h
 * EGM_SLAB_EARLY_*): its writer keeps the slab's log and to place_within_ms,
 * and this leader's fence is far enough for its copies to end before
 * another master can lead. */
static int early_grant_ok(const egm_master_state_t *st, const Egm__SlabGrantRequest *req)
{
    if (!st->early_grants || !req->log || !req->place_bound || st->journal == NULL ||
        st->election == NULL)
        return 0;
    return egm__slab_early_fence_ok(egm__election_fence_ms(st->election), egm__now_ms());
}

/* Answered with a KeysReply of one result: the slab (size, lease_ttl_ms: how
 * long the client may write into it, replicas: its extents) and slab_id; or
 * the refusal as that result's status. */
static egm_status_t handle_slab_grant(egm_master_state_t *st, egm_master_call_t *call)
{
    const Egm__SlabGrantRequest *req = (const Egm__SlabGrantRequest *)call->request;
    egm_id_t client = egm__id_from_pb(req->client);
    outcomes_t oc = {0};
    egm_slab_view_t slab;
    egm_put_config_t config;
    egm_status_t status;
    char why[512];

    if (egm__id_is_nil(client))
        return egm__set_error(EGM_ERR_INVALID_ARG, "client: must not be nil");
    if ((status = put_config(req->config, &config)) != EGM_OK)
        return status;
    if ((status = return_slabs(st, client, req->returned, req->n_returned)) != EGM_OK)
        return status;
    char host_id[EGM_HOST_ID_MAX];
    config.writer_host_id = egm__liveness_host_id(st->liveness, client, host_id);
    if ((status = outcomes_init(&oc, 1)) != EGM_OK)
        return status;
    egm_status_t granted =
        egm__objects_slab_grant(st->objects, client, req->size, req->min_size, req->log,
                                early_grant_ok(st, req), &config, st->now_ms(), &slab);
    oc.out[0].status = granted;
    if (granted == EGM_OK) {
        egm_object_view_t view = {
            .state = EGM_OBJECT_PENDING, .size = slab.size, .n_replicas = slab.n_extents};
        memcpy(view.replicas, slab.extents, slab.n_extents * sizeof(view.replicas[0]));
        status = outcomes_record(&oc, 0, &view, 1, slab.lease_ms);
        if (status != EGM_OK) /* the reply cannot describe it: give it back */
            egm__objects_slab_return(st->objects, client, slab.id, st->now_ms());
        else
            call->early_grant = slab.early;
    } else {
        /* The client tells its caller why (a NO_SPACE has several causes). */
        snprintf(why, sizeof(why), "%s", egm_last_error());
        egm_debug("SlabGrant of %llu bytes (at least %llu): %s", (unsigned long long)req->size,
                  (unsigned long long)req->min_size, why);
    }
    if (status == EGM_OK)
        status =
            send_keys_reply(st, &oc, 1,
                            &(keys_reply_extra_t){
                                .slab_id = granted == EGM_OK ? slab.id : 0,
                                .error = granted == EGM_OK ? NULL : why,
                                .place_within_ms = call->early_grant ? EGM_SLAB_EARLY_PLACE_MS : 0},
                            call->reply);
    outcomes_cleanup(&oc);
    return status;
}

/* Slabs one Commit reply names as degraded at most (a writer holds
 * EGM_WSLAB_CLASSES open; one it is not told of now, it is told of at its
 * next Commit there). */
#define COMMIT_DEGRADED_MAX 16

static egm_status_t handle_commit(egm_master_state_t *st, egm_master_call_t *call)
{
    const Egm__CommitRequest *req = (const Egm__CommitRequest *)call->request;
    egm_id_t client = egm__id_from_pb(req->client);
    outcomes_t oc = {0};
    egm_put_config_t config;
    egm_status_t status = check_put_request(req->n_keys, req->n_sizes, client);

    if (status == EGM_OK && (req->n_slab_ids != req->n_keys || req->n_offsets != req->n_keys))
        status = egm__set_error(EGM_ERR_INVALID_ARG,
                                "slab_ids, offsets: %zu and %zu values for %zu keys (one each "
                                "per key)",
                                req->n_slab_ids, req->n_offsets, req->n_keys);
    const uint64_t *seen = NULL; /* per key, the log entry to note seen (commit_seqs.h) */
    uint64_t *seen_owned = NULL;
    if (status == EGM_OK)
        status =
            egm__commit_seen_seqs(req->n_keys, req->log_seqs, req->n_log_seqs, req->torn_log_seqs,
                                  req->n_torn_log_seqs, &seen, &seen_owned);
    if (status == EGM_OK && req->n_returned > EGM_MASTER_MAX_KEYS)
        status = egm__set_error(EGM_ERR_INVALID_ARG, "returned: %zu slabs, at most %d",
                                req->n_returned, EGM_MASTER_MAX_KEYS);
    if (status == EGM_OK)
        status = put_config(req->config, &config);
    if (status == EGM_OK)
        status = outcomes_init(&oc, req->n_keys);
    /* Per key, whether the batch journaled its entry seen (a few on the stack) */
    uint8_t journaled_few[64], *seen_journaled = journaled_few;
    if (status == EGM_OK && seen != NULL && req->n_keys > sizeof(journaled_few) &&
        (seen_journaled = egm_malloc(req->n_keys, "master.commit_seen")) == NULL)
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for a Commit of %zu keys",
                                req->n_keys);
    if (status != EGM_OK) {
        outcomes_cleanup(&oc);
        egm_free(seen_owned);
        return status;
    }
    if (seen != NULL)
        memset(seen_journaled, 0, req->n_keys);
    keys_batch_t kb = {.oc = &oc};
    uint64_t degraded[COMMIT_DEGRADED_MAX];
    keys_reply_extra_t extra = {.degraded_slabs = degraded};
    egm_objects_batch_t b = {.op = EGM_OBJECTS_COMMIT,
                             .client = client,
                             .sizes = req->sizes,
                             .slab_ids = req->slab_ids,
                             .offsets = req->offsets,
                             .log_seqs = seen,
                             .log_journaled = seen != NULL ? seen_journaled : NULL,
                             .config = &config,
                             .now_ms = st->now_ms(),
                             .n = req->n_keys,
                             .keys = (const char *const *)req->keys,
                             .degraded_slabs = degraded,
                             .degraded_max = COMMIT_DEGRADED_MAX,
                             .n_degraded_p = &extra.n_degraded_slabs};
    status = run_batch(st, &b, &kb);
    if (status == EGM_OK && seen != NULL) {
        /* Known from now on, committed or refused: a new leader reads the
         * slab's log past them (docs/ha.md "Commits the pool describes"). */
        int known = egm__objects_slab_seen(st->objects, client, req->n_keys, req->slab_ids, seen,
                                           seen_journaled, &call->wait_pos);
        /* A slab named degraded lost an extent: what its log says of that
         * extent is not what was committed (the standbys confirm it). A new
         * leader reads only the logs its standby knows are kept: a slab
         * granted with `log`, else one whose first entry it confirmed. A
         * torn entry describes nothing: its key waits. */
        call->described = known && extra.n_degraded_slabs == 0 && req->n_log_seqs > 0;
        for (size_t i = 0; i < req->n_keys && call->described; i++)
            call->described = req->log_seqs[i] != 0 && oc.out[i].status == EGM_OK;
    }
    egm_free(seen_owned);
    if (seen_journaled != journaled_few)
        egm_free(seen_journaled);
    if (status == EGM_OK)
        status = return_slabs(st, client, req->returned, req->n_returned);
    if (status == EGM_OK)
        status = send_keys_reply(st, &oc, req->n_keys, &extra, call->reply);
    outcomes_cleanup(&oc);
    return status;
}

static egm_status_t handle_remove_all(egm_master_state_t *st, egm_master_call_t *call)
{
    const Egm__RemoveAllRequest *req = (const Egm__RemoveAllRequest *)call->request;
    Egm__RemoveAllReply msg = EGM__REMOVE_ALL_REPLY__INIT;

    msg.status = EGM_OK;
    msg.location_cache_ms = st->location_cache_ms;
    uint64_t last_grant_ms = 0;
    msg.removed = egm__objects_remove_all(st->objects, req->force, st->now_ms(), &last_grant_ms);
    if (req->force)
        msg.wait_ms = force_wait_ms(st, last_grant_ms, st->now_ms());
    if (msg.removed > 0)
        egm_info("RemoveAll%s removed %llu objects", req->force ? " (force)" : "",
                 (unsigned long long)msg.removed);
    return pack_reply(&msg.base, call);
}

/* ---- segments, liveness, listing ----------------------------------------- */

/* A StatusReply with result; a refusal counts as a failure. */
static egm_status_t status_reply(egm_status_t result, egm_master_call_t *call)
{
    Egm__StatusReply msg = EGM__STATUS_REPLY__INIT;
    msg.status = result;
    msg.error = result != EGM_OK ? (char *)egm_last_error() : (char *)"";
    call->failed = result != EGM_OK;
    return pack_reply(&msg.base, call);
}

/* All of the request's segments or none (liveness checks the whole list
 * before mounting any): no client ever sees part of a pool. */
static egm_status_t mount_all(egm_master_state_t *st, const Egm__MountSegmentRequest *req)
{
    egm_id_t client = egm__id_from_pb(req->client);
    if (req->segment != NULL && req->n_segments > 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment and segments: give one or the other");
    if (req->segment != NULL) {
        egm_segment_params_t p = egm__segment_params_from_pb(req->segment);
        return egm__liveness_mount(st->liveness, client, &p, st->now_ms());
    }
    if (req->n_segments == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment: missing");
    if (req->n_segments > EGM_MOUNT_MAX_SEGMENTS)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segments: %zu in one list, at most %d",
                              req->n_segments, EGM_MOUNT_MAX_SEGMENTS);
    egm_segment_params_t *params =
        egm_calloc(req->n_segments, sizeof(*params), "master.mount_params");
    if (params == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory mounting %zu segments",
                              req->n_segments);
    egm_status_t result = EGM_OK;
    for (size_t i = 0; i < req->n_segments && result == EGM_OK; i++) {
        if (req->segments[i] == NULL)
            result = egm__set_error(EGM_ERR_INVALID_ARG, "segments[%zu]: missing", i);
        else
            params[i] = egm__segment_params_from_pb(req->segments[i]);
    }
    if (result == EGM_OK)
        result =
            egm__liveness_mount_all(st->liveness, client, params, req->n_segments, st->now_ms());
    egm_free(params);
    return result;
}

static void id_bytes(egm_id_t id, uint8_t out[16])
{
    memcpy(out, &id.hi, 8);
    memcpy(out + 8, &id.lo, 8);
}

/* Binds the connection serving this request to `client` (rpc/server.h), so
 * that its close tells liveness at once (fast failure detection). */
static void bind_connection(egm_master_state_t *st, egm_id_t client)
{
    uint8_t peer[16];
    id_bytes(client, peer);
    if (egm__rpc_server_bind_peer(peer))
        egm__liveness_connected(st->liveness, client, st->now_ms());
}

void egm__master_connection_closed(void *arg, const uint8_t peer[16])
{
    egm_master_state_t *st = arg;
    egm_id_t client;
    memcpy(&client.hi, peer, 8);
    memcpy(&client.lo, peer + 8, 8);
    /* Shared: liveness only reads the segment table (to mark segments). */
    if (st->lock != NULL)
        pthread_rwlock_rdlock(st->lock);
    egm__liveness_disconnected(st->liveness, client, st->now_ms());
    if (st->lock != NULL)
        pthread_rwlock_unlock(st->lock);
}

static egm_status_t handle_mount(egm_master_state_t *st, egm_master_call_t *call)
{
    const Egm__MountSegmentRequest *req = (const Egm__MountSegmentRequest *)call->request;
    egm_status_t result = mount_all(st, req);
    if (result == EGM_OK)
        bind_connection(st, egm__id_from_pb(req->client));
    if (result != EGM_OK)
        egm_warn("MountSegment refused: %s", egm_last_error());
    return status_reply(result, call);
}

/* Every named segment must be the caller's before any is unmounted; ones the
 * master no longer has (expired, or a master restart) are skipped and
 * reported as SEGMENT_NOT_FOUND after the others are gone. */
static egm_status_t unmount_all(egm_master_state_t *st, const Egm__UnmountSegmentRequest *req)
{
    egm_id_t client = egm__id_from_pb(req->client);
    char id_text[EGM_ID_STRLEN];
    size_t missing = 0;

    if (req->segment != NULL && req->n_segments > 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment and segments: give one or the other");
    if (req->segment != NULL)
        return egm__liveness_unmount(st->liveness, client, egm__id_from_pb(req->segment),
                                     st->now_ms());
    if (req->n_segments == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment: missing");
    if (req->n_segments > EGM_MOUNT_MAX_SEGMENTS)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segments: %zu in one list, at most %d",
                              req->n_segments, EGM_MOUNT_MAX_SEGMENTS);
    if (egm__id_is_nil(client))
        return egm__set_error(EGM_ERR_INVALID_ARG, "client: must not be nil");
    for (size_t i = 0; i < req->n_segments; i++) {
        egm_id_t id = egm__id_from_pb(req->segments[i]);
        const egm_segment_t *seg = egm__segment_table_find(st->segments, id);
        if (seg != NULL && !egm__id_equal(seg->desc.owner, client))
            return egm__set_error(EGM_ERR_PERMISSION,
                                  "segments[%zu] %s belongs to another client (none unmounted)", i,
                                  egm__id_format(id, id_text));
    }
    for (size_t i = 0; i < req->n_segments; i++)
        if (egm__liveness_unmount(st->liveness, client, egm__id_from_pb(req->segments[i]),
                                  st->now_ms()) != EGM_OK)
            missing++;
    if (missing > 0)
        return egm__set_error(EGM_ERR_SEGMENT_NOT_FOUND,
                              "%zu of %zu segments were not mounted (the others are unmounted)",
                              missing, req->n_segments);
    return EGM_OK;
}

static egm_status_t handle_unmount(egm_master_state_t *st, egm_master_call_t *call)
{
    egm_status_t result = unmount_all(st, (const Egm__UnmountSegmentRequest *)call->request);
    if (result != EGM_OK)
        egm_debug("UnmountSegment refused: %s", egm_last_error());
    return status_reply(result, call);
}

/* HaApply: a batch of the leader's journal for this standby's mirror. A
 * master that leads (or has no mirror: enable_ha off) refuses it. */
static egm_status_t handle_ha_apply(egm_master_state_t *st, egm_master_call_t *call)
{
    const Egm__HaApplyRequest *req = (const Egm__HaApplyRequest *)call->request;
    egm_status_t result;
    int64_t epoch = 0;
    if (st->mirror == NULL)
        result = egm__set_error(EGM_ERR_NOT_SUPPORTED, "this master runs without enable_ha");
    else if (egm__election_leading(st->election, &epoch))
        result = egm__set_error(EGM_ERR_PERMISSION,
                                "this master leads (epoch %lld): it takes no journal from %s "
                                "(epoch %lld)",
                                (long long)epoch, req->leader, (long long)req->epoch);
    else
        result = egm__mirror_apply(st->mirror, req->epoch, req->reset, req->from, req->to,
                                   req->ops.data, req->ops.len, st->now_ms());
    if (result != EGM_OK)
        egm_debug("HaApply from %s refused: %s", req->leader, egm_last_error());
    return status_reply(result, call);
}

static egm_status_t handle_ping(egm_master_state_t *st, egm_master_call_t *call)
{
    const Egm__PingRequest *req = (const Egm__PingRequest *)call->request;
    Egm__PingReply msg = EGM__PING_REPLY__INIT;
    Egm__Id master_id = EGM__ID__INIT;
    Egm__Id *id_pbs = NULL, **id_ptrs = NULL;
    egm_id_t *ids = NULL;
    size_t n = 0;
    int reset = 0;
    egm_status_t status;

    egm__id_to_pb(st->master_id, &master_id);
    msg.master_id = &master_id;
    msg.location_cache_ms = st->location_cache_ms;
    uint64_t now = st->now_ms(), since = atomic_load(&st->serving_since_ms);
    msg.serving_ms = now > since ? now - since : 0;
    if (req->leaving) {
        /* Its last ping (egm_client_destroy): unregister it now rather than
         * expire it after client_ttl, unmounting what it may still have
         * (the lock is held exclusive for it: ping_lock). */
        msg.status = egm__liveness_leave(st->liveness, egm__id_from_pb(req->client));
        msg.view = egm__segment_table_view(st->segments);
        status = pack_reply(&msg.base, call);
        goto out;
    }
    msg.view = egm__segment_table_view(st->segments);
    msg.status = egm__liveness_ping(st->liveness, egm__id_from_pb(req->client), st->now_ms());
    if (msg.status == EGM_OK)
        bind_connection(st, egm__id_from_pb(req->client));
    if (msg.status == EGM_OK && req->host_id != NULL && req->host_id[0] != '\0')
        msg.status =
            egm__liveness_set_host_id(st->liveness, egm__id_from_pb(req->client), req->host_id);
    if (msg.status == EGM_OK) {
        status = egm__segment_table_retired_since(st->segments, req->view, &ids, &n, &reset);
        if (status != EGM_OK)
            goto out;
        if (n > 0) {
            id_pbs = egm_calloc(n, sizeof(*id_pbs), "master.reply");
            id_ptrs = egm_calloc(n, sizeof(*id_ptrs), "master.reply");
            if (id_pbs == NULL || id_ptrs == NULL) {
                status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory answering a ping");
                goto out;
            }
            for (size_t i = 0; i < n; i++) {
                egm__id_to_pb(ids[i], &id_pbs[i]);
                id_ptrs[i] = &id_pbs[i];
            }
        }
        msg.n_retired = n;
        msg.retired = id_ptrs;
        msg.view_reset = reset != 0;
    }
    status = pack_reply(&msg.base, call);
out:
    egm_free(ids);
    egm_free(id_pbs);
    egm_free(id_ptrs);
    return status;
}

static egm_status_t handle_list_segments(egm_master_state_t *st, egm_master_call_t *call)
{
    Egm__ListSegmentsReply msg = EGM__LIST_SEGMENTS_REPLY__INIT;
    Egm__SegmentInfo *infos = NULL, **info_ptrs = NULL;
    Egm__SegmentDesc *descs = NULL;
    Egm__Id *ids = NULL;
    egm_object_index_stats_t ostats;
    egm_status_t status = EGM_OK;

    size_t n = egm__segment_table_count(st->segments);
    if (n > 0) {
        infos = egm_calloc(n, sizeof(*infos), "master.reply");
        info_ptrs = egm_calloc(n, sizeof(*info_ptrs), "master.reply");
        descs = egm_calloc(n, sizeof(*descs), "master.reply");
        ids = egm_calloc(2 * n, sizeof(*ids), "master.reply");
        if (infos == NULL || info_ptrs == NULL || descs == NULL || ids == NULL) {
            status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory listing %zu segments", n);
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const egm_segment_t *seg = egm__segment_table_at(st->segments, i);
        egm_allocator_stats_t astats;
        egm__allocator_stats(seg->allocator, &astats);
        egm__segment_info__init(&infos[i]);
        egm__segment_desc_to_pb(&seg->desc, &descs[i], &ids[2 * i], &ids[2 * i + 1]);
        infos[i].desc = &descs[i];
        infos[i].used = astats.used;
        infos[i].objects = seg->replica_count;
        info_ptrs[i] = &infos[i];
    }
    egm__objects_stats(st->objects, &ostats);
    msg.status = EGM_OK;
    msg.n_segments = n;
    msg.segments = info_ptrs;
    msg.keys = ostats.objects;
    msg.clients = egm__liveness_client_count(st->liveness);
    status = pack_reply(&msg.base, call);
out:
    egm_free(infos);
    egm_free(info_ptrs);
    egm_free(descs);
    egm_free(ids);
    return status;
}

/* ---- the command table ------------------------------------------------- */

/* Ping: a leaving client's may unmount the segments it still has, which
 * changes the segment set; any other only touches its client. */
static egm_master_lock_t ping_lock(const ProtobufCMessage *request)
{
    return ((const Egm__PingRequest *)request)->leaving ? EGM_MASTER_LOCK_EXCLUSIVE
                                                        : EGM_MASTER_LOCK_SHARED;
}

/* One row per request type of rpc/command.h's EGM_RPC_COMMANDS, named
 * MASTER_<Name>: its handler and how it holds the state lock (a mode, and for
 * a mode that depends on the request, the function that reads it from the
 * request: egm_master_command_t.lock_for). The table below
 * is built from the rpc list, so a type without its row does not compile and
 * a second row for it is a macro redefinition. */
#define MASTER_MountSegment handle_mount, EGM_MASTER_LOCK_EXCLUSIVE
#define MASTER_UnmountSegment handle_unmount, EGM_MASTER_LOCK_EXCLUSIVE
#define MASTER_PutStart handle_put_start, EGM_MASTER_LOCK_SHARED
#define MASTER_PutEnd handle_keys, EGM_MASTER_LOCK_SHARED
#define MASTER_PutRevoke handle_keys, EGM_MASTER_LOCK_SHARED
#define MASTER_GetReplicaList handle_keys, EGM_MASTER_LOCK_SHARED
#define MASTER_ExistKey handle_keys, EGM_MASTER_LOCK_SHARED
#define MASTER_Remove handle_keys, EGM_MASTER_LOCK_SHARED
#define MASTER_RemoveAll handle_remove_all, EGM_MASTER_LOCK_EXCLUSIVE
/* Exclusive when leaving (ping_lock). */
#define MASTER_Ping handle_ping, EGM_MASTER_LOCK_SHARED, ping_lock
#define MASTER_ListSegments handle_list_segments, EGM_MASTER_LOCK_EXCLUSIVE
#define MASTER_StatKey egm__master_handle_stat_key, EGM_MASTER_LOCK_SHARED
#define MASTER_SlabGrant handle_slab_grant, EGM_MASTER_LOCK_SHARED
#define MASTER_Commit handle_commit, EGM_MASTER_LOCK_SHARED
#define MASTER_RepairGrant egm__master_handle_repair_grant, EGM_MASTER_LOCK_SHARED
#define MASTER_RepairCommit egm__master_handle_repair_commit, EGM_MASTER_LOCK_SHARED
/* The mirror locks itself; a standby serves nothing else. */
#define MASTER_HaApply handle_ha_apply, EGM_MASTER_LOCK_SHARED

static const egm_master_command_t commands[EGM_RPC_TYPE_MAX + 1] = {
#define ROW(e, n, name, req, rep) [n] = {n, MASTER_##name},
    EGM_RPC_COMMANDS(ROW)
#undef ROW
};

const egm_master_command_t *egm__master_command(uint16_t type)
{
    return type >= 1 && type <= EGM_RPC_TYPE_MAX ? &commands[type] : NULL;
}

egm_master_lock_t egm__master_command_lock(const egm_master_command_t *cmd,
                                           const ProtobufCMessage *request)
{
    return cmd->lock_for != NULL ? cmd->lock_for(request) : cmd->lock;
}

/* Decodes the request, holds the lock as the command's row says, runs its
 * handler. *failed_p: answered with an error status inside a normal reply. */
static egm_status_t dispatch(egm_master_state_t *st, uint16_t type, const uint8_t *payload,
                             size_t len, egm_rpc_reply_t *reply, egm_master_call_t *call_p)
{
    const egm_master_command_t *cmd = egm__master_command(type);
    ProtobufCMessage *req = NULL;
    egm_status_t status;

    if (cmd == NULL)
        return egm__set_error(EGM_ERR_NOT_SUPPORTED, "unknown request type %u", (unsigned)type);
    status = egm__pb_unpack(egm__rpc_command_find(type)->request, payload, len, &req);
    if (status != EGM_OK)
        return status;
    egm_master_call_t call = {.type = type, .request = req, .reply = reply};
    if (st->lock != NULL) {
        if (egm__master_command_lock(cmd, req) == EGM_MASTER_LOCK_SHARED)
            pthread_rwlock_rdlock(st->lock);
        else
            pthread_rwlock_wrlock(st->lock);
    }
    status = cmd->handler(st, &call);
    if (st->lock != NULL)
        pthread_rwlock_unlock(st->lock);
    egm__pb_free(req);
    call.described = call.described && status == EGM_OK;
    call.early_grant = call.early_grant && status == EGM_OK;
    *call_p = call;
    return status;
}

/* A reply that waits for the standbys without blocking the RPC thread. */
typedef struct {
    egm_master_state_t *st;
    egm_rpc_hold_t *hold;
    egm_rpc_reply_t reply;
    egm_status_t status;
    char *error; /* the request's own error, when status is one */
    uint16_t type;
    int failed;
    uint64_t start_ns;
} held_reply_t;

/* Whether this master leads at the epoch it serves (always, without HA):
 * checked before a request is served, and again before a change that waited
 * for the standbys is answered. A leader that lost its lease stops following
 * its standbys without taking them out of the in-sync set: the changes they
 * had not confirmed may be missing at the next leader, so they are not
 * answered as done. */
static int still_leading(egm_master_state_t *st)
{
    int64_t epoch = 0;
    return st->election == NULL || (egm__election_leading(st->election, &epoch) &&
                                    epoch == atomic_load(&st->serving_epoch));
}

#define NOT_CONFIRMED                                                                              \
    "this master stopped leading before its standbys confirmed the change (it may be missing at "  \
    "the next leader; enable_ha)"

/* egm_journal_done_fn: the standbys hold the request's changes (or did not
 * confirm in time): its answer goes out. */
static void on_settled(void *arg, egm_status_t status, const char *error)
{
    held_reply_t *h = arg;
    if (status == EGM_OK && !still_leading(h->st)) {
        status = EGM_ERR_UNREACHABLE;
        error = NOT_CONFIRMED;
    }
    if (status != EGM_OK) {
        egm_free(h->reply.buf);
        h->reply.buf = NULL;
        h->reply.len = 0;
        h->status = status;
    }
    if (h->st->metrics != NULL)
        egm__master_metrics_record(h->st->metrics, h->type, h->failed || h->status != EGM_OK,
                                   egm__now_ns() - h->start_ns);
    egm__rpc_hold_release(h->hold, h->status, h->reply.buf, h->reply.len,
                          status != EGM_OK ? error : h->error);
    egm_free(h->error);
    egm_free(h);
}

/* The request's answer, held (rpc/server.h) until the standbys have its
 * changes; NULL outside an RPC server, or out of memory. */
static held_reply_t *hold_reply(egm_master_state_t *st, uint16_t type, int failed,
                                uint64_t start_ns, egm_status_t status, egm_rpc_reply_t *reply)
{
    held_reply_t *h = egm_calloc(1, sizeof(*h), "master.held_reply");
    if (h == NULL)
        return NULL;
    if (status != EGM_OK && (h->error = egm_strdup(egm_last_error(), "master.held_reply")) == NULL)
        goto fail;
    if ((h->hold = egm__rpc_server_hold()) == NULL) /* last: it cannot be undone */
        goto fail;
    h->st = st;
    h->reply = *reply;
    h->status = status;
    h->type = type;
    h->failed = failed;
    h->start_ns = start_ns;
    reply->buf = NULL;
    reply->len = 0;
    return h;
fail:
    egm_free(h->error);
    egm_free(h);
    return NULL;
}

/* What this request changed is answered only once the standbys in sync hold
 * it too (journal.h): a change a standby lacks would be lost if this master
 * died after answering. When a batch is in flight to them, the reply is held
 * and the RPC thread goes on serving: 1 when it was. */
static int wait_for_standbys(egm_master_state_t *st, uint16_t type, int failed, uint64_t start_ns,
                             egm_status_t *status, egm_rpc_reply_t *reply)
{
    /* Sending itself blocks this RPC thread for a round trip: only when no
     * other request waits for it (else the followers' threads send). */
    egm_status_t s = egm__journal_try(st->journal, !egm__rpc_server_others_waiting());
    if (s == EGM_INPROGRESS) {
        held_reply_t *h = hold_reply(st, type, failed, start_ns, *status, reply);
        if (h != NULL) {
            egm__journal_notify(st->journal, st->journal_wait_ms, on_settled, h);
            return 1;
        }
        s = egm__journal_wait(st->journal, st->journal_wait_ms); /* the thread waits */
        if (s == EGM_OK && !still_leading(st))
            s = egm__set_error(EGM_ERR_UNREACHABLE, NOT_CONFIRMED);
    }
    if (s != EGM_OK) {
        egm_free(reply->buf);
        reply->buf = NULL;
        reply->len = 0;
        *status = EGM_ERR_UNREACHABLE; /* the wait's error text */
    }
    return 0;
}

/* After a SlabGrant answered before the standbys hold it. */
static void early_granted(egm_master_state_t *st)
{
    /* Its writer may copy into the slab until place_within_ms plus the
     * copies' time from now: a resigning leader waits that out. */
    raise_to(&st->early_copies_until_ms,
             egm__now_ms() + EGM_SLAB_EARLY_PLACE_MS + EGM_SLAB_EARLY_COPY_MS);
    /* Its first Commit waits for the standbys to hold it: their senders go
     * now rather than at their next look. */
    egm__journal_kick(st->journal);
}

egm_status_t egm__master_handle(void *arg, uint16_t type, const uint8_t *payload, size_t len,
                                egm_rpc_reply_t *reply)
{
    egm_master_state_t *st = arg;
    /* The time includes waiting for the lock: what a caller sees of the master. */
    uint64_t start_ns = st->metrics != NULL ? egm__now_ns() : 0;
    egm_master_call_t call = {0};

    reply->buf = NULL;
    reply->len = 0;
    egm_status_t status;
    if (type != EGM_RPC_HA_APPLY && !still_leading(st))
        status = egm__set_error(EGM_ERR_UNREACHABLE, "this master does not lead now (enable_ha): "
                                                     "the leader is in etcd");
    else
        status = dispatch(st, type, payload, len, reply, &call);
    if (call.early_grant) {
        early_granted(st);
    } else if (call.described) {
        /* A new leader finds it in the pool: the standbys' senders take it
         * when they next look (replication.c: at once after a batch, else
         * within EGM_REPL_IDLE_MS while Commits stream, EGM_REPL_IDLE_MAX_MS
         * after a quiet spell). No wake-up here: one per Commit cost a
         * system call on this thread and a sender's round trip per put. */
        if (call.wait_pos == 0)
            atomic_fetch_add_explicit(type == EGM_RPC_REMOVE ? &st->removes_described
                                                             : &st->commits_described,
                                      1, memory_order_relaxed);
        /* Into a slab whose grant the standbys do not hold yet: answered
         * once they do (not once they hold this Commit's own ops); else at
         * once. */
        egm__journal_wait_for(st->journal, call.wait_pos);
    }
    if (st->journal != NULL &&
        wait_for_standbys(st, type, call.failed, start_ns, &status, reply)) /* answered later */
        return EGM_OK;
    if (st->metrics != NULL)
        egm__master_metrics_record(st->metrics, type, call.failed || status != EGM_OK,
                                   egm__now_ns() - start_ns);
    return status;
}
