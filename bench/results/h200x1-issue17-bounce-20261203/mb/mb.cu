// Microbenchmark: scattered 32 KiB pieces in HBM <-> contiguous host pool (VMM HOST_NUMA).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <algorithm>
#include <unistd.h>
#include <vector>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1);} } while (0)
#define CD(x) do { CUresult e_ = (x); if (e_ != CUDA_SUCCESS) { const char *s; cuGetErrorName(e_, &s); fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s); exit(1);} } while (0)
struct desc_t { uint64_t dst, src, len; };
template <typename T, int U>
__device__ __forceinline__ void copy_words(T *__restrict__ dst, const T *__restrict__ src, uint64_t n) {
    const uint64_t step = blockDim.x; uint64_t i = threadIdx.x;
    for (; i + (U - 1) * step < n; i += U * step) {
        T v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = src[i + u * step];
#pragma unroll
        for (int u = 0; u < U; u++) dst[i + u * step] = v[u];
    }
    for (; i < n; i += step) dst[i] = src[i];
}
template <int U>
__global__ void kcopy(const desc_t *d, uint32_t count) {
    __shared__ uint64_t s[3];
    for (uint32_t k = blockIdx.x; k < count; k += gridDim.x) {
        if (threadIdx.x < 3) s[threadIdx.x] = ((const uint64_t *)&d[k])[threadIdx.x];
        __syncthreads();
        uint64_t dst = s[0], src = s[1], len = s[2];
        __syncthreads();
        copy_words<uint4, U>((uint4 *)dst, (const uint4 *)src, len / 16);
    }
}
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int ITERS = 15;
struct Ctx { char *hbm_kv; char *pool; char *hbm_contig; char *staging[2]; size_t piece, npieces; std::vector<uint64_t> perm; desc_t *dd_put, *dd_get, *hd_put, *hd_get; cudaStream_t s0, s1; cudaEvent_t ev[64]; };
template <typename F> static double bench(Ctx &c, F f) {
    std::vector<double> v;
    for (int i = 0; i < ITERS + 3; i++) { CK(cudaDeviceSynchronize()); if (getenv("IDLE")) usleep(2000); double t0 = now(); f(); CK(cudaDeviceSynchronize()); double t = now() - t0; if (i >= 3) v.push_back(t); }
    std::sort(v.begin(), v.end()); return v[v.size() / 2];
}
static char *vmm_pool(size_t bytes) {
    CUmemAllocationProp prop; memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA; prop.location.id = 0;
    size_t g; CD(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    bytes = (bytes + g - 1) / g * g;
    CUmemGenericAllocationHandle h; CD(cuMemCreate(&h, bytes, &prop, 0));
    CUdeviceptr p; CD(cuMemAddressReserve(&p, bytes, g, 0, 0)); CD(cuMemMap(p, bytes, 0, h, 0));
    CUmemAccessDesc a; memset(&a, 0, sizeof a); a.location.type = CU_MEM_LOCATION_TYPE_DEVICE; a.location.id = 0; a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CD(cuMemSetAccess(p, bytes, &a, 1));
    return (char *)p;
}
int main(int argc, char **argv) {
    size_t piece = 32 << 10;
    CK(cudaSetDevice(0)); CK(cudaFree(0));
    size_t maxn = 16384;
    Ctx c; c.piece = piece;
    CK(cudaMalloc(&c.hbm_kv, 2 * maxn * piece)); CK(cudaMalloc(&c.hbm_contig, maxn * piece));
    CK(cudaMalloc(&c.staging[0], 64 << 20)); CK(cudaMalloc(&c.staging[1], 64 << 20));
    c.pool = vmm_pool(maxn * piece);
    char *pinned; CK(cudaHostAlloc((void **)&pinned, maxn * piece, 0));
    CK(cudaMemset(c.hbm_kv, 1, 2 * maxn * piece)); CK(cudaMemset(c.pool, 2, maxn * piece));
    CK(cudaStreamCreateWithFlags(&c.s0, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&c.s1, cudaStreamNonBlocking));
    for (int i = 0; i < 64; i++) CK(cudaEventCreateWithFlags(&c.ev[i], cudaEventDisableTiming));
    // perm: piece i of the object lives at slot perm[i] (stride 2 pieces) in hbm_kv
    srand(1); std::vector<uint64_t> perm(maxn); for (size_t i = 0; i < maxn; i++) perm[i] = i; std::random_shuffle(perm.begin(), perm.end());
    desc_t *hput, *hget; CK(cudaHostAlloc((void **)&hput, maxn * sizeof(desc_t), 0)); CK(cudaHostAlloc((void **)&hget, maxn * sizeof(desc_t), 0));
    desc_t *dput, *dget; CK(cudaMalloc(&dput, maxn * sizeof(desc_t))); CK(cudaMalloc(&dget, maxn * sizeof(desc_t)));
    // staged descriptors: gather into staging (chunk-relative), built per chunk size at run time
    desc_t *hst; CK(cudaHostAlloc((void **)&hst, 2 * maxn * sizeof(desc_t), 0));
    size_t sizes[] = {1024, 4096};
    printf("piece %zu KiB\n", piece >> 10);
    for (size_t n : sizes) {
        size_t total = n * piece;
        for (size_t i = 0; i < n; i++) {
            uint64_t kv = (uint64_t)(c.hbm_kv + 2 * perm[i] * piece), pl = (uint64_t)(c.pool + i * piece);
            hput[i] = {pl, kv, piece}; hget[i] = {kv, pl, piece};
        }
        CK(cudaMemcpy(dput, hput, n * sizeof(desc_t), cudaMemcpyDefault)); CK(cudaMemcpy(dget, hget, n * sizeof(desc_t), cudaMemcpyDefault));
        auto gbs = [&](double t) { return total / t / 1e9; };
        printf("== n=%zu total=%zu MiB\n", n, total >> 20);
        printf("ce contig put (hbm->pool)   %.1f GB/s\n", gbs(bench(c, [&] { CK(cudaMemcpyAsync(c.pool, c.hbm_contig, total, cudaMemcpyDefault, c.s0)); })));
        printf("ce contig get (pool->hbm)   %.1f GB/s\n", gbs(bench(c, [&] { CK(cudaMemcpyAsync(c.hbm_contig, c.pool, total, cudaMemcpyDefault, c.s0)); })));
        printf("ce contig put (hbm->pinned) %.1f GB/s\n", gbs(bench(c, [&] { CK(cudaMemcpyAsync(pinned, c.hbm_contig, total, cudaMemcpyDefault, c.s0)); })));
        printf("ce contig get (pinned->hbm) %.1f GB/s\n", gbs(bench(c, [&] { CK(cudaMemcpyAsync(c.hbm_contig, pinned, total, cudaMemcpyDefault, c.s0)); })));
        for (int th : {256, 512, 1024}) {
            printf("kernel put th=%4d u4 hostdesc %.1f GB/s\n", th, gbs(bench(c, [&] { kcopy<4><<<n, th, 0, c.s0>>>(hput, n); })));
            printf("kernel get th=%4d u4 hostdesc %.1f GB/s\n", th, gbs(bench(c, [&] { kcopy<4><<<n, th, 0, c.s0>>>(hget, n); })));
        }
        printf("kernel put th=256 u8 devdesc %.1f GB/s\n", gbs(bench(c, [&] { kcopy<8><<<n, 256, 0, c.s0>>>(dput, n); })));
        printf("kernel get th=256 u8 devdesc %.1f GB/s\n", gbs(bench(c, [&] { kcopy<8><<<n, 256, 0, c.s0>>>(dget, n); })));
        printf("kernel put th=128 u8 devdesc %.1f GB/s\n", gbs(bench(c, [&] { kcopy<8><<<n, 128, 0, c.s0>>>(dput, n); })));
        {
            std::vector<void *> d(n), s(n); std::vector<size_t> z(n, piece);
            cudaMemcpyAttributes at; memset(&at, 0, sizeof at); at.srcAccessOrder = cudaMemcpySrcAccessOrderStream; size_t ai = 0;
            for (size_t i = 0; i < n; i++) { d[i] = (void *)hput[i].dst; s[i] = (void *)hput[i].src; }
            printf("batchapi put %.1f GB/s\n", gbs(bench(c, [&] { CK(cudaMemcpyBatchAsync(d.data(), s.data(), z.data(), n, &at, &ai, 1, c.s0)); })));
            for (size_t i = 0; i < n; i++) { d[i] = (void *)hget[i].dst; s[i] = (void *)hget[i].src; }
            printf("batchapi get %.1f GB/s\n", gbs(bench(c, [&] { CK(cudaMemcpyBatchAsync(d.data(), s.data(), z.data(), n, &at, &ai, 1, c.s0)); })));
        }
        for (size_t chunk_mb : {1, 2, 4, 8, 16}) {
            size_t chunk = chunk_mb << 20; size_t per = chunk / piece; size_t nchunks = (n + per - 1) / per;
            if (nchunks < 2 && chunk_mb > 1) continue;
            // host descriptors: for chunk k, slot k%2: gather desc [kv piece -> staging[k%2] + j*piece]
            for (size_t k = 0; k < nchunks; k++) for (size_t j = 0; j < per && k * per + j < n; j++) {
                size_t i = k * per + j; uint64_t kv = (uint64_t)(c.hbm_kv + 2 * perm[i] * piece), st = (uint64_t)(c.staging[k % 2] + j * piece);
                hst[i] = {st, kv, piece}; hst[maxn + i] = {kv, st, piece};
            }
            auto put = [&] {
                for (size_t k = 0; k < nchunks; k++) {
                    size_t cnt = std::min(per, n - k * per);
                    if (k >= 2) CK(cudaStreamWaitEvent(c.s0, c.ev[2 * (k % 2) + 1]));   // staging slot free: CE of chunk k-2 done
                    kcopy<4><<<cnt, 256, 0, c.s0>>>(hst + k * per, cnt);
                    CK(cudaEventRecord(c.ev[2 * (k % 2)], c.s0));
                    CK(cudaStreamWaitEvent(c.s1, c.ev[2 * (k % 2)]));
                    CK(cudaMemcpyAsync(c.pool + k * per * piece, c.staging[k % 2], cnt * piece, cudaMemcpyDefault, c.s1));
                    CK(cudaEventRecord(c.ev[2 * (k % 2) + 1], c.s1));
                }
            };
            auto get = [&] {
                for (size_t k = 0; k < nchunks; k++) {
                    size_t cnt = std::min(per, n - k * per);
                    if (k >= 2) CK(cudaStreamWaitEvent(c.s1, c.ev[2 * (k % 2) + 1]));  // scatter of chunk k-2 done
                    CK(cudaMemcpyAsync(c.staging[k % 2], c.pool + k * per * piece, cnt * piece, cudaMemcpyDefault, c.s1));
                    CK(cudaEventRecord(c.ev[2 * (k % 2)], c.s1));
                    CK(cudaStreamWaitEvent(c.s0, c.ev[2 * (k % 2)]));
                    kcopy<4><<<cnt, 256, 0, c.s0>>>(hst + maxn + k * per, cnt);
                    CK(cudaEventRecord(c.ev[2 * (k % 2) + 1], c.s0));
                }
            };
            printf("staged put chunk=%2zu MiB %.1f GB/s\n", chunk_mb, gbs(bench(c, put)));
            printf("staged get chunk=%2zu MiB %.1f GB/s\n", chunk_mb, gbs(bench(c, get)));
        }
        // verify staged get correctness roughly: fill pool with pattern, staged get, compare one piece
    }
    return 0;
}
