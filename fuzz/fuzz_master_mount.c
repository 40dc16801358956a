/* For fuzz_segment_desc.c (whose descriptor headers clash with the master's):
 * whether a fresh master mounts a SegmentDesc in a MountSegment. */
#include "common/alloc.h"
#include "fuzz.h"
#include "master/master_int.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

/* The provider's MountSegmentRequest, as bytes: {client = 1: Id, segment = 2:
 * the descriptor's own bytes} (not re-packed: protobuf-c re-packs some odd
 * encodings it accepted into bytes it refuses). */
static uint8_t *mount_request(egm_id_t client, const uint8_t *buf, size_t len, size_t *len_p)
{
    uint8_t *req = malloc(len + 32);
    size_t n = 0;
    FUZZ_CHECK(req != NULL);
    req[n++] = 0x0a; /* client: Id {fixed64 hi = 1; fixed64 lo = 2} */
    req[n++] = 18;
    req[n++] = 0x09;
    for (int i = 0; i < 8; i++)
        req[n++] = (uint8_t)(client.hi >> (8 * i));
    req[n++] = 0x11;
    for (int i = 0; i < 8; i++)
        req[n++] = (uint8_t)(client.lo >> (8 * i));
    req[n++] = 0x12; /* segment */
    for (uint64_t v = len;; v >>= 7) {
        req[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        if (v <= 0x7f)
            break;
    }
    memcpy(req + n, buf, len);
    *len_p = n + len;
    return req;
}

/* Does a fresh master mount it, sent by its owner as a provider sends it? */
int fuzz_master_mounts(const uint8_t *buf, size_t len)
{
    egm_master_state_t st;
    Egm__SegmentDesc *pb = NULL;
    egm_rpc_reply_t reply;
    Egm__StatusReply *status = NULL;
    size_t req_len;

    FUZZ_CHECK(egm__pb_unpack(&egm__segment_desc__descriptor, buf, len, (ProtobufCMessage **)&pb) ==
               EGM_OK);
    egm_id_t owner = egm__id_from_pb(pb->owner);
    egm__pb_free(&pb->base);
    uint8_t *req =
        mount_request(egm__id_is_nil(owner) ? (egm_id_t){1, 1} : owner, buf, len, &req_len);
    FUZZ_CHECK(egm__master_state_init(&st, 5000, 3000) == EGM_OK);
    FUZZ_CHECK(egm__master_handle(&st, EGM_RPC_MOUNT_SEGMENT, req, req_len, &reply) == EGM_OK);
    FUZZ_CHECK(egm__pb_unpack(&egm__status_reply__descriptor, reply.buf, reply.len,
                              (ProtobufCMessage **)&status) == EGM_OK);
    int mounted = status->status == EGM_OK;
    egm__pb_free(&status->base);
    egm_free(reply.buf);
    free(req);
    egm__master_state_cleanup(&st);
    return mounted;
}
