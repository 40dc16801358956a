/* Helpers of the GPU suite (tests/gpu): HBM filled with and compared against
 * the deterministic pattern of egm_test_fill, and a client on one GPU. */
#ifndef EGM_TEST_GPU_UTIL_H
#define EGM_TEST_GPU_UTIL_H

#include <stddef.h>
#include <egmstore/egmstore.h>
#include "cuda/cuda_api.h"

/* Loads the CUDA driver for a GPU test; prints why when it cannot. Returns 0
 * with *cu_p set; 77 (a ctest skip, with its EGM-SKIP line) only when
 * libcuda.so.1 cannot be loaded at all, that is no driver on this machine; 1
 * (failure) when a driver loads but does not initialise, and for any failure
 * when EGM_REQUIRE_GPU_RUN=1: the Makefile's fake-driver pass sets it, so that a
 * GPU test that did not run fails that pass instead of reading as skipped. */
int egm_test_gpu_load(const char *test, const egm_cuda_api_t **cu_p);
/* Writes the pattern of `seed` into len bytes of device memory at ptr. */
egm_status_t egm_test_hbm_fill(egm_cu_deviceptr_t ptr, size_t len, unsigned seed);
/* 1 when len bytes at ptr hold the pattern of `seed`. */
int egm_test_hbm_matches(egm_cu_deviceptr_t ptr, size_t len, unsigned seed);
/* Says on stderr how ptr's len bytes differ from seed's pattern: how many,
 * where, and whether a neighbouring seed's bytes or zeros are there. */
void egm_test_hbm_explain(const char *what, egm_cu_deviceptr_t ptr, size_t len, unsigned seed);
/* A client of `master` with `device` current and protocol nvlink, or NULL. */
egm_client_t *egm_test_gpu_client(const char *master, int device);

#endif
