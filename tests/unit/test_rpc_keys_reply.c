/* KeysReply fast decoder against protobuf-c: random replies (zero fields
 * omitted, unknown fields at every level) decode field for field the same;
 * every prefix and random byte corruptions are accepted or refused exactly
 * as protobuf-c does (and decode the same when accepted), the repeated
 * degraded_slabs packed and not; limits are enforced;
 * the encoder writes protobuf-c's bytes; nothing leaks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "support/desc_assert.h"

#include "common/alloc.h"
#include "rpc/keys_reply.h"
#include "rpc/proto_util.h"

#define MAX_RESULTS 24
#define MAX_REPS 4
#define MAX_SEGS 4
#define MAX_DEGRADED 6
#define ITERATIONS 300

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Often zero (omitted on the wire), sometimes small, sometimes huge. */
static uint64_t rnd_u64(void)
{
    switch (rnd() % 4) {
    case 0:
        return 0;
    case 1:
        return rnd() % 300;
    case 2:
        return rnd();
    default:
        return rnd() >> (rnd() % 64);
    }
}

typedef struct {
    Egm__KeysReply reply;
    Egm__KeyResult results[MAX_RESULTS];
    Egm__KeyResult *result_ptrs[MAX_RESULTS];
    Egm__Replica reps[MAX_RESULTS][MAX_REPS];
    Egm__Replica *rep_ptrs[MAX_RESULTS][MAX_REPS];
    Egm__Id rep_ids[MAX_RESULTS][MAX_REPS];
    Egm__SegmentDesc segs[MAX_SEGS];
    Egm__SegmentDesc *seg_ptrs[MAX_SEGS];
    Egm__Id seg_ids[MAX_SEGS], seg_owners[MAX_SEGS];
    char strs[MAX_SEGS][4][24];
    uint8_t fabric[MAX_SEGS][64];
    uint64_t degraded[MAX_DEGRADED];
    /* one unknown field per message at most */
    ProtobufCMessageUnknownField unknown[1 + MAX_RESULTS * (1 + MAX_REPS)];
    uint8_t unknown_data[1 + MAX_RESULTS * (1 + MAX_REPS)][12];
    size_t n_unknown;
} gen_t;

static gen_t g;

static void maybe_unknown(ProtobufCMessage *msg)
{
    if (rnd() % 4 != 0)
        return;
    ProtobufCMessageUnknownField *u = &g.unknown[g.n_unknown];
    uint8_t *d = g.unknown_data[g.n_unknown++];
    u->tag = 5 + (uint32_t)(rnd() % 2000); /* above every known field */
    u->data = d;
    switch (rnd() % 4) {
    case 0:
        u->wire_type = PROTOBUF_C_WIRE_TYPE_VARINT;
        d[0] = 0x96;
        d[1] = 0x01;
        u->len = 2;
        break;
    case 1:
        u->wire_type = PROTOBUF_C_WIRE_TYPE_64BIT;
        memset(d, 0xab, 8);
        u->len = 8;
        break;
    case 2:
        u->wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED;
        d[0] = 3; /* the prefix is part of the stored bytes */
        memcpy(d + 1, "xyz", 3);
        u->len = 4;
        break;
    default:
        u->wire_type = PROTOBUF_C_WIRE_TYPE_32BIT;
        memset(d, 0x11, 4);
        u->len = 4;
    }
    msg->n_unknown_fields = 1;
    msg->unknown_fields = u;
}

static void gen_reply(void)
{
    memset(&g, 0, sizeof(g));
    egm__keys_reply__init(&g.reply);
    g.reply.status = rnd() % 3 == 0 ? (int32_t)(rnd() % 40) - 20 : 0;
    g.reply.location_cache_ms = rnd_u64();
    g.reply.wait_ms = rnd_u64();
    g.reply.slab_id = rnd_u64();
    g.reply.place_within_ms = rnd() % 2 ? rnd_u64() : 0;
    g.reply.n_degraded_slabs = rnd() % 3 == 0 ? rnd() % (MAX_DEGRADED + 1) : 0;
    g.reply.degraded_slabs = g.degraded;
    for (size_t d = 0; d < g.reply.n_degraded_slabs; d++)
        g.degraded[d] = rnd_u64();
    static char *const errors[] = {"", "no room for 65536 bytes: held by leased objects", "x"};
    g.reply.error = errors[rnd() % 3];
    maybe_unknown(&g.reply.base);
    g.reply.n_results = rnd() % (MAX_RESULTS + 1);
    g.reply.results = g.result_ptrs;
    for (size_t i = 0; i < g.reply.n_results; i++) {
        Egm__KeyResult *r = &g.results[i];
        egm__key_result__init(r);
        g.result_ptrs[i] = r;
        r->status = rnd() % 2 ? 0 : (int32_t)rnd();
        r->size = rnd_u64();
        r->lease_ttl_ms = rnd_u64();
        r->n_replicas = rnd() % (MAX_REPS + 1);
        r->replicas = g.rep_ptrs[i];
        maybe_unknown(&r->base);
        for (size_t k = 0; k < r->n_replicas; k++) {
            Egm__Replica *rep = &g.reps[i][k];
            egm__replica__init(rep);
            g.rep_ptrs[i][k] = rep;
            rep->offset = rnd_u64();
            rep->length = rnd_u64();
            if (rnd() % 5 != 0) {
                egm__id__init(&g.rep_ids[i][k]);
                g.rep_ids[i][k].hi = rnd_u64();
                g.rep_ids[i][k].lo = rnd_u64();
                rep->segment = &g.rep_ids[i][k];
            }
            maybe_unknown(&rep->base);
        }
    }
    g.reply.n_segments = rnd() % (MAX_SEGS + 1);
    g.reply.segments = g.seg_ptrs;
    for (size_t s = 0; s < g.reply.n_segments; s++) {
        Egm__SegmentDesc *d = &g.segs[s];
        egm__segment_desc__init(d);
        g.seg_ptrs[s] = d;
        egm__id_to_pb((egm_id_t){rnd(), rnd()}, &g.seg_ids[s]);
        egm__id_to_pb((egm_id_t){rnd(), rnd_u64()}, &g.seg_owners[s]);
        d->id = &g.seg_ids[s];
        d->owner = rnd() % 2 ? &g.seg_owners[s] : NULL;
        for (int k = 0; k < 4; k++)
            snprintf(g.strs[s][k], sizeof(g.strs[s][k]), "s%d/%u", k, (unsigned)(rnd() % 1000));
        d->name = g.strs[s][0];
        d->host_id = g.strs[s][1];
        d->tcp_endpoint = rnd() % 2 ? g.strs[s][2] : (char *)"";
        d->shm_socket = g.strs[s][3];
        d->size = rnd_u64();
        d->handle_kind = (Egm__HandleKind)(rnd() % 4);
        if (d->handle_kind == EGM__HANDLE_KIND__HANDLE_FABRIC) {
            memset(g.fabric[s], (int)(rnd() & 0xff), 64);
            d->fabric_handle.data = g.fabric[s];
            d->fabric_handle.len = 64;
        }
    }
}

static egm_id_t id_of(const Egm__Id *pb)
{
    return egm__id_from_pb(pb);
}

static void assert_same_id(const Egm__Id *a, const Egm__Id *b)
{
    egm_id_t x = id_of(a), y = id_of(b);
    assert_true(x.hi == y.hi && x.lo == y.lo);
}

static void assert_same_str(const char *a, const char *b)
{
    assert_string_equal(a ? a : "", b ? b : "");
}

static void assert_same_segment(const Egm__SegmentDesc *ref, const egm_pb_slice_t *slice)
{
    Egm__SegmentDesc *d = NULL;
    assert_int_equal(egm__pb_unpack(&egm__segment_desc__descriptor, slice->data, slice->len,
                                    (ProtobufCMessage **)&d),
                     EGM_OK);
    assert_same_id(ref->id, d->id);
    assert_same_id(ref->owner, d->owner);
    assert_same_str(ref->name, d->name);
    assert_same_str(ref->host_id, d->host_id);
    assert_same_str(ref->tcp_endpoint, d->tcp_endpoint);
    assert_same_str(ref->shm_socket, d->shm_socket);
    assert_true(ref->size == d->size);
    assert_int_equal(ref->handle_kind, d->handle_kind);
    assert_int_equal(ref->fabric_handle.len, d->fabric_handle.len);
    if (ref->fabric_handle.len > 0)
        assert_memory_equal(ref->fabric_handle.data, d->fabric_handle.data, ref->fabric_handle.len);
    egm__pb_free(&d->base);
}

static void assert_same(const Egm__KeysReply *ref, const egm_keys_reply_t *got)
{
    assert_int_equal(ref->status, got->status);
    assert_true(ref->location_cache_ms == got->location_cache_ms);
    assert_true(ref->wait_ms == got->wait_ms);
    assert_true(ref->slab_id == got->slab_id);
    assert_true(ref->place_within_ms == got->place_within_ms);
    assert_int_equal(ref->n_degraded_slabs, got->n_degraded_slabs);
    for (size_t d = 0; d < ref->n_degraded_slabs; d++)
        assert_true(ref->degraded_slabs[d] == got->degraded_slabs[d]);
    /* protobuf-c's copy ends at a NUL the bytes may hold (a corruption) */
    size_t error_len = strlen(ref->error);
    assert_true(error_len <= got->error.len);
    assert_memory_equal(ref->error, error_len ? (const char *)got->error.data : "", error_len);
    assert_true(error_len == got->error.len || got->error.data[error_len] == 0);
    assert_int_equal(ref->n_results, got->n_results);
    size_t total = 0;
    for (size_t i = 0; i < ref->n_results; i++) {
        const Egm__KeyResult *r = ref->results[i];
        const egm_key_result_t *q = &got->results[i];
        assert_int_equal(r->status, q->status);
        assert_true(r->size == q->size);
        assert_true(r->lease_ttl_ms == q->lease_ttl_ms);
        assert_int_equal(r->n_replicas, q->n_replicas);
        assert_int_equal(q->replica_first, total);
        const egm_replica_desc_t *reps = egm__keys_reply_replicas(got, q);
        for (size_t k = 0; k < r->n_replicas; k++) {
            egm_id_t id = id_of(r->replicas[k]->segment);
            assert_true(id.hi == reps[k].segment.hi && id.lo == reps[k].segment.lo);
            assert_true(r->replicas[k]->offset == reps[k].offset);
            assert_true(r->replicas[k]->length == reps[k].length);
        }
        total += r->n_replicas;
    }
    assert_int_equal(total, got->n_replicas);
    assert_int_equal(ref->n_segments, got->n_segments);
    for (size_t s = 0; s < ref->n_segments; s++)
        assert_same_segment(ref->segments[s], &got->segments[s]);
}

/* Both decoders on buf[0..len): same verdict, same values. Returns accepted. */
static int check_bytes(const uint8_t *buf, size_t len)
{
    Egm__KeysReply *ref = NULL;
    egm_keys_reply_t *got = NULL;
    egm_status_t want =
        egm__pb_unpack(&egm__keys_reply__descriptor, buf, len, (ProtobufCMessage **)&ref);
    egm_status_t st = egm__keys_reply_view(buf, len, SIZE_MAX, &got);
    if (want != EGM_OK) {
        assert_int_equal(st, EGM_ERR_PROTOCOL);
        assert_null(got);
        return 0;
    }
    assert_int_equal(st, EGM_OK);
    assert_same(ref, got);
    egm__pb_free(&ref->base);
    egm__keys_reply_free(got);
    return 1;
}

/* Exact-size copies so ASan sees any read past the end. */
static int check_copy(const uint8_t *buf, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, buf, len);
    int ok = check_bytes(copy, len);
    free(copy);
    return ok;
}

static void test_random_replies_match_protobuf_c(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    for (int it = 0; it < ITERATIONS; it++) {
        uint8_t *buf;
        size_t len;
        gen_reply();
        assert_int_equal(egm__pb_pack(&g.reply.base, &buf, &len), EGM_OK);
        assert_true(check_copy(buf, len));
        egm_free(buf);
    }
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_prefixes_and_corruptions_match(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    size_t refused = 0;
    for (int it = 0; it < ITERATIONS / 3; it++) {
        uint8_t *buf;
        size_t len;
        gen_reply();
        assert_int_equal(egm__pb_pack(&g.reply.base, &buf, &len), EGM_OK);
        for (size_t cut = 0; cut <= len; cut++)
            refused += !check_copy(buf, cut);
        for (int c = 0; c < 64 && len > 0; c++) {
            size_t at = rnd() % len;
            uint8_t old = buf[at];
            buf[at] = (uint8_t)rnd();
            refused += !check_copy(buf, len);
            buf[at] = old;
        }
        egm_free(buf);
    }
    assert_true(refused > 0); /* cutting inside fields must be refused */
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_hand_made_edge_cases(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    /* empty message: status 0, nothing */
    assert_true(check_bytes((const uint8_t *)"", 0));
    /* status -3 (zigzag 5) twice: last wins */
    static const uint8_t twice[] = {0x08, 0x05, 0x08, 0x03};
    assert_true(check_bytes(twice, sizeof(twice)));
    /* status with wire type 64BIT: refused */
    static const uint8_t wrong_wt[] = {0x09, 1, 2, 3, 4, 5, 6, 7, 8};
    assert_false(check_bytes(wrong_wt, sizeof(wrong_wt)));
    /* result as a varint: refused */
    static const uint8_t result_varint[] = {0x10, 0x01};
    assert_false(check_bytes(result_varint, sizeof(result_varint)));
    /* unknown group (wire type 3) refused; field 0 refused */
    static const uint8_t group[] = {0x2b, 0x2c};
    assert_false(check_bytes(group, sizeof(group)));
    static const uint8_t field0[] = {0x00, 0x00};
    assert_false(check_bytes(field0, sizeof(field0)));
    /* 11-byte varint refused */
    static const uint8_t long_varint[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                          0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    assert_false(check_bytes(long_varint, sizeof(long_varint)));
    /* length prefix running past the end */
    static const uint8_t overrun[] = {0x12, 0x7f, 0x08};
    assert_false(check_bytes(overrun, sizeof(overrun)));
    /* replica whose segment Id comes twice: {hi=1,lo=2} then {hi=3}: the last one wins whole, {3,0}
     * (protobuf-c 1.4) */
    static const uint8_t dup_id[] = {
        0x12, 0x23, 0x1a, 0x21, 0x0a, 0x12, 0x09, 1,    0, 0, 0, 0, 0, 0, 0, 0x11, 2,    0,   0,
        0,    0,    0,    0,    0,    0x0a, 0x09, 0x09, 3, 0, 0, 0, 0, 0, 0, 0,    0x18, 0x07};
    assert_true(check_bytes(dup_id, sizeof(dup_id)));
    egm_keys_reply_t *r = NULL;
    assert_int_equal(egm__keys_reply_view(dup_id, sizeof(dup_id), 1, &r), EGM_OK);
    assert_int_equal(r->n_replicas, 1);
    assert_true(r->replicas[0].segment.hi == 3 && r->replicas[0].segment.lo == 0);
    assert_true(r->replicas[0].length == 7);
    egm__keys_reply_free(r);
    /* more results than asked for */
    static const uint8_t two[] = {0x12, 0x00, 0x12, 0x00};
    assert_int_equal(egm__keys_reply_view(two, sizeof(two), 1, &r), EGM_ERR_PROTOCOL);
    assert_null(r);
    assert_int_equal(egm__keys_reply_view(two, sizeof(two), 2, &r), EGM_OK);
    assert_int_equal(r->n_results, 2);
    egm__keys_reply_free(r);
    /* degraded_slabs: packed (protobuf-c's form), unpacked, both mixed in
     * one reply (appended in order), an empty packed run; a packed run
     * ending inside a varint, and a wrong wire type, refused */
    static const uint8_t packed[] = {0x3a, 0x03, 0x05, 0x96, 0x01};
    static const uint8_t unpacked[] = {0x38, 0x07, 0x38, 0x00};
    static const uint8_t mixed[] = {0x38, 0x07, 0x3a, 0x02, 0x01, 0x02, 0x08, 0x02, 0x38, 0x09};
    static const uint8_t empty_run[] = {0x3a, 0x00};
    static const uint8_t cut_run[] = {0x3a, 0x02, 0x05, 0x96};
    static const uint8_t fixed_wt[] = {0x39, 1, 0, 0, 0, 0, 0, 0, 0};
    assert_true(check_bytes(packed, sizeof(packed)));
    assert_true(check_bytes(unpacked, sizeof(unpacked)));
    assert_true(check_bytes(mixed, sizeof(mixed)));
    assert_true(check_bytes(empty_run, sizeof(empty_run)));
    assert_false(check_bytes(cut_run, sizeof(cut_run)));
    assert_false(check_bytes(fixed_wt, sizeof(fixed_wt)));
    assert_int_equal(egm__keys_reply_view(mixed, sizeof(mixed), 0, &r), EGM_OK);
    assert_int_equal(r->n_degraded_slabs, 4);
    assert_true(r->degraded_slabs[0] == 7 && r->degraded_slabs[1] == 1 &&
                r->degraded_slabs[2] == 2 && r->degraded_slabs[3] == 9);
    assert_int_equal(r->status, 1);
    egm__keys_reply_free(r);
    /* decode takes the buffer, also on error */
    uint8_t *owned = egm_malloc(sizeof(two), "test");
    memcpy(owned, two, sizeof(two));
    assert_int_equal(egm__keys_reply_decode(owned, sizeof(two), 2, &r), EGM_OK);
    assert_ptr_equal(r->buf, owned);
    egm__keys_reply_free(r);
    owned = egm_malloc(sizeof(two), "test");
    memcpy(owned, two, sizeof(two));
    assert_int_equal(egm__keys_reply_decode(owned, sizeof(two), 1, &r), EGM_ERR_PROTOCOL);
    egm__keys_reply_free(NULL);
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_replica_limit(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    /* one result with MAX + 1 empty replicas (each 0x1a 0x00) */
    size_t n = EGM_KEYS_REPLY_MAX_REPLICAS + 1;
    size_t inner = 2 * n;
    uint8_t *buf = egm_malloc(inner + 8, "test");
    size_t len = 0;
    buf[len++] = 0x12;
    buf[len++] = (uint8_t)(0x80 | (inner & 0x7f));
    buf[len++] = (uint8_t)(inner >> 7);
    for (size_t k = 0; k < n; k++) {
        buf[len++] = 0x1a;
        buf[len++] = 0x00;
    }
    egm_keys_reply_t *r = NULL;
    assert_int_equal(egm__keys_reply_view(buf, len, 1, &r), EGM_ERR_PROTOCOL);
    /* one fewer is fine */
    buf[1] = (uint8_t)(0x80 | ((inner - 2) & 0x7f));
    buf[2] = (uint8_t)((inner - 2) >> 7);
    assert_int_equal(egm__keys_reply_view(buf, len - 2, 1, &r), EGM_OK);
    assert_int_equal(r->results[0].n_replicas, EGM_KEYS_REPLY_MAX_REPLICAS);
    egm__keys_reply_free(r);
    egm_free(buf);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* The encoder writes what protobuf-c writes for the same message (its
 * re-pack of what it decoded is byte for byte the same), with the values
 * given, and the decoder reads them back. */
static void test_encoder_matches_protobuf_c(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    egm_key_result_t results[MAX_RESULTS];
    egm_replica_desc_t reps[MAX_RESULTS * MAX_REPS];
    egm_segment_desc_t segs[MAX_SEGS];
    const egm_segment_desc_t *seg_ptrs[MAX_SEGS];
    uint64_t degraded[MAX_DEGRADED];
    for (int it = 0; it < ITERATIONS; it++) {
        size_t n_reps = 0;
        egm_keys_reply_msg_t msg = {.status = rnd() % 3 == 0 ? (int32_t)(rnd() % 40) - 20 : 0,
                                    .n_results = rnd() % (MAX_RESULTS + 1),
                                    .results = results,
                                    .replicas = reps,
                                    .n_segments = rnd() % (MAX_SEGS + 1),
                                    .segments = seg_ptrs,
                                    .location_cache_ms = rnd_u64(),
                                    .wait_ms = rnd_u64(),
                                    .slab_id = rnd_u64(),
                                    .n_degraded_slabs = rnd() % (MAX_DEGRADED + 1),
                                    .degraded_slabs = degraded,
                                    .error = rnd() % 2 ? "no slab: why" : NULL,
                                    .place_within_ms = rnd() % 2 ? rnd_u64() : 0};
        for (size_t d = 0; d < msg.n_degraded_slabs; d++)
            degraded[d] = rnd_u64();
        for (size_t i = 0; i < msg.n_results; i++) {
            results[i] = (egm_key_result_t){.status = rnd() % 2 ? 0 : (int32_t)rnd(),
                                            .n_replicas = (uint32_t)(rnd() % (MAX_REPS + 1)),
                                            .replica_first = (uint32_t)n_reps,
                                            .size = rnd_u64(),
                                            .lease_ttl_ms = rnd_u64()};
            for (uint32_t k = 0; k < results[i].n_replicas; k++)
                reps[n_reps++] = (egm_replica_desc_t){
                    .segment = {rnd_u64(), rnd_u64()}, .offset = rnd_u64(), .length = rnd_u64()};
        }
        for (size_t s = 0; s < msg.n_segments; s++) {
            egm_segment_desc_t *d = &segs[s];
            memset(d, 0, sizeof(*d));
            d->id = (egm_id_t){rnd() | 1, rnd()};
            d->owner = (egm_id_t){rnd_u64(), rnd_u64()};
            d->size = rnd_u64() | 1;
            snprintf(d->name, sizeof(d->name), "seg%u", (unsigned)(rnd() % 1000));
            snprintf(d->host_id, sizeof(d->host_id), "%s", rnd() % 2 ? "host-a" : "");
            snprintf(d->tcp_endpoint, sizeof(d->tcp_endpoint), "%s", rnd() % 2 ? "h:7000" : "");
            snprintf(d->shm_socket, sizeof(d->shm_socket), "%s", rnd() % 2 ? "@egm-1" : "");
            d->handle_kind = (egm_handle_kind_t)(rnd() % 4);
            if (d->handle_kind == EGM_HANDLE_FABRIC) {
                memset(d->fabric_handle, (int)(rnd() & 0xff), EGM_FABRIC_HANDLE_MAX);
                d->fabric_handle_len = EGM_FABRIC_HANDLE_MAX;
            }
            seg_ptrs[s] = d;
        }
        uint8_t *buf, *again;
        size_t len, again_len;
        assert_int_equal(egm__keys_reply_encode(&msg, &buf, &len), EGM_OK);
        Egm__KeysReply *ref = NULL;
        assert_int_equal(
            egm__pb_unpack(&egm__keys_reply__descriptor, buf, len, (ProtobufCMessage **)&ref),
            EGM_OK);
        assert_int_equal(egm__pb_pack(&ref->base, &again, &again_len), EGM_OK);
        assert_int_equal(again_len, len);
        assert_memory_equal(again, buf, len);
        assert_int_equal(ref->status, msg.status);
        assert_true(ref->location_cache_ms == msg.location_cache_ms);
        assert_true(ref->wait_ms == msg.wait_ms && ref->slab_id == msg.slab_id);
        assert_true(ref->place_within_ms == msg.place_within_ms);
        assert_int_equal(ref->n_degraded_slabs, msg.n_degraded_slabs);
        for (size_t d = 0; d < msg.n_degraded_slabs; d++)
            assert_true(ref->degraded_slabs[d] == degraded[d]);
        assert_string_equal(ref->error, msg.error != NULL ? msg.error : "");
        assert_int_equal(ref->n_results, msg.n_results);
        for (size_t i = 0; i < msg.n_results; i++) {
            const Egm__KeyResult *r = ref->results[i];
            assert_int_equal(r->status, results[i].status);
            assert_true(r->size == results[i].size);
            assert_true(r->lease_ttl_ms == results[i].lease_ttl_ms);
            assert_int_equal(r->n_replicas, results[i].n_replicas);
            for (size_t k = 0; k < r->n_replicas; k++) {
                const egm_replica_desc_t *want = &reps[results[i].replica_first + k];
                egm_id_t id = id_of(r->replicas[k]->segment);
                assert_true(id.hi == want->segment.hi && id.lo == want->segment.lo);
                assert_true(r->replicas[k]->offset == want->offset);
                assert_true(r->replicas[k]->length == want->length);
            }
        }
        assert_int_equal(ref->n_segments, msg.n_segments);
        for (size_t s = 0; s < msg.n_segments; s++) {
            egm_segment_desc_t back;
            assert_int_equal(egm__segment_desc_from_pb(ref->segments[s], &back), EGM_OK);
            egm_test_assert_same_desc(&back, &segs[s]);
        }
        assert_true(check_copy(buf, len)); /* the decoder agrees with protobuf-c */

        /* The same message from segments packed beforehand (the master's
         * egm_segment_t.desc_pb) is the same bytes. */
        egm_pb_slice_t packed[MAX_SEGS];
        const egm_pb_slice_t *packed_ptrs[MAX_SEGS];
        for (size_t s = 0; s < msg.n_segments; s++) {
            size_t plen;
            uint8_t *pbuf;
            assert_int_equal(egm__pb_pack(&ref->segments[s]->base, &pbuf, &plen), EGM_OK);
            packed[s] = (egm_pb_slice_t){.data = pbuf, .len = plen};
            packed_ptrs[s] = &packed[s];
        }
        egm_keys_reply_msg_t pmsg = msg;
        pmsg.segments = NULL;
        pmsg.packed_segments = packed_ptrs;
        uint8_t *pbytes;
        size_t plen;
        assert_int_equal(egm__keys_reply_encode(&pmsg, &pbytes, &plen), EGM_OK);
        assert_int_equal(plen, len);
        assert_memory_equal(pbytes, buf, len);
        egm_free(pbytes);
        for (size_t s = 0; s < msg.n_segments; s++)
            egm_free((void *)packed[s].data);

        egm__pb_free(&ref->base);
        egm_free(again);
        egm_free(buf);
    }
    assert_int_equal(egm__alloc_live_count(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_replies_match_protobuf_c),
        cmocka_unit_test(test_prefixes_and_corruptions_match),
        cmocka_unit_test(test_hand_made_edge_cases),
        cmocka_unit_test(test_replica_limit),
        cmocka_unit_test(test_encoder_matches_protobuf_c),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
