/* StatKey: what the master knows of one object, for `egmstore stat`. Unlike
 * ExistKey and GetReplicaList it grants no lease and leaves the object's
 * place in the eviction order alone, so looking does not keep it alive. */
#include <string.h>
#include "common/alloc.h"
#include "common/log.h"
#include "master/master_int.h"
#include "rpc/proto_util.h"

egm_status_t egm__master_handle_stat_key(egm_master_state_t *st, egm_master_call_t *call)
{
    const Egm__StatKeyRequest *req = (const Egm__StatKeyRequest *)call->request;
    Egm__StatKeyReply msg = EGM__STAT_KEY_REPLY__INIT;
    Egm__ReplicaInfo *infos = NULL, **info_ptrs = NULL;
    Egm__Id *ids = NULL, writer = EGM__ID__INIT;
    egm_status_t status;

    size_t klen = req->key != NULL ? strnlen(req->key, EGM_MASTER_KEY_MAX + 1) : 0;
    egm_object_view_t obj;
    msg.status = egm__objects_stat(st->objects, req->key, klen, &obj);
    if (msg.status != EGM_OK) {
        msg.error = (char *)egm_last_error();
        goto pack;
    }

    /* A copy taken under the key's shard lock; its segments stay mounted
     * while this handler runs (unmounting takes the state lock exclusive). */
    uint64_t now = st->now_ms();
    if (obj.n_replicas > 0) {
        infos = egm_calloc(obj.n_replicas, sizeof(*infos), "master.reply");
        info_ptrs = egm_calloc(obj.n_replicas, sizeof(*info_ptrs), "master.reply");
        ids = egm_calloc(obj.n_replicas, sizeof(*ids), "master.reply");
        if (infos == NULL || info_ptrs == NULL || ids == NULL) {
            status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory answering StatKey");
            goto out;
        }
    }
    for (uint32_t k = 0; k < obj.n_replicas; k++) {
        const egm_replica_view_t *rep = &obj.replicas[k];
        Egm__ReplicaInfo *info = &infos[msg.n_replicas];
        egm__replica_info__init(info);
        egm__id_to_pb(rep->segment->desc.id, &ids[msg.n_replicas]);
        info->segment = &ids[msg.n_replicas];
        info->segment_name = (char *)rep->segment->desc.name;
        info->host_id = (char *)rep->segment->desc.host_id;
        info->offset = rep->offset;
        info->length = rep->length;
        info_ptrs[msg.n_replicas++] = info;
    }
    egm__id_to_pb(obj.writer, &writer);
    msg.replicas = info_ptrs;
    msg.writer = &writer;
    msg.size = obj.size;
    msg.state = obj.state == EGM_OBJECT_COMPLETE ? EGM__OBJECT_STATE__OBJECT_COMPLETE
                                                 : EGM__OBJECT_STATE__OBJECT_PENDING;
    msg.lease_remaining_ms = obj.lease_expiry_ms > now ? obj.lease_expiry_ms - now : 0;
    msg.soft_pin = obj.soft_pin != 0;
    msg.hard_pin = obj.hard_pin != 0;
    msg.age_ms = now > obj.put_start_ms ? now - obj.put_start_ms : 0;
    msg.idle_ms =
        obj.state == EGM_OBJECT_COMPLETE && now > obj.last_access_ms ? now - obj.last_access_ms : 0;
pack:
    status = egm__pb_pack(&msg.base, &call->reply->buf, &call->reply->len);
out:
    egm_free(infos);
    egm_free(info_ptrs);
    egm_free(ids);
    return status;
}
