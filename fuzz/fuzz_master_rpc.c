/* Fuzz target: every master RPC handler, through egm__master_handle as the RPC
 * server calls it (src/master/handlers.c, inspect.c), without sockets.
 *
 * Input: a sequence of up to 64 calls on one fresh master state, so that an
 * input replays alone and the state never grows past what one input builds:
 *   u8 op     low 4 bits: the RPC type (1..14); 0: the type is the next byte (any u8:
 *             the commands above 14, RepairGrant and RepairCommit, and unknown types);
 *             15 is an unknown type but as the first call (below);
 *             bit 7: first advance the clock by 1 + ((op >> 4) & 7) seconds and
 *             run the periodic tick (client expiry, the pending sweep, eviction)
 *   u16 len   (LE) payload bytes that follow (fewer at the end of the input)
 *   payload   the request message, given to the handler in an exact-size copy
 * A first call of type 15 (an unknown type anywhere else) sets the index
 * instead: payload byte 0 % 3 the placement strategy (random,
 * free_ratio_first, local_first), byte 1 the eviction high watermark
 * (byte / 255), byte 2 the eviction ratio (byte / 255).
 * The clock is the target's; the index's random placement is seeded the same
 * for every input (getrandom below), so the same input does the same.
 *
 * Checks: a refused call leaves no reply, and only a type the master serves is
 * answered; an answered one decodes as its type's reply message in the command
 * list (a KeysReply with one result per key); every replica handed out lies inside its
 * segment and is at least the object's size; every segment descriptor in a reply passes the
 * clients' validation (egm__segment_desc_from_pb); the object index's invariants hold after every
 * call (egm__objects_check); everything is freed at the end. */
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/alloc.h"
#include "fuzz.h"
#include "master/master_int.h"
#include "rpc/frame.h"
#include "rpc/keys_reply.h"
#include "rpc/proto_util.h"
#include "rpc/segment_desc.h"

#define MAX_CALLS 64
#define SETTINGS_TYPE 15
/* Every command the master serves is a type in the op's 4 bits or the byte after a 0. */
_Static_assert(EGM_RPC_TYPE_MAX <= UINT8_MAX, "a type after an op of type 0 is one byte");

static uint64_t fake_now;
static uint64_t rng = 1;
static int deterministic;

static uint64_t clock_ms(void)
{
    return fake_now;
}

/* The master's ids and placement draw from getrandom (egm__id_random): while
 * an input runs, the bytes come from a generator seeded alike for every input. */
ssize_t getrandom(void *buf, size_t len, unsigned int flags)
{
    if (!deterministic) {
        long rc = syscall(SYS_getrandom, buf, len, flags);
        return (ssize_t)rc;
    }
    uint8_t *p = buf;
    for (size_t i = 0; i < len; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        p[i] = (uint8_t)(rng >> 24);
    }
    return (ssize_t)len;
}

static void check_segment(const Egm__SegmentDesc *pb)
{
    egm_segment_desc_t desc;
    FUZZ_CHECK(pb != NULL);
    /* "every descriptor the master hands out decodes at the clients" */
    FUZZ_CHECK(egm__segment_desc_from_pb(pb, &desc) == EGM_OK);
}

/* A KeysReply for n keys: the bytes protobuf-c would pack for it (the
 * encoder's promise, rpc/keys_reply.h), which the clients' decoder accepts;
 * replicas lie in their described segments. */
static void check_keys_reply(const uint8_t *buf, size_t len, size_t n)
{
    Egm__KeysReply *ref = NULL;
    egm_keys_reply_t *got = NULL;
    uint8_t *again = NULL;
    size_t again_len = 0;

    FUZZ_CHECK(egm__pb_unpack(&egm__keys_reply__descriptor, buf, len, (ProtobufCMessage **)&ref) ==
               EGM_OK);
    FUZZ_CHECK(egm__pb_pack(&ref->base, &again, &again_len) == EGM_OK);
    FUZZ_CHECK(again_len == len && memcmp(again, buf, len) == 0);
    egm_free(again);
    FUZZ_CHECK(egm__keys_reply_view(buf, len, n, &got) == EGM_OK);
    FUZZ_CHECK(got->n_results == n && got->n_segments == ref->n_segments);
    egm__keys_reply_free(got);
    FUZZ_CHECK(ref->status == EGM_OK);
    FUZZ_CHECK(ref->n_results == n);
    for (size_t s = 0; s < ref->n_segments; s++)
        check_segment(ref->segments[s]);
    for (size_t i = 0; i < ref->n_results; i++) {
        const Egm__KeyResult *res = ref->results[i];
        FUZZ_CHECK(res->status <= 0 && res->status >= EGM_STATUS_MIN);
        FUZZ_CHECK(res->status == EGM_OK || res->n_replicas == 0);
        for (size_t k = 0; k < res->n_replicas; k++) {
            const Egm__Replica *rep = res->replicas[k];
            egm_id_t id = egm__id_from_pb(rep->segment);
            const Egm__SegmentDesc *seg = NULL;
            for (size_t s = 0; s < ref->n_segments && seg == NULL; s++)
                if (egm__id_equal(egm__id_from_pb(ref->segments[s]->id), id))
                    seg = ref->segments[s];
            FUZZ_CHECK(seg != NULL); /* every replica's segment is described */
            FUZZ_CHECK(rep->offset <= seg->size);
            FUZZ_CHECK(rep->length <= seg->size - rep->offset);
            FUZZ_CHECK(rep->length >= res->size);
        }
    }
    egm__pb_free(&ref->base);
}

/* Results a KeysReply to req must have: one per key of a request that has
 * keys (KeysRequest, PutStartRequest, CommitRequest: its repeated field
 * `keys`, found by the descriptor so that any such request type is covered);
 * one, the slab, for a SlabGrantRequest. */
static size_t request_keys(const ProtobufCMessage *req)
{
    if (req->descriptor == &egm__slab_grant_request__descriptor)
        return 1;
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(req->descriptor, "keys");
    FUZZ_CHECK(f != NULL && f->label == PROTOBUF_C_LABEL_REPEATED);
    return *(const size_t *)((const uint8_t *)req + f->quantifier_offset);
}

/* The reply decodes as the reply message of its type in the command list; a
 * KeysReply has one result per key of the request. */
static void check_reply(uint16_t type, const uint8_t *req, size_t req_len, const uint8_t *buf,
                        size_t len)
{
    const egm_rpc_command_t *cmd = egm__rpc_command_find(type);
    ProtobufCMessage *msg = NULL;

    FUZZ_CHECK(cmd != NULL && cmd->reply != NULL);
    if (cmd->reply == &egm__keys_reply__descriptor) {
        FUZZ_CHECK(egm__pb_unpack(cmd->request, req, req_len, &msg) == EGM_OK);
        check_keys_reply(buf, len, request_keys(msg));
        egm__pb_free(msg);
        return;
    }
    FUZZ_CHECK(egm__pb_unpack(cmd->reply, buf, len, &msg) == EGM_OK);
    if (cmd->reply == &egm__repair_grant_reply__descriptor) {
        /* Each task: a source and a target in described segments, each
         * inside its segment, on distinct providers. */
        const Egm__RepairGrantReply *r = (const Egm__RepairGrantReply *)msg;
        FUZZ_CHECK(r->status == EGM_OK);
        for (size_t s = 0; s < r->n_segments; s++)
            check_segment(r->segments[s]);
        for (size_t i = 0; i < r->n_tasks; i++) {
            const Egm__RepairTask *t = r->tasks[i];
            const Egm__SegmentDesc *seg[2] = {NULL, NULL};
            const Egm__Replica *rep[2] = {t->source, t->target};
            for (int k = 0; k < 2; k++) {
                FUZZ_CHECK(rep[k] != NULL && rep[k]->length == t->size);
                for (size_t s = 0; s < r->n_segments && seg[k] == NULL; s++)
                    if (egm__id_equal(egm__id_from_pb(r->segments[s]->id),
                                      egm__id_from_pb(rep[k]->segment)))
                        seg[k] = r->segments[s];
                FUZZ_CHECK(seg[k] != NULL);
                FUZZ_CHECK(rep[k]->offset <= seg[k]->size &&
                           rep[k]->length <= seg[k]->size - rep[k]->offset);
            }
            FUZZ_CHECK(
                !egm__id_equal(egm__id_from_pb(seg[0]->owner), egm__id_from_pb(seg[1]->owner)));
        }
    }
    if (cmd->reply == &egm__list_segments_reply__descriptor) {
        const Egm__ListSegmentsReply *r = (const Egm__ListSegmentsReply *)msg;
        for (size_t s = 0; s < r->n_segments; s++)
            check_segment(r->segments[s]->desc);
    }
    egm__pb_free(msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    egm_master_state_t st;
    egm_objects_params_t params;
    fuzz_reader_t in = {data, size};

    fuzz_init_logs();
    uint64_t live = egm__alloc_live_count();
    deterministic = 1;
    rng = 0x9e3779b97f4a7c15ull;
    fake_now = 1000;
    egm__objects_params_default(&params);
    params.lease_ttl_ms = 5000;
    params.soft_pin_ttl_ms = 20000;
    params.pending_timeout_ms = 4000;
    if (size >= 3 && (data[0] & 0x0f) == SETTINGS_TYPE) {
        fuzz_u8(&in);
        size_t len;
        uint8_t *set = fuzz_bytes(&in, fuzz_u16(&in), &len);
        if (len > 0)
            params.placement = (egm_placement_t)(set[0] % 3);
        if (len > 1)
            params.eviction_high_watermark = set[1] / 255.0;
        if (len > 2)
            params.eviction_ratio = set[2] / 255.0;
        free(set);
        if (egm__objects_params_check(&params) != EGM_OK) {
            deterministic = 0;
            return 0;
        }
    }
    egm_master_state_params_t state_params = {.objects = params, .client_ttl_ms = 3000};
    FUZZ_CHECK(egm__master_state_init(&st, &state_params) == EGM_OK);
    st.now_ms = clock_ms;

    for (int n = 0; n < MAX_CALLS && in.left > 0; n++) {
        uint8_t op = fuzz_u8(&in);
        uint16_t type = op & 0x0f;
        if (type == 0)
            type = fuzz_u8(&in);
        size_t len;
        uint8_t *payload = fuzz_bytes(&in, fuzz_u16(&in), &len);
        egm_rpc_reply_t reply = {(uint8_t *)1, 1};

        if (op & 0x80) {
            fake_now += 1000 * (1 + ((op >> 4) & 7));
            egm__master_state_tick(&st, fake_now);
        }
        egm_status_t status = egm__master_handle(&st, type, payload, len, &reply);
        int served = egm__master_command(type) != NULL;
        if (status != EGM_OK) {
            FUZZ_CHECK(status < 0 && status >= EGM_STATUS_MIN);
            FUZZ_CHECK(reply.buf == NULL && reply.len == 0);
            FUZZ_CHECK(served || status == EGM_ERR_NOT_SUPPORTED);
        } else {
            FUZZ_CHECK(served);
            check_reply(type, payload, len, reply.buf, reply.len);
        }
        egm_free(reply.buf);
        free(payload);
        FUZZ_CHECK(egm__objects_check(st.objects) == EGM_OK);
    }

    egm__master_state_cleanup(&st);
    deterministic = 0;
    FUZZ_CHECK(egm__alloc_live_count() == live);
    return 0;
}
