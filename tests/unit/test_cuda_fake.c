/* The fake CUDA driver (tests/support/fake_cuda.c): VMM round trips with
 * counters back to zero, faults before SetAccess, POSIX FD and cross-process
 * FABRIC sharing, not-permitted fabric, failure injection, the copy kernel's
 * CPU emulation and its device-accessibility rules, pointer attributes,
 * streams/events/contexts. Every test checks that no object, fd or /dev/shm
 * name is left behind. */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "cuda/kernels.h"
#include "support/fake_cuda.h"

#define MIB ((size_t)1 << 20)
#define GRAN (2 * MIB)

static const egm_cuda_api_t *cu;
static uint64_t live_at_start;
static int fds_at_start;

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Fabric names of this process in /dev/shm. */
static int count_shm_names(void)
{
    char prefix[64];
    int n = 0;
    snprintf(prefix, sizeof(prefix), "egm-fake-fab-%ld-", (long)getpid());
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

static int group_setup(void **state)
{
    (void)state;
    cu = egm_fake_cuda_api();
    return 0;
}

static int setup(void **state)
{
    (void)state;
    egm_fake_cuda_reset(2, 1);
    assert_int_equal(cu->cuInit(0), EGM_CU_SUCCESS);
    live_at_start = egm__alloc_live_count();
    fds_at_start = count_fds();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    egm_fake_cuda_counters_t c = egm_fake_cuda_counters();
    assert_int_equal(egm_fake_cuda_live_objects(), 0);
    assert_int_equal(c.primary_ctx_refs, 0);
    assert_int_equal(count_fds(), fds_at_start);
    assert_int_equal(count_shm_names(), 0);
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

static egm_cu_mem_allocation_prop_t prop_of(int loc_type, int loc_id, int handle_types)
{
    egm_cu_mem_allocation_prop_t p;
    memset(&p, 0, sizeof(p));
    p.type = EGM_CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requested_handle_types = handle_types;
    p.location.type = loc_type;
    p.location.id = loc_id;
    return p;
}

static egm_cu_mem_access_desc_t access_for(int device)
{
    egm_cu_mem_access_desc_t a = {{EGM_CU_MEM_LOCATION_TYPE_DEVICE, device},
                                  EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    return a;
}

/* Reserve + map + grant access to `device`: the consumer side of a mapping. */
static egm_cu_deviceptr_t map_handle(egm_cu_mem_handle_t h, size_t size, int device)
{
    egm_cu_deviceptr_t va = 0;
    egm_cu_mem_access_desc_t a = access_for(device);
    assert_int_equal(cu->cuMemAddressReserve(&va, size, 0, 0, 0), EGM_CU_SUCCESS);
    assert_int_equal(va % GRAN, 0);
    assert_int_equal(cu->cuMemMap(va, size, 0, h, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemSetAccess(va, size, &a, 1), EGM_CU_SUCCESS);
    return va;
}

static void unmap_free(egm_cu_deviceptr_t va, size_t size)
{
    assert_int_equal(cu->cuMemUnmap(va, size), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemAddressFree(va, size), EGM_CU_SUCCESS);
}

static void use_device(int device)
{
    egm_cu_context_t ctx = NULL;
    assert_int_equal(cu->cuDevicePrimaryCtxRetain(&ctx, device), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuCtxSetCurrent(ctx), EGM_CU_SUCCESS);
}

static void drop_device(int device)
{
    assert_int_equal(cu->cuCtxSetCurrent(NULL), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuDevicePrimaryCtxRelease(device), EGM_CU_SUCCESS);
}

/* Runs fn in a child with default signal dispositions; returns the wait status. */
static int in_child(void (*fn)(void *), void *arg)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = SIG_DFL;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        sigaction(SIGABRT, &sa, NULL);
        fn(arg);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

/* ---- tests ---------------------------------------------------------------- */

/* Runs first: cuInit is required, then device queries answer the H200 shape. */
static void test_init_devices_and_errors(void **state)
{
    (void)state;
    int n = -1, v = 0;
    const char *s = NULL;
    char name[64];
    assert_int_equal(cu->cuDriverGetVersion(&v), EGM_CU_SUCCESS);
    assert_int_equal(v, 13000);
    assert_int_equal(cu->cuDeviceGetCount(&n), EGM_CU_SUCCESS);
    assert_int_equal(n, 2);
    egm_fake_cuda_reset(4, 2);
    assert_int_equal(cu->cuDeviceGetCount(&n), EGM_CU_SUCCESS);
    assert_int_equal(n, 4);
    egm_cu_device_t dev = -1;
    assert_int_equal(cu->cuDeviceGet(&dev, 3), EGM_CU_SUCCESS);
    assert_int_equal(dev, 3);
    assert_int_equal(cu->cuDeviceGet(&dev, 4), EGM_CU_ERROR_INVALID_DEVICE);
    assert_int_equal(cu->cuDeviceGetAttribute(&v, EGM_CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 3),
                     EGM_CU_SUCCESS);
    assert_int_equal(v, 1);
    assert_int_equal(cu->cuDeviceGetAttribute(&v, EGM_CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 2),
                     EGM_CU_SUCCESS);
    assert_int_equal(v, 0);
    const int ones[] = {EGM_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                        EGM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                        EGM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED,
                        EGM_CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED};
    for (size_t i = 0; i < sizeof(ones) / sizeof(ones[0]); i++) {
        v = 0;
        assert_int_equal(cu->cuDeviceGetAttribute(&v, ones[i], 0), EGM_CU_SUCCESS);
        assert_int_equal(v, 1);
    }
    assert_int_equal(
        cu->cuDeviceGetAttribute(&v, EGM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 1),
        EGM_CU_SUCCESS);
    assert_int_equal(v, 9);
    assert_int_equal(
        cu->cuDeviceGetAttribute(&v, EGM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 1),
        EGM_CU_SUCCESS);
    assert_int_equal(v, 0);
    assert_int_equal(cu->cuDeviceGetAttribute(
                         &v, EGM_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 4),
                     EGM_CU_ERROR_INVALID_DEVICE);
    egm_fake_cuda_set_attribute(1, EGM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0);
    assert_int_equal(
        cu->cuDeviceGetAttribute(&v, EGM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 1),
        EGM_CU_SUCCESS);
    assert_int_equal(v, 0);
    assert_int_equal(
        cu->cuDeviceGetAttribute(&v, EGM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0),
        EGM_CU_SUCCESS);
    assert_int_equal(v, 1);
    assert_int_equal(cu->cuDeviceGetName(name, sizeof(name), 1), EGM_CU_SUCCESS);
    assert_non_null(strstr(name, "H200"));

    assert_int_equal(cu->cuGetErrorName(EGM_CU_ERROR_NOT_PERMITTED, &s), EGM_CU_SUCCESS);
    assert_string_equal(s, "CUDA_ERROR_NOT_PERMITTED");
    assert_int_equal(cu->cuGetErrorName(EGM_CU_ERROR_INVALID_VALUE, &s), EGM_CU_SUCCESS);
    assert_string_equal(s, "CUDA_ERROR_INVALID_VALUE");
    assert_int_equal(cu->cuGetErrorString(EGM_CU_ERROR_OUT_OF_MEMORY, &s), EGM_CU_SUCCESS);
    assert_string_equal(s, "out of memory");
    assert_int_equal(cu->cuGetErrorName(12345, &s), EGM_CU_ERROR_INVALID_VALUE);
    assert_null(s);

    egm_fake_cuda_reset(0, 1);
    assert_int_equal(cu->cuInit(0), EGM_CU_ERROR_NO_DEVICE);
    assert_int_equal(cu->cuDeviceGetCount(&n), EGM_CU_SUCCESS);
    assert_int_equal(n, 0);
}

static void test_vmm_round_trip(void **state)
{
    (void)state;
    size_t gran = 0;
    egm_cu_mem_allocation_prop_t p = prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0,
                                             EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    assert_int_equal(
        cu->cuMemGetAllocationGranularity(&gran, &p, EGM_CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        EGM_CU_SUCCESS);
    assert_int_equal(gran, GRAN);

    egm_cu_mem_handle_t h = 0;
    assert_int_equal(cu->cuMemCreate(&h, 3 * MIB, &p, 0), EGM_CU_ERROR_INVALID_VALUE);
    egm_cu_mem_allocation_prop_t bad = prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 1, 0);
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &bad, 0), EGM_CU_ERROR_INVALID_VALUE);
    bad = prop_of(EGM_CU_MEM_LOCATION_TYPE_DEVICE, 2, 0);
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &bad, 0), EGM_CU_ERROR_INVALID_DEVICE);
    assert_int_equal(egm_fake_cuda_live_objects(), 0);

    assert_int_equal(cu->cuMemCreate(&h, 2 * GRAN, &p, 0), EGM_CU_SUCCESS);
    egm_fake_cuda_counters_t c = egm_fake_cuda_counters();
    assert_int_equal(c.allocations, 1);
    assert_int_equal(c.memory_objects, 1);

    egm_cu_deviceptr_t va = 0;
    assert_int_equal(cu->cuMemAddressReserve(&va, 4 * GRAN, 0, 0, 0), EGM_CU_SUCCESS);
    assert_int_equal(va % GRAN, 0);
    /* outside the reservation, unaligned, too big: refused */
    assert_int_equal(cu->cuMemMap(va + 3 * GRAN, 2 * GRAN, 0, h, 0), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemMap(va + 4096, 2 * GRAN, 0, h, 0), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemMap(va, 4 * GRAN, 0, h, 0), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemMap(va, 2 * GRAN, 0, h + 1, 0), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemMap(va, 2 * GRAN, 0, h, 0), EGM_CU_SUCCESS);
    /* the same handle twice in one reservation, not overlapping */
    assert_int_equal(cu->cuMemMap(va + GRAN, 2 * GRAN, 0, h, 0), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemMap(va + 2 * GRAN, 2 * GRAN, 0, h, 0), EGM_CU_SUCCESS);
    c = egm_fake_cuda_counters();
    assert_int_equal(c.reservations, 1);
    assert_int_equal(c.mappings, 2);

    egm_cu_mem_access_desc_t a = access_for(0);
    /* set access must cover whole mappings */
    assert_int_equal(cu->cuMemSetAccess(va, GRAN, &a, 1), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemSetAccess(va, 4 * GRAN, &a, 1), EGM_CU_SUCCESS);
    /* volatile: two addresses of one byte, which the compiler cannot know */
    volatile unsigned char *cpu = (volatile unsigned char *)(uintptr_t)va;
    cpu[0] = 0x11;
    cpu[2 * GRAN - 1] = 0x22;
    /* both mappings show the same memory */
    assert_int_equal(cpu[2 * GRAN], 0x11);
    assert_int_equal(cpu[4 * GRAN - 1], 0x22);

    /* the allocation lives on after release while mapped */
    assert_int_equal(cu->cuMemRelease(h), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemRelease(h), EGM_CU_ERROR_INVALID_VALUE);
    c = egm_fake_cuda_counters();
    assert_int_equal(c.allocations, 0);
    assert_int_equal(c.memory_objects, 1);
    assert_int_equal(cpu[0], 0x11);

    /* partial or unknown ranges cannot be unmapped; a mapped reservation cannot be freed */
    assert_int_equal(cu->cuMemUnmap(va, GRAN), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemUnmap(va + 8 * GRAN, 2 * GRAN), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemAddressFree(va, 4 * GRAN), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemUnmap(va, 4 * GRAN), EGM_CU_SUCCESS); /* both at once */
    assert_int_equal(cu->cuMemAddressFree(va, 2 * GRAN), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemAddressFree(va, 4 * GRAN), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemAddressFree(va, 4 * GRAN), EGM_CU_ERROR_INVALID_VALUE);
    c = egm_fake_cuda_counters();
    assert_int_equal(c.mappings, 0);
    assert_int_equal(c.memory_objects, 0);

    /* device-located allocations and custom alignment */
    egm_cu_mem_allocation_prop_t dp = prop_of(EGM_CU_MEM_LOCATION_TYPE_DEVICE, 1, 0);
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &dp, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemAddressReserve(&va, GRAN, 8 * GRAN, 0, 0), EGM_CU_SUCCESS);
    assert_int_equal(va % (8 * GRAN), 0);
    assert_int_equal(cu->cuMemMap(va, GRAN, 0, h, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemRelease(h), EGM_CU_SUCCESS);
    unmap_free(va, GRAN);
}

static void touch(void *arg)
{
    volatile unsigned char *p = arg;
    p[0] = 1;
}

static void test_access_before_set_access_faults(void **state)
{
    (void)state;
    egm_cu_mem_allocation_prop_t p = prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0);
    egm_cu_mem_handle_t h = 0;
    egm_cu_deviceptr_t va = 0;
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &p, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemAddressReserve(&va, GRAN, 0, 0, 0), EGM_CU_SUCCESS);
    /* reserved, not mapped */
    int st = in_child(touch, (void *)(uintptr_t)va);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGSEGV);
    /* mapped, no access yet */
    assert_int_equal(cu->cuMemMap(va, GRAN, 0, h, 0), EGM_CU_SUCCESS);
    st = in_child(touch, (void *)(uintptr_t)va);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGSEGV);
    /* granted: the same access succeeds */
    egm_cu_mem_access_desc_t a = access_for(1);
    assert_int_equal(cu->cuMemSetAccess(va, GRAN, &a, 1), EGM_CU_SUCCESS);
    st = in_child(touch, (void *)(uintptr_t)va);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* unmapped again: faults again */
    assert_int_equal(cu->cuMemUnmap(va, GRAN), EGM_CU_SUCCESS);
    st = in_child(touch, (void *)(uintptr_t)va);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGSEGV);
    assert_int_equal(cu->cuMemAddressFree(va, GRAN), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemRelease(h), EGM_CU_SUCCESS);
}

static void test_posix_fd_export_import(void **state)
{
    (void)state;
    egm_cu_mem_allocation_prop_t p = prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0,
                                             EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    egm_cu_mem_handle_t h = 0, imp = 0;
    int fd = -1;
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &p, 0), EGM_CU_SUCCESS);
    egm_cu_deviceptr_t va = map_handle(h, GRAN, 0);
    memset((void *)(uintptr_t)va, 0x5a, 4096);

    egm_cu_fabric_handle_t fh;
    assert_int_equal(cu->cuMemExportToShareableHandle(&fh, h, EGM_CU_MEM_HANDLE_TYPE_FABRIC, 0),
                     EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(
        cu->cuMemExportToShareableHandle(&fd, h, EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        EGM_CU_SUCCESS);
    assert_true(fd >= 0);
    assert_int_equal(cu->cuMemImportFromShareableHandle(
                         &imp, (void *)(intptr_t)fd, EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                     EGM_CU_SUCCESS);
    assert_int_equal(close(fd), 0); /* the caller's fd; the import keeps its own */
    egm_fake_cuda_counters_t c = egm_fake_cuda_counters();
    assert_int_equal(c.allocations, 1);
    assert_int_equal(c.imports, 1);
    assert_int_equal(c.memory_objects, 1);

    egm_cu_deviceptr_t va2 = map_handle(imp, GRAN, 1);
    assert_int_not_equal(va, va2);
    volatile unsigned char *a = (volatile unsigned char *)(uintptr_t)va;
    volatile unsigned char *b = (volatile unsigned char *)(uintptr_t)va2;
    assert_int_equal(b[4095], 0x5a);
    b[100] = 0x77;
    assert_int_equal(a[100], 0x77);

    /* foreign fds are refused */
    int other = memfd_create("not-cuda", MFD_CLOEXEC);
    assert_true(other >= 0);
    assert_int_equal(ftruncate(other, GRAN), 0);
    assert_int_equal(
        cu->cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)other,
                                           EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemImportFromShareableHandle(
                         &imp, (void *)(intptr_t)-1, EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                     EGM_CU_ERROR_INVALID_VALUE);
    close(other);

    unmap_free(va2, GRAN);
    unmap_free(va, GRAN);
    assert_int_equal(cu->cuMemRelease(imp), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemRelease(h), EGM_CU_SUCCESS);
}

/* Forked child: a process of its own that knows only the 64-byte handle. */
static void fabric_child(void *arg)
{
    const egm_cu_fabric_handle_t *fh = arg;
    egm_cu_mem_handle_t h = 0;
    egm_cu_deviceptr_t va = 0;
    egm_cu_mem_access_desc_t a = {{EGM_CU_MEM_LOCATION_TYPE_DEVICE, 1},
                                  EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    egm_fake_cuda_reset(2, 1); /* forget the parent's records */
    if (cu->cuMemImportFromShareableHandle(&h, (void *)fh, EGM_CU_MEM_HANDLE_TYPE_FABRIC) != 0)
        _exit(10);
    if (cu->cuMemAddressReserve(&va, GRAN, 0, 0, 0) != 0 || cu->cuMemMap(va, GRAN, 0, h, 0) != 0 ||
        cu->cuMemSetAccess(va, GRAN, &a, 1) != 0)
        _exit(11);
    unsigned char *p = (unsigned char *)(uintptr_t)va;
    for (size_t i = 0; i < GRAN; i += 4096)
        if (p[i] != 0xab)
            _exit(12);
    memset(p, 0xcd, GRAN);
    if (cu->cuMemUnmap(va, GRAN) != 0 || cu->cuMemAddressFree(va, GRAN) != 0 ||
        cu->cuMemRelease(h) != 0 || egm_fake_cuda_live_objects() != 0)
        _exit(13);
    _exit(0);
}

static void test_fabric_across_processes(void **state)
{
    (void)state;
    egm_cu_mem_allocation_prop_t p =
        prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0,
                EGM_CU_MEM_HANDLE_TYPE_FABRIC | EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    egm_cu_mem_handle_t h = 0, same = 0;
    egm_cu_fabric_handle_t fh;
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &p, 0), EGM_CU_SUCCESS);
    assert_int_equal(count_shm_names(), 1);
    egm_cu_deviceptr_t va = map_handle(h, GRAN, 0);
    memset((void *)(uintptr_t)va, 0xab, GRAN);
    assert_int_equal(cu->cuMemExportToShareableHandle(&fh, h, EGM_CU_MEM_HANDLE_TYPE_FABRIC, 0),
                     EGM_CU_SUCCESS);

    int st = in_child(fabric_child, &fh);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    unsigned char *cpu = (unsigned char *)(uintptr_t)va;
    assert_int_equal(cpu[0], 0xcd);
    assert_int_equal(cpu[GRAN - 1], 0xcd);
    assert_int_equal(count_shm_names(), 1); /* the child did not unlink our name */

    /* an import in the exporting process shares the same memory object */
    assert_int_equal(cu->cuMemImportFromShareableHandle(&same, &fh, EGM_CU_MEM_HANDLE_TYPE_FABRIC),
                     EGM_CU_SUCCESS);
    assert_int_equal(egm_fake_cuda_counters().memory_objects, 1);
    assert_int_equal(cu->cuMemRelease(same), EGM_CU_SUCCESS);

    /* a corrupted handle is refused */
    egm_cu_fabric_handle_t bad = fh;
    bad.data[50] ^= 0xff;
    assert_int_equal(cu->cuMemImportFromShareableHandle(&same, &bad, EGM_CU_MEM_HANDLE_TYPE_FABRIC),
                     EGM_CU_ERROR_INVALID_VALUE);

    assert_int_equal(cu->cuMemRelease(h), EGM_CU_SUCCESS);
    assert_int_equal(count_shm_names(), 1); /* still mapped */
    unmap_free(va, GRAN);
    assert_int_equal(count_shm_names(), 0);
    /* once freed, the handle imports nothing */
    assert_int_equal(cu->cuMemImportFromShareableHandle(&same, &fh, EGM_CU_MEM_HANDLE_TYPE_FABRIC),
                     EGM_CU_ERROR_INVALID_VALUE);
}

static void test_fabric_not_permitted(void **state)
{
    (void)state;
    egm_cu_mem_allocation_prop_t fab =
        prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, EGM_CU_MEM_HANDLE_TYPE_FABRIC);
    egm_cu_mem_allocation_prop_t fd = prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0,
                                              EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    egm_cu_mem_handle_t h = 0;
    int v = -1;

    egm_fake_cuda_set_fabric(1, 0); /* the H200 without IMEX */
    assert_int_equal(
        cu->cuDeviceGetAttribute(&v, EGM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0),
        EGM_CU_SUCCESS);
    assert_int_equal(v, 1);
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &fab, 0), EGM_CU_ERROR_NOT_PERMITTED);
    assert_int_equal(egm_fake_cuda_live_objects(), 0);
    assert_int_equal(count_shm_names(), 0);
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &fd, 0), EGM_CU_SUCCESS); /* fallback works */
    assert_int_equal(cu->cuMemRelease(h), EGM_CU_SUCCESS);

    egm_fake_cuda_set_fabric(0, 1);
    assert_int_equal(
        cu->cuDeviceGetAttribute(&v, EGM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0),
        EGM_CU_SUCCESS);
    assert_int_equal(v, 0);
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &fab, 0), EGM_CU_ERROR_NOT_SUPPORTED);

    egm_fake_cuda_reset(2, 1); /* defaults again */
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &fab, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemRelease(h), EGM_CU_SUCCESS);
}

static void bad_function_name(void *arg)
{
    (void)arg;
    egm_fake_cuda_fail("cuMemCreat", 1, EGM_CU_ERROR_OUT_OF_MEMORY);
}

static void test_failure_injection(void **state)
{
    (void)state;
    egm_cu_mem_allocation_prop_t p = prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0);
    egm_cu_mem_handle_t h[4] = {0};
    egm_fake_cuda_clear_calls();
    egm_fake_cuda_fail("cuMemCreate", 2, EGM_CU_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cu->cuMemCreate(&h[0], GRAN, &p, 0), EGM_CU_SUCCESS);
    h[1] = 0;
    assert_int_equal(cu->cuMemCreate(&h[1], GRAN, &p, 0), EGM_CU_ERROR_OUT_OF_MEMORY);
    assert_int_equal(h[1], 0); /* no side effects */
    assert_int_equal(egm_fake_cuda_counters().allocations, 1);
    assert_int_equal(cu->cuMemCreate(&h[2], GRAN, &p, 0), EGM_CU_SUCCESS); /* fired once */
    assert_int_equal(egm_fake_cuda_calls("cuMemCreate"), 3);

    /* nth 0: every call, until cleared; other functions unaffected */
    egm_fake_cuda_fail("cuMemRelease", 0, EGM_CU_ERROR_UNKNOWN);
    for (int i = 0; i < 3; i++)
        assert_int_equal(cu->cuMemRelease(h[0]), EGM_CU_ERROR_UNKNOWN);
    assert_int_equal(egm_fake_cuda_counters().allocations, 2);
    egm_fake_cuda_clear_failures();
    assert_int_equal(cu->cuMemRelease(h[0]), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemRelease(h[2]), EGM_CU_SUCCESS);

    /* stacked rules each count every call */
    egm_fake_cuda_fail("cuMemAddressReserve", 1, EGM_CU_ERROR_OUT_OF_MEMORY);
    egm_fake_cuda_fail("cuMemAddressReserve", 2, EGM_CU_ERROR_INVALID_VALUE);
    egm_cu_deviceptr_t va = 0;
    assert_int_equal(cu->cuMemAddressReserve(&va, GRAN, 0, 0, 0), EGM_CU_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cu->cuMemAddressReserve(&va, GRAN, 0, 0, 0), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(egm_fake_cuda_counters().reservations, 0);

    /* the call log names what a path called, in table order */
    const char *names[EGM_FAKE_CUDA_N_FUNCTIONS];
    size_t n = egm_fake_cuda_called(names, EGM_FAKE_CUDA_N_FUNCTIONS);
    assert_int_equal(n, 3);
    assert_string_equal(names[0], "cuMemCreate");
    assert_string_equal(names[1], "cuMemRelease");
    assert_string_equal(names[2], "cuMemAddressReserve");
    assert_int_equal(egm_fake_cuda_counters().calls_total, 3 + 5 + 2);
    egm_fake_cuda_clear_calls();
    assert_int_equal(egm_fake_cuda_called(NULL, 0), 0);
    assert_string_equal(egm_fake_cuda_function_name(0), "cuInit");
    assert_null(egm_fake_cuda_function_name(EGM_FAKE_CUDA_N_FUNCTIONS));

    /* a typo in a function name aborts instead of silently never failing */
    int st = in_child(bad_function_name, NULL);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGABRT);
}

/* A fault sweep as transport tests will write it: every call of a setup path
 * failed in turn, each time leaving nothing behind. */
static egm_cu_result_t setup_path(void)
{
    egm_cu_mem_allocation_prop_t p = prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0);
    egm_cu_mem_access_desc_t a = access_for(0);
    egm_cu_mem_handle_t h = 0;
    egm_cu_deviceptr_t va = 0;
    egm_cu_result_t rc = cu->cuMemCreate(&h, GRAN, &p, 0);
    if (rc)
        return rc;
    rc = cu->cuMemAddressReserve(&va, GRAN, 0, 0, 0);
    if (rc)
        goto err_release;
    rc = cu->cuMemMap(va, GRAN, 0, h, 0);
    if (rc)
        goto err_free;
    rc = cu->cuMemSetAccess(va, GRAN, &a, 1);
    if (rc)
        goto err_unmap;
    rc = cu->cuMemUnmap(va, GRAN); /* teardown of a successful run */
err_unmap:
    if (rc)
        cu->cuMemUnmap(va, GRAN);
err_free:
    cu->cuMemAddressFree(va, GRAN);
err_release:
    cu->cuMemRelease(h);
    return rc;
}

static void test_fault_sweep(void **state)
{
    (void)state;
    const char *names[EGM_FAKE_CUDA_N_FUNCTIONS];
    size_t calls[EGM_FAKE_CUDA_N_FUNCTIONS];
    egm_fake_cuda_clear_calls();
    assert_int_equal(setup_path(), EGM_CU_SUCCESS);
    size_t n = egm_fake_cuda_called(names, EGM_FAKE_CUDA_N_FUNCTIONS);
    assert_int_equal(n, 7);
    for (size_t i = 0; i < n; i++)
        calls[i] = egm_fake_cuda_calls(names[i]);
    size_t failed = 0, leaked = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 1; k <= calls[i]; k++) {
            egm_fake_cuda_reset(2, 1);
            egm_fake_cuda_fail(names[i], (unsigned)k, EGM_CU_ERROR_OUT_OF_MEMORY);
            egm_cu_result_t rc = setup_path();
            if (strcmp(names[i], "cuMemAddressFree") == 0 ||
                strcmp(names[i], "cuMemRelease") == 0) {
                /* the path swallows cleanup failures: the counters show the leak */
                assert_int_equal(rc, EGM_CU_SUCCESS);
                egm_fake_cuda_counters_t c = egm_fake_cuda_counters();
                assert_int_equal(c.reservations + c.allocations, 1);
                leaked++;
            } else {
                assert_int_equal(rc, EGM_CU_ERROR_OUT_OF_MEMORY);
                assert_int_equal(egm_fake_cuda_live_objects(), 0);
                failed++;
            }
        }
    }
    assert_int_equal(failed, 5);
    assert_int_equal(leaked, 2);
    egm_fake_cuda_reset(2, 1);
}

static void test_kernel_emulation(void **state)
{
    (void)state;
    use_device(0);
    egm_cu_module_t mod = NULL;
    egm_cu_function_t fn = NULL;
    static const unsigned char image[16] = {1};
    assert_int_equal(cu->cuModuleLoadData(&mod, NULL), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuModuleLoadData(&mod, image), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuModuleGetFunction(&fn, mod, "other_kernel"), EGM_CU_ERROR_NOT_FOUND);
    assert_int_equal(cu->cuModuleGetFunction(&fn, mod, EGM_KERNEL_COPY_BLOCKS), EGM_CU_SUCCESS);

    /* pool: HOST_NUMA VMM mapped for device 0; destination: HBM of device 0 */
    egm_cu_mem_allocation_prop_t p = prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0);
    egm_cu_mem_handle_t h = 0;
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &p, 0), EGM_CU_SUCCESS);
    egm_cu_deviceptr_t pool = map_handle(h, GRAN, 0);
    unsigned char *pool_cpu = (unsigned char *)(uintptr_t)pool;
    for (size_t i = 0; i < GRAN; i++)
        pool_cpu[i] = (unsigned char)(i * 7 + 3);
    egm_cu_deviceptr_t hbm = 0, dev_descs = 0;
    assert_int_equal(cu->cuMemAlloc(&hbm, 64 * 1024), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemsetD8(hbm, 0, 64 * 1024), EGM_CU_SUCCESS);

    /* gather 8 scattered 4 KiB blocks (odd offsets) into hbm */
    egm_copy_desc_t descs[8];
    for (int i = 0; i < 8; i++) {
        descs[i].src = pool + (uint64_t)(7 - i) * 200 * 1024 + 3;
        descs[i].dst = hbm + (uint64_t)i * 4096;
        descs[i].len = 4096;
    }
    assert_int_equal(cu->cuMemAlloc(&dev_descs, sizeof(descs)), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemcpy(dev_descs, (uintptr_t)descs, sizeof(descs)), EGM_CU_SUCCESS);
    const egm_copy_desc_t *descs_arg = (const egm_copy_desc_t *)(uintptr_t)dev_descs;
    uint32_t count = 8;
    void *params[2] = {&descs_arg, &count};
    assert_int_equal(cu->cuLaunchKernel(fn, 8, 1, 1, 256, 1, 1, 0, NULL, params, NULL),
                     EGM_CU_SUCCESS);
    const unsigned char *out = egm_fake_cuda_host_view(hbm, 64 * 1024);
    assert_non_null(out);
    for (int i = 0; i < 8; i++)
        assert_memory_equal(out + i * 4096, pool_cpu + (7 - i) * 200 * 1024 + 3, 4096);
    egm_fake_cuda_counters_t c = egm_fake_cuda_counters();
    assert_int_equal(c.kernel_launches, 1);

    /* scatter back through a pinned host descriptor array */
    void *pinned = NULL;
    assert_int_equal(cu->cuMemAllocHost(&pinned, 4096), EGM_CU_SUCCESS);
    egm_copy_desc_t *pd = pinned;
    pd[0] = (egm_copy_desc_t){pool + GRAN - 4096, hbm, 4096};
    descs_arg = pd;
    count = 1;
    assert_int_equal(cu->cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, NULL, params, NULL),
                     EGM_CU_SUCCESS);
    assert_memory_equal(pool_cpu + GRAN - 4096, out, 4096);

    /* descriptors in pageable memory are out of a kernel's reach */
    descs_arg = descs;
    count = 8;
    assert_int_equal(cu->cuLaunchKernel(fn, 8, 1, 1, 256, 1, 1, 0, NULL, params, NULL),
                     EGM_FAKE_CU_ERROR_ILLEGAL_ADDRESS);
    /* so is a pageable source */
    static unsigned char pageable[4096];
    pd[0] = (egm_copy_desc_t){hbm, (uintptr_t)pageable, sizeof(pageable)};
    descs_arg = pd;
    count = 1;
    assert_int_equal(cu->cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, NULL, params, NULL),
                     EGM_FAKE_CU_ERROR_ILLEGAL_ADDRESS);
    /* bad launch shapes */
    assert_int_equal(cu->cuLaunchKernel(fn, 0, 1, 1, 128, 1, 1, 0, NULL, params, NULL),
                     EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuLaunchKernel(fn, 1, 1, 1, 2048, 1, 1, 0, NULL, params, NULL),
                     EGM_CU_ERROR_INVALID_VALUE);

    /* device 1: its own module needed; the pool is not granted to it */
    use_device(1);
    egm_cu_stream_t s1 = NULL;
    assert_int_equal(cu->cuStreamCreateWithPriority(&s1, EGM_CU_STREAM_NON_BLOCKING, 0),
                     EGM_CU_SUCCESS);
    pd[0] = (egm_copy_desc_t){(uintptr_t)pinned + 2048, pool, 64};
    assert_int_equal(cu->cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, s1, params, NULL),
                     EGM_CU_ERROR_INVALID_HANDLE);
    egm_cu_module_t mod1 = NULL;
    egm_cu_function_t fn1 = NULL;
    assert_int_equal(cu->cuModuleLoadData(&mod1, image), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuModuleGetFunction(&fn1, mod1, EGM_KERNEL_COPY_BLOCKS), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuLaunchKernel(fn1, 1, 1, 1, 128, 1, 1, 0, s1, params, NULL),
                     EGM_FAKE_CU_ERROR_ILLEGAL_ADDRESS);
    /* device 0's HBM is out of reach of device 1's kernels (no peer access) */
    pd[0] = (egm_copy_desc_t){(uintptr_t)pinned + 2048, hbm, 64};
    assert_int_equal(cu->cuLaunchKernel(fn1, 1, 1, 1, 128, 1, 1, 0, s1, params, NULL),
                     EGM_FAKE_CU_ERROR_ILLEGAL_ADDRESS);
    egm_cu_mem_access_desc_t a1 = access_for(1);
    assert_int_equal(cu->cuMemSetAccess(pool, GRAN, &a1, 1), EGM_CU_SUCCESS);
    pd[0] = (egm_copy_desc_t){(uintptr_t)pinned + 2048, pool, 64};
    assert_int_equal(cu->cuLaunchKernel(fn1, 1, 1, 1, 128, 1, 1, 0, s1, params, NULL),
                     EGM_CU_SUCCESS);
    assert_memory_equal((unsigned char *)pinned + 2048, pool_cpu, 64);
    assert_int_equal(cu->cuStreamSynchronize(s1), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuStreamDestroy(s1), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuModuleUnload(mod1), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuLaunchKernel(fn1, 1, 1, 1, 128, 1, 1, 0, NULL, params, NULL),
                     EGM_CU_ERROR_INVALID_HANDLE);
    drop_device(1);

    use_device(0);
    assert_int_equal(cu->cuMemFreeHost(pinned), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemFree(dev_descs), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemFree(hbm), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemFree(hbm), EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuModuleUnload(mod), EGM_CU_SUCCESS);
    unmap_free(pool, GRAN);
    assert_int_equal(cu->cuMemRelease(h), EGM_CU_SUCCESS);
    drop_device(0);
    drop_device(0);
}

static void test_pointer_attributes(void **state)
{
    (void)state;
    use_device(1);
    unsigned type = 0;
    int ordinal = -1;
    egm_cu_deviceptr_t start = 0;
    size_t size = 0;
    egm_cu_deviceptr_t hbm = 0;
    assert_int_equal(cu->cuMemAlloc(&hbm, 10000), EGM_CU_SUCCESS);
    assert_int_equal(
        cu->cuPointerGetAttribute(&type, EGM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, hbm + 5000),
        EGM_CU_SUCCESS);
    assert_int_equal(type, EGM_CU_MEMORYTYPE_DEVICE);
    assert_int_equal(
        cu->cuPointerGetAttribute(&ordinal, EGM_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, hbm + 5000),
        EGM_CU_SUCCESS);
    assert_int_equal(ordinal, 1);
    assert_int_equal(
        cu->cuPointerGetAttribute(&start, EGM_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, hbm + 5000),
        EGM_CU_SUCCESS);
    assert_int_equal(start, hbm);
    assert_int_equal(
        cu->cuPointerGetAttribute(&size, EGM_CU_POINTER_ATTRIBUTE_RANGE_SIZE, hbm + 9999),
        EGM_CU_SUCCESS);
    assert_int_equal(size, 10000);
    assert_int_equal(
        cu->cuPointerGetAttribute(&size, EGM_CU_POINTER_ATTRIBUTE_RANGE_SIZE, hbm + 10000),
        EGM_CU_ERROR_INVALID_VALUE);

    void *pinned = NULL;
    assert_int_equal(cu->cuMemAllocHost(&pinned, 4096), EGM_CU_SUCCESS);
    assert_int_equal(
        cu->cuPointerGetAttribute(&type, EGM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (uintptr_t)pinned),
        EGM_CU_SUCCESS);
    assert_int_equal(type, EGM_CU_MEMORYTYPE_HOST);

    /* plain malloc memory is unknown to the driver, until registered */
    char *plain = malloc(8192);
    assert_non_null(plain);
    assert_int_equal(
        cu->cuPointerGetAttribute(&type, EGM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (uintptr_t)plain),
        EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemHostRegister(plain, 8192, EGM_CU_MEMHOSTREGISTER_PORTABLE),
                     EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemHostRegister(plain + 100, 10, 0),
                     EGM_FAKE_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    assert_int_equal(cu->cuPointerGetAttribute(&type, EGM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                               (uintptr_t)plain + 8191),
                     EGM_CU_SUCCESS);
    assert_int_equal(type, EGM_CU_MEMORYTYPE_HOST);
    assert_int_equal(cu->cuMemHostUnregister(plain + 1),
                     EGM_FAKE_CU_ERROR_HOST_MEMORY_NOT_REGISTERED);
    assert_int_equal(cu->cuMemHostUnregister(plain), EGM_CU_SUCCESS);
    free(plain);

    /* VMM: mapped ranges are device memory; reserved holes are unknown */
    egm_cu_mem_allocation_prop_t p = prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0);
    egm_cu_mem_handle_t h = 0;
    egm_cu_deviceptr_t va = 0;
    egm_cu_mem_access_desc_t a = access_for(1);
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &p, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemMap(va + GRAN, GRAN, 0, h, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemSetAccess(va + GRAN, GRAN, &a, 1), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuPointerGetAttribute(&type, EGM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va),
                     EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(
        cu->cuPointerGetAttribute(&type, EGM_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + GRAN + 17),
        EGM_CU_SUCCESS);
    assert_int_equal(type, EGM_CU_MEMORYTYPE_DEVICE);
    assert_int_equal(cu->cuPointerGetAttribute(&ordinal, EGM_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                               va + GRAN + 17),
                     EGM_CU_SUCCESS);
    assert_int_equal(ordinal, 0);
    assert_int_equal(cu->cuPointerGetAttribute(&start, EGM_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                               va + GRAN + 17),
                     EGM_CU_SUCCESS);
    assert_int_equal(start, va + GRAN);
    assert_int_equal(cu->cuMemUnmap(va + GRAN, GRAN), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemAddressFree(va, 2 * GRAN), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemRelease(h), EGM_CU_SUCCESS);

    assert_int_equal(cu->cuMemFreeHost(pinned), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemFree(hbm), EGM_CU_SUCCESS);
    drop_device(1);
}

static void test_contexts_streams_events_copies(void **state)
{
    (void)state;
    egm_cu_context_t ctx = NULL;
    egm_cu_stream_t s = NULL;
    egm_cu_event_t e0 = NULL, e1 = NULL, nt = NULL;
    egm_cu_deviceptr_t hbm = 0;
    /* without a current context */
    assert_int_equal(cu->cuCtxGetCurrent(&ctx), EGM_CU_SUCCESS);
    assert_null(ctx);
    assert_int_equal(cu->cuStreamCreateWithPriority(&s, 0, 0), EGM_FAKE_CU_ERROR_INVALID_CONTEXT);
    assert_int_equal(cu->cuMemAlloc(&hbm, 4096), EGM_FAKE_CU_ERROR_INVALID_CONTEXT);
    assert_int_equal(cu->cuDevicePrimaryCtxRelease(0), EGM_FAKE_CU_ERROR_INVALID_CONTEXT);

    use_device(0);
    assert_int_equal(cu->cuCtxGetCurrent(&ctx), EGM_CU_SUCCESS);
    assert_non_null(ctx);
    int least = 1, greatest = 1;
    assert_int_equal(cu->cuCtxGetStreamPriorityRange(&least, &greatest), EGM_CU_SUCCESS);
    assert_true(greatest < least);
    assert_int_equal(cu->cuStreamCreateWithPriority(&s, EGM_CU_STREAM_NON_BLOCKING, least),
                     EGM_CU_SUCCESS);
    assert_int_equal(cu->cuEventCreate(&e0, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuEventCreate(&e1, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuEventCreate(&nt, EGM_CU_EVENT_DISABLE_TIMING), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemAlloc(&hbm, 3 * 4096), EGM_CU_SUCCESS);
    egm_fake_cuda_counters_t c = egm_fake_cuda_counters();
    assert_int_equal(c.streams, 1);
    assert_int_equal(c.events, 3);
    assert_int_equal(c.device_allocations, 1);

    unsigned char src[4096], dst[4096];
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (unsigned char)i;
    assert_int_equal(cu->cuEventRecord(e0, s), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemcpyAsync(hbm, (uintptr_t)src, sizeof(src), s), EGM_CU_SUCCESS);
    /* batch: hbm[0] -> hbm[1], hbm[1] -> dst (in order) */
    egm_cu_deviceptr_t dsts[2] = {hbm + 4096, (uintptr_t)dst};
    egm_cu_deviceptr_t srcs[2] = {hbm, hbm + 4096};
    size_t sizes[2] = {4096, 4096};
    egm_cu_memcpy_attributes_t attr;
    memset(&attr, 0, sizeof(attr));
    attr.src_access_order = EGM_CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t idx = 0;
    assert_int_equal(cu->cuMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, NULL),
                     EGM_CU_ERROR_INVALID_VALUE); /* no batches on the legacy stream */
    assert_int_equal(cu->cuMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, s),
                     EGM_CU_SUCCESS);
    assert_memory_equal(dst, src, sizeof(src));
    assert_int_equal(cu->cuEventRecord(e1, s), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuEventQuery(e1), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuEventSynchronize(e1), EGM_CU_SUCCESS);
    float ms = -1;
    assert_int_equal(cu->cuEventElapsedTime(&ms, e0, e1), EGM_CU_SUCCESS);
    assert_true(ms > 0);
    assert_int_equal(cu->cuEventRecord(nt, s), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuEventElapsedTime(&ms, e0, nt), EGM_CU_ERROR_INVALID_HANDLE);
    assert_int_equal(cu->cuStreamSynchronize(s), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuCtxSynchronize(), EGM_CU_SUCCESS);

    /* copies into VMM memory need access granted to the copying device */
    egm_cu_mem_allocation_prop_t p = prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0);
    egm_cu_mem_handle_t h = 0;
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &p, 0), EGM_CU_SUCCESS);
    egm_cu_deviceptr_t va = map_handle(h, GRAN, 1);
    assert_int_equal(cu->cuMemcpy(va, (uintptr_t)src, 64), EGM_CU_ERROR_INVALID_VALUE);
    egm_cu_mem_access_desc_t a0 = access_for(0);
    assert_int_equal(cu->cuMemSetAccess(va, GRAN, &a0, 1), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemcpy(va + GRAN - 64, (uintptr_t)src, 64), EGM_CU_SUCCESS);
    assert_memory_equal((void *)(uintptr_t)(va + GRAN - 64), src, 64);
    /* running off the end of the mapping into the reserved nothing is refused */
    egm_cu_deviceptr_t va2 = 0;
    assert_int_equal(cu->cuMemAddressReserve(&va2, 2 * GRAN, 0, 0, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemMap(va2, GRAN, 0, h, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemSetAccess(va2, GRAN, &a0, 1), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemcpy(va2 + GRAN - 64, (uintptr_t)src, 128),
                     EGM_CU_ERROR_INVALID_VALUE);
    assert_int_equal(cu->cuMemsetD8(va2, 0xee, 16), EGM_CU_SUCCESS);
    assert_int_equal(((unsigned char *)(uintptr_t)va)[15], 0xee);
    assert_int_equal(cu->cuMemUnmap(va2, 2 * GRAN), EGM_CU_ERROR_INVALID_VALUE); /* a hole */
    assert_int_equal(cu->cuMemUnmap(va2, GRAN), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemAddressFree(va2, 2 * GRAN), EGM_CU_SUCCESS);
    unmap_free(va, GRAN);
    assert_int_equal(cu->cuMemRelease(h), EGM_CU_SUCCESS);

    /* objects of another context do not mix */
    use_device(1);
    egm_cu_event_t e_other = NULL;
    assert_int_equal(cu->cuEventCreate(&e_other, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuEventRecord(e_other, s), EGM_CU_ERROR_INVALID_HANDLE);
    assert_int_equal(cu->cuEventDestroy(e_other), EGM_CU_SUCCESS);
    drop_device(1);

    use_device(0);
    assert_int_equal(cu->cuMemFree(hbm), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuEventDestroy(e0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuEventDestroy(e1), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuEventDestroy(nt), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuEventDestroy(nt), EGM_CU_ERROR_INVALID_HANDLE);
    assert_int_equal(cu->cuStreamDestroy(s), EGM_CU_SUCCESS);
    drop_device(0);
    drop_device(0);
    /* a released primary context can no longer be made current */
    assert_int_equal(cu->cuCtxSetCurrent(ctx), EGM_FAKE_CU_ERROR_INVALID_CONTEXT);
}

static void strict_write(void *arg)
{
    egm_cu_deviceptr_t hbm = *(egm_cu_deviceptr_t *)arg;
    ((volatile unsigned char *)(uintptr_t)hbm)[0] = 1;
}

static void test_strict_device_memory(void **state)
{
    (void)state;
    egm_fake_cuda_set_strict_device_memory(1);
    use_device(0);
    egm_cu_deviceptr_t hbm = 0;
    assert_int_equal(cu->cuMemAlloc(&hbm, 4096), EGM_CU_SUCCESS);
    int st = in_child(strict_write, &hbm);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGSEGV);
    /* the driver and the test's host view still reach it */
    assert_int_equal(cu->cuMemsetD8(hbm, 0x42, 4096), EGM_CU_SUCCESS);
    const unsigned char *view = egm_fake_cuda_host_view(hbm, 4096);
    assert_non_null(view);
    assert_int_equal(view[4095], 0x42);
    assert_null(egm_fake_cuda_host_view(hbm, 8192));
    assert_int_equal(cu->cuMemFree(hbm), EGM_CU_SUCCESS);
    drop_device(0);
}

static void *thread_worker(void *arg)
{
    (void)arg;
    egm_cu_mem_allocation_prop_t p = prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0);
    egm_cu_context_t ctx = (egm_cu_context_t)1;
    if (cu->cuCtxGetCurrent(&ctx) != 0 || ctx != NULL) /* current context is per thread */
        return (void *)1;
    for (int i = 0; i < 50; i++) {
        egm_cu_mem_handle_t h = 0;
        egm_cu_deviceptr_t va = 0;
        if (cu->cuMemCreate(&h, GRAN, &p, 0) || cu->cuMemAddressReserve(&va, GRAN, 0, 0, 0) ||
            cu->cuMemMap(va, GRAN, 0, h, 0) || cu->cuMemUnmap(va, GRAN) ||
            cu->cuMemAddressFree(va, GRAN) || cu->cuMemRelease(h))
            return (void *)2;
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    use_device(0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, thread_worker, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *ret = (void *)-1;
        assert_int_equal(pthread_join(t[i], &ret), 0);
        assert_null(ret);
    }
    assert_int_equal(egm_fake_cuda_calls("cuMemCreate"), 200);
    drop_device(0);
}

static void test_reset_frees_leftovers(void **state)
{
    (void)state;
    egm_cu_mem_allocation_prop_t p =
        prop_of(EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, EGM_CU_MEM_HANDLE_TYPE_FABRIC);
    egm_cu_mem_handle_t h = 0;
    assert_int_equal(cu->cuMemCreate(&h, GRAN, &p, 0), EGM_CU_SUCCESS);
    (void)map_handle(h, GRAN, 0);
    assert_int_equal(count_shm_names(), 1);
    assert_true(egm_fake_cuda_live_objects() > 0);
    egm_fake_cuda_reset(2, 1);
    assert_int_equal(egm_fake_cuda_live_objects(), 0);
    assert_int_equal(count_shm_names(), 0);
}

int main(void)
{
    /* first, in a fresh process: nothing works before cuInit */
    const egm_cuda_api_t *api = egm_fake_cuda_api();
    int n = 0;
    if (api->cuDeviceGetCount(&n) != EGM_CU_ERROR_NOT_INITIALIZED) {
        fprintf(stderr, "cuDeviceGetCount before cuInit did not answer NOT_INITIALIZED\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_init_devices_and_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vmm_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_access_before_set_access_faults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_posix_fd_export_import, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fabric_across_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fabric_not_permitted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_injection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kernel_emulation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pointer_attributes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_contexts_streams_events_copies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_strict_device_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reset_frees_leftovers, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
