/* Capacity a client contributes: allocate the host pool, serve each chunk
 * through the transfer engine, mount it at the master. Any failure unwinds in
 * reverse; unmount withdraws everything before the memory is freed. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "client/client_int.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/sock.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

static egm_status_t status_call(egm_client_t *client, uint16_t type, const ProtobufCMessage *req)
{
    Egm__StatusReply *reply = NULL;
    egm_status_t status =
        egm__rpc_call_msg(client->master, type, req, &egm__status_reply__descriptor,
                          (ProtobufCMessage **)&reply, client->rpc_timeout_ms);
    if (status != EGM_OK)
        return status;
    status = reply->status;
    if (status != EGM_OK)
        egm__set_error(status, "%s", reply->error ? reply->error : "");
    egm__rpc_msg_free(&reply->base);
    return status;
}

static egm_status_t mount_segment(egm_client_t *client, const egm_segment_desc_t *desc)
{
    Egm__MountSegmentRequest req = EGM__MOUNT_SEGMENT_REQUEST__INIT;
    Egm__SegmentDesc seg = EGM__SEGMENT_DESC__INIT;
    Egm__Id client_pb = EGM__ID__INIT, id_pb = EGM__ID__INIT, owner_pb = EGM__ID__INIT;

    egm__id_to_pb(client->id, &client_pb);
    egm__segment_desc_to_pb(desc, &seg, &id_pb, &owner_pb);
    req.client = &client_pb;
    req.segment = &seg;
    return status_call(client, EGM_RPC_MOUNT_SEGMENT, &req.base);
}

static egm_status_t unmount_segment(egm_client_t *client, egm_id_t segment_id)
{
    Egm__UnmountSegmentRequest req = EGM__UNMOUNT_SEGMENT_REQUEST__INIT;
    Egm__Id client_pb = EGM__ID__INIT, id_pb = EGM__ID__INIT;

    egm__id_to_pb(client->id, &client_pb);
    egm__id_to_pb(segment_id, &id_pb);
    req.client = &client_pb;
    req.segment = &id_pb;
    return status_call(client, EGM_RPC_UNMOUNT_SEGMENT, &req.base);
}

static egm_status_t parse_handles(const char *text, egm_vmm_handles_t *handles_p)
{
    if (strcmp(text, "fabric") == 0)
        *handles_p = EGM_VMM_HANDLES_FABRIC;
    else if (strcmp(text, "posix_fd") == 0)
        *handles_p = EGM_VMM_HANDLES_POSIX_FD;
    else
        *handles_p = EGM_VMM_HANDLES_AUTO;
    return EGM_OK;
}

/* Allocates the pool the config asks for; fills cap->count. */
static egm_status_t create_pool(egm_client_t *client, uint64_t total, uint64_t max_chunk)
{
    egm_capacity_t *cap = &client->capacity;
    const char *memory = egm_config_get(client->config, "pool_memory");

    if (strcmp(memory, "host") == 0) {
        egm_status_t status = egm__host_pool_create(total, max_chunk, &cap->pool);
        if (status == EGM_OK)
            cap->count = egm__host_pool_chunk_count(cap->pool);
        return status;
    }
    egm_vmm_pool_params_t params = {
        .location = strcmp(memory, "device") == 0 ? EGM_VMM_DEVICE : EGM_VMM_HOST_NUMA,
        .location_id = (int)egm_config_get_int(client->config, "pool_location"),
        .total = total,
        .max_chunk = max_chunk,
    };
    parse_handles(egm_config_get(client->config, "egm_handle_type"), &params.handles);
    egm_status_t status = egm__vmm_pool_create(&params, &cap->vmm);
    if (status == EGM_OK)
        cap->count = egm__vmm_pool_chunk_count(cap->vmm);
    return status;
}

static egm_status_t expose_chunk(egm_client_t *client, size_t i, egm_segment_desc_t *desc)
{
    egm_capacity_t *cap = &client->capacity;
    if (cap->pool != NULL) {
        const egm_pool_chunk_t *chunk = egm__host_pool_chunk(cap->pool, i);
        desc->size = chunk->size;
        desc->handle_kind = EGM_HANDLE_MEMFD;
        return egm__te_expose_segment(client->te, desc, chunk->base, chunk->memfd);
    }
    const egm_vmm_chunk_t *chunk = egm__vmm_pool_chunk(cap->vmm, i);
    return egm__te_expose_vmm_segment(client->te, desc, chunk->base, chunk->size, chunk->handle,
                                      (egm_handle_kind_t)egm__vmm_chunk_handle_kind(chunk),
                                      chunk->device);
}

egm_status_t egm__capacity_mount(egm_client_t *client, uint64_t total, uint64_t max_chunk)
{
    egm_capacity_t *cap = &client->capacity;
    egm_status_t status;
    char id_text[EGM_ID_STRLEN];

    status = create_pool(client, total, max_chunk);
    if (status != EGM_OK)
        return status;
    cap->segments = egm_calloc(cap->count, sizeof(*cap->segments), "client.segments");
    cap->exposed = egm_calloc(cap->count, sizeof(*cap->exposed), "client.segments");
    cap->mounted = egm_calloc(cap->count, sizeof(*cap->mounted), "client.segments");
    if (cap->segments == NULL || cap->exposed == NULL || cap->mounted == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory describing segments");
        goto err;
    }

    for (size_t i = 0; i < cap->count; i++) {
        egm_segment_desc_t *desc = &cap->segments[i];

        desc->id = egm__id_random();
        desc->owner = client->id;
        snprintf(desc->name, sizeof(desc->name), "%s:%d/%zu", egm__host_name(), (int)getpid(), i);
        status = expose_chunk(client, i, desc);
        if (status != EGM_OK)
            goto err;
        cap->exposed[i] = 1;
        status = mount_segment(client, desc);
        if (status != EGM_OK) {
            egm_error("mounting segment %s (%s) failed: %s", desc->name,
                      egm__id_format(desc->id, id_text), egm_last_error());
            goto err;
        }
        cap->mounted[i] = 1;
        egm_info("mounted segment %s id %s size %llu memory %s tcp %s shm %s", desc->name,
                 egm__id_format(desc->id, id_text), (unsigned long long)desc->size,
                 egm_config_get(client->config, "pool_memory"),
                 desc->tcp_endpoint[0] ? desc->tcp_endpoint : "-",
                 desc->shm_socket[0] ? desc->shm_socket : "-");
    }
    return EGM_OK;

err:
    egm__capacity_unmount(client);
    return status;
}

void egm__capacity_unmount(egm_client_t *client)
{
    egm_capacity_t *cap = &client->capacity;
    char id_text[EGM_ID_STRLEN];

    for (size_t i = cap->count; i-- > 0;) {
        egm_segment_desc_t *desc = &cap->segments[i];
        if (cap->mounted != NULL && cap->mounted[i]) {
            egm_status_t status = unmount_segment(client, desc->id);
            if (status != EGM_OK)
                egm_warn("unmounting segment %s failed: %s (%s); the master retires it when "
                         "this client's pings stop",
                         egm__id_format(desc->id, id_text), egm_status_string(status),
                         egm_last_error());
            cap->mounted[i] = 0;
        }
        /* Withdraw only after unmount: no new replica can be placed on it now, and
         * withdraw waits for transfers in flight before the pool frees the memory. */
        if (cap->exposed != NULL && cap->exposed[i]) {
            egm__te_withdraw_segment(client->te, desc->id);
            cap->exposed[i] = 0;
        }
    }
    egm__host_pool_destroy(cap->pool);
    egm__vmm_pool_destroy(cap->vmm);
    egm_free(cap->segments);
    egm_free(cap->exposed);
    egm_free(cap->mounted);
    memset(cap, 0, sizeof(*cap));
}
