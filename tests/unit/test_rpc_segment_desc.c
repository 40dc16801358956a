/* Segment descriptors: round trip through the wire form and refusal of hostile
 * descriptors (nil id, zero size, over-long or control strings, bad kinds). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "support/desc_assert.h"
#include "support/testutil.h"

#include "common/alloc.h"
#include "rpc/proto_util.h"
#include "rpc/segment_desc.h"

static egm_segment_desc_t sample(void)
{
    egm_segment_desc_t d;
    memset(&d, 0, sizeof(d));
    d.id = (egm_id_t){.hi = 0x1122334455667788ull, .lo = 0x99aabbccddeeff00ull};
    d.owner = (egm_id_t){.hi = 7, .lo = 8};
    d.size = 64ull << 20;
    strcpy(d.name, "host:123/0");
    strcpy(d.host_id, "host-boot-id");
    strcpy(d.tcp_endpoint, "127.0.0.1:4000");
    strcpy(d.shm_socket, "@egmstore-123-abc");
    d.handle_kind = EGM_HANDLE_MEMFD;
    return d;
}

static void test_round_trip_through_packed_bytes(void **state)
{
    (void)state;
    egm_segment_desc_t in = sample(), out;
    Egm__SegmentDesc pb;
    Egm__Id id, owner;
    egm__segment_desc_to_pb(&in, &pb, &id, &owner);

    uint8_t *buf;
    size_t len;
    assert_int_equal(egm__pb_pack(&pb.base, &buf, &len), EGM_OK);
    ProtobufCMessage *msg;
    assert_int_equal(egm__pb_unpack(&egm__segment_desc__descriptor, buf, len, &msg), EGM_OK);
    egm_free(buf);
    assert_int_equal(egm__segment_desc_from_pb((Egm__SegmentDesc *)msg, &out), EGM_OK);
    egm__pb_free(msg);

    assert_true(egm__id_equal(out.id, in.id));
    assert_true(egm__id_equal(out.owner, in.owner));
    assert_int_equal(out.size, in.size);
    assert_string_equal(out.name, in.name);
    assert_string_equal(out.host_id, in.host_id);
    assert_string_equal(out.tcp_endpoint, in.tcp_endpoint);
    assert_string_equal(out.shm_socket, in.shm_socket);
    assert_int_equal(out.handle_kind, EGM_HANDLE_MEMFD);
}

/* desc's wire bytes (egm_malloc'ed). */
static uint8_t *pack_desc(const egm_segment_desc_t *desc, size_t *len_p)
{
    Egm__SegmentDesc pb;
    Egm__Id id, owner;
    uint8_t *buf;
    egm__segment_desc_to_pb(desc, &pb, &id, &owner);
    assert_int_equal(egm__pb_pack(&pb.base, &buf, len_p), EGM_OK);
    return buf;
}

/* egm__segment_desc_decode answers from its cache what the bytes say, never
 * what other bytes said: the same segment mounted again under a new id, the
 * same id with a changed descriptor (the master never does that, but the
 * cache must not rely on it), and more descriptors than the cache has slots. */
static void test_decode_cache_follows_the_bytes(void **state)
{
    (void)state;
    egm_segment_desc_t in = sample(), out;
    size_t len;
    uint8_t *buf = pack_desc(&in, &len);
    for (int round = 0; round < 3; round++) { /* a miss, then hits */
        memset(&out, 0x5a, sizeof(out));
        assert_int_equal(egm__segment_desc_decode(buf, len, &out), EGM_OK);
        egm_test_assert_same_desc(&out, &in);
    }
    egm_free(buf);

    egm_segment_desc_t remounted = in;
    remounted.id.lo++;
    buf = pack_desc(&remounted, &len);
    assert_int_equal(egm__segment_desc_decode(buf, len, &out), EGM_OK);
    egm_test_assert_same_desc(&out, &remounted);
    egm_free(buf);

    egm_segment_desc_t changed = in;
    strcpy(changed.tcp_endpoint, "127.0.0.1:4001");
    changed.handle_kind = EGM_HANDLE_FABRIC;
    memset(changed.fabric_handle, 0xab, EGM_FABRIC_HANDLE_MAX);
    changed.fabric_handle_len = EGM_FABRIC_HANDLE_MAX;
    buf = pack_desc(&changed, &len);
    assert_int_equal(egm__segment_desc_decode(buf, len, &out), EGM_OK);
    egm_test_assert_same_desc(&out, &changed);
    egm_free(buf);

    /* Four times the slots, twice over: evictions and collisions. */
    for (int pass = 0; pass < 2; pass++)
        for (uint64_t i = 0; i < 2048; i++) {
            egm_segment_desc_t d = sample();
            d.id.hi = i + 1;
            snprintf(d.name, sizeof(d.name), "pool/%llu", (unsigned long long)i);
            buf = pack_desc(&d, &len);
            assert_int_equal(egm__segment_desc_decode(buf, len, &out), EGM_OK);
            egm_test_assert_same_desc(&out, &d);
            egm_free(buf);
        }

    /* Bytes that do not decode are refused every time (nothing cached). */
    egm_segment_desc_t bad = in;
    bad.size = 0;
    buf = pack_desc(&bad, &len);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(egm__segment_desc_decode(buf, len, &out), EGM_ERR_INVALID_ARG);
        assert_non_null(strstr(egm_last_error(), "size"));
    }
    egm_free(buf);
}

/* A valid wire descriptor the tests then damage one field at a time. */
typedef struct {
    Egm__SegmentDesc pb;
    Egm__Id id, owner;
    egm_segment_desc_t src;
} wire_t;

static void wire_init(wire_t *w)
{
    w->src = sample();
    egm__segment_desc_to_pb(&w->src, &w->pb, &w->id, &w->owner);
}

static void expect_invalid(const Egm__SegmentDesc *pb, const char *field)
{
    egm_segment_desc_t out;
    memset(&out, 0x5a, sizeof(out));
    assert_int_equal(egm__segment_desc_from_pb(pb, &out), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), field));
}

static void test_nil_or_missing_id(void **state)
{
    (void)state;
    wire_t w;
    wire_init(&w);
    w.pb.id = NULL;
    expect_invalid(&w.pb, "segment.id");
    wire_init(&w);
    w.id.hi = 0;
    w.id.lo = 0;
    expect_invalid(&w.pb, "segment.id");
}

static void test_zero_size(void **state)
{
    (void)state;
    wire_t w;
    wire_init(&w);
    w.pb.size = 0;
    expect_invalid(&w.pb, "segment.size");
}

static void test_over_long_strings(void **state)
{
    (void)state;
    char big[1024];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    wire_t w;

    wire_init(&w);
    w.pb.name = big;
    expect_invalid(&w.pb, "segment.name");
    wire_init(&w);
    w.pb.host_id = big;
    expect_invalid(&w.pb, "segment.host_id");
    wire_init(&w);
    w.pb.tcp_endpoint = big;
    expect_invalid(&w.pb, "segment.tcp_endpoint");
    wire_init(&w);
    big[0] = '@';
    w.pb.shm_socket = big;
    expect_invalid(&w.pb, "segment.shm_socket");

    /* One byte below the limit is accepted. */
    char fits[EGM_SHM_SOCKET_MAX];
    memset(fits, 'b', sizeof(fits) - 1);
    fits[0] = '@';
    fits[sizeof(fits) - 1] = '\0';
    wire_init(&w);
    w.pb.shm_socket = fits;
    egm_segment_desc_t out;
    assert_int_equal(egm__segment_desc_from_pb(&w.pb, &out), EGM_OK);
    assert_int_equal(strlen(out.shm_socket), EGM_SHM_SOCKET_MAX - 1);
}

static void test_control_characters(void **state)
{
    (void)state;
    wire_t w;
    wire_init(&w);
    w.pb.name = "evil\nline";
    expect_invalid(&w.pb, "segment.name");
    wire_init(&w);
    w.pb.tcp_endpoint = "host\x1b[0m:1";
    expect_invalid(&w.pb, "segment.tcp_endpoint");
}

static void test_shm_socket_form(void **state)
{
    (void)state;
    wire_t w;
    wire_init(&w);
    w.pb.shm_socket = "relative/path";
    expect_invalid(&w.pb, "segment.shm_socket");
    wire_init(&w);
    w.pb.shm_socket = "@";
    expect_invalid(&w.pb, "segment.shm_socket");
    /* Empty means "no shm", a path is fine too. */
    egm_segment_desc_t out;
    wire_init(&w);
    w.pb.shm_socket = "";
    assert_int_equal(egm__segment_desc_from_pb(&w.pb, &out), EGM_OK);
    wire_init(&w);
    w.pb.shm_socket = "/run/egm.sock";
    assert_int_equal(egm__segment_desc_from_pb(&w.pb, &out), EGM_OK);
}

static void test_unknown_handle_kind(void **state)
{
    (void)state;
    wire_t w;
    wire_init(&w);
    w.pb.handle_kind = (Egm__HandleKind)4;
    expect_invalid(&w.pb, "segment.handle_kind");
    wire_init(&w);
    w.pb.handle_kind = (Egm__HandleKind)-1;
    expect_invalid(&w.pb, "segment.handle_kind");
}

static void test_null_strings_read_as_empty(void **state)
{
    (void)state;
    wire_t w;
    wire_init(&w);
    w.pb.name = NULL;
    w.pb.host_id = NULL;
    w.pb.tcp_endpoint = NULL;
    w.pb.shm_socket = NULL;
    egm_segment_desc_t out;
    assert_int_equal(egm__segment_desc_from_pb(&w.pb, &out), EGM_OK);
    assert_string_equal(out.name, "");
    assert_string_equal(out.shm_socket, "");
    assert_int_equal(egm__segment_desc_from_pb(NULL, &out), EGM_ERR_INVALID_ARG);
}

static void test_hostile_bytes_do_not_crash(void **state)
{
    (void)state;
    /* Random buffers that happen to parse must either validate or be refused. */
    uint8_t buf[256];
    uint32_t x = 12345;
    for (int round = 0; round < 2000; round++) {
        size_t len = (size_t)(x % sizeof(buf));
        for (size_t i = 0; i < len; i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = (uint8_t)(x >> 16);
        }
        ProtobufCMessage *msg;
        if (egm__pb_unpack(&egm__segment_desc__descriptor, buf, len, &msg) != EGM_OK)
            continue;
        egm_segment_desc_t out;
        egm_status_t st = egm__segment_desc_from_pb((Egm__SegmentDesc *)msg, &out);
        assert_true(st == EGM_OK || st == EGM_ERR_INVALID_ARG);
        if (st == EGM_OK) {
            assert_false(egm__id_is_nil(out.id));
            assert_true(out.size > 0);
        }
        egm__pb_free(msg);
    }
}

/* Threads decoding at once, more of them than this machine has cores, each
 * over descriptors of its own and over descriptors they all share (hitting the
 * same slots): every answer is what its bytes say. A slot taken by another
 * thread is decoded around, never waited for; a torn slot (read while being
 * filled) would answer another descriptor's fields. */
#define DECODERS 8
#define SHARED 24 /* shared descriptors: a few slots that every thread reads */
#define OWN 600   /* a thread's own: with the others', more than the slots */
#define DECODE_ROUNDS 6

typedef struct {
    int thread;
    egm_segment_desc_t *descs; /* SHARED + OWN */
    uint8_t **bytes;
    size_t *lens;
    int wrong; /* answers that were not their bytes' descriptor */
    int failed;
} decoder_t;

static egm_segment_desc_t numbered(int thread, int i)
{
    egm_segment_desc_t d = sample();
    d.id.hi = ((uint64_t)thread << 32) | (uint64_t)(i + 1);
    d.size = (uint64_t)(i + 1) << 20;
    snprintf(d.name, sizeof(d.name), "pool-%d/%d", thread, i);
    snprintf(d.tcp_endpoint, sizeof(d.tcp_endpoint), "127.0.0.%d:%d", thread + 1, 4000 + i);
    return d;
}

static int same_desc(const egm_segment_desc_t *a, const egm_segment_desc_t *b)
{
    return egm__id_equal(a->id, b->id) && egm__id_equal(a->owner, b->owner) && a->size == b->size &&
           strcmp(a->name, b->name) == 0 && strcmp(a->host_id, b->host_id) == 0 &&
           strcmp(a->tcp_endpoint, b->tcp_endpoint) == 0 &&
           strcmp(a->shm_socket, b->shm_socket) == 0 && a->handle_kind == b->handle_kind;
}

static void *decoder_main(void *arg)
{
    decoder_t *t = arg;
    for (int round = 0; round < DECODE_ROUNDS; round++)
        for (int k = 0; k < SHARED + OWN; k++) {
            /* every other step a shared one, from a different start per thread */
            int i = k % 2 == 0 ? (k / 2 + t->thread * 5) % SHARED : SHARED + k % OWN;
            egm_segment_desc_t out;
            memset(&out, 0x5a, sizeof(out));
            if (egm__segment_desc_decode(t->bytes[i], t->lens[i], &out) != EGM_OK)
                t->failed++;
            else if (!same_desc(&out, &t->descs[i]))
                t->wrong++;
        }
    return NULL;
}

static void test_decode_cache_under_threads(void **state)
{
    (void)state;
    static decoder_t dec[DECODERS];
    static egm_segment_desc_t descs[DECODERS][SHARED + OWN];
    static uint8_t *bytes[DECODERS][SHARED + OWN];
    static size_t lens[DECODERS][SHARED + OWN];
    pthread_t threads[DECODERS];

    for (int t = 0; t < DECODERS; t++) {
        for (int i = 0; i < SHARED + OWN; i++) {
            /* the shared ones are the same descriptors (same bytes) in every thread */
            descs[t][i] = i < SHARED ? numbered(99, i) : numbered(t, i);
            bytes[t][i] = pack_desc(&descs[t][i], &lens[t][i]);
        }
        dec[t] = (decoder_t){.thread = t, .descs = descs[t], .bytes = bytes[t], .lens = lens[t]};
    }
    for (int t = 0; t < DECODERS; t++)
        assert_int_equal(pthread_create(&threads[t], NULL, decoder_main, &dec[t]), 0);
    for (int t = 0; t < DECODERS; t++) {
        assert_int_equal(pthread_join(threads[t], NULL), 0);
        assert_int_equal(dec[t].failed, 0);
        assert_int_equal(dec[t].wrong, 0);
        for (int i = 0; i < SHARED + OWN; i++)
            egm_free(bytes[t][i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_decode_cache_follows_the_bytes, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_decode_cache_under_threads, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_round_trip_through_packed_bytes, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_nil_or_missing_id, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_zero_size, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_over_long_strings, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_control_characters, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_shm_socket_form, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_unknown_handle_kind, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_null_strings_read_as_empty, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_hostile_bytes_do_not_crash, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
