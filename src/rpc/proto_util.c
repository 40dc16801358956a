/* protobuf-c glue: tracked allocator, pack/unpack, id conversion. */
#include "rpc/proto_util.h"

#include "common/alloc.h"
#include "common/log.h"

static void *pb_alloc(void *data, size_t size)
{
    (void)data;
    /* protobuf-c may ask for 0 bytes (empty repeated fields); keep it non-NULL. */
    return egm_malloc(size ? size : 1, "protobuf");
}

static void pb_free(void *data, void *ptr)
{
    (void)data;
    egm_free(ptr);
}

ProtobufCAllocator egm__pb_allocator = {
    .alloc = pb_alloc,
    .free = pb_free,
    .allocator_data = NULL,
};

egm_status_t egm__pb_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                            ProtobufCMessage **msg_p)
{
    ProtobufCMessage *msg;

    *msg_p = NULL;
    if (desc == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "unpack: no message descriptor");
    msg = protobuf_c_message_unpack(desc, &egm__pb_allocator, len, buf);
    if (msg == NULL)
        return egm__set_error(EGM_ERR_PROTOCOL, "cannot decode %s (%zu bytes)", desc->name, len);
    *msg_p = msg;
    return EGM_OK;
}

void egm__pb_free(ProtobufCMessage *msg)
{
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, &egm__pb_allocator);
}

egm_status_t egm__pb_pack(const ProtobufCMessage *msg, uint8_t **buf_p, size_t *len_p)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = egm_malloc(len ? len : 1, "rpc_pack");
    size_t packed;

    *buf_p = NULL;
    *len_p = 0;
    if (buf == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "pack %s: cannot allocate %zu bytes",
                              msg->descriptor->name, len);
    packed = protobuf_c_message_pack(msg, buf);
    if (packed != len) {
        egm_free(buf);
        return egm__set_error(EGM_ERR_INTERNAL, "pack %s: packed %zu bytes, expected %zu",
                              msg->descriptor->name, packed, len);
    }
    *buf_p = buf;
    *len_p = len;
    return EGM_OK;
}

void egm__id_to_pb(egm_id_t id, Egm__Id *pb)
{
    egm__id__init(pb);
    pb->hi = id.hi;
    pb->lo = id.lo;
}

egm_id_t egm__id_from_pb(const Egm__Id *pb)
{
    egm_id_t id = {0, 0};

    if (pb != NULL) {
        id.hi = pb->hi;
        id.lo = pb->lo;
    }
    return id;
}
