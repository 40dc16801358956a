/* Read-only questions to the master for the tools. */
#include "client/inspect.h"

#include "client/client_int.h"
#include "common/log.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

egm_status_t egm__client_stat(egm_client_t *client, const char *key, Egm__StatKeyReply **reply_p)
{
    Egm__StatKeyRequest req = EGM__STAT_KEY_REQUEST__INIT;
    Egm__Id client_pb = EGM__ID__INIT;

    if (reply_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "reply_p must not be NULL");
    *reply_p = NULL;
    if (client == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "client must not be NULL");
    egm_status_t status = egm__client_validate_key(key);
    if (status != EGM_OK)
        return status;
    egm__id_to_pb(client->id, &client_pb);
    req.client = &client_pb;
    req.key = (char *)key;
    return egm__rpc_call_msg(client->master, EGM_RPC_STAT_KEY, &req.base,
                             &egm__stat_key_reply__descriptor, (ProtobufCMessage **)reply_p,
                             client->rpc_timeout_ms);
}
