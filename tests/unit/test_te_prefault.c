/* Prefault before a shm write: the blocks a write covers get page-table entries
 * in this process before the copy (seen in /proc/self/pagemap), nothing outside
 * them does, a copy into them then takes no fault per page, and blocks known to be
 * mapped are not populated again. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "te/prefault.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)
#define PAGE 4096u

typedef struct {
    int memfd;
    uint64_t size;
    uint8_t *provider; /* every page written through it: the pages exist */
    uint8_t *client;   /* a second mapping, as a consumer's: no entries yet */
} fx_t;

static void fx_open(fx_t *fx, uint64_t size)
{
    fx->size = size;
    fx->memfd = memfd_create("test-prefault", MFD_CLOEXEC);
    assert_true(fx->memfd >= 0);
    assert_int_equal(ftruncate(fx->memfd, (off_t)size), 0);
    fx->provider = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fx->memfd, 0);
    assert_true(fx->provider != MAP_FAILED);
    memset(fx->provider, 0x5a, size);
    fx->client = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fx->memfd, 0);
    assert_true(fx->client != MAP_FAILED);
}

static void fx_close(fx_t *fx)
{
    munmap(fx->client, fx->size);
    munmap(fx->provider, fx->size);
    close(fx->memfd);
}

/* Pages of [at, at + len) of p that have a page-table entry in this process. */
static size_t present_pages(const uint8_t *p, uint64_t at, uint64_t len)
{
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    size_t n = 0;
    for (uint64_t off = at; off < at + len; off += PAGE) {
        uint64_t entry = 0;
        off_t where = (off_t)(((uintptr_t)p + off) / PAGE * sizeof(entry));
        assert_int_equal(pread(fd, &entry, sizeof(entry), where), (ssize_t)sizeof(entry));
        n += (entry >> 63) & 1;
    }
    close(fd);
    return n;
}

static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* The kernel answers MADV_POPULATE_READ (Linux 5.14): else the tests skip. */
static int populate_supported(void)
{
    fx_t fx;
    fx_open(&fx, PAGE);
    int ok = madvise(fx.client, PAGE, MADV_POPULATE_READ) == 0;
    fx_close(&fx);
    return ok;
}

/* Whether this kernel gives shared memory huge pages on its own (shmem THP
 * "always" or "force"): then a memfd's pages are 2 MiB and the 4 KiB page
 * counts these tests expect do not hold. */
static int shmem_huge_pages(void)
{
    char buf[256] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, "[always]") != NULL || strstr(buf, "[force]") != NULL;
}

static void test_write_maps_the_pages_it_covers_only(void **state)
{
    (void)state;
    if (!populate_supported() || shmem_huge_pages())
        EGM_SKIP("%s",
                 !populate_supported()
                     ? "madvise(MADV_POPULATE_READ) not supported by this kernel"
                     : "shmem uses transparent huge pages (the page counts assume 4 KiB pages)");
    fx_t fx;
    egm_prefault_t *p = NULL;
    fx_open(&fx, 4 * MIB);
    assert_int_equal(egm__prefault_create(fx.size, &p), EGM_OK);
    assert_int_equal(present_pages(fx.client, 0, fx.size), 0);

    /* [100 KiB, 300 KiB): its own pages, nothing in another 2 MiB page table's range. */
    assert_int_equal(egm__prefault_write(p, fx.client, 100 * KIB, 200 * KIB), 200 * KIB);
    assert_int_equal(present_pages(fx.client, 100 * KIB, 200 * KIB), 200 * KIB / PAGE);
    assert_int_equal(present_pages(fx.client, 2 * MIB, 2 * MIB), 0);

    /* Blocks 2 and 3 ([128 KiB, 256 KiB)) were covered whole: not populated again. Blocks 1
     * and 4, covered in part, are populated for the pages the next write covers. */
    assert_int_equal(egm__prefault_write(p, fx.client, 128 * KIB, 128 * KIB), 0);
    assert_int_equal(egm__prefault_write(p, fx.client, 64 * KIB, 256 * KIB), 128 * KIB);
    assert_int_equal(egm__prefault_write(p, fx.client, 64 * KIB, 256 * KIB), 0);
    /* A write from a known block into a new one populates the new one's pages only. */
    assert_int_equal(egm__prefault_write(p, fx.client, 300 * KIB, 64 * KIB), 44 * KIB);
    egm__prefault_destroy(p);
    fx_close(&fx);
}

static void test_copy_after_prefault_takes_no_fault_per_page(void **state)
{
    (void)state;
    if (!populate_supported() || shmem_huge_pages())
        EGM_SKIP("%s",
                 !populate_supported()
                     ? "madvise(MADV_POPULATE_READ) not supported by this kernel"
                     : "shmem uses transparent huge pages (the page counts assume 4 KiB pages)");
    fx_t fx;
    egm_prefault_t *p = NULL;
    uint64_t len = 1 * MIB;
    uint8_t *src = egm_malloc(len, "test.prefault");
    assert_non_null(src);
    memset(src, 0x33, len); /* the source's own faults happen here */
    fx_open(&fx, 4 * MIB);
    assert_int_equal(egm__prefault_create(fx.size, &p), EGM_OK);

    /* Without it, the copy faults page by page (shared-file write faults). */
    long f0 = minor_faults();
    memcpy(fx.client + 2 * MIB, src, len);
    long without = minor_faults() - f0;
    assert_true(without >= (long)(len / PAGE / 2));

    assert_int_equal(egm__prefault_write(p, fx.client, 0, len), len);
    f0 = minor_faults();
    memcpy(fx.client, src, len);
    long with = minor_faults() - f0;
    /* None from the mapping (0 here); ASan's shadow memory adds its own, one per 8 pages. */
    assert_true(with * 4 < without);
    assert_memory_equal(fx.provider, src, len);

    egm__prefault_destroy(p);
    egm_free(src);
    fx_close(&fx);
}

static void test_read_marks_covered_blocks(void **state)
{
    (void)state;
    egm_prefault_t *p = NULL;
    fx_t fx;
    fx_open(&fx, 1 * MIB);
    assert_int_equal(egm__prefault_create(fx.size, &p), EGM_OK);
    /* A read of [32 KiB, 200 KiB) covered blocks 1 and 2 whole, not 0 nor 3. */
    egm__prefault_mark(p, 32 * KIB, 168 * KIB);
    if (!populate_supported()) {
        egm__prefault_destroy(p);
        fx_close(&fx);
        EGM_SKIP("madvise(MADV_POPULATE_READ) not supported by this kernel");
    }
    assert_int_equal(egm__prefault_write(p, fx.client, 64 * KIB, 128 * KIB), 0);
    assert_int_equal(egm__prefault_write(p, fx.client, 0, 64 * KIB), 64 * KIB);
    /* One byte: its page only (block 3 stays unknown). */
    assert_int_equal(egm__prefault_write(p, fx.client, 192 * KIB, 1), PAGE);
    assert_int_equal(egm__prefault_write(p, fx.client, 192 * KIB, 1), PAGE);
    egm__prefault_destroy(p);
    fx_close(&fx);
}

static void test_short_last_block(void **state)
{
    (void)state;
    if (!populate_supported() || shmem_huge_pages())
        EGM_SKIP("%s",
                 !populate_supported()
                     ? "madvise(MADV_POPULATE_READ) not supported by this kernel"
                     : "shmem uses transparent huge pages (the page counts assume 4 KiB pages)");
    /* 200 KiB: the fourth block holds 8 KiB only; a write of them covers it whole. */
    egm_prefault_t *p = NULL;
    fx_t fx;
    fx_open(&fx, 200 * KIB);
    assert_int_equal(egm__prefault_create(fx.size, &p), EGM_OK);
    assert_int_equal(egm__prefault_write(p, fx.client, 192 * KIB, 8 * KIB), 8 * KIB);
    assert_int_equal(present_pages(fx.client, 192 * KIB, 8 * KIB), 2);
    assert_int_equal(egm__prefault_write(p, fx.client, 196 * KIB, 4 * KIB), 0);
    /* A read to the end marks the blocks it covered (the short one too); block 1 is not. */
    egm__prefault_mark(p, 128 * KIB, 72 * KIB);
    assert_int_equal(egm__prefault_write(p, fx.client, 100 * KIB, 28 * KIB), 28 * KIB);
    assert_int_equal(egm__prefault_write(p, fx.client, 128 * KIB, 72 * KIB), 0);
    egm__prefault_destroy(p);
    fx_close(&fx);
}

static void test_null_is_a_no_op(void **state)
{
    (void)state;
    uint8_t byte = 0;
    assert_int_equal(egm__prefault_write(NULL, &byte, 0, 1), 0);
    egm__prefault_mark(NULL, 0, 1);
    egm__prefault_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_maps_the_pages_it_covers_only,
                                        egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_copy_after_prefault_takes_no_fault_per_page,
                                        egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_read_marks_covered_blocks, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_short_last_block, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_null_is_a_no_op, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
