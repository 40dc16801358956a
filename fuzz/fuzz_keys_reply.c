/* Fuzz target: the clients' KeysReply decoder (src/rpc/keys_reply.c) and what
 * a client does next with a reply from the master (or from anyone posing as
 * it): count check, segment descriptors through protobuf-c and
 * egm__segment_desc_from_pb (src/client/master_call.c), the segment of each
 * replica.
 *
 * Input: u8 k (the number of keys asked for: k, or no limit when 255), then
 * the reply's bytes. Checks that the decoder accepts exactly what protobuf-c
 * accepts and decodes it to the same values (its header's promise), that it
 * never reads outside the bytes (exact-size copy), that the result limit
 * holds, and that nothing leaks. */
#include <string.h>
#include "client/client_int.h"
#include "common/alloc.h"
#include "fuzz.h"
#include "rpc/keys_reply.h"
#include "rpc/proto_util.h"
#include "rpc/segment_desc.h"

static int same_id(const Egm__Id *pb, egm_id_t id)
{
    return egm__id_equal(egm__id_from_pb(pb), id);
}

static void check_same(const Egm__KeysReply *ref, const egm_keys_reply_t *got, const uint8_t *buf,
                       size_t len)
{
    FUZZ_CHECK(ref->status == got->status);
    FUZZ_CHECK(ref->location_cache_ms == got->location_cache_ms);
    FUZZ_CHECK(ref->wait_ms == got->wait_ms && ref->slab_id == got->slab_id);
    FUZZ_CHECK(ref->place_within_ms == got->place_within_ms);
    FUZZ_CHECK(ref->n_degraded_slabs == got->n_degraded_slabs);
    for (size_t d = 0; d < ref->n_degraded_slabs; d++)
        FUZZ_CHECK(ref->degraded_slabs[d] == got->degraded_slabs[d]);
    /* protobuf-c's copy ends at a NUL the bytes may hold */
    size_t error_len = strlen(ref->error);
    FUZZ_CHECK(error_len <= got->error.len);
    FUZZ_CHECK(error_len == 0 || memcmp(ref->error, got->error.data, error_len) == 0);
    FUZZ_CHECK(error_len == got->error.len || got->error.data[error_len] == 0);
    FUZZ_CHECK(ref->n_results == got->n_results);
    size_t total = 0;
    for (size_t i = 0; i < ref->n_results; i++) {
        const Egm__KeyResult *r = ref->results[i];
        const egm_key_result_t *q = &got->results[i];
        FUZZ_CHECK(r->status == q->status);
        FUZZ_CHECK(r->size == q->size);
        FUZZ_CHECK(r->lease_ttl_ms == q->lease_ttl_ms);
        FUZZ_CHECK(r->n_replicas == q->n_replicas);
        FUZZ_CHECK(q->replica_first == total);
        const egm_replica_desc_t *reps = egm__keys_reply_replicas(got, q);
        for (size_t k = 0; k < r->n_replicas; k++) {
            FUZZ_CHECK(same_id(r->replicas[k]->segment, reps[k].segment));
            FUZZ_CHECK(r->replicas[k]->offset == reps[k].offset);
            FUZZ_CHECK(r->replicas[k]->length == reps[k].length);
        }
        total += r->n_replicas;
    }
    FUZZ_CHECK(total == got->n_replicas);
    FUZZ_CHECK(ref->n_segments == got->n_segments);
    for (size_t s = 0; s < got->n_segments; s++) {
        /* the slice lies in the reply and decodes to protobuf-c's segment */
        const egm_pb_slice_t *slice = &got->segments[s];
        FUZZ_CHECK(slice->data >= buf && slice->len <= len &&
                   (size_t)(slice->data - buf) <= len - slice->len);
        Egm__SegmentDesc *d = NULL;
        FUZZ_CHECK(egm__pb_unpack(&egm__segment_desc__descriptor, slice->data, slice->len,
                                  (ProtobufCMessage **)&d) == EGM_OK);
        const Egm__SegmentDesc *e = ref->segments[s];
        FUZZ_CHECK(egm__id_equal(egm__id_from_pb(d->id), egm__id_from_pb(e->id)));
        FUZZ_CHECK(egm__id_equal(egm__id_from_pb(d->owner), egm__id_from_pb(e->owner)));
        FUZZ_CHECK(strcmp(d->name, e->name) == 0 && strcmp(d->host_id, e->host_id) == 0);
        FUZZ_CHECK(strcmp(d->tcp_endpoint, e->tcp_endpoint) == 0);
        FUZZ_CHECK(strcmp(d->shm_socket, e->shm_socket) == 0);
        FUZZ_CHECK(d->size == e->size && d->handle_kind == e->handle_kind);
        FUZZ_CHECK(d->fabric_handle.len == e->fabric_handle.len);
        FUZZ_CHECK(d->fabric_handle.len == 0 ||
                   memcmp(d->fabric_handle.data, e->fabric_handle.data, d->fabric_handle.len) == 0);
        egm__pb_free(&d->base);
    }
}

/* What a Get does with the reply before any transfer. */
static void client_side(const egm_keys_reply_t *reply, size_t n)
{
    egm_segment_desc_t *descs = NULL;
    if (egm__client_check_reply(reply, n) != EGM_OK)
        return;
    if (egm__client_reply_segments(reply, &descs) != EGM_OK) {
        FUZZ_CHECK(descs == NULL);
        return;
    }
    for (size_t i = 0; i < reply->n_results; i++) {
        const egm_key_result_t *res = &reply->results[i];
        const egm_replica_desc_t *reps = egm__keys_reply_replicas(reply, res);
        for (uint32_t k = 0; k < res->n_replicas; k++) {
            const egm_segment_desc_t *seg =
                egm__segment_desc_find(descs, reply->n_segments, reps[k].segment);
            FUZZ_CHECK(seg == NULL || egm__id_equal(seg->id, reps[k].segment));
            FUZZ_CHECK(seg == NULL || (seg->size > 0 && !egm__id_is_nil(seg->id)));
        }
    }
    egm_free(descs);
}

/* What protobuf-c accepts but the decoder refuses by design (keys_reply.h). */
static int over_limits(const Egm__KeysReply *ref, size_t max_results)
{
    if (ref->n_results > max_results || ref->n_segments > EGM_KEYS_REPLY_MAX_SEGMENTS)
        return 1;
    for (size_t i = 0; i < ref->n_results; i++)
        if (ref->results[i]->n_replicas > EGM_KEYS_REPLY_MAX_REPLICAS)
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Egm__KeysReply *ref = NULL;
    egm_keys_reply_t *got = NULL;

    fuzz_init_logs();
    if (size < 1)
        return 0;
    uint64_t live = egm__alloc_live_count();
    size_t max_results = data[0] == 255 ? SIZE_MAX : data[0];
    size_t len = size - 1;
    uint8_t *buf = egm_malloc(len ? len : 1, "fuzz.keys_reply");
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, data + 1, len);

    egm_status_t want =
        egm__pb_unpack(&egm__keys_reply__descriptor, buf, len, (ProtobufCMessage **)&ref);
    egm_status_t st = egm__keys_reply_view(buf, len, max_results, &got);
    if (want != EGM_OK) {
        FUZZ_CHECK(st == EGM_ERR_PROTOCOL && got == NULL);
        egm_free(buf);
    } else if (over_limits(ref, max_results)) {
        FUZZ_CHECK(st == EGM_ERR_PROTOCOL && got == NULL);
        egm__pb_free(&ref->base);
        egm_free(buf);
    } else {
        FUZZ_CHECK(st == EGM_OK);
        check_same(ref, got, buf, len);
        egm__pb_free(&ref->base);
        egm__keys_reply_free(got);
        /* the owning form, as the client holds a reply */
        FUZZ_CHECK(egm__keys_reply_decode(buf, len, max_results, &got) == EGM_OK);
        client_side(got, got->n_results);
        egm__keys_reply_free(got);
    }
    FUZZ_CHECK(egm__alloc_live_count() == live);
    return 0;
}
