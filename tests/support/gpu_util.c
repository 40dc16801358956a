/* GPU suite helpers (linked by the tests that use them, with the client). */
#include "support/gpu_util.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda/driver.h"
#include "support/cluster.h"
#include "support/testutil.h"

int egm_test_gpu_load(const char *test, const egm_cuda_api_t **cu_p)
{
    const char *require = getenv("EGM_REQUIRE_GPU_RUN");
    int required = require != NULL && strcmp(require, "1") == 0;
    /* The driver's own loader folds "not installed" and "installed but broken"
     * into one error: only the first is a reason to skip. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        if (required) {
            printf("%s: FAILED: EGM_REQUIRE_GPU_RUN=1 but libcuda.so.1 cannot be loaded (%s); "
                   "is LD_LIBRARY_PATH the build's fake-cuda folder?\n",
                   test, why ? why : "dlopen failed");
            return 1;
        }
        egm_test_skip_note(test, "no CUDA driver: libcuda.so.1 cannot be loaded (%s)",
                           why ? why : "dlopen failed");
        return 77;
    }
    dlclose(lib);
    if (egm__cuda_load(cu_p) != EGM_OK) {
        printf("%s: FAILED: libcuda.so.1 loads but the driver is not usable: %s\n", test,
               egm_last_error());
        return 1;
    }
    return 0;
}

egm_status_t egm_test_hbm_fill(egm_cu_deviceptr_t ptr, size_t len, unsigned seed)
{
    const egm_cuda_api_t *cu;
    egm_status_t st = egm__cuda_load(&cu);
    unsigned char *host = malloc(len);
    if (st != EGM_OK || host == NULL) {
        free(host);
        return st != EGM_OK ? st : EGM_ERR_NO_MEMORY;
    }
    egm_test_fill(host, len, seed);
    st = egm__cuda_check(cu->cuMemcpy(ptr, (egm_cu_deviceptr_t)(uintptr_t)host, len),
                         "cuMemcpy H2D");
    /* A copy from pageable memory may return before its DMA into the device
     * is done. The store reads the buffer on its own streams when a put
     * starts, and the caller must have finished writing it by then
     * (docs/gpu.md). */
    if (st == EGM_OK)
        st = egm__cuda_check(cu->cuCtxSynchronize(), "cuCtxSynchronize");
    free(host);
    return st;
}

int egm_test_hbm_matches(egm_cu_deviceptr_t ptr, size_t len, unsigned seed)
{
    const egm_cuda_api_t *cu;
    unsigned char *host = malloc(len), *want = malloc(len);
    int ok = egm__cuda_load(&cu) == EGM_OK && host != NULL && want != NULL &&
             cu->cuMemcpy((egm_cu_deviceptr_t)(uintptr_t)host, ptr, len) == EGM_CU_SUCCESS;
    if (ok) {
        egm_test_fill(want, len, seed);
        ok = memcmp(host, want, len) == 0;
    }
    free(host);
    free(want);
    return ok;
}

void egm_test_hbm_explain(const char *what, egm_cu_deviceptr_t ptr, size_t len, unsigned seed)
{
    const egm_cuda_api_t *cu;
    unsigned char *host = malloc(len), *want = malloc(len);
    if (egm__cuda_load(&cu) != EGM_OK || host == NULL || want == NULL ||
        cu->cuMemcpy((egm_cu_deviceptr_t)(uintptr_t)host, ptr, len) != EGM_CU_SUCCESS) {
        fprintf(stderr, "%s: cannot read the buffer back\n", what);
        goto out;
    }
    egm_test_fill(want, len, seed);
    size_t first = len, last = 0, differ = 0;
    for (size_t i = 0; i < len; i++)
        if (host[i] != want[i]) {
            if (first == len)
                first = i;
            last = i;
            differ++;
        }
    fprintf(stderr, "%s: %zu of %zu bytes differ from seed %u, in [%zu, %zu]", what, differ, len,
            seed, first, last);
    /* Whose bytes are there instead: a neighbouring seed's, or zeros. */
    for (int d = -3; d <= 3 && differ > 0; d++) {
        if (d == 0 || (int)seed + d < 0)
            continue;
        egm_test_fill(want, len, (unsigned)((int)seed + d));
        size_t same = 0;
        for (size_t i = first; i <= last; i++)
            same += host[i] == want[i];
        if (same > (last - first + 1) / 2)
            fprintf(stderr, "; %zu of those bytes are seed %d's", same, (int)seed + d);
    }
    size_t zeros = 0;
    for (size_t i = first; differ > 0 && i <= last; i++)
        zeros += host[i] == 0;
    fprintf(stderr, "; %zu zero bytes there\n", zeros);
out:
    free(host);
    free(want);
}

egm_client_t *egm_test_gpu_client(const char *master, int device)
{
    egm_config_t *config = NULL;
    egm_client_t *client = NULL;
    if (egm__cuda_use_device(device) != EGM_OK || egm_config_create(&config) != EGM_OK)
        return NULL;
    /* EGMSTORE_<KEY> settings of the environment apply (e.g. EGMSTORE_SLAB_BYTES). */
    if (egm_config_load_env(config) == EGM_OK &&
        egm_config_set(config, "master_server_addr", master) == EGM_OK &&
        egm_config_set(config, "protocol", "nvlink") == EGM_OK &&
        egm_client_create(config, &client) != EGM_OK)
        client = NULL;
    egm_config_destroy(config);
    return client;
}
