/* Get: GetReplicaList (grants a read lease) -> copy from the best replica,
 * falling back to the others -> check the lease still held when the copy ended. */
#include <stdio.h>
#include <string.h>
#include "client/client_int.h"
#include "client/parts.h"
#include "client/pipeline.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/config_int.h"
#include "common/log.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

/* One get batch: its keys, and where their answers go (the caller's arrays). */
typedef struct {
    size_t n;
    const char *const *keys;
    const egm_parts_t *parts; /* key i's buffers; NULL: one key, allocated here (egm_get) */
    void **allocated;         /* parts NULL: key i's object, egm_malloc'ed here */
    size_t *sizes_p;          /* key i's object size; NULL: not wanted */
    egm_status_t *results;    /* key i's status */
} get_batch_t;

typedef struct {
    const egm_key_result_t *res;
    const egm_replica_desc_t *replicas; /* res's */
    size_t caller;                      /* index in the caller's arrays */
    size_t order[16];                   /* replicas by preference (local, shm, tcp) */
    size_t n_order;
    size_t next; /* next replica to try */
    int active;  /* still needs its data */
    /* where the object goes: the caller's parts, or one buffer allocated here */
    void *const *addr;
    const size_t *len;
    size_t n_local;
    void *buf;
    size_t buf_len;
} fetch_t;

static void order_replicas(egm_client_t *client, fetch_t *f, const egm_segment_desc_t *descs,
                           size_t n_descs)
{
    int rank[16];

    f->n_order = 0;
    for (size_t r = 0; r < f->res->n_replicas && f->n_order < 16; r++) {
        const egm_segment_desc_t *seg =
            egm__segment_desc_find(descs, n_descs, f->replicas[r].segment);
        egm_transport_t transport;
        egm_te_op_t probe = {.segment = seg,
                             .offset = f->replicas[r].offset,
                             .local = f->addr[0],
                             .length = f->res->size < f->len[0] ? f->res->size : f->len[0],
                             .dir = EGM_TE_READ};
        if (seg == NULL) {
            egm__set_error(EGM_ERR_PROTOCOL, "the master named no segment for a replica");
            continue;
        }
        if (egm__te_route_op(client->te, &probe, &transport) != EGM_OK)
            continue; /* its reason stays the thread's error */
        size_t k = f->n_order++;
        while (k > 0 && rank[k - 1] > (int)transport) {
            rank[k] = rank[k - 1];
            f->order[k] = f->order[k - 1];
            k--;
        }
        rank[k] = (int)transport;
        f->order[k] = r;
    }
}

/* One round: for every fetch that still needs data, try its next replica,
 * one copy per local part (the object fills them in order). */
static size_t plan_round(fetch_t *fetches, size_t n, const egm_segment_desc_t *descs,
                         size_t n_descs, egm_te_op_t *ops, size_t *op_fetch)
{
    size_t n_ops = 0;
    for (size_t j = 0; j < n; j++) {
        fetch_t *f = &fetches[j];
        if (!f->active || f->next >= f->n_order)
            continue;
        const egm_replica_desc_t *rep = &f->replicas[f->order[f->next++]];
        const egm_segment_desc_t *seg = egm__segment_desc_find(descs, n_descs, rep->segment);
        uint64_t at = 0;
        for (size_t p = 0; p < f->n_local && at < f->res->size; p++) {
            uint64_t len = f->res->size - at < f->len[p] ? f->res->size - at : f->len[p];
            if (len == 0)
                continue;
            ops[n_ops] = (egm_te_op_t){.segment = seg,
                                       .offset = rep->offset + at,
                                       .local = f->addr[p],
                                       .length = len,
                                       .dir = EGM_TE_READ};
            op_fetch[n_ops++] = j;
            at += len;
        }
    }
    return n_ops;
}

/* Points f at its destination: one buffer allocated here (parts NULL,
 * egm_get), or the caller's parts of key i, which must hold the object and lie
 * in registered memory (acquired for the bytes used). */
static egm_status_t fetch_target(egm_client_t *client, fetch_t *f, const char *key,
                                 const egm_parts_t *parts, size_t i, void **allocated,
                                 int *acquired)
{
    uint64_t size = f->res->size;

    if (parts == NULL) {
        allocated[i] = egm_malloc(size ? size : 1, "client.get_buffer");
        if (allocated[i] == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "no memory for %llu bytes",
                                  (unsigned long long)size);
        f->buf = allocated[i];
        f->buf_len = size;
        f->addr = &f->buf;
        f->len = &f->buf_len;
        f->n_local = 1;
        return EGM_OK;
    }
    size_t first = egm__parts_first(parts, i), end = egm__parts_end(parts, i);
    uint64_t cap = egm__parts_total(parts, i), at = 0;
    if (cap < size)
        return egm__set_error(EGM_ERR_BUFFER_TOO_SMALL,
                              "\"%s\" has %llu bytes, the buffer%s hold%s %llu", key,
                              (unsigned long long)size, end - first > 1 ? "s" : "",
                              end - first > 1 ? "" : "s", (unsigned long long)cap);
    f->addr = parts->addr + first;
    f->len = parts->len + first;
    f->n_local = end - first;
    /* The bytes each part receives (an empty part, or one past the object's
     * end, none), acquired a group of parts at a time under one lock. */
    size_t lens[64];
    for (size_t p = first; p < end && at < size;) {
        size_t k = 0;
        for (; k < 64 && p + k < end; k++) {
            uint64_t len = size - at < parts->len[p + k] ? size - at : parts->len[p + k];
            lens[k] = (size_t)len;
            at += len;
        }
        egm_status_t status = egm__registry_acquire_n(client->registry, parts->addr + p, lens, k, 1,
                                                      acquired + (p - egm__parts_first(parts, 0)));
        if (status != EGM_OK) /* the registry knows no key: name it */
            return egm__set_error(status, "\"%s\": %s", key, egm_last_error());
        p += k;
    }
    return EGM_OK;
}

/* Copies the keys of one GetReplicaList reply (owned, freed here) into the
 * batch's parts, or into buffers allocated here; started_ms is when the lease
 * was asked for. known: the reply's segments already decoded (n_known of
 * them, the caller's), or NULL to decode them here. */
static egm_status_t fetch_reply(egm_client_t *client, const get_batch_t *b, egm_keys_reply_t *reply,
                                const egm_segment_desc_t *known, size_t n_known,
                                uint64_t started_ms)
{
    size_t n = b->n;
    const char *const *keys = b->keys;
    const egm_parts_t *parts = b->parts;
    void **allocated = b->allocated;
    size_t *sizes_p = b->sizes_p;
    egm_status_t *results = b->results;
    egm_segment_desc_t *descs = NULL;
    fetch_t *fetches = NULL;
    egm_te_op_t *ops = NULL;
    size_t *op_fetch = NULL;
    int *acquired = NULL;
    /* the view's parts, numbered from its first key's first part */
    size_t part0 = parts ? egm__parts_first(parts, 0) : 0;
    size_t n_parts = parts ? egm__parts_in(parts, n) : n;
    size_t n_descs = known != NULL ? n_known : reply->n_segments;
    egm_status_t status = EGM_OK;

    if (known == NULL && (status = egm__client_reply_segments(reply, &descs)) != EGM_OK)
        goto out;
    const egm_segment_desc_t *segs = known != NULL ? known : descs;
    fetches = egm_calloc(n, sizeof(*fetches), "client.get");
    ops = egm_calloc(n_parts, sizeof(*ops), "client.get");
    op_fetch = egm_calloc(n_parts, sizeof(*op_fetch), "client.get");
    acquired = egm_calloc(n_parts, sizeof(*acquired), "client.get");
    if (!fetches || !ops || !op_fetch || !acquired) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory planning a get");
        goto out;
    }

    for (size_t i = 0; i < n; i++) {
        fetch_t *f = &fetches[i];
        f->res = &reply->results[i];
        f->replicas = egm__keys_reply_replicas(reply, f->res);
        f->caller = i;
        results[i] = f->res->status;
        if (results[i] != EGM_OK) {
            egm__set_error(results[i], "\"%s\": %s", keys[i], egm_status_string(results[i]));
            continue;
        }
        if (sizes_p != NULL)
            sizes_p[i] = f->res->size;
        results[i] = fetch_target(client, f, keys[i], parts, i, allocated, acquired);
        if (results[i] != EGM_OK || f->res->size == 0) /* an empty object needs no copy */
            continue;
        order_replicas(client, f, segs, n_descs);
        if (f->n_order == 0) {
            char reason[256];
            snprintf(reason, sizeof(reason), "%s", egm_last_error());
            results[i] = egm__set_error(EGM_ERR_UNREACHABLE,
                                        "no replica of \"%s\" is reachable with protocol %s: %s",
                                        keys[i], EGM_CONFIG_TEXT(client->config, protocol), reason);
        } else {
            results[i] = EGM_ERR_TRANSFER;
            f->active = 1;
        }
    }

    /* Each round tries the next replica of every key whose last try failed. */
    for (;;) {
        size_t n_ops = plan_round(fetches, n, segs, n_descs, ops, op_fetch);
        if (n_ops == 0)
            break;
        uint64_t t0 = egm__now_ns();
        egm__te_transfer(client->te, ops, n_ops);
        egm__phase_add(&client->phases, EGM_OP_GET, EGM_PHASE_TRANSFER, t0);
        /* a fetch is done when every copy of its round succeeded */
        for (size_t k = 0; k < n_ops; k++)
            results[fetches[op_fetch[k]].caller] = EGM_OK;
        for (size_t k = 0; k < n_ops; k++)
            if (ops[k].status != EGM_OK && results[fetches[op_fetch[k]].caller] == EGM_OK)
                results[fetches[op_fetch[k]].caller] = ops[k].status;
        for (size_t k = 0; k < n_ops; k++)
            if (results[fetches[op_fetch[k]].caller] == EGM_OK)
                fetches[op_fetch[k]].active = 0;
    }

    /* The lease protected the replicas only until it ran out. */
    uint64_t ended_ms = egm__now_ms();
    for (size_t i = 0; i < n; i++)
        if (results[i] == EGM_OK && ended_ms > started_ms + fetches[i].res->lease_ttl_ms)
            results[i] = egm__set_error(EGM_ERR_LEASE_EXPIRED,
                                        "\"%s\": the read lease ran out during the copy", keys[i]);
out:
    if (acquired != NULL && parts != NULL) /* egm_get's own buffers are not registered */
        egm__registry_release_n(client->registry, parts->addr + part0, acquired, n_parts);
    for (size_t i = 0; i < n; i++) {
        if (status != EGM_OK)
            results[i] = status;
        if (allocated != NULL && results[i] != EGM_OK) {
            egm_free(allocated[i]);
            allocated[i] = NULL;
        }
    }
    egm_free(fetches);
    egm_free(ops);
    egm_free(op_fetch);
    egm_free(acquired);
    egm_free(descs);
    egm__keys_reply_free(reply);
    return status;
}

/* ---- lease-cached locations (location_cache.h, docs/consistency.md) ---- */

/* Batches of more keys do not fill the cache from their own GetReplicaList
 * (engines read such batches once, after looking them up: an ExistKey of up
 * to EGM_LOOKUP_LOCATIONS_MAX keys fills it). */
#define CACHED_BATCH_MAX 256

/* Records the locations a GetReplicaList answered (asked at started_ms). */
static void remember(egm_client_t *client, const get_batch_t *b, const egm_keys_reply_t *reply,
                     const egm_segment_desc_t *descs, uint64_t started_ms, uint64_t generation)
{
    if (b->n <= CACHED_BATCH_MAX)
        egm__location_cache_remember(client->locations, b->n, b->keys, reply, descs,
                                     reply->n_segments, started_ms, generation);
}

/* Copies b from a reply egm__location_cache_reply made (freed here). 1 when every key
 * answered OK; 0 when one failed on its cached location: every key's cached
 * entry is dropped and its answer undone, for the caller to ask the master
 * for the whole batch again. */
static int fetch_cached(egm_client_t *client, const get_batch_t *b, egm_keys_reply_t *reply,
                        egm_segment_desc_t *descs, size_t n_descs, uint64_t asked_ms)
{
    egm_status_t status = fetch_reply(client, b, reply, descs, n_descs, asked_ms);
    egm_free(descs);
    int served = status == EGM_OK;
    for (size_t i = 0; i < b->n; i++)
        served &= b->results[i] == EGM_OK;
    if (served)
        return 1;
    for (size_t i = 0; i < b->n; i++) {
        egm__location_cache_drop(client->locations, b->keys[i]);
        if (b->allocated != NULL) {
            egm_free(b->allocated[i]);
            b->allocated[i] = NULL;
        }
        if (b->sizes_p != NULL)
            b->sizes_p[i] = 0;
        b->results[i] = EGM_OK;
    }
    return 0;
}

/* Serves the batch from cached locations when every key has one (1), or
 * answers 0 and leaves it to the master (egm__location_cache_reply, fetch_cached). */
static int get_cached(egm_client_t *client, const get_batch_t *b)
{
    egm_keys_reply_t *reply;
    egm_segment_desc_t *descs;
    size_t n_descs;
    uint64_t asked_ms;
    /* One key is served from its own entry only: walking kept lookups that do
     * not hold it would cost more than it saves. */
    size_t hint = b->n == 1 ? EGM_LOCATION_NO_HINT : 0;
    if (!egm__location_cache_reply(client->locations, b->n, b->keys, hint, egm__now_ms(), &reply,
                                   &descs, &n_descs, &asked_ms))
        return 0;
    return fetch_cached(client, b, reply, descs, n_descs, asked_ms);
}

/* The batch through one GetReplicaList (its answers cached when it is small). */
static egm_status_t get_from_master(egm_client_t *client, const get_batch_t *b)
{
    egm_keys_reply_t *reply = NULL;
    uint64_t generation = egm__location_cache_generation(client->locations);
    uint64_t started_ms = egm__now_ms();
    egm_status_t status = egm__client_keys_call(client, EGM_RPC_GET_REPLICA_LIST, b->n, b->keys,
                                                EGM_KEYS_CALL_PLAIN, &reply);
    if (status != EGM_OK) {
        for (size_t i = 0; i < b->n; i++)
            b->results[i] = status;
        return status;
    }
    egm_segment_desc_t *descs = NULL;
    if (egm__client_reply_segments(reply, &descs) == EGM_OK) {
        remember(client, b, reply, descs, started_ms, generation);
        status = fetch_reply(client, b, reply, descs, reply->n_segments, started_ms);
        egm_free(descs);
        return status;
    }
    return fetch_reply(client, b, reply, NULL, 0, started_ms); /* answers the decoding error */
}

/* ---- pipelined batches (pipeline.h) ---- */

/* Large batches run in chunks whose GetReplicaList calls a helper thread makes
 * ahead of the copies; a chunk whose every key has a cached location (an
 * ExistKey asked for them, as engines do before they read) makes none. */
/* What get_ahead hands a copy worker for one chunk. */
typedef struct {
    egm_keys_reply_t *reply;
    int cached;                /* made from cached locations (egm__location_cache_reply) */
    egm_segment_desc_t *descs; /* cached: the segments' descriptors */
    size_t n_descs;
    uint64_t asked_ms; /* cached: the oldest ask of its locations */
} chunk_answer_t;

typedef struct {
    egm_client_t *client;
    const char *const *keys;
    const egm_chunk_plan_t *chunks;
    chunk_answer_t *answers; /* one per chunk */
} get_pipeline_t;

static egm_status_t get_ahead(void *arg, size_t k, void **reply_p)
{
    get_pipeline_t *g = arg;
    size_t first = egm__chunk_first(g->chunks, k), len = egm__chunk_len(g->chunks, k);
    chunk_answer_t *a = &g->answers[k];
    *reply_p = a;
    a->cached =
        egm__location_cache_reply(g->client->locations, len, g->keys + first, first, egm__now_ms(),
                                  &a->reply, &a->descs, &a->n_descs, &a->asked_ms);
    if (a->cached)
        return EGM_OK;
    return egm__client_keys_call(g->client, EGM_RPC_GET_REPLICA_LIST, len, g->keys + first,
                                 EGM_KEYS_CALL_PLAIN, &a->reply);
}

/* What every copy worker of one pipelined get shares (pipeline.h). */
typedef struct {
    egm_client_t *client;
    egm_pipeline_t *p;
    const get_batch_t *batch;
    const egm_chunk_plan_t *chunks;
} get_copy_t;

static egm_status_t get_copy_chunk(void *arg, size_t k)
{
    get_copy_t *c = arg;
    const get_batch_t *b = c->batch;
    size_t first = egm__chunk_first(c->chunks, k), len = egm__chunk_len(c->chunks, k);
    void *reply;
    uint64_t started_ms;
    egm_status_t st = egm__pipeline_wait(c->p, k, &reply, &started_ms);
    chunk_answer_t *a = reply;
    if (st == EGM_OK) {
        egm_parts_t view = egm__parts_from(b->parts, first);
        get_batch_t chunk = {.n = len,
                             .keys = b->keys + first,
                             .parts = &view,
                             .sizes_p = b->sizes_p ? b->sizes_p + first : NULL,
                             .results = b->results + first};
        if (!a->cached)
            st = fetch_reply(c->client, &chunk, a->reply, NULL, 0, started_ms);
        else if (!fetch_cached(c->client, &chunk, a->reply, a->descs, a->n_descs, a->asked_ms))
            st = get_from_master(c->client, &chunk);
    } else {
        egm__keys_reply_free(a->reply);
        for (size_t i = 0; i < len; i++)
            b->results[first + i] = st;
    }
    egm__pipeline_release(c->p, k, NULL, 0);
    return st;
}

/* A batch into parts: chunks, each copied while the next ones' leases are asked for. */
static egm_status_t get_pipelined(egm_client_t *client, const get_batch_t *b,
                                  const egm_chunk_plan_t *chunks)
{
    size_t n_chunks = chunks->n_chunks;
    get_pipeline_t g = {.client = client,
                        .keys = b->keys,
                        .chunks = chunks,
                        .answers = egm_calloc(n_chunks, sizeof(chunk_answer_t), "client.get")};
    egm_pipeline_t *p;
    egm_status_t status =
        g.answers != NULL
            ? egm__pipeline_start(client->workers, "get", n_chunks, get_ahead, NULL, &g, &p)
            : egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for %zu chunks", n_chunks);

    if (status != EGM_OK) { /* nothing fetched: no key may read as OK */
        for (size_t i = 0; i < b->n; i++)
            if (b->results[i] == EGM_OK)
                b->results[i] = status;
        egm_free(g.answers);
        return status;
    }
    get_copy_t c = {.client = client, .p = p, .batch = b, .chunks = chunks};
    status = egm__pipeline_copy(client->workers, n_chunks, get_copy_chunk, &c);
    egm__pipeline_finish(p);
    egm_free(g.answers); /* each chunk's reply was freed by its copy */
    return status;
}

/* Keys already checked. */
static egm_status_t get_checked(egm_client_t *client, const get_batch_t *b)
{
    egm_status_t status;

    /* Worth pipelining: chunks weighed by parts (a plan that cannot be made
     * runs the batch whole). */
    egm_chunk_plan_t chunks;
    if (b->parts != NULL && egm__parts_in(b->parts, b->n) >= EGM_PIPELINE_MIN_PARTS &&
        egm__chunk_plan(b->n, b->parts, NULL, 0, &chunks) == EGM_OK) {
        int pipelined = egm__chunk_plan_pipelined(&chunks);
        if (pipelined)
            status = get_pipelined(client, b, &chunks);
        egm__chunk_plan_free(&chunks);
        if (pipelined)
            return status;
    }
    if (get_cached(client, b))
        return EGM_OK;
    return get_from_master(client, b);
}

/* The keys whose results[i] is EGM_OK (the valid ones) of a batch into parts:
 * their keys and parts copied into a batch of their own, answers copied back. */
static egm_status_t get_valid_subset(egm_client_t *client, const get_batch_t *b, size_t n_valid)
{
    size_t n = b->n;
    const char *const *keys = b->keys;
    const egm_parts_t *parts = b->parts;
    size_t *sizes_p = b->sizes_p;
    egm_status_t *results = b->results;
    size_t n_parts = 0;
    for (size_t i = 0; i < n; i++)
        if (results[i] == EGM_OK)
            n_parts += egm__parts_end(parts, i) - egm__parts_first(parts, i);
    const char **sub_keys = egm_calloc(n_valid, sizeof(*sub_keys), "client.get_subset");
    size_t *counts = egm_calloc(n_valid, sizeof(*counts), "client.get_subset");
    size_t *sizes = egm_calloc(n_valid, sizeof(*sizes), "client.get_subset");
    egm_status_t *sub_results = egm_calloc(n_valid, sizeof(*sub_results), "client.get_subset");
    void **addr = egm_calloc(n_parts, sizeof(*addr), "client.get_subset");
    size_t *len = egm_calloc(n_parts, sizeof(*len), "client.get_subset");
    egm_parts_t sub = {0};
    egm_status_t status;

    if (!sub_keys || !counts || !sizes || !sub_results || !addr || !len) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory planning a get");
        goto out;
    }
    for (size_t i = 0, k = 0, q = 0; i < n; i++) {
        if (results[i] != EGM_OK)
            continue;
        sub_keys[k] = keys[i];
        counts[k] = egm__parts_end(parts, i) - egm__parts_first(parts, i);
        for (size_t p = egm__parts_first(parts, i); p < egm__parts_end(parts, i); p++, q++) {
            addr[q] = parts->addr[p];
            len[q] = parts->len[p];
        }
        k++;
    }
    status = egm__parts_init(&sub, n_valid, counts, addr, len);
    if (status == EGM_OK)
        status = get_checked(client, &(get_batch_t){.n = n_valid,
                                                    .keys = sub_keys,
                                                    .parts = &sub,
                                                    .sizes_p = sizes,
                                                    .results = sub_results});
    for (size_t i = 0, k = 0; i < n; i++) {
        if (results[i] != EGM_OK)
            continue;
        results[i] = status == EGM_OK ? sub_results[k] : status;
        if (sizes_p != NULL)
            sizes_p[i] = sizes[k];
        k++;
    }
out:
    if (status != EGM_OK)
        for (size_t i = 0; i < n; i++)
            if (results[i] == EGM_OK)
                results[i] = status;
    egm__parts_free(&sub);
    egm_free(sub_keys);
    egm_free(counts);
    egm_free(sizes);
    egm_free(sub_results);
    egm_free(addr);
    egm_free(len);
    return status;
}

/* An invalid key fails in its own slot (INVALID_KEY); the others are fetched. */
static egm_status_t get_batch_untimed(egm_client_t *client, const get_batch_t *b)
{
    size_t n = b->n;
    const char *const *keys = b->keys;
    void **allocated = b->allocated;
    size_t *sizes_p = b->sizes_p;
    egm_status_t *results = b->results;
    size_t n_valid = 0;

    if (client == NULL || (n > 0 && (keys == NULL || results == NULL))) {
        /* A whole-batch refusal fills every result, as the other batch calls do. */
        for (size_t i = 0; results != NULL && i < n; i++)
            results[i] = EGM_ERR_INVALID_ARG;
        return egm__set_error(EGM_ERR_INVALID_ARG, "client, keys and results must not be NULL");
    }
    for (size_t i = 0; i < n; i++) {
        results[i] = egm__client_validate_key(keys[i]);
        n_valid += results[i] == EGM_OK;
        if (sizes_p != NULL)
            sizes_p[i] = 0;
        if (allocated != NULL)
            allocated[i] = NULL;
    }
    if (n_valid == n)
        return n == 0 ? EGM_OK : get_checked(client, b);
    if (n_valid == 0 || b->parts == NULL) /* egm_get: one key */
        return EGM_OK;
    return get_valid_subset(client, b, n_valid);
}

static egm_status_t get_batch(egm_client_t *client, const get_batch_t *b)
{
    uint64_t t0 = egm__now_ns();
    egm_status_t status = get_batch_untimed(client, b);
    if (client != NULL)
        egm__phase_add(&client->phases, EGM_OP_GET, EGM_PHASE_CALL, t0);
    return status;
}

egm_status_t egm_get(egm_client_t *client, const char *key, void **data_p, size_t *len_p)
{
    egm_status_t result;
    size_t size = 0;
    void *data = NULL;

    if (data_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "data_p must not be NULL");
    egm_status_t status = get_batch(
        client,
        &(get_batch_t){
            .n = 1, .keys = &key, .allocated = &data, .sizes_p = &size, .results = &result});
    if (status == EGM_OK)
        status = result;
    *data_p = status == EGM_OK ? data : NULL;
    if (len_p != NULL)
        *len_p = status == EGM_OK ? size : 0;
    return status;
}

void egm_buffer_free(void *data)
{
    egm_free(data);
}

egm_status_t egm_get_into(egm_client_t *client, const char *key, void *dst, size_t cap,
                          size_t *len_p)
{
    egm_status_t result;
    size_t size = 0;
    egm_parts_t parts;
    egm__parts_init(&parts, 1, NULL, &dst, &cap);
    egm_status_t status = get_batch(
        client, &(get_batch_t){
                    .n = 1, .keys = &key, .parts = &parts, .sizes_p = &size, .results = &result});
    if (len_p != NULL)
        *len_p = size;
    return status != EGM_OK ? status : result;
}

egm_status_t egm_batch_get_into(egm_client_t *client, size_t n, const char *const *keys,
                                void *const *dsts, const size_t *caps, size_t *sizes_p,
                                egm_status_t *results)
{
    egm_parts_t parts;

    if (n > 0 && (dsts == NULL || caps == NULL))
        return egm__parts_fail_all(
            results, n, egm__set_error(EGM_ERR_INVALID_ARG, "dsts and caps must not be NULL"));
    egm__parts_init(&parts, n, NULL, dsts, caps);
    return get_batch(
        client, &(get_batch_t){
                    .n = n, .keys = keys, .parts = &parts, .sizes_p = sizes_p, .results = results});
}

egm_status_t egm_batch_get_into_parts(egm_client_t *client, size_t n, const char *const *keys,
                                      const size_t *part_counts, void *const *part_addrs,
                                      const size_t *part_lens, size_t *sizes_p,
                                      egm_status_t *results)
{
    egm_parts_t parts;
    egm_status_t status;

    if (n > 0 && (part_counts == NULL || part_addrs == NULL || part_lens == NULL))
        return egm__parts_fail_all(
            results, n,
            egm__set_error(EGM_ERR_INVALID_ARG,
                           "part_counts, part_addrs and part_lens must not be NULL"));
    status = egm__parts_init(&parts, n, part_counts, part_addrs, part_lens);
    if (status != EGM_OK)
        return egm__parts_fail_all(results, n, status);
    status = get_batch(
        client, &(get_batch_t){
                    .n = n, .keys = keys, .parts = &parts, .sizes_p = sizes_p, .results = results});
    egm__parts_free(&parts);
    return status;
}
