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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_place),
        cmocka_unit_test(test_round_trip_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
