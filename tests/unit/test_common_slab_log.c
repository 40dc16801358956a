/* A slab's commit log entries (common/slab_log.h): where entry seq lies
 * (from the extent's end down, none past its start), an entry reads back as
 * written (pins, longest key), and one that is torn (any byte of it
 * changed), of another slab, at another seq, or stale zeros does not decode;
 * bad input to the encoder is refused naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/hashmap.h"
#include "common/slab_log.h"

static void test_place(void **state)
{
    (void)state;
    assert_int_equal(egm__slab_log_at(4096, 1), 4096 - EGM_SLAB_LOG_ENTRY);
    assert_int_equal(egm__slab_log_at(4096, 2), 4096 - 2 * EGM_SLAB_LOG_ENTRY);
    assert_int_equal(egm__slab_log_at(4096, 4096 / EGM_SLAB_LOG_ENTRY), 0); /* the first byte */
    assert_int_equal(egm__slab_log_at(4096, 4096 / EGM_SLAB_LOG_ENTRY + 1), 0);
    assert_int_equal(egm__slab_log_at(4096, 0), 0);
    assert_int_equal(egm__slab_log_at(100, 1), 0);
}

static void test_round_trip_and_refusals(void **state)
{
    (void)state;
    char key[EGM_SLAB_LOG_KEY_MAX + 1];
    memset(key, 'k', sizeof(key));
    uint8_t buf[EGM_SLAB_LOG_ENTRY];
    egm_slab_log_entry_t e = {.slab_id = 0x1234567890abcdefull,
                              .seq = 7,
                              .offset = 65536,
                              .size = 4097,
                              .hard_pin = 1,
                              .key = key,
                              .key_len = EGM_SLAB_LOG_KEY_MAX};
    assert_int_equal(egm__slab_log_encode(&e, buf), EGM_OK);
    egm_slab_log_entry_t d;
    assert_int_equal(egm__slab_log_decode(buf, e.slab_id, 7, &d), 1);
    assert_true(d.slab_id == e.slab_id && d.seq == 7 && d.offset == 65536 && d.size == 4097);
    assert_int_equal(d.hard_pin, 1);
    assert_int_equal(d.soft_pin, 0);
    assert_int_equal(d.key_len, EGM_SLAB_LOG_KEY_MAX);
    assert_memory_equal(d.key, key, EGM_SLAB_LOG_KEY_MAX);
    assert_true(d.key >= (const char *)buf && d.key < (const char *)buf + sizeof(buf));

    /* Another slab, another seq: not this entry. */
    assert_int_equal(egm__slab_log_decode(buf, e.slab_id + 1, 7, &d), 0);
    assert_int_equal(egm__slab_log_decode(buf, e.slab_id, 8, &d), 0);
    /* Torn: any one byte of what the entry covers changed. */
    size_t covered = 16 + 40 + EGM_SLAB_LOG_KEY_MAX;
    for (size_t i = 0; i < covered; i++) {
        uint8_t copy[EGM_SLAB_LOG_ENTRY];
        memcpy(copy, buf, sizeof(copy));
        copy[i] ^= 0x40;
        if (egm__slab_log_decode(copy, e.slab_id, 7, &d))
            fail_msg("an entry with byte %zu changed decodes", i);
    }
    /* Memory never written, or zeroed. */
    memset(buf, 0, sizeof(buf));
    assert_int_equal(egm__slab_log_decode(buf, 0, 0, &d), 0);

    /* The encoder refuses what no entry holds. */
    egm_slab_log_entry_t bad = e;
    bad.key_len = EGM_SLAB_LOG_KEY_MAX + 1;
    assert_int_equal(egm__slab_log_encode(&bad, buf), EGM_ERR_INVALID_ARG);
    bad = e;
    bad.key_len = 0;
    assert_int_equal(egm__slab_log_encode(&bad, buf), EGM_ERR_INVALID_ARG);
    bad = e;
    bad.seq = 0;
    assert_int_equal(egm__slab_log_encode(&bad, buf), EGM_ERR_INVALID_ARG);
    bad = e;
    bad.size = 0;
    assert_int_equal(egm__slab_log_encode(&bad, buf), EGM_ERR_INVALID_ARG);
    /* A short key and the soft pin. */
    e.key = "a";
    e.key_len = 1;
    e.hard_pin = 0;
    e.soft_pin = 1;
    assert_int_equal(egm__slab_log_encode(&e, buf), EGM_OK);
    assert_int_equal(egm__slab_log_decode(buf, e.slab_id, 7, &d), 1);
    assert_int_equal(d.soft_pin, 1);
    assert_int_equal(d.key_len, 1);
    assert_int_equal(d.key[0], 'a');
}

/* A removal (kind 1) and a void entry (kind 2) carry the place of the object
 * they remove and its put entry (after the key, so a shorter key), no size
 * nor pins, and a key; a put's kind is 0 (entries written before kinds existed); an
 * unknown kind, or bytes of another kind's shape, do not decode. */
static void test_removal_entries(void **state)
{
    (void)state;
    char key[EGM_SLAB_LOG_KEY_MAX + 1];
    memset(key, 'r', sizeof(key));
    uint8_t buf[EGM_SLAB_LOG_ENTRY];
    egm_slab_log_entry_t e = {.kind = EGM_SLAB_LOG_REMOVE,
                              .slab_id = 42,
                              .seq = 3,
                              .offset = 1u << 20,
                              .segment = {.hi = 0x0102030405060708ull, .lo = 0x1112131415161718ull},
                              .put_slab_id = 77,
                              .put_seq = 5,
                              .key = key,
                              .key_len = EGM_SLAB_LOG_REMOVE_KEY_MAX};
    egm_slab_log_entry_t d;
    for (uint8_t kind = EGM_SLAB_LOG_REMOVE; kind <= EGM_SLAB_LOG_VOID; kind++) {
        e.kind = kind;
        assert_int_equal(egm__slab_log_encode(&e, buf), EGM_OK);
        assert_int_equal(egm__slab_log_decode(buf, 42, 3, &d), 1);
        assert_int_equal(d.kind, kind);
        assert_true(d.offset == 1u << 20 && d.size == 0 && !d.soft_pin && !d.hard_pin);
        assert_true(d.segment.hi == e.segment.hi && d.segment.lo == e.segment.lo);
        assert_true(d.put_slab_id == 77 && d.put_seq == 5);
        assert_int_equal(d.key_len, EGM_SLAB_LOG_REMOVE_KEY_MAX);
        assert_memory_equal(d.key, key, EGM_SLAB_LOG_REMOVE_KEY_MAX);
        /* the segment is covered too: a byte of it changed does not decode */
        buf[16 + 40 + EGM_SLAB_LOG_REMOVE_KEY_MAX + 5] ^= 1;
        assert_int_equal(egm__slab_log_decode(buf, 42, 3, &d), 0);
    }
    /* A put decodes as kind 0, without a segment. */
    egm_slab_log_entry_t put = {
        .slab_id = 42, .seq = 3, .offset = 0, .size = 1, .key = "p", .key_len = 1};
    assert_int_equal(egm__slab_log_encode(&put, buf), EGM_OK);
    assert_int_equal(egm__slab_log_decode(buf, 42, 3, &d), 1);
    assert_int_equal(d.kind, EGM_SLAB_LOG_PUT);
    /* Refused: a removal with a size, pins, or a key that leaves no room
     * for its segment; an unknown kind. */
    egm_slab_log_entry_t bad = e;
    bad.kind = EGM_SLAB_LOG_REMOVE;
    bad.size = 1;
    assert_int_equal(egm__slab_log_encode(&bad, buf), EGM_ERR_INVALID_ARG);
    bad = e;
    bad.soft_pin = 1;
    assert_int_equal(egm__slab_log_encode(&bad, buf), EGM_ERR_INVALID_ARG);
    bad = e;
    bad.key_len = EGM_SLAB_LOG_REMOVE_KEY_MAX + 1;
    assert_int_equal(egm__slab_log_encode(&bad, buf), EGM_ERR_INVALID_ARG);
    bad = e;
    bad.key_len = 0;
    assert_int_equal(egm__slab_log_encode(&bad, buf), EGM_ERR_INVALID_ARG);
    bad = e;
    bad.kind = 3;
    assert_int_equal(egm__slab_log_encode(&bad, buf), EGM_ERR_INVALID_ARG);
    /* An entry whose kind byte says 3 (checksum made to match): no entry. */
    e.kind = EGM_SLAB_LOG_VOID;
    assert_int_equal(egm__slab_log_encode(&e, buf), EGM_OK);
    buf[16 + 33] = 3;
    uint64_t h = egm__hashmap_hash(buf + 16, 40 + EGM_SLAB_LOG_REMOVE_KEY_MAX + 32);
    for (int i = 0; i < 8; i++)
        buf[8 + i] = (uint8_t)(h >> (8 * i));
    assert_int_equal(egm__slab_log_decode(buf, 42, 3, &d), 0);
    buf[16 + 33] = EGM_SLAB_LOG_VOID; /* the same bytes with its own kind: decodes */
    h = egm__hashmap_hash(buf + 16, 40 + EGM_SLAB_LOG_REMOVE_KEY_MAX + 32);
    for (int i = 0; i < 8; i++)
        buf[8 + i] = (uint8_t)(h >> (8 * i));
    assert_int_equal(egm__slab_log_decode(buf, 42, 3, &d), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_place),
        cmocka_unit_test(test_round_trip_and_refusals),
        cmocka_unit_test(test_removal_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
