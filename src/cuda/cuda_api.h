/* The CUDA driver API as egmstore uses it: our own declarations of the types and
 * constants (ABI-compatible with the driver, so that the build needs no CUDA
 * toolkit) and one table of function pointers. The real table is filled by
 * dlopen("libcuda.so.1") + cuGetProcAddress (driver.c); tests install a fake
 * table (tests/support/fake_cuda.c). Nothing else calls the driver. */
#ifndef EGM_CUDA_CUDA_API_H
#define EGM_CUDA_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

typedef int egm_cu_result_t; /* CUresult */
#define EGM_CU_SUCCESS 0
#define EGM_CU_ERROR_INVALID_VALUE 1
#define EGM_CU_ERROR_OUT_OF_MEMORY 2
#define EGM_CU_ERROR_NOT_INITIALIZED 3
#define EGM_CU_ERROR_NO_DEVICE 100
#define EGM_CU_ERROR_INVALID_DEVICE 101
#define EGM_CU_ERROR_INVALID_HANDLE 400
#define EGM_CU_ERROR_NOT_FOUND 500
#define EGM_CU_ERROR_NOT_READY 600
#define EGM_CU_ERROR_NOT_PERMITTED 800
#define EGM_CU_ERROR_NOT_SUPPORTED 801
#define EGM_CU_ERROR_UNKNOWN 999

typedef int egm_cu_device_t;                      /* CUdevice */
typedef struct egm_cu_ctx_st *egm_cu_context_t;   /* CUcontext */
typedef uint64_t egm_cu_deviceptr_t;              /* CUdeviceptr */
typedef struct egm_cu_stream_st *egm_cu_stream_t; /* CUstream */
typedef struct egm_cu_event_st *egm_cu_event_t;   /* CUevent */
typedef struct egm_cu_module_st *egm_cu_module_t; /* CUmodule */
typedef struct egm_cu_func_st *egm_cu_function_t; /* CUfunction */
typedef uint64_t egm_cu_mem_handle_t;             /* CUmemGenericAllocationHandle */

/* CUmemLocationType */
#define EGM_CU_MEM_LOCATION_TYPE_DEVICE 0x1
#define EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA 0x3
/* CUmemAllocationHandleType (bit flags) */
#define EGM_CU_MEM_HANDLE_TYPE_NONE 0x0
#define EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 0x1
#define EGM_CU_MEM_HANDLE_TYPE_FABRIC 0x8
/* CUmemAllocationType */
#define EGM_CU_MEM_ALLOCATION_TYPE_PINNED 0x1
/* CUmemAccess_flags */
#define EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE 0x3
/* CUmemAllocationGranularity_flags */
#define EGM_CU_MEM_ALLOC_GRANULARITY_MINIMUM 0x0
#define EGM_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 0x1
/* CUdevice_attribute */
#define EGM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define EGM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define EGM_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102
#define EGM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED 103
#define EGM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED 128
#define EGM_CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID 134
#define EGM_CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 141
/* CUpointer_attribute */
#define EGM_CU_POINTER_ATTRIBUTE_CONTEXT 1
#define EGM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define EGM_CU_POINTER_ATTRIBUTE_DEVICE_POINTER 3
#define EGM_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define EGM_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define EGM_CU_POINTER_ATTRIBUTE_RANGE_SIZE 12
/* CUmemorytype */
#define EGM_CU_MEMORYTYPE_HOST 0x1
#define EGM_CU_MEMORYTYPE_DEVICE 0x2
/* flags */
#define EGM_CU_STREAM_NON_BLOCKING 0x1
#define EGM_CU_EVENT_DISABLE_TIMING 0x2
#define EGM_CU_MEMHOSTALLOC_PORTABLE 0x1
#define EGM_CU_MEMHOSTREGISTER_PORTABLE 0x1
#define EGM_CU_GET_PROC_ADDRESS_DEFAULT 0
#define EGM_CU_MEMCPY_SRC_ACCESS_ORDER_STREAM 0x1

#define EGM_CU_FABRIC_HANDLE_SIZE 64

typedef struct {
    int type; /* EGM_CU_MEM_LOCATION_TYPE_* */
    int id;
} egm_cu_mem_location_t; /* CUmemLocation */

typedef struct {
    int type;                   /* EGM_CU_MEM_ALLOCATION_TYPE_PINNED */
    int requested_handle_types; /* EGM_CU_MEM_HANDLE_TYPE_* */
    egm_cu_mem_location_t location;
    void *win32_handle_meta_data; /* must be NULL */
    struct {
        unsigned char compression_type;
        unsigned char gpu_direct_rdma_capable;
        unsigned short usage;
        unsigned char reserved[4];
    } alloc_flags;
} egm_cu_mem_allocation_prop_t; /* CUmemAllocationProp */

typedef struct {
    egm_cu_mem_location_t location;
    int flags;              /* EGM_CU_MEM_ACCESS_FLAGS_* */
} egm_cu_mem_access_desc_t; /* CUmemAccessDesc */

typedef struct {
    unsigned char data[EGM_CU_FABRIC_HANDLE_SIZE];
} egm_cu_fabric_handle_t; /* CUmemFabricHandle */

typedef struct {
    int src_access_order; /* EGM_CU_MEMCPY_SRC_ACCESS_ORDER_* */
    egm_cu_mem_location_t src_loc_hint;
    egm_cu_mem_location_t dst_loc_hint;
    unsigned int flags;
} egm_cu_memcpy_attributes_t; /* CUmemcpyAttributes */

_Static_assert(sizeof(egm_cu_mem_allocation_prop_t) == 32, "CUmemAllocationProp layout");
_Static_assert(sizeof(egm_cu_memcpy_attributes_t) == 24, "CUmemcpyAttributes layout");

/* One entry per driver function egmstore calls. Field names are the driver's
 * names; signatures are those of the CUDA 13.0 versions (cuGetProcAddress with
 * cudaVersion 13000). A NULL entry means the driver lacks the function. */
typedef struct {
    egm_cu_result_t (*cuInit)(unsigned int flags);
    egm_cu_result_t (*cuDriverGetVersion)(int *version);
    egm_cu_result_t (*cuGetErrorName)(egm_cu_result_t error, const char **name);
    egm_cu_result_t (*cuGetErrorString)(egm_cu_result_t error, const char **text);
    egm_cu_result_t (*cuDeviceGetCount)(int *count);
    egm_cu_result_t (*cuDeviceGet)(egm_cu_device_t *device, int ordinal);
    egm_cu_result_t (*cuDeviceGetAttribute)(int *value, int attribute, egm_cu_device_t device);
    egm_cu_result_t (*cuDeviceGetName)(char *name, int len, egm_cu_device_t device);
    egm_cu_result_t (*cuDevicePrimaryCtxRetain)(egm_cu_context_t *ctx, egm_cu_device_t device);
    egm_cu_result_t (*cuDevicePrimaryCtxRelease)(egm_cu_device_t device);
    egm_cu_result_t (*cuCtxSetCurrent)(egm_cu_context_t ctx);
    egm_cu_result_t (*cuCtxGetCurrent)(egm_cu_context_t *ctx);
    egm_cu_result_t (*cuCtxSynchronize)(void);

    egm_cu_result_t (*cuMemGetAllocationGranularity)(size_t *granularity,
                                                     const egm_cu_mem_allocation_prop_t *prop,
                                                     int option);
    egm_cu_result_t (*cuMemCreate)(egm_cu_mem_handle_t *handle, size_t size,
                                   const egm_cu_mem_allocation_prop_t *prop,
                                   unsigned long long flags);
    egm_cu_result_t (*cuMemRelease)(egm_cu_mem_handle_t handle);
    egm_cu_result_t (*cuMemAddressReserve)(egm_cu_deviceptr_t *ptr, size_t size, size_t alignment,
                                           egm_cu_deviceptr_t addr, unsigned long long flags);
    egm_cu_result_t (*cuMemAddressFree)(egm_cu_deviceptr_t ptr, size_t size);
    egm_cu_result_t (*cuMemMap)(egm_cu_deviceptr_t ptr, size_t size, size_t offset,
                                egm_cu_mem_handle_t handle, unsigned long long flags);
    egm_cu_result_t (*cuMemUnmap)(egm_cu_deviceptr_t ptr, size_t size);
    egm_cu_result_t (*cuMemSetAccess)(egm_cu_deviceptr_t ptr, size_t size,
                                      const egm_cu_mem_access_desc_t *desc, size_t count);
    /* shareable_handle: int* for POSIX FD, egm_cu_fabric_handle_t* for FABRIC */
    egm_cu_result_t (*cuMemExportToShareableHandle)(void *shareable_handle,
                                                    egm_cu_mem_handle_t handle, int handle_type,
                                                    unsigned long long flags);
    /* os_handle: (void *)(intptr_t)fd for POSIX FD, egm_cu_fabric_handle_t* for FABRIC */
    egm_cu_result_t (*cuMemImportFromShareableHandle)(egm_cu_mem_handle_t *handle, void *os_handle,
                                                      int handle_type);

    egm_cu_result_t (*cuPointerGetAttribute)(void *data, int attribute, egm_cu_deviceptr_t ptr);
    egm_cu_result_t (*cuMemAlloc)(egm_cu_deviceptr_t *ptr, size_t size);
    egm_cu_result_t (*cuMemFree)(egm_cu_deviceptr_t ptr);
    egm_cu_result_t (*cuMemAllocHost)(void **ptr, size_t size);
    egm_cu_result_t (*cuMemFreeHost)(void *ptr);
    egm_cu_result_t (*cuMemHostRegister)(void *ptr, size_t size, unsigned int flags);
    egm_cu_result_t (*cuMemHostUnregister)(void *ptr);

    egm_cu_result_t (*cuMemcpy)(egm_cu_deviceptr_t dst, egm_cu_deviceptr_t src, size_t size);
    egm_cu_result_t (*cuMemcpyAsync)(egm_cu_deviceptr_t dst, egm_cu_deviceptr_t src, size_t size,
                                     egm_cu_stream_t stream);
    egm_cu_result_t (*cuMemcpyBatchAsync)(egm_cu_deviceptr_t *dsts, egm_cu_deviceptr_t *srcs,
                                          size_t *sizes, size_t count,
                                          egm_cu_memcpy_attributes_t *attrs, size_t *attr_idxs,
                                          size_t num_attrs, egm_cu_stream_t stream);
    egm_cu_result_t (*cuMemsetD8)(egm_cu_deviceptr_t dst, unsigned char value, size_t count);

    egm_cu_result_t (*cuStreamCreateWithPriority)(egm_cu_stream_t *stream, unsigned int flags,
                                                  int priority);
    egm_cu_result_t (*cuCtxGetStreamPriorityRange)(int *least, int *greatest);
    egm_cu_result_t (*cuStreamDestroy)(egm_cu_stream_t stream);
    egm_cu_result_t (*cuStreamSynchronize)(egm_cu_stream_t stream);
    /* flags must be 0 */
    egm_cu_result_t (*cuStreamWaitEvent)(egm_cu_stream_t stream, egm_cu_event_t event,
                                         unsigned int flags);
    egm_cu_result_t (*cuEventCreate)(egm_cu_event_t *event, unsigned int flags);
    egm_cu_result_t (*cuEventRecord)(egm_cu_event_t event, egm_cu_stream_t stream);
    egm_cu_result_t (*cuEventSynchronize)(egm_cu_event_t event);
    egm_cu_result_t (*cuEventQuery)(egm_cu_event_t event);
    egm_cu_result_t (*cuEventDestroy)(egm_cu_event_t event);
    egm_cu_result_t (*cuEventElapsedTime)(float *ms, egm_cu_event_t start, egm_cu_event_t end);

    egm_cu_result_t (*cuModuleLoadData)(egm_cu_module_t *module, const void *image);
    egm_cu_result_t (*cuModuleUnload)(egm_cu_module_t module);
    egm_cu_result_t (*cuModuleGetFunction)(egm_cu_function_t *func, egm_cu_module_t module,
                                           const char *name);
    egm_cu_result_t (*cuLaunchKernel)(egm_cu_function_t func, unsigned grid_x, unsigned grid_y,
                                      unsigned grid_z, unsigned block_x, unsigned block_y,
                                      unsigned block_z, unsigned shared_bytes,
                                      egm_cu_stream_t stream, void **params, void **extra);
} egm_cuda_api_t;

#endif
