/* Streaming copy: every byte arrives, whatever the alignment of either side and
 * the length (below and above the streaming threshold, with heads and tails),
 * and nothing outside the destination range is written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "te/stream_copy.h"

#define GUARD 64

static void check_copy(size_t len, size_t src_off, size_t dst_off)
{
    size_t cap = len + 2 * GUARD + 16;
    uint8_t *src = egm_malloc(cap, "test.stream_copy");
    uint8_t *dst = egm_malloc(cap, "test.stream_copy");
    assert_non_null(src);
    assert_non_null(dst);
    uint64_t x = 0x9e3779b97f4a7c15ull ^ len;
    for (size_t i = 0; i < cap; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        src[i] = (uint8_t)x;
    }
    memset(dst, 0xee, cap);
    egm__stream_copy(dst + GUARD + dst_off, src + GUARD + src_off, len);
    assert_memory_equal(dst + GUARD + dst_off, src + GUARD + src_off, len);
    for (size_t i = 0; i < GUARD + dst_off; i++)
        assert_int_equal(dst[i], 0xee);
    for (size_t i = GUARD + dst_off + len; i < cap; i++)
        assert_int_equal(dst[i], 0xee);
    egm_free(src);
    egm_free(dst);
}

static void test_small_copies(void **state)
{
    (void)state;
    static const size_t lens[] = {0, 1, 15, 16, 17, 63, 64, 65, 4096, 65537};
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
        for (size_t s = 0; s < 3; s++)
            check_copy(lens[l], s * 7, s * 5);
}

static void test_streamed_copies_any_alignment(void **state)
{
    (void)state;
    static const size_t lens[] = {EGM_STREAM_COPY_MIN, EGM_STREAM_COPY_MIN + 1,
                                  EGM_STREAM_COPY_MIN + 63, (size_t)1 << 20,
                                  ((size_t)1 << 20) + 77};
    static const size_t offs[] = {0, 1, 8, 15, 16, 33};
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
        for (size_t s = 0; s < sizeof(offs) / sizeof(offs[0]); s++)
            for (size_t d = 0; d < sizeof(offs) / sizeof(offs[0]); d++)
                check_copy(lens[l], offs[s], offs[d]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_small_copies, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_streamed_copies_any_alignment, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
