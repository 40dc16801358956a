/* VMM pool against the fake CUDA driver: planning (granularity, chunk sizes),
 * locations and handle types, the auto fallback from fabric to posix_fd, a
 * fault sweep over every driver call of a creation (each failure unwinds to
 * nothing, descriptors included), the same with a second fault on the
 * rollback it sets off (what could not be released is kept, reported and
 * released by a retry), and the pool's chunks served to a consumer engine over
 * nvlink, as a provider client does it. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "cuda/driver.h"
#include "pool/pool_limits.h"
#include "pool/vmm_pool.h"
#include "support/fake_cuda.h"
#include "te/te.h"

#define MIB (1ull << 20)

static const egm_cuda_api_t *cu;

typedef struct {
    uint64_t live_at_start;
    int fds_at_start;
} fx_t;

static uint8_t *view(uint64_t ptr, size_t len)
{
    void *v = egm_fake_cuda_host_view(ptr, len);
    assert_non_null(v);
    return v;
}

static int setup(void **state)
{
    static fx_t fx;
    egm_fake_cuda_reset(2, 2);
    fx.live_at_start = egm__alloc_live_count();
    fx.fds_at_start = egm_test_count_fds();
    *state = &fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    assert_int_equal(egm_fake_cuda_live_objects(), 0);
    assert_int_equal(egm__alloc_live_count(), fx->live_at_start);
    assert_int_equal(egm_test_count_fds(), fx->fds_at_start);
    return 0;
}

/* One location (the tests run one pool at a time). */
static int location;

static egm_vmm_pool_params_t params(egm_vmm_location_t loc, int id, egm_vmm_handles_t handles,
                                    uint64_t total, uint64_t max_chunk)
{
    location = id;
    return (egm_vmm_pool_params_t){.location = loc,
                                   .locations = &location,
                                   .location_count = 1,
                                   .handles = handles,
                                   .total = total,
                                   .max_chunk = max_chunk};
}

static void test_host_numa_posix_fd(void **state)
{
    (void)state;
    /* 7 MiB + change in chunks of at most 5 MiB, granularity 2 MiB: 6 MiB as
     * 4 + 2. */
    egm_vmm_pool_params_t p =
        params(EGM_VMM_HOST_NUMA, 1, EGM_VMM_HANDLES_POSIX_FD, 7 * MIB + 12345, 5 * MIB);
    egm_vmm_pool_t *pool = NULL;
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_OK);
    assert_int_equal(egm__vmm_pool_granularity(pool), 2 * MIB);
    assert_int_equal(egm__vmm_pool_chunk_count(pool), 2);
    const egm_vmm_chunk_t *c0 = egm__vmm_pool_chunk(pool, 0), *c1 = egm__vmm_pool_chunk(pool, 1);
    assert_int_equal(c0->size, 4 * MIB);
    assert_int_equal(c1->size, 2 * MIB);
    assert_null(egm__vmm_pool_chunk(pool, 2));
    for (size_t i = 0; i < 2; i++) {
        const egm_vmm_chunk_t *c = egm__vmm_pool_chunk(pool, i);
        assert_int_equal(c->handle_types, EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        assert_int_equal(c->has_fabric, 0);
        assert_int_equal(c->device, -1);
        assert_int_equal(egm__vmm_chunk_handle_kind(c), EGM_HANDLE_POSIX_FD);
        /* Host access was granted: the CPU reads and writes the mapping. */
        memset(c->base, 0x5a, c->size);
        assert_int_equal(((uint8_t *)c->base)[c->size - 1], 0x5a);
    }
    egm_fake_cuda_counters_t fc = egm_fake_cuda_counters();
    assert_int_equal(fc.allocations, 2);
    assert_int_equal(fc.reservations, 2);
    assert_int_equal(fc.mappings, 2);

    int fd = -1;
    assert_int_equal(egm__vmm_pool_export_fd(pool, 1, &fd), EGM_OK);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(egm__vmm_pool_export_fd(pool, 2, &fd), EGM_ERR_INVALID_ARG);
    egm__vmm_pool_destroy(pool);
    egm__vmm_pool_destroy(NULL);
}

static void test_device_fabric(void **state)
{
    (void)state;
    egm_fake_cuda_set_strict_device_memory(1);
    egm_vmm_pool_params_t p = params(EGM_VMM_DEVICE, 1, EGM_VMM_HANDLES_FABRIC, 6 * MIB, 2 * MIB);
    egm_vmm_pool_t *pool = NULL;
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_OK);
    assert_int_equal(egm__vmm_pool_chunk_count(pool), 3);
    for (size_t i = 0; i < 3; i++) {
        const egm_vmm_chunk_t *c = egm__vmm_pool_chunk(pool, i);
        assert_int_equal(c->handle_types, EGM_CU_MEM_HANDLE_TYPE_FABRIC);
        assert_int_equal(c->has_fabric, 1);
        assert_int_equal(c->device, 1);
        assert_int_equal(egm__vmm_chunk_handle_kind(c), EGM_HANDLE_FABRIC);
        unsigned char zero[EGM_CU_FABRIC_HANDLE_SIZE] = {0};
        assert_memory_not_equal(c->fabric_handle, zero, sizeof(zero));
    }
    int fd = -1;
    assert_int_equal(egm__vmm_pool_export_fd(pool, 0, &fd), EGM_ERR_NOT_SUPPORTED);
    egm__vmm_pool_destroy(pool);
}

static void test_auto_and_fabric_refused(void **state)
{
    (void)state;
    egm_vmm_pool_t *pool = NULL;
    /* Fabric allowed: auto asks for both kinds. */
    egm_vmm_pool_params_t p = params(EGM_VMM_HOST_NUMA, 0, EGM_VMM_HANDLES_AUTO, 4 * MIB, 4 * MIB);
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_OK);
    assert_int_equal(egm__vmm_pool_chunk(pool, 0)->handle_types,
                     EGM_CU_MEM_HANDLE_TYPE_FABRIC | EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    assert_int_equal(egm__vmm_chunk_handle_kind(egm__vmm_pool_chunk(pool, 0)), EGM_HANDLE_FABRIC);
    egm__vmm_pool_destroy(pool);

    /* The H200 without an IMEX channel: cuMemCreate with FABRIC answers
     * NOT_PERMITTED. auto falls back to posix_fd ... */
    egm_fake_cuda_set_fabric(1, 0);
    p.total = 8 * MIB;
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_OK);
    assert_int_equal(egm__vmm_pool_chunk_count(pool), 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(egm__vmm_pool_chunk(pool, i)->handle_types,
                         EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        assert_int_equal(egm__vmm_pool_chunk(pool, i)->has_fabric, 0);
    }
    egm__vmm_pool_destroy(pool);
    assert_int_equal(egm_fake_cuda_live_objects(), 0);

    /* ... while a pool that demands fabric fails with the driver's reason. */
    static const egm_vmm_handles_t strict[] = {EGM_VMM_HANDLES_FABRIC, EGM_VMM_HANDLES_BOTH};
    for (size_t i = 0; i < 2; i++) {
        p.handles = strict[i];
        pool = NULL;
        assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_ERR_NOT_SUPPORTED);
        assert_null(pool);
        assert_non_null(strstr(egm_last_error(), "CUDA_ERROR_NOT_PERMITTED"));
        assert_int_equal(egm_fake_cuda_live_objects(), 0);
    }
}

static void test_bad_parameters(void **state)
{
    (void)state;
    egm_vmm_pool_t *pool = NULL;
    egm_vmm_pool_params_t p =
        params(EGM_VMM_HOST_NUMA, 0, EGM_VMM_HANDLES_POSIX_FD, 2 * MIB - 1, 4 * MIB);
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "global_segment_size"));
    p.total = 4 * MIB;
    p.max_chunk = 1 * MIB;
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "max_mr_size"));
    p = params(EGM_VMM_DEVICE, 2, EGM_VMM_HANDLES_POSIX_FD, 4 * MIB, 4 * MIB);
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "pool_location"));
    p = params((egm_vmm_location_t)7, 0, EGM_VMM_HANDLES_POSIX_FD, 4 * MIB, 4 * MIB);
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "pool_memory"));
    p = params(EGM_VMM_HOST_NUMA, 0, (egm_vmm_handles_t)9, 4 * MIB, 4 * MIB);
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "egm_handle_type"));
    /* A NUMA node the driver does not have: its error, and nothing left. */
    p = params(EGM_VMM_HOST_NUMA, 5, EGM_VMM_HANDLES_POSIX_FD, 4 * MIB, 4 * MIB);
    assert_int_not_equal(egm__vmm_pool_create(&p, &pool), EGM_OK);
    assert_non_null(strstr(egm_last_error(), "CUDA_ERROR_"));
    assert_null(pool);
}

/* Every driver call a creation makes, failed in turn (each occurrence): the
 * creation fails with the CUDA error named, or succeeds when the call did not
 * matter; either way nothing is left once the pool is gone. */
/* HOST_NUMA memory is pinned as it is created: more than the host has
 * available is refused by the plan and by the creation before any driver
 * allocation, unless allow_overcommit. */
static void test_host_numa_above_available_refused(void **state)
{
    (void)state;
    uint64_t avail = egm__pool_limits_host_available();
    if (avail == EGM_POOL_LIMITS_UNKNOWN)
        EGM_SKIP("no MemAvailable in /proc/meminfo");
    uint64_t over = (avail / (2 * MIB) + 8) * 2 * MIB;
    egm_vmm_pool_params_t p = params(EGM_VMM_HOST_NUMA, 0, EGM_VMM_HANDLES_POSIX_FD, over, over);
    egm_egm_plan_t *plan = NULL;
    assert_int_equal(egm__vmm_pool_plan(&p, &plan), EGM_ERR_CONFIG);
    assert_null(plan);
    assert_non_null(strstr(egm_last_error(), "global_segment_size"));
    assert_non_null(strstr(egm_last_error(), "MemAvailable"));
    assert_non_null(strstr(egm_last_error(), "allow_overcommit=true"));
    egm_vmm_pool_t *pool = NULL;
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_ERR_CONFIG);
    assert_null(pool);
    assert_non_null(strstr(egm_last_error(), "MemAvailable"));
    assert_int_equal(egm_fake_cuda_counters().allocations, 0);

    /* Overcommit: the plan is accepted (nothing allocated here). */
    p.allow_overcommit = 1;
    assert_int_equal(egm__vmm_pool_plan(&p, &plan), EGM_OK);
    assert_int_equal(plan->capacity, over);
    egm__egm_plan_free(plan);
    /* Device memory is the driver's to refuse: not checked against the host. */
    p = params(EGM_VMM_DEVICE, 0, EGM_VMM_HANDLES_POSIX_FD, over, over);
    assert_int_equal(egm__vmm_pool_plan(&p, &plan), EGM_OK);
    egm__egm_plan_free(plan);
}

static void test_fault_sweep_unwinds(void **state)
{
    (void)state;
    egm_vmm_pool_params_t p = params(EGM_VMM_HOST_NUMA, 0, EGM_VMM_HANDLES_BOTH, 6 * MIB, 2 * MIB);
    egm_vmm_pool_t *pool = NULL;
    egm_fake_cuda_clear_calls();
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_OK);
    const char *names[EGM_FAKE_CUDA_N_FUNCTIONS];
    size_t n_names = egm_fake_cuda_called(names, EGM_FAKE_CUDA_N_FUNCTIONS);
    size_t calls[EGM_FAKE_CUDA_N_FUNCTIONS];
    for (size_t i = 0; i < n_names; i++)
        calls[i] = egm_fake_cuda_calls(names[i]);
    egm__vmm_pool_destroy(pool);
    assert_true(n_names >= 5); /* create, reserve, map, access, export at least */

    size_t failures = 0;
    for (size_t i = 0; i < n_names; i++) {
        for (size_t n = 1; n <= calls[i]; n++) {
            int fds = egm_test_count_fds();
            egm_fake_cuda_reset(2, 2);
            egm_fake_cuda_fail(names[i], (unsigned)n, EGM_CU_ERROR_OUT_OF_MEMORY);
            pool = NULL;
            egm_status_t st = egm__vmm_pool_create(&p, &pool);
            if (st == EGM_OK) {
                egm__vmm_pool_destroy(pool);
            } else {
                failures++;
                assert_null(pool);
                /* The memory calls name the driver's error; a failed device
                 * enumeration reads as no (or too few) devices. */
                if (strncmp(names[i], "cuMem", 5) == 0)
                    assert_non_null(strstr(egm_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
            }
            egm_fake_cuda_clear_failures();
            if (egm_fake_cuda_live_objects() != 0)
                fprintf(stderr, "%s call %zu left objects behind\n", names[i], n);
            assert_int_equal(egm_fake_cuda_live_objects(), 0);
            assert_int_equal(egm_test_count_fds(), fds);
        }
    }
    /* Every chunk step of every chunk was hit. */
    assert_true(failures >= 3 * 5);
}

/* Two faults in one creation: a driver call fails, and so does a release step
 * of the rollback it sets off, once (each such call in turn) or for good.
 * The creation answers the first error. What the rollback could not release
 * stays with a pool handed back (*pool_p, held chunks, cleanup failures
 * counted) rather than being forgotten, and a later release frees it; nothing
 * is left in the end, descriptors included. */
static void test_rollback_faults_keep_and_retry(void **state)
{
    (void)state;
    static const char *const cleanup[] = {"cuMemUnmap", "cuMemAddressFree", "cuMemRelease"};
    egm_vmm_pool_params_t p = params(EGM_VMM_HOST_NUMA, 0, EGM_VMM_HANDLES_BOTH, 6 * MIB, 2 * MIB);
    egm_vmm_pool_t *pool = NULL;
    egm_fake_cuda_clear_calls();
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_OK);
    const char *names[EGM_FAKE_CUDA_N_FUNCTIONS];
    size_t n_names = egm_fake_cuda_called(names, EGM_FAKE_CUDA_N_FUNCTIONS);
    size_t calls[EGM_FAKE_CUDA_N_FUNCTIONS];
    for (size_t i = 0; i < n_names; i++)
        calls[i] = egm_fake_cuda_calls(names[i]);
    egm__vmm_pool_destroy(pool);

    size_t kept = 0, retried_inside = 0;
    for (size_t i = 0; i < n_names; i++) {
        if (strncmp(names[i], "cuMem", 5) != 0)
            continue; /* device queries fail before anything is allocated */
        for (size_t n = 1; n <= calls[i]; n++) {
            /* Which cleanup calls the rollback of this failure makes. */
            egm_fake_cuda_reset(2, 2);
            egm_fake_cuda_fail(names[i], (unsigned)n, EGM_CU_ERROR_OUT_OF_MEMORY);
            pool = NULL;
            egm_status_t st = egm__vmm_pool_create(&p, &pool);
            if (st == EGM_OK) { /* a call that did not matter */
                egm__vmm_pool_destroy(pool);
                continue;
            }
            size_t before[3], total[3];
            for (size_t g = 0; g < 3; g++) {
                before[g] = egm_fake_cuda_calls_at_first_failure(cleanup[g]);
                total[g] = egm_fake_cuda_calls(cleanup[g]);
            }
            for (size_t g = 0; g < 3; g++) {
                /* nth 0: that step fails for good; then each call of it in the rollback once. */
                for (size_t m = before[g]; m <= total[g]; m++) {
                    if (m == before[g] && total[g] == before[g])
                        break; /* the rollback makes no such call */
                    int fds = egm_test_count_fds();
                    egm_fake_cuda_reset(2, 2);
                    egm_fake_cuda_fail(names[i], (unsigned)n, EGM_CU_ERROR_OUT_OF_MEMORY);
                    egm_fake_cuda_fail(cleanup[g], m == before[g] ? 0 : (unsigned)m,
                                       EGM_CU_ERROR_UNKNOWN);
                    pool = NULL;
                    st = egm__vmm_pool_create(&p, &pool);
                    assert_int_equal(st, EGM_ERR_NO_MEMORY);
                    assert_non_null(strstr(egm_last_error(), names[i]));
                    assert_non_null(strstr(egm_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
                    assert_true(egm_fake_cuda_failures_fired() >= 2);
                    if (pool == NULL) {
                        /* The failed step was retried by the rollback itself. */
                        assert_true(m != before[g]);
                        retried_inside++;
                    } else {
                        /* Kept, counted, and nothing servable. */
                        assert_true(egm__vmm_pool_held(pool) > 0);
                        assert_true(egm__vmm_pool_cleanup_failures(pool) > 0);
                        assert_int_equal(egm__vmm_pool_chunk_count(pool), 0);
                        assert_true(egm_fake_cuda_live_objects() > 0);
                        egm_fake_cuda_clear_failures();
                        assert_int_equal(egm__vmm_pool_release(pool), EGM_OK);
                        assert_int_equal(egm__vmm_pool_held(pool), 0);
                        egm__vmm_pool_destroy(pool);
                        kept++;
                    }
                    egm_fake_cuda_clear_failures();
                    if (egm_fake_cuda_live_objects() != 0)
                        fprintf(stderr, "%s call %zu, then %s call %zu left objects behind\n",
                                names[i], n, cleanup[g], m);
                    assert_int_equal(egm_fake_cuda_live_objects(), 0);
                    assert_int_equal(egm_test_count_fds(), fds);
                }
            }
        }
    }
    print_message("rollback faults: %zu creations handed back what they kept, %zu retried the "
                  "failed step themselves\n",
                  kept, retried_inside);
    assert_true(kept > 0);
    assert_true(retried_inside > 0);
}

typedef struct {
    uint64_t last_bytes;
    size_t last_chunks, calls;
    int monotonic;
} progress_seen_t;

static void on_progress(void *arg, uint64_t done, uint64_t total, size_t done_chunks,
                        size_t total_chunks)
{
    progress_seen_t *p = arg;
    if (done <= p->last_bytes || done_chunks != p->last_chunks + 1 || done > total ||
        done_chunks > total_chunks)
        p->monotonic = 0;
    p->last_bytes = done;
    p->last_chunks = done_chunks;
    p->calls++;
}

/* Three NUMA nodes, 4 threads: the plan's split (lower ids take the
 * remainder), every chunk on its node, progress once per chunk and in order;
 * then a failure part way on the threads rolls everything back. */
static void test_nodes_in_parallel(void **state)
{
    (void)state;
    egm_fake_cuda_reset(2, 3);
    static const int nodes[] = {0, 1, 2};
    progress_seen_t seen = {.monotonic = 1};
    egm_vmm_pool_params_t p = {.location = EGM_VMM_HOST_NUMA,
                               .locations = nodes,
                               .location_count = 3,
                               .handles = EGM_VMM_HANDLES_POSIX_FD,
                               .total = 22 * MIB + 5,
                               .max_chunk = 4 * MIB,
                               .allocator_alignment = 64,
                               .threads = 4,
                               .progress = on_progress,
                               .progress_arg = &seen};
    egm_vmm_pool_t *pool = NULL;
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_OK);
    /* 11 units of 2 MiB: 4 + 4 + 3 -> 8, 8, 6 MiB -> chunks 4+4, 4+4, 4+2. */
    static const int want_node[] = {0, 0, 1, 1, 2, 2};
    static const uint64_t want_size[] = {4, 4, 4, 4, 4, 2};
    assert_int_equal(egm__vmm_pool_chunk_count(pool), 6);
    for (size_t i = 0; i < 6; i++) {
        const egm_vmm_chunk_t *c = egm__vmm_pool_chunk(pool, i);
        assert_int_equal(c->location, want_node[i]);
        assert_int_equal(c->size, want_size[i] * MIB);
        assert_int_equal(c->stage, EGM_VMM_CHUNK_READY);
        assert_int_equal(c->device, -1);
    }
    assert_int_equal(egm__egm_plan_format(egm__vmm_pool_plan_of(pool), NULL, 0) > 0, 1);
    assert_int_equal(seen.calls, 6);
    assert_true(seen.monotonic);
    assert_int_equal(seen.last_bytes, 22 * MIB);
    assert_int_equal(egm_fake_cuda_counters().allocations, 6);
    egm__vmm_pool_destroy(pool);
    assert_int_equal(egm_fake_cuda_live_objects(), 0);

    for (unsigned nth = 1; nth <= 6; nth++) {
        egm_fake_cuda_fail("cuMemMap", nth, EGM_CU_ERROR_OUT_OF_MEMORY);
        pool = NULL;
        assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_ERR_NO_MEMORY);
        assert_null(pool);
        assert_non_null(strstr(egm_last_error(), "cuMemMap: CUDA_ERROR_OUT_OF_MEMORY"));
        egm_fake_cuda_clear_failures();
        assert_int_equal(egm_fake_cuda_live_objects(), 0);
    }
}

/* A release step that fails keeps its chunk; the next release resumes. */
static void test_release_resumes(void **state)
{
    (void)state;
    egm_vmm_pool_params_t p =
        params(EGM_VMM_HOST_NUMA, 0, EGM_VMM_HANDLES_POSIX_FD, 6 * MIB, 2 * MIB);
    egm_vmm_pool_t *pool = NULL;
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_OK);
    static const char *const steps[] = {"cuMemUnmap", "cuMemAddressFree", "cuMemRelease"};
    for (size_t s = 0; s < 3; s++) {
        egm_fake_cuda_fail(steps[s], 0, EGM_CU_ERROR_UNKNOWN);
        egm_status_t st = egm__vmm_pool_release(pool);
        assert_int_not_equal(st, EGM_OK);
        assert_non_null(strstr(egm_last_error(), steps[s]));
        assert_int_equal(egm__vmm_pool_held(pool), 3);
        assert_int_equal(egm__vmm_pool_chunk_count(pool), 0);
        assert_int_equal(egm__vmm_pool_cleanup_failures(pool), 3 * (s + 1));
        assert_true(egm_fake_cuda_live_objects() > 0);
        egm_fake_cuda_clear_failures();
    }
    assert_int_equal(egm__vmm_pool_release(pool), EGM_OK);
    assert_int_equal(egm__vmm_pool_held(pool), 0);
    assert_int_equal(egm_fake_cuda_live_objects(), 0);
    egm__vmm_pool_destroy(pool);
}

/* What a provider client does with a VMM pool: expose every chunk, and a
 * consumer moves bytes in and out of them from GPU memory over nvlink. */
static void serve(egm_vmm_location_t loc, int id, egm_vmm_handles_t handles)
{
    egm_vmm_pool_t *pool = NULL;
    egm_vmm_pool_params_t p = params(loc, id, handles, 8 * MIB, 4 * MIB);
    assert_int_equal(egm__vmm_pool_create(&p, &pool), EGM_OK);
    egm_id_t pid = egm__id_random(), cid = egm__id_random();
    egm_te_params_t tp = {.client_id = pid,
                          .protocol = EGM_PROTOCOL_AUTO,
                          .local_hostname = "127.0.0.1",
                          .data_listen_host = "127.0.0.1",
                          .prewarm_off = 1};
    egm_te_t *provider = NULL, *consumer = NULL;
    assert_int_equal(egm__te_create(&tp, &provider), EGM_OK);
    tp.client_id = cid;
    tp.prewarm_off = 0;
    assert_int_equal(egm__te_create(&tp, &consumer), EGM_OK);

    size_t n = egm__vmm_pool_chunk_count(pool);
    egm_segment_desc_t descs[2];
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        const egm_vmm_chunk_t *c = egm__vmm_pool_chunk(pool, i);
        memset(&descs[i], 0, sizeof(descs[i]));
        descs[i].id = egm__id_random();
        descs[i].owner = pid;
        assert_int_equal(
            egm__te_expose_vmm_segment(provider, &descs[i], c->base, c->size, c->handle,
                                       (egm_handle_kind_t)egm__vmm_chunk_handle_kind(c), c->device),
            EGM_OK);
    }
    /* The consumer learns of them and prewarms, then reads and writes. */
    egm__te_prewarm(consumer, descs, n);
    egm__te_prewarm_drain(consumer);
    egm_cu_deviceptr_t g = 0;
    assert_int_equal(egm__cuda_use_device(1), EGM_OK);
    assert_int_equal(cu->cuMemAlloc(&g, 4 * MIB), EGM_CU_SUCCESS);
    for (size_t i = 0; i < n; i++) {
        const egm_vmm_chunk_t *c = egm__vmm_pool_chunk(pool, i);
        uint64_t base = (uint64_t)(uintptr_t)c->base;
        egm_te_op_t op = {.segment = &descs[i],
                          .offset = 4096,
                          .local = (void *)(uintptr_t)g,
                          .length = 4 * MIB - 8192,
                          .dir = EGM_TE_WRITE};
        egm_test_fill_random(view(g, op.length), op.length);
        assert_int_equal(egm__te_transfer(consumer, &op, 1), EGM_OK);
        assert_memory_equal(view(base + 4096, op.length), view(g, op.length), op.length);
        egm_test_fill_random(view(base + 4096, op.length), op.length);
        op.dir = EGM_TE_READ;
        assert_int_equal(egm__te_transfer(consumer, &op, 1), EGM_OK);
        assert_memory_equal(view(g, op.length), view(base + 4096, op.length), op.length);
    }
    egm_te_stats_t cs;
    egm__te_stats(consumer, &cs);
    assert_int_equal(cs.prewarmed, 2);
    assert_int_equal(cs.nvlink_imports_total, 2);
    assert_int_equal(cs.nvlink_copies, 4);

    assert_int_equal(cu->cuMemFree(g), EGM_CU_SUCCESS);
    egm__te_destroy(consumer);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(egm__te_withdraw_segment(provider, descs[i].id), EGM_OK);
    egm__te_destroy(provider);
    egm__vmm_pool_destroy(pool);
}

static void test_serve_host_numa_posix_fd(void **state)
{
    (void)state;
    serve(EGM_VMM_HOST_NUMA, 1, EGM_VMM_HANDLES_POSIX_FD);
}

static void test_serve_host_numa_fabric(void **state)
{
    (void)state;
    serve(EGM_VMM_HOST_NUMA, 0, EGM_VMM_HANDLES_AUTO);
}

static void test_serve_device_posix_fd(void **state)
{
    (void)state;
    egm_fake_cuda_set_strict_device_memory(1);
    serve(EGM_VMM_DEVICE, 0, EGM_VMM_HANDLES_POSIX_FD);
}

static void test_serve_device_fabric(void **state)
{
    (void)state;
    egm_fake_cuda_set_strict_device_memory(1);
    serve(EGM_VMM_DEVICE, 1, EGM_VMM_HANDLES_FABRIC);
}

int main(void)
{
    egm__cuda_set_api(egm_fake_cuda_api());
    if (egm__cuda_load(&cu) != EGM_OK) {
        fprintf(stderr, "fake CUDA driver did not load: %s\n", egm_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_host_numa_posix_fd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_fabric, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auto_and_fabric_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_parameters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_numa_above_available_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_sweep_unwinds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rollback_faults_keep_and_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nodes_in_parallel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_resumes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_serve_host_numa_posix_fd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_serve_host_numa_fabric, setup, teardown),
        cmocka_unit_test_setup_teardown(test_serve_device_posix_fd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_serve_device_fabric, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
