/* Fuzz target: segment descriptors (SegmentDesc) as a client receives them
 * (protobuf-c, then src/rpc/segment_desc.c's validation) and as the master takes
 * them in a MountSegment.
 *
 * Input: a SegmentDesc's wire bytes. Checks:
 *  - the KeysReply decoder's check of a segment (keys_reply.c) accepts it
 *    exactly when protobuf-c does;
 *  - egm__segment_desc_from_pb refuses with INVALID_ARG, or accepts a
 *    descriptor that keeps the promises of segment.h (non-nil id, size > 0,
 *    strings that fit, no control bytes, a socket name that starts with '@' or
 *    '/', a known handle kind, a fabric handle of 64 bytes exactly for
 *    HANDLE_FABRIC and none otherwise), and that converts to the wire and back
 *    unchanged;
 *  - a descriptor the master mounts is one every client accepts (the master
 *    must not hand out descriptors that make clients refuse its replies). */
#include "common/alloc.h"
#include "fuzz.h"
#include "master/master_int.h"
#include "rpc/frame.h"
#include "rpc/keys_reply.h"
#include "rpc/proto_util.h"
#include "rpc/segment_desc.h"

static int clean_string(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (n >= cap)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

static void check_desc(const egm_segment_desc_t *d)
{
    FUZZ_CHECK(!egm__id_is_nil(d->id));
    FUZZ_CHECK(d->size > 0);
    FUZZ_CHECK(clean_string(d->name, sizeof(d->name)));
    FUZZ_CHECK(clean_string(d->host_id, sizeof(d->host_id)));
    FUZZ_CHECK(clean_string(d->zone, sizeof(d->zone)));
    FUZZ_CHECK(clean_string(d->tcp_endpoint, sizeof(d->tcp_endpoint)));
    FUZZ_CHECK(clean_string(d->shm_socket, sizeof(d->shm_socket)));
    FUZZ_CHECK(d->shm_socket[0] == '\0' || d->shm_socket[0] == '/' ||
               (d->shm_socket[0] == '@' && d->shm_socket[1] != '\0'));
    FUZZ_CHECK(d->handle_kind >= EGM_HANDLE_NONE && d->handle_kind <= EGM_HANDLE_FABRIC);
    FUZZ_CHECK(d->fabric_handle_len == (d->handle_kind == EGM_HANDLE_FABRIC ? 64 : 0));
}

static int same_desc(const egm_segment_desc_t *a, const egm_segment_desc_t *b)
{
    return egm__id_equal(a->id, b->id) && egm__id_equal(a->owner, b->owner) && a->size == b->size &&
           strcmp(a->name, b->name) == 0 && strcmp(a->host_id, b->host_id) == 0 &&
           strcmp(a->zone, b->zone) == 0 && strcmp(a->tcp_endpoint, b->tcp_endpoint) == 0 &&
           strcmp(a->shm_socket, b->shm_socket) == 0 && a->handle_kind == b->handle_kind &&
           a->fabric_handle_len == b->fabric_handle_len &&
           memcmp(a->fabric_handle, b->fabric_handle, a->fabric_handle_len) == 0;
}

/* KeysReply {segments = 3: <bytes>} through the clients' decoder. */
static egm_status_t fast_check(const uint8_t *buf, size_t len)
{
    size_t cap = len + 16, n = 0;
    uint8_t *msg = malloc(cap);
    FUZZ_CHECK(msg != NULL);
    msg[n++] = 0x1a;
    for (uint64_t v = len;; v >>= 7) {
        msg[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        if (v <= 0x7f)
            break;
    }
    memcpy(msg + n, buf, len);
    egm_keys_reply_t *reply = NULL;
    egm_status_t st = egm__keys_reply_view(msg, n + len, 0, &reply);
    egm__keys_reply_free(reply);
    free(msg);
    return st;
}

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
static int master_mounts(const uint8_t *buf, size_t len)
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
    egm_master_state_params_t state_params = {.client_ttl_ms = 3000};
    egm__objects_params_default(&state_params.objects);
    state_params.objects.lease_ttl_ms = 5000;
    FUZZ_CHECK(egm__master_state_init(&st, &state_params) == EGM_OK);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Egm__SegmentDesc *pb = NULL;
    egm_segment_desc_t desc, again;

    fuzz_init_logs();
    uint64_t live = egm__alloc_live_count();
    uint8_t *buf = malloc(size ? size : 1);
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);

    egm_status_t want =
        egm__pb_unpack(&egm__segment_desc__descriptor, buf, size, (ProtobufCMessage **)&pb);
    egm_status_t fast = fast_check(buf, size);
    FUZZ_CHECK((want == EGM_OK) == (fast == EGM_OK));
    if (want != EGM_OK) {
        FUZZ_CHECK(fast == EGM_ERR_PROTOCOL);
        goto out;
    }

    egm_status_t st = egm__segment_desc_from_pb(pb, &desc);
    FUZZ_CHECK(st == EGM_OK || st == EGM_ERR_INVALID_ARG);
    if (st == EGM_OK) {
        check_desc(&desc);
        Egm__SegmentDesc wire;
        Egm__Id id, owner;
        uint8_t *packed;
        size_t packed_len;
        Egm__SegmentDesc *back = NULL;
        egm__segment_desc_to_pb(&desc, &wire, &id, &owner);
        FUZZ_CHECK(egm__pb_pack(&wire.base, &packed, &packed_len) == EGM_OK);
        FUZZ_CHECK(egm__pb_unpack(&egm__segment_desc__descriptor, packed, packed_len,
                                  (ProtobufCMessage **)&back) == EGM_OK);
        FUZZ_CHECK(egm__segment_desc_from_pb(back, &again) == EGM_OK);
        FUZZ_CHECK(same_desc(&desc, &again));
        egm__pb_free(&back->base);
        egm_free(packed);
    }
    egm__pb_free(&pb->base);
    if (master_mounts(buf, size))
        FUZZ_CHECK(st == EGM_OK);
out:
    free(buf);
    FUZZ_CHECK(egm__alloc_live_count() == live);
    return 0;
}
