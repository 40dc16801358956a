/* Fake CUDA driver for CI (no GPU): the table egm_cuda_api_t implemented on host
 * memory, faithful enough that the real cuda/te code runs unchanged against it.
 * Install it with egm__cuda_set_api(egm_fake_cuda_api()).
 *
 * What it emulates:
 * - cuInit is required first (NOT_INITIALIZED before; NO_DEVICE with 0 devices).
 * - VMM: cuMemCreate = a memfd (a named shm object when FABRIC is requested);
 *   reserve = PROT_NONE anonymous mapping; map = the file MAP_FIXED, PROT_NONE
 *   until cuMemSetAccess (so CPU accesses before SetAccess fault); unmap puts
 *   PROT_NONE anonymous memory back; the memory lives while handles or mappings
 *   refer to it. Map/unmap/set-access ranges must be whole mappings inside one
 *   reservation; cuMemAddressFree refuses a reservation that still has mappings.
 * - POSIX FD export = a dup the caller closes; FABRIC export = a 64-byte handle
 *   naming a shm object, importable by another process on this machine.
 * - Copies run at once on the CPU (synchronize is a no-op). Copies into/out of
 *   VMM ranges need access granted to the copying device (else INVALID_VALUE);
 *   the copy kernel EGM_KERNEL_COPY_BLOCKS runs as CPU loops and, like a real
 *   kernel, may only touch device-accessible memory (VMM granted to the device,
 *   cuMemAlloc memory of the same device, pinned or registered host memory; not
 *   pageable malloc memory, descriptors included): else 700 ILLEGAL_ADDRESS.
 * - Contexts: per-device primary context refcounts; current context per thread;
 *   streams, events, modules and copies need a live current context (or a
 *   stream's) else 201 INVALID_CONTEXT. Streams/events/modules of one device
 *   mixed with another's -> INVALID_HANDLE.
 * Error codes outside cuda_api.h that the fake may return: 201 INVALID_CONTEXT,
 * 700 ILLEGAL_ADDRESS, 712/713 HOST_MEMORY_(ALREADY_|NOT_)REGISTERED.
 * All functions are thread-safe (one mutex; copies run under it). The fake's
 * own records use plain malloc, not egm_malloc, so that tests' alloc counts
 * measure only egmstore code; its live objects are counted here instead. */
#ifndef EGM_TESTS_FAKE_CUDA_H
#define EGM_TESTS_FAKE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/cuda_api.h"

#define EGM_FAKE_CUDA_MAX_DEVICES 16
#define EGM_FAKE_CUDA_MAX_NUMA_NODES 16

/* Error codes the fake returns that cuda_api.h does not name. */
#define EGM_FAKE_CU_ERROR_INVALID_CONTEXT 201
#define EGM_FAKE_CU_ERROR_ILLEGAL_ADDRESS 700
#define EGM_FAKE_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define EGM_FAKE_CU_ERROR_HOST_MEMORY_NOT_REGISTERED 713

/* Every function of the table, in table order (X-macro). */
#define EGM_FAKE_CUDA_FUNCTIONS(X)                                                                 \
    X(cuInit)                                                                                      \
    X(cuDriverGetVersion)                                                                          \
    X(cuGetErrorName)                                                                              \
    X(cuGetErrorString)                                                                            \
    X(cuDeviceGetCount)                                                                            \
    X(cuDeviceGet)                                                                                 \
    X(cuDeviceGetAttribute)                                                                        \
    X(cuDeviceGetName)                                                                             \
    X(cuDevicePrimaryCtxRetain)                                                                    \
    X(cuDevicePrimaryCtxRelease)                                                                   \
    X(cuCtxSetCurrent)                                                                             \
    X(cuCtxGetCurrent)                                                                             \
    X(cuCtxSynchronize)                                                                            \
    X(cuMemGetAllocationGranularity)                                                               \
    X(cuMemCreate)                                                                                 \
    X(cuMemRelease)                                                                                \
    X(cuMemAddressReserve)                                                                         \
    X(cuMemAddressFree)                                                                            \
    X(cuMemMap)                                                                                    \
    X(cuMemUnmap)                                                                                  \
    X(cuMemSetAccess)                                                                              \
    X(cuMemExportToShareableHandle)                                                                \
    X(cuMemImportFromShareableHandle)                                                              \
    X(cuPointerGetAttribute)                                                                       \
    X(cuMemAlloc)                                                                                  \
    X(cuMemFree)                                                                                   \
    X(cuMemAllocHost)                                                                              \
    X(cuMemFreeHost)                                                                               \
    X(cuMemHostRegister)                                                                           \
    X(cuMemHostUnregister)                                                                         \
    X(cuMemcpy)                                                                                    \
    X(cuMemcpyAsync)                                                                               \
    X(cuMemcpyBatchAsync)                                                                          \
    X(cuMemsetD8)                                                                                  \
    X(cuStreamCreateWithPriority)                                                                  \
    X(cuCtxGetStreamPriorityRange)                                                                 \
    X(cuStreamDestroy)                                                                             \
    X(cuStreamSynchronize)                                                                         \
    X(cuStreamWaitEvent)                                                                           \
    X(cuEventCreate)                                                                               \
    X(cuEventRecord)                                                                               \
    X(cuEventSynchronize)                                                                          \
    X(cuEventQuery)                                                                                \
    X(cuEventDestroy)                                                                              \
    X(cuEventElapsedTime)                                                                          \
    X(cuModuleLoadData)                                                                            \
    X(cuModuleUnload)                                                                              \
    X(cuModuleGetFunction)                                                                         \
    X(cuLaunchKernel)

#define EGM_FAKE_CUDA_N_FUNCTIONS 49

typedef struct {
    /* live objects (all zero when code under test cleaned up) */
    uint64_t allocations;        /* cuMemCreate handles not released */
    uint64_t imports;            /* imported handles not released */
    uint64_t reservations;       /* cuMemAddressReserve not freed */
    uint64_t mappings;           /* cuMemMap not unmapped */
    uint64_t memory_objects;     /* backing files still referenced by a handle or mapping */
    uint64_t fabric_names;       /* shm names this process created and has not unlinked */
    uint64_t device_allocations; /* cuMemAlloc not freed */
    uint64_t pinned_host;        /* cuMemAllocHost not freed */
    uint64_t host_registrations; /* cuMemHostRegister not unregistered */
    uint64_t streams;
    uint64_t events;
    uint64_t modules;
    /* not freed by reset (a process retains primary contexts once) */
    uint64_t primary_ctx_refs; /* sum over devices of retain - release */
    /* activity since reset */
    uint64_t kernel_launches;
    uint64_t bytes_copied; /* by copies, memsets and kernels */
    uint64_t calls_total;
    uint64_t calls[EGM_FAKE_CUDA_N_FUNCTIONS]; /* index = position in EGM_FAKE_CUDA_FUNCTIONS */
} egm_fake_cuda_counters_t;

const egm_cuda_api_t *egm_fake_cuda_api(void);

/* Frees everything the fake holds (mappings, reservations, memory, streams,
 * events, modules; unlinks this process's fabric names and those of dead
 * processes), clears failures and call counts, and restores the defaults
 * (granularity 2 MiB, fabric supported and permitted, no attribute overrides,
 * strict device memory off). Keeps cuInit state and primary context refcounts
 * (code under test initialises and retains once per process). n_devices 0..16,
 * n_numa_nodes 1..16. Before the first reset: 2 devices, 1 NUMA node. */
void egm_fake_cuda_reset(int n_devices, int n_numa_nodes);
/* Allocation granularity (power of two, multiple of the page size). */
void egm_fake_cuda_set_granularity(size_t bytes);
/* supported: HANDLE_TYPE_FABRIC_SUPPORTED attribute (0 -> cuMemCreate with
 * FABRIC answers NOT_SUPPORTED). permitted 0: cuMemCreate with FABRIC answers
 * NOT_PERMITTED (the H200 without IMEX channels). */
void egm_fake_cuda_set_fabric(int supported, int permitted);
/* Answer `value` for `attribute` of `device` (-1: every device). */
void egm_fake_cuda_set_attribute(int device, int attribute, int value);
/* on: device memory (cuMemAlloc, VMM of DEVICE location) is never CPU
 * accessible, as on real hardware, so host code touching it faults. Applies to
 * allocations and SetAccess calls made afterwards. */
void egm_fake_cuda_set_strict_device_memory(int on);

egm_fake_cuda_counters_t egm_fake_cuda_counters(void);
/* Sum of the live-object counters above (allocations .. modules, without
 * primary_ctx_refs): 0 when the code under test released everything. */
uint64_t egm_fake_cuda_live_objects(void);

/* The nth call from now (1-based) of `function` returns `error` without side
 * effects; nth 0 = every call until cleared. Rules stack. An unknown function
 * name or error 0 aborts (a typo must not make a test pass). */
void egm_fake_cuda_fail(const char *function, unsigned nth, egm_cu_result_t error);
void egm_fake_cuda_clear_failures(void);
/* Injected failures answered since the last reset or clear_failures. */
size_t egm_fake_cuda_failures_fired(void);
/* Calls of `function` (as egm_fake_cuda_calls counts them, the failed call
 * included) at the moment the first of those failures was answered; 0 when
 * none was. For faults on the rollback path: the calls of f after the first
 * failure are (calls_at_first_failure(f), calls(f)], so failing call n of f
 * in that range (rules set right after a reset count from 1) hits the
 * cleanup that the first failure set off. */
size_t egm_fake_cuda_calls_at_first_failure(const char *function);

/* Calls of `function` since the last reset/clear (failed ones included);
 * unknown names abort. */
size_t egm_fake_cuda_calls(const char *function);
void egm_fake_cuda_clear_calls(void);
/* Names of the functions called since the last reset/clear, in table order:
 * fills up to max names, returns how many there are. For fault sweeps:
 * clear, run the path, then for each name f and n in 1..calls(f) reset, fail
 * (f, n, err), run again and check the error and the counters. */
size_t egm_fake_cuda_called(const char **names, size_t max);
/* Name of table entry i, NULL past the end. */
const char *egm_fake_cuda_function_name(size_t i);

/* CPU address where a test may read/write [ptr, ptr + len) of any memory the
 * fake knows (device allocations and VMM mappings included, whatever their
 * access), or NULL when the range is unknown or not one contiguous piece. */
void *egm_fake_cuda_host_view(egm_cu_deviceptr_t ptr, size_t len);

#endif
