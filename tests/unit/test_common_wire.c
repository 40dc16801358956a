/* The wire codec (common/wire.h): each width is written little-endian at the
 * documented byte positions whatever the host, writes exactly its width, and
 * reads back what it wrote, extremes included; an id is hi then lo. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/wire.h"

static void test_layout(void **state)
{
    (void)state;
    uint8_t buf[20];
    const uint8_t u16[] = {0x02, 0x01, 0xee};
    const uint8_t u32[] = {0x04, 0x03, 0x02, 0x01, 0xee};
    const uint8_t u64[] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0xee};

    /* Each writes its width and not one byte more. */
    memset(buf, 0xee, sizeof(buf));
    egm__wire_put_u16(buf, 0x0102);
    assert_memory_equal(buf, u16, sizeof(u16));
    memset(buf, 0xee, sizeof(buf));
    egm__wire_put_u32(buf, 0x01020304u);
    assert_memory_equal(buf, u32, sizeof(u32));
    memset(buf, 0xee, sizeof(buf));
    egm__wire_put_u64(buf, 0x0102030405060708ull);
    assert_memory_equal(buf, u64, sizeof(u64));

    /* Reading the documented bytes gives the value on any host. */
    assert_int_equal(egm__wire_get_u16(u16), 0x0102);
    assert_int_equal(egm__wire_get_u32(u32), 0x01020304u);
    assert_true(egm__wire_get_u64(u64) == 0x0102030405060708ull);
    /* The RPC magic "EGMR" as the frame header carries it. */
    assert_int_equal(egm__wire_get_u32((const uint8_t *)"EGMR"), 0x524d4745u);
}

static void test_round_trip(void **state)
{
    (void)state;
    const uint64_t values[] = {0,
                               1,
                               0x7f,
                               0x80,
                               0xff,
                               0x100,
                               0x8000,
                               0xffff,
                               0x10000,
                               0x80000000u,
                               0xffffffffu,
                               0x100000000ull,
                               0x8000000000000000ull,
                               UINT64_MAX,
                               0xdeadbeefcafef00dull};
    uint8_t buf[8];

    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        uint64_t v = values[i];
        egm__wire_put_u16(buf, (uint16_t)v);
        assert_int_equal(egm__wire_get_u16(buf), (uint16_t)v);
        egm__wire_put_u32(buf, (uint32_t)v);
        assert_int_equal(egm__wire_get_u32(buf), (uint32_t)v);
        egm__wire_put_u64(buf, v);
        assert_true(egm__wire_get_u64(buf) == v);
    }
}

static void test_id(void **state)
{
    (void)state;
    egm_id_t id = {.hi = 0x0102030405060708ull, .lo = 0x1112131415161718ull};
    const uint8_t expected[17] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x18,
                                  0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, 0xee};
    uint8_t buf[17];

    memset(buf, 0xee, sizeof(buf));
    egm__wire_put_id(buf, id);
    assert_memory_equal(buf, expected, sizeof(expected));
    egm_id_t back = egm__wire_get_id(buf);
    assert_true(back.hi == id.hi && back.lo == id.lo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
