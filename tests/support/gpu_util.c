/* GPU suite helpers (linked by the tests that use them, with the client). */
#include "support/gpu_util.h"

#include <stdlib.h>
#include <string.h>
#include "cuda/driver.h"
#include "support/cluster.h"

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

egm_client_t *egm_test_gpu_client(const char *master, int device)
{
    egm_config_t *config = NULL;
    egm_client_t *client = NULL;
    if (egm__cuda_use_device(device) != EGM_OK || egm_config_create(&config) != EGM_OK)
        return NULL;
    if (egm_config_set(config, "master_server_addr", master) == EGM_OK &&
        egm_config_set(config, "protocol", "nvlink") == EGM_OK &&
        egm_client_create(config, &client) != EGM_OK)
        client = NULL;
    egm_config_destroy(config);
    return client;
}
