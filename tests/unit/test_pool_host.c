/* Host pool: sizes, 4 KiB rounding, chunking by max_chunk, shared memfd
 * mappings, and refusal of sizes that make no pool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "pool/host_pool.h"

static int fd_is_open(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0;
}

static void test_single_chunk_when_total_fits(void **state)
{
    (void)state;
    egm_host_pool_t *pool = NULL;
    assert_int_equal(egm__host_pool_create(1 << 20, 4 << 20, 0, &pool), EGM_OK);
    assert_int_equal(egm__host_pool_chunk_count(pool), 1);
    const egm_pool_chunk_t *c = egm__host_pool_chunk(pool, 0);
    assert_non_null(c);
    assert_int_equal(c->size, 1 << 20);
    assert_true(c->memfd >= 0);
    struct stat st;
    assert_int_equal(fstat(c->memfd, &st), 0);
    assert_int_equal(st.st_size, 1 << 20);
    assert_null(egm__host_pool_chunk(pool, 1));
    egm__host_pool_destroy(pool);
}

static void test_total_rounded_down_to_4k(void **state)
{
    (void)state;
    egm_host_pool_t *pool = NULL;
    assert_int_equal(egm__host_pool_create(3 * 4096 + 1000, 1 << 20, 0, &pool), EGM_OK);
    assert_int_equal(egm__host_pool_chunk_count(pool), 1);
    assert_int_equal(egm__host_pool_chunk(pool, 0)->size, 3 * 4096);
    egm__host_pool_destroy(pool);
}

static void test_chunks_no_larger_than_max(void **state)
{
    (void)state;
    egm_host_pool_t *pool = NULL;
    /* 10 pages in chunks of 4 pages: 4 + 4 + 2. */
    assert_int_equal(egm__host_pool_create(10 * 4096, 4 * 4096, 0, &pool), EGM_OK);
    assert_int_equal(egm__host_pool_chunk_count(pool), 3);
    uint64_t sum = 0;
    for (size_t i = 0; i < 3; i++) {
        const egm_pool_chunk_t *c = egm__host_pool_chunk(pool, i);
        assert_true(c->size <= 4 * 4096);
        assert_true(c->size % 4096 == 0);
        sum += c->size;
    }
    assert_int_equal(sum, 10 * 4096);
    assert_int_equal(egm__host_pool_chunk(pool, 2)->size, 2 * 4096);
    /* Each chunk is its own memfd. */
    assert_int_not_equal(egm__host_pool_chunk(pool, 0)->memfd,
                         egm__host_pool_chunk(pool, 1)->memfd);
    egm__host_pool_destroy(pool);
}

static void test_exact_multiple_of_max(void **state)
{
    (void)state;
    egm_host_pool_t *pool = NULL;
    assert_int_equal(egm__host_pool_create(8 * 4096, 4 * 4096, 0, &pool), EGM_OK);
    assert_int_equal(egm__host_pool_chunk_count(pool), 2);
    assert_int_equal(egm__host_pool_chunk(pool, 1)->size, 4 * 4096);
    egm__host_pool_destroy(pool);
}

static void test_memory_is_shared_with_the_memfd(void **state)
{
    (void)state;
    egm_host_pool_t *pool = NULL;
    assert_int_equal(egm__host_pool_create(2 * 4096, 4096, 0, &pool), EGM_OK);
    const egm_pool_chunk_t *c = egm__host_pool_chunk(pool, 1);
    memset(c->base, 0xab, c->size);
    /* A second mapping of the memfd (what a consumer does) sees the bytes. */
    uint8_t *other = mmap(NULL, c->size, PROT_READ, MAP_SHARED, c->memfd, 0);
    assert_true(other != MAP_FAILED);
    assert_int_equal(other[0], 0xab);
    assert_int_equal(other[c->size - 1], 0xab);
    munmap(other, c->size);
    egm__host_pool_destroy(pool);
}

static void test_memfd_cannot_be_shrunk(void **state)
{
    (void)state;
    egm_host_pool_t *pool = NULL;
    assert_int_equal(egm__host_pool_create(4096, 4096, 0, &pool), EGM_OK);
    /* A consumer holding the fd must not be able to cut the pool's pages away. */
    assert_int_not_equal(ftruncate(egm__host_pool_chunk(pool, 0)->memfd, 0), 0);
    egm__host_pool_destroy(pool);
}

static void test_too_small_or_bad_max_is_refused(void **state)
{
    (void)state;
    egm_host_pool_t *pool = NULL;
    assert_int_equal(egm__host_pool_create(0, 4096, 0, &pool), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__host_pool_create(4095, 4096, 0, &pool), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "global_segment_size"));
    assert_int_equal(egm__host_pool_create(8192, 0, 0, &pool), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__host_pool_create(8192, 5000, 0, &pool), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "max_mr_size"));
    assert_null(pool);
}

static void test_destroy_closes_fds(void **state)
{
    (void)state;
    egm_host_pool_t *pool = NULL;
    assert_int_equal(egm__host_pool_create(3 * 4096, 4096, 0, &pool), EGM_OK);
    int fds[3];
    for (size_t i = 0; i < 3; i++) {
        fds[i] = egm__host_pool_chunk(pool, i)->memfd;
        assert_true(fd_is_open(fds[i]));
    }
    egm__host_pool_destroy(pool);
    for (size_t i = 0; i < 3; i++)
        assert_false(fd_is_open(fds[i]));
    egm__host_pool_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_single_chunk_when_total_fits, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_total_rounded_down_to_4k, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_chunks_no_larger_than_max, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_exact_multiple_of_max, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_memory_is_shared_with_the_memfd, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_memfd_cannot_be_shrunk, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_too_small_or_bad_max_is_refused, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_destroy_closes_fds, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
