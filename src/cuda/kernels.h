/* Contract between the CUDA C kernels (kernels.cu), their host-side launch
 * (copier.c) and the fake driver's CPU emulation (tests/support/fake_cuda.c). */
#ifndef EGM_CUDA_KERNELS_H
#define EGM_CUDA_KERNELS_H

#include "cuda/copier.h"

/* extern "C" __global__ void egm_copy_blocks(const egm_copy_desc_t *descs, uint32_t count):
 * every descriptor copies len bytes src -> dst (16-byte accesses where src, dst
 * and len allow, bytes at the edges). `descs` lies in device-accessible memory.
 * Launch parameters: params[0] points to the descs pointer, params[1] to count. */
#define EGM_KERNEL_COPY_BLOCKS "egm_copy_blocks"

/* The embedded fatbin (sm_90, sm_100 and PTX), or NULL/0 when built without nvcc. */
extern const unsigned char egm__kernels_fatbin[];
extern const size_t egm__kernels_fatbin_size;

#endif
