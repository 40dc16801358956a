/* Registry of local buffers: add/remove, overlap -> EXISTS, acquire inside one
 * range only, BUSY while in use, read-only memory never a destination. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "te/registry.h"

static uint64_t live_at_start;
static char arena[64 * 1024];

static int setup(void **state)
{
    egm_registry_t *reg = NULL;
    live_at_start = egm__alloc_live_count();
    assert_int_equal(egm__registry_create(&reg), EGM_OK);
    *state = reg;
    return 0;
}

static int teardown(void **state)
{
    egm__registry_destroy(*state);
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

static void test_add_remove(void **state)
{
    egm_registry_t *reg = *state;
    assert_int_equal(egm__registry_add(reg, arena, 4096), EGM_OK);
    assert_int_equal(egm__registry_remove(reg, arena), EGM_OK);
    assert_int_equal(egm__registry_remove(reg, arena), EGM_ERR_NOT_FOUND);
    /* Removing needs the start address of a range, not an address inside it. */
    assert_int_equal(egm__registry_add(reg, arena, 4096), EGM_OK);
    assert_int_equal(egm__registry_remove(reg, arena + 1), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm__registry_remove(reg, arena), EGM_OK);
}

static void test_invalid_args(void **state)
{
    egm_registry_t *reg = *state;
    assert_int_equal(egm__registry_add(reg, NULL, 10), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__registry_add(reg, arena, 0), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__registry_add(reg, (void *)(UINTPTR_MAX - 10), 100), EGM_ERR_INVALID_ARG);
}

static void test_overlap_is_exists(void **state)
{
    egm_registry_t *reg = *state;
    assert_int_equal(egm__registry_add(reg, arena + 4096, 4096), EGM_OK);
    assert_int_equal(egm__registry_add(reg, arena + 4096, 4096), EGM_ERR_EXISTS);
    assert_int_equal(egm__registry_add(reg, arena + 4095, 2), EGM_ERR_EXISTS);  /* left edge */
    assert_int_equal(egm__registry_add(reg, arena + 8191, 10), EGM_ERR_EXISTS); /* right edge */
    assert_int_equal(egm__registry_add(reg, arena, 3 * 4096), EGM_ERR_EXISTS);  /* covers */
    assert_int_equal(egm__registry_add(reg, arena + 5000, 10), EGM_ERR_EXISTS); /* inside */
    /* Adjacent ranges touch but do not overlap. */
    assert_int_equal(egm__registry_add(reg, arena, 4096), EGM_OK);
    assert_int_equal(egm__registry_add(reg, arena + 8192, 4096), EGM_OK);
    assert_int_equal(egm__registry_remove(reg, arena), EGM_OK);
    assert_int_equal(egm__registry_remove(reg, arena + 4096), EGM_OK);
    assert_int_equal(egm__registry_remove(reg, arena + 8192), EGM_OK);
}

static void test_acquire_inside_one_range(void **state)
{
    egm_registry_t *reg = *state;
    assert_int_equal(egm__registry_add(reg, arena, 4096), EGM_OK);
    assert_int_equal(egm__registry_add(reg, arena + 4096, 4096), EGM_OK);
    assert_int_equal(egm__registry_acquire(reg, arena, 4096), EGM_OK);
    egm__registry_release(reg, arena);
    assert_int_equal(egm__registry_acquire(reg, arena + 100, 200), EGM_OK);
    egm__registry_release(reg, arena + 100);
    /* Spanning two adjacent ranges is not "inside one range". */
    assert_int_equal(egm__registry_acquire(reg, arena + 4000, 200), EGM_ERR_NOT_REGISTERED);
    assert_int_equal(egm__registry_acquire(reg, arena + 8192, 1), EGM_ERR_NOT_REGISTERED);
    assert_int_equal(egm__registry_acquire(reg, arena + 8000, 1000), EGM_ERR_NOT_REGISTERED);
    assert_int_equal(egm__registry_acquire(reg, arena + 4096 * 4, 1), EGM_ERR_NOT_REGISTERED);
    assert_int_equal(egm__registry_acquire(reg, NULL, 1), EGM_ERR_NOT_REGISTERED);
    assert_int_equal(egm__registry_remove(reg, arena), EGM_OK);
    assert_int_equal(egm__registry_remove(reg, arena + 4096), EGM_OK);
}

static void test_busy_while_in_use(void **state)
{
    egm_registry_t *reg = *state;
    assert_int_equal(egm__registry_add(reg, arena, 4096), EGM_OK);
    assert_int_equal(egm__registry_acquire(reg, arena + 10, 10), EGM_OK);
    assert_int_equal(egm__registry_acquire(reg, arena + 20, 10), EGM_OK);
    assert_int_equal(egm__registry_remove(reg, arena), EGM_ERR_BUSY);
    egm__registry_release(reg, arena + 10);
    assert_int_equal(egm__registry_remove(reg, arena), EGM_ERR_BUSY);
    egm__registry_release(reg, arena + 20);
    assert_int_equal(egm__registry_remove(reg, arena), EGM_OK);
}

static void test_many_ranges_stay_sorted(void **state)
{
    egm_registry_t *reg = *state;
    /* Insert 16 one-page ranges out of order, then look each up. */
    for (int i = 0; i < 16; i++) {
        int k = (i * 7) % 16;
        assert_int_equal(egm__registry_add(reg, arena + k * 4096, 4096), EGM_OK);
    }
    for (int k = 0; k < 16; k++) {
        assert_int_equal(egm__registry_acquire(reg, arena + k * 4096 + 5, 4091), EGM_OK);
        egm__registry_release(reg, arena + k * 4096 + 5);
        assert_int_equal(egm__registry_acquire(reg, arena + k * 4096 + 5, 4092),
                         EGM_ERR_NOT_REGISTERED);
    }
    for (int k = 15; k >= 0; k--)
        assert_int_equal(egm__registry_remove(reg, arena + k * 4096), EGM_OK);
}

/* Whether buffer [addr, +len) may be acquired as a get's destination (and
 * always as a put's source). */
static egm_status_t acquire_for_write(egm_registry_t *reg, void *addr, size_t len)
{
    int acquired = 0;
    egm_status_t st = egm__registry_acquire_n(reg, &addr, &len, 1, 0, &acquired);
    assert_int_equal(st, EGM_OK);
    egm__registry_release_n(reg, &addr, &acquired, 1);
    st = egm__registry_acquire_n(reg, &addr, &len, 1, 1, &acquired);
    assert_int_equal(acquired, st == EGM_OK);
    egm__registry_release_n(reg, &addr, &acquired, 1);
    return st;
}

/* Host memory with a page this process may not write is registered (a put
 * may read it) but refused as a get's destination (asked at the first get), where the copy would
 * kill the process; the writable pages beside it are not. */
static void test_read_only_is_no_destination(void **state)
{
    egm_registry_t *reg = *state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(mprotect(p + page, page, PROT_READ), 0); /* the middle page */

    assert_int_equal(egm__registry_add(reg, p, 3 * page), EGM_OK);
    assert_int_equal(acquire_for_write(reg, p, 10), EGM_ERR_INVALID_ARG); /* the range is */
    assert_non_null(strstr(egm_last_error(), "may not write"));
    assert_int_equal(egm__registry_remove(reg, p), EGM_OK);
    /* the read-only page alone, in part; ending in it; the pages either side */
    assert_int_equal(egm__registry_add(reg, p + page + 8, 100), EGM_OK);
    assert_int_equal(acquire_for_write(reg, p + page + 8, 100), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__registry_remove(reg, p + page + 8), EGM_OK);
    assert_int_equal(egm__registry_add(reg, p + 100, page), EGM_OK);
    assert_int_equal(acquire_for_write(reg, p + 100, 8), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__registry_remove(reg, p + 100), EGM_OK);
    assert_int_equal(egm__registry_add(reg, p, page), EGM_OK);
    assert_int_equal(egm__registry_add(reg, p + 2 * page, page), EGM_OK);
    assert_int_equal(acquire_for_write(reg, p, page), EGM_OK);
    assert_int_equal(acquire_for_write(reg, p + 2 * page, page), EGM_OK);
    assert_int_equal(egm__registry_remove(reg, p), EGM_OK);
    assert_int_equal(egm__registry_remove(reg, p + 2 * page), EGM_OK);
    /* judged at the first get into the range, not when registered: made
     * writable in between, it is a destination */
    assert_int_equal(egm__registry_add(reg, p, 3 * page), EGM_OK);
    assert_int_equal(mprotect(p + page, page, PROT_READ | PROT_WRITE), 0);
    assert_int_equal(acquire_for_write(reg, p + page, 10), EGM_OK);
    assert_int_equal(egm__registry_remove(reg, p), EGM_OK);
    assert_int_equal(munmap(p, 3 * page), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_add_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overlap_is_exists, setup, teardown),
        cmocka_unit_test_setup_teardown(test_acquire_inside_one_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_while_in_use, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_ranges_stay_sorted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only_is_no_destination, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
