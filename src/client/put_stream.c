/* Streaming put: an object written to its replicas part by part through one
 * bounce buffer, so that storing it needs one part of memory, not the object
 * (client_int.h). PutStart -> read a part, write it to every replica -> ...
 * -> PutEnd; any failure -> PutRevoke. */
#include <stdio.h>
#include <string.h>
#include "client/client_int.h"
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/log.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

egm_status_t egm__client_pool_capacity(egm_client_t *client, uint64_t *total_p, uint64_t *largest_p,
                                       size_t *segments_p)
{
    Egm__ListSegmentsReply *reply = NULL;
    uint64_t total = 0, largest = 0;
    size_t n = 0;

    egm_status_t status = egm__client_list_segments(client, &reply);
    if (status != EGM_OK)
        return status;
    for (size_t i = 0; i < reply->n_segments; i++) {
        const Egm__SegmentDesc *d = reply->segments[i]->desc;
        if (d == NULL)
            continue;
        total += d->size;
        largest = d->size > largest ? d->size : largest;
        n++;
    }
    *total_p = total;
    *largest_p = largest;
    *segments_p = n;
    egm__rpc_msg_free(&reply->base);
    return EGM_OK;
}

/* Why PutStart answered NO_SPACE for `size`, when the cause is the pool's
 * shape: more than the whole pool or than its largest segment (a replica lies
 * in one segment). Asked only after a refusal, so that a put that fits costs
 * the master no ListSegments (which holds its state lock exclusive). Sets the
 * error and answers NO_SPACE when it names the cause; EGM_OK when the size
 * would fit an empty pool (the space is taken) or the pool could not be
 * listed: the caller then says NO_SPACE plainly. */
static egm_status_t explain_no_space(egm_client_t *client, uint64_t size)
{
    uint64_t total = 0, largest = 0;
    size_t n = 0;
    char size_text[32], pool_text[32];

    if (egm__client_pool_capacity(client, &total, &largest, &n) != EGM_OK)
        return EGM_OK;
    egm__format_size(size, size_text, sizeof(size_text));
    if (size > total)
        return egm__set_error(EGM_ERR_NO_SPACE,
                              "%llu bytes (%s) is more than the whole pool: %llu bytes (%s) in "
                              "%zu segments",
                              (unsigned long long)size, size_text, (unsigned long long)total,
                              egm__format_size(total, pool_text, sizeof(pool_text)), n);
    if (size > largest)
        return egm__set_error(EGM_ERR_NO_SPACE,
                              "%llu bytes (%s) is more than the largest segment: %llu bytes (%s); "
                              "a replica is stored in one segment",
                              (unsigned long long)size, size_text, (unsigned long long)largest,
                              egm__format_size(largest, pool_text, sizeof(pool_text)));
    return EGM_OK;
}

/* The placed replicas of the one key of a PutStart reply, checked, as one
 * write op each (segment and offset set; local and length per part). */
static egm_status_t plan_writes(const egm_keys_reply_t *reply, const egm_segment_desc_t *descs,
                                uint64_t size, egm_te_op_t **ops_p, size_t *n_p)
{
    const egm_key_result_t *res = &reply->results[0];
    const egm_segment_desc_t *segs[EGM_KEYS_REPLY_MAX_REPLICAS];

    egm_status_t status = egm__client_placed_segments(reply, res, descs, size, segs);
    if (status != EGM_OK)
        return status;
    egm_te_op_t *ops = egm_calloc(res->n_replicas, sizeof(*ops), "client.put_stream");
    if (ops == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory planning copies");
    for (size_t r = 0; r < res->n_replicas; r++)
        ops[r] = (egm_te_op_t){.segment = segs[r],
                               .offset = egm__keys_reply_replicas(reply, res)[r].offset,
                               .dir = EGM_TE_WRITE};
    *ops_p = ops;
    *n_p = res->n_replicas;
    return EGM_OK;
}

/* Reads the object part by part into buf and writes each part to every
 * replica; release_pages: see egm_put_stream_params_t. */
static egm_status_t copy_parts(egm_client_t *client, uint64_t size, egm_put_read_fn read_part,
                               void *ctx, void *buf, size_t part, egm_te_op_t *ops, size_t n_ops,
                               int release_pages)
{
    uint64_t *base = egm_calloc(n_ops, sizeof(*base), "client.put_stream");
    egm_status_t status = EGM_OK;

    if (base == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory planning copies");
    for (size_t r = 0; r < n_ops; r++)
        base[r] = ops[r].offset;
    for (uint64_t at = 0; at < size && status == EGM_OK; at += part) {
        size_t len = size - at < part ? (size_t)(size - at) : part;
        status = read_part(ctx, buf, len);
        if (status != EGM_OK)
            break;
        for (size_t r = 0; r < n_ops; r++) {
            ops[r].offset = base[r] + at;
            ops[r].local = buf;
            ops[r].length = len;
            ops[r].status = EGM_OK;
        }
        status = egm__te_transfer(client->te, ops, n_ops);
        for (size_t r = 0; release_pages && r < n_ops; r++)
            egm__te_release_pages(client->te, ops[r].segment->id, ops[r].offset, len);
    }
    egm_free(base);
    return status;
}

/* PutRevoke of a placed key; the master discards it later if this fails. */
static void revoke(egm_client_t *client, const char *key)
{
    egm_keys_reply_t *reply = NULL;
    if (egm__client_keys_call(client, EGM_RPC_PUT_REVOKE, 1, &key, EGM_KEYS_CALL_PLAIN, &reply) !=
        EGM_OK)
        egm_warn("PutRevoke of \"%s\" failed: %s; the master discards it later", key,
                 egm_last_error());
    egm__keys_reply_free(reply);
}

egm_status_t egm__put_stream(egm_client_t *client, const char *key, uint64_t size,
                             egm_put_read_fn read_part, void *ctx,
                             const egm_put_stream_params_t *params)
{
    egm_keys_reply_t *start = NULL, *end = NULL;
    egm_segment_desc_t *descs = NULL;
    egm_te_op_t *ops = NULL;
    size_t n_ops = 0;
    void *buf = NULL;
    size_t part = params != NULL && params->part_size > 0 ? params->part_size : EGM_PUT_STREAM_PART;
    char why[512];

    if (client == NULL || read_part == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "client and read_part must not be NULL");
    egm_status_t status = egm__client_validate_key(key);
    if (status != EGM_OK)
        return status;
    if (size == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "value of \"%s\" is empty", key);
    if (part > size)
        part = (size_t)size;
    if ((buf = egm_malloc(part, "client.put_stream_buffer")) == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "no memory for a %zu-byte part", part);

    status =
        egm__client_put_start(client, 1, &key, &size, params != NULL ? params->rc : NULL, &start);
    if (status != EGM_OK)
        goto out;
    if (start->results[0].status != EGM_OK) {
        status = start->results[0].status;
        if (status != EGM_ERR_NO_SPACE || explain_no_space(client, size) == EGM_OK)
            egm__set_error(status, "\"%s\": %s", key, egm_status_string(status));
        goto out; /* not placed: nothing to revoke */
    }
    /* Placed: from here every failure revokes it. */
    status = egm__client_reply_segments(start, &descs);
    if (status == EGM_OK)
        status = plan_writes(start, descs, size, &ops, &n_ops);
    if (status == EGM_OK)
        status = copy_parts(client, size, read_part, ctx, buf, part, ops, n_ops,
                            params != NULL && params->release_pages);
    if (status == EGM_OK) {
        status = egm__client_keys_call(client, EGM_RPC_PUT_END, 1, &key, EGM_KEYS_CALL_PLAIN, &end);
        if (status == EGM_OK && end->results[0].status != EGM_OK)
            status = egm__set_error(end->results[0].status, "PutEnd of \"%s\": %s", key,
                                    egm_status_string(end->results[0].status));
    }
    if (status != EGM_OK) {
        snprintf(why, sizeof(why), "%s", egm_last_error()); /* the revoke may replace it */
        revoke(client, key);
        egm__set_error(status, "%s", why);
    }
out:
    egm__keys_reply_free(end);
    egm__keys_reply_free(start);
    egm_free(ops);
    egm_free(descs);
    egm_free(buf);
    return status;
}
