/* The CUDA driver loaded at run time: dlopen("libcuda.so.1"), one dlsym
 * (cuGetProcAddress), then every table entry by name and CUDA version. Never
 * linked, so that every binary runs on machines without a GPU. */
#include "cuda/driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

/* Devices whose primary context this process may retain. */
#define MAX_DEVICES 64

/* The CUDA version whose signatures cuda_api.h declares. */
#define API_VERSION 13000
#define FALLBACK_VERSION 12000

typedef egm_cu_result_t (*get_proc_v2_fn)(const char *symbol, void **pfn, int cuda_version,
                                          uint64_t flags, int *symbol_status);
typedef egm_cu_result_t (*get_proc_v1_fn)(const char *symbol, void **pfn, int cuda_version,
                                          uint64_t flags);

/* How a table entry is resolved. */
enum {
    RESOLVE_DEFAULT = 0, /* cudaVersion 13000, then 12000 for drivers that lack the 13 entry */
    /* cuCtxSynchronize: its 13.0 version takes a context; the table declares
     * the (void) one, which 12000 gives on every driver. */
    RESOLVE_V12_ONLY = 1,
    /* cuMemcpyBatchAsync: 12.8 had an extra failIdx argument; only the 13.0
     * signature is usable, and the entry stays NULL on older drivers. */
    RESOLVE_V13_OPTIONAL = 2,
};

#define FN(name, how)                                                                              \
    {                                                                                              \
#name, offsetof(egm_cuda_api_t, name), how                                                 \
    }
static const struct {
    const char *name;
    size_t offset;
    int how;
} functions[] = {
    FN(cuInit, RESOLVE_DEFAULT),
    FN(cuDriverGetVersion, RESOLVE_DEFAULT),
    FN(cuGetErrorName, RESOLVE_DEFAULT),
    FN(cuGetErrorString, RESOLVE_DEFAULT),
    FN(cuDeviceGetCount, RESOLVE_DEFAULT),
    FN(cuDeviceGet, RESOLVE_DEFAULT),
    FN(cuDeviceGetAttribute, RESOLVE_DEFAULT),
    FN(cuDeviceGetName, RESOLVE_DEFAULT),
    FN(cuDevicePrimaryCtxRetain, RESOLVE_DEFAULT),
    FN(cuDevicePrimaryCtxRelease, RESOLVE_DEFAULT),
    FN(cuCtxSetCurrent, RESOLVE_DEFAULT),
    FN(cuCtxGetCurrent, RESOLVE_DEFAULT),
    FN(cuCtxSynchronize, RESOLVE_V12_ONLY),
    FN(cuMemGetAllocationGranularity, RESOLVE_DEFAULT),
    FN(cuMemCreate, RESOLVE_DEFAULT),
    FN(cuMemRelease, RESOLVE_DEFAULT),
    FN(cuMemAddressReserve, RESOLVE_DEFAULT),
    FN(cuMemAddressFree, RESOLVE_DEFAULT),
    FN(cuMemMap, RESOLVE_DEFAULT),
    FN(cuMemUnmap, RESOLVE_DEFAULT),
    FN(cuMemSetAccess, RESOLVE_DEFAULT),
    FN(cuMemExportToShareableHandle, RESOLVE_DEFAULT),
    FN(cuMemImportFromShareableHandle, RESOLVE_DEFAULT),
    FN(cuPointerGetAttribute, RESOLVE_DEFAULT),
    FN(cuMemAlloc, RESOLVE_DEFAULT),
    FN(cuMemFree, RESOLVE_DEFAULT),
    FN(cuMemAllocHost, RESOLVE_DEFAULT),
    FN(cuMemFreeHost, RESOLVE_DEFAULT),
    FN(cuMemHostRegister, RESOLVE_DEFAULT),
    FN(cuMemHostUnregister, RESOLVE_DEFAULT),
    FN(cuMemcpy, RESOLVE_DEFAULT),
    FN(cuMemcpyAsync, RESOLVE_DEFAULT),
    FN(cuMemcpyBatchAsync, RESOLVE_V13_OPTIONAL),
    FN(cuMemsetD8, RESOLVE_DEFAULT),
    FN(cuStreamCreateWithPriority, RESOLVE_DEFAULT),
    FN(cuCtxGetStreamPriorityRange, RESOLVE_DEFAULT),
    FN(cuStreamDestroy, RESOLVE_DEFAULT),
    FN(cuStreamSynchronize, RESOLVE_DEFAULT),
    FN(cuStreamWaitEvent, RESOLVE_DEFAULT),
    FN(cuEventCreate, RESOLVE_DEFAULT),
    FN(cuEventRecord, RESOLVE_DEFAULT),
    FN(cuEventSynchronize, RESOLVE_DEFAULT),
    FN(cuEventQuery, RESOLVE_DEFAULT),
    FN(cuEventDestroy, RESOLVE_DEFAULT),
    FN(cuEventElapsedTime, RESOLVE_DEFAULT),
    FN(cuModuleLoadData, RESOLVE_DEFAULT),
    FN(cuModuleUnload, RESOLVE_DEFAULT),
    FN(cuModuleGetFunction, RESOLVE_DEFAULT),
    FN(cuLaunchKernel, RESOLVE_DEFAULT),
};
#undef FN
_Static_assert(sizeof(functions) / sizeof(functions[0]) ==
                   sizeof(egm_cuda_api_t) / sizeof(egm_cu_result_t(*)(void)),
               "every entry of egm_cuda_api_t is resolved");

/* Names and texts of the common CUresult values, for when the driver is not
 * loaded (or does not know a value). */
static const struct {
    egm_cu_result_t rc;
    const char *name;
    const char *text;
} errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", "API call is not supported by this driver"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {206, "CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"},
    {208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
     "peer access is not supported between these two devices"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {220, "CUDA_ERROR_NVLINK_UNCORRECTABLE",
     "uncorrectable NVLink error detected during the execution"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the provided PTX was compiled with an unsupported toolchain."},
    {300, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
    {705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"},
    {708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "cannot set while device is active in this process"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {909, "CUDA_ERROR_TIMEOUT", "wait operation timed out"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* The real driver: loaded once per process. */
static pthread_once_t real_once = PTHREAD_ONCE_INIT;
static egm_cuda_api_t real_api;
static egm_status_t real_status;
static char real_error[512];
static int real_version;

/* A table installed by tests; cuInit is called on it by the first load. */
static _Atomic(const egm_cuda_api_t *) override_api;
static const egm_cuda_api_t *override_ready; /* under lock: the table cuInit succeeded on */
/* The table error names come from: set once a load succeeded. */
static _Atomic(const egm_cuda_api_t *) active_api;

/* Primary contexts retained by this process, per device, of ctx_api's table. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const egm_cuda_api_t *ctx_api;
static egm_cu_context_t contexts[MAX_DEVICES];

static const char *internal_name(egm_cu_result_t rc)
{
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].rc == rc)
            return errors[i].name;
    return NULL;
}

static const char *internal_text(egm_cu_result_t rc)
{
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].rc == rc)
            return errors[i].text;
    return NULL;
}

const char *egm__cuda_error_name(egm_cu_result_t rc)
{
    static _Thread_local char unknown[32];
    const egm_cuda_api_t *api = atomic_load(&active_api);
    const char *name = NULL;
    if (api != NULL && api->cuGetErrorName != NULL &&
        api->cuGetErrorName(rc, &name) == EGM_CU_SUCCESS && name != NULL)
        return name;
    if ((name = internal_name(rc)) != NULL)
        return name;
    snprintf(unknown, sizeof(unknown), "CUresult %d", rc);
    return unknown;
}

static const char *error_text(egm_cu_result_t rc)
{
    const egm_cuda_api_t *api = atomic_load(&active_api);
    const char *text = NULL;
    if (api != NULL && api->cuGetErrorString != NULL &&
        api->cuGetErrorString(rc, &text) == EGM_CU_SUCCESS && text != NULL)
        return text;
    if ((text = internal_text(rc)) != NULL)
        return text;
    return "unrecognized error code";
}

/* Calls whose failure means data did not move (asynchronous copy errors show
 * up at the synchronisation that follows them). */
static int is_copy_call(const char *call)
{
    static const char *const prefixes[] = {
        "cuMemcpy",     "cuMemset",           "cuLaunchKernel",   "cuStreamSynchronize",
        "cuEventQuery", "cuEventSynchronize", "cuCtxSynchronize",
    };
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
        if (strncmp(call, prefixes[i], strlen(prefixes[i])) == 0)
            return 1;
    return 0;
}

egm_status_t egm__cuda_check(egm_cu_result_t rc, const char *call)
{
    if (rc == EGM_CU_SUCCESS)
        return EGM_OK;
    if (call == NULL)
        call = "CUDA";
    const char *name = egm__cuda_error_name(rc);
    egm_status_t status;
    switch (rc) {
    case EGM_CU_ERROR_NOT_PERMITTED:
    case EGM_CU_ERROR_NOT_SUPPORTED:
        status = EGM_ERR_NOT_SUPPORTED;
        break;
    case EGM_CU_ERROR_OUT_OF_MEMORY:
        status = EGM_ERR_NO_MEMORY;
        break;
    case EGM_CU_ERROR_NO_DEVICE:
        status = EGM_ERR_NO_CUDA;
        break;
    default:
        if (strncmp(name, "CUDA_ERROR_INVALID_", strlen("CUDA_ERROR_INVALID_")) == 0)
            status = EGM_ERR_INVALID_ARG;
        else
            status = is_copy_call(call) ? EGM_ERR_TRANSFER : EGM_ERR_INTERNAL;
        break;
    }
    return egm__set_error(status, "%s: %s (%s)", call, name, error_text(rc));
}

/* One entry by name; NULL when the driver lacks it. */
static void *resolve(void *get_proc, int v2, const char *name, int version)
{
    void *fn = NULL;
    egm_cu_result_t rc;
    if (v2) {
        int symbol_status = 0;
        rc = ((get_proc_v2_fn)get_proc)(name, &fn, version, EGM_CU_GET_PROC_ADDRESS_DEFAULT,
                                        &symbol_status);
        if (symbol_status != 0) /* CU_GET_PROC_ADDRESS_SUCCESS */
            fn = NULL;
    } else {
        rc = ((get_proc_v1_fn)get_proc)(name, &fn, version, EGM_CU_GET_PROC_ADDRESS_DEFAULT);
    }
    return rc == EGM_CU_SUCCESS ? fn : NULL;
}

/* Records the outcome that every later egm__cuda_load repeats. */
static void real_fail(egm_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void real_fail(egm_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(real_error, sizeof(real_error), fmt, ap);
    va_end(ap);
    real_status = status;
}

static void load_real(void)
{
    /* RTLD_LOCAL: the driver's symbols must not satisfy anyone else's lookups
     * (PyTorch brings its own). The handle stays open for the process. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        real_fail(EGM_ERR_NO_CUDA, "no CUDA driver: libcuda.so.1 not found (%s)",
                  why ? why : "dlopen failed");
        egm_debug("%s", real_error);
        return;
    }
    int v2 = 1;
    void *get_proc = dlsym(lib, "cuGetProcAddress_v2");
    if (get_proc == NULL) {
        v2 = 0;
        get_proc = dlsym(lib, "cuGetProcAddress");
    }
    if (get_proc == NULL) {
        real_fail(EGM_ERR_NO_CUDA,
                  "no CUDA driver: libcuda.so.1 has no cuGetProcAddress (driver older than 11.3)");
        egm_warn("%s", real_error);
        return;
    }

    egm_cuda_api_t api;
    memset(&api, 0, sizeof(api));
    *(void **)&api.cuDriverGetVersion = resolve(get_proc, v2, "cuDriverGetVersion", API_VERSION);
    if (api.cuDriverGetVersion == NULL || api.cuDriverGetVersion(&real_version) != EGM_CU_SUCCESS)
        real_version = 0;

    for (size_t i = 0; i < sizeof(functions) / sizeof(functions[0]); i++) {
        void *fn = NULL;
        switch (functions[i].how) {
        case RESOLVE_DEFAULT:
            fn = resolve(get_proc, v2, functions[i].name, API_VERSION);
            if (fn == NULL)
                fn = resolve(get_proc, v2, functions[i].name, FALLBACK_VERSION);
            break;
        case RESOLVE_V12_ONLY:
            fn = resolve(get_proc, v2, functions[i].name, FALLBACK_VERSION);
            break;
        case RESOLVE_V13_OPTIONAL:
            /* A 12.x driver may answer the 12.8 entry even when asked for 13000. */
            if (real_version >= API_VERSION)
                fn = resolve(get_proc, v2, functions[i].name, API_VERSION);
            if (fn == NULL)
                egm_info("CUDA driver %d.%d has no usable %s: batches use other paths",
                         real_version / 1000, real_version % 1000 / 10, functions[i].name);
            break;
        }
        if (fn == NULL && functions[i].how != RESOLVE_V13_OPTIONAL) {
            real_fail(EGM_ERR_NO_CUDA, "no CUDA driver: driver %d.%d lacks %s", real_version / 1000,
                      real_version % 1000 / 10, functions[i].name);
            egm_warn("%s", real_error);
            return;
        }
        memcpy((char *)&api + functions[i].offset, &fn, sizeof(fn));
    }

    egm_cu_result_t rc = api.cuInit(0);
    if (rc != EGM_CU_SUCCESS) {
        const char *name = NULL, *text = NULL;
        if (api.cuGetErrorName(rc, &name) != EGM_CU_SUCCESS || name == NULL)
            name = internal_name(rc) ? internal_name(rc) : "unknown CUresult";
        if (api.cuGetErrorString(rc, &text) != EGM_CU_SUCCESS || text == NULL)
            text = internal_text(rc) ? internal_text(rc) : "unrecognized error code";
        real_fail(EGM_ERR_NO_CUDA, "no CUDA driver: cuInit(0): %s (%s)", name, text);
        egm_warn("%s", real_error);
        return;
    }
    real_api = api;
    real_status = EGM_OK;
    atomic_store(&active_api, &real_api);
    egm_info("CUDA driver %d.%d loaded%s", real_version / 1000, real_version % 1000 / 10,
             api.cuMemcpyBatchAsync ? "" : " (no cuMemcpyBatchAsync)");
}

egm_status_t egm__cuda_load(const egm_cuda_api_t **api_p)
{
    const egm_cuda_api_t *api = atomic_load(&override_api);
    if (api != NULL) {
        /* Tests: initialise the installed table once; a failure is retried by
         * the next call (a test may add devices to its fake in between). */
        egm_status_t st = EGM_OK;
        pthread_mutex_lock(&lock);
        if (override_ready != api) {
            egm_cu_result_t rc = api->cuInit(0);
            if (rc == EGM_CU_SUCCESS) {
                override_ready = api;
                atomic_store(&active_api, api);
            } else {
                st = egm__set_error(EGM_ERR_NO_CUDA, "no CUDA driver: cuInit(0): %s (%s)",
                                    egm__cuda_error_name(rc), error_text(rc));
            }
        }
        pthread_mutex_unlock(&lock);
        if (st == EGM_OK && api_p != NULL)
            *api_p = api;
        return st;
    }
    pthread_once(&real_once, load_real);
    if (real_status != EGM_OK)
        return egm__set_error(real_status, "%s", real_error);
    if (atomic_load(&active_api) != &real_api) /* first load, or back from a test table */
        atomic_store(&active_api, &real_api);
    if (api_p != NULL)
        *api_p = &real_api;
    return EGM_OK;
}

void egm__cuda_set_api(const egm_cuda_api_t *api)
{
    pthread_mutex_lock(&lock);
    atomic_store(&override_api, api);
    override_ready = NULL;
    /* Error names come from the new table once a load initialised it. */
    atomic_store(&active_api, NULL);
    pthread_mutex_unlock(&lock);
}

egm_status_t egm__cuda_count_devices(int *count_p)
{
    const egm_cuda_api_t *api;
    int count = 0;
    *count_p = 0;
    egm_status_t st = egm__cuda_load(&api);
    if (st != EGM_OK)
        return st;
    if ((st = egm__cuda_check(api->cuDeviceGetCount(&count), "cuDeviceGetCount")) != EGM_OK)
        return st;
    *count_p = count < 0 ? 0 : count;
    return EGM_OK;
}

int egm__cuda_device_count(void)
{
    int count = 0;
    return egm__cuda_count_devices(&count) == EGM_OK ? count : 0;
}

egm_status_t egm__cuda_use_device(int device)
{
    const egm_cuda_api_t *api;
    egm_status_t st = egm__cuda_load(&api);
    if (st != EGM_OK)
        return st;
    if (device < 0 || device >= MAX_DEVICES)
        return egm__set_error(EGM_ERR_INVALID_ARG, "device %d out of range 0..%d", device,
                              MAX_DEVICES - 1);

    pthread_mutex_lock(&lock);
    if (ctx_api != api) {
        /* Another table (tests): its contexts are not ours to release. */
        memset(contexts, 0, sizeof(contexts));
        ctx_api = api;
    }
    egm_cu_context_t ctx = contexts[device];
    if (ctx == NULL) {
        /* Retained once and kept for the process (its exit releases it): the
         * context is shared with the application (PyTorch), and our streams
         * and mappings live in it. */
        int count = 0;
        egm_cu_device_t dev;
        egm_cu_result_t rc = api->cuDeviceGetCount(&count);
        if (rc != EGM_CU_SUCCESS) {
            st = egm__cuda_check(rc, "cuDeviceGetCount");
        } else if (device >= count) {
            st = egm__set_error(EGM_ERR_INVALID_ARG, "device %d out of range (%d visible)", device,
                                count);
        } else if ((rc = api->cuDeviceGet(&dev, device)) != EGM_CU_SUCCESS) {
            st = egm__cuda_check(rc, "cuDeviceGet");
        } else if ((rc = api->cuDevicePrimaryCtxRetain(&ctx, dev)) != EGM_CU_SUCCESS) {
            st = egm__cuda_check(rc, "cuDevicePrimaryCtxRetain");
        } else {
            contexts[device] = ctx;
        }
    }
    pthread_mutex_unlock(&lock);
    if (st != EGM_OK)
        return st;
    return egm__cuda_check(api->cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

egm_status_t egm__cuda_pointer_device(const void *ptr, int *device_p)
{
    const egm_cuda_api_t *api;
    if (device_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "pointer device: device_p is NULL");
    *device_p = -1;
    if (ptr == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "pointer device: pointer is NULL");
    if (egm__cuda_load(&api) != EGM_OK)
        return EGM_OK; /* no driver: every pointer is host memory */

    egm_cu_deviceptr_t p = (egm_cu_deviceptr_t)(uintptr_t)ptr;
    unsigned int type = 0;
    egm_cu_result_t rc = api->cuPointerGetAttribute(&type, EGM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
    if (rc == EGM_CU_ERROR_INVALID_VALUE)
        return EGM_OK; /* pageable memory the driver has never seen */
    if (rc != EGM_CU_SUCCESS)
        return egm__cuda_check(rc, "cuPointerGetAttribute(MEMORY_TYPE)");
    if (type != EGM_CU_MEMORYTYPE_DEVICE)
        return EGM_OK; /* pinned or registered host memory is still host memory */
    int ordinal = -1;
    rc = api->cuPointerGetAttribute(&ordinal, EGM_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
    if (rc != EGM_CU_SUCCESS)
        return egm__cuda_check(rc, "cuPointerGetAttribute(DEVICE_ORDINAL)");
    *device_p = ordinal;
    return EGM_OK;
}

int egm__cuda_pointer_gpu_mapped_host(const void *ptr)
{
    const egm_cuda_api_t *api;
    if (ptr == NULL || egm__cuda_load(&api) != EGM_OK)
        return 0;
    egm_cu_deviceptr_t p = (egm_cu_deviceptr_t)(uintptr_t)ptr, dev = 0;
    unsigned int type = 0;
    if (api->cuPointerGetAttribute(&type, EGM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) !=
            EGM_CU_SUCCESS ||
        type != EGM_CU_MEMORYTYPE_HOST)
        return 0;
    /* The device pointer is a question about the current context: asked in GPU
     * 0's primary context (the one that copies it), whatever this thread had
     * current, which is given back. */
    egm_cu_context_t saved = NULL;
    if (api->cuCtxGetCurrent(&saved) != EGM_CU_SUCCESS)
        saved = NULL;
    if (egm__cuda_use_device(0) != EGM_OK)
        return 0;
    int mapped = api->cuPointerGetAttribute(&dev, EGM_CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p) ==
                     EGM_CU_SUCCESS &&
                 dev == p;
    if (api->cuCtxSetCurrent(saved) != EGM_CU_SUCCESS)
        egm_warn("restoring the caller's CUDA context failed");
    return mapped;
}
