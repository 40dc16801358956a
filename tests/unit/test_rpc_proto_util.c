/* Arena decoding in egm__pb_unpack: a large reply (thousands of nested
 * messages, more than the first arena chunk holds) decodes field for field,
 * egm__pb_free returns every block, and a reply cut anywhere is refused
 * without leaking. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "rpc/proto_util.h"

#define N_KEYS 3000
#define N_SEGS 3

typedef struct {
    Egm__KeysReply reply;
    Egm__KeyResult results[N_KEYS];
    Egm__KeyResult *result_ptrs[N_KEYS];
    Egm__Replica replicas[N_KEYS][2];
    Egm__Replica *replica_ptrs[N_KEYS][2];
    Egm__Id ids[N_SEGS];
    Egm__SegmentDesc segs[N_SEGS];
    Egm__SegmentDesc *seg_ptrs[N_SEGS];
    char names[N_SEGS][32];
} big_reply_t;

static big_reply_t big;

/* Key i: status i%3 == 2 -> NOT_FOUND with no replica, else 1 or 2 replicas. */
static void build_big(void)
{
    egm__keys_reply__init(&big.reply);
    for (size_t s = 0; s < N_SEGS; s++) {
        egm__id_to_pb((egm_id_t){s + 1, 100 + s}, &big.ids[s]);
        egm__segment_desc__init(&big.segs[s]);
        big.segs[s].id = &big.ids[s];
        snprintf(big.names[s], sizeof(big.names[s]), "segment-%zu", s);
        big.segs[s].name = big.names[s];
        big.seg_ptrs[s] = &big.segs[s];
    }
    for (size_t i = 0; i < N_KEYS; i++) {
        Egm__KeyResult *r = &big.results[i];
        egm__key_result__init(r);
        r->status = i % 3 == 2 ? EGM_ERR_NOT_FOUND : EGM_OK;
        r->size = 65536 + i;
        r->lease_ttl_ms = 10000;
        r->n_replicas = i % 3 == 2 ? 0 : 1 + i % 3;
        for (size_t k = 0; k < r->n_replicas; k++) {
            Egm__Replica *rep = &big.replicas[i][k];
            egm__replica__init(rep);
            rep->segment = &big.ids[(i + k) % N_SEGS];
            rep->offset = i * 65536 + k;
            rep->length = r->size;
            big.replica_ptrs[i][k] = rep;
        }
        r->replicas = big.replica_ptrs[i];
        big.result_ptrs[i] = r;
    }
    big.reply.n_results = N_KEYS;
    big.reply.results = big.result_ptrs;
    big.reply.n_segments = N_SEGS;
    big.reply.segments = big.seg_ptrs;
}

static void test_big_reply_round_trip(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    uint8_t *buf = NULL;
    size_t len = 0;
    ProtobufCMessage *msg = NULL;

    build_big();
    assert_int_equal(egm__pb_pack(&big.reply.base, &buf, &len), EGM_OK);
    assert_int_equal(egm__pb_unpack(&egm__keys_reply__descriptor, buf, len, &msg), EGM_OK);
    /* Decoded size exceeds 4x the wire size here, so the arena grew a chunk. */
    assert_true(egm__alloc_live_count_site("protobuf") >= 2);
    Egm__KeysReply *out = (Egm__KeysReply *)msg;
    assert_int_equal(out->n_results, N_KEYS);
    for (size_t i = 0; i < N_KEYS; i++) {
        const Egm__KeyResult *r = out->results[i];
        assert_int_equal(r->status, big.results[i].status);
        assert_true(r->size == 65536 + i);
        assert_true(r->lease_ttl_ms == 10000);
        assert_int_equal(r->n_replicas, big.results[i].n_replicas);
        assert_true(((uintptr_t)r & 7) == 0);
        for (size_t k = 0; k < r->n_replicas; k++) {
            egm_id_t id = egm__id_from_pb(r->replicas[k]->segment);
            size_t s = (i + k) % N_SEGS;
            assert_true(id.hi == s + 1 && id.lo == 100 + s);
            assert_true(r->replicas[k]->offset == i * 65536 + k);
            assert_true(r->replicas[k]->length == 65536 + i);
        }
    }
    assert_int_equal(out->n_segments, N_SEGS);
    for (size_t s = 0; s < N_SEGS; s++)
        assert_string_equal(out->segments[s]->name, big.names[s]);
    egm__pb_free(msg);
    assert_int_equal(egm__alloc_live_count(), live + 1 /* buf */);

    /* Cut at many points: refused with a named type, nothing leaks. */
    for (size_t cut = 1; cut < len; cut += len / 97 + 1) {
        msg = (ProtobufCMessage *)1;
        egm_status_t st = egm__pb_unpack(&egm__keys_reply__descriptor, buf, cut, &msg);
        if (st == EGM_OK) {
            /* A cut on a field boundary is a valid shorter message. */
            assert_non_null(msg);
            egm__pb_free(msg);
        } else {
            assert_int_equal(st, EGM_ERR_PROTOCOL);
            assert_null(msg);
            assert_non_null(strstr(egm_last_error(), "KeysReply"));
        }
        assert_int_equal(egm__alloc_live_count(), live + 1 /* buf */);
    }
    egm_free(buf);
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_empty_and_small(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    ProtobufCMessage *msg = NULL;

    /* Zero bytes decode to a default message. */
    assert_int_equal(egm__pb_unpack(&egm__keys_reply__descriptor, (const uint8_t *)"", 0, &msg),
                     EGM_OK);
    Egm__KeysReply *r = (Egm__KeysReply *)msg;
    assert_int_equal(r->n_results, 0);
    assert_int_equal(r->status, 0);
    egm__pb_free(msg);

    /* Many small decodes, each freed: the count comes back every time. */
    Egm__KeysRequest req = EGM__KEYS_REQUEST__INIT;
    char *keys[2] = {"a", "bb"};
    uint8_t *buf = NULL;
    size_t len = 0;
    req.n_keys = 2;
    req.keys = keys;
    req.force = 1;
    assert_int_equal(egm__pb_pack(&req.base, &buf, &len), EGM_OK);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(egm__pb_unpack(&egm__keys_request__descriptor, buf, len, &msg), EGM_OK);
        Egm__KeysRequest *out = (Egm__KeysRequest *)msg;
        assert_int_equal(out->n_keys, 2);
        assert_string_equal(out->keys[0], "a");
        assert_string_equal(out->keys[1], "bb");
        assert_true(out->force);
        egm__pb_free(msg);
        assert_int_equal(egm__alloc_live_count(), live + 1);
    }
    egm_free(buf);
    egm__pb_free(NULL);
    assert_int_equal(egm__alloc_live_count(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_big_reply_round_trip),
        cmocka_unit_test(test_empty_and_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
