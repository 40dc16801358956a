// Copy kernels of egmstore (contract: src/cuda/kernels.h). Compiled by nvcc at
// build time into a fatbin embedded in egm_cuda (src/cuda/kernels.cmake) and
// loaded with the driver API (copier.c). Self-contained on purpose: the project's
// headers are C11 (_Static_assert, ...) and nvcc's C++ front end rejects them.
#include <stdint.h>

// Same layout as egm_copy_desc_t in src/cuda/copier.h.
struct egm_copy_desc_t {
    uint64_t dst;
    uint64_t src;
    uint64_t len;
};
static_assert(sizeof(egm_copy_desc_t) == 24, "egm_copy_desc_t layout (src/cuda/copier.h)");

// Loads in flight per thread before its stores: the source is often pool DRAM
// across PCIe/NVLink-C2C, where latency, not instruction count, sets the pace.
#define EGM_UNROLL 4

// n words of T, dst[i] = src[i], by every thread of the block.
template <typename T>
__device__ __forceinline__ void copy_words(T *__restrict__ dst, const T *__restrict__ src,
                                           uint64_t n)
{
    const uint64_t step = blockDim.x;
    uint64_t i = threadIdx.x;
    for (; i + (EGM_UNROLL - 1) * step < n; i += EGM_UNROLL * step) {
        T v[EGM_UNROLL];
#pragma unroll
        for (int u = 0; u < EGM_UNROLL; u++)
            v[u] = src[i + u * step];
#pragma unroll
        for (int u = 0; u < EGM_UNROLL; u++)
            dst[i + u * step] = v[u];
    }
    for (; i < n; i += step)
        dst[i] = src[i];
}

// Bytes up to dst's alignment to T, words of T, then the remaining bytes. Only
// called when src and dst are equally misaligned relative to sizeof(T).
template <typename T>
__device__ __forceinline__ void copy_aligned(unsigned char *dst, const unsigned char *src,
                                             uint64_t len)
{
    uint64_t head = (sizeof(T) - ((uintptr_t)dst & (sizeof(T) - 1))) & (sizeof(T) - 1);
    if (head > len)
        head = len;
    if (threadIdx.x < head)
        dst[threadIdx.x] = src[threadIdx.x];
    dst += head;
    src += head;
    len -= head;
    uint64_t words = len / sizeof(T);
    copy_words<T>((T *)dst, (const T *)src, words);
    uint64_t tail = len - words * sizeof(T);
    if (threadIdx.x < tail)
        dst[words * sizeof(T) + threadIdx.x] = src[words * sizeof(T) + threadIdx.x];
}

// One descriptor by the whole block: the widest access that src and dst allow.
__device__ __forceinline__ void copy_one(uint64_t dst, uint64_t src, uint64_t len)
{
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    uint64_t skew = dst ^ src;
    if ((skew & 15) == 0)
        copy_aligned<uint4>(d, s, len);
    else if ((skew & 7) == 0)
        copy_aligned<uint64_t>(d, s, len);
    else if ((skew & 3) == 0)
        copy_aligned<uint32_t>(d, s, len);
    else
        copy_words<unsigned char>(d, s, len);
}

// Block b copies descriptors b, b + gridDim.x, ... The host splits large blocks
// into pieces (copier.c) so that one grid of many small CTAs spreads a batch over
// every SM; any len still works here.
extern "C" __global__ void __launch_bounds__(1024)
    egm_copy_blocks(const egm_copy_desc_t *descs, uint32_t count)
{
    __shared__ uint64_t desc[3];
    for (uint32_t k = blockIdx.x; k < count; k += gridDim.x) {
        // Descriptors may lie in pinned host memory: read each once per block.
        if (threadIdx.x < 3)
            desc[threadIdx.x] = ((const uint64_t *)&descs[k])[threadIdx.x];
        __syncthreads();
        uint64_t dst = desc[0], src = desc[1], len = desc[2];
        __syncthreads(); // every thread has its copy before the next round overwrites
        copy_one(dst, src, len);
    }
}
