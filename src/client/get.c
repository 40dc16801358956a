/* Get: GetReplicaList (grants a read lease) -> copy from the best replica,
 * falling back to the others -> check the lease still held when the copy ended. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "client/client_int.h"
#include "client/pipeline.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

typedef struct {
    const egm_key_result_t *res;
    const egm_replica_t *replicas; /* res's */
    size_t caller;                 /* index in the caller's arrays */
    size_t order[16];              /* replicas by preference (local, shm, tcp) */
    size_t n_order;
    size_t next; /* next replica to try */
    void *dst;
} fetch_t;

static void order_replicas(egm_client_t *client, fetch_t *f, const egm_segment_desc_t *descs,
                           size_t n_descs)
{
    int rank[16];

    f->n_order = 0;
    for (size_t r = 0; r < f->res->n_replicas && f->n_order < 16; r++) {
        const egm_segment_desc_t *seg =
            egm__client_find_segment(descs, n_descs, f->replicas[r].segment);
        egm_transport_t transport;
        egm_te_op_t probe = {.segment = seg,
                             .offset = f->replicas[r].offset,
                             .local = f->dst,
                             .length = f->res->size,
                             .dir = EGM_TE_READ};
        if (seg == NULL || egm__te_route_op(client->te, &probe, &transport) != EGM_OK)
            continue;
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

/* One round: for every fetch that still needs data, try its next replica. */
static size_t plan_round(fetch_t *fetches, size_t n, const egm_segment_desc_t *descs,
                         size_t n_descs, egm_te_op_t *ops, size_t *op_fetch)
{
    size_t n_ops = 0;
    for (size_t j = 0; j < n; j++) {
        fetch_t *f = &fetches[j];
        if (f->dst == NULL || f->next >= f->n_order)
            continue;
        const egm_replica_t *rep = &f->replicas[f->order[f->next++]];
        ops[n_ops] =
            (egm_te_op_t){.segment = egm__client_find_segment(descs, n_descs, rep->segment),
                          .offset = rep->offset,
                          .local = f->dst,
                          .length = f->res->size,
                          .dir = EGM_TE_READ};
        op_fetch[n_ops++] = j;
    }
    return n_ops;
}

/* Copies the keys of one GetReplicaList reply (owned, freed here); started_ms
 * is when the lease was asked for. dsts NULL: allocate each object (egm_get);
 * else copy into dsts[i] of caps[i]. */
static egm_status_t fetch_reply(egm_client_t *client, size_t n, const char *const *keys,
                                void *const *dsts, const size_t *caps, void **allocated,
                                size_t *sizes_p, egm_status_t *results, egm_keys_reply_t *reply,
                                uint64_t started_ms)
{
    egm_segment_desc_t *descs = NULL;
    fetch_t *fetches = NULL;
    egm_te_op_t *ops = NULL;
    size_t *op_fetch = NULL;
    int *acquired = NULL;
    egm_status_t status;

    status = egm__client_reply_segments(reply, &descs);
    if (status != EGM_OK)
        goto out;
    fetches = egm_calloc(n, sizeof(*fetches), "client.get");
    ops = egm_calloc(n, sizeof(*ops), "client.get");
    op_fetch = egm_calloc(n, sizeof(*op_fetch), "client.get");
    acquired = egm_calloc(n, sizeof(*acquired), "client.get");
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
        if (dsts == NULL) {
            allocated[i] = egm_malloc(f->res->size ? f->res->size : 1, "client.get_buffer");
            if (allocated[i] == NULL) {
                results[i] = egm__set_error(EGM_ERR_NO_MEMORY, "no memory for %llu bytes",
                                            (unsigned long long)f->res->size);
                continue;
            }
            f->dst = allocated[i];
        } else if (caps[i] < f->res->size) {
            results[i] = egm__set_error(EGM_ERR_BUFFER_TOO_SMALL,
                                        "\"%s\" has %llu bytes, the buffer holds %zu", keys[i],
                                        (unsigned long long)f->res->size, caps[i]);
            continue;
        } else {
            results[i] = egm__registry_acquire(client->registry, dsts[i], f->res->size);
            if (results[i] != EGM_OK)
                continue;
            acquired[i] = 1;
            f->dst = dsts[i];
        }
        order_replicas(client, f, descs, reply->n_segments);
        if (f->n_order == 0) {
            results[i] = egm__set_error(EGM_ERR_UNREACHABLE,
                                        "no replica of \"%s\" is reachable with protocol %s",
                                        keys[i], egm_config_get(client->config, "protocol"));
            f->dst = NULL;
        } else {
            results[i] = EGM_ERR_TRANSFER;
        }
    }

    /* Each round tries the next replica of every key whose last try failed. */
    for (;;) {
        size_t n_ops = plan_round(fetches, n, descs, reply->n_segments, ops, op_fetch);
        if (n_ops == 0)
            break;
        egm__te_transfer(client->te, ops, n_ops);
        for (size_t k = 0; k < n_ops; k++) {
            fetch_t *f = &fetches[op_fetch[k]];
            results[f->caller] = ops[k].status;
            if (ops[k].status == EGM_OK)
                f->dst = NULL; /* done */
        }
    }

    /* The lease protected the replicas only until it ran out. */
    uint64_t ended_ms = egm__now_ms();
    for (size_t i = 0; i < n; i++)
        if (results[i] == EGM_OK && ended_ms > started_ms + fetches[i].res->lease_ttl_ms)
            results[i] = egm__set_error(EGM_ERR_LEASE_EXPIRED,
                                        "\"%s\": the read lease ran out during the copy", keys[i]);
out:
    for (size_t i = 0; i < n; i++) {
        if (acquired != NULL && acquired[i])
            egm__registry_release(client->registry, dsts[i]);
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

/* Large batches run in chunks whose GetReplicaList calls a helper thread makes
 * ahead of the copies (pipeline.h). */
typedef struct {
    egm_client_t *client;
    const char *const *keys;
    size_t n;
} get_pipeline_t;

static egm_status_t get_ahead(void *arg, size_t k, void **reply_p)
{
    get_pipeline_t *g = arg;
    egm_keys_reply_t *reply = NULL;
    egm_status_t status =
        egm__client_keys_call(g->client, EGM_RPC_GET_REPLICA_LIST, egm__pipeline_chunk_len(g->n, k),
                              g->keys + egm__pipeline_chunk_first(k), 0, &reply);
    *reply_p = reply;
    return status;
}

/* Copiers of one pipelined get: the caller and EGM_GET_COPY_WORKERS - 1
 * threads, each taking every EGM_GET_COPY_WORKERS-th chunk. A chunk's client
 * work (segments, replica order, registry, routing, copy descriptors: ~80 ns a
 * key) would otherwise leave the GPU idle between chunks; with two, one plans
 * while the other's copy runs (the copier serialises the copies themselves). */
#define EGM_GET_COPY_WORKERS 2

typedef struct {
    egm_client_t *client;
    egm_pipeline_t *p;
    size_t n, n_chunks, start;
    const char *const *keys;
    void *const *dsts;
    const size_t *caps;
    size_t *sizes_p;
    egm_status_t *results;
    egm_status_t status; /* of the lowest failed chunk */
    size_t failed_chunk;
    char error[256];
    pthread_t thread;
} get_copier_t;

static void copy_chunks(get_copier_t *w)
{
    w->status = EGM_OK;
    for (size_t k = w->start; k < w->n_chunks; k += EGM_GET_COPY_WORKERS) {
        size_t first = egm__pipeline_chunk_first(k), len = egm__pipeline_chunk_len(w->n, k);
        void *reply;
        uint64_t started_ms;
        egm_status_t st = egm__pipeline_wait(w->p, k, &reply, &started_ms);
        if (st == EGM_OK) {
            st = fetch_reply(w->client, len, w->keys + first, w->dsts + first, w->caps + first,
                             NULL, w->sizes_p ? w->sizes_p + first : NULL, w->results + first,
                             reply, started_ms);
        } else {
            for (size_t i = 0; i < len; i++)
                w->results[first + i] = st;
        }
        egm__pipeline_release(w->p, k, NULL, 0);
        if (w->status == EGM_OK && st != EGM_OK) {
            w->status = st;
            w->failed_chunk = k;
            snprintf(w->error, sizeof(w->error), "%s", egm_last_error());
        }
    }
}

static void *copy_main(void *arg)
{
    copy_chunks(arg);
    return NULL;
}

static egm_status_t get_pipelined(egm_client_t *client, size_t n, const char *const *keys,
                                  void *const *dsts, const size_t *caps, size_t *sizes_p,
                                  egm_status_t *results)
{
    get_pipeline_t g = {.client = client, .keys = keys, .n = n};
    size_t n_chunks = egm__pipeline_n_chunks(n);
    get_copier_t workers[EGM_GET_COPY_WORKERS];
    int started[EGM_GET_COPY_WORKERS] = {0};
    egm_pipeline_t *p;
    egm_status_t status = egm__pipeline_start(n_chunks, get_ahead, NULL, &g, &p);

    if (status != EGM_OK)
        return status;
    for (size_t t = 0; t < EGM_GET_COPY_WORKERS; t++)
        workers[t] = (get_copier_t){.client = client,
                                    .p = p,
                                    .n = n,
                                    .n_chunks = n_chunks,
                                    .start = t,
                                    .keys = keys,
                                    .dsts = dsts,
                                    .caps = caps,
                                    .sizes_p = sizes_p,
                                    .results = results};
    /* A worker that cannot start has its chunks copied by the caller. */
    for (size_t t = 1; t < EGM_GET_COPY_WORKERS && t < n_chunks; t++)
        started[t] = pthread_create(&workers[t].thread, NULL, copy_main, &workers[t]) == 0;
    copy_chunks(&workers[0]);
    for (size_t t = 1; t < EGM_GET_COPY_WORKERS && t < n_chunks; t++) {
        if (started[t])
            pthread_join(workers[t].thread, NULL);
        else
            copy_chunks(&workers[t]);
    }
    egm__pipeline_finish(p);

    const get_copier_t *failed = NULL;
    for (size_t t = 0; t < EGM_GET_COPY_WORKERS && t < n_chunks; t++)
        if (workers[t].status != EGM_OK &&
            (failed == NULL || workers[t].failed_chunk < failed->failed_chunk))
            failed = &workers[t];
    if (failed == NULL)
        return EGM_OK;
    return egm__set_error(failed->status, "%s", failed->error);
}

static egm_status_t get_batch(egm_client_t *client, size_t n, const char *const *keys,
                              void *const *dsts, const size_t *caps, void **allocated,
                              size_t *sizes_p, egm_status_t *results)
{
    egm_keys_reply_t *reply = NULL;
    egm_status_t status;

    if (client == NULL || (n > 0 && (keys == NULL || results == NULL)))
        return egm__set_error(EGM_ERR_INVALID_ARG, "client, keys and results must not be NULL");
    for (size_t i = 0; i < n; i++) {
        results[i] = egm__client_validate_key(keys[i]);
        if (results[i] != EGM_OK)
            return egm__set_error(results[i], "key %zu: %s", i, egm_last_error());
        if (sizes_p != NULL)
            sizes_p[i] = 0;
        if (allocated != NULL)
            allocated[i] = NULL;
    }
    if (n == 0)
        return EGM_OK;
    if (n >= EGM_PIPELINE_MIN_KEYS && dsts != NULL)
        return get_pipelined(client, n, keys, dsts, caps, sizes_p, results);

    uint64_t started_ms = egm__now_ms();
    status = egm__client_keys_call(client, EGM_RPC_GET_REPLICA_LIST, n, keys, 0, &reply);
    if (status != EGM_OK) {
        for (size_t i = 0; i < n; i++)
            results[i] = status;
        return status;
    }
    return fetch_reply(client, n, keys, dsts, caps, allocated, sizes_p, results, reply, started_ms);
}

egm_status_t egm_get(egm_client_t *client, const char *key, void **data_p, size_t *len_p)
{
    egm_status_t result;
    size_t size = 0;
    void *data = NULL;

    if (data_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "data_p must not be NULL");
    egm_status_t status = get_batch(client, 1, &key, NULL, NULL, &data, &size, &result);
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
    egm_status_t status = get_batch(client, 1, &key, &dst, &cap, NULL, &size, &result);
    if (len_p != NULL)
        *len_p = size;
    return status != EGM_OK ? status : result;
}

egm_status_t egm_batch_get_into(egm_client_t *client, size_t n, const char *const *keys,
                                void *const *dsts, const size_t *caps, size_t *sizes_p,
                                egm_status_t *results)
{
    if (n > 0 && (dsts == NULL || caps == NULL))
        return egm__set_error(EGM_ERR_INVALID_ARG, "dsts and caps must not be NULL");
    return get_batch(client, n, keys, dsts, caps, NULL, sizes_p, results);
}
