/* CUDA driver loader: behaviour without a driver (CI and this machine have no
 * libcuda.so.1), CUresult names and their status mapping, then the same
 * entry points against the fake driver installed with egm__cuda_set_api:
 * initialisation, primary contexts retained once, devices of pointers. */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/log.h"
#include "cuda/copier.h"
#include "cuda/driver.h"
#include "support/fake_cuda.h"

/* The no-driver tests only mean something where there is no driver. */
static int have_real_driver(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return 0;
    dlclose(lib);
    return 1;
}

static void test_no_driver(void **state)
{
    (void)state;
    if (have_real_driver())
        EGM_SKIP("a real CUDA driver is installed: this case needs none");
    const egm_cuda_api_t *api = (const egm_cuda_api_t *)&api;
    assert_int_equal(egm__cuda_load(&api), EGM_ERR_NO_CUDA);
    assert_non_null(strstr(egm_last_error(), "no CUDA driver"));
    assert_non_null(strstr(egm_last_error(), "libcuda.so.1"));
    /* The outcome is remembered: the same error, not a second attempt. */
    assert_int_equal(egm__cuda_load(&api), EGM_ERR_NO_CUDA);
    assert_non_null(strstr(egm_last_error(), "no CUDA driver: libcuda.so.1 not found"));
    assert_int_equal(egm__cuda_device_count(), 0);
    assert_int_equal(egm__cuda_use_device(0), EGM_ERR_NO_CUDA);

    int x = 0, device = 7;
    assert_int_equal(egm__cuda_pointer_device(&x, &device), EGM_OK);
    assert_int_equal(device, -1);
    assert_int_equal(egm__cuda_pointer_device(NULL, &device), EGM_ERR_INVALID_ARG);

    egm_copier_t *copier = (egm_copier_t *)&copier;
    assert_int_equal(egm__copier_create(0, 0, &copier), EGM_ERR_NO_CUDA);
    assert_null(copier);
    assert_non_null(strstr(egm_last_error(), "no CUDA driver"));
}

static void test_error_names(void **state)
{
    (void)state;
    assert_string_equal(egm__cuda_error_name(0), "CUDA_SUCCESS");
    assert_string_equal(egm__cuda_error_name(EGM_CU_ERROR_INVALID_VALUE),
                        "CUDA_ERROR_INVALID_VALUE");
    assert_string_equal(egm__cuda_error_name(EGM_CU_ERROR_OUT_OF_MEMORY),
                        "CUDA_ERROR_OUT_OF_MEMORY");
    assert_string_equal(egm__cuda_error_name(EGM_CU_ERROR_NO_DEVICE), "CUDA_ERROR_NO_DEVICE");
    assert_string_equal(egm__cuda_error_name(EGM_CU_ERROR_NOT_PERMITTED),
                        "CUDA_ERROR_NOT_PERMITTED");
    assert_string_equal(egm__cuda_error_name(700), "CUDA_ERROR_ILLEGAL_ADDRESS");
    assert_string_equal(egm__cuda_error_name(209), "CUDA_ERROR_NO_BINARY_FOR_GPU");
    assert_string_equal(egm__cuda_error_name(EGM_CU_ERROR_UNKNOWN), "CUDA_ERROR_UNKNOWN");
    assert_string_equal(egm__cuda_error_name(12345), "CUresult 12345");
}

static void check_maps(egm_cu_result_t rc, const char *call, egm_status_t want, const char *text)
{
    egm__clear_error();
    assert_int_equal(egm__cuda_check(rc, call), want);
    if (text != NULL)
        assert_string_equal(egm_last_error(), text);
}

static void test_check_mapping(void **state)
{
    (void)state;
    egm__set_error(EGM_ERR_IO, "earlier");
    assert_int_equal(egm__cuda_check(EGM_CU_SUCCESS, "cuMemMap"), EGM_OK);
    assert_string_equal(egm_last_error(), "earlier"); /* success leaves the detail alone */

    check_maps(EGM_CU_ERROR_NOT_PERMITTED, "cuMemCreate", EGM_ERR_NOT_SUPPORTED,
               "cuMemCreate: CUDA_ERROR_NOT_PERMITTED (operation not permitted)");
    check_maps(EGM_CU_ERROR_NOT_SUPPORTED, "cuMemCreate", EGM_ERR_NOT_SUPPORTED, NULL);
    check_maps(EGM_CU_ERROR_OUT_OF_MEMORY, "cuMemAlloc", EGM_ERR_NO_MEMORY,
               "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
    check_maps(EGM_CU_ERROR_NO_DEVICE, "cuDeviceGet", EGM_ERR_NO_CUDA, NULL);
    check_maps(EGM_CU_ERROR_INVALID_VALUE, "cuMemcpyAsync", EGM_ERR_INVALID_ARG,
               "cuMemcpyAsync: CUDA_ERROR_INVALID_VALUE (invalid argument)");
    check_maps(EGM_CU_ERROR_INVALID_DEVICE, "cuDeviceGet", EGM_ERR_INVALID_ARG, NULL);
    check_maps(EGM_CU_ERROR_INVALID_HANDLE, "cuMemRelease", EGM_ERR_INVALID_ARG, NULL);
    check_maps(201, "cuStreamCreateWithPriority", EGM_ERR_INVALID_ARG, NULL); /* INVALID_CONTEXT */
    /* Other errors: TRANSFER where data was being moved, INTERNAL elsewhere. */
    check_maps(700, "cuMemcpyAsync", EGM_ERR_TRANSFER,
               "cuMemcpyAsync: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was "
               "encountered)");
    check_maps(700, "cuMemcpyBatchAsync", EGM_ERR_TRANSFER, NULL);
    check_maps(719, "cuLaunchKernel(egm_copy_blocks)", EGM_ERR_TRANSFER, NULL);
    check_maps(700, "cuEventSynchronize", EGM_ERR_TRANSFER, NULL);
    check_maps(700, "cuStreamSynchronize", EGM_ERR_TRANSFER, NULL);
    check_maps(700, "cuMemMap", EGM_ERR_INTERNAL, NULL);
    check_maps(EGM_CU_ERROR_UNKNOWN, "cuModuleLoadData", EGM_ERR_INTERNAL,
               "cuModuleLoadData: CUDA_ERROR_UNKNOWN (unknown error)");
    check_maps(12345, "cuMemMap", EGM_ERR_INTERNAL,
               "cuMemMap: CUresult 12345 (unrecognized error code)");
}

/* ---- with the fake driver --------------------------------------------------- */

static void test_fake_init(void **state)
{
    (void)state;
    const egm_cuda_api_t *api = NULL;
    egm_fake_cuda_reset(0, 1);
    egm__cuda_set_api(egm_fake_cuda_api());
    /* cuInit answers NO_DEVICE without devices: reported, and retried later. */
    assert_int_equal(egm__cuda_load(&api), EGM_ERR_NO_CUDA);
    assert_non_null(strstr(egm_last_error(), "cuInit(0): CUDA_ERROR_NO_DEVICE"));
    assert_int_equal(egm__cuda_device_count(), 0);

    egm_fake_cuda_reset(2, 1);
    assert_int_equal(egm__cuda_load(&api), EGM_OK);
    assert_ptr_equal(api, egm_fake_cuda_api());
    assert_int_equal(egm_fake_cuda_calls("cuInit"), 1);
    assert_int_equal(egm__cuda_device_count(), 2);
    assert_int_equal(egm__cuda_load(&api), EGM_OK);
    assert_int_equal(egm_fake_cuda_calls("cuInit"), 1); /* once */

    /* Error names now come from the installed table. */
    size_t before = egm_fake_cuda_calls("cuGetErrorName");
    assert_string_equal(egm__cuda_error_name(EGM_FAKE_CU_ERROR_INVALID_CONTEXT),
                        "CUDA_ERROR_INVALID_CONTEXT");
    assert_int_equal(egm_fake_cuda_calls("cuGetErrorName"), before + 1);
    /* A value the table does not know falls back to ours. */
    assert_string_equal(egm__cuda_error_name(209), "CUDA_ERROR_NO_BINARY_FOR_GPU");
}

static void test_fake_primary_contexts(void **state)
{
    (void)state;
    const egm_cuda_api_t *api = NULL;
    egm_fake_cuda_reset(2, 1);
    egm__cuda_set_api(egm_fake_cuda_api());
    assert_int_equal(egm__cuda_load(&api), EGM_OK);
    uint64_t refs = egm_fake_cuda_counters().primary_ctx_refs;

    /* A failed retain reports the call and is retried by the next use. */
    egm_fake_cuda_fail("cuDevicePrimaryCtxRetain", 1, EGM_CU_ERROR_OUT_OF_MEMORY);
    assert_int_equal(egm__cuda_use_device(0), EGM_ERR_NO_MEMORY);
    assert_non_null(strstr(egm_last_error(), "cuDevicePrimaryCtxRetain"));
    assert_int_equal(egm_fake_cuda_counters().primary_ctx_refs, refs);

    egm_cu_context_t c0 = NULL, c1 = NULL, now = NULL;
    assert_int_equal(egm__cuda_use_device(0), EGM_OK);
    assert_int_equal(api->cuCtxGetCurrent(&c0), EGM_CU_SUCCESS);
    assert_non_null(c0);
    assert_int_equal(egm__cuda_use_device(1), EGM_OK);
    assert_int_equal(api->cuCtxGetCurrent(&c1), EGM_CU_SUCCESS);
    assert_non_null(c1);
    assert_ptr_not_equal(c0, c1);
    assert_int_equal(egm_fake_cuda_counters().primary_ctx_refs, refs + 2);

    /* Later uses make it current again without retaining again. */
    size_t retains = egm_fake_cuda_calls("cuDevicePrimaryCtxRetain");
    for (int i = 0; i < 4; i++) {
        assert_int_equal(egm__cuda_use_device(i % 2), EGM_OK);
        assert_int_equal(api->cuCtxGetCurrent(&now), EGM_CU_SUCCESS);
        assert_ptr_equal(now, i % 2 ? c1 : c0);
    }
    assert_int_equal(egm_fake_cuda_calls("cuDevicePrimaryCtxRetain"), retains);
    assert_int_equal(egm_fake_cuda_counters().primary_ctx_refs, refs + 2);

    assert_int_equal(egm__cuda_use_device(2), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "device 2"));
    assert_int_equal(egm__cuda_use_device(-1), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__cuda_use_device(1000), EGM_ERR_INVALID_ARG);
    egm_fake_cuda_clear_failures();
}

static void test_fake_pointer_device(void **state)
{
    (void)state;
    const egm_cuda_api_t *api = NULL;
    egm_fake_cuda_reset(2, 1);
    egm__cuda_set_api(egm_fake_cuda_api());
    assert_int_equal(egm__cuda_load(&api), EGM_OK);

    egm_cu_deviceptr_t d1 = 0;
    void *pinned = NULL;
    assert_int_equal(egm__cuda_use_device(1), EGM_OK);
    assert_int_equal(api->cuMemAlloc(&d1, 65536), EGM_CU_SUCCESS);
    assert_int_equal(api->cuMemAllocHost(&pinned, 4096), EGM_CU_SUCCESS);

    int device = -5;
    assert_int_equal(egm__cuda_pointer_device((void *)(uintptr_t)d1, &device), EGM_OK);
    assert_int_equal(device, 1);
    assert_int_equal(egm__cuda_pointer_device((void *)(uintptr_t)(d1 + 4096), &device), EGM_OK);
    assert_int_equal(device, 1);
    /* Pinned host memory is known to the driver and still host memory. */
    assert_int_equal(egm__cuda_pointer_device(pinned, &device), EGM_OK);
    assert_int_equal(device, -1);
    /* Pageable memory the driver never saw. */
    char *heap = malloc(64);
    assert_non_null(heap);
    device = 3;
    assert_int_equal(egm__cuda_pointer_device(heap, &device), EGM_OK);
    assert_int_equal(device, -1);
    free(heap);
    assert_int_equal(egm__cuda_pointer_device(pinned, NULL), EGM_ERR_INVALID_ARG);

    /* Any other driver failure is an error, not "host". */
    egm_fake_cuda_fail("cuPointerGetAttribute", 1, EGM_CU_ERROR_UNKNOWN);
    assert_int_equal(egm__cuda_pointer_device((void *)(uintptr_t)d1, &device), EGM_ERR_INTERNAL);
    assert_non_null(strstr(egm_last_error(), "cuPointerGetAttribute"));
    assert_int_equal(device, -1);

    assert_int_equal(api->cuMemFree(d1), EGM_CU_SUCCESS);
    assert_int_equal(api->cuMemFreeHost(pinned), EGM_CU_SUCCESS);
    assert_int_equal(egm_fake_cuda_live_objects(), 0);
}

/* Back to the real loader: the remembered no-driver outcome again. */
static void test_back_to_real(void **state)
{
    (void)state;
    if (have_real_driver())
        EGM_SKIP("a real CUDA driver is installed: this case needs none");
    const egm_cuda_api_t *api = NULL;
    egm__cuda_set_api(NULL);
    assert_int_equal(egm__cuda_load(&api), EGM_ERR_NO_CUDA);
    assert_non_null(strstr(egm_last_error(), "no CUDA driver"));
    assert_int_equal(egm__cuda_device_count(), 0);
    /* Names from our own table again (the fake is no longer asked). */
    size_t before = egm_fake_cuda_calls("cuGetErrorName");
    assert_string_equal(egm__cuda_error_name(201), "CUDA_ERROR_INVALID_CONTEXT");
    assert_int_equal(egm_fake_cuda_calls("cuGetErrorName"), before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_no_driver, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_error_names, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_check_mapping, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_fake_init, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_fake_primary_contexts, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_fake_pointer_device, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_back_to_real, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
