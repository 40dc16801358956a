/* Metadata calls: exist, size, remove, remove_all. */
#include "client/client_int.h"
#include "client/parts.h"
#include "client/slabs.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

/* One key through a keys call; its per-key result (and size) out. */
static egm_status_t single_key_call(egm_client_t *client, uint16_t type, const char *key,
                                    unsigned flags, uint64_t *size_p, uint64_t *wait_ms_p)
{
    egm_keys_reply_t *reply = NULL;
    egm_status_t status;

    if (client == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "client must not be NULL");
    status = egm__client_validate_key(key);
    if (status != EGM_OK)
        return status;
    status = egm__client_keys_call(client, type, 1, &key, flags, &reply);
    if (status != EGM_OK)
        return status;
    status = reply->results[0].status;
    if (size_p != NULL)
        *size_p = reply->results[0].size;
    if (wait_ms_p != NULL)
        *wait_ms_p = reply->wait_ms;
    if (status != EGM_OK)
        egm__set_error(status, "\"%s\": %s", key, egm_status_string(status));
    egm__keys_reply_free(reply);
    return status;
}

egm_status_t egm_exist(egm_client_t *client, const char *key)
{
    return single_key_call(client, EGM_RPC_EXIST_KEY, key, EGM_KEYS_CALL_LOCATIONS, NULL, NULL);
}

egm_status_t egm_size(egm_client_t *client, const char *key, uint64_t *size_p)
{
    if (size_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "size_p must not be NULL");
    return single_key_call(client, EGM_RPC_GET_REPLICA_LIST, key, EGM_KEYS_CALL_PLAIN, size_p,
                           NULL);
}

/* The master did not answer: how long a force remove waits is unknown. */
#define WAIT_UNKNOWN UINT64_MAX

/* A FORCE remove returns only once every location another client may have
 * cached of the objects it removed, or of any object force-removed before,
 * has run out (docs/consistency.md): the master says how long that is
 * (wait_ms), NOT_FOUND answers included (a remover that got there first may
 * have returned already, or a retried call's first try removed the key).
 * Without an answer the master may still have removed them: the longest bound
 * any master told. A plain remove takes only objects without a live lease,
 * whose cached locations have run out already. */
static void force_wait(egm_client_t *client, uint64_t wait_ms)
{
    egm__sleep_ms(wait_ms != WAIT_UNKNOWN ? wait_ms : atomic_load(&client->cache_bound_max_ms));
}

egm_status_t egm_remove(egm_client_t *client, const char *key, int force)
{
    uint64_t wait_ms = WAIT_UNKNOWN;
    egm_status_t status =
        single_key_call(client, EGM_RPC_REMOVE, key,
                        force ? EGM_KEYS_CALL_FORCE : EGM_KEYS_CALL_PLAIN, NULL, &wait_ms);
    if (client == NULL || egm__client_validate_key(key) != EGM_OK)
        return status; /* refused before asking the master */
    egm__location_cache_drop(client->locations, key);
    if (force)
        force_wait(client, wait_ms);
    return status;
}

egm_status_t egm_remove_all(egm_client_t *client, int force, uint64_t *removed_p)
{
    Egm__RemoveAllRequest req = EGM__REMOVE_ALL_REQUEST__INIT;
    Egm__Id client_pb = EGM__ID__INIT;
    Egm__RemoveAllReply *reply = NULL;
    egm_status_t status;

    if (client == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "client must not be NULL");
    egm__id_to_pb(client->id, &client_pb);
    req.client = &client_pb;
    req.force = force != 0;
    status = egm__rpc_call_msg(client->master, EGM_RPC_REMOVE_ALL, &req.base,
                               &egm__remove_all_reply__descriptor, (ProtobufCMessage **)&reply,
                               client->rpc_timeout_ms);
    uint64_t wait_ms = WAIT_UNKNOWN;
    if (status == EGM_OK) {
        status = reply->status;
        if (removed_p != NULL)
            *removed_p = reply->removed;
        wait_ms = reply->wait_ms;
        egm__rpc_msg_free(&reply->base);
    }
    egm__wslabs_forget_places(client->slabs, 0, NULL);
    egm__location_cache_clear(client->locations);
    if (force) /* as egm_remove */
        force_wait(client, wait_ms);
    return status;
}

/* A keys call over a whole batch: results[i] is key i's answer; an invalid
 * key fails in its own slot (INVALID_KEY) and the others are sent, in calls of
 * at most EGM_BATCH_KEYS_PER_CALL keys (what one request may carry). A call
 * that fails whole answers its status for each of its keys; the first such
 * status is returned. *wait_ms_p: the longest wait of the calls answered. */
static egm_status_t batch_keys_call(egm_client_t *client, uint16_t type, size_t n,
                                    const char *const *keys, unsigned flags, egm_status_t *results,
                                    uint64_t *wait_ms_p)
{
    const char **valid = NULL;
    size_t n_valid = 0;
    egm_status_t first_error = EGM_OK;

    if (client == NULL || (n > 0 && (keys == NULL || results == NULL)))
        return egm__parts_fail_all(
            results, n,
            egm__set_error(EGM_ERR_INVALID_ARG, "client, keys and results must not be NULL"));
    for (size_t i = 0; i < n; i++) {
        results[i] = egm__client_validate_key(keys[i]);
        n_valid += results[i] == EGM_OK;
    }
    if (n_valid == 0)
        return EGM_OK;
    if (n_valid < n) {
        valid = egm_calloc(n_valid, sizeof(*valid), "client.keys_call");
        if (valid == NULL)
            return egm__parts_fail_all(
                results, n, egm__set_error(EGM_ERR_NO_MEMORY, "out of memory sending %zu keys", n));
        for (size_t i = 0, k = 0; i < n; i++)
            if (results[i] == EGM_OK)
                valid[k++] = keys[i];
    }
    const char **send = valid ? valid : (const char **)keys;
    uint64_t wait_ms = 0;
    int answered = 0;
    /* i walks results: the valid keys' slots still hold EGM_OK, in order */
    for (size_t off = 0, i = 0; off < n_valid; off += EGM_BATCH_KEYS_PER_CALL) {
        size_t m =
            n_valid - off < EGM_BATCH_KEYS_PER_CALL ? n_valid - off : EGM_BATCH_KEYS_PER_CALL;
        egm_keys_reply_t *reply = NULL;
        egm_status_t status = egm__client_keys_call(client, type, m, send + off, flags, &reply);
        for (size_t k = 0; k < m; i++) {
            if (results[i] != EGM_OK)
                continue; /* an invalid key */
            results[i] = status == EGM_OK ? reply->results[k].status : status;
            k++;
        }
        if (status == EGM_OK) {
            answered = 1;
            if (reply->wait_ms > wait_ms)
                wait_ms = reply->wait_ms;
        } else if (first_error == EGM_OK) {
            first_error = status;
        }
        egm__keys_reply_free(reply);
    }
    if (wait_ms_p != NULL && answered)
        *wait_ms_p = wait_ms;
    egm_free(valid);
    return first_error;
}

egm_status_t egm_batch_exist(egm_client_t *client, size_t n, const char *const *keys,
                             egm_status_t *results)
{
    return batch_keys_call(client, EGM_RPC_EXIST_KEY, n, keys, EGM_KEYS_CALL_LOCATIONS, results,
                           NULL);
}

egm_status_t egm_batch_remove(egm_client_t *client, size_t n, const char *const *keys, int force,
                              egm_status_t *results)
{
    uint64_t wait_ms = WAIT_UNKNOWN;
    egm_status_t status =
        batch_keys_call(client, EGM_RPC_REMOVE, n, keys,
                        force ? EGM_KEYS_CALL_FORCE : EGM_KEYS_CALL_PLAIN, results, &wait_ms);
    if (client == NULL || keys == NULL || results == NULL)
        return status;
    int sent = 0; /* a key that reached the master (an invalid one did not) */
    for (size_t i = 0; i < n; i++) {
        if (keys[i] == NULL || egm__client_validate_key(keys[i]) != EGM_OK)
            continue;
        egm__location_cache_drop(client->locations, keys[i]);
        sent = 1;
    }
    if (force && sent)
        force_wait(client, wait_ms);
    return status;
}
