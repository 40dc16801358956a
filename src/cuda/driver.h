/* The CUDA driver, loaded at run time: dlopen("libcuda.so.1"), then every
 * function of egm_cuda_api_t resolved through cuGetProcAddress. Never linked.
 * Without a driver every GPU feature answers EGM_ERR_NO_CUDA ("no CUDA driver:
 * ...") and everything else works. */
#ifndef EGM_CUDA_DRIVER_H
#define EGM_CUDA_DRIVER_H

#include <egmstore/status.h>
#include "cuda/cuda_api.h"

/* Loads and initialises the driver once per process (thread-safe); later calls
 * return the same table or the same error. */
egm_status_t egm__cuda_load(const egm_cuda_api_t **api_p);
/* Tests: use this table instead of the driver (NULL goes back to loading the
 * real one). Call before any other egm__cuda_* function. */
void egm__cuda_set_api(const egm_cuda_api_t *api);
/* CUresult -> status (NOT_PERMITTED/NOT_SUPPORTED -> NOT_SUPPORTED, OUT_OF_MEMORY
 * -> NO_MEMORY, NO_DEVICE -> NO_CUDA, INVALID_* -> INVALID_ARG, else TRANSFER
 * for copies / INTERNAL), with egm_last_error() = "<call>: CUDA_ERROR_X (text)". */
egm_status_t egm__cuda_check(egm_cu_result_t rc, const char *call);
/* "CUDA_ERROR_NOT_PERMITTED" etc. (the driver's name when loaded). */
const char *egm__cuda_error_name(egm_cu_result_t rc);

/* Number of visible devices (0 without a driver, or when the count fails). */
int egm__cuda_device_count(void);
/* The same, answering why there is none: the load error, or the failed
 * cuDeviceGetCount with the CUDA error's name. */
egm_status_t egm__cuda_count_devices(int *count_p);
/* Makes `device`'s primary context current on this thread (retained once per
 * process, released at exit); egmstore never creates contexts of its own. */
egm_status_t egm__cuda_use_device(int device);
/* Device of a pointer from cuMemAlloc/cudaMalloc/VMM, or -1 for host memory
 * the driver does not know (EGM_OK either way). */
egm_status_t egm__cuda_pointer_device(const void *ptr, int *device_p);
/* 1 when ptr is pinned (page-locked) host memory that kernels of GPU 0's
 * primary context reach at the same address (the driver's device pointer for
 * it there is ptr: cuMemHostAlloc / cudaHostAlloc under unified addressing, or
 * a portable mapped registration); 0 for anything else, and without a driver.
 * Asked in that context whatever the calling thread has current (restored
 * after). Never an error: 0 means "copy it the host's way". */
int egm__cuda_pointer_gpu_mapped_host(const void *ptr);

#endif
