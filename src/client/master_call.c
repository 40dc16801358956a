/* Object calls to the master shared by put, get and the metadata calls. */
#include <string.h>
#include "client/client_int.h"
#include "client/slabs.h"
#include "common/alloc.h"
#include "common/log.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

egm_status_t egm__client_validate_key(const char *key)
{
    if (key == NULL)
        return egm__set_error(EGM_ERR_INVALID_KEY, "key must not be NULL");
    size_t len = strnlen(key, EGM_KEY_MAX + 1);
    if (len == 0 || len > EGM_KEY_MAX)
        return egm__set_error(EGM_ERR_INVALID_KEY, "key length must be 1..%d bytes", EGM_KEY_MAX);
    return EGM_OK;
}

egm_status_t egm__client_keys_rpc(egm_client_t *client, uint16_t type, const ProtobufCMessage *req,
                                  size_t n, egm_keys_reply_t **reply_p)
{
    uint8_t *bytes = NULL;
    size_t bytes_len = 0;

    *reply_p = NULL;
    uint64_t t0 = egm__now_ns();
    egm_status_t status =
        egm__rpc_call_pb(client->master, type, req, &bytes, &bytes_len, client->rpc_timeout_ms);
    if (type == EGM_RPC_PUT_START || type == EGM_RPC_PUT_END || type == EGM_RPC_PUT_REVOKE)
        egm__phase_add(&client->phases, EGM_OP_PUT, EGM_PHASE_RPC, t0);
    else if (type == EGM_RPC_GET_REPLICA_LIST)
        egm__phase_add(&client->phases, EGM_OP_GET, EGM_PHASE_RPC, t0);
    if (status != EGM_OK)
        return status;
    /* More results than keys is refused while decoding, before any allocation. */
    status = egm__keys_reply_decode(bytes, bytes_len, n, reply_p);
    if (status != EGM_OK) {
        egm_warn("client: %s reply: %s", egm__rpc_type_name(type), egm_last_error());
        return status;
    }
    status = egm__client_check_reply(*reply_p, n);
    if (status != EGM_OK) {
        egm__keys_reply_free(*reply_p);
        *reply_p = NULL;
    }
    return status;
}

/* Bytes a Remove's removal entries need per key (remove_logged). */
#define REMOVE_LOG_PER_KEY                                                                         \
    (3 * sizeof(uint64_t) + sizeof(egm_own_place_t) + sizeof(Egm__Id) + sizeof(Egm__Id *))

/* A plain Remove that first writes its removal entries into one of this
 * client's slab logs (client/slabs.h egm__wslabs_log_removals): the master
 * may then answer it without waiting for its standbys (docs/ha.md "Removes
 * the pool describes"). */
static egm_status_t remove_logged(egm_client_t *client, Egm__KeysRequest *req, size_t n,
                                  const char *const *keys, egm_keys_reply_t **reply_p)
{
    /* Per key: its entry's seq, a torn one's, its object's offset as sent,
     * its place, and its segment as sent. */
    uint64_t few[(16 * REMOVE_LOG_PER_KEY + 7) / 8];
    void *mem = n <= 16 ? few : egm_malloc(n * REMOVE_LOG_PER_KEY, "client.remove_log");
    if (mem == NULL) /* a Remove without them */
        return egm__client_keys_rpc(client, EGM_RPC_REMOVE, &req->base, n, reply_p);
    uint64_t *seqs = mem, *torn = seqs + n, *offsets = torn + n;
    egm_wslab_removal_t rm = {.places = (egm_own_place_t *)(offsets + n)};
    Egm__Id *ids = (Egm__Id *)(rm.places + n);
    Egm__Id **id_ptrs = (Egm__Id **)(ids + n);
    egm__wslabs_log_removals(client, n, keys, &rm, seqs, torn);
    int any_torn = 0, any_whole = 0;
    for (size_t i = 0; i < n; i++) {
        any_torn |= torn[i] != 0;
        any_whole |= seqs[i] != 0;
    }
    if (rm.slab != NULL && (any_whole || any_torn)) {
        req->log_slab = egm__wslab_id(rm.slab);
        req->n_log_seqs = any_whole ? n : 0;
        req->log_seqs = seqs;
        req->n_torn_log_seqs = any_torn ? n : 0;
        req->torn_log_seqs = torn;
        for (size_t i = 0; i < n; i++) {
            egm__id_to_pb(rm.places[i].segment, &ids[i]);
            id_ptrs[i] = &ids[i];
            offsets[i] = rm.places[i].offset;
        }
        req->n_log_segments = req->n_log_offsets = n;
        req->log_segments = id_ptrs;
        req->log_offsets = offsets;
    }
    egm_status_t status = egm__client_keys_rpc(client, EGM_RPC_REMOVE, &req->base, n, reply_p);
    /* Answered: the master noted every entry (a whole-request refusal did not). */
    egm__wslabs_removed(client, &rm, n, keys, seqs, torn, status == EGM_OK);
    if (mem != few)
        egm_free(mem);
    return status;
}

egm_status_t egm__client_keys_call(egm_client_t *client, uint16_t type, size_t n,
                                   const char *const *keys, unsigned flags,
                                   egm_keys_reply_t **reply_p)
{
    Egm__KeysRequest req = EGM__KEYS_REQUEST__INIT;
    Egm__Id client_pb = EGM__ID__INIT;

    *reply_p = NULL;
    if (n > EGM_BATCH_KEYS_PER_CALL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "a batch holds at most %d keys, got %zu",
                              EGM_BATCH_KEYS_PER_CALL, n);
    egm__id_to_pb(client->id, &client_pb);
    req.client = &client_pb;
    req.n_keys = n;
    req.keys = (char **)keys;
    req.force = (flags & EGM_KEYS_CALL_FORCE) != 0;
    if (type == EGM_RPC_REMOVE && !req.force && egm__wslabs_on(client->slabs))
        return remove_logged(client, &req, n, keys, reply_p);
    if (type == EGM_RPC_REMOVE) /* forced: its objects' places go with them */
        egm__wslabs_forget_places(client->slabs, n, keys);
    /* Locations are asked for only where they can be kept and are worth it. */
    req.locations = (flags & EGM_KEYS_CALL_LOCATIONS) != 0 && client->locations != NULL &&
                    n <= EGM_LOOKUP_LOCATIONS_MAX;
    if (!req.locations)
        return egm__client_keys_rpc(client, type, &req.base, n, reply_p);
    uint64_t generation = egm__location_cache_generation(client->locations);
    uint64_t asked_ms = egm__now_ms();
    egm_status_t status = egm__client_keys_rpc(client, type, &req.base, n, reply_p);
    egm_segment_desc_t *descs = NULL;
    if (status == EGM_OK && egm__client_reply_segments(*reply_p, &descs) == EGM_OK) {
        /* A batch is kept whole (its get comes as a batch); one key as an entry. */
        if (n >= 2)
            egm__location_cache_keep_lookup(client->locations, n, keys, *reply_p, descs,
                                            (*reply_p)->n_segments, asked_ms, generation);
        else
            egm__location_cache_remember(client->locations, n, keys, *reply_p, descs,
                                         (*reply_p)->n_segments, asked_ms, generation);
        egm_free(descs);
    }
    return status;
}

egm_status_t egm__client_check_reply(const egm_keys_reply_t *reply, size_t n)
{
    if (reply->status != EGM_OK)
        return egm__set_error(reply->status, "master refused the request: %s",
                              egm_status_string(reply->status));
    if (reply->n_results != n)
        return egm__set_error(EGM_ERR_PROTOCOL, "master answered %zu results for %zu keys",
                              reply->n_results, n);
    return EGM_OK;
}

egm_status_t egm__client_reply_segments(const egm_keys_reply_t *reply, egm_segment_desc_t **descs_p)
{
    egm_segment_desc_t *descs = NULL;
    egm_status_t status = EGM_OK;

    *descs_p = NULL;
    if (reply->n_segments == 0)
        return EGM_OK;
    descs = egm_malloc(reply->n_segments * sizeof(*descs), "client.reply_segments");
    if (descs == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory decoding segments");
    /* A reply names a few segments, mostly the same ones as the last replies:
     * decoded once, then taken from the cache of decoded descriptors. */
    for (size_t i = 0; i < reply->n_segments && status == EGM_OK; i++)
        status =
            egm__segment_desc_decode(reply->segments[i].data, reply->segments[i].len, &descs[i]);
    if (status != EGM_OK) {
        egm_free(descs);
        return status;
    }
    *descs_p = descs;
    return EGM_OK;
}

egm_status_t egm__client_list_segments(egm_client_t *client, Egm__ListSegmentsReply **reply_p)
{
    Egm__ListSegmentsRequest req = EGM__LIST_SEGMENTS_REQUEST__INIT;
    Egm__Id client_pb = EGM__ID__INIT;

    egm__id_to_pb(client->id, &client_pb);
    req.client = &client_pb;
    egm_status_t status = egm__rpc_call_msg(client->master, EGM_RPC_LIST_SEGMENTS, &req.base,
                                            &egm__list_segments_reply__descriptor,
                                            (ProtobufCMessage **)reply_p, client->rpc_timeout_ms);
    if (status == EGM_OK && (*reply_p)->status != EGM_OK) {
        status = egm__set_error((*reply_p)->status, "listing segments: %s",
                                egm_status_string((*reply_p)->status));
        egm__rpc_msg_free(&(*reply_p)->base);
        *reply_p = NULL;
    }
    return status;
}
