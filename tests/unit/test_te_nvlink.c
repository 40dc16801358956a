/* nvlink transport against the fake CUDA driver, in one process: a provider
 * engine exposes VMM chunks (made here with the driver API, as the VMM pool
 * makes them; te tests cannot link the pool layer), a consumer engine with
 * another client id moves random bytes between "GPU" buffers (the fake's
 * cuMemAlloc) and those chunks. posix_fd handles travel over the provider's fd
 * broker socket for real. The registry of zero-copy buffers records each
 * range's device and refuses host ranges with a page not mapped here. Every
 * test ends with no live CUDA object in the fake and no live egmstore
 * allocation. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "cuda/copier.h"
#include "cuda/driver.h"
#include "support/fake_cuda.h"
#include "te/mapping_cache.h"
#include "te/registry.h"
#include "te/te.h"
#include "te/te_int.h"

#define MIB (1ull << 20)
#define GRAN (2ull << 20) /* the fake's default granularity */
#define HOST_NUMA (-1)    /* vchunk location: HOST_NUMA node 0 */

static const egm_cuda_api_t *cu;

/* ---- helpers --------------------------------------------------------------- */

/* CPU view of any memory the fake knows (device memory included). */
static uint8_t *view(uint64_t ptr, size_t len)
{
    void *v = egm_fake_cuda_host_view(ptr, len);
    assert_non_null(v);
    return v;
}

static uint64_t gpu_alloc(int device, size_t len)
{
    egm_cu_deviceptr_t p = 0;
    assert_int_equal(egm__cuda_use_device(device), EGM_OK);
    assert_int_equal(cu->cuMemAlloc(&p, len), EGM_CU_SUCCESS);
    return p;
}

static void gpu_free(uint64_t p)
{
    assert_int_equal(egm__cuda_use_device(0), EGM_OK);
    assert_int_equal(cu->cuMemFree(p), EGM_CU_SUCCESS);
}

/* A VMM chunk as the pool makes one: created, mapped here, access for every
 * GPU (and the host for HOST_NUMA memory). */
typedef struct {
    egm_cu_mem_handle_t handle;
    egm_cu_deviceptr_t va;
    size_t size;
    int device; /* HOST_NUMA or an ordinal */
} vchunk_t;

static void vchunk_create(vchunk_t *c, size_t size, int device, int handle_types)
{
    egm_cu_mem_allocation_prop_t prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = EGM_CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requested_handle_types = handle_types;
    prop.location.type =
        device == HOST_NUMA ? EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA : EGM_CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device == HOST_NUMA ? 0 : device;
    c->size = size;
    c->device = device;
    assert_int_equal(cu->cuMemCreate(&c->handle, size, &prop, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemAddressReserve(&c->va, size, GRAN, 0, 0), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemMap(c->va, size, 0, c->handle, 0), EGM_CU_SUCCESS);
    egm_cu_mem_access_desc_t access[3];
    size_t n = 0;
    for (int d = 0; d < egm__cuda_device_count(); d++)
        access[n++] = (egm_cu_mem_access_desc_t){{EGM_CU_MEM_LOCATION_TYPE_DEVICE, d},
                                                 EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (device == HOST_NUMA)
        access[n++] = (egm_cu_mem_access_desc_t){{EGM_CU_MEM_LOCATION_TYPE_HOST_NUMA, 0},
                                                 EGM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    assert_int_equal(cu->cuMemSetAccess(c->va, size, access, n), EGM_CU_SUCCESS);
}

static void vchunk_destroy(vchunk_t *c)
{
    assert_int_equal(cu->cuMemUnmap(c->va, c->size), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemAddressFree(c->va, c->size), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemRelease(c->handle), EGM_CU_SUCCESS);
    memset(c, 0, sizeof(*c));
}

static egm_te_t *make_te(egm_id_t id, egm_protocol_t protocol, egm_registry_t *registry,
                         int prewarm_off)
{
    egm_te_params_t params = {.client_id = id,
                              .protocol = protocol,
                              .local_hostname = "127.0.0.1",
                              .data_listen_host = "127.0.0.1",
                              .io_timeout_ms = 5000,
                              .registry = registry,
                              .prewarm_off = prewarm_off};
    egm_te_t *te = NULL;
    assert_int_equal(egm__te_create(&params, &te), EGM_OK);
    return te;
}

/* ---- fixture --------------------------------------------------------------- */

#define MAX_CHUNKS 4

typedef struct {
    uint64_t live_at_start;
    int fds_at_start;
    egm_id_t provider_id, consumer_id;
    egm_te_t *provider, *consumer;
    egm_registry_t *registry; /* the consumer's */
    vchunk_t chunks[MAX_CHUNKS];
    egm_segment_desc_t descs[MAX_CHUNKS];
    int exposed[MAX_CHUNKS];
    size_t n;
} fx_t;

static int setup(void **state)
{
    egm_fake_cuda_reset(2, 1);
    fx_t *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    fx->live_at_start = egm__alloc_live_count();
    fx->fds_at_start = egm_test_count_fds();
    fx->provider_id = egm__id_random();
    fx->consumer_id = egm__id_random();
    assert_int_equal(egm__registry_create(&fx->registry), EGM_OK);
    fx->provider = make_te(fx->provider_id, EGM_PROTOCOL_AUTO, NULL, 1);
    fx->consumer = make_te(fx->consumer_id, EGM_PROTOCOL_AUTO, fx->registry, 1);
    *state = fx;
    return 0;
}

static void set_consumer(fx_t *fx, egm_protocol_t protocol, int prewarm_off)
{
    egm__te_destroy(fx->consumer);
    fx->consumer = make_te(fx->consumer_id, protocol, fx->registry, prewarm_off);
}

/* A VMM chunk exposed by the provider; returns its index. */
static size_t expose(fx_t *fx, size_t size, int device, egm_handle_kind_t kind)
{
    assert_true(fx->n < MAX_CHUNKS);
    size_t i = fx->n++;
    vchunk_create(&fx->chunks[i], size, device,
                  kind == EGM_HANDLE_FABRIC ? EGM_CU_MEM_HANDLE_TYPE_FABRIC
                                            : EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    egm_segment_desc_t *d = &fx->descs[i];
    memset(d, 0, sizeof(*d));
    d->id = egm__id_random();
    d->owner = fx->provider_id;
    strcpy(d->name, "test/vmm");
    assert_int_equal(
        egm__te_expose_vmm_segment(fx->provider, d, (void *)(uintptr_t)fx->chunks[i].va, size,
                                   fx->chunks[i].handle, kind, device == HOST_NUMA ? -1 : device),
        EGM_OK);
    fx->exposed[i] = 1;
    return i;
}

static void withdraw_all(fx_t *fx)
{
    for (size_t i = 0; i < fx->n; i++) {
        if (fx->exposed[i])
            assert_int_equal(egm__te_withdraw_segment(fx->provider, fx->descs[i].id), EGM_OK);
        fx->exposed[i] = 0;
        if (fx->chunks[i].size > 0)
            vchunk_destroy(&fx->chunks[i]);
    }
    fx->n = 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    egm__te_destroy(fx->consumer);
    withdraw_all(fx);
    egm__te_destroy(fx->provider);
    egm__registry_destroy(fx->registry);
    egm_fake_cuda_counters_t c = egm_fake_cuda_counters();
    if (egm_fake_cuda_live_objects() != 0)
        fprintf(stderr,
                "live: allocations %llu imports %llu reservations %llu mappings %llu memory %llu "
                "device %llu pinned %llu streams %llu events %llu modules %llu\n",
                (unsigned long long)c.allocations, (unsigned long long)c.imports,
                (unsigned long long)c.reservations, (unsigned long long)c.mappings,
                (unsigned long long)c.memory_objects, (unsigned long long)c.device_allocations,
                (unsigned long long)c.pinned_host, (unsigned long long)c.streams,
                (unsigned long long)c.events, (unsigned long long)c.modules);
    assert_int_equal(egm_fake_cuda_live_objects(), 0);
    assert_int_equal(egm__alloc_live_count(), fx->live_at_start);
    assert_int_equal(egm_test_count_fds(), fx->fds_at_start);
    free(fx);
    return 0;
}

static egm_status_t xfer(egm_te_t *te, const egm_segment_desc_t *desc, uint64_t offset,
                         uint64_t local, size_t len, egm_te_dir_t dir)
{
    egm_te_op_t op = {.segment = desc,
                      .offset = offset,
                      .local = (void *)(uintptr_t)local,
                      .length = len,
                      .dir = dir};
    egm_status_t st = egm__te_transfer(te, &op, 1);
    assert_int_equal(op.status, st);
    return st;
}

static egm_transport_t route_op(egm_te_t *te, const egm_segment_desc_t *desc, uint64_t local,
                                size_t len)
{
    egm_te_op_t op = {.segment = desc, .local = (void *)(uintptr_t)local, .length = len};
    egm_transport_t t;
    assert_int_equal(egm__te_route_op(te, &op, &t), EGM_OK);
    return t;
}

static egm_te_stats_t stats(egm_te_t *te)
{
    egm_te_stats_t s;
    egm__te_stats(te, &s);
    return s;
}

/* Random bytes from GPU buffer `gpu` into the chunk at `offset` through the
 * consumer, checked in the provider's memory; then fresh bytes back into the
 * buffer, checked there. */
static void round_trip(fx_t *fx, size_t chunk, uint64_t offset, uint64_t gpu, size_t len)
{
    uint8_t *remote = view(fx->chunks[chunk].va + offset, len);
    uint8_t *local = view(gpu, len);
    egm_test_fill_random(local, len);
    assert_int_equal(xfer(fx->consumer, &fx->descs[chunk], offset, gpu, len, EGM_TE_WRITE), EGM_OK);
    assert_memory_equal(remote, local, len);
    egm_test_fill_random(remote, len);
    assert_int_equal(xfer(fx->consumer, &fx->descs[chunk], offset, gpu, len, EGM_TE_READ), EGM_OK);
    assert_memory_equal(local, remote, len);
}

/* ---- descriptors and registry ---------------------------------------------- */

static void test_fabric_descriptor_wire(void **state)
{
    (void)state;
    egm_segment_desc_t d, out;
    memset(&d, 0, sizeof(d));
    d.id = egm__id_random();
    d.owner = egm__id_random();
    d.size = 4 * MIB;
    strcpy(d.name, "fabric/0");
    d.handle_kind = EGM_HANDLE_FABRIC;
    egm_test_fill_random(d.fabric_handle, sizeof(d.fabric_handle));
    d.fabric_handle_len = 64;

    Egm__SegmentDesc pb;
    Egm__Id id, owner;
    egm__segment_desc_to_pb(&d, &pb, &id, &owner);
    assert_int_equal(pb.fabric_handle.len, 64);
    assert_int_equal(egm__segment_desc_from_pb(&pb, &out), EGM_OK);
    assert_int_equal(out.handle_kind, EGM_HANDLE_FABRIC);
    assert_int_equal(out.fabric_handle_len, 64);
    assert_memory_equal(out.fabric_handle, d.fabric_handle, 64);

    /* A truncated handle, a missing one, or one on another kind: refused by name. */
    pb.fabric_handle.len = 63;
    assert_int_equal(egm__segment_desc_from_pb(&pb, &out), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "segment.fabric_handle"));
    pb.fabric_handle.len = 0;
    assert_int_equal(egm__segment_desc_from_pb(&pb, &out), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "segment.fabric_handle"));
    pb.fabric_handle.len = 64;
    pb.handle_kind = EGM__HANDLE_KIND__HANDLE_POSIX_FD;
    assert_int_equal(egm__segment_desc_from_pb(&pb, &out), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "segment.fabric_handle"));

    /* Other kinds carry none on the wire. */
    d.handle_kind = EGM_HANDLE_POSIX_FD;
    egm__segment_desc_to_pb(&d, &pb, &id, &owner);
    assert_int_equal(pb.fabric_handle.len, 0);
    assert_int_equal(egm__segment_desc_from_pb(&pb, &out), EGM_OK);
    assert_int_equal(out.fabric_handle_len, 0);
}

static void test_registry_records_device(void **state)
{
    fx_t *fx = *state;
    uint64_t g1 = gpu_alloc(1, 1 * MIB);
    char *host = malloc(4096);
    assert_non_null(host);
    int dev = -2;

    assert_int_equal(egm__registry_add(fx->registry, (void *)(uintptr_t)g1, 1 * MIB), EGM_OK);
    assert_int_equal(egm__registry_add(fx->registry, host, 4096), EGM_OK);
    assert_int_equal(egm__registry_device(fx->registry, (void *)(uintptr_t)(g1 + 100), 200, &dev),
                     EGM_OK);
    assert_int_equal(dev, 1);
    assert_int_equal(egm__registry_device(fx->registry, host + 1, 10, &dev), EGM_OK);
    assert_int_equal(dev, -1);
    /* Past the end of the range: not one registered range. */
    assert_int_equal(egm__registry_device(fx->registry, (void *)(uintptr_t)g1, 1 * MIB + 1, &dev),
                     EGM_ERR_NOT_REGISTERED);

    assert_int_equal(egm__registry_remove(fx->registry, (void *)(uintptr_t)g1), EGM_OK);
    assert_int_equal(egm__registry_remove(fx->registry, host), EGM_OK);
    free(host);
    gpu_free(g1);
}

/* Host memory is registered only when every page of it is mapped here: a
 * range over a hole, an address nothing maps, are refused (a copy there
 * would kill the process), while the pages beside the hole may be. */
static void test_registry_refuses_unmapped(void **state)
{
    fx_t *fx = *state;
    long page = sysconf(_SC_PAGESIZE);
    char *p =
        mmap(NULL, 3 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(munmap(p + page, (size_t)page), 0); /* the middle page */
    assert_int_equal(egm__registry_add(fx->registry, p, 3 * (size_t)page), EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "neither GPU memory nor host memory mapped"));
    /* ending in the hole, starting in it */
    assert_int_equal(egm__registry_add(fx->registry, p + 10, (size_t)page), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__registry_add(fx->registry, p + page + 1, 100), EGM_ERR_INVALID_ARG);
    int dev = 0;
    assert_int_equal(egm__registry_device(fx->registry, p, 1, &dev), EGM_ERR_NOT_REGISTERED);
    /* the pages either side, each whole or in part */
    assert_int_equal(egm__registry_add(fx->registry, p + 1, (size_t)page - 1), EGM_OK);
    assert_int_equal(egm__registry_add(fx->registry, p + 2 * page, (size_t)page), EGM_OK);
    assert_int_equal(egm__registry_remove(fx->registry, p + 1), EGM_OK);
    assert_int_equal(egm__registry_remove(fx->registry, p + 2 * page), EGM_OK);
    /* gone altogether */
    assert_int_equal(munmap(p, 3 * (size_t)page), 0);
    assert_int_equal(egm__registry_add(fx->registry, p + 2 * page, 64), EGM_ERR_INVALID_ARG);
}

/* ---- round trips ----------------------------------------------------------- */

static void test_posix_fd_host_numa_round_trip(void **state)
{
    fx_t *fx = *state;
    size_t c = expose(fx, 4 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    const egm_segment_desc_t *d = &fx->descs[c];
    assert_int_equal(d->handle_kind, EGM_HANDLE_POSIX_FD);
    assert_int_equal(d->size, 4 * MIB);
    assert_true(d->shm_socket[0] == '@');
    assert_true(d->tcp_endpoint[0] != '\0'); /* HOST_NUMA: the CPU serves it too */
    assert_int_equal(d->fabric_handle_len, 0);

    uint64_t g0 = gpu_alloc(0, 2 * MIB), g1 = gpu_alloc(1, 2 * MIB);
    assert_int_equal(egm__registry_add(fx->registry, (void *)(uintptr_t)g0, 2 * MIB), EGM_OK);
    assert_int_equal(egm__registry_add(fx->registry, (void *)(uintptr_t)g1, 2 * MIB), EGM_OK);

    /* GPU buffer -> nvlink; host memory -> tcp (not memfd, so no shm). */
    assert_int_equal(route_op(fx->consumer, d, g0, 4096), EGM_TRANSPORT_NVLINK);
    egm_transport_t t;
    assert_int_equal(egm__te_route(fx->consumer, d, &t), EGM_OK);
    assert_int_equal(t, EGM_TRANSPORT_TCP);

    round_trip(fx, c, 12345, g0, 1 * MIB);
    round_trip(fx, c, 4 * MIB - 2 * MIB, g1, 2 * MIB);
    round_trip(fx, c, 4 * MIB - 1, g1, 1);

    egm_te_stats_t cs = stats(fx->consumer), ps = stats(fx->provider);
    assert_int_equal(cs.nvlink_imports_total, 1); /* imported once, reused by every copy */
    assert_int_equal(cs.nvlink_mappings_live, 1);
    assert_int_equal(cs.mappings_live, 1);
    assert_int_equal(cs.nvlink_copies, 6);
    /* Single objects go through the copy engines. */
    assert_int_equal(cs.copy_engine_copies, 6);
    assert_int_equal(cs.copy_kernel_launches, 0);
    assert_int_equal(cs.bytes_written, 1 * MIB + 2 * MIB + 1);
    assert_int_equal(cs.staged_bytes, 0);
    assert_int_equal(ps.vmm_fds_sent, 1);
    assert_int_equal(ps.tcp_requests_served, 0);
    assert_int_equal(egm_fake_cuda_counters().imports, 1);

    /* Host memory reaches the same HOST_NUMA segment over tcp. */
    uint8_t *host = malloc(100000), *back = malloc(100000);
    assert_non_null(host);
    assert_non_null(back);
    egm_test_fill_random(host, 100000);
    assert_int_equal(xfer(fx->consumer, d, 777, (uint64_t)(uintptr_t)host, 100000, EGM_TE_WRITE),
                     EGM_OK);
    assert_memory_equal(view(fx->chunks[c].va + 777, 100000), host, 100000);
    assert_int_equal(xfer(fx->consumer, d, 777, (uint64_t)(uintptr_t)back, 100000, EGM_TE_READ),
                     EGM_OK);
    assert_memory_equal(back, host, 100000);
    assert_int_equal(stats(fx->provider).tcp_requests_served, 2);
    free(host);
    free(back);

    assert_int_equal(egm__registry_remove(fx->registry, (void *)(uintptr_t)g0), EGM_OK);
    assert_int_equal(egm__registry_remove(fx->registry, (void *)(uintptr_t)g1), EGM_OK);
    gpu_free(g0);
    gpu_free(g1);
}

static void test_fabric_device_round_trip(void **state)
{
    fx_t *fx = *state;
    /* HBM is never CPU-visible: any memcpy of it by the engine would fault. */
    egm_fake_cuda_set_strict_device_memory(1);
    size_t c = expose(fx, 4 * MIB, 1, EGM_HANDLE_FABRIC);
    size_t h = expose(fx, 2 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    const egm_segment_desc_t *d = &fx->descs[c];
    assert_int_equal(d->handle_kind, EGM_HANDLE_FABRIC);
    assert_int_equal(d->fabric_handle_len, 64);
    assert_string_equal(d->tcp_endpoint, ""); /* GPU memory: nvlink only */
    assert_string_equal(d->shm_socket, "");

    /* Unregistered GPU buffer: the engine asks the driver where it lives. */
    uint64_t g0 = gpu_alloc(0, 4 * MIB);
    assert_int_equal(route_op(fx->consumer, d, g0, 4 * MIB), EGM_TRANSPORT_NVLINK);
    round_trip(fx, c, 0, g0, 4 * MIB);
    round_trip(fx, c, 3 * MIB + 5, g0, 1000);
    egm_te_stats_t cs = stats(fx->consumer);
    assert_int_equal(cs.nvlink_imports_total, 1);
    assert_int_equal(stats(fx->provider).vmm_fds_sent, 0); /* fabric needs no broker */

    /* Host memory cannot reach GPU memory of another process. */
    egm_transport_t t;
    assert_int_equal(egm__te_route(fx->consumer, d, &t), EGM_ERR_NOT_SUPPORTED);
    uint8_t buf[64];
    assert_int_equal(xfer(fx->consumer, d, 0, (uint64_t)(uintptr_t)buf, sizeof(buf), EGM_TE_READ),
                     EGM_ERR_NOT_SUPPORTED);
    /* And the data server refuses it by name even when asked directly. */
    egm_tcp_client_t *tcp;
    assert_int_equal(egm__tcp_client_create(2000, NULL, &tcp), EGM_OK);
    assert_int_equal(egm__tcp_client_transfer(tcp, fx->descs[h].tcp_endpoint, d->id, 0, buf,
                                              sizeof(buf), EGM_TE_READ),
                     EGM_ERR_NOT_SUPPORTED);
    egm__tcp_client_destroy(tcp);
    assert_int_equal(stats(fx->provider).tcp_requests_refused, 1);
    gpu_free(g0);
}

/* Many ops on two segments from buffers on two GPUs, in one call: grouped per
 * device into one copier run each; every byte lands where it should. */
static void test_batch_across_devices(void **state)
{
    fx_t *fx = *state;
    enum { N = 96, BLOCK = 4096 };
    size_t a = expose(fx, 2 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    size_t b = expose(fx, 2 * MIB, 0, EGM_HANDLE_FABRIC);
    uint64_t g[2] = {gpu_alloc(0, N * BLOCK), gpu_alloc(1, N * BLOCK)};
    egm_te_op_t ops[N];

    egm_test_fill_random(view(g[0], N * BLOCK), N * BLOCK);
    egm_test_fill_random(view(g[1], N * BLOCK), N * BLOCK);
    for (size_t i = 0; i < N; i++)
        ops[i] = (egm_te_op_t){.segment = &fx->descs[i % 2 ? b : a],
                               .offset = (i / 2) * 2 * BLOCK + 17,
                               .local = (void *)(uintptr_t)(g[(i / 3) % 2] + i * BLOCK),
                               .length = BLOCK,
                               .dir = EGM_TE_WRITE};
    size_t runs_before = egm_fake_cuda_calls("cuEventRecord");
    assert_int_equal(egm__te_transfer(fx->consumer, ops, N), EGM_OK);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(ops[i].status, EGM_OK);
        size_t c = i % 2 ? b : a;
        assert_memory_equal(view(fx->chunks[c].va + ops[i].offset, BLOCK),
                            view((uint64_t)(uintptr_t)ops[i].local, BLOCK), BLOCK);
    }
    /* One copier run per device (each ends with one event), and 48 small
     * blocks per device make a batch for the kernel when it was built. */
    assert_int_equal(egm_fake_cuda_calls("cuEventRecord") - runs_before, 2);
    if (egm__copier_has_kernels())
        assert_int_equal(stats(fx->consumer).copy_kernel_launches, 2);

    /* Read them all back into the other halves of the buffers. */
    for (size_t i = 0; i < N; i++) {
        ops[i].dir = EGM_TE_READ;
        ops[i].local = (void *)(uintptr_t)(g[((i / 3) + 1) % 2] + i * BLOCK);
    }
    assert_int_equal(egm__te_transfer(fx->consumer, ops, N), EGM_OK);
    for (size_t i = 0; i < N; i++) {
        size_t c = i % 2 ? b : a;
        assert_memory_equal(view((uint64_t)(uintptr_t)ops[i].local, BLOCK),
                            view(fx->chunks[c].va + ops[i].offset, BLOCK), BLOCK);
    }
    egm_te_stats_t cs = stats(fx->consumer);
    assert_int_equal(cs.nvlink_imports_total, 2);
    assert_int_equal(cs.nvlink_copies, 2 * N);
    assert_int_equal(cs.bytes_written, N * BLOCK);
    assert_int_equal(cs.bytes_read, N * BLOCK);

    /* One bad op fails alone; the others still move. */
    ops[5].offset = fx->descs[b].size; /* out of bounds */
    assert_int_equal(egm__te_transfer(fx->consumer, ops, N), EGM_ERR_INVALID_ARG);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(ops[i].status, i == 5 ? EGM_ERR_INVALID_ARG : EGM_OK);
    gpu_free(g[0]);
    gpu_free(g[1]);
}

/* ---- identity: a restarted provider is never served from an old mapping ---- */

static void aba(fx_t *fx, egm_handle_kind_t kind)
{
    enum { LEN = 64 * 1024 };
    uint64_t g = gpu_alloc(0, LEN);
    uint8_t a_bytes[LEN], b_bytes[LEN];

    /* Provider A exposes X at address P; the consumer maps and reads it. */
    size_t x = expose(fx, 2 * MIB, HOST_NUMA, kind);
    egm_segment_desc_t X = fx->descs[x];
    uint64_t P = fx->chunks[x].va;
    egm_cu_mem_handle_t x_handle = fx->chunks[x].handle;
    egm_test_fill_random(a_bytes, LEN);
    memcpy(view(P, LEN), a_bytes, LEN);
    assert_int_equal(xfer(fx->consumer, &X, 0, g, LEN, EGM_TE_READ), EGM_OK);
    assert_memory_equal(view(g, LEN), a_bytes, LEN);

    /* A goes away for good: withdrawn, engine destroyed, memory released. */
    withdraw_all(fx);
    egm__te_destroy(fx->provider);
    /* B: a new engine (new broker socket, new id) and a new pool. */
    fx->provider_id = egm__id_random();
    fx->provider = make_te(fx->provider_id, EGM_PROTOCOL_AUTO, NULL, 1);
    size_t y = expose(fx, 2 * MIB, HOST_NUMA, kind);
    egm_segment_desc_t Y = fx->descs[y];
    assert_false(egm__id_equal(X.id, Y.id));
    /* The fake usually hands out the same address again; either way it is
     * another allocation. */
    assert_true(fx->chunks[y].va == P || fx->chunks[y].handle != x_handle);
    egm_test_fill_random(b_bytes, LEN);
    memcpy(view(fx->chunks[y].va, LEN), b_bytes, LEN);

    /* Until it is forgotten, X still reads X's own memory (the import keeps
     * it alive), never Y's. */
    assert_int_equal(xfer(fx->consumer, &X, 0, g, LEN, EGM_TE_READ), EGM_OK);
    assert_memory_equal(view(g, LEN), a_bytes, LEN);

    /* The master retires X: the mapping goes (no copy in flight) ... */
    egm__te_forget_segment(fx->consumer, X.id);
    assert_int_equal(stats(fx->consumer).nvlink_mappings_live, 0);
    assert_int_equal(egm_fake_cuda_counters().imports, 0);

    /* ... Y is imported fresh and reads B's bytes ... */
    assert_int_equal(xfer(fx->consumer, &Y, 0, g, LEN, EGM_TE_READ), EGM_OK);
    assert_memory_equal(view(g, LEN), b_bytes, LEN);
    assert_int_equal(stats(fx->consumer).nvlink_imports_total, 2);

    /* ... and X is gone: an error, never Y's bytes, even with a descriptor
     * pointing at B's broker. */
    memset(view(g, LEN), 0, LEN);
    assert_int_equal(xfer(fx->consumer, &X, 0, g, LEN, EGM_TE_READ), EGM_ERR_SEGMENT_NOT_FOUND);
    assert_non_null(strstr(egm_last_error(), "retired"));
    egm_te_op_t op = {.segment = &X, .local = (void *)(uintptr_t)g, .length = LEN};
    egm_transport_t t;
    assert_int_equal(egm__te_route_op(fx->consumer, &op, &t), EGM_ERR_SEGMENT_NOT_FOUND);
    egm_segment_desc_t forged = X;
    memcpy(forged.shm_socket, Y.shm_socket, sizeof(forged.shm_socket));
    assert_int_equal(xfer(fx->consumer, &forged, 0, g, LEN, EGM_TE_READ),
                     EGM_ERR_SEGMENT_NOT_FOUND);

    /* A consumer that never heard of the retirement still cannot get Y's
     * bytes through X: B's broker does not know X, A's broker is gone, and
     * X's fabric handle names released memory. */
    set_consumer(fx, EGM_PROTOCOL_NVLINK, 1);
    egm_status_t st = xfer(fx->consumer, &forged, 0, g, LEN, EGM_TE_READ);
    assert_int_not_equal(st, EGM_OK);
    if (kind == EGM_HANDLE_POSIX_FD) {
        assert_int_equal(st, EGM_ERR_SEGMENT_NOT_FOUND);
        st = xfer(fx->consumer, &X, 0, g, LEN, EGM_TE_READ);
        assert_int_equal(st, EGM_ERR_UNREACHABLE);
    }
    assert_memory_not_equal(view(g, LEN), b_bytes, LEN);
    assert_int_equal(stats(fx->consumer).nvlink_mappings_live, 0);
    gpu_free(g);
}

static void test_restarted_provider_posix_fd(void **state)
{
    aba(*state, EGM_HANDLE_POSIX_FD);
}

static void test_restarted_provider_fabric(void **state)
{
    aba(*state, EGM_HANDLE_FABRIC);
}

/* ---- forget while a copy is in flight --------------------------------------- */

static void test_forget_in_flight(void **state)
{
    fx_t *fx = *state;
    size_t c = expose(fx, 2 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    const egm_segment_desc_t *d = &fx->descs[c];
    egm_mapping_cache_t *cache;
    egm_mapping_t *m = NULL;
    egm_mapping_stats_t ms;
    int imported = 0;
    assert_int_equal(egm__mapping_cache_create(cu, 2000, NULL, &cache), EGM_OK);

    /* A copy holds the mapping ... */
    assert_int_equal(egm__mapping_get(cache, d, &m, &imported), EGM_OK);
    assert_int_equal(imported, 1);
    /* ... when the segment is retired: no new copy may start on it ... */
    egm__mapping_unlink(cache, d->id);
    egm_mapping_t *again = NULL;
    assert_int_equal(egm__mapping_get(cache, d, &again, NULL), EGM_ERR_SEGMENT_NOT_FOUND);
    assert_null(again);
    egm__mapping_cache_stats(cache, &ms);
    assert_int_equal(ms.mappings_live, 1);
    assert_int_equal(egm_fake_cuda_counters().imports, 1);

    /* ... but the one in flight still completes against the right memory. */
    uint8_t bytes[4096];
    egm_test_fill_random(bytes, sizeof(bytes));
    assert_int_equal(egm__cuda_use_device(1), EGM_OK);
    assert_int_equal(
        cu->cuMemcpy(egm__mapping_va(m) + 100, (uint64_t)(uintptr_t)bytes, sizeof(bytes)),
        EGM_CU_SUCCESS);
    assert_memory_equal(view(fx->chunks[c].va + 100, sizeof(bytes)), bytes, sizeof(bytes));

    /* Its end unmaps and releases everything. */
    egm__mapping_put(cache, m);
    egm__mapping_cache_stats(cache, &ms);
    assert_int_equal(ms.mappings_live, 0);
    assert_int_equal(ms.imports_total, 1);
    egm_fake_cuda_counters_t fc = egm_fake_cuda_counters();
    assert_int_equal(fc.imports, 0);
    assert_int_equal(fc.mappings, 1); /* the provider's own */
    egm__mapping_cache_destroy(cache);
}

typedef struct {
    egm_te_t *te;
    const egm_segment_desc_t *desc;
    uint64_t gpu;
    int ok, retired;
} copier_arg_t;

static void *copy_loop(void *p)
{
    copier_arg_t *a = p;
    for (int i = 0; i < 200; i++) {
        egm_te_op_t op = {.segment = a->desc,
                          .offset = (uint64_t)(i % 16) * 4096,
                          .local = (void *)(uintptr_t)a->gpu,
                          .length = 65536,
                          .dir = i % 2 ? EGM_TE_READ : EGM_TE_WRITE};
        egm_status_t st = egm__te_transfer(a->te, &op, 1);
        if (st == EGM_OK)
            a->ok++;
        else if (st == EGM_ERR_SEGMENT_NOT_FOUND || st == EGM_ERR_NOT_SUPPORTED)
            a->retired++;
    }
    return NULL;
}

/* Transfers racing a forget: each either completes or is refused; nothing
 * is left mapped once they are done. */
static void test_forget_races_transfers(void **state)
{
    fx_t *fx = *state;
    size_t c = expose(fx, 2 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    copier_arg_t a = {.te = fx->consumer, .desc = &fx->descs[c], .gpu = gpu_alloc(0, 65536)};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, copy_loop, &a), 0);
    /* Let it start (bounded), then retire the segment under it. */
    for (int i = 0; i < 2000 && stats(fx->consumer).nvlink_copies == 0; i++)
        usleep(1000);
    egm__te_forget_segment(fx->consumer, fx->descs[c].id);
    pthread_join(th, NULL);
    assert_int_equal(a.ok + a.retired, 200);
    assert_true(a.ok > 0);
    assert_int_equal(stats(fx->consumer).nvlink_mappings_live, 0);
    assert_int_equal(egm_fake_cuda_counters().imports, 0);
    gpu_free(a.gpu);
}

/* ---- prewarm ----------------------------------------------------------------- */

static void test_prewarm_maps_before_the_first_transfer(void **state)
{
    fx_t *fx = *state;
    set_consumer(fx, EGM_PROTOCOL_AUTO, 0);
    size_t a = expose(fx, 4 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    size_t b = expose(fx, 2 * MIB, 1, EGM_HANDLE_FABRIC);
    egm_segment_desc_t descs[4] = {fx->descs[a], fx->descs[b], fx->descs[a], fx->descs[b]};
    /* Not reachable over nvlink: skipped (a posix_fd handle of another host,
     * a host memory segment). */
    strcpy(descs[2].host_id, "another-host");
    descs[2].id = egm__id_random();
    descs[3].handle_kind = EGM_HANDLE_MEMFD;
    descs[3].id = egm__id_random();

    egm__te_prewarm(fx->consumer, descs, 4);
    egm__te_prewarm_drain(fx->consumer);
    egm_te_stats_t cs = stats(fx->consumer);
    assert_int_equal(cs.prewarmed, 2);
    assert_int_equal(cs.nvlink_imports_total, 2);
    assert_int_equal(cs.nvlink_mappings_live, 2);

    /* The first transfers find their mappings ready: no driver import or map. */
    egm_fake_cuda_clear_calls();
    uint64_t g = gpu_alloc(0, 1 * MIB);
    round_trip(fx, a, 0, g, 1 * MIB);
    round_trip(fx, b, 4096, g, 65536);
    assert_int_equal(egm_fake_cuda_calls("cuMemImportFromShareableHandle"), 0);
    assert_int_equal(egm_fake_cuda_calls("cuMemMap"), 0);
    assert_int_equal(stats(fx->consumer).nvlink_imports_total, 2);

    /* Idempotent. */
    egm__te_prewarm(fx->consumer, descs, 2);
    egm__te_prewarm_drain(fx->consumer);
    cs = stats(fx->consumer);
    assert_int_equal(cs.prewarmed, 2);
    assert_int_equal(cs.nvlink_imports_total, 2);

    /* Retired segments are not prewarmed back. */
    egm__te_forget_segment(fx->consumer, fx->descs[a].id);
    egm__te_prewarm(fx->consumer, descs, 2);
    egm__te_prewarm_drain(fx->consumer);
    assert_int_equal(stats(fx->consumer).nvlink_imports_total, 2);
    assert_int_equal(stats(fx->consumer).nvlink_mappings_live, 1);
    gpu_free(g);
}

static void test_prewarm_off_and_errors(void **state)
{
    fx_t *fx = *state;
    size_t a = expose(fx, 2 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    /* Off: nothing happens. */
    egm__te_prewarm(fx->consumer, &fx->descs[a], 1);
    egm__te_prewarm_drain(fx->consumer);
    assert_int_equal(stats(fx->consumer).nvlink_imports_total, 0);

    /* On, with the import failing: only logged; the transfer retries and
     * reports the error itself. */
    set_consumer(fx, EGM_PROTOCOL_AUTO, 0);
    egm_fake_cuda_fail("cuMemMap", 1, EGM_CU_ERROR_OUT_OF_MEMORY);
    egm__te_prewarm(fx->consumer, &fx->descs[a], 1);
    egm__te_prewarm_drain(fx->consumer);
    egm_te_stats_t cs = stats(fx->consumer);
    assert_int_equal(cs.prewarmed, 0);
    assert_int_equal(cs.nvlink_import_failures, 1);
    assert_int_equal(egm_fake_cuda_counters().imports, 0);
    uint64_t g = gpu_alloc(0, 4096);
    assert_int_equal(xfer(fx->consumer, &fx->descs[a], 0, g, 4096, EGM_TE_WRITE), EGM_OK);
    assert_int_equal(stats(fx->consumer).nvlink_imports_total, 1);
    gpu_free(g);
}

/* ---- injected driver failures -------------------------------------------------- */

static void test_injected_failures_leave_nothing(void **state)
{
    fx_t *fx = *state;
    static const struct {
        const char *fn;
        egm_cu_result_t error;
        const char *name;
    } faults[] = {
        {"cuMemImportFromShareableHandle", EGM_CU_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
        {"cuMemAddressReserve", EGM_CU_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
        {"cuMemMap", EGM_CU_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
        {"cuMemSetAccess", EGM_CU_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED"},
        {"cuMemGetAllocationGranularity", EGM_CU_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
        /* provider side: the broker cannot export the handle */
        {"cuMemExportToShareableHandle", EGM_CU_ERROR_OUT_OF_MEMORY, NULL},
    };
    size_t p = expose(fx, 2 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    size_t f = expose(fx, 2 * MIB, 0, EGM_HANDLE_FABRIC);
    uint64_t g = gpu_alloc(1, 65536);
    /* (Descriptors are checked at teardown, once the broker thread is gone:
     * it closes its side of each request after the consumer has its reply.) */
    egm_fake_cuda_counters_t base = egm_fake_cuda_counters();

    for (size_t k = 0; k < sizeof(faults) / sizeof(faults[0]); k++) {
        for (size_t s = 0; s < 2; s++) {
            size_t c = s == 0 ? p : f;
            if (faults[k].name == NULL && c == f)
                continue; /* fabric handles need no broker */
            egm_fake_cuda_fail(faults[k].fn, 1, faults[k].error);
            egm_status_t st = xfer(fx->consumer, &fx->descs[c], 0, g, 65536, EGM_TE_WRITE);
            assert_int_not_equal(st, EGM_OK);
            if (faults[k].name != NULL)
                assert_non_null(strstr(egm_last_error(), faults[k].name));
            egm_fake_cuda_clear_failures();
            egm_fake_cuda_counters_t now = egm_fake_cuda_counters();
            assert_int_equal(now.imports, base.imports);
            assert_int_equal(now.mappings, base.mappings);
            assert_int_equal(now.reservations, base.reservations);
            assert_int_equal(stats(fx->consumer).nvlink_mappings_live, 0);
            /* Nothing was cached: the next transfer imports and succeeds. */
            assert_int_equal(xfer(fx->consumer, &fx->descs[c], 0, g, 65536, EGM_TE_WRITE), EGM_OK);
            assert_int_equal(stats(fx->consumer).nvlink_mappings_live, 1);
            set_consumer(fx, EGM_PROTOCOL_AUTO, 1);
            assert_int_equal(egm_fake_cuda_counters().imports, base.imports);
        }
    }
    /* A copy that fails reports the driver's error for every op it carried. */
    egm_fake_cuda_fail("cuMemcpyAsync", 0, EGM_CU_ERROR_INVALID_VALUE);
    egm_fake_cuda_fail("cuMemcpyBatchAsync", 0, EGM_CU_ERROR_INVALID_VALUE);
    egm_fake_cuda_fail("cuLaunchKernel", 0, EGM_CU_ERROR_INVALID_VALUE);
    assert_int_not_equal(xfer(fx->consumer, &fx->descs[p], 0, g, 65536, EGM_TE_READ), EGM_OK);
    assert_non_null(strstr(egm_last_error(), "CUDA_ERROR_INVALID_VALUE"));
    egm_fake_cuda_clear_failures();
    gpu_free(g);
}

static void test_expose_checks(void **state)
{
    fx_t *fx = *state;
    vchunk_t c;
    egm_segment_desc_t d;
    vchunk_create(&c, 2 * MIB, HOST_NUMA, EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    memset(&d, 0, sizeof(d));
    d.id = egm__id_random();
    void *base = (void *)(uintptr_t)c.va;

    assert_int_equal(
        egm__te_expose_vmm_segment(fx->provider, &d, base, c.size, c.handle, EGM_HANDLE_MEMFD, -1),
        EGM_ERR_INVALID_ARG);
    assert_int_equal(
        egm__te_expose_vmm_segment(fx->provider, &d, base, 0, c.handle, EGM_HANDLE_POSIX_FD, -1),
        EGM_ERR_INVALID_ARG);
    /* No fabric handle type on this allocation: refused at expose, not at a
     * consumer's first import. */
    assert_int_not_equal(
        egm__te_expose_vmm_segment(fx->provider, &d, base, c.size, c.handle, EGM_HANDLE_FABRIC, -1),
        EGM_OK);
    assert_int_equal(stats(fx->provider).vmm_fds_sent, 0);
    /* The same id cannot be exposed twice. */
    assert_int_equal(egm__te_expose_vmm_segment(fx->provider, &d, base, c.size, c.handle,
                                                EGM_HANDLE_POSIX_FD, -1),
                     EGM_OK);
    assert_int_equal(egm__te_expose_vmm_segment(fx->provider, &d, base, c.size, c.handle,
                                                EGM_HANDLE_POSIX_FD, -1),
                     EGM_ERR_SEGMENT_EXISTS);
    /* A memfd request for a VMM segment gets no descriptor. */
    int fd = -1;
    uint64_t size = 0;
    assert_int_equal(
        egm__fd_broker_fetch(d.shm_socket, d.id, EGM_HANDLE_MEMFD, NULL, 2000, &fd, &size),
        EGM_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(fd, -1);
    assert_int_equal(egm__te_withdraw_segment(fx->provider, d.id), EGM_OK);
    vchunk_destroy(&c);
}

/* ---- staging: GPU memory over tcp and shm ------------------------------------- */

static void test_staging_over_tcp_and_shm(void **state)
{
    fx_t *fx = *state;
    const size_t len = 20 * MIB + 12345; /* several staging slots */
    /* A memfd host segment, as the host pool makes it. */
    int memfd = memfd_create("egm-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(memfd >= 0);
    assert_int_equal(ftruncate(memfd, 24 * MIB), 0);
    assert_int_equal(fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    uint8_t *mem = mmap(NULL, 24 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    assert_true(mem != MAP_FAILED);
    egm_segment_desc_t d;
    memset(&d, 0, sizeof(d));
    d.id = egm__id_random();
    d.owner = fx->provider_id;
    d.size = 24 * MIB;
    assert_int_equal(egm__te_expose_segment(fx->provider, &d, mem, memfd), EGM_OK);
    size_t v = expose(fx, 24 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);

    uint64_t g = gpu_alloc(1, len);
    assert_int_equal(egm__registry_add(fx->registry, (void *)(uintptr_t)g, len), EGM_OK);
    uint8_t *gv = view(g, len);

    static const egm_protocol_t protocols[] = {EGM_PROTOCOL_TCP, EGM_PROTOCOL_SHM,
                                               EGM_PROTOCOL_AUTO};
    for (size_t k = 0; k < 3; k++) {
        set_consumer(fx, protocols[k], 1);
        assert_int_equal(route_op(fx->consumer, &d, g, len),
                         protocols[k] == EGM_PROTOCOL_TCP ? EGM_TRANSPORT_TCP : EGM_TRANSPORT_SHM);
        egm_test_fill_random(gv, len);
        assert_int_equal(xfer(fx->consumer, &d, 1000, g, len, EGM_TE_WRITE), EGM_OK);
        assert_memory_equal(mem + 1000, gv, len);
        egm_test_fill_random(mem + 1000, len);
        assert_int_equal(xfer(fx->consumer, &d, 1000, g, len, EGM_TE_READ), EGM_OK);
        assert_memory_equal(gv, mem + 1000, len);
        assert_int_equal(stats(fx->consumer).staged_bytes, 2 * len);
        assert_int_equal(stats(fx->consumer).nvlink_copies, 0);
    }
    /* A HOST_NUMA VMM segment with protocol tcp: staged too (baseline). */
    set_consumer(fx, EGM_PROTOCOL_TCP, 1);
    assert_int_equal(route_op(fx->consumer, &fx->descs[v], g, len), EGM_TRANSPORT_TCP);
    round_trip(fx, v, 4096, g, len);
    assert_int_equal(stats(fx->consumer).staged_bytes, 2 * len);
    assert_int_equal(stats(fx->consumer).nvlink_imports_total, 0);

    assert_int_equal(egm__registry_remove(fx->registry, (void *)(uintptr_t)g), EGM_OK);
    gpu_free(g);
    set_consumer(fx, EGM_PROTOCOL_AUTO, 1); /* unmaps the shm mapping */
    assert_int_equal(egm__te_withdraw_segment(fx->provider, d.id), EGM_OK);
    munmap(mem, 24 * MIB);
    close(memfd);
}

/* An op whose local buffer is host memory of egmstore's own (a slab-log
 * entry, a repair worker's buffer) says so: the driver is not asked where it
 * lives. Asking cost a driver call per put (docs/ha.md "Cost", runs 22-23). */
static void test_local_is_host_asks_no_driver(void **state)
{
    fx_t *fx = *state;
    int memfd = memfd_create("egm-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(memfd >= 0);
    assert_int_equal(ftruncate(memfd, MIB), 0);
    assert_int_equal(fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    uint8_t *mem = mmap(NULL, MIB, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    assert_true(mem != MAP_FAILED);
    egm_segment_desc_t d;
    memset(&d, 0, sizeof(d));
    d.id = egm__id_random();
    d.owner = fx->provider_id;
    d.size = MIB;
    assert_int_equal(egm__te_expose_segment(fx->provider, &d, mem, memfd), EGM_OK);
    set_consumer(fx, EGM_PROTOCOL_AUTO, 1);

    uint8_t entry[256];
    for (int host = 1; host >= 0; host--) {
        egm_test_fill_random(entry, sizeof(entry));
        egm_fake_cuda_clear_calls();
        egm_te_op_t op = {.segment = &d,
                          .offset = 4096,
                          .local = entry,
                          .length = sizeof(entry),
                          .dir = EGM_TE_WRITE,
                          .local_is_host = host};
        assert_int_equal(egm__te_transfer(fx->consumer, &op, 1), EGM_OK);
        assert_memory_equal(mem + 4096, entry, sizeof(entry));
        egm_transport_t t;
        assert_int_equal(egm__te_route_op(fx->consumer, &op, &t), EGM_OK);
        assert_int_equal(t, EGM_TRANSPORT_SHM);
        /* without the mark, the same ops ask (the count can see it) */
        assert_int_equal(egm_fake_cuda_calls("cuPointerGetAttribute") > 0, !host);
    }

    set_consumer(fx, EGM_PROTOCOL_AUTO, 1); /* unmaps the shm mapping */
    assert_int_equal(egm__te_withdraw_segment(fx->provider, d.id), EGM_OK);
    munmap(mem, MIB);
    close(memfd);
}

/* ---- protocol nvlink and own segments ------------------------------------------ */

static void test_protocol_nvlink_refuses_clearly(void **state)
{
    fx_t *fx = *state;
    size_t c = expose(fx, 2 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    set_consumer(fx, EGM_PROTOCOL_NVLINK, 1);
    uint64_t g = gpu_alloc(0, 4096);
    uint8_t host[4096];
    egm_te_op_t op = {.segment = &fx->descs[c], .local = host, .length = sizeof(host)};
    egm_transport_t t;

    assert_int_equal(egm__te_route_op(fx->consumer, &op, &t), EGM_ERR_NOT_SUPPORTED);
    assert_non_null(strstr(egm_last_error(), "protocol=nvlink"));
    assert_non_null(strstr(egm_last_error(), "host memory"));
    assert_int_equal(
        xfer(fx->consumer, &fx->descs[c], 0, (uint64_t)(uintptr_t)host, 4096, EGM_TE_READ),
        EGM_ERR_NOT_SUPPORTED);

    egm_segment_desc_t other = fx->descs[c];
    strcpy(other.host_id, "another-host");
    op = (egm_te_op_t){.segment = &other, .local = (void *)(uintptr_t)g, .length = 4096};
    assert_int_equal(egm__te_route_op(fx->consumer, &op, &t), EGM_ERR_NOT_SUPPORTED);
    assert_non_null(strstr(egm_last_error(), "own host"));
    other = fx->descs[c];
    other.handle_kind = EGM_HANDLE_MEMFD;
    assert_int_equal(egm__te_route_op(fx->consumer, &op, &t), EGM_ERR_NOT_SUPPORTED);
    assert_non_null(strstr(egm_last_error(), "not CUDA VMM"));
    assert_int_equal(xfer(fx->consumer, &fx->descs[c], 0, g, 4096, EGM_TE_READ), EGM_OK);
    gpu_free(g);

    assert_string_equal(egm__transport_name(EGM_TRANSPORT_NVLINK), "nvlink");
    /* Preference order, which callers rank replicas by. */
    assert_true(EGM_TRANSPORT_LOCAL < EGM_TRANSPORT_NVLINK);
    assert_true(EGM_TRANSPORT_NVLINK < EGM_TRANSPORT_SHM);
    assert_true(EGM_TRANSPORT_SHM < EGM_TRANSPORT_TCP);
}

/* Registered pinned host memory (SGLang's and LMCache's host KV pools) reaches
 * a VMM pool over nvlink: GPU 0's copier moves it, with protocol nvlink and
 * auto; registered pageable memory does not (protocol nvlink refuses it). */
static void test_pinned_host_over_nvlink(void **state)
{
    fx_t *fx = *state;
    size_t c = expose(fx, 2 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    void *pinned = NULL, *back = NULL;
    assert_int_equal(egm__cuda_use_device(1), EGM_OK); /* any context: the memory is portable */
    assert_int_equal(cu->cuMemAllocHost(&pinned, 65536), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemAllocHost(&back, 65536), EGM_CU_SUCCESS);
    assert_int_equal(egm__registry_add(fx->registry, pinned, 65536), EGM_OK);
    assert_int_equal(egm__registry_add(fx->registry, back, 65536), EGM_OK);
    int dev = 0;
    assert_int_equal(egm__registry_device(fx->registry, pinned, 65536, &dev), EGM_OK);
    assert_int_equal(dev, EGM_DEVICE_MAPPED_HOST);

    egm_protocol_t protocols[] = {EGM_PROTOCOL_NVLINK, EGM_PROTOCOL_AUTO};
    for (size_t k = 0; k < 2; k++) {
        set_consumer(fx, protocols[k], 1);
        assert_int_equal(route_op(fx->consumer, &fx->descs[c], (uint64_t)(uintptr_t)pinned, 65536),
                         EGM_TRANSPORT_NVLINK);
        egm_test_fill_random(pinned, 65536);
        memset(back, 0, 65536);
        egm_te_stats_t before, after;
        egm__te_stats(fx->consumer, &before);
        assert_int_equal(xfer(fx->consumer, &fx->descs[c], 4096 + k, (uint64_t)(uintptr_t)pinned,
                              65536, EGM_TE_WRITE),
                         EGM_OK);
        assert_memory_equal(view(fx->chunks[c].va + 4096 + k, 65536), pinned, 65536);
        assert_int_equal(xfer(fx->consumer, &fx->descs[c], 4096 + k, (uint64_t)(uintptr_t)back,
                              65536, EGM_TE_READ),
                         EGM_OK);
        assert_memory_equal(back, pinned, 65536);
        egm__te_stats(fx->consumer, &after);
        assert_int_equal(after.nvlink_copies - before.nvlink_copies, 2); /* GPU copies, not tcp */
    }

    /* Registered pageable memory stays host memory: protocol nvlink refuses it. */
    uint8_t *heap = malloc(4096);
    assert_non_null(heap);
    assert_int_equal(egm__registry_add(fx->registry, heap, 4096), EGM_OK);
    set_consumer(fx, EGM_PROTOCOL_NVLINK, 1);
    assert_int_equal(
        xfer(fx->consumer, &fx->descs[c], 0, (uint64_t)(uintptr_t)heap, 4096, EGM_TE_WRITE),
        EGM_ERR_NOT_SUPPORTED);
    assert_non_null(strstr(egm_last_error(), "registered pinned memory"));
    assert_int_equal(egm__registry_remove(fx->registry, heap), EGM_OK);
    free(heap);
    assert_int_equal(egm__registry_remove(fx->registry, pinned), EGM_OK);
    assert_int_equal(egm__registry_remove(fx->registry, back), EGM_OK);
    assert_int_equal(cu->cuMemFreeHost(pinned), EGM_CU_SUCCESS);
    assert_int_equal(cu->cuMemFreeHost(back), EGM_CU_SUCCESS);
}

static void test_no_gpu(void **state)
{
    fx_t *fx = *state;
    egm__te_destroy(fx->consumer);
    fx->consumer = NULL;
    egm_fake_cuda_reset(0, 1);
    egm_te_params_t params = {.client_id = fx->consumer_id, .protocol = EGM_PROTOCOL_NVLINK};
    egm_te_t *te = NULL;
    assert_int_equal(egm__te_create(&params, &te), EGM_ERR_NO_CUDA);
    assert_non_null(strstr(egm_last_error(), "protocol=nvlink"));
    assert_null(te);
    /* auto works without GPU features; VMM segments cannot be exposed. */
    fx->consumer = make_te(fx->consumer_id, EGM_PROTOCOL_AUTO, fx->registry, 0);
    egm_segment_desc_t d;
    memset(&d, 0, sizeof(d));
    d.id = egm__id_random();
    int x = 0;
    assert_int_equal(
        egm__te_expose_vmm_segment(fx->consumer, &d, &x, 2 * MIB, 1, EGM_HANDLE_POSIX_FD, -1),
        EGM_ERR_NO_CUDA);
    egm__te_prewarm(fx->consumer, &d, 1); /* no-op */
    egm__te_destroy(fx->provider);
    fx->provider = make_te(fx->provider_id, EGM_PROTOCOL_AUTO, NULL, 1);
    egm_fake_cuda_reset(2, 1);
}

static void test_own_segments(void **state)
{
    fx_t *fx = *state;
    egm_fake_cuda_set_strict_device_memory(1);
    size_t h = expose(fx, 2 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    size_t d = expose(fx, 2 * MIB, 1, EGM_HANDLE_FABRIC);
    uint64_t g = gpu_alloc(0, 65536);
    uint8_t host[65536], back[65536];
    egm_transport_t t;
    assert_int_equal(egm__te_route(fx->provider, &fx->descs[d], &t), EGM_OK);
    assert_int_equal(t, EGM_TRANSPORT_LOCAL);

    /* GPU buffer <-> own VMM: one GPU copy each, no import of our own memory. */
    for (size_t k = 0; k < 2; k++) {
        size_t c = k ? d : h;
        egm_test_fill_random(view(g, sizeof(host)), sizeof(host));
        assert_int_equal(xfer(fx->provider, &fx->descs[c], 8192, g, sizeof(host), EGM_TE_WRITE),
                         EGM_OK);
        assert_memory_equal(view(fx->chunks[c].va + 8192, sizeof(host)), view(g, sizeof(host)),
                            sizeof(host));
    }
    /* Host buffer <-> own GPU memory: staged; <-> own HOST_NUMA: memcpy. */
    for (size_t k = 0; k < 2; k++) {
        size_t c = k ? d : h;
        egm_test_fill_random(host, sizeof(host));
        assert_int_equal(xfer(fx->provider, &fx->descs[c], 100, (uint64_t)(uintptr_t)host,
                              sizeof(host), EGM_TE_WRITE),
                         EGM_OK);
        assert_memory_equal(view(fx->chunks[c].va + 100, sizeof(host)), host, sizeof(host));
        assert_int_equal(xfer(fx->provider, &fx->descs[c], 100, (uint64_t)(uintptr_t)back,
                              sizeof(back), EGM_TE_READ),
                         EGM_OK);
        assert_memory_equal(back, host, sizeof(host));
    }
    egm_te_stats_t ps = stats(fx->provider);
    assert_int_equal(ps.nvlink_imports_total, 0);
    assert_int_equal(ps.staged_bytes, 2 * sizeof(host));
    gpu_free(g);
}

/* The pressure parameters (client keys nvlink_max_inflight_bytes,
 * nvlink_chunk_size, nvlink_low_priority_stream) reach the copiers: a batch
 * goes in groups of at most the bound, a long object in chunks, the stream at
 * the least priority; too small a value is refused naming its key. */
static void test_pressure_params(void **state)
{
    fx_t *fx = *state;
    enum { N = 32, BLOCK = 64 * 1024 };
    size_t c = expose(fx, 4 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    uint64_t g = gpu_alloc(0, 4 * MIB);
    egm_test_fill_random(view(g, 4 * MIB), 4 * MIB);

    egm__te_destroy(fx->consumer);
    fx->consumer = NULL;
    egm_te_params_t params = {.client_id = fx->consumer_id,
                              .protocol = EGM_PROTOCOL_NVLINK,
                              .local_hostname = "127.0.0.1",
                              .data_listen_host = "127.0.0.1",
                              .io_timeout_ms = 5000,
                              .registry = fx->registry,
                              .prewarm_off = 1,
                              .copy_low_priority = 1,
                              .copy_max_inflight_bytes = 256 * 1024,
                              .copy_chunk_bytes = 128 * 1024};
    egm_fake_cuda_clear_calls();
    assert_int_equal(egm__te_create(&params, &fx->consumer), EGM_OK);

    egm_te_op_t ops[N];
    for (size_t i = 0; i < N; i++)
        ops[i] = (egm_te_op_t){.segment = &fx->descs[c],
                               .offset = (N - 1 - i) * 2 * BLOCK,
                               .local = (void *)(uintptr_t)(g + i * BLOCK),
                               .length = BLOCK,
                               .dir = EGM_TE_WRITE};
    assert_int_equal(egm__te_transfer(fx->consumer, ops, N), EGM_OK);
    for (size_t i = 0; i < N; i++)
        assert_memory_equal(view(fx->chunks[c].va + ops[i].offset, BLOCK),
                            view((uint64_t)(uintptr_t)ops[i].local, BLOCK), BLOCK);
    /* The copier was made with the least priority. */
    assert_int_equal(egm_fake_cuda_calls("cuCtxGetStreamPriorityRange"), 1);
    egm_te_stats_t cs = stats(fx->consumer);
    assert_int_equal(cs.copy_groups, N * BLOCK / (256 * 1024)); /* 8 groups of 4 blocks */
    assert_int_equal(cs.copy_max_group_bytes, 256 * 1024);
    assert_int_equal(cs.copy_chunks, 0);
    assert_int_equal(egm_fake_cuda_calls("cuEventRecord"), 8);

    /* One object of 1 MiB: 8 chunks of 128 KiB, two per group. */
    egm_fake_cuda_clear_calls();
    assert_int_equal(xfer(fx->consumer, &fx->descs[c], 4096, g, 1 * MIB, EGM_TE_READ), EGM_OK);
    assert_memory_equal(view(g, 1 * MIB), view(fx->chunks[c].va + 4096, 1 * MIB), 1 * MIB);
    cs = stats(fx->consumer);
    assert_int_equal(cs.copy_groups, 8 + 4);
    assert_int_equal(cs.copy_chunks, 8);
    assert_int_equal(egm_fake_cuda_calls("cuMemcpyAsync"), 8);
    assert_int_equal(egm_fake_cuda_calls("cuEventRecord"), 4);

    /* Below 4 KiB (but not 0) is refused by name. */
    egm_te_t *bad = NULL;
    params.copy_chunk_bytes = 100;
    assert_int_equal(egm__te_create(&params, &bad), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "nvlink_chunk_size"));
    params.copy_chunk_bytes = 0;
    params.copy_max_inflight_bytes = 4095;
    assert_int_equal(egm__te_create(&params, &bad), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "nvlink_max_inflight_bytes"));
    assert_null(bad);
    gpu_free(g);
}

/* nvlink_bounce_buffer through the transport: a batch of 32 KiB pieces from
 * a GPU buffer into an EGM segment, and back, goes through the bounce buffer
 * (the transport tells the copier which side is GPU memory); a batch that
 * mixes reads and writes, or comes from pinned host memory, does not. Every
 * byte is checked. A size below the minimum is refused by name. */
static void test_bounce_through_transport(void **state)
{
    fx_t *fx = *state;
    enum { N = 640, BLOCK = 32 * 1024 }; /* 20 MiB */
    size_t c = expose(fx, 24 * MIB, HOST_NUMA, EGM_HANDLE_POSIX_FD);
    uint64_t g = gpu_alloc(0, 2 * N * BLOCK);
    egm_test_fill_random(view(g, 2 * N * BLOCK), 2 * N * BLOCK);

    egm__te_destroy(fx->consumer);
    fx->consumer = NULL;
    egm_te_params_t params = {.client_id = fx->consumer_id,
                              .protocol = EGM_PROTOCOL_NVLINK,
                              .local_hostname = "127.0.0.1",
                              .data_listen_host = "127.0.0.1",
                              .io_timeout_ms = 5000,
                              .registry = fx->registry,
                              .prewarm_off = 1,
                              .copy_bounce_bytes = 16 * MIB};
    assert_int_equal(egm__te_create(&params, &fx->consumer), EGM_OK);

    egm_te_op_t ops[N];
    for (size_t i = 0; i < N; i++) /* scattered in the GPU, adjacent in the segment */
        ops[i] = (egm_te_op_t){.segment = &fx->descs[c],
                               .offset = 4096 + i * BLOCK,
                               .local = (void *)(uintptr_t)(g + ((i * 7) % N) * 2 * BLOCK),
                               .length = BLOCK,
                               .dir = EGM_TE_WRITE};
    uint64_t bounced = stats(fx->consumer).copy_bounced_runs;
    assert_int_equal(egm__te_transfer(fx->consumer, ops, N), EGM_OK);
    for (size_t i = 0; i < N; i++)
        assert_memory_equal(view(fx->chunks[c].va + ops[i].offset, BLOCK),
                            view((uint64_t)(uintptr_t)ops[i].local, BLOCK), BLOCK);
    if (egm__copier_has_kernels())
        assert_int_equal(stats(fx->consumer).copy_bounced_runs, bounced + 1);

    /* Back into the other slots of the buffer. */
    for (size_t i = 0; i < N; i++) {
        ops[i].dir = EGM_TE_READ;
        ops[i].local = (void *)((uintptr_t)ops[i].local + BLOCK);
    }
    assert_int_equal(egm__te_transfer(fx->consumer, ops, N), EGM_OK);
    for (size_t i = 0; i < N; i++)
        assert_memory_equal(view((uint64_t)(uintptr_t)ops[i].local, BLOCK),
                            view(fx->chunks[c].va + ops[i].offset, BLOCK), BLOCK);
    if (egm__copier_has_kernels())
        assert_int_equal(stats(fx->consumer).copy_bounced_runs, bounced + 2);

    /* Reads and writes in one batch: the copier is not told the sides. */
    ops[0].dir = EGM_TE_WRITE;
    ops[0].local = (void *)(uintptr_t)(g + 2 * BLOCK * (N - 1));
    assert_int_equal(egm__te_transfer(fx->consumer, ops, N), EGM_OK);
    assert_memory_equal(view(fx->chunks[c].va + ops[0].offset, BLOCK),
                        view(g + 2 * BLOCK * (N - 1), BLOCK), BLOCK);
    assert_int_equal(stats(fx->consumer).copy_bounced_runs,
                     egm__copier_has_kernels() ? bounced + 2 : bounced);

    egm_te_t *bad = NULL;
    params.copy_bounce_bytes = 8 * MIB - 1;
    assert_int_equal(egm__te_create(&params, &bad), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "nvlink_bounce_buffer"));
    assert_null(bad);
    gpu_free(g);
}

int main(void)
{
    egm__cuda_set_api(egm_fake_cuda_api());
    if (egm__cuda_load(&cu) != EGM_OK) {
        fprintf(stderr, "fake CUDA driver did not load: %s\n", egm_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fabric_descriptor_wire, setup, teardown),
        cmocka_unit_test_setup_teardown(test_registry_records_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_registry_refuses_unmapped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_posix_fd_host_numa_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fabric_device_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_across_devices, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restarted_provider_posix_fd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restarted_provider_fabric, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forget_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forget_races_transfers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prewarm_maps_before_the_first_transfer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_prewarm_off_and_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_injected_failures_leave_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expose_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_staging_over_tcp_and_shm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_is_host_asks_no_driver, setup, teardown),
        cmocka_unit_test_setup_teardown(test_protocol_nvlink_refuses_clearly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pinned_host_over_nvlink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_gpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_own_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pressure_params, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounce_through_transport, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
