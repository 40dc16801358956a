/* RPC frame header: encoding is the documented little-endian layout, decoding
 * round-trips, and each malformed header is rejected with its status while
 * the readable fields are still filled in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

static const egm_frame_header_t sample = {
    .version = EGM_RPC_VERSION,
    .flags = EGM_FRAME_REPLY | EGM_FRAME_ERROR,
    .type = EGM_RPC_GET_REPLICA_LIST,
    .request_id = 0x0102030405060708ull,
    .length = 0x00a0b0c0u,
};

static void test_encode_layout(void **state)
{
    (void)state;
    uint8_t buf[EGM_FRAME_HEADER_SIZE];
    const uint8_t expected[EGM_FRAME_HEADER_SIZE] = {
        'E',  'G',  'M',  'R',                          /* magic 0x524d4745 little-endian */
        1,                                              /* version */
        3,                                              /* flags */
        6,    0,                                        /* type */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* request id */
        0xc0, 0xb0, 0xa0, 0x00,                         /* length */
        0,    0,    0,    0,                            /* reserved */
    };

    memset(buf, 0xee, sizeof(buf));
    egm__frame_encode_header(&sample, buf);
    assert_memory_equal(buf, expected, sizeof(buf));
}

static void test_round_trip(void **state)
{
    (void)state;
    uint8_t buf[EGM_FRAME_HEADER_SIZE];
    egm_frame_header_t h;

    egm__frame_encode_header(&sample, buf);
    memset(&h, 0, sizeof(h));
    assert_int_equal(egm__frame_decode_header(buf, 0x00a0b0c0u, &h), EGM_OK);
    assert_int_equal(h.version, sample.version);
    assert_int_equal(h.flags, sample.flags);
    assert_int_equal(h.type, sample.type);
    assert_true(h.request_id == sample.request_id);
    assert_int_equal(h.length, sample.length);

    /* Extremes survive too. */
    egm_frame_header_t big = {EGM_RPC_VERSION, 0, 0xffff, UINT64_MAX, UINT32_MAX};
    egm__frame_encode_header(&big, buf);
    assert_int_equal(egm__frame_decode_header(buf, SIZE_MAX, &h), EGM_OK);
    assert_int_equal(h.type, 0xffff);
    assert_true(h.request_id == UINT64_MAX);
    assert_true(h.length == UINT32_MAX);

    /* Zero-length payload is valid even with a zero limit. */
    egm_frame_header_t empty = {EGM_RPC_VERSION, 0, EGM_RPC_PING, 7, 0};
    egm__frame_encode_header(&empty, buf);
    assert_int_equal(egm__frame_decode_header(buf, 0, &h), EGM_OK);
    assert_int_equal(h.length, 0);
}

static void assert_fields_filled(const egm_frame_header_t *h, uint8_t version)
{
    assert_int_equal(h->version, version);
    assert_int_equal(h->flags, sample.flags);
    assert_int_equal(h->type, sample.type);
    assert_true(h->request_id == sample.request_id);
    assert_int_equal(h->length, sample.length);
}

static void test_bad_magic(void **state)
{
    (void)state;
    uint8_t buf[EGM_FRAME_HEADER_SIZE];
    egm_frame_header_t h;

    egm__frame_encode_header(&sample, buf);
    buf[0] = 'X';
    memset(&h, 0, sizeof(h));
    assert_int_equal(egm__frame_decode_header(buf, UINT32_MAX, &h), EGM_ERR_PROTOCOL);
    assert_fields_filled(&h, EGM_RPC_VERSION);
    assert_non_null(strstr(egm_last_error(), "magic"));

    /* Byte-swapped magic (a big-endian writer) is not accepted either. */
    buf[0] = 'R';
    buf[1] = 'M';
    buf[2] = 'G';
    buf[3] = 'E';
    assert_int_equal(egm__frame_decode_header(buf, UINT32_MAX, &h), EGM_ERR_PROTOCOL);
}

static void test_bad_version(void **state)
{
    (void)state;
    uint8_t buf[EGM_FRAME_HEADER_SIZE];
    egm_frame_header_t h;

    egm__frame_encode_header(&sample, buf);
    buf[4] = 2;
    memset(&h, 0, sizeof(h));
    assert_int_equal(egm__frame_decode_header(buf, UINT32_MAX, &h), EGM_ERR_VERSION);
    assert_fields_filled(&h, 2);
    assert_non_null(strstr(egm_last_error(), "version"));

    buf[4] = 0;
    assert_int_equal(egm__frame_decode_header(buf, UINT32_MAX, &h), EGM_ERR_VERSION);
}

static void test_oversize(void **state)
{
    (void)state;
    uint8_t buf[EGM_FRAME_HEADER_SIZE];
    egm_frame_header_t h;

    egm__frame_encode_header(&sample, buf);
    memset(&h, 0, sizeof(h));
    assert_int_equal(egm__frame_decode_header(buf, sample.length - 1, &h), EGM_ERR_PROTOCOL);
    assert_fields_filled(&h, EGM_RPC_VERSION);
    assert_non_null(strstr(egm_last_error(), "too large"));
    /* Exactly at the limit is fine. */
    assert_int_equal(egm__frame_decode_header(buf, sample.length, &h), EGM_OK);
}

static void test_reserved_nonzero(void **state)
{
    (void)state;
    uint8_t buf[EGM_FRAME_HEADER_SIZE];
    egm_frame_header_t h;

    for (int i = 20; i < EGM_FRAME_HEADER_SIZE; i++) {
        egm__frame_encode_header(&sample, buf);
        buf[i] = 0x80;
        memset(&h, 0, sizeof(h));
        assert_int_equal(egm__frame_decode_header(buf, UINT32_MAX, &h), EGM_ERR_PROTOCOL);
        assert_fields_filled(&h, EGM_RPC_VERSION);
        assert_non_null(strstr(egm_last_error(), "reserved"));
    }
}

static void test_type_names(void **state)
{
    (void)state;
    assert_string_equal(egm__rpc_type_name(EGM_RPC_PUT_START), "PutStart");
    assert_string_equal(egm__rpc_type_name(EGM_RPC_PING), "Ping");
    assert_string_equal(egm__rpc_type_name(EGM_RPC_LIST_SEGMENTS), "ListSegments");
    for (uint16_t t = 1; t <= EGM_RPC_TYPE_MAX; t++)
        assert_string_not_equal(egm__rpc_type_name(t), "unknown");
    assert_string_equal(egm__rpc_type_name(0), "unknown");
    assert_string_equal(egm__rpc_type_name(EGM_RPC_TYPE_MAX + 1), "unknown");
}

/* proto_util lives in the same layer: pack/unpack with the tracked allocator,
 * undecodable bytes, id conversion. */
static void test_proto_util(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    Egm__PingRequest req = EGM__PING_REQUEST__INIT;
    Egm__Id id_pb;
    egm_id_t id = {0x1122334455667788ull, 0x99aabbccddeeff00ull};
    uint8_t *buf = NULL;
    size_t len = 0;
    ProtobufCMessage *msg = NULL;

    egm__id_to_pb(id, &id_pb);
    req.client = &id_pb;
    req.view = 42;
    req.host_id = "host-a";
    assert_int_equal(egm__pb_pack(&req.base, &buf, &len), EGM_OK);
    assert_non_null(buf);
    assert_true(len > 0);

    assert_int_equal(egm__pb_unpack(&egm__ping_request__descriptor, buf, len, &msg), EGM_OK);
    assert_true(egm__alloc_live_count_site("protobuf") > 0);
    Egm__PingRequest *out = (Egm__PingRequest *)msg;
    assert_true(out->view == 42);
    assert_string_equal(out->host_id, "host-a");
    egm_id_t back = egm__id_from_pb(out->client);
    assert_true(back.hi == id.hi && back.lo == id.lo);
    egm__pb_free(msg);
    egm_free(buf);

    /* A truncated varint does not decode. */
    const uint8_t junk[] = {0x10, 0xff};
    msg = (ProtobufCMessage *)1;
    assert_int_equal(egm__pb_unpack(&egm__ping_request__descriptor, junk, sizeof(junk), &msg),
                     EGM_ERR_PROTOCOL);
    assert_null(msg);
    assert_non_null(strstr(egm_last_error(), "PingRequest"));

    /* Missing id -> nil. */
    egm_id_t nil = egm__id_from_pb(NULL);
    assert_true(nil.hi == 0 && nil.lo == 0);
    egm__pb_free(NULL);

    assert_int_equal(egm__alloc_live_count(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_layout), cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_bad_magic),     cmocka_unit_test(test_bad_version),
        cmocka_unit_test(test_oversize),      cmocka_unit_test(test_reserved_nonzero),
        cmocka_unit_test(test_type_names),    cmocka_unit_test(test_proto_util),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
